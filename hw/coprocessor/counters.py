"""Counters: cycles, bytes written per channel, descriptors, zero-copy bytes."""
from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..lib import counter_shape
from .common import WriteBeatSignature, beat_bytes

__all__ = ["Counters", "commit_bytes_shape"]


def commit_bytes_shape(arch):
    """Zero-copy bytes one COMMIT can make active: every TLB entry a largest page."""
    return counter_shape(arch.tlb_entries * arch.page_sizes[-1])


class Counters(wiring.Component):
    """The run's performance counters, cleared by ``restart``.

    Parameters
    ----------
    arch : :class:`hw.isa.ArchParams`
    data_width : int
        DMA bus width.
    counter_width : int
        Width of the cycle and byte counters (they wrap).

    Interface attributes
    --------------------
    restart : ``In(1)``
        Clear every counter.
    begin : ``In(1)``
        Clear the byte counters (the previous run's leftovers are drained).
    running : ``In(1)``
        Count this cycle.
    beat : ``In(WriteBeatSignature(channels, data_width))``
        Bytes written, per channel.
    issued : ``In(channels)``
        A COPY was issued (one-hot channel).
    committed : ``In(1)``, commit_bytes : ``In(commit_bytes_shape(arch))``
        A COMMIT was sent; in the third cycle after it, ``commit_bytes`` are
        the zero-copy bytes it makes active (summed as the MMU places it,
        :class:`hw.device.CommitBytes`), added to ``bytes_remapped`` at the
        end of that cycle.
    cycles : ``Out(counter_width)``
    chan_bytes : ``Out(counter_width).array(channels)``
    descriptors : ``Out(counter_shape(imem_words))``
        COPYs issued (at most one per instruction word: programs have no branches).
    bytes_remapped : ``Out(counter_width)``
    """

    def __init__(self, arch, *, data_width, counter_width):
        C, cw = arch.channels, counter_width
        super().__init__({
            "restart": In(1), "begin": In(1), "running": In(1),
            "beat": In(WriteBeatSignature(C, data_width)),
            "issued": In(C),
            "committed": In(1),
            "commit_bytes": In(commit_bytes_shape(arch)),
            "cycles": Out(cw),
            "chan_bytes": Out(cw).array(C),
            "descriptors": Out(counter_shape(arch.imem_words)),
            "bytes_remapped": Out(cw),
        })

    def elaborate(self, platform):
        m = Module()
        nbytes = Signal(range(len(self.beat.be) + 1))
        m.d.comb += nbytes.eq(beat_bytes(self.beat.be))
        # a COMMIT was sent 1, 2, 3 cycles ago (the MMU places it, its bytes are
        # summed, then added); a restart drops the previous run's
        placed, summed, committed = Signal(), Signal(), Signal()
        m.d.sync += [placed.eq(self.committed & ~self.restart),
                     summed.eq(placed & ~self.restart), committed.eq(summed & ~self.restart)]
        with m.If(self.restart):
            m.d.sync += [self.cycles.eq(0), self.descriptors.eq(0), self.bytes_remapped.eq(0)]
        with m.Else():
            with m.If(self.running):
                m.d.sync += self.cycles.eq(self.cycles + 1)
            with m.If(self.issued.any()):
                m.d.sync += self.descriptors.eq(self.descriptors + 1)
            with m.If(committed):
                m.d.sync += self.bytes_remapped.eq(self.bytes_remapped + self.commit_bytes)
        for c, count in enumerate(self.chan_bytes):
            with m.If(self.restart | self.begin):
                m.d.sync += count.eq(0)
            with m.Elif(self.beat.valid & (self.beat.chan == c)):
                m.d.sync += count.eq(count + nbytes)
        return m
