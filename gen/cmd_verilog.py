"""``python -m gen verilog``: emit Verilog for every hardware top and lint it."""
from __future__ import annotations

import json
import sys

NAME = "verilog"
HELP = "emit Verilog for the hardware tops (with a parameter manifest) and lint it under Verilator"
ORDER = 50


def add_arguments(p):
    p.add_argument("--out", default="build/verilog", help="output directory (default build/verilog)")
    p.add_argument("--devices", type=int, default=2, help="devices in the system top (default 2)")
    p.add_argument("--bus-bits", type=int, default=64, help="data bus width: 32, 64, 128, 256 (default 64)")
    p.add_argument("--channels", type=int, default=4, help="DMA channels (default 4)")
    p.add_argument("--tlb-entries", type=int, default=16, help="TLB entries (default 16)")
    p.add_argument("--mem-bytes", type=int, default=1 << 16, help="device memory bytes (default 65536)")
    p.add_argument("--for", dest="for_dir", default=None,
                   help="take the architecture from a compiled program directory (its manifest.json), so "
                        "the system and testbench fit that program")
    p.add_argument("--top", action="append", default=None, help="emit only this top (repeatable)")
    p.add_argument("--no-lint", action="store_true", help="skip the Verilator lint")
    p.add_argument("--json", action="store_true", help="print the manifest as JSON")


def run(args) -> int:
    from gen.verilog import EmitParams, emit_all
    from hw.isa import ArchParams
    from model.errors import InputError
    if args.bus_bits not in (32, 64, 128, 256):
        raise InputError(f"--bus-bits must be one of 32, 64, 128, 256, not {args.bus_bits}")
    if args.for_dir:
        from gen.artifacts import load_compiled
        loaded = load_compiled(args.for_dir)
        arch, args.bus_bits = loaded.arch, loaded.manifest["bus_bits"]
    else:
        try:
            arch = ArchParams(devices=args.devices, channels=args.channels, tlb_entries=args.tlb_entries,
                              mem_bytes=args.mem_bytes, addr_bits=max(20, (args.mem_bytes * 4 - 1).bit_length()))
        except ValueError as e:
            raise InputError(f"architecture parameters: {e}") from None
    man = emit_all(args.out, EmitParams(arch, args.bus_bits), args.top, not args.no_lint,
                   progress=lambda m: print(m, file=sys.stderr, flush=True))
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
