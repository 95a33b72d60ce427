"""Adder stage 4: normalize the sum."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Mux, Signal

from .common import LaneStage
from .layouts import Lanes, NormLane, SumLane, ext_bits

__all__ = ["Normalize", "leading_zeros"]


def leading_zeros(m, value, name):
    """A signal counting the zeros above ``value``'s highest set bit
    (``len(value)`` when it is zero): a tree of log2 levels (each half says
    whether it is all zeros and, if not, its count), not a priority chain."""
    n = len(value)
    size = 1
    while size < n:
        size *= 2
    # below the value: a one (so zero counts n), then zeros to a power of two
    bits = (Cat(Const(0, size - n - 1), Const(1, 1), value) if size > n else value)[::-1]
    # bits[0] is the most significant; each node: (all zero, count if not)
    nodes = [(~bits[i], Const(0, 0)) for i in range(size)]
    while len(nodes) > 1:
        nodes = [(hz & lz_, Cat(Mux(hz, lc, hc), hz))
                 for (hz, hc), (lz_, lc) in zip(nodes[0::2], nodes[1::2])]
    zero, count = nodes[0]
    lz = Signal(range(n + 1), name=name)
    m.d.comb += lz.eq(count if size > n else Mux(zero, n, count))
    return lz


class Normalize(LaneStage):
    """Per lane: one place right after a carry out of the significand; else
    left by ``left`` (the sum's leading zeros, never below the smallest
    exponent, worked out by :class:`~.addsub.AddSub`), which leaves a
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
