"""The board self-test sequencer: load, run, read back, verdict.

It drives the devices' host ports as a host would (through
:class:`hw.axilite.AxiLiteMaster`): it writes each device's initial memory
image from a ROM through the memory window, starts the system and waits
until it is done, reads every memory back through the memory window into a
CRC-32, reads each device's ``STATUS`` and ``CYCLES``, and passes when every
access answered ``OKAY``, every device ``HALTED`` and the CRC equals the
expected image's. Reloading the memories first makes a rerun (``run``) start from the
same state as the first run after configuration.

The ROM holds the images only up to the last word any of them has that is
not zero (the words after it are loaded as zeros), one ROM per bit: each
bit's block RAM then answers into a register of its own, with no
multiplexer across block RAMs, and a second register carries the word to
the host ports (a block RAM's output is slow, and the bits lie across the
part).
"""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .axilite import AxiLiteCommand, AxiLiteResponse
from .crc import CRC_BITS
from .hostport import ADDR_WIDTH, OKAY, field, register
from .isa import Status

__all__ = ["SelfTest"]

_LANE_BITS = 32                          # the host port's registers


class SelfTest(wiring.Component):
    """Sequences one self-test run (see the module documentation).

    Parameters
    ----------
    devices : int
    data_width : int
        The devices' memory word width (a multiple of 32).
    images : list of bytes
        Each device's initial memory (all the same length, whole words).
    expected_crc : int
        ``zlib.crc32`` of the devices' expected final memories, concatenated
        in device order.

    Interface attributes
    --------------------
    run : ``In(1)``
        Pulse: run again (a run also starts after reset).
    cmd : ``Out(stream.Signature(AxiLiteCommand(ADDR_WIDTH)))``, ``dev`` : ``Out(range(devices))``
        Host-port accesses and the device each goes to (stable while ``cmd.valid``).
    rsp : ``In(stream.Signature(AxiLiteResponse()))``
    start : ``Out(1)``
        Pulse: start the system's programs.
    done : ``In(1)``
        The system is done.
    crc_words : ``Out(stream.Signature(32))``, ``crc_clear`` : ``Out(1)``, ``crc`` : ``In(32)``
        To and from a :class:`hw.crc.Crc32` of 32 bits.
    finished : ``Out(1)``
        The verdict below is valid (until the next run).
    passed : ``Out(1)``
    cycles : ``Out(32)``
        The longest-running device's ``CYCLES`` count (the figure ``python -m
        gen sim`` reports for the same reshard).
    """

    def __init__(self, *, devices, data_width, images, expected_crc):
        if not isinstance(data_width, int) or data_width % _LANE_BITS:
            raise ValueError(f"Data width must be a multiple of {_LANE_BITS}, not {data_width!r}")
        images = [bytes(i) for i in images]
        if len(images) != devices or len({len(i) for i in images}) != 1:
            raise ValueError(f"Need {devices} images of one size, not sizes {[len(i) for i in images]}")
        if not images[0] or len(images[0]) % (data_width // 8):
            raise ValueError(f"Image size {len(images[0])} is not a positive number of "
                             f"{data_width}-bit words")
        self._devices = devices
        self._lanes = data_width // _LANE_BITS
        self._words = len(images[0]) // (data_width // 8)
        word_bytes = data_width // 8
        # the words kept in the ROM: up to the last one not zero in any image
        used = [len(i.rstrip(b"\0")) for i in images]
        self._kept_words = max(1, -(-max(used) // word_bytes))
        blob = b"".join(i[:self._kept_words * word_bytes] for i in images)
        self._rom = [int.from_bytes(blob[i:i + 4], "little") for i in range(0, len(blob), 4)]
        self._expected_crc = expected_crc
        super().__init__({
            "run": In(1),
            "cmd": Out(stream.Signature(AxiLiteCommand(ADDR_WIDTH))),
            "dev": Out(range(max(2, devices))),
            "rsp": In(stream.Signature(AxiLiteResponse())),
            "start": Out(1), "done": In(1),
            "crc_words": Out(stream.Signature(_LANE_BITS)), "crc_clear": Out(1),
            "crc": In(CRC_BITS), "finished": Out(1), "passed": Out(1), "cycles": Out(_LANE_BITS),
        })

    def _next_lane(self, m, counters, then_word, then_device, last_device):
        """Advance the lane, word and device counters; pick the next state:
        ``then_word`` after a lane, ``then_device`` after a device's last
        word, ``last_device`` after the last device's."""
        lane, word, dev = counters
        D, L, W = self._devices, self._lanes, self._words
        with m.If(lane == L - 1):
            m.d.sync += [lane.eq(0), word.eq(word + 1)]
            with m.If(word == W - 1):
                m.d.sync += [word.eq(0), dev.eq(dev + 1)]
                m.next = last_device if D == 1 else then_device
                with m.If(dev == D - 1):
                    m.d.sync += dev.eq(0)
                    m.next = last_device
            with m.Else():
                m.next = then_word
        with m.Else():
            m.d.sync += lane.eq(lane + 1)

    kept_words = property(lambda self: self._kept_words,
                          doc="Words of each image the ROM holds (the rest load as zeros).")

    def _rom_lane(self, m, index):
        """One ROM per bit of a lane, read at ``index``: the lane two
        registers after the read."""
        bits = Signal(_LANE_BITS)
        for b in range(_LANE_BITS):
            rom = Memory(shape=1, depth=len(self._rom), init=[w >> b & 1 for w in self._rom])
            m.submodules[f"rom{b}"] = rom
            rd = rom.read_port()
            m.d.comb += rd.addr.eq(index)
            m.d.sync += bits[b].eq(rd.data)
        return bits

    def elaborate(self, platform):
        m = Module()
        D, L, W = self._devices, self._lanes, self._words
        index = Signal(range(len(self._rom) + 1))     # ROM lane being loaded
        word = Signal(range(W + 1))
        lane = Signal(range(max(2, L)))
        ok = Signal(init=1)                           # every response OKAY, every STATUS HALTED
        got = Signal(_LANE_BITS)                      # a device's CYCLES_LO, as read
        rom_bits = self._rom_lane(m, index)
        rom_word = Signal(32)                         # zero past the kept words
        m.d.sync += rom_word.eq(Mux(word >= self._kept_words, 0, rom_bits))
        m.d.comb += self.dev.eq(0)
        dev = Signal(range(max(2, D)))
        m.d.comb += self.dev.eq(dev)
        answered = self.rsp.valid
        m.d.comb += self.rsp.ready.eq(1)
        with m.If(answered & (self.rsp.p.resp != OKAY)):
            m.d.sync += ok.eq(0)

        def access(write, reg_offset, data=0):
            m.d.comb += [self.cmd.valid.eq(1), self.cmd.p.write.eq(write),
                         self.cmd.p.addr.eq(reg_offset), self.cmd.p.data.eq(data)]

        def next_lane(then_word, then_device, last_device):
            self._next_lane(m, (lane, word, dev), then_word, then_device, last_device)

        mem_addr, mem_read = register("MEM_ADDR").offset, register("MEM_READ").offset
        wdata0, rdata0 = register("MEM_WDATA0").offset, register("MEM_RDATA0").offset
        status = field("STATUS", "status")
        with m.FSM(name="selftest"):
            with m.State("LOAD_ADDR"):
                access(1, mem_addr, 0)
                with m.If(answered):
                    m.next = "LOAD_WAIT"
            with m.State("LOAD_WAIT"):               # the ROM read of ``index`` lands
                m.next = "LOAD_BITS"
            with m.State("LOAD_BITS"):               # ... in each bit's register
                m.next = "LOAD_WORD"
            with m.State("LOAD_WORD"):               # ... and in the word's
                m.next = "LOAD_LANE"
            with m.State("LOAD_LANE"):
                access(1, wdata0 + 4 * lane, rom_word)
                with m.If(answered):
                    with m.If(word < self._kept_words):
                        m.d.sync += index.eq(index + 1)
                    m.next = "LOAD_WAIT"
                    next_lane("LOAD_WAIT", "LOAD_ADDR", "RUN")
            with m.State("RUN"):
                m.d.comb += self.start.eq(1)
                m.d.sync += self.cycles.eq(0)
                m.next = "WAIT_DONE"
            with m.State("WAIT_DONE"):
                with m.If(self.done):
                    m.d.comb += self.crc_clear.eq(1)
                    m.next = "CHECK_ADDR"
            with m.State("CHECK_ADDR"):
                access(1, mem_addr, 0)
                with m.If(answered):
                    m.next = "CHECK_LOAD"
            with m.State("CHECK_LOAD"):
                access(1, mem_read, 0)
                with m.If(answered):
                    m.next = "CHECK_LANE"
            with m.State("CHECK_LANE"):
                access(0, rdata0 + 4 * lane)
                m.d.comb += [self.crc_words.valid.eq(answered), self.crc_words.p.eq(self.rsp.p.data)]
                with m.If(answered):
                    next_lane("CHECK_LOAD", "CHECK_ADDR", "STATUS")
            with m.State("STATUS"):
                access(0, register("STATUS").offset)
                with m.If(answered):
                    with m.If(self.rsp.p.data[status.lsb:status.lsb + status.width] != Status.HALTED):
                        m.d.sync += ok.eq(0)
                    m.next = "CYCLES"
            with m.State("CYCLES"):                   # the longest-running device's count
                access(0, register("CYCLES_LO").offset)
                with m.If(answered):
                    m.d.sync += got.eq(self.rsp.p.data)
                    m.next = "LONGEST"
            with m.State("LONGEST"):                  # compared from a register, a cycle later
                with m.If(got > self.cycles):
                    m.d.sync += self.cycles.eq(got)
                m.d.sync += dev.eq(dev + 1)
                m.next = "STATUS"
                with m.If(dev == D - 1):
                    m.d.sync += dev.eq(0)
                    m.next = "VERDICT"
            with m.State("VERDICT"):
                m.d.sync += [self.finished.eq(1),
                             self.passed.eq(ok & (self.crc == self._expected_crc))]
                m.next = "IDLE"
            with m.State("IDLE"):
                with m.If(self.run):
                    m.d.sync += [ok.eq(1), self.finished.eq(0), index.eq(0)]
                    m.next = "LOAD_ADDR"
        return m
