"""``python -m gen uvm``: the pyuvm environment on the emitted Verilog (cocotb, Verilator, cocotbext-axi).

Parses into :class:`verif.regression.UvmOptions` and calls
:func:`verif.regression.run_uvm`. See docs/uvm.md.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

NAME = "uvm"
HELP = "run the UVM-style (pyuvm) regression on the emitted Verilog: scoreboard, AXI VIP, coverage"
ORDER = 47


def add_arguments(p) -> None:
    p.add_argument("--test", default=None,
                   help="one test: reshard_replay | register_sweep | random_programs | collective_replay | "
                        "directed_faults | directed_traffic | collective_capture_replay (default: the short "
                        "regression)")
    p.add_argument("--seed", type=int, default=1, help="with --test: its seed (odd seeds stall R and B)")
    p.add_argument("--regression", action="store_true", help="the long regression (more random-program seeds)")
    p.add_argument("--cases", type=int, default=3, help="random programs per random_programs test (default 3)")
    p.add_argument("--collectives", type=int, default=None, metavar="N",
                   help="collective_capture_replay: replay the captured schedule's first N collectives only")
    p.add_argument("--max-body", type=int, default=12, metavar="N",
                   help="random_programs: at most N drawn instructions per program (default 12)")
    p.add_argument("--illegal-rate", type=float, default=0.05, metavar="P",
                   help="random_programs: chance of an illegal instruction word at each draw (default 0.05)")
    p.add_argument("--keep", metavar="DIR", default=None, help="keep each test's log, config and record in DIR")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args) -> int:
    from model.errors import InputError
    from verif.regression import UvmOptions, run_uvm
    if args.cases <= 0:
        raise InputError(f"--cases must be positive, not {args.cases}")
    if args.collectives is not None and args.collectives <= 0:
        raise InputError(f"--collectives must be positive, not {args.collectives}")
    if not 1 <= args.max_body <= 64:
        raise InputError(f"--max-body must be 1..64, not {args.max_body}")
    if not 0.0 <= args.illegal_rate <= 1.0:
        raise InputError(f"--illegal-rate must be between 0 and 1, not {args.illegal_rate}")
    opts = UvmOptions(args.test, args.seed, args.regression, args.cases, Path(args.keep) if args.keep else None,
                      args.collectives, args.max_body, args.illegal_rate)
    s = run_uvm(opts, progress=lambda m: print(f"uvm: {m}", file=sys.stderr, flush=True))
    if args.json:
        print(json.dumps(s))
        return 0 if s["failed"] == 0 else 1
    for t in s["tests"]:
        line = f"{t['name']:<25} seed {t['seed']:<3} {t['result']:<5} {t['cycles']:>9,} cycles {t['seconds']:>7.1f} s"
        print(line + (f"  {t['message']}" if "message" in t else ""))
    print(f"{s['passed']} passed, {s['failed']} failed; coverage {s['coverage_percent']:.1f}% of the bins "
          f"({len(s['uncovered'])} not hit) in {s['wall_s']} s")
    for b in s["uncovered"][:20]:
        print(f"  not hit: {b}")
    for b in s.get("undefined", []):
        print(f"  not defined (cannot be hit): {b}")
    return 0 if s["failed"] == 0 else 1
