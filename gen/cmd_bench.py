"""``python -m gen bench``: measured figures, each against its target.

Sections (``--only`` picks some): ``plan`` and ``compile`` time a 70B
reshard; ``blocks`` measures the DMA engine and MMU in simulation and, with
the YoWASP tools, on an ECP5; ``system`` runs tiny-qwen2 reshards on the RTL.
Figures are measured on every run, never stored.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

NAME = "bench"
HELP = "run the benchmarks and print measured figures against their targets"
ORDER = 80
# Each optional section is a module of gen (the block benchmarks drive the blocks
# with the shared simulation kit, gen/simkit.py, as the tests do).
_OPTIONAL = {"blocks": "gen.bench_blocks", "system": "gen.bench_system",
             "verilator": "gen.bench_verilator"}


def _sections() -> tuple[str, ...]:
    """The sections this build has (no placeholders for ones not written yet)."""
    import importlib.util
    return ("plan", "compile") + tuple(k for k, m in _OPTIONAL.items() if importlib.util.find_spec(m))


SECTIONS = _sections()


def add_arguments(p):
    p.add_argument("--json", action="store_true", help="print one JSON object of figures")
    p.add_argument("--only", action="append", default=None, choices=SECTIONS,
                   help="run only this section (repeatable)")
    p.add_argument("--no-fpga", action="store_true", help="skip ECP5 synthesis and place & route")


def _timed_cli(argv: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "gen", *argv], capture_output=True, text=True)
    return time.perf_counter() - t0, r


def bench_plan() -> dict:
    """Wall time of the whole command, cold (parameter list built by transformers) and warm."""
    import shutil
    from model.models import PARAM_CACHE
    argv = ["plan", "--model", "llama-3.1-70b", "--train", "fsdp2:dp=64", "--rollout", "vllm:tp=8"]
    shutil.rmtree(PARAM_CACHE, ignore_errors=True)
    cold, r = _timed_cli(argv)
    if r.returncode:
        raise RuntimeError(f"plan failed: {r.stderr.strip()}")
    warm, r = _timed_cli(argv)
    return {"plan_70b_seconds": round(warm, 2), "plan_70b_cold_seconds": round(cold, 2),
            "plan_70b_target_seconds": 5.0}


def bench_compile() -> dict:
    import tempfile
    from pathlib import Path
    out = Path(tempfile.mkdtemp()) / "p70b"
    argv = ["compile", "--model", "llama-3.1-70b", "--train", "fsdp2:dp=64", "--rollout", "vllm:tp=8",
            "--device", "0", "--page-sizes", "64K,2M,256M,1G", "--tlb-entries", "4096",
            "--out", str(out), "--json"]
    secs, r = _timed_cli(argv)
    if r.returncode:
        raise RuntimeError(f"compile failed: {r.stderr.strip()}")
    dev = json.loads(r.stdout)["devices"][0]
    from model.models import load_model
    return {"compile_70b_one_device_seconds": round(secs, 2), "compile_70b_target_seconds": 30.0,
            "compile_70b_descriptors_device0": dev["descriptors"],
            "llama_3_1_70b_parameters": len(load_model("llama-3.1-70b").params),
            "compile_70b_bytes_copied_device0": dev["bytes_copied"],
            "compile_70b_bytes_remapped_device0": dev["bytes_remapped"]}


def bench_blocks(fpga: bool) -> dict:
    from gen.bench_blocks import run_block_benchmarks
    return run_block_benchmarks(fpga=fpga)


def run(args) -> int:
    sections = args.only or list(SECTIONS)
    figures: dict = {}
    import importlib
    for name in sections:
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        if name == "plan":
            figures.update(bench_plan())
        elif name == "compile":
            figures.update(bench_compile())
        elif name == "blocks":
            figures.update(bench_blocks(not args.no_fpga))
        else:
            figures.update(importlib.import_module(_OPTIONAL[name]).run_benchmarks())
    if args.json:
        json.dump(figures, sys.stdout, indent=1)
        print()
    else:
        for k, v in figures.items():
            print(f"{k:>40}: {v}")
    return 0
