"""Benchmark section ``system``: tiny-qwen2 reshards on the RTL.

``run_benchmarks() -> dict`` compiles and simulates (Amaranth simulator) the
reshards below and returns, per reshard, the cycles the slowest device took,
the lower bound (bytes through the busiest port of any device divided by the
bus bytes per beat), their ratio against the target of 1.10, whether the run
verified, and the simulator's speed. Measured on every run, never stored.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

#: (name, train spec, rollout spec) of the benchmarked reshards
RESHARDS = (
    ("fsdp2_dp4_tp2", "fsdp2:dp=4", "vllm:tp=2"),
    ("fsdp1_dp2_tp2", "fsdp1:dp=2", "vllm:tp=2"),
)
TARGET_RATIO = 1.10


def run_one(train: str, rollout: str, model: str = "tiny-qwen2", out: Path | None = None) -> dict:
    """Compile and run one reshard on the RTL; the :func:`gen.api.summarize` dict."""
    from gen.api import CompileOptions, compile_to, summarize
    from gen.sim_amaranth import run_amaranth
    out = out or Path(tempfile.mkdtemp(prefix="bench_system_")) / "prog"
    loaded = compile_to(CompileOptions(model=model, train=train, rollout=rollout), out)
    return summarize(loaded, run_amaranth(loaded))


def run_benchmarks() -> dict:
    figures: dict = {}
    cycles = seconds = 0.0
    for name, train, rollout in RESHARDS:
        t0 = time.perf_counter()
        s = run_one(train, rollout)
        ratio = s["cycles"] / s["lower_bound_cycles"]
        figures[f"system_{name}_cycles"] = s["cycles"]
        figures[f"system_{name}_lower_bound_cycles"] = s["lower_bound_cycles"]
        figures[f"system_{name}_ratio"] = round(ratio, 4)
        figures[f"system_{name}_target_ratio"] = TARGET_RATIO
        figures[f"system_{name}_verified"] = s["verified"]
        cycles += s["cycles"]
        seconds += s["cycles"] / s["sim_cycles_per_s"]      # simulated time of the run
        figures[f"system_{name}_seconds"] = round(time.perf_counter() - t0, 1)
    figures["sim_cycles_per_s"] = round(cycles / seconds) if seconds else 0
    return figures


if __name__ == "__main__":
    import json
    print(json.dumps(run_benchmarks(), indent=1))
