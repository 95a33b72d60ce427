# amaranth: UnusedElaboratable=no
"""Host port: the register table, docs/regmap.md generated from it and up to
date, and AXI4-Lite end to end on a one-device system: identification and
parameter registers, loading a program through IMEM_*, starting it, polling
STATUS, counters, popping fault records, and SLVERR responses."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from gen.asm import assemble
from gen.sim_amaranth import axi_read, axi_write
from hw.coprocessor import Coprocessor
from hw.hostport import ADDR_WIDTH, MAGIC, REGISTERS, HostPort, regmap_markdown, register
from hw.isa import ISA_VERSION, ArchParams, Cause, Status
from hw.system import System
from gen.simkit import run_simulation

ROOT = Path(__file__).resolve().parent.parent
PG = 256
ARCH = ArchParams(devices=1, mem_bytes=16 * PG, page_sizes=(PG, 4 * PG, 8 * PG, 16 * PG),
                  tlb_entries=8, contexts=2, channels=2, semaphores=2, imem_words=32,
                  addr_bits=16)
OKAY, SLVERR = 0, 2


def test_constructor_errors():
    with pytest.raises(TypeError, match="coprocessor must be a Coprocessor, not 'cop'"):
        HostPort("cop")
    c = Coprocessor(ARCH)
    assert HostPort(c, data_width=32).arch is ARCH


def test_register_table_is_consistent():
    offsets = [r.offset for r in REGISTERS]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert all(o % 4 == 0 and o < 1 << ADDR_WIDTH for o in offsets)
    assert len({r.name for r in REGISTERS}) == len(REGISTERS)
    for r in REGISTERS:
        assert r.access in ("RO", "WO", "RW")
        used = 0
        for f in r.fields:
            mask = ((1 << f.width) - 1) << f.lsb
            assert f.lsb + f.width <= 32 and not used & mask, (r.name, f.name)
            used |= mask
    assert register("STATUS").offset == 0x00C
    with pytest.raises(KeyError, match="no register 'NOPE'"):
        register("NOPE")


def test_regmap_doc_is_up_to_date():
    """docs/regmap.md is generated (``python -m gen regmap``); regenerate it
    when this fails."""
    doc = (ROOT / "docs" / "regmap.md").read_text()
    assert doc == regmap_markdown(), "docs/regmap.md is stale: run `python -m gen regmap`"


def test_regmap_command_check(tmp_path):
    from gen.cli import main
    out = tmp_path / "regmap.md"
    assert main(["regmap", "-o", str(out)]) == 0
    assert out.read_text() == regmap_markdown()
    assert main(["regmap", "-o", str(out), "--check"]) == 0
    out.write_text("stale\n")
    assert main(["regmap", "-o", str(out), "--check"]) == 1


PROGRAM = """version 1
remap ctx=0 size=3 perm=rw staged=0 dev=0 va=0x0 pa=0x0
remap ctx=1 size=0 perm=r staged=1 dev=0 va=0x0 pa=0x100
copy chan=0 ctx=0 src=0x0 dst=0x800 row_bytes=0x300 rows=1
copy chan=1 ctx=0 src=0x10 dst=0x700 row_bytes=0x40 rows=1
fence
commit ctx=1
copy chan=1 ctx=1 src=0x0 dst=0x100 row_bytes=0x10 rows=1   ; va 0x100 unmapped in ctx 1
halt
"""


def test_axi_lite_end_to_end():
    words = assemble(PROGRAM, "prog.s")
    mem = random.Random(3).randbytes(ARCH.mem_bytes)
    system = System(ARCH, data_width=32, programs=[[]], memories=[mem])
    bus = system.host[0]
    seen = {}

    async def tb(ctx):
        R = lambda name: axi_read(ctx, bus, register(name).offset)        # noqa: E731
        W = lambda name, v: axi_write(ctx, bus, register(name).offset, v)  # noqa: E731
        seen["id"] = await R("ID")
        seen["version"] = await R("ISA_VERSION")
        seen["params"] = [(await R(n))[0] for n in
                          ("P_DEVICES", "P_MEM_BYTES", "P_PAGE_SIZE1", "P_TLB_ENTRIES",
                           "P_CHANNELS", "P_IMEM_WORDS", "P_ADDR_BITS", "P_BUS_BITS")]
        seen["idle_status"] = (await R("STATUS"))[0]
        seen["unmapped_read"] = await axi_read(ctx, bus, 0xFFC)
        seen["ro_write"] = await W("STATUS", 1)
        seen["wo_read"] = await R("CTRL")
        # load the program, word by word, 32 bits at a time
        assert await W("IMEM_ADDR", 0) == OKAY
        for w in words:
            for i in range(8):
                assert await W(f"IMEM_DATA{i}", w >> (32 * i) & 0xFFFF_FFFF) == OKAY
        seen["imem_addr"] = (await R("IMEM_ADDR"))[0]
        assert await W("CTRL", 1) == OKAY
        seen["busy_load"] = await W("IMEM_DATA7", 0)          # running: refused
        polls = 0
        while (await R("STATUS"))[0] & 7 == Status.RUNNING:
            polls += 1
        seen["polls"] = polls
        seen["status"] = (await R("STATUS"))[0]
        seen["pc"] = (await R("PC"))[0]
        seen["cycles"] = (await R("CYCLES_LO"))[0] | (await R("CYCLES_HI"))[0] << 32
        seen["descriptors"] = (await R("DESCRIPTORS"))[0]
        seen["remapped"] = (await R("BYTES_REMAPPED_LO"))[0]
        seen["chan"] = [(await R(f"CHAN{c}_BYTES_LO"))[0] for c in range(3)]
        faults = []
        while (await R("STATUS"))[0] >> 17 & 1:
            info = (await R("FAULT_INFO"))[0]
            va = (await R("FAULT_VA"))[0] | (await R("FAULT_VA_HI"))[0] << 32
            faults.append((info & 0xF, info >> 8 & 0xF, Cause(info >> 16 & 0x3F).name, va,
                           info >> 31))
            assert await W("FAULT_POP", 0) == OKAY
        seen["faults"] = faults
        seen["after_pop"] = (await R("FAULT_INFO"))[0]
        seen["mem"] = system.devices[0].mem.sim_read(ctx, 0x800, 0x300)

    run_simulation(system, [tb])
    assert seen["id"] == (MAGIC, OKAY) and seen["version"] == (ISA_VERSION, OKAY)
    assert seen["params"] == [1, ARCH.mem_bytes, 4 * PG, 8, 2, 32, 16, 32]
    assert seen["idle_status"] & 7 == Status.IDLE
    assert seen["unmapped_read"] == (0, SLVERR) and seen["ro_write"] == SLVERR
    assert seen["wo_read"] == (0, OKAY)
    assert seen["imem_addr"] == len(words) and seen["busy_load"] == SLVERR
    assert seen["polls"] > 0
    status = seen["status"]
    assert (status & 7, status >> 8 & 0x3F) == (Status.FAULT, Cause.NOT_MAPPED)
    assert seen["pc"] == 8                                        # the HALT that saw it
    assert seen["descriptors"] == 3 and seen["remapped"] == PG
    assert seen["chan"] == [0x300, 0x40, 0] and seen["cycles"] > 0x300 // 4
    assert seen["faults"] == [(1, 1, "NOT_MAPPED", 0x100, 1)]
    assert seen["after_pop"] >> 31 == 0
    assert seen["mem"] == mem[0:0x300]


def test_memory_and_tlb_windows():
    """MEM_ADDR / MEM_WDATA / MEM_READ / MEM_RDATA and TLB_INDEX / TLB_INFO reach memory and MMU."""
    arch = ArchParams(devices=1, mem_bytes=1 << 14, page_sizes=(1024, 4096, 8192, 16384), tlb_entries=8,
                      channels=2, imem_words=32, addr_bits=16)
    program = assemble("version 1\nremap ctx=1 size=1 perm=rw staged=0 dev=0 va=0x1000 pa=0x2000\nhalt\n", "p.s")
    system = System(arch, data_width=64, programs=[program], memories=[b""])
    bus = system.host[0]
    seen = {}

    async def tb(ctx):
        R = lambda name: axi_read(ctx, bus, register(name).offset)        # noqa: E731
        W = lambda name, v: axi_write(ctx, bus, register(name).offset, v)  # noqa: E731
        assert await W("MEM_ADDR", 3) == OKAY
        assert await W("MEM_WDATA0", 0x11223344) == OKAY
        assert await W("MEM_WDATA1", 0x55667788) == OKAY
        seen["mem"] = system.devices[0].mem.sim_read(ctx, 24, 8)
        seen["addr_after_write"] = (await R("MEM_ADDR"))[0]
        assert await W("MEM_ADDR", 3) == OKAY
        assert await W("MEM_READ", 1) == OKAY
        seen["rdata"] = ((await R("MEM_RDATA0"))[0], (await R("MEM_RDATA1"))[0])
        assert await W("CTRL", 1) == OKAY
        while (await R("STATUS"))[0] & 7 == Status.RUNNING:
            pass
        assert await W("TLB_INDEX", 0) == OKAY
        seen["tlb"] = ((await R("TLB_INFO"))[0], (await R("TLB_VPN"))[0], (await R("TLB_PPN"))[0])

    run_simulation(system, [tb])
    assert seen["mem"] == bytes.fromhex("4433221188776655")
    assert seen["addr_after_write"] == 4
    assert seen["rdata"] == (0x11223344, 0x55667788)
    info, vpn, ppn = seen["tlb"]
    assert info & 1 and (info >> 8) & 0xF == 1 and (info >> 2) & 3 == 1 and (info >> 4) & 3 == 3
    assert (vpn, ppn) == (0x1000 // 1024, 0x2000 // 1024)
