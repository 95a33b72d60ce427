"""The iteration model as a library: options in, the JSON-ready answer out.

``python -m gen perf`` parses into :class:`PerfOptions` and calls
:func:`run_perf` (or :func:`predict_reshard` for ``--predict-cycles``); the
report and the tests call the same functions.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from model.errors import InputError


@dataclass(frozen=True)
class PerfOptions:
    model: str = "qwen2.5-7b"
    chip: str = "h100-sxm"
    train: str = "fsdp2:dp=8"
    rollout: str = "vllm:tp=2"
    batch: int = 256
    prompt_len: int = 1024
    response_len: int = 1024
    rollout_n: int = 5
    ppo_epochs: int = 1
    micro_batch: int = 8
    algorithm: str = "grpo"
    engine_clock_mhz: float | None = None
    engine_bus_bits: int | None = None
    engine_channels: int | None = None
    dtype: str = "bf16"


def _positive(name: str, v) -> None:
    if v is not None and v <= 0:
        raise InputError(f"--{name} must be positive, not {v}")


def run_perf(opts: PerfOptions) -> dict:
    from model.chips import load_chip
    from model.engine_cost import load_costs
    from model.models import load_model
    from model.perf import Workload, iteration
    from model.specs import parse_dtype, parse_spec
    for k in ("engine_clock_mhz", "engine_bus_bits", "engine_channels"):
        _positive(k.replace("_", "-"), getattr(opts, k))
    parse_dtype(opts.dtype)
    chip = load_chip(opts.chip).with_engine(opts.engine_clock_mhz, opts.engine_bus_bits, opts.engine_channels)
    w = Workload(opts.batch, opts.prompt_len, opts.response_len, opts.rollout_n, opts.ppo_epochs,
                 opts.micro_batch, opts.algorithm)
    return iteration(load_model(opts.model), chip, parse_spec(opts.train, "train"),
                     parse_spec(opts.rollout, "rollout"), w, load_costs(), opts.dtype)


@dataclass(frozen=True)
class PredictOptions:
    model: str = "tiny-qwen2"
    train: str = "fsdp2:dp=2"
    rollout: str = "vllm:tp=2"
    dtype: str = "bf16"
    bus_bits: int = 64
    channels: int | None = None


def predict_reshard(opts: PredictOptions) -> dict:
    """The RTL cycles the calibrated formula predicts for a reshard: compiled, never simulated."""
    from gen.api import CompileOptions, check_bus_bits, compile_reshard
    from model.engine_cost import features_from_report, load_costs, predict_cycles
    check_bus_bits(opts.bus_bits)
    _positive("channels", opts.channels)
    comp = compile_reshard(CompileOptions(model=opts.model, train=opts.train, rollout=opts.rollout,
                                          dtype=opts.dtype, bus_bits=opts.bus_bits, channels=opts.channels,
                                          images=False))
    feats = features_from_report(comp.report, opts.bus_bits // 8, comp.arch.channels)
    costs = load_costs()
    return {"model": opts.model, "train": opts.train, "rollout": opts.rollout, "dtype": opts.dtype,
            "bus_bits": opts.bus_bits, "channels": comp.arch.channels, "devices": comp.arch.devices,
            "predicted_cycles": predict_cycles(feats, costs), "lower_bound_cycles": feats.beats,
            "descriptors": feats.descriptors, "remaps": feats.remaps,
            "costs": {k: v for k, v in costs.to_json().items() if k != "calibrated_on"}}


def fmt_s(t: float) -> str:
    return f"{t * 1e3:.1f} ms" if t < 1 else f"{t:.2f} s"


def report_lines(r: dict) -> list[str]:
    w = r["workload"]
    e = r["engine"]
    lines = [f"{r['model']} ({r['parameters'] / 1e9:.2f}B) on {r['world']}x {r['chip']}: train {r['train']}, "
             f"rollout {r['rollout']}; {w['algorithm']} batch {w['batch']} x n={w['rollout_n']}, "
             f"prompt {w['prompt_len']} + response {w['response_len']} tokens",
             f"{'phase':<16} {'time':>10} {'bound by':<13} {'compute':>8} {'hbm':>6} {'link':>6} {'mem/chip':>9}"]
    for p in r["phases"]:
        u = p["utilization"]
        lines.append(f"{p['name']:<16} {fmt_s(p['time_s']):>10} {p['bound_by']:<13} {u['compute']:>8.0%} "
                     f"{u['hbm']:>6.0%} {u['interconnect']:>6.0%} {p['peak_memory_gb']:>6.1f} GB")
    lines.append(f"iteration: {fmt_s(r['iteration_s'])} (with the IP's sync {fmt_s(r['iteration_s_with_ip_sync'])}); "
                 f"peak memory {r['peak_memory_gb']:.1f} GB per chip")
    lines.append(f"weight sync (engine {e['bus_bits']}-bit at {e['clock_mhz']:g} MHz, {e['channels']} channels):")
    for k, s in r["sync"].items():
        lines.append(f"  {k:<20} {s['bytes_per_rank'] / 1e9:>8.2f} GB per rank  {fmt_s(s['time_s']):>10}")
    return lines


@dataclass(frozen=True)
class Sweep:
    """The pictures' cases: chips x models for the stacked bars, models for the sync curve."""
    chips: tuple[str, ...] = ("a100-80gb-sxm", "h100-sxm", "h200-sxm")
    models: tuple[str, ...] = ("qwen2.5-7b", "llama-3.1-8b", "llama-3.1-70b", "qwen2.5-72b")
    sync_models: tuple[str, ...] = ("qwen2.5-0.5b", "qwen2.5-7b", "llama-3.1-8b", "llama-3.1-70b", "qwen2.5-72b")


def parallel_for(model: str) -> tuple[str, str]:
    """A layout that fits each model size on 8-chip nodes: (train, rollout)."""
    from model.models import load_model
    n = load_model(model).numel
    if n > 30e9:
        return "fsdp2:dp=32", "vllm:tp=8"
    return "fsdp2:dp=8", "vllm:tp=2"


def write_plots(opts: PerfOptions, out: Path, sweep: Sweep = Sweep(), progress=lambda m: None) -> list[Path]:
    from gen.perf_plots import draw_all
    return draw_all(opts, out, sweep, progress)


def temp_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="reshard-perf-"))
