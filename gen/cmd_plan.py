"""``python -m gen plan``: transfer plans and their bytes, against verl's scheme.

Parses into :class:`gen.api.PlanOptions` and calls :func:`gen.api.plan_reshard`.
"""
from __future__ import annotations

import json
import sys

NAME = "plan"
HELP = "plan the weight transfer from a training layout to a rollout layout"
ORDER = 30


def add_arguments(p):
    p.add_argument("--model", required=True, help="bundled model name or path to an HF config.json")
    p.add_argument("--train", required=True, help="fsdp1:dp=N | fsdp2:dp=N | megatron:tp=T,pp=P,dp=D")
    p.add_argument("--rollout", required=True, help="vllm:tp=T[,pp=P]")
    p.add_argument("--dtype", default="bf16", help="element type of the weights: bf16 | fp16 | fp32 (default bf16)")
    p.add_argument("--scheme", default="minimal", help="minimal | verl | hybridflow (default minimal)")
    p.add_argument("--json", action="store_true", help="print one JSON object (with every transfer)")


def run(args) -> int:
    from gen.api import PlanOptions, fmt_bytes, plan_reshard
    from model.plan import make_plan
    opts = PlanOptions(args.model, args.train, args.rollout, args.dtype, args.scheme)
    plan = plan_reshard(opts)
    elapsed = plan.seconds
    model, train, rollout = plan.model, plan.train, plan.rollout
    if args.json:
        out = plan.to_json()
        out["plan_seconds"] = round(elapsed, 3)
        json.dump(out, sys.stdout)
        sys.stdout.write("\n")
        return 0
    ref = plan if args.scheme == "verl" else make_plan(model, train, rollout, args.dtype, "verl")
    print(f"{model.name}: {model.numel:,} parameters, {args.dtype}; {train} -> {rollout}; "
          f"scheme {plan.scheme}")
    print(f"{'rank':>5} {'bytes in':>14} {'bytes out':>14} {'local':>14} {'verl in':>14}")
    world = plan.world
    shown = list(range(world)) if world <= 16 else list(range(8)) + [world - 1]
    for r in shown:
        if world > 16 and r == world - 1:
            print(f"{'...':>5}")
        print(f"{r:>5} {fmt_bytes(plan.bytes_in[r]):>14} {fmt_bytes(plan.bytes_out[r]):>14} "
              f"{fmt_bytes(plan.local_bytes[r]):>14} {fmt_bytes(ref.bytes_in[r]):>14}")
    ratio = plan.total_bytes / ref.total_bytes if ref.total_bytes else float("nan")
    print(f"total in: {fmt_bytes(plan.total_bytes)} ({plan.total_bytes:,} B) vs verl "
          f"{fmt_bytes(ref.total_bytes)}: ratio {ratio:.4f}")
    mx = max(plan.bytes_in)
    print(f"max rank in: {fmt_bytes(mx)} vs verl {fmt_bytes(max(ref.bytes_in))}; "
          f"transfers: {plan.num_transfers:,}; planned in {elapsed:.2f} s")
    for n in plan.notes:
        print(f"note: {n}")
    return 0
