"""A captured collective schedule for the UVM replay: verl's real training-step collectives.

:func:`prepare` captures micro-qwen2 with verl's FSDP2 engine on 2 CPU ranks (gloo),
every collective's tensors recorded (``model.capture.capture(..., record_data=True)``,
about 15 s), once: the trace is cached under ``build/uvm/capture/<key>/`` (under a
file lock, so parallel runs capture once), keyed by its inputs (model, configuration
file, strategy, world, seed, the capture code, the verl and torch versions). The
training step's collectives (phases forward, backward, optimizer) are matched across ranks by ``gen.collectives.read_collectives``
and their tensors read by ``gen.collectives.load_data``, as ``python -m gen
collectives`` does; the ones the hardware runs (all-gathers, f32/bf16 ``sum``/``avg``
reductions) and whose buffers fit the UVM build's memory are written to
``schedule.json`` (metadata, in issue order) and ``schedule.npz`` (per collective and
rank: input bytes, gloo's output bytes) beside the trace, so the simulator process
reads numpy arrays and needs neither torch nor verl. The others are listed with
the reason they are not run.
"""
from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata
from pathlib import Path

from verif.runner import CACHE, ROOT

MODEL, STRATEGY, WORLD, SEED = "micro-qwen2", "fsdp2", 2, 0
PHASES = ("forward", "backward", "optimizer")
SCHEMA = 1          # of schedule.json / schedule.npz: a change recaptures nothing, rewrites them


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def capture_key() -> str:
    """Hash of everything the capture depends on."""
    h = hashlib.sha256(json.dumps([MODEL, STRATEGY, WORLD, SEED, _version("verl"), _version("torch")]).encode())
    for f in (ROOT / "model" / "configs" / f"{MODEL}.json", ROOT / "model" / "capture.py",
              ROOT / "model" / "capture_worker.py"):
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def prepare(arch, progress=lambda m: None, cache: Path | None = None) -> Path:
    """The path of ``schedule.json`` for ``arch`` (captured and converted on first use)."""
    from gen.resources import exclusive
    out = (cache or CACHE / "capture") / capture_key()
    out.mkdir(parents=True, exist_ok=True)
    with exclusive(out / ".lock"):      # one capture at a time (pytest workers, parallel runs)
        return _prepare(arch, out, progress)


def _prepare(arch, out: Path, progress) -> Path:
    from gen.collectives import ELEM_BYTES, _layout, _need, buffer_bytes
    trace = out / "trace.jsonl"
    if not trace.is_file():
        from model.capture import capture
        progress(f"capturing {MODEL} {STRATEGY} on {WORLD} CPU ranks with tensors into {out} (once)")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        capture(MODEL, STRATEGY, WORLD, trace, seed=SEED, record_data=True, progress=lambda m: None)
    tag = hashlib.sha256(json.dumps([SCHEMA, arch.to_json()]).encode()).hexdigest()[:8]
    sched = out / f"schedule-{tag}.json"
    if sched.is_file():
        return sched
    import numpy as np

    from gen.collectives import load_data, read_collectives
    from model.capture import TraceData
    header, calls = read_collectives(trace, list(PHASES), WORLD)
    data = TraceData(trace, header)
    runs, skipped, arrays = [], [], {}
    for c in calls:
        meta = {"index": c.index, "phase": c.phase, "op": c.op, "dtype": c.dtype, "reduce_op": c.reduce_op,
                "ranks": c.ranks, "bytes": c.bytes, "seq": [r["seq"] for r in c.records]}
        why = c.reason
        if why is None:
            need = _need(_layout(c.op, c.p, buffer_bytes(c), ELEM_BYTES[c.dtype]))
            if need > arch.mem_bytes:
                why = f"needs {need:,} B of device memory, the UVM build has {arch.mem_bytes:,}"
        if why:
            skipped.append(dict(meta, reason=why))
            continue
        ins, outs = load_data(data, c)
        for s in range(c.p):
            arrays[f"c{c.index}_in{s}"], arrays[f"c{c.index}_out{s}"] = ins[s], outs[s]
        runs.append(meta)
    npz = sched.with_suffix(".npz")
    np.savez_compressed(npz, **arrays)
    doc = {"model": MODEL, "strategy": STRATEGY, "world": WORLD, "seed": SEED, "phases": list(PHASES),
           "trace": str(trace), "data": str(npz), "collectives": runs, "not_run": skipped}
    tmp = sched.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, sched)
    return sched
