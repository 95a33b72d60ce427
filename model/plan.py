"""Transfer plans from the training layout to the rollout layout.

Schemes:

- ``minimal``: each rank receives exactly the elements of its rollout shard
  it does not hold, each once, from a holder in its own training replica;
  local elements are local copies (or, later, page remaps). Transfers are
  2-D strided runs (rows x row elements, source and destination strides).
- ``verl``: what verl 0.9.1 does: every parameter all-gathered in full to
  every rank, so rank r receives numel - held_r(p) elements of every p.
- ``hybridflow``: the HybridFlow paper's micro-DP all-gather (arXiv
  2409.19256, section 5) from ``megatron:tp=t,pp=p,dp=d`` to generation
  ``vllm:tp=t_g,pp=p_g``: micro-DP groups of d_g = (t/t_g)(p/p_g)
  consecutive ranks all-gather their training shards.

Offsets are in elements of the source rank's training buffer and of the
destination rank's rollout buffer (see :mod:`model.layouts`).
"""
from __future__ import annotations

import bisect
import gc
import time
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Callable, Iterable, NamedTuple, TypeVar

from model.errors import InputError
from model.layouts import Layout, Piece, rollout_layout, training_layout, vllm_ranks, vllm_tensor_shapes
from model.models import ModelSpec
from model.specs import DTYPE_BYTES, ParallelSpec

SCHEMES = ("minimal", "verl", "hybridflow")
R = TypeVar("R", bound=tuple)


#: the fields of a strided run that :func:`coalesce` reads and extends
GEOMETRY = ("src_off", "dst_off", "rows", "row_elems", "src_stride", "dst_stride")


class Run(NamedTuple):
    """One strided run into a destination rank: ``rows`` rows of ``row_elems``
    elements, read from rank ``src``'s training buffer at ``src_off`` (rows
    ``src_stride`` apart) and written to the destination's rollout buffer at
    ``dst_off`` (rows ``dst_stride`` apart). A single row has both strides
    equal to its length. Offsets and strides are in elements."""
    src: int
    param: str
    src_off: int
    dst_off: int
    rows: int
    row_elems: int
    src_stride: int
    dst_stride: int

    @property
    def numel(self) -> int:
        return self.rows * self.row_elems

    def into(self, dst: int) -> "Transfer":
        """This run as a :class:`Transfer` into rank ``dst``."""
        return Transfer(src=self.src, dst=dst, param=self.param, src_off=self.src_off, dst_off=self.dst_off,
                        rows=self.rows, row_elems=self.row_elems, src_stride=self.src_stride,
                        dst_stride=self.dst_stride)


class Transfer(NamedTuple):
    """One strided run with its destination: ``rows`` rows of ``row_elems`` elements."""
    src: int
    dst: int
    param: str
    src_off: int
    dst_off: int
    rows: int
    row_elems: int
    src_stride: int
    dst_stride: int

    @property
    def numel(self) -> int:
        return self.rows * self.row_elems

    @property
    def local(self) -> bool:
        return self.src == self.dst

    def to_json(self, elem_bytes: int) -> dict:
        e = elem_bytes
        return {"src": self.src, "dst": self.dst, "param": self.param,
                "src_offset": self.src_off * e, "dst_offset": self.dst_off * e,
                "rows": self.rows, "row_bytes": self.row_elems * e,
                "src_stride": self.src_stride * e, "dst_stride": self.dst_stride * e}


@dataclass
class Plan:
    """A transfer plan: bytes per rank and, for the ``minimal`` scheme, every run.

    ``runs[g]`` lists the runs into rank ``g`` in order (ranks that receive
    the same shard from the same replica group share one list); the other
    schemes only count bytes and have no runs.
    """
    scheme: str
    model: ModelSpec
    train: ParallelSpec
    rollout: ParallelSpec
    dtype: str
    bytes_in: list[int]
    bytes_out: list[int]
    local_bytes: list[int]
    runs: list[list[Run]] | None = None
    train_layout: Layout | None = None
    rollout_layout: Layout | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0                # time make_plan took
    _transfers: list[Transfer] | None = field(default=None, init=False, repr=False)

    def runs_into(self, g: int) -> list[Run]:
        """The runs into rank ``g`` (empty for schemes that only count bytes)."""
        return self.runs[g] if self.runs else []

    @property
    def transfers(self) -> list[Transfer]:
        """Every run with its destination, materialised on first use (millions for a 70B model)."""
        if self._transfers is None:
            self._transfers = [r.into(g) for g, rs in enumerate(self.runs or []) for r in rs]
        return self._transfers

    @property
    def num_transfers(self) -> int:
        return sum(len(rs) for rs in self.runs or [])

    def rollout_tensors(self, g: int) -> list[tuple[str, tuple[int, ...], int]]:
        """vLLM's tensors on rank ``g``: (name, local shape, offset in the rollout buffer)."""
        _, stage, t = vllm_ranks(self.rollout, g)
        return vllm_tensor_shapes(self.model, self.rollout, t, stage)

    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def world(self) -> int:
        return len(self.bytes_in)

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes_in)

    def summary(self) -> dict:
        return {
            "scheme": self.scheme, "model": self.model.name, "train": str(self.train),
            "rollout": str(self.rollout), "dtype": self.dtype, "world": self.world,
            "bytes_in_per_rank": self.bytes_in, "bytes_out_per_rank": self.bytes_out,
            "local_bytes_per_rank": self.local_bytes,
            "total_bytes": self.total_bytes, "max_rank_bytes_in": max(self.bytes_in),
            "num_transfers": self.num_transfers, "notes": self.notes,
        }

    def to_json(self) -> dict:
        d = self.summary()
        d["transfers"] = [t.to_json(self.elem_bytes) for t in self.transfers]
        return d


def make_plan(model: ModelSpec, train: ParallelSpec, rollout: ParallelSpec,
              dtype: str = "bf16", scheme: str = "minimal") -> Plan:
    if scheme not in SCHEMES:
        raise InputError(f"unknown scheme {scheme!r}: use one of {', '.join(SCHEMES)}")
    if dtype not in DTYPE_BYTES:
        raise InputError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPE_BYTES)}")
    t0 = time.perf_counter()
    build = {"minimal": _minimal, "verl": _verl, "hybridflow": _hybridflow}[scheme]
    # A 70B plan allocates millions of runs and layout pieces and no reference cycles:
    # pause the cyclic garbage collector, which would otherwise rescan them over and over.
    paused = gc.isenabled()
    gc.disable()
    try:
        tl = training_layout(model, train)
        rl = rollout_layout(model, rollout, tl.world)
        plan = build(model, train, rollout, dtype, tl, rl)
    finally:
        if paused:
            gc.enable()
    plan.seconds = time.perf_counter() - t0
    return plan


# ---------------------------------------------------------------- minimal

class _HolderIndex:
    """Training pieces of one parameter within one replica group, by rows.

    Identical boxes held by several ranks (replicated tensors) are one entry
    with several holders.
    """

    def __init__(self):
        self.boxes: dict[tuple, list[tuple[int, Piece]]] = {}

    def add(self, rank: int, p: Piece):
        self.boxes.setdefault((p.r0, p.r1, p.c0, p.c1), []).append((rank, p))

    def freeze(self):
        self.keys = sorted(self.boxes)
        self.r0s = [k[0] for k in self.keys]
        self.max_rows = max((k[1] - k[0] for k in self.keys), default=0)

    def overlapping(self, r0: int, r1: int):
        # boxes sorted by r0; a box overlaps iff r0_box < r1 and r1_box > r0
        lo = bisect.bisect_left(self.r0s, r0 - self.max_rows + 1)
        hi = bisect.bisect_left(self.r0s, r1)
        for i in range(lo, hi):
            k = self.keys[i]
            if k[1] > r0:
                yield k, self.boxes[k]


def _minimal(model, train, rollout, dtype, tl: Layout, rl: Layout) -> Plan:
    world = tl.world
    es = DTYPE_BYTES[dtype]
    indexes: dict[tuple[tuple[int, ...], str], _HolderIndex] = {}
    for group in sorted(set(tl.replica_of)):
        per_param: dict[str, _HolderIndex] = {}
        for r in group:
            for p in tl.ranks[r].pieces:
                per_param.setdefault(p.param, _HolderIndex()).add(r, p)
        for name, idx in per_param.items():
            idx.freeze()
            indexes[(group, name)] = idx
    # Ranks with the same rollout shard and replica group receive the same runs
    # (only which of them are local differs), so each distinct pair is planned once.
    templates: dict[tuple, list[Run]] = {}
    runs: list[list[Run]] = []
    bytes_in = [0] * world
    bytes_out = [0] * world
    local = [0] * world
    by_src_cache: dict[tuple, dict[int, int]] = {}
    for g in range(world):
        group = tl.replica_of[g]
        pieces = rl.ranks[g].pieces
        replicated = any(len(h) > 1 for idx in (indexes[(group, q.param)] for q in pieces)
                         for h in idx.boxes.values()) if train.kind == "megatron" else False
        key = (id(pieces), group, g if replicated else None)
        if key not in templates:
            templates[key] = _plan_one(g, group, pieces, indexes)
            by_src: dict[int, int] = {}
            for t in templates[key]:
                by_src[t.src] = by_src.get(t.src, 0) + t.numel * es
            by_src_cache[key] = by_src
        runs.append(templates[key])
        for src, b in by_src_cache[key].items():
            if src == g:
                local[g] += b
            else:
                bytes_in[g] += b
                bytes_out[src] += b
    return Plan("minimal", model, train, rollout, dtype, bytes_in, bytes_out, local, runs=runs,
                train_layout=tl, rollout_layout=rl)


def _plan_one(g: int, group, pieces, indexes) -> list[Run]:
    """The runs into rank g, coalesced."""
    mine: list[Run] = []
    append = mine.append
    for q in pieces:
        idx = indexes.get((group, q.param))
        if idx is None:
            raise AssertionError(f"no holder of {q.param} in {group}")
        qr0, qr1, qc0, qc1, qoff, qs = q.r0, q.r1, q.c0, q.c1, q.offset, q.stride
        for (r0, r1, c0, c1), holders in idx.overlapping(qr0, qr1):
            a0 = r0 if r0 > qr0 else qr0
            a1 = r1 if r1 < qr1 else qr1
            b0 = c0 if c0 > qc0 else qc0
            b1 = c1 if c1 < qc1 else qc1
            if a0 >= a1 or b0 >= b1:
                continue
            src, sp = holders[0]
            if len(holders) > 1:
                ranks = [h[0] for h in holders]
                src, sp = holders[ranks.index(g)] if g in ranks else holders[g % len(holders)]
            rows, n = a1 - a0, b1 - b0
            ss = sp.stride
            so = sp.offset + (a0 - sp.r0) * ss + (b0 - sp.c0)
            do = qoff + (a0 - qr0) * qs + (b0 - qc0)
            ds = qs
            if rows > 1 and ss == n and ds == n:
                n, rows = n * rows, 1
            if rows == 1:
                ss = ds = n
            append(Run(src, q.param, so, do, rows, n, ss, ds))
    return coalesce(mine)


def same_source(a: Run, b: Run) -> bool:
    """Runs of one plan may merge when they read the same parameter on the same rank."""
    return a.src == b.src and a.param == b.param


def coalesce(runs: Iterable[R], *, same: Callable[[R, R], bool] = same_source,
             fields: tuple[str, ...] = GEOMETRY, max_stride: int | None = None) -> list[R]:
    """Merge strided runs that continue each other, in the order given.

    A run is a NamedTuple whose ``fields`` name its source offset, destination
    offset, rows, row length, source stride and destination stride (in that
    order; :data:`GEOMETRY` for a :class:`Run`). A single row that continues
    the previous run contiguously on both sides extends it; a single row of
    the same length one stride further on both sides adds a row to a 2-D run.
    Only runs with ``same(previous, next)`` merge; with ``max_stride``, no
    merged stride reaches it (a hardware field's range). The plan and the
    compiler's DMA descriptors both coalesce here.
    """
    get = attrgetter(*fields)
    f_so, f_do, f_rows, f_n, f_ss, f_ds = fields
    out: list = []
    prev = None               # geometry of out[-1]
    for t in runs:
        cur = get(t)
        if prev is not None and cur[2] == 1 and same(out[-1], t):
            pso, pdo, prows, pn, pss, pds = prev
            tso, tdo, _, tn, _, _ = cur
            if prows == 1 and pso + pn == tso and pdo + pn == tdo:
                n = pn + tn
                prev = (pso, pdo, 1, n, n, n)
                out[-1] = out[-1]._replace(**{f_n: n, f_ss: n, f_ds: n})
                continue
            if tn == pn:
                ss, ds = (tso - pso, tdo - pdo) if prows == 1 else (pss, pds)
                if (ss >= pn and ds >= pn and tso == pso + prows * ss and tdo == pdo + prows * ds
                        and (max_stride is None or (ss < max_stride and ds < max_stride))):
                    prev = (pso, pdo, prows + 1, pn, ss, ds)
                    out[-1] = out[-1]._replace(**{f_rows: prows + 1, f_ss: ss, f_ds: ds})
                    continue
        out.append(t)
        prev = cur
    return out


# ---------------------------------------------------------------- verl

def _verl(model, train, rollout, dtype, tl: Layout, rl: Layout) -> Plan:
    """Every parameter all-gathered in full to every rank (get_per_tensor_param).

    Rank g receives numel - held_g(p) of every parameter p; what it receives
    is attributed to the other ranks of its replica group in proportion to
    what they hold (exact for FSDP, where the group partitions each tensor).
    """
    import numpy as np
    world = tl.world
    es = DTYPE_BYTES[dtype]
    names = [p.name for p in model.params]
    col = {n: i for i, n in enumerate(names)}
    numel = np.array([p.numel for p in model.params], dtype=np.float64)
    H = np.zeros((world, len(names)), dtype=np.float64)
    for r, rl_ in enumerate(tl.ranks):
        for name, n in rl_.held().items():
            H[r, col[name]] += n
    need = numel[None, :] - H
    bytes_in = [int(x) * es for x in need.sum(axis=1)]
    out = np.zeros(world, dtype=np.float64)
    for group in sorted(set(tl.replica_of)):
        idx = np.array(group)
        Hg = H[idx]                           # holders of this group
        tot = Hg.sum(axis=0)
        for gi, g in enumerate(group):
            others = tot - Hg[gi]
            share = np.divide(need[g], others, out=np.zeros_like(others), where=others > 0)
            contrib = Hg * share[None, :]
            contrib[gi] = 0
            out[idx] += contrib.sum(axis=1)
    bytes_out = [int(round(x)) * es for x in out]
    plan = Plan("verl", model, train, rollout, dtype, bytes_in, bytes_out, [0] * world,
                train_layout=tl, rollout_layout=rl)
    plan.notes.append("per-parameter full all-gather to every rank (verl 0.9.1 FSDP engine "
                      "get_per_tensor_param -> full_tensor); vLLM then keeps its slice")
    return plan


# ---------------------------------------------------------------- hybridflow

def hybridflow_groups(train: ParallelSpec, rollout: ParallelSpec) -> list[list[int]]:
    """Micro-DP groups: consecutive ranks sharing (d, t_i div (t/t_g), p_i div (p/p_g))."""
    t, p, d = train.tp, train.pp, train.dp
    tg, pg = rollout.tp, rollout.pp
    groups: dict[tuple, list[int]] = {}
    from model.layouts import megatron_rank
    for pi in range(p):
        for di in range(d):
            for ti in range(t):
                key = (di, ti // (t // tg), pi // (p // pg))
                groups.setdefault(key, []).append(megatron_rank(train, ti, di, pi))
    return [sorted(g) for g in groups.values()]


def _hybridflow(model, train, rollout, dtype, tl: Layout, rl: Layout) -> Plan:
    if train.kind != "megatron":
        raise InputError(f"scheme 'hybridflow' needs a megatron training spec, not {str(train)!r}")
    if train.tp % rollout.tp or train.pp % rollout.pp:
        raise InputError(f"scheme 'hybridflow' needs rollout tp={rollout.tp} dividing train tp={train.tp} "
                         f"and rollout pp={rollout.pp} dividing train pp={train.pp}")
    es = DTYPE_BYTES[dtype]
    world = tl.world
    shard = [sum(r.held().values()) * es for r in tl.ranks]
    bytes_in = [0] * world
    bytes_out = [0] * world
    groups = hybridflow_groups(train, rollout)
    for grp in groups:
        for g in grp:
            for s in grp:
                if s != g:
                    bytes_in[g] += shard[s]
                    bytes_out[s] += shard[s]
    plan = Plan("hybridflow", model, train, rollout, dtype, bytes_in, bytes_out, [0] * world,
                train_layout=tl, rollout_layout=rl)
    d_g = (train.tp // rollout.tp) * (train.pp // rollout.pp)
    plan.notes.append(f"micro-DP all-gather, d_g={d_g}: per-GPU volume (d_g-1)/(t*p)*M")
    return plan
