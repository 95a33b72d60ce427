"""Memory and disk checks before big runs, the peak memory a run used, and
exclusive use of a cached artifact.

A gigabyte-scale reshard must fail before it starts when the machine cannot
hold it, with one line saying what is needed and what is free, rather than
be killed halfway by the kernel or a full disk.
"""
from __future__ import annotations

import contextlib
import fcntl
import shutil
import threading
from pathlib import Path

import psutil

from model.errors import InputError


def available_memory() -> int | None:
    """Bytes of memory available to new allocations (Linux ``MemAvailable``), or None."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_memory(need: int, what: str):
    """InputError when ``need`` bytes of memory are not available for ``what``."""
    from gen.api import fmt_bytes
    have = available_memory()
    if have is not None and need > have:
        raise InputError(f"{what}: about {fmt_bytes(need)} of memory needed, {fmt_bytes(have)} available")


def check_disk(path, need: int, what: str):
    """InputError when the file system of ``path`` has less than ``need`` bytes free."""
    from gen.api import fmt_bytes
    p = Path(path).resolve()
    while not p.exists():
        p = p.parent
    free = shutil.disk_usage(p).free
    if need > free:
        raise InputError(f"{what}: {fmt_bytes(need)} of disk needed under {p}, {fmt_bytes(free)} free")


class PeakMemory:
    """The peak of the summed resident memory of this process and all its
    descendants (the C++ compiler, the simulator), sampled every ``interval``
    seconds on a thread while the ``with`` block runs; ``peak`` in bytes.

    A sum sampled over the whole tree is what the machine had to hold at
    once; adding each process's own high-water mark would count the compiler
    and the Python images that never coexisted.
    """

    def __init__(self, interval: float = 0.2):
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> int:
        me = psutil.Process()
        total = 0
        for p in [me, *me.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass                    # ended between listing and reading
        self.peak = max(self.peak, total)
        return total

    def _run(self):
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self):
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.sample()
        return False


@contextlib.contextmanager
def exclusive(lock_path):
    """Hold an exclusive lock on ``lock_path`` (created if absent) for the
    ``with`` block: one process at a time builds a cached artifact (a pytest
    worker, a sweep task); the next one waits, then finds it made. The lock
    goes with the process, so a killed holder never leaves it taken."""
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
