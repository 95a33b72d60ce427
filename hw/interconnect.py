"""The interconnect: a crossbar joining D devices.

Two networks, each a full crossbar with one registered output stage per
destination and round-robin arbitration among the sources that want it:

* the *request* network carries remote write beats (destination device,
  word address, data, byte enables, source channel) and ``SIGNAL`` messages
  (destination device, semaphore) from device to device; every source offers
  one stream per destination (virtual output queues: a congested destination
  never blocks a source's messages for another destination), and the
  crossbar stamps each message with its source port (``src``);
* the *ack* network carries one acknowledgement per remote write beat back to
  the source device's DMA channel (``dst`` = the write's ``src``, ``chan``).

Each output accepts one message per cycle (a message moves from an input to
an output register when that register is empty or being emptied), so every
destination can take a beat every cycle; an output that is not ready holds
its register and stalls the inputs that want it (back-pressure), while the
other outputs keep going. A message reaches its output one cycle after it is
offered. Messages from one source to one destination stay in order.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Module
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from .isa import check_arch
from .lib import (RegisterSlice, RoundRobin, chan_bits, check_bus_width, dev_bits,
                  resolve_channels, sem_bits)
from .memory import lanes, word_addr_bits
from .reduce import ReduceOp

__all__ = ["NetKind", "NetRequest", "NetAck", "OutputPort", "Route", "Interconnect"]


class NetKind(enum.Enum, shape=1):
    """Kind of a request-network message."""
    WRITE = 0
    SIGNAL = 1


class NetRequest(data.StructLayout):
    """A request-network message.

    ``dst``: destination device; ``src``: source device (set by the
    crossbar); ``kind``: :class:`NetKind`; for a write: ``chan`` (the source
    DMA channel, returned in the ack), ``addr`` (word address), ``data``,
    ``be``, ``op`` (write, or add into the word: ISA v2's reduce copies);
    for a signal: ``sem``.
    """
    def __init__(self, arch, data_width, channels):
        super().__init__({
            "dst": dev_bits(arch),
            "src": dev_bits(arch),
            "kind": NetKind,
            "chan": chan_bits(channels),
            "addr": word_addr_bits(arch.mem_bytes, data_width),
            "data": data_width,
            "be": lanes(data_width),
            "sem": sem_bits(arch),
            "op": ReduceOp,
        })


class NetAck(data.StructLayout):
    """An ack-network message: destination device (the write's source) and channel."""
    def __init__(self, arch, channels):
        super().__init__({
            "dst": dev_bits(arch),
            "chan": chan_bits(channels),
        })


class OutputPort(wiring.Component):
    """One crossbar output: round-robin arbitration among ``inputs`` streams
    into a registered output stage.

    The output stage is a :class:`hw.lib.RegisterSlice` (a two-register
    queue, ``late_ready``): the granted input is taken whenever an entry is
    free, so the output can pass a message every cycle, and the receiver's
    ``ready`` reaches only the slice's pointers and valid bits, never a
    payload enable; the ``urgent`` fields read their own copy of its read
    pointer. The arbiter (:class:`hw.lib.RoundRobin`) advances only when a
    message moves, so with ``k`` inputs offering continuously each gets
    every ``k``-th slot.

    Parameters
    ----------
    shape : shape-castable
        Message payload.
    inputs : int
        Number of inputs (at least 1).
    stamp : str or None
        A payload field that the port overwrites with the input's index (the
        request network's ``src``), or None.
    urgent : tuple of str
        Payload fields the receiver decides its ``ready`` with (see
        :class:`hw.lib.RegisterSlice`).

    Interface attributes
    --------------------
    i : ``In(stream.Signature(shape)).array(inputs)``
    o : ``Out(stream.Signature(shape))``
        Registered: a message offered at edge *t* is on ``o`` after it.
    busy : ``Out(1)``
        A message is held on ``o`` or offered on some input.
    """

    def __init__(self, shape, inputs, *, stamp=None, urgent=()):
        if not isinstance(inputs, int) or isinstance(inputs, bool) or inputs < 1:
            raise ValueError(f"Input count must be a positive integer, not {inputs!r}")
        self._shape = shape
        self._inputs = inputs
        self._stamp = stamp
        self._urgent = tuple(urgent)
        super().__init__({
            "i": In(stream.Signature(shape)).array(inputs),
            "o": Out(stream.Signature(shape)),
            "busy": Out(1),
        })
        if stamp is not None and not hasattr(self.o.payload, stamp):
            raise ValueError(f"Payload has no field {stamp!r} to stamp")

    shape = property(lambda self: self._shape, doc="Message payload shape.")
    inputs = property(lambda self: self._inputs, doc="Number of inputs.")

    def elaborate(self, platform):
        m = Module()
        n = self._inputs
        m.submodules.arbiter = rr = RoundRobin(n)
        # the receiver's ready (late: the device's memory grant) reaches only the
        # slice's pointers, never the arbiter, the senders' queues or a payload enable
        m.submodules.out = out = RegisterSlice(self._shape, late_ready=True, urgent=self._urgent)
        wiring.connect(m, out.o, wiring.flipped(self.o))
        load = out.i.ready
        m.d.comb += [
            rr.requests.eq(Cat(port.valid for port in self.i)),
            rr.advance.eq(load),
            out.i.valid.eq(rr.valid),
            self.busy.eq(self.o.valid | ~out.i.ready | rr.valid),
        ]
        for k, port in enumerate(self.i):
            m.d.comb += port.ready.eq(load & (rr.grant == k))
        with m.Switch(rr.grant):
            for k, port in enumerate(self.i):
                with m.Case(k):
                    m.d.comb += out.i.payload.eq(port.payload)
                    if self._stamp is not None:
                        m.d.comb += getattr(out.i.payload, self._stamp).eq(k)
        return m


class Route(wiring.Component):
    """Steers each message of one stream to the output its ``field`` names.

    Parameters
    ----------
    shape : shape-castable
        Message payload (a layout with an unsigned ``field``).
    outputs : int
        Number of outputs.
    field : str
        The destination field (default ``"dst"``).

    Interface attributes
    --------------------
    i : ``In(stream.Signature(shape))``
    o : ``Out(stream.Signature(shape)).array(outputs)``
        ``o[j]`` offers the message when its ``field`` is ``j``; combinational.
    """

    def __init__(self, shape, outputs, *, field="dst"):
        if not isinstance(outputs, int) or isinstance(outputs, bool) or outputs < 1:
            raise ValueError(f"Output count must be a positive integer, not {outputs!r}")
        self._outputs = outputs
        self._field = field
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)).array(outputs),
        })
        if not hasattr(self.i.payload, field):
            raise ValueError(f"Payload has no field {field!r} to route by")

    def elaborate(self, platform):
        m = Module()
        dst = getattr(self.i.payload, self._field)
        for j, port in enumerate(self.o):
            m.d.comb += [port.valid.eq(self.i.valid & (dst == j)), port.payload.eq(self.i.payload)]
            with m.If(dst == j):
                m.d.comb += self.i.ready.eq(port.ready)
        return m


class Interconnect(wiring.Component):
    """Crossbar between ``arch.devices`` devices: write beats, signals and acks.

    Parameters
    ----------
    arch : :class:`hw.isa.ArchParams`
        Uses ``devices`` (the port count), ``mem_bytes`` (word address width).
    data_width : int
        Write-beat width in bits (32, 64, 128, 256).
    channels : int, optional
        DMA channels per device (default ``arch.channels``), 1..16.

    Interface attributes
    --------------------
    req_in : ``In(stream.Signature(NetRequest(...))).array(devices, devices)``
        ``req_in[i][j]``: from device ``i`` to device ``j`` (a virtual output
        queue per destination, so a busy destination never blocks messages
        for another one); write beats and signals.
    req_out : ``Out(stream.Signature(NetRequest(...))).array(devices)``
        To device ``j``: messages for it, ``src`` naming the sender.
    ack_in : ``In(stream.Signature(NetAck(...))).array(devices)``
        From device ``j``: one ack per write beat it received, ``dst`` = the
        beat's ``src``.
    ack_out : ``Out(stream.Signature(NetAck(...))).array(devices)``
        To device ``i``: acks of its remote writes (``chan``).
    busy : ``Out(1)``
        A message is offered to or held in the crossbar.
    """

    def __init__(self, arch, *, data_width=64, channels=None):
        check_arch(arch)
        check_bus_width(data_width)
        channels = resolve_channels(arch, channels)
        self._arch = arch
        self._data_width = data_width
        self._channels = channels
        D = arch.devices
        self._request = NetRequest(arch, data_width, channels)
        self._ack = NetAck(arch, channels)
        req = stream.Signature(self._request)
        ack = stream.Signature(self._ack)
        super().__init__({
            "req_in": In(req).array(D, D),
            "req_out": Out(req).array(D),
            "ack_in": In(ack).array(D),
            "ack_out": Out(ack).array(D),
            "busy": Out(1),
        })

    arch = property(lambda self: self._arch, doc="The architectural parameters.")
    devices = property(lambda self: self._arch.devices, doc="Number of ports.")
    data_width = property(lambda self: self._data_width, doc="Write-beat width in bits.")
    channels = property(lambda self: self._channels, doc="DMA channels per device.")

    def elaborate(self, platform):
        m = Module()
        D = self._arch.devices
        busy = []
        for j in range(D):
            # requests: one queue per (source, destination) pair, no head-of-line blocking
            # (``sem`` too: a signal's semaphore number selects which semaphore
            # counts it, in the same cycle, at the far end of the device)
            port = OutputPort(self._request, D, stamp="src", urgent=("kind", "op", "sem"))
            m.submodules[f"req_port{j}"] = port
            for i in range(D):
                wiring.connect(m, wiring.flipped(self.req_in[i][j]), port.i[i])
            wiring.connect(m, port.o, wiring.flipped(self.req_out[j]))
            busy.append(port.busy)
        ack_ports = []
        for j in range(D):
            m.submodules[f"ack_port{j}"] = port = OutputPort(self._ack, D)
            wiring.connect(m, port.o, wiring.flipped(self.ack_out[j]))
            ack_ports.append(port)
            busy.append(port.busy)
        for i in range(D):
            # acks: one stream per source, routed by dst
            m.submodules[f"ack_route{i}"] = route = Route(self._ack, D)
            wiring.connect(m, wiring.flipped(self.ack_in[i]), route.i)
            for j in range(D):
                wiring.connect(m, route.o[j], ack_ports[j].i[i])
        m.d.comb += self.busy.eq(Cat(busy).any())
        return m
