"""``python -m gen sim --engine amaranth --model M --train T --rollout R``:
compile a reshard and run it on the RTL, verified three ways (see
:func:`gen.api.simulate`: the rollout shards and compiled end state, the
golden model's whole end state, cycles against the lower bound).

Parses into :class:`gen.api.SimOptions` and calls :func:`gen.api.simulate`.
"""
from __future__ import annotations

import json
import sys

NAME = "sim"
HELP = "compile a reshard and run it on the RTL (Amaranth simulator or its Verilog under Verilator), checked against the golden model"
ORDER = 35


def add_arguments(p):
    from gen.api import RTL_ENGINES
    from gen.cmd_compile import add_source_arguments
    p.add_argument("--engine", default="amaranth", choices=RTL_ENGINES, help="RTL engine (default amaranth)")
    add_source_arguments(p)
    p.add_argument("--out", default=None, help="compiled program directory (default build/sim/<name>)")
    p.add_argument("--vcd", default=None, help="write a VCD waveform of the whole run here")
    p.add_argument("--max-cycles", type=int, default=None,
                   help="Verilator engines: stop a run still going after this many cycles "
                        "(its final state is read back and dumped)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args) -> int:
    from gen.api import SimOptions, simulate
    from gen.cmd_compile import options
    if args.max_cycles is not None and args.max_cycles < 1:
        from model.errors import InputError
        raise InputError(f"--max-cycles must be positive, not {args.max_cycles}")
    summary = simulate(SimOptions(options(args), args.engine, args.out, args.vcd, args.max_cycles),
                       progress=lambda s: print(s, file=sys.stderr, flush=True))
    if args.json:
        json.dump(summary, sys.stdout)
        print()
        return 0 if summary["verified"] else 1
    print(f"{summary['out']}: {'VERIFIED' if summary['verified'] else 'NOT VERIFIED'} "
          f"(rollout shards {summary['rollout_bytes_checked']:,} B checked, golden model "
          f"{'agrees' if summary['golden_agrees'] else 'DISAGREES'})")
    print(f"  status {', '.join(summary['status'])}; faults {len(summary['faults'])}")
    print(f"  cycles {summary['cycles']:,} vs lower bound {summary['lower_bound_cycles']:,} "
          f"({summary.get('cycles_over_lower_bound', 0):.3f}x)")
    print(f"  bytes copied {summary['bytes_copied']:,}, remapped (zero-copy) "
          f"{summary['bytes_remapped']:,}, descriptors {summary['descriptors']}")
    print(f"  simulator {summary['sim_cycles_per_s']:,.0f} cycles/s, {summary['seconds']} s")
    print("  wall " + ", ".join(f"{k} {v:.1f} s" for k, v in summary["wall_s"].items())
          + f"; peak memory {summary['peak_rss_bytes'] / (1 << 30):.2f} GiB")
    for m in summary["end_state_mismatches"] + summary["golden_mismatches"]:
        print(f"  mismatch: {m}")
    return 0 if summary["verified"] else 1
