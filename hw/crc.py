"""CRC-32 (IEEE 802.3, as ``zlib.crc32``) over one bus word per cycle."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Crc32", "CRC_BITS"]

_POLY = 0xEDB88320        # reflected polynomial 0x04C11DB7
CRC_BITS = 32


def _step_matrix(nbytes):
    """The CRC register update over ``nbytes`` little-endian data bytes is
    linear over GF(2) in (register, data): for each next-register bit, the
    register bits and data bits it is the XOR of."""
    def advance(reg, data):
        for i in range(nbytes):
            reg ^= (data >> (8 * i)) & 0xFF
            for _ in range(8):
                reg = (reg >> 1) ^ (_POLY if reg & 1 else 0)
        return reg
    cols_reg = [advance(1 << b, 0) for b in range(CRC_BITS)]
    cols_data = [advance(0, 1 << b) for b in range(8 * nbytes)]
    return [([b for b in range(CRC_BITS) if cols_reg[b] >> o & 1],
             [b for b in range(8 * nbytes) if cols_data[b] >> o & 1]) for o in range(CRC_BITS)]


class Crc32(wiring.Component):
    """Folds one ``data_width``-bit word per cycle (bytes little-endian, so the
    result is ``zlib.crc32`` of the memory image) into a running CRC-32.

    Parameters
    ----------
    data_width : int
        Word width, a multiple of 8.

    Interface attributes
    --------------------
    words : ``In(stream.Signature(data_width))``
        Words to fold in; always ready.
    clear : ``In(1)``
        Restart (the CRC of no bytes).
    crc : ``Out(32)``
        CRC-32 of every word folded in since the last ``clear``.
    """

    def __init__(self, data_width):
        if not isinstance(data_width, int) or data_width < 8 or data_width % 8:
            raise ValueError(f"Data width must be a positive multiple of 8, not {data_width!r}")
        self._data_width = data_width
        super().__init__({"words": In(stream.Signature(data_width)), "clear": In(1),
                          "crc": Out(CRC_BITS)})

    data_width = property(lambda self: self._data_width, doc="Word width in bits.")

    def elaborate(self, platform):
        m = Module()
        reg = Signal(CRC_BITS, init=(1 << CRC_BITS) - 1)
        word = self.words.payload
        nxt = Cat(*[Cat(*[reg[i] for i in ri], *[word[j] for j in dj]).xor()
                    for ri, dj in _step_matrix(self._data_width // 8)])
        m.d.comb += [self.words.ready.eq(1), self.crc.eq(~reg)]
        with m.If(self.clear):
            m.d.sync += reg.eq((1 << CRC_BITS) - 1)
        with m.Elif(self.words.valid):
            m.d.sync += reg.eq(nxt)
        return m
