"""One synthesis, several placements: a board build's nextpnr seeds.

A placement moves a board's Fmax by 8-15 MHz between seeds of one netlist
(docs/fpga-timing.md), so a build that places once shows one draw of that
spread. ``python -m gen fpga --board NAME --pnr-seed 1-5`` synthesizes once,
places and routes the netlist with each seed (``--pnr-jobs`` at a time, each
in ``seeds/sN/``), keeps the best (the highest Fmax, then the fewest
endpoints that miss the clock) as the build's ``top.*`` and packs its
bitstream. One seed is the same flow with one placement.

* :func:`parse_seeds`: ``N``, ``A-B`` and comma lists of them;
* :func:`split_script`: Amaranth's build script as synthesis, the one
  nextpnr line, and packing;
* :func:`seed_command`: the nextpnr line for one seed, writing in its
  directory;
* :func:`run_seeds`: the whole flow, under a time limit.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from model.errors import InputError

__all__ = ["parse_seeds", "ScriptParts", "split_script", "seed_command", "SeedResult", "best_seed",
           "placed_fmax", "run_seeds", "MAX_SEEDS"]

MAX_SEEDS = 64


def parse_seeds(spec, option: str = "--pnr-seed") -> list[int]:
    """``"3"``, ``"1-5"``, ``"1,4,9"`` or ``"1-3,7"`` as the seeds in the
    order given, each once; an int is one seed. Anything else, a negative
    seed, a descending range or more than :data:`MAX_SEEDS` seeds is an
    :class:`InputError` naming ``option``."""
    if isinstance(spec, int):
        spec = str(spec)
    seeds: list[int] = []
    for part in str(spec).split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            a, b = int(lo), int(hi if dash else lo)
        except ValueError:
            raise InputError(f"{option}: '{spec}' is not a seed, a range A-B or a comma list of them "
                             "(seeds are 0 or more)") from None
        if b < a:
            raise InputError(f"{option}: the range {a}-{b} runs backwards")
        seeds += [s for s in range(a, b + 1) if s not in seeds]
        if len(seeds) > MAX_SEEDS:
            raise InputError(f"{option}: {spec} is more than {MAX_SEEDS} seeds")
    return seeds


@dataclass
class ScriptParts:
    """A build script cut at its place-and-route line; ``preamble`` (the
    shell settings and tool variables) is what each part runs after."""
    preamble: str
    synth: str
    pnr: str
    pack: str

    def script(self, body: str) -> str:
        return self.preamble + body


def split_script(text: str) -> ScriptParts:
    """Cut Amaranth's build script at its one ``"$NEXTPNR_*"`` line: what
    runs before it (from the ``"$YOSYS"`` line on: synthesis, and the
    floorplan where one is inserted) and after it (the packer)."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, ln in enumerate(lines) if ln.startswith('"$YOSYS"')]
    pnr = [i for i, ln in enumerate(lines) if ln.startswith('"$NEXTPNR_')]
    if len(starts) != 1 or len(pnr) != 1 or pnr[0] < starts[0]:
        raise RuntimeError("the build script has not one Yosys line followed by one nextpnr line: "
                           f"{len(starts)} and {len(pnr)}")
    s, p = starts[0], pnr[0]
    return ScriptParts(preamble="".join(lines[:s]), synth="".join(lines[s:p]), pnr=lines[p],
                       pack="".join(lines[p + 1:]))


# nextpnr's output files in a board's build line (``top`` is the design's name)
_OUTPUTS = (".tim", ".config", ".asc", "_report.json", ".sdf", "_placed.json")


def seed_command(pnr_line: str, seed: int, directory: str, name: str = "top") -> str:
    """``pnr_line`` with ``--seed seed`` and its output files (log, report,
    SDF, configuration, placed netlist) in ``directory`` (relative to the build directory);
    its inputs stay where they are."""
    words = pnr_line.split()
    if "--seed" not in words:
        raise RuntimeError(f"the nextpnr line has no --seed: {pnr_line.strip()}")
    words[words.index("--seed") + 1] = str(seed)
    outputs = {name + o for o in _OUTPUTS}
    return " ".join(f"{directory}/{w}" if w in outputs else w for w in words) + "\n"


@dataclass
class SeedResult:
    """One placement: its directory, whether nextpnr finished (``rc``), and
    what the caller's ``judge`` read of it (Fmax, failing endpoints, ...)."""
    seed: int
    directory: Path
    rc: int | None                  # None: stopped at the time limit
    seconds: float
    fmax_mhz: float | None = None   # the slowest clock's
    endpoints: int | None = None    # failing at the constraint
    tns_ns: float | None = None
    timing_met: bool = False
    failing: dict | None = None     # its gen.sdf_timing endpoints report

    def to_json(self) -> dict:
        return {"seed": self.seed, "finished": self.rc == 0, "fmax_mhz": self.fmax_mhz,
                "timing_met": self.timing_met, "failing_endpoints": self.endpoints,
                "tns_ns": self.tns_ns, "seconds": round(self.seconds, 1), "dir": str(self.directory)}


def best_seed(results: list[SeedResult]) -> SeedResult | None:
    """The finished placement with the highest Fmax, then the fewest failing
    endpoints, then the least total negative slack, then the first given."""
    done = [r for r in results if r.rc == 0 and r.fmax_mhz is not None]
    if not done:
        return None
    return min(done, key=lambda r: (-r.fmax_mhz, r.endpoints if r.endpoints is not None else 1 << 30,
                                    r.tns_ns or 0.0, results.index(r)))


def placed_fmax(entries: list[dict]) -> list[float]:
    """The Fmax of each placement that finished with one, lowest first, from
    a report's ``nextpnr_seeds`` (:meth:`SeedResult.to_json`)."""
    return sorted(e["fmax_mhz"] for e in entries if e["finished"] and e["fmax_mhz"])


class _Deadline:
    def __init__(self, limit_s):
        self.end = None if limit_s is None else time.monotonic() + limit_s

    def left(self):
        return None if self.end is None else max(0.0, self.end - time.monotonic())


def _run(script: str, cwd: Path, env: dict, log: Path, deadline: _Deadline) -> int | None:
    """Run ``script`` with ``sh`` in its own process group; its output to
    ``log``. Returns the exit status, or None when the deadline stopped it."""
    with open(log, "a") as out:
        proc = subprocess.Popen(["sh", "-c", script], cwd=cwd, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return proc.wait(timeout=deadline.left())
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            return None


def run_seeds(build_dir: Path, script: str, seeds: list[int], *, env: dict, judge, jobs: int,
              time_limit_s=None, progress=lambda m: None, name: str = "top"):
    """Synthesize with ``script``'s first part (output in ``build.log``),
    place and route with each seed, ``jobs`` at a time, in ``seeds/sN/``,
    and pack the best (its outputs copied to ``name.*`` first). ``judge``
    fills a finished :class:`SeedResult`'s figures from its directory.
    Returns ``(status, results, best)``: status ``"built"``, ``"failed"``
    (Yosys, every placement, or the packer failed) or ``"timeout"``."""
    parts = split_script(script)
    deadline = _Deadline(time_limit_s)
    log = build_dir / "build.log"
    log.write_text("")
    rc = _run(parts.script(parts.synth), build_dir, env, log, deadline)
    if rc is None:
        return "timeout", [], None
    if rc:
        progress(f"synthesis failed (exit {rc}); the end of {log}:\n{log.read_text()[-2000:]}")
        return "failed", [], None

    def place(seed: int) -> SeedResult:
        d = build_dir / "seeds" / f"s{seed}"
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        t = time.perf_counter()
        rc = _run(parts.script(seed_command(parts.pnr, seed, f"seeds/s{seed}", name)), build_dir, env,
                  d / "nextpnr.log", deadline)
        r = SeedResult(seed, d, rc, time.perf_counter() - t)
        if rc == 0:
            judge(r)
        progress(f"seed {seed}: " + ("stopped at the time limit" if rc is None else
                                     f"nextpnr failed (exit {rc}), see {d / 'nextpnr.log'}" if rc else
                                     f"{r.fmax_mhz} MHz" + (f", {r.endpoints} endpoints miss the clock"
                                                            if r.endpoints else "")
                                     + f" ({r.seconds / 60:.1f} min)"))
        return r

    if len(seeds) > 1:
        progress(f"placing and routing with seeds {', '.join(map(str, seeds))}, {jobs} at a time ...")
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(place, seeds))
    best = best_seed(results)
    # the build's own name.* are the best placement's (or, when none finished,
    # the first seed's log: what nextpnr found short)
    for out in (name + o for o in _OUTPUTS):
        if (src := (best or results[0]).directory / out).exists():
            shutil.copyfile(src, build_dir / out)
    if best is None:
        if all(r.rc is None for r in results):
            return "timeout", results, None
        failed = next((r for r in results if r.rc), results[0])
        progress(f"place and route failed (seed {failed.seed}: "
                 + (f"exit {failed.rc}" if failed.rc else "no Fmax in its report")
                 + f"); the end of {failed.directory / 'nextpnr.log'}:\n"
                 + (failed.directory / "nextpnr.log").read_text()[-2000:])
        return "failed", results, None
    if len(seeds) > 1:
        progress(f"packing seed {best.seed}'s placement ({best.fmax_mhz} MHz) ...")
    rc = _run(parts.script(parts.pack), build_dir, env, log, deadline)
    if rc is None:
        return "timeout", results, best
    return ("failed" if rc else "built"), results, best
