"""Decode: the illegal-instruction checks, in ``model/golden.py``'s order."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..isa import FORMATS, OP_SINCE, SUPPORTED_VERSIONS, Cause, Op, check_arch, field_of
from ..lib import RegisterSlice
from .common import UNIT_OPS, CauseCode, Decoded, InstructionWord
from .predecode import FIELD_CHECKS, Fetched, Predecoded

__all__ = ["Decoder", "PcChecks", "CauseSelect", "Checked"]

_LIMIT_CAUSE = {"channels": Cause.BAD_CHANNEL, "contexts": Cause.BAD_CONTEXT,
                "devices": Cause.BAD_DEVICE, "semaphores": Cause.BAD_SEMAPHORE}
_RULE_CAUSE = {"address": Cause.ADDRESS_WIDTH, "aligned": Cause.MISALIGNED,
               "element": Cause.MISALIGNED, **_LIMIT_CAUSE}


class Checked(data.StructLayout):
    """A fetched instruction (its word's checks predecoded, ``pre``) with what
    the second stage decides with, worked out here so that it starts from
    flip-flops: ``clean.<op>`` (the opcode is ``op`` and none of its
    predecoded checks failed), ``first`` (``pc`` is 0) and ``overflow``
    (``pc`` is past the instruction memory)."""
    def __init__(self, imem_words):
        per_op = data.StructLayout({op.name.lower(): 1 for op in FORMATS})
        super().__init__({"pc": range(imem_words + 1), "word": InstructionWord(),
                          "pre": Predecoded(), "clean": per_op, "first": 1, "overflow": 1})


class PcChecks(wiring.Component):
    """First decode stage (combinational): the checks of the instruction's
    address, and each opcode's "none failed" of the word's predecoded checks
    (they were made before it was stored, :mod:`.predecode`).

    Interface attributes
    --------------------
    i : ``In(stream.Signature(Fetched(imem_words)))``
    o : ``Out(stream.Signature(Checked(imem_words)))``
    """

    def __init__(self, arch):
        check_arch(arch)
        self._arch = arch
        super().__init__({
            "i": In(stream.Signature(Fetched(arch.imem_words))),
            "o": Out(stream.Signature(Checked(arch.imem_words))),
        })

    def elaborate(self, platform):
        m = Module()
        i, o = self.i.p, self.o.p
        m.d.comb += [self.o.valid.eq(self.i.valid), self.i.ready.eq(self.o.ready),
                     o.pc.eq(i.pc), o.word.eq(i.word), o.pre.eq(i.pre),
                     o.first.eq(i.pc == 0), o.overflow.eq(i.pc >= self._arch.imem_words)]
        for op in FORMATS:
            name = op.name.lower()
            m.d.comb += getattr(o.clean, name).eq(getattr(i.pre.is_op, name)
                                                  & ~getattr(i.pre.fails, name).any())
        return m


class CauseSelect(wiring.Component):
    """Second decode stage (combinational): the first failing check of the
    instruction's opcode, in ``model/golden.py``'s order, where a legal
    instruction goes (``unit``), and the flags the units read (``op``,
    ``fence_all``). Where it goes is an AND-OR of the first stage's
    registered ``clean`` bits and the version checks, computed beside the
    cause, not from it; the cause is the opcode's chain selected by the
    predecoded ``is_op`` bits.

    One register: the program's ISA version, taken from the VERSION at word 0
    as that instruction leaves (the next word is decoded only after it has;
    an illegal one stops the program at word 0).

    Interface attributes
    --------------------
    i : ``In(stream.Signature(Checked(imem_words)))``
    o : ``Out(stream.Signature(Decoded(imem_words)))``
    """

    def __init__(self, arch):
        check_arch(arch)
        self._arch = arch
        super().__init__({
            "i": In(stream.Signature(Checked(arch.imem_words))),
            "o": Out(stream.Signature(Decoded(arch.imem_words))),
        })

    def _chain(self, op, f, fails, first, version):
        """``(condition, cause)`` of every check of ``op``, in order."""
        chain = [(version < OP_SINCE[op], Cause.BAD_OPCODE)] if op in OP_SINCE else []
        chain.append((fails[0], Cause.RESERVED_BITS))
        early = iter(range(1, len(fails)))
        for name, rule in FIELD_CHECKS.get(op, ()):
            if rule == "version":
                v = getattr(f, name)
                ok = first & v.matches(*SUPPORTED_VERSIONS) | ~first & (v == version)
                chain.append((~ok, Cause.VERSION_MISMATCH))
            else:
                chain.append((fails[next(early)], _RULE_CAUSE[rule]))
        return chain

    def elaborate(self, platform):
        m = Module()
        i = self.i.p
        word, cause, unit = i.word, self.o.p.cause, self.o.p.unit
        m.d.comb += [self.o.valid.eq(self.i.valid), self.i.ready.eq(self.o.ready),
                     self.o.p.pc.eq(i.pc), self.o.p.word.eq(word)]
        version = Signal(field_of(Op.VERSION, "version").width)
        first, overflow = i.first, i.overflow
        is_op = {op: getattr(i.pre.is_op, op.name.lower()) for op in FORMATS}
        chains = {op: self._chain(op, getattr(word, op.name.lower()),
                                  getattr(i.pre.fails, op.name.lower()), first, version)
                  for op in FORMATS}
        # each opcode's cause, then the one of the opcode at hand (AND-OR on the
        # one-hot is_op bits; none set: an unknown opcode)
        op_cause = {}
        for op, chain in chains.items():
            op_cause[op] = Signal(CauseCode, name=f"cause_{op.name.lower()}")
            for k, (cond, why) in enumerate(chain):
                with (m.If if k == 0 else m.Elif)(cond):
                    m.d.comb += op_cause[op].eq(CauseCode[why.name])
        known = Signal()
        m.d.comb += known.eq(Cat(*is_op.values()).any())
        chosen = 0
        for op in FORMATS:
            chosen = chosen | Mux(is_op[op], Value.cast(op_cause[op]), 0)
        with m.If(overflow):
            m.d.comb += cause.eq(CauseCode.PC_OVERFLOW)
        with m.Elif(first & ~is_op[Op.VERSION]):
            m.d.comb += cause.eq(CauseCode.VERSION_MISMATCH)
        with m.Elif(~known):
            m.d.comb += cause.eq(CauseCode.BAD_OPCODE)
        with m.Else():
            m.d.comb += cause.eq(chosen)
        # legal: the opcode is known and none of its checks failed (the
        # predecoded ones in ``clean``, the version checks here)
        ok = {op: getattr(i.clean, op.name.lower())
              & ~Cat(*[c for c, why in chain if why in (Cause.BAD_OPCODE, Cause.VERSION_MISMATCH)]).any()
              for op, chain in chains.items()}
        allowed = Signal()                  # no stop before the opcode's own checks
        m.d.comb += allowed.eq(~overflow & (~first | is_op[Op.VERSION]))
        m.d.comb += unit.version.eq(allowed & ok[Op.VERSION])
        m.d.comb += [unit[name].eq(allowed & Cat(*[ok[op] for op in ops]).any())
                     for name, ops in UNIT_OPS.items()]
        # the units' flags (legality is the sequencer's business: it dispatches
        # only legal instructions)
        m.d.comb += [getattr(self.o.p.op, op.name.lower()).eq(is_op[op]) for op in FORMATS]
        m.d.comb += self.o.p.fence_all.eq(i.pre.fence_all)
        # taken from any VERSION at word 0, legal or not: an illegal one stops
        # the program there, and what was decoded after it is flushed unused
        # (so the enable does not wait for the legality checks)
        with m.If(self.o.valid & self.o.ready & first & is_op[Op.VERSION]):
            m.d.sync += version.eq(word.version.version)
        return m


class Decoder(wiring.Component):
    """Finds why an instruction is illegal, exactly as ``model/golden.py`` does,
    and where a legal one goes: :class:`PcChecks`, a
    :class:`hw.lib.RegisterSlice`, :class:`CauseSelect` (so the address
    checks and the priority among all checks are in different cycles; one
    cycle of latency, a word a cycle). The checks a word decides alone come
    with it, made before it was stored (:mod:`.predecode`).

    The checks, first failing one wins: ``PC_OVERFLOW`` (``pc`` past the
    instruction memory); ``VERSION_MISMATCH`` at word 0 unless the opcode is
    VERSION; ``BAD_OPCODE`` (also an opcode newer than the program's version,
    :data:`hw.isa.OP_SINCE`); ``RESERVED_BITS`` (mask from
    :func:`hw.isa.reserved_mask`); then :data:`FIELD_CHECKS` in table order.
    Field positions and widths come from :data:`hw.isa.FORMATS` through the
    instruction layouts.

    Parameters
    ----------
    arch : :class:`hw.isa.ArchParams`

    Interface attributes
    --------------------
    i : ``In(stream.Signature(Fetched(imem_words)))``
    o : ``Out(stream.Signature(Decoded(imem_words)))``
        ``cause`` is ``NONE`` for a legal instruction; ``unit`` (where it goes,
        :class:`~.common.Dispatch`) is all zero for an illegal one.
    flush : ``In(1)``
        Drop the word between the stages (a rewind).
    """

    def __init__(self, arch):
        check_arch(arch)
        self._arch = arch
        super().__init__({
            "i": In(stream.Signature(Fetched(arch.imem_words))),
            "o": Out(stream.Signature(Decoded(arch.imem_words))),
            "flush": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        arch = self._arch
        m.submodules.checks = checks = PcChecks(arch)
        # (a few hundred bits: four groups, so no control flip-flop drives every enable)
        m.submodules.checked = checked = RegisterSlice(Checked(arch.imem_words), groups=4)
        m.submodules.select = select = CauseSelect(arch)
        wiring.connect(m, wiring.flipped(self.i), checks.i)
        wiring.connect(m, checks.o, checked.i)
        wiring.connect(m, checked.o, select.i)
        wiring.connect(m, select.o, wiring.flipped(self.o))
        m.d.comb += checked.flush.eq(self.flush)
        return m
