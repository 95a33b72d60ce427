"""The result of running programs on one executor, and the comparison of two.

Every executor (the golden model, the Amaranth simulator, the emitted Verilog
under Verilator) hands back a :class:`RunResult`: the final physical
memories, TLBs, statuses, causes, pcs, fault records and counters of every
device, plus what that executor measures (cycles, simulator speed, times).
:class:`RunResult` is the one place these fields are defined and normalised;
:func:`compare_results` is the one place two results are compared. The main
job, ``python -m gen sim`` and the tests use both.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, fields

import numpy as np

from hw.isa import Cause, Status

__all__ = ["RunResult", "END_STATE", "golden_result", "run_golden", "compare_results"]

#: the fields every executor must agree on (besides every byte of every memory)
END_STATE = ("status", "cause", "pc", "faults", "tlb", "bytes_copied", "descriptors", "bytes_remapped")


def _name(value, enum) -> str:
    if isinstance(value, str):
        return enum[value].name
    return enum(int(value)).name


def _fault_key(f: dict):
    return (f["device"], f["channel"], f["va"])


@dataclass
class RunResult:
    """Final state of every device after a run, per device lists.

    ``status`` and ``cause`` are names (given as enums, integers or names);
    ``memories`` are uint8 arrays; ``faults`` are sorted by device, channel and
    virtual address; ``tlb`` entries are dicts with ``index``, ``ctx``,
    ``staged``, ``size``, ``va``, ``pa``, ``dev`` and ``perm``.

    Fields an executor does not measure stay ``None``: the golden model counts
    no cycles, only the Amaranth simulator reads semaphores. ``result[key]``
    reads a field too (the form older callers use).
    """
    engine: str
    memories: list[np.ndarray]
    tlb: list[list[dict]]
    status: list[str]
    cause: list[str]
    pc: list[int]
    faults: list[dict]
    bytes_copied: list[int]
    descriptors: list[int]
    bytes_remapped: list[int]
    fault_overflow: list[int] | None = None
    semaphores: list[list[int]] | None = None
    cycles_per_device: list[int] | None = None
    # what the simulators measure
    lower_bound_cycles: int | None = None
    sim_cycles: int | None = None          # Amaranth: cycles simulated, start to read-back
    tb_cycles: int | None = None           # Verilator: the testbench's start-to-done count
    sim_cycles_per_s: float | None = None
    elaborate_seconds: float | None = None
    build_seconds: float | None = None
    build_cached: bool | None = None
    seconds: float = 0.0

    def __post_init__(self):
        self.status = [_name(s, Status) for s in self.status]
        self.cause = [_name(c, Cause) for c in self.cause]
        self.pc = [int(p) for p in self.pc]
        self.memories = [m if isinstance(m, np.ndarray) and m.dtype == np.uint8
                         else np.frombuffer(bytes(m), np.uint8).copy() for m in self.memories]
        self.faults = sorted(self.faults, key=_fault_key)
        for k in ("bytes_copied", "descriptors", "bytes_remapped"):
            setattr(self, k, [int(x) for x in getattr(self, k)])

    @property
    def devices(self) -> int:
        return len(self.status)

    @property
    def cycles(self) -> int | None:
        """Cycles of the longest-running device (``None`` where nothing counts cycles)."""
        if self.cycles_per_device is None:
            return None
        return max(self.cycles_per_device, default=0)

    def __getitem__(self, key: str):
        if key in _FIELDS or key in ("cycles", "devices"):
            return getattr(self, key)
        raise KeyError(key)

    def __contains__(self, key: str) -> bool:
        return (key in _FIELDS or key in ("cycles", "devices")) and getattr(self, key) is not None


_FIELDS = frozenset(f.name for f in fields(RunResult))


def golden_result(golden, seconds: float = 0.0) -> RunResult:
    """The :class:`RunResult` of a ``model.golden.GoldenResult``."""
    return RunResult("golden", golden.memories, golden.tlb, golden.status, golden.cause, golden.pc,
                     golden.faults, golden.bytes_copied, golden.descriptors, golden.bytes_remapped,
                     semaphores=[list(s) for s in golden.semaphores], seconds=seconds)


def run_golden(arch, programs, memories) -> RunResult:
    """Run programs on the golden model (``model.golden.GoldenSystem``)."""
    from model.golden import GoldenSystem
    t0 = time.perf_counter()
    res = GoldenSystem(arch, programs, memories).run()
    return golden_result(res, time.perf_counter() - t0)


def first_difference(a, b, chunk: int = 1 << 24) -> int | None:
    """The first byte offset where two equally long images differ (None: equal),
    compared a chunk at a time so gigabyte images need no gigabyte temporaries."""
    a = np.frombuffer(a, np.uint8) if not isinstance(a, np.ndarray) else a.reshape(-1)
    b = np.frombuffer(b, np.uint8) if not isinstance(b, np.ndarray) else b.reshape(-1)
    if a.size != b.size:
        return min(a.size, b.size)
    for lo in range(0, a.size, chunk):
        x, y = a[lo:lo + chunk], b[lo:lo + chunk]
        if not np.array_equal(x, y):
            return lo + int(np.flatnonzero(x != y)[0])
    return None


def _memory_diff(d: int, a: np.ndarray, b: np.ndarray, names: tuple[str, str]) -> str | None:
    if len(a) != len(b):
        return f"device {d}: memory sizes differ ({len(a)} != {len(b)})"
    first = first_difference(a, b)
    if first is None:
        return None
    hi = min(len(a), first + (1 << 20))
    bad = [first + int(i) for i in np.flatnonzero(a[first:hi] != b[first:hi])[:8]]
    return (f"device {d}: final memory differs at {bad} ({names[0]} {[int(a[i]) for i in bad]}, "
            f"{names[1]} {[int(b[i]) for i in bad]})")


def compare_results(a: RunResult, b: RunResult, *, cycles: bool = False, memories: bool = True,
                    keys: tuple[str, ...] = END_STATE) -> list[str]:
    """Every difference between two results, one readable line each (empty: they agree).

    Compares ``keys`` (the end state), every byte of every memory (unless
    ``memories`` is false) and, with ``cycles``, each device's cycle count
    (for two cycle-accurate executors of the same hardware).
    """
    names = (a.engine, b.engine)
    out = []
    for key in keys + (("cycles_per_device",) if cycles else ()):
        x, y = getattr(a, key), getattr(b, key)
        if x != y:
            out.append(f"{key} differs: {names[0]} {x!r} != {names[1]} {y!r}"[:300])
    if memories:
        if len(a.memories) != len(b.memories):
            out.append(f"memories of {len(a.memories)} != {len(b.memories)} devices")
        for d, (x, y) in enumerate(zip(a.memories, b.memories)):
            diff = _memory_diff(d, x, y, names)
            if diff:
                out.append(diff)
    return out
