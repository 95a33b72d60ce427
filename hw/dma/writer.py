"""The writer: realigns read words into destination beats with byte enables,
and reports faults."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..lib import counter_shape
from .layouts import CmdKind, Command, DmaFault, DmaWrite, Event, Retire

__all__ = ["Writer"]


class Writer(wiring.Component):
    """Turns each ``DATA`` command's read words into write beats.

    A command with source byte ``s = src % B`` and destination byte
    ``d = dst % B`` takes ``ceil((s + len) / B)`` words and gives
    ``ceil((d + len) / B)`` beats through a two-word window (the previous word
    and the head of ``data``) shifted by ``(s - d) mod B`` bytes; only the
    first and last beats have partial byte enables. When ``s > d`` the
    first word must be in the window's low half before the first beat: the
    writer spends a cycle taking it, unless the command is marked ``reuse``
    (that word is the previous command's last, still held).

    A beat waits while its channel has ``ack_limit`` unacknowledged writes
    (``ack_full``). A ``FAULT`` command offers its record on ``fault`` and
    waits for it to be taken; an ``EMPTY`` command passes in a cycle. Every
    command leaving the writer is reported on ``retire`` (a ``DATA`` command
    with its last beat), every accepted beat on ``beat``.

    Parameters
    ----------
    geometry : :class:`DmaGeometry`

    Interface attributes
    --------------------
    cmd : ``In(stream.Signature(Command))``
    data : ``In(stream.Signature(data_width))``
    wr : ``Out(stream.Signature(DmaWrite))``
    fault : ``Out(stream.Signature(DmaFault))``
    retire : ``Out(Event(Retire))``
    beat : ``Out(Event(chan))``
    ack_full : ``In(channels)``
    """

    def __init__(self, geometry):
        g = self._g = geometry
        super().__init__({
            "cmd": In(stream.Signature(Command(g))),
            "data": In(stream.Signature(g.data_width)),
            "wr": Out(stream.Signature(DmaWrite(g.arch, g.data_width, g.channels))),
            "fault": Out(stream.Signature(DmaFault(g.arch, g.channels))),
            "retire": Out(Event(Retire(g))),
            "beat": Out(Event(g.chan_bits)),
            "ack_full": In(g.channels),
        })

    def elaborate(self, platform):
        m = Module()
        g = self._g
        B, wb, W = g.bytes_per_word, g.word_bits, g.data_width
        ones = Const((1 << B) - 1, B)

        cur = Signal(Command(g))          # the command being written
        held = Signal()
        addr = Signal(g.mem_addr_width)
        shift = Signal(range(B + 1))
        take_first = Signal()             # the first word is still to be taken
        first = Signal()
        beats = Signal(counter_shape(g.burst_len))       # beats left
        words = Signal(counter_shape(g.burst_len + 1))   # words left to take
        be_first = Signal(B)
        be_last = Signal(B)
        prev = Signal(W)
        is_data = Signal()
        m.d.comb += is_data.eq(held & (cur.kind == CmdKind.DATA))

        need = Signal()                   # the beat needs the head word
        fire = Signal()
        m.d.comb += [
            need.eq((beats != 1) | (words != 0)),
            self.wr.valid.eq(is_data & ~take_first & (~need | self.data.valid)
                             & ~self.ack_full.bit_select(cur.chan, 1)),
            fire.eq(self.wr.valid & self.wr.ready),
            self.wr.p.dev.eq(cur.body.move.dev),
            self.wr.p.addr.eq(addr),
            self.wr.p.chan.eq(cur.chan), self.wr.p.op.eq(cur.op),
            self.wr.p.data.eq((Cat(prev, self.data.p) >> (shift * 8))[:W]),
            self.wr.p.be.eq(Mux(first, be_first, ones) & Mux(beats == 1, be_last, ones)),
            self.beat.valid.eq(fire), self.beat.payload.eq(cur.chan),
        ]
        with m.If(is_data & take_first):
            m.d.comb += self.data.ready.eq(1)
            with m.If(self.data.valid):
                m.d.sync += [prev.eq(self.data.p), words.eq(words - 1), take_first.eq(0)]
        with m.If(fire):
            m.d.sync += [beats.eq(beats - 1), addr.eq(addr + 1), first.eq(0)]
            with m.If(need):
                m.d.comb += self.data.ready.eq(1)
                m.d.sync += [prev.eq(self.data.p), words.eq(words - 1)]

        # faults and retirement
        f = cur.body.fault
        m.d.comb += [
            self.fault.valid.eq(held & (cur.kind == CmdKind.FAULT)),
            self.fault.p.chan.eq(cur.chan), self.fault.p.ctx.eq(f.ctx),
            self.fault.p.va.eq(f.va), self.fault.p.cause.eq(f.cause),
            self.retire.payload.chan.eq(cur.chan), self.retire.payload.kind.eq(cur.kind),
            self.retire.payload.last.eq(cur.last), self.retire.payload.tag.eq(cur.tag),
            self.retire.payload.va.eq(f.va), self.retire.payload.cause.eq(f.cause),
        ]
        with m.Switch(cur.kind):
            with m.Case(CmdKind.DATA):
                m.d.comb += self.retire.valid.eq(fire & (beats == 1))
            with m.Case(CmdKind.EMPTY):
                m.d.comb += self.retire.valid.eq(held)
            with m.Case(CmdKind.FAULT):
                m.d.comb += self.retire.valid.eq(self.fault.valid & self.fault.ready)
        with m.If(self.retire.valid):
            m.d.sync += held.eq(0)

        # the next command
        c = self.cmd.p
        mv = c.body.move
        s = Signal(wb + 1)
        d = Signal(wb + 1)
        end = Signal(wb)
        m.d.comb += [s.eq(mv.src[:wb]), d.eq(mv.dst[:wb]), end.eq(mv.dst[:wb] + mv.len - 1),
                     self.cmd.ready.eq(~held | self.retire.valid)]
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += [
                held.eq(1), cur.eq(c), addr.eq(mv.dst[wb:]), first.eq(1),
                beats.eq(((d + mv.len - 1) >> wb) + 1),
                words.eq(((s + mv.len - 1) >> wb) + ~c.reuse),
                take_first.eq((s > d) & ~c.reuse),
                shift.eq(Mux(s > d, s - d, B + s - d)),
                be_first.eq(ones << d),
                be_last.eq(ones >> (~end)[:wb]),
            ]
        return m
