"""A three-pin harness for building one block "out of context" where the
place-and-route tool has no such mode (nextpnr-ice40): the block's inputs
come from a shift register fed by one pin, its outputs are captured into a
shift register read out on another.

Every input bit is then a flip-flop and every output bit feeds one, so the
block's paths are timed register to register as in a real design, and no
input is a constant the synthesis could fold the logic away with. What the
harness adds is known from the block's port widths (:attr:`OocHarness.cost`)
and reported beside the totals.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["OocHarness"]


class OocHarness(wiring.Component):
    """A block between an input shift chain and an output capture chain.

    Each cycle the input chain shifts ``si`` in by one bit (the block's
    inputs are its bits). While ``load`` is high the output chain captures
    every output bit of the block; while it is low it shifts them out on
    ``so``, one a cycle, first output bit first.

    Parameters
    ----------
    block : :class:`amaranth.lib.wiring.Component`
        The block to harness (its ``sync`` domain is the harness's).

    Interface attributes
    --------------------
    si : ``In(1)``
        The input chain's serial input.
    load : ``In(1)``
        Capture the outputs (high) or shift them out (low).
    so : ``Out(1)``
        The output chain's serial output.
    """

    def __init__(self, block):
        if not isinstance(block, wiring.Component):
            raise TypeError(f"The block must be a wiring.Component, not {block!r}")
        self._block = block
        ins, outs = [], []
        for _path, member, value in block.signature.flatten(block):
            (ins if member.flow == In else outs).append(Value.cast(value))
        if not outs:
            raise ValueError(f"{type(block).__name__} has no outputs to observe")
        self._ins, self._outs = ins, outs
        super().__init__({"si": In(1), "load": In(1), "so": Out(1)})

    block = property(lambda self: self._block, doc="The harnessed block.")
    in_bits = property(lambda self: sum(len(v) for v in self._ins), doc="Input bits of the block.")
    out_bits = property(lambda self: sum(len(v) for v in self._outs), doc="Output bits of the block.")

    @property
    def cost(self):
        """What the harness itself takes: a flip-flop per input and output
        bit, and a LUT4 (capture or shift) per output bit."""
        return {"ff": self.in_bits + self.out_bits, "lut4": self.out_bits}

    def elaborate(self, platform):
        m = Module()
        m.submodules.block = self._block
        chain_in = Signal(max(1, self.in_bits))
        m.d.sync += chain_in.eq(Cat(self.si, chain_in[:-1]))
        if self._ins:
            m.d.comb += Cat(*self._ins).eq(chain_in)
        outs = Cat(*self._outs)
        chain_out = Signal(len(outs))
        with m.If(self.load):
            m.d.sync += chain_out.eq(outs)
        with m.Else():
            m.d.sync += chain_out.eq(chain_out >> 1)
        m.d.comb += self.so.eq(chain_out[0])
        return m
