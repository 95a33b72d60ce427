"""The MMU: a software-managed, fully associative TLB with staged entries.

There is no page-table walker: the TLB *is* the page table (``docs/isa.md``),
so its capacity, placement and lookup priority are architectural and follow
the golden model exactly:

* ``REMAP`` overwrites a valid entry with the same (ctx, staged, size, va) in
  place; otherwise it takes the lowest-numbered invalid entry; otherwise it
  evicts the entry at the round-robin victim pointer, which then advances.
* ``INVAL`` invalidates the entry with the same (ctx, staged, size, va).
* ``COMMIT`` invalidates the context's active entries and activates its staged
  ones, in one clock edge.
* A translation of ``va`` in context ``c`` uses the valid, non-staged entries
  of ``c`` containing ``va``; the lowest-numbered one wins.

Translation is a three-register pipeline (request, lookup, response) that
accepts one request per cycle and never inserts bubbles; the TLB is read at
exactly one clock edge per translation (request -> lookup), so each
translation sees either the state before or after any command, never a mix.
A request accepted at edge *t* is answered (``rsp.valid``) in the cycle after
edge *t+1*: two cycles from request to response, hit or fault alike.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal, Cat, Const, Mux
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, exact_log2

from .isa import ArchParams, Cause, Op
from .lib import ctx_bits, dev_bits

__all__ = ["TranslateCause", "MmuOp", "translate_request", "translate_response",
           "MmuCommand", "FaultRecord", "TlbEntry", "MMU"]


class TranslateCause(enum.Enum, shape=3):
    """Translation fault causes; the values are those of :class:`hw.isa.Cause`."""
    NONE = int(Cause.NONE)
    NOT_MAPPED = int(Cause.NOT_MAPPED)
    NO_READ = int(Cause.NO_READ)
    NO_WRITE = int(Cause.NO_WRITE)
    REMOTE_READ = int(Cause.REMOTE_READ)
    OUT_OF_RANGE = int(Cause.OUT_OF_RANGE)


class MmuOp(enum.Enum, shape=4):
    """MMU command opcodes; the values are the ISA opcodes (:class:`hw.isa.Op`)."""
    REMAP = int(Op.REMAP)
    INVAL = int(Op.INVAL)
    COMMIT = int(Op.COMMIT)


def translate_request(arch, tag_width):
    """Layout of a translation request: ``ctx``, ``va``, ``write`` (0: read access), ``tag``."""
    return data.StructLayout({
        "ctx": ctx_bits(arch),
        "va": arch.addr_bits,
        "write": 1,
        "tag": tag_width,
    })


def translate_response(arch, tag_width):
    """Layout of a translation response: ``pa``, ``dev``, ``cause``, ``tag``.

    ``pa`` and ``dev`` are meaningful only when ``cause`` is ``NONE``."""
    return data.StructLayout({
        "pa": arch.addr_bits,
        "dev": dev_bits(arch),
        "cause": TranslateCause,
        "tag": tag_width,
    })


class MmuCommand(data.StructLayout):
    """An MMU command: the fields of the ISA's REMAP / INVAL / COMMIT.

    ``op`` selects the command; ``size``, ``perm``, ``staged``, ``dev``,
    ``va`` and ``pa`` are used as the ISA defines (COMMIT uses only ``ctx``).
    ``va`` and ``pa`` must be aligned to the page size (the coprocessor checks
    it); the MMU ignores their in-page bits.
    """
    def __init__(self, arch):
        super().__init__({
            "op": MmuOp,
            "ctx": ctx_bits(arch),
            "size": 2,
            "perm": 2,
            "staged": 1,
            "dev": dev_bits(arch),
            "va": arch.addr_bits,
            "pa": arch.addr_bits,
        })


class FaultRecord(data.StructLayout):
    """A translation fault: context, virtual address and cause."""
    def __init__(self, arch):
        super().__init__({
            "ctx": ctx_bits(arch),
            "va": arch.addr_bits,
            "cause": TranslateCause,
        })


class TlbEntry(data.StructLayout):
    """One TLB entry. ``vpn``/``ppn`` are in units of the smallest page."""
    def __init__(self, arch):
        pn = arch.addr_bits - exact_log2(arch.page_sizes[0])
        super().__init__({
            "valid": 1,
            "staged": 1,
            "ctx": ctx_bits(arch),
            "size": 2,
            "perm": 2,
            "dev": dev_bits(arch),
            "vpn": pn,
            "ppn": pn,
        })


class MMU(wiring.Component):
    """Software-managed TLB with staged (shadow) entries and atomic COMMIT.

    Parameters
    ----------
    arch : :class:`hw.isa.ArchParams`
        Uses ``contexts``, ``tlb_entries``, ``page_sizes``, ``devices``,
        ``addr_bits`` and ``mem_bytes``.
    local_dev : int
        Index of the device this MMU belongs to: a read access whose entry
        names another device faults with ``REMOTE_READ``.
    tag_width : int
        Width of the request tag returned with each response (0..16).
    fault_depth : int
        Depth of the fault FIFO (at least 1).

    Interface attributes
    --------------------
    req : ``In(stream.Signature(translate_request(arch, tag_width)))``
        Translation requests: context, virtual address, access (``write``), tag.
    rsp : ``Out(stream.Signature(translate_response(arch, tag_width)))``
        One response per request, in order: physical address, device, fault
        cause (:class:`TranslateCause`; checked in the order NOT_MAPPED,
        NO_READ / NO_WRITE, REMOTE_READ (reads only), OUT_OF_RANGE), tag.
    cmd : ``In(stream.Signature(MmuCommand(arch)))``
        REMAP / INVAL / COMMIT. A command accepted at edge *t* takes effect
        at edge *t+2*; ``cmd.ready`` is low in between.
    idle : ``Out(1)``
        No command is pending (every accepted command has taken effect).
    fault : ``Out(stream.Signature(FaultRecord(arch)))``
        Every response with a fault cause, queued in a FIFO of
        ``fault_depth`` entries (context, va, cause).
    fault_overflow : ``Out(1)``
        Sticky: a fault was dropped because the fault FIFO was full.
    fault_clear : ``In(1)``
        Clears ``fault_overflow``.
    tlb_index : ``In(range(tlb_entries))``
        Entry to show on ``tlb_entry`` (the host port reads the TLB back this way).
    tlb_entry : ``Out(TlbEntry(arch))``
        The entry at ``tlb_index``, combinationally.
    """

    def __init__(self, arch, *, local_dev=0, tag_width=4, fault_depth=4):
        if not isinstance(arch, ArchParams):
            raise TypeError(f"arch must be an ArchParams, not {arch!r}")
        if not isinstance(local_dev, int) or not 0 <= local_dev < arch.devices:
            raise ValueError(f"Local device must be an integer in 0..{arch.devices - 1}, "
                             f"not {local_dev!r}")
        if not isinstance(tag_width, int) or not 0 <= tag_width <= 16:
            raise ValueError(f"Tag width must be an integer in 0..16, not {tag_width!r}")
        if not isinstance(fault_depth, int) or fault_depth < 1:
            raise ValueError(f"Fault FIFO depth must be a positive integer, not {fault_depth!r}")
        self._arch = arch
        self._local_dev = local_dev
        self._tag_width = tag_width
        self._fault_depth = fault_depth
        self._entries = [Signal(TlbEntry(arch), name=f"tlb{i}") for i in range(arch.tlb_entries)]
        self._victim = Signal(range(arch.tlb_entries), name="victim")
        super().__init__({
            "req": In(stream.Signature(translate_request(arch, tag_width))),
            "rsp": Out(stream.Signature(translate_response(arch, tag_width))),
            "cmd": In(stream.Signature(MmuCommand(arch))),
            "idle": Out(1),
            "fault": Out(stream.Signature(FaultRecord(arch))),
            "fault_overflow": Out(1),
            "fault_clear": In(1),
            "tlb_index": In(range(max(2, arch.tlb_entries))),
            "tlb_entry": Out(TlbEntry(arch)),
        })

    arch = property(lambda self: self._arch, doc="The architectural parameters.")
    local_dev = property(lambda self: self._local_dev, doc="This device's index.")
    tag_width = property(lambda self: self._tag_width, doc="Request tag width.")
    fault_depth = property(lambda self: self._fault_depth, doc="Fault FIFO depth.")

    @property
    def entries(self):
        """The TLB entry registers (:class:`TlbEntry` views), for inspection in simulation."""
        return tuple(self._entries)

    @property
    def victim(self):
        """The round-robin victim pointer register."""
        return self._victim

    def _offset_mask(self, size):
        """Bits of a vpn (smallest-page units) that lie inside a page of ``size``."""
        pages = self._arch.page_sizes
        p0 = pages[0]
        pn = self._arch.addr_bits - exact_log2(p0)
        full = (1 << pn) - 1
        return Mux(size[1],
                   Mux(size[0], (pages[3] // p0 - 1) & full, (pages[2] // p0 - 1) & full),
                   Mux(size[0], (pages[1] // p0 - 1) & full, (pages[0] // p0 - 1) & full))

    def elaborate(self, platform):
        m = Module()
        arch = self._arch
        n = arch.tlb_entries
        p0_bits = exact_log2(arch.page_sizes[0])
        pn = arch.addr_bits - p0_bits
        tlb = self._entries
        mem_pages = arch.mem_bytes >> p0_bits

        # ---------------------------------------------------------- read-back
        with m.Switch(self.tlb_index):
            for i in range(n):
                with m.Case(i):
                    m.d.comb += self.tlb_entry.eq(tlb[i])

        # ---------------------------------------------------------- translate
        stall = Signal()
        m.d.comb += stall.eq(self.rsp.valid & ~self.rsp.ready)
        m.d.comb += self.req.ready.eq(~stall)

        s1_valid = Signal()
        s1 = Signal(translate_request(arch, self._tag_width))
        with m.If(~stall):
            m.d.sync += [s1_valid.eq(self.req.valid), s1.eq(self.req.p)]

        s1_vpn = s1.va[p0_bits:]
        hits = Signal(n)
        for i, e in enumerate(tlb):
            mask = Signal(pn, name=f"omask{i}")
            m.d.comb += mask.eq(self._offset_mask(e.size))
            m.d.comb += hits[i].eq(e.valid & ~e.staged & (e.ctx == s1.ctx)
                                   & (((s1_vpn ^ e.vpn) & ~mask) == 0))
        # lowest index wins: one-hot select, then an AND-OR multiplexer
        onehot = Signal(n)
        m.d.comb += onehot.eq(hits & (~hits + 1))
        sel_perm = Signal(2)
        sel_dev = Signal(dev_bits(arch))
        sel_ppn = Signal(pn)
        sel_size = Signal(2)
        sel = 0
        for i, e in enumerate(tlb):
            sel = sel | Mux(onehot[i], Cat(e.perm, e.dev, e.ppn, e.size), 0)
        m.d.comb += Cat(sel_perm, sel_dev, sel_ppn, sel_size).eq(sel)

        s2_valid = Signal()
        s2_hit = Signal()
        s2_perm = Signal(2)
        s2_dev = Signal(dev_bits(arch))
        s2_ppn = Signal(pn)
        s2_size = Signal(2)
        s2_mask = Signal(pn)
        s2 = Signal(translate_request(arch, self._tag_width))
        with m.If(~stall):
            m.d.sync += [
                s2_valid.eq(s1_valid), s2.eq(s1), s2_hit.eq(hits.any()),
                s2_perm.eq(sel_perm), s2_dev.eq(sel_dev), s2_ppn.eq(sel_ppn),
                s2_size.eq(sel_size),
            ]
        m.d.comb += s2_mask.eq(self._offset_mask(s2_size))
        pa_pn = Signal(pn)
        m.d.comb += pa_pn.eq((s2_ppn & ~s2_mask) | (s2.va[p0_bits:] & s2_mask))
        cause = Signal(TranslateCause)
        with m.If(~s2_hit):
            m.d.comb += cause.eq(TranslateCause.NOT_MAPPED)
        with m.Elif(~s2.write & ~s2_perm[0]):
            m.d.comb += cause.eq(TranslateCause.NO_READ)
        with m.Elif(s2.write & ~s2_perm[1]):
            m.d.comb += cause.eq(TranslateCause.NO_WRITE)
        with m.Elif(~s2.write & (s2_dev != self._local_dev)):
            m.d.comb += cause.eq(TranslateCause.REMOTE_READ)
        if mem_pages < (1 << pn):
            with m.Elif(pa_pn >= mem_pages):
                m.d.comb += cause.eq(TranslateCause.OUT_OF_RANGE)
        m.d.comb += [
            self.rsp.valid.eq(s2_valid),
            self.rsp.p.pa.eq(Cat(s2.va[:p0_bits], pa_pn)),
            self.rsp.p.dev.eq(s2_dev),
            self.rsp.p.cause.eq(cause),
            self.rsp.p.tag.eq(s2.tag),
        ]

        # --------------------------------------------------------- fault FIFO
        m.submodules.fault_fifo = fifo = SyncFIFOBuffered(
            width=FaultRecord(arch).size, depth=self._fault_depth)
        push = Signal()
        m.d.comb += push.eq(self.rsp.valid & self.rsp.ready & (cause != TranslateCause.NONE))
        rec = Signal(FaultRecord(arch))
        m.d.comb += [rec.ctx.eq(s2.ctx), rec.va.eq(s2.va), rec.cause.eq(cause)]
        m.d.comb += [
            fifo.w_stream.valid.eq(push),
            fifo.w_stream.payload.eq(rec),
            self.fault.valid.eq(fifo.r_stream.valid),
            self.fault.payload.eq(fifo.r_stream.payload),
            fifo.r_stream.ready.eq(self.fault.ready),
        ]
        with m.If(push & ~fifo.w_stream.ready):
            m.d.sync += self.fault_overflow.eq(1)
        with m.Elif(self.fault_clear):
            m.d.sync += self.fault_overflow.eq(0)

        # ----------------------------------------------------------- commands
        # a command is accepted (edge t), matched against the TLB (edge t+1:
        # placement vectors registered) and executed (edge t+2)
        busy = Signal()
        execute = Signal()
        c = Signal(MmuCommand(arch))
        m.d.comb += [self.cmd.ready.eq(~busy), self.idle.eq(~busy)]
        with m.If(self.cmd.valid & ~busy):
            m.d.sync += [busy.eq(1), c.eq(self.cmd.p)]
        with m.If(busy & ~execute):
            m.d.sync += execute.eq(1)
        with m.If(execute):
            m.d.sync += [busy.eq(0), execute.eq(0)]

        cmask = Signal(pn)
        m.d.comb += cmask.eq(self._offset_mask(c.size))
        c_vpn = Signal(pn)
        c_ppn = Signal(pn)
        m.d.comb += [c_vpn.eq(c.va[p0_bits:] & ~cmask), c_ppn.eq(c.pa[p0_bits:] & ~cmask)]
        same = Signal(n)
        free = Signal(n)
        for i, e in enumerate(tlb):
            m.d.comb += [
                same[i].eq(e.valid & (e.ctx == c.ctx) & (e.staged == c.staged)
                           & (e.size == c.size) & (e.vpn == c_vpn)),
                free[i].eq(~e.valid),
            ]
        victim_onehot = Signal(n)
        m.d.comb += victim_onehot.eq(Const(1, n) << self._victim)
        same_r = Signal(n)
        any_same = Signal()
        any_free = Signal()
        target = Signal(n)
        with m.If(busy & ~execute):
            m.d.sync += [same_r.eq(same), any_same.eq(same.any()), any_free.eq(free.any())]
            with m.If(same.any()):
                m.d.sync += target.eq(same & (~same + 1))
            with m.Elif(free.any()):
                m.d.sync += target.eq(free & (~free + 1))
            with m.Else():
                m.d.sync += target.eq(victim_onehot)
        same = same_r

        with m.If(execute):
            with m.Switch(c.op):
                with m.Case(MmuOp.REMAP):
                    for i, e in enumerate(tlb):
                        with m.If(target[i]):
                            m.d.sync += [
                                e.valid.eq(1), e.staged.eq(c.staged), e.ctx.eq(c.ctx),
                                e.size.eq(c.size), e.perm.eq(c.perm), e.dev.eq(c.dev),
                                e.vpn.eq(c_vpn), e.ppn.eq(c_ppn),
                            ]
                    with m.If(~any_same & ~any_free):
                        if n & (n - 1) == 0:
                            m.d.sync += self._victim.eq(self._victim + 1)
                        else:
                            m.d.sync += self._victim.eq(
                                Mux(self._victim == n - 1, 0, self._victim + 1))
                with m.Case(MmuOp.INVAL):
                    for i, e in enumerate(tlb):
                        with m.If(same[i]):
                            m.d.sync += e.valid.eq(0)
                with m.Case(MmuOp.COMMIT):
                    for i, e in enumerate(tlb):
                        with m.If(e.valid & (e.ctx == c.ctx)):
                            with m.If(e.staged):
                                m.d.sync += e.staged.eq(0)
                            with m.Else():
                                m.d.sync += e.valid.eq(0)
        return m
