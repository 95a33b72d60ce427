"""The three walls: one PPO/GRPO iteration of verl on a chip, phase by phase.

Every phase is reduced to three per-chip quantities: FLOPs, HBM bytes and
interconnect bytes (plus a count of collectives, each paying a latency).
Its time is the largest of the three walls (compute at the chip's
achievable FLOP rate, HBM at its achievable bandwidth, the interconnect at
the achievable collective bandwidth), assuming the other two overlap; the
utilization of each wall is its time over the phase's time. docs/perf.md
states every formula and assumption.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from model.chips import Chip
from model.engine_cost import EngineCosts, features_from_plan, predict_cycles
from model.errors import InputError
from model.models import ModelSpec
from model.plan import make_plan
from model.specs import ParallelSpec

WALLS = ("compute", "hbm", "interconnect")
GB = 1e9
#: verl 0.9.1 ``actor_rollout_ref.rollout.update_weights_bucket_megabytes`` default
VERL_BUCKET_BYTES = 2048 << 20
#: bytes a chip keeps per parameter while training with FSDP and AdamW: fp32
#: master weights (verl keeps them in fp32), fp32 gradients, two fp32 moments
TRAIN_STATE_BYTES = 4 + 4 + 8
PARAM_BYTES = 2        # bf16 compute copies and rollout weights
GRAD_REDUCE_BYTES = 4  # verl's FSDP mixed precision reduces gradients in fp32


@dataclass(frozen=True)
class Workload:
    """One iteration's shape, as verl's config names it."""
    batch: int = 256              # data.train_batch_size (prompts)
    prompt_len: int = 1024        # data.max_prompt_length
    response_len: int = 1024      # data.max_response_length
    rollout_n: int = 5            # actor_rollout_ref.rollout.n
    ppo_epochs: int = 1           # actor_rollout_ref.actor.ppo_epochs
    micro_batch: int = 8          # *.ppo_micro_batch_size_per_gpu (sequences)
    algorithm: str = "grpo"       # grpo: no critic; ppo: a critic of the same size

    def check(self) -> None:
        for k in ("batch", "prompt_len", "response_len", "rollout_n", "ppo_epochs", "micro_batch"):
            v = getattr(self, k)
            if not isinstance(v, int) or v <= 0:
                raise InputError(f"--{k.replace('_', '-')} must be a positive integer, not {v!r}")
        if self.algorithm not in ("grpo", "ppo"):
            raise InputError(f"--algorithm {self.algorithm!r}: use grpo or ppo")

    @property
    def sequences(self) -> int:
        return self.batch * self.rollout_n

    @property
    def seq_len(self) -> int:
        return self.prompt_len + self.response_len


@dataclass
class Phase:
    name: str
    flops: float            # per chip
    hbm_bytes: float        # per chip
    link_bytes: float       # per chip, sent (= received) on the interconnect
    collectives: int        # sequential collectives, each paying the chip's latency
    memory_bytes: float     # peak per chip
    repeat: int = 1         # identical steps (decode tokens)
    times: dict = field(default_factory=dict)

    def walls(self, chip: Chip, group: int) -> dict:
        t = {"compute": self.flops / chip.flops, "hbm": self.hbm_bytes / chip.hbm_bytes_per_s,
             "interconnect": self.link_bytes / chip.link_bytes_per_s(group)
             + self.collectives * chip.collective_latency_us * 1e-6}
        return {k: v * self.repeat for k, v in t.items()}

    def to_json(self) -> dict:
        total = max(self.times.values())
        bound = max(WALLS, key=lambda w: self.times[w])
        return {"name": self.name, "time_s": total, "bound_by": bound,
                "utilization": {w: (self.times[w] / total if total else 0.0) for w in WALLS},
                "wall_time_s": dict(self.times), "flops_per_chip": self.flops * self.repeat,
                "hbm_bytes_per_chip": self.hbm_bytes * self.repeat,
                "link_bytes_per_chip": self.link_bytes * self.repeat,
                "peak_memory_gb": self.memory_bytes / GB}


def _ring(nbytes: float, p: int, op: str) -> float:
    """Bytes each rank sends in a ring collective over ``p`` ranks of an ``nbytes`` buffer."""
    if p <= 1:
        return 0.0
    share = nbytes * (p - 1) / p
    return 2 * share if op == "all_reduce" else share


def _attn_flops(m: ModelSpec, ctx: float) -> float:
    """Attention score and value FLOPs per token at context ``ctx`` (2 matmuls, 2 FLOPs a MAC)."""
    return 4 * m.layers * m.heads * m.head_dim * ctx


def kv_bytes_per_token(m: ModelSpec) -> int:
    return 2 * m.layers * m.kv_heads * m.head_dim * PARAM_BYTES


def _rollout(m: ModelSpec, w: Workload, roll: ParallelSpec, world: int) -> list[Phase]:
    mp = roll.tp * roll.pp                      # chips holding one replica
    replicas = world // mp
    seqs = -(-w.sequences // replicas)          # sequences per replica
    weights = m.numel * PARAM_BYTES / mp
    tok_bytes = m.hidden * PARAM_BYTES
    kv_tok = kv_bytes_per_token(m) / mp
    kv_all = seqs * w.seq_len * kv_tok
    mem = weights + kv_all
    # prefill: every prompt token once; 2 TP all-reduces of the activations per layer
    ptok = seqs * w.prompt_len
    prefill = Phase("rollout-prefill",
                    flops=ptok * (2 * m.numel + _attn_flops(m, w.prompt_len / 2)) / mp,
                    hbm_bytes=weights + ptok * kv_tok,
                    link_bytes=_ring(ptok * tok_bytes, roll.tp, "all_reduce") * 2 * m.layers / roll.pp,
                    collectives=2 * m.layers if roll.tp > 1 else 0, memory_bytes=mem)
    # decode: one token per sequence per step, at the mean context; weights and KV cache read each step
    ctx = w.prompt_len + w.response_len / 2
    decode = Phase("rollout-decode",
                   flops=seqs * (2 * m.numel + _attn_flops(m, ctx)) / mp,
                   hbm_bytes=weights + seqs * ctx * kv_tok,
                   link_bytes=_ring(seqs * tok_bytes, roll.tp, "all_reduce") * 2 * m.layers / roll.pp,
                   collectives=2 * m.layers if roll.tp > 1 else 0, memory_bytes=mem,
                   repeat=w.response_len)
    return [prefill, decode]


def fsdp_microbatch_traffic(m: ModelSpec, world: int) -> dict[str, float]:
    """Bytes each rank sends per training micro-batch under verl's FSDP (mixed precision bf16
    parameters, fp32 gradient reduction), as a real capture records them: every parameter
    all-gathered for the forward and again for the backward, every gradient reduce-scattered."""
    gather = _ring(m.numel * PARAM_BYTES, world, "all_gather")
    return {"forward all_gather": gather, "backward all_gather": gather,
            "backward reduce_scatter": _ring(m.numel * GRAD_REDUCE_BYTES, world, "reduce_scatter")}


def _fsdp_pass(m: ModelSpec, name: str, w: Workload, world: int, tokens_per_chip: float,
               backward: bool, epochs: int = 1) -> Phase:
    """Forward (and backward) passes under FSDP: per micro-batch every layer's parameters are
    all-gathered for the forward, again for the backward, and gradients reduce-scattered."""
    micro = epochs * -(-(w.sequences // world or 1) // w.micro_batch)
    full = m.numel * PARAM_BYTES
    gathers = 2 if backward else 1
    traffic = fsdp_microbatch_traffic(m, world)
    link = micro * (sum(traffic.values()) if backward else traffic["forward all_gather"])
    flops_tok = (6 if backward else 2) * m.numel + (3 if backward else 1) * _attn_flops(m, w.seq_len / 2)
    act = w.micro_batch * w.seq_len * (m.hidden * m.layers * PARAM_BYTES + m.vocab * 4)
    state = m.numel * TRAIN_STATE_BYTES / world
    hbm = micro * gathers * full + (epochs * 2 * state if backward else 0) + tokens_per_chip * epochs * \
        m.hidden * m.layers * PARAM_BYTES * (4 if backward else 2)
    return Phase(name, flops=epochs * tokens_per_chip * flops_tok, hbm_bytes=hbm, link_bytes=link,
                 collectives=micro * m.layers * (gathers + (1 if backward else 0)),
                 memory_bytes=state + full / m.layers * 2 + act)


def _megatron_pass(m: ModelSpec, name: str, w: Workload, train: ParallelSpec, tokens_per_chip: float,
                   backward: bool, epochs: int = 1) -> Phase:
    """Megatron: 2 TP all-reduces per layer forward (4 with backward), a DP gradient all-reduce."""
    mp = train.tp * train.pp
    tp_tokens = tokens_per_chip * mp / train.pp      # tokens a TP group processes per stage
    act_ar = _ring(tp_tokens * m.hidden * PARAM_BYTES, train.tp, "all_reduce") * (4 if backward else 2)
    link = epochs * (act_ar * m.layers / train.pp
                     + (_ring(m.numel * GRAD_REDUCE_BYTES / mp, train.dp, "all_reduce") if backward else 0))
    flops_tok = (6 if backward else 2) * m.numel + (3 if backward else 1) * _attn_flops(m, w.seq_len / 2)
    state = m.numel * TRAIN_STATE_BYTES / mp / (train.dp if backward else 1)
    act = w.micro_batch * w.seq_len * (m.hidden * m.layers / train.pp * PARAM_BYTES + m.vocab * 4 / train.tp)
    weights = m.numel * PARAM_BYTES / mp
    micro = epochs * -(-(w.sequences // train.dp or 1) // w.micro_batch)
    return Phase(name, flops=epochs * tokens_per_chip * flops_tok, link_bytes=link,
                 hbm_bytes=micro * weights * (3 if backward else 1) + (epochs * 2 * state if backward else 0),
                 collectives=micro * (4 if backward else 2) * m.layers // train.pp if train.tp > 1 else 0,
                 memory_bytes=state + weights + act)


def _training(m: ModelSpec, w: Workload, train: ParallelSpec) -> list[Phase]:
    world = train.world
    tokens = w.sequences * w.seq_len / world          # per chip
    def pass_(name, backward, epochs=1):
        if train.kind == "megatron":
            return _megatron_pass(m, name, w, train, tokens, backward, epochs)
        return _fsdp_pass(m, name, w, world, tokens, backward, epochs)
    phases = [pass_("old-log-prob", False), pass_("ref-log-prob", False)]
    if w.algorithm == "ppo":
        phases.append(pass_("critic-values", False))
    phases.append(pass_("actor-update", True, w.ppo_epochs))
    if w.algorithm == "ppo":
        phases.append(pass_("critic-update", True, w.ppo_epochs))
    return phases


@dataclass
class SyncResult:
    scheme: str
    path: str               # "software" (verl today) or "ip" (the reshard engine)
    bytes_per_rank: int
    time_s: float
    detail: dict


def software_sync(chip: Chip, world: int, bytes_per_rank: int, shard_bytes: float, scheme: str) -> SyncResult:
    """verl's path: NCCL all-gathers of full tensors in buckets, then vLLM loads its shard."""
    buckets = -(-bytes_per_rank // VERL_BUCKET_BYTES) if bytes_per_rank else 0
    wire = bytes_per_rank / chip.link_bytes_per_s(world) + buckets * chip.collective_latency_us * 1e-6
    # the gathered tensors are written, then read back and the shard written into vLLM's weights
    hbm = (2 * bytes_per_rank + shard_bytes) / chip.hbm_bytes_per_s
    return SyncResult(scheme, "software", bytes_per_rank, max(wire, hbm),
                      {"wire_s": wire, "hbm_s": hbm, "buckets": buckets})


def ip_sync(chip: Chip, plan, costs: EngineCosts) -> SyncResult:
    """The reshard engine: the minimal plan's bytes, one pass, at the engine's clock or the wire's rate."""
    e = chip.engine
    feats = features_from_plan(plan, e.bus_bits // 8, e.channels)
    cycles = predict_cycles(feats, costs)
    engine_s = cycles / (e.clock_mhz * 1e6)
    wire = max(plan.bytes_in) / chip.link_bytes_per_s(plan.world)
    return SyncResult("minimal", "ip", max(plan.bytes_in), max(engine_s, wire),
                      {"engine_s": engine_s, "wire_s": wire, "predicted_cycles": cycles,
                       "descriptors": feats.descriptors})


def weight_sync(m: ModelSpec, chip: Chip, train: ParallelSpec, roll: ParallelSpec, dtype: str,
                costs: EngineCosts) -> list[SyncResult]:
    shard = m.numel * PARAM_BYTES / (roll.tp * roll.pp)
    out = []
    schemes = ["verl"] + (["hybridflow"] if train.kind == "megatron" else [])
    for s in schemes:
        p = make_plan(m, train, roll, dtype, s)
        out.append(software_sync(chip, p.world, max(p.bytes_in), shard, s))
    out.append(ip_sync(chip, make_plan(m, train, roll, dtype, "minimal"), costs))
    return out


def iteration(m: ModelSpec, chip: Chip, train: ParallelSpec, roll: ParallelSpec, w: Workload,
              costs: EngineCosts, dtype: str = "bf16") -> dict:
    """The iteration model's answer: what ``python -m gen perf --json`` prints."""
    w.check()
    world = train.world
    if world % (roll.tp * roll.pp):
        raise InputError(f"rollout {roll} does not divide the training world of {world} chips")
    phases = _rollout(m, w, roll, world) + _training(m, w, train)
    for ph in phases:
        group = roll.tp if ph.name.startswith("rollout") else world
        ph.times = ph.walls(chip, group)
    over = [f"{ph.name} needs {ph.memory_bytes / GB:.1f} GB per chip, "
            f"{(ph.memory_bytes - chip.hbm_gb * GB) / GB:.1f} GB more than the {chip.hbm_gb:g} GB of {chip.name}"
            for ph in phases if ph.memory_bytes > chip.hbm_gb * GB]
    if over:
        raise InputError("does not fit: " + "; ".join(over))
    syncs = weight_sync(m, chip, train, roll, dtype, costs)
    verl_sync = syncs[0]
    ip = syncs[-1]
    rows = [ph.to_json() for ph in phases]
    sync_link = verl_sync.detail["wire_s"]
    rows.append({"name": "weight-sync", "time_s": verl_sync.time_s,
                 "bound_by": "interconnect" if sync_link >= verl_sync.detail["hbm_s"] else "hbm",
                 "utilization": {"compute": 0.0, "hbm": verl_sync.detail["hbm_s"] / verl_sync.time_s,
                                 "interconnect": sync_link / verl_sync.time_s},
                 "flops_per_chip": 0.0, "hbm_bytes_per_chip": 2.0 * verl_sync.bytes_per_rank,
                 "link_bytes_per_chip": float(verl_sync.bytes_per_rank),
                 "peak_memory_gb": (m.numel * PARAM_BYTES / world + verl_sync.bytes_per_rank) / GB})
    total = sum(r["time_s"] for r in rows)
    return {
        "model": m.name, "parameters": m.numel, "chip": chip.name, "train": str(train), "rollout": str(roll),
        "world": world, "workload": w.__dict__, "engine": chip.engine.__dict__,
        "phases": rows,
        "sync": {f"{s.scheme}/{s.path}": {"scheme": s.scheme, "path": s.path, "bytes_per_rank": s.bytes_per_rank,
                                          "time_s": s.time_s, **s.detail} for s in syncs},
        "iteration_s": total,
        "iteration_s_with_ip_sync": total - verl_sync.time_s + ip.time_s,
        "peak_memory_gb": max(r["peak_memory_gb"] for r in rows),
    }
