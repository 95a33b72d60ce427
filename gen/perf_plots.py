"""The iteration model's four pictures (matplotlib, PNG).

- ``phases.png``: stacked phase times per chip and model;
- ``roofline.png``: every phase of one configuration on its chip's roofline;
- ``sync_bytes.png``: bytes per rank of the weight sync by scheme and layout;
- ``sync_scaling.png``: verl's sync path against the IP's as the model grows.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from model.errors import InputError

PHASE_COLORS = {"rollout-prefill": "#9ecae1", "rollout-decode": "#3182bd", "old-log-prob": "#fdae6b",
                "ref-log-prob": "#e6550d", "critic-values": "#fd8d3c", "actor-update": "#31a354",
                "critic-update": "#74c476", "weight-sync": "#756bb1"}


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def phases_chart(opts, sweep, out: Path) -> Path:
    from gen.perf_run import parallel_for, run_perf
    plt = _plt()
    labels, rows, skipped = [], [], []
    for chip in sweep.chips:
        for model in sweep.models:
            train, roll = parallel_for(model)
            try:
                r = run_perf(replace(opts, chip=chip, model=model, train=train, rollout=roll))
            except InputError as e:
                skipped.append(f"{model} on {chip}: {e}")
                continue
            labels.append(f"{model}\n{chip}\n{r['world']} chips")
            rows.append({p["name"]: p["time_s"] for p in r["phases"]})
    fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(labels)), 5.5))
    bottom = [0.0] * len(rows)
    for name, color in PHASE_COLORS.items():
        vals = [row.get(name, 0.0) for row in rows]
        if any(vals):
            ax.bar(range(len(rows)), vals, bottom=bottom, color=color, label=name)
            bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylabel("seconds per iteration")
    ax.set_title(f"One {opts.algorithm.upper()} iteration by phase (batch {opts.batch} x n={opts.rollout_n}, "
                 f"{opts.prompt_len}+{opts.response_len} tokens)")
    ax.legend(fontsize=8)
    if skipped:
        fig.text(0.01, 0.01, "not shown: " + "; ".join(skipped)[:200], fontsize=6)
    fig.tight_layout()
    path = out / "phases.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def roofline_chart(opts, out: Path) -> Path:
    from gen.perf_run import run_perf
    from model.chips import load_chip
    plt = _plt()
    r = run_perf(opts)
    chip = load_chip(opts.chip)
    peak, bw = chip.flops, chip.hbm_bytes_per_s
    fig, ax = plt.subplots(figsize=(8, 5.5))
    xs = [10 ** (k / 10) for k in range(-10, 51)]
    ax.loglog(xs, [min(peak, x * bw) for x in xs], color="black", label="roofline (achievable compute, HBM)")
    for i, p in enumerate(r["phases"]):
        if not p["flops_per_chip"] or not p["hbm_bytes_per_chip"]:
            continue
        x = p["flops_per_chip"] / p["hbm_bytes_per_chip"]
        y = p["flops_per_chip"] / p["time_s"]
        ax.scatter([x], [y], color=PHASE_COLORS.get(p["name"], "gray"), s=50, zorder=3)
        ax.annotate(f"{p['name']} ({p['bound_by']})", (x, y), fontsize=7, xytext=(-60, -14 - 11 * i),
                    textcoords="offset points")
    ax.set_xlabel("arithmetic intensity (FLOP per HBM byte)")
    ax.set_ylabel("FLOP/s per chip")
    ax.set_title(f"{r['model']} on {r['chip']}: phases on the roofline (below it: another wall binds)")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path = out / "roofline.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


SYNC_LAYOUTS = (("fsdp2:dp=8", "vllm:tp=2"), ("fsdp2:dp=8", "vllm:tp=4"),
                ("megatron:tp=4,pp=2,dp=1", "vllm:tp=4"), ("megatron:tp=4,pp=1,dp=2", "vllm:tp=2"))


def sync_bytes_chart(opts, out: Path) -> Path:
    from model.models import load_model
    from model.plan import SCHEMES, make_plan
    from model.specs import parse_spec
    plt = _plt()
    m = load_model(opts.model)
    fig, ax = plt.subplots(figsize=(8, 5))
    width = 0.8 / len(SCHEMES)
    for k, scheme in enumerate(SCHEMES):
        vals = []
        for train, roll in SYNC_LAYOUTS:
            t = parse_spec(train, "train")
            if scheme == "hybridflow" and t.kind != "megatron":
                vals.append(0.0)
                continue
            vals.append(max(make_plan(m, t, parse_spec(roll, "rollout"), opts.dtype, scheme).bytes_in) / 1e9)
        ax.bar([i + k * width for i in range(len(SYNC_LAYOUTS))], vals, width, label=scheme)
    ax.set_xticks([i + width for i in range(len(SYNC_LAYOUTS))], [f"{t}\n-> {r}" for t, r in SYNC_LAYOUTS],
                  fontsize=7)
    ax.set_ylabel("GB into the busiest rank")
    ax.set_title(f"{m.name}: weight-sync bytes per rank by scheme (hybridflow: Megatron only)")
    ax.legend()
    fig.tight_layout()
    path = out / "sync_bytes.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def sync_scaling_chart(opts, sweep, out: Path) -> Path:
    from gen.perf_run import parallel_for
    from model.chips import load_chip
    from model.engine_cost import load_costs
    from model.models import load_model
    from model.perf import weight_sync
    from model.specs import parse_spec
    plt = _plt()
    chip = load_chip(opts.chip)
    costs = load_costs()
    sizes, verl, ip = [], [], []
    for name in sweep.sync_models:
        m = load_model(name)
        train, roll = parallel_for(name)
        rows = {r.path: r for r in weight_sync(m, chip, parse_spec(train, "train"), parse_spec(roll, "rollout"),
                                               opts.dtype, costs)}
        sizes.append(m.numel / 1e9)
        verl.append(rows["software"].time_s)
        ip.append(rows["ip"].time_s)
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.loglog(sizes, verl, "o-", label="verl: bucketed all-gather of full tensors (NCCL)")
    ax.loglog(sizes, ip, "s-", label="reshard IP: minimal plan, engine at its clock")
    for i, (s, t, name) in enumerate(zip(sizes, verl, sweep.sync_models)):
        ax.annotate(name, (s, t), fontsize=7, xytext=(-30, 6 + 10 * (i % 2)), textcoords="offset points")
    ax.set_xlabel("parameters (billions)")
    ax.set_ylabel("weight-sync time per iteration (s)")
    ax.set_title(f"Weight sync on {chip.name} as the model grows (colocated, one node up to 8B)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "sync_scaling.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def draw_all(opts, out: Path, sweep, progress=lambda m: None) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for what, fn in (("phase times", lambda: phases_chart(opts, sweep, out)),
                     ("roofline", lambda: roofline_chart(opts, out)),
                     ("sync bytes", lambda: sync_bytes_chart(opts, out)),
                     ("sync scaling", lambda: sync_scaling_chart(opts, sweep, out))):
        progress(f"drawing {what}")
        paths.append(fn())
    return paths
