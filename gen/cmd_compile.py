"""``python -m gen compile``: a minimal plan -> per-device programs, MMU maps, memory images."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

NAME = "compile"
HELP = "compile a minimal reshard plan into coprocessor programs and memory images"
ORDER = 32


def add_arguments(p):
    add_source_arguments(p)
    p.add_argument("--out", required=True, help="output directory, e.g. build/prog/tiny")
    p.add_argument("--json", action="store_true", help="print the per-device report as JSON")


def add_source_arguments(p):
    p.add_argument("--model", default="tiny-qwen2", help="bundled model name or path to an HF config.json")
    p.add_argument("--train", default="fsdp2:dp=2", help="training spec (default fsdp2:dp=2)")
    p.add_argument("--rollout", default="vllm:tp=2", help="rollout spec (default vllm:tp=2)")
    p.add_argument("--dtype", default="bf16", help="bf16 | fp16 | fp32 (default bf16)")
    p.add_argument("--devices", type=int, default=None, help="number of devices (default: the plan's world)")
    p.add_argument("--device", type=int, action="append", default=None,
                   help="compile only this device's program (repeatable; no images then)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random HF model behind the images")
    p.add_argument("--bus-bits", type=int, default=64, help="memory word width of the images (default 64)")
    p.add_argument("--tlb-entries", type=int, default=None, help="TLB entries per device (default 64)")
    p.add_argument("--channels", type=int, default=None, help="DMA channels per device (default 4)")
    p.add_argument("--imem-words", type=int, default=None, help="instruction memory words (default: fits)")
    p.add_argument("--page-sizes", default=None,
                   help="four ascending page sizes in bytes, comma separated (default 4096,65536,1M,2M)")
    p.add_argument("--mem-bytes", type=int, default=None,
                   help="device memory size in bytes (default: just enough for the layouts)")
    p.add_argument("--no-images", action="store_true", help="write programs and manifest only")


def compile_args(**overrides):
    """The arguments ``build`` takes, at the command line's defaults, with overrides."""
    import argparse
    p = argparse.ArgumentParser()
    add_source_arguments(p)
    args = p.parse_args([])
    for k, v in overrides.items():
        if not hasattr(args, k):
            raise TypeError(f"compile has no argument {k!r}")
        setattr(args, k, v)
    return args


def _page_sizes(text):
    from model.errors import InputError
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


def build(args, progress=print):
    """Plan and compile per the arguments; returns (compiled, source, report, memories, expected)."""
    from gen.compiler import compile_plan
    from model.errors import InputError
    from model.models import load_model
    from model.plan import make_plan
    from model.specs import parse_dtype, parse_spec
    es = parse_dtype(args.dtype)
    train = parse_spec(args.train, "train")
    rollout = parse_spec(args.rollout, "rollout")
    if args.devices is not None and args.devices != train.world:
        raise InputError(f"--devices {args.devices} does not match the world of {train} ({train.world}); "
                         f"colocated resharding uses one device per rank")
    if args.bus_bits not in (32, 64, 128, 256):
        raise InputError(f"--bus-bits must be one of 32, 64, 128, 256, not {args.bus_bits}")
    model = load_model(args.model)
    t0 = time.perf_counter()
    plan = make_plan(model, train, rollout, args.dtype, "minimal")
    progress(f"planned {model.name} {train} -> {rollout}: {plan.num_transfers:,} runs "
             f"({time.perf_counter() - t0:.2f} s)")
    overrides = {"tlb_entries": args.tlb_entries, "channels": args.channels,
                 "page_sizes": _page_sizes(args.page_sizes), "mem_bytes": getattr(args, "mem_bytes", None)}
    only = sorted(set(args.device)) if args.device else None
    if only and any(d < 0 or d >= train.world for d in only):
        raise InputError(f"--device must be in 0..{train.world - 1}, not {only}")
    t0 = time.perf_counter()
    imem = args.imem_words
    comp = compile_plan(plan, only=only, imem_words=imem or (1 << 30), **overrides)
    if imem is None:
        # size instruction memory to the longest program, rounded to a power of two
        longest = max(len(d.words) for d in comp.devices)
        comp.arch = type(comp.arch).from_json({**comp.arch.to_json(), "imem_words": 1 << (longest - 1).bit_length()})
    progress(f"compiled {len(comp.devices)} device program(s) in {time.perf_counter() - t0:.2f} s")
    source = {"model": model.name, "config": model.config, "train": str(train), "rollout": str(rollout),
              "dtype": args.dtype, "elem_bytes": es, "seed": args.seed}
    report = comp.report(args.bus_bits // 8)
    import hashlib
    for r, d in zip(report, comp.devices):
        r["program_sha256"] = hashlib.sha256(b"".join(w.to_bytes(32, "little") for w in d.words)).hexdigest()
    memories = expected = None
    images = not args.no_images and only is None
    if images and comp.arch.mem_bytes > (256 << 20):
        progress(f"device memory {comp.arch.mem_bytes >> 20} MiB is too large for images; writing programs only")
        images = False
    if images:
        from model.golden import GoldenSystem
        from model.verify import reference_buffers
        tb, _ = reference_buffers({"source": source})
        memories = []
        for b in tb:
            m = bytearray(comp.arch.mem_bytes)
            m[:len(b)] = b
            memories.append(bytes(m))
        res = GoldenSystem(comp.arch, [d.words for d in comp.devices], memories).run()
        expected = [m.tobytes() for m in res.memories]
        # the end state every executor must reach: committed mappings and statuses too
        for r, tlb, st in zip(report, res.tlb, res.status):
            r["expected_tlb"] = tlb
            r["expected_status"] = st.name
    return comp, source, report, memories, expected


def run(args) -> int:
    from gen.artifacts import write_compiled
    progress = (lambda s: print(s, file=sys.stderr))
    comp, source, report, memories, expected = build(args, progress)
    out = write_compiled(Path(args.out), comp, source, args.bus_bits, memories, expected, report)
    if args.json:
        json.dump({"out": str(out), "arch": comp.arch.to_json(), "devices": report}, sys.stdout)
        print()
        return 0
    print(f"{out}: {len(comp.devices)} device(s), memory {comp.arch.mem_bytes:,} B each, "
          f"TLB {comp.arch.tlb_entries}, {comp.arch.channels} channels")
    print(f"{'dev':>4} {'instr':>7} {'descr':>7} {'copied B':>12} {'remapped B':>12} {'lower bound beats':>18}")
    for r in report:
        print(f"{r['device']:>4} {r['instructions']:>7} {r['descriptors']:>7} {r['bytes_copied']:>12,} "
              f"{r['bytes_remapped']:>12,} {r['lower_bound_beats']:>18,}")
    return 0
