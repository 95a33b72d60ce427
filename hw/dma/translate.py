"""Translation: chunks to physical commands through a per-channel page cache
and the MMU; the first fault of a channel becomes a marker in the command
stream."""
from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Cat, Module, Mux, Shape, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..mmu import TranslateCause, translate_request, translate_response
from ..lib import RegisterSlice
from .layouts import Chunk, CmdKind, Command, Event

__all__ = ["Translator"]


def _frame_table(m, name, layout, depth):
    """A table of ``layout`` per channel in LUT RAM: its read port
    (combinational) and write port, as signals. No memory at all when the
    layout has no bits (one device with a one-page memory): the read data is
    then empty."""
    r = SimpleNamespace(addr=Signal(range(depth)), data=Signal(layout))
    w = SimpleNamespace(addr=Signal(range(depth)), data=Signal(layout), en=Signal())
    if Shape.cast(layout).width:
        m.submodules[name] = table = Memory(shape=layout, depth=depth, init=[])
        rp, wp = table.read_port(domain="comb"), table.write_port()
        m.d.comb += [rp.addr.eq(r.addr), r.data.eq(rp.data),
                     wp.addr.eq(w.addr), wp.data.eq(w.data), wp.en.eq(w.en)]
    return r, w


class Translator(wiring.Component):
    """Per-channel page cache, MMU port and fault marker.

    Keeps, per channel, the last source page and the last destination page
    it translated (smallest-page granularity; the page numbers it compares
    in flip-flops, all channels compared at once and the chunk's channel
    choosing among the results, so the late ``chan`` meets no memory's read
    address; the frames in LUT RAM). The chunk
    at the input is looked up when it is taken and registered with its hit
    flags and what it does next (leave, be dropped, or ask the MMU), so
    ``chunk.ready`` is a gate from flip-flops; a chunk on cached pages
    leaves the next cycle, otherwise the translator asks the MMU, source
    first, then destination, one request at a time (its answer registered,
    then acted on a cycle later), and fills the cache. Commands leave
    through a skid slice (``cmd`` a cycle after the command is made; the
    translator runs up to two commands ahead of a blocked ``cmd``). A
    descriptor's first chunk (``first``) is translated afresh, and ``flush``
    empties every cache a cycle after it is seen.

    The first failing translation halts the channel (``halt``): a ``FAULT``
    command carrying the record (context, virtual address, cause) goes down
    the command stream behind the chunks already translated, so the record
    leaves the DMA after every earlier write of its channel; the channel's
    later chunks are dropped (each one named on ``dropped``) until
    ``clear`` names the channel. ``clear`` must name only channels with no
    chunk at ``chunk`` or in the translator (the DMA clears only a channel
    with nothing in flight): a chunk taken in a clear's cycle is checked
    against ``halt`` as it stands.

    The MMU port's ``tag`` is driven 0 and the response's is ignored:
    requests are answered in order and one is in flight at a time, so
    ``xlat_rsp.ready`` is always high (a response arrives only while the
    translator waits for it).

    Parameters
    ----------
    geometry : :class:`DmaGeometry`
    tag_width : int
        Width of the MMU port's (unused) tag, to match an MMU built with tags.

    Interface attributes
    --------------------
    chunk : ``In(stream.Signature(Chunk))``
    cmd : ``Out(stream.Signature(Command))``
    xlat_req : ``Out(stream.Signature(translate_request(arch, tag_width)))``
    xlat_rsp : ``In(stream.Signature(translate_response(arch, tag_width)))``
    dropped : ``Out(Event(chan))``
    halt : ``Out(channels)``
    clear : ``In(channels)``
    flush : ``In(1)``
    """

    def __init__(self, geometry, *, tag_width=0):
        g = self._g = geometry
        super().__init__({
            "chunk": In(stream.Signature(Chunk(g))),
            "cmd": Out(stream.Signature(Command(g))),
            "xlat_req": Out(stream.Signature(translate_request(g.arch, tag_width))),
            "xlat_rsp": In(stream.Signature(translate_response(g.arch, tag_width))),
            "dropped": Out(Event(g.chan_bits)),
            "halt": Out(g.channels),
            "clear": In(g.channels),
            "flush": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        g = self._g
        C, pb = g.channels, g.page_bits
        ppn_w, vpn_w = g.pa_bits - pb, g.addr_bits - pb
        src_layout = data.StructLayout({"ppn": ppn_w})
        dst_layout = data.StructLayout({"ppn": ppn_w, "dev": g.dev_bits})
        s_vpn = [Signal(vpn_w, name=f"s_vpn{c}") for c in range(C)]
        d_vpn = [Signal(vpn_w, name=f"d_vpn{c}") for c in range(C)]
        s_r, s_w = _frame_table(m, "src_cache", src_layout, C)
        d_r, d_w = _frame_table(m, "dst_cache", dst_layout, C)
        s_valid = Signal(C)
        d_valid = Signal(C)

        # the registered chunk, its lookup and what it does next, decided as it is
        # registered: ``drop`` (its channel halted), ``go`` (it leaves without
        # the caches: empty, or later the FAULT marker) or ``hits`` (it leaves
        # once both sides hit). So ``take``, and with it ``chunk.ready`` (the
        # enable of ``ck``, the lookup registers and the chunk queue's read
        # side), is a gate or two from flip-flops, and the cache compares end in
        # the hit flags alone
        inp = self.chunk.p
        ck = Signal(Chunk(g))
        st = Signal(data.StructLayout({
            "held": 1, "s_hit": 1, "d_hit": 1, "s_ppn": ppn_w, "d_ppn": ppn_w,
            "d_dev": g.dev_bits, "drop": 1, "go": 1, "hits": 1,
            "free": 1,                     # ``~held | drop``
        }), init={"free": 1})
        emit = Signal()                    # ``cmd.valid``
        m.d.comb += emit.eq(st.go | (st.hits & st.s_hit & st.d_hit))
        flush = Signal()                   # ``flush``, a cycle late (see ``_fill_caches``)
        m.d.sync += flush.eq(self.flush)
        m.d.comb += [s_r.addr.eq(inp.chan), d_r.addr.eq(inp.chan),
                     s_w.addr.eq(ck.chan), d_w.addr.eq(ck.chan)]
        # commands leave through a skid slice: the command queue's ``ready`` (a
        # compare of its level) reaches the slice, ``take`` a flip-flop of it
        m.submodules.cmd_slice = cmd_slice = RegisterSlice(Command(g))
        wiring.connect(m, cmd_slice.o, wiring.flipped(self.cmd))
        m.d.comb += self.chunk.ready.eq(st.free | (emit & cmd_slice.i.ready))
        with m.If(self.chunk.ready):
            # no fault is being answered now: the channel's next ``halt`` is its
            # present one. (``clear`` names only channels with nothing in the pipe,
            # the completion's ``cleared``, so never the channel of a chunk here:
            # the check reads ``halt`` alone, not the completion's busy logic)
            s_same = Cat(*[v == inp.src[pb:] for v in s_vpn])     # every channel's compare,
            d_same = Cat(*[v == inp.dst[pb:] for v in d_vpn])     # ``chan`` chooses after
            s_hit = (s_valid & s_same).bit_select(inp.chan, 1) & ~inp.first
            d_hit = (d_valid & d_same).bit_select(inp.chan, 1) & ~inp.first
            halted = self.halt.bit_select(inp.chan, 1)
            m.d.sync += [
                ck.eq(inp), st.held.eq(self.chunk.valid),
                st.s_hit.eq(s_hit), st.d_hit.eq(d_hit),
                st.s_ppn.eq(s_r.data.ppn), st.d_ppn.eq(d_r.data.ppn), st.d_dev.eq(d_r.data.dev),
                st.drop.eq(self.chunk.valid & halted), st.free.eq(~self.chunk.valid | halted),
                st.go.eq(self.chunk.valid & ~halted & inp.empty),
                st.hits.eq(self.chunk.valid & ~halted & ~inp.empty),
            ]
        rsp, fill, faulting, side = self._translate(m, ck, st, emit, cmd_slice.i)
        self._fill_caches(m, (s_w, s_valid, s_vpn), (d_w, d_valid, d_vpn), ck, rsp, fill, side,
                          flush)
        m.d.sync += self.halt.eq((self.halt | Mux(faulting, 1 << ck.chan, 0)) & ~self.clear)
        return m

    def _translate(self, m, ck, st, emit, cmd_out):
        """The held chunk's command, or its MMU requests one side at a time;
        returns the registered answer, "fill the cache", "the answer is a
        fault" and the side asked (0 source, 1 destination)."""
        g, pb = self._g, self._g.page_bits
        cmd = cmd_out.p
        move = cmd.body.move
        side = Signal()                    # the MMU request in flight: 0 source, 1 destination
        va = Signal(g.addr_bits)
        cause = Signal(TranslateCause)
        m.d.comb += [
            va.eq(Mux(side, ck.dst, ck.src)),
            cmd.chan.eq(ck.chan), cmd.last.eq(ck.last), cmd.tag.eq(ck.tag), cmd.cont.eq(ck.cont),
            cmd.op.eq(ck.op),
            move.src.eq(Cat(ck.src[:pb], st.s_ppn)), move.dst.eq(Cat(ck.dst[:pb], st.d_ppn)),
            move.dev.eq(st.d_dev), move.len.eq(ck.len),
            self.xlat_req.p.ctx.eq(ck.ctx), self.xlat_req.p.va.eq(va),
            self.xlat_req.p.write.eq(side),
            self.dropped.payload.eq(ck.chan),
            cmd_out.valid.eq(emit), self.dropped.valid.eq(st.drop),
        ]
        # the MMU's answer is registered before it is acted on (a cycle per
        # translation): its fault checks then never reach the caches, the FSM
        # or the halt flags in the cycle they are made
        rsp = Signal.like(self.xlat_rsp.p)
        fill = Signal()
        faulting = Signal()
        # ready at every edge: with one request in flight a response can only
        # arrive in RESPONSE. A constant lets synthesis drop the MMU stages'
        # ready chain (FPGA timing), and the MMU's cycles are the same
        m.d.comb += self.xlat_rsp.ready.eq(1)
        with m.FSM(name="xlat"):
            with m.State("LOOKUP"):
                # (a chunk waiting to leave keeps ``emit``: only its own fault
                # sets its channel's ``halt``)
                m.d.comb += cmd.kind.eq(Mux(ck.empty, CmdKind.EMPTY, CmdKind.DATA))
                with m.If(st.held & ~st.drop & ~emit):
                    m.d.sync += side.eq(st.s_hit)
                    m.next = "REQUEST"
            with m.State("REQUEST"):
                m.d.comb += self.xlat_req.valid.eq(1)
                with m.If(self.xlat_req.ready):
                    m.next = "RESPONSE"
            with m.State("RESPONSE"):
                with m.If(self.xlat_rsp.valid):
                    m.d.sync += rsp.eq(self.xlat_rsp.p)
                    m.next = "ANSWER"
            with m.State("ANSWER"):
                with m.If(rsp.cause != TranslateCause.NONE):
                    m.d.sync += [cause.eq(rsp.cause), st.go.eq(1)]
                    m.d.comb += faulting.eq(1)
                    m.next = "FAULT"
                with m.Else():
                    # back to the lookup: the chunk leaves (``emit``) once both sides hit
                    m.d.comb += fill.eq(1)
                    with m.If(side):
                        m.d.sync += [st.d_hit.eq(1), st.d_ppn.eq(rsp.pa[pb:g.pa_bits]),
                                     st.d_dev.eq(rsp.dev)]
                    with m.Else():
                        m.d.sync += [st.s_hit.eq(1), st.s_ppn.eq(rsp.pa[pb:g.pa_bits])]
                    m.next = "LOOKUP"
            with m.State("FAULT"):
                m.d.comb += [cmd.kind.eq(CmdKind.FAULT),
                             cmd.body.fault.ctx.eq(ck.ctx), cmd.body.fault.va.eq(va),
                             cmd.body.fault.cause.eq(cause)]
                with m.If(cmd_out.ready):
                    m.next = "LOOKUP"
        return rsp, fill, faulting, side

    def _fill_caches(self, m, src, dst, ck, rsp, fill, side, flush):
        """Write an answered translation into the source or destination
        cache of the chunk's channel; ``flush`` (registered: the input comes
        from far away) empties both."""
        g, pb = self._g, self._g.page_bits
        (s_w, s_valid, s_vpn), (d_w, d_valid, d_vpn) = src, dst
        m.d.comb += [
            s_w.data.ppn.eq(rsp.pa[pb:g.pa_bits]),
            d_w.data.ppn.eq(rsp.pa[pb:g.pa_bits]), d_w.data.dev.eq(rsp.dev),
            s_w.en.eq(fill & ~side), d_w.en.eq(fill & side),
        ]
        for c, (s_page, d_page) in enumerate(zip(s_vpn, d_vpn)):
            with m.If(fill & (ck.chan == c)):
                with m.If(side):
                    m.d.sync += d_page.eq(ck.dst[pb:])
                with m.Else():
                    m.d.sync += s_page.eq(ck.src[pb:])
        with m.If(fill & side):
            m.d.sync += d_valid.eq(d_valid | (1 << ck.chan))
        with m.If(fill & ~side):
            m.d.sync += s_valid.eq(s_valid | (1 << ck.chan))
        with m.If(flush):
            m.d.sync += [s_valid.eq(0), d_valid.eq(0)]
