"""The writer: realigns read words into destination beats with byte enables,
and reports faults."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..lib import RegisterSlice, counter_shape
from .decode import case_table, more_than_one, round_up_table
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
    decoded (the shift, the byte enables, the beat and word counts and the
    state the command starts in) as they are taken, off the queue's LUT RAM
    read (:mod:`.decode`: no carry chain on the low address bits), into a
    late-ready :class:`hw.lib.RegisterSlice` (two decoded commands besides
    the one being written); the next one starts as the current one's last
    beat goes, by copying the slice's output.

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
        """The decoded command (its counters and the writer's starting state
        worked out before it enters the slice, so the slice's multiplexer
        output is loaded as it is), the writer's state, and the command being
        written (counters and masks)."""
        g = self._g
        B = g.bytes_per_word
        masks = {"shift": range(B + 1), "be_first": B, "be_last": B}
        counts = {
            "beats": counter_shape(g.burst_len),       # beats left
            "words": counter_shape(g.burst_len + 1),   # words left to take
        }
        # what the command does next, in flip-flops, so that a beat's go-ahead and
        # the next command's load are a few LUTs deep
        state = data.StructLayout({
            "first": 1,
            "wants_first": 1,             # DATA: the first word is still to be taken
            "beat_ok": 1,                 # DATA: beats may go
            "last": 1,                    # the next beat is the command's last
            "last_ok": 1,                 # ``last & beat_ok``: ``load``'s own copy
            "need": 1,                    # the next beat takes the head word of ``data``
            "empty": 1, "fault": 1,       # an EMPTY or a FAULT command is held
            "idle": 1,                    # nothing held, or an EMPTY command: load now
        })
        dec = data.StructLayout({
            "cmd": Command(g), "addr": g.mem_addr_width, **masks, **counts,
            # the state the command starts in (``first`` is set at the start
            # itself; the flags as if the entry were valid)
            "start": state,
        })
        cur = data.StructLayout({
            "cmd": Command(g), "addr": g.mem_addr_width, **counts,
            # the channel again, inverted (so synthesis keeps both): the ack check's
            # own copy, apart from the one every beat's payload loads
            "chan_n": g.chan_bits,
            **masks,
        })
        return dec, state, cur

    def elaborate(self, platform):
        m = Module()
        g = self._g
        B, W = g.bytes_per_word, g.data_width
        ones = Const((1 << B) - 1, B)

        # the next commands, decoded as they arrive (off the queue's LUT RAM read)
        # into a late-ready slice: a command's start (``load``, late: it follows
        # ``wr.ready``) reaches the slice's pointers and ``cur``, not the read
        # queue's read side or the decoded command's enables. Everything the
        # start loads is worked out before the slice, so nothing is compared
        # behind its multiplexer; the starting state (which the next beat's
        # go-ahead reads) has a read pointer copy of its own
        dec_layout, st_layout, cur_layout = self._layouts()
        m.submodules.decoded = decoded = RegisterSlice(dec_layout, late_ready=True,
                                                       urgent=("start",))
        self._decode(m, decoded.i)
        dec_valid, dec = decoded.o.valid, decoded.o.p
        cur = Signal(cur_layout)          # the command being written
        st = Signal(st_layout, init={"idle": 1})
        # ``idle`` and ``last_ok`` again, inverted (so synthesis keeps both): the
        # start of ``cur``'s hundred-odd flip-flops is worked out apart from the
        # one that reaches the state and the slice, each net a gate or two from
        # the flip-flops (``wr.valid`` and ``wr.ready`` are not in it as such)
        dup = Signal(data.StructLayout({"idle_n": 1, "last_ok_n": 1}), init={"last_ok_n": 1})
        load, load_cur = Signal(), Signal()       # ``cur`` takes ``dec``
        m.d.comb += decoded.o.ready.eq(load)
        prev = Signal(W)
        fire = Signal()
        go = (~st.need | self.data.valid) & ~self.ack_full.bit_select(~cur.chan_n, 1)
        m.d.comb += [
            self.wr.valid.eq(st.beat_ok & go),
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
                             st.last_ok.eq(st.last), dup.last_ok_n.eq(~st.last),
                             st.need.eq(~st.last | (cur.words != 1))]
        with m.If(fire):
            m.d.sync += [cur.beats.eq(cur.beats - 1), cur.addr.eq(cur.addr + 1),
                         st.first.eq(0), st.last.eq(cur.beats == 2),
                         st.last_ok.eq(cur.beats == 2), dup.last_ok_n.eq(cur.beats != 2),
                         st.need.eq((cur.beats != 2) | Mux(st.need, cur.words != 1,
                                                           cur.words != 0))]
            with m.If(st.need):
                m.d.comb += self.data.ready.eq(1)
                m.d.sync += [prev.eq(self.data.p), cur.words.eq(cur.words - 1)]

        self._retire(m, cur.cmd, st, dup, fire & st.last)
        # the next command starts with the last beat or from idle (a FAULT
        # command, once its record is taken, leaves through idle): ``fault.ready``
        # is not in ``load``, ``wr.ready`` enters it last, and ``last_ok`` folds
        # ``beat_ok`` in so ``load`` is a gate after the ack check
        m.d.comb += [load.eq(st.idle | (st.last_ok & go & self.wr.ready)),
                     load_cur.eq(~dup.idle_n | (~dup.last_ok_n & go & self.wr.ready))]
        self._load(m, load, load_cur, dec_valid, dec, cur, st, dup)
        return m

    def _load(self, m, load, load_cur, dec_valid, dec, cur, st, dup):
        """Start the decoded command: copies only (the entry's valid bit gates
        the state's flags)."""
        s = dec.start
        with m.If(load_cur):
            m.d.sync += [
                cur.cmd.eq(dec.cmd), cur.chan_n.eq(~dec.cmd.chan), cur.addr.eq(dec.addr),
                cur.shift.eq(dec.shift), cur.be_first.eq(dec.be_first),
                cur.be_last.eq(dec.be_last), cur.beats.eq(dec.beats), cur.words.eq(dec.words),
            ]
        with m.If(load):
            last_ok = dec_valid & s.last_ok
            idle = ~dec_valid | s.idle
            m.d.sync += [
                st.first.eq(1), st.last.eq(s.last), st.need.eq(s.need),
                st.wants_first.eq(dec_valid & s.wants_first),
                st.beat_ok.eq(dec_valid & s.beat_ok), st.last_ok.eq(last_ok),
                st.empty.eq(dec_valid & s.empty), st.fault.eq(dec_valid & s.fault),
                st.idle.eq(idle), dup.idle_n.eq(~idle), dup.last_ok_n.eq(~last_ok),
            ]

    def _decode(self, m, out):
        """Pass the next command to ``out`` with its destination word, the shift,
        the first and last byte enables, its beat and word counts and the state
        it starts in.

        The command comes off the queue's LUT RAM read, late in the cycle, so
        nothing here starts a carry chain on the low address bits (see
        :mod:`.decode`): the counts are ``len``'s high bits plus a table, and
        "more than one beat (word)" a few gates of those."""
        g = self._g
        B, wb = g.bytes_per_word, g.word_bits
        ones = (1 << B) - 1
        c = self.cmd.p
        mv = c.body.move
        src, dst, lo, hi = mv.src[:wb], mv.dst[:wb], mv.len[:wb], mv.len[wb:]
        up_d = round_up_table(m, "up_d", dst, lo)
        up_s = round_up_table(m, "up_s", src, lo)
        # less the reused word (a reused word is past ``src % B > 0``, so at
        # least one is counted)
        up_r = round_up_table(m, "up_r", src, lo, less=1)
        # the window's shift, (s - d) mod B with 0 as B (the high word in full),
        # and "the source byte is past the destination byte"
        low = B - 1
        shift = case_table(m, "shift", wb + 1, Cat(dst, src),
                           lambda v: ((v >> wb) - (v & low)) % B or B)
        s_after_d = case_table(m, "s_after_d", 1, Cat(dst, src), lambda v: (v >> wb) > (v & low))
        # the last beat's lanes below ``(d + len) % B`` (all when that is 0)
        be_last = case_table(m, "be_last", B, Cat(dst, lo),
                             lambda v: ones >> (-((v & low) + (v >> wb)) % B))
        multi_d = more_than_one(hi, up_d)            # d + len > B
        multi_s = more_than_one(hi, up_s)            # s + len > B
        is_data = c.kind == CmdKind.DATA
        # the first word is taken alone first: it belongs in the window's low half
        take_first = s_after_d & ~c.reuse
        st = out.p.start
        m.d.comb += [
            out.valid.eq(self.cmd.valid), self.cmd.ready.eq(out.ready),
            out.p.cmd.eq(c), out.p.addr.eq(mv.dst[wb:]), out.p.shift.eq(shift),
            out.p.be_first.eq(Const(ones, B) << dst), out.p.be_last.eq(be_last),
            out.p.beats.eq(hi + up_d), out.p.words.eq(hi + Mux(c.reuse, up_r, up_s)),
            st.wants_first.eq(is_data & take_first), st.beat_ok.eq(is_data & ~take_first),
            st.last.eq(~multi_d), st.last_ok.eq(is_data & ~take_first & ~multi_d),
            # more than one beat, or a word to take (all but a reused word alone)
            st.need.eq(multi_d | ~c.reuse | multi_s),
            st.empty.eq(c.kind == CmdKind.EMPTY), st.fault.eq(c.kind == CmdKind.FAULT),
            st.idle.eq(c.kind == CmdKind.EMPTY),
        ]

    def _retire(self, m, cmd, st, dup, last_beat):
        """Fault records and retirement."""
        f = cmd.body.fault
        m.d.comb += [
            self.fault.valid.eq(st.fault),
            self.fault.p.chan.eq(cmd.chan), self.fault.p.ctx.eq(f.ctx),
            self.fault.p.va.eq(f.va), self.fault.p.cause.eq(f.cause),
        ]
        with m.If(st.fault & self.fault.ready):
            m.d.sync += [st.fault.eq(0), st.idle.eq(1), dup.idle_n.eq(0)]
        retiring = Signal()
        m.d.comb += retiring.eq(last_beat | st.empty | (st.fault & self.fault.ready))
        # ``retire`` is registered, so the accounting starts from flip-flops. The
        # command counts as in flight a cycle longer, yet a channel's count stays
        # within what the pipe holds: the slot it frees reaches the walker later
        rp = self.retire.payload
        m.d.sync += [self.retire.valid.eq(retiring),
                     rp.chan.eq(cmd.chan), rp.kind.eq(cmd.kind), rp.last.eq(cmd.last),
                     rp.tag.eq(cmd.tag), rp.va.eq(f.va), rp.cause.eq(f.cause)]

