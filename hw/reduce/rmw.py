"""Reduce-on-write: each write beat becomes read, add, write back."""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from ..lib import Queue, RegisterSlice, check_bus_width
from ..memory import BYTE_BITS, ReadPortSignature, WritePortSignature, lanes as byte_lanes
from .fpadd import FpAdd
from .inflight import InFlight

__all__ = ["ReduceOp", "RmwBeat", "ReduceOnWrite"]


class ReduceOp(enum.Enum, shape=2):
    """What a beat does to its word: a plain write, or add its elements to
    the word's (f32 or bf16 lanes). The fourth code is reserved and acts as
    ``WRITE``."""
    WRITE = 0
    ADD_F32 = 1
    ADD_BF16 = 2


class RmwBeat(data.StructLayout):
    """A write beat: word address, data, byte enables, the operation, and
    ``user`` bits that come out beside the write (``wr_user``)."""
    def __init__(self, addr_width, data_width, user_width=0):
        super().__init__({"addr": addr_width, "data": data_width,
                          "be": byte_lanes(data_width), "op": ReduceOp, "user": user_width})


class _Side(data.StructLayout):
    """What travels through the adder beside the operands."""
    def __init__(self, addr_width, data_width, user_width):
        super().__init__({"addr": addr_width, "data": data_width, "be": byte_lanes(data_width),
                          "op": ReduceOp, "old": data_width, "user": user_width})


class _Summed(data.StructLayout):
    """A word on its way to the write port: the sum merged into the old word."""
    def __init__(self, addr_width, data_width, user_width):
        super().__init__({"addr": addr_width, "data": data_width, "be": byte_lanes(data_width),
                          "user": max(user_width, 1)})


class ReduceOnWrite(wiring.Component):
    """Turns write beats into read-modify-writes of a memory's words.

    Each beat reads its word through ``rd``, and writes through ``wr`` the
    beat's data (``WRITE``) or the lane-by-lane sum of the old word and the
    beat's data (``ADD_F32``, ``ADD_BF16``, by :class:`~.fpadd.FpAdd`), in
    the bytes its ``be`` enables; the other bytes keep the old word (an add
    with an enable mask that splits an element writes the enabled bytes of
    that element's sum). All three operations go through the same pipeline,
    so writes leave in the order beats arrive.

    Pipeline: a beat arrives through a register slice (``i.ready`` is a
    register's); its read is issued as it leaves the slice into a queue of
    ``depth`` beats (:attr:`depth`), where it waits for its word; the queue's
    head then goes into one f32 and one bf16 adder running in lockstep (same
    inputs, so the same state), then to the write. The adders never stall:
    a beat enters them only while fewer than their capacity of admitted
    beats are unwritten, and a sum the write port does not take at once
    waits in a queue that can hold them all (an empty queue passes a sum
    straight to ``wr``), so the write port's ``ready`` reaches that queue
    and the hazard registers, never the adders' stage enables. With a
    memory that answers a cycle after a request, a beat accepted at one
    clock edge is offered on ``wr`` ``2 + adder latency`` (= 9,
    :attr:`latency`: the slice, the read, the adders) cycles later; a
    memory that answers later adds its
    extra cycles. Throughput: one beat a cycle while beats go to different
    words and the memory keeps ``depth`` reads in flight.

    Same-word hazards: a beat must add to the word as its predecessors left
    it, in order (floating-point addition is not associative, so the result
    must equal ``((m + d0) + d1) + ...``). Every queued beat watches the
    writes: when one is offered for its word (from the edge the beat enters
    the queue on; every word offered is written unchanged and in order), the
    beat keeps that word and uses it instead of what its read returns, which
    may predate the write (kept a cycle after the offer, from registers: a
    head that leaves in that cycle takes the word from the register of the
    last offer). The queue's head does not enter
    the adders while a beat to its word is still unwritten (inside them, in
    the write queue, or being written). So the old word a beat adds to is a
    register or the memory's answer, one multiplexer from the adders' operand registers,
    whatever the memory's latency; a run of beats to one word costs
    :attr:`run_interval` (= 8) cycles per beat, and beats to other words are
    not delayed.

    Assumptions (the conventions of :class:`~hw.memory.BankedMemory`):
    ``rd`` answers in request order, any number of cycles later, and holds
    a word while ``rsp.ready`` is low; a write taken by ``wr`` is seen by
    every read the memory accepts after it; nothing else writes the words
    this block is reducing into while its beats are in flight.

    In a :class:`~hw.device.Device` it serves the incoming reduce beats of
    ISA v2's ``COPY_ADD_*`` (``user`` carries the beat's source, so the
    write is acknowledged when it lands).

    Parameters
    ----------
    addr_width : int
        Word address width (``BankedMemory.addr_width``).
    data_width : int
        Word width in bits: 32, 64, 128 or 256 (one or more f32 lanes, twice
        as many bf16 lanes).
    user_width : int
        Width of a beat's ``user`` bits (default 0).
    depth : int
        Beats waiting for their words (default 4, at least 1): as many
        reads as the memory must have in flight for one beat a cycle.

    Interface attributes
    --------------------
    i : ``In(stream.Signature(RmwBeat(addr_width, data_width)))``
        Beats in.
    rd : ``Out(ReadPortSignature(addr_width, data_width))``
        To a memory read port.
    wr : ``Out(WritePortSignature(addr_width, data_width))``
        To a memory write port.
    wr_user : ``Out(user_width)``
        The ``user`` bits of the beat ``wr`` offers.
    """

    def __init__(self, *, addr_width, data_width, user_width=0, depth=4):
        if not isinstance(addr_width, int) or isinstance(addr_width, bool) or addr_width < 1:
            raise ValueError(f"Address width must be a positive integer, not {addr_width!r}")
        check_bus_width(data_width)
        if not isinstance(user_width, int) or isinstance(user_width, bool) or user_width < 0:
            raise ValueError(f"User width must be a non-negative integer, not {user_width!r}")
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
            raise ValueError(f"Queue depth must be a positive integer, not {depth!r}")
        self._addr_width = addr_width
        self._data_width = data_width
        self._user_width = user_width
        self._depth = depth
        super().__init__({
            "i": In(stream.Signature(RmwBeat(addr_width, data_width, user_width))),
            "rd": Out(ReadPortSignature(addr_width, data_width)),
            "wr": Out(WritePortSignature(addr_width, data_width)),
            "wr_user": Out(user_width),
        })

    addr_width = property(lambda self: self._addr_width, doc="Word address width.")
    data_width = property(lambda self: self._data_width, doc="Word width in bits.")
    depth = property(lambda self: self._depth, doc="Beats waiting for their words.")
    latency = property(lambda self: 2 + FpAdd.STAGES,
                       doc="Cycles from accepting a beat to offering its write, with a memory "
                           "that answers a cycle after a request.")
    adder_latency = property(lambda self: FpAdd.STAGES, doc="The adders' register stages.")
    run_interval = property(lambda self: FpAdd.STAGES + 1,
                            doc="Cycles per beat of a run of beats to one word: the adders, "
                                "then the write the next beat waits for.")

    def _byte_merge(self, new, old, be):
        """``new`` in the bytes ``be`` enables, ``old`` in the others."""
        return Cat(*[Mux(be[k], new[k * BYTE_BITS:(k + 1) * BYTE_BITS],
                         old[k * BYTE_BITS:(k + 1) * BYTE_BITS])
                     for k in range(byte_lanes(self._data_width))])

    def _write_stage(self, m, f32, bf16, limit):
        """The adders' sums merged into their old words, to ``wr``. Returns
        the word offered (a :class:`_Summed`) and ``lands_on(addr)``: a word
        for ``addr`` is offered (it will be written, unchanged, before
        anything after it)."""
        A, W = self._addr_width, self._data_width
        # The adders never stall (their ``o.ready`` is constant, so no stage
        # enable waits on the write port): a beat enters them only while fewer
        # than ``limit`` (their capacity) admitted beats are unwritten, and a
        # sum the write port does not take at once waits in ``pending``, which
        # holds them all. An empty queue passes the sum straight through, so
        # the latency is the adders' alone.
        side = f32.o.p.user
        result = Signal(W)
        merged = Signal(W)
        m.d.comb += [
            result.eq(Mux(side.op == ReduceOp.ADD_F32, f32.o.p.sum,
                          Mux(side.op == ReduceOp.ADD_BF16, bf16.o.p.sum, side.data))),
            merged.eq(self._byte_merge(result, side.old, side.be)),
            f32.o.ready.eq(1), bf16.o.ready.eq(1),
        ]
        summed = _Summed(A, W, self._user_width)
        sum_now = Signal(summed)
        m.d.comb += [sum_now.addr.eq(side.addr), sum_now.data.eq(merged),
                     sum_now.be.eq(side.be), sum_now.user.eq(side.user)]
        # its head in flip-flops: every queued beat compares its address with
        # the head's, and the kept words load from it (a LUT-RAM read there
        # was the critical path of the board build)
        m.submodules.pending = pending = Queue(summed, limit, buffered=False,
                                               registered_head=True)
        # ``waiting`` equals ``pending.r.valid`` (the queue holds a word), kept
        # in a flip-flop of its own for the write handshake: the queue's valid
        # also selects every bit of ``out``, and that load would slow it
        waiting = Signal()
        pushed = pending.w.valid & pending.w.ready
        popped = pending.r.valid & pending.r.ready
        m.d.sync += waiting.eq(pushed | Mux(popped, pending.level != 1, waiting))
        out = Signal(summed)
        m.d.comb += [
            out.eq(Mux(pending.r.valid, pending.r.payload, sum_now)),
            self.wr.valid.eq(waiting | f32.o.valid),
            self.wr.p.addr.eq(out.addr), self.wr.p.data.eq(out.data), self.wr.p.be.eq(out.be),
            self.wr_user.eq(out.user),
            pending.r.ready.eq(self.wr.ready),
            pending.w.valid.eq(f32.o.valid & (waiting | ~self.wr.ready)),
            pending.w.payload.eq(sum_now),
        ]

        def lands_on(addr, new_addr, is_new):
            # (``is_new`` ? ``new_addr`` : ``addr``) is offered: each address
            # compared with both candidates from registers; the queue's valid
            # and ``is_new`` only select (not through ``out``'s multiplexer)
            def equal(target):
                return Mux(is_new, new_addr == target, addr == target)
            return self.wr.valid & Mux(waiting, equal(pending.r.payload.addr),
                                       equal(sum_now.addr))
        return out, lands_on

    @staticmethod
    def _load_entries(m, queue, free, new, out, lands_on):
        """The queue's entries: ``free[k]`` (the free entry at the tail)
        loads the arriving beat every cycle (an enable from registers, not
        the handshake; taking the beat only moves the tail). Every entry
        watches the words offered to ``wr``: each is written unchanged and in
        order, and no beat to that word leaves the queue before it is, so the
        last one offered is the last one written when the entry is read (and
        an offer does not wait on the write port's ready).

        The watching takes two edges: at the first, ``hit[k]`` registers
        that the word offered now is entry k's (as entry k is after that
        edge) and ``offered_word`` that word; at the second, entry k keeps
        it. So a kept word's 32 enables come from one flip-flop, not from
        an address comparison, and a head that leaves in between takes
        ``offered_word`` itself (returned: ``hit`` and ``offered_word``)."""
        entries, dirties, kepts = queue
        hit = [Signal(name=f"q_hit{k}") for k in range(len(entries))]
        offered_word = Signal.like(out.data)
        m.d.sync += offered_word.eq(out.data)
        for k, (entry, dirty, kept) in enumerate(zip(entries, dirties, kepts)):
            m.d.sync += hit[k].eq(lands_on(entry.addr, new.p.addr, free[k]))
            with m.If(free[k]):
                m.d.sync += [entry.eq(new.p), dirty.eq(0)]
            with m.Elif(hit[k]):
                m.d.sync += dirty.eq(1)
            with m.If(hit[k]):
                m.d.sync += kept.eq(offered_word)
        return hit, offered_word

    def elaborate(self, platform):
        m = Module()
        A, W, n = self._addr_width, self._data_width, self._depth
        side_layout = _Side(A, W, self._user_width)
        m.submodules.add_f32 = f32 = FpAdd("f32", W, user_shape=side_layout)
        # one (unused) user bit: Verilator's lint rejects a [-1:0] field; its
        # own operand register (Yosys merged both adders' into one, far apart)
        m.submodules.add_bf16 = bf16 = FpAdd("bf16", W, user_shape=1, own_operands=True)

        # ---- the write stage (the adders never stall; see _write_stage)
        limit = f32.capacity
        out, lands_on = self._write_stage(m, f32, bf16, limit)
        written = self.wr.valid & self.wr.ready
        # beats admitted and not yet written: the adders' and the queue's
        unwritten = Signal(range(limit + 1))
        room = Signal(init=1)                 # unwritten != limit, in a flip-flop of its own

        # ---- beats arrive through a register slice, so that the queue, the
        # read request and the hazard probe start from flip-flops, not from
        # the sender's output multiplexers
        beat = RmwBeat(A, W, self._user_width)
        m.submodules.arrive = arrive = RegisterSlice(beat)
        wiring.connect(m, wiring.flipped(self.i), arrive.i)
        new = arrive.o

        # ---- the queue of beats waiting for their words: a ring, so a beat
        # stays in its entry and taking the head moves only a pointer (the
        # entries' loads depend on arrivals and writes, never on the head)
        entry = [Signal(beat, name=f"q{k}") for k in range(n)]
        dirty = [Signal(name=f"q_dirty{k}") for k in range(n)]      # a write to its word offered
        kept = [Signal(W, name=f"q_kept{k}") for k in range(n)]     # ... and that word
        count = Signal(range(n + 1))
        head_at, tail_at = Signal(range(n), name="head_at"), Signal(range(n), name="tail_at")

        def after(ptr):
            return Mux(ptr == n - 1, 0, ptr + 1) if n > 1 else ptr
        # the entry after the head, its address and whether it holds a beat,
        # kept in registers: the hazard probe's next address is one mux from them
        next_at = Signal(range(n), name="next_at", init=1 % n)
        next_addr = Signal(A)                 # = entry[next_at].addr
        # count's decodes kept in flip-flops of their own: they gate the read
        # request, the entries' wide load enables and the probe's load
        several = Signal()                    # count > 1
        empty = Signal(init=1)                # count == 0
        full = Signal()                       # count == n
        # free[k]: entry k is the tail and free (tail_at == k and not full),
        # one-hot; it enables every bit of the entry
        free = [Signal(name=f"q_free{k}", init=int(k == 0)) for k in range(n)]
        consume = Signal()                    # the head goes into the adders
        m.d.comb += [
            self.rd.req.valid.eq(new.valid & ~full),
            self.rd.req.p.eq(new.p.addr),
            new.ready.eq(self.rd.req.ready & ~full),
        ]
        accept = new.valid & new.ready
        count_next = Signal.like(count)
        tail_next = Signal.like(tail_at)
        m.d.comb += [count_next.eq(count + accept - consume),
                     tail_next.eq(Mux(accept, after(tail_at), tail_at))]
        m.d.sync += [count.eq(count_next), several.eq(count_next > 1),
                     empty.eq(count_next == 0), full.eq(count_next == n), tail_at.eq(tail_next)]
        m.d.sync += [free[k].eq((tail_next == k) & (count_next != n)) for k in range(n)]
        with m.If(consume):
            m.d.sync += [head_at.eq(after(head_at)), next_at.eq(after(next_at))]
        hit, offered_word = self._load_entries(m, (entry, dirty, kept), free, new, out, lands_on)
        # the address each entry holds after this edge (the free tail entry
        # loads the arriving beat); both of next_at's possible successors are
        # looked up, the late ``consume`` only selects
        upcoming = Array([Mux(free[k], new.p.addr, entry[k].addr) for k in range(n)])
        m.d.sync += next_addr.eq(Mux(consume, upcoming[after(next_at)], upcoming[next_at]))

        unwritten_next = Signal.like(unwritten)
        m.d.comb += unwritten_next.eq(unwritten + consume - written)
        m.d.sync += [unwritten.eq(unwritten_next), room.eq(unwritten_next != limit)]

        inflight = self._hazard_ring(m, limit, consume, written, empty,
                                     (new.p.addr, several, next_addr))
        head = Array(entry)[head_at]

        # ---- the head's old word: the last write to it (the one offered last
        # cycle, not yet kept, or the kept one), or the memory's answer, which
        # passes one multiplexer as before
        old = Signal(W)
        offered = Signal()                    # the head has its word, no hazard, room
        head_hit = Array(hit)[head_at]
        written_word = Mux(head_hit, offered_word, Array(kept)[head_at])
        m.d.comb += [
            old.eq(Mux(head_hit | Array(dirty)[head_at], written_word, self.rd.rsp.p)),
            offered.eq(~empty & self.rd.rsp.valid & ~inflight.hit & room),
            consume.eq(offered & f32.i.ready & bf16.i.ready),
            self.rd.rsp.ready.eq(consume),
        ]
        self._feed_adders(m, (f32, bf16), offered, head, old)
        return m

    def _hazard_ring(self, m, limit, consume, written, empty, probe):
        """The addresses of the unwritten beats (the one being written
        included). The probe is the head's address, set as the head changes:
        to the next entry (``alt_addr``, when ``several``) or the beat
        arriving now (the ring compares a cycle early, both candidates, and
        ``several`` chooses after); so the ring pushes its probe when the
        head goes in."""
        arriving_addr, several, alt_addr = probe
        m.submodules.inflight = inflight = InFlight(limit, self._addr_width, push_probe=True)
        m.d.comb += [
            inflight.push.eq(consume), inflight.push_addr.eq(0),
            inflight.pop.eq(written),
            inflight.load.eq(consume | empty),
            inflight.load_addr.eq(arriving_addr),
            inflight.load_alt.eq(several), inflight.load_alt_addr.eq(alt_addr),
            inflight.skip_oldest.eq(0),
        ]
        return inflight

    @staticmethod
    def _feed_adders(m, adders, offered, head, old):
        """Both adders take the head beat's data and its old word (the f32
        one carries the beat along for the write stage)."""
        f32, bf16 = adders
        for adder in adders:
            m.d.comb += [adder.i.valid.eq(offered), adder.i.p.a.eq(old),
                         adder.i.p.b.eq(head.data)]
        u = f32.i.p.user
        m.d.comb += [u.addr.eq(head.addr), u.data.eq(head.data), u.be.eq(head.be),
                     u.op.eq(head.op), u.old.eq(old), u.user.eq(head.user)]
