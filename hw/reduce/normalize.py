"""Adder stage 5: normalize the sum."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Mux, Signal

from .common import LaneStage
from .layouts import Lanes, NormLane, SumLane, ext_bits

__all__ = ["Normalize", "leading_zeros"]


def leading_zeros(m, value, name):
    """A signal counting the zeros above ``value``'s highest set bit
    (``len(value)`` when it is zero): a tree of log2 levels (each half says
    whether it is all zeros and, if not, its count), not a priority chain.
    Each node reads the bits signal directly (a half is all zeros when its
    OR is not set): an expression that nested its children's flags would
    copy them into every use, and the Python simulator evaluates a copy
    each time (hundreds of times slower)."""
    n = len(value)
    size = 2
    while size < n:
        size *= 2
    # below the value: a one (so zero counts n), then zeros to a power of two
    bits = Signal(size, name=f"{name}_bits")
    m.d.comb += bits.eq((Cat(Const(0, size - n - 1), Const(1, 1), value)
                         if size > n else value)[::-1])

    # bits[0] is the most significant: the count of leading zeros in
    # bits[lo:lo + width] when they are not all zero
    def count(lo, width):
        half = width // 2
        high_zero = ~bits[lo:lo + half].any()
        if width == 2:              # (no zero-width count below: Verilog has none)
            return high_zero
        return Cat(Mux(high_zero, count(lo + half, half), count(lo, half)), high_zero)

    lz = Signal(range(n + 1), name=name)
    m.d.comb += lz.eq(count(0, size) if size > n else Mux(~bits.any(), n, count(0, size)))
    return lz


class Normalize(LaneStage):
    """Per lane: one place right after a carry out of the significand; else
    left by ``left`` (the sum's leading zeros, never below the smallest
    exponent, worked out by :class:`~.count.Count`), which leaves a
    subnormal where the exponent runs out. The hidden one, if any, ends at
    the top of ``norm``, guard, round and sticky below its last place. One
    register; parameters as :class:`~.common.LaneStage`.

    Interface attributes
    --------------------
    i : ``In(stream.Signature(Lanes(SumLane(fmt), lanes, user_shape)))``
    o : ``Out(stream.Signature(Lanes(NormLane(fmt), lanes, user_shape)))``
    """

    @staticmethod
    def in_layout(fmt, lanes, user_shape):
        return Lanes(SumLane(fmt), lanes, user_shape)

    @staticmethod
    def out_layout(fmt, lanes, user_shape):
        return Lanes(NormLane(fmt), lanes, user_shape)

    def _lane(self, m, k, s, o):
        W = ext_bits(self._fmt)
        carry = s.sum[W]
        return [
            o.norm.eq(Mux(carry, Cat(s.sum[0] | s.sum[1], s.sum[2:]), s.sum[:W] << s.left)),
            o.exp.eq(Mux(carry, s.exp + 1, s.exp - s.left)),
            o.sign.eq(s.sign), o.nan.eq(s.nan), o.inf.eq(s.inf),
        ]

    def compute(self, m, p):
        out = [self.o.p.user.eq(p.user)]
        for k in range(self._lanes):
            out += self._lane(m, k, p.lanes[k], self.o.p.lanes[k])
        return out
