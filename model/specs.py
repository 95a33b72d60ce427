"""Parallel plans as written on the command line.

Training: ``fsdp1:dp=N``, ``fsdp2:dp=N``, ``megatron:tp=T,pp=P,dp=D``.
Rollout:  ``vllm:tp=T`` or ``vllm:tp=T,pp=P`` (colocated: replicas fill the world).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from model.errors import InputError

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}

_KEYS = {
    "fsdp1": ("dp",),
    "fsdp2": ("dp",),
    "megatron": ("tp", "pp", "dp"),
    "vllm": ("tp", "pp"),
}
_REQUIRED = {"fsdp1": ("dp",), "fsdp2": ("dp",), "megatron": ("tp",), "vllm": ("tp",)}


@dataclass(frozen=True)
class ParallelSpec:
    kind: str          # fsdp1 | fsdp2 | megatron | vllm
    tp: int = 1
    pp: int = 1
    dp: int = 1

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    def __str__(self):
        if self.kind in ("fsdp1", "fsdp2"):
            return f"{self.kind}:dp={self.dp}"
        if self.kind == "megatron":
            return f"megatron:tp={self.tp},pp={self.pp},dp={self.dp}"
        s = f"vllm:tp={self.tp}"
        return s + (f",pp={self.pp}" if self.pp > 1 else "")


def parse_spec(text: str, role: str) -> ParallelSpec:
    """Parse a training (role='train') or rollout (role='rollout') spec."""
    allowed = ("fsdp1", "fsdp2", "megatron") if role == "train" else ("vllm",)
    m = re.fullmatch(r"\s*([a-z0-9]+)\s*:\s*(.*?)\s*", text or "")
    if not m:
        raise InputError(f"malformed {role} spec {text!r}: expected e.g. "
                         f"{'fsdp2:dp=8' if role == 'train' else 'vllm:tp=4'}")
    kind, rest = m.group(1), m.group(2)
    if kind not in allowed:
        raise InputError(f"unknown {role} strategy {kind!r} in {text!r}: use one of {', '.join(allowed)}")
    values = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        km = re.fullmatch(r"([a-z]+)\s*=\s*([0-9]+)", item)
        if not km:
            raise InputError(f"malformed {role} spec {text!r}: cannot read {item!r} (want key=positive integer)")
        key, val = km.group(1), int(km.group(2))
        if key not in _KEYS[kind]:
            raise InputError(f"{role} spec {text!r}: {kind} takes {', '.join(_KEYS[kind])}, not {key!r}")
        if key in values:
            raise InputError(f"{role} spec {text!r}: {key!r} given twice")
        if val <= 0:
            raise InputError(f"{role} spec {text!r}: {key} must be positive, not {val}")
        values[key] = val
    for key in _REQUIRED[kind]:
        if key not in values:
            raise InputError(f"{role} spec {text!r}: {kind} needs {key}=N")
    return ParallelSpec(kind, tp=values.get("tp", 1), pp=values.get("pp", 1), dp=values.get("dp", 1))


def parse_dtype(text: str) -> int:
    if text not in DTYPE_BYTES:
        raise InputError(f"unknown dtype {text!r}: use one of {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[text]
