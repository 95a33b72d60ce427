"""Capture verl's real weight export and training collectives on CPU (gloo).

``capture()`` runs verl 0.9.1's own FSDP engine in ``world`` processes
(``python -m model.capture_worker``, one per rank, rendezvous through a file,
``torch.distributed`` backend gloo) and writes a JSON Lines trace, format
version :data:`SCHEMA` (``docs/trace-format.md``). ``read_trace()`` reads it
back.

What runs, in each worker (all verl code is the installed verl, unmodified):

1. ``model.cpu_platform.install()``: a ``PlatformBase`` subclass registered with
   ``verl.plugin.platform.PlatformRegistry.register("cpu")`` and made current
   with ``set_platform`` (device ``cpu``, communication backend ``gloo``);
   ``load_fsdp_model_to_gpu`` / ``offload_fsdp_model_to_cpu`` become no-ops
   and FSDP1's CPU check for ``sync_module_states`` is disabled (the broadcast
   itself still runs).
2. ``verl.workers.config.HFModelConfig`` (local model directory written by
   ``capture()``: the HF config plus randomly initialised fp32 weights, fixed
   seed, ``save_pretrained``; ``load_tokenizer=False``;
   ``override_config={"attn_implementation": "sdpa"}``,
   ``use_remove_padding=False``), ``FSDPEngineConfig(strategy="fsdp"|"fsdp2")``
   with verl's defaults otherwise (fp32 master weights, bf16 compute via
   ``MixedPrecision``, fp32 reduce, ``reshard_after_forward=True``,
   ``use_orig_params=False``) except ``use_torch_compile=False``,
   ``FSDPOptimizerConfig`` (AdamW), then
   ``verl.workers.engine.fsdp.transformer_impl.FSDPEngineWithLMHead(...)``
   and ``engine.initialize()``. (``EngineRegistry`` only lists cuda/npu for
   this class, so it is instantiated directly.)
3. ``shard`` records read from the wrapped module: FSDP2 DTensor
   ``_local_tensor`` / ``placements`` / ``compute_local_shape_and_global_offset``;
   FSDP1 ``FlatParamHandle`` / ``FlatParameter._shard_param_infos``,
   ``_get_flat_param_offsets()``, ``_sharded_size``.
4. Export, as ``ActorRolloutRefWorker.update_weights`` does before a rollout:
   ``engine.get_per_tensor_param()``, its generator consumed by verl's own
   ``BucketedWeightSender.async_send_weights`` (the vLLM colocated sender,
   loaded from its file because its package imports vLLM; ZMQ socket and
   CUDA-IPC buffer replaced by an in-process recorder; ``bucket`` records).
5. One training step, as ``TrainingWorker.train_batch`` does: inside
   ``engine.train_mode()``, ``engine.train_batch(batch, loss_function=sft_loss)``
   (``optimizer_zero_grad``, ``forward_backward_batch`` -> ``forward_step`` +
   ``loss.backward()``, ``optimizer_step`` with grad clipping), then
   ``engine.lr_scheduler_step()``; ``sft_loss`` is verl's
   (``verl.workers.utils.losses``); the batch is a few random sequences per
   rank in verl's nested (NO_PADDING) format with dynamic batch size.

Collectives are recorded by a ``TorchDispatchMode`` (every ``c10d.*`` and
``_c10d_functional.*`` op with its process group resolved to global ranks)
plus wrappers around the eager ``torch.distributed`` / functional-collective
Python functions that record only what the mode did not see (collectives
issued inside DTensor's own dispatch), so nothing is counted twice. The
phase (``init``, ``export``, ``forward``, ``backward``, ``optimizer``) is
switched by wrapping the engine's ``forward_backward_batch``, ``forward_step``
(after it returns, ``loss.backward()`` runs), ``optimizer_step`` and
``lr_scheduler_step`` on the instance.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from model.errors import InputError
from model.ranks import RankError, run_ranks

SCHEMA = 1
STRATEGIES = {"fsdp1": "fsdp", "fsdp2": "fsdp2"}
PHASES = ("init", "export", "forward", "backward", "optimizer")
KINDS = ("header", "shard", "collective", "bucket")
MAX_WORLD = 32
MAX_PARAMS = 1_000_000_000
MAX_DATA_PARAMS = 20_000_000     # --record-data keeps every collective's tensors in memory



class CaptureError(RankError):
    """The capture run failed (a worker crashed or timed out). One-line message."""


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def _stderr(msg: str) -> None:
    print(f"capture: {msg}", file=sys.stderr, flush=True)


def check_args(strategy: str, world, bucket_mb, seed) -> None:
    if strategy not in STRATEGIES:
        raise InputError(f"unknown strategy {strategy!r}: choose one of {', '.join(STRATEGIES)}")
    if not isinstance(world, int) or isinstance(world, bool) or not 1 <= world <= MAX_WORLD:
        raise InputError(f"world {world!r} must be an integer from 1 to {MAX_WORLD} (processes on this CPU)")
    if not isinstance(bucket_mb, int) or isinstance(bucket_mb, bool) or bucket_mb < 1:
        raise InputError(f"bucket size {bucket_mb!r} MB must be a positive integer")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise InputError(f"seed {seed!r} must be a non-negative integer")


def _write_model(spec, model_dir: Path, seed: int) -> None:
    """The HF model of ``spec``, randomly initialised with ``seed``, saved for verl to load."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    torch.manual_seed(seed)
    config = spec.hf_config()
    config.architectures = [_architecture(spec)]
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(model_dir)


def _architecture(spec) -> str:
    arch = spec.config.get("architectures")
    if isinstance(arch, list) and len(arch) == 1:
        return arch[0]
    return {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM",
            "mistral": "MistralForCausalLM"}[spec.model_type]


def _run_workers(spec, strategy: str, world: int, bucket_mb: int, seed: int, workdir: Path,
                 model_dir: Path, timeout: float, progress, record_data: bool = False) -> list[Path]:
    progress(f"starting {world} workers (verl {_version('verl')}, {strategy}, gloo)")
    extra = ["--record-data"] if record_data else []
    run_ranks("model.capture_worker",
              lambda rank: ["--strategy", STRATEGIES[strategy], "--model-dir", str(model_dir),
                            "--workdir", str(workdir), "--seed", str(seed), "--bucket-mb", str(bucket_mb),
                            *extra],
              world, workdir, timeout=timeout, progress=progress, error=CaptureError)
    return [workdir / f"rank{r}.jsonl" for r in range(world)]


def data_path(trace_path) -> Path:
    """Where ``--record-data`` puts the tensors of a trace: ``x.jsonl`` -> ``x.data.npz``."""
    p = Path(trace_path)
    return p.with_name(p.stem + ".data.npz")


def capture(model: str, strategy: str, world: int, out, bucket_mb: int = 2048, seed: int = 0,
            timeout: float = 600.0, progress=_stderr, record_data: bool = False) -> dict:
    """Run the capture and write the trace to ``out`` (atomically). Returns a summary dict.

    ``record_data``: also store every collective's input and output tensors, per rank, in
    :func:`data_path` (named in the header; read them with :class:`TraceData`).
    """
    from model.models import load_model
    check_args(strategy, world, bucket_mb, seed)
    spec = load_model(model)
    if spec.numel > MAX_PARAMS:
        raise InputError(f"model {spec.name} has {spec.numel:,} parameters; a CPU capture is limited to "
                         f"{MAX_PARAMS:,} (use a small model such as tiny-qwen2)")
    if record_data and spec.numel > MAX_DATA_PARAMS:
        raise InputError(f"--record-data: model {spec.name} has {spec.numel:,} parameters; recording every "
                         f"collective's tensors is limited to {MAX_DATA_PARAMS:,}")
    out = Path(out)
    t_start = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="reshardip-capture-"))
    try:
        model_dir = workdir / "model"
        progress(f"model {spec.name}: {spec.numel:,} parameters, random init (seed {seed}), fp32")
        _write_model(spec, model_dir, seed)
        rank_files = _run_workers(spec, strategy, world, bucket_mb, seed, workdir, model_dir, timeout, progress,
                                  record_data)
        progress("merging rank records")
        trace = _merge(spec, strategy, world, bucket_mb, seed, rank_files)
        out.parent.mkdir(parents=True, exist_ok=True)
        if record_data:
            trace[0]["data"] = _write_data(workdir, world, data_path(out))
        with _atomic(out, "w") as f:
            for rec in trace:
                f.write(json.dumps(rec, separators=(",", ":")) + "\n")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    header = trace[0]
    summary = dict(header["records"])
    summary["seconds"] = round(time.monotonic() - t_start, 1)
    summary["out"] = str(out)
    return summary


def _merge(spec, strategy, world, bucket_mb, seed, rank_files) -> list[dict]:
    shards, collectives, buckets, workers = [], [], [], {}
    for rank, path in enumerate(rank_files):
        with open(path) as f:
            for line in f:
                rec = json.loads(line)
                kind = rec["kind"]
                if kind == "worker":
                    workers[rank] = rec
                elif kind == "shard":
                    shards.append(rec)
                elif kind == "collective":
                    collectives.append(rec)
                elif kind == "bucket":
                    buckets.append(rec)
    w0 = workers[0]
    exported = [e["name"] for e in w0["exported"]]
    for rank, w in workers.items():
        if [e["name"] for e in w["exported"]] != exported:
            raise CaptureError(f"rank {rank} exported a different parameter list than rank 0")
    collectives.sort(key=lambda r: (r["rank"], r["seq"]))
    buckets.sort(key=lambda r: r["index"])
    header = {
        "kind": "header", "schema": SCHEMA, "tool": "reshardip capture",
        "versions": {"verl": _version("verl"), "torch": _version("torch"),
                     "transformers": _version("transformers"), "python": sys.version.split()[0]},
        "model": spec.name, "config": spec.config,
        "strategy": strategy, "verl_strategy": STRATEGIES[strategy], "world": world,
        "dtype": "float32", "param_dtype": w0["mixed_precision"]["param_dtype"], "reduce_dtype": "float32",
        "bucket_mb": bucket_mb, "seed": seed, "backend": "gloo", "device": "cpu",
        "engine": "verl.workers.engine.fsdp.transformer_impl.FSDPEngineWithLMHead",
        "phases": list(PHASES),
        "export_order": exported,
        "train": {"loss": "verl.workers.utils.losses.sft_loss", "optimizer": "AdamW",
                  "sequence_lengths": {str(r): workers[r]["batch_lens"] for r in sorted(workers)},
                  "grad_norm": w0["grad_norm"]},
        "records": {"shard": len(shards), "collective": len(collectives), "bucket": len(buckets)},
    }
    return [header, *shards, *collectives, *buckets]


@contextlib.contextmanager
def _atomic(dest: Path, mode: str):
    """A file to write that appears at ``dest`` (by a rename) only once complete."""
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=str(dest.parent))
    try:
        with os.fdopen(fd, mode) as f:
            yield f
        os.replace(tmp, dest)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _write_data(workdir: Path, world: int, dest: Path) -> dict:
    """Merge the ranks' tensor files into ``dest`` (atomically); the header's ``data`` entry."""
    import numpy as np
    arrays = {}
    for r in range(world):
        with np.load(workdir / f"rank{r}.data.npz") as z:
            arrays.update({k: z[k] for k in z.files})
    with _atomic(dest, "wb") as f:
        np.savez(f, **arrays)
    return {"file": dest.name, "arrays": len(arrays), "bytes": int(sum(a.nbytes for a in arrays.values()))}


class TraceData:
    """The tensors ``capture --record-data`` stored beside a trace.

    ``TraceData(trace_path).tensors(record)`` -> ``(inputs, outputs)``: lists of torch
    tensors (dtype and shape as recorded) of one collective record on its rank.
    """

    def __init__(self, trace_path, header: dict | None = None):
        import numpy as np
        header = header or read_trace(trace_path)["header"]
        info = header.get("data")
        if not info:
            raise InputError(f"{trace_path}: the trace holds no tensor data (capture it with --record-data)")
        self.path = Path(trace_path).with_name(info["file"])
        if not self.path.is_file():
            raise InputError(f"{trace_path}: its tensor data {self.path} is missing")
        self._z = np.load(self.path)

    def tensors(self, record: dict):
        import torch
        if "data" not in record:
            raise InputError(f"collective {record.get('rank')}:{record.get('seq')} ({record.get('op')}) has no "
                             f"recorded tensors")

        def load(e):
            raw = torch.from_numpy(self._z[e["key"]].copy())
            return raw.view(getattr(torch, e["dtype"])).reshape(e["shape"])
        return [load(e) for e in record["data"]["in"]], [load(e) for e in record["data"]["out"]]


# --------------------------------------------------------------------------- #
# Reader
# --------------------------------------------------------------------------- #

_REQUIRED = {
    "shard": ("rank", "param", "shape", "ranges"),
    "collective": ("rank", "seq", "phase", "op", "dtype", "bytes", "bytes_in", "bytes_out", "ranks", "t_us"),
    "bucket": ("index", "params", "bytes"),
}


def read_trace(path) -> dict:
    """Read a capture trace: ``{"header", "shards", "collectives", "buckets"}``.

    Raises ``InputError`` naming the file (and line) for an unreadable file,
    a malformed line, a missing header, an unknown schema version or kind, or
    a record count that disagrees with the header (a truncated file).
    """
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read trace: {e}") from None
    result = {"header": None, "shards": [], "collectives": [], "buckets": []}
    lists = {"shard": result["shards"], "collective": result["collectives"], "bucket": result["buckets"]}
    lineno = 0
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            raise InputError(f"{path}:{lineno}: empty line in trace")
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}:{lineno}: invalid JSON: {e.msg} (column {e.colno})") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("kind"), str):
            raise InputError(f"{path}:{lineno}: a trace line must be a JSON object with a string 'kind'")
        kind = rec["kind"]
        if lineno == 1:
            if kind != "header":
                raise InputError(f"{path}:1: first line must be the header, got kind {kind!r}")
            schema = rec.get("schema")
            if schema != SCHEMA:
                raise InputError(f"{path}:1: unknown trace schema {schema!r} (this reader understands {SCHEMA})")
            result["header"] = rec
            continue
        if kind == "header":
            raise InputError(f"{path}:{lineno}: second header")
        if kind not in lists:
            raise InputError(f"{path}:{lineno}: unknown record kind {kind!r} "
                             f"(expected one of {', '.join(KINDS)})")
        missing = [k for k in _REQUIRED[kind] if k not in rec]
        if missing:
            raise InputError(f"{path}:{lineno}: {kind} record lacks {', '.join(missing)}")
        lists[kind].append(rec)
    if result["header"] is None:
        raise InputError(f"{path}: empty trace (no header)")
    counts = result["header"].get("records")
    if isinstance(counts, dict):
        for kind, lst in lists.items():
            if kind in counts and counts[kind] != len(lst):
                raise InputError(f"{path}: header announces {counts[kind]} {kind} records, file has {len(lst)} "
                                 f"(truncated or edited trace)")
    return result
