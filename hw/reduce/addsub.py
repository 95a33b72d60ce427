"""Adder stage 3: add or subtract the aligned significands."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Mux, Signal

from .common import LaneStage
from .layouts import GUARD_BITS, AddedLane, AlignedLane, Lanes, ext_bits

__all__ = ["AddSub"]


class AddSub(LaneStage):
    """Per lane: ``big + small`` when the signs agree, ``big - small`` when
    they differ (never negative: ``big`` is the larger magnitude). The sum
    is exact except for the sticky bit, which keeps rounding correct. An
    exact zero from operands of different signs is +0 (round to nearest
    even), from operands of one sign it keeps that sign (-0 + -0 = -0).
    Beside the adder it decodes ``floor`` from the exponent, for the next
    stage, :class:`~.count.Count`, which counts the sum's leading zeros (a
    carry chain and a count tree in a row do not fit one cycle). One
    register; parameters as :class:`~.common.LaneStage`.

    Interface attributes
    --------------------
    i : ``In(stream.Signature(Lanes(AlignedLane(fmt), lanes, user_shape)))``
    o : ``Out(stream.Signature(Lanes(AddedLane(fmt), lanes, user_shape)))``
    """

    @staticmethod
    def in_layout(fmt, lanes, user_shape):
        return Lanes(AlignedLane(fmt), lanes, user_shape)

    @staticmethod
    def out_layout(fmt, lanes, user_shape):
        return Lanes(AddedLane(fmt), lanes, user_shape)

    def compute(self, m, p):
        W = ext_bits(self._fmt)
        out = [self.o.p.user.eq(p.user)]
        for k in range(self._lanes):
            a, o = p.lanes[k], self.o.p.lanes[k]
            big = Cat(Const(0, GUARD_BITS), a.big)
            total = Signal(W + 1, name=f"total{k}")
            m.d.comb += total.eq(Mux(a.sub, big - a.small, big + a.small))
            # a one-hot decode of exp, written as a shift: one operation for
            # the Python simulator, not W compares
            floor = (Const(1 << W, W + 1) >> a.exp)[:W]
            out += [
                o.sum.eq(total), o.exp.eq(a.exp), o.nan.eq(a.nan), o.inf.eq(a.inf),
                o.floor.eq(floor),
                o.sign.eq(a.sign & ~(a.sub & (big == a.small))),
            ]
        return out
