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


def run(args) -> int:
    from gen.collectives import CollectiveOptions, report_lines, run_trace
    opts = CollectiveOptions(trace=args.trace, phases=tuple(ph for ph in args.phase.split(",") if ph),
                             algorithm=args.algorithm, engine=args.engine, bus_bits=args.bus_bits,
                             devices=args.devices, table=_sizes(args.table) if args.table else ())
    summary = run_trace(opts, progress=lambda m: print(f"collectives: {m}", file=sys.stderr, flush=True))
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print("\n".join(report_lines(summary)))
    return 0 if summary["verified"] else 1


def _sizes(text: str) -> tuple[int, ...]:
    from model.errors import InputError
    try:
        return tuple(int(x) for x in text.split(",") if x)
    except ValueError:
        raise InputError(f"--table {text!r}: comma-separated byte counts") from None
