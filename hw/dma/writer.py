"""The writer: realigns read words into destination beats with byte enables,
and reports faults."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..lib import RegisterSlice, counter_shape
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
    (that word is the previous command's last, still held). Commands are
    decoded (those line ends, the shift, the byte enables) as they are taken,
    off the queue's LUT RAM read, into a late-ready
    :class:`hw.lib.RegisterSlice` (two decoded commands besides the one
    being written); the next one starts as the current one's last beat
    goes.

    A beat waits while its channel has ``ack_limit`` unacknowledged writes
    (``ack_full``). A ``FAULT`` command offers its record on ``fault`` and
    waits for it to be taken (the next command starts a cycle after that);
    an ``EMPTY`` command passes in a cycle. Every command leaving the writer
    (a ``DATA`` command with its last beat) is reported on ``retire`` in the
    next cycle, every accepted beat on ``beat`` in its cycle.

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

    def _layouts(self):
        """The decoded next command (each field one adder or a few LUTs from the
        queue's output), and the command being written (counters and masks)."""
        g = self._g
        B, LW = g.bytes_per_word, g.len_bits
        masks = {"shift": range(B + 1), "be_first": B, "be_last": B}
        dec = data.StructLayout({
            "cmd": Command(g), "addr": g.mem_addr_width,
            "end_s": LW + 1, "end_d": LW + 1,       # ``src % B + len``, ``dst % B + len``
            "s_after_d": 1, **masks,                # ``src % B > dst % B``
        })
        cur = data.StructLayout({
            "cmd": Command(g), "addr": g.mem_addr_width,
            "beats": counter_shape(g.burst_len),       # beats left
            "words": counter_shape(g.burst_len + 1),   # words left to take
            # the channel again, inverted (so synthesis keeps both): the ack check's
            # own copy, apart from the one every beat's payload loads
            "chan_n": g.chan_bits,
            **masks,
        })
        return dec, cur

    def elaborate(self, platform):
        m = Module()
        g = self._g
        B, W = g.bytes_per_word, g.data_width
        ones = Const((1 << B) - 1, B)

        # the next commands, decoded as they arrive (off the queue's LUT RAM read)
        # into a late-ready slice: a command's start (``load``, late: it follows
        # ``wr.ready``) reaches the slice's pointers and ``cur``, not the read
        # queue's read side or the decoded command's enables
        dec_layout, cur_layout = self._layouts()
        m.submodules.decoded = decoded = RegisterSlice(dec_layout, late_ready=True)
        self._decode(m, decoded.i)
        dec_valid, dec = decoded.o.valid, decoded.o.p
        cur = Signal(cur_layout)          # the command being written
        load = Signal()                   # ``cur`` takes ``dec``
        m.d.comb += decoded.o.ready.eq(load)
        # what the command does next, in flip-flops, so that a beat's go-ahead and
        # the next command's load are a few LUTs deep
        st = Signal(data.StructLayout({
            "first": 1,
            "wants_first": 1,             # DATA: the first word is still to be taken
            "beat_ok": 1,                 # DATA: beats may go
            "last": 1,                    # the next beat is the command's last
            "need": 1,                    # the next beat takes the head word of ``data``
            "empty": 1, "fault": 1,       # an EMPTY or a FAULT command is held
            "idle": 1,                    # nothing held, or an EMPTY command: load now
        }), init={"idle": 1})
        prev = Signal(W)
        fire = Signal()
        m.d.comb += [
            self.wr.valid.eq(st.beat_ok & (~st.need | self.data.valid)
                             & ~self.ack_full.bit_select(~cur.chan_n, 1)),
            fire.eq(self.wr.valid & self.wr.ready),
            self.wr.p.dev.eq(cur.cmd.body.move.dev),
            self.wr.p.addr.eq(cur.addr),
            self.wr.p.chan.eq(cur.cmd.chan), self.wr.p.op.eq(cur.cmd.op),
            self.wr.p.data.eq((Cat(prev, self.data.p) >> (cur.shift * 8))[:W]),
            self.wr.p.be.eq(Mux(st.first, cur.be_first, ones) & Mux(st.last, cur.be_last, ones)),
            self.beat.valid.eq(fire), self.beat.payload.eq(cur.cmd.chan),
        ]
        with m.If(st.wants_first):
            m.d.comb += self.data.ready.eq(1)
            with m.If(self.data.valid):
                m.d.sync += [prev.eq(self.data.p), cur.words.eq(cur.words - 1),
                             st.wants_first.eq(0), st.beat_ok.eq(1),
                             st.need.eq(~st.last | (cur.words != 1))]
        with m.If(fire):
            m.d.sync += [cur.beats.eq(cur.beats - 1), cur.addr.eq(cur.addr + 1),
                         st.first.eq(0), st.last.eq(cur.beats == 2),
                         st.need.eq((cur.beats != 2) | Mux(st.need, cur.words != 1,
                                                           cur.words != 0))]
            with m.If(st.need):
                m.d.comb += self.data.ready.eq(1)
                m.d.sync += [prev.eq(self.data.p), cur.words.eq(cur.words - 1)]

        self._retire(m, cur.cmd, st, fire & st.last)
        # the next command starts with the last beat or from idle (a FAULT
        # command, once its record is taken, leaves through idle): ``fault.ready``
        # is not in ``load``, ``wr.ready`` enters it last
        m.d.comb += load.eq(st.idle | (st.last & self.wr.valid & self.wr.ready))
        with m.If(load):
            self._load(m, dec_valid, dec, cur, st)
        return m

    def _load(self, m, dec_valid, dec, cur, st):
        """Start the decoded command: its counters and what it does first."""
        g = self._g
        B, wb = g.bytes_per_word, g.word_bits
        kind = dec.cmd.kind
        is_data = dec_valid & (kind == CmdKind.DATA)
        take_first = dec.s_after_d & ~dec.cmd.reuse
        m.d.sync += [
            cur.cmd.eq(dec.cmd), cur.chan_n.eq(~dec.cmd.chan), cur.addr.eq(dec.addr),
            cur.shift.eq(dec.shift),
            cur.be_first.eq(dec.be_first), cur.be_last.eq(dec.be_last),
            # ceil(end / B) beats and words, less the reused word
            cur.beats.eq((dec.end_d + (B - 1)) >> wb),
            cur.words.eq((dec.end_s + Mux(dec.cmd.reuse, -1, B - 1)) >> wb),
            st.first.eq(1),
            st.wants_first.eq(is_data & take_first), st.beat_ok.eq(is_data & ~take_first),
            st.last.eq(dec.end_d <= B),
            # more than one beat, or a word to take (all but a reused word alone)
            st.need.eq((dec.end_d > B) | ~dec.cmd.reuse | (dec.end_s > B)),
            st.empty.eq(dec_valid & (kind == CmdKind.EMPTY)),
            st.fault.eq(dec_valid & (kind == CmdKind.FAULT)),
            st.idle.eq(~dec_valid | (kind == CmdKind.EMPTY)),
        ]

    def _decode(self, m, out):
        """Pass the next command to ``out`` with the ends of its source and
        destination bytes in their first word, the shift, and the first and last
        byte enables."""
        g = self._g
        B, wb = g.bytes_per_word, g.word_bits
        ones = Const((1 << B) - 1, B)
        c = self.cmd.p
        mv = c.body.move
        end_d = Signal(g.len_bits + 1)
        diff = Signal(wb)
        m.d.comb += [
            end_d.eq(mv.dst[:wb] + mv.len), diff.eq(mv.src[:wb] - mv.dst[:wb]),
            out.valid.eq(self.cmd.valid), self.cmd.ready.eq(out.ready),
            out.p.cmd.eq(c), out.p.addr.eq(mv.dst[wb:]),
            out.p.end_s.eq(mv.src[:wb] + mv.len), out.p.end_d.eq(end_d),
            out.p.s_after_d.eq(mv.src[:wb] > mv.dst[:wb]),
            # (s - d) mod B, with 0 as B (the window's high word in full)
            out.p.shift.eq(Cat(diff, diff == 0)),
            out.p.be_first.eq(ones << mv.dst[:wb]),
            # the last beat's lanes below ``end_d % B`` (all when that is 0)
            out.p.be_last.eq(Mux(end_d[:wb] == 0, ones, ~(ones << end_d[:wb]))),
        ]

    def _retire(self, m, cmd, st, last_beat):
        """Fault records and retirement."""
        f = cmd.body.fault
        m.d.comb += [
            self.fault.valid.eq(st.fault),
            self.fault.p.chan.eq(cmd.chan), self.fault.p.ctx.eq(f.ctx),
            self.fault.p.va.eq(f.va), self.fault.p.cause.eq(f.cause),
        ]
        with m.If(st.fault & self.fault.ready):
            m.d.sync += [st.fault.eq(0), st.idle.eq(1)]
        retiring = Signal()
        m.d.comb += retiring.eq(last_beat | st.empty | (st.fault & self.fault.ready))
        # ``retire`` is registered, so the accounting starts from flip-flops. The
        # command counts as in flight a cycle longer, yet a channel's count stays
        # within what the pipe holds: the slot it frees reaches the walker later
        rp = self.retire.payload
        m.d.sync += [self.retire.valid.eq(retiring),
                     rp.chan.eq(cmd.chan), rp.kind.eq(cmd.kind), rp.last.eq(cmd.last),
                     rp.tag.eq(cmd.tag), rp.va.eq(f.va), rp.cause.eq(f.cause)]
