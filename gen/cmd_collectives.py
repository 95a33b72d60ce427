"""``python -m gen collectives TRACE``: a trace's training collectives on the simulated hardware.

Every collective of the chosen phases runs on ``--engine`` (one run each, in
issue order), every output buffer is checked against numpy's sum in the
algorithm's order and against verl's recorded tensors; then a 4 KiB fp32
all-reduce of random data over 2 and 4 devices measures the fixed cost of a
small message. See docs/collectives.md.
"""
from __future__ import annotations

import json
import sys

NAME = "collectives"
HELP = ("run a captured trace's all-gathers, reduce-scatters and all-reduces on the hardware (reduce-on-write), "
        "checked against verl's recorded tensors")
ORDER = 36
#: memory of the 2- and 4-device systems the 4 KiB all-reduce runs on when the trace's world differs
#: (one Verilator build each, cached; big enough for the algorithm table's 64 KiB messages)
SMALL_ARCH_MEM = 1 << 17


def add_arguments(p) -> None:
    p.add_argument("trace", help="trace captured with `capture --record-data` (JSON Lines)")
    p.add_argument("--phase", default="forward,backward,optimizer",
                   help="comma-separated phases to run (default: forward,backward,optimizer)")
    p.add_argument("--algorithm", default="auto", help="auto | ring | direct | halving-doubling (default: auto)")
    p.add_argument("--engine", default="verilator", help="golden | amaranth | verilator (default: verilator)")
    p.add_argument("--bus-bits", type=int, default=64, help="network and memory bus width (default: 64)")
    p.add_argument("--devices", type=int, default=None,
                   help="devices of the hardware (default: the trace's world; a different number is an error)")
    p.add_argument("--table", default=None, metavar="BYTES,...",
                   help="also measure every algorithm's all-gather / reduce-scatter / all-reduce of these fp32 "
                        "buffer sizes (random data) on 2 and 4 devices: the table auto's rule comes from")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _fmt(v, spec=",") -> str:
    return "-" if v is None else format(v, spec)


def run(args) -> int:
    from gen.collectives import (ENGINES, algorithm_table, arch_for, arch_for_trace, buffer_bytes, check_request,
                                 choose_algorithm, read_collectives, run_collective, small_allreduce)
    from model.errors import InputError
    if args.engine not in ENGINES:
        raise InputError(f"--engine {args.engine!r}: use one of {', '.join(ENGINES)}")
    if args.bus_bits not in (32, 64, 128, 256):
        raise InputError(f"--bus-bits {args.bus_bits}: use 32, 64, 128 or 256")
    phases = [ph for ph in args.phase.split(",") if ph]
    if not phases:
        raise InputError("--phase: name at least one phase")
    header, calls = read_collectives(args.trace, phases, args.devices)
    check_request(calls, args.algorithm)
    world = header["world"]
    data = None
    if any(c.runs for c in calls):
        from model.capture import TraceData
        data = TraceData(args.trace, header)
        for c in calls:
            if c.runs:
                for r in c.records:
                    if "data" not in r:
                        raise InputError(f"{args.trace}: {c.name()} (rank {r['rank']} seq {r['seq']}) has no "
                                         f"recorded tensors")
    arch = arch_for_trace(world, calls)
    sizes = _sizes(args.table) if args.table else []

    def progress(msg):
        print(f"collectives: {msg}", file=sys.stderr, flush=True)

    def build_progress(msg):          # the simulator builds (minutes), not every run's chatter
        if msg.startswith(("emitting", "verilating")):
            progress(msg)

    rows = []
    verified = True
    total = sum(c.runs for c in calls)
    done = 0
    for c in calls:
        row = {"index": c.index, "phase": c.phase, "op": c.op, "dtype": c.dtype, "reduce_op": c.reduce_op,
               "bytes": c.bytes, "ranks": c.ranks, "seq": [r["seq"] for r in c.records], "run": c.runs}
        if not c.runs:
            row.update(algorithm=None, cycles=None, lower_bound_cycles=None, max_ulp_vs_verl=None,
                       verified=None, reason=c.reason)
            rows.append(row)
            continue
        alg = choose_algorithm(args.algorithm, c.op, buffer_bytes(c), c.p)
        oc = run_collective(c, data, alg, arch, args.engine, args.bus_bits, build_progress)
        done += 1
        progress(f"{done}/{total} {c.name()} {c.bytes:,} B {alg}: "
                 f"{_fmt(oc.cycles)} cycles, {'ok' if oc.verified else 'FAILED'}")
        verified &= oc.verified
        row.update(algorithm=alg, cycles=oc.cycles, lower_bound_cycles=oc.lower_bound_cycles,
                   network_bytes=oc.network_bytes, max_ulp_vs_verl=oc.max_ulp_vs_verl, verified=oc.verified,
                   host_scale=(f"1/{c.p}" if c.reduce_op == "avg" else None), problems=oc.problems[:4])
        rows.append(row)
    small = {}
    for p in (2, 4):
        a = arch if p == world else arch_for(p, SMALL_ARCH_MEM)
        oc = small_allreduce(p, args.algorithm, args.engine, args.bus_bits, a, progress=build_progress)
        progress(f"4 KiB fp32 all-reduce on {p} devices ({oc.algorithm}): {_fmt(oc.cycles)} cycles, "
                 f"{'ok' if oc.verified else 'FAILED'}")
        verified &= oc.verified
        small[str(p)] = {"algorithm": oc.algorithm, "cycles": oc.cycles,
                         "lower_bound_cycles": oc.lower_bound_cycles, "verified": oc.verified}
    table = []
    for p in (2, 4) if sizes else ():
        a = arch if p == world else arch_for(p, SMALL_ARCH_MEM)
        table += algorithm_table(p, sizes, args.engine, args.bus_bits, a, progress=progress)
    verified &= all(v["verified"] for row in table for k, v in row.items() if isinstance(v, dict))
    summary = {"verified": bool(verified), "engine": args.engine, "trace": str(args.trace), "world": world,
               "phases": phases, "algorithm": args.algorithm, "bus_bits": args.bus_bits, "arch": arch.to_json(),
               "collectives": rows, "not_run": sum(not c.runs for c in calls),
               "small_allreduce_cycles": {k: v["cycles"] for k, v in small.items()}, "small_allreduce": small}
    per_phase = {}
    for r in rows:
        if r["run"]:
            ph = per_phase.setdefault(r["phase"], {"collectives": 0, "cycles": 0, "lower_bound_cycles": 0,
                                                   "network_bytes": 0})
            ph["collectives"] += 1
            ph["cycles"] = None if r["cycles"] is None or ph["cycles"] is None else ph["cycles"] + r["cycles"]
            ph["lower_bound_cycles"] += r["lower_bound_cycles"]
            ph["network_bytes"] += r["network_bytes"]
    summary["per_phase"] = per_phase
    if table:
        summary["algorithm_table"] = table
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print("\n".join(report_lines(summary)))
    return 0 if verified else 1


def _sizes(text: str) -> list[int]:
    from model.errors import InputError
    try:
        sizes = [int(x) for x in text.split(",") if x]
    except ValueError:
        raise InputError(f"--table {text!r}: comma-separated byte counts") from None
    if not sizes or any(n <= 0 or n % 16 for n in sizes) or max(sizes) > SMALL_ARCH_MEM // 2:
        raise InputError(f"--table {text!r}: sizes must be positive multiples of 16 up to {SMALL_ARCH_MEM // 2:,}")
    return sizes


def report_lines(s: dict) -> list[str]:
    out = [f"{s['trace']}: {len(s['collectives'])} collectives in {','.join(s['phases'])} on {s['world']} devices, "
           f"engine {s['engine']}, {s['bus_bits']}-bit bus, algorithm {s['algorithm']}",
           f"{'#':>3} {'phase':<9} {'op':<15} {'reduce':<6} {'dtype':<8} {'bytes':>9} {'algorithm':<16} "
           f"{'cycles':>9} {'lower bd':>9} {'ratio':>6} {'ulp':>4}  result"]
    for r in s["collectives"]:
        head = (f"{r['index']:>3} {r['phase']:<9} {r['op']:<15} {r['reduce_op'] or '':<6} {r['dtype'] or '':<8} "
                f"{r['bytes']:>9,}")
        if not r["run"]:
            out.append(f"{head} {'':<16} {'':>9} {'':>9} {'':>6} {'':>4}  not run: {r['reason']}")
            continue
        ratio = f"{r['cycles'] / r['lower_bound_cycles']:.3f}" if r["cycles"] and r["lower_bound_cycles"] else "-"
        res = "verified" if r["verified"] else "FAILED: " + "; ".join(
            r["problems"][:2])
        if r.get("host_scale"):
            res += f" (avg: sum x {r['host_scale']} on the host)"
        out.append(f"{head} {r['algorithm']:<16} {_fmt(r['cycles']):>9} {_fmt(r['lower_bound_cycles']):>9} "
                   f"{ratio:>6} {_fmt(r['max_ulp_vs_verl'], 'd'):>4}  {res}")
    for ph, v in s["per_phase"].items():
        out.append(f"{ph}: {v['collectives']} collective(s) run, {_fmt(v['cycles'])} cycles against a lower bound of "
                   f"{v['lower_bound_cycles']:,}, {v['network_bytes']:,} B over the network")
    for p, v in s["small_allreduce"].items():
        out.append(f"4 KiB fp32 all-reduce, {p} devices ({v['algorithm']}): {_fmt(v['cycles'])} cycles, "
                   f"lower bound {v['lower_bound_cycles']:,}, {'verified' if v['verified'] else 'FAILED'}")
    if s.get("algorithm_table"):
        from gen.coll_programs import ALGORITHMS
        out.append("algorithms against buffer size (fp32 random data): cycles / lower bound; auto's choice marked *")
        out.append(f"{'op':<15} {'p':>2} {'bytes':>8}  " + "  ".join(f"{a:>24}" for a in ALGORITHMS))
        for r in s["algorithm_table"]:
            cells = []
            for a in ALGORITHMS:
                v = r.get(a)
                cell = "" if v is None else \
                    f"{'*' if r['auto'] == a else ''}{_fmt(v['cycles'])} / {v['lower_bound_cycles']:,}"
                cells.append(f"{cell:>24}")
            out.append(f"{r['op']:<15} {r['p']:>2} {r['bytes']:>8,}  " + "  ".join(cells))
    out.append(f"VERDICT: {'PASS' if s['verified'] else 'FAIL'} ({s['not_run']} collective(s) not run)")
    return out
