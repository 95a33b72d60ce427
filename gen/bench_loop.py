"""Benchmark section ``loop``: the closed loop's budget (``python -m gen bench --only loop``).

Runs ``python -m gen loop --steps 2`` on the emitted Verilog (tiny-qwen2, 2 ranks) through
:func:`gen.loop.run_loop` and reports its wall time and peak memory (the loop's process and
its ranks, summed as sampled) against issue 11's budget of 60 s and 4 GiB, with the sync's cycles against
the port lower bound and the bytes against verl's all-gather. The simulator is built first
and not counted (the budget is "the simulator build cached").
"""
from __future__ import annotations

import time

TARGET_SECONDS = 60.0
TARGET_MIB = 4096.0


def run_benchmarks() -> dict:
    from gen.loop import LoopOptions, run_loop
    from gen.weight_sync import SyncOptions, WeightSync
    import tempfile
    from pathlib import Path
    WeightSync(SyncOptions(engine="verilator"), Path(tempfile.mkdtemp(prefix="bench_loop_")) / "c").prepare()
    t0 = time.perf_counter()
    s = run_loop(LoopOptions(steps=2, engine="verilator"), progress=lambda m: None)
    wall = time.perf_counter() - t0
    sync = s["iterations"][-1]["sync"]
    return {"loop_2_iterations_seconds": round(wall, 1), "loop_target_seconds": TARGET_SECONDS,
            "loop_peak_rss_mib": s["peak_rss_mib"]["total"], "loop_target_mib": TARGET_MIB,
            "loop_verified": s["verified"], "loop_sync_cycles": sync["cycles"],
            "loop_sync_lower_bound_cycles": sync["lower_bound_cycles"],
            "loop_sync_network_bytes": sync["network_bytes"],
            "loop_verl_allgather_bytes": sync["verl_allgather_bytes"],
            "loop_within_budget": bool(s["verified"] and wall < TARGET_SECONDS
                                       and s["peak_rss_mib"]["total"] < TARGET_MIB)}


if __name__ == "__main__":
    import json
    print(json.dumps(run_benchmarks(), indent=1))
