"""Sync unit: FENCE, SIGNAL, WAIT and HALT, and the semaphores."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..dma import ChannelStatus
from ..lib import MAX_EXTRA_COPIES, register_copies, sem_bits
from .common import (CauseCode, SignalMessage, StatusCode, StopRequest, UnitInsn,
                     first_fault_cause, semaphore_shape)

__all__ = ["SyncUnit"]


class SyncUnit(wiring.Component):
    """Executes FENCE, SIGNAL, WAIT and HALT; holds the semaphores.

    * ``FENCE``: waits until every channel of its mask (0: all) is ``done``
      (seen a cycle later: the check is registered, as a WAIT's); if one of
      them faulted, stops ``FAULT`` with the cause of the lowest-numbered
      one; else the mask's channels are fenced.
    * ``SIGNAL``: sends (device, semaphore) on ``sig``.
    * ``WAIT``: waits until the semaphore reaches the count, then (two
      cycles after it is at the head: its operands and the comparison are
      registered, off the decoded word and the retire path) subtracts it;
      while known below (checked below a cycle earlier, no signal arriving
      since: from its third cycle at the head), ``blocked`` is high (from a
      register), and ``quiesced`` stops the program
      ``ABORTED`` / ``DEADLOCK`` (whatever ``step`` says: a blocked device
      holds no grant). ``quiesced`` says that nothing in the system can
      progress: every device stopped or ``blocked`` in the previous cycle and
      nothing in flight, so this WAIT is still below its count.
    * ``HALT``: waits until every channel is done, then stops ``HALTED``, or
      ``FAULT`` (lowest faulted channel's cause).

    ``unfenced`` marks the channels with a COPY issued (``issued``) since
    their last FENCE (COMMIT refuses to run while any is). Semaphores count
    incoming signals (``sig_in``, always ready) and saturate at the largest
    count a WAIT can name.

    Parameters
    ----------
    arch : :class:`hw.isa.ArchParams`

    Interface attributes
    --------------------
    insn : ``In(stream.Signature(UnitInsn()))``
    step : ``In(1)``
        Lock-step permission to retire or stop.
    stop : ``Out(stream.Signature(StopRequest()))``
    blocked : ``Out(1)``
    restart : ``In(1)``
        A new run: semaphores and fences cleared.
    quiesced : ``In(1)``
    done : ``In(channels)``
        From the feeder.
    chan_status : ``In(ChannelStatus(arch)).array(channels)``
    issued : ``In(channels)``
        From COPY issue.
    unfenced : ``Out(channels)``
    sig : ``Out(stream.Signature(SignalMessage(arch)))``
    sig_in : ``In(stream.Signature(sem_bits(arch)))``
    semaphores : ``Out(semaphore_shape()).array(semaphores)``
    """

    def __init__(self, arch):
        self._arch = arch
        C = arch.channels
        super().__init__({
            "insn": In(stream.Signature(UnitInsn())),
            "step": In(1),
            "stop": Out(stream.Signature(StopRequest())),
            "blocked": Out(1),
            "restart": In(1),
            "quiesced": In(1),
            "done": In(C),
            "chan_status": In(ChannelStatus(arch)).array(C),
            "issued": In(C),
            "unfenced": Out(C),
            "sig": Out(stream.Signature(SignalMessage(arch))),
            "sig_in": In(stream.Signature(sem_bits(arch))),
            "semaphores": Out(semaphore_shape()).array(arch.semaphores),
        })

    def _wait_check(self, m, w, op):
        """A WAIT's check in two registers, off the decoded word and off the
        retire path: its semaphore number and count are registered (``at``,
        ``held_count``) in the cycle it is offered, compared with the
        semaphores in the next (``reached``), and the result is registered
        (``satisfied``): it retires two cycles after it reached the head with
        its count met. Until it retires its semaphore can only grow."""
        count = w.wait.count
        held_count = Signal.like(count)
        checking = Signal()         # a WAIT was offered and not taken in the last cycle
        at = Signal(len(self.semaphores))
        m.d.sync += [held_count.eq(count),
                     checking.eq(self.insn.valid & ~self.insn.ready & op.wait & ~self.restart),
                     at.eq(Cat(*[w.wait.sem == s for s in range(len(self.semaphores))]))]
        # a copy of the held count per pair of semaphores (their comparators and
        # adders), so no one register spreads over all of them
        S = len(self.semaphores)
        copies = [held_count] + register_copies(m, count, 1, min(MAX_EXTRA_COPIES, (S - 1) // 2),
                                                name="held_count_copy")
        held = [copies[s * len(copies) // S] for s in range(S)]
        # the comparison and the conditions on the WAIT still being there are
        # registered apart (their AND is read after the registers): the
        # comparators' OR tree does not also wait for the late ``insn.ready``
        met = Signal()              # the checked semaphore had reached its count
        m.d.sync += met.eq((held_count == 0) | Cat(*[
            at[s] & (val >= held[s]) for s, val in enumerate(self.semaphores)]).any())
        still = Signal()            # the checked WAIT was offered and not taken again
        quiet = Signal()            # ... and no signal arrived meanwhile
        stays = checking & ~self.insn.ready & ~self.restart
        m.d.sync += [still.eq(stays), quiet.eq(stays & ~self.sig_in.valid)]
        satisfied = Signal()
        # checked below its count and no signal arrived since (semaphores only
        # grow by signals while it waits): still below now, so ``blocked``
        # comes from registers, not through the comparison
        below = Signal()
        m.d.comb += [satisfied.eq(met & still), below.eq(~met & quiet)]
        # ``satisfied`` implies the WAIT is still at the head (it was offered and
        # not taken, and a restart clears the check), so the retire needs no
        # flag of the instruction: the semaphores never wait on the decoded word
        return held, at, checking, below, satisfied

    def elaborate(self, platform):
        m = Module()
        C = self._arch.channels
        w, op, step = self.insn.p.word, self.insn.p.op, self.step
        error = Signal(C)
        m.d.comb += error.eq(Cat(*[s.error for s in self.chan_status]))

        held, at, checking, below, satisfied = self._wait_check(m, w, op)
        wait_retires = Signal()
        m.d.comb += wait_retires.eq(satisfied & step)
        # a WAIT that took from its semaphore (what verif's DMA monitor watches)
        sem_taken = Signal()
        m.d.comb += sem_taken.eq(wait_retires & (w.wait.count != 0))

        # semaphores: +1 per incoming signal (saturating), -count per retiring
        # WAIT; both results are ready before the (late) retire decision picks one.
        # A retiring WAIT's count and semaphore are the registered ones: the
        # decoded instruction does not reach the semaphores' adders. Every sum
        # is made from registers, with and without the incoming signal, and the
        # signal (from the interconnect, far away) only selects among them: it
        # never enters a carry chain
        top = (1 << semaphore_shape().width) - 1
        m.d.comb += self.sig_in.ready.eq(1)
        for s, val in enumerate(self.semaphores):
            inc = self.sig_in.valid & (self.sig_in.p == s)
            up = Signal.like(val, name=f"up{s}")
            m.d.comb += up.eq(val + 1)
            grown = Mux(inc & (val != top), up, val)
            # the WAIT checked val >= count, and val has not dropped since: no
            # borrow, and with count >= 1 no saturation either
            taken, taken_up = Signal.like(val, name=f"taken{s}"), Signal.like(val, name=f"taken_up{s}")
            m.d.comb += [taken.eq(val - held[s]), taken_up.eq(up - held[s])]
            waited = Signal.like(val, name=f"waited{s}")
            m.d.comb += waited.eq(Mux(inc, taken_up, taken))
            here = Signal(name=f"wait_here{s}")
            m.d.comb += here.eq(at[s] & (held[s] != 0))
            with m.If(self.restart):
                m.d.sync += val.eq(0)
            with m.Elif(wait_retires & here):
                m.d.sync += val.eq(waited)
            with m.Else():
                m.d.sync += val.eq(grown)

        # fences
        fmask = Signal(C)
        m.d.comb += fmask.eq(Mux(self.insn.p.fence_all, (1 << C) - 1, w.fence.mask[:C]))
        fence_cause = first_fault_cause(m, fmask, self.chan_status)
        all_cause = first_fault_cause(m, Const((1 << C) - 1, C), self.chan_status)

        m.d.comb += [self.sig.p.dev.eq(w.signal.dev), self.sig.p.sem.eq(w.signal.sem)]
        stop = self.stop.p
        fenced, fence_faulted = Signal(), Signal()
        m.d.comb += [fenced.eq((self.done | ~fmask).all()), fence_faulted.eq((fmask & error).any())]
        # a FENCE's check is registered too, off the retire path: while it waits
        # its channels can only finish or fault (nothing issues behind it)
        fence_clear, fence_fault = Signal(), Signal()
        waiting_fence = self.insn.valid & ~self.insn.ready & op.fence & fenced & ~self.restart
        m.d.sync += [fence_clear.eq(waiting_fence & ~fence_faulted),
                     fence_fault.eq(waiting_fence & fence_faulted)]
        with m.If(self.restart):
            m.d.sync += self.unfenced.eq(0)
        with m.Elif(fence_clear & step):                 # the FENCE retires
            m.d.sync += self.unfenced.eq((self.unfenced | self.issued) & ~fmask)
        with m.Else():
            m.d.sync += self.unfenced.eq(self.unfenced | self.issued)
        # the retire condition as one AND-OR; the registered checks imply their
        # instruction is at the head, like ``satisfied``
        m.d.comb += self.insn.ready.eq(step & (
            fence_clear | satisfied | self.insn.valid & op.signal & self.sig.ready))
        # a stop's payload from the opcode flags and the status, its valid apart:
        # the late conditions reach one bit
        v = self.insn.valid
        with m.If(op.fence):
            m.d.comb += [stop.status.eq(StatusCode.FAULT), stop.cause.eq(fence_cause)]
        with m.Elif(op.wait):
            m.d.comb += [stop.status.eq(StatusCode.ABORTED), stop.cause.eq(CauseCode.DEADLOCK)]
        with m.Elif(error.any()):                   # a HALT with a faulted channel
            m.d.comb += [stop.status.eq(StatusCode.FAULT), stop.cause.eq(all_cause)]
        with m.Else():
            m.d.comb += [stop.status.eq(StatusCode.HALTED), stop.cause.eq(CauseCode.NONE)]
        # quiesced implies blocked (see the class documentation), so a WAIT's
        # DEADLOCK stop does not wait for the semaphore comparison; a WAIT is
        # blocked only once known below its count (never in its first two
        # cycles at the head, nor the cycle after a signal arrives: a false
        # blocked could make another device see a false deadlock)
        m.d.comb += [
            self.stop.valid.eq(v & (op.fence & step & fence_fault
                                    | op.wait & ~satisfied & self.quiesced
                                    | op.halt & step & self.done.all())),
            self.sig.valid.eq(v & op.signal & step),
            self.blocked.eq(v & op.wait & checking & below),
        ]
        return m
