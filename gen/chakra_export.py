"""Export a capture trace's collectives as Chakra execution traces (one ``.et`` per rank).

The files are written with PyPI ``mlc-chakra``'s own protobuf schema
(``chakra.schema.protobuf.et_def_pb2``) and its length-prefixed encoder
(``chakra.src.third_party.utils.protolib.encodeMessage``), and read back with
its decoder (``decodeMessage``), exactly as Chakra's converter and jsonizer do.

Layout of ``DIR/<prefix>.<rank>.et`` (ASTRA-sim's ``--workload-configuration``
is ``DIR/<prefix>``):

1. ``GlobalMetadata(version="1.0.0")`` (the version Chakra's generator writes)
   with attributes naming the source trace.
2. Node 0: a ``METADATA_NODE`` named ``process_group:init`` whose
   ``inputs.values`` carries the process groups in PyTorch's ET form
   (``['[{"pg_name": "0", "ranks": [...], ...}]']``), which Chakra's PyTorch
   converter produces and ASTRA-sim's workload layer parses.
3. One node per collective of the rank, in ``seq`` order, each with the
   previous node of the rank as its data dependency (the first depends on
   node 0). See ``COMM_TYPES`` for the op mapping and ``docs/trace-format.md``
   ("Chakra export") for every attribute.

``DIR/<prefix>.comm_group.json`` maps each non-world ``pg_name`` to its ranks
(ASTRA-sim's ``--comm-group-configuration`` format); ``pg_name`` ``"0"`` is
always the group of all ranks, which ASTRA-sim treats as its default group.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from model.errors import InputError

ET_VERSION = "1.0.0"
COMM_GROUP_SUFFIX = ".comm_group.json"

# trace op -> (Chakra NodeType name, CollectiveCommType name or None)
COMM_TYPES = {
    "all_gather": ("COMM_COLL_NODE", "ALL_GATHER"),
    "reduce_scatter": ("COMM_COLL_NODE", "REDUCE_SCATTER"),
    "all_reduce": ("COMM_COLL_NODE", "ALL_REDUCE"),
    "broadcast": ("COMM_COLL_NODE", "BROADCAST"),
    "all_to_all": ("COMM_COLL_NODE", "ALL_TO_ALL"),
    "barrier": ("COMM_COLL_NODE", "BARRIER"),
    "gather": ("COMM_COLL_NODE", "GATHER"),
    "scatter": ("COMM_COLL_NODE", "SCATTER"),
    "reduce": ("COMM_COLL_NODE", "REDUCE"),
    # point-to-point: not collectives in Chakra's sense
    "send": ("COMM_SEND_NODE", None),
    "recv": ("COMM_RECV_NODE", None),
}


def _pb():
    from chakra.schema.protobuf import et_def_pb2
    from chakra.src.third_party.utils import protolib
    return et_def_pb2, protolib


def _uint(rec, key, where, required=True):
    v = rec.get(key)
    if v is None and not required:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise InputError(f"{where}: field {key!r} must be a non-negative integer, got {v!r}")
    return v


def _plan(trace: dict, path: Path):
    """Validate the trace and group its collectives: (world, {rank: [rec...]}, {ranks tuple: pg_name})."""
    header = trace["header"]
    colls = trace["collectives"]
    world = header.get("world")
    max_rank = max((c["rank"] for c in colls if isinstance(c.get("rank"), int)), default=-1)
    if world is None:
        world = max_rank + 1
    if not isinstance(world, int) or isinstance(world, bool) or world < 1:
        raise InputError(f"{path}: header 'world' must be a positive integer, got {world!r}")
    per_rank: dict[int, list] = {r: [] for r in range(world)}
    groups: dict[tuple, str] = {tuple(range(world)): "0"}
    for c in colls:
        where = f"{path}: collective rank {c.get('rank')!r} seq {c.get('seq')!r}"
        rank = c["rank"]
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < world:
            raise InputError(f"{where}: rank must be an integer in [0, {world})")
        _uint(c, "seq", where)
        _uint(c, "bytes", where)
        _uint(c, "t_us", where)
        _uint(c, "dur_us", where, required=False)
        if not isinstance(c["op"], str) or c["op"] not in COMM_TYPES:
            raise InputError(f"{where}: op {c['op']!r} has no Chakra mapping "
                             f"(known: {', '.join(COMM_TYPES)})")
        if not isinstance(c["phase"], str):
            raise InputError(f"{where}: 'phase' must be a string, got {c['phase']!r}")
        ranks = c["ranks"]
        if (not isinstance(ranks, list) or not ranks
                or not all(isinstance(r, int) and not isinstance(r, bool) and 0 <= r < world for r in ranks)
                or len(set(ranks)) != len(ranks) or rank not in ranks):
            raise InputError(f"{where}: 'ranks' must be a list of distinct ranks in [0, {world}) "
                             f"containing the issuing rank, got {ranks!r}")
        key = tuple(sorted(ranks))
        if key not in groups:
            groups[key] = str(len(groups))
        per_rank[rank].append(c)
    for rank, lst in per_rank.items():
        lst.sort(key=lambda c: c["seq"])
        seqs = [c["seq"] for c in lst]
        if len(set(seqs)) != len(seqs):
            raise InputError(f"{path}: rank {rank} has duplicate collective seq numbers")
    return world, per_rank, groups


def _attr(pb, name, value):
    A = pb.AttributeProto
    if isinstance(value, bool):
        return A(name=name, bool_val=value)
    if isinstance(value, int):
        return A(name=name, int64_val=value)
    if isinstance(value, str):
        return A(name=name, string_val=value)
    if isinstance(value, list):
        return A(name=name, int64_list=pb.Int64List(values=value))
    raise TypeError(f"attribute {name}: {type(value).__name__}")


def _node_name(c) -> str:
    name = f"{c['phase']}:{c['op']}#{c['seq']}"
    if c.get("param"):
        name += f" {c['param']}"
    return name


def _write_rank(fh, pb, protolib, rank, world, recs, groups, trace, path, prefix):
    header = trace["header"]
    meta_attrs = {"source": "reshardip export", "trace": path.name, "prefix": prefix, "rank": rank,
                  "world": world}
    for k in ("model", "strategy", "verl_strategy", "dtype", "backend"):
        if isinstance(header.get(k), str):
            meta_attrs[k] = header[k]
    protolib.encodeMessage(fh, pb.GlobalMetadata(
        version=ET_VERSION, attr=[_attr(pb, k, v) for k, v in meta_attrs.items()]))

    pg_info = [{"pg_name": name, "pg_desc": "world" if name == "0" else f"group{name}",
                "backend_config": str(header.get("backend", "")), "pg_size": len(ranks),
                "ranks": list(ranks)}
               for ranks, name in sorted(groups.items(), key=lambda kv: int(kv[1]))]
    pg_node = pb.Node(id=0, name="process_group:init", type=pb.METADATA_NODE)
    pg_node.inputs.values = "['" + json.dumps(pg_info, separators=(",", ":")) + "']"
    pg_node.attr.append(_attr(pb, "is_cpu_op", True))
    protolib.encodeMessage(fh, pg_node)

    prev = 0
    for i, c in enumerate(recs, 1):
        ntype, ctype = COMM_TYPES[c["op"]]
        ranks = sorted(c["ranks"])
        node = pb.Node(id=i, name=_node_name(c), type=pb.NodeType.Value(ntype),
                       start_time_micros=c["t_us"])
        node.data_deps.append(prev)
        if c.get("dur_us") is not None:
            node.duration_micros = c["dur_us"]
        attrs = []
        if ctype is not None:
            attrs.append(("comm_type", pb.CollectiveCommType.Value(ctype)))
        attrs += [("comm_size", c["bytes"]), ("pg_name", groups[tuple(ranks)]), ("pg_ranks", ranks),
                  ("is_cpu_op", False)]
        if c["op"] in ("send", "recv"):
            peers = [r for r in ranks if r != rank]
            me, peer = ("comm_src", "comm_dst") if c["op"] == "send" else ("comm_dst", "comm_src")
            attrs.append((me, rank))
            if len(peers) == 1:  # the trace records no peer; only a 2-rank group determines it
                attrs.append((peer, peers[0]))
        if isinstance(c.get("root"), int):
            attrs.append(("root", c["root"]))
        attrs += [("seq", c["seq"]), ("phase", str(c["phase"])), ("op", c["op"])]
        for k in ("api", "dtype", "param"):
            if isinstance(c.get(k), str):
                attrs.append((k, c[k]))
        for k in ("bytes_in", "bytes_out", "tensors"):
            if isinstance(c.get(k), int) and not isinstance(c.get(k), bool):
                attrs.append((k, c[k]))
        node.attr.extend(_attr(pb, k, v) for k, v in attrs)
        protolib.encodeMessage(fh, node)
        prev = i


def et_path(out_dir, prefix: str, rank: int) -> Path:
    return Path(out_dir) / f"{prefix}.{rank}.et"


def export_chakra(trace_path, out_dir, prefix: str | None = None) -> list[Path]:
    """Write ``out_dir/<prefix>.<rank>.et`` for every rank (and ``<prefix>.comm_group.json``).

    ``prefix`` defaults to the trace file's stem. The whole trace is validated
    before anything is written; the files are written in a temporary directory
    next to ``out_dir`` and moved into place only when all are complete.
    Returns the ``.et`` paths in rank order. Raises ``InputError`` for bad input.
    """
    from model.capture import read_trace
    trace_path, out_dir = Path(trace_path), Path(out_dir)
    trace = read_trace(trace_path)
    prefix = prefix or trace_path.stem
    if not prefix or "/" in prefix or prefix.startswith("."):
        raise InputError(f"invalid output prefix {prefix!r}")
    world, per_rank, groups = _plan(trace, trace_path)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"{out_dir}: exists and is not a directory")
    pb, protolib = _pb()

    parent = out_dir.resolve().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=parent))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it 0700; it becomes out_dir
    except OSError as e:
        raise InputError(f"{out_dir}: cannot create output directory: {e}") from None
    try:
        names = []
        for rank in range(world):
            name = et_path(tmp, prefix, rank).name
            with open(tmp / name, "wb") as fh:
                _write_rank(fh, pb, protolib, rank, world, per_rank[rank], groups, trace, trace_path, prefix)
            names.append(name)
        cg = {name: list(ranks) for ranks, name in sorted(groups.items(), key=lambda kv: int(kv[1]))
              if name != "0"}
        cg_name = prefix + COMM_GROUP_SUFFIX
        (tmp / cg_name).write_text(json.dumps(cg, indent=1) + "\n")
        if not out_dir.exists():
            os.rename(tmp, out_dir)
        else:
            for name in [*names, cg_name]:
                os.replace(tmp / name, out_dir / name)
            tmp.rmdir()
    except OSError as e:
        raise InputError(f"{out_dir}: cannot write Chakra traces: {e}") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return [et_path(out_dir, prefix, r) for r in range(world)]


def _attr_value(a):
    which = a.WhichOneof("value")
    if which is None:
        return None
    v = getattr(a, which)
    return list(v.values) if which.endswith("_list") else v


def read_chakra(path) -> list[dict]:
    """Decode a Chakra ``.et`` file with Chakra's own decoder.

    Returns a list of dicts: first ``{"kind": "metadata", "version", "attrs"}``
    (the GlobalMetadata), then one ``{"kind": "node", "id", "name", "type"
    (NodeType name), "ctrl_deps", "data_deps", "start_time_micros",
    "duration_micros", "inputs_values", "attrs"}`` per node; ``attrs`` maps
    attribute names to Python values (``comm_type`` as its
    CollectiveCommType name under ``"comm_type_name"`` too).
    """
    from google.protobuf.message import DecodeError
    pb, protolib = _pb()
    path = Path(path)
    out = []
    try:
        with open(path, "rb") as fh:
            meta = pb.GlobalMetadata()
            if not protolib.decodeMessage(fh, meta):
                raise InputError(f"{path}: not a Chakra execution trace (no GlobalMetadata)")
            out.append({"kind": "metadata", "version": meta.version,
                        "attrs": {a.name: _attr_value(a) for a in meta.attr}})
            while True:
                node = pb.Node()
                if not protolib.decodeMessage(fh, node):
                    break
                attrs = {a.name: _attr_value(a) for a in node.attr}
                d = {"kind": "node", "id": node.id, "name": node.name,
                     "type": pb.NodeType.Name(node.type), "ctrl_deps": list(node.ctrl_deps),
                     "data_deps": list(node.data_deps), "start_time_micros": node.start_time_micros,
                     "duration_micros": node.duration_micros, "inputs_values": node.inputs.values,
                     "attrs": attrs}
                if "comm_type" in attrs and node.type == pb.COMM_COLL_NODE:
                    d["comm_type_name"] = pb.CollectiveCommType.Name(attrs["comm_type"])
                out.append(d)
    except OSError as e:
        raise InputError(f"{path}: cannot read Chakra trace: {e}") from None
    except (DecodeError, ValueError) as e:
        raise InputError(f"{path}: malformed Chakra trace: {e}") from None
    return out
