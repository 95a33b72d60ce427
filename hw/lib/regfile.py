"""Small memories kept in flip-flops (FPGA timing)."""
from __future__ import annotations

__all__ = ["REGISTER_FILE"]

#: Attributes for an ``amaranth.lib.memory.Memory`` that synthesis must build
#: from flip-flops and multiplexers rather than LUT RAM (Yosys's
#: ``ram_style``). For small, wide memories read combinationally: on the
#: ECP5 a LUT RAM sits in the few slices that can hold one, and nextpnr put
#: the DMA walker's far from the registers its read feeds (17-27 rows, 5 ns
#: of routing on the 2-device board); flip-flops go next to their readers.
#: Simulation is unchanged.
REGISTER_FILE = {"ram_style": "logic"}
