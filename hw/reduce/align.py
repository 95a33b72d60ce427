"""Adder stage 2: align the smaller operand to the larger one's exponent."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .common import pipeline_register
from .layouts import GUARD_BITS, AlignedLane, Lanes, OrderedLane, ext_bits

__all__ = ["Align"]


class Align(wiring.Component):
    """Per lane: shift ``small`` right by ``shift`` places, keeping guard and
    round bits and OR-ing everything shifted further out into the sticky
    bit; the rest passes through. One register.

    Parameters
    ----------
    fmt : :class:`~.common.FloatFormat`
    lanes : int
    user_shape : shape-castable
        Side-band carried alongside, unchanged.

    Interface attributes
    --------------------
    i : ``In(stream.Signature(Lanes(OrderedLane(fmt), lanes, user_shape)))``
    o : ``Out(stream.Signature(Lanes(AlignedLane(fmt), lanes, user_shape)))``
    """

    def __init__(self, fmt, lanes, user_shape=0):
        self._fmt, self._lanes = fmt, lanes
        super().__init__({
            "i": In(stream.Signature(Lanes(OrderedLane(fmt), lanes, user_shape))),
            "o": Out(stream.Signature(Lanes(AlignedLane(fmt), lanes, user_shape))),
        })

    def elaborate(self, platform):
        m = Module()
        W = ext_bits(self._fmt)

        def compute(p):
            out = [self.o.p.user.eq(p.user)]
            for k in range(self._lanes):
                a, o = p.lanes[k], self.o.p.lanes[k]
                # small (with GUARD_BITS zeros below) shifted right; a shift
                # of W leaves only the sticky bit
                wide = Signal(2 * W, name=f"wide{k}")
                m.d.comb += wide.eq(Cat(Const(0, W + GUARD_BITS), a.small) >> a.shift)
                out += [o.small.eq(Cat(wide[W] | wide[:W].any(), wide[W + 1:]))]
                out += [getattr(o, name).eq(getattr(a, name))
                        for name in ("sign", "exp", "sub", "nan", "inf", "big")]
            return out

        pipeline_register(m, self.i, self.o, compute)
        return m
