"""The self-test's verdict line: ``PASS cycles=9426 crc=1c291ca3\\r\\n`` as bytes."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["VerdictLine"]

from .crc import CRC_BITS

COUNT_BITS = 32               # the host port's CYCLES_LO register
_DIGITS = len(str((1 << COUNT_BITS) - 1))
_HEX_DIGITS = CRC_BITS // 4
_CHAR = 8                     # ASCII


def _literal(m, index, text, out):
    """Drive ``out`` with ``text[index]`` (a byte ROM as a switch)."""
    with m.Switch(index):
        for i, ch in enumerate(text.encode()):
            with m.Case(i):
                m.d.comb += out.eq(ch)


class VerdictLine(wiring.Component):
    """Formats a verdict into ASCII: ``PASS`` or ``FAIL``, ``cycles=`` in
    decimal (no leading zeros), ``crc=`` in 8 lower-case hex digits, CR LF.

    Interface attributes
    --------------------
    start : ``In(1)``
        Pulse: latch ``passed``, ``cycles`` and ``crc`` and send the line
        (ignored while a line is being sent).
    passed, cycles, crc : ``In(1)``, ``In(32)``, ``In(32)``
    busy : ``Out(1)``
        A line is being sent.
    data : ``Out(stream.Signature(8))``
        The line's bytes, for a UART, from a register (valid and byte), so a
        UART can load them without a register slice in between.
    """

    def __init__(self):
        super().__init__({"start": In(1), "passed": In(1), "cycles": In(COUNT_BITS),
                          "crc": In(CRC_BITS), "busy": Out(1),
                          "data": Out(stream.Signature(_CHAR))})

    def elaborate(self, platform):
        m = Module()
        passed = Signal()
        rem = Signal(COUNT_BITS)               # what is left of the count to print
        crc = Signal(CRC_BITS)                 # shifted out a hex digit at a time
        idx = Signal(range(max(_HEX_DIGITS, len(" cycles="))))  # position in a literal or the hex
        digit = Signal(range(10))
        power = Signal(range(_DIGITS))         # 10**power is being subtracted
        seen = Signal()                        # a non-zero digit was printed
        fits, compared = Signal(), Signal()    # rem >= pow10, registered; it is current
        # 10**power, a register: the next one is looked up while this one is
        # subtracted, so the comparison and the subtraction start from flip-flops
        pow10, lower = Signal(COUNT_BITS), Signal(COUNT_BITS)
        with m.Switch(power):
            for k in range(1, _DIGITS):
                with m.Case(k):
                    m.d.comb += lower.eq(10 ** (k - 1))
        # the line's bytes leave from a register, loaded only while empty: the
        # states decide from flip-flops, never from the receiver's ready (a
        # byte every second cycle at most, far faster than any UART)
        out_full = Signal()
        emit = stream.Signature(_CHAR).create(path=("emit",))
        m.d.comb += [emit.ready.eq(~out_full), self.data.valid.eq(out_full)]
        sent = emit.valid & emit.ready
        with m.If(sent):
            m.d.sync += [out_full.eq(1), self.data.payload.eq(emit.payload)]
        with m.Elif(self.data.ready):
            m.d.sync += out_full.eq(0)
        with m.FSM(name="line") as fsm:
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [passed.eq(self.passed), rem.eq(self.cycles), crc.eq(self.crc),
                                 idx.eq(0)]
                    m.next = "WORD"
            with m.State("WORD"):
                word = Signal(_CHAR)
                _literal(m, idx, "PASS", word)
                with m.If(~passed):
                    _literal(m, idx, "FAIL", word)
                self._emit_text(m, word, idx, 4, "CYCLES_TEXT", sent, emit)
            with m.State("CYCLES_TEXT"):
                ch = Signal(_CHAR)
                _literal(m, idx, " cycles=", ch)
                with m.If(sent & (idx == 7)):
                    m.d.sync += [power.eq(_DIGITS - 1), pow10.eq(10 ** (_DIGITS - 1)),
                                 digit.eq(0), seen.eq(0), compared.eq(0)]
                self._emit_text(m, ch, idx, 8, "DECIMAL", sent, emit)
            with m.State("DECIMAL"):
                # subtract the current power of ten while it fits; then the
                # count of subtractions is the digit. The comparison is
                # registered (``fits``, valid while ``compared``) and acted on in
                # the next cycle, so its carry chain reaches one flip-flop, not
                # the enables of the digit and the UART's character
                m.d.sync += [fits.eq(rem >= pow10), compared.eq(1)]
                with m.If(compared & fits):
                    m.d.sync += [rem.eq(rem - pow10), digit.eq(digit + 1), compared.eq(0)]
                with m.Elif(compared):
                    show = seen | (digit != 0) | (power == 0)
                    m.d.comb += [emit.valid.eq(show), emit.payload.eq(ord("0") + digit)]
                    with m.If(~show | emit.ready):
                        m.d.sync += [digit.eq(0), seen.eq(show), power.eq(power - 1),
                                     pow10.eq(lower), compared.eq(0)]
                        with m.If(power == 0):
                            m.d.sync += idx.eq(0)
                            m.next = "CRC_TEXT"
            with m.State("CRC_TEXT"):
                ch = Signal(_CHAR)
                _literal(m, idx, " crc=", ch)
                self._emit_text(m, ch, idx, 5, "HEX", sent, emit)
            with m.State("HEX"):
                nib = crc[CRC_BITS - 4:]
                m.d.comb += [emit.valid.eq(1),
                             emit.payload.eq(Mux(nib < 10, ord("0") + nib, ord("a") - 10 + nib))]
                with m.If(sent):
                    m.d.sync += [crc.eq(crc << 4), idx.eq(idx + 1)]
                    with m.If(idx == _HEX_DIGITS - 1):
                        m.d.sync += idx.eq(0)
                        m.next = "END"
            with m.State("END"):
                ch = Signal(_CHAR)
                _literal(m, idx, "\r\n", ch)
                self._emit_text(m, ch, idx, 2, "IDLE", sent, emit)
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE") | out_full)
        return m

    def _emit_text(self, m, ch, idx, length, then, sent, emit):
        """Send ``length`` bytes ``ch`` (indexed by ``idx``), then go to ``then``."""
        m.d.comb += [emit.valid.eq(1), emit.payload.eq(ch)]
        with m.If(sent):
            m.d.sync += idx.eq(idx + 1)
            with m.If(idx == length - 1):
                m.d.sync += idx.eq(0)
                m.next = then
