"""The DMA: its stages joined by queues."""
from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..isa import check_arch
from ..lib import Queue, check_bus_width, resolve_channels
from ..memory import ReadPortSignature
from ..mmu import translate_request, translate_response
from .completion import Completion
from .frontend import FrontEnd
from .layouts import (ChannelStatus, Chunk, Command, CopyDescriptor, DmaFault, DmaGeometry,
                      DmaWrite)
from .reader import Reader
from .translate import Translator
from .walker import Walker
from .writer import Writer

__all__ = ["DMA"]

#: Depths of the queues between the stages.
CHUNK_DEPTH = 3
CMD_DEPTH = 4


class DMA(wiring.Component):
    """Multi-channel 2-D copy engine reading local memory through the MMU.

    See the package docstring (:mod:`hw.dma`) for the stages and the
    completion semantics.

    Parameters
    ----------
    arch : :class:`hw.isa.ArchParams`
        Uses ``addr_bits``, ``mem_bytes``, ``page_sizes[0]``, ``contexts``,
        ``devices``, and ``channels`` unless given.
    data_width : int
        Data bus width: 32, 64, 128 or 256.
    channels : int, optional
        Channel count, 1..16 (default ``arch.channels``).
    outstanding : int
        Read requests in flight (and read-data queue depth), 2..256.
    burst_len : int
        Maximum chunk length in beats, a power of two; a burst must fit in the
        smallest page.
    ack_limit : int
        Unacknowledged write beats allowed per channel, 1..65535.
    xlat_tag_width : int
        Width of the MMU port's ``tag`` field, 0..16 (default 0). The DMA
        does not use tags (it drives 0 and ignores the response's); a
        non-zero width only lets the port connect to an MMU built with
        ``tag_width`` of the same value.
    ring_scratch : bool
        The descriptor ring's scratch half (:class:`FrontEnd`'s ``scratch``;
        default on: free in LUT RAM up to 4 channels; off where memories
        become flip-flops, as on the iCE40).

    Interface attributes
    --------------------
    desc : ``In(stream.Signature(CopyDescriptor(arch, channels)))``
        Descriptors, each naming its channel. Each channel buffers two (the
        one being walked and the next); a descriptor for a channel whose two
        slots are taken waits (``ready`` low) and so blocks the stream.
    xlat_req : ``Out(stream.Signature(translate_request(arch, xlat_tag_width)))``
        To the MMU's ``req``.
    xlat_rsp : ``In(stream.Signature(translate_response(arch, xlat_tag_width)))``
        From the MMU's ``rsp``.
    rd : ``Out(ReadPortSignature(mem_addr_width, data_width))``
        Local memory read port (word addresses).
    wr : ``Out(stream.Signature(DmaWrite(arch, data_width, channels)))``
        Write beats to local or remote memory, routed by ``dev``.
    wr_ack : ``In(stream.Signature(chan_width))``
        One acknowledgement per accepted write beat, naming its channel.
    status : ``Out(ChannelStatus(arch)).array(channels)``
        Per-channel status.
    free_slots : ``Out(range(3)).array(channels)``
        The channel's free descriptor slots (0..2): ``desc`` takes a
        descriptor of the channel at once while one is free (from registers,
        so a producer can pick a channel by it).
    clear : ``In(channels)``
        Per-channel: clear ``error`` (ignored while the channel is busy).
    fault : ``Out(stream.Signature(DmaFault(arch, channels)))``
        One record per faulted descriptor, after every earlier write beat of
        its channel was issued. The writer waits while it is not accepted.
    flush : ``In(1)``
        Invalidate every cached translation. The ISA never changes a mapping
        while a copy is in flight, and a channel re-translates at every
        descriptor start, so the device may tie this low; the caches empty a
        cycle after ``flush`` is seen, and a chunk already past the cache lookup
        then still uses the old translation.
    """

    def __init__(self, arch, *, data_width=32, channels=None, outstanding=8, burst_len=16,
                 ack_limit=255, xlat_tag_width=0, ring_scratch=True):
        check_arch(arch)
        check_bus_width(data_width)
        channels = resolve_channels(arch, channels)
        if not isinstance(outstanding, int) or not 2 <= outstanding <= 256:
            raise ValueError(f"Outstanding read count must be an integer in 2..256, "
                             f"not {outstanding!r}")
        if (not isinstance(burst_len, int) or not 1 <= burst_len <= 256
                or burst_len & (burst_len - 1)):
            raise ValueError(f"Burst length must be a power of two in 1..256, not {burst_len!r}")
        if burst_len * data_width // 8 > arch.page_sizes[0]:
            raise ValueError(f"Burst of {burst_len} beats of {data_width} bits exceeds the "
                             f"smallest page ({arch.page_sizes[0]} bytes)")
        if not isinstance(ack_limit, int) or not 1 <= ack_limit <= 65535:
            raise ValueError(f"Ack limit must be an integer in 1..65535, not {ack_limit!r}")
        if not isinstance(xlat_tag_width, int) or not 0 <= xlat_tag_width <= 16:
            raise ValueError(f"Tag width must be an integer in 0..16, not {xlat_tag_width!r}")
        if not isinstance(ring_scratch, bool):
            raise TypeError(f"Ring scratch must be a bool, not {ring_scratch!r}")
        self._arch = arch
        self._outstanding = outstanding
        self._ack_limit = ack_limit
        self._xlat_tag_width = xlat_tag_width
        self._ring_scratch = ring_scratch
        g = self._geometry = DmaGeometry(arch, data_width=data_width, channels=channels,
                                         burst_len=burst_len)
        super().__init__({
            "desc": In(stream.Signature(CopyDescriptor(arch, channels))),
            "xlat_req": Out(stream.Signature(translate_request(arch, xlat_tag_width))),
            "xlat_rsp": In(stream.Signature(translate_response(arch, xlat_tag_width))),
            "rd": Out(ReadPortSignature(g.mem_addr_width, data_width)),
            "wr": Out(stream.Signature(DmaWrite(arch, data_width, channels))),
            "wr_ack": In(stream.Signature(g.chan_bits)),
            "status": Out(ChannelStatus(arch)).array(channels),
            "free_slots": Out(range(3)).array(channels),
            "clear": In(channels),
            "fault": Out(stream.Signature(DmaFault(arch, channels))),
            "flush": In(1),
        })

    arch = property(lambda self: self._arch, doc="The architectural parameters.")
    data_width = property(lambda self: self._geometry.data_width, doc="Data bus width in bits.")
    channels = property(lambda self: self._geometry.channels, doc="Number of channels.")
    outstanding = property(lambda self: self._outstanding, doc="Read requests in flight.")
    burst_len = property(lambda self: self._geometry.burst_len,
                         doc="Maximum chunk length in beats.")
    ack_limit = property(lambda self: self._ack_limit, doc="Unacknowledged beats per channel.")
    xlat_tag_width = property(lambda self: self._xlat_tag_width, doc="MMU port tag width.")
    ring_scratch = property(lambda self: self._ring_scratch,
                            doc="The descriptor ring has a scratch half.")
    mem_addr_width = property(lambda self: self._geometry.mem_addr_width,
                              doc="Word address width.")
    geometry = property(lambda self: self._geometry, doc="Widths shared by the stages.")

    def elaborate(self, platform):
        m = Module()
        g = self._geometry
        m.submodules.front = front = FrontEnd(g, scratch=self._ring_scratch)
        m.submodules.walker = walker = Walker(g)
        # (its ready from a flip-flop: the walker's every stage advances on it)
        m.submodules.chunks = chunks = Queue(Chunk(g), CHUNK_DEPTH, registered_flags=True)
        m.submodules.xlat = xlat = Translator(g, tag_width=self._xlat_tag_width)
        m.submodules.cmds = cmds = Queue(Command(g), CMD_DEPTH, buffered=False)
        m.submodules.reader = reader = Reader(g, outstanding=self._outstanding)
        m.submodules.reads = reads = Queue(Command(g), CMD_DEPTH, buffered=False)
        m.submodules.writer = writer = Writer(g)
        # a chunk is in flight from the walker to the writer's retirement: in the
        # chunk queue, the translator's register and output slice, the command
        # queue, the reader's two decoded commands, the read queue, or the
        # writer's two decoded commands and current command
        inflight_limit = chunks.depth + 3 + cmds.depth + 2 + reads.depth + 3
        m.submodules.done = done = Completion(g, ack_limit=self._ack_limit,
                                              inflight_limit=inflight_limit)

        wiring.connect(m, wiring.flipped(self.desc), front.desc)
        wiring.connect(m, front.grant, walker.grant)
        wiring.connect(m, walker.walked, front.walked)
        wiring.connect(m, walker.chunk, chunks.w)
        wiring.connect(m, chunks.r, xlat.chunk)
        wiring.connect(m, xlat.xlat_req, wiring.flipped(self.xlat_req))
        wiring.connect(m, wiring.flipped(self.xlat_rsp), xlat.xlat_rsp)
        wiring.connect(m, xlat.cmd, cmds.w)
        wiring.connect(m, cmds.r, reader.cmd)
        wiring.connect(m, reader.rd, wiring.flipped(self.rd))
        wiring.connect(m, reader.cmd_out, reads.w)
        wiring.connect(m, reads.r, writer.cmd)
        wiring.connect(m, reader.data, writer.data)
        wiring.connect(m, writer.wr, wiring.flipped(self.wr))
        wiring.connect(m, writer.fault, wiring.flipped(self.fault))
        wiring.connect(m, writer.retire, done.retire)
        wiring.connect(m, writer.beat, done.beat)
        wiring.connect(m, walker.issued, done.issued)
        wiring.connect(m, xlat.dropped, done.dropped)
        wiring.connect(m, wiring.flipped(self.wr_ack), done.wr_ack)
        m.d.comb += [
            front.halt.eq(xlat.halt), walker.halt.eq(xlat.halt),
            xlat.flush.eq(self.flush),
            done.walking.eq(front.busy | walker.busy),
            done.clear.eq(self.clear), xlat.clear.eq(done.cleared),
            writer.ack_full.eq(done.ack_full),
        ]
        for c in range(g.channels):
            m.d.comb += [self.status[c].eq(done.status[c]),
                         self.free_slots[c].eq(front.free_slots[c])]
        return m
