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
    assert not [b for b in short["uncovered"] if b.startswith(("insn.op", "host.", "axi.", "dma.", "net.", "sem.",
                                                               "stream.", "xfer.", "coll."))], short["uncovered"]
    assert short["undefined"] and all(": " in b for b in short["undefined"])


def test_scoreboard_names_the_first_wrong_byte(tmp_path, monkeypatch):
    """The golden prediction is corrupted in one byte: the replay must fail and say where."""
    monkeypatch.setenv("RESHARD_UVM_CORRUPT_EXPECTED", "1")
    s = run_uvm(UvmOptions(test="reshard_replay", seed=2, keep=tmp_path))
    assert s["failed"] == 1
    msg = s["tests"][0]["message"]
    assert "written" in msg and "golden model ends with" in msg, msg


def test_interconnect_scoreboard_names_a_wrong_delivery(tmp_path, monkeypatch):
    """One message taken from a crossbar input is recorded with a flipped data bit: the delivery
    no longer matches what was sent, and the failure names the source, destination and field."""
    monkeypatch.setenv("RESHARD_UVM_CORRUPT_NET", "1")
    s = run_uvm(UvmOptions(test="reshard_replay", seed=2, keep=tmp_path))
    assert s["failed"] == 1
    msg = s["tests"][0]["message"]
    assert "interconnect: message" in msg and "data" in msg and "sent" in msg, msg


@pytest.mark.parametrize("where, says", [
    ("beat", "#6 forward all_gather bfloat16 18,688 B (direct): device 1 write port"),
    ("own", "#6 forward all_gather bfloat16 18,688 B (direct) rank 1 (device 1): output byte 12458"),
])
def test_capture_replay_names_the_first_wrong_byte(tmp_path, monkeypatch, where, says):
    """One byte of gloo's recorded output is flipped (the schedule's first three collectives): in a
    byte a beat from the other rank writes, the beat scoreboard names it; in rank 1's own chunk of
    the all-gather (no beat writes it), the comparison of the outputs does."""
    monkeypatch.setenv("RESHARD_UVM_CORRUPT_GLOO", where)
    s = run_uvm(UvmOptions(test="collective_capture_replay", seed=2, keep=tmp_path, collectives=3))
    assert s["failed"] == 1
    msg = s["tests"][0]["message"]
    assert says in msg and "gloo's output" in msg, msg


def test_captured_schedule():
    """The schedule the capture replay runs (verif.schedule, the cached verl capture): the FSDP2
    training step's collectives in issue order, every one the hardware can run, fitting the UVM
    build's memory; the coverage bins are its kinds; an all-gather's recorded output is the
    ranks' inputs concatenated (the capture recorded real tensors, not zeros)."""
    import numpy as np

    from hw.isa import ArchParams
    from verif.coverage import COLLECTIVES
    from verif.schedule import prepare
    arch = ArchParams(devices=2, mem_bytes=1 << 17)
    sched = json.loads(prepare(arch).read_text())
    calls = sched["collectives"]
    assert [c["phase"] for c in calls] == sorted((c["phase"] for c in calls), key=sched["phases"].index)
    assert {(c["phase"], c["op"], c["dtype"], c["reduce_op"] or "none") for c in calls} == set(COLLECTIVES)
    assert len(calls) >= 10 and all(c["ranks"] == [0, 1] for c in calls)
    assert sched["not_run"] and all(c["reason"] for c in sched["not_run"])
    data = np.load(sched["data"])
    ag = max((c for c in calls if c["op"] == "all_gather"), key=lambda c: c["bytes"])
    ins = [data[f"c{ag['index']}_in{s}"] for s in (0, 1)]
    assert np.any(ins[0]) and not np.array_equal(ins[0], ins[1])
    for s in (0, 1):
        assert np.array_equal(data[f"c{ag['index']}_out{s}"], np.concatenate(ins))


def test_cli_json_and_bad_test_name():
    r = subprocess.run([sys.executable, "-m", "gen", "uvm", "--test", "nope"], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown UVM test 'nope'" in r.stderr
    r = subprocess.run([sys.executable, "-m", "gen", "uvm", "--test", "register_sweep", "--seed", "3", "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    s = json.loads(r.stdout)
    assert {"passed", "failed", "tests", "coverage_percent", "uncovered"} <= set(s)
    assert s["passed"] == 1 and s["tests"][0]["name"] == "register_sweep"
    for bad, field in ((["--max-body", "0"], "--max-body"), (["--illegal-rate", "1.5"], "--illegal-rate")):
        r = subprocess.run([sys.executable, "-m", "gen", "uvm", *bad], capture_output=True, text=True)
        assert r.returncode == 2 and field in r.stderr, r.stderr


def test_random_program_constraints_can_be_overridden(tmp_path):
    """--max-body and --illegal-rate reach the drawn programs: the kept stimulus is what
    draw_cases draws with those constraints, not with the defaults."""
    from hw.isa import ArchParams
    from verif.programs import draw_cases, systems
    r = subprocess.run([sys.executable, "-m", "gen", "uvm", "--test", "random_programs", "--seed", "6",
                        "--cases", "2", "--max-body", "3", "--illegal-rate", "1", "--keep", str(tmp_path),
                        "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["passed"] == 1
    tdir = tmp_path / "tests" / "random_programs-6"
    arch = ArchParams.from_json(json.loads((tdir / "config.json").read_text())["arch"])
    kept = json.loads((tdir / "cases.json").read_text())

    def drawn(**kw):
        return [[[f"{w:x}" for w in p] for p in c.programs] for c in draw_cases(systems(arch=arch, **kw), 6, 2)]
    assert kept == drawn(max_body=3, illegal_rate=1.0)
    assert kept != drawn(max_body=12, illegal_rate=0.05)


def test_plan_and_merge():
    assert len(plan(UvmOptions(regression=True))) > len(plan(UvmOptions()))
    pct, missed = merge([{"a: x": 1, "a: y": 0}, {"a: x": 0, "a: y": 0, "a: z": 2}])
    assert missed == ["a: y"] and pct == pytest.approx(200 / 3)


_DRAW = """
import hashlib, sys
{warm}
from hw.isa import ArchParams
from verif.programs import draw_cases, systems
arch = ArchParams(devices=2, mem_bytes=1 << 17, channels=4, semaphores=8, imem_words=1024, addr_bits=32)
cases = draw_cases(systems(arch=arch, max_body=12, illegal_rate=0.05), int(sys.argv[1]), 3)
assert len({{repr(c.programs) for c in cases}}) == 3
print(hashlib.sha256(repr([(c.programs, c.memories) for c in cases]).encode()).hexdigest())
"""


def _draw_digest(seed: int, hashseed: str, warm: str = "") -> str:
    import os
    r = subprocess.run([sys.executable, "-c", _DRAW.format(warm=warm), str(seed)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONHASHSEED=hashseed))
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip()


def test_draw_cases_is_reproducible_across_processes():
    """The same seed draws the same random programs in two processes that differ in hash seed,
    in the local modules they loaded (Hypothesis's provider used to mix in literals of loaded
    modules) and in what they drew before; another seed draws other programs."""
    warm = ("import gen.api, gen.compiler, gen.result, model.plan, verif.env, verif.tests, verif.transfers\n"
            "from verif.programs import draw_cases as _d, systems as _s\n"
            "_d(_s(max_devices=3), 99, 2)")
    a = _draw_digest(3, "1")
    assert _draw_digest(3, "2", warm) == a
    assert _draw_digest(4, "1") != a


def test_transfer_check_against_the_plan(tmp_path):
    """The plan-transfer check (verif.transfers) on the golden model's end state: every transfer of
    the compiled micro-qwen2 reshard holds its source bytes, and the classes its coverage samples
    come out as the plan has them; a byte changed in a destination, or never written, is named."""
    import numpy as np

    from gen.api import CompileOptions, compile_to
    from gen.result import run_golden
    from verif.transfers import Layout, check_transfer, classify, transfer_items
    loaded = compile_to(CompileOptions(model="micro-qwen2", train="fsdp2:dp=2", rollout="vllm:tp=2"), tmp_path)
    gold = run_golden(loaded.arch, loaded.programs, [m.copy() for m in loaded.memories])
    initial = [np.asarray(m, np.uint8) for m in loaded.memories]
    final = [np.asarray(m, np.uint8).copy() for m in gold.memories]
    written = [np.ones(len(m), bool) for m in final]
    lay, items = Layout(loaded.manifest), transfer_items(loaded.manifest)
    assert items
    # the plan moves exactly the rollout bytes: each rank's in-bytes are its transfers' bytes
    assert sum(t.nbytes for t in items) == sum(
        t["bytes"] for d in loaded.manifest["devices"] for t in d["tensors"])
    paths = set()
    for t in items:
        zero_copy, err = check_transfer(t, lay, initial, final, written)
        assert err is None, err
        paths.add(classify(t, 8, zero_copy)[1])
    assert paths == {"local-copy", "zero-copy", "remote-copy"}
    remote = next(t for t in items if t.src != t.dst)
    dev, pa, _ = lay.translate(remote.dst, lay.va(remote.dst, remote.dst_offset))
    final[dev][pa + 1] ^= 0xFF
    _, err = check_transfer(remote, lay, initial, final, written)
    assert err and "byte 1 is" in err, err
    final[dev][pa + 1] ^= 0xFF
    written[dev][pa + 2] = False
    _, err = check_transfer(remote, lay, initial, final, written)
    assert err and "byte 2 was never written" in err, err
