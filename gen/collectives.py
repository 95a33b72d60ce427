"""A verl trace's training collectives on the simulated hardware, checked against what gloo produced.

:func:`read_collectives` reads the trace's collective records of the chosen
phases, matches every rank's records of one call (per process group, in
issue order) and decides for each whether the hardware can run it: all-gathers
of any dtype, reduce-scatters and all-reduces of ``sum`` / ``avg`` over f32 or
bf16 (the ``COPY_ADD`` datapath). ``max`` / ``min`` / ``product``, integer and
other float dtypes are listed as not run, with the reason; ops the compiler
does not know are an :class:`InputError`.

:func:`run_collective` places every rank's buffers in its device's memory
(``gen.coll_programs``: in place, the same addresses on every device),
generates the programs, runs them on one engine and checks every output
buffer twice: against an independent numpy sum in the algorithm's own
summation order (bit for bit), and against verl's recorded output (bit for bit
for two ranks, within the bound of :func:`sum_order_bound` for more; ``avg``
is the hardware's sum scaled by 1/p on the host). See docs/collectives.md.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from gen.coll_programs import (ALGORITHMS, MAX_WORLD, OPS, Layout, check_algorithm, chunk_bounds, generate,
                               port_bytes, summation_order)
from hw.isa import ArchParams, Op
from model.errors import InputError

__all__ = ["Collective", "read_collectives", "choose_algorithm", "arch_for", "run_collective",
           "small_allreduce", "sum_order_bound", "ulp_distance", "tree_sum", "ENGINES", "AUTO_DIRECT_MAX_BYTES"]

ENGINES = ("golden", "amaranth", "verilator")
ELEM_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8, "int64": 8, "int32": 4, "int16": 2,
              "int8": 1, "uint8": 1, "bool": 1}
ADD_OPS = {"float32": Op.COPY_ADD_F32, "bfloat16": Op.COPY_ADD_BF16}
NOT_RUN_OPS = ("barrier",)
ALIGN = 64
#: ``auto``: all-reduces of at most this many bytes on 4 or more ranks run direct
#: (docs/collectives.md: the table of cycles against message size it comes from)
AUTO_DIRECT_MAX_BYTES = 256


def _align(x: int, a: int = ALIGN) -> int:
    return -(-x // a) * a


@dataclass
class Collective:
    """One collective call: the records of every rank of its group, in group-rank order."""
    index: int
    phase: str
    op: str
    dtype: str | None
    reduce_op: str | None
    ranks: list[int]
    bytes: int
    records: list[dict]
    reason: str | None = None          # why it is not run (None: it runs)

    @property
    def runs(self) -> bool:
        return self.reason is None

    @property
    def p(self) -> int:
        return len(self.ranks)

    def name(self) -> str:
        return f"#{self.index} {self.phase} {self.op}" + (f"({self.reduce_op})" if self.reduce_op else "")


def _not_run_reason(op: str, dtype: str | None, reduce_op: str | None, p: int) -> str | None:
    if op in NOT_RUN_OPS:
        return "a barrier moves no data"
    if op == "all_gather":
        return None
    if reduce_op not in ("sum", "avg"):
        return f"reduce op {reduce_op!r}: the reduce-on-write datapath only adds"
    if dtype not in ADD_OPS:
        return f"dtype {dtype}: the reduce-on-write datapath adds float32 and bfloat16 only"
    if reduce_op == "avg" and p & (p - 1):
        return f"avg over {p} ranks: 1/{p} is not an exact scale (only power-of-two groups)"
    return None


def read_collectives(trace, phases: list[str], world: int | None = None) -> tuple[dict, list[Collective]]:
    """The trace's header and its collectives of ``phases``, in issue order.

    Raises :class:`InputError` for an unreadable trace, a world the programs do
    not support (or that differs from ``world``), an unknown op or dtype, or
    ranks whose records of one call disagree.
    """
    from model.capture import read_trace
    t = read_trace(trace)
    header = t["header"]
    w = header.get("world")
    if not isinstance(w, int) or not 2 <= w <= MAX_WORLD:
        raise InputError(f"{trace}: world {w!r}: the collective programs run on 2..{MAX_WORLD} devices")
    if world is not None and world != w:
        raise InputError(f"{trace}: the trace's world is {w}, the hardware has {world} devices")
    known = header.get("phases") or sorted({r["phase"] for r in t["collectives"]})
    bad = [ph for ph in phases if ph not in known]
    if bad:
        raise InputError(f"--phase {','.join(bad)}: the trace's phases are {', '.join(known)}")
    groups: dict[tuple[int, ...], dict[int, list[dict]]] = {}
    for r in t["collectives"]:
        if r["phase"] not in phases:
            continue
        ranks = tuple(r["ranks"])
        if any(not isinstance(x, int) or not 0 <= x < w for x in ranks) or r["rank"] not in ranks:
            raise InputError(f"{trace}: collective rank {r['rank']} seq {r['seq']}: ranks {list(ranks)} "
                             f"do not fit world {w}")
        groups.setdefault(ranks, {x: [] for x in ranks})[r["rank"]].append(r)
    calls = []
    for ranks, per in groups.items():
        lists = [sorted(per[x], key=lambda r: r["seq"]) for x in ranks]
        if len({len(v) for v in lists}) != 1:
            raise InputError(f"{trace}: ranks {list(ranks)} issued different numbers of collectives "
                             f"({[len(v) for v in lists]}) in phases {','.join(phases)}")
        for recs in zip(*lists):
            first = recs[0]
            for r in recs[1:]:
                for k in ("op", "dtype", "reduce_op", "phase"):
                    if r.get(k) != first.get(k):
                        raise InputError(f"{trace}: collective seq {first['seq']} of rank {first['rank']} and "
                                         f"seq {r['seq']} of rank {r['rank']} disagree on {k}: "
                                         f"{first.get(k)!r} != {r.get(k)!r}")
            calls.append((min(r["t_us"] for r in recs), first["seq"], list(ranks), list(recs)))
    calls.sort(key=lambda c: (c[0], c[1]))
    out = []
    for i, (_t, _seq, ranks, recs) in enumerate(calls):
        r = recs[0]
        op, dtype = r["op"], r.get("dtype")
        where = f"{trace}: collective seq {r['seq']} of rank {r['rank']} ({r['phase']})"
        if op not in OPS and op not in NOT_RUN_OPS:
            raise InputError(f"{where}: op {op!r} is not supported (the compiler runs "
                             f"{', '.join(OPS)})")
        if op not in NOT_RUN_OPS and dtype not in ELEM_BYTES:
            raise InputError(f"{where}: dtype {dtype!r} is not supported ({', '.join(ELEM_BYTES)})")
        out.append(Collective(i, r["phase"], op, dtype, r.get("reduce_op"), ranks, int(r["bytes"]), recs,
                              _not_run_reason(op, dtype, r.get("reduce_op"), len(ranks))))
    return header, out


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


def buffer_bytes(c: Collective) -> int:
    """Bytes of the collective's buffer: the all-gather output, the reduce-scatter input, the all-reduce buffer."""
    return c.bytes * c.p if c.op == "reduce_scatter" else c.bytes


def arch_for(devices: int, need: int) -> ArchParams:
    """The architecture: ``devices`` devices with a power-of-two memory of at least ``need`` bytes (16 KiB min)."""
    mem = 1 << max(14, (max(need, 1) - 1).bit_length())
    return ArchParams(devices=devices, mem_bytes=mem, addr_bits=max(32, (devices * mem - 1).bit_length()))


def arch_for_trace(world: int, calls: list[Collective]) -> ArchParams:
    need = max((_need(_layout(c.op, c.p, buffer_bytes(c), ELEM_BYTES[c.dtype])) for c in calls if c.runs),
               default=0)
    return arch_for(world, need)


# ------------------------------------------------------------------ arithmetic references

def _to_bf16_bits(f32: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (nearest, ties to even) as uint16 patterns; NaN -> 0x7FC0."""
    u = f32.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f32), np.uint16(0x7FC0), r)


def _values(raw: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values of little-endian f32 or bf16 bytes (bf16 is exact in f32)."""
    if dtype == "float32":
        return raw.view(np.float32)
    return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def _bits(vals: np.ndarray, dtype: str) -> np.ndarray:
    """Bytes of float32 ``vals`` stored as ``dtype`` (rounded once for bf16), NaNs canonical."""
    if dtype == "float32":
        out = vals.astype(np.float32).view(np.uint32).copy()
        out[np.isnan(vals)] = 0x7FC00000
        return out.view(np.uint8)
    return _to_bf16_bits(vals).view(np.uint8)


def tree_sum(tree, parts: list[np.ndarray], dtype: str) -> np.ndarray:
    """numpy's sum of byte arrays ``parts`` (one per rank) in the order ``tree`` gives, as bytes."""
    def ev(t):
        if isinstance(t, int):
            return _values(parts[t], dtype)
        with np.errstate(all="ignore"):
            s = ev(t[0]) + ev(t[1])          # float32 + float32: IEEE binary32, nearest even
        return _values(_bits(s, dtype), dtype)   # rounded to the format after every add
    return _bits(ev(tree), dtype)


def ulp_distance(a: np.ndarray, b: np.ndarray, dtype: str) -> int:
    """Largest number of representable steps between ``a`` and ``b`` element by element (bytes of
    ``dtype``); bit patterns of ints compare exactly (0 or 1 step)."""
    if len(a) == 0:
        return 0
    if dtype not in ("float32", "bfloat16"):
        return 0 if np.array_equal(a, b) else 1
    w, sign = (np.uint32, 0x80000000) if dtype == "float32" else (np.uint16, 0x8000)
    ua, ub = a.view(w).astype(np.int64), b.view(w).astype(np.int64)

    def ordered(u):
        return np.where(u & sign, -(u & (sign - 1)), u)
    va, vb = _values(a, dtype), _values(b, dtype)
    nan = np.isnan(va) | np.isnan(vb)
    if np.any(np.isnan(va) != np.isnan(vb)):
        return 1 << 32
    d = np.abs(ordered(ua) - ordered(ub))
    return int(d[~nan].max(initial=0))


def sum_order_bound(inputs: list[np.ndarray], dtype: str) -> np.ndarray:
    """Largest |difference| (float64, per element) between two sums of the same p values in any two
    orders, each p-1 additions rounded to ``dtype``: every rounding is at most half an ulp of its
    partial sum, every partial sum is at most Y = sum |x_i| (1 + 2 p u), so each order is within
    (p-1)/2 ulp(Y) of the exact sum and two orders within (p-1) ulp(Y)."""
    p = len(inputs)
    mant, u = (23, 2.0 ** -24) if dtype == "float32" else (7, 2.0 ** -8)
    y = np.sum([np.abs(_values(x, dtype).astype(np.float64)) for x in inputs], axis=0) * (1 + 2 * p * u)
    _, e = np.frexp(y)
    ulp = np.ldexp(1.0, np.maximum(e - 1, -126) - mant)
    return np.where(y > 0, (p - 1) * ulp, 0.0)


# ------------------------------------------------------------------ running one collective

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


def _flat(tensors) -> np.ndarray:
    import torch
    if not tensors:
        return np.zeros(0, np.uint8)
    return np.concatenate([t.detach().contiguous().reshape(-1).view(torch.uint8).numpy() for t in tensors])


def load_data(data, c: Collective) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per group rank: (input bytes, verl's output bytes), sizes checked against the op."""
    ins, outs = [], []
    for r in c.records:
        i, o = data.tensors(r)
        ins.append(_flat(i))
        outs.append(_flat(o))
    p = c.p
    want_in = {"all_gather": lambda o: len(o) // p, "reduce_scatter": lambda o: len(o) * p,
               "all_reduce": lambda o: len(o)}[c.op]
    es = ELEM_BYTES[c.dtype]
    for s, (x, y) in enumerate(zip(ins, outs)):
        if len(x) != want_in(y) or len(y) % es or len(x) != len(ins[0]) or len(y) != c.bytes:
            raise InputError(f"{c.name()}: rank {c.ranks[s]}'s recorded tensors ({len(x)} B in, {len(y)} B out) "
                             f"do not fit a {c.op} of {c.bytes} B over {p} ranks")
    return ins, outs


def run_collective(c: Collective, data, algorithm: str, arch: ArchParams, engine: str, bus_bits: int,
                   progress=None) -> Outcome:
    """Run one trace collective and check it against the numpy order sum and verl's outputs."""
    ins, verl = load_data(data, c)
    outs, _want, oc = run_reduction(c.op, c.dtype, ins, algorithm, arch, c.ranks, engine, bus_bits, progress)
    p = c.p
    worst = 0
    # the ring all-reduce sums every element in gloo's ring all-reduce order (docs/collectives.md)
    gloo_order = c.op == "all_reduce" and algorithm == "ring"
    bound = sum_order_bound(ins, c.dtype) if c.op != "all_gather" and p > 2 else None
    b = [x * ELEM_BYTES[c.dtype] for x in _layout(c.op, p, buffer_bytes(c), ELEM_BYTES[c.dtype]).bounds]
    for s in range(p):
        host = outs[s]
        if c.reduce_op == "avg":
            host = _bits(_values(host, c.dtype) / np.float32(p), c.dtype)    # exact unless subnormal
        worst = max(worst, ulp_distance(host, verl[s], c.dtype))
        if c.op == "all_gather" or p == 2 or (gloo_order and c.reduce_op == "sum"):
            if not np.array_equal(host, verl[s]):
                oc.problems.append(f"rank {s}: differs from verl's recorded output (must be bit for bit)")
            continue
        lim = bound if c.op == "all_reduce" else bound[b[s] // ELEM_BYTES[c.dtype]:b[s + 1] // ELEM_BYTES[c.dtype]]
        if c.reduce_op == "avg":
            lim = lim / p + 2.0 ** -149
        diff = np.abs(_values(host, c.dtype).astype(np.float64) - _values(verl[s], c.dtype).astype(np.float64))
        if np.any(diff > lim):
            oc.problems.append(f"rank {s}: differs from verl's output by more than the summation-order bound")
    oc.max_ulp_vs_verl = worst
    oc.verified = not oc.problems
    return oc


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


def check_request(calls: list[Collective], algorithm: str) -> None:
    """An explicit algorithm that cannot run one of the collectives is an InputError."""
    if algorithm != "auto" and algorithm not in ALGORITHMS:
        raise InputError(f"--algorithm {algorithm!r}: use auto, {', '.join(ALGORITHMS)}")
    for c in calls:
        if c.runs and algorithm != "auto":
            why = check_algorithm(algorithm, c.p)
            if why:
                raise InputError(f"--algorithm {algorithm}: {c.name()}: {why}")
