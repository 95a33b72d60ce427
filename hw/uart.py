"""A UART transmitter (8 data bits, no parity, 1 stop bit)."""
from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["UartTx"]


class UartTx(wiring.Component):
    """Sends each byte of ``data`` as one 8N1 frame, least significant bit first.

    Parameters
    ----------
    divisor : int
        Clock cycles per bit (``clk_hz // baud``), at least 2.

    Interface attributes
    --------------------
    data : ``In(stream.Signature(8))``
        Bytes to send; ``ready`` is high while the line is idle.
    tx : ``Out(1, init=1)``
        The serial line (idle high).
    """

    def __init__(self, divisor):
        if not isinstance(divisor, int) or isinstance(divisor, bool) or divisor < 2:
            raise ValueError(f"Divisor must be an integer of at least 2, not {divisor!r}")
        self._divisor = divisor
        super().__init__({"data": In(stream.Signature(8)), "tx": Out(1, init=1)})

    divisor = property(lambda self: self._divisor, doc="Clock cycles per bit.")

    def elaborate(self, platform):
        m = Module()
        timer = Signal(range(self._divisor))
        shreg = Signal(10)                     # stop bit, 8 data bits, start bit
        bits = Signal(range(11))
        m.d.comb += self.data.ready.eq(bits == 0)
        with m.If(self.data.valid & self.data.ready):
            m.d.sync += [shreg.eq(1 << 9 | self.data.payload << 1), bits.eq(10),
                         timer.eq(0)]
        with m.Elif(bits != 0):
            m.d.sync += timer.eq(timer + 1)
            with m.If(timer == self._divisor - 1):
                m.d.sync += [timer.eq(0), shreg.eq(shreg >> 1), bits.eq(bits - 1)]
        m.d.comb += self.tx.eq(1)
        with m.If(bits != 0):
            m.d.comb += self.tx.eq(shreg[0])
        return m
