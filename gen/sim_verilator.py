"""Run compiled programs on the emitted Verilog under Verilator.

The system top is emitted for the program's architecture (``gen.verilog``),
the plain Verilog testbench of :mod:`gen.testbench` loads the program and
memory images with ``$readmemh`` through the host ports, and the compiled
simulator (cached under ``build/verilator/``) runs with no Python in the
loop. This module only starts it and reads back what it printed and dumped,
into the same :class:`gen.result.RunResult` as the golden model and the
Amaranth simulator.
"""
from __future__ import annotations

import re
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from gen.hexfile import read_hex_bytes
from gen.result import RunResult
from hw.hostport import decode
from hw.isa import Cause, Status
from model.errors import InputError

TOP = "reshard_system"


EMIT_CACHE = Path(__file__).resolve().parent.parent / "build" / "verilog-cache"


def _design_key(arch, bus_bits: int) -> str:
    """Hash of everything the emitted system depends on: parameters and the generator sources."""
    import hashlib
    import json
    h = hashlib.sha256(json.dumps([arch.to_json(), bus_bits]).encode())
    root = Path(__file__).resolve().parent.parent
    for f in sorted((root / "hw").rglob("*.py")) + [root / "gen" / "verilog.py"]:
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:16]


def system_sources(arch, bus_bits: int, progress=lambda m: None) -> list[tuple[str, str]]:
    """(file name, text) of the system Verilog and its testbench for this architecture.

    The emitted system is cached by a hash of the parameters and the hardware
    sources (emitting a system with megabyte memories takes Amaranth a while).
    """
    from gen.testbench import TB_MODULE, generate
    from gen.verilog import EmitParams, emit, tops
    top = tops()["system"]
    cached = EMIT_CACHE / f"{_design_key(arch, bus_bits)}.v"
    if cached.is_file():
        design = cached.read_text()
    else:
        progress(f"emitting Verilog for {arch.devices} devices, {arch.mem_bytes:,} B memories, "
                 f"{bus_bits}-bit bus")
        design = emit(top, EmitParams(arch, bus_bits))
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(".tmp")
        tmp.write_text(design)
        tmp.replace(cached)
    tb = generate(arch.devices, bus_bits, arch.mem_bytes, arch.imem_words, arch.tlb_entries,
                  arch.channels, top=top.module)
    from hw.memory import SRAM_VERILOG
    return [("reshard_system.v", design), ("reshard_sram.v", SRAM_VERILOG), (f"{TB_MODULE}.v", tb)]


def build_simulator(arch, bus_bits: int, progress=lambda m: None) -> tuple[Path, bool]:
    from gen.testbench import TB_MODULE
    from gen.verilator import build_binary
    return build_binary(system_sources(arch, bus_bits, progress), TB_MODULE, progress=progress)


_DEV = re.compile(r"^DEV (\d+) (.*)$")
_KV = re.compile(r"(\w+)=(-?\d+)")


def parse_output(lines: list[str], arch, bus_bits: int, out_dir: Path) -> RunResult:
    D = arch.devices
    p0_bits = arch.page_sizes[0].bit_length() - 1
    dev: list[dict] = [{} for _ in range(D)]
    faults, tlbs = [], [[] for _ in range(D)]
    tb_cycles = None
    for ln in lines:
        if ln.startswith("CYCLES "):
            tb_cycles = int(ln.split()[1])
        elif ln.startswith("TIMEOUT"):
            raise InputError(f"Verilator run did not finish: {ln}")
        elif ln.startswith("ERROR"):
            raise InputError(f"Verilator testbench: {ln}")
        elif m := _DEV.match(ln):
            dev[int(m.group(1))].update({k: int(v) for k, v in _KV.findall(m.group(2))})
        elif ln.startswith("FAULT "):
            d = int(ln.split()[1])
            kv = {k: int(v) for k, v in _KV.findall(ln)}
            info = decode("FAULT_INFO", kv["info"])       # hostport decoders
            faults.append({"device": d, "channel": info["chan"], "ctx": info["ctx"],
                           "va": kv.get("va_hi", 0) << 32 | kv["va"],
                           "cause": Cause(info["cause"]).name})
        elif ln.startswith("TLB "):
            d = int(ln.split()[1])
            kv = {k: int(v) for k, v in _KV.findall(ln)}
            info = decode("TLB_INFO", kv["info"])         # hostport decoders
            tlbs[d].append({"index": kv["index"], "ctx": info["ctx"], "staged": info["staged"],
                            "size": info["size"], "va": kv["vpn"] << p0_bits, "pa": kv["ppn"] << p0_bits,
                            "dev": info["dev"], "perm": info["perm"]})
    if tb_cycles is None:
        raise InputError("Verilator run printed no cycle count: " + " | ".join(lines[-3:]))
    mems = [np.frombuffer(read_hex_bytes(out_dir / f"dev{d}.mem.hex", bus_bits, arch.mem_bytes), np.uint8).copy()
            for d in range(D)]
    chans = arch.channels
    per_dev_cycles = [dev[d]["cycles_lo"] | (dev[d]["cycles_hi"] << 32) for d in range(D)]
    return RunResult(
        "verilator", mems, tlbs,
        status=[dev[d]["status"] for d in range(D)],
        cause=[dev[d]["cause"] for d in range(D)],
        pc=[dev[d]["pc"] for d in range(D)],
        faults=faults,
        bytes_copied=[sum(dev[d][f"chan{c}_bytes"] for c in range(chans)) for d in range(D)],
        descriptors=[dev[d]["descriptors"] for d in range(D)],
        bytes_remapped=[dev[d]["bytes_remapped_lo"] | (dev[d]["bytes_remapped_hi"] << 32) for d in range(D)],
        fault_overflow=[dev[d]["fault_overflow"] for d in range(D)],
        cycles_per_device=per_dev_cycles, tb_cycles=tb_cycles)


def _run_binary(binary: Path, prog_dir: Path, out_dir: Path, arch, bus_bits: int, progress,
                max_cycles: int | None) -> RunResult:
    argv = [str(Path(binary).resolve()), f"+dir={Path(prog_dir).resolve()}", f"+out={out_dir.resolve()}"]
    if max_cycles:
        argv.append(f"+max_cycles={max_cycles}")
    lines: list[str] = []
    t_loaded = t_done = None
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=out_dir)
    for ln in proc.stdout:
        ln = ln.rstrip("\n")
        lines.append(ln)
        if ln == "LOADED":
            t_loaded = time.perf_counter()
            progress("verilator: images loaded through the host ports, running")
        elif ln.startswith("CYCLES "):
            t_done = time.perf_counter()
            progress(f"verilator: {ln.split()[1]} cycles; reading back")
    rc = proc.wait()
    if rc:
        raise InputError(f"Verilator simulator exited with status {rc}: {' | '.join(lines[-3:])}")
    res = parse_output(lines, arch, bus_bits, out_dir)
    run_s = (t_done - t_loaded) if (t_loaded and t_done) else None
    res.sim_cycles_per_s = res.tb_cycles / run_s if run_s else 0.0
    return res


def run_programs(arch, bus_bits: int, programs, memories, progress=None,
                 max_cycles: int | None = None) -> RunResult:
    """Run raw programs and memories (no compiled directory) on the emitted Verilog."""
    from gen.hexfile import write_hex
    from hw.isa import WORD_BITS
    progress = progress or (lambda m: None)
    binary, _ = build_simulator(arch, bus_bits, progress)
    with tempfile.TemporaryDirectory(prefix="reshard-vl-") as tmp:
        work = Path(tmp)
        for d, (prog, mem) in enumerate(zip(programs, memories)):
            (work / f"dev{d}").mkdir()
            write_hex(work / f"dev{d}" / "program.hex", list(prog) or [0], WORD_BITS)
            write_hex(work / f"dev{d}" / "mem_init.hex", bytes(mem).ljust(arch.mem_bytes, b"\0"), bus_bits)
        return _run_binary(binary, work, work, arch, bus_bits, progress, max_cycles)


def run_verilator(loaded, progress=None, max_cycles: int | None = None,
                  keep: Path | None = None) -> RunResult:
    """Run a compiled directory on the emitted Verilog; its :class:`gen.result.RunResult`."""
    progress = progress or (lambda m: None)
    t0 = time.perf_counter()
    bus_bits = loaded.manifest["bus_bits"]
    binary, cached = build_simulator(loaded.arch, bus_bits, progress)
    t_build = time.perf_counter() - t0
    progress(f"simulator {'cached' if cached else 'built'}: {binary} ({t_build:.1f} s)")
    out_dir = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="reshard-vl-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    res = _run_binary(binary, Path(loaded.path), out_dir, loaded.arch, bus_bits, progress, max_cycles)
    from gen.sim_amaranth import lower_bound_cycles
    res.lower_bound_cycles = lower_bound_cycles(loaded.manifest)
    res.build_seconds, res.build_cached = t_build, cached
    res.seconds = time.perf_counter() - t0
    return res
