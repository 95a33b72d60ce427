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

from amaranth.hdl import ClockDomain, Elaboratable, Instance, Module, Signal
from amaranth.lib import io, wiring
from amaranth.lib.cdc import AsyncFFSynchronizer, FFSynchronizer
from amaranth.lib.wiring import In, Out

from .axilite import AxiLiteMaster
from .crc import Crc32
from .hostport import ADDR_WIDTH, AxiLiteSignature
from .lib import RegisterSlice
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
        # the words read back reach the CRC through a register (the verdict reads
        # the CRC several host accesses after the last word)
        m.submodules.crc_slice = words = RegisterSlice(st.crc_words.p.shape())
        wiring.connect(m, st.crc_words, words.i)
        wiring.connect(m, words.o, crc.words)
        wiring.connect(m, line.data, uart.data)     # the line's bytes leave from a register
        finished_prev = Signal()
        m.d.sync += finished_prev.eq(st.finished)
        # the system's done (every device's state and the crossbar's) registered
        # before the sequencer acts on it, cleared by a start so a new run never
        # sees the last one's (it stays high once the system is done); the start
        # reaches the system from a register too, so the sequencer's state decode
        # does not run through each coprocessor's start logic into its host
        # port's write path (FPGA timing: the run starts a cycle later, its
        # CYCLES count is the same)
        start, done = Signal(), Signal()
        m.d.sync += [start.eq(st.start), done.eq(system.done & ~st.start & ~start)]
        m.d.comb += [
            crc.clear.eq(st.crc_clear), st.crc.eq(crc.crc),
            system.start.eq(start), st.done.eq(done), st.run.eq(self.rerun),
            line.start.eq(st.finished & ~finished_prev), line.passed.eq(st.passed),
            line.cycles.eq(st.cycles), line.crc.eq(crc.crc),
            self.tx.eq(uart.tx),
            self.led_pass.eq(st.finished & st.passed), self.led_fail.eq(st.finished & ~st.passed),
        ]
        return m


def ecp5_pll_params(f_in_mhz, f_out_mhz):
    """EHXPLLL dividers for ``f_out`` from ``f_in`` (feedback from CLKOP):
    ``(clki_div, clkfb_div, clkop_div, achieved MHz)``, the closest output
    with the VCO in 400..800 MHz (nearest 600) and the phase detector at
    3.125 MHz or more."""
    best = None
    for clki in range(1, 129):
        fpfd = f_in_mhz / clki
        if fpfd < 3.125:
            break
        for fb in range(1, 81):
            fout = fpfd * fb
            for op in range(1, 129):
                if 400 <= fout * op <= 800:
                    # closest output first, then the VCO nearest mid-range
                    err = (abs(fout - f_out_mhz), abs(fout * op - 600))
                    if best is None or err < best[0]:
                        best = (err, clki, fb, op, fout)
    if best is None:
        raise ValueError(f"no ECP5 PLL setting makes {f_out_mhz} MHz from {f_in_mhz} MHz")
    return best[1:]


class BoardPins(Elaboratable):
    """Binds a :class:`BoardTop` to an amaranth-boards platform.

    The ``sync`` domain runs at ``freq_mhz``: from an ECP5 PLL (EHXPLLL)
    when that differs from the board's oscillator, held in reset until the
    PLL locks (its lock released through a reset synchronizer); otherwise
    straight from the oscillator. Pass and fail go to
    two LEDs (``led`` 0 and 1, or an RGB LED's green and red), the verdict
    line to ``uart`` 0 when the board has one, and ``button`` 0 (when there
    is one) reruns the self-test.
    """

    def __init__(self, top, *, freq_mhz):
        self.top = top
        self.freq_mhz = freq_mhz

    def elaborate(self, platform):
        m = Module()
        m.submodules.top = top = self.top
        names = {r.name for r in platform.resources.values()}
        m.submodules.clk_buf = clk_buf = io.Buffer("i", platform.request(platform.default_clk, dir="-"))
        clk_in = clk_buf.i
        f_in = platform.default_clk_frequency / 1e6
        m.domains.sync = cd_sync = ClockDomain("sync")
        if abs(f_in - self.freq_mhz) < 1e-6:
            m.d.comb += cd_sync.clk.eq(clk_in)
        else:
            clki, fb, op, achieved = ecp5_pll_params(f_in, self.freq_mhz)
            locked = Signal()
            m.submodules.pll = Instance(
                "EHXPLLL",
                p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
                p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA", p_CLKOP_ENABLE="ENABLED",
                p_FEEDBK_PATH="CLKOP", p_CLKI_DIV=clki, p_CLKFB_DIV=fb, p_CLKOP_DIV=op,
                p_CLKOP_CPHASE=op - 1, p_CLKOP_FPHASE=0,
                i_CLKI=clk_in, i_CLKFB=cd_sync.clk, i_RST=0, i_STDBY=0, i_PHASESEL0=0,
                i_PHASESEL1=0, i_PHASEDIR=0, i_PHASESTEP=0, i_PHASELOADREG=0, i_PLLWAKESYNC=0,
                i_ENCLKOP=0, o_CLKOP=cd_sync.clk, o_LOCK=locked)
            platform.add_clock_constraint(cd_sync.clk, achieved * 1e6)
            # the PLL's lock is asynchronous: the reset is released through a
            # synchronizer, so every flip-flop leaves it at the same edge; it
            # reaches them through a global buffer (DCCA), not the fabric,
            # where its ~17k loads would crowd every tile's routing
            released = Signal()
            m.submodules.reset_sync = AsyncFFSynchronizer(~locked, released, o_domain="sync")
            m.submodules.reset_buffer = Instance("DCCA", i_CLKI=released, i_CE=1,
                                                 o_CLKO=cd_sync.rst)

        def pin(direction, port, name):
            m.submodules[name] = buf = io.Buffer(direction, port)
            return buf

        if "led" in names:
            m.d.comb += [pin("o", platform.request("led", 0, dir="-"), "led_pass").o.eq(top.led_pass),
                         pin("o", platform.request("led", 1, dir="-"), "led_fail").o.eq(top.led_fail)]
        else:
            rgb = platform.request("rgb_led", 0, dir="-")
            m.d.comb += [pin("o", rgb.g, "led_pass").o.eq(top.led_pass),
                         pin("o", rgb.r, "led_fail").o.eq(top.led_fail)]
        if "uart" in names:
            m.d.comb += pin("o", platform.request("uart", 0, dir="-").tx, "uart_tx").o.eq(top.tx)
        if "button" in names:
            pressed, last = Signal(), Signal()
            button = pin("i", platform.request("button", 0, dir="-"), "button")
            m.submodules.button_sync = FFSynchronizer(button.i, pressed)
            m.d.sync += last.eq(pressed)
            m.d.comb += top.rerun.eq(pressed & ~last)
        return m
