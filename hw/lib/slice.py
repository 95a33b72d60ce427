"""The register slice: a stream stage that cuts every combinational path."""
from __future__ import annotations

from amaranth.hdl import Module, Shape, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["RegisterSlice"]


class RegisterSlice(wiring.Component):
    """A two-entry skid buffer: ``o`` is ``i`` one cycle later, at full rate.

    ``o.valid`` and ``o.payload`` come from registers, and so does
    ``i.ready`` (high while the skid entry is empty), so neither the forward
    nor the backward path crosses it: a slice between two stages lets each be
    timed alone. An entry arriving while ``o`` is held goes to the skid
    register and leaves next, so no entry is lost or reordered and a stream
    without back-pressure moves one entry a cycle.

    Parameters
    ----------
    shape : shape-castable
        Payload shape (at least one bit wide).

    Interface attributes
    --------------------
    i : ``In(stream.Signature(shape))``
    o : ``Out(stream.Signature(shape))``
    flush : ``In(1)``
        Drop both entries (takes effect at the clock edge).
    """

    def __init__(self, shape):
        if Shape.cast(shape).width < 1:
            raise ValueError(f"Register slice payload must be at least 1 bit wide, not {shape!r}")
        self._shape = shape
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
            "flush": In(1),
        })

    shape = property(lambda self: self._shape, doc="Payload shape.")

    def elaborate(self, platform):
        m = Module()
        skid_valid = Signal()
        skid = Signal.like(self.i.payload)
        m.d.comb += self.i.ready.eq(~skid_valid)
        taken_in = self.i.valid & self.i.ready
        out_free = ~self.o.valid | self.o.ready
        with m.If(out_free):
            # the skid entry (older) first, else the entry arriving now
            with m.If(skid_valid):
                m.d.sync += [self.o.payload.eq(skid), self.o.valid.eq(1), skid_valid.eq(0)]
            with m.Else():
                m.d.sync += [self.o.payload.eq(self.i.payload), self.o.valid.eq(self.i.valid)]
        with m.Elif(taken_in):
            m.d.sync += [skid.eq(self.i.payload), skid_valid.eq(1)]
        with m.If(self.flush):
            m.d.sync += [self.o.valid.eq(0), skid_valid.eq(0)]
        return m
