"""``python -m gen perf``: one PPO/GRPO iteration of verl on a chip, by phase and wall.

Parses into :class:`gen.perf_run.PerfOptions` and calls :func:`gen.perf_run.run_perf`;
``--predict-cycles`` calls :func:`gen.perf_run.predict_reshard`; ``--calibrate``
measures the engine's costs on the RTL (:mod:`gen.perf_calibrate`). See docs/perf.md.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

NAME = "perf"
HELP = "model a verl iteration on a chip: phase times, bounding walls, weight sync by scheme"
ORDER = 45


def add_arguments(p) -> None:
    from model.chips import bundled_chips
    p.add_argument("--model", default="qwen2.5-7b", help="bundled model name or HF config.json (default qwen2.5-7b)")
    p.add_argument("--chip", default="h100-sxm",
                   help=f"{' | '.join(bundled_chips())} or a chip JSON file (default h100-sxm)")
    p.add_argument("--train", default="fsdp2:dp=8", help="training layout; its world is the chip count")
    p.add_argument("--rollout", default="vllm:tp=2", help="vLLM layout (replicas fill the world)")
    p.add_argument("--batch", type=int, default=256, help="prompts per iteration (data.train_batch_size)")
    p.add_argument("--prompt-len", type=int, default=1024)
    p.add_argument("--response-len", type=int, default=1024)
    p.add_argument("--rollout-n", type=int, default=5, help="responses per prompt")
    p.add_argument("--ppo-epochs", type=int, default=1)
    p.add_argument("--micro-batch", type=int, default=8, help="sequences per chip per micro-batch")
    p.add_argument("--algorithm", default="grpo", help="grpo | ppo (ppo adds a critic of the same size)")
    p.add_argument("--engine-clock-mhz", type=float, default=None, help="the reshard engine's clock (chip default)")
    p.add_argument("--engine-bus-bits", type=int, default=None, help="the engine's bus width (chip default)")
    p.add_argument("--engine-channels", type=int, default=None, help="the engine's DMA channels (chip default)")
    p.add_argument("--dtype", default="bf16", help="weights' element type for the sync (default bf16)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", metavar="DIR", default=None, help="also write the four PNG pictures into DIR")
    p.add_argument("--published", action="store_true", help="also print published figures beside the model's")
    p.add_argument("--predict-cycles", action="store_true",
                   help="predict the RTL cycles of this reshard (--model/--train/--rollout/--dtype/--bus-bits/"
                        "--channels) from the calibrated costs, without simulating it")
    p.add_argument("--bus-bits", type=int, default=64, help="with --predict-cycles: the RTL's bus width")
    p.add_argument("--channels", type=int, default=None, help="with --predict-cycles: DMA channels")
    p.add_argument("--calibrate", action="store_true",
                   help="measure the engine's costs on the Verilog (Verilator) and rewrite "
                        "model/configs/engine_costs.json; then check predictions on runs not used")


def _progress(m: str) -> None:
    print(f"perf: {m}", file=sys.stderr, flush=True)


def run(args) -> int:
    if args.calibrate:
        return _calibrate(args)
    if args.predict_cycles:
        from gen.perf_run import PredictOptions, predict_reshard
        r = predict_reshard(PredictOptions(args.model, args.train, args.rollout, args.dtype, args.bus_bits,
                                           args.channels))
        if args.json:
            print(json.dumps(r))
        else:
            print(f"{r['model']} {r['train']} -> {r['rollout']} on {r['devices']} devices, {r['bus_bits']}-bit bus, "
                  f"{r['channels']} channels: predicted {r['predicted_cycles']:,} cycles "
                  f"(lower bound {r['lower_bound_cycles']:,})")
        return 0
    from gen.perf_run import PerfOptions, report_lines, run_perf, write_plots
    opts = PerfOptions(args.model, args.chip, args.train, args.rollout, args.batch, args.prompt_len,
                       args.response_len, args.rollout_n, args.ppo_epochs, args.micro_batch, args.algorithm,
                       args.engine_clock_mhz, args.engine_bus_bits, args.engine_channels, args.dtype)
    r = run_perf(opts)
    if args.published:
        from model.engine_cost import load_costs
        from model.published import comparison_rows
        r["published"] = comparison_rows(load_costs())
    if args.plot:
        r["plots"] = [str(p) for p in write_plots(opts, Path(args.plot), progress=_progress)]
    if args.json:
        print(json.dumps(r))
        return 0
    for line in report_lines(r):
        print(line)
    for row in r.get("published", []):
        print(f"\n{row['topic']} ({row['source']}; {row['setting']})\n  published: {row['published']}\n"
              f"  model:     {row['model']}\n  gap:       {row['gap']}")
    for p in r.get("plots", []):
        print(f"wrote {p}")
    return 0


def _calibrate(args) -> int:
    from gen.perf_calibrate import check_predictions, run_calibration
    from model.engine_cost import COSTS_FILE, save_costs
    costs = run_calibration(progress=_progress)
    save_costs(costs)
    rows = check_predictions(costs, progress=_progress)
    if args.json:
        print(json.dumps({"costs": costs.to_json(), "validation": rows}))
        return 0
    print(f"engine costs (cycles): per descriptor {costs.per_descriptor}, per remap {costs.per_remap}, "
          f"fixed {costs.fixed}, per collective step {costs.per_step}; written to {COSTS_FILE}")
    for r in rows:
        print(f"  {r['run']:<48} predicted {r['predicted_cycles']:>8,} measured {r['measured_cycles']:>8,} "
              f"({100 * r['error']:+.2f}%)")
    return 0
