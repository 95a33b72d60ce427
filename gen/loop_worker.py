"""One rank of ``python -m gen loop``: verl trains, a weight sync, the TP rollout generates.

Started by :func:`gen.loop.run_loop` as ``python -m gen.loop_worker`` in ``--world``
processes (gloo, one thread each). The same process runs the loop twice, from the same
model directory and seeds, one run after the other:

* ``reference``: the rollout takes its weights straight from the trainer, through verl's
  ``engine.get_per_tensor_param()``, sliced by the vLLM rules;
* ``hardware``: every rank's FSDP2 local shards are gathered to rank 0, which runs the
  compiled reshard on the simulated hardware (:class:`gen.weight_sync.WeightSync`), checks
  the images and the rollout tensors against verl's export sliced independently, and hands
  each rank the tensors it read through its device's committed rollout context.

An iteration is: sync (the weights after the previous training steps), generate (seeded
sampling, ``rollout_n`` samples per prompt, the TP decoder on the rank's vLLM shards), one
GRPO step (:func:`model.grpo.grpo_step`). Each rank writes ``rank<r>.<mode>.pt``: per
iteration the responses, rewards, advantages, old log-probs, ``pg_loss``, ``grad_norm`` and
times; at the end its final local shards; after a faulted sync the fault and the responses
the rollout still generates with the weights it kept.
"""
from __future__ import annotations

import gc
import os
import sys
import time

from model.ranks import Progress, init_gloo, worker_main, worker_parser


def _sampling_seed(seed: int, iteration: int) -> int:
    return seed * 1_000 + iteration


def _batch(model, a, cfg):
    import torch

    from model.grpo import make_prompts
    prompts = make_prompts(model.vocab, a.prompts, a.prompt_len, a.seed)
    rows = prompts.repeat_interleave(cfg.rollout_n, dim=0)
    uid = [f"prompt{i // cfg.rollout_n}" for i in range(rows.shape[0])]
    return rows.to(torch.long), uid


def _hardware_sync(ws, engine, spec, full, rank: int, world: int, programs, it: int, progress):
    """Rank 0 runs the reshard; every rank gets its tensors (or the fault). Collective."""
    import torch.distributed as dist

    from model.verl_engine import local_shards
    shards = local_shards(engine, spec)
    gathered = [None] * world if rank == 0 else None
    dist.gather_object(shards, gathered, dst=0)
    payload = [None] * world
    if rank == 0:
        images = ws.images(gathered)
        res = ws.run(images, programs)
        problems = ws.check(full, images, res.tensors)
        if problems:
            raise RuntimeError(f"sync of iteration {it}: {problems[0]} ({len(problems)} problem(s))")
        info = res.figures()
        info["fault"] = res.fault.to_json() if res.fault else None
        info["fault_line"] = res.fault.line() if res.fault else None
        info["checked_bytes"] = sum(t.numel() * 4 for d in (res.tensors or []) for t in d.values())
        payload = [{"info": info, "tensors": res.tensors[d] if res.tensors else None} for d in range(world)]
        msg = (f"sync on {ws.opts.engine}: {res.cycles if res.cycles is not None else '-'} cycles "
               f"(port lower bound {res.lower_bound_cycles}), {res.bytes_copied:,} B copied, "
               f"{res.bytes_remapped:,} B remapped")
        progress(f"  [{it}] {msg}; " + ("checked against the sliced tensors" if res.committed
                                       else f"FAULT: {res.fault.line()}"))
    mine = [None]
    dist.scatter_object_list(mine, payload if rank == 0 else None, src=0)
    return mine[0]["info"], mine[0]["tensors"]


def run_mode(mode: str, a, progress) -> dict:
    import torch

    from model.grpo import GrpoConfig, grpo_step
    from model.models import load_model
    from model.rollout_tp import SamplingOptions, TPDecoder
    from model.specs import parse_spec
    from model.verl_engine import build_engine, full_weights, local_shards
    from gen.weight_sync import corrupt_program, vllm_tensors_from_export

    rank, world = a.rank, a.world
    spec = load_model(a.model)
    rollout = parse_spec(f"vllm:tp={world}", "rollout")
    cfg = GrpoConfig(rollout_n=a.rollout_n)
    torch.manual_seed(a.seed)
    t0 = time.perf_counter()
    engine = build_engine(a.model_dir, seed=a.seed, lr=cfg.lr, total_steps=a.steps)
    progress(f"[{mode}] verl FSDPEngineWithLMHead (fsdp2) on {world} ranks ready ({time.perf_counter() - t0:.1f} s)")
    ws = None
    fault_step, fault_kind, fault_dev = None, None, 0
    if mode == "hardware":
        if a.fault:
            parts = a.fault.split(":")
            fault_step, fault_kind, fault_dev = int(parts[0]), parts[1], int(parts[2])
        if rank == 0:
            from gen.weight_sync import SyncOptions, WeightSync
            ws = WeightSync(SyncOptions(a.model, f"fsdp2:dp={world}", f"vllm:tp={world}", a.engine),
                            os.path.join(a.workdir, "compiled"))
    prompts, uid = _batch(spec, a, cfg)
    records = {"mode": mode, "iterations": [], "fault": None}
    decoder = None
    prev = None  # (iteration, sampling options) of the weights the rollout holds
    for it in range(1, a.steps + 1):
        rec = {"iteration": it}
        # -- sync
        t0 = time.perf_counter()
        full = full_weights(engine)       # verl's export: the reference's weights, the hardware's check
        if mode == "reference":
            tensors, rec["sync"] = vllm_tensors_from_export(full, spec, rollout, rank), None
        else:
            progs = None
            if rank == 0 and it == fault_step:
                progs = list(ws.programs)
                progs[fault_dev] = corrupt_program(progs[fault_dev], fault_kind)
            rec["sync"], tensors = _hardware_sync(ws, engine, spec, full, rank, world, progs, it, progress)
        rec["sync_seconds"] = time.perf_counter() - t0
        if tensors is None:               # nothing committed: the rollout keeps what it holds
            records["fault"] = {"iteration": it, **rec["sync"]["fault"], "line": rec["sync"]["fault_line"],
                                "rollout_entries_committed": rec["sync"]["rollout_entries_committed"]}
            records["iterations"].append(rec)
            if decoder is not None:
                p_it, opts = prev
                progress(f"  [{it}] rollout kept iteration {p_it}'s weights; generating with them again")
                records["previous"] = {"iteration": p_it, "responses": decoder.generate(prompts, opts)}
            break
        decoder = TPDecoder(spec, tensors, tp=world, rank=rank)
        del full, tensors
        # -- generate
        t0 = time.perf_counter()
        opts = SamplingOptions(max_new_tokens=a.max_new_tokens, temperature=cfg.temperature,
                               seed=_sampling_seed(a.seed, it))
        responses = decoder.generate(prompts, opts)
        prev = (it, opts)
        rec["generate_seconds"] = time.perf_counter() - t0
        rec["responses"] = responses
        # -- train
        t0 = time.perf_counter()
        out = grpo_step(engine, prompts, responses, uid, cfg, rank=rank, world=world)
        rec["train_seconds"] = time.perf_counter() - t0
        for k in ("rewards", "advantages", "old_log_probs", "pg_loss", "grad_norm", "reward_mean", "lr", "rows"):
            rec[k] = out[k]
        records["iterations"].append(rec)
        progress(f"  [{it}] {mode}: generated {tuple(responses.shape)} tokens in {rec['generate_seconds']:.2f} s; "
                 f"GRPO step in {rec['train_seconds']:.2f} s: reward mean {out['reward_mean']:.4f}, "
                 f"pg_loss {out['pg_loss']:.6g}, grad_norm {out['grad_norm']:.6g}")
    else:
        records["final_weights"] = local_shards(engine, spec)
    del engine, decoder
    gc.collect()
    return records


def run_worker(a) -> int:
    import torch
    torch.set_num_threads(1)
    progress = Progress(os.path.join(a.workdir, "progress"), a.rank)
    from model import cpu_platform
    init_gloo(a.workdir, a.rank, a.world)
    cpu_platform.install()
    import torch.distributed as dist
    import resource
    for mode in a.modes.split(","):
        rec = run_mode(mode, a, progress)
        rec["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        torch.save(rec, os.path.join(a.workdir, f"rank{a.rank}.{mode}.pt"))
        dist.barrier()
    dist.destroy_process_group()
    return 0


def main(argv=None) -> int:
    p = worker_parser("python -m gen.loop_worker")
    p.add_argument("--model", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--engine", required=True)
    p.add_argument("--fault", default="")
    p.add_argument("--modes", default="reference,hardware")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--prompt-len", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--rollout-n", type=int, default=2)
    return worker_main(p, run_worker, argv)


if __name__ == "__main__":
    sys.exit(main())
