"""Run one Python process per rank, as verl's workers would run, and report their failures.

Used by ``python -m gen capture`` (:mod:`model.capture`) and ``python -m gen loop``
(:mod:`gen.loop`). The launcher starts ``python -m <module> --rank r --world W ...`` in
``world`` processes with one thread each and offline Hugging Face settings, forwards the
progress lines rank 0 appends to ``<workdir>/progress``, and turns the first failing rank
into one error line. A worker reports its own failure with :func:`worker_failed` (the last
exception line into ``rank<r>.error``), so the launcher can tell the rank that broke from the
ranks that only lost a peer. Workers rendezvous through a file in the work directory
(:func:`init_gloo`).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parent.parent
_PEER_LOSS = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "gloo/transport")


class RankError(Exception):
    """A worker rank failed or the ranks timed out (the message is one line)."""


def worker_env() -> dict:
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"})
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def last_line(path: Path) -> str | None:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return None
    return lines[-1] if lines else None


def is_peer_loss(line) -> bool:
    """A rank that failed only because another rank went away."""
    return bool(line) and any(p in line for p in _PEER_LOSS)


def _worker_error(workdir: Path, rank: int, rc) -> str:
    err = last_line(workdir / f"rank{rank}.error")
    if err is None:
        err = last_line(workdir / f"rank{rank}.log") or "no output"
        if rc is not None and rc < 0:
            err = f"killed by signal {-rc}; last output: {err}"
    return err


def run_ranks(module: str, args: Callable[[int], list[str]], world: int, workdir: Path, *, timeout: float,
              progress: Callable[[str], None], error: type[Exception] = RankError) -> None:
    """Run ``python -m module --rank r --world W *args(r)`` for every rank; wait for all.

    Raises ``error`` naming the first rank that failed on its own (exit status and its last
    error line), or the ranks still running after ``timeout`` seconds. Every process is
    killed before this returns or raises.
    """
    workdir = Path(workdir)
    env = worker_env()
    procs = []
    try:
        for rank in range(world):
            log = open(workdir / f"rank{rank}.log", "w")
            cmd = [sys.executable, "-m", module, "--rank", str(rank), "--world", str(world), *args(rank)]
            procs.append(subprocess.Popen(cmd, cwd=str(REPO_ROOT), env=env, stdout=log,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
            log.close()
        deadline = time.monotonic() + timeout
        seen = 0
        progress_file = workdir / "progress"
        while True:
            if progress_file.exists():
                lines = progress_file.read_text().splitlines()
                for line in lines[seen:]:
                    progress(line)
                seen = len(lines)
            codes = [p.poll() for p in procs]
            if any(c not in (None, 0) for c in codes):
                time.sleep(0.3)  # let a crashing rank finish writing its error
                codes = [p.poll() for p in procs]
                failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
                own = [(r, c) for r, c in failed if (workdir / f"rank{r}.error").exists()]
                cause = [(r, c) for r, c in own if not is_peer_loss(last_line(workdir / f"rank{r}.error"))]
                rank, rc = (cause or own or failed)[0]
                raise error(f"worker rank {rank} failed (exit {rc}): {_worker_error(workdir, rank, rc)}")
            if all(c == 0 for c in codes):
                break
            if time.monotonic() > deadline:
                raise error(f"workers timed out after {timeout:g} s "
                            f"(ranks still running: {[r for r, c in enumerate(codes) if c is None]})")
            time.sleep(0.1)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


# ------------------------------------------------------------------ worker side

class Progress:
    """Rank 0 appends progress lines to ``<workdir>/progress``; other ranks stay quiet."""

    def __init__(self, path, rank):
        self.f = open(path, "a") if rank == 0 else None

    def __call__(self, msg):
        if self.f:
            self.f.write(msg + "\n")
            self.f.flush()


def init_gloo(workdir, rank: int, world: int) -> None:
    """``torch.distributed`` over gloo, rendezvous through a file in ``workdir``."""
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{os.path.join(str(workdir), 'rendezvous')}",
                            rank=rank, world_size=world)


def worker_parser(prog: str):
    """The argument parser of a rank worker, with the arguments :func:`run_ranks` passes
    (``--rank``, ``--world``) and the work directory every worker reports into."""
    import argparse
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--seed", type=int, default=0)
    return p


def worker_main(parser, run, argv=None) -> int:
    """Parse, then ``run(args)``; any exception becomes this rank's one-line error."""
    a = parser.parse_args(argv)
    try:
        return run(a)
    except BaseException as e:  # noqa: BLE001 - report anything, one line
        worker_failed(a.workdir, a.rank, e)


def worker_failed(workdir, rank: int, exc: BaseException) -> None:
    """Report ``exc`` as this rank's one-line error and leave at once.

    ``os._exit`` skips interpreter teardown: it can block on a process group whose peers are gone.
    """
    traceback.print_exc()
    line = traceback.format_exception_only(type(exc), exc)[-1].strip().replace("\n", " ")
    with open(os.path.join(str(workdir), f"rank{rank}.error"), "w") as f:
        f.write(line + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)
