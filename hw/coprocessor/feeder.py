"""Descriptor feeder: per-channel descriptor queues, arbitrated into the DMA."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Shape, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..dma import ChannelStatus, CopyDescriptor
from ..lib import Queue, RoundRobin

__all__ = ["DescriptorFeeder"]


class DescriptorFeeder(wiring.Component):
    """Queues descriptors per channel and feeds them to the DMA.

    A descriptor waits in its channel's queue (so a COPY waits only while its
    own channel's queue is full, and a busy channel never holds up the
    others). A channel *qualifies* when its queue is not empty and the DMA
    has room for its next descriptor (``room``) or it has faulted (the DMA
    takes, and drops, anything then); the qualifying channels share ``desc``
    round-robin (:class:`hw.lib.RoundRobin`). An offer the DMA does not take
    is held until it does.

    Per channel, the descriptors taken by the DMA are counted and compared
    with the DMA's ``done_count`` (both wrap at the same width): a channel is
    ``done`` when its queue is empty, it is not busy, and every descriptor it
    took has completed (or it has faulted).

    Parameters
    ----------
    arch : :class:`hw.isa.ArchParams`
    depth : int
        Descriptors each channel's queue holds.

    Interface attributes
    --------------------
    w : ``In(stream.Signature(CopyDescriptor(arch, channels)))``
        Descriptors, each into the queue of its ``chan``.
    desc : ``Out(stream.Signature(CopyDescriptor(arch, channels)))``
        To the DMA's ``desc``.
    chan_status : ``In(ChannelStatus(arch)).array(channels)``
        From the DMA.
    room : ``In(channels)``
        From the DMA: it would take the channel's next descriptor now.
    flush : ``In(1)``
        Discard every queued descriptor and take the DMA's completion counts
        as the new baseline (a stopped program's leftovers; the DMA's
        channels are cleared at the same time).
    done : ``Out(channels)``
        The channel has completed (or faulted on) every descriptor issued.
    drained : ``Out(1)``
        Every queue is empty and no channel is busy or faulted.
    """

    def __init__(self, arch, *, depth):
        self._arch = arch
        self._depth = depth
        C = arch.channels
        super().__init__({
            "w": In(stream.Signature(CopyDescriptor(arch, C))),
            "desc": Out(stream.Signature(CopyDescriptor(arch, C))),
            "chan_status": In(ChannelStatus(arch)).array(C),
            "room": In(C),
            "flush": In(1),
            "done": Out(C),
            "drained": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        arch, C = self._arch, self._arch.channels
        st = self.chan_status
        layout = CopyDescriptor(arch, C)
        m.submodules.arbiter = arb = RoundRobin(C)
        fire = Signal()
        m.d.comb += fire.eq(self.desc.valid & self.desc.ready)
        hold = Signal()                  # an offer the DMA did not take: only it requests
        hold_chan = Signal.like(arb.grant)
        eligible = Signal(C)
        count_shape = Shape.cast(ChannelStatus(arch)["done_count"].shape)
        w_ready, empty, busy = Signal(C), Signal(C), Signal(C)
        for c in range(C):
            m.submodules[f"queue{c}"] = q = Queue(layout, self._depth)
            issued = Signal(count_shape, name=f"issued{c}")      # taken by the DMA
            feed = Signal(name=f"feed{c}")
            m.d.comb += [
                q.w.valid.eq(self.w.valid & (self.w.p.chan == c)),
                q.w.payload.eq(self.w.payload),
                w_ready[c].eq(q.w.ready),
                empty[c].eq(q.level == 0),
                busy[c].eq(st[c].busy),
                eligible[c].eq(q.r.valid & (self.room[c] | st[c].error)),
                arb.requests[c].eq(Mux(hold, hold_chan == c, eligible[c])),
                feed.eq(fire & (arb.grant == c)),
                q.r.ready.eq(self.flush | feed),
                self.done[c].eq(empty[c] & ~st[c].busy
                                & ((issued == st[c].done_count) | st[c].error)),
            ]
            with m.If(arb.grant == c):
                m.d.comb += self.desc.payload.eq(q.r.payload)
            with m.If(self.flush):
                m.d.sync += issued.eq(st[c].done_count)
            with m.Elif(feed):
                m.d.sync += issued.eq(issued + 1)
        m.d.comb += [
            self.w.ready.eq(w_ready.bit_select(self.w.p.chan, 1)),
            self.desc.valid.eq(arb.valid),
            arb.advance.eq(fire & ~self.flush),
            self.drained.eq(empty.all() & ~busy.any()
                            & ~Cat(*[s.error for s in st]).any()),
        ]
        with m.If(self.flush | fire):
            m.d.sync += hold.eq(0)
        with m.Elif(self.desc.valid):
            m.d.sync += [hold.eq(1), hold_chan.eq(arb.grant)]
        return m
