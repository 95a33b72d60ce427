"""A memory's ports: read request/response streams and byte-enable writes."""
from __future__ import annotations

from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from ..lib import index_bits

__all__ = ["BYTE_BITS", "lanes", "word_addr_bits", "ReadPortSignature", "WriteRequest",
           "WritePortSignature"]

#: Bits per byte: the write-enable granularity.
BYTE_BITS = 8


def lanes(data_width):
    """Byte lanes of a ``data_width``-bit word (one write enable each)."""
    return data_width // BYTE_BITS


def word_addr_bits(size, data_width):
    """Width of a word address into ``size`` bytes of ``data_width``-bit words
    (at least 1): the ``addr`` of :class:`WriteRequest` and of read requests."""
    return index_bits(max(1, size // lanes(data_width)))


class WriteRequest(data.StructLayout):
    """Payload of a memory write: word address, data and one enable bit per byte lane.

    Parameters
    ----------
    addr_width : int
        Width of the word address.
    data_width : int
        Bus width in bits.
    """
    def __init__(self, addr_width, data_width):
        super().__init__({
            "addr": addr_width,
            "data": data_width,
            "be": lanes(data_width),
        })


class ReadPortSignature(wiring.Signature):
    """A read port as seen by its requester.

    Members
    -------
    req : ``Out(stream.Signature(addr_width))``
        Word address to read.
    rsp : ``In(stream.Signature(data_width))``
        Read data, in request order.
    """
    def __init__(self, addr_width, data_width):
        self._addr_width = addr_width
        self._data_width = data_width
        super().__init__({
            "req": Out(stream.Signature(addr_width)),
            "rsp": In(stream.Signature(data_width)),
        })

    @property
    def addr_width(self):
        return self._addr_width

    @property
    def data_width(self):
        return self._data_width

    def __eq__(self, other):
        return (type(other) is type(self) and other.addr_width == self.addr_width
                and other.data_width == self.data_width)

    def __repr__(self):
        return f"ReadPortSignature({self.addr_width}, {self.data_width})"


def WritePortSignature(addr_width, data_width):
    """A write port as seen by its requester: ``Out(stream.Signature(WriteRequest))``."""
    return stream.Signature(WriteRequest(addr_width, data_width))
