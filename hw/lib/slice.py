"""The register slice: a stream stage that cuts every combinational path."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Shape, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .widths import bit_groups

__all__ = ["RegisterSlice"]


class RegisterSlice(wiring.Component):
    """A two-entry skid buffer: ``o`` is ``i`` one cycle later, at full rate.

    ``o.valid`` and ``o.payload`` come from registers, and so does
    ``i.ready`` (high while the skid entry is empty; a flip-flop of its own,
    apart from the one selecting the payload), so neither the forward
    nor the backward path crosses it: a slice between two stages lets each be
    timed alone. An entry arriving while ``o`` is held goes to the skid
    register and leaves next, so no entry is lost or reordered and a stream
    without back-pressure moves one entry a cycle.

    Parameters
    ----------
    shape : shape-castable
        Payload shape (at least one bit wide): a plain shape or a ``data``
        layout.
    payload_init : int
        Reset value of the payload registers, as bits (default 0; before
        the first entry ``o.payload`` is this, and ``o.valid`` is low). A
        slice fed exactly what another is fed keeps registers of its own
        only if their reset values differ: Yosys merges flip-flops with the
        same input, enable and reset value (see :mod:`.copies`).

    groups : int
        The payload's bits are split into this many contiguous groups (1 to
        the payload width), each loaded and selected by control flip-flops of
        its own that move in lock-step with the others (synthesis cannot
        merge them: each group's next state is computed from its own). A
        control flip-flop then drives a group's enables, not every payload
        bit's: on an FPGA a net to a few hundred enables spreads over many
        tiles and routes slowly. ``i.ready`` and ``o.valid`` come from group
        0; the cycle behaviour does not depend on ``groups``.

    Interface attributes
    --------------------
    i : ``In(stream.Signature(shape))``
    o : ``Out(stream.Signature(shape))``
    flush : ``In(1)``
        Drop both entries (takes effect at the clock edge).

    With ``late_ready=True`` the two entries are a two-register queue
    instead: an entry is written into the free register whatever ``o.ready``
    says, and ``o`` reads the older one through a multiplexer. ``o.ready``
    (often late in the cycle) then reaches only the read pointer and the two
    valid bits, not the enables of every payload flip-flop; ``o.payload``
    pays one multiplexer level for it. The cycle behaviour is the same.
    ``urgent`` (with ``late_ready``) names fields of a ``data`` layout
    payload that the receiver decides with: their multiplexers, and
    ``o.valid``'s, read a copy of the read pointer of their own (stored
    inverted, so synthesis keeps both), so those fields wait on a
    flip-flop that drives a few selects, not every payload bit's.

    ``route=(field, n)`` (with ``late_ready``) adds ``o_route``, ``o.valid``
    decoded by a ``data`` layout field: bit ``k`` is high while ``o`` holds
    an entry whose ``field`` is ``k``. Each entry keeps its decoded field,
    valid bit included, in flip-flops of its own, so a receiver that steers
    the entry by that field (a write enable per queue) starts one
    multiplexer level from flip-flops, not a decode of the selected field.
    """

    def __init__(self, shape, *, late_ready=False, urgent=(), payload_init=0, groups=1,
                 route=None):
        width = Shape.cast(shape).width
        if width < 1:
            raise ValueError(f"Register slice payload must be at least 1 bit wide, not {shape!r}")
        if not isinstance(groups, int) or isinstance(groups, bool) or not 1 <= groups <= width:
            raise ValueError(f"Groups must be an integer in 1..{width} (the payload width), "
                             f"not {groups!r}")
        if (not isinstance(payload_init, int) or isinstance(payload_init, bool)
                or not 0 <= payload_init < 1 << width):
            raise ValueError(f"Payload reset value must be an integer in 0..2**{width}-1, "
                             f"not {payload_init!r}")
        urgent = tuple(urgent)
        fields = dict(getattr(shape, "members", {}) or {})     # (none for a plain shape)
        if urgent:
            if not late_ready:
                raise ValueError("Urgent fields need late_ready=True (a skid slice's output "
                                 "has no multiplexer)")
            unknown = [f for f in urgent if f not in fields]
            if unknown:
                raise ValueError(f"Urgent fields {unknown!r} are not fields of the payload "
                                 f"layout (fields: {sorted(fields)})")
        if route is not None:
            if not late_ready:
                raise ValueError("A route needs late_ready=True (it decodes the two-register "
                                 "queue's entries)")
            field, n = route
            if field not in fields:
                raise ValueError(f"Route field {field!r} is not a field of the payload layout")
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise ValueError(f"Route width must be a positive integer, not {n!r}")
        self._route = route
        self._shape = shape
        self._late_ready = bool(late_ready)
        self._urgent = urgent
        self._payload_init = payload_init
        self._groups = groups
        members = {
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
            "flush": In(1),
        }
        if route is not None:
            members["o_route"] = Out(route[1])
        super().__init__(members)

    shape = property(lambda self: self._shape, doc="Payload shape.")
    late_ready = property(lambda self: self._late_ready,
                          doc="The entries are a two-register queue (see above).")
    urgent = property(lambda self: self._urgent,
                      doc="Fields read through their own copy of the read pointer.")
    payload_init = property(lambda self: self._payload_init,
                            doc="Reset value of the payload registers.")
    groups = property(lambda self: self._groups,
                      doc="Payload bit groups with control flip-flops of their own.")
    route = property(lambda self: self._route,
                     doc="(field, n): ``o_route`` decodes ``o.valid`` by that field.")

    def _payload_register(self, name):
        """A register of the payload's shape, reset to :attr:`payload_init`."""
        init = self._payload_init
        if isinstance(self._shape, data.Layout):
            init = data.Const(self._shape, init)
        return Signal(self._shape, init=init, name=name)

    def _bit_groups(self):
        """(low, high) bit ranges of the payload, one per group."""
        return bit_groups(Shape.cast(self._shape).width, self._groups)

    def elaborate(self, platform):
        if self._late_ready:
            return self._elaborate_queue()
        m = Module()
        skid = Value.cast(self._payload_register("skid"))
        out = Value.cast(self._payload_register("out"))
        i_bits = Value.cast(self.i.payload)
        m.d.comb += Value.cast(self.o.payload).eq(out)
        for g, (lo, hi) in enumerate(self._bit_groups()):
            out_valid = self.o.valid if g == 0 else Signal(name=f"out_valid{g}")
            skid_valid = Signal(name=f"skid_valid{g}")
            # i.ready from a flip-flop of its own (~skid_valid, stored inverted so
            # synthesis keeps both): skid_valid selects every payload bit of the
            # group, and the sender's decisions should not wait on a net that wide
            skid_free = Signal(init=1, name=f"skid_free{g}")
            if g == 0:
                m.d.comb += self.i.ready.eq(skid_free)
            taken_in = self.i.valid & skid_free
            # the free skid register loads whether or not it keeps what it
            # loads (only ``skid_valid`` says so): its enable is a flip-flop,
            # never the late ``o.ready``
            with m.If(skid_free):
                m.d.sync += skid[lo:hi].eq(i_bits[lo:hi])
            with m.If(~out_valid | self.o.ready):
                # the skid entry (older) first, else the entry arriving now
                with m.If(skid_valid):
                    m.d.sync += [out[lo:hi].eq(skid[lo:hi]), out_valid.eq(1),
                                 skid_valid.eq(0), skid_free.eq(1)]
                with m.Else():
                    m.d.sync += [out[lo:hi].eq(i_bits[lo:hi]), out_valid.eq(self.i.valid)]
            with m.Elif(taken_in):
                m.d.sync += [skid_valid.eq(1), skid_free.eq(0)]
            with m.If(self.flush):
                m.d.sync += [out_valid.eq(0), skid_valid.eq(0), skid_free.eq(1)]
        return m

    def _elaborate_queue(self):
        m = Module()
        entry = [self._payload_register(f"entry{k}") for k in range(2)]
        bits = [Value.cast(e) for e in entry]
        i_bits, o_bits = Value.cast(self.i.payload), Value.cast(self.o.payload)
        rd_urgent_n = Signal(init=1)     # ~rd, for the urgent fields' multiplexers
        for g, (lo, hi) in enumerate(self._bit_groups()):
            full = Signal(2, name=f"full{g}")
            # the older entry; the register written next
            rd, wr = Signal(name=f"rd{g}"), Signal(name=f"wr{g}")
            m.d.comb += o_bits[lo:hi].eq(Mux(rd, bits[1][lo:hi], bits[0][lo:hi]))
            # the free register loads whether or not anything arrives: its
            # enable is a register's, never o.ready's
            for k in range(2):
                with m.If((wr == k) & ~full[k]):
                    m.d.sync += bits[k][lo:hi].eq(i_bits[lo:hi])
            valid = full.bit_select(rd, 1)
            taken_in = self.i.valid & ~full.all()
            taken_out = valid & self.o.ready
            with m.If(taken_in):
                m.d.sync += [full.bit_select(wr, 1).eq(1), wr.eq(~wr)]
            with m.If(taken_out):
                m.d.sync += [full.bit_select(rd, 1).eq(0), rd.eq(~rd)]
            with m.If(self.flush):
                m.d.sync += [full.eq(0), rd.eq(0), wr.eq(0)]
            if g == 0:
                # i.ready and o.valid from registers; o.payload through one multiplexer
                m.d.comb += [self.i.ready.eq(~full.all()), self.o.valid.eq(valid)]
                with m.If(taken_out):
                    m.d.sync += rd_urgent_n.eq(rd)
                with m.If(self.flush):
                    m.d.sync += rd_urgent_n.eq(1)
                if self._urgent:         # o.valid is as urgent as any field
                    m.d.comb += self.o.valid.eq(Mux(rd_urgent_n, full[0], full[1]))
                if self._route is not None:
                    self._route_entries(m, (wr, taken_in), (rd_urgent_n, taken_out))
        for name in self._urgent:
            m.d.comb += self.o.payload[name].eq(Mux(rd_urgent_n, entry[0][name], entry[1][name]))
        return m

    def _route_entries(self, m, write, read):
        """Per entry, its ``route`` field decoded and gated by its valid bit,
        updated with group 0's: set as the entry is written, cleared as it
        is read; ``o_route`` selects the older entry's."""
        (wr, taken_in), (rd_n, taken_out) = write, read
        field, n = self._route
        routed = [Signal(n, name=f"route{k}") for k in range(2)]
        m.d.comb += self.o_route.eq(Mux(rd_n, routed[0], routed[1]))
        decoded = Cat(self.i.payload[field] == k for k in range(n))
        for k in range(2):
            # (an entry is written only while free and read only while full:
            # never both in one cycle)
            with m.If(taken_in & (wr == k)):
                m.d.sync += routed[k].eq(decoded)
            with m.Elif(taken_out & (rd_n != k)):        # (rd_n is ~rd)
                m.d.sync += routed[k].eq(0)
        with m.If(self.flush):
            m.d.sync += [r.eq(0) for r in routed]
