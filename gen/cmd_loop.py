"""``python -m gen loop``: verl trains, the simulated hardware syncs the weights, the rollout generates."""
from __future__ import annotations

import json
import sys

NAME = "loop"
HELP = ("the closed loop: verl's FSDP2 engine trains with GRPO, every weight sync runs on the simulated "
        "hardware, the tensor-parallel rollout generates from what it left in memory; checked bit for bit "
        "against a run whose rollout takes verl's export directly")
ORDER = 25


def add_arguments(parser) -> None:
    parser.add_argument("--model", default="tiny-qwen2", help="bundled model name or HF config.json (default: tiny-qwen2)")
    parser.add_argument("--world", type=int, default=2, help="verl ranks = devices = rollout TP size (default: 2)")
    parser.add_argument("--steps", type=int, default=3, help="iterations (default: 3)")
    parser.add_argument("--engine", default="verilator", metavar="{verilator,amaranth,golden}",
                        help="what runs the weight sync (default: verilator, the emitted Verilog)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights, prompts and sampling (default: 0)")
    parser.add_argument("--inject-fault", metavar="STEP[:KIND[:DEVICE]]", default=None,
                        help="corrupt the program of iteration STEP's sync (KIND unmapped | range, default "
                             "unmapped; DEVICE default 0): the loop must stop before the rollout loads anything")
    parser.add_argument("--timeout", type=float, default=900.0, help="give up after this many seconds (default: 900)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")


def run(args) -> int:
    from gen.loop import LoopError, LoopOptions, report_lines, run_loop
    opts = LoopOptions(model=args.model, world=args.world, steps=args.steps, engine=args.engine, seed=args.seed,
                       inject_fault=args.inject_fault, timeout=args.timeout)
    try:
        s = run_loop(opts)
    except LoopError as e:
        print(f"error: loop failed: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(s, indent=1))
    else:
        print("\n".join(report_lines(s)))
    if "fault" in s:
        f = s["fault"]
        print(f"error: the sync of iteration {f['iteration']} faulted on device {f['device']}: {f['cause']} at "
              f"address 0x{f['address']:x}; the rollout kept iteration {s['previous_weights_iteration']}'s weights "
              f"({'intact' if s['previous_weights_intact'] else 'NOT intact'})", file=sys.stderr)
    return 0 if s["verified"] else 1
