"""Payload layouts of the DMA's ports and of the streams between its stages,
and :class:`DmaGeometry`, the widths every stage derives from the parameters.
"""
from __future__ import annotations

from amaranth.lib import data, enum, wiring
from amaranth.lib.wiring import Out
from amaranth.utils import bits_for, ceil_log2, exact_log2

from ..isa import FORMATS, Op, field_of
from ..lib import chan_bits, ctx_bits, dev_bits
from ..mmu import TranslateCause
from ..reduce import ReduceOp

__all__ = ["CopyDescriptor", "DmaWrite", "ChannelStatus", "DmaFault", "DONE_COUNT_BITS",
           "DmaGeometry", "Event", "GrantOp", "Slot", "Grant", "Chunk", "CmdKind", "Command",
           "Retire"]

#: Width of a channel's wrapping count of completed descriptors (the
#: coprocessor counts issued descriptors in the same width and compares).
DONE_COUNT_BITS = 16


class CopyDescriptor(data.StructLayout):
    """A COPY descriptor: the fields of the ISA's COPY format (``hw.isa.FORMATS``),
    in the same order and widths, except three narrowed to the hardware.

    ``chan`` selects the channel (descriptors for a channel number at or
    above ``channels`` are dropped) and ``ctx`` the MMU context, both as wide
    as the counts need. ``src``/``dst`` are virtual addresses, ``arch.addr_bits``
    wide; the strides are unsigned and address arithmetic wraps modulo
    ``2**addr_bits``. ``op`` (not an instruction field: the opcode names it)
    is what each destination write does: a plain write, or an add of f32 or
    bf16 lanes (ISA v2's ``COPY_ADD_*``).
    """
    def __init__(self, arch, channels):
        narrow = {"chan": chan_bits(channels), "ctx": ctx_bits(arch),
                  "src": arch.addr_bits, "dst": arch.addr_bits}
        fields = {f.name: narrow.get(f.name, f.width) for f in FORMATS[Op.COPY]}
        super().__init__({**fields, "op": ReduceOp})


class DmaWrite(data.StructLayout):
    """A write beat: destination device, word address (``pa // (data_width // 8)``),
    data, byte enables, the channel (to route its ``wr_ack`` back), and what
    the write does (``op``: write, or add into the word)."""
    def __init__(self, arch, data_width, channels):
        word_bits = exact_log2(data_width // 8)
        super().__init__({
            "dev": dev_bits(arch),
            "addr": max(1, ceil_log2(arch.mem_bytes) - word_bits),
            "data": data_width,
            "be": data_width // 8,
            "chan": chan_bits(channels),
            "op": ReduceOp,
        })


class ChannelStatus(data.StructLayout):
    """Per-channel status.

    ``busy``: a descriptor is loaded, or chunks, writes or acks are in
    flight. ``error``: the channel faulted (``cause``, ``va`` name it) and
    discards descriptors until cleared. ``done_count`` (wrapping) counts
    completed descriptors, ``done_tag`` is the tag of the last one.
    """
    def __init__(self, arch):
        super().__init__({
            "busy": 1,
            "error": 1,
            "cause": TranslateCause,
            "va": arch.addr_bits,
            "done_count": DONE_COUNT_BITS,
            "done_tag": field_of(Op.COPY, "tag").width,
        })


class DmaFault(data.StructLayout):
    """A fault record: channel, context, virtual address and cause."""
    def __init__(self, arch, channels):
        super().__init__({
            "chan": chan_bits(channels),
            "ctx": ctx_bits(arch),
            "va": arch.addr_bits,
            "cause": TranslateCause,
        })


class DmaGeometry:
    """Widths and sizes shared by the DMA's stages, derived from the
    architecture and the DMA's parameters (never written as literals).

    Attributes: ``arch``, ``channels``, ``data_width``, ``burst_len``,
    ``bytes_per_word`` (B), ``word_bits`` (log2 B), ``addr_bits`` (A),
    ``page_bits`` (log2 of the smallest page), ``burst_bytes``,
    ``burst_bits``, ``len_bits`` (a chunk length, 0..burst_bytes),
    ``pa_bits`` (a local physical byte address, at least one page),
    ``mem_addr_width`` (a word address), ``chan_bits``, ``ctx_bits``,
    ``dev_bits``, ``tag_bits``.
    """

    def __init__(self, arch, *, data_width, channels, burst_len):
        self.arch = arch
        self.channels = channels
        self.data_width = data_width
        self.burst_len = burst_len
        self.bytes_per_word = data_width // 8
        self.word_bits = exact_log2(self.bytes_per_word)
        self.addr_bits = arch.addr_bits
        self.page_bits = exact_log2(arch.page_sizes[0])
        self.burst_bytes = burst_len * self.bytes_per_word
        self.burst_bits = exact_log2(self.burst_bytes)
        self.len_bits = bits_for(self.burst_bytes)
        self.pa_bits = max(ceil_log2(arch.mem_bytes), self.page_bits)
        self.mem_addr_width = max(1, ceil_log2(arch.mem_bytes) - self.word_bits)
        self.chan_bits = chan_bits(channels)
        self.ctx_bits = ctx_bits(arch)
        self.dev_bits = dev_bits(arch)
        self.tag_bits = field_of(Op.COPY, "tag").width
        self.row_bits = field_of(Op.COPY, "row_bytes").width
        self.rows_bits = field_of(Op.COPY, "rows").width
        self.stride_bits = field_of(Op.COPY, "src_stride").width


class Event(wiring.Signature):
    """A notification between stages: ``payload`` is meaningful in a cycle
    where ``valid`` is high; it is never back-pressured (no ``ready``)."""
    def __init__(self, shape):
        super().__init__({"valid": Out(1), "payload": Out(shape)})


class GrantOp(enum.Enum, shape=2):
    """What the walker does with a granted channel."""
    NONE = 0       # the channel emptied after it was picked: nothing
    CHUNK = 1      # cut the next chunk of the descriptor being walked
    START = 2      # start walking the descriptor in the channel's head slot


class Slot(data.StructLayout):
    """A descriptor as a front-end slot holds it. The row bases are kept one
    stride back (``src0 = src - src_stride``), so starting a descriptor is
    "advance to the next row" from a virtual row -1. ``empty``: zero bytes."""
    def __init__(self, g):
        super().__init__({
            "ctx": g.ctx_bits, "tag": g.tag_bits, "src0": g.addr_bits, "dst0": g.addr_bits,
            "row_bytes": g.row_bits, "rows": g.rows_bits,
            "src_stride": g.stride_bits, "dst_stride": g.stride_bits, "empty": 1,
            "op": ReduceOp,
        })


class Grant(data.StructLayout):
    """Front-end to walker: a channel granted one walker slot, what to do, and
    its head descriptor."""
    def __init__(self, g):
        super().__init__({"chan": g.chan_bits, "op": GrantOp, "desc": Slot(g)})


class Chunk(data.StructLayout):
    """Walker to translation: a piece of one row inside one smallest page of
    the source and of the destination and one destination burst window
    (virtual addresses). ``last``: the descriptor's last chunk; ``empty``: a
    zero-length descriptor (moves nothing, completes); ``first``: the
    descriptor's first chunk (translate afresh); ``cont``: not the first
    chunk of its row (its source continues the previous chunk's)."""
    def __init__(self, g):
        super().__init__({
            "chan": g.chan_bits, "ctx": g.ctx_bits, "tag": g.tag_bits,
            "src": g.addr_bits, "dst": g.addr_bits, "len": g.len_bits,
            "last": 1, "empty": 1, "first": 1, "cont": 1, "op": ReduceOp,
        })


class CmdKind(enum.Enum, shape=2):
    """What a command asks of the back-end."""
    DATA = 0       # move ``len`` bytes
    EMPTY = 1      # a zero-length descriptor: completes, moves nothing
    FAULT = 2      # the channel faulted here: report the record


class Command(data.StructLayout):
    """Translation to reader to writer: a translated chunk, or a marker.

    ``body.move`` (DATA): local physical source, destination device and
    physical address, length. ``body.fault`` (FAULT): the fault record.
    ``cont`` comes from the chunk; ``reuse`` is set by the reader when the
    chunk's first source word is the previous command's last one, which the
    writer still holds (so it is read once)."""
    def __init__(self, g):
        move = data.StructLayout({"src": g.pa_bits, "dst": g.pa_bits, "dev": g.dev_bits,
                                  "len": g.len_bits})
        fault = data.StructLayout({"ctx": g.ctx_bits, "va": g.addr_bits,
                                   "cause": TranslateCause})
        super().__init__({
            "kind": CmdKind, "chan": g.chan_bits, "last": 1, "tag": g.tag_bits,
            "cont": 1, "reuse": 1, "op": ReduceOp,
            "body": data.UnionLayout({"move": move, "fault": fault}),
        })


class Retire(data.StructLayout):
    """Writer to completion: a command left the writer (DATA: its last beat
    was accepted; EMPTY: at once; FAULT: its record was accepted)."""
    def __init__(self, g):
        super().__init__({
            "chan": g.chan_bits, "kind": CmdKind, "last": 1, "tag": g.tag_bits,
            "va": g.addr_bits, "cause": TranslateCause,
        })
