"""Descriptor front-end: two descriptor slots per channel and the
round-robin arbitration of the walker between channels."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..lib import RoundRobin
from .layouts import CopyDescriptor, Event, Grant, GrantOp, Slot

__all__ = ["FrontEnd"]


class FrontEnd(wiring.Component):
    """Per-channel descriptor slots and the walker's arbiter.

    Each channel has two slots (a ring in LUT RAM: the descriptor being
    walked and the next one), so back-to-back descriptors need no handshake
    with the producer in between. A channel is *walking* from the grant that
    starts its head descriptor until the walker reports the end of that
    descriptor on ``walked``; then its slot is freed.

    Every cycle the arbiter (:class:`hw.lib.RoundRobin`) picks one channel
    that is walking or has a descriptor waiting, is not halted and was not
    picked in the previous cycle, and registers it; ``grant`` then offers that
    channel, what to do (``GrantOp``) and its head descriptor, read from the
    ring. The pick is replaced only when the walker takes the grant, and a
    channel is never picked twice in a row, so the walker always sees the
    previous write-back of a channel before its next grant: one channel alone
    gets a grant every second cycle, several share them round-robin.

    Parameters
    ----------
    geometry : :class:`DmaGeometry`
    scratch : bool
        Give the ring a scratch half (twice the slot addresses: free in a
        16-entry LUT RAM up to 4 channels) and write every offered descriptor, into its
        channel's tail slot when there is room, else into the scratch half
        (a halted channel's dropped descriptor goes to its tail slot, dead
        until the channel is cleared). The ring's write enable is then the
        producer's ``valid``, a flip-flop, not the slot-state logic: that
        enable drives every LUT RAM column (FPGA timing). Taking, the slots
        and the cycles are the same either way. Without LUT RAM (iCE40) the
        scratch half would be flip-flops: leave it off there.

    Interface attributes
    --------------------
    desc : ``In(stream.Signature(CopyDescriptor))``
        Descriptors; one for a channel whose two slots are taken waits
        (``ready`` low); one for a halted channel or a channel number at or
        above the channel count is taken and dropped.
    grant : ``Out(stream.Signature(Grant))``
    walked : ``In(Event(chan))``
        The named channel's descriptor has been walked: free its slot.
    halt : ``In(channels)``
        Channels that faulted: their slots are emptied and new descriptors dropped.
    busy : ``Out(channels)``
        The channel holds a descriptor or has a grant pending.
    free_slots : ``Out(range(3)).array(channels)``
        The channel's free slots (0..2): a descriptor is taken at once while
        one is free (from registers only, so a producer can choose by it).
    """

    def __init__(self, geometry, *, scratch=True):
        if not isinstance(scratch, bool):
            raise TypeError(f"Scratch must be a bool, not {scratch!r}")
        g = self._g = geometry
        self._scratch = scratch
        super().__init__({
            "desc": In(stream.Signature(CopyDescriptor(g.arch, g.channels))),
            "grant": Out(stream.Signature(Grant(g))),
            "walked": In(Event(g.chan_bits)),
            "halt": In(g.channels),
            "busy": Out(g.channels),
            "free_slots": Out(range(3)).array(g.channels),
        })

    scratch = property(lambda self: self._scratch, doc="The ring has a scratch half.")

    def elaborate(self, platform):
        m = Module()
        C = self._g.channels
        dp = self.desc.p
        # slot addresses are Cat(slot, chan); the scratch half has the bit above them set
        depth = 4 << len(dp.chan) if self._scratch else 2 * C
        m.submodules.ring = ring = Memory(shape=Slot(self._g), depth=depth, init=[])
        ring_w = ring.write_port()
        ring_r = ring.read_port(domain="comb")
        m.submodules.arbiter = arb = RoundRobin(C)

        walking = Signal(C)
        head = Signal(C)               # per channel: slot of the descriptor walked next
        tail = Signal(C)               # per channel: slot the next descriptor goes to
        full = [Signal(2, name=f"full{c}") for c in range(C)]
        picked = Signal()              # the registered pick (grant.valid)
        chan = Signal(range(max(2, C)))
        # per channel: ``picked & (chan == c)``, in a flip-flop of its own: the
        # decode of ``chan`` (which also addresses the ring) through the head slot's
        # select fanned out to every channel's ``walking`` enable (FPGA timing)
        pick = Signal(C)

        # descriptors in: per channel, "its tail slot is free" and "it takes a
        # descriptor now" are a LUT of flip-flops each, so ``desc.chan`` (an
        # input, late) only picks one of them for the ring's wide write enable
        # (with the scratch half: for one write address bit)
        room = Signal(C)               # per channel: its tail slot is free
        ok = Signal(C)                 # per channel: room and not halted
        take = Signal()                # the descriptor goes into the ring
        for c in range(C):
            m.d.comb += [room[c].eq(~full[c].bit_select(tail[c], 1)),
                         ok[c].eq(room[c] & ~self.halt[c])]
        m.d.comb += self.desc.ready.eq(1)   # a channel number past the last: dropped
        fits = Signal()                # the descriptor's channel has room (0 past the last)
        with m.Switch(dp.chan):
            for c in range(C):
                with m.Case(c):
                    m.d.comb += [self.desc.ready.eq(self.halt[c] | room[c]),
                                 take.eq(self.desc.valid & ok[c]), fits.eq(room[c])]
        slot = Cat(tail.bit_select(dp.chan, 1), dp.chan)
        if self._scratch:
            m.d.comb += [ring_w.en.eq(self.desc.valid), ring_w.addr.eq(Cat(slot, ~fits))]
        else:
            m.d.comb += [ring_w.en.eq(take), ring_w.addr.eq(slot)]
        for c in range(C):
            with m.If(take & (dp.chan == c)):
                m.d.sync += [full[c].bit_select(tail[c], 1).eq(1), tail[c].eq(~tail[c])]
        m.d.comb += [
            ring_w.data.ctx.eq(dp.ctx), ring_w.data.tag.eq(dp.tag),
            ring_w.data.src0.eq(dp.src - dp.src_stride),
            ring_w.data.dst0.eq(dp.dst - dp.dst_stride),
            ring_w.data.row_bytes.eq(dp.row_bytes), ring_w.data.rows.eq(dp.rows),
            ring_w.data.src_stride.eq(dp.src_stride), ring_w.data.dst_stride.eq(dp.dst_stride),
            ring_w.data.empty.eq((dp.rows == 0) | (dp.row_bytes == 0)),
            ring_w.data.op.eq(dp.op),
        ]

        # arbitration: the pick is registered and replaced when the walker takes it
        for c in range(C):
            m.d.comb += arb.requests[c].eq((walking[c] | full[c].bit_select(head[c], 1))
                                           & ~self.halt[c] & ~pick[c])
        m.d.comb += arb.advance.eq(self.grant.ready)
        with m.If(self.grant.ready):
            m.d.sync += [picked.eq(arb.valid), chan.eq(arb.grant)]
            m.d.sync += [pick[c].eq(arb.valid & (arb.grant == c)) for c in range(C)]

        # the grant: the picked channel's head slot
        head_full = Signal()
        m.d.comb += [
            ring_r.addr.eq(Cat(head.bit_select(chan, 1), chan)),
            head_full.eq(Cat(*full).bit_select(Cat(head.bit_select(chan, 1), chan), 1)),
            self.grant.valid.eq(picked),
            self.grant.p.chan.eq(chan),
            self.grant.p.desc.eq(ring_r.data),
            self.grant.p.op.eq(Mux(walking.bit_select(chan, 1), GrantOp.CHUNK,
                                   Mux(head_full, GrantOp.START, GrantOp.NONE))),
        ]
        for c in range(C):
            # the grant is this channel's ``START``: its own flip-flops, not the
            # grant's ``op`` (decoded through ``chan``), with ``ready`` the late input
            with m.If(pick[c] & ~walking[c] & full[c].bit_select(head[c], 1)
                      & self.grant.ready):
                m.d.sync += walking[c].eq(1)
            with m.If(self.walked.valid & (self.walked.payload == c)):
                m.d.sync += [walking[c].eq(0), full[c].bit_select(head[c], 1).eq(0),
                             head[c].eq(~head[c])]
            with m.If(self.halt[c]):
                # both pointers back to slot 0 too: emptied slots with the head
                # elsewhere than the tail would never be walked again
                m.d.sync += [walking[c].eq(0), full[c].eq(0), head[c].eq(0), tail[c].eq(0)]
            m.d.comb += [self.busy[c].eq(walking[c] | full[c].any() | pick[c]),
                         self.free_slots[c].eq(~full[c][0] + ~full[c][1])]
        return m
