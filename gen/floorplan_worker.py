"""The board build script's floorplan step, a process of its own (it parses
argv, as the rank workers do): locks each device's block RAMs in the
synthesized netlist before nextpnr reads it (:mod:`gen.floorplan`)::

    python -m gen.floorplan_worker top.json --part LFE5U-85F --devices 2
"""
from __future__ import annotations

import argparse
import sys

from gen.floorplan import apply_floorplan
from model.errors import InputError


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m gen.floorplan_worker",
                                description="Lock each device's block RAMs to its stripe of the die.")
    p.add_argument("netlist", help="Yosys JSON netlist (rewritten in place)")
    p.add_argument("--part", required=True)
    p.add_argument("--devices", type=int, required=True)
    args = p.parse_args(argv)
    try:
        locked = apply_floorplan(args.netlist, args.part, args.devices)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("floorplan: " + (", ".join(f"device {d}: {n} block RAMs locked" for d, n in sorted(locked.items()))
                           or f"no site table for {args.part}: placed freely"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
