"""A typed queue: a synchronous FIFO with stream ports and a payload shape."""
from __future__ import annotations

from amaranth.hdl import Module, Shape
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

__all__ = ["Queue"]


class Queue(wiring.Component):
    """First in, first out, with typed ``lib.stream`` ports.

    Parameters
    ----------
    shape : shape-castable
        Payload shape (a plain width, an enum or a ``data`` layout); at least
        one bit wide.
    depth : int
        Number of entries (at least 1).
    buffered : bool
        ``True`` (default): the read side is registered (``SyncFIFOBuffered``:
        one more cycle of latency, better timing, block RAM when deep).
        ``False``: first-word fall-through in the same cycle (``SyncFIFO``).

    Interface attributes
    --------------------
    w : ``In(stream.Signature(shape))``
        Entries in; ``w.ready`` is low while the queue is full.
    r : ``Out(stream.Signature(shape))``
        Entries out, oldest first.
    level : ``Out(range(depth + 1))``
        Entries held.
    """

    def __init__(self, shape, depth, *, buffered=True):
        width = Shape.cast(shape).width
        if width < 1:
            raise ValueError(f"Queue payload must be at least 1 bit wide, not {shape!r}")
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
            raise ValueError(f"Queue depth must be a positive integer, not {depth!r}")
        self._shape = shape
        self._depth = depth
        self._buffered = bool(buffered)
        super().__init__({
            "w": In(stream.Signature(shape)),
            "r": Out(stream.Signature(shape)),
            "level": Out(range(depth + 1)),
        })

    shape = property(lambda self: self._shape, doc="Payload shape.")
    depth = property(lambda self: self._depth, doc="Number of entries.")
    buffered = property(lambda self: self._buffered, doc="Registered read side.")

    def elaborate(self, platform):
        m = Module()
        width = Shape.cast(self._shape).width
        fifo_cls = SyncFIFOBuffered if self._buffered else SyncFIFO
        m.submodules.fifo = fifo = fifo_cls(width=width, depth=self._depth)
        m.d.comb += [
            fifo.w_data.eq(self.w.payload),
            fifo.w_en.eq(self.w.valid),
            self.w.ready.eq(fifo.w_rdy),
            self.r.payload.eq(fifo.r_data),
            self.r.valid.eq(fifo.r_rdy),
            fifo.r_en.eq(self.r.ready),
            self.level.eq(fifo.level),
        ]
        return m
