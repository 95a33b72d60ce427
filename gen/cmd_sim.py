"""``python -m gen sim --engine amaranth --model M --train T --rollout R``:
compile a reshard and run it on the RTL, verified three ways.

1. The rollout shards the RTL leaves behind are checked against tensors sliced
   independently with the vLLM rules (``gen.cmd_run.summarize``), as are the
   compiled end state (``mem_expected.hex``, the committed TLB) and the
   absence of faults.
2. The RTL's whole end state (every byte of every memory, TLBs, statuses,
   causes, pcs, fault records, counters) is compared with the golden model's
   run of the same programs: ``golden_agrees``.
3. Cycles are reported against the lower bound (the busiest port of any
   device: memory read, memory write, network out, network in).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

NAME = "sim"
HELP = "compile a reshard and run it on the RTL (Amaranth simulator or its Verilog under Verilator), checked against the golden model"
ORDER = 35
ENGINES = ("amaranth", "verilator")
END_STATE_KEYS = ("status", "cause", "pc", "faults", "tlb", "bytes_copied", "descriptors",
                  "bytes_remapped")


def add_arguments(p):
    from gen.cmd_compile import add_source_arguments
    p.add_argument("--engine", default="amaranth", choices=ENGINES, help="RTL engine (default amaranth)")
    add_source_arguments(p)
    p.add_argument("--out", default=None, help="compiled program directory (default build/sim/<name>)")
    p.add_argument("--vcd", default=None, help="write a VCD waveform of the whole run here")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def default_name(args) -> str:
    def part(text):
        return re.sub(r"[^A-Za-z0-9.-]+", "-", str(text).replace("=", "")).strip("-")
    return "_".join(part(x) for x in (Path(args.model).stem, args.train, args.rollout))


def compare_end_states(rtl: dict, gold: dict) -> list[str]:
    """Differences between two executor-neutral results (empty: they agree)."""
    out = []
    for key in END_STATE_KEYS:
        if rtl[key] != gold[key]:
            out.append(f"{key} differs: {rtl[key]!r} != {gold[key]!r}"[:300])
    for d, (a, b) in enumerate(zip(rtl["memories"], gold["memories"])):
        if bytes(a) != bytes(b):
            out.append(f"device {d}: final memory differs")
    return out


def run(args) -> int:
    from gen.artifacts import load_compiled, write_compiled
    from gen.cmd_compile import build
    from gen.cmd_run import execute, summarize
    from model.errors import InputError
    progress = (lambda s: print(s, file=sys.stderr, flush=True))
    if args.device or args.no_images:
        raise InputError("sim runs whole systems: drop --device / --no-images")
    comp, source, report, memories, expected = build(args, progress)
    if memories is None:
        raise InputError("no memory images were built (device memory too large for simulation)")
    out = Path(args.out) if args.out else Path("build") / "sim" / default_name(args)
    write_compiled(out, comp, source, args.bus_bits, memories, expected, report)
    loaded = load_compiled(out)
    progress(f"simulating {len(loaded.programs)} device(s) on the RTL ({args.engine}) ...")
    res = execute(loaded, args.engine, vcd=args.vcd, progress=progress)
    summary = summarize(loaded, res)
    gold = execute(loaded, "golden")
    mismatches = compare_end_states(res, gold)
    summary["golden_agrees"] = not mismatches
    summary["golden_mismatches"] = mismatches
    summary["verified"] = bool(summary["verified"] and not mismatches)
    summary["out"] = str(out)
    if "cycles" in summary and summary.get("lower_bound_cycles"):
        summary["cycles_over_lower_bound"] = round(summary["cycles"] / summary["lower_bound_cycles"], 4)
    summary["seconds"] = round(res.get("seconds", 0.0), 2)
    if args.json:
        json.dump(summary, sys.stdout)
        print()
    else:
        print(f"{out}: {'VERIFIED' if summary['verified'] else 'NOT VERIFIED'} "
              f"(rollout shards {summary['rollout_bytes_checked']:,} B checked, golden model "
              f"{'agrees' if summary['golden_agrees'] else 'DISAGREES'})")
        print(f"  status {', '.join(summary['status'])}; faults {len(summary['faults'])}")
        print(f"  cycles {summary['cycles']:,} vs lower bound {summary['lower_bound_cycles']:,} "
              f"({summary.get('cycles_over_lower_bound', 0):.3f}x)")
        print(f"  bytes copied {summary['bytes_copied']:,}, remapped (zero-copy) "
              f"{summary['bytes_remapped']:,}, descriptors {summary['descriptors']}")
        print(f"  simulator {summary['sim_cycles_per_s']:,.0f} cycles/s, {summary['seconds']} s")
        for m in summary["end_state_mismatches"] + mismatches:
            print(f"  mismatch: {m}")
    return 0 if summary["verified"] else 1
