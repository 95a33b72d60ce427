"""MMU command unit: REMAP, INVAL and COMMIT."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..dma import ChannelStatus
from ..mmu import MmuCommand, MmuOp
from .common import CauseCode, StatusCode, StopRequest, UnitInsn, first_fault_cause

__all__ = ["MmuCommandUnit"]


class MmuCommandUnit(wiring.Component):
    """Executes REMAP, INVAL and COMMIT as commands on the MMU's ``cmd`` stream.

    * ``REMAP``, and an immediate ``INVAL``, wait until every channel is
      ``done`` (the ISA's implicit fence, without a fault check; a staged
      REMAP waits too, since placing a staged entry may evict an active one
      that a copy in flight still needs); a staged ``INVAL`` goes at once.
    * ``COMMIT`` stops ``ILLEGAL`` / ``COMMIT_UNFENCED`` if a channel has a
      COPY since its last FENCE; else waits until every channel is done and
      stops ``FAULT`` if one faulted (lowest channel's cause); else waits
      until the MMU is idle (``mmu_idle``: every earlier REMAP / INVAL has
      taken effect) and is sent, and ``committed`` pulses. The commit bytes
      are read from the TLB in that cycle, and nothing else changes the TLB
      until the COMMIT takes effect, so they are the bytes it activates (sent
      while a command is still in flight, a staged REMAP right before the
      COMMIT would be missed, and an entry that a staged INVAL right before
      it removes would be counted).

    Every command sent pulses ``flush`` (the DMA's translation caches).

    Parameters
    ----------
    arch : :class:`hw.isa.ArchParams`

    Interface attributes
    --------------------
    insn : ``In(stream.Signature(UnitInsn()))``
    step : ``In(1)``
        Lock-step permission to retire or stop.
    stop : ``Out(stream.Signature(StopRequest()))``
    done : ``In(channels)``
        From the feeder.
    chan_status : ``In(ChannelStatus(arch)).array(channels)``
    unfenced : ``In(channels)``
        From the sync unit.
    cmd : ``Out(stream.Signature(MmuCommand(arch)))``
        To the MMU.
    mmu_idle : ``In(1)``
        From the MMU's ``idle``: every command sent has taken effect. Reset
        value 1, for a testbench that answers for the MMU at once.
    flush : ``Out(1)``
        To the DMA.
    committed : ``Out(1)``
        A COMMIT was sent.
    """

    def __init__(self, arch):
        self._arch = arch
        C = arch.channels
        super().__init__({
            "insn": In(stream.Signature(UnitInsn())),
            "step": In(1),
            "stop": Out(stream.Signature(StopRequest())),
            "done": In(C),
            "chan_status": In(ChannelStatus(arch)).array(C),
            "unfenced": In(C),
            "cmd": Out(stream.Signature(MmuCommand(arch))),
            "mmu_idle": In(1, init=1),
            "flush": Out(1),
            "committed": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        A, C = self._arch.addr_bits, self._arch.channels
        w, op = self.insn.p.word, self.insn.p.op
        cmd, stop, step = self.cmd.p, self.stop.p, self.step
        all_done, error = Signal(), Signal(C)
        m.d.comb += [all_done.eq(self.done.all()),
                     error.eq(Cat(*[s.error for s in self.chan_status]))]
        all_cause = first_fault_cause(m, Const((1 << C) - 1, C), self.chan_status)
        fr, fi, fc = w.remap, w.inval, w.commit
        with m.If(op.remap):
            m.d.comb += [cmd.op.eq(MmuOp.REMAP), cmd.ctx.eq(fr.ctx), cmd.size.eq(fr.size),
                         cmd.perm.eq(fr.perm), cmd.staged.eq(fr.staged), cmd.dev.eq(fr.dev),
                         cmd.va.eq(fr.va[:A]), cmd.pa.eq(fr.pa[:A])]
        with m.Elif(op.inval):
            m.d.comb += [cmd.op.eq(MmuOp.INVAL), cmd.ctx.eq(fi.ctx), cmd.size.eq(fi.size),
                         cmd.staged.eq(fi.staged), cmd.va.eq(fi.va[:A])]
        with m.Else():
            m.d.comb += [cmd.op.eq(MmuOp.COMMIT), cmd.ctx.eq(fc.ctx)]
        # the retire condition as one AND-OR of the opcode flags and terms of the
        # status alone (the latter ready before the instruction's flags are)
        unfenced, faulted = Signal(), Signal()
        m.d.comb += [unfenced.eq(self.unfenced.any()), faulted.eq(all_done & error.any())]
        commit_ok = ~unfenced & ~faulted & all_done & self.mmu_idle
        sent = Signal()
        m.d.comb += sent.eq(self.insn.valid & step & self.cmd.ready
                            & ((op.remap | op.inval & ~fi.staged) & all_done
                               | op.inval & fi.staged | op.commit & commit_ok))
        m.d.comb += [self.flush.eq(sent), self.insn.ready.eq(sent)]

        with m.If(self.insn.valid & step):
            with m.If(op.remap | op.inval):
                at_once = op.inval & fi.staged        # a staged INVAL
                m.d.comb += self.cmd.valid.eq(all_done | at_once)
            with m.Elif(op.commit):
                with m.If(unfenced):
                    m.d.comb += [self.stop.valid.eq(1), stop.status.eq(StatusCode.ILLEGAL),
                                 stop.cause.eq(CauseCode.COMMIT_UNFENCED)]
                with m.Elif(faulted):
                    m.d.comb += [self.stop.valid.eq(1), stop.status.eq(StatusCode.FAULT),
                                 stop.cause.eq(all_cause)]
                with m.Elif(all_done & self.mmu_idle):
                    m.d.comb += [self.cmd.valid.eq(1),
                                 self.committed.eq(self.cmd.ready)]
        return m
