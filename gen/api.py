"""The typed library under ``python -m gen``.

Every command of substance is a dataclass of options and a function; the
``gen/cmd_*.py`` modules only turn their arguments into those options and
print what the function returns. Tests, the main job and the benchmarks call
these functions, never argparse.

=====================  =================================  ===========================
command                options                            function
=====================  =================================  ===========================
``plan``               :class:`PlanOptions`               :func:`plan_reshard`
``compile``            :class:`CompileOptions`            :func:`compile_reshard`,
                                                          :func:`compile_to`
``run``                :class:`RunOptions`                :func:`run_compiled`
``sim``                :class:`SimOptions`                :func:`simulate`
``verilog``            :class:`gen.verilog.VerilogOptions`  :func:`gen.verilog.emit_verilog`
``bench``              :class:`gen.bench.BenchOptions`    :func:`gen.bench.run_bench`
``loop``               :class:`gen.loop.LoopOptions`      :func:`gen.loop.run_loop`
=====================  =================================  ===========================

Underneath: :func:`execute` runs a compiled directory on one engine and
returns a :class:`gen.result.RunResult`; :func:`summarize` verifies it
against the independently sliced rollout tensors and the compiled end state;
:func:`gen.result.compare_results` compares two results.

Bad input raises :class:`model.errors.InputError` with one line naming the
option (by its command-line spelling) and the value; the command line prints
it and exits with status 2.
"""
from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from gen.compiler import SHARED_IMEM_WORDS
from gen.result import RunResult, compare_results, first_difference, run_golden
from model.errors import InputError

__all__ = [
    "PlanOptions", "plan_reshard", "CompileOptions", "CompiledReshard", "compile_reshard", "compile_to",
    "ENGINES", "RTL_ENGINES", "execute", "summarize", "program_digest", "RunOptions", "run_compiled",
    "SimOptions", "simulate", "check_rtl_run", "default_sim_dir", "fmt_bytes", "parse_page_sizes", "check_bus_bits", "BUS_BITS",
]

Progress = Callable[[str], None]
ENGINES = ("golden", "amaranth", "verilator", "verilator-tb")
RTL_ENGINES = ("amaranth", "verilator", "verilator-tb")
BUS_BITS = (32, 64, 128, 256)


def _quiet(_msg: str) -> None:
    pass


def fmt_bytes(n: float) -> str:
    """1536 -> '1.50 KiB' (binary units; bytes without decimals)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024


def check_bus_bits(bus_bits: int) -> int:
    if bus_bits not in BUS_BITS:
        raise InputError(f"--bus-bits must be one of {', '.join(map(str, BUS_BITS))}, not {bus_bits}")
    return bus_bits


# ---------------------------------------------------------------- plan

@dataclass(frozen=True)
class PlanOptions:
    """What ``python -m gen plan`` plans: a model, a training and a rollout layout."""
    model: str
    train: str
    rollout: str
    dtype: str = "bf16"
    scheme: str = "minimal"


def plan_reshard(opts: PlanOptions):
    """The transfer plan (``model.plan.Plan``) of the options."""
    from model.models import load_model
    from model.plan import SCHEMES, make_plan
    from model.specs import parse_dtype, parse_spec
    if opts.scheme not in SCHEMES:
        raise InputError(f"unknown scheme {opts.scheme!r}: use one of {', '.join(SCHEMES)}")
    parse_dtype(opts.dtype)
    train = parse_spec(opts.train, "train")
    rollout = parse_spec(opts.rollout, "rollout")
    return make_plan(load_model(opts.model), train, rollout, opts.dtype, opts.scheme)


# ---------------------------------------------------------------- compile

def parse_page_sizes(text: str | None) -> tuple[int, ...] | None:
    """'4096,64K,1M,2M' -> (4096, 65536, 1048576, 2097152)."""
    if text is None:
        return None
    try:
        vals = []
        for part in text.split(","):
            part = part.strip().upper()
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(part[-1:], 1)
            vals.append(int(part.rstrip("KMG")) * mult)
        return tuple(vals)
    except ValueError:
        raise InputError(f"--page-sizes {text!r}: want four sizes like 4096,64K,1M,2M") from None


@dataclass(frozen=True)
class CompileOptions:
    """A minimal reshard to compile, and the hardware to compile it for.

    ``None`` means "the compiler chooses": the plan's world for ``devices``,
    the architecture defaults for the TLB, channels and page sizes, just
    enough memory for the layouts, the longest program (rounded up to a power
    of two) for the instruction memory. ``only`` compiles just those
    devices' programs (and then no memory images); ``images=False`` writes
    programs and the manifest only.
    """
    model: str = "tiny-qwen2"
    train: str = "fsdp2:dp=2"
    rollout: str = "vllm:tp=2"
    dtype: str = "bf16"
    devices: int | None = None
    only: tuple[int, ...] | None = None
    seed: int = 0
    bus_bits: int = 64
    tlb_entries: int | None = None
    channels: int | None = None
    imem_words: int | None = None
    page_sizes: tuple[int, ...] | str | None = None
    mem_bytes: int | None = None
    images: bool = True
    hex: bool = False        # also write $readmemh text images beside the binary ones
    # where memory and instruction memory are the compiler's choice: memory rounded up to a
    # power of two and at least SHARED_IMEM_WORDS of instructions, so that one simulator
    # build serves every model that rounds to the same sizes (the FPGA top sizes them exactly)
    shared_build: bool = True

    def __post_init__(self):
        if isinstance(self.page_sizes, str):
            object.__setattr__(self, "page_sizes", parse_page_sizes(self.page_sizes))
        if self.only is not None:
            object.__setattr__(self, "only", tuple(sorted(set(self.only))) or None)

    def name(self) -> str:
        """A file-name-safe name of the reshard: ``tiny-qwen2_fsdp2dp2_vllmtp2``."""
        def part(text):
            return re.sub(r"[^A-Za-z0-9.-]+", "-", str(text).replace("=", "")).strip("-")
        model = Path(self.model).stem if self.model.endswith(".json") else Path(self.model).name
        return "_".join(part(x) for x in (model, self.train, self.rollout))


@dataclass
class CompiledReshard:
    """What :func:`compile_reshard` produced, before it is written to a directory.

    ``memories`` (the initial memory images) and ``expected`` (the golden
    model's final memories) are ``None`` when no images were built.
    """
    compiled: object                 # gen.compiler.Compiled
    source: dict                     # the manifest's "source": model, layouts, dtype, seed
    report: list[dict]               # per device: descriptors, bytes, ports, expected end state
    bus_bits: int
    memories: list | None = None     # per device: uint8 array of mem_bytes
    expected: list | None = None
    golden: RunResult | None = None  # the golden model's run that gave ``expected``
    reference_rollout: list[bytes] | None = None   # the independently sliced rollout shards
    hex: bool = False
    seconds: dict = field(default_factory=dict)    # wall time by phase

    @property
    def devices(self) -> list:
        return self.compiled.devices

    @property
    def arch(self):
        return self.compiled.arch

    def write(self, out) -> Path:
        """Write the compiled directory (``gen.artifacts``) atomically; its path."""
        from gen.artifacts import write_compiled
        from gen.resources import check_disk
        if self.memories is not None:
            n = len(self.memories) * self.arch.mem_bytes * (2 if self.expected is not None else 1)
            check_disk(Path(out).parent, n * (4 if self.hex else 1), f"the memory images of {out}")
        t0 = time.perf_counter()
        path = write_compiled(Path(out), self.compiled, self.source, self.bus_bits, self.memories,
                              self.expected, self.report, hex_images=self.hex)
        self.seconds["write"] = round(time.perf_counter() - t0, 2)
        return path


def program_digest(words) -> str:
    """SHA-256 of a program's 256-bit words, little-endian."""
    return hashlib.sha256(b"".join(w.to_bytes(32, "little") for w in words)).hexdigest()


def compile_reshard(opts: CompileOptions = CompileOptions(), progress: Progress = _quiet) -> CompiledReshard:
    """Plan the minimal reshard, compile per-device programs, build memory images.

    With images, the golden model runs the programs once: its final memories,
    committed TLBs and statuses are the end state every executor must reach.
    """
    from model.models import load_model
    from model.plan import make_plan
    from model.specs import parse_dtype, parse_spec
    t_plan = time.perf_counter()
    es = parse_dtype(opts.dtype)
    train = parse_spec(opts.train, "train")
    rollout = parse_spec(opts.rollout, "rollout")
    if opts.devices is not None and opts.devices != train.world:
        raise InputError(f"--devices {opts.devices} does not match the world of {train} ({train.world}); "
                         f"colocated resharding uses one device per rank")
    check_bus_bits(opts.bus_bits)
    model = load_model(opts.model)
    t0 = time.perf_counter()
    plan = make_plan(model, train, rollout, opts.dtype, "minimal")
    progress(f"planned {model.name} {train} -> {rollout}: {plan.num_transfers:,} runs "
             f"({time.perf_counter() - t0:.2f} s)")
    only = list(opts.only) if opts.only else None
    if only and any(d < 0 or d >= train.world for d in only):
        raise InputError(f"--device must be in 0..{train.world - 1}, not {only}")
    t0 = time.perf_counter()
    comp = _compile_fitting(plan, opts, only, progress)
    if opts.imem_words is None:
        # size instruction memory to the longest program, rounded to a power of two
        longest = max(len(d.words) for d in comp.devices)
        words = 1 << (longest - 1).bit_length()
        if opts.shared_build:
            words = max(words, SHARED_IMEM_WORDS)
        comp.arch = type(comp.arch).from_json({**comp.arch.to_json(), "imem_words": words})
    progress(f"compiled {len(comp.devices)} device program(s) in {time.perf_counter() - t0:.2f} s")
    source = {"model": model.name, "config": model.config, "train": str(train), "rollout": str(rollout),
              "dtype": opts.dtype, "elem_bytes": es, "seed": opts.seed}
    report = comp.report(opts.bus_bits // 8)
    for r, d in zip(report, comp.devices):
        r["program_sha256"] = program_digest(d.words)
    out = CompiledReshard(comp, source, report, opts.bus_bits, hex=opts.hex)
    out.seconds["plan_compile"] = round(time.perf_counter() - t_plan, 2)
    if opts.images and only is None:
        import numpy as np
        from gen.resources import check_memory
        from model.verify import reference_buffers
        mem = comp.arch.mem_bytes
        # the larger of: the fp32 model and its fp32 shards (slicing), or the images, the
        # golden model's copy of them and the shards in the dtype (docs/simulation.md, Limits)
        check_memory(max(8 * model.numel, 2 * mem * comp.arch.devices + 2 * es * model.numel) + (1 << 30),
                     f"the images of {comp.arch.devices} x {fmt_bytes(mem)} and the reference tensors")
        t0 = time.perf_counter()
        progress(f"slicing the reference tensors of {model.name} ({model.numel:,} parameters, seed {opts.seed})")
        tb, out.reference_rollout = reference_buffers({"source": source})
        memories = []
        for b in tb:
            m = np.zeros(mem, np.uint8)
            m[:len(b)] = np.frombuffer(b, np.uint8)
            memories.append(m)
        del tb
        out.seconds["reference"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        progress(f"running the golden model on {comp.arch.devices} x {fmt_bytes(mem)} memories")
        res = run_golden(comp.arch, [d.words for d in comp.devices], memories)
        out.seconds["golden"] = round(time.perf_counter() - t0, 2)
        out.memories = memories
        out.expected = res.memories
        out.golden = res
        # the end state every executor must reach: committed mappings and statuses too
        for r, tlb, st in zip(report, res.tlb, res.status):
            r["expected_tlb"] = tlb
            r["expected_status"] = st
    return out


def _compile_fitting(plan, opts: CompileOptions, only, progress: Progress):
    from gen.compiler import compile_fitting
    return compile_fitting(plan, only=only, imem_words=opts.imem_words or (1 << 30),
                           tlb_entries=opts.tlb_entries, channels=opts.channels, page_sizes=opts.page_sizes,
                           mem_bytes=opts.mem_bytes, mem_pow2=opts.shared_build and opts.mem_bytes is None,
                           progress=progress)


def compile_to(opts: CompileOptions, out, progress: Progress = _quiet):
    """Compile, write the directory ``out`` and load it back (``gen.artifacts.Loaded``)."""
    from gen.artifacts import load_compiled
    return load_compiled(compile_reshard(opts, progress).write(out))


# ---------------------------------------------------------------- run

def execute(loaded, engine: str = "golden", *, vcd=None, progress: Progress | None = None,
            max_cycles: int | None = None) -> RunResult:
    """Run a compiled directory (``gen.artifacts.Loaded``) on one engine.

    ``verilator`` drives the emitted Verilog from the C++ harness,
    ``verilator-tb`` from the plain Verilog testbench; ``max_cycles`` stops a
    Verilator run that has not finished by then."""
    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r}: use one of {', '.join(ENGINES)}")
    if loaded.memories is None:
        raise InputError(f"{loaded.path}: compiled without memory images (--no-images); nothing to run")
    if engine == "amaranth":
        from gen.sim_amaranth import run_amaranth
        return run_amaranth(loaded, vcd=vcd, progress=progress)
    if engine in ("verilator", "verilator-tb"):
        from gen.sim_verilator import run_verilator
        return run_verilator(loaded, progress=progress, max_cycles=max_cycles,
                             harness="tb" if engine == "verilator-tb" else "cxx")
    return run_golden(loaded.arch, loaded.programs, loaded.memories)


def _norm_tlb(entries):
    return sorted((e["index"], e["ctx"], e["staged"], e["size"], e["va"], e["pa"], e["dev"], e["perm"])
                  for e in entries)


def summarize(loaded, res: RunResult, check_program_hash: bool = True,
              reference_rollout: list[bytes] | None = None) -> dict:
    """Verify a run of a compiled directory; the JSON-ready summary ``run`` prints.

    ``verified`` holds when every rollout tensor read through the committed
    rollout context equals the independently sliced reference, the final
    memories and TLBs equal the compiled end state, the programs are the ones
    compiled (``check_program_hash``), nothing faulted and every device halted.
    """
    from model.verify import verify
    v = verify(loaded.manifest, res.memories, res.tlb, reference_rollout)
    # zero-copy bytes: rollout pages the compiler pointed at training pages
    remapped = [d["report"]["bytes_remapped"] for d in loaded.manifest["devices"]]
    end_state = []
    for dev in loaded.manifest["devices"]:
        d = dev["device"]
        want = dev["report"].get("program_sha256")
        if check_program_hash and want and program_digest(loaded.programs[d]) != want:
            end_state.append(f"device {d}: program differs from the one compiled (SHA-256)")
        exp_tlb = dev["report"].get("expected_tlb")
        if exp_tlb is not None and _norm_tlb(res.tlb[d]) != _norm_tlb(exp_tlb):
            end_state.append(f"device {d}: final TLB differs from the compiled end state")
        exp = loaded.expected[d] if loaded.expected else None
        if exp is not None:
            first = first_difference(res.memories[d], exp)
            if first is not None:
                end_state.append(f"device {d}: final memory differs from mem_expected.bin "
                                 f"(first at byte 0x{first:x})")
    ok = (v["verified"] and not end_state and not res.faults and all(s == "HALTED" for s in res.status))
    out = {"verified": ok, "engine": res.engine, "status": res.status, "cause": res.cause,
           "pc": res.pc, "faults": res.faults, "bytes_copied": sum(res.bytes_copied),
           "bytes_remapped": sum(remapped), "descriptors": sum(res.descriptors),
           "per_device": {"bytes_copied": res.bytes_copied, "bytes_remapped": remapped,
                          "descriptors": res.descriptors, "rollout_bytes_mapped": res.bytes_remapped},
           "rollout_bytes_checked": v["bytes_checked"], "mismatches": v["mismatches"],
           "end_state_mismatches": end_state}
    for k in ("cycles", "lower_bound_cycles", "sim_cycles_per_s"):
        if getattr(res, k) is not None:
            out[k] = getattr(res, k)
    return out


@dataclass(frozen=True)
class RunOptions:
    """Run a compiled program directory on one engine (``python -m gen run``)."""
    dir: Path | str
    engine: str = "golden"
    vcd: Path | str | None = None      # amaranth engine: a VCD waveform of the run


def run_compiled(opts: RunOptions, progress: Progress | None = None) -> tuple[RunResult, dict]:
    """Load, run and verify: the result and its :func:`summarize` summary."""
    from gen.artifacts import load_compiled
    loaded = load_compiled(opts.dir)
    res = execute(loaded, opts.engine, vcd=opts.vcd, progress=progress)
    return res, summarize(loaded, res)


# ---------------------------------------------------------------- sim

@dataclass(frozen=True)
class SimOptions:
    """Compile a reshard and run it on the RTL (``python -m gen sim``).

    ``out`` is the compiled directory (default ``build/sim/<name>``).
    """
    compile: CompileOptions = field(default_factory=CompileOptions)
    engine: str = "amaranth"
    out: Path | str | None = None
    vcd: Path | str | None = None
    max_cycles: int | None = None      # Verilator engines: stop a run that has not finished by then


def default_sim_dir(opts: CompileOptions) -> Path:
    return Path("build") / "sim" / opts.name()


def simulate(opts: SimOptions, progress: Progress = _quiet) -> dict:
    """Compile, run on the RTL, check three ways; the JSON-ready summary.

    1. The rollout shards and the compiled end state (:func:`summarize`).
    2. The RTL's whole end state against the golden model's run of the same
       programs (:func:`gen.result.compare_results`): ``golden_agrees``.
    3. Cycles against the lower bound: ``cycles_over_lower_bound``.

    ``wall_s`` is the wall time by phase, ``peak_rss_bytes`` the peak of the
    resident memory of this process and its children (the simulator, its
    compiler) together, sampled (:class:`gen.resources.PeakMemory`).
    """
    from gen.resources import PeakMemory
    with PeakMemory() as memory:
        summary = _simulate(opts, progress)
    summary["peak_rss_bytes"] = memory.peak
    return summary


def check_rtl_run(loaded, res: RunResult, built: CompiledReshard) -> dict:
    """:func:`summarize` an RTL run, then compare its whole end state with the
    golden model's run (``golden_agrees``); cycles against the lower bound."""
    summary = summarize(loaded, res, reference_rollout=built.reference_rollout)
    mismatches = compare_results(res, built.golden)
    summary["golden_agrees"] = not mismatches
    summary["golden_mismatches"] = mismatches
    summary["verified"] = bool(summary["verified"] and not mismatches)
    if res.cycles is not None and res.lower_bound_cycles:
        summary["cycles_over_lower_bound"] = round(res.cycles / res.lower_bound_cycles, 4)
    summary["seconds"] = round(res.seconds, 2)
    return summary


def _simulate(opts: SimOptions, progress: Progress) -> dict:
    if opts.engine not in RTL_ENGINES:
        raise InputError(f"unknown engine {opts.engine!r}: use one of {', '.join(RTL_ENGINES)}")
    c = opts.compile
    if c.only or not c.images:
        raise InputError("sim runs whole systems: drop --device / --no-images")
    t_start = time.perf_counter()
    built = compile_reshard(c, progress)
    from gen.artifacts import load_compiled
    out = Path(opts.out) if opts.out else default_sim_dir(c)
    loaded = load_compiled(built.write(out))
    # from here on the images are the written ones, memory-mapped: the in-memory
    # copies go (gigabytes at model scale); the golden end state is mem_expected.bin
    built.memories = built.expected = None
    built.golden.memories = list(loaded.expected)
    wall = dict(built.seconds)
    progress(f"simulating {len(loaded.programs)} device(s) on the RTL ({opts.engine}) ...")
    res = execute(loaded, opts.engine, vcd=opts.vcd, progress=progress, max_cycles=opts.max_cycles)
    if res.build_seconds is not None:
        wall["simulator_build"] = round(res.build_seconds, 2)
        wall["simulation"] = round(res.seconds - res.build_seconds, 2)
    else:
        wall["simulation"] = round(res.seconds, 2)
    t0 = time.perf_counter()
    progress("checking the rollout tensors and the golden model's end state")
    summary = check_rtl_run(loaded, res, built)
    wall["checks"] = round(time.perf_counter() - t0, 2)
    summary["out"] = str(out)
    wall["total"] = round(time.perf_counter() - t_start, 2)
    summary["wall_s"] = wall
    return summary
