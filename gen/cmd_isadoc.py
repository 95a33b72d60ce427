"""``python -m gen isadoc``: write docs/isa.md, generated from ``hw/isa.py``
(``--check``: only compare, exit 1 when stale)."""
from __future__ import annotations

from gen.gendoc import DOCS, add_doc_arguments, write_or_check

NAME = "isadoc"
HELP = "generate docs/isa.md (the coprocessor ISA) from hw/isa.py"
ORDER = 91


def add_arguments(p):
    add_doc_arguments(p, DOCS / "isa.md")


def run(args) -> int:
    from gen.isadoc import isa_markdown
    return write_or_check(args.out, isa_markdown(), check=args.check, command=NAME)
