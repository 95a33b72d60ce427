"""Real captures from verl 0.9.1's FSDPEngine on CPU (gloo): ``model.capture`` / ``gen capture``.

Each capture runs once per worker (fixtures in tests/conftest.py), into pytest's tmp dir.
"""
from __future__ import annotations

import collections
import json

import pytest
from conftest import capture_trace

from model.capture import SCHEMA, CaptureError, TraceData, capture, read_trace
from model.errors import InputError
from model.models import load_model

MODEL = "tiny-qwen2"


@pytest.fixture(scope="module")
def fsdp1_w4(tmp_path_factory):
    return capture_trace(tmp_path_factory, "fsdp1", 4)


CASES = [
    pytest.param(("fsdp2_w2", "fsdp2", 2), id="fsdp2-w2"),
    pytest.param(("fsdp1_w2", "fsdp1", 2), id="fsdp1-w2"),
    pytest.param(("fsdp2_w4", "fsdp2", 4), id="fsdp2-w4", marks=pytest.mark.slow),
    pytest.param(("fsdp1_w4", "fsdp1", 4), id="fsdp1-w4", marks=pytest.mark.slow),
]


@pytest.fixture
def case(request):
    fixture, strategy, world = request.param
    return request.getfixturevalue(fixture), strategy, world


def cases(fn):
    return pytest.mark.parametrize("case", CASES, indirect=True)(fn)


# --------------------------------------------------------------------------- #

@cases
def test_header(case):
    trace, strategy, world = case
    h = trace["header"]
    spec = load_model(MODEL)
    assert h["kind"] == "header" and h["schema"] == SCHEMA
    assert h["versions"]["verl"] == "0.9.1"
    assert h["versions"]["torch"].startswith("2.13.0")
    assert h["versions"]["transformers"]
    assert h["model"] == MODEL and h["config"] == spec.config
    assert h["strategy"] == strategy and h["world"] == world
    assert h["dtype"] == "float32"  # verl's fp32 master weights
    assert h["bucket_mb"] == 2048 and h["seed"] == 0
    assert h["records"] == {"shard": len(trace["shards"]), "collective": len(trace["collectives"]),
                            "bucket": len(trace["buckets"])}
    # verl exports every HF parameter, under its HF name
    assert h["export_order"] == [p.name for p in spec.params]


@cases
def test_shards_partition_every_parameter(case):
    trace, strategy, world = case
    spec = load_model(MODEL)
    by_param = collections.defaultdict(list)
    for s in trace["shards"]:
        by_param[s["param"]].append(s)
    assert set(by_param) == {p.name for p in spec.params}
    for p in spec.params:
        shards = by_param[p.name]
        assert sorted(s["rank"] for s in shards) == list(range(world)), p.name
        cover = [0] * p.numel
        for s in shards:
            assert s["shape"] == list(p.shape)
            for a, b in s["ranges"]:
                assert 0 <= a < b <= p.numel
                for i in range(a, b):
                    cover[i] += 1
        assert all(c == 1 for c in cover), f"{p.name}: not an exact partition"


def test_fsdp1_flat_ranges(fsdp1_w2):
    """FSDP1: each rank holds [r*S, (r+1)*S) of each unit's flat parameter."""
    units = collections.defaultdict(list)
    for s in fsdp1_w2["shards"]:
        f = s["flat"]
        units[f["unit"]].append(s)
        assert f["shard_start"] == s["rank"] * f["shard_numel"]
        assert f["unit_padded_numel"] == 2 * f["shard_numel"] >= f["unit_numel"]
        n = sum(b - a for a, b in s["ranges"])
        assert f["stop"] - f["start"] == n
        if n:
            assert f["shard_start"] <= f["start"] and f["stop"] <= f["shard_start"] + f["shard_numel"]
            assert f["start"] - f["param_start"] == s["ranges"][0][0]
    assert "" in units and "model.layers.0" in units  # root unit + one unit per decoder layer
    root = {s["param"] for s in units[""]}
    assert {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"} <= root


@cases
def test_collective_records(case):
    trace, strategy, world = case
    per_rank = collections.defaultdict(list)
    for c in trace["collectives"]:
        per_rank[c["rank"]].append(c)
        assert c["phase"] in ("init", "export", "forward", "backward", "optimizer")
        assert c["ranks"] == list(range(world))
        assert c["bytes"] >= 0 and c["bytes_in"] >= 0 and c["bytes_out"] >= 0
        assert isinstance(c["t_us"], int)
    assert sorted(per_rank) == list(range(world))
    # SPMD: every rank issues the same collectives, in the same order, with the same sizes
    shapes = {r: [(c["phase"], c["op"], c["dtype"], c["bytes"]) for c in cs] for r, cs in per_rank.items()}
    for r in range(world):
        assert [c["seq"] for c in per_rank[r]] == list(range(len(per_rank[r])))
        assert shapes[r] == shapes[0]


@cases
def test_export_all_gathers(case):
    trace, strategy, world = case
    spec = load_model(MODEL)
    export = [c for c in trace["collectives"] if c["phase"] == "export"]
    gathers = [c for c in export if c["op"] == "all_gather"]
    assert gathers and all(c["dtype"] == "float32" for c in gathers)
    # one full_tensor() all-gather per parameter, tagged with the HF name
    for r in range(world):
        tagged = [c["param"] for c in gathers if c["rank"] == r and "param" in c]
        assert tagged == [p.name for p in spec.params]
    if strategy == "fsdp2":
        local = collections.Counter()
        for s in trace["shards"]:
            local[(s["rank"], s["param"])] = sum(b - a for a, b in s["ranges"])
        for r in range(world):
            expect = sum((p.numel - local[(r, p.name)]) * 4 for p in spec.params)
            got = sum(c["bytes_in"] for c in export if c["rank"] == r)
            assert got == expect


@cases
def test_training_phases(case):
    trace, strategy, world = case
    by_phase = collections.defaultdict(collections.Counter)
    for c in trace["collectives"]:
        by_phase[c["phase"]][c["op"]] += 1
    for phase in ("forward", "backward", "optimizer"):
        assert by_phase[phase], f"no collectives in {phase}"
    assert by_phase["forward"]["all_gather"] > 0  # FSDP unshards parameters for the forward
    assert by_phase["backward"]["reduce_scatter"] > 0  # gradients are reduce-scattered
    assert by_phase["optimizer"]["all_reduce"] > 0  # grad-norm for clipping
    # mixed precision: verl's default bf16 param_dtype on the forward all-gathers, fp32 reduce
    fwd = [c for c in trace["collectives"] if c["phase"] == "forward" and c["op"] == "all_gather"]
    assert {c["dtype"] for c in fwd} == {trace["header"]["param_dtype"]} == {"bfloat16"}
    rs = [c for c in trace["collectives"] if c["op"] == "reduce_scatter"]
    assert {c["dtype"] for c in rs} == {"float32"}
    if strategy == "fsdp2":
        # reduce-scatter output is each rank's gradient shard: bytes_in = (world-1) * output
        for c in rs:
            assert c["bytes_in"] == (world - 1) * c["bytes"]


@cases
def test_buckets_cover_every_parameter(case):
    trace, strategy, world = case
    spec = load_model(MODEL)
    seen = collections.Counter()
    for i, b in enumerate(trace["buckets"]):
        assert b["index"] == i and b["sender"] == "BucketedWeightSender"
        assert b["bytes"] <= b["bucket_bytes"] == 2048 << 20
        for p in b["params"]:
            seen[p["name"]] += 1
            assert p["bytes"] == spec.param(p["name"]).numel * 4
            assert p["offset"] % 4 == 0 and p["offset"] + p["bytes"] <= b["bytes"]
    assert seen == collections.Counter(p.name for p in spec.params)
    assert len(trace["buckets"]) == 1  # tiny model, 2 GB bucket


@pytest.mark.slow
def test_small_buckets(tmp_path_factory):
    """verl's sender packs in order and starts a new bucket when the next tensor does not fit."""
    cfg = dict(load_model(MODEL).config, vocab_size=4000)  # embed/lm_head ~1 MB each
    path = tmp_path_factory.mktemp("cfg") / "config.json"
    path.write_text(json.dumps(cfg))
    out = path.parent / "trace.jsonl"
    capture(str(path), "fsdp2", 1, out, bucket_mb=1, progress=lambda m: None, timeout=300)
    trace = read_trace(out)
    spec = load_model(str(path))
    buckets = trace["buckets"]
    assert len(buckets) > 1
    names = [p["name"] for b in buckets for p in b["params"]]
    assert names == [p.name for p in spec.params]
    for b, nxt in zip(buckets, buckets[1:]):
        assert b["bytes"] <= 1 << 20
        first = nxt["params"][0]["bytes"]
        assert b["bytes"] + first > 1 << 20  # the next tensor would not have fit


# --------------------------------------------------------------------------- #
# Errors
# --------------------------------------------------------------------------- #

def test_worker_crash_reports_one_line_and_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setenv("RESHARDIP_CAPTURE_FAULT", "1:backward")
    out = tmp_path / "t.jsonl"
    with pytest.raises(CaptureError) as e:
        capture(MODEL, "fsdp2", 2, out, progress=lambda m: None, timeout=300)
    msg = str(e.value)
    assert "\n" not in msg
    assert "rank 1" in msg and "injected fault on rank 1 in phase backward" in msg
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, needle", [
    (["--strategy", "fsdp3"], "unknown strategy 'fsdp3'"),
    (["--world", "0"], "world 0"),
    (["--world", "1000"], "world 1000"),
    (["--bucket-mb", "0"], "bucket size 0"),
    (["--model", "no-such-model"], "unknown model"),
])
def test_cli_input_errors(argv, needle, tmp_path, capsys):
    from gen.cli import main
    out = tmp_path / "t.jsonl"
    assert main(["capture", "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and needle in err[0]
    assert not out.exists()


def _write(tmp_path, lines):
    p = tmp_path / "t.jsonl"
    p.write_text("".join(line + "\n" for line in lines))
    return p


def test_read_trace_errors(tmp_path, fsdp2_w2):
    good = [json.dumps(fsdp2_w2["header"])] + [json.dumps(r) for r in
                                                fsdp2_w2["shards"] + fsdp2_w2["collectives"] + fsdp2_w2["buckets"]]
    assert read_trace(_write(tmp_path, good))["header"] == fsdp2_w2["header"]
    with pytest.raises(InputError, match=r"t\.jsonl:3: invalid JSON"):
        read_trace(_write(tmp_path, good[:2] + ["{not json"] + good[3:]))
    bad = dict(fsdp2_w2["header"], schema=2)
    with pytest.raises(InputError, match=r"t\.jsonl:1: unknown trace schema 2"):
        read_trace(_write(tmp_path, [json.dumps(bad)] + good[1:]))
    with pytest.raises(InputError, match=r"t\.jsonl:2: unknown record kind 'blob'"):
        read_trace(_write(tmp_path, good[:1] + ['{"kind": "blob"}'] + good[1:]))
    with pytest.raises(InputError, match=r"t\.jsonl:1: first line must be the header"):
        read_trace(_write(tmp_path, good[1:]))
    with pytest.raises(InputError, match=r"truncated"):
        read_trace(_write(tmp_path, good[:-3]))
    with pytest.raises(InputError, match=r"t\.jsonl:2: shard record lacks ranges"):
        read_trace(_write(tmp_path, good[:1] + ['{"kind": "shard", "rank": 0, "param": "x", "shape": [1]}']))
    with pytest.raises(InputError, match=r"cannot read trace"):
        read_trace(tmp_path / "missing.jsonl")


# --------------------------------------------------------------------------- #
# derived layouts and the verl scheme against the capture

@cases
def test_derived_layouts_equal_captured(case):
    from model.compare import compare_shards
    trace, strategy, world = case
    assert trace["shards"], "the capture recorded no shards"
    assert compare_shards(trace) == []


def test_layout_comparison_catches_a_difference(fsdp1_w2):
    from model.compare import compare_shards
    trace = json.loads(json.dumps(fsdp1_w2))
    rec = next(r for r in trace["shards"] if r["ranges"])
    rec["ranges"][0][1] -= 1
    assert any(rec["param"] in p for p in compare_shards(trace))


def test_verl_scheme_bytes_equal_captured_export(fsdp2_w2):
    from model.compare import compare_verl_bytes
    got, want = compare_verl_bytes(fsdp2_w2)
    assert got == want and all(g > 0 for g in got)


# ------------------------------------------------------------------ --record-data

def _reduce(op: str, xs):
    import torch
    if op == "sum":
        return xs[0] + xs[1]
    if op == "avg":
        return (xs[0] + xs[1]) / 2
    if op == "max":
        return torch.maximum(xs[0], xs[1])
    if op == "min":
        return torch.minimum(xs[0], xs[1])
    raise AssertionError(f"no reference for reduce op {op!r}")


def test_recorded_tensors_obey_every_collective_exactly(fsdp2_w2):
    """Independent rules on the recorded tensors of both ranks, bit for bit."""
    import torch
    data = TraceData(fsdp2_w2["path"])
    assert fsdp2_w2["header"]["data"]["arrays"] > 0
    per_rank = collections.defaultdict(list)
    for r in fsdp2_w2["collectives"]:
        if r["op"] == "barrier":
            assert "data" not in r
            continue
        assert "data" in r, (r["rank"], r["seq"], r["op"])
        per_rank[r["rank"]].append(r)
    assert len(per_rank[0]) == len(per_rank[1]) > 0
    seen = collections.Counter()
    for a, b in zip(per_rank[0], per_rank[1]):
        assert (a["op"], a.get("reduce_op")) == (b["op"], b.get("reduce_op"))
        (ia, oa), (ib, ob) = data.tensors(a), data.tensors(b)
        op = a["op"]
        if op == "all_gather":
            want = torch.cat([ia[0].reshape(-1), ib[0].reshape(-1)])
            got = [oa[0].reshape(-1), ob[0].reshape(-1)]
        elif op == "reduce_scatter":
            full = _reduce(a["reduce_op"], [ia[0].reshape(-1), ib[0].reshape(-1)])
            want = full
            got = [torch.cat([oa[0].reshape(-1), ob[0].reshape(-1)])]
        elif op == "all_reduce":
            want = torch.cat([_reduce(a["reduce_op"], [x, y]).reshape(-1) for x, y in zip(ia, ib)])
            got = [torch.cat([t.reshape(-1) for t in oa]), torch.cat([t.reshape(-1) for t in ob])]
        elif op == "broadcast":
            src = ia if a["root"] == 0 else ib
            want = torch.cat([t.reshape(-1) for t in src])
            got = [torch.cat([t.reshape(-1) for t in oa]), torch.cat([t.reshape(-1) for t in ob])]
        else:
            raise AssertionError(f"unexpected op {op}")
        for g in got:
            assert g.dtype == want.dtype and torch.equal(g.view(torch.uint8), want.contiguous().view(torch.uint8)), \
                (a["seq"], op, a.get("reduce_op"))
        seen[(op, a.get("reduce_op"))] += 1
    assert seen[("reduce_scatter", "avg")] > 0 and seen[("all_reduce", "sum")] > 0
    assert seen[("all_gather", None)] > 0 and seen[("broadcast", None)] > 0


def test_trace_without_data_says_so(fsdp1_w2, tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in [fsdp1_w2["header"], *fsdp1_w2["shards"],
                                                          *fsdp1_w2["collectives"], *fsdp1_w2["buckets"]]))
    with pytest.raises(InputError, match="capture it with --record-data"):
        TraceData(p)


def test_record_data_refuses_a_large_model(tmp_path, capsys):
    from gen.cli import main
    out = tmp_path / "t.jsonl"
    assert main(["capture", "--model", "qwen2.5-0.5b", "--record-data", "--out", str(out)]) == 2
    assert "--record-data" in capsys.readouterr().err and not out.exists()
