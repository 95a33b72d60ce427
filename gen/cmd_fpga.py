"""``python -m gen fpga``: FPGA builds with the open YoWASP toolchain.

``--list-boards`` prints the boards and their parts; ``--board NAME``
builds the board's self-checking top (``--program`` then programs it);
``--ooc --block B`` builds one block out of context. Both write
``report.json`` (utilization, Fmax per clock, whether timing was met).
Parses into :class:`gen.fpga_board.BoardOptions` / :class:`gen.fpga.OocOptions`
and calls :func:`gen.fpga_board.build_board` / :func:`gen.fpga.build_ooc`.
"""
from __future__ import annotations

import json
import statistics
import sys

NAME = "fpga"
HELP = "FPGA builds with YoWASP Yosys/nextpnr: list boards, build a board or a block out of context"
ORDER = 55


def add_arguments(p):
    from gen.fpga import OOC_BLOCKS, OOC_FAMILY_DEFAULTS, OocOptions
    d = OocOptions()
    from gen.fpga_board import BoardOptions
    bd = BoardOptions()
    p.add_argument("--list-boards", action="store_true", help="print the boards with their part and capacity")
    p.add_argument("--board", default=None, help="build this board's self-checking top (see --list-boards)")
    p.add_argument("--model", default=bd.model, help=f"model of the baked-in reshard (default {bd.model})")
    p.add_argument("--train", default=bd.train, help=f"training spec (default {bd.train})")
    p.add_argument("--rollout", default=bd.rollout, help=f"rollout spec (default {bd.rollout})")
    p.add_argument("--dtype", default=bd.dtype, help=f"bf16 | fp16 | fp32 (default {bd.dtype})")
    p.add_argument("--page-sizes", default=bd.page_sizes, help=f"page sizes (default {bd.page_sizes})")
    p.add_argument("--ooc", action="store_true", help="build one block out of context (needs --block)")
    p.add_argument("--block", default=d.block, choices=OOC_BLOCKS, help=f"block to build (default {d.block})")
    p.add_argument("--family", default=None, choices=sorted(OOC_FAMILY_DEFAULTS),
                   help="FPGA family for --ooc (default: the --part's; ecp5 without --part)")
    p.add_argument("--part", default=None,
                   help="FPGA part for --ooc (default: " + ", ".join(
                       f"{v[0]} for {k}" for k, v in OOC_FAMILY_DEFAULTS.items()) + ")")
    p.add_argument("--devices", type=int, default=d.devices, help=f"devices (default {d.devices})")
    p.add_argument("--bus-bits", type=int, default=d.bus_bits, help=f"data bus width (default {d.bus_bits})")
    p.add_argument("--channels", type=int, default=None, help=f"DMA channels (default {d.channels})")
    p.add_argument("--tlb-entries", type=int, default=d.tlb_entries, help=f"TLB entries (default {d.tlb_entries})")
    p.add_argument("--mem-bytes", type=int, default=None,
                   help=f"device memory bytes (default: {d.mem_bytes} for --ooc, just enough for a board)")
    p.add_argument("--freq-mhz", type=float, default=None,
                   help="clock constraint (--ooc: 100 on ECP5, 12 on iCE40; boards: 100 on ECP5 via the PLL, "
                        "the oscillator on iCE40)")
    p.add_argument("--out", default=None, help="output directory (default build/fpga/BOARD or build/fpga/ooc-BLOCK)")
    p.add_argument("--system-tools", action="store_true",
                   help="use yosys/nextpnr from PATH instead of the YoWASP packages")
    p.add_argument("--allow-timing-fail", action="store_true", help="a timing miss is a warning, not a failure")
    p.add_argument("--program", action="store_true",
                   help="program the board after building, with the programmer its amaranth-boards "
                        "platform calls (openFPGALoader, iceprog or dfu-util); building never needs it")
    p.add_argument("--time-limit-min", type=float, default=None,
                   help="stop the board's synthesis / place and route after this many minutes "
                        "(the report says it did not finish)")
    p.add_argument("--seed", type=int, default=bd.seed,
                   help="workload seed of the iCE40 subset (the DMA self-test)")
    p.add_argument("--pnr-seed", default=str(bd.pnr_seed),
                   help=f"nextpnr's placement seed (default {bd.pnr_seed}); a placement moves Fmax by "
                        "several MHz, so timing figures name their seed. A board build takes several, "
                        "N-M or N,M,...: one synthesis, a placement per seed, the best packed")
    p.add_argument("--pnr-jobs", type=int, default=None,
                   help="a board's placements at a time (default: one a core, at most one a seed)")
    p.add_argument("--router", default=None, choices=["router1", "router2"],
                   help="nextpnr's router for a board (default: router2 on ECP5, nextpnr's own on iCE40)")
    p.add_argument("--placer", default=None, choices=["heap", "static", "sa"],
                   help="nextpnr's placer (default: static for ECP5 boards, nextpnr's own, heap, for --ooc and iCE40)")
    p.add_argument("--no-floorplan", dest="floorplan", action="store_false",
                   help="let nextpnr place every block RAM (default: each device's block RAMs are "
                        "locked to its stripe of the die where the part has a site table)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args) -> int:
    from gen.fpga import BOARDS, OOC_FAMILY_DEFAULTS, PARTS, OocOptions, build_ooc, ooc_part
    from model.errors import InputError
    from gen.pnr_seeds import parse_seeds
    seeds = parse_seeds(args.pnr_seed)
    if args.pnr_jobs is not None and args.pnr_jobs < 1:
        raise InputError(f"--pnr-jobs must be 1 or more, not {args.pnr_jobs}")
    if args.list_boards:
        for b in BOARDS.values():
            p = PARTS[b.part]
            print(f"{b.name:<16} {p.name:<13} {p.family:<5} {p.lut4:>6} LUT4 {p.bram_blocks:>4} BRAM "
                  f"({p.bram_kbits} kbit) {p.dsp:>4} DSP  amaranth_boards.{b.module}.{b.cls}")
        return 0
    if args.board:
        return _board(args)
    if not args.ooc:
        raise InputError("give --board NAME, --ooc --block BLOCK or --list-boards")
    if len(seeds) > 1:
        raise InputError(f"--pnr-seed {args.pnr_seed}: several seeds are for --board builds; "
                         "--ooc places once")
    d = OocOptions()
    p = ooc_part(args.family, args.part)
    opts = OocOptions(block=args.block, part=p.name, bus_bits=args.bus_bits,
                      channels=args.channels or d.channels, tlb_entries=args.tlb_entries,
                      mem_bytes=args.mem_bytes or d.mem_bytes, devices=args.devices,
                      freq_mhz=args.freq_mhz or OOC_FAMILY_DEFAULTS[p.family][1],
                      out=args.out or f"build/fpga/ooc-{args.block}",
                      system_tools=args.system_tools, placer=args.placer, pnr_seed=seeds[0])
    print(f"fpga: {opts.block} out of context on {opts.part} at {opts.freq_mhz:g} MHz ...",
          file=sys.stderr, flush=True)
    rep = build_ooc(opts)
    if args.json:
        json.dump(rep, sys.stdout, indent=1)
        print()
    fmax = rep["min_fmax_mhz"]
    met = rep["timing_met"]
    fits = not rep["overflows"]
    _print_critical_path(rep)
    verdict = "PASS" if met and fits else ("WARN" if fits and args.allow_timing_fail else "FAIL")
    print(f"{verdict}: {opts.block} on {opts.part}: {rep['lut4']} LUT4, {rep['ff']} FF, "
          f"{rep['bram_used']} BRAM, {rep['dsp_used']} DSP; "
          + (f"Fmax {fmax} MHz (required {opts.freq_mhz:g})" if rep["placed"]
             else f"not placed (required {opts.freq_mhz:g} MHz)")
          + ("" if fits else f"; over capacity: {', '.join(rep['overflows'])}")
          + (f"; the totals include its three-pin harness's {h['ff']} FF and {h['lut4']} LUT4"
             if (h := rep.get("harness")) else "")
          + f"; report {opts.out}/report.json")
    return 0 if verdict != "FAIL" else 1


def _board(args) -> int:
    from gen.fpga_board import BoardOptions, build_board
    opts = BoardOptions(board=args.board, model=args.model, train=args.train, rollout=args.rollout,
                        dtype=args.dtype, bus_bits=args.bus_bits, channels=args.channels,
                        tlb_entries=args.tlb_entries, mem_bytes=args.mem_bytes, page_sizes=args.page_sizes,
                        freq_mhz=args.freq_mhz, out=args.out, allow_timing_fail=args.allow_timing_fail,
                        system_tools=args.system_tools, program=args.program, seed=args.seed,
                        router=args.router, placer=args.placer, floorplan=args.floorplan,
                        pnr_seed=args.pnr_seed, pnr_jobs=args.pnr_jobs,
                        time_limit_s=args.time_limit_min * 60 if args.time_limit_min else None)
    rep = build_board(opts, progress=lambda m: print(f"fpga: {m}", file=sys.stderr, flush=True))
    if args.json:
        json.dump(rep, sys.stdout, indent=1)
        print()
    _print_critical_path(rep)
    _print_seeds(rep)
    print(board_verdict(rep, allow_timing_fail=args.allow_timing_fail))
    return 0 if board_passed(rep, allow_timing_fail=args.allow_timing_fail) else 1


def _print_critical_path(rep, signals: int = 8) -> None:
    """The worst path of each clock, and the signals with endpoints that miss
    the clock (the worst ``signals`` of them), on standard error (what to
    pipeline next)."""
    for cp in rep.get("critical_paths", []):
        if "<async>" in (cp["from"], cp["to"]):     # pin to flip-flop: not the design's clock
            continue
        print(f"fpga: critical path {cp['delay_ns']} ns ({cp['logic_cells']} logic cells, "
              f"{cp['routing_ns']} ns routing): {' -> '.join(cp['cells'])}",
              file=sys.stderr, flush=True)
    fe = rep.get("failing_endpoints") or {}
    if fe.get("endpoints"):
        tiles = "median_longest_hop_tiles" in fe     # the placed netlist was read
        over = (f" over {fe['median_longest_hop_tiles']} tiles (a detour, twice nextpnr's estimate "
                f"for its distance or more, in {fe['detours']} path{'' if fe['detours'] == 1 else 's'})"
                if tiles else "")
        print(f"fpga: {fe['endpoints']} endpoints miss {fe['constraint_mhz']:g} MHz (by "
              f"{fe['tns_ns']:g} ns in all), in {fe['signals']} signals; routing is "
              f"{fe['median_routing_share']:.0%} of the median one, its longest hop "
              f"{fe['median_longest_hop_ns']} ns{over}; the worst (endpoints, ns, of it routing, "
              f"longest hop{', its tiles' if tiles else ''}, cells, signal):", file=sys.stderr)
        for g in fe["worst_signals"][:signals]:
            hop_tiles = g.get("longest_hop_tiles")
            print(f"fpga:   {g['endpoints']:5d} {g['worst_ns']:6.2f} {g['routing_ns']:6.2f} "
                  f"{g['longest_hop_ns']:5.2f}"
                  + (f" {'?' if hop_tiles is None else hop_tiles:>3}" if tiles else "")
                  + f" {g['cells']:3d}  {g['signal']}", file=sys.stderr)


def _print_seeds(rep) -> None:
    """With several placements: each seed's figures, and which was packed."""
    seeds = rep.get("nextpnr_seeds") or []
    if len(seeds) < 2:
        return
    for s in seeds:
        figures = (f"{s['fmax_mhz']} MHz, {s['failing_endpoints']} endpoints miss the clock by "
                   f"{s['tns_ns']} ns in all" if s["finished"] and s["fmax_mhz"] else "did not finish")
        print(f"fpga: seed {s['seed']:3d}: {figures}" + ("  <- packed" if s["seed"] == rep["nextpnr_seed"]
                                                         and rep["built"] else ""), file=sys.stderr)
    from gen.pnr_seeds import placed_fmax
    fmax = placed_fmax(seeds)
    if fmax:
        print(f"fpga: {len(fmax)} placements of one netlist: Fmax {fmax[0]} to {fmax[-1]} MHz, "
              f"median {round(statistics.median(fmax), 2)} MHz", file=sys.stderr)


def board_passed(rep, *, allow_timing_fail=False) -> bool:
    """Built, fits, and met timing (or a timing miss is allowed)."""
    return bool(rep["built"] and not rep["overflows"]
                and (allow_timing_fail or (rep["timing_met"] and rep["fmax_mhz"])))


def board_verdict(rep, *, allow_timing_fail=False) -> str:
    """One line: PASS / WARN / FAIL with the numbers."""
    fits = rep["built"] and not rep["overflows"]
    met = rep["timing_met"] and rep["fmax_mhz"]
    verdict = "PASS" if fits and met else ("WARN" if fits and allow_timing_fail else "FAIL")
    what = f"{rep['board']} ({rep['part']})" + (f", subset: {rep['subset']}" if rep.get("subset") else "")
    if not rep["built"]:
        return (f"FAIL: {what}: {rep['status']}; nothing built"
                + (f"; over capacity: {', '.join(rep['overflows'])}" if rep["overflows"] else "")
                + f"; report {rep.get('report', 'report.json')}")
    fmax = rep["min_fmax_mhz"]
    return (f"{verdict}: {what}: {rep['lut4']} LUT4 ({rep['logic_cells']} logic cells) of "
            f"{rep['capacity']['lut4']}, {rep['ff']} FF, {rep['bram_used']} BRAM of "
            f"{rep['capacity']['bram']}, {rep['dsp_used']} DSP; Fmax {fmax} MHz (required "
            f"{rep['constraint_mhz_requested']:g}, timing {'met' if met else 'missed'})"
            + ("" if not rep["overflows"] else f"; over capacity: {', '.join(rep['overflows'])}")
            + f"; expects '{rep['expected']['uart_line']}'; bitstream {rep['bitstream']}"
            + ("; programmed" if rep.get("programmed") else ""))
