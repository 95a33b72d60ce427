# amaranth: UnusedElaboratable=no
"""hw/reduce's lane adder as Verilog under Verilator: a few thousand random
words per format (plus every pair of edge values) under random idle cycles
and back-pressure, against numpy (tests/fpref.py). Slow: the first run
compiles each design (about a minute), later runs reuse the binary."""
import random
import subprocess

import pytest
from amaranth.back import verilog

from fpref import WIDTH, check_sums as check, edge_values
from gen.verilator import build_binary
from hw.reduce import FpAdd

pytestmark = pytest.mark.slow

WORDS = 4000
DATA_WIDTH = 128

TESTBENCH = """\
module tb;
  reg clk = 0, rst = 1;
  reg [{W}-1:0] a [0:{N}-1];
  reg [{W}-1:0] b [0:{N}-1];
  reg i_valid = 0, o_ready = 0;
  wire i_ready, o_valid;
  wire [{W}-1:0] sum;
  integer sent = 0, got = 0, seed = {SEED}, cycles = 0;
  fpadd dut(.clk(clk), .rst(rst), .i__valid(i_valid), .i__ready(i_ready),
            .i__payload({{b[sent], a[sent]}}), .o__valid(o_valid), .o__ready(o_ready),
            .o__payload(sum));
  initial begin
    $readmemh("a.hex", a);
    $readmemh("b.hex", b);
    #10 rst = 0;
  end
  always #5 clk = ~clk;
  always @(posedge clk) if (!rst) begin
    cycles <= cycles + 1;
    if (o_valid && o_ready) begin
      $display("%h", sum);
      got = got + 1;
      if (got == {N}) $finish;
    end
    if (i_valid && i_ready) sent = sent + 1;
    // an offer stays until taken; a new one after a random idle cycle or not
    if (!(i_valid && !i_ready)) i_valid <= (sent < {N}) && (($random(seed) & 3) != 0);
    o_ready <= (($random(seed) & 3) != 0);
    if (cycles > 20 * {N}) begin $display("TIMEOUT"); $finish; end
  end
endmodule
"""


@pytest.mark.parametrize("fmt", ["f32", "bf16"])
def test_fpadd_verilator(fmt, tmp_path):
    w = WIDTH[fmt]
    lanes = DATA_WIDTH // w
    rng = random.Random(9)
    edges = edge_values(fmt)
    pairs = [(x, y) for x in edges for y in edges]
    while len(pairs) < WORDS * lanes:
        x = rng.getrandbits(w)
        y = rng.getrandbits(w) if rng.random() < 0.5 else x ^ rng.getrandbits(rng.randrange(w))
        pairs.append((x, y))
    pairs = pairs[:WORDS * lanes]
    pack = [sum(p[j] << (k * w) for k, p in enumerate(pairs[i:i + lanes]))
            for j in (0, 1) for i in range(0, len(pairs), lanes)]
    a_words, b_words = pack[:WORDS], pack[WORDS:]
    design = verilog.convert(FpAdd(fmt, DATA_WIDTH), name="fpadd", emit_src=False)
    tb = TESTBENCH.format(W=DATA_WIDTH, N=WORDS, SEED=7)
    binary, _ = build_binary([("fpadd.v", design), ("tb.v", tb)], "tb")
    digits = DATA_WIDTH // 4
    (tmp_path / "a.hex").write_text("\n".join(f"{x:0{digits}x}" for x in a_words) + "\n")
    (tmp_path / "b.hex").write_text("\n".join(f"{x:0{digits}x}" for x in b_words) + "\n")
    run = subprocess.run([str(binary)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    lines = [ln.strip() for ln in run.stdout.splitlines()
             if ln.strip() and not ln.startswith("-")]
    assert "TIMEOUT" not in lines and len(lines) >= WORDS, run.stdout[-2000:] + run.stderr[-2000:]
    sums = [int(ln, 16) for ln in lines[:WORDS]]
    mask = (1 << w) - 1
    got = [s >> (k * w) & mask for s in sums for k in range(lanes)]
    check(fmt, pairs, got)
