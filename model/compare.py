"""Derived layouts and plans against what a real verl capture recorded."""
from __future__ import annotations

from model.layouts import fsdp1_units, training_layout
from model.models import spec_from_config
from model.plan import make_plan
from model.specs import ParallelSpec, parse_spec


def _merge(ranges):
    out = []
    for a, b in sorted((int(a), int(b)) for a, b in ranges if b > a):
        if out and out[-1][1] == a:
            out[-1][1] = b
        else:
            out.append([a, b])
    return out


def trace_model_and_spec(trace: dict):
    h = trace["header"]
    model = spec_from_config(h["config"], name=h["model"])
    return model, parse_spec(f"{h['strategy']}:dp={h['world']}", "train")


def derived_shards(model, train: ParallelSpec) -> dict[tuple[int, str], dict]:
    """(rank, param) -> {"ranges": merged flat ranges, "flat": (start, stop) or None}."""
    layout = training_layout(model, train)
    out: dict[tuple[int, str], dict] = {}
    cols = {p.name: p.cols for p in model.params}
    for rl in layout.ranks:
        for piece in rl.pieces:
            d = out.setdefault((rl.rank, piece.param), {"ranges": [], "flat": None})
            d["ranges"] += piece.flat_ranges(cols[piece.param])
    if train.kind == "fsdp1":
        n = train.dp
        for _uname, params in fsdp1_units(model):
            total = sum(p.numel for p in params)
            s = -(-total // n)
            base = 0
            for p in params:
                for r in range(n):
                    a, b = max(r * s, base), min((r + 1) * s, base + p.numel)
                    if a < b:
                        out.setdefault((r, p.name), {"ranges": [], "flat": None})["flat"] = (a, b)
                base += p.numel
    for d in out.values():
        d["ranges"] = _merge(d["ranges"])
    return out


def compare_shards(trace: dict) -> list[str]:
    """Every difference between derived and captured shards, as readable lines (empty: equal)."""
    model, train = trace_model_and_spec(trace)
    derived = derived_shards(model, train)
    problems = []
    seen = set()
    for rec in trace["shards"]:
        key = (rec["rank"], rec["param"])
        seen.add(key)
        got = _merge(rec["ranges"])
        want = derived.get(key, {"ranges": [], "flat": None})
        if got != want["ranges"]:
            problems.append(f"rank {key[0]} {key[1]}: captured {got[:3]} derived {want['ranges'][:3]}")
        flat = rec.get("flat")
        if train.kind == "fsdp1" and flat and got:
            if (flat["start"], flat["stop"]) != want["flat"]:
                problems.append(f"rank {key[0]} {key[1]}: captured flat [{flat['start']}, {flat['stop']}) "
                                f"derived {want['flat']}")
    for key, d in derived.items():
        if key not in seen and d["ranges"]:
            problems.append(f"rank {key[0]} {key[1]}: derived {d['ranges'][:3]} but not captured")
    return problems


def export_bytes_in(trace: dict) -> list[int]:
    world = trace["header"]["world"]
    got = [0] * world
    for c in trace["collectives"]:
        if c["phase"] == "export":
            got[c["rank"]] += c["bytes_in"]
    return got


def compare_verl_bytes(trace: dict) -> tuple[list[int], list[int]]:
    """(captured export bytes in per rank, verl-scheme plan bytes in per rank), fp32."""
    model, train = trace_model_and_spec(trace)
    plan = make_plan(model, train, parse_spec("vllm:tp=1", "rollout"), "fp32", "verl")
    return export_bytes_in(trace), plan.bytes_in
