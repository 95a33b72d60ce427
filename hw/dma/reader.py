"""The reader: word reads for each command, credit-limited, into a read-data
queue."""
from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..lib import Queue, counter_shape
from ..memory import ReadPortSignature
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
    writer: each read has a place in the read-data queue before it is issued.
    A command is decoded (``reuse``, its word count) in the cycle after it is
    taken, off the command queue's LUT RAM read, and starts (and passes on) in
    the cycle the last read of the current one is issued.

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
        wb, N = g.word_bits, self._outstanding
        m.submodules.rdata = rdata = Queue(g.data_width, N)
        wiring.connect(m, wiring.flipped(self.rd.rsp), rdata.w)
        wiring.connect(m, rdata.r, wiring.flipped(self.data))

        busy = Signal()
        addr = Signal(g.mem_addr_width)
        most = g.burst_len + 1                # words of one chunk, at most
        left = Signal(counter_shape(most))
        one_left = Signal()                   # ``left == 1``, kept in a flip-flop
        credits = Signal(range(N + 1))
        issue = Signal()
        m.d.comb += [
            self.rd.req.valid.eq(busy & (credits != N)),
            self.rd.req.p.eq(addr),
            issue.eq(self.rd.req.valid & self.rd.req.ready),
        ]
        m.d.sync += credits.eq(credits + issue - (self.data.valid & self.data.ready))
        with m.If(issue):
            m.d.sync += [addr.eq(addr + 1), left.eq(left - 1), one_left.eq(left == 2)]
            with m.If(one_left):
                m.d.sync += busy.eq(0)

        # the next command, decoded a cycle ahead (off the queue's LUT RAM read), and
        # started as the last read of the current one issues
        dec_valid = Signal()
        dec = Signal(data.StructLayout({"cmd": Command(g), "extra": counter_shape(most - 1)}))
        self._decode(m, dec_valid, dec)
        free = Signal()
        take = Signal()
        mv = dec.cmd.body.move
        m.d.comb += [
            free.eq(~busy | (issue & one_left)),
            self.cmd_out.valid.eq(dec_valid & free),
            self.cmd_out.p.eq(dec.cmd),
            take.eq(self.cmd_out.valid & self.cmd_out.ready),
            self.cmd.ready.eq(~dec_valid | take),
        ]
        with m.If(take & (dec.cmd.kind == CmdKind.DATA)):
            # (a reused word may be all the command needs: then nothing to read)
            m.d.sync += [busy.eq(~dec.cmd.reuse | (dec.extra != 0)),
                         left.eq(dec.extra + ~dec.cmd.reuse),
                         one_left.eq(dec.extra == dec.cmd.reuse)]
            # after the previous command, ``addr`` is the word after its last:
            # where a command that reuses that last word continues
            with m.If(~dec.cmd.reuse):
                m.d.sync += addr.eq(mv.src[wb:])
        return m

    def _decode(self, m, dec_valid, dec):
        """Take the next command into ``dec``: mark ``reuse`` and count the words
        after its first."""
        wb = self._g.word_bits
        c = self.cmd.p
        mv = c.body.move
        last_data = Signal()                 # the previous command moved data
        last_chan = Signal(self._g.chan_bits)
        with m.If(self.cmd.ready):
            m.d.sync += [
                dec_valid.eq(self.cmd.valid), dec.cmd.eq(c),
                dec.cmd.reuse.eq((c.kind == CmdKind.DATA) & c.cont & last_data
                                 & (last_chan == c.chan) & (mv.src[:wb] > mv.dst[:wb])),
                dec.extra.eq((mv.src[:wb] + mv.len - 1) >> wb),
            ]
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += [last_data.eq(c.kind == CmdKind.DATA), last_chan.eq(c.chan)]
