"""The host port: an AXI4-Lite slave in front of one device's coprocessor.

Why AXI4-Lite rather than Wishbone: the hosts this IP sits next to (an SoC
interconnect, a Zynq / MicroBlaze / RISC-V control core, a PCIe bridge) and
the verification IP its users already own speak AMBA; AXI4-Lite is the
common denominator of them all, its five independent channels take an
address and its data in any order, and every register access gets an
explicit response (``SLVERR`` for a write to a read-only or unmapped
register, or an instruction-memory write while the program runs).

The register map is the table :data:`REGISTERS` (``Register`` / ``Field``
records); the read multiplexer and the write decoder are generated from it
(every readable field has a source, every writable field a target, matched
by ``"REGISTER.field"``), and so is ``docs/regmap.md``
(:func:`regmap_markdown`, ``python -m gen regmap``), so the documentation
cannot drift from the hardware. Host software uses the same table:
``register(name).offset``, ``field(reg, name)``, ``decode(reg, value)`` and
``encode(reg, **fields)``. All registers are 32 bits wide, at word-aligned
byte offsets; 64-bit counters are two registers (``_LO`` first).

Byte strobes are honoured: a write changes only the enabled bytes of a
held register (``IMEM_ADDR``, ``IMEM_DATA*``, ``MEM_ADDR``, ``MEM_WDATA*``,
``TLB_INDEX``); the memory window's stores carry the enabled bytes to the
memory as byte enables; a write with an effect acts only when it enables a
byte of its field. Internal streams keep the ``lib.stream`` contract: a
store or load through the memory window, or an instruction word, is offered
with ``valid`` held (and its payload stable) until ``ready``, and the write
response waits for it.

Loading a program: write ``IMEM_ADDR`` (word index), then ``IMEM_DATA0`` ..
``IMEM_DATA7`` (the 256-bit word, least significant 32 bits first); the write
of ``IMEM_DATA7`` stores the word and increments ``IMEM_ADDR``. Then write
``CTRL.start``, poll ``STATUS`` until it is not ``RUNNING``, read the
counters, and pop fault records (``FAULT_INFO`` / ``FAULT_VA`` show the oldest,
a write to ``FAULT_POP`` removes it).
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from .coprocessor import CauseCode, Coprocessor, ImemWrite, StatusCode
from .dma import DmaFault
from .isa import ISA_VERSION, WORD_BITS, Cause, Status
from .lib import BUS_WIDTHS, check_bus_width
from .memory import ReadPortSignature, WriteRequest
from .mmu import TlbEntry

__all__ = ["AxiLiteSignature", "Field", "Register", "REGISTERS", "ADDR_WIDTH", "MAGIC",
           "HostPort", "regmap_markdown", "register", "field", "decode", "encode", "OKAY",
           "SLVERR"]

#: Byte address width of the host port.
ADDR_WIDTH = 12
#: Value of the ``ID`` register: ASCII "RSIP".
MAGIC = 0x52534950
MAX_CHANNELS = 16
MAX_MEM_LANES = max(BUS_WIDTHS) // 32     # MEM_WDATA / MEM_RDATA lanes of the widest bus

OKAY, SLVERR = 0, 2


class AxiLiteSignature(wiring.Signature):
    """AXI4-Lite, 32-bit data, as seen by the master (the host)."""
    def __init__(self, addr_width=ADDR_WIDTH):
        self._addr_width = addr_width
        super().__init__({
            "awaddr": Out(addr_width), "awprot": Out(3), "awvalid": Out(1), "awready": In(1),
            "wdata": Out(32), "wstrb": Out(4), "wvalid": Out(1), "wready": In(1),
            "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            "araddr": Out(addr_width), "arprot": Out(3), "arvalid": Out(1), "arready": In(1),
            "rdata": In(32), "rresp": In(2), "rvalid": In(1), "rready": Out(1),
        })

    @property
    def addr_width(self):
        return self._addr_width

    def __eq__(self, other):
        return type(other) is type(self) and other.addr_width == self.addr_width

    def __repr__(self):
        return f"AxiLiteSignature({self.addr_width})"


@dataclass(frozen=True)
class Field:
    """A register field: ``name``, bits ``[lsb, lsb + width)``, description."""
    name: str
    lsb: int
    width: int
    doc: str = ""

    @property
    def msb(self) -> int:
        """The field's most significant bit."""
        return self.lsb + self.width - 1

    @property
    def mask(self) -> int:
        """The field's bits within the 32-bit register."""
        return ((1 << self.width) - 1) << self.lsb

    @property
    def byte_lanes(self) -> range:
        """The byte lanes (WSTRB bits) the field occupies."""
        return range(self.lsb // 8, self.msb // 8 + 1)

    def extract(self, value: int) -> int:
        """The field's value within the register value ``value``."""
        return (int(value) >> self.lsb) & ((1 << self.width) - 1)

    def insert(self, value: int) -> int:
        """``value`` placed at the field's position (``ValueError`` if it does not fit)."""
        if not isinstance(value, int) or not 0 <= value < 1 << self.width:
            raise ValueError(f"Field {self.name!r} holds {self.width} bits, not {value!r}")
        return value << self.lsb


@dataclass(frozen=True)
class Register:
    """A 32-bit register: ``name``, byte ``offset``, ``access`` (RO, WO, RW), fields."""
    name: str
    offset: int
    access: str
    doc: str
    fields: tuple[Field, ...] = ()

    @property
    def writable(self) -> bool:
        return self.access != "RO"

    def field(self, name: str) -> Field:
        """The field called ``name`` (``KeyError`` quoting it if there is none)."""
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"register {self.name} has no field {name!r}")

    def decode(self, value: int) -> dict[str, int]:
        """``{field name: value}`` of a 32-bit value read from this register."""
        return {f.name: f.extract(value) for f in self.fields}

    def encode(self, **fields: int) -> int:
        """The 32-bit value with the given fields set (the others zero)."""
        out = 0
        for name, v in fields.items():
            out |= self.field(name).insert(v)
        return out


def _regs():
    out = [
        Register("ID", 0x000, "RO", 'Identification: ASCII "RSIP".',
                 (Field("magic", 0, 32, f"0x{MAGIC:08x}"),)),
        Register("ISA_VERSION", 0x004, "RO", "ISA version implemented (the VERSION instruction "
                 "must name it).", (Field("version", 0, 16, f"{ISA_VERSION}"),)),
        Register("CTRL", 0x008, "WO", "Control.",
                 (Field("start", 0, 1, "write 1: start the program at word 0 (ignored while "
                        "running); clears counters, semaphores and fault records"),)),
        Register("STATUS", 0x00C, "RO", "Coprocessor status.",
                 (Field("status", 0, 3, "Status: " + ", ".join(f"{s.value} {s.name}" for s in Status)),
                  Field("cause", 8, 6, "Cause (hw.isa.Cause), see below"),
                  Field("fault_overflow", 16, 1, "a fault record was dropped (FIFO full)"),
                  Field("fault_valid", 17, 1, "FAULT_INFO / FAULT_VA hold a record"))),
        Register("PC", 0x010, "RO", "Program counter: the instruction executing, or where the "
                 "program stopped.", (Field("pc", 0, 16),)),
        Register("DEVICE", 0x014, "RO", "This device's index on the interconnect.",
                 (Field("index", 0, 8),)),
        Register("IMEM_ADDR", 0x018, "RW", "Instruction-memory word written by IMEM_DATA7; "
                 "increments after each word.", (Field("addr", 0, 16),)),
        Register("FAULT_INFO", 0x01C, "RO", "Oldest fault record (valid when "
                 "STATUS.fault_valid).",
                 (Field("chan", 0, 4, "DMA channel"), Field("ctx", 8, 4, "context"),
                  Field("cause", 16, 6, "translation cause (1..5)"),
                  Field("valid", 31, 1, "a record is present"))),
        Register("FAULT_VA", 0x020, "RO", "Virtual address of the oldest fault record "
                 "(bits 31:0).", (Field("va", 0, 32),)),
        Register("FAULT_POP", 0x024, "WO", "Write any value: remove the oldest fault record.",
                 (Field("pop", 0, 32, "any value"),)),
        Register("FAULT_VA_HI", 0x028, "RO", "Virtual address of the oldest fault record "
                 "(bits 47:32).", (Field("va", 0, 16),)),
    ]
    for i in range(8):
        out.append(Register(f"IMEM_DATA{i}", 0x040 + 4 * i, "WO",
                            f"Instruction word bits {32 * i + 31}:{32 * i} (held: a byte write "
                            "changes one byte)"
                            + ("; writing it stores the word at IMEM_ADDR (SLVERR while "
                               "running)" if i == 7 else "") + ".",
                            (Field("bits", 0, 32),)))
    params = [("P_DEVICES", "devices"), ("P_MEM_BYTES", "mem_bytes"),
              ("P_PAGE_SIZE0", "page_sizes[0]"), ("P_PAGE_SIZE1", "page_sizes[1]"),
              ("P_PAGE_SIZE2", "page_sizes[2]"), ("P_PAGE_SIZE3", "page_sizes[3]"),
              ("P_TLB_ENTRIES", "tlb_entries"), ("P_CONTEXTS", "contexts"),
              ("P_CHANNELS", "channels"), ("P_SEMAPHORES", "semaphores"),
              ("P_IMEM_WORDS", "imem_words"), ("P_ADDR_BITS", "addr_bits"),
              ("P_BUS_BITS", "DMA / memory bus width in bits")]
    for i, (name, what) in enumerate(params):
        out.append(Register(name, 0x080 + 4 * i, "RO", f"Hardware parameter: {what}.",
                            (Field("value", 0, 32),)))
    counters = [("CYCLES", "cycles spent running since the last start"),
                ("BYTES_REMAPPED", "zero-copy bytes made active by COMMITs")]
    for i, (name, what) in enumerate(counters):
        out.append(Register(f"{name}_LO", 0x0C0 + 8 * i, "RO", f"Counter: {what} (bits 31:0).",
                            (Field("value", 0, 32),)))
        out.append(Register(f"{name}_HI", 0x0C4 + 8 * i, "RO", f"Counter: {what} (bits 63:32).",
                            (Field("value", 0, 32),)))
    out.append(Register("DESCRIPTORS", 0x0D0, "RO", "Counter: COPY instructions issued since "
                        "the last start.", (Field("value", 0, 32),)))
    for c in range(MAX_CHANNELS):
        out.append(Register(f"CHAN{c}_BYTES_LO", 0x100 + 8 * c, "RO",
                            f"Counter: bytes written by DMA channel {c} (bits 31:0; 0 if the "
                            "channel does not exist).", (Field("value", 0, 32),)))
        out.append(Register(f"CHAN{c}_BYTES_HI", 0x104 + 8 * c, "RO",
                            f"Counter: bytes written by DMA channel {c} (bits 63:32).",
                            (Field("value", 0, 32),)))
    out.append(Register("MEM_ADDR", 0x200, "RW", "Data-memory window: word index (bus-width words) "
                        "of the next MEM_WDATA store or MEM_READ load; increments after each.",
                        (Field("addr", 0, 32),)))
    out.append(Register("MEM_READ", 0x204, "WO", "Write any value: load the word at MEM_ADDR into "
                        "MEM_RDATA0.. and increment MEM_ADDR (the write response comes once the "
                        "word is there).", (Field("load", 0, 32, "any value"),)))
    for i in range(MAX_MEM_LANES):
        out.append(Register(f"MEM_WDATA{i}", 0x210 + 4 * i, "WO",
                            f"Data-memory word bits {32 * i + 31}:{32 * i}; writing the lane of the "
                            "bus's top 32 bits stores, at MEM_ADDR, the bytes written to the lanes "
                            "since the last store (byte enables from WSTRB), and increments "
                            "MEM_ADDR.", (Field("bits", 0, 32),)))
    for i in range(MAX_MEM_LANES):
        out.append(Register(f"MEM_RDATA{i}", 0x230 + 4 * i, "RO",
                            f"Bits {32 * i + 31}:{32 * i} of the word MEM_READ loaded.",
                            (Field("value", 0, 32),)))
    out.append(Register("TLB_INDEX", 0x250, "RW", "TLB entry shown by TLB_INFO / TLB_VPN / TLB_PPN "
                        "(an index past the last entry shows an invalid, all-zero entry).",
                        (Field("index", 0, 16),)))
    out.append(Register("TLB_INFO", 0x254, "RO", "The TLB entry at TLB_INDEX.",
                        (Field("valid", 0, 1), Field("staged", 1, 1, "in the shadow table"),
                         Field("size", 2, 2, "page-size index"), Field("perm", 4, 2, "bit 0 read, bit 1 write"),
                         Field("ctx", 8, 4, "context"), Field("dev", 16, 8, "device"))))
    out.append(Register("TLB_VPN", 0x258, "RO", "Virtual page number of the entry, in smallest pages.",
                        (Field("value", 0, 32),)))
    out.append(Register("TLB_PPN", 0x25C, "RO", "Physical page number of the entry, in smallest pages.",
                        (Field("value", 0, 32),)))
    return tuple(out)


#: The register map, in address order.
REGISTERS: tuple[Register, ...] = _regs()


_BY_NAME = {r.name: r for r in REGISTERS}


def register(name: str) -> Register:
    """The register called ``name`` (``KeyError`` quoting it if there is none)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no register {name!r}") from None


def field(reg: str, name: str) -> Field:
    """The field ``name`` of register ``reg``: ``field("STATUS", "cause").lsb``."""
    return register(reg).field(name)


def decode(reg: str, value: int) -> dict[str, int]:
    """``{field: value}`` of a 32-bit value read from register ``reg``."""
    return register(reg).decode(value)


def encode(reg: str, **fields: int) -> int:
    """The 32-bit value of register ``reg`` with the given fields (the others zero)."""
    return register(reg).encode(**fields)


def regmap_markdown() -> str:
    """``docs/regmap.md``: the register map, generated from :data:`REGISTERS`."""
    lines = [
        "# Host port register map",
        "",
        "Generated from `hw/hostport.py` (`REGISTERS`) by `python -m gen regmap`; do not edit.",
        "`tests/test_hostport.py` fails when this file is out of date.",
        "",
        f"AXI4-Lite slave, 32-bit data, {ADDR_WIDTH}-bit byte addresses. Reads of unmapped "
        "addresses and writes to read-only or unmapped ones answer `SLVERR` (reads return 0); "
        "reads of write-only registers return 0.",
        "",
        "Byte strobes (`WSTRB`) are honoured: a write changes only the enabled bytes of a "
        "register (and of the memory window: the bytes of a `MEM_WDATA` store carry byte "
        "enables to the memory). A write that does something (`CTRL`, `FAULT_POP`, `MEM_READ`, "
        "`IMEM_DATA7`, the top `MEM_WDATA` lane) acts only when it enables at least one byte of "
        "the field; a write with no byte enabled changes nothing and answers `OKAY`.",
        "",
        "| offset | name | access | description |",
        "|---|---|---|---|",
    ]
    for r in REGISTERS:
        lines.append(f"| 0x{r.offset:03x} | `{r.name}` | {r.access} | {r.doc} |")
    lines += ["", "## Fields", ""]
    for r in REGISTERS:
        if not r.fields or (len(r.fields) == 1 and r.fields[0].width == 32):
            continue
        lines.append(f"### `{r.name}` (0x{r.offset:03x})")
        lines.append("")
        lines.append("| bits | field | description |")
        lines.append("|---|---|---|")
        for f in r.fields:
            bits = f"{f.lsb}" if f.width == 1 else f"{f.lsb + f.width - 1}:{f.lsb}"
            lines.append(f"| {bits} | `{f.name}` | {f.doc} |")
        lines.append("")
    lines += ["## Cause codes", "", "| value | name |", "|---|---|"]
    lines += [f"| {c.value} | `{c.name}` |" for c in Cause]
    lines.append("")
    return "\n".join(lines)


def _pack(reg, sources):
    """The 32-bit read value of ``reg``: its fields' sources at their positions."""
    parts, pos = [], 0
    for f in sorted(reg.fields, key=lambda f: f.lsb):
        if f.lsb > pos:
            parts.append(Const(0, f.lsb - pos))
        parts.append(Value.cast(sources[f"{reg.name}.{f.name}"])[:f.width])
        if len(parts[-1]) < f.width:
            parts.append(Const(0, f.width - len(parts[-1])))
        pos = f.lsb + f.width
    if pos < 32:
        parts.append(Const(0, 32 - pos))
    return Cat(*parts)


class HostPort(wiring.Component):
    """AXI4-Lite register interface of one coprocessor.

    Parameters
    ----------
    coprocessor : :class:`hw.coprocessor.Coprocessor`
        The coprocessor served (for its parameters: ``arch``, ``device``,
        ``counter_width``).
    data_width : int
        The DMA / memory bus width, reported in ``P_BUS_BITS``.

    Interface attributes
    --------------------
    bus : ``In(AxiLiteSignature(ADDR_WIDTH))``
        The AXI4-Lite slave.
    start : ``Out(1)``
        Pulsed by a write of ``CTRL.start``, from a register (the cycle after
        the write executes).
    imem_w : ``Out(stream.Signature(ImemWrite(imem_words)))``
        Instruction-memory writes, to the coprocessor; ``valid`` is held until
        ``ready`` (a write of ``IMEM_DATA7`` while the program runs is refused
        with ``SLVERR`` before it is offered).
    fault_rd : ``In(stream.Signature(DmaFault(...)))``
        The coprocessor's fault records; popped by ``FAULT_POP``.
    status, cause, pc, fault_overflow, cycles, descriptors, bytes_remapped : ``In``
        From the coprocessor's outputs of the same names.
    chan_bytes : ``In(counter_width).array(channels)``
        From the coprocessor.
    mem_w : ``Out(stream.Signature(WriteRequest))``
        Data-memory window stores (a memory write port of the device), with the
        byte enables the host's strobes gave; ``valid`` is held until ``ready``.
    mem_r : ``Out(ReadPortSignature)``
        Data-memory window loads (a memory read port of the device); the request's
        ``valid`` is held until ``ready``.
    tlb_index, tlb_entry : ``Out`` / ``In``
        To the MMU's TLB read-back port.
    """

    def __init__(self, coprocessor, *, data_width=64):
        if not isinstance(coprocessor, Coprocessor):
            raise TypeError(f"coprocessor must be a Coprocessor, not {coprocessor!r}")
        check_bus_width(data_width)
        arch = coprocessor.arch
        if arch.channels > MAX_CHANNELS:
            raise ValueError(f"At most {MAX_CHANNELS} channels, not {arch.channels!r}")
        self._arch = arch
        self._device = coprocessor.device
        self._data_width = data_width
        mem_addr_width = max(1, ceil_log2(arch.mem_bytes) - exact_log2(data_width // 8))
        self._mem_addr_width = mem_addr_width
        cw = coprocessor.counter_width
        C = arch.channels
        super().__init__({
            "bus": In(AxiLiteSignature(ADDR_WIDTH)),
            "start": Out(1),
            "imem_w": Out(stream.Signature(ImemWrite(arch.imem_words))),
            "fault_rd": In(stream.Signature(DmaFault(arch, C))),
            "status": In(StatusCode),
            "cause": In(CauseCode),
            "pc": In(range(arch.imem_words + 1)),
            "fault_overflow": In(1),
            "cycles": In(cw),
            "descriptors": In(32),
            "bytes_remapped": In(cw),
            "chan_bytes": In(cw).array(C),
            "mem_w": Out(stream.Signature(WriteRequest(mem_addr_width, data_width))),
            "mem_r": Out(ReadPortSignature(mem_addr_width, data_width)),
            "tlb_index": Out(range(max(2, arch.tlb_entries))),
            "tlb_entry": In(TlbEntry(arch)),
        })

    arch = property(lambda self: self._arch, doc="The architectural parameters.")

    def elaborate(self, platform):
        m = Module()
        h = self._held_state(m)
        self._read_path(m, self._read_sources(h))
        self._write_path(m, h)
        return m

    def _held_state(self, m):
        """The registers behind the writable fields, and the memory window's read side."""
        lanes = self._data_width // 32
        h = SimpleNamespace(
            imem_addr=Signal(field("IMEM_ADDR", "addr").width),
            imem_data=[Signal(32, name=f"imem_data{i}") for i in range(WORD_BITS // 32)],
            imem_offered=Signal(),        # an instruction word is offered, not yet taken
            mem_addr=Signal(field("MEM_ADDR", "addr").width),
            # all 16 bits of the register map: an index past the last entry reads as invalid
            tlb_index=Signal(field("TLB_INDEX", "index").width),
            tlb_in_range=Signal(),
            wlanes=[Signal(32, name=f"mem_wdata{i}") for i in range(lanes - 1)],
            wbe=[Signal(4, name=f"mem_wbe{i}") for i in range(lanes - 1)],
            rbuf=Signal(self._data_width),
            rd_pending=Signal(),          # MEM_READ: the word is requested, not yet in rbuf
            running=Signal(),
        )
        m.d.comb += [self.mem_r.req.payload.eq(h.mem_addr), self.mem_r.rsp.ready.eq(1),
                     self.mem_w.p.addr.eq(h.mem_addr), self.imem_w.p.addr.eq(h.imem_addr),
                     h.running.eq(self.status == StatusCode.RUNNING),
                     self.tlb_index.eq(h.tlb_index), h.tlb_in_range.eq(h.tlb_index < self._arch.tlb_entries)]
        with m.If(self.mem_r.rsp.valid):
            m.d.sync += [h.rbuf.eq(self.mem_r.rsp.payload), h.rd_pending.eq(0)]
        return h

    def _read_sources(self, h):
        """``{"REG.field": value}`` for every readable field."""
        arch = self._arch
        fr = self.fault_rd.p

        def lo_hi(v):
            v = Value.cast(v)
            return v[:32], (v[32:] if len(v) > 32 else Const(0, 32))

        params = {"P_DEVICES": arch.devices, "P_MEM_BYTES": arch.mem_bytes,
                  "P_TLB_ENTRIES": arch.tlb_entries, "P_CONTEXTS": arch.contexts,
                  "P_CHANNELS": arch.channels, "P_SEMAPHORES": arch.semaphores,
                  "P_IMEM_WORDS": arch.imem_words, "P_ADDR_BITS": arch.addr_bits,
                  "P_BUS_BITS": self._data_width}
        for i in range(4):
            params[f"P_PAGE_SIZE{i}"] = arch.page_sizes[i]
        sources = {
            "ID.magic": Const(MAGIC, 32), "ISA_VERSION.version": Const(ISA_VERSION, 16),
            "STATUS.status": Value.cast(self.status), "STATUS.cause": Value.cast(self.cause),
            "STATUS.fault_overflow": self.fault_overflow, "STATUS.fault_valid": self.fault_rd.valid,
            "PC.pc": self.pc, "DEVICE.index": Const(self._device, 8),
            "IMEM_ADDR.addr": h.imem_addr,
            "FAULT_INFO.chan": fr.chan, "FAULT_INFO.ctx": fr.ctx,
            "FAULT_INFO.cause": Value.cast(fr.cause), "FAULT_INFO.valid": self.fault_rd.valid,
            "FAULT_VA.va": fr.va[:32],
            "FAULT_VA_HI.va": fr.va[32:] if len(fr.va) > 32 else Const(0, 16),
            "DESCRIPTORS.value": self.descriptors,
            "MEM_ADDR.addr": h.mem_addr, "TLB_INDEX.index": h.tlb_index,
        }
        e = self.tlb_entry
        for k, v in {"TLB_INFO.valid": e.valid, "TLB_INFO.staged": e.staged, "TLB_INFO.size": e.size,
                     "TLB_INFO.perm": e.perm, "TLB_INFO.ctx": e.ctx, "TLB_INFO.dev": e.dev,
                     "TLB_VPN.value": e.vpn, "TLB_PPN.value": e.ppn}.items():
            sources[k] = Mux(h.tlb_in_range, v, 0)
        lanes = self._data_width // 32
        for i in range(MAX_MEM_LANES):
            sources[f"MEM_RDATA{i}.value"] = h.rbuf[32 * i:32 * i + 32] if i < lanes else Const(0, 32)
        for k, v in params.items():
            sources[f"{k}.value"] = Const(v & 0xFFFF_FFFF, 32)
        for name, sig in (("CYCLES", self.cycles), ("BYTES_REMAPPED", self.bytes_remapped)):
            sources[f"{name}_LO.value"], sources[f"{name}_HI.value"] = lo_hi(sig)
        for c in range(MAX_CHANNELS):
            lo, hi = lo_hi(self.chan_bytes[c]) if c < arch.channels else (Const(0, 32),) * 2
            sources[f"CHAN{c}_BYTES_LO.value"], sources[f"CHAN{c}_BYTES_HI.value"] = lo, hi
        return sources

    def _read_path(self, m, sources):
        """AR -> R: one read at a time, answered the cycle after AR; R held until RREADY."""
        bus = self.bus
        rvalid = Signal()
        rdata = Signal(32)
        rresp = Signal(2)
        m.d.comb += [bus.rvalid.eq(rvalid), bus.rdata.eq(rdata), bus.rresp.eq(rresp),
                     bus.arready.eq(~rvalid)]
        with m.If(rvalid & bus.rready):
            m.d.sync += rvalid.eq(0)
        with m.If(bus.arvalid & ~rvalid):
            m.d.sync += [rvalid.eq(1), rdata.eq(0), rresp.eq(SLVERR)]
            with m.Switch(bus.araddr[2:]):
                for r in REGISTERS:
                    with m.Case(r.offset >> 2):
                        m.d.sync += rresp.eq(OKAY)
                        if r.access != "WO":
                            m.d.sync += rdata.eq(_pack(r, sources))

    def _write_path(self, m, h):
        """AW and W, in either order, held until both are there; then the write is decoded
        (generated from :data:`REGISTERS`: every writable field has a target), executed a
        cycle later, and answered on B once every stream it drives has taken its
        transfer."""
        bus = self.bus
        aw_held, aw_addr = Signal(), Signal(ADDR_WIDTH)
        w_held, w_data, w_strb = Signal(), Signal(32), Signal(4)
        bvalid, bresp = Signal(), Signal(2)
        m.d.comb += [bus.awready.eq(~aw_held), bus.wready.eq(~w_held),
                     bus.bvalid.eq(bvalid & ~h.rd_pending), bus.bresp.eq(bresp)]
        with m.If(bus.awvalid & ~aw_held):
            m.d.sync += [aw_held.eq(1), aw_addr.eq(bus.awaddr)]
        with m.If(bus.wvalid & ~w_held):
            m.d.sync += [w_held.eq(1), w_data.eq(bus.wdata), w_strb.eq(bus.wstrb)]
        with m.If(bus.bvalid & bus.bready):
            m.d.sync += bvalid.eq(0)

        w = _WriteBeat(w_data, w_strb)
        targets = self._write_targets(m, h, w)
        m.d.sync += self.start.eq(0)          # a pulse: high only after a CTRL.start write
        # the address is decoded into a register (one flag per writable register) in
        # the cycle after both halves are held, and the write executes from it: the
        # address comparison never reaches a target's stream or the coprocessor.
        # A flag is high only while its write executes (cleared with ``decoded``),
        # so a target starts from its own flip-flop, placed beside it, not from
        # ``decoded`` and a LUT shared by targets across the die (FPGA timing)
        writable = [r for r in REGISTERS if r.writable]
        sel = Signal(len(writable))
        decoded = Signal()
        with m.If(aw_held & w_held & ~bvalid & ~decoded):
            m.d.sync += [decoded.eq(1),
                         sel.eq(Cat(*[aw_addr[2:] == r.offset >> 2 for r in writable]))]
        for k, r in enumerate(writable):
            with m.If(sel[k]):
                m.d.comb += w.ok.eq(1)
                for f in r.fields:
                    targets[f"{r.name}.{f.name}"](f)
        with m.If(decoded & ~w.stall):
            m.d.sync += [aw_held.eq(0), w_held.eq(0), bvalid.eq(1), decoded.eq(0), sel.eq(0),
                         bresp.eq(Mux(w.ok, OKAY, SLVERR))]

    def _write_targets(self, m, h, w):
        """``{"REG.field": write(field)}`` for every writable field. A handler emits the
        statements of a write to its field; one that drives a stream holds ``valid`` (and
        sets ``w.stall``) until ``ready``, and only then moves its address on."""
        arch = self._arch
        mem_w, mem_r, imem_w = self.mem_w, self.mem_r, self.imem_w

        # the words' payloads are driven whatever the decoding says (valid alone
        # marks a write): driven only under its condition, they were zero
        # otherwise, which Yosys builds as a reset of the receiving flip-flops,
        # one net from the decoding to every bit of the word
        imem_top = field(f"IMEM_DATA{len(h.imem_data) - 1}", "bits")
        mem_top = field(f"MEM_WDATA{len(h.wlanes)}", "bits")
        m.d.comb += [imem_w.p.data.eq(Cat(*h.imem_data[:-1], w.merged(imem_top, h.imem_data[-1]))),
                     mem_w.p.data.eq(Cat(*h.wlanes, w.bits(mem_top))),
                     mem_w.p.be.eq(Cat(*h.wbe, w.strb))]

        def store(sig):
            def write(f):
                m.d.sync += sig.eq(w.merged(f, sig))
            return write

        def ignore(f):
            pass

        def start(f):
            # registered: a start resets most of the coprocessor, so it leaves
            # from a flip-flop, not from the write's strobes (a cycle later)
            m.d.sync += self.start.eq((w.bits(f) & w.mask(f)).any())

        def fault_pop(f):
            m.d.comb += self.fault_rd.ready.eq(w.enabled(f))

        def mem_read(f):
            with m.If(w.enabled(f)):
                m.d.comb += mem_r.req.valid.eq(1)
                with m.If(mem_r.req.ready):
                    m.d.sync += [h.rd_pending.eq(1), h.mem_addr.eq(h.mem_addr + 1)]
                with m.Else():
                    m.d.comb += w.stall.eq(1)

        def mem_lane(i):
            def write(f):
                m.d.sync += [h.wlanes[i].eq(w.merged(f, h.wlanes[i])),
                             h.wbe[i].eq(h.wbe[i] | w.strb)]
            return write

        def mem_store(f):
            with m.If(w.enabled(f)):
                m.d.comb += mem_w.valid.eq(1)
                with m.If(mem_w.ready):
                    m.d.sync += [h.mem_addr.eq(h.mem_addr + 1)] + [be.eq(0) for be in h.wbe]
                with m.Else():
                    m.d.comb += w.stall.eq(1)

        def imem_store(f):
            m.d.sync += h.imem_data[-1].eq(w.merged(f, h.imem_data[-1]))
            with m.If(w.enabled(f)):
                # refused while running, unless the word is already offered (valid stays up)
                with m.If((h.running & ~h.imem_offered) | (h.imem_addr >= arch.imem_words)):
                    m.d.comb += w.ok.eq(0)
                with m.Else():
                    m.d.comb += imem_w.valid.eq(1)
                    with m.If(imem_w.ready):
                        m.d.sync += [h.imem_addr.eq(h.imem_addr + 1), h.imem_offered.eq(0)]
                    with m.Else():
                        m.d.comb += w.stall.eq(1)
                        m.d.sync += h.imem_offered.eq(1)

        targets = {"CTRL.start": start, "IMEM_ADDR.addr": store(h.imem_addr),
                   "FAULT_POP.pop": fault_pop, "MEM_ADDR.addr": store(h.mem_addr),
                   "MEM_READ.load": mem_read, "TLB_INDEX.index": store(h.tlb_index)}
        n_imem = len(h.imem_data)
        for i in range(n_imem):
            targets[f"IMEM_DATA{i}.bits"] = imem_store if i == n_imem - 1 else store(h.imem_data[i])
        top = len(h.wlanes)
        for i in range(MAX_MEM_LANES):
            targets[f"MEM_WDATA{i}.bits"] = (mem_lane(i) if i < top else
                                             mem_store if i == top else ignore)
        wanted = {f"{r.name}.{f.name}" for r in REGISTERS if r.writable for f in r.fields}
        bare = [r.name for r in REGISTERS if r.writable and not r.fields]
        if set(targets) != wanted or bare:   # pragma: no cover - the table and the port disagree
            raise AssertionError(f"writable fields without a target: {sorted(wanted - set(targets))}, "
                                 f"targets without a field: {sorted(set(targets) - wanted)}, "
                                 f"writable registers without fields: {bare}")
        return targets


class _WriteBeat:
    """The write being decoded (data and byte strobes) and the decoder's answer:
    ``ok`` (``OKAY`` rather than ``SLVERR``) and ``stall`` (not finished this cycle)."""

    def __init__(self, data, strb):
        self.data = data
        self.strb = strb
        self.bitmask = Cat(*(s.replicate(8) for s in strb))
        self.ok = Signal()
        self.stall = Signal()

    def bits(self, f):
        """The written data of field ``f``."""
        return self.data[f.lsb:f.lsb + f.width]

    def mask(self, f):
        """The bits of field ``f`` whose byte is enabled."""
        return self.bitmask[f.lsb:f.lsb + f.width]

    def enabled(self, f):
        """Some byte of field ``f`` is written."""
        return self.strb[f.byte_lanes.start:f.byte_lanes.stop].any()

    def merged(self, f, current):
        """``current`` (the field's held value) with the written bytes replaced."""
        current = Value.cast(current)
        return (current & ~self.mask(f)) | (self.bits(f) & self.mask(f))
