"""One GRPO step from verl 0.9.1's own pieces, on an engine from :mod:`model.verl_engine`.

What runs, in each rank's worker process (every rank passes the same full batch):

1. Rewards: :func:`token_reward`, the fraction of response tokens in a target set
   (ids below ``vocab // cfg.target_divisor``), put on the last response token
   (``token_level_rewards``).
2. Advantages on the full batch with
   ``verl.trainer.ppo.core_algos.compute_grpo_outcome_advantage(token_level_rewards,
   response_mask, index=uid)``: identical on every rank.
3. The rank's data-parallel slice, rows ``[rank*b, (rank+1)*b)`` with ``b = B / world``
   (verl's dispatch splits a batch into contiguous chunks), as a left/right padded
   ``verl.DataProto`` (``input_ids``, ``attention_mask``, ``position_ids``, ``prompts``,
   ``responses``, ``response_mask``, meta ``temperature``) turned into a TensorDict
   (``to_tensordict``) and into verl's no-padding format
   (``verl.workers.utils.padding.left_right_2_no_padding``), with the non-tensor keys
   ``TrainingWorker`` / the PPO trainer would add (``tu.assign_non_tensor``).
4. Old log-probs: ``engine.infer_batch`` inside ``engine.eval_mode()``, back to
   ``[b, R]`` with ``no_padding_2_padding`` (the trainer's ``_compute_old_log_prob``).
5. Update, as ``TrainingWorker.train_mini_batch`` does: the slice split into
   mini-batches of ``ppo_mini_batch_size * rollout_n / world`` rows, each
   ``engine.train_batch(data, loss_function=partial(ppo_loss, actor_config))`` inside
   ``engine.train_mode()``, then ``engine.lr_scheduler_step()`` once after the last.
   Metrics are gathered over the data-parallel group and reduced with verl's
   ``Metric.aggregate_dp``, so every rank returns the same values.

Deterministic: no sampling here; the same engine state and inputs give the same bits.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import torch

FIRST_TOKEN = 3  # ids 0..2: pad / bos / eos in the bundled configs


def token_reward(responses: torch.Tensor, target) -> torch.Tensor:
    """``[B]`` float32: the fraction of each response's tokens that lie in ``target``.

    ``target`` is a set of token ids (``frozenset``, ``set``, list) or a 1-D tensor of ids.
    """
    if not isinstance(responses, torch.Tensor) or responses.dim() != 2 or responses.dtype != torch.long:
        raise ValueError(f"responses must be a [B, R] int64 tensor, got "
                         f"{getattr(responses, 'dtype', type(responses).__name__)} "
                         f"{tuple(getattr(responses, 'shape', ()))}")
    if responses.shape[1] == 0:
        raise ValueError("responses have no tokens (R = 0)")
    if not isinstance(target, torch.Tensor):
        target = torch.tensor(sorted(target), dtype=torch.long)
    hits = torch.isin(responses, target.to(torch.long)).sum(dim=1)
    return hits.to(torch.float32) / responses.shape[1]


def make_prompts(vocab: int, n_prompts: int, prompt_len: int, seed: int) -> torch.Tensor:
    """``[n_prompts, prompt_len]`` int64 random prompts, ids in ``[3, vocab)``, from ``seed`` alone."""
    for name, v, lo in (("vocab", vocab, FIRST_TOKEN + 1), ("n_prompts", n_prompts, 1), ("prompt_len", prompt_len, 1)):
        if not isinstance(v, int) or isinstance(v, bool) or v < lo:
            raise ValueError(f"{name} {v!r} must be an integer >= {lo}")
    g = torch.Generator().manual_seed(seed)
    return torch.randint(FIRST_TOKEN, vocab, (n_prompts, prompt_len), generator=g, dtype=torch.long)


@dataclass(frozen=True)
class GrpoConfig:
    """GRPO settings; the PPO ones default to verl 0.9.1's ``ActorConfig`` defaults.

    ``ppo_mini_batch_size`` counts prompts (verl multiplies it by ``rollout_n``); None:
    the whole batch, one optimizer step per GRPO step. ``ppo_micro_batch_size_per_gpu``
    counts sequences; None: the whole per-rank mini-batch in one micro-batch. ``lr`` is
    the engine's (:func:`model.verl_engine.build_engine` takes it; ``grpo_step`` checks
    that they agree). The reward's target tokens are ids ``< vocab // target_divisor``.
    """
    rollout_n: int = 2
    ppo_mini_batch_size: int | None = None
    ppo_micro_batch_size_per_gpu: int | None = None
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float = 3.0
    loss_agg_mode: str = "token-mean"
    entropy_coeff: float = 0.0
    norm_adv_by_std_in_grpo: bool = True
    temperature: float = 1.0
    target_divisor: int = 4
    lr: float = 1e-5

    def __post_init__(self):
        if not isinstance(self.rollout_n, int) or isinstance(self.rollout_n, bool) or self.rollout_n < 2:
            raise ValueError(f"rollout_n {self.rollout_n!r} must be an integer >= 2 (GRPO compares a group)")
        for name in ("ppo_mini_batch_size", "ppo_micro_batch_size_per_gpu"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ValueError(f"{name} {v!r} must be a positive integer or None")
        if not isinstance(self.target_divisor, int) or self.target_divisor < 1:
            raise ValueError(f"target_divisor {self.target_divisor!r} must be a positive integer")
        if not self.temperature > 0:
            raise ValueError(f"temperature {self.temperature!r} must be positive")

    def target_ids(self, vocab: int) -> frozenset[int]:
        return frozenset(range(vocab // self.target_divisor))

    def actor_config(self, mini_batch_size: int, micro_batch_size: int):
        """verl's ``ActorConfig`` for ``ppo_loss`` (fsdp2, fixed micro-batches)."""
        from verl.workers.config import ActorConfig
        return ActorConfig(strategy="fsdp2", rollout_n=self.rollout_n, ppo_mini_batch_size=mini_batch_size,
                           ppo_micro_batch_size_per_gpu=micro_batch_size, use_dynamic_bsz=False,
                           clip_ratio=self.clip_ratio_low, clip_ratio_low=self.clip_ratio_low,
                           clip_ratio_high=self.clip_ratio_high, clip_ratio_c=self.clip_ratio_c,
                           loss_agg_mode=self.loss_agg_mode, entropy_coeff=self.entropy_coeff,
                           use_torch_compile=False)


def _engine_keys(micro_batch_size: int, max_token_len: int) -> dict:
    """The engineering keys ``TrainingWorker.train_batch`` / ``infer_batch`` inject."""
    return dict(use_remove_padding=False, use_dynamic_bsz=False, micro_batch_size_per_gpu=micro_batch_size,
                max_token_len_per_gpu=max_token_len, use_fused_kernels=False)


def _batch(prompts, responses, temperature, **extra):
    """verl's no-padding TensorDict of (prompt, response) rows, all tokens valid."""
    from verl import DataProto
    from verl.workers.utils.padding import left_right_2_no_padding
    input_ids = torch.cat([prompts, responses], dim=1)
    attention_mask = torch.ones_like(input_ids)
    position_ids = torch.arange(input_ids.shape[1]).expand_as(input_ids).contiguous()
    data = DataProto.from_single_dict(
        {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids,
         "prompts": prompts, "responses": responses, "response_mask": torch.ones_like(responses), **extra},
        meta_info={"temperature": temperature})
    return left_right_2_no_padding(data.to_tensordict())


def _check(engine, prompts, responses, uid, cfg, rank, world):
    if not isinstance(cfg, GrpoConfig):
        raise TypeError(f"cfg must be a GrpoConfig, not {type(cfg).__name__}")
    for name, t in (("prompts", prompts), ("responses", responses)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2 or t.dtype != torch.long:
            raise ValueError(f"{name} must be a [B, L] int64 tensor")
    B = prompts.shape[0]
    if responses.shape[0] != B or len(uid) != B:
        raise ValueError(f"batch sizes differ: prompts {B}, responses {responses.shape[0]}, uid {len(uid)}")
    if prompts.shape[1] < 1 or responses.shape[1] < 1:
        raise ValueError(f"prompt length {prompts.shape[1]} and response length {responses.shape[1]} "
                         f"must be >= 1")
    if B % cfg.rollout_n:
        raise ValueError(f"batch {B} is not a multiple of rollout_n {cfg.rollout_n}")
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} outside world {world}")
    dp = engine.get_data_parallel_size()
    if dp != world:
        raise ValueError(f"world {world} != the engine's data-parallel size {dp}")
    if engine.optimizer_config.lr != cfg.lr:
        raise ValueError(f"cfg.lr {cfg.lr} != the engine's optimizer lr {engine.optimizer_config.lr}")
    n_prompts = B // cfg.rollout_n
    mini = cfg.ppo_mini_batch_size or n_prompts
    if n_prompts % mini:
        raise ValueError(f"ppo_mini_batch_size {mini} does not divide the {n_prompts} prompts")
    if (mini * cfg.rollout_n) % world:
        raise ValueError(f"a mini-batch of {mini} prompts x rollout_n {cfg.rollout_n} does not split over "
                         f"{world} ranks")
    per_rank = mini * cfg.rollout_n // world
    micro = cfg.ppo_micro_batch_size_per_gpu or per_rank
    if per_rank % micro:
        raise ValueError(f"ppo_micro_batch_size_per_gpu {micro} does not divide the per-rank mini-batch "
                         f"{per_rank}")
    vocab = engine.model_config.hf_config.vocab_size
    for name, t in (("prompts", prompts), ("responses", responses)):
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= vocab):
            raise ValueError(f"{name} hold ids outside [0, {vocab})")
    return mini, per_rank, micro


def _reduce_metrics(metrics: dict, group) -> dict:
    """A rank's ``train_batch`` metrics -> verl's reported values (``TrainingWorker`` +
    ``train_mini_batch``: gathered over the data-parallel group, ``Metric.aggregate_dp``)."""
    from verl.utils.metric.utils import Metric
    from verl.utils.torch_functional import allgather_dict_into_dict
    gathered = allgather_dict_into_dict(data=metrics, group=group)
    out = {}
    for key, per_rank in gathered.items():
        first = per_rank[0]
        if isinstance(first, list) and first and isinstance(first[0], Metric):
            merged = []
            for lst in per_rank:
                m = lst[0].init_list()
                for x in lst:
                    m.extend(x)
                merged.append(m)
            out[key] = float(Metric.aggregate_dp(merged))
        elif isinstance(first, Metric):
            out[key] = float(Metric.aggregate_dp(per_rank))
        else:
            vals = [v for lst in per_rank for v in (lst if isinstance(lst, list) else [lst])]
            out[key] = float(np.mean(vals))
    return out


def grpo_step(engine, prompts: torch.Tensor, responses: torch.Tensor, uid, cfg: GrpoConfig, *,
              rank: int, world: int) -> dict:
    """One GRPO iteration on this rank (collective: every rank calls it with the same full batch).

    ``prompts`` ``[B, P]``, ``responses`` ``[B, R]`` (int64, every token valid), ``uid`` the
    group id of each row (B entries; the ``rollout_n`` samples of a prompt share one).

    Returns ``rewards`` ``[B]`` float32 (full batch), ``advantages`` ``[B, R]`` float32 (full
    batch, identical on every rank; each row its sequence's advantage on every token),
    ``old_log_probs`` ``[b, R]`` float32 (this rank's rows ``rows``), ``pg_loss`` and
    ``grad_norm`` (floats, verl's ``actor/pg_loss`` and ``grad_norm``, mean over
    mini-batches), ``reward_mean``, ``lr`` (after the scheduler step), ``mini_batches``,
    ``rows`` (this rank's ``(start, stop)``) and ``metrics`` (every metric verl reported,
    per mini-batch, reduced as verl does).
    """
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.losses import ppo_loss
    from verl.workers.utils.padding import no_padding_2_padding

    mini, per_rank, micro = _check(engine, prompts, responses, uid, cfg, rank, world)
    prompts, responses = prompts.cpu(), responses.cpu()
    B, R = responses.shape
    max_tokens = prompts.shape[1] + R
    vocab = engine.model_config.hf_config.vocab_size

    # 1-2. rewards and group advantages, full batch
    rewards = token_reward(responses, cfg.target_ids(vocab))
    response_mask = torch.ones(B, R, dtype=torch.float32)
    token_level_rewards = torch.zeros(B, R, dtype=torch.float32)
    token_level_rewards[:, -1] = rewards
    advantages, _returns = compute_grpo_outcome_advantage(
        token_level_rewards, response_mask, index=np.asarray(list(uid), dtype=object),
        norm_adv_by_std_in_grpo=cfg.norm_adv_by_std_in_grpo)

    # 3. this rank's data-parallel slice
    b = B // world
    lo, hi = rank * b, (rank + 1) * b
    p_r, r_r, a_r = prompts[lo:hi], responses[lo:hi], advantages[lo:hi]

    # 4. old log-probs (the trainer's _compute_old_log_prob)
    data = _batch(p_r, r_r, cfg.temperature)
    tu.assign_non_tensor(data, calculate_entropy=False, compute_loss=False, **_engine_keys(micro, max_tokens))
    with engine.eval_mode():
        out = engine.infer_batch(data, loss_function=None)
    old_log_probs = no_padding_2_padding(out["model_output"]["log_probs"], data).float()

    # 5. update (TrainingWorker.train_mini_batch -> train_batch)
    actor_config = cfg.actor_config(mini, micro)
    loss_fn = partial(ppo_loss, actor_config)
    group = engine.get_data_parallel_group()
    per_mini = []
    for start in range(0, b, per_rank):
        sl = slice(start, start + per_rank)
        data = _batch(p_r[sl], r_r[sl], cfg.temperature, old_log_probs=old_log_probs[sl], advantages=a_r[sl])
        tu.assign_non_tensor(data, calculate_entropy=cfg.entropy_coeff != 0, compute_loss=True,
                             global_batch_size=mini * cfg.rollout_n, **_engine_keys(micro, max_tokens))
        with engine.train_mode():
            out = engine.train_batch(data, loss_function=loss_fn)
        per_mini.append(_reduce_metrics(out["metrics"], group))
    lr = engine.lr_scheduler_step()

    return {
        "rewards": rewards,
        "advantages": advantages.float(),
        "old_log_probs": old_log_probs,
        "pg_loss": float(np.mean([m["actor/pg_loss"] for m in per_mini])),
        "grad_norm": float(np.mean([m["grad_norm"] for m in per_mini])),
        "reward_mean": float(rewards.mean()),
        "lr": float(lr),
        "mini_batches": len(per_mini),
        "rows": (lo, hi),
        "metrics": per_mini,
    }
