"""``python -m gen compile``: a minimal plan -> per-device programs, MMU maps, memory images.

Parses into :class:`gen.api.CompileOptions` and calls :func:`gen.api.compile_reshard`.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

NAME = "compile"
HELP = "compile a minimal reshard plan into coprocessor programs and memory images"
ORDER = 32


def add_arguments(p):
    add_source_arguments(p)
    p.add_argument("--out", required=True, help="output directory, e.g. build/prog/tiny")
    p.add_argument("--json", action="store_true", help="print the per-device report as JSON")


def add_source_arguments(p):
    """The arguments of :class:`gen.api.CompileOptions` (shared with ``sim``); defaults from it."""
    from gen.api import CompileOptions
    d = CompileOptions()
    p.add_argument("--model", default=d.model, help=f"bundled model name or path to an HF config.json (default {d.model})")
    p.add_argument("--train", default=d.train, help=f"training spec (default {d.train})")
    p.add_argument("--rollout", default=d.rollout, help=f"rollout spec (default {d.rollout})")
    p.add_argument("--dtype", default=d.dtype, help=f"bf16 | fp16 | fp32 (default {d.dtype})")
    p.add_argument("--devices", type=int, default=None, help="number of devices (default: the plan's world)")
    p.add_argument("--device", type=int, action="append", default=None,
                   help="compile only this device's program (repeatable; no images then)")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the random HF model behind the images")
    p.add_argument("--bus-bits", type=int, default=d.bus_bits,
                   help=f"memory word width of the images (default {d.bus_bits})")
    p.add_argument("--tlb-entries", type=int, default=None, help="TLB entries per device (default 64)")
    p.add_argument("--channels", type=int, default=None, help="DMA channels per device (default 4)")
    p.add_argument("--imem-words", type=int, default=None, help="instruction memory words (default: fits)")
    p.add_argument("--page-sizes", default=None,
                   help="four ascending page sizes in bytes, comma separated (default 4096,65536,1M,2M)")
    p.add_argument("--mem-bytes", type=int, default=None,
                   help="device memory size in bytes (default: enough for the layouts, rounded up to a "
                        "power of two so one simulator build serves many models)")
    p.add_argument("--no-images", action="store_true", help="write programs and manifest only")
    p.add_argument("--hex", action="store_true",
                   help="also write the memory images as $readmemh text (mem_init.hex, mem_expected.hex)")


def options(args):
    """The :class:`gen.api.CompileOptions` of parsed arguments."""
    from gen.api import CompileOptions, parse_page_sizes
    return CompileOptions(model=args.model, train=args.train, rollout=args.rollout, dtype=args.dtype,
                          devices=args.devices, only=tuple(args.device) if args.device else None,
                          seed=args.seed, bus_bits=args.bus_bits, tlb_entries=args.tlb_entries,
                          channels=args.channels, imem_words=args.imem_words,
                          page_sizes=parse_page_sizes(args.page_sizes), mem_bytes=args.mem_bytes,
                          images=not args.no_images, hex=args.hex)


def run(args) -> int:
    from gen.api import compile_reshard
    built = compile_reshard(options(args), progress=lambda s: print(s, file=sys.stderr))
    out = built.write(Path(args.out))
    arch = built.arch
    if args.json:
        json.dump({"out": str(out), "arch": arch.to_json(), "devices": built.report}, sys.stdout)
        print()
        return 0
    print(f"{out}: {len(built.devices)} device(s), memory {arch.mem_bytes:,} B each, "
          f"TLB {arch.tlb_entries}, {arch.channels} channels")
    print(f"{'dev':>4} {'instr':>7} {'descr':>7} {'copied B':>12} {'remapped B':>12} {'lower bound beats':>18}")
    for r in built.report:
        print(f"{r['device']:>4} {r['instructions']:>7} {r['descriptors']:>7} {r['bytes_copied']:>12,} "
              f"{r['bytes_remapped']:>12,} {r['lower_bound_beats']:>18,}")
    return 0
