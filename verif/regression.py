"""The regression: which tests with which seeds, on which build; the JSON summary ``gen uvm`` prints.

Every test runs on one simulator: the 2-device system the compiler chooses for
micro-qwen2 ``fsdp2:dp=2 -> vllm:tp=2`` (bf16, 64-bit bus), whose compiled
reshard the replay test runs and whose architecture the random programs use.
``collective_capture_replay`` replays verl's captured collective schedule
(:mod:`verif.schedule`, captured once and cached under ``build/uvm/capture/``).
"""
from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from model.errors import InputError
from verif.coverage import UNDEFINED, merge
from verif.runner import build, run_tests
from verif.tests import TESTS

#: the short regression pytest runs; the long one adds seeds
SHORT = (("reshard_replay", 1), ("reshard_replay", 2), ("register_sweep", 1), ("collective_replay", 1),
         ("directed_faults", 1), ("directed_traffic", 1), ("random_programs", 1), ("random_programs", 2),
         ("random_programs", 3), ("random_programs", 4), ("collective_capture_replay", 1))
LONG_RANDOM_SEEDS = 12


@dataclass(frozen=True)
class UvmOptions:
    test: str | None = None          # one test (with ``seed``), or the regression
    seed: int = 1
    regression: bool = False         # the long regression
    cases: int = 3                   # random programs per random_programs test
    keep: Path | None = None         # keep the per-test logs here
    collectives: int | None = None   # collective_capture_replay: the schedule's first N only (None: all)
    max_body: int = 12               # random_programs: at most this many drawn instructions per program
    illegal_rate: float = 0.05       # random_programs: chance of an illegal instruction word at each draw


def plan(opts: UvmOptions) -> list[tuple[str, int]]:
    if opts.test is not None:
        if opts.test not in TESTS:
            raise InputError(f"unknown UVM test {opts.test!r}: use one of {', '.join(TESTS)}")
        return [(opts.test, opts.seed)]
    tests = list(SHORT)
    if opts.regression:
        tests += [("random_programs", s) for s in range(5, 5 + LONG_RANDOM_SEEDS)]
    return tests


def run_uvm(opts: UvmOptions, progress=lambda m: None) -> dict:
    from gen.api import CompileOptions, compile_to
    tests = plan(opts)
    t0 = time.perf_counter()
    work = Path(opts.keep).resolve() if opts.keep else Path(tempfile.mkdtemp(prefix="reshard-uvm-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        loaded = compile_to(CompileOptions(model="micro-qwen2", train="fsdp2:dp=2", rollout="vllm:tp=2"),
                            work / "compiled")
        bus_bits = loaded.manifest["bus_bits"]
        build_dir, cached = build(loaded.arch, bus_bits, progress)
        cfg = {"compiled": str(work / "compiled"), "arch": loaded.arch.to_json(), "bus_bits": bus_bits,
               "cases": opts.cases, "collectives": opts.collectives,
               "max_body": opts.max_body, "illegal_rate": opts.illegal_rate}
        if any(name == "collective_capture_replay" for name, _ in tests):
            from verif.schedule import prepare
            cfg["schedule"] = str(prepare(loaded.arch, progress))
        runs = run_tests(build_dir, tests, cfg, work / "tests", progress)
    finally:
        if not opts.keep:
            shutil.rmtree(work, ignore_errors=True)
    percent, uncovered = merge([r.coverage for r in runs if r.coverage])
    return {
        "passed": sum(r.result == "pass" for r in runs), "failed": sum(r.result != "pass" for r in runs),
        "tests": [{"name": r.name, "seed": r.seed, "cycles": r.cycles, "result": r.result,
                   "seconds": r.seconds, **({"message": r.message} if r.message else {})} for r in runs],
        "coverage_percent": round(percent, 2), "uncovered": uncovered,
        "undefined": [f"{b}: {why}" for b, why in UNDEFINED.items()],
        "per_test_coverage": {f"{r.name}-{r.seed}": round(100 * sum(v > 0 for v in r.coverage.values())
                                                          / max(len(r.coverage), 1), 2) for r in runs},
        "build_cached": cached, "wall_s": round(time.perf_counter() - t0, 1),
    }
