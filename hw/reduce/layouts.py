"""Payload layouts of the adder's ports and of the streams between its stages.

Every layout is per format (``fmt``, a :class:`~.common.FloatFormat`) and
lane count, and carries a side-band ``user`` field through unchanged (what
:class:`~.rmw.ReduceOnWrite` uses to keep a beat's address with its sum).
"""
from __future__ import annotations

from amaranth.lib import data

__all__ = ["GUARD_BITS", "AddOperands", "AddResult", "OrderedLane", "AlignedLane", "AddedLane",
           "SumLane", "NormLane", "Lanes"]

#: Bits kept below a significand's last place while aligning and adding:
#: guard, round and sticky, enough for round-to-nearest-even of a sum.
GUARD_BITS = 3


def ext_bits(fmt):
    """Width of an aligned significand: hidden one, fraction, guard/round/sticky."""
    return fmt.sig_bits + GUARD_BITS


class AddOperands(data.StructLayout):
    """The adder's input: two words of ``lanes`` elements each, and side-band."""
    def __init__(self, fmt, lanes, user_shape):
        super().__init__({"a": fmt.width * lanes, "b": fmt.width * lanes, "user": user_shape})


class AddResult(data.StructLayout):
    """The adder's output: the word of lane-by-lane sums, and the side-band."""
    def __init__(self, fmt, lanes, user_shape):
        super().__init__({"sum": fmt.width * lanes, "user": user_shape})


class OrderedLane(data.StructLayout):
    """One lane after ordering by magnitude: what :class:`AlignedLane` holds,
    with the smaller operand's significand not yet shifted (``small``) and
    the places to shift it by (``shift``, the exponent difference capped at
    :func:`ext_bits`)."""
    def __init__(self, fmt):
        super().__init__({
            "sign": 1, "exp": fmt.exp_bits, "sub": 1, "nan": 1, "inf": 1,
            "big": fmt.sig_bits, "small": fmt.sig_bits, "shift": range(ext_bits(fmt) + 1),
        })


class AlignedLane(data.StructLayout):
    """One lane after alignment: the operand of larger magnitude (``big``,
    its significand with the hidden one) and the other one shifted to its
    exponent (``small``, with guard, round and sticky bits below).

    ``exp`` is the larger operand's exponent (1 for a subnormal), ``sign``
    its sign, ``sub`` whether the signs differ. ``nan`` / ``inf``: the
    result is the quiet NaN / an infinity of sign ``sign``, whatever the
    rest says.
    """
    def __init__(self, fmt):
        super().__init__({
            "sign": 1, "exp": fmt.exp_bits, "sub": 1, "nan": 1, "inf": 1,
            "big": fmt.sig_bits, "small": ext_bits(fmt),
        })


class AddedLane(data.StructLayout):
    """One lane after the addition: the exact-or-sticky sum ``sum`` (one
    carry bit above the aligned width), the exponent of its hidden-one
    position ``exp``, the result's ``sign``, the special flags, and
    ``floor``: a one at the place normalization may not shift the sum's
    leading one past (``ext_bits - exp``: the exponent steps down to 1 at
    most), none when ``exp`` leaves room for any shift."""
    def __init__(self, fmt):
        super().__init__({
            "sign": 1, "exp": fmt.exp_bits, "nan": 1, "inf": 1, "sum": ext_bits(fmt) + 1,
            "floor": ext_bits(fmt),
        })


class SumLane(data.StructLayout):
    """An :class:`AddedLane` and ``left``: how far normalization shifts
    ``sum`` left when it has no carry (its leading zeros, but never below
    the smallest exponent)."""
    def __init__(self, fmt):
        super().__init__({
            "sign": 1, "exp": fmt.exp_bits, "nan": 1, "inf": 1,
            "sum": ext_bits(fmt) + 1, "left": range(ext_bits(fmt) + 1),
        })


class NormLane(data.StructLayout):
    """One lane after normalization: the significand with its hidden one (if
    any) at the top and guard, round and sticky bits below (``norm``), the
    exponent it now has (``exp``, one bit wider: a carry may reach the
    largest), and the sign and special flags."""
    def __init__(self, fmt):
        super().__init__({
            "sign": 1, "exp": fmt.exp_bits + 1, "nan": 1, "inf": 1, "norm": ext_bits(fmt),
        })


class Lanes(data.StructLayout):
    """``lanes`` copies of ``lane_layout`` and the side-band: a stage's payload."""
    def __init__(self, lane_layout, lanes, user_shape):
        super().__init__({"lanes": data.ArrayLayout(lane_layout, lanes), "user": user_shape})
