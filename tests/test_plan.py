"""Plans rebuild exactly the vLLM shards of real tensors; bytes obey the formulas."""
import json
import subprocess
import sys

import numpy as np
import pytest

from model.errors import InputError
from model.models import load_model, random_state_dict, spec_from_config
from model.plan import make_plan
from model.reference import apply_transfers, rollout_buffers, train_buffers
from model.specs import parse_spec

CASES = [
    ("fsdp2:dp=2", "vllm:tp=2"), ("fsdp2:dp=2", "vllm:tp=1"), ("fsdp2:dp=4", "vllm:tp=2"),
    ("fsdp2:dp=4", "vllm:tp=4"), ("fsdp1:dp=2", "vllm:tp=2"), ("fsdp1:dp=4", "vllm:tp=4"),
    ("fsdp1:dp=4", "vllm:tp=1"), ("fsdp2:dp=4", "vllm:tp=2,pp=2"),
    ("megatron:tp=2,pp=1,dp=2", "vllm:tp=4"), ("megatron:tp=2,pp=2,dp=1", "vllm:tp=2"),
    ("megatron:tp=1,pp=2,dp=2", "vllm:tp=1"), ("megatron:tp=2,pp=1,dp=1", "vllm:tp=1"),
]


def _check(model, sd, train, rollout):
    ts, rs = parse_spec(train, "train"), parse_spec(rollout, "rollout")
    plan = make_plan(model, ts, rs, "fp32", "minimal")
    tb = train_buffers(sd, model, ts)
    rb = rollout_buffers(sd, model, rs, ts.world)
    assert [len(b) for b in tb] == [r.size for r in plan.train_layout.ranks]
    got = apply_transfers(plan.transfers, tb, [len(b) for b in rb])
    for r, (a, b) in enumerate(zip(got, rb)):
        assert np.array_equal(a, b), f"rank {r} differs for {train} -> {rollout}"
    return plan


@pytest.mark.parametrize("train,rollout", CASES)
def test_minimal_plan_rebuilds_vllm_shards(tiny, tiny_state, train, rollout):
    plan = _check(tiny, tiny_state, train, rollout)
    # each element of each rollout shard arrives once: received + local == non-padding size
    for g, rl in enumerate(plan.rollout_layout.ranks):
        held = sum(p.numel for p in rl.pieces) * 4
        assert plan.bytes_in[g] + plan.local_bytes[g] == held
    assert sum(plan.bytes_in) == sum(plan.bytes_out)


def _small_config(heads, kv, hidden_per_head, inter, layers, vocab, tied, mt="qwen2"):
    return {"model_type": mt, "vocab_size": vocab, "hidden_size": heads * hidden_per_head,
            "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": kv, "tie_word_embeddings": tied, "max_position_embeddings": 64}


@pytest.mark.parametrize("cfg,train,rollout", [
    # tp larger than the KV head count: KV heads replicated
    (_small_config(8, 2, 4, 48, 2, 100, False), "fsdp2:dp=8", "vllm:tp=8"),
    (_small_config(8, 2, 4, 48, 2, 100, False), "fsdp1:dp=4", "vllm:tp=4"),
    (_small_config(8, 2, 4, 48, 2, 100, False), "megatron:tp=2,pp=2,dp=2", "vllm:tp=8"),
    # tied embeddings, odd sizes (uneven chunks, empty FSDP2 shards)
    (_small_config(6, 3, 4, 30, 3, 77, True), "fsdp2:dp=5", "vllm:tp=1"),
    (_small_config(4, 2, 4, 30, 3, 77, True), "fsdp1:dp=4", "vllm:tp=2"),
    (_small_config(6, 3, 4, 30, 3, 150, True), "fsdp2:dp=6", "vllm:tp=6"),
    (_small_config(4, 4, 8, 40, 2, 200, False, "llama"), "megatron:tp=4,pp=1,dp=1", "vllm:tp=2"),
    (_small_config(4, 1, 8, 40, 2, 200, False, "mistral"), "fsdp2:dp=4", "vllm:tp=4"),
])
def test_random_small_configs(cfg, train, rollout):
    model = spec_from_config(cfg, name="small")
    sd = random_state_dict(model, seed=1)
    _check(model, sd, train, rollout)


def test_verl_scheme_bytes(tiny):
    plan = make_plan(tiny, parse_spec("fsdp2:dp=2", "train"), parse_spec("vllm:tp=2", "rollout"), "fp32", "verl")
    expect = [0, 0]
    for p in tiny.params:
        n0 = p.shape[0]
        c = -(-n0 // 2)
        for r in range(2):
            held = max(0, min((r + 1) * c, n0) - r * c) * (p.numel // n0)
            expect[r] += (p.numel - held) * 4
    assert plan.bytes_in == expect
    assert sum(plan.bytes_out) == sum(plan.bytes_in)


def test_minimal_is_at_most_verl(tiny):
    for train in ("fsdp2:dp=4", "fsdp1:dp=4"):
        ts, rs = parse_spec(train, "train"), parse_spec("vllm:tp=2", "rollout")
        mn = make_plan(tiny, ts, rs, "bf16", "minimal")
        vr = make_plan(tiny, ts, rs, "bf16", "verl")
        assert all(a <= b for a, b in zip(mn.bytes_in, vr.bytes_in))
        assert mn.total_bytes < vr.total_bytes


@pytest.mark.parametrize("t,p,d,tg", [(4, 1, 2, 2), (4, 2, 1, 1), (2, 2, 2, 2), (8, 1, 1, 2)])
def test_hybridflow_volume_formula(t, p, d, tg):
    cfg = _small_config(8, 8, 16, 256, 4, 1024, False)
    model = spec_from_config(cfg, name="small")
    ts = parse_spec(f"megatron:tp={t},pp={p},dp={d}", "train")
    plan = make_plan(model, ts, parse_spec(f"vllm:tp={tg}", "rollout"), "fp32", "hybridflow")
    d_g = t // tg * p
    model_bytes = model.numel * 4
    for g in range(plan.world):
        # (d_g - 1)/(t*p) * M; shards also hold TP-replicated norms, a fraction of a percent here
        formula = (d_g - 1) / (t * p) * model_bytes
        assert abs(plan.bytes_in[g] - formula) <= 0.01 * formula
    assert sum(plan.bytes_in) == sum(plan.bytes_out)


@pytest.mark.parametrize("bad,msg", [
    (dict(model="nope"), "unknown model 'nope'"),
    (dict(train="fsdp3:dp=2"), "unknown train strategy 'fsdp3'"),
    (dict(train="fsdp2:dp=x"), "cannot read 'dp=x'"),
    (dict(rollout="vllm:tp=3"), "tp=3 does not divide the 4 attention heads"),
    (dict(train="fsdp2:dp=3"), "world 3 is not a multiple of rollout tp*pp=2"),
    (dict(dtype="fp8"), "unknown dtype 'fp8'"),
    (dict(scheme="magic"), "unknown scheme 'magic'"),
])
def test_cli_bad_input(tmp_path, bad, msg):
    args = dict(model="tiny-qwen2", train="fsdp2:dp=2", rollout="vllm:tp=2", dtype="bf16", scheme="minimal")
    args.update(bad)
    cmd = [sys.executable, "-m", "gen", "plan"] + [f"--{k}={v}" for k, v in args.items()]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and msg in lines[0], r.stderr
    assert list(tmp_path.iterdir()) == []


def test_cli_bad_config_file(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"model_type": "bert", "vocab_size": 10}')
    r = subprocess.run([sys.executable, "-m", "gen", "plan", "--model", str(cfg), "--train", "fsdp2:dp=2",
                        "--rollout", "vllm:tp=2"], capture_output=True, text=True)
    assert r.returncode == 2 and "not a Llama/Qwen2/Mistral-style decoder" in r.stderr
    cfg.write_text('{"model_type": ')
    r = subprocess.run([sys.executable, "-m", "gen", "plan", "--model", str(cfg), "--train", "fsdp2:dp=2",
                        "--rollout", "vllm:tp=2"], capture_output=True, text=True)
    assert r.returncode == 2 and "invalid JSON" in r.stderr and "line 1" in r.stderr


def test_cli_json(tmp_path):
    r = subprocess.run([sys.executable, "-m", "gen", "plan", "--model", "tiny-qwen2", "--train", "fsdp1:dp=2",
                        "--rollout", "vllm:tp=2", "--json", "--dtype", "fp32"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    for key in ("scheme", "bytes_in_per_rank", "bytes_out_per_rank", "total_bytes", "max_rank_bytes_in", "transfers"):
        assert key in d
    assert d["total_bytes"] == sum(d["bytes_in_per_rank"])
    remote = sum(t["rows"] * t["row_bytes"] for t in d["transfers"] if t["src"] != t["dst"])
    assert remote == d["total_bytes"]


def test_bundled_models_load():
    for name, layers, n in (("qwen2.5-7b", 28, 7_615_616_512), ("llama-3.1-70b", 80, 70_553_706_496),
                            ("qwen2.5-0.5b", 24, 494_032_768), ("llama-3.1-8b", 32, 8_030_261_248)):
        m = load_model(name)
        assert m.layers == layers and m.numel == n
    tied = load_model("qwen2.5-0.5b")
    assert tied.tied and "lm_head.weight" not in tied.param_index


def test_vocab_padding_must_split():
    model = spec_from_config(_small_config(6, 3, 4, 30, 3, 77, True), name="small")
    with pytest.raises(InputError, match="does not divide the padded vocabulary 128"):
        make_plan(model, parse_spec("fsdp1:dp=3", "train"), parse_spec("vllm:tp=3", "rollout"))


def test_spec_errors():
    with pytest.raises(InputError, match="needs dp=N"):
        parse_spec("fsdp2:", "train")
    with pytest.raises(InputError, match="takes tp, pp"):
        parse_spec("vllm:dp=2", "rollout")
