"""Adder stage 3: add or subtract the aligned significands."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Mux

from .common import LaneStage
from .layouts import GUARD_BITS, AlignedLane, Lanes, SumLane

__all__ = ["AddSub"]


class AddSub(LaneStage):
    """Per lane: ``big + small`` when the signs agree, ``big - small`` when
    they differ (never negative: ``big`` is the larger magnitude). The sum
    is exact except for the sticky bit, which keeps rounding correct. An
    exact zero from operands of different signs is +0 (round to nearest
    even), from operands of one sign it keeps that sign (-0 + -0 = -0).
    One register; parameters as :class:`~.common.LaneStage`.

    Interface attributes
    --------------------
    i : ``In(stream.Signature(Lanes(AlignedLane(fmt), lanes, user_shape)))``
    o : ``Out(stream.Signature(Lanes(SumLane(fmt), lanes, user_shape)))``
    """

    @staticmethod
    def in_layout(fmt, lanes, user_shape):
        return Lanes(AlignedLane(fmt), lanes, user_shape)

    @staticmethod
    def out_layout(fmt, lanes, user_shape):
        return Lanes(SumLane(fmt), lanes, user_shape)

    def compute(self, m, p):
        out = [self.o.p.user.eq(p.user)]
        for k in range(self._lanes):
            a, o = p.lanes[k], self.o.p.lanes[k]
            big = Cat(Const(0, GUARD_BITS), a.big)
            total = Mux(a.sub, big - a.small, big + a.small)
            out += [
                o.sum.eq(total), o.exp.eq(a.exp), o.nan.eq(a.nan), o.inf.eq(a.inf),
                o.sign.eq(a.sign & ~(a.sub & (big == a.small))),
            ]
        return out
