"""Who holds which bytes: exact per-rank layouts of training and rollout shards.

A rank's shard is one flat *buffer* of elements. A :class:`Piece` says that
a box of one HF parameter (rows [r0, r1) x cols [c0, c1) of its row-major
2-D view; 1-D parameters are one row) lives in the buffer at ``offset`` with
``stride`` elements between rows. Elements of a buffer that no piece covers
are padding (zero).

The rules are DESIGN.md's, followed exactly:

- FSDP2: ``Shard(0)`` with ``torch.chunk`` semantics, per parameter.
- FSDP1 (``use_orig_params=False``): per wrap unit (root: embedding, final
  norm, lm_head; then one unit per decoder layer) the flattened parameters
  are concatenated in registration order, zero-padded to a multiple of N,
  and rank r holds flat elements [r*S, (r+1)*S).
- Megatron: TP column-parallel (fused QKV by query group, fc1 = [gate; up]),
  row-parallel, vocab-parallel; PP by contiguous layer ranges; rank order
  tp-cp-ep-dp-pp; every DP replica holds the same shards.
- vLLM: column-parallel fused ``qkv_proj`` [q | k | v] with KV-head
  replication when tp > n_kv, ``gate_up_proj`` [gate | up], row-parallel
  o/down, replicated norms, vocab padded to a multiple of 64.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from model.errors import InputError
from model.models import ModelSpec, Param
from model.specs import ParallelSpec

VLLM_VOCAB_PADDING = 64
MEGATRON_VOCAB_DIVISOR = 128   # make-vocab-size-divisible-by (times tp)


@dataclass(frozen=True)
class Piece:
    param: str
    r0: int
    r1: int
    c0: int
    c1: int
    offset: int
    stride: int

    @property
    def numel(self) -> int:
        return (self.r1 - self.r0) * (self.c1 - self.c0)

    def flat_ranges(self, cols: int) -> list[tuple[int, int]]:
        """Global flat element ranges [start, stop) this piece covers."""
        if self.numel == 0:
            return []
        if self.c0 == 0 and self.c1 == cols:
            return [(self.r0 * cols, self.r1 * cols)]
        return [(r * cols + self.c0, r * cols + self.c1) for r in range(self.r0, self.r1)]


@dataclass(frozen=True)
class RankLayout:
    rank: int
    pieces: tuple[Piece, ...]
    size: int                     # buffer elements, padding included
    # FSDP1 only: unit name -> (buffer offset, flat start, flat stop)
    units: tuple[tuple[str, int, int, int], ...] = ()

    def held(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.pieces:
            out[p.param] = out.get(p.param, 0) + p.numel
        return out


@dataclass(frozen=True)
class Layout:
    spec: ParallelSpec
    ranks: tuple[RankLayout, ...]
    # rank -> the ranks that together hold one full copy (its replica group)
    replica_of: tuple[tuple[int, ...], ...]

    @property
    def world(self) -> int:
        return len(self.ranks)


# ---------------------------------------------------------------- parameters

_LAYER = re.compile(r"model\.layers\.(\d+)\.(.+)")
_KINDS = {
    "self_attn.q_proj.weight": "q", "self_attn.q_proj.bias": "q_bias",
    "self_attn.k_proj.weight": "k", "self_attn.k_proj.bias": "k_bias",
    "self_attn.v_proj.weight": "v", "self_attn.v_proj.bias": "v_bias",
    "self_attn.o_proj.weight": "o", "self_attn.o_proj.bias": "o_bias",
    "mlp.gate_proj.weight": "gate", "mlp.up_proj.weight": "up",
    "mlp.down_proj.weight": "down",
    "input_layernorm.weight": "norm", "post_attention_layernorm.weight": "norm",
}


def classify(name: str) -> tuple[int | None, str]:
    """(layer index or None, kind) of an HF parameter name."""
    if name == "model.embed_tokens.weight":
        return None, "embed"
    if name == "lm_head.weight":
        return None, "lm_head"
    if name == "model.norm.weight":
        return None, "final_norm"
    m = _LAYER.fullmatch(name)
    if m and m.group(2) in _KINDS:
        return int(m.group(1)), _KINDS[m.group(2)]
    raise InputError(f"unsupported parameter {name!r}: not a Llama/Qwen2-style decoder parameter")


def _box_full(p: Param) -> tuple[int, int, int, int]:
    return 0, p.rows, 0, p.cols


# ---------------------------------------------------------------- validation

def check_rollout(model: ModelSpec, rollout: ParallelSpec, world: int):
    t = rollout.tp
    if model.heads % t:
        raise InputError(f"rollout tp={t} does not divide the {model.heads} attention heads of {model.name}")
    if model.intermediate % t:
        raise InputError(f"rollout tp={t} does not divide intermediate_size {model.intermediate} of {model.name}")
    if model.kv_heads % t and t % model.kv_heads:
        raise InputError(f"rollout tp={t} and the {model.kv_heads} KV heads of {model.name}: "
                         f"one must divide the other")
    padded = -(-model.vocab // VLLM_VOCAB_PADDING) * VLLM_VOCAB_PADDING
    if padded % t:
        raise InputError(f"rollout tp={t} does not divide the padded vocabulary {padded} "
                         f"({model.vocab} rounded up to a multiple of {VLLM_VOCAB_PADDING})")
    if rollout.pp > 1 and model.layers % rollout.pp:
        raise InputError(f"rollout pp={rollout.pp} does not divide the {model.layers} layers of {model.name}")
    if world % rollout.world:
        raise InputError(f"world {world} is not a multiple of rollout tp*pp={rollout.world}")


def check_train(model: ModelSpec, train: ParallelSpec):
    if train.kind == "megatron":
        t = train.tp
        if model.heads % t or model.kv_heads % t:
            raise InputError(f"megatron tp={t} must divide the {model.heads} heads and "
                             f"{model.kv_heads} KV heads (query groups) of {model.name}")
        if model.intermediate % t:
            raise InputError(f"megatron tp={t} does not divide intermediate_size {model.intermediate}")
        if model.layers % train.pp:
            raise InputError(f"megatron pp={train.pp} does not divide the {model.layers} layers of {model.name}")


# ---------------------------------------------------------------- training

def training_layout(model: ModelSpec, train: ParallelSpec) -> Layout:
    check_train(model, train)
    if train.kind == "fsdp2":
        return _fsdp2(model, train)
    if train.kind == "fsdp1":
        return _fsdp1(model, train)
    return _megatron(model, train)


def _everyone(n: int) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(range(n)) for _ in range(n))


def _fsdp2(model: ModelSpec, spec: ParallelSpec) -> Layout:
    n = spec.dp
    pieces: list[list[Piece]] = [[] for _ in range(n)]
    off = [0] * n
    for p in model.params:
        n0 = p.shape[0]
        c = -(-n0 // n)
        for r in range(n):
            a, b = min(r * c, n0), min((r + 1) * c, n0)
            if b <= a:
                continue
            if len(p.shape) == 1:
                piece = Piece(p.name, 0, 1, a, b, off[r], p.cols)
            else:
                piece = Piece(p.name, a, b, 0, p.cols, off[r], p.cols)
            pieces[r].append(piece)
            off[r] += piece.numel
    ranks = tuple(RankLayout(r, tuple(pieces[r]), off[r]) for r in range(n))
    return Layout(spec, ranks, _everyone(n))


def fsdp1_units(model: ModelSpec) -> list[tuple[str, list[Param]]]:
    """Wrap units in order: the root unit, then one per decoder layer."""
    root, layers = [], [[] for _ in range(model.layers)]
    for p in model.params:
        layer, _ = classify(p.name)
        (root if layer is None else layers[layer]).append(p)
    units = [("root", root)]
    units += [(f"model.layers.{i}", ps) for i, ps in enumerate(layers)]
    return units


def _flat_pieces(p: Param, start: int, stop: int, offset: int) -> list[Piece]:
    """Pieces covering global flat elements [start, stop) of p, stored contiguously."""
    cols = p.cols
    out = []
    pos = start
    while pos < stop:
        r, c = divmod(pos, cols)
        if c == 0 and stop - pos >= cols:
            nrows = (stop - pos) // cols
            out.append(Piece(p.name, r, r + nrows, 0, cols, offset + pos - start, cols))
            pos += nrows * cols
        else:
            end = min(stop, (r + 1) * cols)
            out.append(Piece(p.name, r, r + 1, c, end - r * cols, offset + pos - start, cols))
            pos = end
    return out


def _fsdp1(model: ModelSpec, spec: ParallelSpec) -> Layout:
    n = spec.dp
    pieces: list[list[Piece]] = [[] for _ in range(n)]
    units: list[list[tuple]] = [[] for _ in range(n)]
    off = 0    # every rank's buffer grows by the same S per unit
    for uname, params in fsdp1_units(model):
        total = sum(p.numel for p in params)
        padded = -(-total // n) * n
        s = padded // n
        for r in range(n):
            lo, hi = r * s, (r + 1) * s
            units[r].append((uname, off, lo, hi))
            base = 0
            for p in params:
                a, b = max(lo, base), min(hi, base + p.numel)
                if a < b:
                    pieces[r].extend(_flat_pieces(p, a - base, b - base, off + a - lo))
                base += p.numel
        off += s
    ranks = tuple(RankLayout(r, tuple(pieces[r]), off, tuple(units[r])) for r in range(n))
    return Layout(spec, ranks, _everyone(n))


def megatron_rank(spec: ParallelSpec, tp: int, dp: int, pp: int) -> int:
    """Megatron's default rank order tp-cp-ep-dp-pp (cp = ep = 1)."""
    return tp + spec.tp * (dp + spec.dp * pp)


def _megatron(model: ModelSpec, spec: ParallelSpec) -> Layout:
    t, pp_n = spec.tp, spec.pp
    per_stage = model.layers // pp_n
    hd, groups = model.head_dim, model.kv_heads
    qpk = model.heads // groups
    g_per = groups // t
    inter_per = model.intermediate // t
    vocab_pad = -(-model.vocab // (MEGATRON_VOCAB_DIVISOR * t)) * (MEGATRON_VOCAB_DIVISOR * t)
    vper = vocab_pad // t
    by_layer: dict[int, dict[str, Param]] = {}
    glob: dict[str, Param] = {}
    for p in model.params:
        layer, kind = classify(p.name)
        if layer is None:
            glob[kind] = p
        else:
            by_layer.setdefault(layer, {})[kind] = p

    def stage_pieces(ti: int, stage: int) -> tuple[list[Piece], int]:
        out: list[Piece] = []
        off = 0

        def add(p: Param, r0, r1, c0, c1, stride=None):
            nonlocal off
            stride = (c1 - c0) if stride is None else stride
            if r1 > r0 and c1 > c0:
                out.append(Piece(p.name, r0, r1, c0, c1, off, stride))
            off += (r1 - r0) * stride if len(p.shape) == 2 else (c1 - c0)

        def vocab(p: Param):
            nonlocal off
            a, b = min(ti * vper, model.vocab), min((ti + 1) * vper, model.vocab)
            if b > a:
                out.append(Piece(p.name, a, b, 0, p.cols, off, p.cols))
            off += vper * p.cols

        if stage == 0:
            vocab(glob["embed"])
        for layer in range(stage * per_stage, (stage + 1) * per_stage):
            ps = by_layer[layer]
            for suffix in ("", "_bias"):
                if "q" + suffix not in ps:
                    continue
                q, k, v = ps["q" + suffix], ps["k" + suffix], ps["v" + suffix]
                for g in range(ti * g_per, (ti + 1) * g_per):
                    if suffix:
                        add(q, 0, 1, g * qpk * hd, (g + 1) * qpk * hd)
                        add(k, 0, 1, g * hd, (g + 1) * hd)
                        add(v, 0, 1, g * hd, (g + 1) * hd)
                    else:
                        add(q, g * qpk * hd, (g + 1) * qpk * hd, 0, q.cols, q.cols)
                        add(k, g * hd, (g + 1) * hd, 0, k.cols, k.cols)
                        add(v, g * hd, (g + 1) * hd, 0, v.cols, v.cols)
            o = ps["o"]
            w = o.cols // t
            add(o, 0, o.rows, ti * w, (ti + 1) * w)
            if "o_bias" in ps:
                add(ps["o_bias"], 0, 1, 0, ps["o_bias"].cols)
            for kind in ("gate", "up"):
                p = ps[kind]
                add(p, ti * inter_per, (ti + 1) * inter_per, 0, p.cols, p.cols)
            d = ps["down"]
            add(d, 0, d.rows, ti * inter_per, (ti + 1) * inter_per)
            for p in model.params:
                if p.name.startswith(f"model.layers.{layer}.") and classify(p.name)[1] == "norm":
                    add(p, 0, 1, 0, p.cols)
        if stage == pp_n - 1:
            add(glob["final_norm"], 0, 1, 0, glob["final_norm"].cols)
            if "lm_head" in glob:
                vocab(glob["lm_head"])
        return out, off

    world = spec.world
    ranks: list[RankLayout | None] = [None] * world
    replica: list[tuple[int, ...] | None] = [None] * world
    cache: dict[tuple[int, int], tuple[list[Piece], int]] = {}
    for pi in range(pp_n):
        for di in range(spec.dp):
            group = tuple(megatron_rank(spec, a, di, b) for b in range(pp_n) for a in range(t))
            for ti in range(t):
                r = megatron_rank(spec, ti, di, pi)
                if (ti, pi) not in cache:
                    cache[(ti, pi)] = stage_pieces(ti, pi)
                ps, size = cache[(ti, pi)]
                ranks[r] = RankLayout(r, tuple(ps), size)
                replica[r] = tuple(sorted(group))
    return Layout(spec, tuple(ranks), tuple(replica))


# ---------------------------------------------------------------- rollout

def vllm_tensor_names(model: ModelSpec) -> list[str]:
    """vLLM's parameter names, in the order the rollout buffer holds them."""
    names = ["model.embed_tokens.weight"]
    for i in range(model.layers):
        pre = f"model.layers.{i}."
        names.append(pre + "self_attn.qkv_proj.weight")
        if model.qkv_bias:
            names.append(pre + "self_attn.qkv_proj.bias")
        names += [pre + "self_attn.o_proj.weight", pre + "mlp.gate_up_proj.weight",
                  pre + "mlp.down_proj.weight", pre + "input_layernorm.weight",
                  pre + "post_attention_layernorm.weight"]
    names.append("model.norm.weight")
    if not model.tied:
        names.append("lm_head.weight")
    return names


def vllm_ranks(rollout: ParallelSpec, rank: int) -> tuple[int, int, int]:
    """(replica, pp stage, tp rank) of a GPU: consecutive GPUs form a TP group."""
    per_replica = rollout.tp * rollout.pp
    return rank // per_replica, (rank % per_replica) // rollout.tp, rank % rollout.tp


def rollout_layout(model: ModelSpec, rollout: ParallelSpec, world: int) -> Layout:
    check_rollout(model, rollout, world)
    cache: dict[tuple[int, int], tuple[tuple[Piece, ...], int]] = {}
    ranks = []
    for r in range(world):
        _, stage, g = vllm_ranks(rollout, r)
        if (g, stage) not in cache:
            ps, size, _ = _vllm_rank(model, rollout, g, stage)
            cache[(g, stage)] = (tuple(ps), size)
        ps, size = cache[(g, stage)]
        # ranks with the same TP rank and stage share one pieces tuple (plans key on it)
        ranks.append(RankLayout(r, ps, size))
    # Every rollout rank keeps its own shard; no replica grouping applies.
    return Layout(rollout, tuple(ranks), tuple((r,) for r in range(world)))


@functools.lru_cache(maxsize=None)
def vllm_tensor_shapes(model: ModelSpec, rollout: ParallelSpec, g: int, stage: int):
    return _vllm_rank(model, rollout, g, stage)[2]


def _vllm_rank(model: ModelSpec, rollout: ParallelSpec, g: int, stage: int):
    """Pieces, buffer size and [(vllm name, local shape, offset)] for TP rank g."""
    t = rollout.tp
    hd = model.head_dim
    params = model.param_index
    per_stage = model.layers // rollout.pp
    out: list[Piece] = []
    tensors: list[tuple[str, tuple[int, ...], int]] = []
    off = 0

    def piece(p: Param, r0, r1, c0, c1, stride):
        if r1 > r0 and c1 > c0:
            out.append(Piece(p.name, r0, r1, c0, c1, off, stride))

    def vocab(name: str, p: Param):
        nonlocal off
        padded = -(-model.vocab // VLLM_VOCAB_PADDING) * VLLM_VOCAB_PADDING
        per = padded // t
        a, b = min(g * per, model.vocab), min((g + 1) * per, model.vocab)
        tensors.append((name, (per, p.cols), off))
        piece(p, a, b, 0, p.cols, p.cols)
        off += per * p.cols

    qh = model.heads // t
    if t <= model.kv_heads:
        kv_lo, kv_n = g * (model.kv_heads // t), model.kv_heads // t
    else:
        kv_lo, kv_n = g // (t // model.kv_heads), 1
    inter = model.intermediate // t
    if stage == 0:
        vocab("model.embed_tokens.weight", params["model.embed_tokens.weight"])
    for i in range(stage * per_stage, (stage + 1) * per_stage):
        pre = f"model.layers.{i}."
        for suffix in (".weight", ".bias"):
            if suffix == ".bias" and not model.qkv_bias:
                continue
            q = params[pre + "self_attn.q_proj" + suffix]
            k = params[pre + "self_attn.k_proj" + suffix]
            v = params[pre + "self_attn.v_proj" + suffix]
            start = off
            for p, lo, n in ((q, g * qh * hd, qh * hd), (k, kv_lo * hd, kv_n * hd), (v, kv_lo * hd, kv_n * hd)):
                if suffix == ".bias":
                    piece(p, 0, 1, lo, lo + n, n)
                    off += n
                else:
                    piece(p, lo, lo + n, 0, p.cols, p.cols)
                    off += n * p.cols
            rows = (qh + 2 * kv_n) * hd
            shape = (rows, q.cols) if suffix == ".weight" else (rows,)
            tensors.append((pre + "self_attn.qkv_proj" + suffix, shape, start))
        o = params[pre + "self_attn.o_proj.weight"]
        w = o.cols // t
        tensors.append((pre + "self_attn.o_proj.weight", (o.rows, w), off))
        piece(o, 0, o.rows, g * w, (g + 1) * w, w)
        off += o.rows * w
        start = off
        for name in ("gate_proj", "up_proj"):
            p = params[pre + f"mlp.{name}.weight"]
            piece(p, g * inter, (g + 1) * inter, 0, p.cols, p.cols)
            off += inter * p.cols
        tensors.append((pre + "mlp.gate_up_proj.weight", (2 * inter, model.hidden), start))
        d = params[pre + "mlp.down_proj.weight"]
        tensors.append((pre + "mlp.down_proj.weight", (d.rows, inter), off))
        piece(d, 0, d.rows, g * inter, (g + 1) * inter, inter)
        off += d.rows * inter
        for name in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            p = params[pre + name]
            tensors.append((pre + name, p.shape, off))
            piece(p, 0, 1, 0, p.cols, p.cols)
            off += p.cols
    if stage == rollout.pp - 1:
        p = params["model.norm.weight"]
        tensors.append(("model.norm.weight", p.shape, off))
        piece(p, 0, 1, 0, p.cols, p.cols)
        off += p.cols
        if not model.tied:
            vocab("lm_head.weight", params["lm_head.weight"])
        elif rollout.pp > 1:
            # tied: the last stage keeps its own copy of the shared embedding
            vocab("lm_head.weight", params["model.embed_tokens.weight"])
    return out, off, tensors
