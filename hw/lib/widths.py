"""Width helpers and shared parameter checks.

An *index* of ``n`` things needs ``max(1, bits_for(n - 1))`` bits (at least
one, so a single channel or device still has a port). A *counter* that must
hold every value up to ``limit`` is ``range(limit + 1)``: size counters by
what they count, never by a literal.
"""
from __future__ import annotations

from amaranth.hdl import unsigned
from amaranth.utils import bits_for

__all__ = ["BUS_WIDTHS", "check_bus_width", "resolve_channels", "index_bits", "chan_bits",
           "ctx_bits", "dev_bits", "sem_bits", "counter_shape", "bit_groups"]

#: Data bus widths the memory system is built for, in bits.
BUS_WIDTHS = (32, 64, 128, 256)


def check_bus_width(data_width):
    """Raise ``ValueError`` quoting ``data_width`` unless it is one of :data:`BUS_WIDTHS`."""
    if not isinstance(data_width, int) or isinstance(data_width, bool) or data_width not in BUS_WIDTHS:
        raise ValueError(f"Bus width must be one of {', '.join(map(str, BUS_WIDTHS))}, "
                         f"not {data_width!r}")


def resolve_channels(arch, channels):
    """``channels``, or ``arch.channels`` when None; ``ValueError`` quoting it unless in 1..16."""
    if channels is None:
        channels = arch.channels
    if not isinstance(channels, int) or isinstance(channels, bool) or not 1 <= channels <= 16:
        raise ValueError(f"Channel count must be an integer in 1..16, not {channels!r}")
    return channels


def index_bits(count):
    """Bits of an index into ``count`` things (at least 1)."""
    if not isinstance(count, int) or count < 1:
        raise ValueError(f"Count must be a positive integer, not {count!r}")
    return max(1, bits_for(count - 1))


def chan_bits(channels):
    """Width of a DMA channel number."""
    return index_bits(channels)


def ctx_bits(arch):
    """Width of an MMU context number for ``arch``."""
    return index_bits(arch.contexts)


def dev_bits(arch):
    """Width of a device number for ``arch``."""
    return index_bits(arch.devices)


def sem_bits(arch):
    """Width of a semaphore index for ``arch``."""
    return index_bits(arch.semaphores)


def counter_shape(limit):
    """Unsigned shape holding every value ``0 .. limit``."""
    if not isinstance(limit, int) or limit < 0:
        raise ValueError(f"Counter limit must be a non-negative integer, not {limit!r}")
    return unsigned(bits_for(limit))


def bit_groups(width, n):
    """``n`` contiguous ``(low, high)`` bit ranges covering ``width`` bits, as
    even as they come: how a wide register or memory is split into groups
    that each have a control signal of their own (FPGA timing)."""
    bounds = [width * k // n for k in range(n + 1)]
    return list(zip(bounds, bounds[1:]))
