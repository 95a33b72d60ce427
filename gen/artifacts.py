"""Compiled program directories: what ``compile`` writes and every executor reads.

Layout of ``build/prog/NAME``::

    manifest.json            ISA version, hardware generation, verl / torch versions,
                             arch, regions, devices, tensors, source plan
    dev<N>/program.hex       $readmemh, 256-bit words
    dev<N>/program.s         the same program as canonical assembly
    dev<N>/mem_init.bin      raw little-endian image of the device memory: the training shard at 0
    dev<N>/mem_expected.bin  the golden model's final physical memory, raw
    dev<N>/mem_init.hex      the same images as $readmemh text, bus-width words,
    dev<N>/mem_expected.hex  only when asked for (``--hex``)

Binary images are memory-mapped on loading (read-only numpy arrays), so a
gigabyte image costs no parsing and no copy until it is read. An image whose
size is not ``mem_bytes`` is refused on loading, naming the file and both sizes.

The directory is built next to its destination and renamed into place, so a
failed compile leaves nothing half-written.

Compatibility (docs/isa.md, "Compatibility"): the manifest records the ISA
version the programs declare (their first instruction, ``VERSION``), the
hardware generation they were compiled for (``hw.isa.HW_GENERATION``) and the
verl / torch versions of the workload (a trace header's ``versions``, or,
when the programs come from a model rather than a trace, the versions
installed). :func:`load_compiled` refuses a manifest for another hardware
generation or for an ISA version this generation does not run
(``hw.isa.GENERATION_ISA``), in one line naming both.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from gen.asm import disassemble
from gen.hexfile import read_hex, read_hex_bytes, write_hex
from hw.isa import GENERATION_ISA, HW_GENERATION, WORD_BITS, ArchParams, Op, decode
from model.errors import InputError

MANIFEST_VERSION = 2     # 2: hw_generation and versions added
#: The packages whose versions a manifest records (those of the trace's header).
TRACED_PACKAGES = ("verl", "torch")
MAX_IMAGE_BYTES = 256 << 20


@dataclass
class Loaded:
    path: Path
    manifest: dict
    arch: ArchParams
    programs: list[list[int]]
    memories: list | None            # per device: a read-only uint8 array (memory-mapped binary)
    expected: list | None = None


def program_isa_version(programs) -> int:
    """The ISA version that every program declares in its first instruction
    (``VERSION``); ``ValueError`` when one has none or they differ."""
    found = set()
    for words in programs:
        dec = decode(words[0]) if words else None
        if dec is None or dec.op is not Op.VERSION:
            raise ValueError("a program does not start with VERSION")
        found.add(dec.fields["version"])
    if len(found) != 1:
        raise ValueError(f"the programs declare different ISA versions: {sorted(found)}")
    return found.pop()


def installed_versions() -> dict:
    """The installed versions of :data:`TRACED_PACKAGES` (None where absent)."""
    out = {}
    for pkg in TRACED_PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def workload_versions(trace_header: dict | None = None) -> dict:
    """The manifest's ``versions``: verl / torch of the trace whose header is
    given (``"from": "trace"``), else of this installation (``"from":
    "installed"``, for programs compiled from a model, not a trace)."""
    if trace_header is not None:
        got = trace_header.get("versions") or {}
        return {**{pkg: got.get(pkg) for pkg in TRACED_PACKAGES}, "from": "trace"}
    return {**installed_versions(), "from": "installed"}


def compatibility_error(manifest: dict) -> str | None:
    """Why this hardware cannot run the programs of ``manifest``: one line
    naming both sides, or None when it can."""
    runs = GENERATION_ISA[HW_GENERATION]
    names = ", ".join(map(str, runs))
    gen, isa = manifest.get("hw_generation"), manifest.get("isa_version")
    if isa not in runs:
        theirs = f" (hardware generation {gen})" if gen not in (None, HW_GENERATION) else ""
        return f"programs for ISA version {isa}{theirs}, this hardware (generation " \
               f"{HW_GENERATION}) runs ISA versions {names}; recompile"
    if gen is None:
        return f"no hardware generation recorded (a manifest from before generations), this " \
               f"hardware is generation {HW_GENERATION} (ISA versions {names}); recompile"
    if gen != HW_GENERATION:
        return f"programs for hardware generation {gen}, this hardware is generation " \
               f"{HW_GENERATION} (ISA versions {names}); recompile"
    return None


def write_image(path: Path, image, size: int):
    """Write a raw memory image of exactly ``size`` bytes (zero-padded)."""
    data = np.frombuffer(image, np.uint8) if not isinstance(image, np.ndarray) else image.reshape(-1)
    with open(path, "wb") as f:
        f.write(memoryview(np.ascontiguousarray(data, np.uint8)))
        if data.size < size:
            f.truncate(size)


def write_compiled(out: Path, comp, source: dict, bus_bits: int, memories: list | None,
                   expected: list | None, report: list[dict], *,
                   trace_header: dict | None = None, hex_images: bool = False) -> Path:
    """Write a compiled program directory ``out`` (atomically). ``trace_header``:
    the header of the trace the programs came from, whose verl / torch
    versions the manifest records (default: the installed ones). Memory
    images are raw binary; ``hex_images`` adds ``$readmemh`` copies."""
    out = Path(out)
    isa_version = program_isa_version([dp.words for dp in comp.devices])
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        devices = []
        for dp, rep in zip(comp.devices, report):
            d = tmp / f"dev{dp.device}"
            d.mkdir()
            comment = f"program of device {dp.device}, ISA version {isa_version}"
            write_hex(d / "program.hex", dp.words, WORD_BITS, 0, comment)
            (d / "program.s").write_text(f"; device {dp.device}: {source['model']} {source['train']} -> "
                                         f"{source['rollout']} ({source['dtype']})\n" + disassemble(dp.words))
            size = comp.arch.mem_bytes
            if memories is not None:
                write_image(d / "mem_init.bin", memories[dp.device], size)
                if hex_images:
                    write_hex(d / "mem_init.hex", image_bytes(memories[dp.device], size), bus_bits, 0,
                              f"initial memory of device {dp.device}: training shard at 0x0")
            if expected is not None:
                write_image(d / "mem_expected.bin", expected[dp.device], size)
                if hex_images:
                    write_hex(d / "mem_expected.hex", image_bytes(expected[dp.device], size), bus_bits, 0,
                              f"expected final memory of device {dp.device} (golden model)")
            devices.append({"device": dp.device, "program": f"dev{dp.device}/program.hex",
                            "instructions": len(dp.words),
                            "tensors": [{k: t[k] for k in ("name", "shape", "va", "bytes", "off")}
                                        for t in dp.tensors],
                            "report": rep})
        manifest = {
            "manifest_version": MANIFEST_VERSION, "isa_version": isa_version,
            "hw_generation": HW_GENERATION, "versions": workload_versions(trace_header),
            "word_bits": {"program": WORD_BITS, "memory": bus_bits},
            "arch": comp.arch.to_json(), "bus_bits": bus_bits,
            "regions": {"train_pa": 0, "train_span": comp.train_span, "stage_pa": comp.stage_pa,
                        "rollout_span": comp.rollout_span,
                        "stage_windows": [comp.stage_window(d) for d in range(comp.arch.devices)]},
            "images": memories is not None,
            "image_formats": (["bin", "hex"] if hex_images else ["bin"]) if memories is not None else [],
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
    why = compatibility_error(manifest)
    if why:
        raise InputError(f"{mpath}: {why}")
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
        if manifest.get("images"):
            ddir = path / f"dev{dev['device']}"
            memories.append(load_image(ddir, "mem_init", manifest["bus_bits"], arch.mem_bytes))
            expected.append(load_image(ddir, "mem_expected", manifest["bus_bits"], arch.mem_bytes))
    images = bool(manifest.get("images"))
    return Loaded(path, manifest, arch, programs, memories if images else None, expected if images else None)


def image_bytes(image, size: int) -> bytes:
    """``image`` (bytes or array) as ``size`` bytes, zero-padded."""
    return bytes(image).ljust(size, b"\0")


def load_image(ddir: Path, stem: str, bus_bits: int, size: int) -> np.ndarray:
    """``<stem>.bin`` memory-mapped (read-only), or ``<stem>.hex`` parsed where
    only the text image exists; either must hold exactly ``size`` bytes."""
    binary = ddir / f"{stem}.bin"
    if binary.is_file():
        found = binary.stat().st_size
        if found != size:
            raise InputError(f"{binary}: {found:,} bytes, the device memory is {size:,} bytes")
        return np.memmap(binary, np.uint8, mode="r", shape=(size,))
    text = ddir / f"{stem}.hex"
    if not text.is_file():
        raise InputError(f"{binary}: no such file (nor {text.name})")
    return np.frombuffer(read_hex_bytes(text, bus_bits, size, exact=True), np.uint8)
