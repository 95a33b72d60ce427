"""Fault-record queue: the DMA's fault records, for the host."""
from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..dma import DmaFault
from ..lib import Queue

__all__ = ["FaultQueue"]


class FaultQueue(wiring.Component):
    """Queues fault records (channel, context, va, cause), oldest first.

    ``w`` is always ready: a record that finds the queue full is dropped and
    ``overflow`` set.

    Parameters
    ----------
    arch : :class:`hw.isa.ArchParams`
    depth : int
        Records held.

    Interface attributes
    --------------------
    w : ``In(stream.Signature(DmaFault(arch, channels)))``
        From the DMA's ``fault``.
    r : ``Out(stream.Signature(DmaFault(arch, channels)))``
        To the host.
    flush : ``In(1)``
        Discard records (one a cycle) while high.
    clear_overflow : ``In(1)``
    overflow : ``Out(1)``
        Sticky: a record was dropped.
    empty : ``Out(1)``
    """

    def __init__(self, arch, *, depth):
        layout = DmaFault(arch, arch.channels)
        self._layout, self._depth = layout, depth
        super().__init__({
            "w": In(stream.Signature(layout)),
            "r": Out(stream.Signature(layout)),
            "flush": In(1),
            "clear_overflow": In(1),
            "overflow": Out(1),
            "empty": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.queue = q = Queue(self._layout, self._depth)
        m.d.comb += [
            q.w.valid.eq(self.w.valid),
            q.w.payload.eq(self.w.payload),
            self.w.ready.eq(1),
            self.r.valid.eq(q.r.valid),
            self.r.payload.eq(q.r.payload),
            q.r.ready.eq(self.r.ready | self.flush),
            self.empty.eq(~q.r.valid),
        ]
        with m.If(self.clear_overflow):
            m.d.sync += self.overflow.eq(0)
        with m.Elif(self.w.valid & ~q.w.ready):
            m.d.sync += self.overflow.eq(1)
        return m
