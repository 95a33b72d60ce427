"""Small decode tables for the reader and the writer: word and beat counts
of a command without a carry chain on its low address bits."""
from __future__ import annotations

from amaranth.hdl import Cat, Signal

__all__ = ["case_table", "round_up_table", "more_than_one"]


def case_table(m, name, width, sel, fn):
    """``fn(v)`` for every value ``v`` of ``sel``, as a case table: synthesis
    builds it from a LUT or two, where an adder or a comparison of the same
    few bits would start a carry chain (a command's fields come off a queue's
    LUT RAM read, late in the cycle)."""
    out = Signal(width, name=name)
    with m.Switch(sel):
        for v in range(1 << len(sel)):
            with m.Case(v):
                m.d.comb += out.eq(int(fn(v)))
    return out


def round_up_table(m, name, first, lo, less=0):
    """``max(ceil((first + lo) / B) - less, 0)`` (0, 1 or 2) for a byte offset
    ``first`` and the low ``log2(B)`` bits ``lo`` of a length: with ``len =
    hi * B + lo``, ``ceil((first + len) / B)`` is ``hi`` plus this (``less``
    of 0), so the count is one short adder from a LUT and "more than one" a
    few gates from ``hi``'s bits (see :func:`more_than_one`)."""
    wb = len(first)
    B = 1 << wb
    return case_table(m, name, 2, Cat(first, lo),
                      lambda v: max(-(-((v & (B - 1)) + (v >> wb)) // B) - less, 0))


def more_than_one(hi, up):
    """``hi + up >= 2`` for ``up`` in 0..2 (a :func:`round_up_table`)."""
    return hi[1:].any() | (hi[0] & (up != 0)) | (up == 2)
