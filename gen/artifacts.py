"""Compiled program directories: what ``compile`` writes and every executor reads.

Layout of ``build/prog/NAME``::

    manifest.json            ISA version, arch, regions, devices, tensors, source plan
    dev<N>/program.hex       $readmemh, 256-bit words
    dev<N>/program.s         the same program as canonical assembly
    dev<N>/mem_init.hex      $readmemh, bus-width words: the training shard at 0
    dev<N>/mem_expected.hex  the golden model's final physical memory

The directory is built next to its destination and renamed into place, so a
failed compile leaves nothing half-written.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gen.asm import disassemble
from gen.hexfile import read_hex, read_hex_bytes, write_hex
from hw.isa import ISA_VERSION, WORD_BITS, ArchParams
from model.errors import InputError

MANIFEST_VERSION = 1
MAX_IMAGE_BYTES = 256 << 20


@dataclass
class Loaded:
    path: Path
    manifest: dict
    arch: ArchParams
    programs: list[list[int]]
    memories: list[bytes] | None
    expected: list[bytes] | None = None


def write_compiled(out: Path, comp, source: dict, bus_bits: int, memories: list[bytes] | None,
                   expected: list[bytes] | None, report: list[dict]) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        devices = []
        for dp, rep in zip(comp.devices, report):
            d = tmp / f"dev{dp.device}"
            d.mkdir()
            comment = f"program of device {dp.device}, ISA version {ISA_VERSION}"
            write_hex(d / "program.hex", dp.words, WORD_BITS, 0, comment)
            (d / "program.s").write_text(f"; device {dp.device}: {source['model']} {source['train']} -> "
                                         f"{source['rollout']} ({source['dtype']})\n" + disassemble(dp.words))
            if memories is not None:
                write_hex(d / "mem_init.hex", memories[dp.device], bus_bits, 0,
                          f"initial memory of device {dp.device}: training shard at 0x0")
            if expected is not None:
                write_hex(d / "mem_expected.hex", expected[dp.device], bus_bits, 0,
                          f"expected final memory of device {dp.device} (golden model)")
            devices.append({"device": dp.device, "program": f"dev{dp.device}/program.hex",
                            "instructions": len(dp.words),
                            "tensors": [{k: t[k] for k in ("name", "shape", "va", "bytes", "off")}
                                        for t in dp.tensors],
                            "report": rep})
        manifest = {
            "manifest_version": MANIFEST_VERSION, "isa_version": ISA_VERSION,
            "word_bits": {"program": WORD_BITS, "memory": bus_bits},
            "arch": comp.arch.to_json(), "bus_bits": bus_bits,
            "regions": {"train_pa": 0, "train_span": comp.train_span, "stage_pa": comp.stage_pa,
                        "rollout_span": comp.rollout_span,
                        "stage_windows": [comp.stage_window(d) for d in range(comp.arch.devices)]},
            "images": memories is not None,
            "devices": devices, "source": source,
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def load_compiled(path) -> Loaded:
    path = Path(path)
    mpath = path / "manifest.json"
    if not mpath.is_file():
        raise InputError(f"{path}: not a compiled program directory (no manifest.json)")
    try:
        manifest = json.loads(mpath.read_text())
    except json.JSONDecodeError as e:
        raise InputError(f"{mpath}: line {e.lineno} column {e.colno}: invalid JSON: {e.msg}") from None
    for key in ("isa_version", "arch", "devices", "source", "bus_bits"):
        if key not in manifest:
            raise InputError(f"{mpath}: manifest has no {key!r}")
    if manifest["isa_version"] != ISA_VERSION:
        raise InputError(f"{mpath}: compiled for ISA version {manifest['isa_version']}, this hardware "
                         f"implements version {ISA_VERSION}; recompile")
    try:
        arch = ArchParams.from_json(manifest["arch"])
    except (TypeError, ValueError, KeyError) as e:
        raise InputError(f"{mpath}: bad 'arch': {e}") from None
    programs, memories, expected = [], [], []
    for dev in manifest["devices"]:
        base, words = read_hex(path / dev["program"], WORD_BITS)
        if base != 0:
            raise InputError(f"{path / dev['program']}: program must start at word 0, not 0x{base:x}")
        if len(words) > arch.imem_words:
            raise InputError(f"{path / dev['program']}: {len(words)} words do not fit the "
                             f"{arch.imem_words}-word instruction memory")
        programs.append(words)
        img = path / f"dev{dev['device']}" / "mem_init.hex"
        if manifest.get("images"):
            memories.append(read_hex_bytes(img, manifest["bus_bits"], arch.mem_bytes))
            exp = path / f"dev{dev['device']}" / "mem_expected.hex"
            expected.append(read_hex_bytes(exp, manifest["bus_bits"], arch.mem_bytes))
    images = bool(manifest.get("images"))
    return Loaded(path, manifest, arch, programs, memories if images else None, expected if images else None)


def as_arrays(memories: list[bytes], size: int) -> list[np.ndarray]:
    return [np.frombuffer(m, np.uint8).copy() for m in memories]
