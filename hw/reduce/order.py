"""Adder stage 1: unpack both operands and order them by magnitude."""
from __future__ import annotations

from amaranth.hdl import Cat, Mux, Signal

from .common import LaneStage
from .layouts import AddOperands, Lanes, OrderedLane, ext_bits

__all__ = ["Order"]


def _above(x, limit):
    """``x > limit`` for a constant ``limit``, as logic on ``x``'s bits: the
    bits above ``limit``'s width, any set, or the low bits' compare written
    out bit by bit. (Synthesis maps ``x > limit`` to a carry chain, and after
    the exponent subtraction's chain a second one was the board's critical
    path: a few LUT inputs decide it.)"""
    k = limit.bit_length()
    low, over = x[:k], x[k:].any() if len(x) > k else 0
    # low > limit: at the highest bit where they differ, low has a one
    above = 0
    equal_above = 1
    for i in reversed(range(k)):
        if not (limit >> i) & 1:
            above = above | (equal_above & low[i])
            equal_above = equal_above & ~low[i]
        else:
            equal_above = equal_above & low[i]
    return over | above


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
        small_sig = Mux(swap, ua["sig"], ub["sig"])

        # The shift, max(e_big, 1) - max(e_small, 1) capped at W: both
        # orders' differences (and their capped forms) are worked out beside
        # the magnitude compare, which then only selects (a compare, a
        # subtraction and a cap in a row would not fit one cycle).
        ea, eb = a[F:F + E], b[F:F + E]
        za, zb = ea == 0, eb == 0

        def capped(d, tag):
            diff = Signal(E, name=f"diff{k}_{tag}")
            m.d.comb += diff.eq(d)
            return Mux(_above(diff, W), W, diff)

        # a >= b: eb <= ea, so only b can be subnormal alone (and counts 1)
        shift_ab = Mux(zb & ~za, capped(ea - 1, "a1"), capped(ea - eb, "ab"))
        shift_ba = Mux(za & ~zb, capped(eb - 1, "b1"), capped(eb - ea, "ba"))
        return {
            "sign": big["sign"], "exp": big["exp"], "sub": ua["sign"] ^ ub["sign"],
            "nan": ua["nan"] | ub["nan"] | (ua["inf"] & ub["inf"] & (ua["sign"] ^ ub["sign"])),
            "inf": ua["inf"] | ub["inf"],
            "big": big["sig"], "small": small_sig, "shift": Mux(swap, shift_ba, shift_ab),
        }

    def compute(self, m, p):
        w = self._fmt.width
        out = [self.o.p.user.eq(p.user)]
        for k in range(self._lanes):
            fields = self._lane(m, k, p.a[k * w:(k + 1) * w], p.b[k * w:(k + 1) * w])
            out += [getattr(self.o.p.lanes[k], name).eq(v) for name, v in fields.items()]
        return out
