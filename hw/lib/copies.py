"""Copies of a register that synthesis keeps apart, so each can sit near
the logic it feeds (FPGA timing: one register spread over far apart
comparators routes across the chip)."""
from __future__ import annotations

from amaranth.hdl import Signal, Value

__all__ = ["MAX_EXTRA_COPIES", "register_copies"]

#: Ways a copy can differ from a plain register whose reset value is zero:
#: (stored inverted, reset value all ones). Yosys merges flip-flops with the
#: same input, enable and reset value, even when they carry ``keep``; it
#: keeps an inverted copy and one of another reset value apart.
_KINDS = ((True, False), (False, True), (True, True))
MAX_EXTRA_COPIES = len(_KINDS)


def register_copies(m, value, load, count, *, name):
    """``count`` more registers (at most :data:`MAX_EXTRA_COPIES`) that
    load ``value`` at every edge where ``load`` is high, each returned as
    the value it holds (a copy stored inverted is read through an inverter,
    which synthesis folds into the logic it feeds).

    They differ from a plain register only before their first load (the
    reset value), so they serve registers whose readers ignore them until
    the first load, as a pipeline's payload."""
    if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= MAX_EXTRA_COPIES:
        raise ValueError(f"Copies must be an integer in 0..{MAX_EXTRA_COPIES}, not {count!r}")
    value = Value.cast(value)
    width = len(value)
    copies = []
    for k, (inverted, ones) in enumerate(_KINDS[:count]):
        held = Signal(width, name=f"{name}{k + 1}", init=(1 << width) - 1 if ones else 0)
        with m.If(load):
            m.d.sync += held.eq(~value if inverted else value)
        copies.append(~held if inverted else held)
    return copies
