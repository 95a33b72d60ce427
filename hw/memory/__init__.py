"""Banked on-chip SRAM with byte enables and stream ports.

One :class:`BankedMemory` is a device's local physical memory: ``size`` bytes,
little-endian, seen as words of ``data_width`` bits. Word ``w`` lives in bank
``w % banks`` at row ``w // banks`` (word interleaving, so consecutive words
spread over the banks). Every bank is one :class:`amaranth.lib.memory.Memory`
with one write port (byte granularity) and one synchronous read port per
logical port of this component, so logical ports never conflict with each
other.

Read ports are request/response stream pairs with a latency of one cycle and
full throughput: a request is accepted while the response register is empty or
being emptied, so back-pressure on the response propagates to the request
within the same cycle. Write ports are streams that are always ready; a write
takes effect at the clock edge that accepts it. Reads are not transparent: a
read and a write of the same word in the same cycle return the old data.

* :mod:`.ports`: the port signatures and write request layout every
  memory user shares (``lanes``, ``word_addr_bits``).
* :mod:`.banked`: :class:`BankedMemory`.
* :mod:`.macro`: the Verilog model of the SRAM macro a ``macro=True``
  memory instantiates.
"""
from .banked import BankedMemory
from .macro import SRAM_VERILOG
from .ports import (BYTE_BITS, ReadPortSignature, WritePortSignature, WriteRequest, lanes,
                    word_addr_bits)

__all__ = ["BYTE_BITS", "lanes", "word_addr_bits", "ReadPortSignature", "WriteRequest",
           "WritePortSignature", "BankedMemory", "SRAM_VERILOG"]
