"""Adder stage 4: count how far normalization shifts the sum left."""
from __future__ import annotations

from .common import LaneStage
from .layouts import AddedLane, Lanes, SumLane, ext_bits
from .normalize import leading_zeros

__all__ = ["Count"]


class Count(LaneStage):
    """Per lane: ``left``, how far :class:`~.normalize.Normalize` shifts the
    sum left when it has no carry: its leading zeros, but never below the
    smallest exponent (at most ``exp - 1``); the rest passes through. A
    stage of its own, from registers, so that the count tree does not follow
    the adder's carry chain in one cycle. One register; parameters as
    :class:`~.common.LaneStage`.

    Interface attributes
    --------------------
    i : ``In(stream.Signature(Lanes(AddedLane(fmt), lanes, user_shape)))``
    o : ``Out(stream.Signature(Lanes(SumLane(fmt), lanes, user_shape)))``
    """

    @staticmethod
    def in_layout(fmt, lanes, user_shape):
        return Lanes(AddedLane(fmt), lanes, user_shape)

    @staticmethod
    def out_layout(fmt, lanes, user_shape):
        return Lanes(SumLane(fmt), lanes, user_shape)

    def compute(self, m, p):
        W = ext_bits(self._fmt)
        out = [self.o.p.user.eq(p.user)]
        for k in range(self._lanes):
            s, o = p.lanes[k], self.o.p.lanes[k]
            # the leading zeros of the sum with a one forced at bit W - exp
            # (``floor``, decoded by AddSub), which caps the count at exp - 1
            # without a compare
            left = leading_zeros(m, s.sum[:W] | s.floor, f"left{k}")
            out += [o.sum.eq(s.sum), o.exp.eq(s.exp), o.nan.eq(s.nan), o.inf.eq(s.inf),
                    o.sign.eq(s.sign), o.left.eq(left)]
        return out
