"""Benchmark section ``collectives``: training collectives on the emitted Verilog
(``python -m gen bench --only collectives``).

* large all-gathers and reduce-scatters (64 KiB fp32 buffers of random data, 2
  and 4 devices, the algorithm ``auto`` picks): cycles against the port lower
  bound of that algorithm, target within 1.10;
* the fixed cost of a small message: a 4 KiB fp32 all-reduce over 2 and 4
  devices, target under 300 cycles on 4 devices (64-bit bus);
* the table of cycles by algorithm and message size that ``auto`` follows;
* the captured training step's forward and backward collectives (tiny-qwen2,
  FSDP2, 2 ranks, ``capture --record-data``), per phase, verified against the
  tensors gloo produced inside verl.

Every run is verified (numpy's sum in the algorithm's order, bit for bit).
"""
from __future__ import annotations

from pathlib import Path

BUS_BITS = 64
LARGE_BYTES = 64 << 10
SMALL_BYTES = 4 << 10
TABLE_BYTES = (256, 4 << 10, 64 << 10)
#: device memory of the synthetic runs: one Verilator build per device count (the
#: ``collectives`` command uses the same, so the builds are shared)
MEM_BYTES = 1 << 17
TARGET_RATIO = 1.10
TARGET_SMALL_CYCLES = 300


def run_benchmarks(trace: Path | None = None, progress=lambda m: None) -> dict:
    from gen.collectives import algorithm_table, arch_for, run_synthetic, small_allreduce
    out: dict = {"bus_bits": BUS_BITS}
    large, verified = [], True
    for p in (2, 4):
        arch = arch_for(p, MEM_BYTES)
        for op in ("all_gather", "reduce_scatter"):
            oc = run_synthetic(op, p, "auto", "verilator", BUS_BITS, arch, nbytes=LARGE_BYTES,
                               progress=progress)
            ratio = oc.cycles / oc.lower_bound_cycles
            large.append({"op": op, "devices": p, "bytes": LARGE_BYTES, "algorithm": oc.algorithm,
                          "cycles": oc.cycles, "lower_bound_cycles": oc.lower_bound_cycles,
                          "ratio": round(ratio, 3), "network_bytes": oc.network_bytes,
                          "verified": oc.verified, "within_target": ratio <= TARGET_RATIO})
            verified &= oc.verified
            progress(f"{op} {LARGE_BYTES} B on {p}: {oc.cycles} cycles, {ratio:.3f}x the bound")
    small = {}
    for p in (2, 4):
        oc = small_allreduce(p, "auto", "verilator", BUS_BITS, arch_for(p, MEM_BYTES),
                             nbytes=SMALL_BYTES, progress=progress)
        small[str(p)] = {"algorithm": oc.algorithm, "cycles": oc.cycles,
                         "lower_bound_cycles": oc.lower_bound_cycles, "verified": oc.verified}
        verified &= oc.verified
    table = []
    for p in (2, 4):
        table += algorithm_table(p, list(TABLE_BYTES), "verilator", BUS_BITS, arch_for(p, MEM_BYTES))
    out.update(large=large, small_allreduce=small, algorithm_table=table,
               large_within_target=all(r["within_target"] for r in large),
               small_allreduce_4_within_target=small["4"]["cycles"] < TARGET_SMALL_CYCLES,
               target_ratio=TARGET_RATIO, target_small_cycles=TARGET_SMALL_CYCLES)
    out["trace"] = _trace_figures(trace, progress)
    verified &= out["trace"]["verified"]
    out["verified"] = bool(verified)
    return out


def _trace_figures(trace: Path | None, progress) -> dict:
    """The captured step's forward and backward collectives on the Verilog, per phase."""
    from gen.collectives import CollectiveOptions, run_trace
    from model.capture import capture
    if trace is None:
        trace = Path("build") / "bench" / "collectives" / "tiny-fsdp2.jsonl"
        capture("tiny-qwen2", "fsdp2", 2, trace, record_data=True, progress=progress)
    s = run_trace(CollectiveOptions(trace=str(trace), phases=("forward", "backward"),
                                    engine="verilator", bus_bits=BUS_BITS, small=False),
                  progress=progress)
    return {"verified": s["verified"], "per_phase": s["per_phase"], "not_run": s["not_run"],
            "collectives": [{k: r.get(k) for k in ("phase", "op", "bytes", "algorithm", "cycles",
                                                   "lower_bound_cycles", "network_bytes",
                                                   "max_ulp_vs_verl", "reason")}
                            for r in s["collectives"]]}


if __name__ == "__main__":
    import json
    print(json.dumps(run_benchmarks(), indent=1))
