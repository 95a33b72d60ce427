"""Board builds (``python -m gen fpga --board NAME``): a board's
self-checking top, checked under Verilator, then synthesized, placed, routed
and packed with the tools of :mod:`gen.fpga`.

* :func:`build_board`: the full D-device system with one compiled reshard on
  ECP5, the :data:`SUBSET` (:class:`hw.dma_selftest.DmaSelfTest`) on the
  iCE40UP5K, under an optional time limit; ``report.json`` beside the
  bitstream, written even when the design misses timing or does not fit;
* :func:`simulate_board_verilator` and :func:`parse_verdict`: the top's UART
  verdict line, from Verilator, before anything is built.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from model.errors import InputError
from .fpga import (PARTS, Board, Implementation, Part, _unplaced, _yosys_cells, board,
                   programmer_path, read_nextpnr_report, tool_versions, toolchain_env,
                   write_report)
from .pnr_seeds import parse_seeds, run_seeds
from .sdf_timing import endpoints_report

__all__ = ["BoardOptions", "build_board", "SUBSET", "subset_case", "parse_verdict",
           "simulate_board_verilator", "board_reshard", "board_top"]


@dataclass
class BoardOptions:
    """A board build (``python -m gen fpga --board NAME``): one compiled
    reshard baked into a self-checking top (:class:`hw.board.BoardTop`)."""
    board: str = "ulx3s-85f"
    model: str = "micro-qwen2"
    train: str = "fsdp2:dp=2"
    rollout: str = "vllm:tp=2"
    dtype: str = "bf16"
    bus_bits: int = 32
    channels: int | None = None
    tlb_entries: int | None = 16
    mem_bytes: int | None = None
    page_sizes: str = "1K,4K,16K,64K"
    freq_mhz: float | None = None      # None: 100 MHz on ECP5 (PLL), the oscillator on iCE40
    baud: int = 115200
    out: str | None = None
    allow_timing_fail: bool = False
    system_tools: bool = False
    program: bool = False               # program the board after building (needs its programmer)
    time_limit_s: float | None = None   # stop the tools after this long; the report says so
    seed: int = 0                       # the iCE40 subset's self-test workload
    router: str | None = None           # nextpnr's --router; None: router2 on ECP5, else its default
    placer: str | None = None           # nextpnr's --placer; None: static on ECP5, else its default
    floorplan: bool = True              # lock each device's block RAMs to its stripe (gen.floorplan)
    pnr_seed: int | str = 1             # nextpnr's --seed: N, A-B or a comma list (gen.pnr_seeds)
    pnr_jobs: int | None = None         # placements at a time (None: one a core, at most one a seed)

    def out_dir(self) -> Path:
        return Path(self.out or f"build/fpga/{self.board}")


def board_reshard(opts: BoardOptions, progress=lambda m: None):
    """Compile the reshard the board runs (:class:`gen.api.CompiledReshard`)."""
    from gen.api import CompileOptions, compile_reshard
    return compile_reshard(CompileOptions(model=opts.model, train=opts.train, rollout=opts.rollout,
                                          dtype=opts.dtype, bus_bits=opts.bus_bits,
                                          channels=opts.channels, tlb_entries=opts.tlb_entries,
                                          mem_bytes=opts.mem_bytes, page_sizes=opts.page_sizes,
                                          shared_build=False),
                           progress)


def board_top(compiled, *, uart_divisor: int, shared_write: bool = True,
              shared_read: bool = True, registered_memory: bool = True):
    """The self-checking top for a compiled reshard (images required). Each
    device memory's writers share one write port (``shared_write``), as the
    FPGA's block RAM has one, and its readers one read port (``shared_read``:
    each more read port would be a copy of the block RAMs); the block RAMs
    sit behind registers (``registered_memory``), as a word's bits lie in
    block RAMs across the part."""
    import zlib
    from hw.board import BoardTop
    if compiled.memories is None:
        raise InputError("the board needs memory images; compile without --device")
    return BoardTop(compiled.arch, data_width=compiled.bus_bits,
                    programs=[d.words for d in compiled.devices], memories=compiled.memories,
                    expected_crc=zlib.crc32(b"".join(compiled.expected)), uart_divisor=uart_divisor,
                    shared_write=shared_write, shared_read=shared_read,
                    registered_memory=registered_memory)


_BOARD_TB = """\
`timescale 1ns/1ps
// Runs the board top until it prints its verdict line on the UART, decoding
// 8N1 frames at DIVISOR clocks per bit; prints the line and finishes.
module board_tb;
  reg clk = 0, rst = 1;
  wire tx, led_pass, led_fail;
  board dut(.clk(clk), .rst(rst), .rerun(1'b0), .tx(tx), .led_pass(led_pass), .led_fail(led_fail));
  always #5 clk = ~clk;
  integer i; reg [7:0] b; reg [63:0] cycles = 0;
  always @(posedge clk) begin
    cycles <= cycles + 1;
    if (cycles > LIMIT) begin $display("TIMEOUT"); $finish; end
  end
  initial begin
    repeat (2) @(posedge clk); rst = 0;
    forever begin
      @(negedge tx);
      repeat (DIVISOR / 2) @(posedge clk);
      for (i = 0; i < 8; i = i + 1) begin repeat (DIVISOR) @(posedge clk); b[i] = tx; end
      repeat (DIVISOR) @(posedge clk);
      $write("%c", b);
      if (b == 8'h0a) begin $display("LEDS pass=%0d fail=%0d", led_pass, led_fail); $finish; end
    end
  end
endmodule
"""


def simulate_board_verilator(top, *, divisor: int, limit: int = 50_000_000,
                             progress=lambda m: None) -> tuple[str, dict]:
    """Run the board top's Verilog under Verilator until its verdict line:
    ``(line, {led_pass, led_fail})``."""
    from amaranth.back import verilog
    from gen.verilator import build_binary
    design = verilog.convert(top, name="board", emit_src=False)
    tb = (_BOARD_TB.replace("DIVISOR", str(divisor)).replace("LIMIT", str(limit)))
    exe, _ = build_binary([("board.v", design), ("board_tb.v", tb)], "board_tb", progress=progress)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=3600)
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    verdict = next((ln for ln in lines if ln.startswith(("PASS", "FAIL"))), None)
    leds = next((ln for ln in lines if ln.startswith("LEDS")), "")
    if verdict is None:
        raise RuntimeError(f"the board top printed no verdict: {r.stdout[-500:]!r}")
    return verdict.strip(), {k: int(v) for k, v in (kv.split("=") for kv in leds.split()[1:])}


def parse_verdict(line: str) -> dict:
    """``PASS cycles=9426 crc=1c291ca3`` -> ``{passed, cycles, crc}``."""
    word, cycles, crc = line.split()
    return {"passed": word == "PASS", "cycles": int(cycles.split("=")[1]),
            "crc": int(crc.split("=")[1], 16)}


def _board_freq(opts: BoardOptions, b: Board, p: Part) -> float:
    if opts.freq_mhz is not None:
        if p.family != "ecp5":
            raise InputError(f"--freq-mhz: {b.name} runs at its oscillator (no PLL support for {p.family})")
        return opts.freq_mhz
    return 100.0 if p.family == "ecp5" else b.platform().default_clk_frequency / 1e6


SUBSET = "DMA + memory + self-test, not the full device"


def subset_case(opts: BoardOptions, p: Part):
    """The workload of the subset top for a part that cannot hold a device
    (:func:`gen.dma_selftest.dma_selftest_case`)."""
    from gen.dma_selftest import dma_selftest_case
    if opts.bus_bits != 32:
        raise InputError(f"--bus-bits {opts.bus_bits}: the {p.name} subset (the DMA self-test) "
                         f"has a 32-bit bus")
    try:
        return dma_selftest_case(mem_bytes=opts.mem_bytes or 4096, channels=opts.channels or 4,
                                 seed=opts.seed)
    except ValueError as e:
        raise InputError(f"the {p.name} subset: {e}") from None


def _subset_workload(opts: BoardOptions, p: Part):
    """``(make_top(divisor), report fields)`` of the DMA self-test subset."""
    from hw.dma_selftest import DmaSelfTest
    case = subset_case(opts, p)

    def make_top(divisor):
        return DmaSelfTest(case.arch, image=case.image, descriptors=case.descriptors,
                           expected_crc=case.expected_crc, uart_divisor=divisor)
    fields = {
        "kind": "board-subset", "subset": SUBSET, "full_device": False,
        "why_subset": (f"a device (MMU + DMA + coprocessor + memories) does not fit the {p.name}'s "
                       f"{p.lut4} logic cells: out of context on ECP5 the MMU, DMA and coprocessor "
                       f"alone take about 6,500 LUT4"),
        "reshard": None,
        "workload": {"what": "DMA COPY descriptors (1-D and 2-D, unaligned) on one memory, identity "
                             "translation; expected image from the golden model",
                     "descriptors": len(case.descriptors), "bytes_copied": case.bytes_copied,
                     "channels": case.arch.channels, "mem_bytes": case.arch.mem_bytes,
                     "bus_bits": 32, "seed": opts.seed},
        "checker": "the memory reloaded from an image ROM, the descriptors run from a descriptor "
                   "ROM, the memory read back into a CRC-32 (zlib) compared with the golden "
                   "model's; fails on a mismatch or any DMA fault",
    }
    return make_top, fields


def _device_workload(opts: BoardOptions, progress):
    """``(make_top(divisor), report fields)`` of the full D-device system."""
    compiled = board_reshard(opts, progress)
    progress(f"board top: {compiled.arch.devices} devices, {compiled.arch.mem_bytes:,} B memories, "
             f"{opts.bus_bits}-bit bus")
    fields = {
        "kind": "board", "subset": None, "full_device": True,
        "reshard": {"model": compiled.source["model"], "train": compiled.source["train"],
                    "rollout": compiled.source["rollout"], "dtype": opts.dtype,
                    "devices": compiled.arch.devices, "mem_bytes": compiled.arch.mem_bytes,
                    "bus_bits": opts.bus_bits, "arch": compiled.arch.to_json()},
        "checker": "CRC-32 (zlib) of every device's memory read back through the host port, "
                   "every STATUS HALTED, every AXI response OKAY",
    }
    return (lambda divisor: board_top(compiled, uart_divisor=divisor)), fields


def _add_floorplan(plan, name: str, part: Part, devices: int) -> str | None:
    """Insert :mod:`gen.floorplan` between synthesis and place and route in
    ``plan``'s build script when ``part`` has a block RAM site table and the
    top has two devices or more; returns what the report says of it."""
    from gen.floorplan import EBR_SITES
    if part.name not in EBR_SITES or devices < 2:
        return None
    script = f"{plan.script}.sh"
    lines = plan.files[script].splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith('"$YOSYS"')) + 1
    lines.insert(at, f'"{sys.executable}" -m gen.floorplan_worker {name}.json '
                     f'--part {part.name} --devices {devices}\n')
    plan.files[script] = "".join(lines)
    return f"each device's block RAMs locked to its 1/{devices} of the die (gen.floorplan)"


def _run_build_script(plan, out: Path, env: dict, time_limit_s, progress, *, seeds=(1,), jobs=1,
                      judge=lambda result: None):
    """Extract ``plan`` into ``out`` and run its build script, synthesis once
    and place and route once per seed (:func:`gen.pnr_seeds.run_seeds`; tool
    output in ``build.log`` and ``seeds/sN/``), stopping every process group
    after ``time_limit_s``. Returns ``(products, status, results, best)``:
    status ``"built"``, ``"failed"`` or ``"timeout"``, each seed's
    :class:`gen.pnr_seeds.SeedResult` and the one packed."""
    from amaranth.build.run import LocalBuildProducts
    build_dir = Path(plan.extract(str(out)))
    script = (build_dir / f"{plan.script}.sh").read_text()
    status, results, best = run_seeds(build_dir, script, list(seeds), env=env, judge=judge, jobs=jobs,
                                      time_limit_s=time_limit_s, progress=progress)
    return (LocalBuildProducts(str(build_dir)) if status == "built" else None), status, results, best


def build_board(opts: BoardOptions, progress=lambda m: None) -> dict:
    """Check the board top under Verilator (it must print PASS), then
    synthesize, place and route it for the board and pack the bitstream;
    with ``opts.program``, program the board. Returns the report, also
    written as ``report.json`` beside the bitstream (written even when the
    design misses timing, does not fit or runs out of time).

    ECP5 boards get the full D-device system with a compiled reshard baked
    in; the iCE40UP5K (icebreaker) cannot hold a device and gets the subset
    :data:`SUBSET` (:class:`hw.dma_selftest.DmaSelfTest`), which the report
    says (``kind``, ``subset``, ``full_device``)."""
    from hw.board import BoardPins
    b = board(opts.board)
    p = PARTS[b.part]
    if opts.program:
        programmer_path(b)                    # fail now, not after the build
    freq = _board_freq(opts, b, p)
    seeds = parse_seeds(opts.pnr_seed)
    env = toolchain_env(p.family, system=opts.system_tools)
    out = opts.out_dir()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    make_top, fields = (_subset_workload(opts, p) if p.family == "ice40"
                        else _device_workload(opts, progress))
    divisor = max(2, round(freq * 1e6 / opts.baud))
    progress("checking the top under Verilator first ...")
    sim_line, _ = simulate_board_verilator(make_top(4), divisor=4, progress=progress)
    sim = parse_verdict(sim_line)
    if not sim["passed"]:
        raise RuntimeError(f"the board top fails in simulation: {sim_line}")
    what = "the subset (" + SUBSET + ")" if fields["subset"] else "the full system"
    progress(f"simulated verdict: {sim_line}; building {what} for {b.name} ({p.name}) at {freq:g} MHz"
             + (f", time limit {opts.time_limit_s / 60:g} min" if opts.time_limit_s else "") + " ...")
    # router2 routes the 2-device ECP5 tops in minutes where router1 (nextpnr's
    # default) took 21 minutes or did not converge (docs/fpga.md)
    router = opts.router or ("router2" if p.family == "ecp5" else None)
    # the static (electrostatic) placer spreads the 2-device ECP5 tops less
    # than HeAP: 67.1 against 52.7 MHz on the same netlist, in half the time
    placer = opts.placer or ("static" if p.family == "ecp5" else None)
    platform = b.platform()
    plan = platform.build(BoardPins(make_top(divisor), freq_mhz=freq), name="top", build_dir=str(out),
                          do_build=False, nextpnr_opts=["--report", "top_report.json",
                                                        "--sdf", "top.sdf",
                                                        "--write", "top_placed.json",
                                                        "--timing-allow-fail", "--seed", str(seeds[0])]
                          + (["--router", router] if router else [])
                          + (["--placer", placer] if placer else []))
    devices = (fields.get("reshard") or {}).get("devices", 0)
    floorplan = _add_floorplan(plan, "top", p, devices) if opts.floorplan else None
    # the build script also runs each board's packer; programming tools are not called
    env = dict(env, DFU_SUFFIX="true")
    if floorplan:                             # gen.floorplan importable from the build directory
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    for stale in ("top_report.json", "top.bit", "top.bin", "top.rpt", "top.sdf", "top.tim", "top.config",
                  "top.asc", "top_placed.json"):
        (out / stale).unlink(missing_ok=True)
    shutil.rmtree(out / "seeds", ignore_errors=True)

    def judge(r):                             # one placement's figures, from its own directory
        if (r.directory / "top_report.json").exists():
            seed_impl = read_nextpnr_report(r.directory / "top_report.json", p.name)
            r.fmax_mhz, r.timing_met = seed_impl.min_fmax_mhz, seed_impl.timing_met
            r.failing = endpoints_report(r.directory / "top.sdf", freq, r.fmax_mhz,
                                         r.directory / "top_placed.json")
            r.endpoints, r.tns_ns = r.failing.get("endpoints"), r.failing.get("tns_ns")

    jobs = opts.pnr_jobs or min(len(seeds), os.cpu_count() or 1)
    t_build = time.perf_counter()
    products, status, placements, best = _run_build_script(plan, out, env, opts.time_limit_s, progress,
                                                           seeds=seeds, jobs=jobs, judge=judge)
    build_seconds = round(time.perf_counter() - t_build, 1)
    impl = (read_nextpnr_report(out / "top_report.json", p.name)
            if (out / "top_report.json").exists() else None)
    if impl is not None and status == "built":
        impl.failing_endpoints = best.failing
    if impl is None:                          # nextpnr stopped: what its log says it needed
        tim = out / "top.tim"
        impl = ((tim.exists() and _unplaced(tim.read_text(), p.name))
                or Implementation(part=p.name, placed=False))
    log = out / "top.rpt"                     # the Yosys log, with its final stat
    if log.exists():
        text = log.read_text()
        impl.lut4 = _yosys_cells(text, "LUT4" if p.family == "ecp5" else "SB_LUT4")
        impl.ff = _yosys_cells(text, "TRELLIS_FF" if p.family == "ecp5" else r"SB_DFF\w*")
    bitstream = next((str(out / f) for f in ("top.bit", "top.bin") if (out / f).exists()), None)
    if status == "timeout":
        status_text = f"did not finish within {opts.time_limit_s / 60:g} min (stopped)"
    else:
        status_text = status
    report = {
        **fields, "board": b.name, "part": p.name, "package": platform.package,
        "platform": f"amaranth_boards.{b.module}.{b.cls}", "built": status == "built",
        "status": status_text, "bitstream": bitstream,
        **impl.to_json(), "constraint_mhz_requested": freq,
        "capacity": {"lut4": p.lut4, "bram": p.bram_blocks, "dsp": p.dsp},
        "overflows": impl.overflows(p),
        "expected": {"cycles": sim["cycles"], "crc": f"{sim['crc']:08x}",
                     "uart_line": sim_line, "baud": opts.baud, "uart_divisor": divisor},
        "tools": tool_versions(env, p.family), "nextpnr_router": router or "default",
        "nextpnr_placer": placer or "default", "nextpnr_seed": best.seed if best else seeds[0],
        "nextpnr_seeds": [r.to_json() for r in placements], "nextpnr_jobs": jobs,
        "floorplan": floorplan or "none (placed freely)",
        "build_seconds": build_seconds,
        "total_seconds": round(time.perf_counter() - t0, 1),
        "programmed": False, "report": str(out / "report.json"),
    }
    write_report(out, report)
    if opts.program and status == "built":
        progress(f"programming {b.name} with {programmer_path(b)} ...")
        try:
            platform.toolchain_program(products, "top")
        except (OSError, subprocess.CalledProcessError) as e:
            raise InputError(f"--program: {b.programmer[0]} failed: {e}") from None
        report["programmed"] = True
        write_report(out, report)
    return report

