# amaranth: UnusedElaboratable=no
"""ISA v2's reduce copies (COPY_ADD_F32 / COPY_ADD_BF16) on the whole system,
against the golden model: random programs mixing plain and reduce copies
(local and remote destinations, lengths 1..4x the bus, offsets near page
edges, dst_stride 0 runs that hit one word back to back, two devices reducing
into one), the illegal cases of the new opcodes, a fault in the middle of a
reduce copy, and the emitted Verilog agreeing with Amaranth cycle for cycle."""
from __future__ import annotations

import random

import numpy as np
import pytest

from gen.asm import assemble
from gen.simkit import compare_with_golden, racy_copies
from hw.isa import ArchParams, Cause, Op, encode

from fpref import edge_values

PG = 4096
ARCH = ArchParams(devices=2, mem_bytes=4 * PG, addr_bits=16, imem_words=64, tlb_entries=8,
                  channels=4, semaphores=2, contexts=1)
LOCAL, REMOTE = 0x0000, 0x4000       # every device: its own memory, then its peer's


def _maps(dev):
    """Remaps of context 0: local pages at LOCAL, the peer's pages at REMOTE."""
    lines = []
    for p in range(ARCH.mem_bytes // PG):
        lines.append(f"remap ctx=0 size=0 perm=rw staged=0 dev={dev} va={LOCAL + p * PG:#x} "
                     f"pa={p * PG:#x}")
        lines.append(f"remap ctx=0 size=0 perm=rw staged=0 dev={1 - dev} "
                     f"va={REMOTE + p * PG:#x} pa={p * PG:#x}")
    return lines


def _memories(rng):
    """Random f32 values with the edge values of both formats sprinkled in."""
    mems = []
    for _ in range(ARCH.devices):
        m = rng.standard_normal(ARCH.mem_bytes // 4).astype(np.float32).view(np.uint32)
        edges = np.array(edge_values("f32") + [e << 16 | e for e in edge_values("bf16")],
                         dtype=np.uint32)
        pick = rng.integers(0, m.size, size=m.size // 8)
        m[pick] = edges[rng.integers(0, edges.size, size=pick.size)]
        mems.append(m.view(np.uint8).copy())
    return mems


def _random_copy(r, bus):
    op = r.choice(["copy", "copy_add_f32", "copy_add_bf16"])
    elem = {"copy": 1, "copy_add_f32": 4, "copy_add_bf16": 2}[op]
    row = elem * r.randint(1, 4 * bus // elem)
    rows = r.randint(1, 3)
    dst_stride = r.choice([0, elem * r.randint(1, 64)]) if op != "copy" else r.randint(row, 2 * row)
    src = r.randrange(0, ARCH.mem_bytes - 4 * row - 64)
    src -= src % elem
    region = r.choice([LOCAL, REMOTE])
    page = r.randrange(1, ARCH.mem_bytes // PG)
    near_edge = page * PG - r.randint(0, 2 * bus)       # straddle a page edge
    dst = region + (near_edge if r.random() < 0.5 else r.randrange(0, ARCH.mem_bytes - 512))
    dst -= dst % elem
    dst = min(dst, region + ARCH.mem_bytes - rows * max(dst_stride, 1) - row - 8)
    dst -= dst % elem
    return (f"{op} chan={r.randrange(ARCH.channels)} ctx=0 tag={r.randrange(1 << 16)} "
            f"src={src:#x} dst={dst:#x} row_bytes={row} rows={rows} src_stride={row:#x} "
            f"dst_stride={dst_stride:#x}")


def _random_programs(seed, bus):
    r = random.Random(seed)
    progs = []
    for dev in range(ARCH.devices):
        lines = ["version 2"] + _maps(dev)
        for _ in range(r.randint(2, 6)):
            lines.append(_random_copy(r, bus))
            if r.random() < 0.3:
                lines.append("fence mask=0")
        lines.append("halt")
        progs.append(assemble("\n".join(lines), f"dev{dev}.s"))
    return progs


@pytest.mark.parametrize("data_width", [32, 64])
def test_random_reduce_programs_match_golden(data_width):
    """Timing-independent random programs (those where two unordered copies
    touch the same byte are drawn again): every byte, status and counter
    equal to the golden model's."""
    rng = np.random.default_rng(data_width)
    ran = 0
    for seed in range(40):
        progs = _random_programs(1000 * data_width + seed, data_width // 8)
        mems = _memories(rng)
        if racy_copies(ARCH, progs, mems):
            continue
        compare_with_golden(ARCH, progs, mems, data_width=data_width, info=f"seed {seed}")
        ran += 1
        if ran == 4:
            break
    assert ran == 4, "too few race-free random programs"


@pytest.mark.parametrize("op,elem", [("copy_add_f32", 4), ("copy_add_bf16", 2)])
@pytest.mark.parametrize("where", [LOCAL, REMOTE])
def test_runs_into_one_word_are_summed_in_order(op, elem, where):
    """dst_stride 0: every row adds into the same bytes, beat after beat into
    one word (the read-add-write hazard), so the sum is sequential."""
    progs = [assemble("\n".join(["version 2"] + _maps(0) + [
        f"{op} chan=0 ctx=0 tag=0 src=0x100 dst={where + 0x800:#x} row_bytes=8 rows=12 "
        "src_stride=0x8 dst_stride=0x0", "halt"]), "a.s"),
        assemble("version 1\nhalt", "b.s")]
    rtl, gold = compare_with_golden(ARCH, progs, _memories(np.random.default_rng(7)),
                                    data_width=64)
    assert rtl.status == ["HALTED", "HALTED"]


def test_two_devices_reduce_into_one_with_plain_writes_beside():
    """Device 1 receives reduce beats from device 0 and from itself (through
    its own network input) and plain writes, on every channel at once: the
    acks of sums and of plain writes share one queue."""
    copies0 = [f"copy_add_f32 chan={c} ctx=0 tag={c} src={c * 0x400:#x} "
               f"dst={REMOTE + 0x1000 + c * 0x200:#x} row_bytes=256 rows=2 src_stride=0x100 "
               "dst_stride=0x0" for c in range(3)]
    copies0.append(f"copy chan=3 ctx=0 tag=3 src=0x2000 dst={REMOTE + 0x3000:#x} row_bytes=512 "
                   "rows=1 src_stride=0x0 dst_stride=0x0")
    copies1 = [f"copy_add_bf16 chan={c} ctx=0 tag={c} src={0x2000 + c * 0x100:#x} "
               f"dst={LOCAL + 0x1800 + c * 0x100:#x} row_bytes=128 rows=3 src_stride=0x80 "
               "dst_stride=0x0" for c in range(4)]
    progs = [assemble("\n".join(["version 2"] + _maps(0) + copies0 + ["halt"]), "a.s"),
             assemble("\n".join(["version 2"] + _maps(1) + copies1 + ["halt"]), "b.s")]
    mems = _memories(np.random.default_rng(3))
    assert not racy_copies(ARCH, progs, mems)
    rtl, _ = compare_with_golden(ARCH, progs, mems, data_width=64)
    assert rtl.status == ["HALTED", "HALTED"]
    # one physical write port shared by the four writers and one read port by
    # the three readers (the FPGA's block RAM)
    shared, _ = compare_with_golden(ARCH, progs, mems, data_width=64, shared_write=True)
    assert shared.cycles >= rtl.cycles
    both, _ = compare_with_golden(ARCH, progs, mems, data_width=64, shared_write=True,
                                  shared_read=True)
    assert both.cycles >= shared.cycles


def test_reduce_copy_moves_a_beat_a_cycle_like_a_plain_copy():
    """A long remote copy_add_f32 costs what the same plain COPY costs, but for
    the read-add-write pipeline's few cycles: one beat a cycle."""
    from gen.sim_amaranth import run_system
    beats = 3 * PG // 8
    cycles = {}
    for op in ("copy", "copy_add_f32"):
        progs = [assemble("\n".join(["version 2"] + _maps(0) + [
            f"{op} chan=0 ctx=0 tag=0 src=0x0 dst={REMOTE:#x} row_bytes={3 * PG} rows=1 "
            "src_stride=0x0 dst_stride=0x0", "halt"]), "a.s"), assemble("version 1\nhalt", "b.s")]
        cycles[op] = run_system(ARCH, progs, _memories(np.random.default_rng(5)), data_width=64).cycles
    assert beats < cycles["copy"] <= cycles["copy_add_f32"] <= cycles["copy"] + 16, cycles


V1, V2 = encode(Op.VERSION, version=1), encode(Op.VERSION, version=2)
ADD = dict(chan=0, ctx=0, tag=0, src=0, dst=0x100, row_bytes=8, rows=1, src_stride=0,
           dst_stride=0)


@pytest.mark.parametrize("program,cause,pc", [
    ([V1, encode(Op.COPY_ADD_F32, **ADD)], Cause.BAD_OPCODE, 1),
    ([V1, encode(Op.COPY_ADD_BF16, **ADD)], Cause.BAD_OPCODE, 1),
    ([encode(Op.VERSION, version=3)], Cause.VERSION_MISMATCH, 0),
    ([V2, encode(Op.VERSION, version=1)], Cause.VERSION_MISMATCH, 1),
    ([V2, encode(Op.COPY_ADD_F32, **dict(ADD, dst=0x102))], Cause.MISALIGNED, 1),
    ([V2, encode(Op.COPY_ADD_F32, **dict(ADD, row_bytes=6))], Cause.MISALIGNED, 1),
    ([V2, encode(Op.COPY_ADD_BF16, **dict(ADD, dst_stride=3))], Cause.MISALIGNED, 1),
    ([V2, encode(Op.COPY_ADD_F32, **dict(ADD, src=0xffe))], Cause.MISALIGNED, 1),
    ([V2, encode(Op.COPY_ADD_BF16, **dict(ADD, src_stride=0x11))], Cause.MISALIGNED, 1),
    ([V2, encode(Op.COPY_ADD_BF16, **dict(ADD, chan=7))], Cause.BAD_CHANNEL, 1),
])
def test_illegal_reduce_instructions_stop_like_golden(program, cause, pc):
    halt = encode(Op.HALT)
    progs = [program + [halt], [V1, halt]]
    rtl, gold = compare_with_golden(ARCH, progs, _memories(np.random.default_rng(0)))
    assert (gold.status[0], gold.cause[0], gold.pc[0]) == ("ILLEGAL", cause.name, pc)


def test_v1_and_v2_programs_run_side_by_side():
    """A version-1 program keeps its meaning on v2 hardware next to a v2 one."""
    plain = ("copy chan=0 ctx=0 tag=1 src=0x40 dst=0x4100 row_bytes=64 rows=2 src_stride=0x40 "
             "dst_stride=0x80")
    progs = [assemble("\n".join(["version 1"] + _maps(0) + [plain, "halt"]), "a.s"),
             assemble("\n".join(["version 2"] + _maps(1) + [plain.replace("copy ", "copy_add_f32 "),
                                                            "halt"]), "b.s")]
    rtl, _ = compare_with_golden(ARCH, progs, _memories(np.random.default_rng(1)), data_width=64)
    assert rtl.status == ["HALTED", "HALTED"]


def test_fault_inside_a_reduce_copy_adds_only_the_bytes_before_it():
    """The destination runs into an unmapped page: the bytes before it are
    summed, none after, and the fault record names the page."""
    lines = ["version 2"] + _maps(0)[:-2]          # the peer's last page unmapped
    lines += [f"copy_add_f32 chan=1 ctx=0 tag=5 src=0x100 dst={REMOTE + 3 * PG - 64:#x} "
              "row_bytes=256 rows=1 src_stride=0x0 dst_stride=0x0", "halt"]
    progs = [assemble("\n".join(lines), "a.s"), assemble("version 1\nhalt", "b.s")]
    rtl, gold = compare_with_golden(ARCH, progs, _memories(np.random.default_rng(2)),
                                    data_width=64)
    assert gold.status[0] == "FAULT" and gold.faults[0]["va"] == REMOTE + 3 * PG


@pytest.mark.slow
def test_verilog_matches_amaranth_cycle_for_cycle_on_reduce_programs():
    """The emitted Verilog under Verilator: same cycles and bytes as the
    Amaranth simulation on race-free random reduce programs."""
    from gen.result import compare_results
    from gen.sim_amaranth import run_system
    from gen.sim_verilator import run_programs
    rng = np.random.default_rng(11)
    ran = 0
    for seed in range(30):
        progs = _random_programs(77 + seed, 8)
        mems = _memories(rng)
        if racy_copies(ARCH, progs, mems):
            continue
        am = run_system(ARCH, progs, mems, data_width=64)
        vl = run_programs(ARCH, 64, progs, mems)
        diffs = compare_results(am, vl, cycles=True)
        assert not diffs, "\n".join(diffs)
        ran += 1
        if ran == 2:
            break
    assert ran == 2
