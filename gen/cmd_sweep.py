"""``python -m gen sweep GRID.yaml``: a design-space sweep on Ray, one row per point.

Parses into :class:`gen.sweep_run.SweepOptions` and calls
:func:`gen.sweep_run.run_sweep`. See docs/sweep.md.
"""
from __future__ import annotations

import json
from pathlib import Path

NAME = "sweep"
HELP = "sweep a grid of configurations (YAML) as Ray tasks: Parquet table, resumable, Pareto plots"
ORDER = 48


def add_arguments(p) -> None:
    p.add_argument("grid", help="the grid: a YAML file of axes, stages and filters (see examples/sweep-small.yaml)")
    p.add_argument("--out", default=None, help="results directory (default build/sweep/<grid name>)")
    p.add_argument("--address", default=None,
                   help="a Ray cluster: auto, ray://HOST:PORT (Ray Client) or HOST:PORT (default: a local Ray)")
    p.add_argument("--workers", type=int, default=None,
                   help="local Ray's CPUs (default: this machine's cores); with --address, bounds the points "
                        "in flight to 4 per worker (default: the cluster's CPUs)")
    p.add_argument("--resume", action="store_true", help="run only the points without a row in --out")
    p.add_argument("--no-plots", action="store_true", help="skip the Pareto PNGs")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end")


def run(args) -> int:
    from gen.sweep_run import SweepOptions, run_sweep
    s = run_sweep(SweepOptions(args.grid, args.out, args.address, args.workers, args.resume,
                               plots=not args.no_plots))
    if args.json:
        print(json.dumps({k: s[k] for k in ("points", "done", "failed", "skipped_by_filter", "table", "pareto",
                                             "resumed", "ran", "simulator_builds", "wall_s", "ray_start_s",
                                             "points_per_minute")}))
        return 0 if s["failed"] == 0 else 1
    print(f"{s['points']} point(s): {s['done']} done, {s['failed']} failed, {s['skipped_by_filter']} filtered "
          f"out; ran {s['ran']} in {s['wall_s']:.0f} s (Ray's start {s['ray_start_s']:.0f} s; then "
          f"{s['points_per_minute'] or 0:.1f} points/min), "
          f"{s['resumed']} from an earlier run; {s['simulator_builds']} simulator build(s)")
    print(f"table: {s['table']}")
    pareto = Path(s["out"]) / "pareto.txt"
    if pareto.is_file():
        print(pareto.read_text().rstrip())
    for p in s["pareto"]:
        print(f"picture: {p}")
    return 0 if s["failed"] == 0 else 1
