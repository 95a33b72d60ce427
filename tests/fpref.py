"""numpy reference for the reduction datapath's tests (hw/reduce), on bit patterns:
the golden model's arithmetic (model/fpadd.py) plus edge values and checks.

Never the code under test: f32 sums are numpy's (IEEE 754 binary32, round to
nearest even, subnormals kept). numpy has no bfloat16; the correctly rounded
bf16 sum of two bf16 numbers is the f32 sum rounded to bf16 (RNE), because
double rounding is innocuous when the wider format's precision p' = 24 is at
least 2p + 2 = 18 for bf16's p = 8 (Figueroa, "When is double rounding
innocuous?", 1995). Both formats share binary32's exponent range, so there
is no double rounding in the subnormal range either: a sum of two bf16
numbers there is a multiple of bf16's smallest subnormal, exact in f32.
"""
from __future__ import annotations

import numpy as np

from model.fpadd import BF16_QNAN, F32_QNAN, bf16_add, f32_add

WIDTH = {"f32": 32, "bf16": 16}
QNAN = {"f32": F32_QNAN, "bf16": BF16_QNAN}


def add(fmt, a, b):
    """Reference sums of ``fmt`` bit patterns, as Python ints."""
    out = f32_add(a, b) if fmt == "f32" else bf16_add(a, b)
    return [int(x) for x in np.atleast_1d(out)]


def is_nan(fmt, x):
    exp_bits, frac_bits = 8, (23 if fmt == "f32" else 7)
    return (x >> frac_bits) & ((1 << exp_bits) - 1) == (1 << exp_bits) - 1 \
        and x & ((1 << frac_bits) - 1) != 0


def canonical(fmt, x):
    """``x`` with any NaN replaced by the hardware's quiet NaN."""
    return QNAN[fmt] if is_nan(fmt, x) else x


def edge_values(fmt):
    """Bit patterns at the edges of ``fmt``: signed zeros, the smallest and
    largest subnormals, the smallest and largest normals, ones and their
    neighbours, values just below a binade's end (carries), infinities,
    quiet and signalling NaNs of both signs."""
    frac_bits = 23 if fmt == "f32" else 7
    w = WIDTH[fmt]
    sign = 1 << (w - 1)
    one = 127 << frac_bits
    fmask = (1 << frac_bits) - 1
    inf = 0xFF << frac_bits
    pos = [
        0, 1, 2, 3, fmask - 1, fmask,                     # zero, subnormals
        1 << frac_bits, (1 << frac_bits) | 1,             # smallest normals
        (2 << frac_bits) - 1, (2 << frac_bits) | fmask,   # binade ends
        one, one | 1, one - 1, one | fmask, one + (1 << frac_bits),
        (one + (24 << frac_bits)) | 0x5,                  # 2**24-ish: large shifts against 1
        inf - 1, inf - 2, inf - (1 << frac_bits),         # largest finite ones
        inf, inf | 1, inf | (1 << (frac_bits - 1)), inf | fmask,   # inf, sNaN, qNaN
    ]
    return pos + [p | sign for p in pos]


def check_sums(fmt, pairs, got):
    """Each sum equals numpy's bit for bit; where numpy's is a NaN, the
    hardware's is the documented quiet NaN."""
    ref = add(fmt, [a for a, _ in pairs], [b for _, b in pairs])
    w = WIDTH[fmt] // 4
    bad = [f"{a:0{w}x} + {b:0{w}x}: got {g:0{w}x}, numpy {r:0{w}x}"
           for (a, b), g, r in zip(pairs, got, ref)
           if (g != QNAN[fmt] if is_nan(fmt, r) else g != r)]
    assert not bad, f"{len(bad)} of {len(pairs)} sums wrong:\n" + "\n".join(bad[:20])
