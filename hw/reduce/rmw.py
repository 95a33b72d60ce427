"""Reduce-on-write: each write beat becomes read, add, write back."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from ..lib import check_bus_width
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


class ReduceOnWrite(wiring.Component):
    """Turns write beats into read-modify-writes of a memory's words.

    Each beat reads its word through ``rd``, and writes through ``wr`` the
    beat's data (``WRITE``) or the lane-by-lane sum of the old word and the
    beat's data (``ADD_F32``, ``ADD_BF16``, by :class:`~.fpadd.FpAdd`), in
    the bytes its ``be`` enables; the other bytes keep the old word (an add
    with an enable mask that splits an element writes the enabled bytes of
    that element's sum). All three operations go through the same pipeline,
    so writes leave in the order beats arrive.

    Pipeline: the read is issued as the beat is accepted (stage S1 holds the
    beat while the word comes back), then one f32 and one bf16 adder run in
    lockstep (same inputs and handshakes, so the same state), then the
    write. Latency: a beat accepted at one clock edge is offered on ``wr``
    ``1 + adder latency`` (= 7) cycles later. Throughput: one beat a cycle
    while beats go to different words.

    Same-word hazards: a beat must add to the word as its predecessors left
    it, in order (floating-point addition is not associative, so the result
    must equal ``((m + d0) + d1) + ...``). A beat whose word is still being
    summed inside the adder waits in S1 until that sum reaches the adder's
    output, then takes it directly as its old value instead of the stale
    memory word (forwarding from the write stage); a beat whose word was
    written at the edge its read was issued takes the last written word from
    a register. So a run of beats to one word costs the adder latency (6
    cycles) per beat, and no memory round trip; beats to other words are not
    delayed.

    Assumptions (the conventions of :class:`~hw.memory.BankedMemory`):
    ``rd`` answers one cycle after a request and holds the word while
    ``rsp.ready`` is low (one read is in flight at a time here); ``wr``
    takes effect at the edge that accepts it; nothing else writes the words
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

    def __init__(self, *, addr_width, data_width, user_width=0):
        if not isinstance(addr_width, int) or isinstance(addr_width, bool) or addr_width < 1:
            raise ValueError(f"Address width must be a positive integer, not {addr_width!r}")
        check_bus_width(data_width)
        if not isinstance(user_width, int) or isinstance(user_width, bool) or user_width < 0:
            raise ValueError(f"User width must be a non-negative integer, not {user_width!r}")
        self._addr_width = addr_width
        self._data_width = data_width
        self._user_width = user_width
        super().__init__({
            "i": In(stream.Signature(RmwBeat(addr_width, data_width, user_width))),
            "rd": Out(ReadPortSignature(addr_width, data_width)),
            "wr": Out(WritePortSignature(addr_width, data_width)),
            "wr_user": Out(user_width),
        })

    addr_width = property(lambda self: self._addr_width, doc="Word address width.")
    data_width = property(lambda self: self._data_width, doc="Word width in bits.")
    latency = property(lambda self: 1 + FpAdd.STAGES,
                       doc="Cycles from accepting a beat to offering its write.")
    adder_latency = property(lambda self: FpAdd.STAGES,
                             doc="Cycles per beat of a run of beats to one word.")

    def _byte_merge(self, new, old, be):
        """``new`` in the bytes ``be`` enables, ``old`` in the others."""
        return Cat(*[Mux(be[k], new[k * BYTE_BITS:(k + 1) * BYTE_BITS],
                         old[k * BYTE_BITS:(k + 1) * BYTE_BITS])
                     for k in range(byte_lanes(self._data_width))])

    def elaborate(self, platform):
        m = Module()
        side_layout = _Side(self._addr_width, self._data_width, self._user_width)
        m.submodules.add_f32 = f32 = FpAdd("f32", self._data_width, user_shape=side_layout)
        # one user bit, unused: a zero-width payload field becomes a [-1:0]
        # vector in the emitted Verilog, which Verilator's lint rejects
        m.submodules.add_bf16 = bf16 = FpAdd("bf16", self._data_width, user_shape=1)

        # ---- the write stage: the adders' output, merged into the old word
        side = f32.o.p.user
        out_valid = Signal()
        result = Signal(self._data_width)
        merged = Signal(self._data_width)
        m.d.comb += [
            out_valid.eq(f32.o.valid & bf16.o.valid),
            result.eq(Mux(side.op == ReduceOp.ADD_F32, f32.o.p.sum,
                          Mux(side.op == ReduceOp.ADD_BF16, bf16.o.p.sum, side.data))),
            merged.eq(self._byte_merge(result, side.old, side.be)),
            self.wr.valid.eq(out_valid),
            self.wr.p.addr.eq(side.addr), self.wr.p.data.eq(merged), self.wr.p.be.eq(side.be),
            self.wr_user.eq(side.user),
            f32.o.ready.eq(out_valid & self.wr.ready),
            bf16.o.ready.eq(out_valid & self.wr.ready),
        ]
        written = self.wr.valid & self.wr.ready
        last_valid = Signal()                 # the last word written, for a read it raced
        last_addr = Signal(self._addr_width)
        last_data = Signal(self._data_width)
        with m.If(written):
            m.d.sync += [last_valid.eq(1), last_addr.eq(side.addr), last_data.eq(merged)]

        # ---- S1: the beat whose word is being read
        s1_valid = Signal()
        s1 = Signal(RmwBeat(self._addr_width, self._data_width, self._user_width))
        s1_go = Signal()                      # offered to the adders
        s1_fire = Signal()                    # taken by the adders
        s1_free = Signal()
        m.d.comb += [
            s1_free.eq(~s1_valid | s1_fire),
            self.rd.req.valid.eq(self.i.valid & s1_free),
            self.rd.req.p.eq(self.i.p.addr),
            self.i.ready.eq(self.rd.req.ready & s1_free),
        ]
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [s1_valid.eq(1), s1.eq(self.i.p)]
        with m.Elif(s1_fire):
            m.d.sync += s1_valid.eq(0)

        # ---- the addresses inside the adders, oldest the output's (when out_valid)
        m.submodules.inflight = inflight = InFlight(f32.capacity, self._addr_width)
        inside = Signal()                     # S1's word is still being summed
        # the probe is S1's address, loaded with S1 (the ring compares a cycle early)
        m.d.comb += [
            inflight.push.eq(s1_fire), inflight.push_addr.eq(s1.addr),
            inflight.pop.eq(written),
            inflight.load.eq(self.i.valid & self.i.ready), inflight.load_addr.eq(self.i.p.addr),
            inflight.skip_oldest.eq(out_valid), inside.eq(inflight.hit),
        ]

        # ---- S1's old word: forwarded from the write stage, the last write, or memory
        old = Signal(self._data_width)
        with m.If(out_valid & (side.addr == s1.addr)):
            m.d.comb += old.eq(merged)
        with m.Elif(last_valid & (last_addr == s1.addr)):
            m.d.comb += old.eq(last_data)
        with m.Else():
            m.d.comb += old.eq(self.rd.rsp.p)

        m.d.comb += [
            s1_go.eq(s1_valid & self.rd.rsp.valid & ~inside),
            s1_fire.eq(s1_go & f32.i.ready & bf16.i.ready),
            self.rd.rsp.ready.eq(s1_fire),
            f32.i.valid.eq(s1_go), bf16.i.valid.eq(s1_go),
            f32.i.p.a.eq(old), f32.i.p.b.eq(s1.data),
            bf16.i.p.a.eq(old), bf16.i.p.b.eq(s1.data),
            f32.i.p.user.addr.eq(s1.addr), f32.i.p.user.data.eq(s1.data),
            f32.i.p.user.be.eq(s1.be), f32.i.p.user.op.eq(s1.op), f32.i.p.user.old.eq(old),
            f32.i.p.user.user.eq(s1.user),
        ]
        return m
