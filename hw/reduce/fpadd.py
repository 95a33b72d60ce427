"""The floating-point lane adder: align, add, normalize-and-round."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Shape
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .addsub import AddSub
from .align import Align
from .count import Count
from ..lib import RegisterSlice
from .common import check_format, check_lane_width
from .layouts import AddOperands, AddResult
from .normalize import Normalize
from .order import Order
from .roundpack import RoundPack

__all__ = ["FpAdd"]


class FpAdd(wiring.Component):
    """Adds two words lane by lane: ``sum[k] = a[k] + b[k]`` for each of the
    ``data_width // element bits`` elements, in IEEE 754 binary arithmetic.

    Seven register stages joined by streams: the operand register, a
    :class:`hw.lib.RegisterSlice` (so whatever chooses the operands, a
    memory's output among them, does not share a cycle with the adder, and
    ``i.ready`` comes from a register, not from ``o.ready`` through every
    stage),
    :class:`~.order.Order` (unpack, order by magnitude),
    :class:`~.align.Align` (shift the smaller), :class:`~.addsub.AddSub`
    (add or subtract significands), :class:`~.count.Count` (the sum's
    leading zeros), :class:`~.normalize.Normalize` and
    :class:`~.roundpack.RoundPack` (round to nearest even, pack).

    * **Throughput**: one word a cycle; each stage loads while it is empty or
      its payload is being taken, so under back-pressure nothing is dropped or
      repeated, and bubbles close up.
    * **Latency**: :attr:`latency` = 7 cycles from the clock edge that accepts
      a word on ``i`` to its sum offered on ``o`` (when ``o`` is not stalled).
      The pipeline holds at most :attr:`capacity` = 8 words (the operand
      register's skid entry takes one more while ``o`` is stalled).
    * **Rounding**: round to nearest, ties to even; subnormal inputs and
      outputs are exact IEEE (no flush to zero); an overflow rounds to an
      infinity.
    * **Signed zeros**: ``-0 + -0 = -0``, ``+0 + -0 = +0``, ``x + -x = +0``.
    * **Specials**: an infinity plus a finite number is that infinity;
      ``inf + -inf`` is NaN; any NaN in gives the canonical quiet NaN out,
      :attr:`quiet_nan` (``0x7FC00000`` for f32, ``0x7FC0`` for bf16: sign
      0, payload dropped). No exception flags.

    Parameters
    ----------
    fmt : str
        Element format: ``"f32"`` (IEEE binary32) or ``"bf16"`` (bfloat16:
        binary32's exponent with 7 fraction bits).
    data_width : int
        Word width in bits, a positive multiple of the element width (32 or 16),
        e.g. a bus width 32, 64, 128 or 256. Lane ``k`` is bits
        ``[k * w, (k + 1) * w)`` for element width ``w`` (little-endian
        element order, as the elements of a tensor lie in memory).
    user_shape : shape-castable
        Side-band carried with each word from ``i`` to ``o`` unchanged
        (default: none).
    own_operands : bool
        The operand register's reset value is all ones (default False), so
        an adder fed the same operands as another keeps an operand register
        of its own near its stages instead of sharing one that synthesis
        merged (FPGA timing; see :class:`hw.lib.RegisterSlice`).

    Interface attributes
    --------------------
    i : ``In(stream.Signature(AddOperands))``
        ``a``, ``b``: the operand words; ``user``: side-band.
    o : ``Out(stream.Signature(AddResult))``
        ``sum``: the word of sums; ``user``: the operands' side-band.
    """

    #: Register stages from ``i`` to ``o``: operands, order, align, add,
    #: count, normalize, round.
    STAGES = 7

    def __init__(self, fmt, data_width, *, user_shape=0, own_operands=False):
        f = check_format(fmt)
        self._own_operands = bool(own_operands)
        self._fmt = f
        self._lanes = check_lane_width(data_width, f)
        self._data_width = data_width
        self._user_shape = user_shape
        super().__init__({
            "i": In(stream.Signature(AddOperands(f, self._lanes, user_shape))),
            "o": Out(stream.Signature(AddResult(f, self._lanes, user_shape))),
        })

    fmt = property(lambda self: self._fmt.name, doc="Element format name.")
    format = property(lambda self: self._fmt, doc="Element format (:class:`~.common.FloatFormat`).")
    data_width = property(lambda self: self._data_width, doc="Word width in bits.")
    lanes = property(lambda self: self._lanes, doc="Elements per word.")
    element_width = property(lambda self: self._fmt.width, doc="Bits per element.")
    latency = property(lambda self: self.STAGES,
                       doc="Cycles from accepting a word to offering its sum.")
    capacity = property(lambda self: self.STAGES + 1,
                        doc="The most words inside: one per stage and the operand register's "
                            "skid entry.")
    quiet_nan = property(lambda self: self._fmt.quiet_nan, doc="The NaN every NaN result is.")
    user_shape = property(lambda self: self._user_shape, doc="Side-band shape.")

    def elaborate(self, platform):
        m = Module()
        f, n, user = self._fmt, self._lanes, self._user_shape
        stages = [Order(f, n, user), Align(f, n, user), AddSub(f, n, user),
                  Count(f, n, user), Normalize(f, n, user), RoundPack(f, n, user)]
        for stage in stages:
            m.submodules[type(stage).__name__.lower()] = stage
        operands_shape = AddOperands(f, n, user)
        init = (1 << Shape.cast(operands_shape).width) - 1 if self._own_operands else 0
        m.submodules.operands = operands = RegisterSlice(operands_shape, payload_init=init)
        wiring.connect(m, wiring.flipped(self.i), operands.i)
        # Forward: stream to stream. Backward: a stage's i.ready is
        # ~o.valid | o.ready, so chained, stage k may load when some stage
        # after it is empty or o.ready: written out flat, the late o.ready
        # reaches every stage's enable through one OR, not through a gate
        # per stage (the same value, so the same cycles).
        chain = [operands, *stages]
        for k, (a, b) in enumerate(zip(chain, chain[1:] + [None])):
            if b is None:
                m.d.comb += [self.o.valid.eq(a.o.valid), self.o.payload.eq(a.o.payload),
                             a.o.ready.eq(self.o.ready)]
                continue
            full_after = Cat(*[s.o.valid for s in chain[k + 1:]]).all()
            m.d.comb += [b.i.valid.eq(a.o.valid), b.i.payload.eq(a.o.payload),
                         a.o.ready.eq(~full_after | self.o.ready)]
        return m
