"""The self-test's verdict line: ``PASS cycles=9426 crc=1c291ca3\\r\\n`` as bytes."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["VerdictLine"]

from .crc import CRC_BITS

COUNT_BITS = 32               # the host port's CYCLES_LO register
_DIGITS = len(str((1 << COUNT_BITS) - 1))
_HEX_DIGITS = CRC_BITS // 4
_CHAR = 8                     # ASCII

# the line as a template: "W" a letter of PASS / FAIL, "D" a decimal digit of
# the count, "H" a hex digit of the CRC, anything else itself
_TEMPLATE = "WWWW cycles=" + "D" * _DIGITS + " crc=" + "H" * _HEX_DIGITS + "\r\n"


class VerdictLine(wiring.Component):
    """Formats a verdict into ASCII: ``PASS`` or ``FAIL``, ``cycles=`` in
    decimal (no leading zeros), ``crc=`` in 8 lower-case hex digits, CR LF.

    The count is converted to decimal first (double dabble: one shift a
    cycle, 32 cycles), then a position walks a fixed template of the line,
    one position a cycle while the output register is empty: letters come
    from a small ROM, decimal digits from the converted count's top digit
    (leading zeros skipped, not sent), hex digits from the CRC's top
    nibble. Every decision starts from flip-flops (the output register is
    loaded only while empty, so the receiver's ready never reaches them).

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
        binary = Signal(COUNT_BITS)            # shifted out into ``bcd``
        bcd = Signal(4 * _DIGITS)              # the count in decimal, top digit first
        crc = Signal(CRC_BITS)                 # shifted out a hex digit at a time
        shifts = Signal(range(COUNT_BITS + 1))
        pos = Signal(range(len(_TEMPLATE) + 1))
        seen = Signal()                        # a non-zero digit was sent
        out_full = Signal()
        m.d.comb += [self.data.valid.eq(out_full)]
        with m.If(self.data.ready):
            m.d.sync += out_full.eq(0)

        kind = {k: Signal(name=f"at_{k}") for k in "WDH"}   # what ``pos`` points at
        for k, s in kind.items():
            m.d.comb += s.eq(Cat(*[pos == i for i, ch in enumerate(_TEMPLATE) if ch == k]).any())
        literal = Signal(_CHAR)
        with m.Switch(pos):
            for i, ch in enumerate(_TEMPLATE):
                if ch not in "WDH":
                    with m.Case(i):
                        m.d.comb += literal.eq(ord(ch))
        letter = Signal(_CHAR)
        with m.Switch(pos):
            for i in range(4):
                with m.Case(i):
                    m.d.comb += letter.eq(Mux(passed, ord("PASS"[i]), ord("FAIL"[i])))
        top = bcd[-4:]
        nib = crc[-4:]
        last_digit = pos == _TEMPLATE.rindex("D")

        with m.FSM(name="line") as fsm:
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [passed.eq(self.passed), binary.eq(self.cycles), bcd.eq(0),
                                 crc.eq(self.crc), shifts.eq(0), pos.eq(0), seen.eq(0)]
                    m.next = "CONVERT"
            with m.State("CONVERT"):
                # double dabble: each digit of 5 or more gets 3 added, then the
                # whole shifts left by one bit
                adjusted = Cat(*[Mux(bcd[4 * d:4 * d + 4] >= 5, bcd[4 * d:4 * d + 4] + 3,
                                     bcd[4 * d:4 * d + 4])[:4] for d in range(_DIGITS)])
                m.d.sync += [Cat(binary, bcd).eq(Cat(binary, adjusted) << 1),
                             shifts.eq(shifts + 1)]
                with m.If(shifts == COUNT_BITS - 1):
                    m.next = "SEND"
            with m.State("SEND"):
                with m.If(~out_full):
                    skip = kind["D"] & ~seen & (top == 0) & ~last_digit
                    char = Mux(kind["W"], letter,
                               Mux(kind["D"], ord("0") + top,
                                   Mux(kind["H"], Mux(nib < 10, ord("0") + nib,
                                                      ord("a") - 10 + nib),
                                       literal)))
                    m.d.sync += [out_full.eq(~skip), self.data.payload.eq(char),
                                 pos.eq(pos + 1)]
                    with m.If(kind["D"]):
                        m.d.sync += [bcd.eq(bcd << 4), seen.eq(seen | (top != 0))]
                    with m.If(kind["H"]):
                        m.d.sync += crc.eq(crc << 4)
                    with m.If(pos == len(_TEMPLATE) - 1):
                        m.next = "IDLE"
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE") | out_full)
        return m
