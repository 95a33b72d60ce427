"""The multi-channel 2-D DMA engine.

Structure (PULP iDMA's split, one clock domain)::

    desc (chan, COPY fields) --> descriptor ring: 2 slots per channel (LUT RAM)
      --> mid-end: one shared 2-D walker, round-robin over channels, 3 stages
          (pick -> read walk state + chunk length -> write back + emit)
      --> chunk queue --> translator (per-channel page cache in LUT RAM, MMU port)
      --> command queue --> reader (word reads, credit-limited)
      --> command queue + read-data FIFO --> writer (realigning shifter,
          byte enables) --> wr (dev, word address, data, be, chan)

*Mid-end.* A descriptor goes into its channel's free ring slot (each channel
holds the descriptor being walked and the next one, so back-to-back
descriptors need no handshake with the producer in between). The walker
keeps each channel's position (current source/destination address, bytes
left in the row, bytes to the source page end and to the destination burst
end) and row state (row bases, rows left) in LUT RAMs and turns descriptors
into *chunks*: the longest piece of the byte stream that stays inside one
row, one smallest page of the source, one smallest page of the destination
and one ``burst_len``-beat window of the destination (bursts are
destination-aligned, so only their first and last words carry partial byte
enables). The walker issues up to one chunk per cycle, round-robin among the
channels; a channel is not picked while its previous chunk is being computed,
so one channel alone gets a chunk every second cycle (plenty: a chunk is at
least one beat and usually many). Starting a descriptor costs the channel one
walker slot; the back-end never waits for it as long as earlier chunks are
queued.

*Translator.* Keeps, per channel, the last source page and the last
destination page it translated (smallest-page granularity); a chunk on cached
pages passes in one cycle, otherwise the translator asks the MMU, source
first, then destination. The first failing chunk stops the channel: a fault
marker goes down the pipe behind the chunks already translated, the channel's
later chunks and descriptors are dropped, nothing after it is written. A
channel's cache is invalidated when it starts a descriptor, and all caches by
``flush``.

*Back-end.* The reader issues ``ceil((src % B + len) / B)`` word reads per
chunk; the writer turns them into ``ceil((dst % B + len) / B)`` write beats
through a 2-word window shifted by ``(src - dst) mod B`` bytes.

Completion
----------
A write beat is *accepted* when ``wr.valid & wr.ready``. It is *done* when the
destination returns one ``wr_ack`` (payload: channel) for it; acks of
different beats may come back in any order. A channel's descriptors are
reported complete (``status[i].done_count`` and ``done_tag``) once their last
beat was issued and the channel has no unacknowledged write, so completion
means "visible at the destination" as far as the acks promise it. Wiring
``wr_ack`` to ``wr.valid & wr.ready`` (same cycle) makes "accepted" the
completion point.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal, Cat, Const, Mux
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, ceil_log2, exact_log2

from .isa import ArchParams
from .lib import chan_bits, check_bus_width, ctx_bits, dev_bits, resolve_channels
from .memory import ReadPortSignature
from .mmu import TranslateCause, translate_request, translate_response

__all__ = ["CopyDescriptor", "DmaWrite", "ChannelStatus", "DmaFault", "DMA"]


class CopyDescriptor(data.StructLayout):
    """A COPY descriptor: the ISA's COPY fields.

    ``chan`` selects the channel (descriptors for a channel number at or
    above ``channels`` are dropped). ``src``/``dst`` are virtual addresses
    (``arch.addr_bits`` wide); the strides are unsigned and address arithmetic
    wraps modulo ``2**addr_bits``.
    """
    def __init__(self, arch, channels):
        super().__init__({
            "chan": chan_bits(channels),
            "ctx": ctx_bits(arch),
            "tag": 16,
            "src": arch.addr_bits,
            "dst": arch.addr_bits,
            "row_bytes": 32,
            "rows": 32,
            "src_stride": 32,
            "dst_stride": 32,
        })


class DmaWrite(data.StructLayout):
    """A write beat: destination device, word address (``pa // (data_width // 8)``),
    data, byte enables, and the channel (to route its ``wr_ack`` back)."""
    def __init__(self, arch, data_width, channels):
        word_bits = exact_log2(data_width // 8)
        super().__init__({
            "dev": dev_bits(arch),
            "addr": max(1, ceil_log2(arch.mem_bytes) - word_bits),
            "data": data_width,
            "be": data_width // 8,
            "chan": chan_bits(channels),
        })


class ChannelStatus(data.StructLayout):
    """Per-channel status.

    ``busy``: a descriptor is loaded, or chunks, writes or acks are in
    flight. ``error``: the channel faulted (``cause``, ``va`` name it) and
    discards descriptors until cleared. ``done_count`` (wrapping) counts
    completed descriptors, ``done_tag`` is the tag of the last one.
    """
    def __init__(self, arch):
        super().__init__({
            "busy": 1,
            "error": 1,
            "cause": TranslateCause,
            "va": arch.addr_bits,
            "done_count": 16,
            "done_tag": 16,
        })


class DmaFault(data.StructLayout):
    """A fault record: channel, context, virtual address and cause."""
    def __init__(self, arch, channels):
        super().__init__({
            "chan": chan_bits(channels),
            "ctx": ctx_bits(arch),
            "va": arch.addr_bits,
            "cause": TranslateCause,
        })


class _Kind(enum.Enum, shape=2):
    DATA = 0
    EMPTY = 1     # a zero-length descriptor: completes, moves nothing
    FAULT = 2     # the channel faulted here


def _rr_pick(m, reqs, last, n, name):
    """Round-robin: the first requester after ``last`` (cyclically)."""
    idx = Signal(range(max(2, n)), name=f"{name}_idx")
    for l in range(n):
        with m.If(last == l):
            order = [(l + 1 + k) % n for k in range(n)]
            for k, c in enumerate(reversed(order)):
                with m.If(reqs[c]):
                    m.d.comb += idx.eq(c)
    return idx


class DMA(wiring.Component):
    """Multi-channel 2-D copy engine reading local memory through the MMU.

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
        Read requests in flight (and read-data FIFO depth), 2..256.
    burst_len : int
        Maximum chunk length in beats, a power of two; a burst must fit in the
        smallest page.
    ack_limit : int
        Unacknowledged write beats allowed per channel, 1..65535.
    xlat_tag_width : int
        Tag width of the MMU port (must equal the MMU's ``tag_width``).

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
    clear : ``In(channels)``
        Per-channel: clear ``error`` (ignored while the channel is busy).
    fault : ``Out(stream.Signature(DmaFault(arch, channels)))``
        One record per faulted descriptor, after every earlier write beat of
        its channel was issued. The writer waits while it is not accepted.
    flush : ``In(1)``
        Invalidate every cached translation. The ISA never changes a mapping
        while a copy is in flight, and a channel re-translates at every
        descriptor start, so the device may tie this low; a chunk already past
        the cache lookup when ``flush`` rises still uses the old translation.
    """

    def __init__(self, arch, *, data_width=32, channels=None, outstanding=8, burst_len=16,
                 ack_limit=255, xlat_tag_width=4):
        if not isinstance(arch, ArchParams):
            raise TypeError(f"arch must be an ArchParams, not {arch!r}")
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
        self._arch = arch
        self._data_width = data_width
        self._channels = channels
        self._outstanding = outstanding
        self._burst_len = burst_len
        self._ack_limit = ack_limit
        self._xlat_tag_width = xlat_tag_width
        word_bits = exact_log2(data_width // 8)
        self._mem_addr_width = max(1, ceil_log2(arch.mem_bytes) - word_bits)
        chan_w = chan_bits(channels)
        super().__init__({
            "desc": In(stream.Signature(CopyDescriptor(arch, channels))),
            "xlat_req": Out(stream.Signature(translate_request(arch, xlat_tag_width))),
            "xlat_rsp": In(stream.Signature(translate_response(arch, xlat_tag_width))),
            "rd": Out(ReadPortSignature(self._mem_addr_width, data_width)),
            "wr": Out(stream.Signature(DmaWrite(arch, data_width, channels))),
            "wr_ack": In(stream.Signature(chan_w)),
            "status": Out(ChannelStatus(arch)).array(channels),
            "clear": In(channels),
            "fault": Out(stream.Signature(DmaFault(arch, channels))),
            "flush": In(1),
        })

    arch = property(lambda self: self._arch, doc="The architectural parameters.")
    data_width = property(lambda self: self._data_width, doc="Data bus width in bits.")
    channels = property(lambda self: self._channels, doc="Number of channels.")
    outstanding = property(lambda self: self._outstanding, doc="Read requests in flight.")
    burst_len = property(lambda self: self._burst_len, doc="Maximum chunk length in beats.")
    ack_limit = property(lambda self: self._ack_limit, doc="Unacknowledged beats per channel.")
    mem_addr_width = property(lambda self: self._mem_addr_width, doc="Word address width.")

    def elaborate(self, platform):
        m = Module()
        arch = self._arch
        C = self._channels
        A = arch.addr_bits
        B = self._data_width // 8
        wb = exact_log2(B)
        p0 = arch.page_sizes[0]
        p0_bits = exact_log2(p0)
        burst_bytes = self._burst_len * B
        bb_bits = exact_log2(burst_bytes)
        LW = bits_for(burst_bytes)                   # chunk length width
        mem_bits = max(ceil_log2(arch.mem_bytes), p0_bits)
        ppn_w = mem_bits - p0_bits
        vpn_w = A - p0_bits
        chan_w = chan_bits(C)
        ctx_w = ctx_bits(arch)
        dev_w = dev_bits(arch)

        chunk_layout = data.StructLayout({
            "chan": chan_w, "ctx": ctx_w, "src": A, "dst": A, "len": LW,
            "last": 1, "empty": 1, "tag": 16,
        })
        cmd_layout = data.StructLayout({
            "kind": _Kind, "chan": chan_w, "last": 1, "tag": 16,
            "src": mem_bits, "dst": mem_bits, "dev": dev_w, "len": LW,
        })

        # Shared per-channel state crossing stages.
        faulted = Signal(C)            # translator saw a fault: drop everything
        error = Signal(C)              # the fault marker reached the writer
        f_va = [Signal(A, name=f"f_va{c}") for c in range(C)]
        f_layout = data.StructLayout({"ctx": ctx_w, "va": A, "cause": TranslateCause})
        m.submodules.f_info = f_info = Memory(shape=f_layout, depth=C, init=[])
        f_w = f_info.write_port()
        f_rr = f_info.read_port(domain="comb")
        f_cause = [Signal(TranslateCause, name=f"f_cause{c}") for c in range(C)]
        inflight = [Signal(5, name=f"inflight{c}") for c in range(C)]
        inc = Signal(C)                # a chunk entered the pipe
        dec_drop = Signal(C)           # the translator dropped a chunk
        dec_retire = Signal(C)         # the writer retired a command
        busy = Signal(C)
        do_clear = Signal(C)
        m.d.comb += do_clear.eq(self.clear & ~busy)

        # ------------------------------------------------------------ mid-end
        # Descriptor ring: two slots per channel (current + prefetched next) and
        # the per-channel walk state, both in small LUT RAMs; one shared walker
        # with three stages: pick (round-robin) -> read + chunk length -> write
        # back + emit. A channel is not picked while it is in the read stage, so
        # the read stage always sees the previous write-back of its channel.
        m.submodules.chunks = chunkq = SyncFIFOBuffered(width=chunk_layout.size, depth=3)
        chunk_in = Signal(chunk_layout)
        m.d.comb += chunkq.w_data.eq(chunk_in)

        # the ring keeps src - src_stride and dst - dst_stride: starting a
        # descriptor is then "advance to the next row" from a virtual row -1
        ring_layout = data.StructLayout({
            "ctx": ctx_w, "tag": 16, "src0": A, "dst0": A, "row_bytes": 32, "rows": 32,
            "src_stride": 32, "dst_stride": 32, "empty": 1})
        walk_layout = data.StructLayout({"cur_s": A, "cur_d": A, "row_s": A, "row_d": A,
                                         "row_left": 32, "rows_left": 32})
        m.submodules.ring = ring = Memory(shape=ring_layout, depth=2 * C, init=[])
        # walk state in two LUT RAMs: the position (written for every chunk) and
        # the row bases (written only when a row ends)
        pos_layout = data.StructLayout({"cur_s": A, "cur_d": A, "row_left": 32,
                                        "room_s": LW, "room_d": LW})
        row_layout = data.StructLayout({"row_s": A, "row_d": A, "rows_left": 32})
        m.submodules.walk_pos = walk_p = Memory(shape=pos_layout, depth=C, init=[])
        m.submodules.walk_row = walk_r_ = Memory(shape=row_layout, depth=C, init=[])
        ring_w = ring.write_port()
        ring_r = ring.read_port(domain="comb")
        wp_w = walk_p.write_port()
        wp_r = walk_p.read_port(domain="comb")
        wr_w = walk_r_.write_port()
        wr_r = walk_r_.read_port(domain="comb")

        active = Signal(C)
        head = Signal(C)
        tail = Signal(C)
        slot_v = [Signal(2, name=f"slot_v{c}") for c in range(C)]
        load = Signal(C)               # a descriptor starts (cache invalidation)

        # descriptor input: into the channel's free slot; dropped while faulted
        dp = self.desc.p
        m.d.comb += self.desc.ready.eq(1)         # channel numbers >= C are dropped
        for c in range(C):
            with m.If(dp.chan == c):
                m.d.comb += self.desc.ready.eq(faulted[c] | ~slot_v[c].bit_select(tail[c], 1))
                with m.If(self.desc.valid & ~faulted[c] & ~slot_v[c].bit_select(tail[c], 1)):
                    m.d.comb += ring_w.en.eq(1)
                    m.d.sync += [slot_v[c].bit_select(tail[c], 1).eq(1), tail[c].eq(~tail[c])]
        m.d.comb += [
            ring_w.addr.eq(Cat(tail.bit_select(dp.chan, 1), dp.chan)),
            ring_w.data.ctx.eq(dp.ctx), ring_w.data.tag.eq(dp.tag),
            ring_w.data.src0.eq(dp.src - dp.src_stride), ring_w.data.dst0.eq(dp.dst - dp.dst_stride),
            ring_w.data.row_bytes.eq(dp.row_bytes), ring_w.data.rows.eq(dp.rows),
            ring_w.data.src_stride.eq(dp.src_stride), ring_w.data.dst_stride.eq(dp.dst_stride),
            ring_w.data.empty.eq((dp.rows == 0) | (dp.row_bytes == 0)),
        ]

        # stage registers
        v1 = Signal()
        c1 = Signal(range(max(2, C)))
        v2 = Signal()
        c2 = Signal(range(max(2, C)))
        op2 = Signal(2)                # 0: nothing, 1: chunk, 2: activate
        s2 = Signal(walk_layout)
        s2_len = Signal(LW)
        s2_row_end = Signal()
        s2_desc_end = Signal()
        s2_empty = Signal()
        s2_ctx = Signal(ctx_w)
        s2_tag = Signal(16)
        s2_row_bytes = Signal(32)
        s2_s_stride = Signal(32)
        s2_d_stride = Signal(32)

        emit = Signal()
        adv = Signal()
        c2_faulted = Signal()
        m.d.comb += c2_faulted.eq(faulted.bit_select(c2, 1))
        m.d.comb += emit.eq(v2 & ~c2_faulted & ((op2 == 1) | ((op2 == 2) & s2_empty)))
        m.d.comb += adv.eq(~emit | chunkq.w_rdy)

        # pick
        cand = Signal(C)
        for c in range(C):
            m.d.comb += cand[c].eq((active[c] | slot_v[c].bit_select(head[c], 1)) & ~faulted[c]
                                   & ~(v1 & (c1 == c)))
        last_pick = Signal(range(max(2, C)))
        pidx = _rr_pick(m, cand, last_pick, C, "pick")
        with m.If(adv):
            m.d.sync += [v1.eq(cand.any()), c1.eq(pidx)]
            with m.If(cand.any()):
                m.d.sync += last_pick.eq(pidx)

        # read + chunk length
        room_s = Signal(LW)
        room_d = Signal(LW)
        rd_ = Signal(ring_layout)
        wk = Signal(walk_layout)
        m.d.comb += [
            ring_r.addr.eq(Cat(head.bit_select(c1, 1), c1)),
            wp_r.addr.eq(c1), wr_r.addr.eq(c1),
            rd_.eq(ring_r.data),
            wk.cur_s.eq(wp_r.data.cur_s), wk.cur_d.eq(wp_r.data.cur_d),
            wk.row_left.eq(wp_r.data.row_left),
            room_s.eq(wp_r.data.room_s), room_d.eq(wp_r.data.room_d),
            wk.row_s.eq(wr_r.data.row_s), wk.row_d.eq(wr_r.data.row_d),
            wk.rows_left.eq(wr_r.data.rows_left),
        ]
        c1_active = Signal()
        c1_slot = Signal()
        m.d.comb += [c1_active.eq(active.bit_select(c1, 1)),
                     c1_slot.eq(Cat(*slot_v).bit_select(Cat(head.bit_select(c1, 1), c1), 1))]
        # chunk length = min(row_left, room_s, room_d): bytes to the source page
        # end and to the destination burst end, kept with the position
        lim = Signal(LW)
        row_end = Signal()
        m.d.comb += [
            lim.eq(Mux(room_s < room_d, room_s, room_d)),
            row_end.eq((wk.row_left[LW:] == 0) & (wk.row_left[:LW] <= room_s)
                       & (wk.row_left[:LW] <= room_d)),
        ]
        # walk state: rows_left counts the rows after the current one
        with m.If(adv):
            m.d.sync += [
                v2.eq(v1), c2.eq(c1),
                op2.eq(Mux(c1_active, 1, Mux(c1_slot, 2, 0))),
                s2_ctx.eq(rd_.ctx), s2_tag.eq(rd_.tag), s2_row_bytes.eq(rd_.row_bytes),
                s2_s_stride.eq(rd_.src_stride), s2_d_stride.eq(rd_.dst_stride),
                s2_empty.eq(rd_.empty),
                s2.cur_s.eq(wk.cur_s), s2.cur_d.eq(wk.cur_d), s2.row_left.eq(wk.row_left),
                s2.row_s.eq(Mux(c1_active, wk.row_s, rd_.src0)),
                s2.row_d.eq(Mux(c1_active, wk.row_d, rd_.dst0)),
                s2.rows_left.eq(Mux(c1_active, wk.rows_left, rd_.rows)),
                s2_len.eq(Mux(row_end, wk.row_left, lim)),
                s2_row_end.eq(~c1_active | row_end),
                s2_desc_end.eq(~c1_active | (row_end & (wk.rows_left == 0))),
            ]

        # write back + emit
        nxt_s = Signal(A)
        nxt_d = Signal(A)
        new_s = Signal(A)
        new_d = Signal(A)
        m.d.comb += [nxt_s.eq(s2.row_s + s2_s_stride), nxt_d.eq(s2.row_d + s2_d_stride)]
        m.d.comb += [
            wp_w.addr.eq(c2), wr_w.addr.eq(c2),
            new_s.eq(Mux(s2_row_end, nxt_s, s2.cur_s + s2_len)),
            new_d.eq(Mux(s2_row_end, nxt_d, s2.cur_d + s2_len)),
            wp_w.data.cur_s.eq(new_s),
            wp_w.data.cur_d.eq(new_d),
            # As burst_bytes <= p0, the source page end is nearer than a burst
            # only in the page's last burst window, and then it is that window's end.
            wp_w.data.room_s.eq(burst_bytes - Mux(
                new_s[bb_bits:p0_bits].all() if p0_bits > bb_bits else 1, new_s[:bb_bits], 0)),
            wp_w.data.room_d.eq(burst_bytes - new_d[:bb_bits]),
            wp_w.data.row_left.eq(Mux(s2_row_end, s2_row_bytes, s2.row_left - s2_len)),
            wr_w.data.row_s.eq(nxt_s), wr_w.data.row_d.eq(nxt_d),
            wr_w.data.rows_left.eq(s2.rows_left - 1),
            wp_w.en.eq(v2 & ~c2_faulted & ((op2 == 1) | (op2 == 2)) & adv),
            wr_w.en.eq(v2 & ~c2_faulted & ((op2 == 1) | (op2 == 2)) & adv & s2_row_end),
            chunk_in.chan.eq(c2), chunk_in.ctx.eq(s2_ctx), chunk_in.src.eq(s2.cur_s),
            chunk_in.dst.eq(s2.cur_d), chunk_in.len.eq(s2_len),
            chunk_in.last.eq(s2_desc_end), chunk_in.empty.eq(op2 == 2), chunk_in.tag.eq(s2_tag),
            chunkq.w_en.eq(emit),
        ]
        release = Signal()
        m.d.comb += release.eq(v2 & ~c2_faulted & adv & (((op2 == 1) & s2_desc_end)
                                                          | ((op2 == 2) & s2_empty)))
        for c in range(C):
            with m.If(c2 == c):
                with m.If(release):
                    m.d.sync += [active[c].eq(0), slot_v[c].bit_select(head[c], 1).eq(0),
                                 head[c].eq(~head[c])]
                with m.If(v2 & ~c2_faulted & adv & (op2 == 2) & ~s2_empty):
                    m.d.sync += active[c].eq(1)
                    m.d.comb += load[c].eq(1)
            with m.If(faulted[c]):
                m.d.sync += [active[c].eq(0), slot_v[c].eq(0)]
        m.d.comb += inc.eq(Mux(emit & adv, 1 << c2, 0))
        midend_busy = Signal(C)
        for c in range(C):
            m.d.comb += midend_busy[c].eq(active[c] | slot_v[c].any() | (v1 & (c1 == c))
                                          | (v2 & (c2 == c)))

        # --------------------------------------------------------- translator
        # The chunk at the head of the chunk queue is looked up in its channel's
        # page cache; chunk and hit flags are registered (stage T1) and T1 then
        # either forwards the chunk or asks the MMU (source first).
        m.submodules.cmds_a = cmdq_a = SyncFIFO(width=cmd_layout.size, depth=4)
        hd = Signal(chunk_layout)
        m.d.comb += hd.eq(chunkq.r_data)
        cmd_out = Signal(cmd_layout)
        m.d.comb += cmdq_a.w_data.eq(cmd_out)

        # per-channel page cache: tags and frames in LUT RAM, valid bits in registers
        s_valid = Signal(C)
        d_valid = Signal(C)
        s_layout = data.StructLayout({"vpn": vpn_w, "ppn": ppn_w})
        d_layout = data.StructLayout({"vpn": vpn_w, "ppn": ppn_w, "dev": dev_w})
        m.submodules.s_cache = s_cache = Memory(shape=s_layout, depth=C, init=[])
        m.submodules.d_cache = d_cache = Memory(shape=d_layout, depth=C, init=[])
        s_cw = s_cache.write_port()
        d_cw = d_cache.write_port()
        s_cr = s_cache.read_port(domain="comb")
        d_cr = d_cache.read_port(domain="comb")

        ck = Signal(chunk_layout)          # stage T1
        t_valid = Signal()
        t_s_hit = Signal()
        t_d_hit = Signal()
        t_s_ppn = Signal(ppn_w)
        t_d_ppn = Signal(ppn_w)
        t_d_dev = Signal(dev_w)
        t_pop = Signal()
        m.d.comb += [s_cr.addr.eq(hd.chan), d_cr.addr.eq(hd.chan),
                     s_cw.addr.eq(ck.chan), d_cw.addr.eq(ck.chan)]
        with m.If((~t_valid | t_pop)):
            m.d.comb += chunkq.r_en.eq(1)
            m.d.sync += [
                t_valid.eq(chunkq.r_rdy), ck.eq(hd),
                t_s_hit.eq(s_valid.bit_select(hd.chan, 1) & (s_cr.data.vpn == hd.src[p0_bits:])),
                t_d_hit.eq(d_valid.bit_select(hd.chan, 1) & (d_cr.data.vpn == hd.dst[p0_bits:])),
                t_s_ppn.eq(s_cr.data.ppn), t_d_ppn.eq(d_cr.data.ppn), t_d_dev.eq(d_cr.data.dev),
            ]
        cur_faulted = Signal()
        m.d.comb += cur_faulted.eq(faulted.bit_select(ck.chan, 1))
        m.d.comb += [
            cmd_out.chan.eq(ck.chan), cmd_out.last.eq(ck.last), cmd_out.tag.eq(ck.tag),
            cmd_out.src.eq(Cat(ck.src[:p0_bits], t_s_ppn)),
            cmd_out.dst.eq(Cat(ck.dst[:p0_bits], t_d_ppn)),
            cmd_out.dev.eq(t_d_dev), cmd_out.len.eq(ck.len),
        ]

        side = Signal()                    # 0: source, 1: destination
        m.d.comb += [f_w.addr.eq(ck.chan), f_w.data.ctx.eq(ck.ctx),
                     f_w.data.va.eq(Mux(side, ck.dst, ck.src)),
                     f_w.data.cause.eq(self.xlat_rsp.p.cause)]
        fill = Signal()
        inval = Signal(C)
        m.d.comb += inval.eq(Mux(self.flush, (1 << C) - 1, load))
        m.d.comb += [
            self.xlat_req.p.ctx.eq(ck.ctx),
            self.xlat_req.p.va.eq(Mux(side, ck.dst, ck.src)),
            self.xlat_req.p.write.eq(side),
            self.xlat_req.p.tag.eq(0),
        ]
        rsp = self.xlat_rsp.p
        with m.FSM(name="xlat"):
            with m.State("CHECK"):
                with m.If(t_valid):
                    with m.If(cur_faulted):
                        m.d.comb += [t_pop.eq(1), dec_drop.eq(1 << ck.chan)]
                    with m.Elif(ck.empty):
                        m.d.comb += [cmd_out.kind.eq(_Kind.EMPTY), cmdq_a.w_en.eq(1),
                                     t_pop.eq(cmdq_a.w_rdy)]
                    with m.Elif(t_s_hit & t_d_hit):
                        m.d.comb += [cmd_out.kind.eq(_Kind.DATA), cmdq_a.w_en.eq(1),
                                     t_pop.eq(cmdq_a.w_rdy)]
                    with m.Else():
                        m.d.sync += side.eq(t_s_hit)
                        m.next = "REQ"
            with m.State("REQ"):
                m.d.comb += self.xlat_req.valid.eq(1)
                with m.If(self.xlat_req.ready):
                    m.next = "RSP"
            with m.State("RSP"):
                m.d.comb += self.xlat_rsp.ready.eq(1)
                with m.If(self.xlat_rsp.valid):
                    with m.If(rsp.cause != TranslateCause.NONE):
                        m.d.comb += f_w.en.eq(1)
                        for c in range(C):
                            with m.If(ck.chan == c):
                                m.d.sync += [
                                    f_va[c].eq(Mux(side, ck.dst, ck.src)),
                                    f_cause[c].eq(rsp.cause),
                                ]
                        m.d.sync += faulted.eq(faulted | (1 << ck.chan))
                        m.next = "MARK"
                    with m.Else():
                        m.d.comb += fill.eq(1)
                        with m.If(side):
                            m.d.sync += [t_d_hit.eq(1), t_d_ppn.eq(rsp.pa[p0_bits:mem_bits]),
                                         t_d_dev.eq(rsp.dev)]
                        with m.Else():
                            m.d.sync += [t_s_hit.eq(1), t_s_ppn.eq(rsp.pa[p0_bits:mem_bits])]
                        m.next = "CHECK"
            with m.State("MARK"):
                m.d.comb += [cmd_out.kind.eq(_Kind.FAULT), cmdq_a.w_en.eq(1),
                             t_pop.eq(cmdq_a.w_rdy)]
                with m.If(cmdq_a.w_rdy):
                    m.next = "CHECK"

        m.d.comb += [
            s_cw.data.vpn.eq(ck.src[p0_bits:]), s_cw.data.ppn.eq(rsp.pa[p0_bits:mem_bits]),
            d_cw.data.vpn.eq(ck.dst[p0_bits:]), d_cw.data.ppn.eq(rsp.pa[p0_bits:mem_bits]),
            d_cw.data.dev.eq(rsp.dev),
            s_cw.en.eq(fill & ~side), d_cw.en.eq(fill & side),
        ]
        for c in range(C):
            with m.If(fill & (ck.chan == c)):
                with m.If(side):
                    m.d.sync += d_valid[c].eq(1)
                with m.Else():
                    m.d.sync += s_valid[c].eq(1)
            with m.If(inval[c]):
                m.d.sync += [s_valid[c].eq(0), d_valid[c].eq(0)]
        with m.If(do_clear.any()):
            m.d.sync += faulted.eq(faulted & ~do_clear)

        # ------------------------------------------------------------- reader
        m.submodules.cmds_b = cmdq_b = SyncFIFO(width=cmd_layout.size, depth=4)
        m.submodules.rdata = rdataq = SyncFIFOBuffered(width=self._data_width,
                                                       depth=self._outstanding)
        a_cmd = Signal(cmd_layout)
        m.d.comb += [a_cmd.eq(cmdq_a.r_data), cmdq_b.w_data.eq(cmdq_a.r_data)]
        rd_busy = Signal()
        rd_addr = Signal(self._mem_addr_width)
        rd_left = Signal(LW + 1)
        credits = Signal(range(self._outstanding + 1))
        issue = Signal()
        popped = Signal()
        m.d.comb += [
            self.rd.req.valid.eq(rd_busy & (credits != self._outstanding)),
            self.rd.req.p.eq(rd_addr),
            issue.eq(self.rd.req.valid & self.rd.req.ready),
        ]
        m.d.sync += credits.eq(credits + issue - popped)
        with m.If(issue):
            m.d.sync += [rd_addr.eq(rd_addr + 1), rd_left.eq(rd_left - 1)]
            with m.If(rd_left == 1):
                m.d.sync += rd_busy.eq(0)
        a_nr = Signal(LW + 1)
        m.d.comb += a_nr.eq(((a_cmd.src[:wb] + a_cmd.len - 1) >> wb) + 1)
        with m.If((~rd_busy | (issue & (rd_left == 1))) & cmdq_a.r_rdy & cmdq_b.w_rdy):
            m.d.comb += [cmdq_a.r_en.eq(1), cmdq_b.w_en.eq(1)]
            with m.If(a_cmd.kind == _Kind.DATA):
                m.d.sync += [rd_busy.eq(1), rd_addr.eq(a_cmd.src[wb:]), rd_left.eq(a_nr)]
        m.d.comb += [
            rdataq.w_stream.valid.eq(self.rd.rsp.valid),
            rdataq.w_stream.payload.eq(self.rd.rsp.p),
            self.rd.rsp.ready.eq(rdataq.w_stream.ready),
        ]

        # ------------------------------------------------------------- writer
        b_cmd = Signal(cmd_layout)
        m.d.comb += b_cmd.eq(cmdq_b.r_data)
        head = rdataq.r_stream
        w_valid = Signal()
        w_kind = Signal(_Kind)
        w_chan = Signal(chan_w)
        w_last = Signal()
        w_tag = Signal(16)
        w_dev = Signal(dev_w)
        w_addr = Signal(self._mem_addr_width)
        w_sh = Signal(range(B + 1))
        w_pre = Signal()
        w_first = Signal()
        w_outs = Signal(LW + 1)
        w_reads = Signal(LW + 1)
        w_be_first = Signal(B)
        w_be_last = Signal(B)
        prev = Signal(self._data_width)

        ack_pending = [Signal(range(self._ack_limit + 1), name=f"ack_pending{c}")
                       for c in range(C)]
        ack_room = Signal()
        m.d.comb += ack_room.eq(Cat(*[(ack_pending[c] != self._ack_limit) & (w_chan == c)
                                      for c in range(C)]).any())

        need_head = Signal()
        beat_ok = Signal()
        fire = Signal()
        retire = Signal()
        m.d.comb += [
            need_head.eq((w_outs != 1) | (w_reads != 0)),
            beat_ok.eq(w_valid & (w_kind == _Kind.DATA) & ~w_pre
                       & (~need_head | head.valid) & ack_room),
            self.wr.valid.eq(beat_ok),
            fire.eq(beat_ok & self.wr.ready),
            self.wr.p.dev.eq(w_dev),
            self.wr.p.addr.eq(w_addr),
            self.wr.p.chan.eq(w_chan),
            self.wr.p.data.eq((Cat(prev, head.payload) >> (w_sh * 8))[:self._data_width]),
            self.wr.p.be.eq(Mux(w_first, w_be_first, (1 << B) - 1)
                            & Mux(w_outs == 1, w_be_last, (1 << B) - 1)),
        ]
        with m.If(w_valid & (w_kind == _Kind.DATA) & w_pre):
            m.d.comb += head.ready.eq(1)
            with m.If(head.valid):
                m.d.sync += [prev.eq(head.payload), w_reads.eq(w_reads - 1), w_pre.eq(0)]
        with m.If(fire):
            m.d.sync += [w_outs.eq(w_outs - 1), w_addr.eq(w_addr + 1), w_first.eq(0)]
            with m.If(need_head):
                m.d.comb += head.ready.eq(1)
                m.d.sync += [prev.eq(head.payload), w_reads.eq(w_reads - 1)]
        m.d.comb += popped.eq(head.valid & head.ready)

        # fault records (the translator's per-channel fault info, from LUT RAM)
        rec = self.fault.p
        m.d.comb += [rec.chan.eq(w_chan), f_rr.addr.eq(w_chan),
                     rec.ctx.eq(f_rr.data.ctx), rec.va.eq(f_rr.data.va),
                     rec.cause.eq(f_rr.data.cause)]
        m.d.comb += self.fault.valid.eq(w_valid & (w_kind == _Kind.FAULT))

        with m.Switch(w_kind):
            with m.Case(_Kind.DATA):
                m.d.comb += retire.eq(fire & (w_outs == 1))
            with m.Case(_Kind.EMPTY):
                m.d.comb += retire.eq(w_valid)
            with m.Case(_Kind.FAULT):
                m.d.comb += retire.eq(w_valid & self.fault.ready)
        with m.If(retire):
            m.d.sync += w_valid.eq(0)
            m.d.comb += dec_retire.eq(1 << w_chan)
        with m.If(w_valid & (w_kind == _Kind.FAULT) & self.fault.ready):
            m.d.sync += error.eq(error | (1 << w_chan))
        with m.If(do_clear.any()):
            m.d.sync += error.eq(error & ~do_clear)

        b_s = Signal(wb + 1)
        b_d = Signal(wb + 1)
        b_end = Signal(wb)
        m.d.comb += [b_s.eq(b_cmd.src[:wb]), b_d.eq(b_cmd.dst[:wb]),
                     b_end.eq(b_cmd.dst[:wb] + b_cmd.len - 1)]
        with m.If((~w_valid | retire) & cmdq_b.r_rdy):
            m.d.comb += cmdq_b.r_en.eq(1)
            m.d.sync += [
                w_valid.eq(1), w_kind.eq(b_cmd.kind), w_chan.eq(b_cmd.chan),
                w_last.eq(b_cmd.last), w_tag.eq(b_cmd.tag), w_dev.eq(b_cmd.dev),
                w_addr.eq(b_cmd.dst[wb:]), w_first.eq(1),
                w_outs.eq(((b_cmd.dst[:wb] + b_cmd.len - 1) >> wb) + 1),
                w_reads.eq(((b_cmd.src[:wb] + b_cmd.len - 1) >> wb) + 1),
                w_pre.eq(b_s > b_d),
                w_sh.eq(Mux(b_s > b_d, b_s - b_d, B + b_s - b_d)),
                w_be_first.eq(Const((1 << B) - 1, B) << b_d),
                w_be_last.eq(Const((1 << B) - 1, B) >> (~b_end)[:wb] if wb else Const(1, 1)),
            ]

        # --------------------------------------------------- completion/status
        ended = [Signal(16, name=f"ended{c}") for c in range(C)]
        ended_tag = [Signal(16, name=f"ended_tag{c}") for c in range(C)]
        m.d.comb += self.wr_ack.ready.eq(1)
        for c in range(C):
            st = self.status[c]
            w_this = fire & (w_chan == c)
            a_this = self.wr_ack.valid & (self.wr_ack.p == c)
            m.d.sync += ack_pending[c].eq(ack_pending[c] + w_this - a_this)
            m.d.sync += inflight[c].eq(inflight[c] + inc[c] - dec_drop[c] - dec_retire[c])
            with m.If(retire & (w_chan == c) & w_last & (w_kind != _Kind.FAULT)):
                m.d.sync += [ended[c].eq(ended[c] + 1), ended_tag[c].eq(w_tag)]
            with m.If(ack_pending[c] == 0):
                m.d.sync += [st.done_count.eq(ended[c]), st.done_tag.eq(ended_tag[c])]
            m.d.comb += busy[c].eq(midend_busy[c] | (inflight[c] != 0) | (ack_pending[c] != 0)
                                   | (st.done_count != ended[c]))
            m.d.comb += [
                st.busy.eq(busy[c]),
                st.error.eq(error[c]),
                st.cause.eq(Mux(error[c], f_cause[c], TranslateCause.NONE)),
                st.va.eq(f_va[c]),
            ]
        return m
