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

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, ceil_log2, exact_log2

from .isa import ArchParams
from .lib import chan_bits, check_bus_width, dev_bits, resolve_channels

__all__ = ["NetKind", "NetRequest", "NetAck", "Interconnect", "round_robin"]


class NetKind(enum.Enum, shape=1):
    """Kind of a request-network message."""
    WRITE = 0
    SIGNAL = 1


class NetRequest(data.StructLayout):
    """A request-network message.

    ``dst``: destination device; ``src``: source device (set by the
    crossbar); ``kind``: :class:`NetKind`; for a write: ``chan`` (the source
    DMA channel, returned in the ack), ``addr`` (word address), ``data``,
    ``be``; for a signal: ``sem``.
    """
    def __init__(self, arch, data_width, channels):
        word_bits = exact_log2(data_width // 8)
        super().__init__({
            "dst": dev_bits(arch),
            "src": dev_bits(arch),
            "kind": NetKind,
            "chan": chan_bits(channels),
            "addr": max(1, ceil_log2(arch.mem_bytes) - word_bits),
            "data": data_width,
            "be": data_width // 8,
            "sem": 8,
        })


class NetAck(data.StructLayout):
    """An ack-network message: destination device (the write's source) and channel."""
    def __init__(self, arch, channels):
        super().__init__({
            "dst": dev_bits(arch),
            "chan": chan_bits(channels),
        })


def round_robin(m, requests, last, n, name):
    """Index of the first asserted request after ``last`` (cyclically); a Signal."""
    idx = Signal(range(max(2, n)), name=f"{name}_pick")
    for l in range(n):
        with m.If(last == l):
            order = [(l + 1 + k) % n for k in range(n)]
            for c in reversed(order):
                with m.If(requests[c]):
                    m.d.comb += idx.eq(c)
    return idx


def _crossbar(m, offers, outs, n, name, stamp_src):
    """Arbitrate, for every output ``j``, among the offers ``offers[j][i]``
    (``(valid, payload)`` of input ``i`` for output ``j``) into a registered
    output stage. Returns ``(grants, busy)``: ``grants[j][i]`` is high when input
    ``i`` moves to output ``j`` this cycle; ``busy`` is high while any offer is
    valid or any output register is full."""
    busy_terms = []
    grants = []
    for j in range(n):
        out = outs[j]
        ov = Signal(name=f"{name}_v{j}")
        op = Signal.like(out.p, name=f"{name}_p{j}")
        m.d.comb += [out.valid.eq(ov), out.p.eq(op)]
        can_load = Signal(name=f"{name}_load{j}")
        m.d.comb += can_load.eq(~ov | out.ready)
        req = Signal(n, name=f"{name}_req{j}")
        m.d.comb += req.eq(Cat(*[offers[j][i][0] for i in range(n)]))
        last = Signal(range(max(2, n)), name=f"{name}_last{j}")
        pick = round_robin(m, req, last, n, f"{name}_rr{j}")
        g = Signal(n, name=f"{name}_grant{j}")
        with m.If(can_load & req.any()):
            for i in range(n):
                with m.If(pick == i):
                    m.d.comb += g[i].eq(1)
                    m.d.sync += op.eq(offers[j][i][1])
                    if stamp_src:
                        m.d.sync += op.src.eq(i)
            m.d.sync += [ov.eq(1), last.eq(pick)]
        with m.Elif(out.ready):
            m.d.sync += ov.eq(0)
        grants.append(g)
        busy_terms.append(ov)
        busy_terms.append(req.any())
    busy = Signal(name=f"{name}_busy")
    m.d.comb += busy.eq(Cat(*busy_terms).any())
    return grants, busy


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
        if not isinstance(arch, ArchParams):
            raise TypeError(f"arch must be an ArchParams, not {arch!r}")
        check_bus_width(data_width)
        channels = resolve_channels(arch, channels)
        self._arch = arch
        self._data_width = data_width
        self._channels = channels
        D = arch.devices
        req = stream.Signature(NetRequest(arch, data_width, channels))
        ack = stream.Signature(NetAck(arch, channels))
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
        # requests: one queue per (source, destination) pair, no head-of-line blocking
        offers = [[(self.req_in[i][j].valid, self.req_in[i][j].p) for i in range(D)]
                  for j in range(D)]
        grants, rb = _crossbar(m, offers, self.req_out, D, "req", stamp_src=True)
        for i in range(D):
            for j in range(D):
                m.d.comb += self.req_in[i][j].ready.eq(grants[j][i])
        # acks: one stream per source, routed by dst
        offers = [[(self.ack_in[i].valid & (self.ack_in[i].p.dst == j), self.ack_in[i].p)
                   for i in range(D)] for j in range(D)]
        grants, ab = _crossbar(m, offers, self.ack_out, D, "ack", stamp_src=False)
        for i in range(D):
            m.d.comb += self.ack_in[i].ready.eq(Cat(*[grants[j][i] for j in range(D)]).any())
        m.d.comb += self.busy.eq(rb | ab)
        return m
