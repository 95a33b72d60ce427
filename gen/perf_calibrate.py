"""Engine costs measured on the RTL: calibration runs, and predictions checked against runs not used.

``python -m gen perf --calibrate`` runs :data:`CALIBRATION` on the emitted
Verilog (Verilator), fits :class:`model.engine_cost.EngineCosts` and writes
``model/configs/engine_costs.json``. :data:`VALIDATION` are other models,
world sizes, bus widths and collectives, kept out of the fit: the tests
predict their cycles and run them on the RTL.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from model.engine_cost import EngineCosts, Features, calibrate, features_from_report, predict_cycles


@dataclass(frozen=True)
class Reshard:
    model: str
    train: str
    rollout: str
    bus_bits: int = 64
    channels: int | None = None

    @property
    def name(self) -> str:
        ch = f" ch{self.channels}" if self.channels else ""
        return f"{self.model} {self.train} -> {self.rollout} @{self.bus_bits}b{ch}"


@dataclass(frozen=True)
class Collective:
    op: str
    devices: int
    nbytes: int
    bus_bits: int = 64

    @property
    def name(self) -> str:
        return f"ring {self.op} x{self.devices} {self.nbytes} B @{self.bus_bits}b"

    @property
    def steps(self) -> int:
        return (2 if self.op == "all_reduce" else 1) * (self.devices - 1)


CALIBRATION = (
    Reshard("tiny-qwen2", "fsdp2:dp=2", "vllm:tp=2"),
    Reshard("micro-qwen2", "fsdp2:dp=2", "vllm:tp=2"),
    Reshard("tiny-qwen2", "fsdp2:dp=2", "vllm:tp=1"),
    Collective("all_gather", 4, 4096),
    Collective("all_reduce", 4, 4096),
)
VALIDATION = (
    Reshard("micro-qwen2", "fsdp2:dp=4", "vllm:tp=2"),          # another model and world size
    Reshard("tiny-qwen2", "fsdp1:dp=2", "vllm:tp=2", bus_bits=128),   # another bus width
    Reshard("tiny-qwen2", "fsdp2:dp=4", "vllm:tp=2"),
    Collective("reduce_scatter", 4, 8192),
    Collective("all_reduce", 4, 16384),
)


def reshard_features(r: Reshard, out: Path):
    """Compile ``r`` into ``out``: (its features, the loaded directory)."""
    from gen.api import CompileOptions, compile_to
    loaded = compile_to(CompileOptions(model=r.model, train=r.train, rollout=r.rollout,
                                       bus_bits=r.bus_bits, channels=r.channels), out)
    report = [d["report"] for d in loaded.manifest["devices"]]
    return features_from_report(report, r.bus_bits // 8, loaded.arch.channels), loaded


def collective_arch(c: Collective):
    """The architecture a collective runs on: the command's small one, or larger when the buffer needs it."""
    from gen.coll_run import _layout, _need
    from gen.collectives import SMALL_ARCH_MEM, arch_for
    return arch_for(c.devices, max(SMALL_ARCH_MEM, _need(_layout(c.op, c.devices, c.nbytes, 4))))


def collective_features(c: Collective, channels: int = 4) -> Features:
    from gen.coll_programs import generate, port_bytes
    from gen.coll_run import ADD_OPS, _layout
    arch = collective_arch(c)
    lay = _layout(c.op, c.devices, c.nbytes, 4)
    progs = generate(arch, list(range(c.devices)), lay, "ring", ADD_OPS["float32"])
    ports = port_bytes(progs.transfers, arch.devices)
    beats = max(-(-v // (c.bus_bits // 8)) for d in ports for v in d.values())
    return Features(beats=beats, descriptors=0, steps=c.steps, channels=channels)


def measure(case, engine: str = "verilator") -> tuple[str, Features, int]:
    """Run one case on the RTL: (name, features, measured cycles)."""
    if isinstance(case, Collective):
        from gen.coll_run import run_synthetic
        oc = run_synthetic(case.op, case.devices, "ring", engine, case.bus_bits, arch=collective_arch(case),
                           nbytes=case.nbytes)
        if not oc.verified:
            raise RuntimeError(f"{case.name}: not verified on {engine}: {oc.problems}")
        feats = collective_features(case)
        if feats.beats != oc.lower_bound_cycles:      # the prediction's bound is the run's bound
            raise RuntimeError(f"{case.name}: predicted bound {feats.beats}, the run's {oc.lower_bound_cycles}")
        return case.name, feats, oc.cycles
    from gen.api import execute
    with tempfile.TemporaryDirectory(prefix="reshard-cal-") as tmp:
        feats, loaded = reshard_features(case, Path(tmp))
        res = execute(loaded, engine)
    if any(s != "HALTED" for s in res.status):
        raise RuntimeError(f"{case.name}: devices ended {res.status}")
    return case.name, feats, max(res.cycles_per_device)


def run_calibration(engine: str = "verilator", progress=lambda m: None) -> EngineCosts:
    runs = []
    for case in CALIBRATION:
        progress(f"calibration run: {case.name}")
        runs.append(measure(case, engine))
    return calibrate(runs)


def measure_validation(cases=VALIDATION, engine: str = "verilator", progress=lambda m: None) -> list:
    """Each validation case run on the RTL: (name, features, measured cycles)."""
    out = []
    for case in cases:
        progress(f"validation run: {case.name}")
        out.append(measure(case, engine))
    return out


def prediction_rows(costs: EngineCosts, measured: list) -> list[dict]:
    """Predicted against measured cycles and the relative error, for runs of :func:`measure_validation`."""
    return [{"run": name, "predicted_cycles": predict_cycles(feats, costs), "measured_cycles": cycles,
             "lower_bound_cycles": feats.beats, "error": (predict_cycles(feats, costs) - cycles) / cycles}
            for name, feats, cycles in measured]


def check_predictions(costs: EngineCosts, cases=VALIDATION, engine: str = "verilator",
                      progress=lambda m: None) -> list[dict]:
    """Each case's predicted and measured cycles and the relative error."""
    return prediction_rows(costs, measure_validation(cases, engine, progress))
