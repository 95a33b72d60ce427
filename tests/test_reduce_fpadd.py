# amaranth: UnusedElaboratable=no
"""hw/reduce's floating-point lane adder against numpy (tests/fpref.py), on
bit patterns: edge-case sweeps, constructed cancellations / carries / ties /
overflows, hypothesis-random words, each under random idle cycles on the
input and random back-pressure on the output; its latency and throughput;
each stage's stream contract; its Verilog."""
import random

import pytest
from amaranth.back import verilog
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator
from amaranth.lib import data
from hypothesis import HealthCheck, given, settings, strategies as st

from fpref import QNAN, WIDTH, check_sums as check, edge_values
from gen.simkit import run_simulation, stream_get, stream_monitor, stream_put
from hw.reduce import FORMATS, FpAdd
from hw.reduce.addsub import AddSub
from hw.reduce.count import Count
from hw.reduce.align import Align
from hw.reduce.normalize import Normalize, leading_zeros
from hw.reduce.order import Order, _above
from hw.reduce.roundpack import RoundPack

FMTS = ("f32", "bf16")
SEQ_BITS = 16          # side-band: a sequence number, to catch drops and repeats


def run_adder(fmt, data_width, pairs, *, seed=0, idle=0.2, bp=0.3, own_operands=False):
    """Sums of ``pairs`` (element bit patterns) through an :class:`FpAdd`,
    packed ``lanes`` to a word, under random idle cycles and back-pressure.
    Asserts every word comes out once, in order, and that an offered sum
    stays offered unchanged until taken."""
    w = WIDTH[fmt]
    dut = FpAdd(fmt, data_width, user_shape=SEQ_BITS, own_operands=own_operands)
    lanes = dut.lanes
    pairs = list(pairs) + [(0, 0)] * (-len(pairs) % lanes)
    words = [(sum(a << (k * w) for k, (a, _) in enumerate(pairs[i:i + lanes])),
              sum(b << (k * w) for k, (_, b) in enumerate(pairs[i:i + lanes])))
             for i in range(0, len(pairs), lanes)]
    rng = random.Random(seed)
    out = []

    async def producer(ctx):
        for n, (a, b) in enumerate(words):
            await stream_put(ctx, dut.i, {"a": a, "b": b, "user": n % (1 << SEQ_BITS)},
                             rng=rng, idle_prob=idle)

    async def consumer(ctx):
        for _ in words:
            p = await stream_get(ctx, dut.o, rng=rng, bp_prob=bp)
            out.append((int(p.sum), int(p.user)))

    run_simulation(dut, [producer, consumer], [stream_monitor(dut.o, "o")])
    assert [u for _, u in out] == [n % (1 << SEQ_BITS) for n in range(len(words))]
    mask = (1 << w) - 1
    return pairs, [s >> (k * w) & mask for s, _ in out for k in range(lanes)]


# ------------------------------------------------------------------ arguments
@pytest.mark.parametrize("fmt", ["f16", "F32", None, 32])
def test_bad_format(fmt):
    with pytest.raises(ValueError, match=r"Format must be one of 'f32', 'bf16', not " + repr(fmt)):
        FpAdd(fmt, 32)


@pytest.mark.parametrize("fmt,width", [("f32", 16), ("f32", 48), ("bf16", 24), ("bf16", 0),
                                       ("f32", True), ("f32", "32"), ("bf16", -32)])
def test_bad_data_width(fmt, width):
    bits = WIDTH[fmt]
    with pytest.raises(ValueError, match=rf"multiple of {bits} bits \({fmt} elements\), "
                                         rf"not {repr(width)}"):
        FpAdd(fmt, width)


@pytest.mark.parametrize("fmt,width,lanes", [("f32", 32, 1), ("f32", 256, 8), ("bf16", 16, 1),
                                             ("bf16", 64, 4), ("bf16", 256, 16)])
def test_properties(fmt, width, lanes):
    dut = FpAdd(fmt, width)
    assert (dut.fmt, dut.data_width, dut.lanes, dut.latency) == (fmt, width, lanes, 7)
    assert dut.capacity == 8                     # 7 stages and the operand skid entry
    assert dut.element_width == WIDTH[fmt]
    assert dut.quiet_nan == QNAN[fmt] == FORMATS[fmt].quiet_nan


# ------------------------------------------------------------------ values
@pytest.mark.parametrize("fmt", FMTS)
def test_edge_value_pairs(fmt):
    """Every pair of edge values (zeros, subnormals, normals at the binade
    ends, the largest finite values, infinities, NaNs; both signs), in both
    orders, two or four lanes a word."""
    vals = edge_values(fmt)
    pairs = [(a, b) for a in vals for b in vals]
    check(fmt, *run_adder(fmt, 64, pairs, seed=1))


def constructed_pairs(fmt, rng, count):
    """Pairs aimed at each path: exact and near cancellation (x + -x, x +
    -(x +- 1..3 ulp)) at every exponent, including subnormals; large
    alignment shifts (one exponent far below the other, sticky bits);
    rounding ties (the smaller operand half an ulp of the larger, with even
    and odd larger); carries into the exponent and overflow to infinity
    (the largest finite values doubled or plus half an ulp)."""
    w = WIDTH[fmt]
    F = FORMATS[fmt].frac_bits
    sign = 1 << (w - 1)
    fmask = (1 << F) - 1
    out = []
    for _ in range(count):
        e = rng.randrange(0, 255)
        x = e << F | rng.getrandbits(F)
        s = rng.getrandbits(1) * sign
        out.append((x | s, x | (s ^ sign)))                              # x + -x
        d = rng.choice([1, 2, 3, -1, -2])
        y = min(max(x + d, 0), (0xFE << F) | fmask)
        out.append((x | s, y | (s ^ sign)))                              # near cancellation
        shift = rng.randrange(1, F + 6)
        ey = max(e - shift, 0)
        out.append((x | s, (ey << F | rng.getrandbits(F)) | rng.choice([s, s ^ sign])))
        if 1 <= e < 254 - F and e > F + 1:                               # ties: half an ulp
            half = (e - F - 1) << F
            out.append((x | s, half | s))
            out.append((x | s, half | (s ^ sign)))
            out.append((x | s, (half + 1) | s))                          # just above a tie
        if e >= 253:                                                     # overflow
            out.append((x | s, x | s))
        out.append(((e << F | fmask) | s, (max(e - F, 0) << F) | s))     # carry into exponent
    big = (0xFE << F) | fmask
    out += [(big, big), (big | sign, big | sign), (big, (0xFE - F - 1) << F),
            (big, ((0xFE - F - 1) << F) | 1), (big, big | sign)]
    return out


@pytest.mark.parametrize("fmt", FMTS)
def test_constructed_cases(fmt):
    rng = random.Random(2)
    pairs = constructed_pairs(fmt, rng, 250)
    check(fmt, *run_adder(fmt, 64, pairs, seed=3))


@pytest.mark.parametrize("fmt", FMTS)
def test_signed_zeros_and_specials(fmt):
    """The cases stated in the documentation, bit for bit."""
    f = FORMATS[fmt]
    sign = 1 << (f.width - 1)
    one = 127 << f.frac_bits
    inf = f.infinity
    cases = {
        (0, 0): 0, (sign, sign): sign, (0, sign): 0, (sign, 0): 0,
        (one, one | sign): 0, (one | sign, one): 0, (1, 1 | sign): 0,
        (sign, one): one, (1, sign): 1, (1, 1): 2,                       # subnormals exact
        (inf, one | sign): inf, (inf | sign, one): inf | sign, (inf, inf): inf,
        (inf, inf | sign): f.quiet_nan, (inf | 1, 0): f.quiet_nan,
        (0, inf | sign | 5): f.quiet_nan, (inf | sign | 1, inf): f.quiet_nan,
    }
    pairs, got = run_adder(fmt, f.width, list(cases), seed=4)
    assert dict(zip(pairs, got)) == cases


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(FMTS), width=st.sampled_from([32, 64, 128]),
       data=st.data(), seed=st.integers(0, 2**16))
def test_random_words(fmt, width, data, seed):
    """Random bit patterns (all exponents equally likely, so specials and
    subnormals appear), and operand pairs with close exponents (where the
    cancellation and rounding paths are); random idle and back-pressure."""
    w = WIDTH[fmt]
    bits = st.integers(0, (1 << w) - 1)
    near = st.tuples(bits, st.integers(0, (1 << (w - 3)) - 1), st.booleans()).map(
        lambda t: (t[0], t[0] ^ t[1] ^ (t[2] << (w - 1))))
    pairs = data.draw(st.lists(st.one_of(st.tuples(bits, bits), near), min_size=1,
                               max_size=64))
    check(fmt, *run_adder(fmt, width, pairs, seed=seed, idle=0.3, bp=0.4))


@pytest.mark.parametrize("fmt,width", [("f32", 256), ("bf16", 256)])
def test_wide_bus(fmt, width):
    """Every lane of a 256-bit word is its own adder."""
    rng = random.Random(5)
    w = WIDTH[fmt]
    pairs = [(rng.getrandbits(w), rng.getrandbits(w)) for _ in range(16 * 256 // w)]
    pairs += constructed_pairs(fmt, rng, 8)
    check(fmt, *run_adder(fmt, width, pairs, seed=6))


def test_own_operand_register_sums_the_same():
    """``own_operands`` (as the reduce unit's bf16 adder) changes only the
    operand register's reset value."""
    rng = random.Random(9)
    pairs = [(rng.getrandbits(16), rng.getrandbits(16)) for _ in range(64)]
    pairs += constructed_pairs("bf16", rng, 8)
    check("bf16", *run_adder("bf16", 64, pairs, seed=10, own_operands=True))


# ------------------------------------------------------------------ timing
@pytest.mark.parametrize("fmt", FMTS)
def test_latency_and_throughput(fmt):
    """Back to back without back-pressure: a word accepted every cycle, each
    sum offered exactly ``latency`` cycles after its word was accepted. A
    stalled output with a full pipeline stops the input after one more word
    (the operand register's skid entry); from empty, the input fills the
    ``capacity`` entries, then holds. Nothing is lost."""
    dut = FpAdd(fmt, 64)
    rng = random.Random(7)
    n = 48
    words = [(rng.getrandbits(64), rng.getrandbits(64)) for _ in range(n)]
    accepted, offered, taken = [], [], []

    async def tb(ctx):
        cycle = sent = 0
        while len(taken) < n:
            stall = 15 <= cycle < 20 or 30 <= cycle < 40
            gap = 22 <= cycle < 30                           # the pipeline drains
            ctx.set(dut.o.ready, not stall)
            ctx.set(dut.i.valid, sent < n and not gap)
            if sent < n and not gap:
                ctx.set(dut.i.payload, {"a": words[sent][0], "b": words[sent][1], "user": 0})
            _, _, iv, ir, ov, orr, op = await ctx.tick().sample(
                dut.i.valid, dut.i.ready, dut.o.valid, dut.o.ready, dut.o.payload)
            if iv and ir:
                accepted.append(cycle)
                sent += 1
            if ov and (not offered or offered[-1] != cycle):
                offered.append(cycle)
            if ov and orr:
                taken.append(int(op.sum))
            cycle += 1
        ctx.set(dut.o.ready, 0)

    run_simulation(dut, [tb])
    assert accepted[:12] == list(range(12))                     # one word a cycle
    assert offered[:12] == [c + dut.latency for c in accepted[:12]]
    assert [c for c in accepted if 15 <= c < 20] == [15]        # full: the skid entry, then stops
    assert [c for c in accepted if 30 <= c < 40] == list(range(30, 30 + dut.capacity))  # fills
    # lost: the first stall's 5 (4 after its skid entry, and one more: the
    # registered i.ready rises a cycle after o.ready), the 8-cycle gap, and
    # the second stall's 10 less the capacity it filled, plus that one: 16
    assert accepted[-1] == n - 1 + 5 + 8 + (10 - dut.capacity + 1)
    w = WIDTH[fmt]
    lanes = 64 // w
    got = [s >> (k * w) & ((1 << w) - 1) for s in taken for k in range(lanes)]
    pairs = [((a >> (k * w)) & ((1 << w) - 1), (b >> (k * w)) & ((1 << w) - 1))
             for a, b in words for k in range(lanes)]
    check(fmt, pairs, got)


# ------------------------------------------------------------------ stages
@pytest.mark.parametrize("stage", [Order, Align, AddSub, Count, Normalize, RoundPack])
def test_stage_stream_contract(stage):
    """Each stage alone, fed random payloads under random idle cycles and
    back-pressure: every payload leaves once, in order (the side-band
    sequence number), and an offer is held unchanged until taken."""
    dut = stage(FORMATS["f32"], 2, SEQ_BITS)
    rng = random.Random(8)
    n = 200
    width = len(dut.i.payload.as_value())
    seen = []

    async def producer(ctx):
        for k in range(n):
            raw = rng.getrandbits(width) & ~(((1 << SEQ_BITS) - 1) << (width - SEQ_BITS))
            payload = data.Const(dut.i.payload.shape(), raw | k << (width - SEQ_BITS))
            await stream_put(ctx, dut.i, payload, rng=rng, idle_prob=0.3)

    async def consumer(ctx):
        for _ in range(n):
            p = await stream_get(ctx, dut.o, rng=rng, bp_prob=0.5)
            seen.append(int(p.user))

    run_simulation(dut, [producer, consumer], [stream_monitor(dut.o, stage.__name__)])
    assert seen == list(range(n))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 11, 27])
def test_leading_zeros_counts_against_bit_length(n):
    """Count's leading-zero tree: every value of up to 11 bits, random
    values (of every magnitude) above; all zeros counts ``n``."""
    m = Module()
    value = Signal(n)
    lz = leading_zeros(m, value, "lz")
    rng = random.Random(n)
    values = (range(1 << n) if n <= 11 else
              [0, (1 << n) - 1] + [rng.getrandbits(n) >> rng.randrange(n) for _ in range(3000)])
    sim = Simulator(m)

    async def bench(ctx):
        for v in values:
            ctx.set(value, v)
            assert ctx.get(lz) == n - v.bit_length(), (n, v)

    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("limit", [0, 1, 11, 16, 27, 254, 255])
def test_order_cap_compare_matches_greater_than(limit):
    """Order's constant compare (written as LUT logic, no carry chain):
    ``x > limit`` for every 8-bit ``x``."""
    m = Module()
    x, above = Signal(8), Signal()
    m.d.comb += above.eq(_above(x, limit))
    sim = Simulator(m)

    async def bench(ctx):
        for v in range(256):
            ctx.set(x, v)
            assert ctx.get(above) == (v > limit), (limit, v)

    sim.add_testbench(bench)
    sim.run()


def test_order_cap_compare_has_no_carry_chain(tmp_path):
    """The point of ``_above``: synth_ecp5 maps ``diff > 27`` to a carry
    chain (CCU2C cells) and ``_above(diff, 27)`` to none."""
    from yosys_stat import ecp5_cells
    chains = {}
    for name, compare in (("plain", lambda x: x > 27), ("above", lambda x: _above(x, 27))):
        m = Module()
        x, y = Signal(8), Signal()
        m.d.comb += y.eq(compare(x))
        chains[name] = ecp5_cells(tmp_path, m, name, "CCU2C", ports=[x, y])["CCU2C"]
    assert chains["plain"] > 0 and chains["above"] == 0


# ------------------------------------------------------------------ Verilog
@pytest.mark.parametrize("fmt", FMTS)
def test_verilog(fmt):
    text = verilog.convert(FpAdd(fmt, 64), name=f"fpadd_{fmt}", emit_src=False)
    assert f"module fpadd_{fmt}" in text and "o__payload" in text
