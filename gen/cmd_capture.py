"""``python -m gen capture``: run verl's FSDP engine on CPU and write a JSONL trace."""
from __future__ import annotations

import sys

NAME = "capture"
HELP = ("run verl's own FSDP engine (CPU, gloo) in WORLD processes: weight export and one training "
        "step; write shards, collectives and the rollout bucket plan as a JSON Lines trace")
ORDER = 20


def add_arguments(parser) -> None:
    parser.add_argument("--model", default="tiny-qwen2",
                        help="bundled model name or path to an HF config.json (default: tiny-qwen2)")
    parser.add_argument("--strategy", default="fsdp2", metavar="{fsdp1,fsdp2}",
                        help="verl FSDP strategy (default: fsdp2)")
    parser.add_argument("--world", type=int, default=2, help="number of ranks / processes (default: 2)")
    parser.add_argument("--out", default=None,
                        help="trace file (default: build/trace/<model>-<strategy>-w<world>.jsonl)")
    parser.add_argument("--bucket-mb", type=int, default=2048,
                        help="rollout weight-update bucket size in MB (verl default: 2048)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights and batch (default: 0)")
    parser.add_argument("--record-data", action="store_true",
                        help="also store every collective's input and output tensors per rank in "
                             "<trace>.data.npz, named in the header (small models only)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="give up after this many seconds (default: 600)")


def run(args) -> int:
    from model.capture import CaptureError, capture
    out = args.out or f"build/trace/{args.model.replace('/', '_')}-{args.strategy}-w{args.world}.jsonl"
    try:
        s = capture(model=args.model, strategy=args.strategy, world=args.world, out=out,
                    bucket_mb=args.bucket_mb, seed=args.seed, timeout=args.timeout,
                    record_data=args.record_data)
    except CaptureError as e:
        print(f"error: capture failed: {e}", file=sys.stderr)
        return 1
    print(f"capture: wrote {s['out']}: {s['shard']} shard, {s['collective']} collective, {s['bucket']} bucket "
          f"records in {s['seconds']} s", file=sys.stderr)
    return 0
