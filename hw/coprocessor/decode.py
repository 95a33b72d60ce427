"""Decode: the illegal-instruction checks, in ``model/golden.py``'s order."""
from __future__ import annotations

from amaranth.hdl import Const, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from amaranth.utils import exact_log2

from ..isa import (ELEMENT_BYTES, ELEMENT_FIELDS, FORMATS, OP_SINCE, SUPPORTED_VERSIONS, WORD_BITS,
                   Cause, Op, field_of, reserved_mask)
from ..lib import page_offset_mask
from .common import UNIT_OPS, CauseCode, Decoded, Fetched

__all__ = ["Decoder", "FIELD_CHECKS"]

#: The field checks of every opcode, in the order they are made (after the
#: reserved bits): ``(field, rule)``. A rule is an ``ArchParams`` count (the
#: field must be below it), ``"version"`` (a supported version at word 0, the
#: program's version later), ``"address"`` (fits ``addr_bits``), ``"aligned"``
#: (to the page of the instruction's ``size`` field) or ``"element"`` (a
#: multiple of the reduce copy's element size, ``hw.isa.ELEMENT_BYTES``).
_COPY_CHECKS = (("chan", "channels"), ("ctx", "contexts"), ("src", "address"),
                ("dst", "address"))
_ELEMENT_CHECKS = tuple((name, "element") for name in ELEMENT_FIELDS)
FIELD_CHECKS = {
    Op.VERSION: (("version", "version"),),
    Op.COPY: _COPY_CHECKS,
    Op.COPY_ADD_F32: _COPY_CHECKS + _ELEMENT_CHECKS,
    Op.COPY_ADD_BF16: _COPY_CHECKS + _ELEMENT_CHECKS,
    Op.REMAP: (("ctx", "contexts"), ("dev", "devices"), ("va", "address"), ("va", "aligned"),
               ("pa", "address"), ("pa", "aligned")),
    Op.INVAL: (("ctx", "contexts"), ("va", "address"), ("va", "aligned")),
    Op.SIGNAL: (("dev", "devices"), ("sem", "semaphores")),
    Op.WAIT: (("sem", "semaphores"),),
    Op.COMMIT: (("ctx", "contexts"),),
}
_LIMIT_CAUSE = {"channels": Cause.BAD_CHANNEL, "contexts": Cause.BAD_CONTEXT,
                "devices": Cause.BAD_DEVICE, "semaphores": Cause.BAD_SEMAPHORE}
for _op, _checks in FIELD_CHECKS.items():          # every checked field is in the ISA table
    for _name, _ in _checks:
        field_of(_op, _name)


def _violations(arch, op, f, *, first, version):
    """``(condition, cause)`` for each field check of ``op`` on the view ``f``;
    ``first``: the instruction is word 0; ``version``: the program's version."""
    A = arch.addr_bits
    out = []
    for name, rule in FIELD_CHECKS.get(op, ()):
        v = getattr(f, name)
        if rule == "version":
            supported = v.matches(*SUPPORTED_VERSIONS)
            out.append((~(first & supported | ~first & (v == version)), Cause.VERSION_MISMATCH))
        elif rule == "address":
            over = v[A:].any() if A < field_of(op, name).width else Const(0)
            out.append((over, Cause.ADDRESS_WIDTH))
        elif rule == "aligned":
            out.append(((v[:A] & page_offset_mask(arch.page_sizes, f.size)) != 0,
                        Cause.MISALIGNED))
        elif rule == "element":
            out.append((v[:exact_log2(ELEMENT_BYTES[op])].any(), Cause.MISALIGNED))
        else:
            out.append((v >= getattr(arch, rule), _LIMIT_CAUSE[rule]))
    return out


class Decoder(wiring.Component):
    """Finds why an instruction is illegal, exactly as ``model/golden.py`` does.

    A combinational stage: ``o`` is ``i`` with the cause added, and where the
    instruction goes if it is legal (``unit``, :class:`~.common.Dispatch`:
    ``version`` or the unit of :data:`~.common.UNIT_OPS`). One register:
    the program's ISA version, taken from its legal VERSION at word 0 as that
    instruction leaves (the next word is decoded only after it has). The checks,
    first failing one wins: ``PC_OVERFLOW`` (``pc`` past the instruction
    memory); ``VERSION_MISMATCH`` at word 0 unless the opcode is VERSION;
    ``BAD_OPCODE`` (also an opcode newer than the program's version,
    :data:`hw.isa.OP_SINCE`); ``RESERVED_BITS`` (mask from :func:`hw.isa.reserved_mask`);
    then :data:`FIELD_CHECKS` in table order. Field positions and widths come
    from :data:`hw.isa.FORMATS` through the instruction layouts.

    Parameters
    ----------
    arch : :class:`hw.isa.ArchParams`

    Interface attributes
    --------------------
    i : ``In(stream.Signature(Fetched(imem_words)))``
    o : ``Out(stream.Signature(Decoded(imem_words)))``
        ``cause`` is ``NONE`` for a legal instruction; ``unit`` is all zero
        for an illegal one.
    """

    def __init__(self, arch):
        self._arch = arch
        super().__init__({
            "i": In(stream.Signature(Fetched(arch.imem_words))),
            "o": Out(stream.Signature(Decoded(arch.imem_words))),
        })

    def elaborate(self, platform):
        m = Module()
        arch = self._arch
        word, pc, cause = self.i.p.word, self.i.p.pc, self.o.p.cause
        m.d.comb += [
            self.o.valid.eq(self.i.valid),
            self.i.ready.eq(self.o.ready),
            self.o.p.pc.eq(pc),
            self.o.p.word.eq(word),
        ]
        version = Signal(field_of(Op.VERSION, "version").width)
        first = Signal()
        m.d.comb += first.eq(pc == 0)
        with m.If(self.o.valid & self.o.ready & first & (word.opcode == Op.VERSION)
                  & (cause == CauseCode.NONE)):
            m.d.sync += version.eq(word.version.version)
        with m.If(pc >= arch.imem_words):
            m.d.comb += cause.eq(CauseCode.PC_OVERFLOW)
        with m.Elif((pc == 0) & (word.opcode != Op.VERSION)):
            m.d.comb += cause.eq(CauseCode.VERSION_MISMATCH)
        with m.Else():
            with m.Switch(word.opcode):
                for op in FORMATS:
                    with m.Case(int(op)):
                        rmask = Const(reserved_mask(op), WORD_BITS)
                        checks = [(version < OP_SINCE[op], Cause.BAD_OPCODE)] \
                            if op in OP_SINCE else []
                        checks.append(((word.bits & rmask).any(), Cause.RESERVED_BITS))
                        checks += _violations(arch, op, getattr(word, op.name.lower()),
                                              first=first, version=version)
                        for k, (cond, why) in enumerate(checks):
                            with (m.If if k == 0 else m.Elif)(cond):
                                m.d.comb += cause.eq(CauseCode[why.name])
                with m.Default():
                    m.d.comb += cause.eq(CauseCode.BAD_OPCODE)
        legal, unit = cause == CauseCode.NONE, self.o.p.unit
        m.d.comb += unit.version.eq(legal & (word.opcode == Op.VERSION))
        m.d.comb += [unit[name].eq(legal & word.opcode.matches(*ops))
                     for name, ops in UNIT_OPS.items()]
        return m
