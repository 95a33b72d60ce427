"""The reshard coprocessor ISA, defined once, as data.

Every consumer derives from the tables here: the Amaranth decoder (``hw/``),
the assembler and compiler (``gen/``) and the golden model (``model/``), so
software and hardware cannot disagree about an instruction. docs/isa.md is
generated from this file (``python -m gen isadoc``; a test fails when it is
stale), so the prose about each instruction lives here too, beside its
format.

An instruction is one 256-bit little-endian word. Bits [7:0] are the opcode;
each opcode has named fields at fixed bit positions; every bit not covered by
a field is reserved and must be zero (a non-zero reserved bit is an illegal
instruction, which catches most corrupted words).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

ISA_VERSION = 2
#: The ISA versions this hardware generation runs: a program's first
#: instruction, VERSION, names one of them (anything else is VERSION_MISMATCH).
SUPPORTED_VERSIONS = (1, 2)
WORD_BITS = 256
WORD_BYTES = WORD_BITS // 8
VA_BITS = 48          # address fields in the word; hardware may implement fewer
OPCODE_BITS = 8


class Op(enum.IntEnum):
    ILLEGAL = 0x00    # all-zero word: never valid, so zeroed memory stops a program
    VERSION = 0x01
    COPY = 0x02
    FENCE = 0x03
    REMAP = 0x04
    INVAL = 0x05
    SIGNAL = 0x06
    WAIT = 0x07
    COMMIT = 0x08
    HALT = 0x09
    COPY_ADD_F32 = 0x0A     # ISA v2: COPY whose destination write adds, f32 lanes
    COPY_ADD_BF16 = 0x0B    # ISA v2: the same with bf16 lanes


@dataclass(frozen=True)
class Field:
    name: str
    lsb: int
    width: int
    doc: str = field(default="", compare=False)

    @property
    def mask(self) -> int:
        return (1 << self.width) - 1


# Field layout per opcode: (name, lsb, width, note).
FORMATS: dict[Op, tuple[Field, ...]] = {
    Op.VERSION: (Field("version", 8, 16),),
    Op.COPY: (
        Field("chan", 8, 4),
        Field("ctx", 12, 4),
        Field("tag", 16, 16),
        Field("src", 32, 48),
        Field("dst", 80, 48),
        Field("row_bytes", 128, 32),
        Field("rows", 160, 32),
        Field("src_stride", 192, 32),
        Field("dst_stride", 224, 32),
    ),
    Op.FENCE: (Field("mask", 8, 16, "0 means every channel"),),
    Op.REMAP: (
        Field("ctx", 8, 4),
        Field("size", 12, 2),
        Field("perm", 14, 2, "bit 0 read, bit 1 write"),
        Field("staged", 16, 1),
        Field("dev", 24, 8),
        Field("va", 32, 48),
        Field("pa", 80, 48),
    ),
    Op.INVAL: (
        Field("ctx", 8, 4),
        Field("size", 12, 2),
        Field("staged", 16, 1),
        Field("va", 32, 48),
    ),
    Op.SIGNAL: (Field("dev", 8, 8), Field("sem", 16, 8)),
    Op.WAIT: (Field("sem", 16, 8), Field("count", 24, 16)),
    Op.COMMIT: (Field("ctx", 8, 4),),
    Op.HALT: (),
}
# The reduce-on-write copies have COPY's format exactly: the opcode names the
# element type, so no field is narrowed and descriptors stay one layout.
FORMATS[Op.COPY_ADD_F32] = FORMATS[Op.COPY]
FORMATS[Op.COPY_ADD_BF16] = FORMATS[Op.COPY]

#: The first ISA version that has each opcode (the others are in every
#: version). In a program that declared an earlier version the opcode is
#: ``BAD_OPCODE``, so v1 programs mean on v2 hardware what they always meant.
OP_SINCE: dict[Op, int] = {Op.COPY_ADD_F32: 2, Op.COPY_ADD_BF16: 2}

#: The copies that reduce, with their element size in bytes: ``src``, ``dst``,
#: ``row_bytes`` and both strides must be multiples of it (``MISALIGNED``).
ELEMENT_FIELDS = ("src", "dst", "row_bytes", "src_stride", "dst_stride")
ELEMENT_BYTES: dict[Op, int] = {Op.COPY_ADD_F32: 4, Op.COPY_ADD_BF16: 2}
COPY_OPS = (Op.COPY, Op.COPY_ADD_F32, Op.COPY_ADD_BF16)

PERM_R = 1
PERM_W = 2


def field_of(op: Op, name: str) -> Field:
    """The field ``name`` of ``op``'s format (hardware widths derive from it)."""
    for f in FORMATS[Op(op)]:
        if f.name == name:
            return f
    raise KeyError(f"{Op(op).name} has no field {name!r}")


class Status(enum.IntEnum):
    """Coprocessor status register."""
    IDLE = 0
    RUNNING = 1
    HALTED = 2      # reached HALT, every copy completed without fault
    FAULT = 3       # a copy faulted; stopped at the FENCE/COMMIT/HALT that observed it
    ILLEGAL = 4     # illegal instruction or illegal use; stopped at that instruction
    ABORTED = 5     # blocked in WAIT when the whole system went quiescent


class Cause(enum.IntEnum):
    NONE = 0
    # translation faults (fault records)
    NOT_MAPPED = 1
    NO_READ = 2
    NO_WRITE = 3
    REMOTE_READ = 4     # source page maps to another device
    OUT_OF_RANGE = 5    # physical address beyond the device's memory
    # illegal-instruction causes (status register)
    BAD_OPCODE = 16
    RESERVED_BITS = 17
    BAD_CHANNEL = 18
    BAD_CONTEXT = 19
    MISALIGNED = 20
    VERSION_MISMATCH = 21
    COMMIT_UNFENCED = 22
    BAD_DEVICE = 23
    BAD_SEMAPHORE = 24
    ADDRESS_WIDTH = 25   # address field wider than the hardware's address bits
    PC_OVERFLOW = 26     # ran past the end of instruction memory
    # aborted
    DEADLOCK = 32


@dataclass(frozen=True)
class ArchParams:
    """Architectural parameters shared by the golden model, compiler and RTL.

    The golden model and the RTL must be built with the same values: TLB
    capacity and replacement are architectural here, because a miss is a
    fault (there is no page-table walker).
    """
    devices: int = 2
    mem_bytes: int = 1 << 21
    page_sizes: tuple[int, int, int, int] = (4096, 65536, 1 << 18, 1 << 21)
    tlb_entries: int = 64
    contexts: int = 4
    channels: int = 4
    semaphores: int = 8
    imem_words: int = 1024
    addr_bits: int = 32     # implemented virtual/physical address bits

    def __post_init__(self):
        def check(cond, what):
            if not cond:
                raise ValueError(what)
        check(isinstance(self.devices, int) and 1 <= self.devices <= 256,
              f"devices must be 1..256, not {self.devices!r}")
        check(len(self.page_sizes) == 4 and all(p > 0 and p & (p - 1) == 0 for p in self.page_sizes)
              and list(self.page_sizes) == sorted(self.page_sizes),
              f"page_sizes must be 4 ascending powers of two, not {self.page_sizes!r}")
        check(self.mem_bytes > 0 and self.mem_bytes % self.page_sizes[0] == 0,
              f"mem_bytes must be a positive multiple of the smallest page, not {self.mem_bytes!r}")
        check(1 <= self.tlb_entries <= 4096, f"tlb_entries must be 1..4096, not {self.tlb_entries!r}")
        check(1 <= self.contexts <= 16, f"contexts must be 1..16, not {self.contexts!r}")
        check(1 <= self.channels <= 16, f"channels must be 1..16, not {self.channels!r}")
        check(1 <= self.semaphores <= 256, f"semaphores must be 1..256, not {self.semaphores!r}")
        check(1 <= self.imem_words, f"imem_words must be positive, not {self.imem_words!r}")
        check(self.mem_bytes <= 1 << self.addr_bits <= 1 << VA_BITS,
              f"addr_bits {self.addr_bits!r} must cover mem_bytes and be at most {VA_BITS}")

    def to_json(self) -> dict:
        return {"devices": self.devices, "mem_bytes": self.mem_bytes,
                "page_sizes": list(self.page_sizes), "tlb_entries": self.tlb_entries,
                "contexts": self.contexts, "channels": self.channels,
                "semaphores": self.semaphores, "imem_words": self.imem_words,
                "addr_bits": self.addr_bits}

    @classmethod
    def from_json(cls, d: dict) -> "ArchParams":
        d = dict(d)
        d["page_sizes"] = tuple(d["page_sizes"])
        return cls(**d)


def check_arch(arch):
    """Raise ``TypeError`` unless ``arch`` is an :class:`ArchParams` (every
    block that takes one checks it this way)."""
    if not isinstance(arch, ArchParams):
        raise TypeError(f"arch must be an ArchParams, not {arch!r}")


class EncodeError(ValueError):
    pass


def encode(op: Op, **fields: int) -> int:
    """Pack an instruction into a 256-bit integer; every field must fit."""
    op = Op(op)
    if op is Op.ILLEGAL:
        raise EncodeError("ILLEGAL is not an encodable instruction")
    fmt = {f.name: f for f in FORMATS[op]}
    unknown = set(fields) - set(fmt)
    if unknown:
        raise EncodeError(f"{op.name} has no field {sorted(unknown)[0]!r}")
    word = int(op)
    for name, f in fmt.items():
        v = fields.get(name, 0)
        if not isinstance(v, int) or v < 0 or v > f.mask:
            raise EncodeError(f"{op.name} field {name}={v!r} does not fit in {f.width} bits")
        word |= v << f.lsb
    return word


def reserved_mask(op: Op) -> int:
    used = (1 << OPCODE_BITS) - 1
    for f in FORMATS[op]:
        used |= f.mask << f.lsb
    return ((1 << WORD_BITS) - 1) & ~used


@dataclass(frozen=True)
class Decoded:
    op: Op | None          # None: unknown opcode
    fields: dict = field(default_factory=dict)
    reserved_ok: bool = True


def decode(word: int) -> Decoded:
    opcode = word & ((1 << OPCODE_BITS) - 1)
    try:
        op = Op(opcode)
    except ValueError:
        return Decoded(None, {"opcode": opcode}, False)
    if op is Op.ILLEGAL:
        return Decoded(op, {}, False)
    vals = {f.name: (word >> f.lsb) & f.mask for f in FORMATS[op]}
    return Decoded(op, vals, (word & reserved_mask(op)) == 0)


def word_to_hex(word: int) -> str:
    return f"{word:0{WORD_BITS // 4}x}"


# ---------------------------------------------------------------- prose
# What each instruction does, in words (docs/isa.md is generated from these;
# the golden model, model/golden.py, is the executable definition).

OP_DOCS: dict[Op, str] = {
    Op.VERSION: """\
Must be the first instruction of every program; `version` is the ISA version
the program is written for. This hardware generation runs versions 1 and 2
(register `ISA_VERSION` reads the newest, 2); any other `version` stops the
program with `ILLEGAL`/`VERSION_MISMATCH`, and so does a program whose first
word is not `VERSION`. A program that declares version 1 means exactly what
it meant on version-1 hardware: the opcodes added in version 2
(`COPY_ADD_F32`, `COPY_ADD_BF16`) are `ILLEGAL`/`BAD_OPCODE` in it. A later
`VERSION` in a program is a no-op if it names the program's version, else
`VERSION_MISMATCH`.""",
    Op.COPY: """\
Issues a 2-D copy on channel `chan`, translated in context `ctx` of the local
MMU: for row i in 0..rows-1, `row_bytes` bytes from virtual
`src + i*src_stride` to virtual `dst + i*dst_stride`. The byte stream is row
by row, ascending. Each byte's source address is translated (needs read
permission and must map to the local device, else `REMOTE_READ`) and its
destination address is translated (needs write permission; the entry's `dev`
names the device written, which may be remote). The copy stops at the first
byte whose source or destination cannot be translated (the source is checked
first): every byte before it is written, no byte from it on; a fault record
(device, channel, context, virtual address, cause) is queued; the channel is
then in error and discards its later descriptors. Because translation is per
page, the faulting byte is always the first byte of the copy or the first
byte of a page on the failing side. `rows == 0` or `row_bytes == 0` is a copy
of nothing. Copies whose source and destination bytes overlap have
unspecified results (the compiler never emits them). Copies on different
channels may complete in any order; a later descriptor on a channel starts
after the earlier ones on that channel. `tag` is reported back in the
channel's status when the copy completes.""",
    Op.COPY_ADD_F32: """\
ISA v2. A COPY (same fields, translation, faults, ordering and completion)
whose destination write is a read-add-write: each little-endian f32 element
of the destination becomes the IEEE 754 binary32 sum of its old value and the
source's element at the same position, rounded to nearest, ties to even.
Subnormal inputs and results are kept (no flush to zero); an infinity plus a
finite number is that infinity, `+inf + -inf` is NaN, and every NaN result is
the canonical quiet NaN `0x7FC00000` (a NaN's payload is not kept). The add
happens at the destination device's memory, so a remote reduction crosses the
network once. `src`, `dst`, `row_bytes`, `src_stride` and `dst_stride` must
be multiples of 4 (`ILLEGAL`/`MISALIGNED`), so no element straddles a page
and a fault stops a copy between whole elements. Elements a copy adds
into twice (for example `dst_stride = 0`) are summed in the copy's byte order.
Two copies that add into the same element with nothing ordering them (a FENCE
and, across devices, a SIGNAL/WAIT) are summed in an unspecified order, so
the result may differ in the last bits; the compiler never emits them.""",
    Op.COPY_ADD_BF16: """\
ISA v2. As `COPY_ADD_F32`, with bfloat16 elements (2 bytes: f32's sign and
exponent, 7 fraction bits): each sum is the exact sum rounded once to bf16,
nearest, ties to even; the canonical NaN is `0x7FC0`. `src`, `dst`,
`row_bytes`, `src_stride` and `dst_stride` must be multiples of 2.""",
    Op.FENCE: """\
Waits until every earlier COPY on the channels in `mask` (0: all channels)
has completed, its bytes visible at the destination device. If one of those
channels faulted, the program stops with `FAULT` at the FENCE.""",
    Op.REMAP: """\
Sets the mapping of one page: virtual `[va, va+page)` of context `ctx` to
physical `[pa, pa+page)` of device `dev`, with permissions `perm`. `va` and
`pa` must be aligned to the page size (`ILLEGAL`/`MISALIGNED`),
`dev < devices` (`BAD_DEVICE`), `ctx < contexts` (`BAD_CONTEXT`). With
`staged=0` the mapping is immediate; before changing it the coprocessor waits
for all outstanding copies (an implicit fence, without the fault check), so a
copy is translated by the mapping that was current when it was issued. With
`staged=1` the entry goes to the context's shadow table, invisible to
translation until `COMMIT`.

TLB placement (architectural, the golden model and RTL agree): an existing
valid entry with the same (ctx, staged, size, va) is overwritten in place;
otherwise the lowest-numbered invalid entry is used; otherwise the entry at
the round-robin victim pointer is evicted and the pointer advances (mod
`tlb_entries`). Translation of an address in context c uses the valid,
non-staged entries of c that contain it; if several do, the lowest-numbered
wins.""",
    Op.INVAL: """\
Invalidates the entry matching (ctx, staged, size, va), if any (implicit wait
as for REMAP when `staged=0`).""",
    Op.SIGNAL: """\
Increments semaphore `sem` of device `dev` (may be the local device). It does
not wait for earlier copies: put a FENCE before it.""",
    Op.WAIT: """\
Waits until the local semaphore `sem` is at least `count`, then subtracts
`count`. If the whole system is quiescent (every device stopped, halted or
waiting unsatisfied, nothing in flight), each waiting device stops with
`ABORTED`/`DEADLOCK` at its WAIT.""",
    Op.COMMIT: """\
Atomically makes the context's shadow table its active table: its active
entries are invalidated and its staged entries become active. It is illegal
(`COMMIT_UNFENCED`) if a COPY was issued on any channel since the last FENCE
covering that channel. If any copy faulted, the program stops with `FAULT` at
the COMMIT and nothing is committed.

A successful COMMIT adds to the device's `BYTES_REMAPPED` counter
(`docs/regmap.md`) the page sizes of the staged entries it activates that map
the local device's memory (`dev` = this device), whether or not the page lies
within `mem_bytes`. The staged table it activates is the one every earlier
instruction left: a staged REMAP or INVAL right before the COMMIT counts (the
RTL sends a COMMIT only once the MMU has carried out every earlier command).
Immediate REMAPs and staged entries of other devices are not counted.""",
    Op.HALT: """\
Waits for all copies; stops with `HALTED`, or `FAULT` if a copy faulted.""",
}

STATUS_DOCS: dict[Status, str] = {
    Status.IDLE: "not started since reset",
    Status.RUNNING: "executing",
    Status.HALTED: "reached HALT, every copy completed without fault",
    Status.FAULT: "a copy faulted; stopped at the FENCE, COMMIT or HALT that observed it",
    Status.ILLEGAL: "illegal instruction or illegal use; stopped at that instruction",
    Status.ABORTED: "blocked in WAIT when the whole system went quiescent",
}

CAUSE_DOCS: dict[Cause, str] = {
    Cause.NONE: "no fault",
    Cause.NOT_MAPPED: "translation: no valid active entry contains the address",
    Cause.NO_READ: "translation: the source page has no read permission",
    Cause.NO_WRITE: "translation: the destination page has no write permission",
    Cause.REMOTE_READ: "translation: the source page maps to another device",
    Cause.OUT_OF_RANGE: "translation: the physical address is at or beyond `mem_bytes`",
    Cause.BAD_OPCODE: "unknown opcode, the all-zero word, or an opcode newer than the program's version",
    Cause.RESERVED_BITS: "a bit outside the opcode's fields is set",
    Cause.BAD_CHANNEL: "`chan` >= `channels`",
    Cause.BAD_CONTEXT: "`ctx` >= `contexts`",
    Cause.MISALIGNED: "`va` or `pa` not aligned to the page size; a reduce copy's `src`, `dst`, `row_bytes` or a stride not a multiple of its element",
    Cause.VERSION_MISMATCH: "first instruction not VERSION, or a version this hardware does not run",
    Cause.COMMIT_UNFENCED: "COMMIT after a COPY that no FENCE covered",
    Cause.BAD_DEVICE: "`dev` >= `devices`",
    Cause.BAD_SEMAPHORE: "`sem` >= `semaphores`",
    Cause.ADDRESS_WIDTH: "a `src`, `dst`, `va` or `pa` bit set at or above `addr_bits`",
    Cause.PC_OVERFLOW: "the program ran past the last instruction word",
    Cause.DEADLOCK: "WAIT aborted: the whole system went quiescent",
}

ARCH_DOCS: dict[str, str] = {
    "devices": "devices on the interconnect",
    "mem_bytes": "bytes of physical memory per device, byte addressed, little-endian",
    "page_sizes": "the four page sizes a `size` field (2 bits) selects, ascending powers of two",
    "tlb_entries": "MMU entries per device (software-managed: there is no page walker, a miss is a fault)",
    "contexts": "MMU address spaces",
    "channels": "DMA channels per device",
    "semaphores": "counting semaphores per device, incremented by `SIGNAL`s from any device",
    "imem_words": "instruction-memory words per device; a program starts at word 0",
    "addr_bits": f"implemented virtual and physical address bits (at most the {VA_BITS} of the word)",
}

# ---------------------------------------------------------------- compatibility
# Which hardware runs which programs (docs/isa.md's "Compatibility" section and
# the manifest check of ``python -m gen run`` are generated from / read these).

#: The generation of the hardware in ``hw/``. Generation 1 ran ISA v1 only;
#: generation 2 added the reduce-on-write copies (ISA v2) and still runs v1.
HW_GENERATION = 2

#: Hardware generation -> the ISA versions it runs, oldest first.
GENERATION_ISA: dict[int, tuple[int, ...]] = {
    1: (1,),
    2: (1, 2),
}

assert GENERATION_ISA[HW_GENERATION] == SUPPORTED_VERSIONS
assert max(SUPPORTED_VERSIONS) == ISA_VERSION
