"""The 2-D walker / legaliser: descriptors to chunks cut at row, page and
burst edges."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..lib import MAX_EXTRA_COPIES, bit_groups, register_copies
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
        # position (written for every chunk) and row state (written when a row ends).
        # ``room_s``/``room_d``: bytes to the source page end (capped at a burst) and to
        # the destination burst end; ``win_s``: bytes to the source burst window end;
        # ``short``: ``row_left`` fits a chunk length; ``last_row``: no row after this
        pos = data.StructLayout({"cur_s": A, "cur_d": A, "row_left": g.row_bits,
                                 "short": 1, "room_s": LW, "room_d": LW, "win_s": LW,
                                 "fresh": 1, "row_start": 1})
        row = data.StructLayout({"row_s": A, "row_d": A, "rows_left": g.rows_bits,
                                 "last_row": 1})
        # a grant with its walk state (stage 2), and with its chunk cut (stage 3)
        held = {"chan": g.chan_bits, "op": GrantOp, "desc": Grant(g)["desc"].shape,
                "pos": pos, "row": row}
        # ``nxt``: the next row's start and flags, ready in case this row ends;
        # ``near``: ``row_left`` is less than two chunk-length ranges; ``in_last``,
        # ``in_2nd_last``: the source is in its page's last, second-to-last burst window;
        # ``up_s``/``up_d``: the positions' burst window numbers plus one; ``cross_s``,
        # ``cross_d``: a chunk that does not end the row reaches the window's end
        nxt = data.StructLayout({"s": A, "d": A, "short": 1, "last_row": 1})
        cut = data.StructLayout({**held, "len": LW, "row_end": 1, "desc_end": 1, "ends": 1,
                                 "emits": 1, "writes": 1, "row_writes": 1, "near": 1,
                                 "in_last": 1, "in_2nd_last": 1, "up_s": A - g.burst_bits,
                                 "up_d": A - g.burst_bits, "cross_s": 1, "cross_d": 1,
                                 "nxt": nxt})
        return pos, row, data.StructLayout(held), cut

    def _rooms(self, addr):
        """(``room_s``, ``win_s``) at a source address. As a burst fits in the smallest
        page, the page end is nearer than a burst only in the page's last burst window,
        and then it is that window's end."""
        g = self._g
        bb, pb = g.burst_bits, g.page_bits
        win = g.burst_bytes - addr[:bb]
        return Mux(addr[bb:pb].all() if pb > bb else 1, win, g.burst_bytes), win

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
        fwd_copies = self._cut(m, v2, s2, v3, s3, adv)
        self._read(m, pos_r, row_r, pos_w, row_w, v2, s2, s3, adv, fwd_copies)
        self._write_back(m, pos_w, row_w, v3, s3, adv)
        for c in range(g.channels):
            m.d.comb += self.busy[c].eq((v2 & (s2.chan == c)) | (v3 & (s3.chan == c)))
        return m

    def _read(self, m, pos_r, row_r, pos_w, row_w, v2, s2, s3, adv, fwd_copies):
        """Stage 1: read the granted channel's walk state, or take the one being
        written back for it in this cycle (``fwd_copies``: see :meth:`_cut`)."""
        gr = self.grant.p
        # a stale grant of a channel whose descriptor ends now waits a cycle
        stale = Signal()
        m.d.comb += [
            pos_r.addr.eq(gr.chan), row_r.addr.eq(gr.chan),
            stale.eq(s3.ends & (s3.chan == gr.chan)),
            self.grant.ready.eq(adv & ~stale),
        ]
        with m.If(adv):
            m.d.sync += v2.eq(self.grant.valid & ~stale)
        # an empty stage's payload is don't-care: loading it only with a grant lets
        # Verilator skip this stage's logic on idle cycles
        with m.If(adv & self.grant.valid):
            m.d.sync += [s2.chan.eq(gr.chan), s2.op.eq(gr.op), s2.desc.eq(gr.desc)]
            # per group of bits: the third stage writes this channel back now (its
            # row state too), from that group's copies of ``s3``'s flags (see ``_cut``)
            groups = zip(fwd_copies, bit_groups(len(s2.pos.as_value()), len(fwd_copies)),
                         bit_groups(len(s2.row.as_value()), len(fwd_copies)))
            for copy, (plo, phi), (rlo, rhi) in groups:
                here = copy[2:] == gr.chan
                for reg, (lo, hi), sel, w, r in (
                        (s2.pos, (plo, phi), copy[0] & here, pos_w.data, pos_r.data),
                        (s2.row, (rlo, rhi), copy[1] & here, row_w.data, row_r.data)):
                    m.d.sync += reg.as_value()[lo:hi].eq(
                        Mux(sel, w.as_value()[lo:hi], r.as_value()[lo:hi]))

    def _cut(self, m, v2, s2, v3, s3, adv):
        """Stage 2: the chunk length, and whether it ends the row and the
        descriptor; beside it, the next row's start (used if the row ends). A
        ``START`` takes its row state (row -1) from the descriptor here, off the
        front-end's paths. Returns copies of ``Cat(s3.writes, s3.row_writes,
        s3.chan)`` for the first stage's forwarding."""
        g = self._g
        LW, bb, pb = g.len_bits, g.burst_bits, g.page_bits
        p = s2.pos
        starting = s2.op == GrantOp.START
        row = Signal.like(s2.row)
        row_end = Signal()
        desc_end = Signal()
        nxt_s = Signal(g.addr_bits)
        nxt_d = Signal(g.addr_bits)
        m.d.comb += [
            row.eq(s2.row),
            row_end.eq(p.short & (p.row_left[:LW] <= p.room_s) & (p.row_left[:LW] <= p.room_d)),
            desc_end.eq(starting | (row_end & s2.row.last_row)),
            nxt_s.eq(row.row_s + s2.desc.src_stride),
            nxt_d.eq(row.row_d + s2.desc.dst_stride),
        ]
        with m.If(starting):
            m.d.comb += [row.row_s.eq(s2.desc.src0), row.row_d.eq(s2.desc.dst0),
                         row.rows_left.eq(s2.desc.rows)]
        win_index = p.cur_s[bb:pb] if pb > bb else Const(0, 1)
        writes = Signal()           # the third stage will write back, and its row state
        row_writes = Signal()
        m.d.comb += [writes.eq(v2 & (s2.op != GrantOp.NONE)),
                     row_writes.eq(writes & (starting | row_end))]
        # copies for the first stage's forwarding selects, one per group of its bits:
        # one select (from ``s3.writes``; Yosys built it from the write enable,
        # behind ``adv``) fanned out to every bit (FPGA timing). ``chan`` loads
        # whatever ``v2`` says: it is read only with ``writes``. The copies differ
        # from the registers only before the first edge, which loads them (``adv``
        # is high after reset): the front-end offers no grant then, and a channel's
        # first grant, a ``START``, reads no walk state
        fwd_copies = register_copies(m, Cat(writes, row_writes, s2.chan), adv,
                                     MAX_EXTRA_COPIES, name="s3_fwd")
        with m.If(adv):
            m.d.sync += [
                v3.eq(v2),
                # (these four with the stage's valid folded in, one input less where used)
                # what raises ``walked``: a last chunk, or an empty descriptor's only one
                s3.ends.eq(v2 & Mux(starting, s2.desc.empty, (s2.op == GrantOp.CHUNK) & desc_end)),
                s3.emits.eq(v2 & ((s2.op == GrantOp.CHUNK) | (starting & s2.desc.empty))),
                s3.writes.eq(writes), s3.row_writes.eq(row_writes),
            ]
        # the rest only with a grant (don't-care otherwise: every use of it is gated by
        # the four above or by ``v3``), so Verilator skips it on idle cycles
        with m.If(adv & v2):
            m.d.sync += [
                s3.chan.eq(s2.chan), s3.op.eq(s2.op), s3.desc.eq(s2.desc),
                s3.pos.eq(p), s3.row.eq(row),
                s3.len.eq(Mux(row_end, p.row_left, Mux(p.room_s < p.room_d, p.room_s, p.room_d))),
                s3.row_end.eq(starting | row_end),
                s3.desc_end.eq(desc_end),
                s3.near.eq(p.row_left[LW:] == 1),
                s3.in_last.eq(win_index == (1 << (pb - bb)) - 1),
                s3.in_2nd_last.eq(win_index == (1 << (pb - bb)) - 2),
                s3.up_s.eq(p.cur_s[bb:] + 1), s3.up_d.eq(p.cur_d[bb:] + 1),
                # (its length is the smaller room: it reaches the other window's end
                # too when that is no farther)
                s3.cross_s.eq(p.room_d >= p.win_s), s3.cross_d.eq(p.room_s >= p.room_d),
                s3.nxt.s.eq(nxt_s), s3.nxt.d.eq(nxt_d),
                s3.nxt.short.eq(s2.desc.row_bytes[LW:] == 0),
                # (both compares beside the ``START`` select, not after it)
                s3.nxt.last_row.eq(Mux(starting, s2.desc.rows == 1, s2.row.rows_left == 1)),
            ]
        return fwd_copies

    def _write_back(self, m, pos_w, row_w, v3, s3, adv):
        """Stage 3: write the walk state back and emit the chunk. Every new value
        is one short step from a register: the next row's start was added up in
        stage 2, and the rooms shrink by the length (wrapping to a full burst)."""
        g = self._g
        A, LW, bb, pb = g.addr_bits, g.len_bits, g.burst_bits, g.page_bits
        live = Signal()             # the channel is not halted
        m.d.comb += [
            live.eq(~self.halt.bit_select(s3.chan, 1)),
            self.chunk.valid.eq(live & s3.emits),
            # A halted channel's chunk is dropped, but waits for ``ready`` like any
            # other, and its state is written back (dead until its next START):
            # so neither the stall nor the write enables wait for the halt select.
            adv.eq(~s3.emits | self.chunk.ready),
        ]
        ch = self.chunk.p
        m.d.comb += [
            ch.chan.eq(s3.chan), ch.ctx.eq(s3.desc.ctx), ch.tag.eq(s3.desc.tag),
            ch.src.eq(s3.pos.cur_s), ch.dst.eq(s3.pos.cur_d), ch.len.eq(s3.len),
            ch.last.eq(s3.desc_end), ch.empty.eq(s3.op == GrantOp.START),
            ch.first.eq(s3.pos.fresh), ch.cont.eq(~s3.pos.row_start), ch.op.eq(s3.desc.op),
        ]
        p, n = s3.pos, s3.nxt
        on_s = Signal(A)            # the positions after the chunk, within the row
        step_s = Signal(bb)         # the offsets in the burst windows, plus the length
        step_d = Signal(bb)
        on_d = Signal(A)
        left = Signal(LW + 1)       # ``row_left``'s low part less the length, with borrow
        win_s = Signal(bb)          # (room - length) modulo a burst
        win_d = Signal(bb)
        m.d.comb += [
            # (a short adder, and the window number or the one after it)
            step_s.eq(p.cur_s[:bb] + s3.len), step_d.eq(p.cur_d[:bb] + s3.len),
            on_s.eq(Cat(step_s[:bb], Mux(s3.cross_s, s3.up_s, p.cur_s[bb:]))),
            on_d.eq(Cat(step_d[:bb], Mux(s3.cross_d, s3.up_d, p.cur_d[bb:]))),
            left.eq(p.row_left[:LW] - s3.len),
            win_s.eq(p.win_s - s3.len), win_d.eq(p.room_d - s3.len),
        ]
        w = pos_w.data
        with m.If(s3.row_end):
            room_s, win_s0 = self._rooms(n.s)
            m.d.comb += [w.cur_s.eq(n.s), w.cur_d.eq(n.d), w.row_left.eq(s3.desc.row_bytes),
                         w.short.eq(n.short), w.room_s.eq(room_s), w.win_s.eq(win_s0),
                         w.room_d.eq(g.burst_bytes - n.d[:bb])]
        with m.Else():
            # the source is in the page's last burst window if it was, or it crosses
            # into it from the window before (decided in stage 2, off this adder)
            last_win = Mux(s3.cross_s, s3.in_2nd_last, s3.in_last) if pb > bb else 1
            # a room wraps to a full burst exactly when the length used it up (an
            # equality beside the subtraction, not a zero test after it)
            wrap_s = Cat(win_s, s3.len == p.win_s)
            m.d.comb += [w.cur_s.eq(on_s), w.cur_d.eq(on_d), w.row_left.eq(p.row_left - s3.len),
                         w.short.eq(p.short | (s3.near & left[LW])),
                         w.win_s.eq(wrap_s),
                         w.room_s.eq(Mux(last_win, wrap_s, g.burst_bytes)),
                         w.room_d.eq(Cat(win_d, s3.len == p.room_d))]
        m.d.comb += [
            pos_w.addr.eq(s3.chan), row_w.addr.eq(s3.chan),
            w.fresh.eq(s3.op == GrantOp.START), w.row_start.eq(s3.row_end),
            row_w.data.row_s.eq(n.s), row_w.data.row_d.eq(n.d),
            row_w.data.rows_left.eq(s3.row.rows_left - 1), row_w.data.last_row.eq(n.last_row),
            pos_w.en.eq(s3.writes & adv),
            row_w.en.eq(s3.row_writes & adv),
            # (a descriptor's end is a chunk, so it leaves when the chunk is taken)
            self.walked.valid.eq(live & s3.ends & self.chunk.ready),
            self.walked.payload.eq(s3.chan),
            self.issued.valid.eq(self.chunk.valid & self.chunk.ready),
            self.issued.payload.eq(s3.chan),
        ]
