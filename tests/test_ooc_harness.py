"""The three-pin harness of iCE40 out-of-context builds: the block sees the
bits shifted in, and the bits shifted out are the block's outputs."""
import random

import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from gen.simkit import run_simulation
from hw.ooc_harness import OocHarness


class AddXor(wiring.Component):
    """A small block with inputs and outputs of several widths."""
    def __init__(self):
        super().__init__({"a": In(5), "b": In(3), "c": In(1), "s": Out(6), "x": Out(2)})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [self.s.eq(self.a + self.b), self.x.eq(self.b[:2] ^ self.c)]
        return m


def test_harness_shifts_inputs_in_and_outputs_out():
    blk = AddXor()
    h = OocHarness(blk)
    assert (h.in_bits, h.out_bits) == (9, 8)
    assert h.cost == {"ff": 17, "lut4": 8}
    rng = random.Random(3)
    seen = []

    async def tb(ctx):
        for _ in range(20):
            a, b, c = rng.randrange(32), rng.randrange(8), rng.randrange(2)
            word = a | b << 5 | c << 8             # the inputs in port order, a's bit 0 first
            for i in reversed(range(9)):           # the last bit shifted in lands in bit 0
                ctx.set(h.si, word >> i & 1)
                await ctx.tick()
            assert (ctx.get(blk.a), ctx.get(blk.b), ctx.get(blk.c)) == (a, b, c)
            ctx.set(h.load, 1)
            await ctx.tick()
            ctx.set(h.load, 0)
            bits = 0
            for i in range(8):
                bits |= ctx.get(h.so) << i
                await ctx.tick()
            seen.append(((a, b, c), bits))

    run_simulation(h, [tb])
    for (a, b, c), bits in seen:
        assert bits == (a + b) | ((b & 3) ^ c) << 6


def test_harness_rejects_what_it_cannot_observe():
    with pytest.raises(TypeError, match="must be a wiring.Component"):
        OocHarness(Module())

    class NoOutputs(wiring.Component):
        def __init__(self):
            super().__init__({"a": In(2)})

        def elaborate(self, platform):
            return Module()
    with pytest.raises(ValueError, match="NoOutputs has no outputs to observe"):
        OocHarness(NoOutputs())
