"""A sweep's grid: a YAML file naming axes, stages and filters, read into points.

The grid is checked whole before anything runs: an unknown key, axis, stage
or value raises :class:`model.errors.InputError` with one line naming the
file, the line and the field. See docs/sweep.md for the format.

A point is one combination of axis values (every axis not named takes its
default), plus the grid's fixed stage options; its ``point_id`` is a hash of
all of that, so the same point in an edited grid keeps its id (``--resume``).
"""
from __future__ import annotations

import ast
import hashlib
import itertools
import json
import operator
from dataclasses import dataclass, field
from pathlib import Path

from model.errors import InputError

#: what a point can run, in dependency order; golden and verilator need compile
STAGES = ("plan", "compile", "golden", "verilator", "synth", "perf")
NEEDS_COMPILE = ("golden", "verilator")

#: every axis and its default (None: the compiler's or the chip's choice)
AXES = {
    "model": "tiny-qwen2",
    "train": "fsdp2:dp=2",
    "rollout": "vllm:tp=2",
    "dtype": "bf16",
    "bus_bits": 64,
    "channels": None,
    "tlb_entries": None,
    "page_sizes": None,
    "mem_bytes": None,
    "chip": "h100-sxm",
    "engine_clock_mhz": None,
    "engine_bus_bits": None,
    "engine_channels": None,
    "block": "device",
    "part": "LFE5U-25F",
}

#: fixed options of the synth and perf stages (the grid's ``synth:`` and ``perf:``)
SYNTH_OPTIONS = {"freq_mhz": 100.0, "mem_bytes": 16384}
PERF_OPTIONS = {"model": None, "train": None, "rollout": None, "batch": 256, "prompt_len": 1024,
                "response_len": 1024, "rollout_n": 5, "ppo_epochs": 1, "micro_batch": 8,
                "algorithm": "grpo"}

TOP_KEYS = ("name", "stages", "axes", "where", "exclude", "synth", "perf")


@dataclass(frozen=True)
class Point:
    """One configuration: every axis's value and what to run on it."""
    config: dict
    stages: tuple[str, ...]
    synth: dict
    perf: dict

    @property
    def point_id(self) -> str:
        text = json.dumps([self.config, self.stages, self.synth if "synth" in self.stages else None,
                           self.perf if "perf" in self.stages else None], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def describe(self) -> str:
        c = self.config
        return (f"{c['model']} {c['train']} -> {c['rollout']} bus {c['bus_bits']} "
                f"ch {c['channels'] or 'auto'} tlb {c['tlb_entries'] or 'auto'}")


@dataclass
class Grid:
    path: Path
    name: str
    stages: tuple[str, ...]
    points: list[Point]
    skipped_by_filter: list[tuple[dict, str]] = field(default_factory=list)
    text: str = ""


# ------------------------------------------------------------------ YAML with line numbers

def _lines(node, path=(), out=None) -> dict:
    """Field path (keys and list indexes) -> 1-based line, from a composed YAML node."""
    import yaml
    out = {} if out is None else out
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            _lines(v, path + (k.value,), out)
            out[path + (k.value,)] = k.start_mark.line + 1      # a field is where its key is
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _lines(v, path + (i,), out)
    return out


class _Where:
    """Names one field of the grid file in an error."""

    def __init__(self, path: Path, lines: dict):
        self.path, self.lines = path, lines

    def error(self, fields: tuple, msg: str) -> InputError:
        line = next((self.lines[fields[:n]] for n in range(len(fields), -1, -1) if fields[:n] in self.lines), None)
        name = ".".join(str(f) if not isinstance(f, int) else f"[{f}]" for f in fields).replace(".[", "[")
        return InputError(f"{self.path}:{line}: {name}: {msg}" if line else f"{self.path}: {name}: {msg}")


# ------------------------------------------------------------------ axis values

def _int(v, lo=1):
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise InputError(f"{v!r} is not an integer >= {lo}")
    return v


def _check_value(axis: str, v):
    """The value, checked (raises InputError with a bare message)."""
    if v is None:
        if AXES[axis] is None:
            return None
        raise InputError("needs a value")
    if axis == "model":
        from model.models import load_model
        load_model(str(v))
    elif axis in ("train", "rollout"):
        from model.specs import parse_spec
        parse_spec(str(v), axis)
    elif axis == "dtype":
        from model.specs import parse_dtype
        parse_dtype(str(v))
    elif axis == "bus_bits":
        from gen.api import check_bus_bits
        check_bus_bits(_int(v))
    elif axis == "channels":
        if not 1 <= _int(v) <= 16:
            raise InputError(f"{v} is not in 1..16")
    elif axis == "tlb_entries":
        if not 1 <= _int(v) <= 4096:
            raise InputError(f"{v} is not in 1..4096")
    elif axis == "page_sizes":
        from gen.api import parse_page_sizes
        sizes = parse_page_sizes(str(v))
        if len(sizes) != 4:
            raise InputError(f"{v!r}: want four sizes like 4096,64K,1M,2M")
        v = str(v)
    elif axis in ("mem_bytes", "engine_bus_bits", "engine_channels"):
        _int(v)
    elif axis == "chip":
        from model.chips import load_chip
        load_chip(str(v))
    elif axis == "engine_clock_mhz":
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise InputError(f"{v!r} is not a positive number")
        v = float(v)
    elif axis == "block":
        from gen.fpga import OOC_BLOCKS
        if v not in OOC_BLOCKS:
            raise InputError(f"unknown block {v!r}: use one of {', '.join(OOC_BLOCKS)}")
    elif axis == "part":
        from gen.fpga import part
        part(str(v))
    return v


# ------------------------------------------------------------------ filters

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod, ast.Div: operator.truediv,
        ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b,
        ast.NotIn: lambda a, b: a not in b}


def _eval(node, names: dict):
    """A filter expression: names, constants, arithmetic, comparisons, and/or/not. Nothing else."""
    if isinstance(node, ast.Expression):
        return _eval(node.body, names)
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise InputError(f"unknown name {node.id!r}: use an axis ({', '.join(sorted(names))})")
        return names[node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_eval(e, names) for e in node.elts]
    if isinstance(node, ast.BoolOp):
        vals = (_eval(v, names) for v in node.values)
        return all(vals) if isinstance(node.op, ast.And) else any(vals)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _eval(node.operand, names)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.left, names), _eval(node.right, names))
    if isinstance(node, ast.Compare):
        left = _eval(node.left, names)
        for op, right in zip(node.ops, node.comparators):
            r = _eval(right, names)
            if type(op) not in _OPS or not _OPS[type(op)](left, r):
                return False
            left = r
        return True
    raise InputError(f"{ast.dump(node)[:40]}... is not allowed in a filter "
                     f"(names, numbers, strings, + - * / // %, comparisons, and/or/not)")


def _names(config: dict) -> dict:
    """What a filter sees: the axes, and the worlds of the layouts."""
    from model.specs import parse_spec
    return {**config, "devices": parse_spec(config["train"], "train").world,
            "rollout_world": parse_spec(config["rollout"], "rollout").world}


def _builtin_reason(config: dict) -> str | None:
    """Combinations that cannot be colocated: the rollout's world must divide the training's."""
    n = _names(config)
    if n["devices"] % n["rollout_world"]:
        return f"rollout world {n['rollout_world']} does not divide training world {n['devices']}"
    return None


# ------------------------------------------------------------------ the grid

def _section(doc: dict, key: str, defaults: dict, where: _Where) -> dict:
    got = doc.get(key) or {}
    if not isinstance(got, dict):
        raise where.error((key,), "must be a mapping")
    out = dict(defaults)
    for k, v in got.items():
        if k not in defaults:
            raise where.error((key, k), f"unknown option; known: {', '.join(defaults)}")
        out[k] = v
    return out


def load_grid(path) -> Grid:
    """Read and check a grid file; its points (filters applied) and the points filtered out."""
    import yaml
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise InputError(f"{path}: cannot read the grid: {e.strerror or e}") from None
    try:
        node = yaml.compose(text)
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise InputError(f"{path}{where}: not valid YAML ({getattr(e, 'problem', None) or e})") from None
    where = _Where(path, _lines(node) if node is not None else {})
    if not isinstance(doc, dict):
        raise InputError(f"{path}: a grid is a YAML mapping with 'axes' (and 'stages', 'where', 'exclude', ...)")
    for k in doc:
        if k not in TOP_KEYS:
            raise where.error((k,), f"unknown key; known: {', '.join(TOP_KEYS)}")
    stages = doc.get("stages", ["plan", "compile", "perf"])
    if isinstance(stages, str):
        stages = [stages]
    if not isinstance(stages, list) or not stages:
        raise where.error(("stages",), f"must be a list of stages ({', '.join(STAGES)})")
    for i, s in enumerate(stages):
        if s not in STAGES:
            raise where.error(("stages", i), f"unknown stage {s!r}; known: {', '.join(STAGES)}")
    if any(s in NEEDS_COMPILE for s in stages) and "compile" not in stages:
        stages = [*stages, "compile"]
    stages = tuple(s for s in STAGES if s in stages)

    axes = doc.get("axes")
    if not isinstance(axes, dict) or not axes:
        raise where.error(("axes",), "must be a mapping of axis names to lists of values")
    values = {}
    for axis, vals in axes.items():
        if axis not in AXES:
            raise where.error(("axes", axis), f"unknown axis; known: {', '.join(AXES)}")
        listed = isinstance(vals, list)
        vals = vals if listed else [vals]
        if not vals:
            raise where.error(("axes", axis), "has no values")
        checked = []
        for i, v in enumerate(vals):
            try:
                checked.append(_check_value(axis, v))
            except InputError as e:
                raise where.error(("axes", axis, i) if listed else ("axes", axis), str(e)) from None
        values[axis] = checked
    synth = _section(doc, "synth", SYNTH_OPTIONS, where)
    perf = _section(doc, "perf", PERF_OPTIONS, where)
    for k in ("model", "train", "rollout"):
        if perf[k] is not None:
            try:
                _check_value(k, perf[k])
            except InputError as e:
                raise where.error(("perf", k), str(e)) from None

    wheres = doc.get("where") or []
    wheres = [wheres] if isinstance(wheres, str) else wheres
    if not isinstance(wheres, list):
        raise where.error(("where",), "must be a list of expressions")
    exprs = []
    for i, w in enumerate(wheres):
        try:
            exprs.append((i, w, ast.parse(str(w), mode="eval")))
        except SyntaxError as e:
            raise where.error(("where", i), f"cannot parse {w!r}: {e.msg}") from None
    excludes = doc.get("exclude") or []
    if not isinstance(excludes, list) or not all(isinstance(x, dict) for x in excludes):
        raise where.error(("exclude",), "must be a list of mappings (axis: value or list of values)")
    for i, x in enumerate(excludes):
        for k in x:
            if k not in AXES:
                raise where.error(("exclude", i, k), f"unknown axis; known: {', '.join(AXES)}")

    names = list(values)
    points, skipped = [], []
    for combo in itertools.product(*(values[a] for a in names)):
        config = {**AXES, **dict(zip(names, combo))}
        reason = _builtin_reason(config)
        for i, w, expr in exprs:
            if reason:
                break
            try:
                if not _eval(expr, _names(config)):
                    reason = f"where[{i}]: {w}"
            except InputError as e:
                raise where.error(("where", i), str(e)) from None
            except Exception as e:       # e.g. comparing None with a number
                raise where.error(("where", i), f"{type(e).__name__}: {e} (at {config})") from None
        for i, x in enumerate(excludes):
            if reason:
                break
            if all(config[k] in (v if isinstance(v, list) else [v]) for k, v in x.items()):
                reason = f"exclude[{i}]"
        if reason:
            skipped.append((config, reason))
        else:
            points.append(Point(config, stages, synth, perf))
    if not points:
        raise InputError(f"{path}: the grid is empty after its filters ({len(skipped)} combinations "
                         f"filtered out, the first by {skipped[0][1] if skipped else '?'})")
    ids = [p.point_id for p in points]
    if len(set(ids)) != len(ids):
        raise InputError(f"{path}: axes list the same value twice (two points are identical)")
    name = doc.get("name") or path.stem
    return Grid(path, str(name), stages, points, skipped, text)
