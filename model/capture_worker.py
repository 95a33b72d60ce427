"""One rank of ``python -m gen capture``: runs verl's own FSDP engine and records it.

Started by :func:`model.capture.capture` as ``python -m model.capture_worker``
in ``--world`` processes; see :mod:`model.capture` for the verl calls it goes
through and ``docs/trace-format.md`` for the records it writes. Each worker
writes ``rank<r>.jsonl`` (its ``shard``, ``collective`` and, on rank 0,
``bucket`` records) into the work directory; on failure it writes its last
exception line to ``rank<r>.error`` and exits 1. Rank 0 appends progress lines
to ``progress``.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time

from model.ranks import Progress, init_gloo, worker_main, worker_parser

PHASES = ("init", "export", "forward", "backward", "optimizer")
FAULT_ENV = "RESHARDIP_CAPTURE_FAULT"  # "<rank>:<phase>": raise there (tests)


# --------------------------------------------------------------------------- #
# Collective recorder
# --------------------------------------------------------------------------- #

def _nbytes(x) -> int:
    import torch
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(y) for y in x)
    return 0


def _first_tensor(x):
    import torch
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (list, tuple)):
        for y in x:
            t = _first_tensor(y)
            if t is not None:
                return t
    return None


def _count(x) -> int:
    import torch
    if isinstance(x, torch.Tensor):
        return 1
    if isinstance(x, (list, tuple)):
        return sum(_count(y) for y in x)
    return 0


def _dtype_name(t) -> str | None:
    return None if t is None else str(t.dtype).removeprefix("torch.")


def account(op: str, n: int, in_bytes: int, out_bytes: int, is_root: bool = False):
    """(bytes, bytes_in, bytes_out) of one collective on one rank.

    ``in_bytes``/``out_bytes`` are this rank's input and output buffer sizes.
    ``bytes`` is the output buffer; ``bytes_in``/``bytes_out`` the data this
    rank must receive from / deliver to the other ranks of the group, counted
    as a direct exchange (independent of the ring/tree algorithm gloo picks).
    """
    peers = n - 1
    if op == "all_gather":
        return out_bytes, max(out_bytes - in_bytes, 0), in_bytes * peers
    if op == "reduce_scatter":
        return out_bytes, out_bytes * peers, max(in_bytes - out_bytes, 0)
    if op == "all_reduce":
        return out_bytes, out_bytes * peers, out_bytes * peers
    if op == "broadcast":
        return out_bytes, (0 if is_root else out_bytes), (out_bytes * peers if is_root else 0)
    if op == "all_to_all":
        own_in = in_bytes // n if n else 0
        own_out = out_bytes // n if n else 0
        return out_bytes, out_bytes - own_out, in_bytes - own_in
    if op == "send":
        return in_bytes, 0, in_bytes
    if op == "recv":
        return out_bytes, out_bytes, 0
    if op in ("gather", "reduce"):
        return out_bytes, (in_bytes * peers if is_root else 0), (0 if is_root else in_bytes)
    if op == "scatter":
        return out_bytes, (0 if is_root else out_bytes), (out_bytes * peers if is_root else 0)
    return out_bytes, 0, 0  # barrier and the like


class Recorder:
    """Collects collective records of this rank; phase and export tag set by the driver."""

    def __init__(self, rank: int, record_data: bool = False):
        self.rank = rank
        self.records: list[dict] = []
        # --record-data: key -> raw bytes (uint8) of every collective's input and output tensors
        self.data: dict | None = {} if record_data else None
        self.phase = "init"
        self.lock = threading.Lock()
        self._groups: dict = {}

    def group_ranks(self, pg) -> list[int]:
        import torch.distributed as dist
        key = id(pg)
        if key not in self._groups:
            self._groups[key] = (pg, list(dist.get_process_group_ranks(pg)))
        return self._groups[key][1]

    def add(self, *, op, api, inputs, outputs, pg=None, ranks=None, root=None, t_us, dur_us, dtype_from=None,
            data_in=None, data_out=None, reduce_op=None):
        import torch.distributed as dist
        if ranks is None:
            if pg is None:
                pg = dist.group.WORLD
            ranks = self.group_ranks(pg)
        n = len(ranks)
        in_b, out_b = _nbytes(inputs), _nbytes(outputs)
        if op in ("all_reduce", "broadcast"):
            in_b = out_b = max(in_b, out_b)
        is_root = root is not None and root == self.rank
        total, b_in, b_out = account(op, n, in_b, out_b, is_root)
        t = _first_tensor(dtype_from if dtype_from is not None else (outputs if _count(outputs) else inputs))
        rec = {"kind": "collective", "rank": self.rank, "seq": len(self.records), "phase": self.phase,
               "op": op, "api": api, "dtype": _dtype_name(t), "bytes": total, "bytes_in": b_in,
               "bytes_out": b_out, "ranks": ranks, "tensors": max(_count(outputs), _count(inputs)),
               "t_us": t_us, "dur_us": dur_us}
        if root is not None:
            rec["root"] = root
        if reduce_op is not None:
            rec["reduce_op"] = reduce_op
        with self.lock:
            rec["seq"] = len(self.records)
            if self.data is not None and (data_in or data_out):
                rec["data"] = {"in": self._store(rec["seq"], "in", data_in or []),
                               "out": self._store(rec["seq"], "out", data_out or [])}
            self.records.append(rec)

    def _store(self, seq: int, side: str, tensors) -> list[dict]:
        import torch
        out = []
        for i, t in enumerate(tensors):
            key = f"r{self.rank}_c{seq}_{side}{i}"
            self.data[key] = t.reshape(-1).contiguous().view(torch.uint8).numpy().copy()
            out.append({"key": key, "dtype": _dtype_name(t), "shape": list(t.shape)})
        return out


def reduce_op_name(v) -> str | None:
    """``sum``, ``avg``, ``max``, ... of a ReduceOp as dispatched (a boxed c10d ReduceOp or a string)."""
    import torch
    import torch.distributed as dist
    if v is None:
        return None
    if isinstance(v, str):
        return v.lower()
    try:
        if isinstance(v, torch.ScriptObject) and v._has_method("op"):
            v = v.op()
        if isinstance(v, dist.ReduceOp):
            v = v.op
        for name, member in dist.ReduceOp.RedOpType.__members__.items():
            if int(member) == int(v):
                return name.lower()
    except Exception:  # bookkeeping must never break the run
        pass
    return None


def snapshot(x) -> list:
    """Detached CPU copies of every tensor in ``x`` (a tensor or nested lists of them)."""
    import torch
    if isinstance(x, torch.Tensor):
        return [x.detach().to("cpu", copy=True)]
    if isinstance(x, (list, tuple)):
        return [t for y in x for t in snapshot(y)]
    return []


def wait_result(result) -> None:
    """Complete an async collective now, so its output can be copied (``--record-data`` only)."""
    import torch
    if isinstance(result, tuple) and result and isinstance(result[-1], torch.ScriptObject):
        torch._C._distributed_c10d.Work.unbox(result[-1]).wait()
    elif isinstance(result, torch.Tensor):
        wait = getattr(result, "wait", None)
        if callable(wait):
            wait()                                   # AsyncCollectiveTensor
        else:
            torch.ops._c10d_functional.wait_tensor(result)


# c10d ops as dispatched by ProcessGroup (torch.ops.c10d.*): (op, output arg, input arg)
_C10D = {
    "_allgather_base_": ("all_gather", 0, 1),
    "allgather_": ("all_gather", 0, 1),
    "allgather_coalesced_": ("all_gather", 0, 1),
    "allgather_into_tensor_coalesced_": ("all_gather", 0, 1),
    "_reduce_scatter_base_": ("reduce_scatter", 0, 1),
    "reduce_scatter_": ("reduce_scatter", 0, 1),
    "reduce_scatter_tensor_coalesced_": ("reduce_scatter", 0, 1),
    "allreduce_": ("all_reduce", 0, 0),
    "allreduce_coalesced_": ("all_reduce", 0, 0),
    "broadcast_": ("broadcast", 0, 0),
    "alltoall_base_": ("all_to_all", 0, 1),
    "alltoall_": ("all_to_all", 0, 1),
    "barrier": ("barrier", None, None),
    "monitored_barrier_": ("barrier", None, None),
    "send": ("send", None, 0),
    "recv_": ("recv", 0, None),
    "recv_any_source_": ("recv", 0, None),
    "gather_": ("gather", 0, 1),
    "scatter_": ("scatter", 0, 1),
    "reduce_": ("reduce", 0, 0),
}
# functional collectives (torch.ops._c10d_functional.*): (op, output arg or "result", input arg)
_FUNCOL = {
    "all_gather_into_tensor": ("all_gather", "result", 0),
    "all_gather_into_tensor_out": ("all_gather", "out", 0),
    "all_gather_into_tensor_coalesced": ("all_gather", "result", 0),
    "reduce_scatter_tensor": ("reduce_scatter", "result", 0),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", "result", 0),
    "all_reduce": ("all_reduce", "result", 0),
    "all_reduce_": ("all_reduce", 0, 0),
    "all_reduce_coalesced": ("all_reduce", "result", 0),
    "all_reduce_coalesced_": ("all_reduce", 0, 0),
    "broadcast": ("broadcast", "result", 0),
    "broadcast_": ("broadcast", 0, 0),
    "all_to_all_single": ("all_to_all", "result", 0),
}


def make_dispatch_mode(rec: Recorder):
    """A TorchDispatchMode recording every c10d / functional collective op it sees."""
    import torch
    import torch.distributed as dist
    from torch.utils._python_dispatch import TorchDispatchMode

    def resolve_pg(func, args, kwargs):
        for a, v in zip(func._schema.arguments, list(args) + [kwargs.get(x.name) for x in
                                                               func._schema.arguments[len(args):]]):
            if isinstance(v, torch.ScriptObject):
                try:
                    return dist.ProcessGroup.unbox(v)
                except Exception:
                    continue
            if a.name == "group_name" and isinstance(v, str):
                from torch.distributed.distributed_c10d import _resolve_process_group
                return _resolve_process_group(v)
        return None

    def arg(func, args, kwargs, i):
        if i is None:
            return None
        if isinstance(i, str):
            return kwargs.get(i)
        if i < len(args):
            return args[i]
        return kwargs.get(func._schema.arguments[i].name)

    class CollectiveMode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            ns = func.namespace
            if ns not in ("c10d", "_c10d_functional"):
                return func(*args, **kwargs)
            base = func._schema.name.split("::", 1)[1]
            table = _C10D if ns == "c10d" else _FUNCOL
            if base not in table:
                return func(*args, **kwargs)
            op, out_i, in_i = table[base]
            pre = snapshot(arg(func, args, kwargs, in_i)) if rec.data is not None else None
            t0 = time.time_ns()
            result = func(*args, **kwargs)
            t1 = time.time_ns()
            try:
                pg = resolve_pg(func, args, kwargs)
                if out_i == "result":
                    outputs = result
                else:
                    outputs = arg(func, args, kwargs, out_i)
                inputs = arg(func, args, kwargs, in_i)
                root = None
                if op in ("broadcast", "gather", "scatter", "reduce") and pg is not None:
                    names = [a.name for a in func._schema.arguments]
                    for key in ("root_rank", "src", "rootRank"):
                        if key in names:
                            v = arg(func, args, kwargs, names.index(key))
                            if isinstance(v, int):
                                root = v if ns == "_c10d_functional" else dist.get_global_rank(pg, v)
                            break
                post = None
                if pre is not None:
                    wait_result(result)
                    post = snapshot(outputs)
                names = [a.name for a in func._schema.arguments]
                red = (reduce_op_name(arg(func, args, kwargs, names.index("reduce_op")))
                       if "reduce_op" in names else None)
                rec.add(op=op, api=f"{ns}.{base}", inputs=inputs, outputs=outputs, pg=pg, root=root,
                        t_us=t0 // 1000, dur_us=(t1 - t0) // 1000, data_in=pre, data_out=post, reduce_op=red)
            except Exception as e:  # never break the run for bookkeeping
                rec.add(op=op, api=f"{ns}.{base}!{type(e).__name__}", inputs=None, outputs=None,
                        ranks=[], t_us=t0 // 1000, dur_us=(t1 - t0) // 1000)
            return result

    return CollectiveMode()


def install_eager_wrappers(rec: Recorder):
    """Wrap the eager ``torch.distributed`` and functional-collective Python APIs.

    The dispatch mode normally sees the c10d op underneath each call; a wrapper
    records only when it did not (e.g. a collective issued from inside another
    op's dispatch, where the mode is not active), so nothing is counted twice.
    """
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d
    import torch.distributed._functional_collectives as funcol

    def group_of(g):
        if g is None:
            return dist.group.WORLD
        if isinstance(g, dist.ProcessGroup):
            return g
        return None

    def funcol_ranks(group):
        try:
            from torch.distributed._functional_collectives import _resolve_group_name
            from torch.distributed.distributed_c10d import _resolve_process_group
            return rec.group_ranks(_resolve_process_group(_resolve_group_name(group)))
        except Exception:
            return []

    # name -> (op, extractor(args, kwargs) -> (inputs, outputs, group, root))
    def sig(a, k, *names):
        vals = list(a) + [None] * (len(names) - len(a))
        return [k.get(n, v) for n, v in zip(names, vals)]

    eager = {
        "all_gather_into_tensor": ("all_gather", lambda a, k: (lambda o, i, g: (i, o, g, None))(
            *sig(a, k, "output_tensor", "input_tensor", "group"))),
        "all_gather": ("all_gather", lambda a, k: (lambda o, i, g: (i, o, g, None))(
            *sig(a, k, "tensor_list", "tensor", "group"))),
        "reduce_scatter_tensor": ("reduce_scatter", lambda a, k: (lambda o, i, _op, g: (i, o, g, None))(
            *sig(a, k, "output", "input", "op", "group"))),
        "reduce_scatter": ("reduce_scatter", lambda a, k: (lambda o, i, _op, g: (i, o, g, None))(
            *sig(a, k, "output", "input_list", "op", "group"))),
        "all_reduce": ("all_reduce", lambda a, k: (lambda t, _op, g: (t, t, g, None))(
            *sig(a, k, "tensor", "op", "group"))),
        "broadcast": ("broadcast", lambda a, k: (lambda t, s, g: (t, t, g, s))(
            *sig(a, k, "tensor", "src", "group"))),
        "all_to_all_single": ("all_to_all", lambda a, k: (lambda o, i, *_r: (i, o, _r[2] if len(_r) > 2 else None,
                                                                               None))(
            *sig(a, k, "output", "input", "output_split_sizes", "input_split_sizes", "group"))),
        "barrier": ("barrier", lambda a, k: (None, None, sig(a, k, "group")[0], None)),
        "all_gather_object": ("all_gather", lambda a, k: (None, None, sig(a, k, "object_list", "obj", "group")[2],
                                                           None)),
        "broadcast_object_list": ("broadcast", lambda a, k: (None, None, sig(a, k, "object_list", "src",
                                                                                  "group")[2],
                                                              sig(a, k, "object_list", "src")[1])),
    }

    def wrap_eager(name, op, extract, orig):
        def wrapper(*args, **kwargs):
            n0 = len(rec.records)
            pre = None
            if rec.data is not None:
                try:
                    pre = snapshot(extract(args, kwargs)[0])
                except Exception:
                    pre = None
            t0 = time.time_ns()
            result = orig(*args, **kwargs)
            t1 = time.time_ns()
            if len(rec.records) == n0:
                try:
                    inputs, outputs, g, root = extract(args, kwargs)
                    pg = group_of(g)
                    post = None
                    if pre is not None and not kwargs.get("async_op"):
                        post = snapshot(outputs)
                    red = None
                    if op in ("all_reduce", "reduce_scatter"):
                        pos = 1 if name == "all_reduce" else 2
                        red = reduce_op_name(kwargs.get("op", args[pos] if len(args) > pos else dist.ReduceOp.SUM))
                    rec.add(op=op, api=f"torch.distributed.{name}", inputs=inputs, outputs=outputs, pg=pg,
                            ranks=None if pg is not None else [], root=root, t_us=t0 // 1000,
                            dur_us=(t1 - t0) // 1000, data_in=pre if post is not None else None, data_out=post,
                            reduce_op=red)
                except Exception as e:
                    rec.add(op=op, api=f"torch.distributed.{name}!{type(e).__name__}", inputs=None,
                            outputs=None, ranks=[], t_us=t0 // 1000, dur_us=(t1 - t0) // 1000)
            return result
        wrapper.__wrapped__ = orig
        wrapper.__name__ = name
        return wrapper

    for name, (op, extract) in eager.items():
        orig = getattr(c10d, name)
        w = wrap_eager(name, op, extract, orig)
        setattr(c10d, name, w)
        if getattr(dist, name, None) is orig:
            setattr(dist, name, w)

    func_ops = {
        "all_gather_tensor": ("all_gather", "self", "group"),
        "reduce_scatter_tensor": ("reduce_scatter", "self", "group"),
        "all_reduce": ("all_reduce", "self", "group"),
        "all_to_all_single": ("all_to_all", "self", "group"),
        "broadcast": ("broadcast", "self", "group"),
    }

    def wrap_funcol(name, op, orig):
        def wrapper(self, *args, **kwargs):
            n0 = len(rec.records)
            pre = snapshot(self) if rec.data is not None else None
            t0 = time.time_ns()
            result = orig(self, *args, **kwargs)
            t1 = time.time_ns()
            if len(rec.records) == n0:
                post = None
                if pre is not None:
                    wait_result(result)
                    post = snapshot(result)
                group = kwargs.get("group")
                if group is None:
                    idx = {"all_gather_tensor": 1, "reduce_scatter_tensor": 2, "all_reduce": 1,
                           "all_to_all_single": 2, "broadcast": 1}[name]
                    group = args[idx] if len(args) > idx else None
                red = None
                if name in ("all_reduce", "reduce_scatter_tensor"):
                    red = reduce_op_name(kwargs.get("reduceOp", args[0] if args else None))
                rec.add(op=op, api=f"funcol.{name}", inputs=self, outputs=result, ranks=funcol_ranks(group),
                        t_us=t0 // 1000, dur_us=(t1 - t0) // 1000, data_in=pre, data_out=post, reduce_op=red)
            return result
        wrapper.__wrapped__ = orig
        wrapper.__name__ = name
        return wrapper

    for name, (op, _a, _g) in func_ops.items():
        orig = getattr(funcol, name, None)
        if orig is not None:
            setattr(funcol, name, wrap_funcol(name, op, orig))


# --------------------------------------------------------------------------- #
# Shard metadata read from the FSDP objects
# --------------------------------------------------------------------------- #

def _clean(name: str) -> str:
    for junk in ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod."):
        name = name.replace(junk, "")
    for junk in ("._fsdp_wrapped_module", "._checkpoint_wrapped_module", "._orig_mod"):
        if name.endswith(junk):
            name = name[: -len(junk)]
    return "" if name in ("_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod") else name


def block_ranges(shape, local_shape, offset) -> list[list[int]]:
    """Flat [start, stop) ranges of the row-major tensor ``shape`` covered by the
    block of size ``local_shape`` at ``offset`` (merged where contiguous)."""
    nd = len(shape)
    if nd == 0:
        return [[0, 1]] if all(s > 0 for s in local_shape) or not local_shape else []
    if any(s == 0 for s in local_shape):
        return []
    strides = [1] * nd
    for d in range(nd - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    # innermost contiguous run: dims k.. are full, dim k-1 may be partial
    k = nd
    while k > 0 and local_shape[k - 1] == shape[k - 1] and offset[k - 1] == 0:
        k -= 1
    if k == 0:
        n = 1
        for s in shape:
            n *= s
        return [[0, n]]
    run = local_shape[k - 1] * strides[k - 1]
    base = offset[k - 1] * strides[k - 1]
    ranges = []
    import itertools
    for idx in itertools.product(*[range(offset[d], offset[d] + local_shape[d]) for d in range(k - 1)]):
        start = base + sum(i * strides[d] for d, i in enumerate(idx))
        if ranges and ranges[-1][1] == start:
            ranges[-1][1] = start + run
        else:
            ranges.append([start, start + run])
    return ranges


def fsdp2_shards(module, rank: int) -> list[dict]:
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    out = []
    for name, p in module.named_parameters():
        if not isinstance(p, DTensor):
            raise RuntimeError(f"FSDP2 parameter {name} is not a DTensor")
        shape = tuple(p.shape)
        local_shape, offset = compute_local_shape_and_global_offset(shape, p.device_mesh, p.placements)
        local = p._local_tensor
        if tuple(local.shape) != tuple(local_shape):
            raise RuntimeError(f"{name}: local tensor {tuple(local.shape)} != computed local shape "
                               f"{tuple(local_shape)}")
        out.append({"kind": "shard", "rank": rank, "param": _clean(name), "shape": list(shape),
                    "dtype": str(local.dtype).removeprefix("torch."),
                    "ranges": block_ranges(shape, tuple(local_shape), tuple(offset)),
                    "local_shape": list(local_shape), "offset": list(offset),
                    "placements": [str(pl) for pl in p.placements]})
    return out


def fsdp1_shards(module, rank: int) -> list[dict]:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    out = []
    for unit_index, (mname, m) in enumerate((n, m) for n, m in module.named_modules() if isinstance(m, FSDP)):
        handle = m._handle
        if handle is None:
            continue
        fp = handle.flat_param
        unit = _clean(mname)
        shard_numel = fp._sharded_size.numel()
        world = handle.world_size
        shard_start = handle.rank * shard_numel
        offsets = handle._get_flat_param_offsets()
        infos = iter(fp._shard_param_infos)
        real = [i for i, pad in enumerate(fp._is_padding_mask) if not pad]
        for j, i in enumerate(real):
            info = next(infos)
            fqn = fp._fqns[j]
            full = f"{unit}.{fqn}" if unit else fqn
            shape = list(fp._shapes[j])
            rec = {"kind": "shard", "rank": rank, "param": _clean(full), "shape": shape,
                   "dtype": str(fp.dtype).removeprefix("torch.")}
            p_start, p_end = offsets[i]  # inclusive, in the unsharded flat parameter
            if info.in_shard:
                rec["ranges"] = [[info.intra_param_start_idx, info.intra_param_end_idx + 1]]
                f0 = shard_start + info.offset_in_shard
                rec["flat"] = {"unit": unit, "start": f0, "stop": f0 + info.numel_in_shard}
                if f0 - p_start != info.intra_param_start_idx:
                    raise RuntimeError(f"{full}: inconsistent FSDP1 shard metadata")
            else:
                rec["ranges"] = []
                rec["flat"] = {"unit": unit, "start": p_start, "stop": p_start}
            rec["flat"].update({"unit_index": unit_index, "param_start": p_start, "param_stop": p_end + 1,
                                "unit_numel": fp._unpadded_unsharded_size.numel(),
                                "unit_padded_numel": shard_numel * world, "shard_numel": shard_numel,
                                "shard_start": shard_start})
            out.append(rec)
    return out


# --------------------------------------------------------------------------- #
# Bucket plan: verl's BucketedWeightSender, fed by the export generator
# --------------------------------------------------------------------------- #

def load_bucketed_sender():
    """Import ``BucketedWeightSender`` without importing vLLM.

    ``verl.workers.rollout.vllm_rollout/__init__.py`` imports vLLM, so the
    module file is loaded by path. Its ``async_send_weights`` imports
    ``verl.workers.rollout.utils.ensure_async_iterator``, whose module needs
    uvicorn/fastapi (verl's server extras); when that import fails a module
    with verl's 5-line ``ensure_async_iterator`` stands in for it.
    """
    import importlib.util
    import types
    import verl
    modname = "verl.workers.rollout.vllm_rollout.bucketed_weight_transfer"
    if modname in sys.modules:
        mod = sys.modules[modname]
    else:
        path = os.path.join(os.path.dirname(verl.__file__), "workers", "rollout", "vllm_rollout",
                            "bucketed_weight_transfer.py")
        spec = importlib.util.spec_from_file_location(modname, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    try:
        import verl.workers.rollout.utils  # noqa: F401
        shim = False
    except ImportError:
        async def ensure_async_iterator(iterable):
            if hasattr(iterable, "__aiter__"):
                async for item in iterable:
                    yield item
            else:
                for item in iterable:
                    yield item
        m = types.ModuleType("verl.workers.rollout.utils")
        m.ensure_async_iterator = ensure_async_iterator
        sys.modules["verl.workers.rollout.utils"] = m
        shim = True
    return mod.BucketedWeightSender, shim


def make_recording_sender(bucket_mb: int, buffer_bytes: int):
    """A ``BucketedWeightSender`` whose ZMQ socket and CUDA-IPC buffer are replaced
    by an in-process recorder; the packing loop (``async_send_weights``) is verl's."""
    import torch
    Sender, shim = load_bucketed_sender()

    class _Socket:
        def __init__(self):
            self.sent = []

        def send_pyobj(self, obj):
            self.sent.append(obj)

        def recv(self):
            return b""

        def close(self):
            pass

    class RecordingSender(Sender):
        def _init_socket(self):
            self.socket = _Socket()
            self.messages = self.socket.sent

        def _init_buffer(self):
            # the bucket never holds more than the model; bucket_size still drives packing
            self.buffer = torch.empty(min(self.bucket_size, buffer_bytes), dtype=torch.uint8)
            self.shm = None

        def _direct_send_large_weight(self, name, weight):
            self.socket.send_pyobj({"bucket_meta": {name: {"name": name, "shape": weight.shape,
                                                           "dtype": weight.dtype, "offset": 0,
                                                           "handle": "direct"}}, "is_last": False})
            self.socket.recv()

        def _cleanup(self):
            self.buffer = None
            self.socket = None

    return RecordingSender(zmq_handle="inproc://reshardip-capture", bucket_size_mb=bucket_mb), shim


def bucket_records(messages, bucket_mb: int) -> list[dict]:
    out = []
    for msg in messages:
        meta = msg["bucket_meta"]
        if not meta:
            continue
        params = []
        end = 0
        direct = False
        for name, m in meta.items():
            nbytes = m["shape"].numel() * m["dtype"].itemsize
            params.append({"name": name, "offset": m["offset"], "bytes": nbytes,
                           "dtype": str(m["dtype"]).removeprefix("torch."), "shape": list(m["shape"])})
            end = max(end, m["offset"] + nbytes)
            direct = direct or m["handle"] == "direct"
        out.append({"kind": "bucket", "index": len(out), "sender": "BucketedWeightSender",
                    "bucket_mb": bucket_mb, "bucket_bytes": int(bucket_mb) << 20, "bytes": end,
                    "direct": direct, "is_last": bool(msg["is_last"]), "params": params})
    return out


# --------------------------------------------------------------------------- #
# The run
# --------------------------------------------------------------------------- #

def make_batch(vocab: int, seed: int, rank: int, n_seq: int = 2):
    """A small random SFT batch (nested/jagged, verl's NO_PADDING format) for one rank."""
    import torch
    from verl.utils import tensordict_utils as tu
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    lens = [int(x) for x in torch.randint(8, 17, (n_seq,), generator=g)]
    ids = torch.nested.as_nested_tensor([torch.randint(0, vocab, (n,), generator=g) for n in lens],
                                        layout=torch.jagged)
    pos = torch.nested.as_nested_tensor([torch.arange(n) for n in lens], layout=torch.jagged)
    mask = torch.nested.as_nested_tensor([torch.ones(n, dtype=torch.int64) for n in lens], layout=torch.jagged)
    meta = {"use_remove_padding": False, "use_dynamic_bsz": True, "max_token_len_per_gpu": 4096,
            "micro_batch_size_per_gpu": n_seq, "temperature": 1.0, "pad_token_id": 0,
            "update_lr_scheduler": True}
    return tu.get_tensordict(tensor_dict={"input_ids": ids, "position_ids": pos, "loss_mask": mask},
                             non_tensor_dict=meta), lens


def run_worker(a) -> int:
    import torch
    torch.set_num_threads(1)
    rank, world = a.rank, a.world
    fault = os.environ.get(FAULT_ENV, "")
    progress = Progress(os.path.join(a.workdir, "progress"), rank)

    def maybe_fault(phase):
        if fault == f"{rank}:{phase}":
            raise RuntimeError(f"injected fault on rank {rank} in phase {phase}")

    from model import cpu_platform  # registers the platform class
    import torch.distributed as dist
    init_gloo(a.workdir, rank, world)
    cpu_platform.install()
    from functools import partial
    from verl.workers.utils.losses import sft_loss

    from model.verl_engine import build_engine

    rec = Recorder(rank, record_data=a.record_data)
    install_eager_wrappers(rec)
    mode = make_dispatch_mode(rec)
    records: list[dict] = []
    progress(f"initialising verl FSDPEngine ({a.strategy}) on {world} ranks")
    maybe_fault("init")
    with mode:
        engine = build_engine(a.model_dir, strategy=a.strategy, seed=a.seed, lr=1e-5, total_steps=1,
                              max_token_len_per_gpu=4096)

        shards = fsdp2_shards(engine.module, rank) if a.strategy == "fsdp2" else fsdp1_shards(engine.module, rank)
        records.extend(shards)

        # -- export: ActorRolloutRefWorker.update_weights -> get_per_tensor_param -> rollout sender
        progress("export: engine.get_per_tensor_param() -> BucketedWeightSender")
        rec.phase = "export"
        maybe_fault("export")
        # upper bound of what one bucket can hold: every exported tensor (tied weights are
        # exported under both names, hence 2x) plus alignment; pages are only touched when filled
        buffer_bytes = 2 * sum(p.numel() * 8 + 16 for p in engine.module.parameters()) * world + (1 << 16)
        sender, _shim = make_recording_sender(a.bucket_mb, buffer_bytes)
        per_tensor_param, _peft = engine.get_per_tensor_param()

        exported = []

        def tagged(gen):
            it = iter(gen)
            while True:
                n0 = len(rec.records)
                try:
                    name, tensor = next(it)
                except StopIteration:
                    return
                for r in rec.records[n0:]:
                    r.setdefault("param", name)
                exported.append({"name": name, "shape": list(tensor.shape),
                                 "dtype": str(tensor.dtype).removeprefix("torch.")})
                yield name, tensor

        import asyncio
        asyncio.run(sender.async_send_weights(tagged(per_tensor_param)))
        if rank == 0:
            records.extend(bucket_records(sender.messages, a.bucket_mb))

        # -- one training step: TrainingWorker.train_batch -> engine.train_batch under train_mode
        progress("train step: engine.train_batch() (forward, backward, optimizer)")
        data, _lens = make_batch(engine.model_config.hf_config.vocab_size, a.seed, rank)

        orig_fbb, orig_fs, orig_opt, orig_lr = (engine.forward_backward_batch, engine.forward_step,
                                                engine.optimizer_step, engine.lr_scheduler_step)

        def fbb(*args, **kwargs):
            rec.phase = "forward"
            maybe_fault("forward")
            return orig_fbb(*args, **kwargs)

        def fs(*args, **kwargs):
            rec.phase = "forward"
            out = orig_fs(*args, **kwargs)
            rec.phase = "backward"  # loss.backward() follows in forward_backward_batch
            maybe_fault("backward")
            return out

        def opt(*args, **kwargs):
            rec.phase = "optimizer"
            maybe_fault("optimizer")
            return orig_opt(*args, **kwargs)

        def lr_step(*args, **kwargs):
            rec.phase = "optimizer"
            return orig_lr(*args, **kwargs)

        engine.forward_backward_batch, engine.forward_step = fbb, fs
        engine.optimizer_step, engine.lr_scheduler_step = opt, lr_step
        with engine.train_mode():
            out = engine.train_batch(data, loss_function=partial(sft_loss, None))
        engine.lr_scheduler_step()
        grad_norm = out["metrics"].get("grad_norm") if out else None
        rec.phase = "done"
    progress(f"train step done (grad_norm {grad_norm:.4g})" if grad_norm is not None else "train step done")

    records.extend(r for r in rec.records if r["phase"] != "done")
    summary = {"kind": "worker", "rank": rank, "exported": exported, "grad_norm": grad_norm,
               "mixed_precision": {"param_dtype": str(engine._autocast_dtype).removeprefix("torch.")},
               "sender_shim": _shim, "batch_lens": _lens}
    if rec.data is not None:
        import numpy as np
        kept = {e["key"] for r in records if "data" in r for e in r["data"]["in"] + r["data"]["out"]}
        np.savez(os.path.join(a.workdir, f"rank{rank}.data.npz"), **{k: rec.data[k] for k in sorted(kept)})
    path = os.path.join(a.workdir, f"rank{rank}.jsonl")
    with open(path + ".tmp", "w") as f:
        f.write(json.dumps(summary) + "\n")
        for r in records:
            f.write(json.dumps(r) + "\n")
    os.replace(path + ".tmp", path)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main(argv=None) -> int:
    p = worker_parser("python -m model.capture_worker")
    p.add_argument("--strategy", choices=("fsdp", "fsdp2"), required=True)
    p.add_argument("--bucket-mb", type=int, default=2048)
    p.add_argument("--record-data", action="store_true")
    return worker_main(p, run_worker, argv)


if __name__ == "__main__":
    sys.exit(main())
