"""The closed loop: verl trains, the simulated hardware moves the weights, the rollout generates.

:func:`run_loop` writes a randomly initialised HF model (fixed seed), compiles the
minimal reshard once, builds the engine's simulator, then runs ``world`` verl ranks
(:mod:`gen.loop_worker`) that execute the loop twice from the same seeds: once with the
rollout's weights straight from verl's export (the reference), once through the hardware.
It then compares the two runs bit for bit, iteration by iteration: generated tokens,
rewards, advantages, old log-probs, ``pg_loss``, ``grad_norm`` and the final weights.
See docs/loop.md.
"""
from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from gen.api import ENGINES
from gen.resources import PeakMemory
from gen.weight_sync import FAULT_KINDS
from model.errors import InputError

_TENSOR_KEYS = ("responses", "rewards", "advantages", "old_log_probs")
_FLOAT_KEYS = ("pg_loss", "grad_norm")


class LoopError(InputError):
    """The loop could not run (a worker failed, a sync check failed); one line."""


@dataclass(frozen=True)
class FaultSpec:
    step: int
    kind: str = "unmapped"
    device: int = 0

    @classmethod
    def parse(cls, text: str, steps: int, world: int) -> "FaultSpec":
        """``STEP[:KIND[:DEVICE]]``: corrupt the sync of iteration STEP (2..steps)."""
        parts = str(text).split(":")
        if not 1 <= len(parts) <= 3:
            raise InputError(f"--inject-fault {text!r}: want STEP[:KIND[:DEVICE]], e.g. 2:unmapped")
        try:
            step = int(parts[0])
            device = int(parts[2]) if len(parts) > 2 else 0
        except ValueError:
            raise InputError(f"--inject-fault {text!r}: STEP and DEVICE are integers") from None
        kind = parts[1] if len(parts) > 1 and parts[1] else "unmapped"
        if not 2 <= step <= steps:
            raise InputError(f"--inject-fault {text!r}: STEP must be in 2..{steps} (the sync of iteration 1 "
                             f"has no previous weights to keep)")
        if kind not in FAULT_KINDS:
            raise InputError(f"--inject-fault {text!r}: kind must be one of {', '.join(FAULT_KINDS)}")
        if not 0 <= device < world:
            raise InputError(f"--inject-fault {text!r}: DEVICE must be in 0..{world - 1}")
        return cls(step, kind, device)

    def arg(self) -> str:
        return f"{self.step}:{self.kind}:{self.device}"


@dataclass(frozen=True)
class LoopOptions:
    model: str = "tiny-qwen2"
    world: int = 2
    steps: int = 3
    engine: str = "verilator"
    seed: int = 0
    inject_fault: str | None = None
    prompts: int = 4
    prompt_len: int = 8
    max_new_tokens: int = 8
    rollout_n: int = 2
    timeout: float = 900.0

    def check(self) -> FaultSpec | None:
        for name, lo in (("world", 1), ("steps", 1), ("prompts", 1), ("prompt_len", 1),
                         ("max_new_tokens", 1), ("rollout_n", 2)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise InputError(f"--{name.replace('_', '-')} {v!r} must be an integer >= {lo}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise InputError(f"--seed {self.seed!r} must be a non-negative integer")
        if self.engine not in ENGINES:
            raise InputError(f"--engine {self.engine!r}: use one of {', '.join(ENGINES)}")
        if (self.prompts * self.rollout_n) % self.world:
            raise InputError(f"{self.prompts} prompts x rollout_n {self.rollout_n} do not split over "
                             f"--world {self.world} ranks")
        return FaultSpec.parse(self.inject_fault, self.steps, self.world) if self.inject_fault else None


def _stderr(msg: str) -> None:
    import sys
    print(f"loop: {msg}", file=sys.stderr, flush=True)


def run_loop(opts: LoopOptions, progress=_stderr, keep_records=None) -> dict:
    """Run the loop and its reference; the JSON-ready summary (``verified`` is the verdict).

    ``keep_records``: a directory to copy every rank's raw records into
    (``rank<r>.reference.pt``, ``rank<r>.hardware.pt``; see :mod:`gen.loop_worker`).
    """
    from model.capture import _write_model
    from model.models import load_model
    from model.plan import make_plan
    from model.ranks import RankError, run_ranks
    from model.rollout_tp import expected_shapes
    from model.specs import parse_spec
    from gen.weight_sync import SyncOptions, WeightSync

    fault = opts.check()
    spec = load_model(opts.model)
    expected_shapes(spec, opts.world)          # tp = world must fit the model
    train, rollout = f"fsdp2:dp={opts.world}", f"vllm:tp={opts.world}"
    t_start = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="reshardip-loop-"))
    try:
        with PeakMemory() as memory:     # the loop's process and its ranks, summed
            progress(f"model {spec.name}: {spec.numel:,} parameters, random init (seed {opts.seed}), fp32")
            _write_model(spec, workdir / "model", opts.seed)
            ws = WeightSync(SyncOptions(opts.model, train, rollout, opts.engine), workdir / "compiled-check", progress)
            ws.prepare(progress)
            verl_plan = make_plan(spec, parse_spec(train, "train"), parse_spec(rollout, "rollout"), "fp32", "verl")
            progress(f"starting {opts.world} verl ranks (gloo): the reference run, then the run through the "
                     f"hardware ({opts.engine})")
            args = ["--workdir", str(workdir), "--model-dir", str(workdir / "model"), "--model", opts.model,
                    "--steps", str(opts.steps), "--engine", opts.engine, "--seed", str(opts.seed),
                    "--prompts", str(opts.prompts), "--prompt-len", str(opts.prompt_len),
                    "--max-new-tokens", str(opts.max_new_tokens), "--rollout-n", str(opts.rollout_n)]
            if fault:
                args += ["--fault", fault.arg()]
            try:
                run_ranks("gen.loop_worker", lambda r: args, opts.world, workdir, timeout=opts.timeout,
                          progress=progress, error=LoopError)
            except RankError as e:
                raise LoopError(str(e)) from None
            if keep_records is not None:
                Path(keep_records).mkdir(parents=True, exist_ok=True)
                for f in workdir.glob("rank*.pt"):
                    shutil.copy(f, Path(keep_records) / f.name)
            import torch
            ref = [torch.load(workdir / f"rank{r}.reference.pt", weights_only=False) for r in range(opts.world)]
            hw = [torch.load(workdir / f"rank{r}.hardware.pt", weights_only=False) for r in range(opts.world)]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    out = compare_runs(ref, hw, verl_allgather_bytes=verl_plan.total_bytes)
    ranks_mib = [round(h["peak_rss_mib"], 1) for h in hw]
    out.update(engine=opts.engine, model=spec.name, world=opts.world, steps=opts.steps, seed=opts.seed,
               seconds=round(time.monotonic() - t_start, 1),
               peak_rss_mib={"ranks": ranks_mib, "total": round(memory.peak / 2**20, 1)})
    return out


def _equal(a, b) -> bool:
    import torch
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and bool(
            torch.equal(a.view(torch.uint8) if a.is_floating_point() else a,
                        b.view(torch.uint8) if b.is_floating_point() else b))
    return a == b


def compare_runs(ref: list[dict], hw: list[dict], *, verl_allgather_bytes: int | None = None) -> dict:
    """The two runs' records (one per rank) -> the summary; every difference is named."""
    world = len(ref)
    diffs: list[str] = []
    iterations = []
    hw_iters = hw[0]["iterations"]
    for i, rec in enumerate(hw_iters):
        it = rec["iteration"]
        sync = rec["sync"] or {}
        entry = {"iteration": it, "sync": {k: sync.get(k) for k in (
                     "committed", "cycles", "lower_bound_cycles", "network_bytes", "bytes_copied", "bytes_remapped",
                     "descriptors", "checked_bytes", "rollout_entries_committed", "seconds")},
                 "sync_seconds": round(max(h["iterations"][i]["sync_seconds"] for h in hw), 3),
                 "reference_sync_seconds": round(max(r["iterations"][i]["sync_seconds"] for r in ref), 3)
                 if i < len(ref[0]["iterations"]) else None}
        entry["sync"]["verl_allgather_bytes"] = verl_allgather_bytes
        if "responses" not in rec:        # the faulted sync: no generation, no training
            iterations.append(entry)
            continue
        same = True
        for r in range(world):
            a, b = ref[r]["iterations"][i], hw[r]["iterations"][i]
            for k in _TENSOR_KEYS + _FLOAT_KEYS:
                if not _equal(a[k], b[k]):
                    same = False
                    diffs.append(f"iteration {it} rank {r}: {k} differs from the reference run")
        entry.update(identical=same, generate_seconds=round(max(h["iterations"][i]["generate_seconds"] for h in hw), 3),
                     train_seconds=round(max(h["iterations"][i]["train_seconds"] for h in hw), 3),
                     reward_mean=rec["reward_mean"], pg_loss=rec["pg_loss"], grad_norm=rec["grad_norm"],
                     lr=rec["lr"], tokens=int(rec["responses"].numel()))
        iterations.append(entry)
    out = {"iterations": iterations}
    fault = hw[0].get("fault")
    if fault is None:
        for r in range(world):
            if "final_weights" not in hw[r] or "final_weights" not in ref[r]:
                diffs.append(f"rank {r}: a run ended without its final weights")
                continue
            for j, (a, b) in enumerate(zip(ref[r]["final_weights"], hw[r]["final_weights"])):
                if not _equal(a, b):
                    diffs.append(f"rank {r}: final weight {j} differs from the reference run")
        if len(hw_iters) != len(ref[0]["iterations"]):
            diffs.append(f"the runs have {len(hw_iters)} and {len(ref[0]['iterations'])} iterations")
        out["final_weights_identical"] = not any("final weight" in d for d in diffs)
    else:
        out["fault"] = {"iteration": fault["iteration"], "device": fault["device"], "channel": fault["channel"],
                        "cause": fault["cause"], "address": fault["address"], "records": fault["records"],
                        "status": fault["status"], "line": fault["line"]}
        prev = [h.get("previous") for h in hw]
        intact = all(p is not None for p in prev)
        for r, p in enumerate(prev):
            if p is not None:
                want = ref[r]["iterations"][p["iteration"] - 1]["responses"]
                intact &= _equal(p["responses"], want)
        out["previous_weights_intact"] = intact
        out["previous_weights_iteration"] = prev[0]["iteration"] if prev[0] else None
        committed = fault.get("rollout_entries_committed") or []
        out["fault"]["rollout_entries_committed"] = committed
    out["reference_identical"] = not diffs
    out["differences"] = diffs[:20]
    synced = [e for e in iterations if e["sync"].get("committed")]
    out["verified"] = bool(fault is None and not diffs and len(synced) == len(ref[0]["iterations"]))
    return out


def report_lines(s: dict) -> list[str]:
    """The human-readable report of a :func:`run_loop` summary: one line per iteration."""
    from gen.api import fmt_bytes
    lines = [f"{s['model']}, {s['world']} verl ranks (FSDP2, gloo) -> vLLM tp={s['world']} rollout; weight sync "
             f"on {s['engine']}; {len(s['iterations'])} of {s['steps']} iteration(s) in {s['seconds']} s, "
             f"peak memory {s['peak_rss_mib']['total']:.0f} MiB"]
    lines.append(f"{'iter':>4} {'train s':>8} {'sync cycles':>12} {'lower bd':>9} {'copied':>11} {'remapped':>11} "
                 f"{'network':>11} {'verl all-gather':>15} {'gen s':>6} {'reward':>7} {'identical':>9}")
    for e in s["iterations"]:
        y = e["sync"]
        cyc = "-" if y["cycles"] is None else f"{y['cycles']:,}"
        if y["committed"]:
            tail = (f"{e['train_seconds']:>8.2f} {cyc:>12} {y['lower_bound_cycles']:>9,} "
                    f"{fmt_bytes(y['bytes_copied']):>11} {fmt_bytes(y['bytes_remapped']):>11} "
                    f"{fmt_bytes(y['network_bytes']):>11} "
                    f"{fmt_bytes(y['verl_allgather_bytes']):>15} {e['generate_seconds']:>6.2f} "
                    f"{e['reward_mean']:>7.4f} {str(e['identical']).lower():>9}")
        else:
            tail = f"{'-':>8} {cyc:>12} {y['lower_bound_cycles']:>9,}  FAULT: nothing committed"
        lines.append(f"{e['iteration']:>4} {tail}")
    if "fault" in s:
        f = s["fault"]
        lines.append(f"sync of iteration {f['iteration']} faulted: {f['line']}")
        lines.append(f"the rollout kept iteration {s['previous_weights_iteration']}'s weights; generating with them "
                     f"again {'matches' if s['previous_weights_intact'] else 'DOES NOT match'} the reference run")
    else:
        lines.append(f"every sync checked against verl's export sliced by the vLLM rules; the run is "
                     f"{'bit-identical' if s['reference_identical'] else 'NOT identical'} to the reference "
                     f"(tokens, rewards, advantages, old log-probs, pg_loss, grad_norm, final weights)")
    for d in s["differences"]:
        lines.append(f"  difference: {d}")
    return lines
