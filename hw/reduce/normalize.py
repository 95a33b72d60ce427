"""Adder stage 4: normalize the sum."""
from __future__ import annotations

from amaranth.hdl import Cat, Mux, Signal

from .common import LaneStage
from .layouts import Lanes, NormLane, SumLane, ext_bits

__all__ = ["Normalize", "leading_zeros"]


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


class Normalize(LaneStage):
    """Per lane: one place right after a carry out of the significand; else
    left by its leading zeros, but never below the smallest exponent (which
    leaves a subnormal). The hidden one, if any, ends at the top of
    ``norm``, guard, round and sticky below its last place. One register;
    parameters as :class:`~.common.LaneStage`.

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
        E, W = self._fmt.exp_bits, ext_bits(self._fmt)
        lz = leading_zeros(m, s.sum[:W], f"lz{k}")
        limit = Signal(E, name=f"limit{k}")          # exponent steps down to 1 at most
        left = Signal(range(W + 1), name=f"left{k}")
        m.d.comb += [limit.eq(s.exp - 1), left.eq(Mux(lz > limit, limit, lz))]
        carry = s.sum[W]
        return [
            o.norm.eq(Mux(carry, Cat(s.sum[0] | s.sum[1], s.sum[2:]), s.sum[:W] << left)),
            o.exp.eq(Mux(carry, s.exp + 1, s.exp - left)),
            o.sign.eq(s.sign), o.nan.eq(s.nan), o.inf.eq(s.inf),
        ]

    def compute(self, m, p):
        out = [self.o.p.user.eq(p.user)]
        for k in range(self._lanes):
            out += self._lane(m, k, p.lanes[k], self.o.p.lanes[k])
        return out
