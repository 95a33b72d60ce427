"""The translation pipeline's stages: match, select, check."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..isa import PERM_R, PERM_W, check_arch
from ..lib import register_copies
from .layouts import (PRIORITY_GROUP, TlbEntry, TlbMatch, TlbSelection, TranslateCause,
                      _check_tag_width, _groups, _offset_mask, _page_numbers,
                      _copies, _copy_of, translate_request, translate_response)

__all__ = ["MatchStage", "SelectStage", "CheckStage"]


def _lowest_in_groups(vector, count):
    """``vector`` with each group's bits after its lowest set one cleared, and
    a bit per group: any set."""
    first, any_ = [], []
    for g in range(0, count, PRIORITY_GROUP):
        bits = [vector[k] for k in range(g, min(g + PRIORITY_GROUP, count))]
        first += [b & ~Cat(*bits[:j]).any() if j else b for j, b in enumerate(bits)]
        any_.append(Cat(*bits).any())
    return Cat(*first), Cat(*any_)


def _pipeline_register(m, i, o, value, *, hold=0):
    """``o`` is a register stage after ``i``: it loads ``value`` (computed from
    ``i.payload``) whenever it is empty or being emptied, unless ``hold``.

    The payload loads only with a request (``i.valid``): an empty stage's payload
    is don't-care (every reader waits for ``valid``), and Verilator then computes
    ``value`` only inside that branch, not on every idle cycle. Returns the
    load enable and what ``o.valid`` loads (for copies of it)."""
    load, valid_next = Signal(), Signal()
    m.d.comb += [load.eq(~o.valid | o.ready), i.ready.eq(load & ~hold), valid_next.eq(i.valid & ~hold)]
    with m.If(load):
        m.d.sync += o.valid.eq(valid_next)
        with m.If(i.valid):
            m.d.sync += o.payload.eq(value)
    return load, valid_next


class _LookupStage(wiring.Component):
    """Common constructor of the stages that read the TLB."""

    def __init__(self, arch, tag_width, members):
        check_arch(arch)
        _check_tag_width(tag_width)
        self._arch = arch
        self._tag_width = tag_width
        super().__init__({"entries": In(TlbEntry(arch)).array(arch.tlb_entries), **members})

    arch = property(lambda self: self._arch, doc="The architectural parameters.")
    tag_width = property(lambda self: self._tag_width, doc="Request tag width.")


class MatchStage(_LookupStage):
    """Request register, then the hits, each group's lowest one kept.


    Entry ``i`` hits when it is valid, not staged, of the request's context,
    and the request's page number agrees with its ``vpn`` outside the entry's
    in-page bits; the lowest-index hit wins, resolved here within each group
    of :data:`PRIORITY_GROUP` entries and among the groups in the select
    stage (a LUT level on each side instead of a carry chain: FPGA timing).
    Two registers: a request accepted at edge *t* is on ``o`` after edge
    *t+1*, its hits computed from the entries as they are between those
    edges.

    Interface attributes
    --------------------
    i : ``In(stream.Signature(translate_request(arch, tag_width)))``
    entries : ``In(TlbEntry(arch)).array(tlb_entries)``
    hold : ``In(1)``
        Do not register a new hit vector at this edge (``o`` empties if it is
        being read): a REMAP is writing the entries.
    o : ``Out(stream.Signature(TlbMatch(arch, tag_width)))``
    empty : ``Out(copies)``
        ``o`` holds no hit vector (no select is waiting to read the entries'
        fields), one bit per run of entry groups (as the request copies):
        copies of one register, so each run's write enables start near its
        entries (FPGA timing). The extra copies read "not empty" until the
        first edge after reset (see :func:`hw.lib.register_copies`).
    """

    def __init__(self, arch, tag_width=4):
        super().__init__(arch, tag_width, {
            "i": In(stream.Signature(translate_request(arch, tag_width))),
            "hold": In(1),
            "o": Out(stream.Signature(TlbMatch(arch, tag_width))),
            "empty": Out(_copies(arch)),
        })

    def elaborate(self, platform):
        m = Module()
        arch = self._arch
        p0_bits, _ = _page_numbers(arch)
        # the request register
        r = stream.Signature(translate_request(arch, self._tag_width)).create(path=("r",))
        _pipeline_register(m, self.i, r, self.i.payload)
        # copies of the request's context and page number, one per run of
        # groups (FPGA timing: see _copy_of)
        near = Cat(r.payload.ctx, r.payload.va[p0_bits:])
        copies = [near] + register_copies(
            m, Cat(self.i.payload.ctx, self.i.payload.va[p0_bits:]),
            (~r.valid | r.ready) & self.i.valid, _copies(arch) - 1, name="req_copy")
        n_ctx = len(r.payload.ctx)
        hits = Signal(arch.tlb_entries)
        for k, e in enumerate(self.entries):
            req = copies[_copy_of(arch, k)]
            ctx, vpn = req[:n_ctx], req[n_ctx:]
            mask = Signal(len(vpn), name=f"mask{k}")
            m.d.comb += [mask.eq(_offset_mask(arch, e.size)),
                         hits[k].eq(e.valid & ~e.staged & (e.ctx == ctx)
                                    & (((vpn ^ e.vpn) & ~mask) == 0))]
        match = Signal(TlbMatch(arch, self._tag_width))
        first, group_hit = _lowest_in_groups(hits, arch.tlb_entries)
        m.d.comb += [match.req.eq(r.payload), match.first.eq(first), match.group_hit.eq(group_hit)]
        load, valid_next = _pipeline_register(m, r, self.o, match, hold=self.hold)
        valid_copies = [self.o.valid] + register_copies(m, valid_next, load, _copies(arch) - 1,
                                                        name="valid_copy")
        m.d.comb += self.empty.eq(~Cat(*valid_copies))
        return m


class SelectStage(_LookupStage):
    """The winning entry's fields, registered: the lowest group that hits,
    its lowest entry that hits (one-hot), an AND-OR multiplexer.

    Interface attributes
    --------------------
    i : ``In(stream.Signature(TlbMatch(arch, tag_width)))``
    entries : ``In(TlbEntry(arch)).array(tlb_entries)``
        Read at the edge that takes ``i``: an entry's fields may change only
        at an edge where ``i`` is empty (the match stage's ``empty``).
    o : ``Out(stream.Signature(TlbSelection(arch, tag_width)))``
    """

    def __init__(self, arch, tag_width=4):
        super().__init__(arch, tag_width, {
            "i": In(stream.Signature(TlbMatch(arch, tag_width))),
            "o": Out(stream.Signature(TlbSelection(arch, tag_width))),
        })

    def elaborate(self, platform):
        m = Module()
        n = self._arch.tlb_entries
        # the lowest group that hits; each group's fields from its lowest hit
        # (the match stage's registered bits alone), then the group's chosen:
        # the group decision meets the fields only at the last OR
        group, _ = _lowest_in_groups(self.i.payload.group_hit, _groups(self._arch))
        first = self.i.payload.first
        sel = Signal(TlbSelection(self._arch, self._tag_width))
        m.d.comb += [sel.req.eq(self.i.payload.req), sel.hit.eq(self.i.payload.group_hit.any())]
        for name in ("perm", "dev", "size", "ppn"):
            per_group = []
            for g in range(_groups(self._arch)):
                ks = range(g * PRIORITY_GROUP, min((g + 1) * PRIORITY_GROUP, n))
                value = Signal.like(getattr(sel, name), name=f"{name}_group{g}")
                m.d.comb += value.eq(_or_all(Mux(first[k], getattr(self.entries[k], name), 0)
                                             for k in ks))
                per_group.append(Mux(group[g], value, 0))
            m.d.comb += getattr(sel, name).eq(_or_all(per_group))
        _pipeline_register(m, self.i, self.o, sel)
        return m


def _or_all(values):
    out = 0
    for v in values:
        out = out | v
    return out


class CheckStage(wiring.Component):
    """The response, combinationally: physical address and fault cause.

    Causes in the order NOT_MAPPED, NO_READ / NO_WRITE, REMOTE_READ (reads
    through an entry of another device than ``local_dev``), OUT_OF_RANGE
    (physical page at or beyond ``mem_bytes``).

    Interface attributes
    --------------------
    i : ``In(stream.Signature(TlbSelection(arch, tag_width)))``
    o : ``Out(stream.Signature(translate_response(arch, tag_width)))``
    """

    def __init__(self, arch, tag_width=4, *, local_dev=0):
        check_arch(arch)
        _check_tag_width(tag_width)
        self._arch = arch
        self._tag_width = tag_width
        self._local_dev = local_dev
        super().__init__({
            "i": In(stream.Signature(TlbSelection(arch, tag_width))),
            "o": Out(stream.Signature(translate_response(arch, tag_width))),
        })

    def elaborate(self, platform):
        m = Module()
        arch = self._arch
        p0_bits, pn = _page_numbers(arch)
        mem_pages = arch.mem_bytes >> p0_bits
        s, req = self.i.payload, self.i.payload.req
        mask = Signal(pn)
        pa_pn = Signal(pn)
        m.d.comb += [mask.eq(_offset_mask(arch, s.size)),
                     pa_pn.eq((s.ppn & ~mask) | (req.va[p0_bits:] & mask))]
        readable, writable = s.perm[exact_log2(PERM_R)], s.perm[exact_log2(PERM_W)]
        cause = self.o.payload.cause
        with m.If(~s.hit):
            m.d.comb += cause.eq(TranslateCause.NOT_MAPPED)
        with m.Elif(~req.write & ~readable):
            m.d.comb += cause.eq(TranslateCause.NO_READ)
        with m.Elif(req.write & ~writable):
            m.d.comb += cause.eq(TranslateCause.NO_WRITE)
        with m.Elif(~req.write & (s.dev != self._local_dev)):
            m.d.comb += cause.eq(TranslateCause.REMOTE_READ)
        if mem_pages < (1 << pn):
            with m.Elif(pa_pn >= mem_pages):
                m.d.comb += cause.eq(TranslateCause.OUT_OF_RANGE)
        m.d.comb += [
            self.o.valid.eq(self.i.valid), self.i.ready.eq(self.o.ready),
            self.o.payload.pa.eq(Cat(req.va[:p0_bits], pa_pn)),
            self.o.payload.dev.eq(s.dev),
        ]
        if self._tag_width:
            m.d.comb += self.o.payload.tag.eq(req.tag)
        return m
