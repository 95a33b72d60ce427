"""The reader: word reads for each command, credit-limited, into a read-data
queue."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..lib import Queue, RegisterSlice, counter_shape
from ..memory import ReadPortSignature
from .decode import round_up_table
from .layouts import CmdKind, Command

__all__ = ["Reader"]


class Reader(wiring.Component):
    """Issues the local word reads of each ``DATA`` command and passes every
    command on to the writer, in order.

    A command whose source starts at byte ``s = src % B`` needs the words
    ``src // B`` .. ``(src + len - 1) // B``. When the command continues its
    row (``cont``) right after the same channel's previous ``DATA`` command
    and ``s > dst % B``, its first word is the previous command's last one,
    which the writer still holds: the reader marks the command ``reuse`` and
    skips that read (so a long unaligned copy reads every word once and the
    writer needs no extra cycle per chunk).

    Reads are issued one a cycle, at most ``outstanding`` ahead of the
    writer: each read has a place in the read-data queue (first-word
    fall-through) before it is issued. Commands are decoded (``reuse``, the
    read count and the issue state they start in) as they are taken, off the
    command queue's LUT RAM read (:mod:`.decode`: no carry chain on the low
    address bits), into a late-ready :class:`hw.lib.RegisterSlice` (two
    decoded commands besides the one reading); the next one starts (and
    passes on) in the cycle the last read of the current one is issued, by
    copying the slice's output. The issue state (reading, the
    last read, the credit limit) is kept in flip-flops.

    Parameters
    ----------
    geometry : :class:`DmaGeometry`
    outstanding : int
        Read-data queue depth and the reads in flight.

    Interface attributes
    --------------------
    cmd : ``In(stream.Signature(Command))``
    cmd_out : ``Out(stream.Signature(Command))``
        The command, with ``reuse`` set.
    rd : ``Out(ReadPortSignature(mem_addr_width, data_width))``
    data : ``Out(stream.Signature(data_width))``
        Read words, in order.
    """

    def __init__(self, geometry, *, outstanding):
        g = self._g = geometry
        self._outstanding = outstanding
        super().__init__({
            "cmd": In(stream.Signature(Command(g))),
            "cmd_out": Out(stream.Signature(Command(g))),
            "rd": Out(ReadPortSignature(g.mem_addr_width, g.data_width)),
            "data": Out(stream.Signature(g.data_width)),
        })

    def elaborate(self, platform):
        m = Module()
        g = self._g
        # first-word fall-through: the writer's ``data.ready`` (late: it follows
        # ``wr.ready``) reaches the queue's pointer and level, no output register;
        # ``data.valid`` is ``level != 0`` kept in a flip-flop of its own
        m.submodules.rdata = rdata = Queue(g.data_width, self._outstanding, buffered=False)
        wiring.connect(m, wiring.flipped(self.rd.rsp), rdata.w)
        has_data = Signal()
        pushed = rdata.w.valid & rdata.w.ready
        popped = self.data.valid & self.data.ready
        m.d.sync += has_data.eq(pushed | (rdata.level > 1) | ((rdata.level == 1) & ~popped))
        m.d.comb += [self.data.valid.eq(has_data), self.data.p.eq(rdata.r.p),
                     rdata.r.ready.eq(self.data.ready)]

        # the next commands, decoded as they arrive (off the queue's LUT RAM read)
        # into a late-ready slice, and started as the last read of the current
        # one issues: the start reaches the slice's pointers, not the command
        # queue's read side or a wide register's enable. What the start loads
        # is worked out before the slice, so nothing is compared behind its
        # multiplexer; the flags the issue state takes read a pointer copy of
        # their own
        m.submodules.decoded = decoded = RegisterSlice(self._dec_layout(), late_ready=True,
                                                       urgent=("start",))
        self._decode(m, decoded.i)
        take = Signal()
        free = self._read(m, decoded.o.p, take)
        m.d.comb += [
            self.cmd_out.valid.eq(decoded.o.valid & free),
            self.cmd_out.p.eq(decoded.o.p.cmd),
            take.eq(self.cmd_out.valid & self.cmd_out.ready),
            decoded.o.ready.eq(take),
        ]
        return m

    def _dec_layout(self):
        """A decoded command: the command, its read count, and the issue state
        it starts in (``data``: a ``DATA`` command, which loads the state)."""
        most = self._g.burst_len + 1          # words of one chunk, at most
        return data.StructLayout({
            "cmd": Command(self._g), "left": counter_shape(most),
            "start": data.StructLayout({"data": 1, "busy": 1, "one_left": 1,
                                        "jump": 1}),   # ``addr`` takes the source word
        })

    def _read(self, m, dec, take):
        """Issue the current command's reads; ``take`` starts ``dec``. Returns
        "the next command may start in this cycle"."""
        g, N = self._g, self._outstanding
        addr = Signal(g.mem_addr_width)
        left = Signal(counter_shape(g.burst_len + 1))
        credits = Signal(range(N + 1))
        # the state in flip-flops, each next value worked out first, so that a
        # read's issue and the next command's start are a gate or two deep
        busy, one_left = Signal(), Signal()       # ``one_left``: ``left == 1``
        at_limit = Signal()                   # ``credits == N``
        reading = Signal()                    # ``busy & ~at_limit``: ``rd.req.valid``
        ending = Signal()                     # ``reading & one_left``: the read is the last
        nxt = {k: Signal(name=f"{k}_next") for k in ("busy", "one_left", "at_limit")}
        issue, pop = Signal(), Signal()
        m.d.comb += [
            self.rd.req.valid.eq(reading), self.rd.req.p.eq(addr),
            issue.eq(reading & self.rd.req.ready),
            pop.eq(self.data.valid & self.data.ready),
            nxt["busy"].eq(busy), nxt["one_left"].eq(one_left), nxt["at_limit"].eq(at_limit),
        ]
        m.d.sync += credits.eq(credits + issue - pop)
        with m.If(issue != pop):
            m.d.comb += nxt["at_limit"].eq(issue & (credits == N - 1))
        with m.If(issue):
            m.d.sync += [addr.eq(addr + 1), left.eq(left - 1)]
            m.d.comb += nxt["one_left"].eq(left == 2)
            with m.If(one_left):
                m.d.comb += nxt["busy"].eq(0)
        with m.If(take & dec.start.data):
            m.d.comb += [nxt["busy"].eq(dec.start.busy), nxt["one_left"].eq(dec.start.one_left)]
            m.d.sync += left.eq(dec.left)
            with m.If(dec.start.jump):
                m.d.sync += addr.eq(dec.cmd.body.move.src[g.word_bits:])
        going = nxt["busy"] & ~nxt["at_limit"]
        m.d.sync += [busy.eq(nxt["busy"]), one_left.eq(nxt["one_left"]),
                     at_limit.eq(nxt["at_limit"]),
                     reading.eq(going), ending.eq(going & nxt["one_left"])]
        return ~busy | (ending & self.rd.req.ready)

    def _decode(self, m, out):
        """Pass the next command to ``out``: mark ``reuse``, count its reads
        and work out the issue state it starts in.

        Off the queue's LUT RAM read, so without a carry chain on the low
        address bits (see :mod:`.decode`): the read count with and without
        the reused word are added up beside ``reuse``, which picks one."""
        wb = self._g.word_bits
        c = self.cmd.p
        mv = c.body.move
        last_data = Signal()                 # the previous command moved data
        last_chan = Signal(self._g.chan_bits)
        src, lo, hi = mv.src[:wb], mv.len[:wb], mv.len[wb:]
        up = round_up_table(m, "up", src, lo)              # ceil((s + len) / B) - hi
        up_r = round_up_table(m, "up_r", src, lo, less=1)  # less the reused word
        reuse = Signal()
        st = out.p.start
        m.d.comb += [
            out.valid.eq(self.cmd.valid), self.cmd.ready.eq(out.ready),
            out.p.cmd.eq(c), out.p.cmd.reuse.eq(reuse),
            reuse.eq((c.kind == CmdKind.DATA) & c.cont & last_data
                     & (last_chan == c.chan) & (mv.src[:wb] > mv.dst[:wb])),
            out.p.left.eq(Mux(reuse, hi + up_r, hi + up)),
            st.data.eq(c.kind == CmdKind.DATA),
            # (a reused word may be all the command needs: then nothing to read)
            st.busy.eq(~reuse | hi.any() | (up_r != 0)),
            st.one_left.eq(Mux(reuse, _is_one(hi, up_r), _is_one(hi, up))),
            # after the previous command, ``addr`` is the word after its last:
            # where a command that reuses that last word continues
            st.jump.eq(~reuse),
        ]
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += [last_data.eq(c.kind == CmdKind.DATA), last_chan.eq(c.chan)]


def _is_one(hi, up):
    """``hi + up == 1`` for ``up`` in 0..2 (a :func:`.decode.round_up_table`)."""
    return (~hi.any() & (up == 1)) | ((hi == 1) & (up == 0))
