"""Shared simulation helpers for the block tests (and the block benchmarks).

* :func:`run_simulation` runs testbenches on a design with a 100 MHz clock; with
  ``RESHARD_VCD=1`` in the environment it also writes
  ``build/vcd/<test>.vcd`` and ``<test>.gtkw`` (the name comes from the
  running pytest test, or the ``name`` argument).
* :func:`stream_put` / :func:`stream_get` move one payload over an
  ``amaranth.lib.stream`` interface, optionally after random idle cycles
  (producer) or under random back-pressure (consumer).
* :class:`DmaHarness` joins a DMA, an MMU and (optionally) a BankedMemory;
  :class:`MemoryModel` is a background device model that serves a DMA's read
  and write ports with random stalls, random read latency and out-of-order
  write acknowledgements.
"""
from __future__ import annotations

import os
import re
from collections import deque
from pathlib import Path

from amaranth.hdl import Elaboratable, Module, Signal
from amaranth.lib import wiring
from amaranth.sim import Simulator

from hw.dma import DMA
from hw.memory import BankedMemory
from hw.mmu import MMU, MmuOp

ROOT = Path(__file__).resolve().parent.parent


def _test_name():
    cur = os.environ.get("PYTEST_CURRENT_TEST", "sim")
    cur = cur.split(" ")[0].split("::", 1)[-1]
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", cur).strip("_")[:150] or "sim"


def _default_traces(dut):
    """The ports of ``dut`` (or of the DMA and MMU of a DmaHarness) for the .gtkw file."""
    comps = [dut.dma, dut.mmu] if isinstance(dut, DmaHarness) else [dut]
    out = []
    for comp in comps:
        if isinstance(comp, wiring.Component):
            for path, _member, value in comp.signature.flatten(comp):
                out.append(value)
    return out


def run_simulation(dut, testbenches=(), background=(), *, name=None, traces=(), clock=1e-8):
    """Simulate ``dut``; each element of ``testbenches`` / ``background`` is an
    ``async def tb(ctx)``. Background ones are device models (they do not keep
    the simulation alive). Returns the simulator."""
    sim = Simulator(dut)
    sim.add_clock(clock)
    for tb in testbenches:
        sim.add_testbench(tb)
    for tb in background:
        sim.add_testbench(tb, background=True)
    if os.environ.get("RESHARD_VCD") == "1":
        out = ROOT / "build" / "vcd"
        out.mkdir(parents=True, exist_ok=True)
        stem = name or _test_name()
        if not traces:
            traces = _default_traces(dut)
        with sim.write_vcd(str(out / f"{stem}.vcd"), str(out / f"{stem}.gtkw"),
                           traces=traces):
            sim.run()
    else:
        sim.run()
    return sim


async def idle(ctx, rng, prob):
    """Wait a random number of cycles: each further cycle with probability ``prob``."""
    while rng is not None and prob and rng.random() < prob:
        await ctx.tick()


async def stream_put(ctx, stream, payload, *, rng=None, idle_prob=0.0):
    """Send one ``payload`` on ``stream`` (we drive valid/payload)."""
    await idle(ctx, rng, idle_prob)
    ctx.set(stream.valid, 1)
    ctx.set(stream.payload, payload)
    await ctx.tick().until(stream.ready)
    ctx.set(stream.valid, 0)


async def stream_get(ctx, stream, *, rng=None, bp_prob=0.0):
    """Receive one payload from ``stream`` (we drive ready), with random back-pressure."""
    while True:
        ready = not (rng is not None and bp_prob and rng.random() < bp_prob)
        ctx.set(stream.ready, ready)
        _, _, valid, payload = await ctx.tick().sample(stream.valid, stream.payload)
        if ready and valid:
            ctx.set(stream.ready, 0)
            return payload


def mmu_command(op, ctx=0, size=0, perm=0, staged=0, dev=0, va=0, pa=0):
    return {"op": MmuOp[op] if isinstance(op, str) else op, "ctx": ctx, "size": size,
            "perm": perm, "staged": staged, "dev": dev, "va": va, "pa": pa}


class DmaHarness(Elaboratable):
    """A DMA with its MMU, optionally with a real local BankedMemory.

    With ``memory=True`` the DMA reads ``mem`` and writes to it when a beat's
    ``dev`` is ``local_dev`` (acknowledged in the same cycle); other beats
    leave on ``remote`` (a ``wr``-shaped stream; the testbench acknowledges
    them on ``remote_ack``). With ``memory=False`` the DMA's ``rd``, ``wr``
    and ``wr_ack`` are left to a :class:`MemoryModel`.

    ``gate_req`` / ``gate_rsp`` (testbench-driven, default 1) stall the
    DMA-MMU streams to inject idle cycles there.
    """

    def __init__(self, arch, *, memory=False, local_dev=0, init=b"", banks=2, **dma_kw):
        self.arch = arch
        self.local_dev = local_dev
        self.dma = DMA(arch, **dma_kw)
        self.mmu = MMU(arch, local_dev=local_dev, tag_width=0)
        self.gate_req = Signal(init=1)
        self.gate_rsp = Signal(init=1)
        self.memory = memory
        if memory:
            self.mem = BankedMemory(data_width=self.dma.data_width, size=arch.mem_bytes,
                                    banks=banks, init=init)
            self.remote = self.dma.wr.signature.create(path=("remote",))
            self.remote_ack = self.dma.wr_ack.signature.flip().create(path=("remote_ack",))

    def elaborate(self, platform):
        m = Module()
        m.submodules.dma = dma = self.dma
        m.submodules.mmu = mmu = self.mmu
        m.d.comb += [
            mmu.req.valid.eq(dma.xlat_req.valid & self.gate_req),
            mmu.req.payload.eq(dma.xlat_req.payload),
            dma.xlat_req.ready.eq(mmu.req.ready & self.gate_req),
            dma.xlat_rsp.valid.eq(mmu.rsp.valid & self.gate_rsp),
            dma.xlat_rsp.payload.eq(mmu.rsp.payload),
            mmu.rsp.ready.eq(dma.xlat_rsp.ready & self.gate_rsp),
        ]
        if self.memory:
            m.submodules.mem = mem = self.mem
            wiring.connect(m, dma.rd, mem.read[0])
            local = dma.wr.p.dev == self.local_dev
            local_fire = dma.wr.valid & local
            m.d.comb += [
                mem.write[0].valid.eq(local_fire),
                mem.write[0].p.addr.eq(dma.wr.p.addr),
                mem.write[0].p.data.eq(dma.wr.p.data),
                mem.write[0].p.be.eq(dma.wr.p.be),
                self.remote.valid.eq(dma.wr.valid & ~local),
                self.remote.payload.eq(dma.wr.payload),
                dma.wr.ready.eq(local | self.remote.ready),
                # acks: a local write is visible once accepted; remote acks wait a cycle
                dma.wr_ack.valid.eq(local_fire | self.remote_ack.valid),
                dma.wr_ack.payload.eq(self.remote_ack.payload),
                self.remote_ack.ready.eq(~local_fire),
            ]
            with m.If(local_fire):
                m.d.comb += dma.wr_ack.payload.eq(dma.wr.p.chan)
        return m


class MemoryModel:
    """Background model of local + remote memories behind a DMA's ``rd``/``wr``.

    ``mems[d]`` is device ``d``'s memory (a bytearray, modified in place).
    Reads come from ``mems[local_dev]`` with a random latency; each stream is
    stalled with probability ``stall``; each write beat is acknowledged after
    a random delay, in any order.
    """

    def __init__(self, dma, mems, *, local_dev=0, rng=None, stall=0.0, latency=(1, 4),
                 ack_delay=(0, 6)):
        self.dma = dma
        self.mems = mems
        self.local_dev = local_dev
        self.rng = rng
        self.stall = stall
        self.latency = latency
        self.ack_delay = ack_delay
        self.B = dma.data_width // 8
        self.writes = 0

    def _go(self):
        return self.rng is None or not self.stall or self.rng.random() >= self.stall

    async def run(self, ctx):
        dma, B = self.dma, self.B
        rd, wr, ack = dma.rd, dma.wr, dma.wr_ack
        reads = deque()          # (due cycle, data)
        acks = []                # (due cycle, chan)
        cycle = 0
        last_due = 0
        mem = self.mems[self.local_dev]
        while True:
            ctx.set(rd.req.ready, self._go())
            if reads and reads[0][0] <= cycle:
                ctx.set(rd.rsp.valid, 1)
                ctx.set(rd.rsp.payload, reads[0][1])
            else:
                ctx.set(rd.rsp.valid, 0)
            ctx.set(wr.ready, self._go())
            due = [i for i, (t, _) in enumerate(acks) if t <= cycle]
            if due:
                pick = due[self.rng.randrange(len(due))] if self.rng else due[0]
                ctx.set(ack.valid, 1)
                ctx.set(ack.payload, acks[pick][1])
            else:
                pick = None
                ctx.set(ack.valid, 0)
            (_, _, rq_v, rq_r, rq_a, rs_v, rs_r, w_v, w_r, w_p, a_v, a_r) = \
                await ctx.tick().sample(rd.req.valid, rd.req.ready, rd.req.payload,
                                        rd.rsp.valid, rd.rsp.ready, wr.valid, wr.ready,
                                        wr.payload, ack.valid, ack.ready)
            if rs_v and rs_r:
                reads.popleft()
            if rq_v and rq_r:
                a = rq_a * B
                lo, hi = self.latency
                lat = self.rng.randint(lo, hi) if self.rng else lo
                last_due = max(last_due, cycle + lat)
                reads.append((last_due, int.from_bytes(mem[a:a + B], "little")))
            if w_v and w_r:
                dst = self.mems[w_p.dev]
                base = w_p.addr * B
                dat = int(w_p.data).to_bytes(B, "little")
                be = int(w_p.be)
                for lane in range(B):
                    if be >> lane & 1:
                        dst[base + lane] = dat[lane]
                lo, hi = self.ack_delay
                d = self.rng.randint(lo, hi) if self.rng else lo
                acks.append((cycle + 1 + d, int(w_p.chan)))
                self.writes += 1
            if a_v and a_r and pick is not None:
                acks.pop(pick)
            cycle += 1


class TlbModel:
    """Plain-Python model of the architectural TLB (docs/isa.md): placement,
    INVAL, COMMIT and lowest-index-wins translation, with fault causes."""

    NONE, NOT_MAPPED, NO_READ, NO_WRITE, REMOTE_READ, OUT_OF_RANGE = range(6)

    def __init__(self, arch, local_dev=0):
        self.arch = arch
        self.local_dev = local_dev
        self.entries = [None] * arch.tlb_entries     # dict or None
        self.victim = 0

    def remap(self, ctx, size, perm, staged, dev, va, pa):
        page = self.arch.page_sizes[size]
        new = dict(ctx=ctx, staged=staged, size=size, perm=perm, dev=dev,
                   va=va & ~(page - 1), pa=pa & ~(page - 1))
        key = (ctx, staged, size, new["va"])
        for i, e in enumerate(self.entries):
            if e is not None and (e["ctx"], e["staged"], e["size"], e["va"]) == key:
                self.entries[i] = new
                return i
        for i, e in enumerate(self.entries):
            if e is None:
                self.entries[i] = new
                return i
        i = self.victim
        self.entries[i] = new
        self.victim = (self.victim + 1) % len(self.entries)
        return i

    def inval(self, ctx, size, staged, va):
        va &= ~(self.arch.page_sizes[size] - 1)
        for i, e in enumerate(self.entries):
            if e is not None and (e["ctx"], e["staged"], e["size"], e["va"]) == (ctx, staged, size, va):
                self.entries[i] = None

    def commit(self, ctx):
        for i, e in enumerate(self.entries):
            if e is not None and e["ctx"] == ctx:
                if e["staged"]:
                    e["staged"] = 0
                else:
                    self.entries[i] = None

    def apply(self, cmd):
        cmd = mmu_command(**cmd)
        op = cmd["op"].name
        if op == "REMAP":
            self.remap(cmd["ctx"], cmd["size"], cmd["perm"], cmd["staged"], cmd["dev"],
                       cmd["va"], cmd["pa"])
        elif op == "INVAL":
            self.inval(cmd["ctx"], cmd["size"], cmd["staged"], cmd["va"])
        else:
            self.commit(cmd["ctx"])

    def translate(self, ctx, va, write):
        """(pa, dev, cause) for one access."""
        for e in self.entries:
            if e is None or e["staged"] or e["ctx"] != ctx:
                continue
            page = self.arch.page_sizes[e["size"]]
            if va & ~(page - 1) & ((1 << self.arch.addr_bits) - 1) == e["va"]:
                pa = e["pa"] + (va - e["va"])
                if write and not e["perm"] & 2:
                    return pa, e["dev"], self.NO_WRITE
                if not write and not e["perm"] & 1:
                    return pa, e["dev"], self.NO_READ
                if not write and e["dev"] != self.local_dev:
                    return pa, e["dev"], self.REMOTE_READ
                if pa >= self.arch.mem_bytes:
                    return pa, e["dev"], self.OUT_OF_RANGE
                return pa, e["dev"], self.NONE
        return 0, 0, self.NOT_MAPPED

    def rtl_view(self):
        """Entries as the RTL stores them (vpn/ppn in smallest pages), None for invalid."""
        p0 = self.arch.page_sizes[0]
        out = []
        for e in self.entries:
            if e is None:
                out.append(None)
            else:
                out.append((e["staged"], e["ctx"], e["size"], e["perm"], e["dev"],
                            e["va"] // p0, (e["pa"] // p0) & ((1 << (self.arch.addr_bits - (p0.bit_length() - 1))) - 1)))
        return out


def rtl_tlb(ctx, mmu):
    """Read an MMU's TLB in a testbench, in the shape of :meth:`TlbModel.rtl_view`."""
    out = []
    for e in mmu.entries:
        if not ctx.get(e.valid):
            out.append(None)
        else:
            out.append((ctx.get(e.staged), ctx.get(e.ctx), ctx.get(e.size), ctx.get(e.perm),
                        ctx.get(e.dev), ctx.get(e.vpn), ctx.get(e.ppn)))
    return out


# --------------------------------------------------------------------------
# System-level helpers (coprocessor, interconnect, system and host-port tests)
# --------------------------------------------------------------------------

def golden_view(res):
    """A ``model.golden.GoldenResult`` as the :class:`gen.result.RunResult` every
    executor returns (``gen.sim_amaranth.run_system`` among them)."""
    from gen.result import golden_result
    return golden_result(res)


def compare_with_golden(arch, programs, memories, *, data_width=32, lockstep=False,
                        memories_too=True, info="", **kw):
    """Run ``programs`` on the golden model and on the RTL (``run_system``) and
    assert equal end states: statuses, causes, pcs, fault records, TLBs,
    counters and (with ``memories_too``) every byte of every memory
    (:func:`gen.result.compare_results`). Returns ``(rtl, golden)`` results."""
    from gen.result import compare_results, run_golden
    from gen.sim_amaranth import run_system
    gold = run_golden(arch, programs, memories)
    rtl = run_system(arch, programs, memories, data_width=data_width, lockstep=lockstep, **kw)
    diffs = compare_results(rtl, gold, memories=memories_too)
    assert not diffs, "\n".join(diffs) + f"\n{info}"
    return rtl, gold


def racy_copies(arch, programs, memories, *, across=True):
    """Whether the final memories of a program may depend on timing. A copy
    that reads a byte it writes (source and destination overlap: the ISA
    leaves the result unspecified, the golden model does a forward byte loop)
    always counts; with ``across``, so do two copies that may run at the same
    time (copies on different channels or devices complete in any order) where
    one writes a byte the other reads or writes. Conservative: copies are
    ordered only when both run on the same device and the later one was issued
    after the earlier one was known complete (a FENCE covering its channel, a
    REMAP, an immediate INVAL, a COMMIT). Runs an instrumented golden model."""
    from hw.isa import PERM_R, PERM_W, Op
    from model.golden import GoldenSystem

    class Tracer(GoldenSystem):
        def __init__(self, *a):
            super().__init__(*a)
            self.step = 0
            self.copies = []        # [device, chan, issue step, done step, reads, writes]

        def _exec(self, dev):
            self.step += 1
            dec = dev.imem[dev.pc] if dev.pc < self.arch.imem_words else None
            try:
                return super()._exec(dev)
            finally:
                if dec is not None and dec.op is not None and dev.status.name in ("RUNNING", "HALTED"):
                    f, op = dec.fields, dec.op
                    waited = None
                    if op is Op.FENCE and dev.status.name == "RUNNING":
                        m = f["mask"] or (1 << self.arch.channels) - 1
                        waited = {c for c in range(self.arch.channels) if m >> c & 1}
                    elif op is Op.REMAP or (op is Op.INVAL and not f["staged"]) \
                            or op in (Op.COMMIT, Op.HALT):
                        waited = set(range(self.arch.channels))
                    if waited:
                        for c in self.copies:
                            if c[0] == dev.index and c[1] in waited and c[3] is None \
                                    and c[2] < self.step:
                                c[3] = self.step

        def _copy(self, dev, chan, f):
            reads, writes = set(), set()
            amask = (1 << self.arch.addr_bits) - 1
            mb = self.arch.mem_bytes
            done = False
            for i in range(f["rows"]):
                for j in range(f["row_bytes"]):
                    sv = (f["src"] + i * f["src_stride"] + j) & amask
                    tv = (f["dst"] + i * f["dst_stride"] + j) & amask
                    s = self._lookup(dev, f["ctx"], sv)
                    if s is None or not s[4] & PERM_R or s[3] != dev.index \
                            or s[2] + sv - s[0] >= mb:
                        done = True
                        break
                    t = self._lookup(dev, f["ctx"], tv)
                    if t is None or not t[4] & PERM_W or t[2] + tv - t[0] >= mb:
                        done = True
                        break
                    reads.add(dev.index * mb + s[2] + sv - s[0])
                    writes.add(t[3] * mb + t[2] + tv - t[0])
                if done:
                    break
            self.copies.append([dev.index, chan, self.step, None, reads, writes])
            return super()._copy(dev, chan, f)

    t = Tracer(arch, programs, memories)
    t.run()
    cs = t.copies
    for i, a in enumerate(cs):
        if a[5] & a[4]:
            return True
        if not across:
            continue
        for b in cs[i + 1:]:
            if a[0] == b[0] and a[3] is not None and b[2] > a[3]:
                continue
            if a[5] & (b[4] | b[5]) or b[5] & a[4]:
                return True
    return False


async def uart_receive(ctx, tx, divisor, count):
    """Decode ``count`` 8N1 frames from the line ``tx`` (``divisor`` clock
    cycles per bit, sampled mid-bit); returns the bytes."""
    out = bytearray()
    for _ in range(count):
        while ctx.get(tx):                       # wait for the start bit
            await ctx.tick()
        await ctx.tick().repeat(divisor // 2)
        assert ctx.get(tx) == 0, "start bit not low at mid-bit"
        byte = 0
        for i in range(8):
            await ctx.tick().repeat(divisor)
            byte |= ctx.get(tx) << i
        await ctx.tick().repeat(divisor)
        assert ctx.get(tx) == 1, "stop bit not high"
        out.append(byte)
    return bytes(out)


def stream_monitor(stream, name, log=None, *, unless=None):
    """Background testbench checking the stream contract: an offer that is
    not taken stays, unchanged, until it is. Appends each transfer's payload
    (as an integer) to ``log`` when given. ``unless``: a signal that, while
    high, lets the producer withdraw its offer (a flush)."""
    from amaranth.hdl import Value

    async def mon(ctx):
        held = None
        async for _, _, valid, ready, payload, exempt in ctx.tick().sample(
                stream.valid, stream.ready, Value.cast(stream.payload),
                Value.cast(0 if unless is None else unless)):
            if held is not None and not exempt:
                assert valid and payload == held, f"{name}: an offer was withdrawn or changed"
            held = payload if valid and not ready else None
            if valid and ready and log is not None:
                log.append(payload)
    return mon


class FixedPriority(wiring.Component):
    """:class:`hw.lib.RoundRobin`'s interface with fixed priority (requester 0
    first): the arbiter a fairness test must reject."""

    def __init__(self, count):
        from amaranth.lib.wiring import In, Out
        self._count = count
        super().__init__({"requests": In(count), "grant": Out(range(max(2, count))),
                          "valid": Out(1), "advance": In(1)})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.valid.eq(self.requests.any())
        for c in reversed(range(self._count)):
            with m.If(self.requests[c]):
                m.d.comb += self.grant.eq(c)
        return m
