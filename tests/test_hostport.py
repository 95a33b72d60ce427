# amaranth: UnusedElaboratable=no
"""Host port: the register table and its host-side API, docs/regmap.md
generated from it and up to date; the AXI4-Lite protocol on the port alone
(byte and half-word strobes on every held register and on the memory window,
back-to-back writes under random back-pressure on B and on the internal
streams, reads with RREADY held low, AW and W in either order, every
parameter register against the architecture it was built from); and AXI4-Lite
end to end on a one-device system: identification and parameter registers,
loading a program through IMEM_*, starting it, polling STATUS, counters,
popping fault records, SLVERR responses, byte stores through the memory and
TLB windows."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from gen.asm import assemble
from gen.sim_amaranth import axi_read, axi_write
from gen.simkit import run_simulation
from hw.coprocessor import Coprocessor, StatusCode
from hw.hostport import (ADDR_WIDTH, MAGIC, REGISTERS, HostPort, decode, encode, field,
                         regmap_markdown, register)
from hw.isa import ISA_VERSION, ArchParams, Cause, Status
from hw.system import System

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
    with pytest.raises(ValueError, match="Bus width must be one of 32, 64, 128, 256, not 48"):
        HostPort(c, data_width=48)


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
copy chan=0 ctx=0 src=0x0 dst=0x800 row_bytes=0x300 rows=1 tag=0 src_stride=0 dst_stride=0
copy chan=1 ctx=0 src=0x10 dst=0x700 row_bytes=0x40 rows=1 tag=0 src_stride=0 dst_stride=0
fence mask=0
commit ctx=1
copy chan=1 ctx=1 src=0x0 dst=0x100 row_bytes=0x10 rows=1 tag=0 src_stride=0 dst_stride=0   ; va 0x100 unmapped in ctx 1
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


# --------------------------------------------------------------- register API

def test_register_api():
    st = register("STATUS")
    assert st.field("cause") == field("STATUS", "cause")
    assert (field("STATUS", "cause").lsb, field("STATUS", "cause").width) == (8, 6)
    assert field("STATUS", "fault_valid").mask == 1 << 17
    assert field("TLB_INFO", "dev").byte_lanes == range(2, 3)
    v = encode("STATUS", status=Status.FAULT, cause=Cause.NOT_MAPPED, fault_valid=1)
    assert v == Status.FAULT | Cause.NOT_MAPPED << 8 | 1 << 17
    assert decode("STATUS", v) == {"status": Status.FAULT, "cause": Cause.NOT_MAPPED,
                                   "fault_overflow": 0, "fault_valid": 1}
    info = encode("FAULT_INFO", chan=3, ctx=2, cause=5, valid=1)
    assert info == 3 | 2 << 8 | 5 << 16 | 1 << 31 and decode("FAULT_INFO", info)["ctx"] == 2
    assert decode("FAULT_INFO", 0xFFFF_FFFF) == {"chan": 15, "ctx": 15, "cause": 63, "valid": 1}
    with pytest.raises(KeyError, match="register STATUS has no field 'nope'"):
        field("STATUS", "nope")
    with pytest.raises(KeyError, match="no register 'NOPE'"):
        decode("NOPE", 0)
    with pytest.raises(ValueError, match="Field 'status' holds 3 bits, not 8"):
        encode("STATUS", status=8)
    for r in REGISTERS:               # every register round-trips through its fields
        ones = sum(f.mask for f in r.fields)
        assert r.encode(**r.decode(0xFFFF_FFFF)) == ones
        assert r.writable == (r.access != "RO")
        assert not r.writable or r.fields, f"{r.name} is writable and has no field"


# -------------------------------------------------- AXI4-Lite master and models

class AxiMaster:
    """An AXI4-Lite master for testbenches that checks the slave's side of the
    protocol: B and R only after their address (and data) handshakes, and held
    with stable contents until BREADY / RREADY. ``rng`` adds random delays
    between AW and W, and holds BREADY / RREADY low for random times."""

    def __init__(self, ctx, bus, rng=None, *, max_delay=3, max_hold=6):
        self.ctx, self.bus, self.rng = ctx, bus, rng
        self.max_delay, self.max_hold = max_delay, max_hold
        self.last = {}          # edge numbers of the last transaction's handshakes

    def _rand(self, hi):
        return self.rng.randint(0, hi) if self.rng is not None else 0

    async def write(self, addr, data, strb=0xF, *, aw_delay=None, w_delay=None, b_hold=None):
        ctx, bus = self.ctx, self.bus
        aw_delay = self._rand(self.max_delay) if aw_delay is None else aw_delay
        w_delay = self._rand(self.max_delay) if w_delay is None else w_delay
        b_hold = self._rand(self.max_hold) if b_hold is None else b_hold
        ctx.set(bus.awaddr, addr)
        ctx.set(bus.wdata, data)
        ctx.set(bus.wstrb, strb)
        t, aw_at, w_at, b_seen, held = 0, None, None, None, None
        while True:
            aw_on, w_on = aw_at is None and t >= aw_delay, w_at is None and t >= w_delay
            bready = b_seen is not None and t >= b_seen + b_hold
            ctx.set(bus.awvalid, aw_on)
            ctx.set(bus.wvalid, w_on)
            ctx.set(bus.bready, bready)
            _, _, awr, wr, bv, br = await ctx.tick().sample(bus.awready, bus.wready, bus.bvalid,
                                                             bus.bresp)
            if held is not None:
                assert bv and br == held, "BVALID dropped or BRESP changed before BREADY"
            if bv:
                assert aw_at is not None and w_at is not None, "B before the AW and W handshakes"
                b_seen = t if b_seen is None else b_seen
            if aw_on and awr:
                aw_at = t
            if w_on and wr:
                w_at = t
            if bv and bready:
                ctx.set(bus.awvalid, 0)
                ctx.set(bus.wvalid, 0)
                ctx.set(bus.bready, 0)
                self.last = {"aw": aw_at, "w": w_at, "b": b_seen, "done": t}
                return int(br)
            held = int(br) if bv else None
            t += 1

    async def read(self, addr, *, r_hold=None):
        ctx, bus = self.ctx, self.bus
        r_hold = self._rand(self.max_hold) if r_hold is None else r_hold
        ctx.set(bus.araddr, addr)
        t, ar_at, r_seen, held = 0, None, None, None
        while True:
            ar_on = ar_at is None
            rready = r_seen is not None and t >= r_seen + r_hold
            ctx.set(bus.arvalid, ar_on)
            ctx.set(bus.rready, rready)
            _, _, arr, rv, rd, rr = await ctx.tick().sample(bus.arready, bus.rvalid, bus.rdata,
                                                            bus.rresp)
            if held is not None:
                assert rv and (int(rd), int(rr)) == held, "RVALID dropped or R changed before RREADY"
            if rv:
                assert ar_at is not None, "R before the AR handshake"
                r_seen = t if r_seen is None else r_seen
            if ar_on and arr:
                ar_at = t
            if rv and rready:
                ctx.set(bus.arvalid, 0)
                ctx.set(bus.rready, 0)
                self.last = {"ar": ar_at, "r": r_seen, "done": t}
                return int(rd), int(rr)
            held = (int(rd), int(rr)) if rv else None
            t += 1

    async def write_reg(self, name, value, strb=0xF, **kw):
        return await self.write(register(name).offset, value, strb, **kw)

    async def read_reg(self, name, **kw):
        return await self.read(register(name).offset, **kw)


def stream_sink(stream, fields, log, rng=None, stall=0.0):
    """A background consumer of ``stream`` that stalls at random and checks the
    producer's side of the contract: once offered, ``valid`` stays up and the
    payload stays the same until ``ready``. Appends accepted payloads to ``log``."""
    async def run(ctx):
        held = None
        while True:
            ready = not (rng is not None and rng.random() < stall)
            ctx.set(stream.ready, ready)
            _, _, valid, *vals = await ctx.tick().sample(
                stream.valid, *[getattr(stream.p, f) for f in fields])
            vals = tuple(int(v) for v in vals)
            if held is not None:
                assert valid and vals == held, f"valid dropped or payload changed: {held} -> {vals}"
            if valid and ready:
                log.append(vals)
            held = vals if valid and not ready else None
    return run


class MemoryModel:
    """The memory behind a host port's window: ``mem_w`` with byte enables and
    ``mem_r`` (request, response after a random latency), both stalling at random
    and both checked for the stream contract."""

    def __init__(self, port, words, data_width, rng, stall=0.0):
        self.port, self.rng, self.stall = port, rng, stall
        self.bytes = data_width // 8
        self.words = [rng.getrandbits(data_width) for _ in range(words)]
        self.stores = []

    def apply(self, addr, data, be):
        old = self.words[addr]
        for b in range(self.bytes):
            if be >> b & 1:
                old = old & ~(0xFF << 8 * b) | (data >> 8 * b & 0xFF) << 8 * b
        self.words[addr] = old

    def processes(self):
        p = self.port

        async def serve_writes(ctx):
            held = None
            while True:
                ready = self.rng.random() >= self.stall
                ctx.set(p.mem_w.ready, ready)
                _, _, valid, a, d, be = await ctx.tick().sample(p.mem_w.valid, p.mem_w.p.addr,
                                                                p.mem_w.p.data, p.mem_w.p.be)
                vals = (int(a), int(d), int(be))
                if held is not None:
                    assert valid and vals == held, f"mem_w: {held} -> {vals} before ready"
                if valid and ready:
                    self.stores.append(vals)
                    self.apply(*vals)
                held = vals if valid and not ready else None

        async def serve_reads(ctx):
            held = None
            ctx.set(p.mem_r.rsp.valid, 0)
            while True:
                ready = self.rng.random() >= self.stall
                ctx.set(p.mem_r.req.ready, ready)
                _, _, valid, a = await ctx.tick().sample(p.mem_r.req.valid, p.mem_r.req.payload)
                if held is not None:
                    assert valid and int(a) == held, f"mem_r.req: {held} -> {int(a)} before ready"
                held = int(a) if valid and not ready else None
                if valid and ready:
                    ctx.set(p.mem_r.req.ready, 0)
                    for _ in range(self.rng.randint(0, 3)):
                        await ctx.tick()
                    ctx.set(p.mem_r.rsp.valid, 1)
                    ctx.set(p.mem_r.rsp.payload, self.words[int(a)])
                    await ctx.tick().until(p.mem_r.rsp.ready)
                    ctx.set(p.mem_r.rsp.valid, 0)

        return [serve_writes, serve_reads]


def make_port(arch, *, device=0, data_width=64):
    return HostPort(Coprocessor(arch, device=device, data_width=data_width), data_width=data_width)


# --------------------------------------------------------- parameter registers

ARCH_A = ArchParams(devices=3, mem_bytes=1 << 16, page_sizes=(512, 2048, 8192, 32768),
                    tlb_entries=24, contexts=5, channels=6, semaphores=11, imem_words=48,
                    addr_bits=21)
ARCH_B = ArchParams(devices=7, mem_bytes=12288, page_sizes=(4096, 16384, 65536, 1 << 20),
                    tlb_entries=13, contexts=9, channels=1, semaphores=200, imem_words=100,
                    addr_bits=34)


def expected_parameters(arch, data_width):
    """What each ``P_*`` register must read, written out from the architecture."""
    return {"P_DEVICES": arch.devices, "P_MEM_BYTES": arch.mem_bytes,
            "P_PAGE_SIZE0": arch.page_sizes[0], "P_PAGE_SIZE1": arch.page_sizes[1],
            "P_PAGE_SIZE2": arch.page_sizes[2], "P_PAGE_SIZE3": arch.page_sizes[3],
            "P_TLB_ENTRIES": arch.tlb_entries, "P_CONTEXTS": arch.contexts,
            "P_CHANNELS": arch.channels, "P_SEMAPHORES": arch.semaphores,
            "P_IMEM_WORDS": arch.imem_words, "P_ADDR_BITS": arch.addr_bits,
            "P_BUS_BITS": data_width}


@pytest.mark.parametrize("arch, device, data_width", [(ARCH_A, 2, 128), (ARCH_B, 6, 32)],
                         ids=["archA-dev2-128", "archB-dev6-32"])
def test_parameter_registers(arch, device, data_width):
    """Every P_* register (13), DEVICE, ID and ISA_VERSION read back and compared
    with the architecture the port was built from; within each architecture all
    13 values differ, so two swapped registers fail."""
    expected = expected_parameters(arch, data_width)
    assert set(expected) == {r.name for r in REGISTERS if r.name.startswith("P_")}
    assert len(expected) == 13 and len(set(expected.values())) == 13
    dut = make_port(arch, device=device, data_width=data_width)
    seen = {}

    async def tb(ctx):
        axi = AxiMaster(ctx, dut.bus, random.Random(1))
        for name in list(expected) + ["DEVICE", "ID", "ISA_VERSION"]:
            seen[name] = await axi.read_reg(name)

    run_simulation(dut, [tb])
    for name, value in expected.items():
        assert seen.pop(name) == (value, OKAY), name
    assert seen == {"DEVICE": (device, OKAY), "ID": (MAGIC, OKAY),
                    "ISA_VERSION": (ISA_VERSION, OKAY)}


# ------------------------------------------------------ strobes on held registers

def merge(old, new, strb, width=32):
    """``old`` with the bytes enabled in ``strb`` taken from ``new``, cut to ``width`` bits."""
    mask = sum(0xFF << 8 * b for b in range(4) if strb >> b & 1)
    return (old & ~mask | new & mask) & ((1 << width) - 1)


STROBES = [0x1, 0x2, 0x4, 0x8, 0x3, 0xC, 0x6, 0x0, 0xF, 0x5]


def test_byte_and_halfword_writes_to_registers():
    """IMEM_ADDR (16 bits), MEM_ADDR (32) and TLB_INDEX (16, whatever the TLB's
    size: the UVM strobe sweep found it held only the index bits): every byte,
    half-word, odd and empty strobe changes exactly the enabled bytes; bytes
    above a field's width stay zero."""
    arch = ArchParams(devices=1, mem_bytes=1 << 14, page_sizes=(1024, 4096, 8192, 16384),
                      tlb_entries=1024, channels=2, imem_words=32, addr_bits=16)
    dut = make_port(arch, data_width=32)
    widths = {"IMEM_ADDR": 16, "MEM_ADDR": 32, "TLB_INDEX": 16}
    rng = random.Random(7)
    trace, want = [], []

    async def tb(ctx):
        axi = AxiMaster(ctx, dut.bus, rng)
        model = {}
        for name, width in widths.items():
            model[name] = 0xFFFF_FFFF & ((1 << width) - 1)
            assert await axi.write_reg(name, 0xFFFF_FFFF) == OKAY
            for strb in STROBES:
                value = rng.getrandbits(32)
                assert await axi.write_reg(name, value, strb) == OKAY
                model[name] = merge(model[name], value, strb, width)
                trace.append((name, strb, (await axi.read_reg(name))[0]))
                want.append((name, strb, model[name]))

    run_simulation(dut, [tb])
    assert trace == want


def test_strobes_on_actions_and_instruction_words():
    """IMEM_DATA0..7 are held registers (a byte write changes one byte of the
    next word stored); IMEM_DATA7 stores only when it enables a byte, is refused
    while the program runs, and holds the instruction stream's valid under
    random back-pressure; CTRL.start fires only with its byte enabled;
    FAULT_POP pops only with a byte enabled."""
    arch = ArchParams(devices=1, mem_bytes=1 << 12, page_sizes=(256, 1024, 2048, 4096),
                      tlb_entries=4, channels=2, imem_words=8, addr_bits=16)
    dut = make_port(arch, data_width=32)
    rng = random.Random(11)
    stored, starts, pops, resp = [], [], [], {}
    lanes = [rng.getrandbits(32) for _ in range(8)]

    async def pulses(ctx):
        n = 0
        while True:
            _, _, start, pop, fv = await ctx.tick().sample(dut.start, dut.fault_rd.ready,
                                                           dut.fault_rd.valid)
            n += 1
            if start:
                starts.append(n)
            if pop and fv:
                pops.append(n)

    async def tb(ctx):
        ctx.set(dut.fault_rd.valid, 1)
        axi = AxiMaster(ctx, dut.bus, rng)
        assert await axi.write_reg("IMEM_ADDR", 2) == OKAY
        for i, v in enumerate(lanes):
            assert await axi.write_reg(f"IMEM_DATA{i}", v) == OKAY
        assert await axi.write_reg("IMEM_DATA3", 0xA5A5_A5A5, 0x2) == OKAY
        assert await axi.write_reg("IMEM_DATA7", 0x0000_00C3, 0x1) == OKAY       # stores
        assert await axi.write_reg("IMEM_DATA7", 0x1234_5678, 0x0) == OKAY       # no store
        assert await axi.write_reg("IMEM_DATA0", 0x7700_0000, 0x8) == OKAY
        assert await axi.write_reg("IMEM_DATA7", 0xEE00_0000, 0xC) == OKAY       # stores
        resp["addr"] = (await axi.read_reg("IMEM_ADDR"))[0]
        ctx.set(dut.status, StatusCode.RUNNING)
        resp["running"] = await axi.write_reg("IMEM_DATA7", 0, 0xF)
        ctx.set(dut.status, StatusCode.HALTED)
        assert await axi.write_reg("IMEM_ADDR", arch.imem_words) == OKAY
        resp["beyond"] = await axi.write_reg("IMEM_DATA7", 0, 0xF)
        resp["n_before_ctrl"] = len(starts)
        for strb in (0xE, 0x0, 0x1):                   # only the last one enables start
            assert await axi.write_reg("CTRL", 1, strb) == OKAY
        for strb in (0x0, 0x4):
            assert await axi.write_reg("FAULT_POP", 0, strb) == OKAY

    sink = stream_sink(dut.imem_w, ("addr", "data"), stored, rng, stall=0.6)
    run_simulation(dut, [tb], [pulses, sink])
    first = sum(v << 32 * i for i, v in enumerate(lanes))
    second = first & ~(0xFF << 104 | 0xFF << 224) | 0xA5 << 104 | 0xC3 << 224   # lane 3 byte 1, lane 7 byte 0
    third = second & ~(0xFF << 24 | 0xFFFF << 240) | 0x77 << 24 | 0xEE00 << 240    # lane 0 byte 3, lane 7 bytes 2-3
    assert stored == [(2, first), (3, second), (4, third)]
    assert resp == {"addr": 5, "running": SLVERR, "beyond": SLVERR, "n_before_ctrl": 0}
    assert len(starts) == 1 and len(pops) == 1


# --------------------------------------------------------------- memory window

@pytest.mark.parametrize("data_width", [32, 64, 128])
def test_memory_window_strobes_and_back_pressure(data_width):
    """Back-to-back random writes and reads through the memory window with
    random byte strobes, random AW/W skew, BREADY / RREADY held low for random
    times and a memory that stalls its write and read ports at random, against
    a reference of the documented behaviour: MEM_WDATA lanes collect bytes,
    the top lane stores exactly the bytes written since the last store."""
    words = 16
    arch = ArchParams(devices=1, mem_bytes=words * data_width // 8,
                      page_sizes=(64, 128, 256, 512), tlb_entries=4, channels=2,
                      imem_words=8, addr_bits=16)
    dut = make_port(arch, data_width=data_width)
    rng = random.Random(data_width)
    mem = MemoryModel(dut, words, data_width, rng, stall=0.5)
    ref = list(mem.words)
    lanes, nbytes = data_width // 32, data_width // 8
    reads, want = [], []

    async def tb(ctx):
        axi = AxiMaster(ctx, dut.bus, rng)
        addr, lane, be = 0, [0] * lanes, 0
        assert await axi.write_reg("MEM_ADDR", 0) == OKAY
        for _ in range(60):
            op = rng.random()
            if op < 0.6:
                i, strb, v = rng.randrange(lanes), rng.choice(STROBES), rng.getrandbits(32)
                assert await axi.write_reg(f"MEM_WDATA{i}", v, strb) == OKAY
                lane[i] = merge(lane[i], v, strb)
                be |= strb << 4 * i
                if i == lanes - 1 and strb:
                    data = sum(x << 32 * k for k, x in enumerate(lane))
                    for b in range(nbytes):
                        if be >> b & 1:
                            ref[addr % words] = (ref[addr % words] & ~(0xFF << 8 * b)
                                                 | (data >> 8 * b & 0xFF) << 8 * b)
                    addr, be = addr + 1, 0
            elif op < 0.75:
                addr = rng.randrange(words)
                strb = rng.choice([0xF, 0x1])
                assert await axi.write_reg("MEM_ADDR", addr, strb) == OKAY
            elif op < 0.9:
                assert await axi.write_reg("MEM_READ", 0, rng.choice([0xF, 0x2])) == OKAY
                got = [(await axi.read_reg(f"MEM_RDATA{k}"))[0] for k in range(lanes)]
                reads.append(sum(x << 32 * k for k, x in enumerate(got)))
                want.append(ref[addr % words])
                addr += 1
            else:
                reads.append((await axi.read_reg("MEM_ADDR"))[0])
                want.append(addr)

    run_simulation(dut, [tb], mem.processes())
    assert reads == want
    assert mem.words == ref
    assert len(mem.stores) > 5 and any(be != (1 << nbytes) - 1 for _, _, be in mem.stores)


def test_word_write_timing_and_aw_w_order():
    """AW and W in the same cycle, AW first and W first by 1..4 cycles: the
    write lands and B comes three cycles after the later handshake (the address
    is decoded into a register first); reads answer the cycle after AR."""
    dut = make_port(ARCH, data_width=32)
    seen = []

    async def tb(ctx):
        axi = AxiMaster(ctx, dut.bus)
        for k, (aw, w) in enumerate([(0, 0)] + [(0, d) for d in range(1, 5)]
                                    + [(d, 0) for d in range(1, 5)]):
            assert await axi.write_reg("MEM_ADDR", 0x100 + k, aw_delay=aw, w_delay=w,
                                       b_hold=0) == OKAY
            last = dict(axi.last)
            value = await axi.read_reg("MEM_ADDR", r_hold=0)
            seen.append((aw, w, last["aw"], last["w"], last["b"], value, axi.last["r"]))

    run_simulation(dut, [tb])
    for k, (aw, w, aw_at, w_at, b_at, value, r_at) in enumerate(seen):
        assert (aw_at, w_at) == (aw, w)
        assert b_at == max(aw, w) + 3, seen[k]
        assert value == (0x100 + k, OKAY) and r_at == 1


# ------------------------------------------------- system: windows, strobes

def test_byte_stores_through_the_memory_and_tlb_windows():
    """On a whole device (64-bit bus, real memory and MMU): a byte and a
    half-word store through MEM_WDATA change only those bytes of memory;
    a byte write of TLB_INDEX selects the TLB entry its low byte names; an
    index past the last entry reads back whole and shows an invalid entry."""
    arch = ArchParams(devices=2, mem_bytes=1 << 12, page_sizes=(256, 1024, 2048, 4096),
                      tlb_entries=8, channels=2, imem_words=16, addr_bits=16)
    program = assemble("version 1\nremap ctx=1 size=1 perm=rw staged=0 dev=1 va=0x400 pa=0x800\n"
                       "halt\n", "p.s")
    mem = random.Random(5).randbytes(arch.mem_bytes)
    system = System(arch, data_width=64, programs=[[], program], memories=[b"", mem])
    seen = {}

    async def tb(ctx):
        axi = AxiMaster(ctx, system.host[1], random.Random(2))
        seen["device"] = await axi.read_reg("DEVICE")
        assert await axi.write_reg("MEM_ADDR", 5) == OKAY
        assert await axi.write_reg("MEM_WDATA1", 0x00AB_0000, 0x4) == OKAY     # word 5, byte 6
        assert await axi.write_reg("MEM_WDATA0", 0x0000_BEEF, 0x3) == OKAY     # bytes 0, 1 ...
        assert await axi.write_reg("MEM_WDATA1", 0, 0x0) == OKAY               # (no store)
        assert await axi.write_reg("MEM_WDATA1", 0, 0x8) == OKAY               # ... and 7: word 6
        seen["mem"] = system.devices[1].mem.sim_read(ctx, 0, 8 * 8)
        seen["mem_addr"] = (await axi.read_reg("MEM_ADDR"))[0]
        assert await axi.write_reg("CTRL", 1) == OKAY
        while decode("STATUS", (await axi.read_reg("STATUS"))[0])["status"] == Status.RUNNING:
            pass
        assert await axi.write_reg("TLB_INDEX", 0xFFFF_FF07, 0x1) == OKAY
        seen["index7"] = (await axi.read_reg("TLB_INDEX"))[0]
        assert await axi.write_reg("TLB_INDEX", 0xFFFF_FF00, 0x1) == OKAY
        seen["index0"] = (await axi.read_reg("TLB_INDEX"))[0]
        seen["tlb"] = decode("TLB_INFO", (await axi.read_reg("TLB_INFO"))[0])
        seen["vpn"] = (await axi.read_reg("TLB_VPN"))[0]
        assert await axi.write_reg("TLB_INDEX", 0x0000_0800) == OKAY      # 0x800: past entry 7
        seen["far"] = [(await axi.read_reg(r))[0] for r in ("TLB_INDEX", "TLB_INFO", "TLB_VPN", "TLB_PPN")]
        assert await axi.write_reg("TLB_INDEX", 8) == OKAY                        # 8 aliases 0 in 3 bits
        seen["past"] = [(await axi.read_reg(r))[0] for r in ("TLB_INDEX", "TLB_INFO", "TLB_VPN", "TLB_PPN")]

    run_simulation(system, [tb])
    assert seen["device"] == (1, OKAY)
    want = bytearray(mem[:64])
    want[5 * 8 + 6] = 0xAB                                      # word 5: byte 6 only
    want[6 * 8 + 0], want[6 * 8 + 1], want[6 * 8 + 7] = 0xEF, 0xBE, 0x00  # word 6: 0, 1, 7
    assert seen["mem"] == bytes(want)
    assert seen["mem_addr"] == 7
    assert seen["index7"] == 7 and seen["index0"] == 0
    assert seen["tlb"] == {"valid": 1, "staged": 0, "size": 1, "perm": 3, "ctx": 1, "dev": 1}
    assert seen["vpn"] == 0x400 // 256
    assert seen["far"] == [0x800, 0, 0, 0] and seen["past"] == [8, 0, 0, 0]
