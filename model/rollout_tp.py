"""A tensor-parallel Qwen2 decoder that runs on vLLM-layout shards.

Each rank holds only its own tensors, exactly what
:func:`model.reference.vllm_local_tensors` gives for its TP rank: a fused
column-parallel ``qkv_proj`` ([q | k | v], one KV head replicated per rank
when tp > n_kv), a fused column-parallel ``gate_up_proj`` ([gate | up]),
row-parallel ``o_proj`` and ``down_proj`` (columns chunked; an all-reduce
SUM follows), replicated norms, and a vocab-parallel embedding and LM head
(vocabulary padded to a multiple of 64, then chunked). Collectives go
through ``torch.distributed`` (gloo on the CPU) over ``group``; with tp=1
there are none and torch.distributed need not be initialised.

The arithmetic follows HF's Qwen2 (RMSNorm, default RoPE with
``rotate_half``, causal GQA attention, SiLU MLP), all in fp32. Generation
is fixed length: ``max_new_tokens`` tokens for every prompt, no EOS stop.
See docs/rollout.md.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from model.errors import InputError
from model.models import ModelSpec

VLLM_VOCAB_PADDING = 64


@dataclass(frozen=True)
class SamplingOptions:
    max_new_tokens: int = 8
    temperature: float = 1.0    # 0 => greedy (argmax)
    seed: int = 0               # torch.Generator seed; same on every rank -> same tokens on every rank


def _rope_theta(model: ModelSpec) -> float:
    cfg = model.config
    scaling = cfg.get("rope_scaling") or {}
    params = cfg.get("rope_parameters") or {}
    kind = scaling.get("rope_type", scaling.get("type")) or params.get("rope_type") or "default"
    if kind != "default":
        raise InputError(f"{model.name}: rope type {kind!r} is not supported (only the default RoPE)")
    theta = cfg.get("rope_theta", params.get("rope_theta", 10000.0))
    return float(theta)


def expected_shapes(model: ModelSpec, tp: int) -> dict[str, tuple[int, ...]]:
    """Names and shapes of one TP rank's vLLM tensors (pp=1), in vLLM order."""
    if model.heads % tp or model.intermediate % tp or (model.kv_heads % tp and tp % model.kv_heads):
        raise InputError(f"tp={tp} does not fit {model.name}: it must divide the {model.heads} heads and "
                         f"intermediate_size {model.intermediate}, and divide or be a multiple of the "
                         f"{model.kv_heads} KV heads")
    padded = -(-model.vocab // VLLM_VOCAB_PADDING) * VLLM_VOCAB_PADDING
    if padded % tp:
        raise InputError(f"tp={tp} does not divide the padded vocabulary {padded}")
    hd, h = model.head_dim, model.hidden
    q = model.heads // tp * hd
    kv = max(model.kv_heads // tp, 1) * hd
    inter = model.intermediate // tp
    out = {"model.embed_tokens.weight": (padded // tp, h)}
    for i in range(model.layers):
        pre = f"model.layers.{i}."
        out[pre + "self_attn.qkv_proj.weight"] = (q + 2 * kv, h)
        if model.qkv_bias:
            out[pre + "self_attn.qkv_proj.bias"] = (q + 2 * kv,)
        out[pre + "self_attn.o_proj.weight"] = (h, q)
        out[pre + "mlp.gate_up_proj.weight"] = (2 * inter, h)
        out[pre + "mlp.down_proj.weight"] = (h, inter)
        out[pre + "input_layernorm.weight"] = (h,)
        out[pre + "post_attention_layernorm.weight"] = (h,)
    out["model.norm.weight"] = (h,)
    if not model.tied:
        out["lm_head.weight"] = (padded // tp, h)
    return out


class TPDecoder:
    """One TP rank of a Qwen2-style decoder over its vLLM-layout shards."""

    def __init__(self, model: ModelSpec, shards: dict[str, torch.Tensor], *, tp: int, rank: int, group=None):
        if not isinstance(tp, int) or tp <= 0:
            raise InputError(f"tp must be a positive integer, not {tp!r}")
        if not isinstance(rank, int) or not 0 <= rank < tp:
            raise InputError(f"rank {rank!r} is outside 0..{tp - 1}")
        if model.config.get("hidden_act", "silu") != "silu":
            raise InputError(f"{model.name}: hidden_act {model.config.get('hidden_act')!r} is not supported (silu)")
        self.model, self.tp, self.rank, self.group = model, tp, rank, group
        expected = expected_shapes(model, tp)
        if tp > 1:
            import torch.distributed as dist
            if not dist.is_available() or not dist.is_initialized():
                raise InputError(f"tp={tp} needs torch.distributed initialised (e.g. gloo)")
            if dist.get_world_size(group) != tp:
                raise InputError(f"the process group has {dist.get_world_size(group)} ranks, not tp={tp}")
        w: dict[str, torch.Tensor] = {}
        for name, shape in expected.items():
            if name not in shards:
                raise InputError(f"rank {rank}: missing tensor {name!r} (expected shape {list(shape)})")
            t = shards[name]
            if not isinstance(t, torch.Tensor) or not t.is_floating_point():
                raise InputError(f"rank {rank}: tensor {name!r} is not a floating-point torch tensor")
            if tuple(t.shape) != shape:
                raise InputError(f"rank {rank}: tensor {name!r} has shape {list(t.shape)}, "
                                 f"expected {list(shape)} for tp={tp}")
            w[name] = t.detach().to(torch.float32)
        extra = sorted(set(shards) - set(expected))
        if extra:
            raise InputError(f"rank {rank}: unexpected tensor {extra[0]!r} for {model.name} at tp={tp}")
        self.w = w
        self.q_heads = model.heads // tp
        self.kv_heads = max(model.kv_heads // tp, 1)
        self.inter = model.intermediate // tp
        self.vocab_per = expected["model.embed_tokens.weight"][0]
        self.eps = float(model.config.get("rms_norm_eps", 1e-6))
        hd = model.head_dim
        self.inv_freq = 1.0 / (_rope_theta(model) ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))

    # ------------------------------------------------------------ collectives

    def _all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp > 1:
            import torch.distributed as dist
            dist.all_reduce(x, op=dist.ReduceOp.SUM, group=self.group)
        return x

    def _all_gather_last(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp == 1:
            return x
        import torch.distributed as dist
        x = x.contiguous()
        parts = [torch.empty_like(x) for _ in range(self.tp)]
        dist.all_gather(parts, x, group=self.group)
        return torch.cat(parts, dim=-1)

    # ------------------------------------------------------------ pieces

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        var = x.pow(2).mean(-1, keepdim=True)
        return weight * (x * torch.rsqrt(var + self.eps))

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)            # [T, hd]
        return emb.cos(), emb.sin()

    @staticmethod
    def _rotate_half(x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        lo = self.rank * self.vocab_per
        local = ids - lo
        inside = (local >= 0) & (local < self.vocab_per)
        x = F.embedding(torch.where(inside, local, torch.zeros_like(local)), self.w["model.embed_tokens.weight"])
        x = x * inside.unsqueeze(-1).to(x.dtype)
        return self._all_reduce(x)

    def _attention(self, i: int, x: torch.Tensor, cos, sin, cache) -> torch.Tensor:
        pre = f"model.layers.{i}.self_attn."
        hd = self.model.head_dim
        b, t, _ = x.shape
        qkv = F.linear(x, self.w[pre + "qkv_proj.weight"], self.w.get(pre + "qkv_proj.bias"))
        nq, nk = self.q_heads * hd, self.kv_heads * hd
        q = qkv[..., :nq].view(b, t, self.q_heads, hd).transpose(1, 2)
        k = qkv[..., nq:nq + nk].view(b, t, self.kv_heads, hd).transpose(1, 2)
        v = qkv[..., nq + nk:].view(b, t, self.kv_heads, hd).transpose(1, 2)
        q = q * cos + self._rotate_half(q) * sin
        k = k * cos + self._rotate_half(k) * sin
        if cache is not None:
            if i in cache:
                pk, pv = cache[i]
                k, v = torch.cat((pk, k), dim=2), torch.cat((pv, v), dim=2)
            cache[i] = (k, v)
        groups = self.q_heads // self.kv_heads
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
        s = k.shape[2]                                      # keys: past + new
        scores = torch.matmul(q, k.transpose(2, 3)) * (hd ** -0.5)
        qpos = torch.arange(s - t, s)[:, None]
        causal = torch.arange(s)[None, :] <= qpos           # [t, s]
        scores = scores.masked_fill(~causal, float("-inf"))
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, t, nq)
        return self._all_reduce(F.linear(out, self.w[pre + "o_proj.weight"]))

    def _mlp(self, i: int, x: torch.Tensor) -> torch.Tensor:
        pre = f"model.layers.{i}.mlp."
        gate_up = F.linear(x, self.w[pre + "gate_up_proj.weight"])
        gate, up = gate_up[..., :self.inter], gate_up[..., self.inter:]
        return self._all_reduce(F.linear(F.silu(gate) * up, self.w[pre + "down_proj.weight"]))

    def _forward(self, ids: torch.Tensor, start: int, cache) -> torch.Tensor:
        """Logits [B, T, vocab] of ids at positions start..start+T-1."""
        cos, sin = self._rope(torch.arange(start, start + ids.shape[1]))
        x = self._embed(ids)
        for i in range(self.model.layers):
            pre = f"model.layers.{i}."
            x = x + self._attention(i, self._rms(x, self.w[pre + "input_layernorm.weight"]), cos, sin, cache)
            x = x + self._mlp(i, self._rms(x, self.w[pre + "post_attention_layernorm.weight"]))
        x = self._rms(x, self.w["model.norm.weight"])
        head = self.w.get("lm_head.weight", self.w["model.embed_tokens.weight"])
        return self._all_gather_last(F.linear(x, head))[..., :self.model.vocab]

    def _check_ids(self, ids, what: str) -> torch.Tensor:
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype not in (torch.int64, torch.int32):
            raise InputError(f"{what} must be an integer tensor [batch, tokens]")
        if ids.shape[0] == 0 or ids.shape[1] == 0:
            raise InputError(f"{what} is empty (shape {list(ids.shape)})")
        if int(ids.min()) < 0 or int(ids.max()) >= self.model.vocab:
            raise InputError(f"{what} holds token ids outside 0..{self.model.vocab - 1}")
        return ids.long()

    # ------------------------------------------------------------ API

    @torch.no_grad()
    def logits(self, input_ids: torch.LongTensor) -> torch.Tensor:
        """Full forward, no cache: [B, T] -> [B, T, vocab] fp32 (padding rows dropped)."""
        return self._forward(self._check_ids(input_ids, "input_ids"), 0, None)

    @torch.no_grad()
    def generate(self, prompts: torch.LongTensor, opts: SamplingOptions) -> torch.LongTensor:
        """Responses [B, max_new_tokens]: prefill, then one token at a time with a KV cache.

        Fixed length: no EOS stop. temperature 0 is greedy; otherwise
        softmax(logits / temperature) sampled with torch.multinomial from a
        generator seeded with opts.seed, so every rank draws the same tokens.
        """
        prompts = self._check_ids(prompts, "prompts")
        if opts.max_new_tokens < 0:
            raise InputError(f"max_new_tokens must be >= 0, not {opts.max_new_tokens}")
        if not math.isfinite(opts.temperature) or opts.temperature < 0:
            raise InputError(f"temperature must be >= 0, not {opts.temperature}")
        b, p = prompts.shape
        out = torch.empty(b, opts.max_new_tokens, dtype=torch.long)
        if opts.max_new_tokens == 0:
            return out
        gen = torch.Generator(device="cpu").manual_seed(opts.seed)
        cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        last = self._forward(prompts, 0, cache)[:, -1]
        for n in range(opts.max_new_tokens):
            if opts.temperature == 0:
                tok = last.argmax(dim=-1)
            else:
                probs = torch.softmax(last / opts.temperature, dim=-1)
                tok = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
            out[:, n] = tok
            if n + 1 < opts.max_new_tokens:
                last = self._forward(tok[:, None], p + n, cache)[:, -1]
        return out
