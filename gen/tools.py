"""The external tools ReshardIP uses, found where this environment installed them."""
from __future__ import annotations

import importlib
import shutil
import sys
from pathlib import Path


def find_tool(name: str) -> str | None:
    """A console script of this environment (even when its bin/ is not on PATH), else PATH."""
    local = Path(sys.executable).parent / name
    if local.is_file():
        return str(local)
    return shutil.which(name)


def module_version(mod: str, attr: str = "__version__") -> tuple[str | None, str | None]:
    """(version, None) of an importable module, or (None, one line saying why not)."""
    try:
        m = importlib.import_module(mod)
    except Exception as e:  # an import can fail in many ways; report its one line
        return None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return getattr(m, attr, "unknown"), None


def yosys_version() -> tuple[str | None, str | None]:
    """(version, None) of the Yosys Amaranth uses, or (None, why not)."""
    try:
        from amaranth._toolchain.yosys import find_yosys
        y = find_yosys(lambda ver: ver >= (0, 40))
        return f"{y.version()} ({y.__name__})", None
    except Exception as e:
        return None, f"{type(e).__name__}: {e}"
