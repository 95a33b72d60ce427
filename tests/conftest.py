import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from hypothesis import settings  # noqa: E402

# CI runs the same examples every time, so a red run is reproducible
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


# ---- file order: the longest files first, so the two xdist workers (--dist loadfile
# hands out files in collection order) do not each end on a long file while the other
# core idles. Longest by the per-file seconds of earlier runs (pytest's cache), else
# by the count of tests marked slow (a fresh clone; CI)
_FILE_SECONDS = "reshard/file_seconds"
_seconds: dict[str, float] = {}


def _file_of(nodeid: str) -> str:
    return nodeid.split("::")[0]


def pytest_collection_modifyitems(session, config, items):
    cache = getattr(config, "cache", None)        # absent with -p no:cacheprovider
    known = cache.get(_FILE_SECONDS, {}) if cache else {}
    slow, first = {}, {}
    for k, item in enumerate(items):
        f = _file_of(item.nodeid)
        slow[f] = slow.get(f, 0) + (item.get_closest_marker("slow") is not None)
        first.setdefault(f, k)
    # whole files, each in its own order, the heaviest first (a file no run has timed:
    # a minute per slow test)
    def seconds(f):
        return known.get(f, 60.0 * slow[f])
    items.sort(key=lambda it: (-seconds(_file_of(it.nodeid)), first[_file_of(it.nodeid)]))


def pytest_runtest_logreport(report):
    f = _file_of(report.nodeid)
    _seconds[f] = _seconds.get(f, 0.0) + report.duration


def pytest_sessionfinish(session, exitstatus):
    # the xdist controller (or a run without workers) sees every test's report; a
    # partial run updates only its own files
    config = session.config
    cache = getattr(config, "cache", None)
    if _seconds and not hasattr(config, "workerinput") and cache:
        known = cache.get(_FILE_SECONDS, {})
        known.update({f: round(v, 1) for f, v in _seconds.items()})
        cache.set(_FILE_SECONDS, known)


@pytest.fixture(scope="session")
def tiny():
    from model.models import load_model
    return load_model("tiny-qwen2")


@pytest.fixture(scope="session")
def tiny_state(tiny):
    from model.models import random_state_dict
    return random_state_dict(tiny, seed=0)


# ---- real verl captures (tiny-qwen2 on CPU ranks), once per test run, shared by the
# capture, collective and perf tests of every xdist worker (a file lock in the run's
# shared temporary directory: the first worker captures, the others read its trace);
# the FSDP2 ones record every collective's tensors
def _run_root(tmp_path_factory) -> Path:
    """A directory shared by this run's xdist workers (pytest's base temp for one process)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def capture_trace(tmp_path_factory, strategy, world, **kw):
    import json

    from gen.resources import exclusive
    from model.capture import capture, read_trace
    opts = "-".join(f"{k}={v}" for k, v in sorted(kw.items())) or "plain"
    d = _run_root(tmp_path_factory) / f"cap-{strategy}-w{world}-{opts}"
    d.mkdir(parents=True, exist_ok=True)
    out = d / "trace.jsonl"
    with exclusive(d / ".lock"):
        done = d / "summary.json"
        if not done.is_file():
            summary = capture("tiny-qwen2", strategy, world, out, progress=lambda msg: None,
                              timeout=150 * world, **kw)
            assert summary["out"] == str(out)
            done.write_text(json.dumps(summary, default=str))
    trace = read_trace(out)
    trace["path"] = str(out)
    return trace


@pytest.fixture(scope="session")
def fsdp2_w2(tmp_path_factory):
    return capture_trace(tmp_path_factory, "fsdp2", 2, record_data=True)


@pytest.fixture(scope="session")
def fsdp1_w2(tmp_path_factory):
    return capture_trace(tmp_path_factory, "fsdp1", 2)


@pytest.fixture(scope="session")
def fsdp2_w4(tmp_path_factory):
    return capture_trace(tmp_path_factory, "fsdp2", 4, record_data=True)
