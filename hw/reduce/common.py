"""What every stage of the reduction datapath shares: the floating-point
formats, the argument checks, and the pipeline register.

A format is described by its exponent and fraction widths; everything else
(bias, the all-ones exponent of infinities and NaNs, the canonical quiet NaN)
follows from them, so the stages are written once for ``f32`` and ``bf16``.
"""
from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["FloatFormat", "FORMATS", "check_format", "check_lane_width", "pipeline_register",
           "LaneStage"]


@dataclass(frozen=True)
class FloatFormat:
    """An IEEE 754 binary interchange format: 1 sign bit, ``exp_bits``
    exponent bits, ``frac_bits`` stored fraction bits."""
    name: str
    exp_bits: int
    frac_bits: int

    @property
    def width(self):
        """Bits of one element."""
        return 1 + self.exp_bits + self.frac_bits

    @property
    def exp_max(self):
        """The all-ones exponent field (infinities and NaNs)."""
        return (1 << self.exp_bits) - 1

    @property
    def sig_bits(self):
        """Significand bits including the hidden one (the precision p)."""
        return self.frac_bits + 1

    @property
    def quiet_nan(self):
        """The canonical quiet NaN every NaN result is: sign 0, exponent all
        ones, fraction MSB set (``0x7FC00000`` for f32, ``0x7FC0`` for bf16)."""
        return (self.exp_max << self.frac_bits) | (1 << (self.frac_bits - 1))

    @property
    def infinity(self):
        """Bit pattern of +infinity."""
        return self.exp_max << self.frac_bits


#: The formats the datapath adds.
FORMATS = {
    "f32": FloatFormat("f32", exp_bits=8, frac_bits=23),
    "bf16": FloatFormat("bf16", exp_bits=8, frac_bits=7),
}


def check_format(fmt):
    """The :class:`FloatFormat` named ``fmt``; ``ValueError`` quoting it otherwise."""
    if not isinstance(fmt, str) or fmt not in FORMATS:
        raise ValueError(f"Format must be one of {', '.join(map(repr, FORMATS))}, not {fmt!r}")
    return FORMATS[fmt]


def check_lane_width(data_width, fmt):
    """Lanes of a ``data_width``-bit word of ``fmt`` elements; ``ValueError``
    quoting ``data_width`` unless it is a positive multiple of the element width."""
    if (not isinstance(data_width, int) or isinstance(data_width, bool) or data_width <= 0
            or data_width % fmt.width):
        raise ValueError(f"Data width must be a positive multiple of {fmt.width} bits "
                         f"({fmt.name} elements), not {data_width!r}")
    return data_width // fmt.width


def pipeline_register(m, i, o, compute):
    """Join stream ``i`` to stream ``o`` through one register stage.

    ``o`` holds one payload: it loads ``compute(i.payload)`` (a list of
    statements assigning ``o.payload``) when it is empty or being emptied,
    so a stage passes one payload a cycle, and a payload offered on ``o``
    and not taken stays there unchanged (nothing dropped, nothing repeated).
    ``i.ready`` is combinational from ``o.ready``: back-pressure reaches the
    head of a chain of such stages in the same cycle.
    """
    load = ~o.valid | o.ready
    m.d.comb += i.ready.eq(load)
    # ``compute`` runs outside the enable: the combinational logic it adds
    # must not depend on ``load`` (which comes late, from ``o.ready``), only
    # the register's enable does
    update = compute(i.payload)
    with m.If(load):
        m.d.sync += o.valid.eq(i.valid)
        with m.If(i.valid):
            m.d.sync += update


class LaneStage(wiring.Component):
    """One register stage of the adder: ``o`` loads what :meth:`compute`
    makes of ``i`` (a :func:`pipeline_register`), lane by lane, the
    side-band ``user`` carried along unchanged.

    A stage class names its payloads with ``in_layout(fmt, lanes,
    user_shape)`` and ``out_layout(...)`` and defines ``compute(m, p)``: the
    statements that assign ``self.o.p`` from the input payload ``p`` (any
    combinational logic it needs goes into ``m``).

    Parameters
    ----------
    fmt : :class:`FloatFormat`
    lanes : int
        Elements per word.
    user_shape : shape-castable
        Side-band carried alongside, unchanged.
    """

    def __init__(self, fmt, lanes, user_shape=0):
        self._fmt, self._lanes = fmt, lanes
        super().__init__({
            "i": In(stream.Signature(self.in_layout(fmt, lanes, user_shape))),
            "o": Out(stream.Signature(self.out_layout(fmt, lanes, user_shape))),
        })

    def elaborate(self, platform):
        m = Module()
        pipeline_register(m, self.i, self.o, lambda p: self.compute(m, p))
        return m
