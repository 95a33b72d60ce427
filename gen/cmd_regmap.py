"""``python -m gen regmap``: write docs/regmap.md, the host port's register map,
generated from ``hw.hostport.REGISTERS`` (``--check``: only compare)."""
from __future__ import annotations

from gen.gendoc import DOCS, add_doc_arguments, write_or_check

NAME = "regmap"
HELP = "generate docs/regmap.md (the host port register map) from hw/hostport.py"
ORDER = 90


def add_arguments(p):
    add_doc_arguments(p, DOCS / "regmap.md")


def run(args) -> int:
    from hw.hostport import regmap_markdown
    return write_or_check(args.out, regmap_markdown(), check=args.check, command=NAME)
