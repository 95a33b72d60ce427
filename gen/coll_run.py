"""Running collective programs: layouts, the architecture, one run on an engine, synthetic runs.

:func:`run_reduction` places per-rank input bytes in device memory (``gen.coll_programs``'
in-place layout), runs the programs on the golden model, the Amaranth RTL or the emitted
Verilog, and checks every rank's output against numpy's sum in the algorithm's own order
(``gen.coll_numerics``), bit for bit. :func:`run_synthetic` and :func:`algorithm_table` do it
for random fp32 data (the 4 KiB all-reduce, the table ``auto`` follows). The trace side is
``gen.collectives``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from gen.coll_numerics import tree_sum
from gen.coll_programs import ALGORITHMS, OPS, Layout, check_algorithm, chunk_bounds, generate, port_bytes, \
    summation_order
from hw.isa import ArchParams, Op
from model.errors import InputError

__all__ = ["ENGINES", "ELEM_BYTES", "ADD_OPS", "AUTO_DIRECT_MAX_BYTES", "choose_algorithm", "arch_for", "Outcome",
           "run_engine", "run_reduction", "run_synthetic", "small_allreduce", "algorithm_table"]

ENGINES = ("golden", "amaranth", "verilator")
ELEM_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8, "int64": 8, "int32": 4, "int16": 2,
              "int8": 1, "uint8": 1, "bool": 1}
ADD_OPS = {"float32": Op.COPY_ADD_F32, "bfloat16": Op.COPY_ADD_BF16}
ALIGN = 64
#: ``auto``: all-reduces of at most this many bytes on 4 or more ranks run direct
#: (docs/collectives.md: the table of cycles against message size it comes from)
AUTO_DIRECT_MAX_BYTES = 256


def _align(x: int, a: int = ALIGN) -> int:
    return -(-x // a) * a


def choose_algorithm(requested: str, op: str, nbytes: int, p: int) -> str:
    """The algorithm for ``op`` on a buffer of ``nbytes`` per rank over ``p`` ranks.

    ``auto`` follows the measured table in docs/collectives.md (Verilator, 64-bit bus): the direct
    all-gather is never slower than the others (every rank pushes to all at once); the direct
    reduce-scatter's local sum pass makes it the slowest; halving-doubling beats the ring (log2 p
    synchronisation rounds instead of p-1) and is the same program on 2 ranks; only a tiny
    all-reduce on 4 or more ranks is faster direct (one barrier round instead of 2 log2 p).
    """
    if requested != "auto":
        return requested
    big = "halving-doubling" if p >= 4 and p & (p - 1) == 0 else "ring"
    if op == "all_gather":
        return "direct"
    if op == "all_reduce" and p >= 4 and nbytes <= AUTO_DIRECT_MAX_BYTES:
        return "direct"
    return big


def _layout(op: str, p: int, buf_bytes: int, es: int) -> Layout:
    """All-reduces are split as gloo splits them (so the ring reproduces gloo's order)."""
    n = buf_bytes // es
    chunking = "gloo" if op == "all_reduce" else "even"
    b = chunk_bounds(n, p, es, chunking)
    max_chunk = max(b[j + 1] - b[j] for j in range(p)) * es
    slots = _align(buf_bytes)
    return Layout(op, p, n, es, buf=0, slots=slots, slot_stride=_align(max(max_chunk, 1)), chunking=chunking)


def _need(lay: Layout) -> int:
    return lay.slots + (lay.p - 1) * lay.slot_stride


def arch_for(devices: int, need: int) -> ArchParams:
    """The architecture: ``devices`` devices with a power-of-two memory of at least ``need`` bytes (16 KiB min)."""
    mem = 1 << max(14, (max(need, 1) - 1).bit_length())
    return ArchParams(devices=devices, mem_bytes=mem, addr_bits=max(32, (devices * mem - 1).bit_length()))


@dataclass
class Outcome:
    """What one collective's run gave."""
    algorithm: str
    cycles: int | None
    lower_bound_cycles: int
    network_bytes: int
    max_ulp_vs_verl: int | None
    verified: bool
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


def run_engine(engine: str, arch: ArchParams, programs, memories, bus_bits: int, progress=None):
    from gen.result import run_golden
    if engine == "golden":
        return run_golden(arch, programs, memories)
    if engine == "amaranth":
        from gen.sim_amaranth import run_system
        return run_system(arch, programs, memories, data_width=bus_bits)
    if engine == "verilator":
        from gen.sim_verilator import run_programs
        return run_programs(arch, bus_bits, programs, memories, progress=progress)
    raise InputError(f"--engine {engine!r}: use one of {', '.join(ENGINES)}")


def run_reduction(op: str, dtype: str, inputs: list[np.ndarray], algorithm: str, arch: ArchParams,
                  ranks: list[int], engine: str, bus_bits: int, progress=None):
    """Run ``op`` over per-rank input bytes; returns (outputs per rank as bytes, expected outputs in the
    algorithm's order, Outcome without the verl comparison)."""
    p = len(ranks)
    es = ELEM_BYTES[dtype]
    buf_bytes = len(inputs[0]) * (p if op == "all_gather" else 1)
    lay = _layout(op, p, buf_bytes, es)
    b = [x * es for x in lay.bounds]
    progs = generate(arch, ranks, lay, algorithm, ADD_OPS.get(dtype))
    mems = [np.zeros(arch.mem_bytes, np.uint8) for _ in range(arch.devices)]
    for s, dev in enumerate(ranks):
        at = b[s] if op == "all_gather" else 0
        mems[dev][at:at + len(inputs[s])] = inputs[s]
    t0 = time.perf_counter()
    res = run_engine(engine, arch, progs.words, mems, bus_bits, progress)
    seconds = time.perf_counter() - t0
    problems = []
    if any(st != "HALTED" for st in res.status) or res.faults:
        problems.append(f"devices ended {res.status} (causes {res.cause}, faults {res.faults[:2]})")
    outs, want = [], []
    for s, dev in enumerate(ranks):
        mem = res.memories[dev]
        if op == "all_gather":
            outs.append(mem[:buf_bytes].copy())
            want.append(np.concatenate(inputs))
        else:
            js = [s] if op == "reduce_scatter" else range(p)
            lo, hi = (b[s], b[s + 1]) if op == "reduce_scatter" else (0, buf_bytes)
            outs.append(mem[lo:hi].copy())
            want.append(np.concatenate([tree_sum(summation_order(algorithm, p, j),
                                                 [x[b[j]:b[j + 1]] for x in inputs], dtype) for j in js]))
        if not np.array_equal(outs[-1], want[-1]):
            bad = int(np.flatnonzero(outs[-1] != want[-1])[0])
            problems.append(f"rank {s}: output byte {bad} differs from numpy's sum in the {algorithm} order")
    ports = port_bytes(progs.transfers, arch.devices)
    lb = max(-(-v // (bus_bits // 8)) for d in ports for v in d.values())
    net = sum(d["net_in"] for d in ports)
    return outs, want, Outcome(algorithm, res.cycles, lb, net, None, not problems, problems, seconds)


def run_synthetic(op: str, p: int, algorithm: str, engine: str, bus_bits: int, arch: ArchParams | None = None,
                  nbytes: int = 4096, seed: int = 0, progress=None) -> Outcome:
    """``op`` over a ``nbytes`` fp32 buffer of random data on ``p`` devices, checked against numpy's
    sum in the algorithm's order (``auto`` resolved by :func:`choose_algorithm`)."""
    rng = np.random.default_rng(seed)
    n = nbytes // 4 // (p if op == "all_gather" else 1)
    ins = [(rng.standard_normal(n) * np.exp2(rng.integers(-8, 8, n))).astype(np.float32).view(np.uint8)
           for _ in range(p)]
    alg = choose_algorithm(algorithm, op, nbytes, p)
    arch = arch or arch_for(p, _need(_layout(op, p, nbytes, 4)))
    if _need(_layout(op, p, nbytes, 4)) > arch.mem_bytes:
        raise InputError(f"a {nbytes:,} B {op} needs more than the {arch.mem_bytes:,} B of device memory")
    _o, _w, oc = run_reduction(op, "float32", ins, alg, arch, list(range(p)), engine, bus_bits, progress)
    return oc


def small_allreduce(p: int, algorithm: str, engine: str, bus_bits: int, arch: ArchParams | None = None,
                    nbytes: int = 4096, seed: int = 0, progress=None) -> Outcome:
    """A ``nbytes`` fp32 all-reduce of random data over ``p`` devices (the fixed cost of a small message)."""
    return run_synthetic("all_reduce", p, algorithm, engine, bus_bits, arch, nbytes, seed, progress)


def algorithm_table(p: int, sizes: list[int], engine: str, bus_bits: int, arch: ArchParams,
                    ops=OPS, progress=None) -> list[dict]:
    """Cycles of every algorithm that runs on ``p`` devices, per op and buffer size (fp32, random data):
    the measurements ``auto``'s rule comes from."""
    rows = []
    for op in ops:
        for nbytes in sizes:
            row = {"op": op, "p": p, "bytes": nbytes, "auto": choose_algorithm("auto", op, nbytes, p)}
            for alg in ALGORITHMS:
                if check_algorithm(alg, p):
                    continue
                oc = run_synthetic(op, p, alg, engine, bus_bits, arch, nbytes)
                row[alg] = {"cycles": oc.cycles, "lower_bound_cycles": oc.lower_bound_cycles,
                            "verified": oc.verified}
                if progress:
                    progress(f"{op} {nbytes:,} B on {p} devices, {alg}: {oc.cycles} cycles "
                             f"(lower bound {oc.lower_bound_cycles}), {'ok' if oc.verified else 'FAILED'}")
            rows.append(row)
    return rows
