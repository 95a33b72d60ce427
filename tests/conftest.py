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
