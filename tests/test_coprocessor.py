# amaranth: UnusedElaboratable=no
"""Coprocessor: constructor checks, decoding generated from hw/isa.py, every
instruction and every illegal cause against the golden model (in small
systems), FENCE/COPY ordering, and hypothesis-generated programs ending in the
golden model's exact end state (lock-step for any program; concurrent for
race-free ones)."""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

from gen.asm import assemble
from hw.coprocessor import INSTRUCTION_LAYOUTS, Coprocessor, StatusCode, instruction_layout
from hw.isa import (FORMATS, ISA_VERSION, OPCODE_BITS, WORD_BITS, ArchParams, Cause, Op, Status,
                    encode, reserved_mask)
from hw.system import System
from verif.programs import systems
from gen.simkit import compare_with_golden, racy_copies, run_simulation

PG = 256
ARCH = ArchParams(devices=3, mem_bytes=16 * PG, page_sizes=(PG, 4 * PG, 8 * PG, 16 * PG),
                  tlb_entries=24, contexts=4, channels=4, semaphores=4, imem_words=64,
                  addr_bits=20)
V = encode(Op.VERSION, version=ISA_VERSION)
H = encode(Op.HALT)


def mems(arch=ARCH, seed=0):
    r = random.Random(seed)
    return [r.randbytes(arch.mem_bytes) for _ in range(arch.devices)]


def asm(*texts, arch=ARCH):
    texts = list(texts) + ["version 1\nhalt"] * (arch.devices - len(texts))
    return [assemble(t, f"dev{d}.s", allow_version_mismatch=True) for d, t in enumerate(texts)]


def ident(ctx=1, pages=range(16), perm="rw", dev=0, size=0, staged=0, va_off=0):
    return "\n".join(f"remap ctx={ctx} size={size} perm={perm} staged={staged} dev={dev} "
                     f"va={va_off + p * ARCH.page_sizes[size]:#x} pa={p * ARCH.page_sizes[size]:#x}"
                     for p in pages)


# ------------------------------------------------------------ constructor
def test_constructor_errors():
    with pytest.raises(TypeError, match="arch must be an ArchParams, not 'x'"):
        Coprocessor("x")
    with pytest.raises(ValueError, match=r"Device index must be an integer in 0\.\.2, not 3"):
        Coprocessor(ARCH, device=3)
    with pytest.raises(ValueError, match="Bus width must be one of 32, 64, 128, 256, not 48"):
        Coprocessor(ARCH, data_width=48)
    with pytest.raises(ValueError, match="Program of 65 words exceeds the instruction memory "
                                         "of 64 words"):
        Coprocessor(ARCH, program=[V] * 65)
    with pytest.raises(ValueError, match="Program word 1 is not a 256-bit unsigned integer: -1"):
        Coprocessor(ARCH, program=[V, -1])
    with pytest.raises(ValueError, match="Fault FIFO depth must be a positive integer, not 0"):
        Coprocessor(ARCH, fault_depth=0)
    with pytest.raises(ValueError, match="Descriptor queue depth must be a positive integer, "
                                         "not 0"):
        Coprocessor(ARCH, desc_depth=0)
    with pytest.raises(ValueError, match="Counter width must be an integer in 32..64, not 16"):
        Coprocessor(ARCH, counter_width=16)
    c = Coprocessor(ARCH, device=2, program=[V, H], fault_depth=3, desc_depth=5)
    assert (c.device, c.fault_depth, c.desc_depth, c.data_width, c.counter_width) == (2, 3, 5, 64, 48)
    assert c.program == (V, H)


def test_layouts_are_generated_from_formats():
    for op, fields in FORMATS.items():
        lay = INSTRUCTION_LAYOUTS[op]
        assert lay.size == WORD_BITS
        assert lay["opcode"].offset == 0 and lay["opcode"].width == OPCODE_BITS
        for f in fields:
            assert (lay[f.name].offset, lay[f.name].width) == (f.lsb, f.width)
        # every bit of the word is a field or reserved
        used = (1 << OPCODE_BITS) - 1
        for f in fields:
            used |= f.mask << f.lsb
        assert used | reserved_mask(op) == (1 << WORD_BITS) - 1
    assert instruction_layout(Op.HALT).size == WORD_BITS
    assert [s.name for s in StatusCode] == [s.name for s in Status]


# ------------------------------------------------------------ instructions
def test_copy_2d_local_and_remote_fence_halt():
    progs = asm(f"""version 1
{ident()}
{ident(pages=range(4), dev=1, va_off=0x10000)}
copy chan=0 ctx=1 src=0x10 dst=0x810 row_bytes=37 rows=11 src_stride=0x50 dst_stride=0x40 tag=0
copy chan=1 ctx=1 src=0x3 dst=0x10005 row_bytes=300 rows=2 src_stride=0x133 dst_stride=0x177 tag=0
copy chan=2 ctx=1 src=0x400 dst=0xc01 row_bytes=0 rows=5 tag=0 src_stride=0 dst_stride=0
copy chan=3 ctx=1 src=0x500 dst=0xd00 row_bytes=5 rows=0 tag=0 src_stride=0 dst_stride=0
fence mask=0x3
halt""")
    rtl, gold = compare_with_golden(ARCH, progs, mems())
    assert rtl["status"][0] == "HALTED" and rtl["bytes_copied"][0] == 37 * 11 + 600
    assert rtl["descriptors"][0] == 4


def test_fence_fault_stops_with_lowest_channel_cause():
    progs = asm(f"""version 1
{ident(pages=range(8))}
remap ctx=1 size=0 perm=r staged=0 dev=0 va=0x800 pa=0x800
copy chan=2 ctx=1 src=0x0 dst=0x700 row_bytes=0x180 rows=1 tag=0 src_stride=0 dst_stride=0
copy chan=1 ctx=1 src=0x8f0 dst=0x100 row_bytes=0x20 rows=1 tag=0 src_stride=0 dst_stride=0
copy chan=0 ctx=1 src=0x100 dst=0x200 row_bytes=0x10 rows=1 tag=0 src_stride=0 dst_stride=0
fence mask=0x1
fence mask=0
halt""")
    rtl, _ = compare_with_golden(ARCH, progs, mems())
    assert (rtl["status"][0], rtl["cause"][0], rtl["pc"][0]) == ("FAULT", "NOT_MAPPED", 14)
    assert [(f["channel"], f["va"], f["cause"]) for f in rtl["faults"]] == \
        [(1, 0x900, "NOT_MAPPED"), (2, 0x800, "NO_WRITE")]


def test_faulted_channel_discards_later_copies_halt_faults():
    progs = asm(f"""version 1
{ident(pages=range(4))}
copy chan=0 ctx=1 src=0x300 dst=0x10 row_bytes=0x200 rows=1 tag=0 src_stride=0 dst_stride=0
copy chan=0 ctx=1 src=0x0 dst=0x200 row_bytes=0x10 rows=1 tag=0 src_stride=0 dst_stride=0
copy chan=1 ctx=1 src=0x0 dst=0x280 row_bytes=0x10 rows=1 tag=0 src_stride=0 dst_stride=0
remap ctx=2 size=0 perm=rw staged=0 dev=0 va=0x0 pa=0x0
halt""")
    rtl, _ = compare_with_golden(ARCH, progs, mems())
    assert (rtl["status"][0], rtl["cause"][0], rtl["pc"][0]) == ("FAULT", "NOT_MAPPED", 9)
    assert rtl["descriptors"][0] == 3 and rtl["bytes_copied"][0] == 0x100 + 0x10


def test_fault_causes_and_out_of_range():
    progs = asm(f"""version 1
remap ctx=0 size=0 perm=w staged=0 dev=0 va=0x0 pa=0x0
remap ctx=0 size=0 perm=rw staged=0 dev=1 va=0x100 pa=0x0
remap ctx=0 size=0 perm=rw staged=0 dev=0 va=0x200 pa=0xf00
remap ctx=0 size=0 perm=r staged=0 dev=0 va=0x300 pa=0x300
remap ctx=0 size=1 perm=rw staged=0 dev=0 va=0x1000 pa=0xc00
remap ctx=0 size=0 perm=rw staged=0 dev=0 va=0x2000 pa=0x1000
copy chan=0 ctx=0 src=0x10 dst=0x200 row_bytes=4 rows=1 tag=0 src_stride=0 dst_stride=0
copy chan=1 ctx=0 src=0x110 dst=0x200 row_bytes=4 rows=1 tag=0 src_stride=0 dst_stride=0
copy chan=2 ctx=0 src=0x300 dst=0x304 row_bytes=4 rows=1 tag=0 src_stride=0 dst_stride=0
copy chan=3 ctx=0 src=0x1000 dst=0x2000 row_bytes=0x30 rows=1 tag=0 src_stride=0 dst_stride=0 ; beyond memory
halt""")
    rtl, _ = compare_with_golden(ARCH, progs, mems())
    assert sorted(f["cause"] for f in rtl["faults"]) == \
        ["NO_READ", "NO_WRITE", "OUT_OF_RANGE", "REMOTE_READ"]


def test_remap_inval_commit_staged_and_bytes_remapped():
    progs = asm(f"""version 1
{ident(ctx=0, pages=range(8))}
remap ctx=1 size=1 perm=r staged=1 dev=0 va=0x0 pa=0x400
remap ctx=1 size=0 perm=r staged=1 dev=2 va=0x400 pa=0x0
remap ctx=1 size=0 perm=r staged=1 dev=0 va=0x500 pa=0x100
inval ctx=1 size=0 staged=1 va=0x500
remap ctx=1 size=0 perm=rw staged=0 dev=0 va=0x8000 pa=0x0
copy chan=0 ctx=0 src=0x0 dst=0x600 row_bytes=0x100 rows=1 tag=0 src_stride=0 dst_stride=0
inval ctx=0 size=0 staged=0 va=0x700
fence mask=0
commit ctx=1
halt""")
    rtl, gold = compare_with_golden(ARCH, progs, mems())
    assert rtl["status"][0] == "HALTED"
    assert rtl["bytes_remapped"][0] == 4 * PG          # the size-1 page; dev 2's is remote
    assert all(not e["staged"] for e in rtl["tlb"][0] if e["ctx"] == 1)



def test_commit_right_after_staged_commands_counts_what_they_left():
    """A COMMIT right behind a staged REMAP / INVAL (no copy, so nothing waits)
    counts the staged table those commands left, not the one the MMU still
    held while they were in flight (the RTL once summed it as the COMMIT was
    sent, while the previous command had not yet taken effect)."""
    progs = asm("""version 1
remap ctx=0 size=1 perm=rw staged=1 dev=0 va=0x0 pa=0x400
commit ctx=0
halt""", """version 1
remap ctx=0 size=1 perm=rw staged=1 dev=1 va=0x0 pa=0x400
remap ctx=0 size=1 perm=rw staged=1 dev=0 va=0x0 pa=0x400
fence mask=0
commit ctx=0
halt""", """version 1
remap ctx=0 size=1 perm=rw staged=1 dev=2 va=0x0 pa=0x400
remap ctx=0 size=0 perm=rw staged=1 dev=2 va=0x800 pa=0x0
inval ctx=0 size=1 staged=1 va=0x0
commit ctx=0
halt""")
    for lockstep in (False, True):
        rtl, _ = compare_with_golden(ARCH, progs, mems(), lockstep=lockstep)
        assert rtl["status"] == ["HALTED"] * 3
        # dev 1's local page was overwritten by a remote one, dev 2's big page invalidated
        assert rtl["bytes_remapped"] == [4 * PG, 0, PG]


def test_concurrent_commit_bytes_regression():
    """A hypothesis example (test_hypothesis_concurrent_matches_golden): device
    1's COMMIT follows its staged REMAP after only an empty FENCE; the RTL
    counted 0 zero-copy bytes instead of the golden model's 128."""
    arch = ArchParams(devices=2, mem_bytes=448, page_sizes=(64, 128, 256, 512), tlb_entries=6,
                      contexts=1, channels=2, semaphores=1, imem_words=20, addr_bits=9)
    dev0 = """version 1
remap ctx=0 size=2 perm=rw staged=0 dev=0 va=0x0 pa=0x0
remap ctx=0 size=0 perm=rw staged=0 dev=0 va=0x180 pa=0xc0
remap ctx=0 size=0 perm=rw staged=0 dev=0 va=0x1c0 pa=0x100
remap ctx=0 size=1 perm=rw staged=0 dev=0 va=0x80 pa=0x0
remap ctx=0 size=1 perm=rw staged=0 dev=0 va=0x100 pa=0x80
remap ctx=0 size=1 perm=rw staged=0 dev=0 va=0x180 pa=0x100
copy chan=0 ctx=0 tag=255 src=0x94 dst=0xb row_bytes=1 rows=12 src_stride=0x20 dst_stride=0x15
copy chan=0 ctx=0 tag=8156 src=0x82 dst=0x186 row_bytes=7 rows=9 src_stride=0xc dst_stride=0xe
wait sem=0 count=2
copy chan=0 ctx=0 tag=65535 src=0xd5 dst=0xb3 row_bytes=20 rows=2 src_stride=0x9d dst_stride=0x15
fence mask=0x1d2
copy chan=1 ctx=0 tag=364 src=0x82 dst=0x6 row_bytes=59 rows=1 src_stride=0x0 dst_stride=0x3b
remap ctx=0 size=1 perm=- staged=0 dev=1 va=0x180 pa=0x100
fence mask=0x0
remap ctx=0 size=0 perm=rw staged=0 dev=0 va=0x40 pa=0x140
fence mask=0x0
commit ctx=0
copy chan=0 ctx=0 tag=300 src=0x1a4 dst=0x40 row_bytes=4 rows=8 src_stride=0x4 dst_stride=0x0
halt"""
    dev1 = """version 1
remap ctx=0 size=0 perm=rw staged=0 dev=1 va=0x40 pa=0x100
remap ctx=0 size=0 perm=rw staged=0 dev=1 va=0x80 pa=0x140
remap ctx=0 size=0 perm=rw staged=0 dev=1 va=0xc0 pa=0x180
remap ctx=0 size=1 perm=rw staged=0 dev=1 va=0x80 pa=0x0
remap ctx=0 size=1 perm=rw staged=1 dev=1 va=0x0 pa=0x180
fence mask=0x0
commit ctx=0
copy chan=1 ctx=0 tag=65535 src=0x45 dst=0x45 row_bytes=33 rows=3 src_stride=0x4c dst_stride=0x4d
remap ctx=0 size=1 perm=rw staged=0 dev=1 va=0x0 pa=0x80"""   # no halt: runs off the end
    progs = asm(dev0, dev1, arch=arch)
    memories = mems(arch, seed=5)
    racy = racy_copies(arch, progs, memories)
    rtl, _ = compare_with_golden(arch, progs, memories, data_width=32, memories_too=not racy)
    assert rtl["bytes_remapped"] == [0, 128]
    assert list(zip(rtl["status"], rtl["cause"], rtl["pc"])) == [
        ("ABORTED", "DEADLOCK", 9), ("ILLEGAL", "BAD_OPCODE", 10)]

def test_commit_unfenced_then_fault_check_order():
    progs = asm(f"""version 1
{ident(pages=range(2))}
copy chan=1 ctx=1 src=0x0 dst=0x100 row_bytes=8 rows=1 tag=0 src_stride=0 dst_stride=0
fence mask=0x1
commit ctx=1
halt""", """version 1
commit ctx=7
halt""", f"""version 1
{ident(pages=range(2), dev=2)}
copy chan=1 ctx=1 src=0x0 dst=0x100 row_bytes=8 rows=1 tag=0 src_stride=0 dst_stride=0
fence mask=0x2
commit ctx=1
halt""")
    rtl, _ = compare_with_golden(ARCH, progs, mems())
    assert list(zip(rtl["status"], rtl["cause"], rtl["pc"])) == [
        ("ILLEGAL", "COMMIT_UNFENCED", 5), ("ILLEGAL", "BAD_CONTEXT", 1), ("HALTED", "NONE", 6)]


def test_signal_wait_chain_and_deadlock():
    progs = asm("""version 1
wait sem=1 count=2
signal dev=2 sem=0
halt""", """version 1
signal dev=0 sem=1
signal dev=0 sem=1
signal dev=1 sem=3
wait sem=3 count=1
wait sem=2 count=1
halt""", """version 1
wait sem=0 count=1
halt""")
    rtl, _ = compare_with_golden(ARCH, progs, mems())
    assert list(zip(rtl["status"], rtl["cause"], rtl["pc"])) == [
        ("HALTED", "NONE", 3), ("ABORTED", "DEADLOCK", 5), ("HALTED", "NONE", 2)]


def test_deadlock_waits_for_copies_in_flight():
    # device 0 waits forever, but only after its long unfenced copy has landed
    progs = asm(f"""version 1
{ident(pages=range(16))}
copy chan=0 ctx=1 src=0x0 dst=0x800 row_bytes=0x300 rows=1 tag=0 src_stride=0 dst_stride=0
wait sem=0 count=1
halt""", arch=ARCH)
    rtl, _ = compare_with_golden(ARCH, progs, mems())
    assert (rtl["status"][0], rtl["cause"][0]) == ("ABORTED", "DEADLOCK")
    assert rtl["bytes_copied"][0] == 0x300


ILLEGAL = [
    ([encode(Op.VERSION, version=ISA_VERSION + 1), H], Cause.VERSION_MISMATCH, 0),
    ([H], Cause.VERSION_MISMATCH, 0),
    ([0], Cause.VERSION_MISMATCH, 0),
    ([], Cause.VERSION_MISMATCH, 0),
    ([V, encode(Op.VERSION, version=1)], Cause.VERSION_MISMATCH, 1),     # not the program's
    ([encode(Op.VERSION, version=1), encode(Op.COPY_ADD_F32)], Cause.BAD_OPCODE, 1),   # v2 in v1
    ([V, encode(Op.COPY_ADD_BF16, dst=1)], Cause.MISALIGNED, 1),
    ([V | 1 << 100], Cause.RESERVED_BITS, 0),
    ([V, max(Op) + 1], Cause.BAD_OPCODE, 1),
    ([V, 0xff | 1 << 200], Cause.BAD_OPCODE, 1),
    ([V], Cause.BAD_OPCODE, 1),
    ([V, encode(Op.COPY, chan=4)], Cause.BAD_CHANNEL, 1),
    ([V, encode(Op.COPY, chan=4, ctx=9)], Cause.BAD_CHANNEL, 1),
    ([V, encode(Op.COPY, ctx=4)], Cause.BAD_CONTEXT, 1),
    ([V, encode(Op.COPY, src=1 << 20)], Cause.ADDRESS_WIDTH, 1),
    ([V, encode(Op.COPY, dst=1 << 47)], Cause.ADDRESS_WIDTH, 1),
    ([V, encode(Op.REMAP, ctx=4)], Cause.BAD_CONTEXT, 1),
    ([V, encode(Op.REMAP, dev=3)], Cause.BAD_DEVICE, 1),
    ([V, encode(Op.REMAP, dev=3, va=1)], Cause.BAD_DEVICE, 1),
    ([V, encode(Op.REMAP, va=0x80)], Cause.MISALIGNED, 1),
    ([V, encode(Op.REMAP, size=1, va=0x100)], Cause.MISALIGNED, 1),
    ([V, encode(Op.REMAP, pa=0x10)], Cause.MISALIGNED, 1),
    ([V, encode(Op.REMAP, va=1 << 20)], Cause.ADDRESS_WIDTH, 1),
    ([V, encode(Op.REMAP, va=(1 << 20) + 1)], Cause.ADDRESS_WIDTH, 1),
    ([V, encode(Op.REMAP, va=1, pa=1 << 20)], Cause.MISALIGNED, 1),
    ([V, encode(Op.REMAP, pa=1 << 21)], Cause.ADDRESS_WIDTH, 1),
    ([V, encode(Op.INVAL, ctx=15)], Cause.BAD_CONTEXT, 1),
    ([V, encode(Op.INVAL, va=0x10)], Cause.MISALIGNED, 1),
    ([V, encode(Op.INVAL, va=1 << 30)], Cause.ADDRESS_WIDTH, 1),
    ([V, encode(Op.SIGNAL, dev=3)], Cause.BAD_DEVICE, 1),
    ([V, encode(Op.SIGNAL, dev=3, sem=9)], Cause.BAD_DEVICE, 1),
    ([V, encode(Op.SIGNAL, sem=4)], Cause.BAD_SEMAPHORE, 1),
    ([V, encode(Op.WAIT, sem=4)], Cause.BAD_SEMAPHORE, 1),
    ([V, encode(Op.COMMIT, ctx=4)], Cause.BAD_CONTEXT, 1),
    ([V] * 64, Cause.PC_OVERFLOW, 64),
]


def run_on_coprocessor(arch, programs):
    """Run each program on one Coprocessor alone (no DMA, no MMU: the
    testbench answers for them, idle and ready), reloading its instruction
    memory through ``imem_w`` between runs: one simulation for many programs.
    Returns ``[(status, cause, pc)]`` as names."""
    cop = Coprocessor(arch, device=0, data_width=32)
    out = []

    async def tb(ctx):
        ctx.set(cop.mmu_cmd.ready, 1)
        ctx.set(cop.sig.ready, 1)
        for prog in programs:
            words = list(prog) + [0] * (arch.imem_words - len(prog))
            ctx.set(cop.imem_w.valid, 1)
            for a, w in enumerate(words):
                ctx.set(cop.imem_w.p.addr, a)
                ctx.set(cop.imem_w.p.data, w)
                await ctx.tick()
            ctx.set(cop.imem_w.valid, 0)
            ctx.set(cop.start, 1)
            await ctx.tick()
            ctx.set(cop.start, 0)
            await ctx.tick().until(cop.status != StatusCode.RUNNING)
            out.append((Status(int(ctx.get(cop.status))).name,
                        Cause(int(ctx.get(cop.cause))).name, int(ctx.get(cop.pc))))

    run_simulation(cop, [tb])
    return out


def test_illegal_causes():
    """Every illegal cause (the golden model's test cases), same status, cause
    and pc as the golden model."""
    from model.golden import GoldenSystem
    progs = [w for w, _, _ in ILLEGAL]
    got = run_on_coprocessor(ARCH, progs)
    for (words, cause, pc), g in zip(ILLEGAL, got):
        assert g == ("ILLEGAL", cause.name, pc), (words, g)
        r = GoldenSystem(ARCH, [words, [V, H], [V, H]], mems()).run()
        assert g == (r.status[0].name, r.cause[0].name, r.pc[0])


def test_reserved_bits_every_opcode():
    cases = []
    for op in FORMATS:
        rm = reserved_mask(op)
        bits = [b for b in range(OPCODE_BITS, WORD_BITS) if rm >> b & 1]
        for b in bits[:1] + bits[len(bits) // 2:len(bits) // 2 + 1] + bits[-1:]:
            cases.append((op, [V, encode(op) | 1 << b, H]))
    got = run_on_coprocessor(ARCH, [p for _, p in cases])
    for (op, _), g in zip(cases, got):
        assert g == ("ILLEGAL", "RESERVED_BITS", 1), op


def test_fence_right_after_copy_cannot_slip_through():
    """A FENCE issued the cycle after a COPY waits for that copy's completion
    (descriptor counts per channel), also for a zero-length copy that the DMA
    completes at once, and a FENCE on another channel does not wait."""
    arch = ArchParams(devices=1, mem_bytes=16 * PG, page_sizes=ARCH.page_sizes, tlb_entries=16,
                      contexts=2, channels=2, semaphores=1, imem_words=32, addr_bits=20)
    prog = asm(f"""version 1
{ident(pages=range(16))}
copy chan=0 ctx=1 src=0x0 dst=0x800 row_bytes=0x800 rows=1 tag=0 src_stride=0 dst_stride=0
fence mask=0x2
fence mask=0x1
copy chan=1 ctx=1 src=0x0 dst=0x800 row_bytes=0 rows=1 tag=0 src_stride=0 dst_stride=0
fence mask=0x2
halt""", arch=arch)[0]
    system = System(arch, data_width=32, programs=[prog], memories=mems(arch))
    dev = system.devices[0]
    log = []

    async def tb(ctx):
        ctx.set(system.start, 1)
        await ctx.tick()
        ctx.set(system.start, 0)
        prev = None
        while not ctx.get(system.done):
            pc = ctx.get(dev.cop.pc)
            if pc != prev:
                log.append((pc, [ctx.get(dev.dma.status[c].done_count) for c in range(2)],
                            [ctx.get(dev.dma.status[c].busy) for c in range(2)]))
                prev = pc
            await ctx.tick()

    run_simulation(system, [tb])
    by_pc = {pc: (done, busy) for pc, done, busy in log}
    assert by_pc[19][0][0] == 0                          # passed FENCE chan 1 while copying
    assert by_pc[20] == ([1, 0], [0, 0])                 # FENCE chan 0 waited for the copy
    assert by_pc[22] == ([1, 1], [0, 0])                 # waited for the empty copy too


# ------------------------------------------------------------ hypothesis
# each example elaborates and simulates a whole system (~1-3 s): few examples,
# no shrinking (it would take minutes); a failure prints the programs as assembly
SIM_SETTINGS = dict(deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(max_examples=15, **SIM_SETTINGS)
@given(systems(max_devices=3, max_body=12, min_mem_pages=4, max_mem_pages=8),
       st.sampled_from([32, 64]))
def test_hypothesis_lockstep_matches_golden_exactly(case, width):
    """Any program, racy or not, valid or faulting: in lock-step the RTL follows
    the golden model's schedule and must end in its exact state (memories too,
    unless a copy overlaps itself, which the ISA leaves unspecified)."""
    overlap = racy_copies(case.arch, case.programs, case.memories, across=False)
    compare_with_golden(case.arch, case.programs, case.memories, data_width=width,
                        lockstep=True, memories_too=not overlap, info=case.describe())


@settings(max_examples=15, **SIM_SETTINGS)
@given(systems(max_devices=3, max_body=12, min_mem_pages=4, max_mem_pages=8),
       st.sampled_from([32, 64]))
def test_hypothesis_concurrent_matches_golden(case, width):
    """Free-running (every device and channel concurrent): statuses, causes,
    pcs, fault records, TLBs and counters always equal the golden model's;
    memories too unless copies race (then the ISA leaves the order open)."""
    racy = racy_copies(case.arch, case.programs, case.memories)
    compare_with_golden(case.arch, case.programs, case.memories, data_width=width,
                        memories_too=not racy, info=case.describe())
