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

The block diagram is its composition::

    req --> MatchStage --> SelectStage --> CheckStage --> rsp
            (request reg,   (lowest group,   (permissions,
             hits, each      the winner's     range, pa)
             group's first)  fields)
                 ^               ^
                 +--- entries ---+---- CommandUnit <-- cmd      (idle)
                 hold <------------- fields_write / fields_free

Translation is a three-register pipeline (request, hits, selected
entry) that accepts one request per cycle and never inserts bubbles on hits
or misses: a request accepted at edge *t* has its hits computed from the TLB
and registered (each group's lowest) at edge *t+1*, the winning entry's fields registered
at edge *t+2*, and is answered (``rsp.valid``) in the cycle after edge *t+2*:
**three cycles from request to response**, hit or fault alike (two before
the match and the priority were split for timing). The pipeline stalls as a
whole while ``rsp`` is not ready.

Each translation sees either the state before or after any command, never a
mix: the hit vector reads the entries' ``valid``, ``staged``, ``ctx``,
``size`` and ``vpn`` at one edge, the fields (``perm``, ``dev``, ``ppn``,
``size``) are read at a later edge. ``INVAL`` and ``COMMIT`` change only
``valid`` and ``staged``, which the select stage does not read, so a
translation they overtake between the two edges sees the state before them.
``REMAP`` also writes fields, so it executes only at an edge where no hit
vector is waiting for its fields (``fields_free``: the select stage's input
is empty), and while it waits the match stage registers no new hit vector
(``hold``): under a continuous translation stream a REMAP costs two bubbles,
INVAL and COMMIT none. (The coprocessor sends a REMAP only while every DMA
channel is done, so in a device a REMAP costs nothing.)

Commands take effect three edges after they are accepted, and the next one
is accepted at the edge where the previous one takes effect: one command
every three cycles (:class:`CommandUnit`).
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, exact_log2

from .isa import ArchParams, Cause, Op, PERM_R, PERM_W, field_of
from .lib import ctx_bits, dev_bits, page_offset_mask

__all__ = ["TranslateCause", "MmuOp", "translate_request", "translate_response",
           "MmuCommand", "TlbEntry", "TlbMatch", "TlbSelection", "MatchStage",
           "SelectStage", "CheckStage", "CommandUnit", "MMU"]


#: The translation causes, as :class:`hw.isa.Cause` values.
_TRANSLATE_CAUSES = (Cause.NONE, Cause.NOT_MAPPED, Cause.NO_READ, Cause.NO_WRITE,
                     Cause.REMOTE_READ, Cause.OUT_OF_RANGE)
#: The ISA fields an MMU command and a TLB entry carry, with their widths.
SIZE_BITS = field_of(Op.REMAP, "size").width
PERM_BITS = field_of(Op.REMAP, "perm").width
STAGED_BITS = field_of(Op.REMAP, "staged").width


class TranslateCause(enum.Enum, shape=bits_for(max(_TRANSLATE_CAUSES))):
    """Translation fault causes; the values are those of :class:`hw.isa.Cause`."""
    NONE = int(Cause.NONE)
    NOT_MAPPED = int(Cause.NOT_MAPPED)
    NO_READ = int(Cause.NO_READ)
    NO_WRITE = int(Cause.NO_WRITE)
    REMOTE_READ = int(Cause.REMOTE_READ)
    OUT_OF_RANGE = int(Cause.OUT_OF_RANGE)


class MmuOp(enum.Enum, shape=bits_for(max(Op.REMAP, Op.INVAL, Op.COMMIT))):
    """MMU command opcodes; the values are the ISA opcodes (:class:`hw.isa.Op`)."""
    REMAP = int(Op.REMAP)
    INVAL = int(Op.INVAL)
    COMMIT = int(Op.COMMIT)


def translate_request(arch, tag_width):
    """Layout of a translation request: ``ctx``, ``va``, ``write`` (0: read
    access), and ``tag`` when ``tag_width`` is not 0."""
    fields = {"ctx": ctx_bits(arch), "va": arch.addr_bits, "write": 1}
    if tag_width:
        fields["tag"] = tag_width
    return data.StructLayout(fields)


def translate_response(arch, tag_width):
    """Layout of a translation response: ``pa``, ``dev``, ``cause``, ``tag``.

    ``pa`` and ``dev`` are meaningful only when ``cause`` is ``NONE``; there
    is no ``tag`` when ``tag_width`` is 0."""
    fields = {"pa": arch.addr_bits, "dev": dev_bits(arch), "cause": TranslateCause}
    if tag_width:
        fields["tag"] = tag_width
    return data.StructLayout(fields)


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
            "size": SIZE_BITS,
            "perm": PERM_BITS,
            "staged": STAGED_BITS,
            "dev": dev_bits(arch),
            "va": arch.addr_bits,
            "pa": arch.addr_bits,
        })


class TlbEntry(data.StructLayout):
    """One TLB entry. ``vpn``/``ppn`` are in units of the smallest page."""
    def __init__(self, arch):
        pn = arch.addr_bits - exact_log2(arch.page_sizes[0])
        super().__init__({
            "valid": 1,
            "staged": STAGED_BITS,
            "ctx": ctx_bits(arch),
            "size": SIZE_BITS,
            "perm": PERM_BITS,
            "dev": dev_bits(arch),
            "vpn": pn,
            "ppn": pn,
        })


def _page_numbers(arch):
    """(in-page bits of the smallest page, width of a page number)."""
    p0_bits = exact_log2(arch.page_sizes[0])
    return p0_bits, arch.addr_bits - p0_bits


def _offset_mask(arch, size):
    """Bits of a page number (smallest-page units) that lie inside a page of ``size``."""
    _, pn = _page_numbers(arch)
    return page_offset_mask(arch.page_sizes, size, unit=arch.page_sizes[0], width=pn)


def _check_arch(arch):
    if not isinstance(arch, ArchParams):
        raise TypeError(f"arch must be an ArchParams, not {arch!r}")


def _check_tag_width(tag_width):
    if not isinstance(tag_width, int) or isinstance(tag_width, bool) or not 0 <= tag_width <= 16:
        raise ValueError(f"Tag width must be an integer in 0..16, not {tag_width!r}")


def TlbMatch(arch, tag_width):
    """Layout between the match and select stages: the request and its hits
    by group of :data:`PRIORITY_GROUP` entries: ``first`` has bit ``i`` set
    when entry ``i`` is the lowest-index entry of its group that hits, and
    ``group_hit`` bit ``g`` when some entry of group ``g`` hits."""
    return data.StructLayout({
        "req": translate_request(arch, tag_width),
        "first": arch.tlb_entries,
        "group_hit": _groups(arch),
    })


PRIORITY_GROUP = 4
"""Entries whose priority the match stage resolves among themselves; the
select stage resolves it among the groups (a LUT level each, no carry chain
after the comparators)."""


def _groups(arch):
    return -(-arch.tlb_entries // PRIORITY_GROUP)


def _reads_copy(arch, k):
    """Whether entry ``k``'s comparators read the second (inverted) copy of
    the request or command: the upper half of the groups does, so no one
    register spans all the comparators (FPGA timing)."""
    upper = _groups(arch) // 2 * PRIORITY_GROUP
    return 0 < upper <= k


def _lowest_in_groups(vector, count):
    """``vector`` with each group's bits after its lowest set one cleared, and
    a bit per group: any set."""
    first, any_ = [], []
    for g in range(0, count, PRIORITY_GROUP):
        bits = [vector[k] for k in range(g, min(g + PRIORITY_GROUP, count))]
        first += [b & ~Cat(*bits[:j]).any() if j else b for j, b in enumerate(bits)]
        any_.append(Cat(*bits).any())
    return Cat(*first), Cat(*any_)


def TlbSelection(arch, tag_width):
    """Layout between the select and check stages: the request, whether some
    entry hit, and the lowest-index hit entry's ``perm``, ``dev``, ``size``, ``ppn``."""
    _, pn = _page_numbers(arch)
    return data.StructLayout({
        "req": translate_request(arch, tag_width),
        "hit": 1,
        "perm": PERM_BITS,
        "dev": dev_bits(arch),
        "size": SIZE_BITS,
        "ppn": pn,
    })


def _pipeline_register(m, i, o, value, *, hold=0):
    """``o`` is a register stage after ``i``: it loads ``value`` (computed from
    ``i.payload``) whenever it is empty or being emptied, unless ``hold``.

    The payload loads only with a request (``i.valid``): an empty stage's payload
    is don't-care (every reader waits for ``valid``), and Verilator then computes
    ``value`` only inside that branch, not on every idle cycle."""
    load = Signal()
    m.d.comb += [load.eq(~o.valid | o.ready), i.ready.eq(load & ~hold)]
    with m.If(load):
        m.d.sync += o.valid.eq(i.valid & ~hold)
        with m.If(i.valid):
            m.d.sync += o.payload.eq(value)


class _LookupStage(wiring.Component):
    """Common constructor of the stages that read the TLB."""

    def __init__(self, arch, tag_width, members):
        _check_arch(arch)
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
    """

    def __init__(self, arch, tag_width=4):
        super().__init__(arch, tag_width, {
            "i": In(stream.Signature(translate_request(arch, tag_width))),
            "hold": In(1),
            "o": Out(stream.Signature(TlbMatch(arch, tag_width))),
        })

    def elaborate(self, platform):
        m = Module()
        arch = self._arch
        p0_bits, _ = _page_numbers(arch)
        # the request register
        r = stream.Signature(translate_request(arch, self._tag_width)).create(path=("r",))
        _pipeline_register(m, self.i, r, self.i.payload)
        # a second copy of the request's context and page number, stored
        # inverted (so synthesis keeps both), for the upper half of the groups:
        # one register no longer spans all the comparators (FPGA timing)
        near = Cat(r.payload.ctx, r.payload.va[p0_bits:])
        upper_req_n = Signal(len(near), name="upper_req_n")
        with m.If((~r.valid | r.ready) & self.i.valid):
            m.d.sync += upper_req_n.eq(~Cat(self.i.payload.ctx, self.i.payload.va[p0_bits:]))
        upper_req = ~upper_req_n
        n_ctx = len(r.payload.ctx)
        hits = Signal(arch.tlb_entries)
        for k, e in enumerate(self.entries):
            req = upper_req if _reads_copy(arch, k) else near
            ctx, vpn = req[:n_ctx], req[n_ctx:]
            mask = Signal(len(vpn), name=f"mask{k}")
            m.d.comb += [mask.eq(_offset_mask(arch, e.size)),
                         hits[k].eq(e.valid & ~e.staged & (e.ctx == ctx)
                                    & (((vpn ^ e.vpn) & ~mask) == 0))]
        match = Signal(TlbMatch(arch, self._tag_width))
        first, group_hit = _lowest_in_groups(hits, arch.tlb_entries)
        m.d.comb += [match.req.eq(r.payload), match.first.eq(first), match.group_hit.eq(group_hit)]
        _pipeline_register(m, r, self.o, match, hold=self.hold)
        return m


class SelectStage(_LookupStage):
    """The winning entry's fields, registered: the lowest group that hits,
    its lowest entry that hits (one-hot), an AND-OR multiplexer.

    Interface attributes
    --------------------
    i : ``In(stream.Signature(TlbMatch(arch, tag_width)))``
    entries : ``In(TlbEntry(arch)).array(tlb_entries)``
        Read at the edge that takes ``i`` (see ``fields_free``).
    o : ``Out(stream.Signature(TlbSelection(arch, tag_width)))``
    fields_free : ``Out(1)``
        No hit vector waits for the entries' fields: ``i`` is empty. An
        entry's fields may change at this edge.
    """

    def __init__(self, arch, tag_width=4):
        super().__init__(arch, tag_width, {
            "i": In(stream.Signature(TlbMatch(arch, tag_width))),
            "o": Out(stream.Signature(TlbSelection(arch, tag_width))),
            "fields_free": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self._arch.tlb_entries
        # the lowest group that hits, then its lowest entry that hits
        group, _ = _lowest_in_groups(self.i.payload.group_hit, _groups(self._arch))
        first = Signal(n)
        m.d.comb += first.eq(self.i.payload.first
                             & Cat(*[group[k // PRIORITY_GROUP] for k in range(n)]))
        sel = Signal(TlbSelection(self._arch, self._tag_width))
        m.d.comb += [sel.req.eq(self.i.payload.req), sel.hit.eq(self.i.payload.group_hit.any())]
        fields = ("perm", "dev", "size", "ppn")
        for name in fields:
            m.d.comb += getattr(sel, name).eq(
                _or_all(Mux(first[k], getattr(e, name), 0) for k, e in enumerate(self.entries)))
        _pipeline_register(m, self.i, self.o, sel)
        # from the valid register alone: the response's ready (the DMA's) must
        # not reach the command unit's ready, and from there the coprocessor
        m.d.comb += self.fields_free.eq(~self.i.valid)
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
        _check_arch(arch)
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


class CommandUnit(wiring.Component):
    """The TLB registers and the REMAP / INVAL / COMMIT engine.

    A command is accepted (``ACCEPT``, edge *t*), matched against the TLB
    (``PLACE``: the same-key, free and same-context vectors and the
    command's decoded op and page numbers are registered at edge *t+1*), a
    REMAP's target is chosen from those vectors (``CHOOSE``, registered at
    edge *t+2*) and the command executed (``EXECUTE``: the entries written
    at edge *t+3*, later for a REMAP while ``fields_free`` is low), so the
    entries' write enables and data start from flip-flops. ``cmd.ready`` is
    high in ``ACCEPT`` and at the executing edge, so back-to-back commands
    take three cycles each.

    Interface attributes
    --------------------
    cmd : ``In(stream.Signature(MmuCommand(arch)))``
    idle : ``Out(1)``
        No command is pending (every accepted command has taken effect).
    entries : ``Out(TlbEntry(arch)).array(tlb_entries)``
        The TLB registers.
    victim : ``Out(range(tlb_entries))``
        The round-robin victim pointer.
    fields_write : ``Out(1)``
        A REMAP is waiting to write an entry: the lookup must not register a
        new hit vector.
    fields_free : ``In(1)``
        The lookup reads no fields after this edge: a REMAP may execute.
    commit_ctx : ``Out(ctx bits)``, commit_place : ``Out(1)``
        The command register's context, and a COMMIT is in ``PLACE``: the
        entries are then those it acts on (every earlier command has taken
        effect, and it takes effect at the third edge from here).
    """

    def __init__(self, arch):
        _check_arch(arch)
        self._arch = arch
        n = arch.tlb_entries
        super().__init__({
            "cmd": In(stream.Signature(MmuCommand(arch))),
            "idle": Out(1),
            "entries": Out(TlbEntry(arch)).array(n),
            "victim": Out(range(max(2, n))),
            "fields_write": Out(1),
            "fields_free": In(1),
            "commit_ctx": Out(ctx_bits(arch)),
            "commit_place": Out(1),
        })

    arch = property(lambda self: self._arch, doc="The architectural parameters.")

    def _place(self, m, near, upper_half):
        """At the PLACE edge, register the same-key entries, the free ones and
        the entries of the command's context (a COMMIT's). ``near`` and
        ``upper_half`` are ``(command, vpn)`` copies: the upper half of the
        groups of entries compares with ``upper_half`` (as the match stage does)."""
        n = self._arch.tlb_entries
        same, free, owned = Signal(n), Signal(n), Signal(n)
        for k, e in enumerate(self.entries):
            c, vpn = upper_half if _reads_copy(self._arch, k) else near
            m.d.sync += [
                same[k].eq(Cat(e.valid, e.ctx, e.staged, e.size, e.vpn)
                           == Cat(Const(1, 1), c.ctx, c.staged, c.size, vpn)),
                free[k].eq(~e.valid),
                owned[k].eq(e.valid & (e.ctx == c.ctx)),
            ]
        return same, free, owned

    def _choose(self, m, same, free):
        """At the CHOOSE edge, register a REMAP's target (one-hot): the
        same-key entry, else the lowest free one, else the victim; and whether
        it took an entry without evicting one."""
        n = self._arch.tlb_entries
        target, placed = Signal(n), Signal()
        m.d.sync += placed.eq(same.any() | free.any())
        with m.If(same.any()):
            m.d.sync += target.eq(same & (~same + 1))
        with m.Elif(free.any()):
            m.d.sync += target.eq(free & (~free + 1))
        with m.Else():
            m.d.sync += target.eq(Const(1, n) << self.victim)
        return target, placed

    def elaborate(self, platform):
        m = Module()
        arch = self._arch
        p0_bits, pn = _page_numbers(arch)
        c = Signal(MmuCommand(arch))
        mask, vpn, ppn = Signal(pn), Signal(pn), Signal(pn)
        m.d.comb += [mask.eq(_offset_mask(arch, c.size)),
                     vpn.eq(c.va[p0_bits:] & ~mask), ppn.eq(c.pa[p0_bits:] & ~mask)]
        # a second copy of the command, stored inverted (so synthesis keeps
        # both), for the upper half of PLACE's comparators (FPGA timing)
        upper_cmd_n = Signal(len(Value.cast(c)))
        upper_cmd = Signal(MmuCommand(arch))
        upper_mask, upper_vpn = Signal(pn), Signal(pn)
        m.d.comb += [Value.cast(upper_cmd).eq(~upper_cmd_n),
                     upper_mask.eq(_offset_mask(arch, upper_cmd.size)),
                     upper_vpn.eq(upper_cmd.va[p0_bits:] & ~upper_mask)]
        # what EXECUTE acts on, all registered at PLACE or CHOOSE: the entries'
        # write enables and data then start from flip-flops
        ops = Signal(data.StructLayout({"remap": 1, "inval": 1, "commit": 1}))
        key = Signal(data.StructLayout({"vpn": pn, "ppn": pn}))
        m.d.comb += self.commit_ctx.eq(c.ctx)
        with m.FSM(name="command"):
            with m.State("ACCEPT"):
                m.d.comb += [self.cmd.ready.eq(1), self.idle.eq(1)]
                with m.If(self.cmd.valid):
                    m.d.sync += [c.eq(self.cmd.payload), upper_cmd_n.eq(~Value.cast(self.cmd.payload))]
                    m.next = "PLACE"
            with m.State("PLACE"):
                m.d.comb += self.commit_place.eq(c.op == MmuOp.COMMIT)
                same, free, owned = self._place(m, (c, vpn), (upper_cmd, upper_vpn))
                m.d.sync += [ops.remap.eq(c.op == MmuOp.REMAP), ops.inval.eq(c.op == MmuOp.INVAL),
                             ops.commit.eq(c.op == MmuOp.COMMIT), key.vpn.eq(vpn), key.ppn.eq(ppn)]
                m.next = "CHOOSE"
            with m.State("CHOOSE"):
                target, placed = self._choose(m, same, free)
                m.next = "EXECUTE"
            with m.State("EXECUTE"):
                m.d.comb += self.fields_write.eq(ops.remap)
                with m.If(~ops.remap | self.fields_free):
                    self._execute(m, c, key, ops, (same, owned, target, placed))
                    # the next command may be accepted at the same edge: its
                    # PLACE sees the entries this one leaves
                    m.d.comb += self.cmd.ready.eq(1)
                    with m.If(self.cmd.valid):
                        m.d.sync += [c.eq(self.cmd.payload),
                                     upper_cmd_n.eq(~Value.cast(self.cmd.payload))]
                        m.next = "PLACE"
                    with m.Else():
                        m.next = "ACCEPT"
        return m

    def _execute(self, m, c, key, ops, vectors):
        """At the EXECUTE edge. Only this unit writes the entries, so the
        vectors registered at PLACE and CHOOSE still describe them."""
        n = self._arch.tlb_entries
        same, owned, target, placed = vectors
        with m.If(ops.remap):
            for k, e in enumerate(self.entries):
                with m.If(target[k]):
                    m.d.sync += [
                        e.valid.eq(1), e.staged.eq(c.staged), e.ctx.eq(c.ctx),
                        e.size.eq(c.size), e.perm.eq(c.perm), e.dev.eq(c.dev),
                        e.vpn.eq(key.vpn), e.ppn.eq(key.ppn),
                    ]
            with m.If(~placed):
                m.d.sync += self.victim.eq(Mux(self.victim == n - 1, 0, self.victim + 1))
        with m.If(ops.inval):
            for k, e in enumerate(self.entries):
                with m.If(same[k]):
                    m.d.sync += e.valid.eq(0)
        with m.If(ops.commit):
            for k, e in enumerate(self.entries):
                with m.If(owned[k]):
                    m.d.sync += [e.staged.eq(0), e.valid.eq(e.staged)]


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

    Interface attributes
    --------------------
    req : ``In(stream.Signature(translate_request(arch, tag_width)))``
        Translation requests: context, virtual address, access (``write``), tag.
    rsp : ``Out(stream.Signature(translate_response(arch, tag_width)))``
        One response per request, in order, three cycles after the request
        (more under back-pressure): physical address, device, fault cause
        (:class:`TranslateCause`; checked in the order NOT_MAPPED, NO_READ /
        NO_WRITE, REMOTE_READ (reads only), OUT_OF_RANGE), tag.
    cmd : ``In(stream.Signature(MmuCommand(arch)))``
        REMAP / INVAL / COMMIT. A command accepted at edge *t* takes effect
        at edge *t+3* (a REMAP later if a hit vector waits for its fields
        then); ``cmd.ready`` is low at edges *t+1* and *t+2* and high again
        at the edge where it takes effect (one command per three cycles).
    idle : ``Out(1)``
        No command is pending (every accepted command has taken effect).
    commit_ctx : ``Out(ctx bits)``, commit_place : ``Out(1)``
        A COMMIT accepted at edge *t* is being placed (between edges *t+1*
        and *t+2*) with this context: the entries are then the TLB it acts
        on (the device sums its zero-copy bytes then).
    tlb_index : ``In(range(tlb_entries))``
        Entry to show on ``tlb_entry`` (the host port reads the TLB back this way).
    tlb_entry : ``Out(TlbEntry(arch))``
        The entry at ``tlb_index``, registered (as both were at the last edge).
    """

    def __init__(self, arch, *, local_dev=0, tag_width=4):
        _check_arch(arch)
        if not isinstance(local_dev, int) or not 0 <= local_dev < arch.devices:
            raise ValueError(f"Local device must be an integer in 0..{arch.devices - 1}, "
                             f"not {local_dev!r}")
        _check_tag_width(tag_width)
        self._arch = arch
        self._local_dev = local_dev
        self._tag_width = tag_width
        self._commands = None       # made on first use: entries, victim or elaborate
        super().__init__({
            "req": In(stream.Signature(translate_request(arch, tag_width))),
            "rsp": Out(stream.Signature(translate_response(arch, tag_width))),
            "cmd": In(stream.Signature(MmuCommand(arch))),
            "idle": Out(1),
            "commit_ctx": Out(ctx_bits(arch)),
            "commit_place": Out(1),
            "tlb_index": In(range(max(2, arch.tlb_entries))),
            "tlb_entry": Out(TlbEntry(arch)),
        })

    arch = property(lambda self: self._arch, doc="The architectural parameters.")
    local_dev = property(lambda self: self._local_dev, doc="This device's index.")
    tag_width = property(lambda self: self._tag_width, doc="Request tag width.")

    @property
    def commands(self):
        """The :class:`CommandUnit` holding the TLB registers."""
        if self._commands is None:
            self._commands = CommandUnit(self._arch)
        return self._commands

    @property
    def entries(self):
        """The TLB entry registers (:class:`TlbEntry` views), for inspection in
        simulation and for blocks that read the TLB (the device's commit bytes)."""
        return tuple(self.commands.entries)

    @property
    def victim(self):
        """The round-robin victim pointer register."""
        return self.commands.victim

    def elaborate(self, platform):
        m = Module()
        arch, tw = self._arch, self._tag_width
        m.submodules.commands = cmds = self.commands
        m.submodules.match = match = MatchStage(arch, tw)
        m.submodules.select = select = SelectStage(arch, tw)
        m.submodules.check = check = CheckStage(arch, tw, local_dev=self._local_dev)
        wiring.connect(m, wiring.flipped(self.cmd), cmds.cmd)
        wiring.connect(m, wiring.flipped(self.req), match.i)
        wiring.connect(m, match.o, select.i)
        wiring.connect(m, select.o, check.i)
        wiring.connect(m, check.o, wiring.flipped(self.rsp))
        for k, e in enumerate(cmds.entries):
            m.d.comb += [match.entries[k].eq(e), select.entries[k].eq(e)]
        m.d.comb += [self.idle.eq(cmds.idle), match.hold.eq(cmds.fields_write),
                     self.commit_ctx.eq(cmds.commit_ctx), self.commit_place.eq(cmds.commit_place),
                     cmds.fields_free.eq(select.fields_free)]
        # registered: the host port's read multiplexer starts from flip-flops
        with m.Switch(self.tlb_index):
            for k, e in enumerate(cmds.entries):
                with m.Case(k):
                    m.d.sync += self.tlb_entry.eq(e)
            with m.Default():
                m.d.sync += self.tlb_entry.eq(0)
        return m
