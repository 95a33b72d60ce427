"""The collective compiler (gen/coll_programs.py, gen/collectives.py, ``python -m gen collectives``).

The numpy references here are written independently of the code under test:
each algorithm's data movement is simulated rank by rank in numpy (f32 adds
are numpy's binary32 adds; bf16 adds are f32 adds rounded to bf16 here).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from gen.cli import main
from gen.coll_programs import ALGORITHMS, Layout, generate
from gen.result import run_golden
from hw.isa import ArchParams, Op

OPS = ("all_gather", "reduce_scatter", "all_reduce")


# ------------------------------------------------------------------ independent reference

def bf16_round(f32: np.ndarray) -> np.ndarray:
    """float32 -> nearest bfloat16 (ties to even), returned as float32 values."""
    u = np.asarray(f32, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)


def add(a, b, fmt):
    s = (a.astype(np.float32) + b.astype(np.float32)).astype(np.float32)
    return bf16_round(s) if fmt == "bf16" else s


def bounds(n, p, op="all_gather", es=4):
    """Chunk j is [b[j], b[j+1]). All-reduces: gloo's ring split (segments of ceil(bytes/2p) bytes in
    whole elements, two per rank below gloo's 1 MiB segment limit)."""
    if op != "all_reduce":
        return [j * n // p for j in range(p + 1)]
    seg_elems = -(-(-(-n * es // (2 * p))) // es)
    assert seg_elems * es <= 1 << 20
    return [min(n, 2 * j * seg_elems) for j in range(p + 1)]


def reference(op, alg, xs, fmt):
    """Every rank's buffer after the collective, simulated step by step as the algorithm moves data."""
    p, n = len(xs), len(xs[0])
    b = bounds(n, p, op, 4 if fmt == "f32" else 2)
    ch = lambda j: slice(b[j], b[j + 1])    # noqa: E731
    bufs = [x.copy() for x in xs]
    if op in ("reduce_scatter", "all_reduce"):
        if alg == "ring":                    # step k: rank s adds its chunk s+k into rank s-1's copy (gloo's way)
            for k in range(1, p):
                new = [x.copy() for x in bufs]
                for s in range(p):
                    j = (s + k) % p
                    new[(s - 1) % p][ch(j)] = add(bufs[(s - 1) % p][ch(j)], bufs[s][ch(j)], fmt)
                bufs = new
        elif alg == "direct":               # owner j sums its own chunk, then ranks j+1, j+2, ...
            for j in range(p):
                acc = xs[j][ch(j)]
                for k in range(1, p):
                    acc = add(acc, xs[(j + k) % p][ch(j)], fmt)
                bufs[j][ch(j)] = acc
        else:                               # recursive halving, distance p/2 first
            seg = [(0, p)] * p
            d = p // 2
            while d:
                new = [x.copy() for x in bufs]
                for s in range(p):
                    lo, hi = seg[s]
                    mid = (lo + hi) // 2
                    keep = (lo, mid) if s < mid else (mid, hi)
                    sl = slice(b[keep[0]], b[keep[1]])
                    new[s][sl] = add(bufs[s][sl], bufs[s ^ d][sl], fmt)
                    seg[s] = keep
                bufs = new
                d //= 2
    if op == "reduce_scatter":
        return [bufs[s][ch(s)] for s in range(p)]
    if op == "all_gather":
        full = np.concatenate([xs[j][ch(j)] for j in range(p)])
        return [full for _ in range(p)]
    full = np.concatenate([bufs[j][ch(j)] for j in range(p)])
    return [full for _ in range(p)]


def random_values(rng, n, fmt):
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-12, 12, n))).astype(np.float32)
    return bf16_round(x) if fmt == "bf16" else x


def to_bytes(x, fmt):
    if fmt == "f32":
        return x.astype(np.float32).view(np.uint8)
    return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)


def run_on_golden(op, alg, xs, fmt, engine="golden", arch=None):
    p, n = len(xs), len(xs[0])
    es = 4 if fmt == "f32" else 2
    arch = arch or ArchParams(devices=p, mem_bytes=1 << 15)
    b = bounds(n, p, op, es)
    widest = max(b[j + 1] - b[j] for j in range(p)) * es
    lay = Layout(op, p, n, es, buf=0, slots=-(-n * es // 64) * 64, slot_stride=-(-widest // 64) * 64,
                 chunking="gloo" if op == "all_reduce" else "even")
    mems = []
    for s in range(p):
        m = np.zeros(arch.mem_bytes, np.uint8)
        raw = to_bytes(xs[s], fmt)
        if op == "all_gather":
            m[b[s] * es:b[s + 1] * es] = raw[b[s] * es:b[s + 1] * es]
        else:
            m[:n * es] = raw
        mems.append(m)
    progs = generate(arch, list(range(p)), lay, alg, Op.COPY_ADD_F32 if fmt == "f32" else Op.COPY_ADD_BF16)
    res = run_golden(arch, progs.words, mems)
    if engine != "golden":
        from gen.collectives import run_engine
        from gen.result import compare_results
        rtl = run_engine(engine, arch, progs.words, mems, 64)
        assert compare_results(res, rtl, keys=("status", "cause", "faults")) == []   # every byte of memory too
        assert rtl.cycles and rtl.cycles > 0
        res = rtl
    assert res.status == ["HALTED"] * p and not res.faults, (res.status, res.cause, res.pc)
    outs = []
    for s in range(p):
        lo, hi = (b[s] * es, b[s + 1] * es) if op == "reduce_scatter" else (0, n * es)
        outs.append(res.memories[s][lo:hi])
    return outs, res


CASES = [(p, alg, op, fmt) for p in (2, 4, 8) for alg in ALGORITHMS for op in OPS for fmt in ("f32", "bf16")
         if p != 8 or fmt == "f32"]


@pytest.mark.parametrize("p,alg,op,fmt", CASES, ids=[f"{p}-{a}-{o}-{f}" for p, a, o, f in CASES])
def test_algorithm_on_golden_equals_numpy_reference(p, alg, op, fmt):
    rng = np.random.default_rng(p * 7 + len(alg))
    n = 40 * p + (3 if op == "all_reduce" else 0)       # all-reduce: uneven chunks
    xs = [random_values(rng, n, fmt) for _ in range(p)]
    outs, _ = run_on_golden(op, alg, xs, fmt)
    want = reference(op, alg, xs, fmt)
    for s in range(p):
        assert np.array_equal(outs[s], to_bytes(want[s], fmt)), (s, alg, op)


def test_summation_orders_differ_so_the_reference_can_fail():
    """With 4 ranks the algorithms' orders give different bits: the bit-for-bit checks are sharp."""
    rng = np.random.default_rng(1)
    xs = [random_values(rng, 400, "f32") for _ in range(4)]
    got = {alg: run_on_golden("all_reduce", alg, xs, "f32")[0][0] for alg in ALGORITHMS}
    assert not np.array_equal(got["ring"], got["direct"])
    assert not np.array_equal(got["ring"], got["halving-doubling"])
    for alg in ALGORITHMS:
        assert np.array_equal(got[alg], to_bytes(reference("all_reduce", alg, xs, "f32")[0], "f32"))


def test_generate_refuses_halving_doubling_on_three_ranks():
    arch = ArchParams(devices=3, mem_bytes=1 << 15)
    with pytest.raises(ValueError, match="power-of-two"):
        generate(arch, [0, 1, 2], Layout("all_reduce", 3, 30, 4), "halving-doubling", Op.COPY_ADD_F32)


# ------------------------------------------------------------------ synthetic traces

def write_trace(path, world, calls, *, data=True, phases=("forward", "backward", "optimizer")):
    """A trace with one record per rank per call; call = dict(op, dtype, reduce_op, ins, outs, phase)."""
    header = {"kind": "header", "schema": 1, "world": world, "phases": list(phases), "model": "synthetic"}
    recs, arrays = [], {}
    for i, c in enumerate(calls):
        for r in range(world):
            rec = {"kind": "collective", "rank": r, "seq": i, "phase": c.get("phase", "backward"), "op": c["op"],
                   "api": "synthetic", "dtype": c["dtype"], "bytes": int(c["outs"][r].nbytes), "bytes_in": 0,
                   "bytes_out": 0, "ranks": list(range(world)), "tensors": 1, "t_us": 1000 + i}
            if c.get("reduce_op"):
                rec["reduce_op"] = c["reduce_op"]
            if data:
                rec["data"] = {"in": [{"key": f"r{r}_c{i}_in", "dtype": c["dtype"], "shape": [c["ins"][r].size]}],
                               "out": [{"key": f"r{r}_c{i}_out", "dtype": c["dtype"], "shape": [c["outs"][r].size]}]}
                arrays[f"r{r}_c{i}_in"] = np.ascontiguousarray(c["ins"][r]).view(np.uint8)
                arrays[f"r{r}_c{i}_out"] = np.ascontiguousarray(c["outs"][r]).view(np.uint8)
            recs.append(rec)
    header["records"] = {"shard": 0, "collective": len(recs), "bucket": 0}
    if data:
        npz = path.with_name(path.stem + ".data.npz")
        np.savez(npz, **arrays)
        header["data"] = {"file": npz.name, "arrays": len(arrays), "bytes": 0}
    path.write_text("".join(json.dumps(x) + "\n" for x in [header, *recs]))
    return path


def gloo_ring_allreduce(xs):
    """gloo's ring all-reduce result as gloo/allreduce.cc describes it: rank r passes its partial
    sum of chunk r+1 to rank r-1, so chunk j is ((x[j-1] + x[j-2]) + ...) + x[j]."""
    p, n = len(xs), len(xs[0])
    b = bounds(n, p, "all_reduce", 4)
    out = np.empty(n, np.float32)
    for j in range(p):
        sl = slice(b[j], b[j + 1])
        acc = xs[(j - 1) % p][sl]
        for k in range(2, p + 1):
            acc = (acc + xs[(j - k) % p][sl]).astype(np.float32)
        out[sl] = acc
    return out


def gloo_like_calls(world, rng, n=256):
    """An all-gather, a reduce-scatter (avg) whose "verl" output is summed in rank order, an all-reduce
    (sum) summed in gloo's ring order, and a max all-reduce."""
    xs = [(rng.standard_normal(n) * np.exp2(rng.integers(-6, 6, n))).astype(np.float32) for _ in range(world)]
    seq = xs[0]
    for x in xs[1:]:
        seq = (seq + x).astype(np.float32)
    avg = (seq / np.float32(world)).astype(np.float32)
    c = n // world
    ring = gloo_ring_allreduce([x[:n - 5] for x in xs])          # an uneven all-reduce
    return [
        {"op": "all_gather", "dtype": "float32", "phase": "forward", "ins": [x[:c] for x in xs],
         "outs": [np.concatenate([x[:c] for x in xs])] * world},
        {"op": "reduce_scatter", "dtype": "float32", "reduce_op": "avg", "ins": xs,
         "outs": [avg[r * c:(r + 1) * c] for r in range(world)]},
        {"op": "all_reduce", "dtype": "float32", "reduce_op": "sum", "phase": "optimizer",
         "ins": [x[:n - 5] for x in xs], "outs": [ring] * world},
        {"op": "all_reduce", "dtype": "int64", "reduce_op": "max", "phase": "forward",
         "ins": [np.array([r], np.int64) for r in range(world)], "outs": [np.array([world - 1], np.int64)] * world},
    ]


def _cli_json(capsys, argv):
    rc = main(argv + ["--json"])
    out = capsys.readouterr()
    return rc, (json.loads(out.out) if out.out.strip() else None), out.err


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("alg", ["auto", *ALGORITHMS])
def test_cli_synthetic_trace_on_golden(tmp_path, capsys, world, alg):
    trace = write_trace(tmp_path / "t.jsonl", world, gloo_like_calls(world, np.random.default_rng(world)))
    rc, s, err = _cli_json(capsys, ["collectives", str(trace), "--engine", "golden", "--algorithm", alg])
    assert rc == 0 and s["verified"] is True, err
    assert s["engine"] == "golden" and set(s["small_allreduce_cycles"]) == {"2", "4"}
    ran = [c for c in s["collectives"] if c["run"]]
    skipped = [c for c in s["collectives"] if not c["run"]]
    assert [c["op"] for c in ran] == ["all_gather", "reduce_scatter", "all_reduce"]
    assert len(skipped) == 1 and "max" in skipped[0]["reason"] and skipped[0]["cycles"] is None
    for c in s["collectives"]:
        assert {"phase", "op", "bytes", "algorithm", "cycles", "lower_bound_cycles", "max_ulp_vs_verl"} <= set(c)
    for c in ran:
        assert c["lower_bound_cycles"] > 0 and c["cycles"] is None     # the golden model counts no cycles
        assert c["algorithm"] in ALGORITHMS
        if world == 2 or c["op"] == "all_gather" or (c["op"] == "all_reduce" and alg == "ring"):
            assert c["max_ulp_vs_verl"] == 0, c          # the ring all-reduce reproduces gloo's order
    if world == 4 and alg in ("direct", "halving-doubling"):
        ar = [c for c in ran if c["op"] == "all_reduce"][0]
        assert ar["max_ulp_vs_verl"] > 0                # another order: within the bound, not equal


def test_cli_detects_an_output_that_differs_from_verl(tmp_path, capsys):
    rng = np.random.default_rng(5)
    calls = gloo_like_calls(2, rng)
    bad = calls[2]["outs"][0].copy()
    bad.view(np.uint32)[7] ^= 1                      # one ulp off in one element
    calls[2]["outs"] = [bad, calls[2]["outs"][1]]
    trace = write_trace(tmp_path / "t.jsonl", 2, calls)
    rc, s, _ = _cli_json(capsys, ["collectives", str(trace), "--engine", "golden"])
    assert rc == 1 and s["verified"] is False
    ar = [c for c in s["collectives"] if c["op"] == "all_reduce" and c["run"]][0]
    assert ar["verified"] is False and ar["max_ulp_vs_verl"] == 1


def test_cli_four_ranks_beyond_the_bound_fails(tmp_path, capsys):
    rng = np.random.default_rng(6)
    calls = gloo_like_calls(4, rng)
    bad = calls[2]["outs"][0].copy()
    bad[3] += np.float32(1.0)                        # far beyond a few ulps
    calls[2]["outs"] = [bad] + calls[2]["outs"][1:]
    trace = write_trace(tmp_path / "t.jsonl", 4, calls)
    for alg in ("direct", "ring"):          # the summation-order bound; the ring's bit-for-bit check
        rc, s, _ = _cli_json(capsys, ["collectives", str(trace), "--engine", "golden", "--algorithm", alg])
        assert rc == 1 and s["verified"] is False
        ar = [c for c in s["collectives"] if c["op"] == "all_reduce" and c["run"]][0]
        assert ar["verified"] is False and "verl" in ar["problems"][0]


def test_phase_filter_keeps_the_architecture(tmp_path, capsys):
    """One architecture per trace: --phase must not change the memory (and so a collective's cycles)."""
    calls = gloo_like_calls(2, np.random.default_rng(3), n=4096)
    small = [x[:8].copy() for x in calls[2]["ins"]]            # the optimizer's all-reduce: 32 bytes
    calls[2].update(ins=small, outs=[gloo_ring_allreduce(small)] * 2)
    trace = write_trace(tmp_path / "t.jsonl", 2, calls)
    _, whole, _ = _cli_json(capsys, ["collectives", str(trace), "--engine", "golden"])
    _, part, _ = _cli_json(capsys, ["collectives", str(trace), "--engine", "golden", "--phase", "optimizer"])
    assert [c["phase"] for c in part["collectives"]] == ["optimizer"]
    assert part["arch"] == whole["arch"] and whole["arch"]["mem_bytes"] >= 2 * 4096 * 4


def test_cli_text_output(tmp_path, capsys):
    trace = write_trace(tmp_path / "t.jsonl", 2, gloo_like_calls(2, np.random.default_rng(2)))
    assert main(["collectives", str(trace), "--engine", "golden"]) == 0
    out = capsys.readouterr().out
    assert "not run: reduce op 'max'" in out and "VERDICT: PASS" in out and "avg" in out


# ------------------------------------------------------------------ bad input

def _bad(tmp_path, capsys, argv):
    before = set(tmp_path.iterdir())
    rc = main(argv)
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: "), out.err
    assert out.out == "" and set(tmp_path.iterdir()) == before
    return lines[0]


def test_bad_input_missing_trace(tmp_path, capsys):
    assert "cannot read trace" in _bad(tmp_path, capsys, ["collectives", str(tmp_path / "none.jsonl")])


def test_bad_input_trace_without_data(tmp_path, capsys):
    trace = write_trace(tmp_path / "t.jsonl", 2, gloo_like_calls(2, np.random.default_rng(0)), data=False)
    assert "--record-data" in _bad(tmp_path, capsys, ["collectives", str(trace), "--engine", "golden"])


def test_bad_input_unsupported_op(tmp_path, capsys):
    calls = gloo_like_calls(2, np.random.default_rng(0))
    calls[0]["op"] = "all_to_all"
    trace = write_trace(tmp_path / "t.jsonl", 2, calls)
    assert "all_to_all" in _bad(tmp_path, capsys, ["collectives", str(trace), "--engine", "golden"])


def test_bad_input_unsupported_dtype(tmp_path, capsys):
    calls = gloo_like_calls(2, np.random.default_rng(0))
    calls[0]["dtype"] = "float8_e9m9"
    trace = write_trace(tmp_path / "t.jsonl", 2, calls)
    assert "float8_e9m9" in _bad(tmp_path, capsys, ["collectives", str(trace), "--engine", "golden"])


def test_bad_input_world(tmp_path, capsys):
    trace = write_trace(tmp_path / "t.jsonl", 2, gloo_like_calls(2, np.random.default_rng(0)))
    assert "4 devices" in _bad(tmp_path, capsys, ["collectives", str(trace), "--engine", "golden",
                                                  "--devices", "4"])
    big = tmp_path / "big.jsonl"
    lines = trace.read_text().splitlines()
    head = json.loads(lines[0])
    head["world"] = 64
    big.write_text("\n".join([json.dumps(head)] + lines[1:]) + "\n")
    assert "world 64" in _bad(tmp_path, capsys, ["collectives", str(big), "--engine", "golden"])


def test_bad_input_halving_doubling_on_three_ranks(tmp_path, capsys):
    rng = np.random.default_rng(0)
    calls = [c for c in gloo_like_calls(3, rng, n=240) if c["op"] == "all_gather"]
    trace = write_trace(tmp_path / "t.jsonl", 3, calls)
    assert "power-of-two" in _bad(tmp_path, capsys, ["collectives", str(trace), "--engine", "golden",
                                                     "--algorithm", "halving-doubling"])


def test_bad_input_engine_and_phase(tmp_path, capsys):
    trace = write_trace(tmp_path / "t.jsonl", 2, gloo_like_calls(2, np.random.default_rng(0)))
    assert "--engine" in _bad(tmp_path, capsys, ["collectives", str(trace), "--engine", "fpga"])
    assert "--phase" in _bad(tmp_path, capsys, ["collectives", str(trace), "--engine", "golden",
                                                "--phase", "nonsense"])


# ------------------------------------------------------------------ the real trace

@pytest.mark.slow
def test_fsdp2_trace_bit_for_bit_against_verl_on_golden(fsdp2_w2, capsys):
    rc, s, err = _cli_json(capsys, ["collectives", fsdp2_w2["path"], "--engine", "golden"])
    assert rc == 0 and s["verified"] is True, err
    ran = [c for c in s["collectives"] if c["run"]]
    ops = {(c["op"], c["reduce_op"], c["dtype"]) for c in ran}
    assert ("reduce_scatter", "avg", "float32") in ops and ("all_gather", None, "bfloat16") in ops
    assert ("all_reduce", "sum", "float32") in ops
    assert all(c["max_ulp_vs_verl"] == 0 and c["verified"] for c in ran)
    # what the add datapath cannot do is listed, not faked
    skipped = {(c["reduce_op"], c["dtype"]) for c in s["collectives"] if not c["run"]}
    assert ("max", "int64") in skipped and all(c["reason"] for c in s["collectives"] if not c["run"])
    phases = {c["phase"] for c in ran}
    assert {"forward", "backward", "optimizer"} <= phases
    # every recorded collective of those phases is accounted for
    n = sum(1 for r in fsdp2_w2["collectives"] if r["rank"] == 0 and r["phase"] in phases)
    assert len(s["collectives"]) == n


@pytest.mark.slow
def test_fsdp2_four_ranks_ring_reproduces_gloo(fsdp2_w4, capsys):
    """Four verl ranks: the ring all-reduce equals gloo's grad-norm all-reduce bit for bit (its order);
    the other algorithms stay within the summation-order bound."""
    rc, s, err = _cli_json(capsys, ["collectives", fsdp2_w4["path"], "--engine", "golden", "--algorithm", "ring"])
    assert rc == 0 and s["verified"] is True, err
    ars = [c for c in s["collectives"] if c["run"] and c["op"] == "all_reduce"]
    assert ars and all(c["max_ulp_vs_verl"] == 0 for c in ars)
    for alg in ("direct", "halving-doubling"):
        rc, s, err = _cli_json(capsys, ["collectives", fsdp2_w4["path"], "--engine", "golden", "--algorithm", alg])
        assert rc == 0 and s["verified"] is True, err
