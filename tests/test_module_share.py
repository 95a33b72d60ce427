"""gen.module_share: identical modules (up to Yosys's global numbering) become one.

The end-to-end proof is tests/test_verilator.py (the shared system under
Verilator equals the Amaranth simulation cycle for cycle); here the rewriting
itself, on Verilog written the way Amaranth's back end writes it.
"""
import re
import subprocess

from gen.module_share import share_identical_modules


def _leaf(name: str, n: int, const: int = 1) -> str:
    # the same logic under different global numbers: a numbered port and a numbered wire
    return (f"module {name} (clk, a, \\q${n} );\n" +
            f"  input clk;\n  input [3:0] a;\n  output [3:0] \\q${n} ;\n  reg [3:0] \\q${n} ;\n"
            f"  wire [3:0] \\$t{n + 7} ;\n  assign \\$t{n + 7}  = a + 4'd{const};\n"
            f"  always @(posedge clk)\n    \\q${n}  <= \\$t{n + 7} ;\nendmodule\n")


def _top(children: list[tuple[str, int]]) -> str:
    lines = ["module top(clk, a, " + ", ".join(f"y{i}" for i in range(len(children))) + ");",
             "  input clk;", "  input [3:0] a;"]
    lines += [f"  output [3:0] y{i};" for i in range(len(children))]
    for i, (child, n) in enumerate(children):
        lines += [f"  {child}  u{i} (", "    .clk(clk),", "    .a(a),", f"    .\\q${n} (y{i})", "  );"]
    return "\n".join(lines) + "\nendmodule\n"


def _modules(text: str) -> list[str]:
    return re.findall(r"(?m)^module (\\\S+|\w+)", text)


def test_identical_modules_become_one_and_instances_follow():
    text = ("/* header */\n" + _top([("\\top.a", 11), ("\\top.b", 42), ("\\top.c", 5)])
            + _leaf("\\top.a", 11) + _leaf("\\top.b", 42) + _leaf("\\top.c", 5, const=2))
    shared, dropped = share_identical_modules(text, "top")
    assert dropped == 1 and shared.startswith("/* header */\n")
    assert _modules(shared) == ["top", "\\top.a", "\\top.c"]       # c adds another constant: kept
    top = shared[:shared.index("endmodule")]
    assert top.count("\\top.a  u") == 2 and "\\top.b" not in shared
    # every connection names the port as the shared module now spells it
    ports = re.findall(r"\.(\\\S+) \(y\d\)", top)
    assert len(ports) == 3 and len(set(ports)) == 1 and ports[0] in shared.split("module \\top.a", 1)[1]
    # the result is Verilog Verilator accepts
    from gen.verilog import find_verilator, verilator_flags
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "t.v"
        f.write_text(shared)
        r = subprocess.run([find_verilator(), "--lint-only", *verilator_flags(), "--top-module", "top", str(f)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def test_parents_merge_once_their_children_have():
    inner = _leaf("\\top.p.k", 3) + _leaf("\\top.q.k", 9)

    def parent(name, child, n):
        return (f"module {name} (clk, a, \\o${n} );\n  input clk;\n  input [3:0] a;\n"
                f"  output [3:0] \\o${n} ;\n  {child}  k (\n    .clk(clk),\n    .a(a),\n"
                f"    .\\q${3 if name.endswith('p') else 9} (\\o${n} )\n  );\nendmodule\n")
    text = (_top([("\\top.p", 20), ("\\top.q", 30)]).replace("\\q$20", "\\o$20").replace("\\q$30", "\\o$30")
            + parent("\\top.p", "\\top.p.k", 20) + parent("\\top.q", "\\top.q.k", 30) + inner)
    shared, dropped = share_identical_modules(text, "top")
    assert dropped == 2 and _modules(shared) == ["top", "\\top.p", "\\top.p.k"]


def test_the_top_keeps_its_ports():
    text = _top([("\\top.a", 1)]) + _leaf("\\top.a", 1)
    shared, dropped = share_identical_modules(text, "top")
    assert dropped == 0 and shared.splitlines()[0] == "module top(clk, a, y0);"


def test_shared_modules_are_compiled_once_but_the_memory_stays_inlined():
    from gen.module_share import compile_shared_modules_once
    sram = ("module reshard_sram(clk);\n  input clk;\nendmodule\n")
    memory = ("module \\top.m (clk);\n  input clk;\n  reshard_sram #(\n    .W(1)\n  ) bank0 (\n"
              "    .clk(clk)\n  );\nendmodule\n")
    top = ("module top(clk, a, y0, y1);\n  input clk;\n  input [3:0] a;\n  output [3:0] y0;\n"
           "  output [3:0] y1;\n" + "".join(
               f"  \\top.a  u{i} (\n    .clk(clk),\n    .a(a),\n    .\\q$1 (y{i})\n  );\n" for i in range(2))
           + "".join(f"  \\top.m  m{i} (\n    .clk(clk)\n  );\n" for i in range(2)) + "endmodule\n")
    text, marked = compile_shared_modules_once(top + _leaf("\\top.a", 1) + memory + sram, min_bytes=0)
    assert marked == 1
    assert "module \\top.a (clk, a, \\q$1 );\n  /*verilator no_inline_module*/\n" in text
    assert "no_inline_module" not in text.split("module \\top.m", 1)[1]


def _resettable(name: str, child: str | None = None, rst_conn: str = "rst") -> str:
    # Amaranth's way: the next state tests rst in an always @* block, the reset goes down as .rst(rst)
    inst = f"  {child}  k (\n    .clk(clk),\n    .rst({rst_conn})\n  );\n" if child else ""
    return (f"module {name} (clk, rst);\n  input clk;\n  wire clk;\n  input rst;\n  wire rst;\n"
            f"  reg [3:0] q = 4'h5;\n  reg [3:0] \\q$next ;\n{inst}"
            f"  always @* begin\n    \\q$next  = q + 4'h1;\n    if (rst) begin\n      \\q$next  = 4'h5;\n"
            f"    end\n  end\n  always @(posedge clk)\n    q <= \\q$next ;\nendmodule\n")


def test_the_harness_takes_the_reset_branches_out():
    from gen.harness import without_reset, wrapper
    other = ("module other (clk, go);\n  input clk;\n  input go;\n  reg rst = 1'h0;\n"
             "  always @(posedge clk)\n    if (rst) rst <= go;\nendmodule\n")
    text = _resettable("top", "\\top.k") + _resettable("\\top.k") + other
    out, n = without_reset(text)
    assert n == 2 and out.count("if (1'b0)") == 2 and "if (rst)" in out.split("module other", 1)[1]
    assert out.split("module other", 1)[1] == text.split("module other", 1)[1]   # its rst is its own
    # a reset that is not the system's passed down unchanged: nothing is touched
    gated = _resettable("top", "\\top.k", rst_conn="rst | clk") + _resettable("\\top.k")
    assert without_reset(gated) == (gated, 0)
    # the harness's top ties the system's reset low
    assert ".rst(1'b0)" in wrapper(2)
