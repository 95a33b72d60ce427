"""Sequence items: host-port transactions, coprocessor instructions, plan transfers.

Each is a ``pyuvm.uvm_sequence_item`` with ``convert2string`` and comparison;
instructions decode from, and encode to, the 256-bit words the compiler
writes (``hw.isa`` is the one definition), transfers come from a plan's runs.
"""
from __future__ import annotations

from pyuvm import uvm_sequence_item

from hw.isa import Op, decode, encode


class HostTxn(uvm_sequence_item):
    """One AXI4-Lite access on a device's host port. ``strobe`` selects the bytes
    written (a contiguous run); the driver fills ``resp`` and, for reads, ``rdata``."""

    def __init__(self, name="host_txn", device=0, write=False, addr=0, data=0, strobe=0xF, reg=""):
        super().__init__(name)
        self.device, self.write, self.addr, self.data, self.strobe, self.reg = device, write, addr, data, strobe, reg
        self.resp: int | None = None
        self.rdata: int | None = None

    def __eq__(self, other):
        return isinstance(other, HostTxn) and (self.device, self.write, self.addr, self.data, self.strobe) == \
            (other.device, other.write, other.addr, other.data, other.strobe)

    def convert2string(self):
        what = f"W {self.data:#010x} strb {self.strobe:04b}" if self.write else f"R -> {self.rdata}"
        return f"dev{self.device} {self.reg or hex(self.addr)} {what} resp {self.resp}"


class InsnItem(uvm_sequence_item):
    """One coprocessor instruction: its opcode and fields, as ``hw.isa`` names them."""

    def __init__(self, name="insn", op: Op = Op.HALT, **fields):
        super().__init__(name)
        self.op = Op(op)
        self.fields = dict(fields)

    @classmethod
    def from_word(cls, word: int, name="insn") -> "InsnItem":
        d = decode(word)
        item = cls(name, Op.HALT)
        item.op, item.fields, item.raw = d.op, dict(d.fields), word
        return item

    def word(self) -> int:
        """The encoded word (an undecodable one keeps the word it came from)."""
        if self.op is None or self.op is Op.ILLEGAL or getattr(self, "raw", None) is not None:
            return self.raw
        return encode(self.op, **self.fields)

    def __eq__(self, other):
        return isinstance(other, InsnItem) and self.word() == other.word()

    def convert2string(self):
        name = self.op.name if self.op is not None else "?"
        return f"{name} " + " ".join(f"{k}={v:#x}" for k, v in self.fields.items())


class TransferItem(uvm_sequence_item):
    """One run of a plan: rows of bytes from a source rank's buffer into a destination's."""

    FIELDS = ("src", "dst", "src_offset", "dst_offset", "rows", "row_bytes", "src_stride", "dst_stride")

    def __init__(self, name="transfer", **values):
        super().__init__(name)
        for k in self.FIELDS:
            setattr(self, k, int(values.get(k, 0)))
        self.param = str(values.get("param", ""))         # the tensor, for messages

    @classmethod
    def from_plan(cls, transfer, elem_bytes: int) -> "TransferItem":
        return cls(**transfer.to_json(elem_bytes))

    @property
    def nbytes(self) -> int:
        return self.rows * self.row_bytes

    def __eq__(self, other):
        return isinstance(other, TransferItem) and all(getattr(self, k) == getattr(other, k) for k in self.FIELDS)

    def convert2string(self):
        what = f"{self.param} " if self.param else ""
        return (f"{what}rank {self.src}+{self.src_offset:#x} -> rank {self.dst}+{self.dst_offset:#x}: "
                f"{self.rows} x {self.row_bytes} B (strides {self.src_stride}/{self.dst_stride})")
