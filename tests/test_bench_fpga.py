"""The ``fpga`` bench section's time limit: a build that runs out of time is
stopped (its whole process group) and reported as not finished, never as a
figure. The real builds themselves are too long for the test suite
(``python -m gen bench --only fpga`` runs them)."""
import os
import time


from gen.bench import SECTIONS, BenchOptions, run_bench
from gen.bench_fpga import board_figures, ooc_figures
from gen.fpga_board import _run_build_script


class _SleepyPlan:
    """A build plan whose synthesis starts a child that outlives the limit
    (``$YOSYS`` and ``$NEXTPNR_ECP5`` are ``sh`` here)."""
    script = "build_top"
    synth = "sleep 60 & echo $! > child.pid; wait"
    pnr = "exit 0"

    def extract(self, root):
        os.makedirs(root, exist_ok=True)
        with open(os.path.join(root, "build_top.sh"), "w") as f:
            f.write(f"set -e\n\"$YOSYS\" -c '{self.synth}'\n\"$NEXTPNR_ECP5\" -c '{self.pnr}' --seed 1\n")
        return root


_SH = dict(os.environ, YOSYS="sh", NEXTPNR_ECP5="sh")


def test_build_script_stopped_at_its_time_limit(tmp_path):
    t0 = time.monotonic()
    products, status, results, best = _run_build_script(_SleepyPlan(), tmp_path, _SH, 2, print)
    assert status == "timeout" and products is None and results == [] and best is None
    assert time.monotonic() - t0 < 30
    child = int((tmp_path / "child.pid").read_text())
    time.sleep(0.2)
    assert not _alive(child)                       # the script's child went with it


def _alive(pid):
    """Running (not gone, not a zombie waiting for init to reap it)."""
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_failed_build_script_is_reported(tmp_path):
    class Failing(_SleepyPlan):
        synth = "exit 0"
        pnr = "echo nextpnr says no; exit 3"
    said = []
    products, status, results, best = _run_build_script(Failing(), tmp_path, _SH, None, said.append)
    assert status == "failed" and products is None and best is None
    assert [r.rc for r in results] == [3]
    assert "exit 3" in said[-1] and "nextpnr says no" in said[-1]


def test_out_of_context_build_over_its_limit_reports_not_finished(tmp_path):
    """A real yosys run of the DMA stopped after 3 s: no figures, the status says so."""
    fig = ooc_figures("dma", "dma", 125.0, 125.0, limit_s=3, out=tmp_path)
    assert fig["fpga_ooc_dma_status"] == "did not finish within 0.05 min"
    assert "fpga_ooc_dma_fmax_mhz" not in fig and "fpga_ooc_dma_target_met" not in fig


def test_board_that_did_not_finish_claims_nothing(tmp_path):
    def build(opts):
        assert opts.time_limit_s == 600 and opts.board == "ulx3s-85f"
        return {"subset": None, "reshard": {"devices": 2, "model": "micro-qwen2", "train": "fsdp2:dp=2",
                                            "rollout": "vllm:tp=2"},
                "status": "did not finish within 10 min (stopped)", "built": False, "build_seconds": 600.0,
                "timing_met": True, "overflows": [], "constraint_mhz_requested": 100.0}
    fig = board_figures("ulx3s-85f", 100.0, limit_s=600, out=tmp_path, build=build)
    assert fig["fpga_ulx3s_85f_status"] == "did not finish within 10 min (stopped)"
    assert fig["fpga_ulx3s_85f_what"] == "full system: 2 devices, micro-qwen2 fsdp2:dp=2 -> vllm:tp=2"
    assert fig["fpga_ulx3s_85f_target_met"] is False
    assert "fpga_ulx3s_85f_fmax_mhz" not in fig


def test_board_placed_with_several_seeds_reports_each_and_their_median(tmp_path):
    seeds = [{"seed": 1, "finished": True, "fmax_mhz": 86.57}, {"seed": 2, "finished": True, "fmax_mhz": 88.04},
             {"seed": 3, "finished": False, "fmax_mhz": None}, {"seed": 4, "finished": True, "fmax_mhz": 92.71}]

    def build(opts):
        assert opts.pnr_seed == "1-4"
        return {"subset": None, "reshard": {"devices": 2, "model": "m", "train": "t", "rollout": "r"},
                "status": "built", "built": True, "build_seconds": 1.0, "lut4": 1, "logic_cells": 1, "ff": 1,
                "bram_used": 1, "capacity": {"lut4": 2}, "min_fmax_mhz": 92.71, "constraint_mhz_requested": 100.0,
                "timing_met": False, "overflows": [], "expected": {"uart_line": "PASS"},
                "nextpnr_seed": 4, "nextpnr_seeds": seeds}
    fig = board_figures("ulx3s-85f", 100.0, limit_s=600, out=tmp_path, build=build, pnr_seeds="1-4")
    assert fig["fpga_ulx3s_85f_pnr_seed"] == 4 and fig["fpga_ulx3s_85f_fmax_mhz"] == 92.71
    assert fig["fpga_ulx3s_85f_seeds_fmax_mhz"] == {1: 86.57, 2: 88.04, 3: None, 4: 92.71}
    assert fig["fpga_ulx3s_85f_seeds_median_fmax_mhz"] == 88.04
    assert fig["fpga_ulx3s_85f_target_met"] is False


def test_bench_refuses_a_bad_seed_list_before_building(capsys):
    from gen.cli import main
    assert main(["bench", "--only", "fpga", "--fpga-pnr-seeds", "3-1"]) == 2
    assert capsys.readouterr().err.strip() == "error: --fpga-pnr-seeds: the range 3-1 runs backwards"


def test_fpga_section_is_registered_and_left_out_by_no_fpga(monkeypatch):
    import gen.bench as bench
    assert "fpga" in SECTIONS
    ran = []
    monkeypatch.setattr(bench, "bench_plan", lambda: ran.append("plan") or {})
    monkeypatch.setattr(bench, "bench_compile", lambda: ran.append("compile") or {})
    monkeypatch.setattr(bench, "SECTIONS", ("plan", "compile", "fpga"))
    run_bench(BenchOptions(fpga=False))
    assert ran == ["plan", "compile"]
