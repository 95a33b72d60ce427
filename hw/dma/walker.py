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

    Three stages, advancing together: the first reads the channel's walk
    state; the second computes the chunk length; the third writes the new
    state back and emits the chunk. The front-end never grants a channel
    twice in a row, so a grant's read can miss only the write-back of the
    same channel's previous grant, made in the same cycle: that one is
    forwarded. A ``START`` grant loads the row state (row -1 of the
    descriptor) and emits nothing, unless the descriptor is empty: then it
    emits one ``empty`` chunk. When a descriptor's last chunk (or its empty
    chunk) leaves, ``walked`` names the channel; a grant of that channel
    offered in that cycle (a stale ``CHUNK``: the front-end learns of the end
    only then) is not taken, so the front-end offers the channel's next
    descriptor a cycle later. Grants for halted channels are consumed and
    dropped.

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
        The channel is in the second or third stage.
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

    def _layouts(self):
        g = self._g
        A, LW = g.addr_bits, g.len_bits
        # position (written for every chunk) and row state (written when a row ends)
        # ``room_s``/``room_d``: bytes to the source page end (capped at a burst) and to
        # the destination burst end; ``short``: ``row_left`` fits a chunk length
        pos = data.StructLayout({"cur_s": A, "cur_d": A, "row_left": g.row_bits,
                                 "short": 1, "room_s": LW, "room_d": LW,
                                 "fresh": 1, "row_start": 1})
        row = data.StructLayout({"row_s": A, "row_d": A, "rows_left": g.rows_bits})
        # a grant with its walk state (stage 2), and with its chunk cut (stage 3)
        held = {"chan": g.chan_bits, "op": GrantOp, "desc": Grant(g)["desc"].shape,
                "pos": pos, "row": row}
        cut = data.StructLayout({**held, "len": LW, "row_end": 1, "desc_end": 1, "ends": 1})
        return pos, row, data.StructLayout(held), cut

    def elaborate(self, platform):
        m = Module()
        g = self._g
        pos_layout, row_layout, held_layout, cut_layout = self._layouts()
        m.submodules.pos = pos = Memory(shape=pos_layout, depth=g.channels, init=[])
        m.submodules.row = row = Memory(shape=row_layout, depth=g.channels, init=[])
        pos_r, pos_w = pos.read_port(domain="comb"), pos.write_port()
        row_r, row_w = row.read_port(domain="comb"), row.write_port()
        v2, s2 = Signal(), Signal(held_layout)
        v3, s3 = Signal(), Signal(cut_layout)
        adv = Signal()              # every stage moves on (the chunk is not held back)
        self._read(m, pos_r, row_r, pos_w, row_w, v2, s2, v3, s3, adv)
        self._cut(m, v2, s2, v3, s3, adv)
        self._write_back(m, pos_w, row_w, v3, s3, adv)
        for c in range(g.channels):
            m.d.comb += self.busy[c].eq((v2 & (s2.chan == c)) | (v3 & (s3.chan == c)))
        return m

    def _read(self, m, pos_r, row_r, pos_w, row_w, v2, s2, v3, s3, adv):
        """Stage 1: read the granted channel's walk state, or take the one being
        written back for it in this cycle."""
        gr = self.grant.p
        # a stale grant of a channel whose descriptor ends now waits a cycle
        stale = Signal()
        m.d.comb += [
            pos_r.addr.eq(gr.chan), row_r.addr.eq(gr.chan),
            stale.eq(v3 & s3.ends & (s3.chan == gr.chan)),
            self.grant.ready.eq(adv & ~stale),
        ]
        with m.If(adv):
            m.d.sync += [v2.eq(self.grant.valid & ~stale), s2.chan.eq(gr.chan),
                         s2.op.eq(gr.op), s2.desc.eq(gr.desc)]
            with m.If(pos_w.en & (pos_w.addr == gr.chan)):
                m.d.sync += s2.pos.eq(pos_w.data)
            with m.Else():
                m.d.sync += s2.pos.eq(pos_r.data)
            with m.If(gr.op == GrantOp.START):
                m.d.sync += [s2.row.row_s.eq(gr.desc.src0), s2.row.row_d.eq(gr.desc.dst0),
                             s2.row.rows_left.eq(gr.desc.rows)]
            with m.Elif(row_w.en & (row_w.addr == gr.chan)):
                m.d.sync += s2.row.eq(row_w.data)
            with m.Else():
                m.d.sync += s2.row.eq(row_r.data)

    def _cut(self, m, v2, s2, v3, s3, adv):
        """Stage 2: the chunk length, and whether it ends the row and the descriptor."""
        LW = self._g.len_bits
        p = s2.pos
        starting = s2.op == GrantOp.START
        row_end = Signal()
        desc_end = Signal()
        m.d.comb += [
            row_end.eq(p.short & (p.row_left[:LW] <= p.room_s) & (p.row_left[:LW] <= p.room_d)),
            desc_end.eq(starting | (row_end & (s2.row.rows_left == 0))),
        ]
        with m.If(adv):
            m.d.sync += [
                v3.eq(v2), s3.chan.eq(s2.chan), s3.op.eq(s2.op), s3.desc.eq(s2.desc),
                s3.pos.eq(p), s3.row.eq(s2.row),
                s3.len.eq(Mux(row_end, p.row_left, Mux(p.room_s < p.room_d, p.room_s, p.room_d))),
                s3.row_end.eq(starting | row_end),
                s3.desc_end.eq(desc_end),
                # what raises ``walked``: a last chunk, or an empty descriptor's only one
                s3.ends.eq(Mux(starting, s2.desc.empty, (s2.op == GrantOp.CHUNK) & desc_end)),
            ]

    def _write_back(self, m, pos_w, row_w, v3, s3, adv):
        """Stage 3: write the walk state back and emit the chunk."""
        g = self._g
        A, LW, bb, pb = g.addr_bits, g.len_bits, g.burst_bits, g.page_bits
        live = Signal()
        m.d.comb += [
            live.eq(v3 & ~self.halt.bit_select(s3.chan, 1)),
            self.chunk.valid.eq(live & ((s3.op == GrantOp.CHUNK)
                                        | ((s3.op == GrantOp.START) & s3.desc.empty))),
            adv.eq(~self.chunk.valid | self.chunk.ready),
        ]
        ch = self.chunk.p
        m.d.comb += [
            ch.chan.eq(s3.chan), ch.ctx.eq(s3.desc.ctx), ch.tag.eq(s3.desc.tag),
            ch.src.eq(s3.pos.cur_s), ch.dst.eq(s3.pos.cur_d), ch.len.eq(s3.len),
            ch.last.eq(s3.desc_end), ch.empty.eq(s3.op == GrantOp.START),
            ch.first.eq(s3.pos.fresh), ch.cont.eq(~s3.pos.row_start), ch.op.eq(s3.desc.op),
        ]
        nxt_s = Signal(A)
        nxt_d = Signal(A)
        new_s = Signal(A)
        new_d = Signal(A)
        row_left = Signal(g.row_bits)
        m.d.comb += [
            nxt_s.eq(s3.row.row_s + s3.desc.src_stride),
            nxt_d.eq(s3.row.row_d + s3.desc.dst_stride),
            new_s.eq(Mux(s3.row_end, nxt_s, s3.pos.cur_s + s3.len)),
            new_d.eq(Mux(s3.row_end, nxt_d, s3.pos.cur_d + s3.len)),
            pos_w.addr.eq(s3.chan), row_w.addr.eq(s3.chan),
            pos_w.data.cur_s.eq(new_s), pos_w.data.cur_d.eq(new_d),
            # As a burst fits in the smallest page, the source page end is nearer
            # than a burst only in the page's last burst window, and then it is
            # that window's end.
            pos_w.data.room_s.eq(g.burst_bytes - Mux(
                new_s[bb:pb].all() if pb > bb else 1, new_s[:bb], 0)),
            pos_w.data.room_d.eq(g.burst_bytes - new_d[:bb]),
            row_left.eq(Mux(s3.row_end, s3.desc.row_bytes, s3.pos.row_left - s3.len)),
            pos_w.data.row_left.eq(row_left),
            pos_w.data.short.eq(row_left[LW:] == 0),
            pos_w.data.fresh.eq(s3.op == GrantOp.START),
            pos_w.data.row_start.eq(s3.row_end),
            row_w.data.row_s.eq(nxt_s), row_w.data.row_d.eq(nxt_d),
            row_w.data.rows_left.eq(s3.row.rows_left - 1),
            pos_w.en.eq(live & (s3.op != GrantOp.NONE) & adv),
            row_w.en.eq(live & (s3.op != GrantOp.NONE) & adv & s3.row_end),
            self.walked.valid.eq(live & adv & s3.ends),
            self.walked.payload.eq(s3.chan),
            self.issued.valid.eq(self.chunk.valid & self.chunk.ready),
            self.issued.payload.eq(s3.chan),
        ]
