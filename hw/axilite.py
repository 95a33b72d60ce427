"""An AXI4-Lite master: one register access at a time, from a command stream."""
from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AxiLiteCommand", "AxiLiteResponse", "AxiLiteMaster"]


class AxiLiteCommand(data.StructLayout):
    """A register access: ``write`` (0: read), byte ``addr``, ``data`` (writes)."""
    def __init__(self, addr_width):
        super().__init__({"write": 1, "addr": addr_width, "data": 32})


class AxiLiteResponse(data.StructLayout):
    """The response: ``data`` (reads) and ``resp`` (``BRESP`` / ``RRESP``)."""
    def __init__(self):
        super().__init__({"data": 32, "resp": 2})


class AxiLiteMaster(wiring.Component):
    """Turns each command into one AXI4-Lite transaction (all byte lanes
    enabled) and answers it with one response, in order.

    A write offers AW and W together and holds each until it is accepted
    (in either order), then waits for B; a read offers AR, then waits for R.

    Parameters
    ----------
    bus_signature : :class:`hw.hostport.AxiLiteSignature`
        The slave's port signature (as the master sees it).

    Interface attributes
    --------------------
    cmd : ``In(stream.Signature(AxiLiteCommand(addr_width)))``
    rsp : ``Out(stream.Signature(AxiLiteResponse()))``
    bus : ``Out(bus_signature)``
        To the slave.
    """

    def __init__(self, bus_signature):
        self._addr_width = bus_signature.addr_width
        super().__init__({
            "cmd": In(stream.Signature(AxiLiteCommand(self._addr_width))),
            "rsp": Out(stream.Signature(AxiLiteResponse())),
            "bus": Out(bus_signature),
        })

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        aw_done = Signal()
        w_done = Signal()
        m.d.comb += [bus.awaddr.eq(self.cmd.p.addr), bus.araddr.eq(self.cmd.p.addr),
                     bus.wdata.eq(self.cmd.p.data), bus.wstrb.eq(0b1111)]
        with m.FSM(name="axi"):
            with m.State("IDLE"):
                with m.If(self.cmd.valid & self.cmd.p.write):
                    m.d.sync += [aw_done.eq(0), w_done.eq(0)]
                    m.next = "WRITE"
                with m.Elif(self.cmd.valid):
                    m.next = "READ"
            with m.State("WRITE"):
                m.d.comb += [bus.awvalid.eq(~aw_done), bus.wvalid.eq(~w_done)]
                with m.If(bus.awvalid & bus.awready):
                    m.d.sync += aw_done.eq(1)
                with m.If(bus.wvalid & bus.wready):
                    m.d.sync += w_done.eq(1)
                with m.If((aw_done | bus.awready) & (w_done | bus.wready)):
                    m.next = "WRITE_RESP"
            with m.State("WRITE_RESP"):
                m.d.comb += [bus.bready.eq(self.rsp.ready), self.rsp.valid.eq(bus.bvalid),
                             self.rsp.p.resp.eq(bus.bresp)]
                with m.If(bus.bvalid & self.rsp.ready):
                    m.d.comb += self.cmd.ready.eq(1)
                    m.next = "IDLE"
            with m.State("READ"):
                m.d.comb += bus.arvalid.eq(1)
                with m.If(bus.arready):
                    m.next = "READ_RESP"
            with m.State("READ_RESP"):
                m.d.comb += [bus.rready.eq(self.rsp.ready), self.rsp.valid.eq(bus.rvalid),
                             self.rsp.p.data.eq(bus.rdata), self.rsp.p.resp.eq(bus.rresp)]
                with m.If(bus.rvalid & self.rsp.ready):
                    m.d.comb += self.cmd.ready.eq(1)
                    m.next = "IDLE"
        return m
