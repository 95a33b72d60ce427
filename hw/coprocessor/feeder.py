"""Descriptor feeder: per-channel descriptor queues, arbitrated into the DMA."""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Mux, Shape, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..dma import ChannelStatus, CopyDescriptor
from ..lib import Queue, RegisterSlice, RoundRobin, bit_groups, register_copies

__all__ = ["DescriptorFeeder"]


class DescriptorFeeder(wiring.Component):
    """Queues descriptors per channel and feeds them to the DMA.

    Descriptors enter through a late-ready :class:`hw.lib.RegisterSlice`
    (``w.ready`` comes from its registers, so a COPY retires without waiting
    on the queue its word names) and reach their channel's queue a cycle
    later; a channel with a descriptor in the slice is not ``done`` (with
    both of the slice's entries full, every channel counts as having one).

    A descriptor waits in its channel's queue (so a COPY waits only while its
    own channel's queue is full, and a busy channel never holds up the
    others). The queues read first-word fall-through (LUT RAM read
    without an output register), so a pop moves only a read pointer: a
    registered read side would make every pop an enable of a
    descriptor-wide register. A queue's LUT RAM is written whenever it has
    room (``write_free``: its write enable is a flip-flop), and its push is
    the slice's ``route`` for it (flip-flops, one multiplexer) and its
    not-full flag. A channel *qualifies* when its queue is not empty, the DMA
    has a free slot for its next descriptor or it has faulted (the DMA
    takes, and drops, anything then), and it is not the registered pick. The
    free slots are counted from registers: the DMA's ``free_slots`` of the
    previous cycle (a slot freed in that cycle is seen a cycle late) against
    the channel's offers then, both before that cycle's take. The
    qualifying channels share ``desc`` round-robin
    (:class:`hw.lib.RoundRobin`), and the pick is registered: in the next
    cycle its queue's head moves into the offer (so a channel is picked at
    most every second cycle, and the arbiter's decision reaches only the
    pick register, never a queue or the offer). The offer is one register
    (its output straight from flip-flops: the DMA's slot choice starts from
    them), loaded only while it is empty, so the DMA's ``ready`` reaches its
    valid bit and the take counts, never a payload enable; the DMA always
    has room for what is offered and takes it at once, so a descriptor
    leaves at most every second cycle. From queue to DMA: two cycles.

    Per channel, the descriptors that left its queue are counted and compared
    with the DMA's ``done_count`` (both wrap at the same width): a channel is
    ``done`` when its queue is empty, nothing of it is offered, it is not
    busy, and every descriptor that left has completed (or it has faulted).
    ``done`` is a register (the DMA's status is late in the cycle), so it
    says what held in the previous cycle, and it is cleared with every
    descriptor written for the channel: never done too early, a cycle late
    at most.

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
    free_slots : ``In(range(3)).array(channels)``
        From the DMA: its free descriptor slots for the channel.
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
            "free_slots": In(range(3)).array(C),
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
        w, w_route, in_slice = self._input_slice(m, layout)
        # the offer: one register, loaded only while empty, so its enable comes
        # from flip-flops and the DMA's ready (which depends on the offered
        # channel) reaches only the offer's valid bit and the take counts
        offer_valid = Signal()
        offer_p = Signal(layout)
        m.d.comb += [self.desc.valid.eq(offer_valid), self.desc.payload.eq(offer_p)]
        # the registered pick: moved into the offer when it has room, replaced then
        # ``pick`` selects the payload; ``chosen`` is the same pick one-hot
        # (with ``picked``), so a channel's pop is one gate from flip-flops
        picked, pick, chosen = Signal(), Signal(range(max(2, C))), Signal(C)
        push = Signal()
        m.d.comb += push.eq(picked & ~offer_valid & ~self.flush)
        with m.If(self.flush):
            m.d.sync += [picked.eq(0), chosen.eq(0)]
        with m.Elif(~picked | push):
            m.d.sync += [picked.eq(arb.valid), pick.eq(arb.grant),
                         chosen.eq(Mux(arb.valid, 1 << arb.grant, 0))]
        taken = self.desc.valid & self.desc.ready
        # the offer's valid bit decoded by its channel (``chosen`` as it is pushed:
        # queue c holds channel c's words only), so a channel's take count is
        # the DMA's ready (late: it decodes the offer's channel) and a flip-flop
        offered_to = Signal(C)
        with m.If(self.flush):
            m.d.sync += offered_to.eq(0)
        with m.Elif(push):
            m.d.sync += offered_to.eq(chosen)
        with m.Elif(taken):
            m.d.sync += offered_to.eq(0)
        flushed = Signal()      # a take in a flush cycle is not in ``slots``: skip a cycle
        m.d.sync += flushed.eq(self.flush)
        eligible = Signal(C)
        count_shape = Shape.cast(ChannelStatus(arch)["done_count"].shape)
        w_ready, empty, held = Signal(C), Signal(C), Signal(C)
        heads = []
        for c in range(C):
            # (its flags are registers: the level's compares, read by ``done``, the
            # arbiter and ``w.ready``, had stretched the level's own loop on the board;
            # four read pointers: one drove all 54 LUT-RAM columns' read addresses)
            # (write_free: every LUT-RAM column's write enable is the queue's not-full
            # flip-flop, not the push decoded from the input slice)
            m.submodules[f"queue{c}"] = q = Queue(layout, self._depth, buffered=False, registered_flags=True,
                                                  read_copies=4, write_free=True)
            heads.append(q.r.payload)
            issued = Signal(count_shape, name=f"issued{c}")      # left the queue
            pop = Signal(name=f"pop{c}")
            gone = offered_to[c] & self.desc.ready
            # The DMA's free slots and the channel's offers, both registered before
            # the take of their cycle is subtracted: a take lowers both by one, so
            # "a free slot beyond the offers" compares them as they are, and the
            # DMA's ready reaches only ``took`` (a slot freed in a cycle is seen
            # a cycle late).
            slots = Signal(range(3), name=f"slots{c}")            # free_slots, registered
            in_flight = Signal(range(4), name=f"in_flight{c}")    # offers, with the pop
            took = Signal(name=f"took{c}")                        # ... and the take
            offered = Signal(range(3), name=f"offered{c}")        # in the offer
            m.d.comb += offered.eq(in_flight - took)
            m.d.sync += [slots.eq(self.free_slots[c]), in_flight.eq(offered + pop), took.eq(gone)]
            with m.If(self.flush):
                m.d.sync += [in_flight.eq(0), took.eq(0)]
            m.d.comb += [
                q.w.valid.eq(w_route[c]),
                q.w.payload.eq(w.payload),
                w_ready[c].eq(q.w.ready),
                empty[c].eq(~q.r.valid),
                held[c].eq(offered != 0),
                # a free slot beyond those the offers will fill; not picked already
                # (its head leaves the queue only when the pick is pushed)
                eligible[c].eq(q.r.valid & ((slots > in_flight) | st[c].error)
                               & ~chosen[c] & ~flushed),
                arb.requests[c].eq(eligible[c] & ~self.flush),
                # (a flush reads every queue anyway, and its branches take
                # priority wherever ``pop`` counts)
                pop.eq(chosen[c] & ~offer_valid),
                q.r.ready.eq(self.flush | pop),
            ]
            written = self.w.valid & self.w.ready & (self.w.p.chan == c)
            m.d.sync += self.done[c].eq(empty[c] & ~held[c] & ~st[c].busy & ~written & ~in_slice[c]
                                        & ~self.flush
                                        & ((issued == st[c].done_count) | st[c].error))
            with m.If(self.flush):
                m.d.sync += issued.eq(st[c].done_count)
            with m.Elif(pop):
                m.d.sync += issued.eq(issued + 1)
        self._load_offer(m, (offer_valid, offer_p), heads, (pick, picked, arb.grant), push, taken)
        m.d.comb += [
            w.ready.eq(w_ready.bit_select(w.p.chan, 1)),
            arb.advance.eq(~picked | push),
            self.drained.eq(empty.all() & ~held.any() & ~in_slice.any()
                            & ~Cat(*[s.busy for s in st]).any()
                            & ~Cat(*[s.error for s in st]).any()),
        ]
        return m

    def _input_slice(self, m, layout):
        """Descriptors enter through a slice: the queues' write side (and their
        levels) start from its registers, and the COPY's retire waits only on
        its ready, never on a queue chosen by the word (late-ready: a queue's
        late ``w.ready`` reaches the slice's pointers, not its entries'
        enables). Returns its output, its output's valid decoded by channel,
        and the channels it holds a descriptor of (with both entries full, the
        younger one counts for every channel: a channel is then never done too
        early)."""
        C = self._arch.channels
        # (a few hundred bits: four groups, so no control flip-flop drives every enable;
        # ``chan`` picks the queue whose write enable it drives: it reads a copy of the
        # read pointer of its own, not the one selecting a quarter of the payload)
        # (``route``: per channel, "the slice offers a word for it" from flip-flops
        # through one multiplexer: a queue's write enable, into ~54 LUT-RAM
        # columns, is then one LUT from flip-flops, not a decode of ``chan``)
        m.submodules.w_slice = w_slice = RegisterSlice(layout, late_ready=True, groups=4,
                                                       urgent=("chan",), route=("chan", C))
        wiring.connect(m, wiring.flipped(self.w), w_slice.i)
        m.d.comb += w_slice.flush.eq(self.flush)
        w = w_slice.o
        in_slice = Signal(C)
        m.d.comb += in_slice.eq(w_slice.o_route | Mux(w_slice.i.ready, 0, (1 << C) - 1))
        return w, w_slice.o_route, in_slice

    def _load_offer(self, m, offer, heads, pick, push, taken):
        """The offer's payload loads in every cycle it is empty (what it loads
        without a push is never offered): its enables come straight from
        flip-flops of their own (~valid, stored apart), not from ``push``;
        one copy per quarter of the payload (one flip-flop drove every enable,
        12 ns of routing on the board). ``pick`` is the pick register, its
        valid (``picked``) and what it loads: a quarter's multiplexer over the
        queues' ``heads`` reads a copy of it of its own, loaded with it (one
        register selected every bit, a 6.5 ns route on the board)."""
        valid, payload = offer
        free = Signal(init=1, name="offer_free")
        free_next = Signal(init=1)
        m.d.comb += free_next.eq(free)
        with m.If(self.flush):
            m.d.comb += free_next.eq(1)
            m.d.sync += valid.eq(0)
        with m.Elif(push):
            m.d.comb += free_next.eq(0)
            m.d.sync += valid.eq(1)
        with m.Elif(taken):
            m.d.comb += free_next.eq(1)
            m.d.sync += valid.eq(0)
        m.d.sync += free.eq(free_next)
        # the copies load free's next value at every edge: equal to it from the
        # first edge on (before it nothing is offered)
        frees = [free] + register_copies(m, free_next, 1, 3, name="offer_free_copy")
        pick, picked, grant = pick
        picks = [pick] + register_copies(m, grant, ~self.flush & (~picked | push), 3, name="pick_copy")
        bits, width = Value.cast(payload), Shape.cast(payload.shape()).width
        for load, sel, (lo, hi) in zip(frees, picks, bit_groups(width, len(frees))):
            with m.If(load):
                m.d.sync += bits[lo:hi].eq(Array([Value.cast(h)[lo:hi] for h in heads])[sel])
