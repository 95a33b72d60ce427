"""Completion and accounting: write acknowledgements, done counts, errors and
the per-channel status."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..lib import counter_shape
from ..mmu import TranslateCause
from .layouts import DONE_COUNT_BITS, ChannelStatus, CmdKind, Event, Retire

__all__ = ["Completion"]


class Completion(wiring.Component):
    """Counts, per channel, the chunks in the pipe, the unacknowledged write
    beats and the ended descriptors, and drives the status.

    A chunk is in the pipe from ``issued`` (it left the walker) until it is
    ``dropped`` by the translator or its command is ``retired`` by the writer.
    A descriptor has *ended* when the writer retired its last command
    (``last``, not a fault); the status reports the ended count and the last
    ended tag (``done_count``, ``done_tag``) whenever the channel has no
    unacknowledged write, so completion means "visible at the destination" as
    far as the acknowledgements promise it. A retired ``FAULT`` sets
    ``error``, ``cause`` and ``va``; ``clear`` resets ``error`` of a channel
    that is not busy, and ``cleared`` passes that on to the translator.

    Parameters
    ----------
    geometry : :class:`DmaGeometry`
    ack_limit : int
        Unacknowledged beats per channel (``ack_full`` at the limit).
    inflight_limit : int
        Most chunks of one channel the pipe can hold (sizes the counters).

    Interface attributes
    --------------------
    issued : ``In(Event(chan))``
    dropped : ``In(Event(chan))``
    retire : ``In(Event(Retire))``
    beat : ``In(Event(chan))``
    wr_ack : ``In(stream.Signature(chan))``
        Always ready.
    walking : ``In(channels)``
        The front-end or the walker holds work of the channel.
    ack_full : ``Out(channels)``
    clear : ``In(channels)``
    cleared : ``Out(channels)``
    status : ``Out(ChannelStatus).array(channels)``
    """

    def __init__(self, geometry, *, ack_limit, inflight_limit):
        g = self._g = geometry
        self._ack_limit = ack_limit
        self._inflight_limit = inflight_limit
        event = Event(g.chan_bits)
        super().__init__({
            "issued": In(event),
            "dropped": In(event),
            "retire": In(Event(Retire(g))),
            "beat": In(event),
            "wr_ack": In(stream.Signature(g.chan_bits)),
            "walking": In(g.channels),
            "ack_full": Out(g.channels),
            "clear": In(g.channels),
            "cleared": Out(g.channels),
            "status": Out(ChannelStatus(g.arch)).array(g.channels),
        })

    def elaborate(self, platform):
        m = Module()
        g = self._g
        rt = self.retire
        busy = Signal(g.channels)
        m.d.comb += [self.wr_ack.ready.eq(1), self.cleared.eq(self.clear & ~busy)]
        for c in range(g.channels):
            st = self.status[c]
            pending = Signal(range(self._ack_limit + 1), name=f"ack_pending{c}")
            inflight = Signal(counter_shape(self._inflight_limit), name=f"inflight{c}")
            ended = Signal(DONE_COUNT_BITS, name=f"ended{c}")
            ended_tag = Signal(g.tag_bits, name=f"ended_tag{c}")
            error = Signal(name=f"error{c}")
            cause = Signal(TranslateCause, name=f"cause{c}")
            retired = Signal(name=f"retired{c}")
            m.d.comb += retired.eq(rt.valid & (rt.payload.chan == c))
            beat = Signal(name=f"beat{c}")
            ack = Signal(name=f"ack{c}")
            m.d.comb += [beat.eq(self.beat.valid & (self.beat.payload == c)),
                         ack.eq(self.wr_ack.valid & (self.wr_ack.p == c))]
            # ``ack_full`` is registered: it follows ``pending`` reaching the limit
            with m.If(beat & ~ack):
                m.d.sync += self.ack_full[c].eq(pending == self._ack_limit - 1)
            with m.Elif(ack & ~beat):
                m.d.sync += self.ack_full[c].eq(0)
            # an issued chunk is counted from a register, a cycle later, and
            # ``busy`` reads that register meanwhile, so ``busy`` is what it was:
            # the walker's late issue event reaches a flip-flop, not the adders
            # (FPGA timing). The chunk cannot retire or drop before it is counted:
            # the chunk queue and the translator lie between
            issued = Signal(name=f"issued{c}")
            m.d.sync += [
                issued.eq(self.issued.valid & (self.issued.payload == c)),
                pending.eq(pending + beat - ack),
                inflight.eq(inflight + issued
                            - (self.dropped.valid & (self.dropped.payload == c)) - retired),
            ]
            # ``unreported``: ``ended`` is ahead of ``done_count``
            unreported = Signal(name=f"unreported{c}")
            with m.If(retired & rt.payload.last & (rt.payload.kind != CmdKind.FAULT)):
                m.d.sync += [ended.eq(ended + 1), ended_tag.eq(rt.payload.tag), unreported.eq(1)]
            with m.Elif(pending == 0):
                m.d.sync += unreported.eq(0)
            with m.If(retired & (rt.payload.kind == CmdKind.FAULT)):
                m.d.sync += [error.eq(1), cause.eq(rt.payload.cause), st.va.eq(rt.payload.va)]
            with m.Elif(self.cleared[c]):
                m.d.sync += error.eq(0)
            with m.If(pending == 0):
                m.d.sync += [st.done_count.eq(ended), st.done_tag.eq(ended_tag)]
            m.d.comb += [
                busy[c].eq(self.walking[c] | issued | (inflight != 0) | (pending != 0) | unreported),
                st.busy.eq(busy[c]), st.error.eq(error),
                st.cause.eq(Mux(error, cause, TranslateCause.NONE)),
            ]
        return m
