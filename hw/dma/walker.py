"""The 2-D walker / legaliser: descriptors to chunks cut at row, page and
burst edges."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .layouts import Chunk, Event, Grant, GrantOp

__all__ = ["Walker"]


class Walker(wiring.Component):
    """Turns each granted channel's descriptor into chunks, one per grant.

    A chunk is the longest piece of the byte stream that stays inside one
    row, one smallest page of the source, one smallest page of the
    destination and one ``burst_len``-beat window of the destination (bursts
    are destination-aligned, so only their first and last words carry partial
    byte enables). Each channel's position (current source and destination,
    bytes left in the row, bytes to the source page end and to the
    destination burst end) and row state (row bases, rows left) live in two
    LUT RAMs, so channels interleave chunk by chunk.

    Two stages: the first reads the channel's walk state and computes the
    chunk length; the second writes the new state back and emits the chunk.
    A ``START`` grant loads the row state (row -1 of the descriptor) and emits
    nothing, unless the descriptor is empty: then it emits one ``empty`` chunk.
    When a descriptor's last chunk (or its empty chunk) leaves, ``walked``
    names the channel. Grants for halted channels are consumed and dropped.

    Parameters
    ----------
    geometry : :class:`DmaGeometry`

    Interface attributes
    --------------------
    grant : ``In(stream.Signature(Grant))``
    chunk : ``Out(stream.Signature(Chunk))``
    walked : ``Out(Event(chan))``
    issued : ``Out(Event(chan))``
        A chunk left (for the in-flight count).
    halt : ``In(channels)``
    busy : ``Out(channels)``
        The channel is in the second stage.
    """

    def __init__(self, geometry):
        g = self._g = geometry
        super().__init__({
            "grant": In(stream.Signature(Grant(g))),
            "chunk": Out(stream.Signature(Chunk(g))),
            "walked": Out(Event(g.chan_bits)),
            "issued": Out(Event(g.chan_bits)),
            "halt": In(g.channels),
            "busy": Out(g.channels),
        })

    def elaborate(self, platform):
        m = Module()
        g = self._g
        A, LW, bb, pb = g.addr_bits, g.len_bits, g.burst_bits, g.page_bits
        # position (written for every chunk) and row state (written when a row ends)
        # ``room_s``/``room_d``: bytes to the source page end (capped at a burst) and to
        # the destination burst end; ``short``: ``row_left`` fits a chunk length
        pos_layout = data.StructLayout({"cur_s": A, "cur_d": A, "row_left": g.row_bits,
                                        "short": 1, "room_s": LW, "room_d": LW,
                                        "fresh": 1, "row_start": 1})
        row_layout = data.StructLayout({"row_s": A, "row_d": A, "rows_left": g.rows_bits})
        m.submodules.pos = pos = Memory(shape=pos_layout, depth=g.channels, init=[])
        m.submodules.row = row = Memory(shape=row_layout, depth=g.channels, init=[])
        pos_r, pos_w = pos.read_port(domain="comb"), pos.write_port()
        row_r, row_w = row.read_port(domain="comb"), row.write_port()

        # ---- stage 1: read the walk state, chunk length
        gr = self.grant.p
        p1, r1 = pos_r.data, row_r.data
        starting = gr.op == GrantOp.START
        row_end = Signal()
        m.d.comb += [
            pos_r.addr.eq(gr.chan), row_r.addr.eq(gr.chan),
            row_end.eq(p1.short & (p1.row_left[:LW] <= p1.room_s)
                       & (p1.row_left[:LW] <= p1.room_d)),
        ]
        v2 = Signal()
        s2 = Signal(data.StructLayout({
            "chan": g.chan_bits, "op": GrantOp, "desc": Grant(g)["desc"].shape,
            "pos": pos_layout, "row": row_layout,
            "len": LW, "row_end": 1, "desc_end": 1,
        }))
        adv = Signal()
        m.d.comb += self.grant.ready.eq(adv)
        with m.If(adv):
            m.d.sync += [
                v2.eq(self.grant.valid), s2.chan.eq(gr.chan), s2.op.eq(gr.op),
                s2.desc.eq(gr.desc), s2.pos.eq(p1),
                s2.len.eq(Mux(row_end, p1.row_left,
                              Mux(p1.room_s < p1.room_d, p1.room_s, p1.room_d))),
                s2.row_end.eq(starting | row_end),
                s2.desc_end.eq(starting | (row_end & (r1.rows_left == 0))),
            ]
            with m.If(starting):
                m.d.sync += [s2.row.row_s.eq(gr.desc.src0), s2.row.row_d.eq(gr.desc.dst0),
                             s2.row.rows_left.eq(gr.desc.rows)]
            with m.Else():
                m.d.sync += s2.row.eq(r1)

        # ---- stage 2: write back, emit
        live = Signal()
        m.d.comb += [
            live.eq(v2 & ~self.halt.bit_select(s2.chan, 1)),
            self.chunk.valid.eq(live & ((s2.op == GrantOp.CHUNK)
                                        | ((s2.op == GrantOp.START) & s2.desc.empty))),
            adv.eq(~self.chunk.valid | self.chunk.ready),
        ]
        ch = self.chunk.p
        m.d.comb += [
            ch.chan.eq(s2.chan), ch.ctx.eq(s2.desc.ctx), ch.tag.eq(s2.desc.tag),
            ch.src.eq(s2.pos.cur_s), ch.dst.eq(s2.pos.cur_d), ch.len.eq(s2.len),
            ch.last.eq(s2.desc_end), ch.empty.eq(s2.op == GrantOp.START),
            ch.first.eq(s2.pos.fresh), ch.cont.eq(~s2.pos.row_start), ch.op.eq(s2.desc.op),
        ]
        nxt_s = Signal(A)
        nxt_d = Signal(A)
        new_s = Signal(A)
        new_d = Signal(A)
        row_left = Signal(g.row_bits)
        m.d.comb += [
            nxt_s.eq(s2.row.row_s + s2.desc.src_stride),
            nxt_d.eq(s2.row.row_d + s2.desc.dst_stride),
            new_s.eq(Mux(s2.row_end, nxt_s, s2.pos.cur_s + s2.len)),
            new_d.eq(Mux(s2.row_end, nxt_d, s2.pos.cur_d + s2.len)),
            pos_w.addr.eq(s2.chan), row_w.addr.eq(s2.chan),
            pos_w.data.cur_s.eq(new_s), pos_w.data.cur_d.eq(new_d),
            # As a burst fits in the smallest page, the source page end is nearer
            # than a burst only in the page's last burst window, and then it is
            # that window's end.
            pos_w.data.room_s.eq(g.burst_bytes - Mux(
                new_s[bb:pb].all() if pb > bb else 1, new_s[:bb], 0)),
            pos_w.data.room_d.eq(g.burst_bytes - new_d[:bb]),
            row_left.eq(Mux(s2.row_end, s2.desc.row_bytes, s2.pos.row_left - s2.len)),
            pos_w.data.row_left.eq(row_left),
            pos_w.data.short.eq(row_left[LW:] == 0),
            pos_w.data.fresh.eq(s2.op == GrantOp.START),
            pos_w.data.row_start.eq(s2.row_end),
            row_w.data.row_s.eq(nxt_s), row_w.data.row_d.eq(nxt_d),
            row_w.data.rows_left.eq(s2.row.rows_left - 1),
            pos_w.en.eq(live & (s2.op != GrantOp.NONE) & adv),
            row_w.en.eq(live & (s2.op != GrantOp.NONE) & adv & s2.row_end),
            self.walked.valid.eq(live & adv & (((s2.op == GrantOp.CHUNK) & s2.desc_end)
                                               | ((s2.op == GrantOp.START) & s2.desc.empty))),
            self.walked.payload.eq(s2.chan),
            self.issued.valid.eq(self.chunk.valid & self.chunk.ready),
            self.issued.payload.eq(s2.chan),
        ]
        for c in range(g.channels):
            m.d.comb += self.busy[c].eq(v2 & (s2.chan == c))
        return m
