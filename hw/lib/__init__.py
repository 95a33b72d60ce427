"""Shared gateware building blocks, used by every block and copied by none.

* :mod:`.widths`: index and counter widths, and the argument checks every
  block shares (bus width, channel count);
* :mod:`.arbiter`: :class:`RoundRobin`, the round-robin arbiter, and
  :class:`ParkedRoundRobin`, its variant with a registered grant;
* :mod:`.queue`: :class:`Queue`, a typed FIFO with stream ports;
* :mod:`.slice`: :class:`RegisterSlice`, a full-rate stream stage with registered
  valid, payload and ready (cuts a path in two for timing);
* :mod:`.pages`: the page-size decoder (a 2-bit size code to bytes or masks);
* :mod:`.copies`: :func:`register_copies`, copies of a register synthesis
  keeps apart (one near each group of the logic it feeds).
"""
from .widths import (BUS_WIDTHS, check_bus_width, resolve_channels, index_bits, chan_bits,
                     ctx_bits, dev_bits, sem_bits, counter_shape, bit_groups)
from .arbiter import ParkedRoundRobin, RoundRobin
from .queue import Queue
from .slice import RegisterSlice
from .pages import page_select, page_bytes, page_offset_mask, PageSizeDecoder
from .copies import MAX_EXTRA_COPIES, register_copies

__all__ = ["BUS_WIDTHS", "check_bus_width", "resolve_channels", "index_bits", "chan_bits",
           "ctx_bits", "dev_bits", "sem_bits", "counter_shape", "bit_groups", "RoundRobin", "ParkedRoundRobin",
           "Queue", "RegisterSlice",
           "page_select", "page_bytes", "page_offset_mask", "PageSizeDecoder",
           "MAX_EXTRA_COPIES", "register_copies"]
