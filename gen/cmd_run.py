"""``python -m gen run --engine golden|amaranth|verilator|verilator-tb DIR``: execute a compiled program and verify it.

Parses into :class:`gen.api.RunOptions` and calls :func:`gen.api.run_compiled`.
A manifest for another hardware generation, or for an ISA version this
generation does not run (``hw.isa.GENERATION_ISA``), is refused before
anything runs: one line naming both sides, exit status 2
(:func:`gen.artifacts.compatibility_error`).
"""
from __future__ import annotations

import json
import sys

NAME = "run"
HELP = "run a compiled program directory on an engine and verify the rollout shards"
ORDER = 34


def add_arguments(p):
    from gen.api import ENGINES
    p.add_argument("dir", help="compiled program directory (from `compile`); refused when its manifest "
                               "is for another hardware generation or ISA version")
    p.add_argument("--engine", default="golden", help=f"{' | '.join(ENGINES)} (default golden)")
    p.add_argument("--vcd", default=None, help="amaranth engine: write a VCD waveform here")


def run(args) -> int:
    from gen.api import RunOptions, run_compiled
    _, summary = run_compiled(RunOptions(args.dir, args.engine, args.vcd),
                              progress=lambda s: print(s, file=sys.stderr, flush=True))
    json.dump(summary, sys.stdout)
    print()
    return 0 if summary["verified"] else 1
