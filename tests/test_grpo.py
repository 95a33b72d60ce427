"""The GRPO pieces that run without an engine: reward rule, prompts, configuration checks.

``grpo_step`` itself runs inside verl's engine in worker processes; tests/test_loop.py
checks its rewards and advantages from the loop's records against independent formulas.
"""
from __future__ import annotations

import pytest
import torch

from model.grpo import FIRST_TOKEN, GrpoConfig, make_prompts, token_reward


def test_token_reward_is_the_fraction_in_the_target_set():
    responses = torch.tensor([[1, 2, 3, 4], [9, 9, 9, 9], [0, 5, 1, 5]])
    got = token_reward(responses, {1, 5})
    assert torch.equal(got, torch.tensor([0.25, 0.0, 0.75]))
    assert got.dtype == torch.float32
    assert torch.equal(token_reward(responses, torch.tensor([9])), torch.tensor([0.0, 1.0, 0.0]))


@pytest.mark.parametrize("bad", [torch.zeros(3, dtype=torch.long), torch.zeros(2, 3), torch.zeros(2, 0, dtype=torch.long)])
def test_token_reward_rejects_bad_responses(bad):
    with pytest.raises(ValueError):
        token_reward(bad, {1})


def test_prompts_depend_on_the_seed_only_and_stay_in_range():
    a = make_prompts(1000, 4, 8, seed=3)
    assert a.shape == (4, 8) and a.dtype == torch.long
    assert int(a.min()) >= FIRST_TOKEN and int(a.max()) < 1000
    assert torch.equal(a, make_prompts(1000, 4, 8, seed=3))
    assert not torch.equal(a, make_prompts(1000, 4, 8, seed=4))


@pytest.mark.parametrize("kw", [dict(vocab=3, n_prompts=1, prompt_len=1), dict(vocab=100, n_prompts=0, prompt_len=1),
                                dict(vocab=100, n_prompts=1, prompt_len=True)])
def test_prompts_reject_bad_sizes(kw):
    with pytest.raises(ValueError):
        make_prompts(seed=0, **kw)


@pytest.mark.parametrize("kw, needle", [(dict(rollout_n=1), "rollout_n"), (dict(ppo_mini_batch_size=0), "ppo_mini"),
                                        (dict(target_divisor=0), "target_divisor"), (dict(temperature=0.0), "temperature")])
def test_config_rejects_bad_values(kw, needle):
    with pytest.raises(ValueError, match=needle):
        GrpoConfig(**kw)


def test_target_ids_and_verl_actor_config():
    cfg = GrpoConfig(rollout_n=4)
    assert cfg.target_ids(1000) == frozenset(range(250))
    ac = cfg.actor_config(mini_batch_size=2, micro_batch_size=4)
    assert (ac.rollout_n, ac.ppo_mini_batch_size, ac.clip_ratio_low, ac.loss_agg_mode) == (4, 2, 0.2, "token-mean")
