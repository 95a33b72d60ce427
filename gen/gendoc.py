"""Generated documentation pages (docs/regmap.md, docs/isa.md): one way to
write them and one way to check that they are up to date."""
from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"


def add_doc_arguments(p, default: Path) -> None:
    """``-o/--out`` and ``--check`` for a command that generates ``default``."""
    p.add_argument("-o", "--out", default=str(default), help=f"output file (default {default.name} in docs/)")
    p.add_argument("--check", action="store_true", help="exit 1 if the file is not up to date; write nothing")


def write_or_check(out, text: str, *, check: bool, command: str) -> int:
    """Write ``text`` to ``out`` atomically (never a half-written page), or
    with ``check`` compare only: 0 when up to date, 1 when stale."""
    out = Path(out)
    if check:
        ok = out.is_file() and out.read_text() == text
        print(f"{out}: {'up to date' if ok else f'STALE (run python -m gen {command})'}",
              file=sys.stderr)
        return 0 if ok else 1
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(out)
    print(f"wrote {out}", file=sys.stderr)
    return 0
