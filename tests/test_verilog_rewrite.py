"""gen.verilog_rewrite: what moves into a stage's branch, what is folded into a clocked
block, and what is left alone. The rewritten system itself runs in the Verilator tests
(tests/test_verilator.py, test_system.py, test_collectives_rtl.py), where its results and
cycle counts are checked against the Amaranth simulator and the golden model."""
from gen.verilog_rewrite import next_state_into_clocked_blocks, payload_logic_under_valid

# the shape Yosys writes for an Amaranth pipeline stage (names as gen.module_share leaves them)
STAGE = """\
module \\top.stage (i__valid, i__payload, o__ready, o__payload, o__valid, i__ready, peek, clk);
  reg \\@L0  = 0;
  wire \\@L1 ;
  wire [7:0] \\@L2 ;
  wire [7:0] \\@L3 ;
  wire [7:0] \\@L4 ;
  wire [7:0] shared;
  wire [7:0] alias;
  reg [3:0] lz;
  reg \\@L7 ;
  reg [15:0] \\@L8 ;
  input clk;
  input i__valid;
  input [15:0] i__payload;
  input o__ready;
  output i__ready;
  output peek;
  output [15:0] o__payload;
  reg [15:0] o__payload = 16'h0000;
  output o__valid;
  reg o__valid = 1'h0;
  assign \\@L1  = ~ o__valid;
  assign i__ready = \\@L1  | o__ready;
  assign \\@L3  = \\@L2  + 8'h01;
  assign \\@L2  = i__payload[7:0] ^ i__payload[15:8];
  assign shared = i__payload[7:0] & 8'h0f;
  assign \\@L4  = shared | { 4'h0, lz };
  assign alias = \\@L3 ;
  assign peek = shared[0];
  always @(posedge clk)
    o__valid <= \\@L7 ;
  always @(posedge clk)
    o__payload <= \\@L8 ;
  always @* begin
    if (\\@L0 ) begin end
    lz = 4'h8;
    if (i__payload[3]) begin
      lz = 4'h0;
    end
  end
  always @* begin
    if (\\@L0 ) begin end
    \\@L7  = o__valid;
    if (i__ready) begin
      \\@L7  = i__valid;
    end
  end
  always @* begin
    if (\\@L0 ) begin end
    \\@L8  = o__payload;
    if (i__ready) begin
      if (i__valid) begin
        \\@L8 [7:0] = \\@L3 ;
        \\@L8 [15:8] = \\@L4 ;
      end
    end
  end
endmodule
"""


def _branch(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.strip() == "if (i__valid) begin")
    end = next(i for i in range(start + 1, len(lines)) if lines[i] == "      end")
    return [ln.strip() for ln in lines[start + 1:end]]


def test_payload_logic_moves_into_the_valid_branch_in_dependency_order():
    out, moved = payload_logic_under_valid(STAGE)
    body = _branch(out)
    # @L2 before @L3 (which reads it), lz's block before @L4; shared stays (peek reads it)
    assert moved == 4
    assert body.index("\\@L2 = i__payload[7:0] ^ i__payload[15:8];") < body.index("\\@L3 = \\@L2  + 8'h01;")
    assert body.index("lz = 4'h8;") < body.index("\\@L4 = shared | { 4'h0, lz };")
    assert "assign shared = i__payload[7:0] & 8'h0f;" in out
    assert "assign \\@L3 " not in out and "reg [7:0] \\@L3 ;" in out
    # the alias nothing reads is gone; the ready logic (read outside the branch) stays
    assert "alias" not in out
    assert "assign i__ready = \\@L1  | o__ready;" in out
    assert out.count("always @*") == 2


def test_what_another_block_reads_stays_outside():
    # lz read by an output too: its block stays; @L4 (read only in the branch) and now
    # shared (read only by @L4) move
    text = STAGE.replace("  assign peek = shared[0];", "  assign peek = lz[0];")
    out, moved = payload_logic_under_valid(text)
    body = _branch(out)
    assert moved == 4
    assert "lz = 4'h8;" not in body and out.count("always @*") == 3
    assert body.index("shared = i__payload[7:0] & 8'h0f;") < body.index("\\@L4 = shared | { 4'h0, lz };")


def test_else_branches_and_unknown_assignments_are_left_alone():
    with_else = STAGE.replace("        \\@L8 [15:8] = \\@L4 ;\n      end\n",
                              "        \\@L8 [15:8] = \\@L4 ;\n      end else begin\n"
                              "        \\@L8 [15:8] = 8'h00;\n      end\n")
    assert payload_logic_under_valid(with_else) == (with_else, 0)
    concat = STAGE.replace("    lz = 4'h8;\n", "    { lz[3:2], lz[1:0] } = 4'h8;\n")
    out, _ = payload_logic_under_valid(concat)
    assert "{ lz[3:2], lz[1:0] } = 4'h8;" not in _branch(out)


def test_next_state_folds_into_the_clocked_block():
    out, folded = next_state_into_clocked_blocks(STAGE)
    assert folded == 2
    assert "always @(posedge clk) begin" in out and "o__payload <= \\@L8 ;" not in out
    assert "o__payload[7:0] <= \\@L3 ;" in out and "o__valid <= i__valid;" in out
    # the default hold and the event simulators' start-up trigger go; lz's block is untouched
    assert "o__payload;" not in out.split("always @(posedge clk) begin", 1)[1].split("endmodule")[0]
    assert "lz = 4'h8;" in out and out.count("always @*") == 1


def test_a_next_state_read_elsewhere_is_not_folded():
    text = STAGE.replace("  assign peek = shared[0];", "  assign peek = \\@L8 [0];")
    out, folded = next_state_into_clocked_blocks(text)
    assert folded == 1 and "o__payload <= \\@L8 ;" in out


def test_both_rewrites_together_keep_the_moved_logic_blocking():
    out, _ = payload_logic_under_valid(STAGE)
    out, folded = next_state_into_clocked_blocks(out)
    assert folded == 2
    clocked = out.split("always @(posedge clk) begin")[2]
    assert "\\@L2 = i__payload[7:0] ^ i__payload[15:8];" in clocked
    assert "o__payload[15:8] <= \\@L4 ;" in clocked
