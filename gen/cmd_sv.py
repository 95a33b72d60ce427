"""``python -m gen sv``: write the SystemVerilog package and UVM sequence item
(``reshard_pkg.sv``, ``reshard_seq_item.sv``), generated from ``hw/isa.py`` and
``hw.hostport.REGISTERS`` (``--check``: only compare, exit 1 when stale)."""
from __future__ import annotations

import sys
from pathlib import Path

NAME = "sv"
HELP = "generate a SystemVerilog package and UVM sequence item from hw/isa.py and the register map"
ORDER = 92


def add_arguments(p):
    from gen.sv import SvOptions
    d = SvOptions()
    p.add_argument("--out", "-o", default=str(d.out), help=f"output directory (default {d.out})")
    p.add_argument("--check", action="store_true",
                   help="exit 1 if the files in --out are not up to date; write nothing")


def run(args) -> int:
    from gen.sv import SvOptions, check_sv, write_sv
    opts = SvOptions(out=Path(args.out), check=args.check)
    if opts.check:
        stale = check_sv(opts.out)
        for name in stale:
            print(f"{opts.out}/{name}: STALE (run python -m gen {NAME} --out {opts.out})", file=sys.stderr)
        if not stale:
            print(f"{opts.out}: up to date", file=sys.stderr)
        return 1 if stale else 0
    for path in write_sv(opts.out):
        print(f"wrote {path}", file=sys.stderr)
    return 0
