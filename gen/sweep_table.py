"""A sweep's results: one Parquet file per finished point, written atomically.

``OUT/points/`` is a Parquet dataset (``pyarrow.dataset`` or
``pandas.read_parquet`` read the directory as one table): each point's row
lands there the moment it finishes, as ``<point_id>.parquet`` written to a
temporary name and renamed, so a sweep killed at any instant leaves whole
rows or none. ``OUT/results.parquet`` is the same rows in one file, written
at the end of a run. Every file has the schema :data:`SCHEMA`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from gen.sweep_grid import AXES

_AXIS_TYPES = {"bus_bits": pa.int64(), "channels": pa.int64(), "tlb_entries": pa.int64(),
               "mem_bytes": pa.int64(), "engine_clock_mhz": pa.float64(), "engine_bus_bits": pa.int64(),
               "engine_channels": pa.int64()}

#: every figure a stage can report, and its type
FIGURES = {
    # plan
    "plan_runs": pa.int64(), "plan_bytes": pa.int64(), "verl_bytes": pa.int64(), "bytes_vs_verl": pa.float64(),
    "plan_s": pa.float64(),
    # compile
    "devices": pa.int64(), "arch_channels": pa.int64(), "arch_tlb_entries": pa.int64(),
    "arch_mem_bytes": pa.int64(), "descriptors": pa.int64(), "remaps": pa.int64(), "program_words": pa.int64(),
    "lower_bound_cycles": pa.int64(), "predicted_cycles": pa.int64(), "design_key": pa.string(),
    "compile_s": pa.float64(),
    # golden
    "golden_verified": pa.bool_(), "bytes_copied": pa.int64(), "bytes_remapped": pa.int64(),
    "golden_s": pa.float64(),
    # verilator
    "verified": pa.bool_(), "golden_agrees": pa.bool_(), "cycles": pa.int64(),
    "cycles_over_lower_bound": pa.float64(), "beats_per_cycle": pa.float64(), "sim_cycles_per_s": pa.float64(),
    "simulator_cached": pa.bool_(), "simulator_build_s": pa.float64(), "verilator_s": pa.float64(),
    # synth
    "lut4": pa.int64(), "ff": pa.int64(), "bram": pa.int64(), "dsp": pa.int64(), "fmax_mhz": pa.float64(),
    "timing_met": pa.bool_(), "fits": pa.bool_(), "synth_freq_mhz": pa.float64(), "synth_s": pa.float64(),
    # perf
    "iteration_s": pa.float64(), "iteration_s_with_ip_sync": pa.float64(), "sync_software_s": pa.float64(),
    "sync_ip_s": pa.float64(), "sync_software_bytes": pa.int64(), "sync_ip_bytes": pa.int64(),
    "engine_clock_mhz_used": pa.float64(), "engine_bus_bits_used": pa.int64(), "engine_channels_used": pa.int64(),
    "perf_s": pa.float64(),
}

META = {"point_id": pa.string(), "status": pa.string(), "failed_stage": pa.string(), "error": pa.string(),
        "stages": pa.string(), "wall_s": pa.float64(), "finished_at": pa.timestamp("s", tz="UTC"),
        "node": pa.string(), "tools": pa.string(), "synth_options": pa.string(), "perf_options": pa.string()}

SCHEMA = pa.schema([pa.field(k, t) for k, t in META.items()]
                   + [pa.field(a, _AXIS_TYPES.get(a, pa.string())) for a in AXES]
                   + [pa.field(k, t) for k, t in FIGURES.items()])


def row_table(row: dict) -> pa.Table:
    """One row as a table of :data:`SCHEMA` (missing columns are null; unknown keys are an error)."""
    unknown = set(row) - set(SCHEMA.names)
    if unknown:
        raise KeyError(f"not a column of the sweep table: {', '.join(sorted(unknown))}")
    row = dict(row)
    for k in ("tools", "synth_options", "perf_options"):
        if isinstance(row.get(k), dict):
            row[k] = json.dumps(row[k], sort_keys=True)
    return pa.Table.from_pylist([row], schema=SCHEMA)


def points_dir(out) -> Path:
    return Path(out) / "points"


def write_row(out, row: dict) -> Path:
    """Write one point's row as ``points/<point_id>.parquet``, atomically."""
    d = points_dir(out)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{row['point_id']}.parquet"
    tmp = d / f".{row['point_id']}.parquet.tmp"
    try:
        pq.write_table(row_table(row), tmp)
        os.replace(tmp, path)
    except BaseException:                # a signal mid-write: no half file left behind
        tmp.unlink(missing_ok=True)
        raise
    return path


def remove_partial(out) -> int:
    """Remove the temporary files a killed run (SIGKILL, power loss) left; how many."""
    d = points_dir(out)
    stale = list(d.glob(".*.parquet.tmp")) if d.is_dir() else []
    for p in stale:
        p.unlink(missing_ok=True)
    return len(stale)


def finished_ids(out) -> set[str]:
    """Ids of the points whose rows are on disk (what ``--resume`` skips)."""
    d = points_dir(out)
    return {p.stem for p in d.glob("*.parquet")} if d.is_dir() else set()


def read_rows(out, ids=None) -> pa.Table:
    """Every row under ``points/`` (only ``ids`` where given), sorted by point id."""
    d = points_dir(out)
    files = sorted(d.glob("*.parquet")) if d.is_dir() else []
    if ids is not None:
        files = [f for f in files if f.stem in ids]
    if not files:
        return SCHEMA.empty_table()
    return pa.concat_tables([pq.read_table(f, schema=SCHEMA) for f in files])


def write_results(out, ids) -> Path:
    """``results.parquet``: the rows of the points ``ids``, in one file (atomically)."""
    path = Path(out) / "results.parquet"
    tmp = path.with_name(".results.parquet.tmp")
    pq.write_table(read_rows(out, set(ids)), tmp)
    os.replace(tmp, path)
    return path
