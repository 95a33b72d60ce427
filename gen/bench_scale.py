"""Scale benchmark: Qwen2.5-0.5B's weight sync on the emitted Verilog (``bench --only scale``).

Runs ``python -m gen sim --engine verilator --model qwen2.5-0.5b --train
fsdp2:dp=2 --rollout vllm:tp=2 --dtype bf16 --bus-bits 256 --json`` as a user
does, in its own process (so its peak memory is its own), and reports the
wall time by phase, the peak memory, the cycles against the lower bound and
whether the run verified bit for bit. Targets: under 5 minutes, under 12 GiB.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCALE_RESHARD = ("--model", "qwen2.5-0.5b", "--train", "fsdp2:dp=2", "--rollout", "vllm:tp=2",
                 "--dtype", "bf16", "--bus-bits", "256")


def run_benchmarks() -> dict:
    with tempfile.TemporaryDirectory(prefix="reshard-scale-") as tmp:
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "gen", "sim", "--engine", "verilator", *SCALE_RESHARD,
                            "--json", "--out", str(Path(tmp) / "prog")], capture_output=True, text=True)
        wall = time.perf_counter() - t0
    if r.returncode not in (0, 1) or not r.stdout.strip():
        return {"scale_error": (r.stderr.strip().splitlines() or ["?"])[-1]}
    s = json.loads(r.stdout)
    out = {"scale_reshard": " ".join(SCALE_RESHARD), "scale_verified": s["verified"],
           "scale_golden_agrees": s["golden_agrees"], "scale_cycles": s["cycles"],
           "scale_lower_bound_cycles": s["lower_bound_cycles"],
           "scale_cycles_over_lower_bound": s.get("cycles_over_lower_bound"),
           "scale_bytes_copied": s["bytes_copied"], "scale_sim_cycles_per_s": round(s["sim_cycles_per_s"]),
           "scale_wall_s": round(wall, 1), "scale_target_wall_s": 300,
           "scale_peak_rss_gib": round(s["peak_rss_bytes"] / (1 << 30), 2), "scale_target_peak_rss_gib": 12}
    out.update({f"scale_phase_{k}_s": v for k, v in s["wall_s"].items()})
    return out
