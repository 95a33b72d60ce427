"""Predecode: the checks an instruction word decides alone, made as the word is
written into the instruction memory and stored beside it, so that the decoder
starts from their results instead of from 256 bits of word."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..isa import (ELEMENT_BYTES, ELEMENT_FIELDS, FORMATS, OPCODE_BITS, WORD_BITS, Op,
                   check_arch, field_of, reserved_mask)
from ..lib import page_offset_mask
from .common import ImemWrite, InstructionWord, OpFlags

__all__ = ["FIELD_CHECKS", "early_checks", "Predecoded", "PredecodedWord", "Fetched", "PredecodedWrite",
           "predecode", "predecoded_entry", "Predecoder"]

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
for _op, _checks in FIELD_CHECKS.items():          # every checked field is in the ISA table
    for _name, _ in _checks:
        field_of(_op, _name)


def early_checks(op):
    """The checks of ``op`` that need only the word, in table order: the
    reserved bits, then every field check of :data:`FIELD_CHECKS` but the
    ``"version"`` rule (it needs the program's version): ``(field, rule)``,
    ``None`` for the reserved bits."""
    return [None] + [(name, rule) for name, rule in FIELD_CHECKS.get(op, ()) if rule != "version"]


class Predecoded(data.StructLayout):
    """What the word alone decides, for the decoder: ``is_op`` (one flag per
    opcode, none for an unknown one), ``fails.<op>`` (bit *k*: check *k* of
    :func:`early_checks` of ``op``'s view of the word failed, for every
    opcode: the word's own one picks in the decoder) and ``fence_all`` (the
    FENCE mask is 0)."""
    def __init__(self):
        fails = {op.name.lower(): len(early_checks(op)) for op in FORMATS}
        super().__init__({"is_op": OpFlags(), "fails": data.StructLayout(fails), "fence_all": 1})


class PredecodedWord(data.StructLayout):
    """An instruction memory entry: the word and its :class:`Predecoded`."""
    def __init__(self):
        super().__init__({"word": InstructionWord(), "pre": Predecoded()})


class Fetched(data.StructLayout):
    """An instruction word as fetched: its address, the word and its :class:`Predecoded`."""
    def __init__(self, imem_words):
        super().__init__({"pc": range(imem_words + 1), "word": InstructionWord(),
                          "pre": Predecoded()})


class PredecodedWrite(data.StructLayout):
    """A write into the instruction memory: word address and entry."""
    def __init__(self, imem_words):
        super().__init__({"addr": ImemWrite(imem_words)["addr"].shape, "data": PredecodedWord()})


def _gate_violation(arch, op, f, name, rule):
    """The gateware condition that field ``name`` of ``op``'s view ``f`` of a
    word breaks ``rule``."""
    A, v = arch.addr_bits, getattr(f, name)
    if rule == "address":
        return v[A:].any() if A < field_of(op, name).width else Const(0)
    if rule == "aligned":
        return (v[:A] & page_offset_mask(arch.page_sizes, f.size)) != 0
    if rule == "element":
        return v[:exact_log2(ELEMENT_BYTES[op])].any()
    return v >= getattr(arch, rule)


def _int_violation(arch, op, fields, name, rule):
    """The same rule on a word's fields as ints (``fields``: name to value)."""
    A, v = arch.addr_bits, fields[name]
    if rule == "address":
        return v >> A != 0
    if rule == "aligned":
        return v & ((1 << A) - 1) & (arch.page_sizes[fields["size"]] - 1) != 0
    if rule == "element":
        return v % ELEMENT_BYTES[op] != 0
    return v >= getattr(arch, rule)


def predecode(arch, word):
    """:class:`Predecoded` of the 256-bit ``word`` (an int), as a dict of its
    fields: what :class:`Predecoder` computes."""
    check_arch(arch)
    opcode = word & ((1 << OPCODE_BITS) - 1)
    fails = {}
    for op in FORMATS:
        fields = {f.name: (word >> f.lsb) & f.mask for f in FORMATS[op]}
        fails[op.name.lower()] = sum(
            int(word & reserved_mask(op) != 0 if check is None
                else _int_violation(arch, op, fields, *check)) << k
            for k, check in enumerate(early_checks(op)))
    mask = field_of(Op.FENCE, "mask")
    return {"is_op": {op.name.lower(): int(opcode == op) for op in FORMATS}, "fails": fails,
            "fence_all": int((word >> mask.lsb) & mask.mask == 0)}


def predecoded_entry(arch, word):
    """The instruction memory entry of ``word`` (:class:`PredecodedWord`), as
    an int: the word and its :func:`predecode`, for a memory's initial image."""
    return Const.cast(PredecodedWord().const({"word": {"bits": word},
                                              "pre": predecode(arch, word)})).value


class Predecoder(wiring.Component):
    """Predecodes host writes into the instruction memory on their way to it:
    what :func:`predecode` computes for the initial image. Two registered
    stages, a write a cycle, never held up: the write as taken (flip-flops
    beside the block RAM, not the host port's across the die), then every
    opcode's view of the word checked at once; a write reaches the memory
    two cycles after it is taken.

    Parameters
    ----------
    arch : :class:`hw.isa.ArchParams`

    Interface attributes
    --------------------
    i : ``In(stream.Signature(ImemWrite(imem_words)))``
        Always ready.
    o : ``Out(wiring.Signature({"valid": Out(1), "p": Out(PredecodedWrite(imem_words))}))``
        Not a stream: a write leaves when it is done, never held up.
    busy : ``Out(1)``
        A write is on its way (in the first stage or on ``o``).
    """

    def __init__(self, arch):
        check_arch(arch)
        self._arch = arch
        super().__init__({
            "i": In(stream.Signature(ImemWrite(arch.imem_words))),
            "o": Out(wiring.Signature({"valid": Out(1),
                                       "p": Out(PredecodedWrite(arch.imem_words))})),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        taken = Signal(ImemWrite(self._arch.imem_words))
        taken_valid = Signal()
        m.d.comb += self.i.ready.eq(1)
        m.d.sync += [taken.eq(self.i.p), taken_valid.eq(self.i.valid)]

        word = data.View(InstructionWord(), taken.data)
        o = self.o.p
        pre = o.data.pre
        for op in FORMATS:
            name = op.name.lower()
            f = getattr(word, name)
            m.d.sync += [
                getattr(pre.fails, name).eq(Cat(*[
                    (word.bits & Const(reserved_mask(op), WORD_BITS)).any() if check is None
                    else _gate_violation(self._arch, op, f, *check) for check in early_checks(op)])),
                getattr(pre.is_op, name).eq(word.opcode == op),
            ]
        m.d.sync += [self.o.valid.eq(taken_valid), o.addr.eq(taken.addr), o.data.word.eq(taken.data),
                     pre.fence_all.eq(word.fence.mask == 0)]
        m.d.comb += self.busy.eq(taken_valid | self.o.valid)
        return m
