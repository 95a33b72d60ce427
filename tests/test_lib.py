"""hw/lib: the shared arbiter, queue, page-size decoder, register copies and width helpers."""
import random

import pytest
from amaranth.hdl import Shape
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from gen.simkit import run_simulation, stream_get, stream_put
from hw.isa import ArchParams
from hw.lib import (MAX_EXTRA_COPIES, PageSizeDecoder, ParkedRoundRobin, Queue, RegisterSlice,
                    RoundRobin, chan_bits, counter_shape, ctx_bits, dev_bits, index_bits,
                    page_bytes, page_offset_mask, register_copies)


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_round_robin_serves_every_requester_in_turn(count):
    rr = RoundRobin(count)
    rng = random.Random(count)
    grants = []

    async def tb(ctx):
        # always-on requests: the grants cycle through every requester
        ctx.set(rr.requests, (1 << count) - 1)
        ctx.set(rr.advance, 1)
        for _ in range(3 * count):
            grants.append(ctx.get(rr.grant))
            await ctx.tick()
        # random requests: the grant is the first requester after the last grant
        last = grants[-1]
        for _ in range(200):
            req = rng.randrange(1 << count)
            adv = rng.random() < 0.7
            ctx.set(rr.requests, req)
            ctx.set(rr.advance, adv)
            want = next(((last + 1 + k) % count for k in range(count)
                         if req >> ((last + 1 + k) % count) & 1), 0)
            assert ctx.get(rr.valid) == (req != 0)
            assert ctx.get(rr.grant) == want, (req, last)
            await ctx.tick()
            if adv and req:
                last = want

    run_simulation(rr, [tb])
    assert grants[:count] == [(1 + k) % count for k in range(count)]
    # between two grants of the same requester every other requester was granted once
    for i in range(len(grants) - count):
        assert sorted(grants[i:i + count]) == list(range(count))


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_parked_round_robin_moves_its_registered_grant_in_turn(count):
    rr = ParkedRoundRobin(count)
    rng = random.Random(10 + count)
    holders = []

    async def tb(ctx):
        holder = 0                             # requester 0 holds the grant after reset
        for i in range(300):
            # a lone steady requester, then always-on requests, then random ones
            req = (1 << (count - 1) if i < 10 else (1 << count) - 1 if i < 10 + 3 * count
                   else rng.randrange(1 << count))
            hold = i >= 100 and rng.random() < 0.3
            ctx.set(rr.requests, req)
            ctx.set(rr.hold, hold)
            assert ctx.get(rr.grant) == 1 << holder, (i, req)
            holders.append(holder)
            # the first requester after the holder, the holder itself last; hold:
            # it stays; none: home to 0
            if not hold:
                holder = next(((holder + 1 + k) % count for k in range(count)
                               if req >> ((holder + 1 + k) % count) & 1), 0)
            assert ctx.get(rr.grant_next) == 1 << holder, (i, req)   # known before the edge
            await ctx.tick()

    run_simulation(rr, [tb])
    assert holders[1:10] == [count - 1] * 9               # a lone requester keeps the grant
    steady = holders[11:10 + 3 * count]
    for i in range(len(steady) - count + 1):               # always-on: each once in turn
        assert sorted(steady[i:i + count]) == list(range(count))


def test_parked_round_robin_rejects_bad_count():
    with pytest.raises(ValueError, match=r"Requester count must be a positive integer, not True"):
        ParkedRoundRobin(True)


def test_round_robin_rejects_bad_count():
    with pytest.raises(ValueError, match=r"Requester count must be a positive integer, not 0"):
        RoundRobin(0)


@pytest.mark.parametrize("buffered,registered_head,registered_flags",
                         [(True, False, False), (False, False, False), (False, True, False), (False, False, True),
                          (True, False, True)])
@pytest.mark.parametrize("depth", [1, 2, 5])
def test_queue_keeps_order_under_back_pressure(depth, buffered, registered_head, registered_flags):
    layout = data.StructLayout({"a": 5, "b": 3})
    q = Queue(layout, depth, buffered=buffered, registered_head=registered_head, registered_flags=registered_flags)
    rng = random.Random(depth * 8 + buffered * 4 + registered_head * 2 + registered_flags)
    sent = [{"a": rng.randrange(32), "b": rng.randrange(8)} for _ in range(60)]
    got = []
    levels = []

    async def producer(ctx):
        for p in sent:
            await stream_put(ctx, q.w, p, rng=rng, idle_prob=0.4)

    async def consumer(ctx):
        for _ in sent:
            v = await stream_get(ctx, q.r, rng=rng, bp_prob=0.5)
            got.append({"a": v.a, "b": v.b})
            levels.append(ctx.get(q.level))

    run_simulation(q, [producer, consumer])
    assert got == sent
    assert max(levels) <= depth


_QUEUE_VARIANTS = {"registered_head": {"registered_head": True},
                   "registered_flags": {"registered_flags": True},
                   "read_copies": {"registered_flags": True, "read_copies": 4},
                   "write_free": {"registered_flags": True, "read_copies": 4, "write_free": True}}


@pytest.mark.parametrize("buffered,variant", [(False, "registered_head"), (False, "registered_flags"),
                                              (True, "registered_flags"), (False, "read_copies"),
                                              (False, "write_free")])
@pytest.mark.parametrize("depth", [1, 2, 3, 8])
def test_queue_variants_match_plain_queue_cycle_for_cycle(depth, buffered, variant):
    """The registered head changes where the oldest entry is kept, the
    registered flags where ``w.ready`` and ``r.valid`` come from, the read
    copies which pointer reads which columns, free writes when the memory is
    written (a free slot only); never what either side sees in
    any cycle (against the plain queue of the same ``buffered``: Amaranth's
    ``SyncFIFO`` or ``SyncFIFOBuffered``)."""
    from amaranth.hdl import Module
    m = Module()
    m.submodules.a = a = Queue(8, depth, buffered=buffered)
    m.submodules.b = b = Queue(8, depth, buffered=buffered, **_QUEUE_VARIANTS[variant])
    rng = random.Random(depth)

    async def tb(ctx):
        full_seen = 0
        for k in range(600):
            # bursts of writes with few reads, then the reverse, so the
            # queues fill and drain as well as idle
            phase = (k // 50) % 2
            wv = rng.random() < (0.8 if phase == 0 else 0.3)
            rr = rng.random() < (0.3 if phase == 0 else 0.8)
            value = rng.randrange(256)
            for q in (a, b):
                ctx.set(q.w.valid, wv)
                ctx.set(q.w.payload, value)
                ctx.set(q.r.ready, rr)
            for seen in (lambda q: q.w.ready, lambda q: q.r.valid, lambda q: q.level):
                assert ctx.get(seen(a)) == ctx.get(seen(b)), k
            if ctx.get(a.r.valid):
                assert ctx.get(a.r.payload) == ctx.get(b.r.payload), k
            full_seen += ctx.get(a.level) == depth
            await ctx.tick()
        assert full_seen > 0

    run_simulation(m, [tb])


@pytest.mark.parametrize("width,n", [(1, 1), (8, 4), (214, 4), (7, 3), (3, 3)])
def test_bit_groups_cover_the_width_contiguously_and_evenly(width, n):
    from hw.lib import bit_groups
    groups = bit_groups(width, n)
    assert len(groups) == n and groups[0][0] == 0 and groups[-1][1] == width
    assert all(a[1] == b[0] for a, b in zip(groups, groups[1:]))
    sizes = [hi - lo for lo, hi in groups]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1


def test_queue_rejects_bad_arguments():
    with pytest.raises(ValueError, match=r"Queue depth must be a positive integer, not 0"):
        Queue(8, 0)
    with pytest.raises(ValueError, match=r"at least 1 bit wide"):
        Queue(0, 4)
    with pytest.raises(ValueError, match=r"registered head is for a fall-through queue"):
        Queue(8, 4, registered_head=True)
    with pytest.raises(ValueError, match=r"Registered flags are for a queue without a registered head"):
        Queue(8, 4, buffered=False, registered_head=True, registered_flags=True)
    with pytest.raises(ValueError, match=r"Read copies must be an integer in 1\.\.4, not 5"):
        Queue(8, 4, buffered=False, registered_flags=True, read_copies=5)
    with pytest.raises(ValueError, match=r"Read copies are for a fall-through queue with registered flags"):
        Queue(8, 4, registered_flags=True, read_copies=2)
    with pytest.raises(ValueError, match=r"Read copies \(4\) cannot exceed the payload's 3 bits"):
        Queue(3, 4, buffered=False, registered_flags=True, read_copies=4)
    with pytest.raises(ValueError, match=r"Free writes are for a fall-through queue with registered flags"):
        Queue(8, 4, buffered=False, write_free=True)


def _run_comb(dut, tb):
    from amaranth.sim import Simulator
    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()


def test_page_size_decoder_matches_the_arch():
    arch = ArchParams()
    dec = PageSizeDecoder(arch.page_sizes, arch.addr_bits)

    async def tb(ctx):
        for code, size in enumerate(arch.page_sizes):
            ctx.set(dec.code, code)
            assert ctx.get(dec.bytes) == size
            assert ctx.get(dec.mask) == size - 1

    _run_comb(dec, tb)
    with pytest.raises(ValueError, match=r"Page sizes must be 4 powers of two, not \(1, 2, 3, 4\)"):
        PageSizeDecoder((1, 2, 3, 4), 32)


def test_page_helpers_in_page_units():
    from amaranth.hdl import Module, Signal
    arch = ArchParams()
    p0 = arch.page_sizes[0]
    m = Module()
    code, nbytes, mask = Signal(2), Signal(32), Signal(20)
    m.d.comb += [nbytes.eq(page_bytes(arch.page_sizes, code)),
                 mask.eq(page_offset_mask(arch.page_sizes, code, unit=p0, width=20))]

    async def tb(ctx):
        for c, size in enumerate(arch.page_sizes):
            ctx.set(code, c)
            assert ctx.get(nbytes) == size
            assert ctx.get(mask) == size // p0 - 1

    _run_comb(m, tb)


def test_width_helpers():
    assert [index_bits(n) for n in (1, 2, 3, 4, 5, 16, 17)] == [1, 1, 2, 2, 3, 4, 5]
    arch = ArchParams(devices=3, contexts=4, channels=9)
    assert (ctx_bits(arch), dev_bits(arch), chan_bits(arch.channels)) == (2, 2, 4)
    assert counter_shape(255) == Shape(8) and counter_shape(256) == Shape(9)
    with pytest.raises(ValueError, match=r"Count must be a positive integer, not 0"):
        index_bits(0)


@pytest.mark.parametrize("late_ready", [False, True])
@pytest.mark.parametrize("idle_prob,bp_prob", [(0.0, 0.0), (0.4, 0.0), (0.0, 0.5), (0.4, 0.5)])
def test_register_slice_keeps_order_and_full_rate(idle_prob, bp_prob, late_ready):
    layout = data.StructLayout({"a": 7, "b": 2})
    rs = RegisterSlice(layout, late_ready=late_ready)
    rng = random.Random(int(idle_prob * 10 + bp_prob * 100))
    sent = [{"a": rng.randrange(128), "b": rng.randrange(4)} for _ in range(80)]
    got = []

    async def producer(ctx):
        for p in sent:
            await stream_put(ctx, rs.i, p, rng=rng, idle_prob=idle_prob)

    async def consumer(ctx):
        for _ in sent:
            v = await stream_get(ctx, rs.o, rng=rng, bp_prob=bp_prob)
            got.append({"a": v.a, "b": v.b})

    run_simulation(rs, [producer, consumer])
    assert got == sent


@pytest.mark.parametrize("late_ready", [False, True])
def test_register_slice_moves_one_entry_a_cycle_and_flushes(late_ready):
    rs = RegisterSlice(8, late_ready=late_ready)
    seen = []

    async def tb(ctx):
        ctx.set(rs.o.ready, 1)
        ctx.set(rs.i.valid, 1)
        for k in range(10):                      # no back-pressure: every cycle
            ctx.set(rs.i.payload, k)
            assert ctx.get(rs.i.ready)
            await ctx.tick()
            seen.append(ctx.get(rs.o.payload) if ctx.get(rs.o.valid) else None)
        ctx.set(rs.i.valid, 0)
        ctx.set(rs.o.ready, 0)                   # hold, then two entries in, flush
        ctx.set(rs.i.valid, 1)
        ctx.set(rs.i.payload, 100)
        await ctx.tick()
        ctx.set(rs.i.payload, 101)
        await ctx.tick()
        assert ctx.get(rs.o.valid) and not ctx.get(rs.i.ready)   # both entries full
        ctx.set(rs.i.valid, 0)
        ctx.set(rs.flush, 1)
        await ctx.tick()
        ctx.set(rs.flush, 0)
        assert not ctx.get(rs.o.valid) and ctx.get(rs.i.ready)

    run_simulation(rs, [tb])
    assert seen == list(range(10))


@pytest.mark.parametrize("late_ready,urgent,groups,route", [
    (True, (), 1, None), (True, ("b",), 1, None), (True, ("a", "b"), 1, None),
    (False, (), 3, None), (False, (), 8, None), (True, (), 8, None), (True, ("b",), 3, None),
    (True, ("b",), 4, ("b", 6)), (True, (), 1, ("a", 32))])
def test_register_slice_variants_match_cycle_for_cycle(late_ready, urgent, groups, route):
    """``late_ready=True`` changes only where o.ready goes, never what is seen;
    neither do urgent fields (read through their own copy of the pointer) nor
    payload groups (each with control flip-flops of its own). ``o_route`` is
    the plain slice's ``o.valid`` decoded by the field (a value past the
    route's width: no bit)."""
    from amaranth.hdl import Module
    layout = data.StructLayout({"a": 5, "b": 3})
    m = Module()
    m.submodules.a = a = RegisterSlice(layout)
    m.submodules.b = b = RegisterSlice(layout, late_ready=late_ready, urgent=urgent, groups=groups,
                                       route=route)
    assert (b.urgent, b.groups, b.route) == (urgent, groups, route)
    rng = random.Random(7 + groups)

    async def tb(ctx):
        for k in range(400):
            iv, op, orr, fl = rng.random() < 0.7, rng.randrange(256), rng.random() < 0.6, k % 97 == 50
            for rs in (a, b):
                ctx.set(rs.i.valid, iv)
                ctx.set(rs.i.payload, {"a": op & 31, "b": op >> 5})
                ctx.set(rs.o.ready, orr)
                ctx.set(rs.flush, fl)
            assert ctx.get(a.i.ready) == ctx.get(b.i.ready)
            assert ctx.get(a.o.valid) == ctx.get(b.o.valid)
            if ctx.get(a.o.valid):
                pa, pb = ctx.get(a.o.payload), ctx.get(b.o.payload)
                assert (pa.a, pa.b) == (pb.a, pb.b)
            if route is not None:
                field, n = route
                value = getattr(ctx.get(a.o.payload), field)
                want = 1 << value if ctx.get(a.o.valid) and value < n else 0
                assert ctx.get(b.o_route) == want
            await ctx.tick()

    run_simulation(m, [tb])


@pytest.mark.parametrize("late_ready", [False, True])
def test_register_slice_payload_init(late_ready):
    """Before the first entry the payload registers hold ``payload_init``;
    after it the slice behaves as any other."""
    layout = data.StructLayout({"a": 5, "b": 3})
    rs = RegisterSlice(layout, late_ready=late_ready, payload_init=0xA5)
    assert rs.payload_init == 0xA5

    async def tb(ctx):
        assert not ctx.get(rs.o.valid)
        p = ctx.get(rs.o.payload)
        assert (p.a, p.b) == (0xA5 & 31, 0xA5 >> 5)
        ctx.set(rs.o.ready, 1)
        await stream_put(ctx, rs.i, {"a": 3, "b": 1})
        p = ctx.get(rs.o.payload)
        assert ctx.get(rs.o.valid) and (p.a, p.b) == (3, 1)

    run_simulation(rs, [tb])
    with pytest.raises(ValueError, match=r"Payload reset value must be an integer in 0\.\.2\*\*8-1, not 256"):
        RegisterSlice(layout, payload_init=256)


def test_register_slice_rejects_bad_urgent_fields():
    layout = data.StructLayout({"a": 5, "b": 3})
    with pytest.raises(ValueError, match="late_ready=True"):
        RegisterSlice(layout, urgent=("a",))
    with pytest.raises(ValueError, match=r"Urgent fields \['c'\] are not fields"):
        RegisterSlice(layout, late_ready=True, urgent=("c",))
    with pytest.raises(ValueError, match="A route needs late_ready=True"):
        RegisterSlice(layout, route=("a", 4))
    with pytest.raises(ValueError, match=r"Route field 'c' is not a field"):
        RegisterSlice(layout, late_ready=True, route=("c", 4))
    with pytest.raises(ValueError, match=r"Route width must be a positive integer, not 0"):
        RegisterSlice(layout, late_ready=True, route=("a", 0))


def test_register_slice_rejects_an_empty_payload():
    with pytest.raises(ValueError, match=r"at least 1 bit wide"):
        RegisterSlice(0)


@pytest.mark.parametrize("groups", [0, 9, True, 2.0])
def test_register_slice_rejects_bad_groups(groups):
    with pytest.raises(ValueError, match=r"Groups must be an integer in 1\.\.8 \(the payload width\)"):
        RegisterSlice(8, groups=groups)


@pytest.mark.parametrize("late_ready,control", [(False, 3), (True, 4)])
def test_register_slice_groups_survive_synthesis(tmp_path, late_ready, control):
    """Each payload group keeps its control flip-flops through synth_ecp5
    (skid: output valid, skid valid, skid free; queue: two full bits and the
    two pointers): Yosys does not merge lock-step state machines."""
    from yosys_stat import ecp5_cells
    counts = {groups: ecp5_cells(tmp_path, RegisterSlice(48, late_ready=late_ready, groups=groups),
                                 "s", "TRELLIS_FF")["TRELLIS_FF"]
              for groups in (1, 4)}
    assert counts == {1: 2 * 48 + control, 4: 2 * 48 + 4 * control}


class _Copied(wiring.Component):
    """A plain register and its extra copies, each to an output of its own."""
    def __init__(self, count, width=6):
        self._count = count
        super().__init__({"d": In(width), "load": In(1),
                          "q": Out(width).array(count + 1)})

    def elaborate(self, platform):
        from amaranth.hdl import Module, Signal
        m = Module()
        plain = Signal.like(self.d)
        with m.If(self.load):
            m.d.sync += plain.eq(self.d)
        copies = [plain] + register_copies(m, self.d, self.load, self._count, name="copy")
        m.d.comb += [q.eq(c) for q, c in zip(self.q, copies)]
        return m


def test_register_copies_hold_what_the_plain_register_holds():
    dut = _Copied(MAX_EXTRA_COPIES)
    rng = random.Random(3)

    async def tb(ctx):
        held = None
        for _ in range(200):
            d, load = rng.randrange(64), rng.random() < 0.5
            ctx.set(dut.d, d)
            ctx.set(dut.load, load)
            await ctx.tick()
            held = d if load else held
            if held is not None:      # before the first load only the reset values differ
                assert [ctx.get(q) for q in dut.q] == [held] * (MAX_EXTRA_COPIES + 1)

    run_simulation(dut, [tb])


def test_register_copies_survive_synthesis(tmp_path):
    """Yosys merges duplicate flip-flops; the copies must come out of
    synth_ecp5 as flip-flops of their own (the point of them)."""
    from yosys_stat import ecp5_cells
    width = 6
    cells = ecp5_cells(tmp_path, _Copied(MAX_EXTRA_COPIES, width), "copied", "TRELLIS_FF")
    assert cells["TRELLIS_FF"] == width * (MAX_EXTRA_COPIES + 1)


def test_register_copies_reject_too_many():
    from amaranth.hdl import Module
    with pytest.raises(ValueError, match=r"Copies must be an integer in 0\.\.3, not 4"):
        register_copies(Module(), 0, 1, MAX_EXTRA_COPIES + 1, name="x")
