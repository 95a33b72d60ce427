"""Benchmark section ``fpga``: real FPGA builds with the YoWASP tools.

``run_benchmarks(time_limit_min=60) -> dict`` (``python -m gen bench --only
fpga [--fpga-time-limit-min N]``) builds, each through the same functions as
``python -m gen fpga``:

* out of context on an LFE5U-25F (the anchors' part): the DMA (32-bit bus,
  4 channels) at a 125 MHz constraint (its target), the MMU, the
  coprocessor and the device (16 KiB of memory) at 100 MHz;
* the ``icebreaker`` board: the iCE40UP5K subset (DMA + memory + self-test,
  not the full device) at the 12 MHz oscillator;
* the ``ulx3s-85f`` board: the full 2-device system with the micro-qwen2
  reshard at 100 MHz (its target).

The boards are placed with ``pnr_seeds`` (``--fpga-pnr-seeds``, default
1): with several, one synthesis and a placement each, the fastest packed
and every placement's Fmax reported.

Every build has the time limit; one that runs out is reported as ``did not
finish within N min`` with no figures, never as a result. Builds write to
``build/bench_fpga/``. These take from minutes (the blocks, the iCE40) to
hours (the full ECP5 system): none runs in the test suite.
"""
from __future__ import annotations

import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: (name, block, constraint MHz, target MHz or None, memory bytes or None: the
#: default) of the out-of-context builds; the device with 16 KiB, as
#: docs/fpga.md's pipelining steps
OOC = (("dma", "dma", 125.0, 125.0, None), ("mmu", "mmu", 100.0, None, None),
       ("coprocessor", "coprocessor", 100.0, None, None), ("device", "device", 100.0, None, 16384))
#: (board, target MHz or None) of the board builds
BOARD_BUILDS = (("icebreaker", None), ("ulx3s-85f", 100.0))

#: the anchors the issue compares against (LFE5U-25F, the same tools)
ANCHORS = {"pulp_idma_1d_backend": {"lut4": 1257, "ff": 669, "fmax_mhz": "54-57"},
           "verilog_axi_axi_cdma": {"lut4": 859, "ff": 393, "fmax_mhz": "76-81"}}


def _timed_out(limit_s: float) -> str:
    return f"did not finish within {limit_s / 60:g} min"


def ooc_figures(name, block, freq, target, mem_bytes=None, *, limit_s, out, build=None) -> dict:
    """One out-of-context build as ``fpga_ooc_<name>_*`` figures."""
    from gen.fpga import OocOptions, build_ooc
    build = build or build_ooc
    mem_bytes = mem_bytes or OocOptions.mem_bytes
    key = f"fpga_ooc_{name}"
    t0 = time.perf_counter()
    try:
        rep = build(OocOptions(block=block, part="LFE5U-25F", bus_bits=32, channels=4, freq_mhz=freq,
                               mem_bytes=mem_bytes,
                               out=str(out / f"ooc-{name}"), time_limit_s=limit_s))
    except subprocess.TimeoutExpired:
        return {f"{key}_status": _timed_out(limit_s),
                f"{key}_seconds": round(time.perf_counter() - t0, 1)}
    fig = {f"{key}_status": "built", f"{key}_lut4": rep["lut4"], f"{key}_ff": rep["ff"],
           f"{key}_fmax_mhz": rep["min_fmax_mhz"], f"{key}_constraint_mhz": freq,
           f"{key}_timing_met": rep["timing_met"], f"{key}_seconds": rep["build_seconds"]}
    if target is not None:
        fig[f"{key}_target_mhz"] = target
        fig[f"{key}_target_met"] = bool(rep["min_fmax_mhz"] and rep["min_fmax_mhz"] >= target)
    return fig


def board_figures(name, target, *, limit_s, out, build=None, pnr_seeds="1") -> dict:
    """One board build as ``fpga_<board>_*`` figures; with several
    ``pnr_seeds``, every placement's Fmax and their median too (the figures
    are the packed one's, the fastest)."""
    from gen.fpga_board import BoardOptions, build_board
    build = build or build_board
    key = "fpga_" + name.replace("-", "_")
    rep = build(BoardOptions(board=name, out=str(out / name), time_limit_s=limit_s, pnr_seed=pnr_seeds))
    fig = {f"{key}_what": rep["subset"] or "full system: " + (
               f"{rep['reshard']['devices']} devices, {rep['reshard']['model']} "
               f"{rep['reshard']['train']} -> {rep['reshard']['rollout']}"),
           f"{key}_status": rep["status"], f"{key}_seconds": rep["build_seconds"]}
    if rep["built"]:
        fig.update({f"{key}_lut4": rep["lut4"], f"{key}_logic_cells": rep["logic_cells"],
                    f"{key}_ff": rep["ff"], f"{key}_bram": rep["bram_used"],
                    f"{key}_capacity_lut4": rep["capacity"]["lut4"],
                    f"{key}_fmax_mhz": rep["min_fmax_mhz"],
                    f"{key}_constraint_mhz": rep["constraint_mhz_requested"],
                    f"{key}_timing_met": rep["timing_met"], f"{key}_fits": not rep["overflows"],
                    f"{key}_expected_uart": rep["expected"]["uart_line"],
                    f"{key}_pnr_seed": rep["nextpnr_seed"]})
        if len(rep["nextpnr_seeds"]) > 1:
            from gen.pnr_seeds import placed_fmax
            fig[f"{key}_seeds_fmax_mhz"] = {s["seed"]: s["fmax_mhz"] for s in rep["nextpnr_seeds"]}
            fig[f"{key}_seeds_median_fmax_mhz"] = round(statistics.median(placed_fmax(rep["nextpnr_seeds"])), 2)
    if target is not None:
        fig[f"{key}_target_mhz"] = target
        fig[f"{key}_target_met"] = bool(rep["built"] and rep["timing_met"] and not rep["overflows"]
                                        and rep["constraint_mhz_requested"] >= target)
    return fig


def run_benchmarks(time_limit_min: float = 60, *, pnr_seeds="1", out=None,
                   progress=lambda m: None) -> dict:
    out = Path(out or ROOT / "build" / "bench_fpga")
    limit_s = time_limit_min * 60
    figures: dict = {"fpga_time_limit_min": time_limit_min}
    t0 = time.perf_counter()
    for name, block, freq, target, mem_bytes in OOC:
        progress(f"bench fpga: {name} out of context on LFE5U-25F at {freq:g} MHz ...")
        figures.update(ooc_figures(name, block, freq, target, mem_bytes, limit_s=limit_s, out=out))
    for name, target in BOARD_BUILDS:
        progress(f"bench fpga: board {name} (time limit {time_limit_min:g} min) ...")
        figures.update(board_figures(name, target, limit_s=limit_s, out=out, pnr_seeds=pnr_seeds))
    figures["fpga_anchors_lfe5u_25f"] = ANCHORS
    figures["fpga_bench_seconds"] = round(time.perf_counter() - t0, 1)
    return figures


if __name__ == "__main__":
    import json
    import sys
    print(json.dumps(run_benchmarks(progress=lambda m: print(m, file=sys.stderr, flush=True)), indent=1))
