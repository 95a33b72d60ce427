"""A typed queue: a synchronous FIFO with stream ports and a payload shape."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Shape, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .copies import MAX_EXTRA_COPIES, register_copies
from .widths import bit_groups

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
    registered_head : bool
        With ``buffered=False``: the oldest entry is held in flip-flops and
        the rest in the FIFO's memory (default False). Same cycles as the
        plain fall-through queue, but ``r.payload`` comes from a register,
        not through a LUT-RAM read, for a reader that compares it or fans
        it out; costs one entry's flip-flops.
    registered_flags : bool
        ``w.ready`` and ``r.valid`` come straight from flip-flops of their
        own, updated with the level, not from compares of it (default
        False; not with ``registered_head``). Same cycles as the queue
        without it; for a queue whose readiness fans out far (on the ECP5
        board the level's compares were shared between the level's own
        next state and distant readers, and the placer stretched the loop).
        A buffered queue's ``r.valid`` is a flip-flop already; its
        ``w.ready`` becomes one.
    read_copies : int
        With ``registered_flags`` on a fall-through queue: the memory is
        split into this many column groups (at most
        :data:`hw.lib.MAX_EXTRA_COPIES` + 1), each read through its own
        copy of the read pointer (default 1). Same cycles; for a wide
        queue in LUT RAM, where one pointer drives every column's read
        address across the chip (FPGA timing).
    write_free : bool
        With ``registered_flags`` on a fall-through queue: the memory's
        write enable is the not-full flip-flop, so the free slot at the
        write pointer takes ``w.payload`` in every cycle the queue has room,
        and an entry is made only by a push (the pointer moves) (default
        False). Same handshakes, levels and entries; only ``r.payload``
        while ``r.valid`` is low may differ (the last word offered, not a
        stale one). For a wide queue in LUT RAM whose ``w.valid`` is
        decoded: the enable of every column comes from a flip-flop.

    Interface attributes
    --------------------
    w : ``In(stream.Signature(shape))``
        Entries in; ``w.ready`` is low while the queue is full.
    r : ``Out(stream.Signature(shape))``
        Entries out, oldest first.
    level : ``Out(range(depth + 1))``
        Entries held.
    """

    def __init__(self, shape, depth, *, buffered=True, registered_head=False, registered_flags=False,
                 read_copies=1, write_free=False):
        width = Shape.cast(shape).width
        if width < 1:
            raise ValueError(f"Queue payload must be at least 1 bit wide, not {shape!r}")
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
            raise ValueError(f"Queue depth must be a positive integer, not {depth!r}")
        if registered_head and buffered:
            raise ValueError("A registered head is for a fall-through queue (buffered=False)")
        if registered_flags and registered_head:
            raise ValueError("Registered flags are for a queue without a registered head")
        if (not isinstance(read_copies, int) or isinstance(read_copies, bool)
                or not 1 <= read_copies <= MAX_EXTRA_COPIES + 1):
            raise ValueError(f"Read copies must be an integer in 1..{MAX_EXTRA_COPIES + 1}, "
                             f"not {read_copies!r}")
        if read_copies > 1 and (buffered or not registered_flags):
            raise ValueError("Read copies are for a fall-through queue with registered flags")
        if write_free and (buffered or not registered_flags):
            raise ValueError("Free writes are for a fall-through queue with registered flags")
        if read_copies > width:
            raise ValueError(f"Read copies ({read_copies}) cannot exceed the payload's {width} bits")
        self._shape = shape
        self._depth = depth
        self._buffered = bool(buffered)
        self._registered_head = bool(registered_head)
        self._registered_flags = bool(registered_flags)
        self._read_copies = read_copies
        self._write_free = bool(write_free)
        super().__init__({
            "w": In(stream.Signature(shape)),
            "r": Out(stream.Signature(shape)),
            "level": Out(range(depth + 1)),
        })

    shape = property(lambda self: self._shape, doc="Payload shape.")
    depth = property(lambda self: self._depth, doc="Number of entries.")
    buffered = property(lambda self: self._buffered, doc="Registered read side.")
    registered_head = property(lambda self: self._registered_head,
                               doc="The oldest entry is held in flip-flops.")
    registered_flags = property(lambda self: self._registered_flags,
                                doc="``w.ready`` and ``r.valid`` are flip-flops.")
    read_copies = property(lambda self: self._read_copies,
                           doc="Copies of the read pointer, each reading a column group.")
    write_free = property(lambda self: self._write_free,
                          doc="The memory is written whenever the queue has room.")

    def elaborate(self, platform):
        if self._registered_head:
            return self._elaborate_registered_head()
        if self._registered_flags and self._buffered and self._depth > 1:
            return self._elaborate_buffered_registered_ready()
        if self._registered_flags and not self._buffered:
            return self._elaborate_registered_flags()
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

    def _elaborate_registered_head(self):
        """A head register in front of a fall-through FIFO of ``depth - 1``:
        an entry goes straight into the head when the FIFO behind it is
        empty and the head is free (or leaving), else into the FIFO; the
        head refills from the FIFO as it leaves."""
        m = Module()
        width = Shape.cast(self._shape).width
        head = Signal(width)
        full = Signal()                       # the head holds an entry
        pushed = self.w.valid & self.w.ready
        popped = full & self.r.ready
        m.d.comb += [self.r.valid.eq(full), self.r.payload.eq(head)]
        # (a queue of one entry: a FIFO of none, never ready either side)
        m.submodules.fifo = fifo = SyncFIFO(width=width, depth=self._depth - 1)
        direct = ~fifo.r_rdy & (~full | popped)       # the entry goes into the head
        m.d.comb += [
            self.w.ready.eq(fifo.w_rdy | ~full),
            fifo.w_data.eq(self.w.payload),
            fifo.w_en.eq(self.w.valid & ~direct),
            fifo.r_en.eq(popped),
            self.level.eq(full + fifo.level),
        ]
        with m.If(popped & fifo.r_rdy):
            m.d.sync += head.eq(fifo.r_data)
        with m.Elif(pushed & direct):
            m.d.sync += [head.eq(self.w.payload), full.eq(1)]
        with m.Elif(popped):
            m.d.sync += full.eq(0)
        return m

    def _elaborate_registered_flags(self):
        """A fall-through FIFO whose not-full and not-empty flags are
        registers: their next values, like the level's, come from the level
        and this cycle's push and pop, so nothing outside reads a compare of
        the level."""
        m = Module()
        depth = self._depth
        w_ptr, r_ptr = Signal(range(depth)), Signal(range(depth))
        not_full, not_empty = Signal(init=1), Signal()
        level = Signal(range(depth + 1))
        push = self.w.valid & not_full
        pop = self.r.ready & not_empty
        r_next = Signal.like(r_ptr)
        m.d.comb += [
            self.w.ready.eq(not_full), self.r.valid.eq(not_empty), self.level.eq(level),
            r_next.eq(Mux(pop, Mux(r_ptr == depth - 1, 0, r_ptr + 1), r_ptr)),
        ]
        m.d.sync += r_ptr.eq(r_next)
        # the extra pointers load r_ptr's next value at every edge, so they equal
        # it from the first edge on (before it the queue is empty: nothing to read)
        pointers = [r_ptr] + register_copies(m, r_next, 1, self._read_copies - 1, name="r_ptr_copy")
        columns = bit_groups(Shape.cast(self._shape).width, len(pointers))
        # (with write_free: writing the free slot is harmless, only the pointer makes an entry)
        write = not_full if self._write_free else push
        for k, (ptr, (lo, hi)) in enumerate(zip(pointers, columns)):
            mem = Memory(shape=hi - lo, depth=depth, init=[])
            m.submodules["mem" if k == 0 else f"mem{k}"] = mem
            wport, rport = mem.write_port(), mem.read_port(domain="comb")
            m.d.comb += [wport.addr.eq(w_ptr), wport.data.eq(Value.cast(self.w.payload)[lo:hi]),
                         wport.en.eq(write), rport.addr.eq(ptr),
                         Value.cast(self.r.payload)[lo:hi].eq(rport.data)]
        with m.If(push):
            m.d.sync += w_ptr.eq(Mux(w_ptr == depth - 1, 0, w_ptr + 1))
        with m.If(push & ~pop):
            m.d.sync += [level.eq(level + 1), not_empty.eq(1), not_full.eq(level != depth - 1)]
        with m.Elif(pop & ~push):
            m.d.sync += [level.eq(level - 1), not_full.eq(1), not_empty.eq(level != 1)]
        return m

    def _elaborate_buffered_registered_ready(self):
        """A buffered queue as ``SyncFIFOBuffered`` builds it (a FIFO of
        ``depth - 1`` read through its memory's register, then the output
        register), with ``w.ready`` a flip-flop updated with the FIFO's
        level instead of a compare of it. (A buffered queue of one entry
        has no FIFO: its ``w.ready`` is its level's flip-flop already.)"""
        m = Module()
        inner = self._depth - 1
        m.submodules.mem = mem = Memory(shape=Shape.cast(self._shape).width, depth=inner, init=[])
        wport, rport = mem.write_port(), mem.read_port()
        produce, consume = Signal(range(inner)), Signal(range(inner))
        inner_level = Signal(range(inner + 1))
        not_full, out_valid = Signal(init=1), Signal()
        push = self.w.valid & not_full
        refill = (inner_level != 0) & (~out_valid | self.r.ready)    # the FIFO's head moves out
        m.d.comb += [
            self.w.ready.eq(not_full), self.r.valid.eq(out_valid), self.r.payload.eq(rport.data),
            self.level.eq(inner_level + out_valid),
            wport.addr.eq(produce), wport.data.eq(self.w.payload), wport.en.eq(push),
            rport.addr.eq(consume), rport.en.eq(refill),
        ]
        with m.If(push):
            m.d.sync += produce.eq(Mux(produce == inner - 1, 0, produce + 1))
        with m.If(refill):
            m.d.sync += [consume.eq(Mux(consume == inner - 1, 0, consume + 1)), out_valid.eq(1)]
        with m.Elif(self.r.ready):
            m.d.sync += out_valid.eq(0)
        with m.If(push & ~refill):
            m.d.sync += [inner_level.eq(inner_level + 1), not_full.eq(inner_level != inner - 1)]
        with m.Elif(refill & ~push):
            m.d.sync += [inner_level.eq(inner_level - 1), not_full.eq(1)]
        return m
