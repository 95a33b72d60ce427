"""The TLB registers and the REMAP / INVAL / COMMIT engine."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..isa import check_arch
from ..lib import ctx_bits, register_copies
from .layouts import (MmuCommand, MmuOp, TlbEntry, _copies, _copy_of, _offset_mask,
                      _page_numbers)

__all__ = ["CommandUnit"]


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
    fields_free : ``In(copies)``
        The lookup reads no fields after this edge: a REMAP may execute. One
        bit per run of entry groups (``_copy_of``), all equal: copies of one
        register (the match stage's ``empty``), so each run's write enables
        start near its entries (FPGA timing).
    commit_ctx : ``Out(ctx bits)``, commit_place : ``Out(1)``
        The command register's context, and a COMMIT is in ``PLACE``: the
        entries are then those it acts on (every earlier command has taken
        effect, and it takes effect at the third edge from here).
    """

    def __init__(self, arch):
        check_arch(arch)
        self._arch = arch
        n = arch.tlb_entries
        super().__init__({
            "cmd": In(stream.Signature(MmuCommand(arch))),
            "idle": Out(1),
            "entries": Out(TlbEntry(arch)).array(n),
            "victim": Out(range(max(2, n))),
            "fields_write": Out(1),
            "fields_free": In(_copies(arch)),
            "commit_ctx": Out(ctx_bits(arch)),
            "commit_place": Out(1),
        })

    arch = property(lambda self: self._arch, doc="The architectural parameters.")

    def _place(self, m, keys):
        """At the PLACE edge, register the same-key entries, the free ones and
        the entries of the command's context (a COMMIT's). ``keys`` are
        copies of the command's ``(ctx, staged, size, vpn)``, one per run of
        groups of entries (as the match stage's request copies)."""
        n = self._arch.tlb_entries
        same, free, owned = Signal(n), Signal(n), Signal(n)
        for k, e in enumerate(self.entries):
            ctx, staged, size, vpn = keys[_copy_of(self._arch, k)]
            m.d.sync += [
                same[k].eq(Cat(e.valid, e.ctx, e.staged, e.size, e.vpn)
                           == Cat(Const(1, 1), ctx, staged, size, vpn)),
                free[k].eq(~e.valid),
                owned[k].eq(e.valid & (e.ctx == ctx)),
            ]
        return same, free, owned

    def _key_copies(self, m, c, vpn, load):
        """The command's key as PLACE compares it: from ``c`` itself, then
        from each extra register copy of its fields (FPGA timing)."""
        arch = self._arch
        p0_bits, _ = _page_numbers(arch)
        fields = lambda cmd: Cat(cmd.ctx, cmd.staged, cmd.size, cmd.va[p0_bits:])
        keys = [(c.ctx, c.staged, c.size, vpn)]
        for copy in register_copies(m, fields(self.cmd.payload), load, _copies(arch) - 1,
                                    name="cmd_copy"):
            ctx, rest = copy[:len(c.ctx)], copy[len(c.ctx):]
            staged, rest = rest[:len(c.staged)], rest[len(c.staged):]
            size, va_pn = rest[:len(c.size)], rest[len(c.size):]
            mask = Signal(len(va_pn))       # the mask is narrower: widen it before inverting
            m.d.comb += mask.eq(_offset_mask(arch, size))
            keys.append((ctx, staged, size, va_pn & ~mask))
        return keys

    def _choose(self, m, same, free):
        """A REMAP's target (one-hot), for the CHOOSE edge to register: the
        same-key entry, else the lowest free one, else the victim; and,
        registered there, whether it took an entry without evicting one."""
        n = self._arch.tlb_entries
        choice, placed = Signal(n), Signal()
        m.d.comb += choice.eq(Mux(same.any(), same & (~same + 1),
                                  Mux(free.any(), free & (~free + 1), Const(1, n) << self.victim)))
        m.d.sync += placed.eq(same.any() | free.any())
        return choice, placed

    def elaborate(self, platform):
        m = Module()
        arch = self._arch
        p0_bits, pn = _page_numbers(arch)
        c = Signal(MmuCommand(arch))
        mask, vpn, ppn = Signal(pn), Signal(pn), Signal(pn)
        m.d.comb += [mask.eq(_offset_mask(arch, c.size)),
                     vpn.eq(c.va[p0_bits:] & ~mask), ppn.eq(c.pa[p0_bits:] & ~mask)]
        # the command register and its copies load at every edge where a
        # command may be taken (ACCEPT, or EXECUTE's end), taken or not: only a
        # taken one is read (in PLACE and after), so their enables wait for
        # the state and ``fields_free``, not for ``cmd.valid`` from the
        # coprocessor (FPGA timing: the enable spans the command's ~100 bits)
        keys = self._key_copies(m, c, vpn, self.cmd.ready)
        with m.If(self.cmd.ready):
            m.d.sync += c.eq(self.cmd.payload)
        # what EXECUTE acts on, all registered at PLACE or CHOOSE: the entries'
        # write enables and data then start from flip-flops
        ops = Signal(data.StructLayout({"remap": 1, "inval": 1, "commit": 1}))
        key = Signal(data.StructLayout({"vpn": pn, "ppn": pn}))
        # armed[k]: in EXECUTE, a REMAP whose target is entry k (set entering
        # EXECUTE, cleared leaving it), so each entry's wide write enable is
        # one LUT of two flip-flops, this and its run's copy of fields_free,
        # not the state decode and the lookup's valid across the chip
        armed = Signal(arch.tlb_entries)
        free_now = self.fields_free[0]
        m.d.comb += self.commit_ctx.eq(c.ctx)
        with m.FSM(name="command"):
            with m.State("ACCEPT"):
                m.d.comb += [self.cmd.ready.eq(1), self.idle.eq(1)]
                with m.If(self.cmd.valid):
                    m.next = "PLACE"
            with m.State("PLACE"):
                m.d.comb += self.commit_place.eq(c.op == MmuOp.COMMIT)
                same, free, owned = self._place(m, keys)
                m.d.sync += [ops.remap.eq(c.op == MmuOp.REMAP), ops.inval.eq(c.op == MmuOp.INVAL),
                             ops.commit.eq(c.op == MmuOp.COMMIT), key.vpn.eq(vpn), key.ppn.eq(ppn)]
                m.next = "CHOOSE"
            with m.State("CHOOSE"):
                choice, placed = self._choose(m, same, free)
                m.d.sync += armed.eq(Mux(ops.remap, choice, 0))
                m.next = "EXECUTE"
            with m.State("EXECUTE"):
                m.d.comb += self.fields_write.eq(ops.remap)
                with m.If(~ops.remap | free_now):
                    m.d.sync += armed.eq(0)
                    self._execute(m, ops, (same, owned, placed))
                    # the next command may be accepted at the same edge: its
                    # PLACE sees the entries this one leaves
                    m.d.comb += self.cmd.ready.eq(1)
                    with m.If(self.cmd.valid):
                        m.next = "PLACE"
                    with m.Else():
                        m.next = "ACCEPT"
        self._remap_writes(m, c, key, armed)
        return m

    def _remap_writes(self, m, c, key, armed):
        """A REMAP writes its target entry at the EXECUTE edge where
        ``fields_free`` is high; outside the state machine, so the enable is
        ``armed`` and the run's ``fields_free`` alone."""
        for k, e in enumerate(self.entries):
            with m.If(armed[k] & self.fields_free[_copy_of(self._arch, k)]):
                m.d.sync += [
                    e.valid.eq(1), e.staged.eq(c.staged), e.ctx.eq(c.ctx),
                    e.size.eq(c.size), e.perm.eq(c.perm), e.dev.eq(c.dev),
                    e.vpn.eq(key.vpn), e.ppn.eq(key.ppn),
                ]

    def _execute(self, m, ops, vectors):
        """At the EXECUTE edge (a REMAP's entry write is
        :meth:`_remap_writes`). Only this unit writes the entries, so the
        vectors registered at PLACE and CHOOSE still describe them."""
        n = self._arch.tlb_entries
        same, owned, placed = vectors
        with m.If(ops.remap):
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
