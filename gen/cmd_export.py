"""``python -m gen export --chakra TRACE --out DIR``: write a capture trace's collectives as Chakra ETs."""
from __future__ import annotations

import sys
from pathlib import Path

NAME = "export"
HELP = ("write the collectives of a capture trace as Chakra execution traces "
        "(DIR/<prefix>.<rank>.et, mlc-chakra's protobuf schema) plus DIR/<prefix>.comm_group.json")
ORDER = 36


def add_arguments(parser) -> None:
    parser.add_argument("--chakra", required=True, metavar="TRACE",
                        help="capture trace (JSON Lines, from `python -m gen capture`) to export")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="output directory (default: build/chakra/<trace stem>)")
    parser.add_argument("--prefix", default=None,
                        help="file name prefix: DIR/<prefix>.<rank>.et (default: the trace file's stem)")


def run(args) -> int:
    from gen.chakra_export import COMM_GROUP_SUFFIX, export_chakra, read_chakra
    trace = Path(args.chakra)
    out = Path(args.out) if args.out else Path("build/chakra") / trace.stem
    paths = export_chakra(trace, out, prefix=args.prefix)
    nodes = sum(len(read_chakra(p)) - 2 for p in paths)
    prefix = args.prefix or trace.stem
    print(f"export: wrote {len(paths)} Chakra traces ({nodes} collective nodes) to {out}/{prefix}.<rank>.et "
          f"and {out}/{prefix}{COMM_GROUP_SUFFIX}", file=sys.stderr)
    return 0
