"""Sweep benchmark: local scaling of ``python -m gen sweep`` (``bench --only sweep``).

Runs one grid (:data:`SCALING_GRID`: 48 distinct compiles of small-qwen2's
reshard, 11.5M parameters, each checked on the golden model against the
sliced tensors and priced in the iteration model)
as a user does, in its own process, with 1 and then 2 local Ray workers into
fresh directories, and reports points per minute of each (Ray's start left
out: it is a fixed cost) and their ratio. Both runs do the same work; no
stage is cached between them.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

SCALING_GRID = """\
name: scaling
stages: [plan, compile, golden, perf]
axes:
  model: small-qwen2
  dtype: [bf16, fp32]
  bus_bits: [32, 64, 128, 256]
  channels: [1, 2, 4]
  tlb_entries: [64, 128]

"""


def _run(grid: Path, out: Path, workers: int) -> dict:
    r = subprocess.run([sys.executable, "-m", "gen", "sweep", str(grid), "--out", str(out), "--workers",
                        str(workers), "--no-plots", "--json"], capture_output=True, text=True)
    if not r.stdout.strip():
        raise RuntimeError((r.stderr.strip().splitlines() or ["sweep printed nothing"])[-1])
    return json.loads(r.stdout)


def run_benchmarks() -> dict:
    with tempfile.TemporaryDirectory(prefix="reshard-bench-sweep-") as tmp:
        grid = Path(tmp) / "scaling.yaml"
        grid.write_text(SCALING_GRID)
        try:
            one = _run(grid, Path(tmp) / "w1", 1)
            two = _run(grid, Path(tmp) / "w2", 2)
        except RuntimeError as e:
            return {"sweep_error": str(e)}
    out = {"sweep_points": one["points"]}
    for name, s in (("1", one), ("2", two)):
        out[f"sweep_workers{name}_done"] = s["done"]
        out[f"sweep_workers{name}_failed"] = s["failed"]
        out[f"sweep_workers{name}_points_per_min"] = s["points_per_minute"]
        out[f"sweep_workers{name}_wall_s"] = s["wall_s"]
        out[f"sweep_workers{name}_ray_start_s"] = s["ray_start_s"]
    if one["points_per_minute"]:
        out["sweep_speedup_2_over_1"] = round(two["points_per_minute"] / one["points_per_minute"], 2)
    return out
