"""``python -m gen verilog``: emit Verilog for every hardware top and lint it.

Parses into :class:`gen.verilog.VerilogOptions` and calls :func:`gen.verilog.emit_verilog`.
"""
from __future__ import annotations

import json
import sys

NAME = "verilog"
HELP = "emit Verilog for the hardware tops (with a parameter manifest) and lint it under Verilator"
ORDER = 50


def add_arguments(p):
    from gen.verilog import VerilogOptions
    d = VerilogOptions()
    p.add_argument("--out", default=str(d.out), help=f"output directory (default {d.out})")
    p.add_argument("--devices", type=int, default=d.devices, help=f"devices in the system top (default {d.devices})")
    p.add_argument("--bus-bits", type=int, default=d.bus_bits,
                   help=f"data bus width: 32, 64, 128, 256 (default {d.bus_bits})")
    p.add_argument("--channels", type=int, default=d.channels, help=f"DMA channels (default {d.channels})")
    p.add_argument("--tlb-entries", type=int, default=d.tlb_entries, help=f"TLB entries (default {d.tlb_entries})")
    p.add_argument("--mem-bytes", type=int, default=d.mem_bytes, help=f"device memory bytes (default {d.mem_bytes})")
    p.add_argument("--for", dest="for_dir", default=None,
                   help="take the architecture from a compiled program directory (its manifest.json), so "
                        "the system and testbench fit that program")
    p.add_argument("--top", action="append", default=None, help="emit only this top (repeatable)")
    p.add_argument("--no-lint", action="store_true", help="skip the Verilator lint")
    p.add_argument("--json", action="store_true", help="print the manifest as JSON")


def run(args) -> int:
    from gen.verilog import VerilogOptions, emit_verilog
    opts = VerilogOptions(out=args.out, devices=args.devices, bus_bits=args.bus_bits, channels=args.channels,
                          tlb_entries=args.tlb_entries, mem_bytes=args.mem_bytes, for_dir=args.for_dir,
                          tops=tuple(args.top) if args.top else None, lint=not args.no_lint)
    man = emit_verilog(opts, progress=lambda m: print(m, file=sys.stderr, flush=True))
    if args.json:
        json.dump(man, sys.stdout, indent=1)
        print()
    else:
        for name, t in man["tops"].items():
            lint = "" if "lint_clean" not in t else (" lint clean" if t["lint_clean"] else " LINT WARNINGS")
            print(f"{args.out}/{t['file']}: module {t['module']}, {t['bytes']:,} bytes{lint}")
        print(f"suppressed Verilator warnings: {', '.join(man['lint_suppressed'])}")
        if "testbench" in man:
            print(f"{args.out}/{man['testbench']}: testbench; run it with no Python in the loop:")
            print(f"  {man['testbench_command']}")
    bad = [n for n, t in man["tops"].items() if t.get("lint_clean") is False]
    return 1 if bad else 0
