"""Sequencer: start, clear, execute, stop; lock-step grants; dispatch to the units."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .common import UNIT_OPS, CauseCode, Decoded, StatusCode, StopRequest, UnitInsn

__all__ = ["Sequencer", "UNIT_OPS"]


class Sequencer(wiring.Component):
    """Runs a program: ``STOPPED`` -> ``CLEAR`` -> ``EXEC`` -> ``STOPPED``.

    * ``STOPPED``: ``start`` pulses ``restart`` (the units clear their
      per-run state) and sets the status to ``RUNNING``;
    * ``CLEAR``: ``clearing`` is high (the program counter is held at word 0,
      the DMA's channels, the descriptor queues and the fault queue are
      cleared) until ``drained``; the last cycle pulses ``begin``;
    * ``EXEC``: ``run`` is high and the decoded instructions on ``insn`` are
      executed in order. An illegal one stops with ``ILLEGAL`` and its cause
      (every stop takes effect a cycle after it is asked for);
      a VERSION retires here; every other instruction goes to the unit of
      :data:`UNIT_OPS` on the stream of that name, and retires when the unit
      takes it. Which one is the decoder's ``unit`` flags (registered with
      the instruction), so the retire decision is an AND-OR of flags and the
      units' ``ready``. A unit may instead stop the program (``sync_stop``,
      ``mmu_stop``): the status and cause are set and the program counter
      stays at the instruction.

    Lock-step: with ``step_mode`` high, ``step`` (the units' permission to
    retire or stop an instruction) is high only under ``step_grant`` and
    until ``step_ack``; ``step_ack`` pulses when an instruction retires or
    stops, or when a WAIT is found ``blocked`` under the grant.

    Interface attributes
    --------------------
    start, step_mode, step_grant : ``In(1)``
    step_ack : ``Out(1)``
    status : ``Out(StatusCode)``
    cause : ``Out(CauseCode)``
    insn : ``In(stream.Signature(Decoded(imem_words)))``
    copy, sync, mmu : ``Out(stream.Signature(UnitInsn()))``
    sync_stop, mmu_stop : ``In(stream.Signature(StopRequest()))``
        Always ready: a stop request takes effect at once.
    blocked : ``In(1)``
        The sync unit is blocked in a WAIT.
    step : ``Out(1)``
    restart, begin : ``Out(1)``
    clearing, run : ``Out(1)``
    pc : ``Out(range(imem_words + 1))``
        The program counter: 0 from a start, then one past the last retired
        instruction; so while an instruction waits or after the program
        stopped, its address.
    drained : ``In(1)``
        The previous run's leftovers are gone (DMA idle and without errors,
        queues empty).
    """

    def __init__(self, imem_words):
        unit = Out(stream.Signature(UnitInsn()))
        stop = In(stream.Signature(StopRequest()))
        super().__init__({
            "start": In(1), "step_mode": In(1), "step_grant": In(1), "step_ack": Out(1),
            "status": Out(StatusCode), "cause": Out(CauseCode),
            "insn": In(stream.Signature(Decoded(imem_words))),
            "copy": unit, "sync": unit, "mmu": unit,
            "sync_stop": stop, "mmu_stop": stop,
            "blocked": In(1), "step": Out(1),
            "restart": Out(1), "begin": Out(1), "clearing": Out(1), "run": Out(1),
            "drained": In(1),
            "pc": Out(range(imem_words + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        insn = self.insn
        # lock-step: one instruction per grant
        stepped = Signal()
        m.d.comb += self.step.eq(~self.step_mode | (self.step_grant & ~stepped))
        with m.If(~self.step_grant):
            m.d.sync += stepped.eq(0)
        with m.If(self.step_ack):
            m.d.sync += stepped.eq(1)

        # dispatch: a legal instruction to its unit; it retires when taken
        legal = Signal()
        m.d.comb += legal.eq(insn.p.cause == CauseCode.NONE)
        unit = insn.p.unit
        taken = [unit.version & self.step]
        for name in UNIT_OPS:
            port = getattr(self, name)
            m.d.comb += [port.valid.eq(insn.valid & unit[name]), port.p.word.eq(insn.p.word),
                         port.p.op.eq(insn.p.op), port.p.fence_all.eq(insn.p.fence_all)]
            taken.append(unit[name] & port.ready)
        m.d.comb += insn.ready.eq(Cat(*taken).any())
        with m.If(self.restart):
            m.d.sync += self.pc.eq(0)
        with m.Elif(insn.valid & insn.ready):
            m.d.sync += self.pc.eq(insn.p.pc + 1)

        # a stop's payload is chosen by the registered flags (only the unit of the
        # instruction at the head can ask), so the units' late valids reach only
        # ``stop``
        stop = Signal()
        stop_req = Signal(StopRequest())
        m.d.comb += [stop.eq(insn.valid & ~legal & self.step
                             | self.sync_stop.valid | self.mmu_stop.valid),
                     self.sync_stop.ready.eq(1), self.mmu_stop.ready.eq(1)]
        with m.If(~legal):
            m.d.comb += [stop_req.status.eq(StatusCode.ILLEGAL), stop_req.cause.eq(insn.p.cause)]
        with m.Elif(unit.mmu):
            m.d.comb += stop_req.eq(self.mmu_stop.p)
        with m.Else():
            m.d.comb += stop_req.eq(self.sync_stop.p)
        m.d.comb += self.step_ack.eq(self.step_mode & ((insn.valid & insn.ready) | stop
                                                       | (self.blocked & self.step)))
        stopping, stopping_req = Signal(), Signal(StopRequest())
        m.d.sync += [stopping.eq(stop & self.run & ~stopping), stopping_req.eq(stop_req)]

        # ``stopped`` is a register of its own, high exactly in STOPPED: the
        # restart, a synchronous reset of much of the coprocessor, is one gate
        # of it and ``start``, not the state's decoding (FPGA timing)
        stopped = Signal(init=1)
        m.d.comb += self.restart.eq(self.start & stopped)
        with m.FSM(name="seq"):
            # ``clearing`` is a register of its own, high exactly in CLEAR: it
            # reaches the feeder, the fault queue and the DMA straight from a
            # flip-flop, not through the state's decoding
            with m.State("STOPPED"):
                with m.If(self.start):
                    m.d.sync += [self.status.eq(StatusCode.RUNNING), stopped.eq(0),
                                 self.cause.eq(CauseCode.NONE), self.clearing.eq(1)]
                    m.next = "CLEAR"
            with m.State("CLEAR"):
                with m.If(self.drained):
                    m.d.comb += self.begin.eq(1)
                    m.d.sync += self.clearing.eq(0)
                    m.next = "EXEC"
            with m.State("EXEC"):
                m.d.comb += self.run.eq(1)
                # the stop request registered and applied a cycle later (it stands:
                # the instruction that asks for it cannot retire meanwhile)
                with m.If(stopping):
                    m.d.sync += [self.status.eq(stopping_req.status), stopped.eq(1),
                                 self.cause.eq(stopping_req.cause)]
                    m.next = "STOPPED"
        return m
