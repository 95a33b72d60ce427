"""The DMA alone with a memory, checking itself: the board top for parts too
small for a whole device (the iCE40UP5K's 5,280 LUTs).

::

    rerun --> sequencer --desc--> DMA --xlat--> IdentityTranslator
                 |  ^              | rd, wr          (pa = va, device 0)
                 |  |              v
      image ROM -+--+--------> BankedMemory (1 read, 1 write port:
                 |                the sequencer's while the DMA is idle)
                 +--words--> Crc32 --crc--> VerdictLine --> UartTx --> tx
                 +--finished/passed--> led_pass, led_fail

A run reloads the memory from the image ROM, feeds the descriptor ROM to the
DMA, waits until every channel has completed its descriptors, reads the
memory back into a CRC-32 and passes when the CRC equals the expected
image's and no descriptor faulted. The interface is :class:`hw.board.BoardTop`'s,
so :class:`hw.board.BoardPins` binds it to a board.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .crc import Crc32
from .dma import DMA
from .dma.layouts import DONE_COUNT_BITS, CopyDescriptor

from .memory import BankedMemory
from .mmu import TranslateCause, translate_request, translate_response
from .uart import UartTx
from .verdict import COUNT_BITS, VerdictLine

__all__ = ["IdentityTranslator", "DmaSelfTest"]

#: The only data width the self-test reads back (the CRC takes 32-bit words).
WORD_BITS = 32


class IdentityTranslator(wiring.Component):
    """Answers every translation with ``pa = va`` on device 0, one cycle later:
    the DMA's MMU port with every address mapped, for a DMA tested alone.

    Parameters
    ----------
    arch : :class:`hw.isa.ArchParams`

    Interface attributes
    --------------------
    req : ``In(stream.Signature(translate_request(arch, 0)))``
    rsp : ``Out(stream.Signature(translate_response(arch, 0)))``
    """

    def __init__(self, arch):
        self._arch = arch
        super().__init__({"req": In(stream.Signature(translate_request(arch, 0))),
                          "rsp": Out(stream.Signature(translate_response(arch, 0)))})

    def elaborate(self, platform):
        m = Module()
        # a register stage: no combinational path from request to response
        m.d.comb += self.req.ready.eq(~self.rsp.valid | self.rsp.ready)
        with m.If(self.rsp.valid & self.rsp.ready):
            m.d.sync += self.rsp.valid.eq(0)
        with m.If(self.req.valid & self.req.ready):
            m.d.sync += [self.rsp.valid.eq(1), self.rsp.p.pa.eq(self.req.p.va),
                         self.rsp.p.dev.eq(0), self.rsp.p.cause.eq(TranslateCause.NONE)]
        return m


class DmaSelfTest(wiring.Component):
    """A :class:`hw.dma.DMA` that copies ``descriptors`` in ``image`` and
    checks the result against ``expected_crc`` (see the module documentation).

    Parameters
    ----------
    arch : :class:`hw.isa.ArchParams`
        ``mem_bytes`` is the memory size; ``channels`` the DMA's.
    image : bytes
        The memory's initial contents, ``arch.mem_bytes`` long.
    descriptors : list of dict
        COPY descriptors (the fields of :class:`hw.dma.layouts.CopyDescriptor`;
        ``ctx`` is ignored: every address maps to itself). At least one.
    expected_crc : int
        ``zlib.crc32`` of the memory after the descriptors ran.
    uart_divisor : int
        Clock cycles per UART bit.
    **dma_kw
        Passed to :class:`hw.dma.DMA`; ``ring_scratch`` defaults to off here
        (the self-test is the iCE40 subset, where the ring is flip-flops).

    Interface attributes
    --------------------
    rerun : ``In(1)``
        Pulse: run again (a run also starts after reset).
    led_pass, led_fail : ``Out(1)``
        The verdict of the last finished run (both low while running).
    tx : ``Out(1, init=1)``
        ``PASS cycles=N crc=XXXXXXXX`` (or ``FAIL ...``), 8N1. ``cycles``
        counts from the first descriptor offered to the last one completed.
    """

    def __init__(self, arch, *, image, descriptors, expected_crc, uart_divisor, **dma_kw):
        image = bytes(image)
        if len(image) != arch.mem_bytes:
            raise ValueError(f"Image is {len(image)} bytes; the memory has {arch.mem_bytes}")
        if not descriptors:
            raise ValueError("Need at least one descriptor")
        layout = CopyDescriptor(arch, arch.channels)
        fields = set(layout.members)
        packed = []
        self._per_channel = [0] * arch.channels
        for i, d in enumerate(descriptors):
            extra = set(d) - fields
            if extra:
                raise ValueError(f"Descriptor {i}: unknown fields {sorted(extra)}")
            if not 0 <= d.get("chan", 0) < arch.channels:
                raise ValueError(f"Descriptor {i}: channel {d.get('chan')} is not in 0..{arch.channels - 1}")
            packed.append(layout.const(d).as_value().value)
            self._per_channel[d.get("chan", 0)] += 1
        self._arch = arch
        self._image = image
        self._descriptors = packed
        self._desc_layout = layout
        self._expected_crc = expected_crc
        self.dma = DMA(arch, data_width=WORD_BITS, **{"ring_scratch": False, **dma_kw})
        self.uart = UartTx(uart_divisor)
        super().__init__({"rerun": In(1), "led_pass": Out(1), "led_fail": Out(1),
                          "tx": Out(1, init=1)})

    @staticmethod
    def _share_memory(m, dma, rd, wr, dma_owns):
        """The memory ports: the DMA's while it copies, the sequencer's otherwise."""
        seq_rd = stream.Signature(rd.req.payload.shape()).create(path=("seq_rd",))
        seq_wr = stream.Signature(wr.payload.shape()).create(path=("seq_wr",))
        with m.If(dma_owns):
            m.d.comb += [rd.req.valid.eq(dma.rd.req.valid), rd.req.p.eq(dma.rd.req.p),
                         dma.rd.req.ready.eq(rd.req.ready), dma.rd.rsp.valid.eq(rd.rsp.valid),
                         dma.rd.rsp.p.eq(rd.rsp.p), rd.rsp.ready.eq(dma.rd.rsp.ready),
                         wr.valid.eq(dma.wr.valid), wr.p.addr.eq(dma.wr.p.addr),
                         wr.p.data.eq(dma.wr.p.data), wr.p.be.eq(dma.wr.p.be),
                         dma.wr.ready.eq(wr.ready)]
        with m.Else():
            m.d.comb += [rd.req.valid.eq(seq_rd.valid), rd.req.p.eq(seq_rd.p),
                         seq_rd.ready.eq(rd.req.ready), rd.rsp.ready.eq(1),
                         wr.valid.eq(seq_wr.valid), wr.p.eq(seq_wr.p), seq_wr.ready.eq(wr.ready)]
        # every accepted write beat is acknowledged at once (the memory is local)
        m.d.comb += [dma.wr_ack.valid.eq(dma.wr.valid & dma.wr.ready & dma_owns),
                     dma.wr_ack.p.eq(dma.wr.p.chan)]
        return seq_rd, seq_wr

    def _completion(self, m, dma):
        """``completed``: every channel has finished its descriptors since the run began,
        and the ``done_count`` bases the sequencer captures when a run starts."""
        # ``done_count`` wraps and is never cleared: a run is complete when each
        # channel has counted its descriptors since the run began (a rerun's
        # counts start where the previous run's ended)
        completed = Signal()
        m.d.comb += completed.eq(1)
        base = [Signal(DONE_COUNT_BITS, name=f"done_base{c}") for c in range(self._arch.channels)]
        for c, n in enumerate(self._per_channel):
            ran = Signal(DONE_COUNT_BITS, name=f"done_ran{c}")
            m.d.comb += ran.eq(dma.status[c].done_count - base[c])
            with m.If(dma.status[c].busy | (ran != n % (1 << DONE_COUNT_BITS))):
                m.d.comb += completed.eq(0)
        return completed, base

    def elaborate(self, platform):
        m = Module()
        words = self._arch.mem_bytes // (WORD_BITS // 8)
        m.submodules.dma = dma = self.dma
        m.submodules.xlat = xlat = IdentityTranslator(self._arch)
        m.submodules.mem = mem = BankedMemory(data_width=WORD_BITS, size=self._arch.mem_bytes,
                                              init=self._image)
        m.submodules.image = image = Memory(
            shape=WORD_BITS, depth=words,
            init=[int.from_bytes(self._image[i:i + 4], "little") for i in range(0, len(self._image), 4)])
        m.submodules.descs = descs = Memory(shape=self._desc_layout.size,
                                            depth=len(self._descriptors), init=self._descriptors)
        m.submodules.crc = crc = Crc32(WORD_BITS)
        m.submodules.line = line = VerdictLine()
        m.submodules.uart = uart = self.uart
        wiring.connect(m, dma.xlat_req, xlat.req)
        wiring.connect(m, xlat.rsp, dma.xlat_rsp)
        wiring.connect(m, line.data, uart.data)

        image_rd, desc_rd = image.read_port(), descs.read_port()
        rd, wr = mem.read[0], mem.write[0]
        index = Signal(range(max(words, len(self._descriptors)) + 1))
        checked = Signal(range(words + 1))
        dma_owns = Signal()          # the DMA drives the memory ports (while copying)
        ok = Signal(init=1)
        finished, passed = Signal(), Signal()
        cycles = Signal(COUNT_BITS)
        m.d.comb += [image_rd.addr.eq(index), desc_rd.addr.eq(index)]

        seq_rd, seq_wr = self._share_memory(m, dma, rd, wr, dma_owns)
        m.d.comb += dma.fault.ready.eq(1)
        with m.If(dma.fault.valid):
            m.d.sync += ok.eq(0)

        completed, base = self._completion(m, dma)
        m.d.comb += [crc.words.p.eq(rd.rsp.p), crc.words.valid.eq(0)]

        with m.FSM(name="dma_selftest"):
            with m.State("RELOAD_WAIT"):         # the image ROM read of ``index`` lands
                m.next = "RELOAD"
            with m.State("RELOAD"):
                m.d.comb += [seq_wr.valid.eq(1), seq_wr.p.addr.eq(index), seq_wr.p.data.eq(image_rd.data),
                             seq_wr.p.be.eq(-1)]
                with m.If(seq_wr.ready):
                    m.d.sync += index.eq(index + 1)
                    m.next = "RELOAD_WAIT"
                    with m.If(index == words - 1):
                        m.d.sync += [index.eq(0), cycles.eq(0), dma_owns.eq(1)]
                        m.d.sync += [b.eq(dma.status[c].done_count) for c, b in enumerate(base)]
                        m.next = "ISSUE_WAIT"
            with m.State("ISSUE_WAIT"):          # the descriptor ROM read lands
                m.d.sync += cycles.eq(cycles + 1)
                m.next = "ISSUE"
            with m.State("ISSUE"):
                m.d.sync += cycles.eq(cycles + 1)
                m.d.comb += [dma.desc.valid.eq(1), dma.desc.p.eq(desc_rd.data)]
                with m.If(dma.desc.ready):
                    m.d.sync += index.eq(index + 1)
                    m.next = "ISSUE_WAIT"
                    with m.If(index == len(self._descriptors) - 1):
                        m.d.sync += index.eq(0)
                        m.next = "WAIT_DONE"
            with m.State("WAIT_DONE"):
                with m.If(completed):
                    m.d.sync += dma_owns.eq(0)
                    m.d.comb += crc.clear.eq(1)
                    m.next = "CHECK"
                with m.Else():
                    m.d.sync += cycles.eq(cycles + 1)
            with m.State("CHECK"):               # one read in flight at a time
                m.d.comb += [seq_rd.valid.eq(1), seq_rd.p.eq(checked)]
                with m.If(seq_rd.ready):
                    m.next = "CHECK_DATA"
            with m.State("CHECK_DATA"):
                m.d.comb += crc.words.valid.eq(rd.rsp.valid)
                with m.If(rd.rsp.valid):
                    m.d.sync += checked.eq(checked + 1)
                    m.next = "CHECK"
                    with m.If(checked == words - 1):
                        m.d.sync += checked.eq(0)
                        m.next = "VERDICT"
            with m.State("VERDICT"):
                m.d.sync += [finished.eq(1), passed.eq(ok & (crc.crc == self._expected_crc))]
                m.next = "IDLE"
            with m.State("IDLE"):
                with m.If(self.rerun):
                    m.d.sync += [ok.eq(1), finished.eq(0)]
                    m.next = "RELOAD_WAIT"

        finished_prev = Signal()
        m.d.sync += finished_prev.eq(finished)
        m.d.comb += [line.start.eq(finished & ~finished_prev), line.passed.eq(passed),
                     line.cycles.eq(cycles), line.crc.eq(crc.crc), self.tx.eq(uart.tx),
                     self.led_pass.eq(finished & passed), self.led_fail.eq(finished & ~passed)]
        return m
