"""``python -m gen bench``: measured figures, each against its target.

Parses into :class:`gen.bench.BenchOptions` and calls :func:`gen.bench.run_bench`
(the sections are described there).
"""
from __future__ import annotations

import json
import sys

NAME = "bench"
HELP = "run the benchmarks and print measured figures against their targets"
ORDER = 80


def add_arguments(p):
    from gen.bench import SECTIONS
    p.add_argument("--json", action="store_true", help="print one JSON object of figures")
    p.add_argument("--only", action="append", default=None, choices=SECTIONS,
                   help="run only this section (repeatable)")
    p.add_argument("--no-fpga", action="store_true", help="skip ECP5 synthesis and place & route")
    p.add_argument("--fpga-time-limit-min", type=float, default=60.0,
                   help="section fpga: stop a build after this many minutes and report that it did "
                        "not finish (default 60; the full ulx3s-85f system takes longer)")
    p.add_argument("--fpga-pnr-seeds", default="1",
                   help="section fpga: the board builds' nextpnr seeds, N, N-M or N,M,... (default 1): "
                        "one synthesis, a placement per seed, the spread reported and the best packed")


def run(args) -> int:
    from gen.bench import BenchOptions, run_bench
    from gen.pnr_seeds import parse_seeds
    parse_seeds(args.fpga_pnr_seeds, "--fpga-pnr-seeds")     # a bad list fails now, not hours in
    figures = run_bench(BenchOptions(tuple(args.only) if args.only else None, fpga=not args.no_fpga,
                                     fpga_time_limit_min=args.fpga_time_limit_min,
                                     fpga_pnr_seeds=args.fpga_pnr_seeds),
                        progress=lambda m: print(m, file=sys.stderr, flush=True))
    if args.json:
        json.dump(figures, sys.stdout, indent=1)
        print()
    else:
        from gen.bench_blocks import stage_table
        for k, v in figures.items():
            if k == "ecp5_stages":
                continue
            print(f"{k:>40}: {v}")
        if figures.get("ecp5_stages"):
            print("\nECP5 per stage (LFE5U-25F, out of context; each stage alone):")
            print(stage_table(figures["ecp5_stages"]))
    return 0
