"""Payloads, widths and small helpers shared by the coprocessor's stages; every
width derives from :mod:`hw.isa` and the parameters it counts."""
from __future__ import annotations

from amaranth.hdl import Signal, Value, unsigned
from amaranth.lib import data, enum, wiring
from amaranth.lib.wiring import Out
from amaranth.utils import ceil_log2

from ..isa import COPY_OPS, FORMATS, OPCODE_BITS, WORD_BITS, Cause, Op, Status, field_of
from ..lib import chan_bits, dev_bits, sem_bits

__all__ = ["StatusCode", "CauseCode", "instruction_layout", "INSTRUCTION_LAYOUTS",
           "InstructionWord", "ImemWrite", "SignalMessage", "UNIT_OPS", "Dispatch",
           "dispatch_of", "OpFlags", "UnitInsn", "unit_insn_of", "Decoded", "StopRequest",
           "WriteBeatSignature", "semaphore_shape", "beat_bytes",
           "first_fault_cause"]

#: :class:`hw.isa.Status` as an Amaranth enum (the status register's shape).
StatusCode = enum.Enum("StatusCode", {s.name: int(s) for s in Status})
#: :class:`hw.isa.Cause` as an Amaranth enum (the cause register's shape).
CauseCode = enum.Enum("CauseCode", {c.name: int(c) for c in Cause})


def instruction_layout(op: Op) -> data.FlexibleLayout:
    """The 256-bit instruction word of ``op`` as a layout: ``opcode`` and the
    fields of :data:`hw.isa.FORMATS` at their bit positions."""
    fields = {"opcode": data.Field(unsigned(OPCODE_BITS), 0)}
    for f in FORMATS[Op(op)]:
        fields[f.name] = data.Field(unsigned(f.width), f.lsb)
    return data.FlexibleLayout(WORD_BITS, fields)


#: One layout per opcode, generated from :data:`hw.isa.FORMATS`.
INSTRUCTION_LAYOUTS = {op: instruction_layout(op) for op in FORMATS}


class InstructionWord(data.UnionLayout):
    """One instruction word, viewed as any opcode's format: ``opcode`` and one
    member per opcode (``copy``, ``fence``, ``remap``, ...) with the fields of
    :data:`INSTRUCTION_LAYOUTS`."""
    def __init__(self):
        members = {"opcode": unsigned(OPCODE_BITS), "bits": unsigned(WORD_BITS)}
        members.update({op.name.lower(): INSTRUCTION_LAYOUTS[op] for op in FORMATS})
        super().__init__(members)


class ImemWrite(data.StructLayout):
    """A host write into instruction memory: word address and 256-bit word."""
    def __init__(self, imem_words):
        super().__init__({"addr": max(1, ceil_log2(imem_words)), "data": WORD_BITS})


class SignalMessage(data.StructLayout):
    """A ``SIGNAL``: destination device and semaphore index."""
    def __init__(self, arch):
        super().__init__({"dev": dev_bits(arch), "sem": sem_bits(arch)})


#: The opcodes each execution unit executes; VERSION retires in the sequencer.
UNIT_OPS = {
    "copy": COPY_OPS,
    "sync": (Op.FENCE, Op.SIGNAL, Op.WAIT, Op.HALT),
    "mmu": (Op.REMAP, Op.INVAL, Op.COMMIT),
}


class Dispatch(data.StructLayout):
    """Where a legal instruction goes: ``version`` (it retires in the sequencer)
    or one flag per unit of :data:`UNIT_OPS`; all zero for an illegal one.
    Decoded one stage ahead, so that the retire decision reads registered flags."""
    def __init__(self):
        super().__init__({"version": 1, **{name: 1 for name in UNIT_OPS}})


def dispatch_of(opcode, cause=Cause.NONE):
    """The :class:`Dispatch` value (a dict) of an instruction: its opcode and cause."""
    legal = int(cause) == int(Cause.NONE)
    return {"version": int(legal and opcode == Op.VERSION),
            **{name: int(legal and opcode in ops) for name, ops in UNIT_OPS.items()}}


class OpFlags(data.StructLayout):
    """One flag per opcode (``fence``, ``wait``, ``commit``, ...): the word's
    opcode is that one. Decoded a stage ahead, so that a unit's conditions
    start from a registered flag, not from an 8-bit comparison."""
    def __init__(self):
        super().__init__({op.name.lower(): 1 for op in FORMATS})


class UnitInsn(data.StructLayout):
    """An instruction as the sequencer hands it to an execution unit: the word,
    its :class:`OpFlags` and ``fence_all`` (the word's FENCE mask is 0, which
    means every channel; also decoded a stage ahead)."""
    def __init__(self):
        super().__init__({"word": InstructionWord(), "op": OpFlags(), "fence_all": 1})


def unit_insn_of(word):
    """The :class:`UnitInsn` value (a dict) of a 256-bit instruction word."""
    opcode, mask = word & ((1 << OPCODE_BITS) - 1), field_of(Op.FENCE, "mask")
    return {"word": {"bits": word}, "op": {op.name.lower(): int(opcode == op) for op in FORMATS},
            "fence_all": int((word >> mask.lsb) & mask.mask == 0)}


class Decoded(data.StructLayout):
    """A fetched instruction with its illegal-instruction cause (``NONE``: legal),
    where it goes (:class:`Dispatch`), and its :class:`UnitInsn` flags."""
    def __init__(self, imem_words):
        super().__init__({"pc": range(imem_words + 1), "word": InstructionWord(),
                          "cause": CauseCode, "unit": Dispatch(), "op": OpFlags(),
                          "fence_all": 1})


class StopRequest(data.StructLayout):
    """An execution unit stops the program: the final status and its cause."""
    def __init__(self):
        super().__init__({"status": StatusCode, "cause": CauseCode})


class WriteBeatSignature(wiring.Signature):
    """A DMA write beat was accepted (``valid``): its channel and byte enables.

    Not a stream: beats are observed, never held up."""
    def __init__(self, channels, data_width):
        super().__init__({"valid": Out(1), "chan": Out(chan_bits(channels)),
                          "be": Out(data_width // 8)})


def semaphore_shape():
    """A semaphore holds any count a ``WAIT`` can ask for (and saturates there)."""
    return unsigned(field_of(Op.WAIT, "count").width)


def beat_bytes(be):
    """Number of bytes a write beat carries: the population count of its byte enables."""
    return sum(be[i] for i in range(len(be)))


def first_fault_cause(m, mask, chan_status):
    """The cause of the lowest-numbered faulted channel in ``mask`` (``NONE`` if
    none), from the DMA's per-channel status; a Signal of ``CauseCode``."""
    out = Signal(CauseCode, name="fault_cause")
    for c in reversed(range(len(chan_status))):
        with m.If(mask[c] & chan_status[c].error):
            m.d.comb += Value.cast(out).eq(Value.cast(chan_status[c].cause))
    return out
