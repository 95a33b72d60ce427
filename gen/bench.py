"""Benchmarks: measured figures, each against its target (``python -m gen bench``).

Sections (:attr:`BenchOptions.only` picks some): ``plan`` and ``compile`` time
a 70B reshard; ``blocks`` (:mod:`gen.bench_blocks`) measures the DMA engine
and MMU in simulation and, with the YoWASP tools, on an ECP5; ``system``
(:mod:`gen.bench_system`) runs tiny-qwen2 reshards on the RTL; ``verilator``
(:mod:`gen.bench_verilator`) compares the two simulators; ``fpga``
(:mod:`gen.bench_fpga`) runs the full board builds and the out-of-context
blocks, each under a time limit; ``loop`` (:mod:`gen.bench_loop`) times two
iterations of the closed loop against its budget; ``collectives``
(:mod:`gen.bench_collectives`) runs training collectives on the Verilog; ``scale``
(:mod:`gen.bench_scale`) runs Qwen2.5-0.5B's weight sync on the Verilog; ``sweep``
(:mod:`gen.bench_sweep`) measures a sweep's points per minute with 1 and 2
local Ray workers. Figures are measured on
every run, never stored.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
import time
from dataclasses import dataclass

from model.errors import InputError

# Each optional section is a module of gen with run_benchmarks() -> dict (the block
# benchmarks drive the blocks with the shared simulation kit, gen/simkit.py, as the tests do).
_OPTIONAL = {"blocks": "gen.bench_blocks", "system": "gen.bench_system",
             "verilator": "gen.bench_verilator", "fpga": "gen.bench_fpga", "loop": "gen.bench_loop",
             "collectives": "gen.bench_collectives", "scale": "gen.bench_scale", "sweep": "gen.bench_sweep"}


def _sections() -> tuple[str, ...]:
    """The sections this build has (no placeholders for ones not written yet)."""
    return ("plan", "compile") + tuple(k for k, m in _OPTIONAL.items() if importlib.util.find_spec(m))


SECTIONS = _sections()

#: the 70B reshard the ``plan`` and ``compile`` sections time
PLAN_70B = ("--model", "llama-3.1-70b", "--train", "fsdp2:dp=64", "--rollout", "vllm:tp=8")


@dataclass(frozen=True)
class BenchOptions:
    """Which sections to run (default: all of :data:`SECTIONS`); ``fpga``: ECP5 synthesis too."""
    only: tuple[str, ...] | None = None
    fpga: bool = True
    fpga_time_limit_min: float = 60.0     # section ``fpga``: the limit of each build
    fpga_pnr_seeds: str = "1"             # section ``fpga``: the board builds' nextpnr seeds


def _timed_command(argv: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    """Wall time of ``python -m gen ARGV`` as a user runs it (interpreter start and imports included)."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "gen", *argv], capture_output=True, text=True)
    return time.perf_counter() - t0, r


def bench_plan() -> dict:
    """Wall time of the whole ``plan`` command, cold (parameter list built by transformers) and warm."""
    import shutil
    from model.models import PARAM_CACHE
    argv = ["plan", *PLAN_70B]
    shutil.rmtree(PARAM_CACHE, ignore_errors=True)
    cold, r = _timed_command(argv)
    if r.returncode:
        raise RuntimeError(f"plan failed: {r.stderr.strip()}")
    warm, r = _timed_command(argv)
    return {"plan_70b_seconds": round(warm, 2), "plan_70b_cold_seconds": round(cold, 2),
            "plan_70b_target_seconds": 5.0}


def bench_compile() -> dict:
    """Wall time of the whole ``compile`` command for one device of the 70B reshard."""
    import tempfile
    from pathlib import Path
    out = Path(tempfile.mkdtemp()) / "p70b"
    argv = ["compile", *PLAN_70B, "--device", "0", "--page-sizes", "64K,2M,256M,1G", "--tlb-entries", "4096",
            "--out", str(out), "--json"]
    secs, r = _timed_command(argv)
    if r.returncode:
        raise RuntimeError(f"compile failed: {r.stderr.strip()}")
    dev = json.loads(r.stdout)["devices"][0]
    from model.models import load_model
    return {"compile_70b_one_device_seconds": round(secs, 2), "compile_70b_target_seconds": 30.0,
            "compile_70b_descriptors_device0": dev["descriptors"],
            "llama_3_1_70b_parameters": len(load_model("llama-3.1-70b").params),
            "compile_70b_bytes_copied_device0": dev["bytes_copied"],
            "compile_70b_bytes_remapped_device0": dev["bytes_remapped"]}


def run_bench(opts: BenchOptions = BenchOptions(), progress=lambda m: None) -> dict:
    """Run the sections; every figure, by name."""
    # --no-fpga leaves out the FPGA section (hours) and the blocks' ECP5 builds
    sections = list(opts.only or [s for s in SECTIONS if opts.fpga or s != "fpga"])
    for name in sections:
        if name not in SECTIONS:
            raise InputError(f"unknown bench section {name!r}: this build has {', '.join(SECTIONS)}")
    figures: dict = {}
    for name in sections:
        progress(f"bench: {name} ...")
        if name == "plan":
            figures.update(bench_plan())
        elif name == "compile":
            figures.update(bench_compile())
        elif name == "blocks":
            from gen.bench_blocks import run_block_benchmarks
            figures.update(run_block_benchmarks(fpga=opts.fpga))
        elif name == "fpga":
            from gen.bench_fpga import run_benchmarks as run_fpga
            figures.update(run_fpga(opts.fpga_time_limit_min, pnr_seeds=opts.fpga_pnr_seeds,
                                    progress=progress))
        else:
            figures.update(importlib.import_module(_OPTIONAL[name]).run_benchmarks())
    return figures
