"""The board top: a system with one reshard baked in that checks itself.

::

    rerun --> SelfTest --cmd/dev--> AxiLiteMaster[d] --host[d]--> System
                 |  ^                                               |
                 |  +------------------- done ----------------------+
                 +--crc_words--> Crc32 --crc--+
                 +--verdict------------------ VerdictLine --bytes--> UartTx --> tx
                 +--finished/passed--> led_pass, led_fail

:class:`BoardTop` is platform-free (simulated as it is); :class:`BoardPins`
binds it to an amaranth-boards platform (clock, LEDs, UART, a button).
"""
from __future__ import annotations

from amaranth.hdl import Cat, ClockDomain, ClockSignal, Elaboratable, Instance, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .axilite import AxiLiteMaster
from .crc import Crc32
from .hostport import ADDR_WIDTH, AxiLiteSignature
from .selftest import SelfTest
from .system import System
from .uart import UartTx
from .verdict import VerdictLine

__all__ = ["BoardTop", "BoardPins"]


class BoardTop(wiring.Component):
    """A :class:`hw.system.System` running ``programs`` from ``memories``,
    checked against ``expected_crc`` after every run.

    Parameters
    ----------
    arch : :class:`hw.isa.ArchParams`
    data_width : int
    programs, memories : per device, as for :class:`hw.system.System`
    expected_crc : int
        ``zlib.crc32`` of the expected final memories, in device order.
    uart_divisor : int
        Clock cycles per UART bit.
    **system_kw
        Passed to :class:`hw.system.System`.

    Interface attributes
    --------------------
    rerun : ``In(1)``
        Pulse: run the self-test again.
    led_pass, led_fail : ``Out(1)``
        The verdict of the last finished run (both low while running).
    tx : ``Out(1, init=1)``
        The verdict line, 8N1.
    """

    def __init__(self, arch, *, data_width, programs, memories, expected_crc, uart_divisor,
                 **system_kw):
        self.system = System(arch, data_width=data_width, programs=programs, memories=memories,
                             **system_kw)
        self.selftest = SelfTest(devices=arch.devices, data_width=data_width, images=memories,
                                 expected_crc=expected_crc)
        self.uart = UartTx(uart_divisor)
        super().__init__({"rerun": In(1), "led_pass": Out(1), "led_fail": Out(1),
                          "tx": Out(1, init=1)})

    def elaborate(self, platform):
        m = Module()
        D = self.system.arch.devices
        m.submodules.system = system = self.system
        m.submodules.selftest = st = self.selftest
        m.submodules.crc = crc = Crc32(32)
        m.submodules.line = line = VerdictLine()
        m.submodules.uart = uart = self.uart
        masters = []
        for d in range(D):
            master = AxiLiteMaster(AxiLiteSignature(ADDR_WIDTH))
            m.submodules[f"host{d}"] = master
            wiring.connect(m, master.bus, system.host[d])
            masters.append(master)
        # the self-test talks to one device at a time
        for d, master in enumerate(masters):
            sel = st.dev == d
            m.d.comb += [master.cmd.valid.eq(st.cmd.valid & sel), master.cmd.p.eq(st.cmd.p),
                         master.rsp.ready.eq(st.rsp.ready & sel)]
            with m.If(sel):
                m.d.comb += [st.cmd.ready.eq(master.cmd.ready), st.rsp.valid.eq(master.rsp.valid),
                             st.rsp.p.eq(master.rsp.p)]
        wiring.connect(m, st.crc_words, crc.words)
        wiring.connect(m, line.data, uart.data)
        finished_prev = Signal()
        m.d.sync += finished_prev.eq(st.finished)
        m.d.comb += [
            crc.clear.eq(st.crc_clear), st.crc.eq(crc.crc),
            system.start.eq(st.start), st.done.eq(system.done), st.run.eq(self.rerun),
            line.start.eq(st.finished & ~finished_prev), line.passed.eq(st.passed),
            line.cycles.eq(st.cycles), line.crc.eq(crc.crc),
            self.tx.eq(uart.tx),
            self.led_pass.eq(st.finished & st.passed), self.led_fail.eq(st.finished & ~st.passed),
        ]
        return m
