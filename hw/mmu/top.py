"""The MMU: the translation stages and the command unit, composed."""
from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..isa import check_arch
from ..lib import ctx_bits
from .command import CommandUnit
from .layouts import MmuCommand, TlbEntry, _check_tag_width, translate_request, translate_response
from .lookup import CheckStage, MatchStage, SelectStage

__all__ = ["MMU"]


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
        check_arch(arch)
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
                     cmds.fields_free.eq(match.empty)]
        # registered: the host port's read multiplexer starts from flip-flops
        with m.Switch(self.tlb_index):
            for k, e in enumerate(cmds.entries):
                with m.Case(k):
                    m.d.sync += self.tlb_entry.eq(e)
            with m.Default():
                m.d.sync += self.tlb_entry.eq(0)
        return m
