"""Memory and disk checks before big runs, and the peak memory a run used.

A gigabyte-scale reshard must fail before it starts when the machine cannot
hold it, with one line saying what is needed and what is free, rather than
be killed halfway by the kernel or a full disk.
"""
from __future__ import annotations

import resource
import shutil
from pathlib import Path

from model.errors import InputError


def fmt_gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB"


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
    have = available_memory()
    if have is not None and need > have:
        raise InputError(f"{what} needs about {fmt_gib(need)} of memory, {fmt_gib(have)} is available")


def check_disk(path, need: int, what: str):
    """InputError when the file system of ``path`` has less than ``need`` bytes free."""
    p = Path(path).resolve()
    while not p.exists():
        p = p.parent
    free = shutil.disk_usage(p).free
    if need > free:
        raise InputError(f"{what} needs {fmt_gib(need)} of disk under {p}, {fmt_gib(free)} is free")


def peak_rss_bytes() -> int:
    """This process's peak resident memory plus the largest of its finished
    children's (the simulator, the compiler): an upper bound on the peak of
    the whole run, since the children ran while this process was alive."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (own + kids) * 1024
