"""COPY issue: a COPY instruction becomes a DMA descriptor."""
from __future__ import annotations

from amaranth.hdl import Module, Mux
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..dma import CopyDescriptor
from ..reduce import ReduceOp
from .common import UnitInsn

__all__ = ["CopyIssue"]


class CopyIssue(wiring.Component):
    """Turns COPY instructions (and ISA v2's reduce copies, ``COPY_ADD_F32`` /
    ``COPY_ADD_BF16``, whose opcode becomes the descriptor's ``op``) into
    descriptors, one per cycle.

    A combinational stage: the instruction retires when its descriptor is
    taken (by its channel's queue in the feeder), and only while ``step``
    (which, like a lock-step grant, stays high until the instruction at hand
    retires, so an offer on ``desc`` is never withdrawn).
    The decoder has checked the channel, context and address widths; the
    addresses are cut to ``arch.addr_bits``.

    Parameters
    ----------
    arch : :class:`hw.isa.ArchParams`

    Interface attributes
    --------------------
    insn : ``In(stream.Signature(UnitInsn()))``
        COPY instructions.
    step : ``In(1)``
        Lock-step permission to retire.
    desc : ``Out(stream.Signature(CopyDescriptor(arch, channels)))``
    issued : ``Out(channels)``
        One-hot: a descriptor of that channel was taken this cycle.
    """

    def __init__(self, arch):
        self._arch = arch
        super().__init__({
            "insn": In(stream.Signature(UnitInsn())),
            "step": In(1),
            "desc": Out(stream.Signature(CopyDescriptor(arch, arch.channels))),
            "issued": Out(arch.channels),
        })

    def elaborate(self, platform):
        m = Module()
        A = self._arch.addr_bits
        f, op, d = self.insn.p.word.copy, self.insn.p.op, self.desc.p
        m.d.comb += [
            d.chan.eq(f.chan), d.ctx.eq(f.ctx), d.tag.eq(f.tag),
            d.src.eq(f.src[:A]), d.dst.eq(f.dst[:A]),
            d.row_bytes.eq(f.row_bytes), d.rows.eq(f.rows),
            d.src_stride.eq(f.src_stride), d.dst_stride.eq(f.dst_stride),
            d.op.eq(Mux(op.copy_add_f32, ReduceOp.ADD_F32,
                        Mux(op.copy_add_bf16, ReduceOp.ADD_BF16, ReduceOp.WRITE))),
            self.desc.valid.eq(self.insn.valid & self.step),
            self.insn.ready.eq(self.desc.ready & self.step),
        ]
        fire = self.desc.valid & self.desc.ready
        m.d.comb += [self.issued[c].eq(fire & (d.chan == c)) for c in range(self._arch.channels)]
        return m
