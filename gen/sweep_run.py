"""``python -m gen sweep``: a grid of configurations run as Ray tasks.

Each stage of a point (:mod:`gen.sweep_stages`) is one Ray task with its own
resources; the compiled reshard goes from the compile task to the golden
and Verilator tasks through Ray's object store, never through this driver.
Stages that depend only on the hardware are shared: one simulator build per
design hash, one synthesis per block configuration, each a single task whose
result every point that needs it receives. Ray retries a failed task once
(``max_retries=1, retry_exceptions=True``); a point that still fails is
recorded with its stage and error.

Rows are written as points finish (:mod:`gen.sweep_table`); ``--resume``
runs only the points without a row. At most four points per CPU are in
flight at once (Ray's pattern for bounding pending tasks); "running" in the
progress bar counts points started and not finished.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from gen.sweep_grid import Grid, Point, load_grid
from model.errors import InputError

GiB = 1 << 30

#: Ray resources per stage: a synthesis or a simulator build takes more memory than a plan
RESOURCES = {
    "plan": {"num_cpus": 1, "memory": 1 * GiB},
    "compile": {"num_cpus": 1, "memory": 2 * GiB},
    "golden": {"num_cpus": 1, "memory": 1 * GiB},
    "build": {"num_cpus": 1, "memory": 3 * GiB},
    "verilator": {"num_cpus": 1, "memory": 2 * GiB},
    "synth": {"num_cpus": 1, "memory": 3 * GiB},
    "perf": {"num_cpus": 1, "memory": 512 << 20},
}


@dataclass(frozen=True)
class SweepOptions:
    """What ``python -m gen sweep`` runs.

    ``address``: None starts a local Ray with ``workers`` CPUs (default: this
    machine's cores); ``auto`` joins the Ray cluster this machine is part of;
    ``ray://HOST:PORT`` connects through Ray Client; ``HOST:PORT`` joins a
    cluster's head directly. Four points per worker are in flight at once
    (with an address, ``workers`` defaults to the cluster's CPUs).
    """
    grid: Path | str
    out: Path | str | None = None
    address: str | None = None
    workers: int | None = None
    resume: bool = False
    plots: bool = True
    progress: bool = True


def default_out(grid: Grid) -> Path:
    return Path("build") / "sweep" / grid.name


# ------------------------------------------------------------------ Ray

def _check_reachable(address: str) -> None:
    """One line, fast, when a cluster address cannot be reached (Ray Client alone waits 30 s)."""
    if address == "auto":
        return
    hostport = address.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise InputError(f"--address {address!r}: want auto, ray://HOST:PORT or HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as e:
        raise InputError(f"--address {address}: cannot reach {host}:{port} "
                         f"({e.strerror or type(e).__name__})") from None


def start_ray(opts: SweepOptions) -> int:
    """Start or join Ray; the number of CPUs it offers."""
    import logging

    import ray
    if opts.address is not None:
        _check_reachable(opts.address)
        try:
            ray.init(address=opts.address, logging_level=logging.WARNING, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise InputError(f"--address {opts.address}: {str(e).splitlines()[0]}") from None
    else:
        # Ray runs its workers at nice 15 by default; here they are the work itself, and at
        # that niceness anything else on the machine starves them
        ray.init(num_cpus=opts.workers or os.cpu_count() or 1, include_dashboard=False,
                 logging_level=logging.WARNING, log_to_driver=False,
                 _system_config={"worker_niceness": 0})
    return int(ray.cluster_resources().get("CPU", 1))


def _on_node(name: str):
    """A stage function that also says where it ran and with which tools."""
    def call(*args):
        from gen import sweep_stages
        out = getattr(sweep_stages, name)(*args)
        figures = out[0] if isinstance(out, tuple) else out
        figures["_node"] = socket.gethostname()
        figures["_tools"] = sweep_stages.tool_versions()
        return out
    call.__name__ = name
    return call


class _Tasks:
    """The stages as Ray remote functions, each with its resources and one retry."""

    def __init__(self):
        import ray

        def remote(fn, stage, **extra):
            return ray.remote(fn).options(max_retries=1, retry_exceptions=True, **RESOURCES[stage], **extra)
        self.plan = remote(_on_node("stage_plan"), "plan")
        self.compile = remote(_on_node("stage_compile"), "compile", num_returns=2)
        self.golden = remote(_on_node("stage_golden"), "golden")
        self.verilator = remote(_on_node("stage_verilator"), "verilator")
        self.synth = remote(_on_node("stage_synth"), "synth")
        self.perf = remote(_on_node("stage_perf"), "perf")
        from gen.sweep_stages import build_simulator_once
        self.build = remote(build_simulator_once, "build")


# ------------------------------------------------------------------ one point

class _PointRun:
    """A point's stages in flight and the figures of those that finished."""

    def __init__(self, point: Point):
        self.point = point
        self.started = time.perf_counter()
        self.waiting: set[str] = set()
        self.figures: dict = {}
        self.nodes: set[str] = set()
        self.tools: dict = {}
        self.compiled = None           # the object-store reference of the compiled reshard
        self.failure: tuple[str, str] | None = None

    def take(self, figures: dict) -> None:
        self.nodes.add(figures.pop("_node", "?"))
        self.tools.update(figures.pop("_tools", {}))
        self.figures.update(figures)

    def row(self) -> dict:
        c = self.point
        row = {"point_id": c.point_id, "stages": ",".join(c.stages), **c.config, **self.figures,
               "status": "failed" if self.failure else "ok",
               "wall_s": round(time.perf_counter() - self.started, 3),
               "finished_at": datetime.now(timezone.utc).replace(microsecond=0),
               "node": ",".join(sorted(self.nodes)), "tools": self.tools,
               "synth_options": c.synth if "synth" in c.stages else None,
               "perf_options": c.perf if "perf" in c.stages else None}
        if self.failure:
            row["failed_stage"], row["error"] = self.failure
        return row


def _error_text(e: Exception) -> str:
    cause = getattr(e, "cause", None) or e
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[-1] if text else ''}"[:500]


class _Scheduler:
    """Submits each point's stages as their inputs become ready. Every stage is
    memoized by what decides its result (:func:`gen.sweep_stages.stage_key`):
    points that share a compile, a simulator build, a synthesis or an iteration
    model share its one task."""

    def __init__(self, tasks: _Tasks, on_row):
        self.tasks, self.on_row = tasks, on_row
        self.pending: dict = {}        # ObjectRef -> [(point run, stage)]
        self.memo: dict = {}           # (stage, key) -> ObjectRef (compile: (figures, compiled))
        self.running: list[_PointRun] = []

    @property
    def simulator_builds(self) -> int:
        return sum(stage == "build" for stage, _ in self.memo)

    def _wait_for(self, ref, pr: _PointRun, stage: str) -> None:
        self.pending.setdefault(ref, []).append((pr, stage))
        pr.waiting.add(stage)

    def _once(self, stage: str, key: str, submit):
        if (stage, key) not in self.memo:
            self.memo[stage, key] = submit()
        return self.memo[stage, key]

    def start(self, point: Point) -> None:
        from gen.sweep_stages import stage_key
        pr = _PointRun(point)
        self.running.append(pr)
        c, t = point.config, self.tasks
        if "plan" in point.stages:
            self._wait_for(self._once("plan", stage_key("plan", point), lambda: t.plan.remote(c)), pr, "plan")
        if "compile" in point.stages:
            images = "golden" in point.stages or "verilator" in point.stages
            meta, pr.compiled = self._once("compile", stage_key("compile", point),
                                           lambda: t.compile.remote(c, images))
            self._wait_for(meta, pr, "compile")
        if "synth" in point.stages:
            self._wait_for(self._once("synth", stage_key("synth", point), lambda: t.synth.remote(c, point.synth)),
                           pr, "synth")
        if "perf" in point.stages:
            self._wait_for(self._once("perf", stage_key("perf", point), lambda: t.perf.remote(c, point.perf)),
                           pr, "perf")

    def _after_compile(self, pr: _PointRun, meta: dict, arch: dict) -> None:
        from gen.sweep_stages import stage_key
        t, key = self.tasks, stage_key("compile", pr.point)
        if "golden" in pr.point.stages:
            self._wait_for(self._once("golden", key, lambda: t.golden.remote(pr.compiled)), pr, "golden")
        if "verilator" in pr.point.stages:
            build = self._once("build", meta["design_key"],
                               lambda: t.build.remote(arch, pr.point.config["bus_bits"]))
            self._wait_for(self._once("verilator", key, lambda: t.verilator.remote(pr.compiled, build)),
                           pr, "verilator")

    def step(self, timeout: float = 1.0) -> None:
        """Take every finished task (waiting at most ``timeout`` for one)."""
        import ray
        if not self.pending:
            return
        done, _ = ray.wait(list(self.pending), num_returns=1, timeout=timeout)
        if done:
            more, _ = ray.wait(list(self.pending), num_returns=len(self.pending), timeout=0)
            done = list(dict.fromkeys(done + more))
        for ref in done:
            for pr, stage in self.pending.pop(ref):
                pr.waiting.discard(stage)
                if pr.failure:
                    continue
                try:
                    got = dict(ray.get(ref))
                except Exception as e:           # the task failed twice (Ray retried it once)
                    pr.failure = (stage, _error_text(e))
                    continue
                arch = got.pop("_arch", None)
                pr.take(got)
                if stage == "compile":
                    self._after_compile(pr, got, arch)
        for pr in [p for p in self.running if not p.waiting or p.failure]:
            if pr.failure:                        # drop what it still waits for
                for ref in list(self.pending):
                    self.pending[ref] = [(p, s) for p, s in self.pending[ref] if p is not pr]
                    if not self.pending[ref]:
                        del self.pending[ref]
            self.running.remove(pr)
            self.on_row(pr.row())


# ------------------------------------------------------------------ the sweep

def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def run_sweep(opts: SweepOptions, log=lambda m: print(m, file=sys.stderr, flush=True)) -> dict:
    """Run (or resume) a sweep; the summary ``--json`` prints."""
    from gen import sweep_table
    grid = load_grid(opts.grid)
    if opts.workers is not None and opts.workers < 1:
        raise InputError(f"--workers must be positive, not {opts.workers}")
    out = Path(opts.out) if opts.out else default_out(grid)
    done_before = sweep_table.finished_ids(out)
    if done_before and not opts.resume:
        raise InputError(f"{out} already holds {len(done_before)} point(s) of a sweep: "
                         f"pass --resume to run the missing ones, or another --out")
    ids = [p.point_id for p in grid.points]
    todo = [p for p in grid.points if p.point_id not in done_before]
    t0 = time.perf_counter()
    import ray
    # Ray prints its notes (a task to be retried, ...) to stdout: they go to stderr, so that
    # stdout holds only what the command prints (--json)
    with contextlib.redirect_stdout(sys.stderr):
        # bad addresses fail here, before anything is written; nothing to run, no Ray
        cpus = start_ray(opts) if todo else 0
        return _run(opts, grid, out, todo, ids, cpus, t0, log)


def _run(opts: SweepOptions, grid: Grid, out: Path, todo: list[Point], ids: list[str], cpus: int,
         t0: float, log) -> dict:
    import ray

    from gen import sweep_table
    ray_start_s = time.perf_counter() - t0
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    counts = {"done": 0, "failed": 0}
    bar = None
    try:
        out.mkdir(parents=True, exist_ok=True)
        sweep_table.remove_partial(out)
        (out / "grid.yaml").write_text(grid.text)
        # points in flight: enough that points sharing a stage do not idle the other CPUs,
        # few enough that compiled images do not pile up in the object store
        window = 4 * (opts.workers if opts.workers else cpus)
        log(f"sweep {grid.name}: {len(grid.points)} point(s) ({len(grid.skipped_by_filter)} filtered out), "
            f"{len(grid.points) - len(todo)} already done, {len(todo)} to run"
            + (f" on {cpus} CPU(s) (Ray {ray.__version__}{', ' + opts.address if opts.address else ', local'})"
               if todo else "") + f"; rows in {out}/points")
        if opts.progress and todo:
            from tqdm import tqdm
            bar = tqdm(total=len(todo), unit="point", desc=f"sweep {grid.name}", file=sys.stderr)

        def on_row(row):
            sweep_table.write_row(out, row)
            counts["done" if row["status"] == "ok" else "failed"] += 1
            if row["status"] != "ok":
                msg = f"point {row['point_id']} failed in {row['failed_stage']}: {row['error']}"
                if bar is not None:
                    bar.write(msg, file=sys.stderr)          # above the bar, not through it
                else:
                    log(msg)
            if bar is not None:
                bar.update(1)

        sched = _Scheduler(_Tasks() if todo else None, on_row)
        queue = list(todo)
        shown = None
        while queue or sched.running:
            while queue and len(sched.running) < window:
                sched.start(queue.pop(0))
            sched.step()
            state = dict(done=counts["done"], failed=counts["failed"], running=len(sched.running))
            if bar is not None and state != shown:
                bar.set_postfix(state)
                shown = state
        builds = sched.simulator_builds
    finally:
        if bar is not None:
            bar.close()
        signal.signal(signal.SIGTERM, previous)
        if todo:
            ray.shutdown()
    wall = time.perf_counter() - t0
    run_s = wall - ray_start_s
    table = sweep_table.write_results(out, ids)
    rows = sweep_table.read_rows(out, set(ids)).to_pylist()
    pngs = []
    if opts.plots:
        from gen.sweep_plots import write_pareto
        pngs = write_pareto(rows, out)
    failed = sum(r["status"] != "ok" for r in rows)
    return {"grid": str(grid.path), "out": str(out), "points": len(grid.points), "done": len(rows) - failed,
            "failed": failed, "skipped_by_filter": len(grid.skipped_by_filter),
            "resumed": len(grid.points) - len(todo), "ran": len(todo), "simulator_builds": builds,
            "table": str(table), "pareto": [str(p) for p in pngs], "wall_s": round(wall, 1),
            "ray_start_s": round(ray_start_s, 1),
            # the rate once Ray is up (its start is a fixed cost, the same with 1 worker or 100)
            "points_per_minute": round(60 * len(todo) / run_s, 2) if todo else None}
