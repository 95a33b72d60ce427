"""Adder stage 2: align the smaller operand to the larger one's exponent."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Signal

from .common import LaneStage
from .layouts import GUARD_BITS, AlignedLane, Lanes, OrderedLane, ext_bits

__all__ = ["Align"]


class Align(LaneStage):
    """Per lane: shift ``small`` right by ``shift`` places, keeping guard and
    round bits and OR-ing everything shifted further out into the sticky
    bit; the rest passes through. One register; parameters as
    :class:`~.common.LaneStage`.

    Interface attributes
    --------------------
    i : ``In(stream.Signature(Lanes(OrderedLane(fmt), lanes, user_shape)))``
    o : ``Out(stream.Signature(Lanes(AlignedLane(fmt), lanes, user_shape)))``
    """

    @staticmethod
    def in_layout(fmt, lanes, user_shape):
        return Lanes(OrderedLane(fmt), lanes, user_shape)

    @staticmethod
    def out_layout(fmt, lanes, user_shape):
        return Lanes(AlignedLane(fmt), lanes, user_shape)

    def compute(self, m, p):
        W = ext_bits(self._fmt)
        out = [self.o.p.user.eq(p.user)]
        for k in range(self._lanes):
            a, o = p.lanes[k], self.o.p.lanes[k]
            # small (with GUARD_BITS zeros below) shifted right; a shift of W
            # leaves only the sticky bit
            wide = Signal(2 * W, name=f"wide{k}")
            m.d.comb += wide.eq(Cat(Const(0, W + GUARD_BITS), a.small) >> a.shift)
            # the sticky bit, wide[:W + 1].any(), from the unshifted operand
            # beside the shifter, not after it: small[j] lands at or below
            # bit W when j + GUARD_BITS <= shift
            sticky = Cat(*[a.small[j] & (a.shift >= j + GUARD_BITS)
                           for j in range(len(a.small))]).any()
            out.append(o.small.eq(Cat(sticky, wide[W + 1:])))
            out += [getattr(o, name).eq(getattr(a, name))
                    for name in ("sign", "exp", "sub", "nan", "inf", "big")]
        return out
