"""Chakra export (`python -m gen export --chakra`): round trip through mlc-chakra's own decoder."""
from __future__ import annotations

import json

import pytest

from chakra.schema.protobuf import et_def_pb2 as pb
from gen.chakra_export import COMM_TYPES, export_chakra, read_chakra
from gen.cli import main
from model.capture import read_trace
from model.errors import InputError

EXPECTED = {"all_gather": "ALL_GATHER", "reduce_scatter": "REDUCE_SCATTER", "all_reduce": "ALL_REDUCE",
            "broadcast": "BROADCAST", "all_to_all": "ALL_TO_ALL", "barrier": "BARRIER"}


def _coll(rank, seq, phase, op, nbytes, ranks, t, dur=None, **extra):
    rec = {"kind": "collective", "rank": rank, "seq": seq, "phase": phase, "op": op, "api": f"c10d.{op}",
           "dtype": None if op == "barrier" else "float32", "bytes": nbytes, "bytes_in": 0, "bytes_out": 0,
           "ranks": ranks, "tensors": 0 if op == "barrier" else 1, "t_us": t}
    if dur is not None:
        rec["dur_us"] = dur
    rec.update(extra)
    return rec


def write_trace(path, world=2, groups=None):
    """A small trace following docs/trace-format.md: header, no shards, collectives rank by rank, no buckets."""
    groups = groups or [list(range(world))]
    colls = []
    for rank in range(world):
        g = next(g for g in groups if rank in g)
        ops = [("init", "barrier", 0, list(range(world))),
               ("init", "broadcast", 4096, list(range(world))),
               ("export", "all_gather", 16384, g),
               ("forward", "all_reduce", 8, list(range(world))),
               ("backward", "reduce_scatter", 2048 + rank * 0, g),
               ("backward", "all_to_all", 512, g),
               ("optimizer", "all_reduce", 4, g)]
        for seq, (phase, op, nbytes, ranks) in enumerate(ops):
            extra = {"root": 0} if op == "broadcast" else {}
            if phase == "export":
                extra["param"] = "model.embed_tokens.weight"
            colls.append(_coll(rank, seq, phase, op, nbytes + seq, ranks, 1_000_000 + 100 * seq + rank,
                               dur=None if seq == 3 else 10 + seq, **extra))
    header = {"kind": "header", "schema": 1, "tool": "reshardip capture", "versions": {}, "model": "tiny-qwen2",
              "config": {}, "strategy": "fsdp2", "verl_strategy": "fsdp2", "world": world, "dtype": "float32",
              "param_dtype": "bfloat16", "reduce_dtype": "float32", "bucket_mb": 2048, "seed": 0,
              "backend": "gloo", "device": "cpu", "engine": "x",
              "phases": ["init", "export", "forward", "backward", "optimizer"], "export_order": [],
              "train": {}, "records": {"shard": 0, "collective": len(colls), "bucket": 0}}
    path.write_text("".join(json.dumps(r) + "\n" for r in [header, *colls]))
    return path


def check_round_trip(trace_path, out_dir, prefix):
    """Every collective of every rank is in that rank's .et, in order, with type, size, group."""
    trace = read_trace(trace_path)
    world = trace["header"]["world"]
    paths = export_chakra(trace_path, out_dir)
    assert paths == [out_dir / f"{prefix}.{r}.et" for r in range(world)]
    groups = json.loads((out_dir / f"{prefix}.comm_group.json").read_text())
    pg_of = {}
    for rank, p in enumerate(paths):
        recs = sorted((c for c in trace["collectives"] if c["rank"] == rank), key=lambda c: c["seq"])
        got = read_chakra(p)
        meta, pg_node, nodes = got[0], got[1], got[2:]
        assert meta["kind"] == "metadata" and meta["version"] == "1.0.0"
        assert meta["attrs"]["rank"] == rank and meta["attrs"]["world"] == world
        assert pg_node["type"] == "METADATA_NODE" and pg_node["name"] == "process_group:init"
        pgs = json.loads(pg_node["inputs_values"][2:-2])  # the slice ASTRA-sim takes
        assert {g["pg_name"]: g["ranks"] for g in pgs} == {"0": list(range(world)), **groups}
        assert len(nodes) == len(recs)
        prev = pg_node["id"]
        for c, n in zip(recs, nodes):
            ntype, ctype = COMM_TYPES[c["op"]]
            assert n["type"] == ntype == "COMM_COLL_NODE"
            assert n["attrs"]["comm_type"] == pb.CollectiveCommType.Value(ctype)
            assert n["comm_type_name"] == EXPECTED.get(c["op"], ctype)
            assert n["attrs"]["comm_size"] == c["bytes"]
            assert n["attrs"]["pg_ranks"] == sorted(c["ranks"])
            name = n["attrs"]["pg_name"]
            assert name == "0" if sorted(c["ranks"]) == list(range(world)) else groups[name] == sorted(c["ranks"])
            assert pg_of.setdefault(tuple(sorted(c["ranks"])), name) == name  # same name on every rank
            assert n["attrs"]["seq"] == c["seq"] and n["attrs"]["phase"] == c["phase"]
            assert c["phase"] in n["name"] and c["op"] in n["name"]
            assert n["data_deps"] == [prev] and n["id"] != prev
            assert n["start_time_micros"] == c["t_us"]
            assert n["duration_micros"] == c.get("dur_us", 0)
            assert n["attrs"]["is_cpu_op"] is False
            if "root" in c:
                assert n["attrs"]["root"] == c["root"]
            prev = n["id"]
    return paths


def test_round_trip_two_ranks(tmp_path):
    t = write_trace(tmp_path / "syn.jsonl")
    paths = check_round_trip(t, tmp_path / "out", "syn")
    assert len(paths) == 2
    assert json.loads((tmp_path / "out" / "syn.comm_group.json").read_text()) == {}
    ops = {n["attrs"]["op"] for n in read_chakra(paths[0])[2:]}
    assert ops == set(EXPECTED)


def test_subgroups_four_ranks(tmp_path):
    t = write_trace(tmp_path / "w4.jsonl", world=4, groups=[[0, 1], [2, 3]])
    check_round_trip(t, tmp_path / "out", "w4")
    assert json.loads((tmp_path / "out" / "w4.comm_group.json").read_text()) == {"1": [0, 1], "2": [2, 3]}


def test_chakra_jsonizer_reads_it(tmp_path):
    """Chakra's own jsonizer (its reference reader) decodes every node."""
    from chakra.src.jsonizer import jsonizer
    t = write_trace(tmp_path / "syn.jsonl")
    p = export_chakra(t, tmp_path / "out")[0]
    out = tmp_path / "j.json"
    import sys
    argv = sys.argv
    sys.argv = ["jsonizer", "--input_filename", str(p), "--output_filename", str(out)]
    try:
        jsonizer.main()
    finally:
        sys.argv = argv
    text = out.read_text()
    assert text.count('"COMM_COLL_NODE"') == 7 and '"METADATA_NODE"' in text


def test_cli(tmp_path, capsys):
    t = write_trace(tmp_path / "syn.jsonl")
    assert main(["export", "--chakra", str(t), "--out", str(tmp_path / "d")]) == 0
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["syn.0.et", "syn.1.et", "syn.comm_group.json"]
    assert "2 Chakra traces" in capsys.readouterr().err
    assert main(["export", "--chakra", str(t), "--out", str(tmp_path / "e"), "--prefix", "run"]) == 0
    assert (tmp_path / "e" / "run.1.et").exists()


def test_existing_out_dir_keeps_other_files(tmp_path):
    t = write_trace(tmp_path / "syn.jsonl")
    out = tmp_path / "d"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    (out / "syn.0.et").write_bytes(b"old")
    export_chakra(t, out)
    assert (out / "keep.txt").read_text() == "x"
    assert read_chakra(out / "syn.0.et")[0]["version"] == "1.0.0"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "syn.jsonl"]  # no temp dir left


def _bad(tmp_path, capsys, trace, match):
    out = tmp_path / "out"
    assert main(["export", "--chakra", str(trace), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and match in err, err
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_missing_file(tmp_path, capsys):
    _bad(tmp_path, capsys, tmp_path / "nope.jsonl", "nope.jsonl")


def test_malformed_line(tmp_path, capsys):
    t = write_trace(tmp_path / "syn.jsonl")
    lines = t.read_text().splitlines()
    lines[3] = lines[3][:-5]
    t.write_text("\n".join(lines) + "\n")
    _bad(tmp_path, capsys, t, "syn.jsonl:4:")


def test_unknown_op_and_bad_group(tmp_path, capsys):
    t = write_trace(tmp_path / "syn.jsonl")
    text = t.read_text()
    t.write_text(text.replace('"op": "all_to_all"', '"op": "shuffle"', 1))
    _bad(tmp_path, capsys, t, "'shuffle'")
    t.write_text(text.replace('"ranks": [0, 1]', '"ranks": [0, 7]', 1))
    _bad(tmp_path, capsys, t, "'ranks'")


def test_read_chakra_rejects_garbage(tmp_path):
    p = tmp_path / "x.et"
    p.write_bytes(b"\x05\xff\xff\xff\xff\xff")
    with pytest.raises(InputError):
        read_chakra(p)


@pytest.mark.slow
def test_real_capture_round_trip(tmp_path):
    from model.capture import capture
    t = tmp_path / "t.jsonl"
    capture("tiny-qwen2", "fsdp2", 2, t, progress=lambda m: None)
    paths = check_round_trip(t, tmp_path / "out", "t")
    trace = read_trace(t)
    assert sum(len(read_chakra(p)) - 2 for p in paths) == len(trace["collectives"]) > 0
