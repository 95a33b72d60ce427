"""Queues that share one memory: one entry in and one head read a cycle."""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Mux, Shape, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for

from .widths import index_bits

__all__ = ["QueueBank"]


class QueueBank(wiring.Component):
    """``count`` first-in, first-out queues of ``depth`` entries in one memory.

    For wide entries that arrive one a cycle for one queue of several (a
    queue per channel): each queue in LUT RAM of its own gives every queue a
    write enable that fans out to a cell per four bits, spread wherever the
    cells land. Here the queues are regions of one memory with one write
    port and one read port, which synthesis maps to block RAM (the memory
    asks for it), so a write enables a few block RAMs.

    The read port is registered, as a block RAM's is: the reader names a
    queue in ``r_queue`` and finds that queue's head of this cycle (before
    this cycle's pop) in ``r_data`` in the next cycle. An entry is readable
    from the cycle after it was written (a queue is non-empty from then).
    ``pop`` drops the oldest entry of each queue whose bit is set (of those
    not empty), any number of them in a cycle: a pop moves a read pointer,
    it reads nothing.

    Parameters
    ----------
    shape : shape-castable
        Entry shape (at least one bit wide).
    count : int
        Number of queues (at least 1).
    depth : int
        Entries each queue holds (at least 1); each takes a region of the
        next power of two in the memory.

    Interface attributes
    --------------------
    w : ``In(stream.Signature(shape))``
        Entries in; ``w.ready`` is low while the queue ``w_queue`` is full.
    w_queue : ``In(range(count))``
        The queue ``w`` writes into.
    r_queue : ``In(range(count))``
        The queue whose head ``r_data`` shows in the next cycle.
    r_data : ``Out(shape)``
        The head, in this cycle, of the queue ``r_queue`` named in the
        previous cycle (undefined if that queue was empty then).
    pop : ``In(count)``
        Drop each named queue's oldest entry.
    level : ``Out(range(depth + 1)).array(count)``
        Entries each queue holds.
    """

    def __init__(self, shape, count, depth):
        width = Shape.cast(shape).width
        if width < 1:
            raise ValueError(f"QueueBank entry must be at least 1 bit wide, not {shape!r}")
        for name, value in (("count", count), ("depth", depth)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"QueueBank {name} must be a positive integer, not {value!r}")
        self._shape, self._count, self._depth = shape, count, depth
        super().__init__({
            "w": In(stream.Signature(shape)),
            "w_queue": In(range(max(2, count))),
            "r_queue": In(range(max(2, count))),
            "r_data": Out(shape),
            "pop": In(count),
            "level": Out(range(depth + 1)).array(count),
        })

    shape = property(lambda self: self._shape, doc="Entry shape.")
    count = property(lambda self: self._count, doc="Number of queues.")
    depth = property(lambda self: self._depth, doc="Entries each queue holds.")

    def elaborate(self, platform):
        m = Module()
        n, depth = self._count, self._depth
        region = index_bits(depth)
        # (a queue is read only after its head was written, so a read never
        # meets a write to its address. Synthesis spares the flip-flops that
        # emulate the old data of such a collision, an entry's width on each
        # side, only for a memory marked ``no_rw_check`` whose read register
        # it merges itself: hence a combinational read port and a register)
        m.submodules.mem = mem = Memory(shape=self._shape, depth=n << region, init=[],
                                        attrs={"ram_style": "block", "no_rw_check": 1})
        wr, rd = mem.write_port(), mem.read_port(domain="comb")
        rptr = Array(Signal(region, name=f"rptr{q}") for q in range(n))
        wptr = Array(Signal(region, name=f"wptr{q}") for q in range(n))
        full = Array(self.level[q] == depth for q in range(n))
        qbits = bits_for(n - 1) if n > 1 else 0          # (one queue: no queue number)
        w_queue, r_queue = self.w_queue[:qbits], self.r_queue[:qbits]
        m.d.comb += self.w.ready.eq(~full[w_queue])
        written = self.w.valid & self.w.ready
        m.d.comb += [
            wr.addr.eq(Cat(wptr[w_queue], w_queue)),
            wr.data.eq(self.w.payload),
            wr.en.eq(written),
            rd.addr.eq(Cat(rptr[r_queue], r_queue)),
        ]
        m.d.sync += self.r_data.eq(rd.data)
        for q in range(n):
            push = Signal(name=f"push{q}")
            drop = Signal(name=f"drop{q}")
            m.d.comb += [push.eq(written & (w_queue == q)),
                         drop.eq(self.pop[q] & (self.level[q] != 0))]
            with m.If(push):
                m.d.sync += wptr[q].eq(_next(wptr[q], depth))
            with m.If(drop):
                m.d.sync += rptr[q].eq(_next(rptr[q], depth))
            m.d.sync += self.level[q].eq(self.level[q] + push - drop)
        return m


def _next(pointer, depth):
    """The pointer after ``pointer``, wrapping at ``depth``."""
    return Mux(pointer == depth - 1, 0, pointer + 1)
