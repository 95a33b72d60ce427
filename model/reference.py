"""Independent reference: real tensors sliced by the documented rules.

This module does not use :mod:`model.layouts`; it slices real torch tensors
the way FSDP, Megatron and vLLM do (``torch.chunk``, flatten-pad-chunk,
query-group concatenation, vocab padding) and lays the local tensors out in
the buffer order the project documents (docs/layouts.md). Plans and the
golden model are judged against it.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from model.models import ModelSpec
from model.specs import ParallelSpec

VLLM_VOCAB_PADDING = 64
MEGATRON_VOCAB_DIVISOR = 128


def _flat(t: torch.Tensor) -> np.ndarray:
    return t.detach().reshape(-1).to(torch.float32).numpy()


def _cat(parts: list[torch.Tensor]) -> np.ndarray:
    if not parts:
        return np.zeros(0, np.float32)
    return np.concatenate([_flat(p) for p in parts])


def _layer_names(sd: dict, i: int) -> dict[str, str]:
    pre = f"model.layers.{i}."
    return {k[len(pre):]: k for k in sd if k.startswith(pre)}


def train_buffers(sd: dict, model: ModelSpec, spec: ParallelSpec) -> list[np.ndarray]:
    """Each training rank's local shard, as one flat fp32 buffer."""
    names = [p.name for p in model.params]
    if spec.kind == "fsdp2":
        out = []
        for r in range(spec.dp):
            parts = []
            for n in names:
                chunks = torch.chunk(sd[n], spec.dp, dim=0)
                if r < len(chunks):
                    parts.append(chunks[r])
            out.append(_cat(parts))
        return out
    if spec.kind == "fsdp1":
        units = [[n for n in names if not n.startswith("model.layers.")]]
        units += [[n for n in names if n.startswith(f"model.layers.{i}.")] for i in range(model.layers)]
        out = [[] for _ in range(spec.dp)]
        for unit in units:
            flat = torch.cat([sd[n].reshape(-1) for n in unit])
            pad = (-flat.numel()) % spec.dp
            flat = F.pad(flat, (0, pad))
            for r, chunk in enumerate(flat.chunk(spec.dp)):
                out[r].append(chunk)
        return [_cat(p) for p in out]
    return _megatron_buffers(sd, model, spec)


def _megatron_buffers(sd, model: ModelSpec, spec: ParallelSpec) -> list[np.ndarray]:
    t, p = spec.tp, spec.pp
    per_stage = model.layers // p
    groups, hd = model.kv_heads, model.head_dim
    qpk = model.heads // groups
    vocab_pad = -(-model.vocab // (MEGATRON_VOCAB_DIVISOR * t)) * (MEGATRON_VOCAB_DIVISOR * t)

    def vocab_shard(w, ti):
        return F.pad(w, (0, 0, 0, vocab_pad - w.shape[0])).chunk(t, dim=0)[ti]

    def local(ti, stage):
        parts = []
        if stage == 0:
            parts.append(vocab_shard(sd["model.embed_tokens.weight"], ti))
        for i in range(stage * per_stage, (stage + 1) * per_stage):
            L = _layer_names(sd, i)
            for suffix in ("weight", "bias"):
                qn = f"self_attn.q_proj.{suffix}"
                if qn not in L:
                    continue
                q = sd[L[qn]]
                k = sd[L[f"self_attn.k_proj.{suffix}"]]
                v = sd[L[f"self_attn.v_proj.{suffix}"]]
                # [groups, (qpk + 2) * hd, ...]: each query group holds its q heads, then k, then v
                fused = torch.cat([q.reshape(groups, qpk * hd, *q.shape[1:]),
                                   k.reshape(groups, hd, *k.shape[1:]),
                                   v.reshape(groups, hd, *v.shape[1:])], dim=1)
                parts.append(fused.chunk(t, dim=0)[ti])
            parts.append(sd[L["self_attn.o_proj.weight"]].chunk(t, dim=1)[ti])
            if "self_attn.o_proj.bias" in L:
                parts.append(sd[L["self_attn.o_proj.bias"]])
            parts.append(torch.cat([sd[L["mlp.gate_proj.weight"]].chunk(t, dim=0)[ti],
                                    sd[L["mlp.up_proj.weight"]].chunk(t, dim=0)[ti]]))
            parts.append(sd[L["mlp.down_proj.weight"]].chunk(t, dim=1)[ti])
            parts.append(sd[L["input_layernorm.weight"]])
            parts.append(sd[L["post_attention_layernorm.weight"]])
        if stage == p - 1:
            parts.append(sd["model.norm.weight"])
            if "lm_head.weight" in sd:
                parts.append(vocab_shard(sd["lm_head.weight"], ti))
        return _cat(parts)

    out = [None] * spec.world
    for pi in range(p):
        for di in range(spec.dp):
            for ti in range(t):
                out[ti + t * (di + spec.dp * pi)] = local(ti, pi)
    return out


def vllm_local_tensors(sd: dict, model: ModelSpec, rollout: ParallelSpec, g: int, stage: int = 0):
    """vLLM's local tensors of TP rank g, by vLLM name, in vLLM order."""
    t = rollout.tp
    hd = model.head_dim
    out: dict[str, torch.Tensor] = {}
    padded = -(-model.vocab // VLLM_VOCAB_PADDING) * VLLM_VOCAB_PADDING

    def vocab_shard(w):
        return F.pad(w, (0, 0, 0, padded - w.shape[0])).chunk(t, dim=0)[g]

    per_stage = model.layers // rollout.pp
    if stage == 0:
        out["model.embed_tokens.weight"] = vocab_shard(sd["model.embed_tokens.weight"])
    if t <= model.kv_heads:
        kv_heads = list(range(g * model.kv_heads // t, (g + 1) * model.kv_heads // t))
    else:
        kv_heads = [g // (t // model.kv_heads)]
    for i in range(stage * per_stage, (stage + 1) * per_stage):
        L = _layer_names(sd, i)
        pre = f"model.layers.{i}."
        for suffix in ("weight", "bias"):
            qn = f"self_attn.q_proj.{suffix}"
            if qn not in L:
                continue
            q = sd[L[qn]].chunk(t, dim=0)[g]
            k = sd[L[f"self_attn.k_proj.{suffix}"]]
            v = sd[L[f"self_attn.v_proj.{suffix}"]]
            kl = torch.cat([k[h * hd:(h + 1) * hd] for h in kv_heads])
            vl = torch.cat([v[h * hd:(h + 1) * hd] for h in kv_heads])
            out[pre + f"self_attn.qkv_proj.{suffix}"] = torch.cat([q, kl, vl])
        out[pre + "self_attn.o_proj.weight"] = sd[L["self_attn.o_proj.weight"]].chunk(t, dim=1)[g]
        out[pre + "mlp.gate_up_proj.weight"] = torch.cat(
            [sd[L["mlp.gate_proj.weight"]].chunk(t, dim=0)[g], sd[L["mlp.up_proj.weight"]].chunk(t, dim=0)[g]])
        out[pre + "mlp.down_proj.weight"] = sd[L["mlp.down_proj.weight"]].chunk(t, dim=1)[g]
        out[pre + "input_layernorm.weight"] = sd[L["input_layernorm.weight"]]
        out[pre + "post_attention_layernorm.weight"] = sd[L["post_attention_layernorm.weight"]]
    if stage == rollout.pp - 1:
        out["model.norm.weight"] = sd["model.norm.weight"]
        if "lm_head.weight" in sd:
            out["lm_head.weight"] = vocab_shard(sd["lm_head.weight"])
        elif rollout.pp > 1:
            out["lm_head.weight"] = vocab_shard(sd["model.embed_tokens.weight"])
    return out


def rollout_buffers(sd: dict, model: ModelSpec, rollout: ParallelSpec, world: int) -> list[np.ndarray]:
    """Each GPU's vLLM shard as one flat buffer (consecutive GPUs form a TP group)."""
    out = []
    per_replica = rollout.tp * rollout.pp
    for r in range(world):
        stage, g = (r % per_replica) // rollout.tp, r % rollout.tp
        out.append(_cat(list(vllm_local_tensors(sd, model, rollout, g, stage).values())))
    return out


def apply_transfers(transfers, train_bufs: list[np.ndarray], rollout_sizes: list[int]) -> list[np.ndarray]:
    """Execute element transfers (model.plan.Transfer) on real buffers."""
    out = [np.zeros(n, np.float32) for n in rollout_sizes]
    for t in transfers:
        src, dst = train_bufs[t.src], out[t.dst]
        for i in range(t.rows):
            s = t.src_off + i * t.src_stride
            d = t.dst_off + i * t.dst_stride
            dst[d:d + t.row_elems] = src[s:s + t.row_elems]
    return out
