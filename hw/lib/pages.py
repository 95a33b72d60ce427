"""The page-size decoder: the ISA's 2-bit size code to bytes or masks.

``ArchParams.page_sizes`` lists four ascending powers of two; a REMAP /
INVAL ``size`` field and a TLB entry's ``size`` select one of them. The
selection is a two-level multiplexer on the code's bits, built here once.
"""
from __future__ import annotations

from amaranth.hdl import Module, Mux
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["page_select", "page_bytes", "page_offset_mask", "PageSizeDecoder"]


def page_select(code, values):
    """``values[code]`` for a 2-bit ``code``, as a multiplexer (``values``: 4 ints)."""
    if len(values) != 4:
        raise ValueError(f"Need 4 values, one per size code, not {values!r}")
    return Mux(code[1], Mux(code[0], values[3], values[2]),
               Mux(code[0], values[1], values[0]))


def page_bytes(page_sizes, code):
    """Size in bytes of the page with size ``code``."""
    return page_select(code, tuple(page_sizes))


def page_offset_mask(page_sizes, code, unit=1, width=None):
    """Mask of the in-page bits of an address counted in ``unit``-byte units
    (``unit=1``: byte address; ``unit=page_sizes[0]``: page numbers),
    truncated to ``width`` bits when given."""
    full = (1 << width) - 1 if width is not None else -1
    return page_select(code, tuple((p // unit - 1) & full for p in page_sizes))


class PageSizeDecoder(wiring.Component):
    """Decodes a size code into the page's byte count and in-page mask.

    Parameters
    ----------
    page_sizes : tuple of 4 ints
        ``ArchParams.page_sizes``.
    addr_bits : int
        Width of ``mask``.

    Interface attributes
    --------------------
    code : ``In(2)``
    bytes : ``Out(range(page_sizes[3] + 1))``
    mask : ``Out(addr_bits)``
        ``bytes - 1``: the in-page bits of a byte address.
    """

    def __init__(self, page_sizes, addr_bits):
        page_sizes = tuple(page_sizes)
        if len(page_sizes) != 4 or any(not isinstance(p, int) or p < 1 or p & (p - 1)
                                       for p in page_sizes):
            raise ValueError(f"Page sizes must be 4 powers of two, not {page_sizes!r}")
        if not isinstance(addr_bits, int) or (1 << addr_bits) < page_sizes[3]:
            raise ValueError(f"Address width must cover the largest page, not {addr_bits!r}")
        self._page_sizes = page_sizes
        super().__init__({
            "code": In(2),
            "bytes": Out(range(page_sizes[3] + 1)),
            "mask": Out(addr_bits),
        })

    page_sizes = property(lambda self: self._page_sizes, doc="The four page sizes.")

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [
            self.bytes.eq(page_bytes(self._page_sizes, self.code)),
            self.mask.eq(page_offset_mask(self._page_sizes, self.code)),
        ]
        return m
