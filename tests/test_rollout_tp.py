"""The tensor-parallel rollout decoder against HF's Qwen2, at tp = 1, 2 and 4.

Weights: the tiny-qwen2 state dict from ``random_state_dict`` with its
values redrawn at O(1) scale (HF's init gives zero biases, unit norms and
near-uniform attention, which would hide bias, norm and RoPE mistakes).
"""
from __future__ import annotations

import pytest
import torch

from model.errors import InputError
from model.models import load_model, random_state_dict
from model.reference import vllm_local_tensors
from model.rollout_tp import SamplingOptions, TPDecoder
from model.specs import ParallelSpec

ATOL, RTOL = 1e-5, 1e-4
N_NEW = 6


def strong_state(spec, seed=0):
    sd = random_state_dict(spec, seed)
    g = torch.Generator().manual_seed(seed + 1)
    out = {}
    for name, t in sd.items():
        r = torch.randn(t.shape, generator=g)
        if name.endswith("norm.weight"):
            out[name] = 1.0 + 0.2 * r
        elif name.endswith(".bias"):
            out[name] = 0.5 * r
        elif name == "model.embed_tokens.weight":
            out[name] = r
        else:
            scale = 2.0 if name.endswith(("q_proj.weight", "k_proj.weight")) else 1.0
            out[name] = scale * r / t.shape[1] ** 0.5
    return out


def hf_model(spec, sd):
    from transformers import AutoModelForCausalLM
    cfg = spec.hf_config()
    cfg._attn_implementation = "eager"
    m = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    m.load_state_dict(sd)
    return m.eval()


def inputs():
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, 1000, (3, 9), generator=g)
    ids[0, 0], ids[1, 1] = 999, 0          # both ends of the vocabulary
    return ids


def greedy_by_full_forward(logits_fn, prompts, n):
    """Greedy decoding that recomputes the whole sequence every step (no cache)."""
    seq = prompts
    for _ in range(n):
        tok = logits_fn(seq)[:, -1].argmax(-1)
        seq = torch.cat([seq, tok[:, None]], dim=1)
    return seq[:, prompts.shape[1]:]


def decoder_results(dec, ids):
    """Everything the tests compare, from one decoder (one rank)."""
    return {
        "logits": dec.logits(ids),
        "greedy": dec.generate(ids, SamplingOptions(max_new_tokens=N_NEW, temperature=0.0)),
        "greedy_nocache": greedy_by_full_forward(dec.logits, ids, N_NEW),
        "sampled": dec.generate(ids, SamplingOptions(max_new_tokens=N_NEW, temperature=1.0, seed=3)),
        "sampled_again": dec.generate(ids, SamplingOptions(max_new_tokens=N_NEW, temperature=1.0, seed=3)),
    }


@pytest.fixture(scope="module")
def case():
    spec = load_model("tiny-qwen2")
    sd = strong_state(spec)
    hf = hf_model(spec, sd)
    ids = inputs()
    with torch.no_grad():
        ref_logits = hf(ids).logits
        ref_greedy = greedy_by_full_forward(lambda s: hf(s).logits, ids, N_NEW)
    return spec, sd, ids, ref_logits, ref_greedy


def check_against_hf(res, ref_logits, ref_greedy):
    torch.testing.assert_close(res["logits"], ref_logits, atol=ATOL, rtol=RTOL)
    assert res["logits"].dtype == torch.float32
    assert torch.equal(res["greedy"], ref_greedy)
    assert torch.equal(res["greedy_nocache"], res["greedy"])
    assert torch.equal(res["sampled"], res["sampled_again"])
    assert res["sampled"].shape == (ref_greedy.shape[0], N_NEW)
    assert not torch.equal(res["sampled"], res["greedy"])      # temperature 1 actually samples


def test_tp1_matches_hf(case):
    spec, sd, ids, ref_logits, ref_greedy = case
    dec = TPDecoder(spec, vllm_local_tensors(sd, spec, ParallelSpec("vllm", tp=1), 0), tp=1, rank=0)
    res = decoder_results(dec, ids)
    check_against_hf(res, ref_logits, ref_greedy)
    # a different seed draws different tokens; zero new tokens is an empty answer
    other = dec.generate(ids, SamplingOptions(max_new_tokens=N_NEW, temperature=1.0, seed=4))
    assert not torch.equal(other, res["sampled"])
    assert dec.generate(ids, SamplingOptions(max_new_tokens=0)).shape == (3, 0)


def test_tp1_matches_hf_generate(case):
    """HF's own generate (greedy, EOS disabled) gives the same tokens."""
    spec, sd, ids, _, ref_greedy = case
    hf = hf_model(spec, sd)
    with torch.no_grad():
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=N_NEW,
                          min_new_tokens=N_NEW, eos_token_id=None, pad_token_id=0)
    assert torch.equal(out[:, ids.shape[1]:], ref_greedy)


def _worker(rank, tp, init_file, sd, ids, out_dir):
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=tp)
    try:
        spec = load_model("tiny-qwen2")
        shards = vllm_local_tensors(sd, spec, ParallelSpec("vllm", tp=tp), rank)
        dec = TPDecoder(spec, shards, tp=tp, rank=rank)
        torch.save(decoder_results(dec, ids), f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("tp", [2, 4])
def test_tp_matches_hf(case, tp, tmp_path):
    import torch.multiprocessing as mp
    spec, sd, ids, ref_logits, ref_greedy = case
    # a failure in any rank raises here (ProcessRaisedException)
    mp.start_processes(_worker, args=(tp, str(tmp_path / "init"), sd, ids, str(tmp_path)),
                       nprocs=tp, join=True, start_method="spawn")
    results = [torch.load(tmp_path / f"rank{r}.pt") for r in range(tp)]
    for res in results:
        check_against_hf(res, ref_logits, ref_greedy)
    for res in results[1:]:
        for key in ("logits", "greedy", "sampled"):
            assert torch.equal(res[key], results[0][key]), key


def test_tp2_shards_differ_from_tp1(case):
    """The tp=2 shards really are slices: rank 0 alone (no collectives) cannot pass as tp=1."""
    spec, sd, _, _, _ = case
    shards = vllm_local_tensors(sd, spec, ParallelSpec("vllm", tp=2), 0)
    with pytest.raises(InputError, match=r"'model\.embed_tokens\.weight' has shape \[512, 64\]"):
        TPDecoder(spec, shards, tp=1, rank=0)


def test_bad_shards_named(case):
    spec, sd, _, _, _ = case
    good = vllm_local_tensors(sd, spec, ParallelSpec("vllm", tp=1), 0)
    missing = {k: v for k, v in good.items() if k != "model.layers.1.mlp.down_proj.weight"}
    with pytest.raises(InputError, match=r"missing tensor 'model\.layers\.1\.mlp\.down_proj\.weight'"):
        TPDecoder(spec, missing, tp=1, rank=0)
    wrong = dict(good)
    wrong["model.layers.0.self_attn.qkv_proj.bias"] = good["model.layers.0.self_attn.qkv_proj.bias"][:-1]
    with pytest.raises(InputError, match=r"'model\.layers\.0\.self_attn\.qkv_proj\.bias' has shape \[127\]"):
        TPDecoder(spec, wrong, tp=1, rank=0)
    extra = dict(good, **{"model.layers.0.self_attn.q_proj.weight": sd["model.layers.0.self_attn.q_proj.weight"]})
    with pytest.raises(InputError, match=r"unexpected tensor 'model\.layers\.0\.self_attn\.q_proj\.weight'"):
        TPDecoder(spec, extra, tp=1, rank=0)
    with pytest.raises(InputError, match="torch.distributed"):
        TPDecoder(spec, good, tp=2, rank=0)
    with pytest.raises(InputError, match="tp=3"):
        TPDecoder(spec, good, tp=3, rank=0)
    dec = TPDecoder(spec, good, tp=1, rank=0)
    with pytest.raises(InputError, match="outside"):
        dec.logits(torch.tensor([[0, 1000]]))
