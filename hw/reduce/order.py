"""Adder stage 1: unpack both operands and order them by magnitude."""
from __future__ import annotations

from amaranth.hdl import Cat, Mux, Signal

from .common import LaneStage
from .layouts import AddOperands, Lanes, OrderedLane, ext_bits

__all__ = ["Order"]


class Order(LaneStage):
    """Per lane: classify both operands (NaN, infinity), put the one of
    larger magnitude in ``big`` and the other in ``small``, and work out how
    far :class:`~.align.Align` must shift ``small``: the exponent difference,
    capped where only the sticky bit would be left. A subnormal's exponent
    counts as 1 and its hidden bit as 0, so subnormals need no special case.
    One register; parameters as :class:`~.common.LaneStage`.

    Interface attributes
    --------------------
    i : ``In(stream.Signature(AddOperands(fmt, lanes, user_shape)))``
    o : ``Out(stream.Signature(Lanes(OrderedLane(fmt), lanes, user_shape)))``
    """

    @staticmethod
    def in_layout(fmt, lanes, user_shape):
        return AddOperands(fmt, lanes, user_shape)

    @staticmethod
    def out_layout(fmt, lanes, user_shape):
        return Lanes(OrderedLane(fmt), lanes, user_shape)

    def _lane(self, m, k, a, b):
        f = self._fmt
        E, F = f.exp_bits, f.frac_bits
        W = ext_bits(f)

        def unpack(x):
            e, frac = x[F:F + E], x[:F]
            normal = e != 0
            return {"sign": x[-1], "exp": Mux(normal, e, 1), "sig": Cat(frac, normal),
                    "nan": (e == f.exp_max) & (frac != 0), "inf": (e == f.exp_max) & (frac == 0)}

        ua, ub = unpack(a), unpack(b)
        swap = Signal(name=f"swap{k}")
        m.d.comb += swap.eq(b[:E + F] > a[:E + F])      # magnitudes compare as integers
        big = {key: Mux(swap, ub[key], ua[key]) for key in ("sign", "exp", "sig")}
        small = {key: Mux(swap, ua[key], ub[key]) for key in ("exp", "sig")}
        diff = Signal(E, name=f"diff{k}")
        m.d.comb += diff.eq(big["exp"] - small["exp"])
        return {
            "sign": big["sign"], "exp": big["exp"], "sub": ua["sign"] ^ ub["sign"],
            "nan": ua["nan"] | ub["nan"] | (ua["inf"] & ub["inf"] & (ua["sign"] ^ ub["sign"])),
            "inf": ua["inf"] | ub["inf"],
            "big": big["sig"], "small": small["sig"], "shift": Mux(diff > W, W, diff),
        }

    def compute(self, m, p):
        w = self._fmt.width
        out = [self.o.p.user.eq(p.user)]
        for k in range(self._lanes):
            fields = self._lane(m, k, p.a[k * w:(k + 1) * w], p.b[k * w:(k + 1) * w])
            out += [getattr(self.o.p.lanes[k], name).eq(v) for name, v in fields.items()]
        return out
