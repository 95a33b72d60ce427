"""The SRAM macro a ``macro=True`` memory instantiates, as a Verilog model."""
from __future__ import annotations

__all__ = ["SRAM_VERILOG"]

#: Simulation model of the SRAM macro a ``macro=True`` memory instantiates: one
#: clock, ``WPORTS`` byte-enable write ports (a higher-numbered port wins a
#: same-byte collision) and ``RPORTS`` registered, non-transparent read ports,
#: contents zero at time 0: the timing of the Amaranth ``Memory`` it replaces.
SRAM_VERILOG = """\
// reshard_sram: simulation model of the SRAM macro used by hw.memory.BankedMemory(macro=True)
module reshard_sram #(parameter WIDTH = 64, parameter DEPTH = 1024, parameter ABITS = 10,
                      parameter WPORTS = 1, parameter RPORTS = 1) (
  input                         clk,
  input  [WPORTS*(WIDTH/8)-1:0] we,
  input  [WPORTS*ABITS-1:0]     waddr,
  input  [WPORTS*WIDTH-1:0]     wdata,
  input  [RPORTS-1:0]           re,
  input  [RPORTS*ABITS-1:0]     raddr,
  output reg [RPORTS*WIDTH-1:0] rdata
);
  reg [WIDTH-1:0] mem [0:DEPTH-1];
  integer i, p, b;
  initial begin
    for (i = 0; i < DEPTH; i = i + 1) mem[i] = {WIDTH{1'b0}};
    rdata = {(RPORTS*WIDTH){1'b0}};
  end
  always @(posedge clk) begin
    for (p = 0; p < RPORTS; p = p + 1)
      if (re[p]) rdata[p*WIDTH +: WIDTH] <= mem[raddr[p*ABITS +: ABITS]];
    for (p = 0; p < WPORTS; p = p + 1)
      for (b = 0; b < WIDTH/8; b = b + 1)
        if (we[p*(WIDTH/8) + b]) mem[waddr[p*ABITS +: ABITS]][b*8 +: 8] <= wdata[p*WIDTH + b*8 +: 8];
  end
endmodule
"""
