"""Check an executor's final state against the independently sliced rollout shards.

Any executor (golden model, Amaranth RTL, Verilog) hands over its final
physical memories and TLB contents; the rollout tensors are read through the
committed rollout context (context 1) and compared, byte for byte, with real
tensors of a randomly initialised HF model sliced by vLLM's rules
(:mod:`model.reference`), never with anything the compiler produced.
"""
from __future__ import annotations

import numpy as np
import torch

from hw.isa import PERM_R, ArchParams
from model.errors import InputError
from model.models import random_state_dict, spec_from_config
from model.reference import rollout_buffers, train_buffers
from model.specs import parse_spec

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def to_bytes(buf: np.ndarray, dtype: str) -> bytes:
    t = torch.from_numpy(np.ascontiguousarray(buf)).to(TORCH_DTYPES[dtype])
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def reference_buffers(manifest: dict) -> tuple[list[bytes], list[bytes]]:
    """(training shards, rollout shards) in the program's dtype, per device."""
    src = manifest["source"]
    model = spec_from_config(src["config"], name=src["model"])
    sd = random_state_dict(model, seed=src["seed"])
    train = parse_spec(src["train"], "train")
    rollout = parse_spec(src["rollout"], "rollout")
    return (_converted(train_buffers(sd, model, train), src["dtype"]),
            _converted(rollout_buffers(sd, model, rollout, train.world), src["dtype"]))


def _converted(buffers: list, dtype: str) -> list[bytes]:
    """The buffers in ``dtype``, each fp32 buffer dropped once converted (a
    0.5B model's fp32 shards are gigabytes)."""
    out = []
    while buffers:
        out.append(to_bytes(buffers.pop(0), dtype))
    return out


def read_through(memories, tlb: list[dict], arch: ArchParams, ctx: int, va: int, n: int) -> bytes | None:
    """Read n bytes at va through the active (committed) entries of ctx; None if unmapped."""
    out = bytearray()
    # entries as the executors report them: the valid ones, each with its index;
    # the lowest index wins, as in the MMU
    entries = sorted((e for e in tlb if e.get("valid", True) and not e["staged"] and e["ctx"] == ctx),
                     key=lambda e: e.get("index", 0))
    while n > 0:
        for e in entries:
            size = arch.page_sizes[e["size"]]
            if e["va"] <= va < e["va"] + size and e["perm"] & PERM_R:
                take = min(n, e["va"] + size - va)
                pa = e["pa"] + va - e["va"]
                mem = memories[e["dev"]]
                if pa + take > len(mem):
                    return None
                out += bytes(mem[pa:pa + take])
                va += take
                n -= take
                break
        else:
            return None
    return bytes(out)


def verify(manifest: dict, memories, tlbs: list[list[dict]], expected_rollout: list[bytes] | None = None) -> dict:
    """Compare every device's committed rollout tensors with the reference shards."""
    arch = ArchParams.from_json(manifest["arch"])
    if expected_rollout is None:
        _, expected_rollout = reference_buffers(manifest)
    es = manifest["source"]["elem_bytes"]
    mismatches = []
    checked = 0
    for dev in manifest["devices"]:
        d = dev["device"]
        ref = expected_rollout[d]
        for t in dev["tensors"]:
            want = ref[t["off"] * es: t["off"] * es + t["bytes"]]
            got = read_through(memories, tlbs[d], arch, 1, t["va"], t["bytes"])
            checked += t["bytes"]
            if got is None:
                mismatches.append({"device": d, "tensor": t["name"], "problem": "not mapped in the rollout context"})
            elif got != want:
                a = np.frombuffer(got, np.uint8)
                b = np.frombuffer(want, np.uint8)
                first = int(np.flatnonzero(a != b)[0])
                mismatches.append({"device": d, "tensor": t["name"], "problem": "bytes differ",
                                   "first_byte": first, "bytes_differing": int((a != b).sum())})
    return {"verified": not mismatches, "bytes_checked": checked, "mismatches": mismatches[:20]}


def check_manifest(manifest: dict, path: str):
    for key in ("isa_version", "arch", "devices", "source"):
        if key not in manifest:
            raise InputError(f"{path}: manifest has no {key!r}")
