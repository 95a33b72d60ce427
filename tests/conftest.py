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


@pytest.fixture(scope="session")
def tiny():
    from model.models import load_model
    return load_model("tiny-qwen2")


@pytest.fixture(scope="session")
def tiny_state(tiny):
    from model.models import random_state_dict
    return random_state_dict(tiny, seed=0)


# ---- real verl captures (tiny-qwen2 on CPU ranks), once per worker, shared by the
# capture and collective tests; the FSDP2 ones record every collective's tensors
def capture_trace(tmp_path_factory, strategy, world, **kw):
    from model.capture import capture, read_trace
    out = tmp_path_factory.mktemp(f"cap-{strategy}-w{world}") / "trace.jsonl"
    summary = capture("tiny-qwen2", strategy, world, out, progress=lambda msg: None,
                      timeout=150 * world, **kw)
    assert summary["out"] == str(out)
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
