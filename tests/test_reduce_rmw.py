# amaranth: UnusedElaboratable=no
"""hw/reduce's reduce-on-write stage on a real BankedMemory, against a
sequential model whose sums are numpy's (tests/fpref.py): random beats over
few words (same-word hazards at every distance), runs of beats to one word,
plain writes and adds mixed, partial byte enables, random idle cycles on the
input and a second writer contending for the memory's write port (so the
write stage stalls); every write in order and the final memory bit for bit;
on the plain memory and on the board's registered one (reads answered three
cycles later, writes landing a cycle late); throughput and latency; the
Verilog."""
import random
import struct

import numpy as np
import pytest
from amaranth.back import verilog
from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring
from hypothesis import HealthCheck, given, settings, strategies as st

from fpref import add, canonical
from gen.simkit import run_simulation, stream_monitor
from hw.memory import BankedMemory
from hw.reduce.inflight import InFlight
from hw.reduce.rmw import ReduceOnWrite, ReduceOp

WORDS = 16                       # memory words; the top GUARD of them belong to the other writer
GUARD = 4


class Harness(Elaboratable):
    """A ReduceOnWrite on port 0 of a BankedMemory; with ``contend``, a
    second write port shares the memory's one physical port round-robin
    (the testbench writes the guard words through it)."""

    def __init__(self, data_width, init=b"", contend=False, registered=False):
        self.mem = BankedMemory(data_width=data_width, size=WORDS * data_width // 8, banks=2,
                                write_ports=2 if contend else 1, shared_write=contend,
                                init=init, registered=registered)
        self.rmw = ReduceOnWrite(addr_width=self.mem.addr_width, data_width=data_width)

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = self.mem
        m.submodules.rmw = self.rmw
        wiring.connect(m, self.rmw.rd, self.mem.read[0])
        wiring.connect(m, self.rmw.wr, self.mem.write[0])
        return m


def lane_op(op, old, new, dw):
    """The beat's result word before the byte merge: numpy sums lane by lane."""
    if op == ReduceOp.WRITE:
        return new
    fmt, w = ("f32", 32) if op == ReduceOp.ADD_F32 else ("bf16", 16)
    mask = (1 << w) - 1
    a = [old >> (k * w) & mask for k in range(dw // w)]
    b = [new >> (k * w) & mask for k in range(dw // w)]
    return sum(canonical(fmt, s) << (k * w) for k, s in enumerate(add(fmt, a, b)))


def byte_mask(be, dw):
    return sum(0xFF << (8 * k) for k in range(dw // 8) if be >> k & 1)


def model(init_words, beats, dw):
    """Final words and the writes, beat by beat in order: (addr, enabled data, be)."""
    mem = list(init_words)
    writes = []
    for addr, data, be, op in beats:
        bm = byte_mask(be, dw)
        merged = (lane_op(op, mem[addr], data, dw) & bm) | (mem[addr] & ~bm)
        mem[addr] = merged
        writes.append((addr, merged & bm, be))
    return mem, writes


def run_rmw(dw, init_words, beats, *, seed=0, idle=0.0, contend=0.0, registered=False):
    """Feed ``beats`` (addr, data, be, op) through a Harness; returns
    (final words, writes, accept cycles, write cycles, cycles ``wr`` was
    offered and not taken). The other writer
    (with probability ``contend`` a cycle) writes random words to the guard
    words, which are checked too."""
    B = dw // 8
    init = b"".join(w.to_bytes(B, "little") for w in init_words)
    h = Harness(dw, init, contend=bool(contend), registered=registered)
    rmw, mem = h.rmw, h.mem
    rng = random.Random(seed)
    aw, full = mem.addr_width, (1 << B) - 1
    log, accepted, wrote, out = [], [], [], {"stalls": 0}
    guard = list(init_words[WORDS - GUARD:])

    async def tb(ctx):
        cycle, n = 0, 0
        offering = False
        while len(log) < len(beats):
            if n < len(beats) and not offering:
                offering = not (idle and rng.random() < idle)
            ctx.set(rmw.i.valid, offering)
            if offering:
                addr, data, be, op = beats[n]
                ctx.set(rmw.i.payload, {"addr": addr, "data": data, "be": be, "op": op})
            other = None
            if contend:
                other = (WORDS - GUARD + rng.randrange(GUARD), rng.getrandbits(dw))
                ctx.set(mem.write[1].valid, rng.random() < contend)
                ctx.set(mem.write[1].payload, {"addr": other[0], "data": other[1], "be": full})
            sampled = await ctx.tick().sample(rmw.i.valid, rmw.i.ready, rmw.wr.valid,
                                              rmw.wr.ready, *([mem.write[1].valid,
                                                               mem.write[1].ready]
                                                              if contend else []))
            iv, ir, wv, wr = sampled[2:6]
            if iv and ir:
                accepted.append(cycle)
                n += 1
                offering = False
            if wv and wr:
                wrote.append(cycle)
            out["stalls"] += wv and not wr
            if contend and sampled[6] and sampled[7]:
                guard[other[0] - (WORDS - GUARD)] = other[1]
            cycle += 1
        ctx.set(rmw.i.valid, 0)
        if contend:
            ctx.set(mem.write[1].valid, 0)
        await ctx.tick()
        raw = mem.sim_read(ctx, 0, WORDS * B)
        out["words"] = [int.from_bytes(raw[i * B:(i + 1) * B], "little") for i in range(WORDS)]

    run_simulation(h, [tb], [stream_monitor(rmw.wr, "wr", log)], traces=())
    dmask = (1 << dw) - 1
    writes = [(p & ((1 << aw) - 1), (p >> aw & dmask) & byte_mask(p >> (aw + dw), dw),
               p >> (aw + dw)) for p in log]
    assert out["words"][WORDS - GUARD:] == guard, "the other writer's words were disturbed"
    return out["words"], writes, accepted, wrote, out["stalls"]


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def random_word(rng, dw):
    """Mostly ordinary floats of mixed magnitude (f32 lanes; as bf16 lanes
    their halves are ordinary too), sometimes raw bit patterns (NaN, inf,
    subnormals)."""
    if rng.random() < 0.15:
        return rng.getrandbits(dw)
    return sum(f32_bits(rng.choice([-1, 1]) * rng.uniform(0.5, 2) * 2.0 ** rng.randint(-8, 8))
               << (32 * k) for k in range(dw // 32))


def random_beats(rng, dw, n, pool):
    B = dw // 8
    full = (1 << B) - 1
    beats = []
    for _ in range(n):
        op = rng.choice([ReduceOp.ADD_F32] * 3 + [ReduceOp.ADD_BF16] * 2 + [ReduceOp.WRITE])
        elem = {ReduceOp.ADD_F32: 4, ReduceOp.ADD_BF16: 2, ReduceOp.WRITE: 1}[op]
        if rng.random() < 0.7:
            be = full
        else:                    # whole elements for adds, any bytes for writes
            be = sum(((1 << elem) - 1) << (e * elem) for e in range(B // elem)
                     if rng.random() < 0.5)
        beats.append((rng.choice(pool), random_word(rng, dw), be, op))
    return beats


def check(dw, init_words, beats, **kw):
    words, writes, accepted, wrote, stalls = run_rmw(dw, init_words, beats, **kw)
    ref_words, ref_writes = model(init_words, beats, dw)
    bad = [f"beat {i}: addr {a}: wrote {d:x} be {be:x}, model {rd:x} be {rbe:x}"
           for i, ((a, d, be), (_, rd, rbe)) in enumerate(zip(writes, ref_writes))
           if (a, d, be) != (_, rd, rbe)]
    assert len(writes) == len(beats)
    assert not bad, f"{len(bad)} of {len(beats)} writes wrong:\n" + "\n".join(bad[:10])
    assert words[:WORDS - GUARD] == ref_words[:WORDS - GUARD]
    return accepted, wrote, stalls


# ------------------------------------------------------------------ arguments
@pytest.mark.parametrize("kw,msg", [
    ({"addr_width": 0, "data_width": 32}, "Address width must be a positive integer, not 0"),
    ({"addr_width": True, "data_width": 32}, "Address width must be a positive integer, not True"),
    ({"addr_width": 8, "data_width": 48}, "Bus width must be one of 32, 64, 128, 256, not 48"),
    ({"addr_width": 8, "data_width": 16}, "Bus width must be one of 32, 64, 128, 256, not 16"),
])
def test_bad_arguments(kw, msg):
    with pytest.raises(ValueError, match=msg):
        ReduceOnWrite(**kw)


def test_properties():
    dut = ReduceOnWrite(addr_width=10, data_width=128)
    assert (dut.addr_width, dut.data_width, dut.latency, dut.adder_latency) == (10, 128, 9, 7)
    assert (dut.depth, dut.run_interval) == (4, 8)
    with pytest.raises(ValueError, match="Queue depth must be a positive integer, not 0"):
        ReduceOnWrite(addr_width=4, data_width=32, depth=0)


# ------------------------------------------------------------------ values and hazards
@pytest.mark.parametrize("dw,seed,registered", [(32, 1, False), (64, 2, False), (128, 3, False),
                                                (32, 6, True), (64, 7, True)])
def test_random_beats(dw, seed, registered):
    """Beats over five words: every hazard distance occurs, under idle input
    cycles and a contending writer."""
    rng = random.Random(seed)
    init = [random_word(rng, dw) for _ in range(WORDS)]
    beats = random_beats(rng, dw, 240, pool=[0, 1, 2, 5, 11])
    _, _, stalls = check(dw, init, beats, seed=seed, idle=0.25, contend=0.3,
                         registered=registered)
    assert stalls > 10                       # the write stage really was stalled


@pytest.mark.parametrize("registered", [False, True])
def test_hazard_distances(registered):
    """Beat X to word A, then j - 1 beats to other words, then a beat to A,
    for j = 1 .. 8, back to back: small j waits for X's write, which it
    keeps from the write port (its read may predate the write), larger j
    reads it from memory. Adds of both formats and plain writes, with
    partial enables."""
    dw = 64
    rng = random.Random(4)
    init = [random_word(rng, dw) for _ in range(WORDS)]
    beats = []
    ops = [ReduceOp.ADD_F32, ReduceOp.ADD_BF16, ReduceOp.WRITE]
    for j in range(1, 9):
        for first, second in [(a, b) for a in ops for b in ops]:
            fill = [3 + k for k in range(j - 1)]
            be2 = 0xFF if second != ReduceOp.ADD_F32 else rng.choice([0xFF, 0x0F, 0xF0])
            beats.append((2, random_word(rng, dw), 0xFF, first))
            beats += [(a, random_word(rng, dw), 0xFF, ReduceOp.ADD_F32) for a in fill]
            beats.append((2, random_word(rng, dw), be2, second))
    check(dw, init, beats, registered=registered)
    check(dw, init, beats, seed=5, contend=0.5, registered=registered)


def test_same_word_run():
    """32 f32 adds to one word: the word ends as numpy's sequential sum, one
    beat per ``run_interval``; adds to distinct words: one beat a cycle,
    each written ``latency`` cycles after it was accepted (a memory that
    answers three cycles later: two more, still one a cycle)."""
    dw = 32
    vals = [0.1 * (k + 1) * (-1) ** k for k in range(32)]
    acc = np.float32(1.5)
    for v in vals:
        acc = np.float32(acc + np.float32(v))
    init = [f32_bits(1.5)] + [0] * (WORDS - 1)
    beats = [(0, f32_bits(v), 0xF, ReduceOp.ADD_F32) for v in vals]
    words, _, accepted, wrote, _ = run_rmw(dw, init, beats)
    assert words[0] == int(np.array([acc], np.float32).view(np.uint32)[0])
    dut = ReduceOnWrite(addr_width=4, data_width=dw)
    assert set(np.diff(wrote).tolist()) == {dut.run_interval}     # one sum per run interval
    # the plain memory holds one answer: the second beat waits with its word
    # read, the next two in the input slice, the fifth until the head leaves
    assert accepted[:4] == list(range(accepted[0], accepted[0] + 4))
    assert set(np.diff(accepted[4:]).tolist()) == {dut.run_interval}

    beats = [(k % (WORDS - GUARD), f32_bits(float(k)), 0xF, ReduceOp.ADD_F32)
             for k in range(WORDS - GUARD)]
    accepted, wrote, _ = check(dw, [0] * WORDS, beats)
    assert accepted == list(range(accepted[0], accepted[0] + len(beats)))
    assert wrote == [c + 9 for c in accepted]         # the input slice, the read, 7 adder stages
    accepted, wrote, _ = check(dw, [0] * WORDS, beats, registered=True)
    assert accepted == list(range(accepted[0], accepted[0] + len(beats)))
    assert wrote == [c + 11 for c in accepted]                    # a 3-cycle read


def test_busy_write_port_admits_what_the_write_queue_holds():
    """With the write port refusing for 40 cycles, the unit lets exactly as
    many beats into the adders as its write queue holds (the adders'
    capacity), and once the port takes again they leave one a cycle, in
    order, each the beat's data (plain writes). A memory model answers a read a cycle after its request and
    holds one answer."""
    dut = ReduceOnWrite(addr_width=6, data_width=32)
    limit = 8                    # the adders' capacity (docs/hw.md): 7 stages and a skid entry
    beats = [(k, 0x1000 + k) for k in range(12)]
    consumed, written = [], []

    async def memory(ctx):
        answer = None
        while True:
            free = answer is None                                   # one answer held
            ctx.set(dut.rd.req.ready, free)
            ctx.set(dut.rd.rsp.valid, not free)
            ctx.set(dut.rd.rsp.payload, answer or 0)
            _, _, rv, addr, sv, sr = await ctx.tick().sample(
                dut.rd.req.valid, dut.rd.req.payload, dut.rd.rsp.valid, dut.rd.rsp.ready)
            if sv and sr:
                answer = None
            if rv and free:
                answer = 0xAAAA0000 | addr

    async def tb(ctx):
        cycle, n = 0, 0
        while len(written) < len(beats) and cycle < 200:
            ctx.set(dut.wr.ready, cycle >= 40)
            ctx.set(dut.i.valid, n < len(beats))
            if n < len(beats):
                addr, data = beats[n]
                ctx.set(dut.i.payload, {"addr": addr, "data": data, "be": 0xF,
                                        "op": ReduceOp.WRITE})
            _, _, iv, ir, sv, sr, wv, wr, wa, wd = await ctx.tick().sample(
                dut.i.valid, dut.i.ready, dut.rd.rsp.valid, dut.rd.rsp.ready,
                dut.wr.valid, dut.wr.ready, dut.wr.p.addr, dut.wr.p.data)
            n += iv and ir
            if sv and sr:
                consumed.append(cycle)
            if wv and wr:
                written.append((cycle, wa, wd))
            cycle += 1

    run_simulation(dut, [tb], [memory], traces=())
    assert len([c for c in consumed if c < 40]) == limit       # then it waits for room
    assert [(a, d) for _, a, d in written] == beats             # in order, nothing lost
    cycles = [c for c, _, _ in written]
    assert cycles[:limit] == list(range(40, 40 + limit))        # the queued sums, one a cycle


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**16), dw=st.sampled_from([32, 64]),
       data=st.data())
def test_hypothesis_beats(seed, dw, data):
    """Hypothesis picks the address pattern (few words: long same-word runs
    and every distance), the ops and the raw data bits."""
    B = dw // 8
    beat = st.tuples(st.integers(0, 3), st.integers(0, (1 << dw) - 1),
                     st.sampled_from([(1 << B) - 1, (1 << B) - 1, (1 << (B // 2)) - 1]),
                     st.sampled_from(list(ReduceOp)))
    beats = data.draw(st.lists(beat, min_size=1, max_size=60))
    rng = random.Random(seed)
    init = [random_word(rng, dw) for _ in range(WORDS)]
    check(dw, init, beats, seed=seed, idle=0.2, contend=0.3, registered=seed % 2 == 1)


# ------------------------------------------------------------------ the in-flight ring
@pytest.mark.parametrize("depth,push_probe", [(1, False), (3, False), (4, False),
                                              (1, True), (4, True)])
def test_inflight_ring(depth, push_probe):
    """Random pushes and pops (never past full or empty, pushes and pops in
    one cycle included) against a deque; ``hit`` for a probe loaded at
    random edges (with pushes and pops at the same edge), with and without
    the oldest entry skipped; the probe loaded from either candidate
    (``load_alt``). With ``push_probe`` a push adds the probe held in that
    cycle (``push_addr`` is random and ignored)."""
    from collections import deque
    dut = InFlight(depth, 3, push_probe=push_probe)
    assert dut.push_probe == push_probe
    rng = random.Random(depth)
    errors = []

    async def tb(ctx):
        held, held_probe = deque(), 0
        for _ in range(400):
            pop = bool(held) and rng.random() < 0.5
            push = (len(held) < depth or pop) and rng.random() < 0.6
            addr, skip = rng.randrange(8), rng.random() < 0.5
            main, alt, use_alt = rng.randrange(8), rng.randrange(8), rng.random() < 0.5
            probe = alt if use_alt else main
            load = rng.random() < 0.5
            ctx.set(dut.push, push)
            ctx.set(dut.push_addr, addr)
            ctx.set(dut.pop, pop)
            ctx.set(dut.load, load)
            ctx.set(dut.load_addr, main)
            ctx.set(dut.load_alt, use_alt)
            ctx.set(dut.load_alt_addr, alt)
            ctx.set(dut.skip_oldest, skip)
            want = held_probe in (list(held)[1:] if skip else list(held))
            if ctx.get(dut.hit) != want:
                errors.append((list(held), held_probe, skip))
            await ctx.tick()
            if pop:
                held.popleft()
            if push:
                held.append(held_probe if push_probe else addr)
            if load:
                held_probe = probe

    run_simulation(dut, [tb])
    assert not errors, errors[:5]


def test_input_slice_takes_two_beats_while_reads_wait():
    """Beats arrive through a register slice: with the memory refusing every
    read, the unit takes exactly two beats (the slice's entries) and then
    holds ``i.ready`` low; ``i.ready`` rises again a cycle after the first
    read is taken (a register's, not the read port's ready)."""
    dut = ReduceOnWrite(addr_width=6, data_width=32)
    seen = []

    async def tb(ctx):
        ctx.set(dut.wr.ready, 1)
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload, {"addr": 1, "data": 0, "be": 0xF, "op": ReduceOp.WRITE})
        for cycle in range(8):
            ctx.set(dut.rd.req.ready, cycle >= 5)
            _, _, ir, rv, rr = await ctx.tick().sample(dut.i.ready, dut.rd.req.valid,
                                                       dut.rd.req.ready)
            seen.append((ir, rv and rr))

    run_simulation(dut, [tb], traces=())
    assert [ir for ir, _ in seen] == [1, 1, 0, 0, 0, 0, 1, 1]
    assert [rd for _, rd in seen] == [0, 0, 0, 0, 0, 1, 1, 1]


def test_inflight_bad_depth():
    with pytest.raises(ValueError, match="Depth must be a positive integer, not 0"):
        InFlight(0, 4)


# ------------------------------------------------------------------ Verilog
def test_verilog():
    text = verilog.convert(ReduceOnWrite(addr_width=10, data_width=64), name="reduce_on_write",
                           emit_src=False)
    assert "module reduce_on_write" in text and "rd__req__valid" in text
