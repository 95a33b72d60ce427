"""The closed loop (``python -m gen loop``): verl trains, the hardware syncs, the rollout generates.

The loop runs verl's real FSDP2 engine in 2 gloo processes, twice (the reference run, whose
rollout takes verl's export directly, and the run through the emitted Verilog), so these
tests take about half a minute each.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from gen.cli import main
from gen.loop import LoopOptions, compare_runs, run_loop
from model.grpo import GrpoConfig

pytestmark = pytest.mark.slow
STEPS = 2


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    keep = tmp_path_factory.mktemp("loop-records")
    summary = run_loop(LoopOptions(steps=STEPS, engine="verilator"), progress=lambda m: None, keep_records=keep)
    records = {(mode, r): torch.load(keep / f"rank{r}.{mode}.pt", weights_only=False)
               for mode in ("reference", "hardware") for r in range(2)}
    return summary, records


def test_two_iterations_on_verilog_are_verified_and_bit_identical(loop):
    s, _ = loop
    assert s["verified"] and s["reference_identical"] and s["final_weights_identical"]
    assert s["engine"] == "verilator" and len(s["iterations"]) == STEPS
    for e in s["iterations"]:
        y = e["sync"]
        assert y["committed"] and e["identical"]
        assert y["cycles"] >= y["lower_bound_cycles"] > 0
        assert y["checked_bytes"] > 0 and y["bytes_copied"] > 0
        assert 0 < y["network_bytes"] < y["verl_allgather_bytes"]
    assert s["peak_rss_mib"]["total"] < 4096


def test_rewards_and_advantages_follow_the_grpo_rule(loop):
    """Independent formulas: reward = fraction of tokens below vocab/4; advantage =
    (reward - group mean) / (group std + 1e-6) on every response token."""
    _, rec = loop
    cfg = GrpoConfig()
    for it in rec[("hardware", 0)]["iterations"]:
        resp = it["responses"]
        want_r = (resp < 1000 // cfg.target_divisor).float().mean(dim=1)
        assert torch.allclose(it["rewards"], want_r, atol=0, rtol=0)
        groups = want_r.view(-1, cfg.rollout_n)
        adv = (groups - groups.mean(1, keepdim=True)) / (groups.std(1, keepdim=True) + 1e-6)
        want_a = adv.reshape(-1, 1).expand_as(it["advantages"])
        assert torch.allclose(it["advantages"], want_a, atol=1e-5)
    assert any(bool(it["advantages"].abs().sum() > 0) for it in rec[("hardware", 0)]["iterations"]), \
        "every GRPO group was identical: sampling is not seeded per sample"


def test_training_moves_the_weights_and_every_rank_agrees(loop):
    _, rec = loop
    hw0 = rec[("hardware", 0)]
    for key in ("responses", "rewards", "advantages"):
        for a, b in zip(hw0["iterations"], rec[("hardware", 1)]["iterations"]):
            assert torch.equal(a[key], b[key])      # every rank saw the same batch
    assert hw0["iterations"][0]["grad_norm"] > 0
    assert not torch.equal(hw0["iterations"][0]["responses"], hw0["iterations"][1]["responses"])


def test_compare_runs_names_every_difference(loop):
    _, rec = loop
    ref = [rec[("reference", r)] for r in range(2)]
    hw = [dict(rec[("hardware", r)]) for r in range(2)]
    it = [dict(x) for x in hw[1]["iterations"]]
    it[1]["responses"] = it[1]["responses"].clone()
    it[1]["responses"][0, 0] += 1
    hw[1]["iterations"] = it
    w = [t.clone() for t in hw[0]["final_weights"]]
    w[3].view(-1)[0] = torch.nextafter(w[3].view(-1)[0], torch.tensor(1e9))   # one ulp
    hw[0]["final_weights"] = w
    out = compare_runs(ref, hw)
    assert not out["verified"] and not out["reference_identical"]
    assert "iteration 2 rank 1: responses differs from the reference run" in out["differences"]
    assert "rank 0: final weight 3 differs from the reference run" in out["differences"]


def test_an_injected_fault_stops_the_loop_and_keeps_the_previous_weights(tmp_path):
    p = subprocess.run([sys.executable, "-m", "gen", "loop", "--steps", "2", "--engine", "golden",
                        "--inject-fault", "2:unmapped:1", "--json"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 1, p.stderr[-2000:]
    s = json.loads(p.stdout)
    assert not s["verified"]
    f = s["fault"]
    assert (f["iteration"], f["device"], f["cause"]) == (2, 1, "NOT_MAPPED") and f["address"] > 0
    assert f["rollout_entries_committed"] == [0, 0]
    assert s["previous_weights_intact"] and s["previous_weights_iteration"] == 1
    assert s["iterations"][0]["identical"] and not s["iterations"][1]["sync"]["committed"]
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1
    assert "device 1" in errors[0] and "NOT_MAPPED" in errors[0] and f"0x{f['address']:x}" in errors[0]


@pytest.mark.parametrize("argv, needle", [
    (["--inject-fault", "1"], "STEP must be in 2..3"),
    (["--inject-fault", "2:cosmic"], "kind must be one of"),
    (["--inject-fault", "2:unmapped:5"], "DEVICE must be in 0..1"),
    (["--engine", "spice"], "--engine 'spice'"),
    (["--world", "3"], "do not split over --world 3 ranks"),
    (["--steps", "0"], "--steps 0"),
])
def test_bad_input_is_one_line_and_status_2(argv, needle, capsys):
    assert main(["loop", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
