"""The pyuvm environment on the emitted Verilog: the short regression, and a scoreboard that can fail.

One cocotb Verilator build (cached under build/uvm/) serves every test; each
test runs in its own simulator process (verif.runner).
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from verif.coverage import merge
from verif.regression import SHORT, UvmOptions, plan, run_uvm

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def short(tmp_path_factory):
    return run_uvm(UvmOptions(keep=tmp_path_factory.mktemp("uvm")))


def test_short_regression_passes(short):
    """Every test passes; the short regression's coverage is most of the bins (the long one,
    `python -m gen uvm --regression`, is the one that closes them: README)."""
    assert short["failed"] == 0, [t for t in short["tests"] if t["result"] != "pass"]
    assert [(t["name"], t["seed"]) for t in short["tests"]] == list(SHORT)
    assert all(t["cycles"] > 0 for t in short["tests"] if t["name"] != "register_sweep")
    assert short["coverage_percent"] >= 90.0, short["uncovered"]
    assert not [b for b in short["uncovered"] if b.startswith(("insn.op", "host.", "axi."))], short["uncovered"]


def test_scoreboard_names_the_first_wrong_byte(tmp_path, monkeypatch):
    """The golden prediction is corrupted in one byte: the replay must fail and say where."""
    monkeypatch.setenv("RESHARD_UVM_CORRUPT_EXPECTED", "1")
    s = run_uvm(UvmOptions(test="reshard_replay", seed=2, keep=tmp_path))
    assert s["failed"] == 1
    msg = s["tests"][0]["message"]
    assert "written" in msg and "golden model ends with" in msg, msg


def test_cli_json_and_bad_test_name():
    r = subprocess.run([sys.executable, "-m", "gen", "uvm", "--test", "nope"], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown UVM test 'nope'" in r.stderr
    r = subprocess.run([sys.executable, "-m", "gen", "uvm", "--test", "register_sweep", "--seed", "3", "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    s = json.loads(r.stdout)
    assert {"passed", "failed", "tests", "coverage_percent", "uncovered"} <= set(s)
    assert s["passed"] == 1 and s["tests"][0]["name"] == "register_sweep"


def test_plan_and_merge():
    assert len(plan(UvmOptions(regression=True))) > len(plan(UvmOptions()))
    pct, missed = merge([{"a: x": 1, "a: y": 0}, {"a: x": 0, "a: y": 0, "a: z": 2}])
    assert missed == ["a: y"] and pct == pytest.approx(200 / 3)
