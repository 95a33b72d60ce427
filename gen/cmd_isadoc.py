"""``python -m gen isadoc``: write docs/isa.md, generated from ``hw/isa.py``
(``--check``: only compare, exit 1 when stale)."""
from __future__ import annotations

import sys
from pathlib import Path

NAME = "isadoc"
HELP = "generate docs/isa.md (the coprocessor ISA) from hw/isa.py"
ORDER = 91
DEFAULT = Path(__file__).resolve().parent.parent / "docs" / "isa.md"


def add_arguments(p):
    p.add_argument("-o", "--out", default=str(DEFAULT), help=f"output file (default {DEFAULT.name} in docs/)")
    p.add_argument("--check", action="store_true", help="exit 1 if the file is not up to date; write nothing")


def run(args) -> int:
    from gen.isadoc import isa_markdown
    text = isa_markdown()
    out = Path(args.out)
    if args.check:
        ok = out.is_file() and out.read_text() == text
        print(f"{out}: {'up to date' if ok else 'STALE (run python -m gen isadoc)'}", file=sys.stderr)
        return 0 if ok else 1
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(out)     # never a half-written page
    print(f"wrote {out}", file=sys.stderr)
    return 0
