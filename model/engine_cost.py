"""The reshard engine's cycle cost: a formula whose constants come from RTL runs.

A reshard on the hardware moves every byte through four ports per device
(memory read, memory write, network out, network in), one bus beat a cycle
each, so its cycles are at least the busiest port's beats: the lower bound
the simulators print. What the RTL adds on top is overhead: a few cycles per
DMA descriptor, per page remapped through the MMU, and a fixed start and
end (program fetch, the closing barrier). A collective adds a cost per step
(fence, signal, wait) on top of its own lower bound.

``calibrate`` takes the constants from measured RTL runs (least squares,
non-negative); ``predict_cycles`` uses them for a reshard it has not seen.
The constants live in ``model/configs/engine_costs.json``, written by
``python -m gen perf --calibrate`` with the runs they came from.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from model.errors import InputError

COSTS_FILE = Path(__file__).parent / "configs" / "engine_costs.json"
PORTS = ("mem_read", "mem_write", "net_out", "net_in")


@dataclass(frozen=True)
class Features:
    """What the cost formula reads of one reshard or collective."""
    beats: int            # the busiest port's beats over all devices (the lower bound)
    descriptors: int      # most DMA descriptors on one device
    remaps: int = 0       # most MMU remaps on one device
    steps: int = 0        # collective steps (each a fence, signal and wait)
    channels: int = 4


@dataclass(frozen=True)
class EngineCosts:
    per_descriptor: float
    per_remap: float
    fixed: float
    per_step: float
    calibrated_on: list = field(default_factory=list, compare=False)

    def to_json(self) -> dict:
        return asdict(self)


def features_from_report(report: list[dict], bus_bytes: int, channels: int) -> Features:
    """Features of a compiled reshard from its per-device report (``Compiled.report``)."""
    beats = max(-(-int(v) // bus_bytes) for d in report for v in d["port_bytes"].values())
    return Features(beats=beats, descriptors=max(d["descriptors"] for d in report),
                    remaps=max(d["remaps"] for d in report), channels=channels)


def features_from_plan(plan, bus_bytes: int, channels: int) -> Features:
    """Features of a minimal plan too large to compile: every local run counted as a copy
    (the compiler remaps page-aligned ones for free, so this errs high) and one
    descriptor per run."""
    beats = 0
    for g in range(plan.world):
        ports = (plan.bytes_out[g] + plan.local_bytes[g], plan.bytes_in[g] + plan.local_bytes[g],
                 plan.bytes_out[g], plan.bytes_in[g])
        beats = max(beats, -(-max(ports) // bus_bytes))
    descriptors = max((len(plan.runs_into(g)) for g in range(plan.world)), default=0)
    return Features(beats=beats, descriptors=descriptors, channels=channels)


def _row(f: Features) -> list[float]:
    # descriptor set-up overlaps across channels; remaps and steps are serial
    return [f.descriptors / f.channels, f.remaps, 1.0, f.steps]


def predict_cycles(f: Features, costs: EngineCosts) -> int:
    c = _row(f)
    extra = c[0] * costs.per_descriptor + c[1] * costs.per_remap + c[2] * costs.fixed + c[3] * costs.per_step
    return int(round(f.beats + extra))


def calibrate(runs: list[tuple[str, Features, int]]) -> EngineCosts:
    """Least-squares, non-negative constants from ``(name, features, measured cycles)`` of RTL runs."""
    if not runs:
        raise InputError("calibration needs at least one RTL run")
    a = np.array([_row(f) for _, f, _ in runs], dtype=float)
    y = np.array([cycles - f.beats for _, f, cycles in runs], dtype=float)
    active = [j for j in range(a.shape[1]) if a[:, j].any()]
    coef = np.zeros(a.shape[1])
    # a small non-negative least squares: drop the most negative coefficient until none is
    while active:
        sol, *_ = np.linalg.lstsq(a[:, active], y, rcond=None)
        if (sol >= 0).all():
            coef[active] = sol
            break
        active.pop(int(np.argmin(sol)))
    return EngineCosts(*(round(float(c), 3) for c in coef),
                       calibrated_on=[{"run": n, "cycles": c, **asdict(f)} for n, f, c in runs])


def load_costs(path: Path = COSTS_FILE) -> EngineCosts:
    if not path.is_file():
        raise InputError(f"{path}: no engine calibration; run `python -m gen perf --calibrate`")
    d = json.loads(path.read_text())
    return EngineCosts(**{k: d[k] for k in ("per_descriptor", "per_remap", "fixed", "per_step")},
                       calibrated_on=d.get("calibrated_on", []))


def save_costs(costs: EngineCosts, path: Path = COSTS_FILE) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(costs.to_json(), indent=1) + "\n")
    tmp.replace(path)
