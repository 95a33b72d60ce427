"""``python -m gen fpga``: FPGA builds with the open YoWASP toolchain.

``--list-boards`` prints the boards and their parts; ``--ooc --block B``
builds one block out of context and writes ``report.json`` (utilization,
Fmax per clock, whether timing was met). Parses into
:class:`gen.fpga.OocOptions` and calls :func:`gen.fpga.build_ooc`.
"""
from __future__ import annotations

import json
import sys

NAME = "fpga"
HELP = "FPGA builds with YoWASP Yosys/nextpnr: list boards, build a block out of context"
ORDER = 55


def add_arguments(p):
    from gen.fpga import OOC_BLOCKS, OocOptions
    d = OocOptions()
    p.add_argument("--list-boards", action="store_true", help="print the boards with their part and capacity")
    p.add_argument("--ooc", action="store_true", help="build one block out of context (needs --block)")
    p.add_argument("--block", default=d.block, choices=OOC_BLOCKS, help=f"block to build (default {d.block})")
    p.add_argument("--part", default=d.part, help=f"FPGA part for --ooc (default {d.part})")
    p.add_argument("--devices", type=int, default=d.devices, help=f"devices (default {d.devices})")
    p.add_argument("--bus-bits", type=int, default=d.bus_bits, help=f"data bus width (default {d.bus_bits})")
    p.add_argument("--channels", type=int, default=d.channels, help=f"DMA channels (default {d.channels})")
    p.add_argument("--tlb-entries", type=int, default=d.tlb_entries, help=f"TLB entries (default {d.tlb_entries})")
    p.add_argument("--mem-bytes", type=int, default=d.mem_bytes, help=f"device memory bytes (default {d.mem_bytes})")
    p.add_argument("--freq-mhz", type=float, default=d.freq_mhz, help=f"clock constraint (default {d.freq_mhz:g})")
    p.add_argument("--out", default=None, help="output directory (default build/fpga/ooc-BLOCK)")
    p.add_argument("--system-tools", action="store_true",
                   help="use yosys/nextpnr from PATH instead of the YoWASP packages")
    p.add_argument("--allow-timing-fail", action="store_true", help="a timing miss is a warning, not a failure")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args) -> int:
    from gen.fpga import BOARDS, PARTS, OocOptions, build_ooc
    from model.errors import InputError
    if args.list_boards:
        for b in BOARDS.values():
            p = PARTS[b.part]
            print(f"{b.name:<16} {p.name:<13} {p.family:<5} {p.lut4:>6} LUT4 {p.bram_blocks:>4} BRAM "
                  f"({p.bram_kbits} kbit) {p.dsp:>4} DSP  amaranth_boards.{b.module}.{b.cls}")
        return 0
    if not args.ooc:
        raise InputError("give --list-boards or --ooc --block BLOCK (board builds are not available yet)")
    opts = OocOptions(block=args.block, part=args.part, bus_bits=args.bus_bits, channels=args.channels,
                      tlb_entries=args.tlb_entries, mem_bytes=args.mem_bytes, devices=args.devices,
                      freq_mhz=args.freq_mhz, out=args.out or f"build/fpga/ooc-{args.block}",
                      system_tools=args.system_tools)
    print(f"fpga: {opts.block} out of context on {opts.part} at {opts.freq_mhz:g} MHz ...",
          file=sys.stderr, flush=True)
    rep = build_ooc(opts)
    if args.json:
        json.dump(rep, sys.stdout, indent=1)
        print()
    fmax = rep["min_fmax_mhz"]
    met = rep["timing_met"]
    fits = not rep["overflows"]
    verdict = "PASS" if met and fits else ("WARN" if fits and args.allow_timing_fail else "FAIL")
    print(f"{verdict}: {opts.block} on {opts.part}: {rep['lut4']} LUT4, {rep['ff']} FF, "
          f"{rep['bram_used']} BRAM, {rep['dsp_used']} DSP; Fmax {fmax} MHz (required {opts.freq_mhz:g})"
          + ("" if fits else f"; over capacity: {', '.join(rep['overflows'])}")
          + f"; report {opts.out}/report.json")
    return 0 if verdict != "FAIL" else 1
