# amaranth: UnusedElaboratable=no
"""The DMA's stages one by one: each stage's stream contract under random
idle cycles and back-pressure (every accepted payload is the right one, in
order; a payload offered and not taken stays offered unchanged), against a
plain-Python model of what the stage must produce."""
import random

import pytest

from hw.dma import DmaGeometry
from hw.dma.completion import Completion
from hw.dma.frontend import FrontEnd
from hw.dma.layouts import CmdKind, GrantOp
from hw.dma.reader import Reader
from hw.dma.translate import Translator
from hw.dma.walker import Walker
from hw.dma.writer import Writer
from hw.isa import ArchParams
from gen.simkit import TlbModel, run_simulation, stream_get, stream_put

ARCH = ArchParams(devices=2, mem_bytes=1 << 16, page_sizes=(1024, 4096, 16384, 65536),
                  tlb_entries=32, contexts=4, channels=4, addr_bits=20)
AMASK = (1 << ARCH.addr_bits) - 1


def geometry(width=32, channels=4, burst_len=16):
    return DmaGeometry(ARCH, data_width=width, channels=channels, burst_len=burst_len)


def stable(stream, log, name, key=repr):
    """Background checker: a payload offered (valid) and not taken (ready low)
    at one clock edge is offered unchanged (as far as ``key`` of it) at the next."""
    async def run(ctx):
        held = None
        async for _, _, v, r, p in ctx.tick().sample(stream.valid, stream.ready, stream.payload):
            if held is not None and not (v and key(p) == held):
                log.append(f"{name}: offered payload changed or was withdrawn")
            held = key(p) if (v and not r) else None
    return run


def beat_key(B):
    """A write beat as far as it means anything: lanes without a byte enable are don't-care."""
    def key(p):
        mask = sum(0xFF << (8 * k) for k in range(B) if int(p.be) >> k & 1)
        return (int(p.dev), int(p.addr), int(p.chan), int(p.be), int(p.data) & mask)
    return key


def consume(stream, rng, bp, out):
    """Background consumer: takes payloads under random back-pressure into ``out``."""
    async def run(ctx):
        while True:
            out.append(await stream_get(ctx, stream, rng=rng, bp_prob=bp))
    return run


# ------------------------------------------------------------------ front-end
@pytest.mark.parametrize("scratch, channels", [(True, 4), (False, 4), (True, 3)])
def test_frontend_contract(scratch, channels):
    """Descriptors come out of each channel's slots in order, one START grant
    each; a channel is granted CHUNKs only while it walks, never twice in a
    row; the grant is stable under back-pressure; a full channel blocks (with
    the scratch half, the descriptors it refuses are written there, never
    over a slot)."""
    rng = random.Random(1)
    g = geometry(channels=channels)
    dut = FrontEnd(g, scratch=scratch)
    C = g.channels
    descs = {c: [dict(chan=c, ctx=c, tag=100 * c + i, src=0x100 * i + c, dst=0x40 * i,
                      row_bytes=8 + i, rows=1 + i % 3, src_stride=16, dst_stride=32)
                 for i in range(6)] for c in range(C)}
    started = {c: [] for c in range(C)}
    log = []
    done = {"fed": False}

    async def feeder(ctx):
        queues = {c: list(v) for c, v in descs.items()}
        if C & (C - 1):       # a channel number past the last: taken and dropped
            await stream_put(ctx, dut.desc, dict(descs[0][0], chan=C, tag=999))
        while queues:
            c = rng.choice(sorted(queues))
            await stream_put(ctx, dut.desc, queues[c].pop(0), rng=rng, idle_prob=0.3)
            if not queues[c]:
                del queues[c]
        done["fed"] = True

    async def walker(ctx):
        # a model of the walker: each descriptor takes 1 + tag % 3 CHUNK grants
        left = {}
        pend = None
        prev = None
        while True:
            ready = rng.random() >= 0.3
            ctx.set(dut.grant.ready, ready)
            ctx.set(dut.walked.valid, pend is not None)
            ctx.set(dut.walked.payload, pend if pend is not None else 0)
            _, _, v, p = await ctx.tick().sample(dut.grant.valid, dut.grant.payload)
            pend = None
            if not (v and ready):
                if not v:
                    prev = None
                continue
            c, op = int(p.chan), p.op
            if prev == c:
                log.append(f"channel {c} granted twice in a row")
            prev = c
            if op == GrantOp.START:
                if c in left:
                    log.append(f"START for walking channel {c}")
                started[c].append(int(p.desc.tag))
                if int(p.desc.src0) != (descs[c][len(started[c]) - 1]["src"] - 16) & AMASK:
                    log.append("src0 is not src - src_stride")
                left[c] = 1 + int(p.desc.tag) % 3
            elif op == GrantOp.CHUNK:
                if c not in left:
                    log.append(f"CHUNK for idle channel {c}")
                    continue
                left[c] -= 1
                if left[c] == 0:
                    del left[c]
                    pend = c

    async def main(ctx):
        for _ in range(3000):
            await ctx.tick()
            if done["fed"] and all(len(started[c]) == len(descs[c]) for c in range(C)) \
                    and not ctx.get(dut.busy):
                break
        else:
            raise AssertionError(f"timeout: {started}")

    run_simulation(dut, [main], [feeder, walker, stable(dut.grant, log, "grant")])
    assert not log, log[:5]
    for c in range(C):
        assert started[c] == [d["tag"] for d in descs[c]]


# --------------------------------------------------------------------- walker
def split_chunks(g, d):
    """The chunks of descriptor ``d``: (src, dst, len, first, cont, last)."""
    out = []
    if d["rows"] == 0 or d["row_bytes"] == 0:
        return out
    p0 = ARCH.page_sizes[0]
    for r in range(d["rows"]):
        s = (d["src"] + r * d["src_stride"]) & AMASK
        t = (d["dst"] + r * d["dst_stride"]) & AMASK
        left = d["row_bytes"]
        k = 0
        while left:
            n = min(left, p0 - s % p0, g.burst_bytes - t % g.burst_bytes)
            out.append((s, t, n, r == 0 and k == 0, k > 0, False))
            s, t, left, k = (s + n) & AMASK, (t + n) & AMASK, left - n, k + 1
    out[-1] = out[-1][:5] + (True,)
    return out


@pytest.mark.parametrize("width, burst_len", [(32, 8), (64, 2), (32, 256)])
def test_walker_contract(width, burst_len):
    """Chunks cut at rows, source pages and destination burst windows, in
    order per channel, with first/cont/last/empty right; stable under
    back-pressure; ``walked`` once per descriptor. (Bursts of 8 words leave
    32 windows a page, of 2 words 64, of 256 words one.)"""
    rng = random.Random(2)
    g = geometry(width=width, burst_len=burst_len)
    dut = Walker(g)
    C = g.channels
    descs = {c: [] for c in range(C)}
    for c in range(C):
        for i in range(4):
            rows = rng.choice([0, 1, 2, 5])
            rb = rng.choice([0, 1, 3, 31, 32, 33, 100, 700])
            descs[c].append(dict(ctx=c, tag=i, src=rng.randrange(1 << 20), dst=rng.randrange(1 << 20),
                                 row_bytes=rb, rows=rows, src_stride=rng.randrange(1 << 12),
                                 dst_stride=rng.choice([rb, rb + 5, (1 << 20) - 64])))
    chunks = []
    walked = []
    log = []

    def slot(d):
        return dict(ctx=d["ctx"], tag=d["tag"], src0=(d["src"] - d["src_stride"]) & AMASK,
                    dst0=(d["dst"] - d["dst_stride"]) & AMASK, row_bytes=d["row_bytes"],
                    rows=d["rows"], src_stride=d["src_stride"], dst_stride=d["dst_stride"],
                    empty=int(d["rows"] == 0 or d["row_bytes"] == 0))

    async def granter(ctx):
        # a model of the front-end: never the same channel in consecutive grants
        queues = {c: list(v) for c, v in descs.items()}
        walking = set()
        last = None

        def note(wv, wp):
            if wv:
                walking.discard(int(wp))
                queues[int(wp)].pop(0)

        while True:
            cands = [c for c in range(C) if c != last and (c in walking or queues[c])]
            if not cands or rng.random() < 0.2:
                ctx.set(dut.grant.valid, 0)
                _, _, r, wv, wp = await ctx.tick().sample(dut.grant.ready, dut.walked.valid,
                                                          dut.walked.payload)
                note(wv, wp)
                if r:          # the walker took a bubble: any channel may follow
                    last = None
                continue
            c = rng.choice(cands)
            ctx.set(dut.grant.valid, 1)
            while True:
                # like the front-end, the op and descriptor follow ``walked`` while offered
                op = (GrantOp.CHUNK if c in walking
                      else GrantOp.START if queues[c] else GrantOp.NONE)
                if queues[c]:
                    ctx.set(dut.grant.payload, dict(chan=c, op=op, desc=slot(queues[c][0])))
                else:
                    ctx.set(dut.grant.payload.op, op)
                _, _, r, wv, wp = await ctx.tick().sample(dut.grant.ready, dut.walked.valid,
                                                          dut.walked.payload)
                note(wv, wp)
                if r:
                    break
            if op == GrantOp.START:
                walking.add(c)
            last = c

    async def walked_mon(ctx):
        async for _, _, v, p in ctx.tick().sample(dut.walked.valid, dut.walked.payload):
            if v:
                walked.append(int(p))

    async def main(ctx):
        total = sum(max(1, len(split_chunks(g, d))) for v in descs.values() for d in v)
        for _ in range(20000):
            await ctx.tick()
            if len(chunks) == total and len(walked) == sum(len(v) for v in descs.values()):
                break
        else:
            raise AssertionError("timeout")

    run_simulation(dut, [main], [granter, walked_mon, consume(dut.chunk, rng, 0.4, chunks),
                                 stable(dut.chunk, log, "chunk")])
    assert not log, log[:5]
    for c in range(C):
        want = []
        for d in descs[c]:
            parts = split_chunks(g, d)
            if not parts:
                want.append(("empty", d["tag"]))
            want += [(s, t, n, f, k, l, d["tag"], d["ctx"]) for s, t, n, f, k, l in parts]
        got = []
        for p in chunks:
            if int(p.chan) != c:
                continue
            if p.empty:
                assert p.last
                got.append(("empty", int(p.tag)))
            else:
                got.append((int(p.src), int(p.dst), int(p.len), bool(p.first), bool(p.cont),
                            bool(p.last), int(p.tag), int(p.ctx)))
        assert got == want, c
        assert walked.count(c) == len(descs[c])


# ---------------------------------------------------------------- translation
def test_translator_contract():
    """Commands carry the MMU's translations (the cache asks the MMU only on a
    new page or a descriptor's first chunk); a fault halts the channel, goes
    down as a FAULT command with its record, and the channel's later chunks
    are dropped; stable under back-pressure on both the MMU and the output."""
    rng = random.Random(3)
    g = geometry()
    dut = Translator(g)
    tlb = TlbModel(ARCH)
    for k in range(8):     # source 0..8 KiB, destination 16..24 KiB on either device
        tlb.remap(0, 0, 3, 0, 0, k * 1024, (7 - k) * 1024)
        tlb.remap(0, 0, 3, 0, k % 2, 0x4000 + k * 1024, (15 - k) * 1024)
    tlb.remap(0, 0, 1, 0, 0, 0x3000, 0)       # read-only: a write there faults
    chunks = []
    for i in range(60):
        c = rng.randrange(4)
        src = rng.randrange(0, 8 * 1024 - 16)
        dst = 0x4000 + rng.randrange(0, 8 * 1024 - 16)
        if c == 2 and i > 30:
            dst = 0x3000 + 8
        chunks.append(dict(chan=c, ctx=0, tag=i, src=src, dst=dst, len=rng.randrange(1, 16),
                           last=rng.random() < 0.3, empty=0, first=rng.random() < 0.2,
                           cont=0))
    out = []
    dropped = []
    asks = []
    log = []

    async def producer(ctx):
        for ch in chunks:
            await stream_put(ctx, dut.chunk, ch, rng=rng, idle_prob=0.3)

    async def mmu(ctx):
        while True:
            req = await stream_get(ctx, dut.xlat_req, rng=rng, bp_prob=0.3)
            va, write = int(req.va), bool(req.write)
            asks.append((va, write))
            pa, dev, cause = tlb.translate(0, va, write)
            for _ in range(rng.randrange(3)):
                await ctx.tick()
            await stream_put(ctx, dut.xlat_rsp, dict(pa=pa if not cause else 0, dev=dev,
                                                    cause=cause))

    async def drops(ctx):
        async for _, _, v, p in ctx.tick().sample(dut.dropped.valid, dut.dropped.payload):
            if v:
                dropped.append(int(p))

    async def main(ctx):
        # each chunk leaves as a command (the faulting one as the FAULT marker) or is dropped
        for _ in range(20000):
            await ctx.tick()
            if len(out) + len(dropped) == len(chunks):
                break
        else:
            raise AssertionError("timeout")

    run_simulation(dut, [main], [producer, mmu, drops, consume(dut.cmd, rng, 0.4, out),
                                 stable(dut.cmd, log, "cmd"), stable(dut.xlat_req, log, "req")])
    assert not log, log[:5]
    faulted = False
    it = iter(out)
    for ch in chunks:
        if ch["chan"] == 2 and faulted:
            continue
        cmd = next(it)
        assert int(cmd.chan) == ch["chan"] and int(cmd.tag) == ch["tag"]
        sp, _, sc = tlb.translate(0, ch["src"], False)
        dp, dd, dc = tlb.translate(0, ch["dst"], True)
        if dc:
            assert cmd.kind == CmdKind.FAULT
            f = cmd.body.fault
            assert (int(f.va), f.cause.value, int(f.ctx)) == (ch["dst"], dc, 0)
            faulted = True
            continue
        assert cmd.kind == CmdKind.DATA
        mv = cmd.body.move
        assert (int(mv.src), int(mv.dst), int(mv.dev), int(mv.len)) == (sp, dp, dd, ch["len"])
    assert faulted
    assert dropped and set(dropped) == {2}
    # the cache: at most one request per side per chunk, fewer than two per chunk overall
    assert len(asks) < 2 * len(chunks)


def _empty_chunk(tag, chan=0):
    return dict(chan=chan, ctx=0, tag=tag, src=0, dst=0, len=1, last=1, empty=1, first=0, cont=0)


def test_translator_output_slice():
    """Commands leave through a skid slice: an empty chunk's command is offered
    two cycles after the chunk is taken, and with ``cmd`` blocked the
    translator takes three chunks (its register and the slice's two entries)
    before ``chunk.ready`` falls; all leave in order."""
    dut = Translator(geometry())
    chunks = [_empty_chunk(k, k % 4) for k in range(5)]
    got = {}

    async def producer(ctx):
        for ch in chunks:
            await stream_put(ctx, dut.chunk, ch)

    async def main(ctx):
        ctx.set(dut.cmd.ready, 0)
        taken, first = 0, None
        for cyc in range(10):
            _, _, v, r, cv = await ctx.tick().sample(dut.chunk.valid, dut.chunk.ready,
                                                      dut.cmd.valid)
            taken += bool(v and r)
            if cv and first is None:
                first = cyc
        got["taken"], got["first"] = taken, first
        got["tags"] = [int((await stream_get(ctx, dut.cmd)).tag) for _ in chunks]

    run_simulation(dut, [main], [producer])
    assert (got["taken"], got["first"]) == (3, 2)
    assert got["tags"] == list(range(5))


def test_translator_flush_is_registered():
    """``flush`` empties the caches a cycle after it is seen: a chunk looked up
    in the next cycle still hits, one looked up later asks the MMU again."""
    dut = Translator(geometry())
    asks = []
    chunk = dict(chan=1, ctx=0, tag=0, src=0x123, dst=0x4567, len=4, last=0, empty=0,
                 first=1, cont=0)

    async def mmu(ctx):
        while True:
            req = await stream_get(ctx, dut.xlat_req)
            asks.append(int(req.va))
            await stream_put(ctx, dut.xlat_rsp, dict(pa=int(req.va) & 0x3FF, dev=0, cause=0))

    async def put_at(ctx, ch):
        # offer ``ch`` once ``chunk.ready`` is high (it is taken in this cycle)
        ctx.set(dut.chunk.payload, ch)
        ctx.set(dut.chunk.valid, 1)
        await ctx.tick().until(dut.chunk.ready)
        ctx.set(dut.chunk.valid, 0)

    async def main(ctx):
        ctx.set(dut.cmd.ready, 1)
        await put_at(ctx, chunk)                      # first: both sides asked
        await ctx.tick().repeat(12)
        assert len(asks) == 2
        ctx.set(dut.flush, 1)
        await ctx.tick()
        ctx.set(dut.flush, 0)
        await put_at(ctx, dict(chunk, tag=1, first=0))    # looked up a cycle later: hits
        await ctx.tick().repeat(6)
        assert len(asks) == 2
        await put_at(ctx, dict(chunk, tag=2, first=0))    # after the flush: asks again
        await ctx.tick().repeat(12)
        assert len(asks) == 4

    run_simulation(dut, [main], [mmu])


# --------------------------------------------------------------------- reader
def reader_model(g, cmds):
    """(reuse flags, word addresses read) for a command sequence."""
    B = g.bytes_per_word
    flags, words = [], []
    last = None
    for c in cmds:
        if c["kind"] != CmdKind.DATA:
            flags.append(0)
            last = None
            continue
        mv = c["body"]["move"]
        s, t, n = mv["src"], mv["dst"], mv["len"]
        reuse = int(bool(c["cont"]) and last == c["chan"] and s % B > t % B)
        flags.append(reuse)
        words += list(range(s // B + reuse, (s + n - 1) // B + 1))
        last = c["chan"]
    return flags, words


def command_stream(g, rng, n, *, faults=True):
    """Random DATA (some continuing the previous one of their channel), EMPTY and FAULT commands."""
    cmds = []
    pos = {}
    for i in range(n):
        c = rng.randrange(g.channels)
        kind = CmdKind.DATA if rng.random() < 0.85 or not faults else \
            rng.choice([CmdKind.EMPTY, CmdKind.FAULT])
        if kind == CmdKind.DATA:
            if c in pos and rng.random() < 0.6:
                src, dst = pos[c]
                cont = 1
            else:
                src, dst, cont = rng.randrange(0x3000), 0x3000 + rng.randrange(0x3000), 0
            ln = rng.randrange(1, g.burst_bytes + 1)
            ln = min(ln, g.burst_bytes - dst % g.burst_bytes)
            pos[c] = (src + ln, dst + ln)
            body = {"move": dict(src=src, dst=dst, dev=rng.randrange(2), len=ln)}
        else:
            pos.pop(c, None)
            cont = 0
            body = {"fault": dict(ctx=1, va=rng.randrange(1 << 20), cause=3)}
        cmds.append(dict(kind=kind, chan=c, last=rng.random() < 0.3, tag=i, cont=cont,
                         reuse=0, body=body))
    return cmds


def test_reader_contract():
    """Every command passes in order with ``reuse`` set as modelled; the word
    reads are the commands' words, each continued word read once; no more
    than ``outstanding`` reads in flight; stable under back-pressure."""
    rng = random.Random(4)
    g = geometry(width=32, burst_len=8)
    N = 3
    dut = Reader(g, outstanding=N)
    cmds = command_stream(g, rng, 80)
    flags, words = reader_model(g, cmds)
    mem = [rng.randrange(1 << 32) for _ in range(0x6000 // 4)]
    out, data, log = [], [], []
    state = {"inflight": 0, "max": 0}

    async def producer(ctx):
        for c in cmds:
            await stream_put(ctx, dut.cmd, c, rng=rng, idle_prob=0.3)

    async def memory(ctx):
        pend = []        # (due, word)
        cycle = 0
        while True:
            rdy = rng.random() >= 0.3
            ctx.set(dut.rd.req.ready, rdy)
            if pend and pend[0][0] <= cycle:
                ctx.set(dut.rd.rsp.valid, 1)
                ctx.set(dut.rd.rsp.payload, mem[pend[0][1]])
            else:
                ctx.set(dut.rd.rsp.valid, 0)
            _, _, qv, qa, sv, sr, dv, dr = await ctx.tick().sample(
                dut.rd.req.valid, dut.rd.req.payload, dut.rd.rsp.valid, dut.rd.rsp.ready,
                dut.data.valid, dut.data.ready)
            if sv and sr:
                pend.pop(0)
            if qv and rdy:
                due = max([cycle + rng.randrange(1, 4)] + [t for t, _ in pend[-1:]])
                pend.append((due, int(qa)))
                state["inflight"] += 1
            if dv and dr:
                state["inflight"] -= 1
            state["max"] = max(state["max"], state["inflight"])
            cycle += 1

    async def main(ctx):
        for _ in range(20000):
            await ctx.tick()
            if len(out) == len(cmds) and len(data) == len(words):
                break
        else:
            raise AssertionError(f"timeout {len(out)} {len(data)}")

    run_simulation(dut, [main], [producer, memory, consume(dut.cmd_out, rng, 0.4, out),
                                 consume(dut.data, rng, 0.4, data),
                                 stable(dut.cmd_out, log, "cmd_out"), stable(dut.data, log, "data"),
                                 stable(dut.rd.req, log, "rd.req")])
    assert not log, log[:5]
    assert [int(c.tag) for c in out] == [c["tag"] for c in cmds]
    assert [int(c.reuse) for c in out] == flags
    assert any(flags)
    assert [int(d) for d in data] == [mem[w] for w in words]
    assert state["max"] <= N


def _empty_cmd(tag):
    return dict(kind=CmdKind.EMPTY, chan=0, last=1, tag=tag, cont=0, reuse=0,
                body={"fault": dict(ctx=0, va=0, cause=0)})


def test_reader_decodes_two_ahead():
    """While ``cmd_out`` is blocked the reader takes two commands (its decoded
    slice's entries: a start reaches only the slice's pointers, not the
    command queue's read side) and then holds ``cmd.ready`` low."""
    dut = Reader(geometry(width=32, burst_len=8), outstanding=3)
    got = {}

    async def producer(ctx):
        for k in range(4):
            await stream_put(ctx, dut.cmd, _empty_cmd(k))

    async def main(ctx):
        ctx.set(dut.cmd_out.ready, 0)
        taken = 0
        for _ in range(8):
            _, _, v, r = await ctx.tick().sample(dut.cmd.valid, dut.cmd.ready)
            taken += bool(v and r)
        got["taken"] = taken
        got["tags"] = [int((await stream_get(ctx, dut.cmd_out)).tag) for _ in range(4)]

    run_simulation(dut, [main], [producer])
    assert got["taken"] == 2 and got["tags"] == [0, 1, 2, 3]


@pytest.mark.parametrize("width", [32, 64])
def test_reader_decode(width):
    """Each decoded command carries its read count and the issue state its
    start loads (nothing compared behind the decoded slice's multiplexer):
    every source byte, destination byte and length of a chunk, with and
    without a reused first word, against the arithmetic they replace."""
    from amaranth.hdl import Module
    from amaranth.lib import stream
    from amaranth.sim import Simulator

    g = geometry(width=width, burst_len=8)
    B, span = g.bytes_per_word, g.burst_len * g.bytes_per_word
    dut = Reader(g, outstanding=4)
    m = Module()
    out = stream.Signature(dut._dec_layout()).flip().create()
    dut._decode(m, out)
    cases = [(d, s, n, cont) for d in range(B) for s in range(B) for n in range(1, span - s + 1)
             for cont in (0, 1)]
    random.Random(10).shuffle(cases)
    bad = []

    def move(s, d, n, cont):
        return dict(kind=CmdKind.DATA, chan=1, last=1, tag=0, cont=cont, reuse=0,
                    body={"move": dict(src=0x40 + s, dst=0x80 + d, dev=0, len=n)})

    async def main(ctx):
        ctx.set(out.ready, 1)
        ctx.set(dut.cmd.valid, 1)
        ctx.set(dut.cmd.p, move(0, 0, 4, 0))       # a DATA command of the channel before
        await ctx.tick()
        ctx.set(dut.cmd.valid, 0)
        for d, s, n, cont in cases[:600]:
            ctx.set(dut.cmd.p, move(s, d, n, cont))
            reuse = int(cont and s > d)
            extra = (s + n - 1) // B
            want = dict(reuse=reuse, left=extra + 1 - reuse, data=1,
                        busy=int(not reuse or extra != 0), one_left=int(extra == reuse),
                        jump=1 - reuse)
            p = out.p
            got = dict(reuse=ctx.get(p.cmd.reuse), left=ctx.get(p.left),
                       **{k: ctx.get(p.start[k]) for k in ("data", "busy", "one_left", "jump")})
            if got != want:
                bad.append(((d, s, n, cont), got, want))

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(main)
    sim.run()
    assert not bad, bad[:3]


def test_reader_fills_its_read_credits():
    """With the read data not taken exactly ``outstanding`` reads issue (the
    credit limit is a flip-flop of its own); each word taken lets one more go."""
    N = 3
    dut = Reader(geometry(width=32, burst_len=8), outstanding=N)
    cmd = dict(kind=CmdKind.DATA, chan=0, last=1, tag=0, cont=0, reuse=0,
               body={"move": dict(src=0, dst=0x3000, dev=0, len=32)})
    issued = []

    async def memory(ctx):
        pend = []
        ctx.set(dut.rd.req.ready, 1)
        while True:
            ctx.set(dut.rd.rsp.valid, bool(pend))
            ctx.set(dut.rd.rsp.payload, pend[0] if pend else 0)
            _, _, qv, qa, sv, sr = await ctx.tick().sample(
                dut.rd.req.valid, dut.rd.req.payload, dut.rd.rsp.valid, dut.rd.rsp.ready)
            if sv and sr:
                pend.pop(0)
            if qv:
                pend.append(int(qa))
                issued.append(int(qa))

    async def main(ctx):
        ctx.set(dut.cmd_out.ready, 1)
        await stream_put(ctx, dut.cmd, cmd)
        await ctx.tick().repeat(12)
        assert issued == list(range(N))
        for k in range(2):
            assert (await stream_get(ctx, dut.data)) == k
            await ctx.tick().repeat(4)
            assert issued == list(range(N + k + 1))

    run_simulation(dut, [main], [memory])


# --------------------------------------------------------------------- writer
def test_writer_contract():
    """Beats carry exactly each command's bytes (realigned, byte enables) to
    its destination, reusing the held word where marked; fault records and
    retirements in command order; stable under back-pressure."""
    rng = random.Random(5)
    g = geometry(width=64, burst_len=8)
    B = g.bytes_per_word
    dut = Writer(g)
    cmds = command_stream(g, rng, 80)
    flags, words = reader_model(g, cmds)
    for c, f in zip(cmds, flags):
        c["reuse"] = f
    src = bytes(rng.randrange(256) for _ in range(0x6000))
    beats, faults, retired, log = [], [], [], []

    async def producer(ctx):
        for c in cmds:
            await stream_put(ctx, dut.cmd, c, rng=rng, idle_prob=0.3)

    async def reads(ctx):
        for w in words:
            await stream_put(ctx, dut.data, int.from_bytes(src[w * B:(w + 1) * B], "little"),
                             rng=rng, idle_prob=0.3)

    async def events(ctx):
        n = 0
        async for _, _, v, p, bv in ctx.tick().sample(dut.retire.valid, dut.retire.payload,
                                                      dut.beat.valid):
            if v:
                retired.append((int(p.tag), p.kind))
            n += bool(bv)
            state["beats"] = n

    state = {"beats": 0}

    async def main(ctx):
        for _ in range(20000):
            await ctx.tick()
            if len(retired) == len(cmds):
                break
        else:
            raise AssertionError(f"timeout {len(retired)}")

    run_simulation(dut, [main], [producer, reads, events, consume(dut.wr, rng, 0.4, beats),
                                 consume(dut.fault, rng, 0.5, faults),
                                 stable(dut.wr, log, "wr", beat_key(B)), stable(dut.fault, log, "fault")])
    assert not log, log[:5]
    assert [t for t, _ in retired] == [c["tag"] for c in cmds]
    assert state["beats"] == len(beats)
    it = iter(beats)
    for c in cmds:
        if c["kind"] != CmdKind.DATA:
            continue
        mv = c["body"]["move"]
        want = {mv["dst"] + k: src[mv["src"] + k] for k in range(mv["len"])}
        got = {}
        for w in range(mv["dst"] // B, (mv["dst"] + mv["len"] - 1) // B + 1):
            b = next(it)
            assert (int(b.addr), int(b.dev), int(b.chan)) == (w, mv["dev"], c["chan"])
            dat = int(b.data).to_bytes(B, "little")
            for lane in range(B):
                if int(b.be) >> lane & 1:
                    got[w * B + lane] = dat[lane]
        assert got == want, c
    want_faults = [(c["chan"], c["body"]["fault"]["va"]) for c in cmds if c["kind"] == CmdKind.FAULT]
    assert [(int(f.chan), int(f.va)) for f in faults] == want_faults


def test_writer_decodes_two_ahead():
    """With ``wr`` blocked the writer holds its command and two decoded ones
    (a start, late behind ``wr.ready``, reaches the decoded slice's pointers
    and ``cur``, not the read queue) before ``cmd.ready`` falls."""
    dut = Writer(geometry(width=32, burst_len=8))
    cmds = [dict(kind=CmdKind.DATA, chan=0, last=1, tag=k, cont=0, reuse=0,
                 body={"move": dict(src=4 * k, dst=0x100 + 4 * k, dev=0, len=4)})
            for k in range(5)]
    got = {}

    async def producer(ctx):
        for c in cmds:
            await stream_put(ctx, dut.cmd, c)

    async def main(ctx):
        ctx.set(dut.data.valid, 1)
        ctx.set(dut.wr.ready, 0)
        taken = 0
        for _ in range(10):
            _, _, v, r = await ctx.tick().sample(dut.cmd.valid, dut.cmd.ready)
            taken += bool(v and r)
        got["taken"] = taken
        got["addrs"] = [int((await stream_get(ctx, dut.wr)).addr) for _ in cmds]

    run_simulation(dut, [main], [producer])
    assert got["taken"] == 3
    assert got["addrs"] == [0x40 + k for k in range(5)]


def test_writer_fault_leaves_through_idle():
    """A FAULT command leaves through idle once its record is taken, so
    ``fault.ready`` never reaches the next command's start: an EMPTY command
    behind it retires two cycles after it (one with an EMPTY behind an EMPTY)."""
    dut = Writer(geometry(width=32, burst_len=8))
    fault = dict(kind=CmdKind.FAULT, chan=1, last=1, tag=0, cont=0, reuse=0,
                 body={"fault": dict(ctx=0, va=0x1234, cause=3)})
    empty = dict(_empty_cmd(1), chan=1)
    cycles = {}

    async def producer(ctx):
        for c in (fault, empty, dict(empty, tag=2)):
            await stream_put(ctx, dut.cmd, c)

    async def main(ctx):
        ctx.set(dut.fault.ready, 1)
        for cyc in range(20):
            _, _, v, p = await ctx.tick().sample(dut.retire.valid, dut.retire.payload)
            if v:
                cycles[int(p.tag)] = cyc

    run_simulation(dut, [main], [producer])
    assert cycles[1] - cycles[0] == 2 and cycles[2] - cycles[1] == 1


@pytest.mark.parametrize("width", [32, 64])
def test_writer_decode(width):
    """Each decoded command carries the counts and the starting state the
    writer loads as they are (nothing is worked out behind the decoded slice's
    multiplexer): every destination byte, source byte and length of a chunk
    against the arithmetic they replace."""
    from amaranth.hdl import Module
    from amaranth.lib import stream
    from amaranth.sim import Simulator

    g = geometry(width=width, burst_len=8)
    B, span = g.bytes_per_word, g.burst_len * g.bytes_per_word
    ones = (1 << B) - 1
    dut = Writer(g)
    m = Module()
    out = stream.Signature(dut._layouts()[0]).flip().create()
    dut._decode(m, out)
    cases = [(d, s, n, reuse) for d in range(B) for s in range(B) for n in range(1, span - d + 1)
             for reuse in (0, 1) if not reuse or s > d]
    random.Random(9).shuffle(cases)
    bad = []

    async def main(ctx):
        for d, s, n, reuse in cases[:600]:
            ctx.set(dut.cmd.p, dict(kind=CmdKind.DATA, chan=0, last=1, tag=0, cont=reuse,
                                    reuse=reuse,
                                    body={"move": dict(src=0x40 + s, dst=0x80 + d, dev=0, len=n)}))
            p = out.p
            beats, words = -(-(d + n) // B), -(-(s + n) // B) - reuse
            take_first = s > d and not reuse
            e = (d + n) % B
            want = dict(addr=0x80 // B, beats=beats, words=words, shift=(s - d) % B or B,
                        be_first=ones << d & ones, be_last=(1 << e) - 1 if e else ones,
                        last=beats == 1, need=beats > 1 or not reuse or words + reuse > 1,
                        last_ok=beats == 1 and not take_first,
                        wants_first=take_first, beat_ok=not take_first,
                        empty=0, fault=0, idle=0)
            got = dict(addr=ctx.get(p.addr), beats=ctx.get(p.beats), words=ctx.get(p.words),
                       shift=ctx.get(p.shift), be_first=ctx.get(p.be_first),
                       be_last=ctx.get(p.be_last),
                       **{k: ctx.get(p.start[k]) for k in ("last", "last_ok", "need", "wants_first",
                                                            "beat_ok", "empty", "fault", "idle")})
            if got != {k: int(v) for k, v in want.items()}:
                bad.append(((d, s, n, reuse), got, want))

    sim = Simulator(m)
    sim.add_testbench(main)
    sim.run()
    assert not bad, bad[:3]


# ----------------------------------------------------------------- completion
def test_completion_contract():
    """Status follows a cycle-by-cycle model of the counters: a descriptor
    counts as done once ended and every write of its channel acknowledged;
    busy while anything is in flight; a fault sets error until cleared."""
    rng = random.Random(6)
    g = geometry(channels=3)
    dut = Completion(g, ack_limit=5, inflight_limit=6)
    C = g.channels
    log = []

    async def main(ctx):
        inflight = [0] * C
        pending = [0] * C
        ended = [0] * C
        tag = [0] * C
        done = [0] * C
        dtag = [0] * C
        error = [False] * C
        for step in range(3000):
            # choose legal events for this cycle
            c_iss = rng.randrange(C) if rng.random() < 0.3 else None
            if c_iss is not None and inflight[c_iss] >= 6 - 1:
                c_iss = None
            live = [c for c in range(C) if inflight[c]]
            c_ret = rng.choice(live) if live and rng.random() < 0.3 else None
            c_drop = rng.choice([c for c in live if c != c_ret] or [None]) \
                if rng.random() < 0.1 else None
            kind = rng.choice([CmdKind.DATA] * 6 + [CmdKind.EMPTY, CmdKind.FAULT])
            last = rng.random() < 0.5
            c_beat = rng.randrange(C) if rng.random() < 0.4 else None
            if c_beat is not None and pending[c_beat] >= 5:
                c_beat = None
            acks = [c for c in range(C) if pending[c]]
            c_ack = rng.choice(acks) if acks and rng.random() < 0.4 else None
            clear = rng.randrange(1 << C) if rng.random() < 0.05 else 0
            walking = rng.randrange(1 << C) if rng.random() < 0.2 else 0
            ctx.set(dut.issued.valid, c_iss is not None)
            ctx.set(dut.issued.payload, c_iss or 0)
            ctx.set(dut.dropped.valid, c_drop is not None)
            ctx.set(dut.dropped.payload, c_drop or 0)
            ctx.set(dut.retire.valid, c_ret is not None)
            ctx.set(dut.retire.payload, dict(chan=c_ret or 0, kind=kind, last=last, tag=step & 0xFFFF,
                                             va=step, cause=2))
            ctx.set(dut.beat.valid, c_beat is not None)
            ctx.set(dut.beat.payload, c_beat or 0)
            ctx.set(dut.wr_ack.valid, c_ack is not None)
            ctx.set(dut.wr_ack.payload, c_ack or 0)
            ctx.set(dut.walking, walking)
            ctx.set(dut.clear, clear)
            busy = [bool(walking >> c & 1) or inflight[c] > 0 or pending[c] > 0 or done[c] != ended[c]
                    for c in range(C)]
            for c in range(C):
                st = dut.status[c]
                got = (ctx.get(st.busy), ctx.get(st.error), ctx.get(st.done_count),
                       ctx.get(st.done_tag), ctx.get(dut.ack_full) >> c & 1)
                want = (busy[c], error[c], done[c], dtag[c], int(pending[c] == 5))
                if got != want:
                    log.append((step, c, got, want))
            assert ctx.get(dut.wr_ack.ready)
            await ctx.tick()
            for c in range(C):
                if pending[c] == 0:
                    done[c], dtag[c] = ended[c], tag[c]
                if clear >> c & 1 and not busy[c] and not (c == c_ret and kind == CmdKind.FAULT):
                    error[c] = False
            if c_iss is not None:
                inflight[c_iss] += 1
            if c_drop is not None:
                inflight[c_drop] -= 1
            if c_ret is not None:
                inflight[c_ret] -= 1
                if kind == CmdKind.FAULT:
                    error[c_ret] = True
                elif last:
                    ended[c_ret] += 1
                    tag[c_ret] = step & 0xFFFF
            if c_beat is not None:
                pending[c_beat] += 1
            if c_ack is not None:
                pending[c_ack] -= 1
        assert not log, log[:5]

    run_simulation(dut, [main])
