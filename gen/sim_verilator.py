"""Run compiled programs on the emitted Verilog under Verilator.

The system top is emitted for the program's architecture (``gen.verilog``)
and compiled (cached under ``build/verilator/``) with one of two drivers:

- ``harness="cxx"`` (engine ``verilator``): the C++ harness of
  :mod:`gen.harness`, which clocks the design from a C++ loop and moves raw
  binary images straight into and out of the SRAM model;
- ``harness="tb"`` (engine ``verilator-tb``): the plain Verilog testbench of
  :mod:`gen.testbench` (``--timing``, ``$readmemh`` text images), the one
  users of other simulators take.

Both load programs through the host ports, run with no Python in the loop
and print the same lines; this module only starts the simulator and reads
back what it printed and dumped into a :class:`gen.result.RunResult`.
``RESHARD_VERILATOR_PGO=1`` builds the C++ harness with profile-guided
optimisation, profiled on the program it is built to run (``run_verilator``).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from gen.hexfile import read_hex_bytes
from gen.resources import exclusive
from gen.result import RunResult
from hw.hostport import decode
from hw.isa import Cause
from model.errors import InputError

TOP = "reshard_system"
HARNESSES = ("cxx", "tb")
#: the C++ harness prints a progress line every this many cycles
PROGRESS_CYCLES = 1 << 20


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


def system_sources(arch, bus_bits: int, progress=lambda m: None,
                   harness: str = "tb") -> list[tuple[str, str]]:
    """(file name, text) of the system Verilog and its driver for this architecture.

    The emitted system is cached by a hash of the parameters and the hardware
    sources (emitting a system with megabyte memories takes Amaranth a while).
    """
    from gen.testbench import TB_MODULE, generate
    from gen.verilog import EmitParams, emit, tops
    if harness not in HARNESSES:
        raise InputError(f"unknown Verilator harness {harness!r}: use one of {', '.join(HARNESSES)}")
    top = tops()["system"]
    cached = EMIT_CACHE / f"{_design_key(arch, bus_bits)}.v"
    cached.parent.mkdir(parents=True, exist_ok=True)
    # one emission per design at a time: a second process (a pytest worker, a sweep
    # task) waits for the first one's file instead of emitting the same again
    with exclusive(cached.with_suffix(".lock")):
        if cached.is_file():
            design = cached.read_text()
        else:
            progress(f"emitting Verilog for {arch.devices} devices, {arch.mem_bytes:,} B memories, "
                     f"{bus_bits}-bit bus")
            design = emit(top, EmitParams(arch, bus_bits))
            tmp = cached.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(design)
            tmp.replace(cached)
    from gen.module_share import compile_shared_modules_once, share_identical_modules
    from hw.memory import SRAM_VERILOG
    # Verilator compiles each module name on its own: one module per set of identical
    # copies, each compiled once (not inlined into every instance)
    design, _ = share_identical_modules(design, top.module)
    design, _ = compile_shared_modules_once(design)
    if harness == "cxx":
        from gen import harness as cxx
        from gen.verilog_rewrite import next_state_into_clocked_blocks, payload_logic_under_valid
        design, _ = cxx.without_reset(design)       # the harness ties rst low
        # logic Verilator would evaluate every cycle, idle or not, moved under its conditions
        design, _ = payload_logic_under_valid(design)
        design, _ = next_state_into_clocked_blocks(design)
        return [("reshard_system.v", design), ("reshard_sram.v", SRAM_VERILOG),
                ("reshard_harness.v", cxx.wrapper(arch.devices, top.module)),
                ("harness.cpp", cxx.generate(arch.devices, arch.mem_bytes, arch.imem_words,
                                             arch.tlb_entries, arch.channels, PROGRESS_CYCLES)),
                ("public.vlt", cxx.CONFIG)]
    tb = generate(arch.devices, bus_bits, arch.mem_bytes, arch.imem_words, arch.tlb_entries,
                  arch.channels, top=top.module)
    return [("reshard_system.v", design), ("reshard_sram.v", SRAM_VERILOG), (f"{TB_MODULE}.v", tb)]


#: set to 1, the C++ harness is built with GCC's profile-guided optimisation, trained on
#: the first :data:`PGO_TRAIN_CYCLES` cycles of the program it is built to run
PGO_ENV = "RESHARD_VERILATOR_PGO"
PGO_TRAIN_CYCLES = 1 << 20


def pgo_requested() -> bool:
    return os.environ.get(PGO_ENV, "") == "1"


def _trainer(program_dir: Path):
    """``build_binary``'s ``train``: run the instrumented simulator on a compiled program."""
    def train(exe: Path):
        with tempfile.TemporaryDirectory(prefix="reshard-pgo-") as tmp:
            subprocess.run([str(exe), f"+dir={Path(program_dir).resolve()}", f"+out={tmp}",
                            f"+max_cycles={PGO_TRAIN_CYCLES}"], cwd=tmp,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return train


def build_simulator(arch, bus_bits: int, progress=lambda m: None, harness: str = "cxx",
                    train_dir: Path | None = None) -> tuple[Path, bool]:
    """(executable, was_cached) of the simulator of this architecture with this driver.

    With ``train_dir`` (a compiled program directory) the C++ harness is built
    with profile-guided optimisation, profiled on that program's first
    :data:`PGO_TRAIN_CYCLES` cycles (``gen.verilator.build_binary``'s ``train``).
    """
    from gen.verilator import build_binary, harness_flags
    sources = system_sources(arch, bus_bits, progress, harness)
    if harness == "cxx":
        from gen.harness import TOP as HARNESS_TOP
        flags = harness_flags(sum(len(text) for name, text in sources if name.endswith(".v")))
        return build_binary(sources, HARNESS_TOP, progress=progress, mode_flags=flags,
                            name="Vharness", train=_trainer(train_dir) if train_dir is not None else None)
    from gen.testbench import TB_MODULE
    return build_binary(sources, TB_MODULE, progress=progress)


_DEV = re.compile(r"^DEV (\d+) (.*)$")
_KV = re.compile(r"(\w+)=(-?\d+)")


def _final_memory(out_dir: Path, d: int, bus_bits: int, size: int) -> np.ndarray:
    """Device ``d``'s dumped final memory: the harness's raw binary or the testbench's hex."""
    binary = out_dir / f"dev{d}.mem.bin"
    if binary.is_file():
        if binary.stat().st_size != size:
            raise InputError(f"{binary}: {binary.stat().st_size:,} bytes dumped, the memory is {size:,}")
        return np.memmap(binary, np.uint8, mode="r", shape=(size,))
    return np.frombuffer(read_hex_bytes(out_dir / f"dev{d}.mem.hex", bus_bits, size), np.uint8).copy()


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
    mems = [_final_memory(out_dir, d, bus_bits, arch.mem_bytes) for d in range(D)]
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


class SimulationTimeout(InputError):
    """The run hit ``--max-cycles``; the final state was still read back and dumped."""


def _run_binary(binary: Path, prog_dir: Path, out_dir: Path, arch, bus_bits: int, progress,
                max_cycles: int | None, lower_bound: int | None = None) -> RunResult:
    argv = [str(Path(binary).resolve()), f"+dir={Path(prog_dir).resolve()}", f"+out={out_dir.resolve()}"]
    if max_cycles:
        argv.append(f"+max_cycles={max_cycles}")
    lines: list[str] = []
    t_loaded = run_ns = None
    timeout = None
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=out_dir)
    for ln in proc.stdout:
        ln = ln.rstrip("\n")
        if ln.startswith("PROGRESS "):
            n = int(ln.split()[1])
            rate = n / (time.perf_counter() - t_loaded) if t_loaded else 0
            of = f" of at least {lower_bound:,} ({100 * n / lower_bound:.0f}%)" if lower_bound else ""
            progress(f"verilator: {n:,} cycles{of}, {rate:,.0f} cycles/s")
            continue
        lines.append(ln)
        if ln == "LOADED":
            t_loaded = time.perf_counter()
            progress("verilator: programs loaded through the host ports, images in memory; running")
        elif ln.startswith("RUN_NS "):
            run_ns = int(ln.split()[1])
        elif ln.startswith("TIMEOUT"):
            timeout = ln
        elif ln.startswith("CYCLES "):
            progress(f"verilator: {int(ln.split()[1]):,} cycles; reading back")
    rc = proc.wait()
    if rc:
        raise InputError(f"Verilator simulator exited with status {rc}: {' | '.join(lines[-3:])}")
    if timeout:
        states = " | ".join(ln for ln in lines if ln.startswith("DEV ") and "status=" in ln)
        raise SimulationTimeout(f"Verilator run stopped by --max-cycles {max_cycles:,}: {states}; "
                                f"final state dumped in {out_dir}")
    res = parse_output(lines, arch, bus_bits, out_dir)
    # the harness's own clock around its cycle loop (no pipe in between)
    res.sim_cycles_per_s = res.tb_cycles / (run_ns / 1e9) if run_ns else 0.0
    return res


def _testbench_dir(work: Path, programs_from: Path, memories, bus_bits: int, size: int):
    """The Verilog testbench's input directory: program.hex and mem_init.hex per device."""
    from gen.artifacts import image_bytes
    from gen.hexfile import write_hex
    for d, mem in enumerate(memories):
        ddir = work / f"dev{d}"
        ddir.mkdir(parents=True, exist_ok=True)
        if programs_from != work:
            shutil.copy(programs_from / f"dev{d}" / "program.hex", ddir / "program.hex")
        write_hex(ddir / "mem_init.hex", image_bytes(mem, size), bus_bits)


def run_programs(arch, bus_bits: int, programs, memories, progress=None,
                 max_cycles: int | None = None, harness: str = "cxx") -> RunResult:
    """Run raw programs and memories (no compiled directory) on the emitted Verilog."""
    from gen.artifacts import write_image
    from gen.hexfile import write_hex
    from hw.isa import WORD_BITS
    progress = progress or (lambda m: None)
    binary, _ = build_simulator(arch, bus_bits, progress, harness)
    with tempfile.TemporaryDirectory(prefix="reshard-vl-") as tmp:
        work = Path(tmp)
        for d, (prog, mem) in enumerate(zip(programs, memories)):
            (work / f"dev{d}").mkdir()
            write_hex(work / f"dev{d}" / "program.hex", list(prog) or [0], WORD_BITS)
            if harness == "cxx":
                write_image(work / f"dev{d}" / "mem_init.bin", mem, arch.mem_bytes)
        if harness == "tb":
            _testbench_dir(work, work, memories, bus_bits, arch.mem_bytes)
        res = _run_binary(binary, work, work, arch, bus_bits, progress, max_cycles)
        res.memories = [np.array(m) for m in res.memories]      # off the files about to go
        return res


def run_verilator(loaded, progress=None, max_cycles: int | None = None,
                  keep: Path | None = None, harness: str = "cxx") -> RunResult:
    """Run a compiled directory on the emitted Verilog; its :class:`gen.result.RunResult`.

    The final memories are memory-mapped from the dumps in ``keep`` (or in a
    temporary directory removed at once: the mappings outlive its files)."""
    from gen.sim_amaranth import lower_bound_cycles
    progress = progress or (lambda m: None)
    t0 = time.perf_counter()
    bus_bits = loaded.manifest["bus_bits"]
    pgo = harness == "cxx" and pgo_requested()
    binary, cached = build_simulator(loaded.arch, bus_bits, progress, harness,
                                     train_dir=Path(loaded.path) if pgo else None)
    t_build = time.perf_counter() - t0
    progress(f"simulator {'cached' if cached else 'built'}: {binary} ({t_build:.1f} s)")
    out_dir = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="reshard-vl-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    lower = lower_bound_cycles(loaded.manifest)
    try:
        prog_dir = Path(loaded.path)
        if harness == "tb":
            prog_dir = out_dir / "images"
            _testbench_dir(prog_dir, Path(loaded.path), loaded.memories, bus_bits, loaded.arch.mem_bytes)
        res = _run_binary(binary, prog_dir, out_dir, loaded.arch, bus_bits, progress, max_cycles, lower)
    except SimulationTimeout:
        raise                        # its dumps stay for the user to look at
    except BaseException:
        if not keep:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    if not keep:
        shutil.rmtree(out_dir, ignore_errors=True)
    res.lower_bound_cycles = lower
    res.build_seconds, res.build_cached = t_build, cached
    res.seconds = time.perf_counter() - t0
    return res
