"""Queues in block RAM, one entry in a cycle, every head read ahead."""
from __future__ import annotations

from amaranth.hdl import Array, Module, Mux, Shape, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for

__all__ = ["QueueBank"]


class QueueBank(wiring.Component):
    """``count`` first-in, first-out queues of ``depth`` entries, each in a
    block RAM of its own, their heads read ahead.

    For wide entries that arrive one a cycle for one queue of several (a
    queue per channel) and leave through a register: each queue in LUT RAM
    gives every queue a write enable that fans out to a cell per four bits,
    spread wherever the cells land; a block RAM takes it on a few cells.

    Each queue's memory reads, in every cycle, the entry that will be its
    head in the next (its read pointer after this cycle's pop), through the
    block RAM's registered port: so ``head`` is each queue's oldest entry,
    from the block RAM's output, with no address decided late in the cycle.
    An entry shows there from the second cycle after it was written (in the
    first, the queue is already not empty and its ``head`` still the old
    contents), which a reader that waits a cycle after seeing a queue
    non-empty never notices. ``pop`` drops the oldest entry of each queue
    whose bit is set (of those not empty), any number of them in a cycle.

    Parameters
    ----------
    shape : shape-castable
        Entry shape (at least one bit wide).
    count : int
        Number of queues (at least 1).
    depth : int
        Entries each queue holds (at least 1).

    Interface attributes
    --------------------
    w : ``In(stream.Signature(shape))``
        Entries in; ``w.ready`` is low while the queue ``w_queue`` is full.
    w_queue : ``In(range(count))``
        The queue ``w`` writes into.
    head : ``Out(shape).array(count)``
        Each queue's oldest entry (undefined while empty, and in the cycle
        after the entry was written).
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
            "head": Out(shape).array(count),
            "pop": In(count),
            "level": Out(range(depth + 1)).array(count),
        })

    shape = property(lambda self: self._shape, doc="Entry shape.")
    count = property(lambda self: self._count, doc="Number of queues.")
    depth = property(lambda self: self._depth, doc="Entries each queue holds.")

    def elaborate(self, platform):
        m = Module()
        n, depth = self._count, self._depth
        qbits = bits_for(n - 1) if n > 1 else 0          # (one queue: no queue number)
        w_queue = self.w_queue[:qbits]
        full = Array(self.level[q] == depth for q in range(n))
        m.d.comb += self.w.ready.eq(~full[w_queue])
        written = self.w.valid & self.w.ready
        for q in range(n):
            # (an entry is read only from the cycle after it was written, so a
            # read that meets a write to its address is never used. Synthesis
            # spares the flip-flops that emulate the old data of such a
            # collision, an entry's width on each side, only for a memory
            # marked ``no_rw_check`` whose read register it merges itself:
            # hence a combinational read port and a register)
            mem = Memory(shape=self._shape, depth=depth, init=[],
                         attrs={"ram_style": "block", "no_rw_check": 1})
            m.submodules[f"mem{q}"] = mem
            wr, rd = mem.write_port(), mem.read_port(domain="comb")
            rptr = Signal(range(depth), name=f"rptr{q}")
            wptr = Signal(range(depth), name=f"wptr{q}")
            push = Signal(name=f"push{q}")
            drop = Signal(name=f"drop{q}")
            rptr_next = Signal(range(depth), name=f"rptr{q}_next")
            m.d.comb += [
                push.eq(written & (w_queue == q)),
                drop.eq(self.pop[q] & (self.level[q] != 0)),
                rptr_next.eq(Mux(drop, _next(rptr, depth), rptr)),
                wr.addr.eq(wptr), wr.data.eq(self.w.payload), wr.en.eq(push),
                rd.addr.eq(rptr_next),
            ]
            m.d.sync += [rptr.eq(rptr_next), self.head[q].eq(rd.data),
                         self.level[q].eq(self.level[q] + push - drop)]
            with m.If(push):
                m.d.sync += wptr.eq(_next(wptr, depth))
        return m


def _next(pointer, depth):
    """The pointer after ``pointer``, wrapping at ``depth``."""
    return Mux(pointer == depth - 1, 0, pointer + 1)
