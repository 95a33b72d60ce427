"""A system: D devices on the interconnect, with quiescence detection.

The system is *quiescent* when every device is stopped (halted, faulted,
illegal, aborted, or never started) or blocked in a WAIT whose semaphore is
below its count, every DMA channel has completed its descriptors, no message
waits in a device's outgoing FIFO and the crossbar is empty: nothing can ever
change a semaphore again, so the blocked devices are aborted
(``ABORTED``/``DEADLOCK``) - the golden model's "a whole round without
progress". ``quiescent`` is registered twice (each device's part, then
their AND): the abort comes two cycles after the system went quiescent (it
stays so), and no device's stop decision depends on the other devices'
state within one cycle.

Lock-step mode (``step_mode``) passes a grant round-robin, device 0 first:
the holder executes one instruction, then the grant waits until every copy
and message has landed before it moves on. That is the golden model's
schedule exactly (one instruction per device per round, a COPY complete when
issued), so any program, racy or not, ends in the golden model's state.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .device import Device
from .hostport import ADDR_WIDTH, AxiLiteSignature
from .interconnect import Interconnect
from .isa import check_arch

__all__ = ["System"]


class System(wiring.Component):
    """``arch.devices`` devices joined by an :class:`hw.interconnect.Interconnect`.

    Parameters
    ----------
    arch : :class:`hw.isa.ArchParams`
    data_width : int
        Memory, DMA and network bus width in bits.
    programs : list of list of int, optional
        One initial instruction memory per device.
    memories : list of bytes-like, optional
        One initial physical memory per device.
    **device_kw
        Passed to every :class:`hw.device.Device` (``banks``, ``outstanding``,
        ``burst_len``, ``net_depth``, ``fault_depth``).

    Interface attributes
    --------------------
    start : ``In(1)``
        Start every device's program (pulse).
    step_mode : ``In(1)``
        Lock-step execution (see the module documentation).
    quiescent : ``Out(1)``
        Nothing can progress any more (drives the coprocessors' ``quiesced``).
    done : ``Out(1)``
        Every device stopped and nothing is in flight.
    host : ``In(AxiLiteSignature(ADDR_WIDTH)).array(devices)``
        The devices' host ports.
    """

    def __init__(self, arch, *, data_width=64, programs=None, memories=None, **device_kw):
        check_arch(arch)
        D = arch.devices
        programs = [[] for _ in range(D)] if programs is None else list(programs)
        memories = [b"" for _ in range(D)] if memories is None else list(memories)
        if len(programs) != D:
            raise ValueError(f"{len(programs)} programs for {D} devices")
        if len(memories) != D:
            raise ValueError(f"{len(memories)} memories for {D} devices")
        self._arch = arch
        self._data_width = data_width
        self.devices = [Device(arch, index=d, data_width=data_width, program=programs[d],
                               memory=bytes(memories[d]), **device_kw) for d in range(D)]
        self.interconnect = Interconnect(arch, data_width=data_width)
        super().__init__({
            "start": In(1),
            "step_mode": In(1),
            "quiescent": Out(1),
            "done": Out(1),
            "host": In(AxiLiteSignature(ADDR_WIDTH)).array(D),
        })

    arch = property(lambda self: self._arch, doc="The architectural parameters.")
    data_width = property(lambda self: self._data_width, doc="Bus width in bits.")

    def elaborate(self, platform):
        m = Module()
        D = self._arch.devices
        m.submodules.interconnect = ic = self.interconnect
        for d, dev in enumerate(self.devices):
            m.submodules[f"dev{d}"] = dev
            for j in range(D):
                wiring.connect(m, dev.net_out[j], ic.req_in[d][j])
            wiring.connect(m, ic.req_out[d], dev.net_in)
            wiring.connect(m, dev.ack_out, ic.ack_in[d])
            wiring.connect(m, ic.ack_out[d], dev.ack_in)
            wiring.connect(m, wiring.flipped(self.host[d]), dev.host)
        quiet = Signal()
        m.d.comb += quiet.eq(Cat(*[dev.quiet for dev in self.devices]).all() & ~ic.busy)
        # registered twice: each device's "stopped and quiet" and the crossbar's
        # idle in one cycle (a snapshot of the whole system), their AND in the
        # next, so no device's stop decision depends on another's state within
        # a cycle and no path crosses the chip through logic (nothing can
        # progress once quiescent, so the abort may come two cycles later;
        # a start clears both stages, so a new run never sees an old snapshot)
        settled = [Signal(name=f"settled{d}") for d in range(D)]
        crossbar_idle = Signal()
        m.d.sync += [s.eq(dev.quiet & dev.stuck & ~self.start)
                     for s, dev in zip(settled, self.devices)]
        m.d.sync += [crossbar_idle.eq(~ic.busy),
                     self.quiescent.eq(Cat(*settled).all() & crossbar_idle & ~self.start)]
        m.d.comb += self.done.eq(quiet & ~Cat(*[dev.running for dev in self.devices]).any())
        # lock-step: GRANT (the holder executes one instruction) -> SETTLE (all landed)
        tok = Signal(range(max(2, D)))
        granting = Signal()
        for d, dev in enumerate(self.devices):
            m.d.comb += [
                dev.start.eq(self.start),
                dev.quiesced.eq(self.quiescent),
                dev.step_mode.eq(self.step_mode),
                dev.step_grant.eq(granting & (tok == d)),
            ]
        with m.FSM(name="lockstep"):
            with m.State("GRANT"):
                m.d.comb += granting.eq(self.step_mode)
                for d, dev in enumerate(self.devices):
                    with m.If(self.step_mode & (tok == d) & (~dev.running | dev.step_ack)):
                        m.next = "SETTLE"
            with m.State("SETTLE"):
                with m.If(self.step_mode & quiet):
                    m.d.sync += tok.eq(Mux(tok == D - 1, 0, tok + 1))
                    m.next = "GRANT"
        return m
