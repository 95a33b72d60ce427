"""Adder stage 6: round to nearest even and pack."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Mux, Signal

from .common import LaneStage
from .layouts import GUARD_BITS, AddResult, Lanes, NormLane, ext_bits

__all__ = ["RoundPack"]


class RoundPack(LaneStage):
    """Per lane: round to nearest, ties to even, on the guard bit and the
    sticky OR of the bits below it, and pack. The rounding increment may
    carry into the exponent (a subnormal becomes normal, a significand of all
    ones moves up a binade, the largest finite number becomes infinity).
    Finally the special cases: the canonical quiet NaN
    (:attr:`~.common.FloatFormat.quiet_nan`) or an infinity. One register;
    parameters as :class:`~.common.LaneStage`.

    Interface attributes
    --------------------
    i : ``In(stream.Signature(Lanes(NormLane(fmt), lanes, user_shape)))``
    o : ``Out(stream.Signature(AddResult(fmt, lanes, user_shape)))``
    """

    @staticmethod
    def in_layout(fmt, lanes, user_shape):
        return Lanes(NormLane(fmt), lanes, user_shape)

    @staticmethod
    def out_layout(fmt, lanes, user_shape):
        return AddResult(fmt, lanes, user_shape)

    def _lane(self, m, k, s):
        f = self._fmt
        E, F, W = f.exp_bits, f.frac_bits, ext_bits(f)
        norm = s.norm
        guard = norm[GUARD_BITS - 1]
        sticky = norm[:GUARD_BITS - 1].any()
        up = guard & (sticky | norm[GUARD_BITS])
        field = Mux(norm[W - 1], s.exp, 0)            # no hidden one: subnormal (or zero)
        packed = Signal(E + F + 2, name=f"packed{k}")
        m.d.comb += packed.eq(Cat(norm[GUARD_BITS:GUARD_BITS + F], field) + up)
        overflow = packed[F:] >= f.exp_max
        out = Signal(f.width, name=f"res{k}")
        with m.If(s.nan):
            m.d.comb += out.eq(f.quiet_nan)
        with m.Elif(s.inf | overflow):
            m.d.comb += out.eq(Cat(Const(f.infinity, E + F), s.sign))
        with m.Else():
            m.d.comb += out.eq(Cat(packed[:E + F], s.sign))
        return out

    def compute(self, m, p):
        w = self._fmt.width
        out = [self.o.p.user.eq(p.user)]
        for k in range(self._lanes):
            out.append(self.o.p.sum[k * w:(k + 1) * w].eq(self._lane(m, k, p.lanes[k])))
        return out
