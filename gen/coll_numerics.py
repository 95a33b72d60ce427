"""numpy arithmetic of the collective checks: sums in a given order, ulp distances, the order bound.

Written for the checks, not shared with the golden model (``model/fpadd.py``): f32 sums are numpy's
binary32 sums (round to nearest even, subnormals kept); a bf16 sum is the f32 sum of two bf16 values
rounded once to bf16, nearest even (double rounding is innocuous: 24 >= 2 * 8 + 2), NaNs canonical
as the hardware writes them. See docs/collectives.md for the bound.
"""
from __future__ import annotations

import numpy as np

__all__ = ["tree_sum", "ulp_distance", "sum_order_bound"]


def _to_bf16_bits(f32: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (nearest, ties to even) as uint16 patterns; NaN -> 0x7FC0."""
    u = f32.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f32), np.uint16(0x7FC0), r)


def _values(raw: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values of little-endian f32 or bf16 bytes (bf16 is exact in f32)."""
    if dtype == "float32":
        return raw.view(np.float32)
    return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def _bits(vals: np.ndarray, dtype: str) -> np.ndarray:
    """Bytes of float32 ``vals`` stored as ``dtype`` (rounded once for bf16), NaNs canonical."""
    if dtype == "float32":
        out = vals.astype(np.float32).view(np.uint32).copy()
        out[np.isnan(vals)] = 0x7FC00000
        return out.view(np.uint8)
    return _to_bf16_bits(vals).view(np.uint8)


def tree_sum(tree, parts: list[np.ndarray], dtype: str) -> np.ndarray:
    """numpy's sum of byte arrays ``parts`` (one per rank) in the order ``tree`` gives, as bytes."""
    def ev(t):
        if isinstance(t, int):
            return _values(parts[t], dtype)
        with np.errstate(all="ignore"):
            s = ev(t[0]) + ev(t[1])          # float32 + float32: IEEE binary32, nearest even
        return _values(_bits(s, dtype), dtype)   # rounded to the format after every add
    return _bits(ev(tree), dtype)


def ulp_distance(a: np.ndarray, b: np.ndarray, dtype: str) -> int:
    """Largest number of representable steps between ``a`` and ``b`` element by element (bytes of
    ``dtype``); bit patterns of ints compare exactly (0 or 1 step)."""
    if len(a) == 0:
        return 0
    if dtype not in ("float32", "bfloat16"):
        return 0 if np.array_equal(a, b) else 1
    w, sign = (np.uint32, 0x80000000) if dtype == "float32" else (np.uint16, 0x8000)
    ua, ub = a.view(w).astype(np.int64), b.view(w).astype(np.int64)

    def ordered(u):
        return np.where(u & sign, -(u & (sign - 1)), u)
    va, vb = _values(a, dtype), _values(b, dtype)
    nan = np.isnan(va) | np.isnan(vb)
    if np.any(np.isnan(va) != np.isnan(vb)):
        return 1 << 32
    d = np.abs(ordered(ua) - ordered(ub))
    return int(d[~nan].max(initial=0))


def sum_order_bound(inputs: list[np.ndarray], dtype: str) -> np.ndarray:
    """Largest |difference| (float64, per element) between two sums of the same p values in any two
    orders, each p-1 additions rounded to ``dtype``: every rounding is at most half an ulp of its
    partial sum, every partial sum is at most Y = sum |x_i| (1 + 2 p u), so each order is within
    (p-1)/2 ulp(Y) of the exact sum and two orders within (p-1) ulp(Y)."""
    p = len(inputs)
    mant, u = (23, 2.0 ** -24) if dtype == "float32" else (7, 2.0 ** -8)
    y = np.sum([np.abs(_values(x, dtype).astype(np.float64)) for x in inputs], axis=0) * (1 + 2 * p * u)
    _, e = np.frexp(y)
    ulp = np.ldexp(1.0, np.maximum(e - 1, -126) - mant)
    return np.where(y > 0, (p - 1) * ulp, 0.0)
