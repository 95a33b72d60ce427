"""The ISA's reduce-on-write arithmetic (COPY_ADD_F32 / COPY_ADD_BF16), in numpy.

The golden model's definition of an add: IEEE 754 round to nearest, ties to
even, subnormals kept, every NaN result the canonical quiet NaN. f32 sums are
numpy's binary32 sums. numpy has no bfloat16; the correctly rounded bf16 sum
of two bf16 numbers is their f32 sum rounded to bf16 (RNE), because double
rounding is innocuous when the wider precision (24) is at least 2p + 2 for
bf16's p = 8 (Figueroa, "When is double rounding innocuous?", 1995), and both
formats share binary32's exponent range (a subnormal bf16 sum is exact in f32).
"""
from __future__ import annotations

import numpy as np

__all__ = ["F32_QNAN", "BF16_QNAN", "f32_add", "bf16_add", "add_bytes"]

F32_QNAN = 0x7FC00000
BF16_QNAN = 0x7FC0


def f32_add(a, b):
    """Bit patterns (uint32) of the binary32 sums of bit patterns ``a`` and ``b``,
    NaNs canonical."""
    fa = np.asarray(a, dtype=np.uint32).view(np.float32)
    fb = np.asarray(b, dtype=np.uint32).view(np.float32)
    with np.errstate(all="ignore"):
        s = fa + fb
    return np.where(np.isnan(s), np.uint32(F32_QNAN), s.view(np.uint32)).astype(np.uint32)


def _round_to_bf16(x):
    """uint32 f32 patterns rounded to nearest bf16, ties to even (uint16); a NaN
    becomes the canonical bf16 NaN."""
    x = np.asarray(x, dtype=np.uint32).astype(np.uint64)
    nan = ((x >> 23) & 0xFF == 0xFF) & (x & 0x7FFFFF != 0)
    lsb = (x >> 16) & 1
    rounded = ((x + 0x7FFF + lsb) >> 16) & 0xFFFF
    return np.where(nan, BF16_QNAN, rounded).astype(np.uint16)


def bf16_add(a, b):
    """Bit patterns (uint16) of the correctly rounded bf16 sums, NaNs canonical."""
    wa = np.asarray(a, dtype=np.uint32) << 16
    wb = np.asarray(b, dtype=np.uint32) << 16
    return _round_to_bf16(f32_add(wa, wb))


def add_bytes(old: np.ndarray, new: np.ndarray, element_bytes: int) -> np.ndarray:
    """Little-endian byte arrays of whole elements (f32 when ``element_bytes``
    is 4, bf16 when 2): ``old + new`` element by element, as bytes."""
    old = np.ascontiguousarray(old, dtype=np.uint8)
    new = np.ascontiguousarray(new, dtype=np.uint8)
    if element_bytes == 4:
        out = f32_add(old.view("<u4"), new.view("<u4")).astype("<u4")
    elif element_bytes == 2:
        out = bf16_add(old.view("<u2"), new.view("<u2")).astype("<u2")
    else:
        raise ValueError(f"element size must be 2 or 4 bytes, not {element_bytes!r}")
    return out.view(np.uint8)
