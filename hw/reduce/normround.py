"""Adder stage 3: normalize the sum, round to nearest even, pack."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .common import pipeline_register
from .layouts import GUARD_BITS, Lanes, SumLane, ext_bits

__all__ = ["NormRound", "leading_zeros"]


def leading_zeros(m, value, name):
    """A signal counting the zeros above ``value``'s highest set bit
    (``len(value)`` when it is zero): a priority encoder."""
    n = len(value)
    lz = Signal(range(n + 1), name=name)
    m.d.comb += lz.eq(n)
    for i in range(n):              # higher bits come later, so they win
        with m.If(value[i]):
            m.d.comb += lz.eq(n - 1 - i)
    return lz


class NormRound(wiring.Component):
    """Per lane: normalize the sum (one place right after a carry; left by
    its leading zeros, but never below the smallest exponent, which leaves a
    subnormal), round to nearest, ties to even, on the guard bit and the
    sticky OR of the bits below it, and pack. The rounding increment may
    carry into the exponent (a subnormal becomes normal, a significand of all
    ones moves up a binade, the largest finite number becomes infinity).
    Finally the special cases: the canonical quiet NaN
    (:attr:`~.common.FloatFormat.quiet_nan`) or an infinity. One register.

    Parameters
    ----------
    fmt : :class:`~.common.FloatFormat`
    lanes : int
    user_shape : shape-castable

    Interface attributes
    --------------------
    i : ``In(stream.Signature(Lanes(SumLane(fmt), lanes, user_shape)))``
    o : ``Out(stream.Signature(AddResult(fmt, lanes, user_shape)))``
    """

    def __init__(self, fmt, lanes, user_shape=0):
        from .layouts import AddResult
        self._fmt, self._lanes = fmt, lanes
        super().__init__({
            "i": In(stream.Signature(Lanes(SumLane(fmt), lanes, user_shape))),
            "o": Out(stream.Signature(AddResult(fmt, lanes, user_shape))),
        })

    def _lane(self, m, k, s):
        f = self._fmt
        E, F = f.exp_bits, f.frac_bits
        W = ext_bits(f)                 # the hidden one sits at bit W - 1 of norm
        carry = s.sum[W]
        lz = leading_zeros(m, s.sum[:W], f"lz{k}")
        limit = Signal(E, name=f"limit{k}")          # exponent steps down to 1 at most
        left = Signal(range(W + 1), name=f"left{k}")
        m.d.comb += [limit.eq(s.exp - 1), left.eq(Mux(lz > limit, limit, lz))]

        norm = Signal(W, name=f"norm{k}")
        exp = Signal(E + 1, name=f"exp{k}")           # one more bit: the carry may reach exp_max
        with m.If(carry):
            m.d.comb += [norm.eq(Cat(s.sum[0] | s.sum[1], s.sum[2:])), exp.eq(s.exp + 1)]
        with m.Else():
            m.d.comb += [norm.eq(s.sum[:W] << left), exp.eq(s.exp - left)]

        guard = norm[GUARD_BITS - 1]
        sticky = norm[:GUARD_BITS - 1].any()
        lsb = norm[GUARD_BITS]
        up = guard & (sticky | lsb)
        field = Mux(norm[W - 1], exp, 0)              # no hidden one: subnormal (or zero)
        packed = Signal(E + F + 2, name=f"packed{k}")
        m.d.comb += packed.eq(Cat(norm[GUARD_BITS:GUARD_BITS + F], field) + up)
        overflow = packed[F:] >= f.exp_max

        out = Signal(f.width, name=f"res{k}")
        with m.If(s.nan):
            m.d.comb += out.eq(f.quiet_nan)
        with m.Elif(s.inf | overflow):
            m.d.comb += out.eq(Cat(Const(f.infinity, E + F), s.sign))
        with m.Else():
            m.d.comb += out.eq(Cat(packed[:E + F], s.sign))
        return out

    def elaborate(self, platform):
        m = Module()
        w = self._fmt.width

        def compute(p):
            out = [self.o.p.user.eq(p.user)]
            for k in range(self._lanes):
                out.append(self.o.p.sum[k * w:(k + 1) * w].eq(self._lane(m, k, p.lanes[k])))
            return out

        pipeline_register(m, self.i, self.o, compute)
        return m
