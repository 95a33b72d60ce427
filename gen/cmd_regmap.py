"""``python -m gen regmap``: write docs/regmap.md, the host port's register map,
generated from ``hw.hostport.REGISTERS`` (``--check``: only compare)."""
from __future__ import annotations

import sys
from pathlib import Path

NAME = "regmap"
HELP = "generate docs/regmap.md (the host port register map) from hw/hostport.py"
ORDER = 90
DEFAULT = Path(__file__).resolve().parent.parent / "docs" / "regmap.md"


def add_arguments(p):
    p.add_argument("-o", "--out", default=str(DEFAULT), help=f"output file (default {DEFAULT.name} in docs/)")
    p.add_argument("--check", action="store_true", help="exit 1 if the file is not up to date; write nothing")


def run(args) -> int:
    from hw.hostport import regmap_markdown
    text = regmap_markdown()
    out = Path(args.out)
    if args.check:
        ok = out.is_file() and out.read_text() == text
        print(f"{out}: {'up to date' if ok else 'STALE (run python -m gen regmap)'}",
              file=sys.stderr)
        return 0 if ok else 1
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out}", file=sys.stderr)
    return 0
