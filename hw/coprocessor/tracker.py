"""Write tracker: which of a channel's descriptors in the DMA are fully written."""
from __future__ import annotations

from amaranth.hdl import Module, ResetInserter, Shape, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In

from ..lib import Queue

__all__ = ["WriteTracker"]


class WriteTracker(wiring.Component):
    """Counts one DMA channel's descriptors out of the DMA's descriptor slots.

    The DMA holds ``slots`` descriptors per channel (the one being walked and
    the next) and frees a slot once a descriptor is walked, certainly before
    its last byte is written. So a descriptor the DMA took is counted here,
    with its size, until the channel's write beats have carried that many
    bytes: while fewer than ``slots`` are counted, a slot is free for sure.

    Parameters
    ----------
    slots : int
        The DMA's descriptor slots per channel.
    size_shape : shape-castable
        Shape of a descriptor's byte count.
    max_beat : int
        Most bytes one write beat carries.

    Interface attributes
    --------------------
    taken : ``In(stream.Signature(size_shape))``
        The size of each descriptor the DMA took; ready while a slot is free
        (a descriptor sent while none is free is not counted).
    bytes : ``In(range(max_beat + 1))``
        Bytes written by the channel this cycle.
    clear : ``In(1)``
        Forget everything (the DMA's channel is being cleared).
    """

    def __init__(self, slots, size_shape, max_beat):
        self._slots = slots
        self._size_shape = size_shape
        super().__init__({
            "taken": In(stream.Signature(size_shape)),
            "bytes": In(range(max_beat + 1)),
            "clear": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        sizes = Queue(self._size_shape, self._slots, buffered=False)
        m.submodules.sizes = ResetInserter(self.clear)(sizes)
        wiring.connect(m, wiring.flipped(self.taken), sizes.w)
        width = Shape.cast(self._size_shape).width
        written = Signal(width)                  # bytes of the oldest descriptor so far
        written_next = Signal(width + 1)
        m.d.comb += [
            written_next.eq(written + self.bytes),
            sizes.r.ready.eq(written_next >= sizes.r.payload),
        ]
        with m.If(self.clear):
            m.d.sync += written.eq(0)
        with m.Elif(sizes.r.valid & sizes.r.ready):
            m.d.sync += written.eq(written_next - sizes.r.payload)
        with m.Else():
            m.d.sync += written.eq(written_next)
        return m
