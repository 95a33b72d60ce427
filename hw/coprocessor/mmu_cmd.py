"""MMU command unit: REMAP, INVAL and COMMIT."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
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
      until the command register is empty and the MMU idle (``mmu_idle``:
      every earlier REMAP / INVAL has taken effect) and is sent. The device
      reads the commit bytes from the TLB as the MMU places it, and nothing
      else changes the TLB until the COMMIT takes effect, so they are the
      bytes it activates (sent while a command is still in flight, a staged
      REMAP right before the COMMIT would be missed, and an entry that a
      staged INVAL right before it removes would be counted).

    A command leaves from a register (``cmd`` straight from flip-flops,
    loaded only while empty), so the MMU's ``ready`` reaches neither the
    retire decision nor the MMU's command register enable through it: an
    instruction is taken only while the register is empty, and the MMU
    takes the command a cycle later at the earliest (so one command every
    second cycle, the rate the MMU's command unit accepts anyway).
    ``committed`` pulses when the MMU takes a COMMIT, and ``flush`` (the
    DMA's translation caches) in the cycle after the MMU takes any command:
    the DMA is idle then, or the command is a staged INVAL, which changes no
    active translation. A stop's status and cause come from the channels'
    status alone, only its ``valid`` from the instruction.

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
        To the DMA: the cycle after the MMU took a command.
    committed : ``Out(1)``
        The MMU takes a COMMIT (this cycle).
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
        # the command register: loaded when an instruction is taken, emptied when
        # the MMU takes it
        cmd_full = Signal()
        nxt = Signal.like(cmd)
        with m.If(op.remap):
            m.d.comb += [nxt.op.eq(MmuOp.REMAP), nxt.ctx.eq(fr.ctx), nxt.size.eq(fr.size),
                         nxt.perm.eq(fr.perm), nxt.staged.eq(fr.staged), nxt.dev.eq(fr.dev),
                         nxt.va.eq(fr.va[:A]), nxt.pa.eq(fr.pa[:A])]
        with m.Elif(op.inval):
            m.d.comb += [nxt.op.eq(MmuOp.INVAL), nxt.ctx.eq(fi.ctx), nxt.size.eq(fi.size),
                         nxt.staged.eq(fi.staged), nxt.va.eq(fi.va[:A])]
        with m.Else():
            m.d.comb += [nxt.op.eq(MmuOp.COMMIT), nxt.ctx.eq(fc.ctx)]
        # the retire condition as one AND-OR of the opcode flags and terms of the
        # status alone (the latter ready before the instruction's flags are)
        unfenced, faulted = Signal(), Signal()
        m.d.comb += [unfenced.eq(self.unfenced.any()), faulted.eq(all_done & error.any())]
        commit_ok = ~unfenced & ~faulted & all_done & self.mmu_idle
        sent = Signal()
        m.d.comb += sent.eq(self.insn.valid & step & ~cmd_full
                            & ((op.remap | op.inval & ~fi.staged) & all_done
                               | op.inval & fi.staged | op.commit & commit_ok))
        m.d.comb += self.insn.ready.eq(sent)
        handed = self.cmd.valid & self.cmd.ready
        with m.If(~cmd_full):
            m.d.sync += cmd.eq(nxt)
        with m.If(sent):
            m.d.sync += cmd_full.eq(1)
        with m.Elif(handed):
            m.d.sync += cmd_full.eq(0)
        m.d.sync += self.flush.eq(handed)
        m.d.comb += [self.cmd.valid.eq(cmd_full),
                     self.committed.eq(handed & (cmd.op == MmuOp.COMMIT))]

        # a stop's payload from the status alone: the flags reach only its valid
        m.d.comb += [
            self.stop.valid.eq(self.insn.valid & step & op.commit & (unfenced | faulted)),
            stop.status.eq(Mux(unfenced, StatusCode.ILLEGAL, StatusCode.FAULT)),
            stop.cause.eq(Mux(unfenced, CauseCode.COMMIT_UNFENCED, all_cause)),
        ]
        return m
