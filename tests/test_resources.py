"""gen.resources: the checks before big runs, the peak memory of a process tree, the
exclusive lock on a cached artifact."""
import subprocess
import sys

import pytest

from gen.resources import PeakMemory, available_memory, check_disk, check_memory, exclusive
from model.errors import InputError


def test_memory_and_disk_checks_say_what_is_needed_and_free(tmp_path):
    have = available_memory()
    assert have and have > 1 << 20
    check_memory(1 << 20, "a small thing")
    with pytest.raises(InputError, match=r"^the images: about 1\.00 TiB of memory needed, [\d.]+ GiB available$"):
        check_memory(1 << 40, "the images")
    check_disk(tmp_path / "not" / "yet", 1 << 20, "a small thing")     # the nearest existing parent counts
    with pytest.raises(InputError, match=r"^the images: 1024\.00 TiB of disk needed under .*, [\d.]+ GiB free$"):
        check_disk(tmp_path, 1 << 50, "the images")


def test_peak_memory_counts_children_while_they_run():
    hold = "import time, numpy as np; a = np.ones(200 << 20, np.uint8); time.sleep(1.5)"
    with PeakMemory(interval=0.05) as alone:
        pass
    with PeakMemory(interval=0.05) as with_child:
        subprocess.run([sys.executable, "-c", hold], check=True)
    assert with_child.peak - alone.peak > 150 << 20


def test_peak_memory_does_not_count_an_earlier_peak():
    """What a run reports is its own: the peak a process reached before the block
    (a pytest worker's earlier tests, an earlier benchmark) does not count."""
    import numpy as np
    block = np.ones(300 << 20, np.uint8)          # written, so resident
    with PeakMemory(interval=0.05) as before:
        pass
    del block
    with PeakMemory(interval=0.05) as after:
        pass
    assert after.peak < before.peak - (200 << 20)


def test_exclusive_keeps_a_second_process_out_until_released(tmp_path):
    lock = tmp_path / "artifact.lock"
    # another process tries the same lock without waiting: refused while held, granted after
    probe = ("import fcntl, sys\n"
             "f = open(sys.argv[1], 'w')\n"
             "try:\n    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
             "except BlockingIOError:\n    sys.exit(3)\n")
    with exclusive(lock):
        held = subprocess.run([sys.executable, "-c", probe, str(lock)])
    free = subprocess.run([sys.executable, "-c", probe, str(lock)])
    assert (held.returncode, free.returncode) == (3, 0)
