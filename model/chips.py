"""Accelerator chips for the iteration model: datasheet facts as data.

Each bundled chip is a JSON file in ``model/configs/chips/`` whose
``sources`` object cites where every figure comes from (dense bf16 only: the
datasheets' headline figures are for 2:4 sparsity, twice the dense rate). A
user's chip is any JSON file with the same fields.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from model.errors import InputError

CHIP_DIR = Path(__file__).parent / "configs" / "chips"
FRACTIONS = ("compute", "hbm", "link", "internode")
_NUMBERS = ("bf16_tflops", "hbm_gbps", "hbm_gb", "link_gbps_per_direction", "chips_per_node",
            "internode_gbps_per_chip", "collective_latency_us")
_ENGINE = ("clock_mhz", "bus_bits", "channels")


def bundled_chips() -> list[str]:
    return sorted(p.stem for p in CHIP_DIR.glob("*.json"))


@dataclass(frozen=True)
class Engine:
    """The reshard IP as placed on a chip: its clock, bus width and DMA channels."""
    clock_mhz: float
    bus_bits: int
    channels: int

    @property
    def bytes_per_s(self) -> float:
        """One beat a cycle on each port."""
        return self.clock_mhz * 1e6 * self.bus_bits / 8


@dataclass(frozen=True)
class Chip:
    name: str
    title: str
    bf16_tflops: float
    hbm_gbps: float
    hbm_gb: float
    link_gbps_per_direction: float
    chips_per_node: int
    internode_gbps_per_chip: float
    collective_latency_us: float
    fractions: dict
    engine: Engine
    sources: dict = field(compare=False, hash=False, repr=False)

    # achievable rates, in SI units
    @property
    def flops(self) -> float:
        return self.bf16_tflops * 1e12 * self.fractions["compute"]

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_gbps * 1e9 * self.fractions["hbm"]

    def link_bytes_per_s(self, group: int) -> float:
        """Achievable per-chip bandwidth of a collective over ``group`` chips
        (NVLink inside a node, the NIC across nodes)."""
        if group <= self.chips_per_node:
            return self.link_gbps_per_direction * 1e9 * self.fractions["link"]
        return self.internode_gbps_per_chip * 1e9 * self.fractions["internode"]

    def with_engine(self, clock_mhz=None, bus_bits=None, channels=None) -> "Chip":
        e = self.engine
        eng = Engine(clock_mhz if clock_mhz is not None else e.clock_mhz,
                     bus_bits if bus_bits is not None else e.bus_bits,
                     channels if channels is not None else e.channels)
        _check_engine(eng, f"chip {self.name}")
        return Chip(**{**self.__dict__, "engine": eng})


def _check_engine(e: Engine, where: str) -> None:
    if e.clock_mhz <= 0 or e.bus_bits <= 0 or e.channels <= 0:
        raise InputError(f"{where}: the engine's clock, bus width and channels must be positive "
                         f"(got {e.clock_mhz} MHz, {e.bus_bits} bits, {e.channels} channels)")
    if e.bus_bits % 8:
        raise InputError(f"{where}: engine bus width {e.bus_bits} is not a whole number of bytes")


def chip_from_dict(d: dict, where: str) -> Chip:
    missing = [k for k in ("name", *_NUMBERS, "fractions", "engine") if k not in d]
    if missing:
        raise InputError(f"{where}: missing field(s) {', '.join(missing)}")
    for k in _NUMBERS:
        if not isinstance(d[k], (int, float)) or d[k] <= 0:
            raise InputError(f"{where}: field {k!r} must be a positive number, not {d[k]!r}")
    fr = d["fractions"]
    for k in FRACTIONS:
        v = fr.get(k) if isinstance(fr, dict) else None
        if not isinstance(v, (int, float)) or not 0 < v <= 1:
            raise InputError(f"{where}: field 'fractions.{k}' must be in (0, 1], not {v!r}")
    eng = d["engine"]
    if not isinstance(eng, dict) or any(k not in eng for k in _ENGINE):
        raise InputError(f"{where}: field 'engine' needs {', '.join(_ENGINE)}")
    engine = Engine(float(eng["clock_mhz"]), int(eng["bus_bits"]), int(eng["channels"]))
    _check_engine(engine, where)
    sources = d.get("sources", {})
    unsourced = [k for k in ("bf16_tflops", "hbm_gbps", "link_gbps_per_direction")
                 + tuple(f"fractions.{f}" for f in FRACTIONS) if k not in sources]
    if unsourced:
        raise InputError(f"{where}: 'sources' must cite {', '.join(unsourced)}")
    return Chip(name=str(d["name"]), title=str(d.get("title", d["name"])),
                **{k: d[k] for k in _NUMBERS}, fractions={k: float(fr[k]) for k in FRACTIONS},
                engine=engine, sources=sources)


def load_chip(name_or_path: str) -> Chip:
    """A bundled chip by name, or a JSON file with the same fields."""
    path = Path(name_or_path)
    if name_or_path.endswith(".json"):
        if not path.is_file():
            raise InputError(f"chip file {name_or_path} not found")
    else:
        path = CHIP_DIR / f"{name_or_path}.json"
        if not path.is_file():
            raise InputError(f"unknown chip {name_or_path!r}: use one of {', '.join(bundled_chips())} "
                             f"or a JSON file with the same fields")
    try:
        d = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
    if not isinstance(d, dict):
        raise InputError(f"{path}: a chip is a JSON object")
    return chip_from_dict(d, str(path))
