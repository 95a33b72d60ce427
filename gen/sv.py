"""SystemVerilog for teams on commercial simulators, generated from the Python tables.

``python -m gen sv`` (:func:`write_sv`) writes two files, both generated from
``hw/isa.py`` and ``hw.hostport.REGISTERS`` and never edited by hand, so they
cannot drift from the hardware (``--check`` compares an existing copy):

``reshard_pkg.sv``
    package ``reshard_pkg``: ISA parameters, the ``op_e`` / ``status_e`` /
    ``cause_e`` enums, one packed struct per instruction format (reserved
    bits named, 256 bits each) and their packed union, the decoded-fields
    struct ``insn_fields_t`` with ``decode_word`` / ``encode_fields`` /
    ``disasm`` (the same text as ``python -m gen disasm``), the legality
    helpers, and the host port's register addresses (``reg_e``), access
    kinds and field layouts (``reg_<name>_t``).
``reshard_seq_item.sv``
    package ``reshard_seq_pkg`` with ``class reshard_insn_item extends
    uvm_sequence_item``: one field per instruction field, constraints that
    keep every randomized instruction legal on the hardware the item's
    knobs describe (:data:`RULES`), ``encode`` / ``decode`` of a
    ``program.hex`` word, ``convert2string``, ``do_copy`` / ``do_compare``.

docs/sv.md says how to compile them with a real UVM; ``tests/test_sv.py``
elaborates them with pyslang against a small ``uvm_pkg`` stub and evaluates
the package's decoder on real compiled programs.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, fields as dc_fields
from pathlib import Path

from gen.asm import HEX_FIELDS, PERM_NAMES
from hw.hostport import ADDR_WIDTH, MAGIC, OKAY, REGISTERS, SLVERR, field as reg_field
from hw.isa import (ARCH_DOCS, CAUSE_DOCS, COPY_OPS, ELEMENT_BYTES, ELEMENT_FIELDS, FORMATS,
                    HW_GENERATION, ISA_VERSION, OP_DOCS, OP_SINCE, OPCODE_BITS, PERM_R, PERM_W,
                    STATUS_DOCS, SUPPORTED_VERSIONS, VA_BITS, WORD_BITS, WORD_BYTES, ArchParams,
                    Cause, Op, Status, reserved_mask)
from model.errors import InputError

__all__ = ["SvOptions", "PKG_FILE", "ITEM_FILE", "RULES", "Rule", "sv_files", "write_sv",
           "check_sv", "decode_slices", "item_fields", "rule_violation"]

PKG_FILE = "reshard_pkg.sv"
ITEM_FILE = "reshard_seq_item.sv"
HEADER = ("// Generated from hw/isa.py and hw/hostport.py (REGISTERS) by `python -m gen sv`; "
          "do not edit.\n")


@dataclass(frozen=True)
class SvOptions:
    """Where :func:`write_sv` writes; ``check``: compare only."""
    out: Path = Path("build/sv")
    check: bool = False


# ---------------------------------------------------------------- legality rules
# What makes one instruction legal beyond its encoding (opcode known, not ILLEGAL,
# not newer than the program's version, reserved bits zero, fields fit): the field
# checks of the golden model (model/golden.py), as data. The item's constraints
# are generated from this table, and tests/test_sv.py runs each rule's boundary
# through the golden model, so a rule that disagrees with it fails there.

@dataclass(frozen=True)
class Rule:
    """``kind`` "below": ``field < knob``; "address": ``field >> addr_bits == 0``;
    "page": ``field`` aligned to ``page_size[size]``; "element": ``field`` a
    multiple of the op's element bytes. Violating it stops ``ILLEGAL``/``cause``."""
    kind: str
    ops: tuple[Op, ...]
    fields: tuple[str, ...]
    knob: str
    cause: Cause


def _ops_with(name: str) -> tuple[Op, ...]:
    return tuple(op for op, fmt in FORMATS.items() if any(f.name == name for f in fmt))


RULES: tuple[Rule, ...] = (
    Rule("below", _ops_with("chan"), ("chan",), "channels", Cause.BAD_CHANNEL),
    Rule("below", _ops_with("ctx"), ("ctx",), "contexts", Cause.BAD_CONTEXT),
    Rule("below", _ops_with("dev"), ("dev",), "devices", Cause.BAD_DEVICE),
    Rule("below", _ops_with("sem"), ("sem",), "semaphores", Cause.BAD_SEMAPHORE),
    Rule("address", COPY_OPS, ("src", "dst"), "addr_bits", Cause.ADDRESS_WIDTH),
    Rule("address", (Op.REMAP,), ("va", "pa"), "addr_bits", Cause.ADDRESS_WIDTH),
    Rule("address", (Op.INVAL,), ("va",), "addr_bits", Cause.ADDRESS_WIDTH),
    Rule("page", (Op.REMAP,), ("va", "pa"), "page_size", Cause.MISALIGNED),
    Rule("page", (Op.INVAL,), ("va",), "page_size", Cause.MISALIGNED),
    *(Rule("element", (op,), ELEMENT_FIELDS, "element_bytes", Cause.MISALIGNED) for op in ELEMENT_BYTES),
)

def rule_violation(op: Op, fields: dict[str, int], arch: ArchParams, isa_version: int = ISA_VERSION):
    """The ``Cause`` the item's constraints exist to avoid, for one encodable
    instruction with these fields on ``arch`` in a program that declares
    ``isa_version`` (None: legal): :data:`RULES` and the c_opcode / c_version
    constraints, read in Python. The golden model must agree (tests/test_sv.py)."""
    op = Op(op)
    if op is Op.ILLEGAL or OP_SINCE.get(op, 1) > isa_version:
        return Cause.BAD_OPCODE
    if op is Op.VERSION and fields.get("version", 0) != isa_version:
        return Cause.VERSION_MISMATCH
    for r in RULES:
        if op not in r.ops:
            continue
        for name in r.fields:
            v = fields.get(name, 0)
            bad = (r.kind == "below" and v >= getattr(arch, r.knob)
                   or r.kind == "address" and v >> arch.addr_bits
                   or r.kind == "page" and v % arch.page_sizes[fields.get("size", 0)]
                   or r.kind == "element" and v % ELEMENT_BYTES[op])
            if bad:
                return r.cause
    return None


#: Item knobs (not randomized): the ArchParams the item must be legal on.
_KNOBS = ("devices", "contexts", "channels", "semaphores", "addr_bits")


# ---------------------------------------------------------------- tables

def _ops() -> list[Op]:
    """Encodable opcodes, in opcode order."""
    return [op for op in Op if op is not Op.ILLEGAL]


def item_fields() -> dict[str, int]:
    """Every instruction field name, in first-appearance order, with its widest width."""
    out: dict[str, int] = {}
    for op in _ops():
        for f in FORMATS[op]:
            out[f.name] = max(out.get(f.name, 0), f.width)
    return out


def decode_slices() -> dict[Op, tuple[tuple[str, int, int], ...]]:
    """``{op: ((field, msb, lsb), ...)}``: the bit slices ``decode_word`` emits,
    taken from ``FORMATS`` (the table ``hw.isa.decode`` reads)."""
    return {op: tuple((f.name, f.lsb + f.width - 1, f.lsb) for f in FORMATS[op]) for op in _ops()}


def _format_groups() -> list[tuple[Op, list[Op]]]:
    """(owner, ops sharing its format): one struct per distinct format."""
    groups: list[tuple[Op, list[Op]]] = []
    for op in _ops():
        for owner, members in groups:
            if FORMATS[owner] == FORMATS[op]:
                members.append(op)
                break
        else:
            groups.append((op, [op]))
    return groups


def _sv_ident(name: str) -> str:
    return name.lower()


def _vec(width: int) -> str:
    return f"logic [{width - 1}:0]"


def _opl(ops) -> str:
    return ", ".join(f"OP_{op.name}" for op in ops)


def _comment(text: str) -> str:
    return " ".join(text.split())


def _enum(name: str, width: int, members: list[tuple[str, int, str]], radix: str = "d") -> list[str]:
    fmt = "{:02x}" if radix == "h" else "{}"
    for m, v, _ in members:
        if v >> width:
            raise ValueError(f"{name}: {m} = {v} does not fit in {width} bits")
    lines = [f"  typedef enum {_vec(width)} {{"]
    for i, (m, v, doc) in enumerate(members):
        sep = "," if i < len(members) - 1 else " "
        lines.append(f"    {m} = {width}'{radix}{fmt.format(v)}{sep}  // {_comment(doc)}".rstrip())
    lines.append(f"  }} {name};")
    return lines


# ---------------------------------------------------------------- reshard_pkg.sv

def _pkg_isa() -> list[str]:
    arch = ArchParams()
    L = ["  // ---------------------------------------------------------------- ISA",
         f"  localparam int unsigned ISA_VERSION = {ISA_VERSION};  // newest ISA version this hardware runs",
         f"  localparam int unsigned HW_GENERATION = {HW_GENERATION};",
         f"  localparam int unsigned WORD_BITS = {WORD_BITS};  // one instruction, one program.hex line",
         f"  localparam int unsigned WORD_BYTES = {WORD_BYTES};",
         f"  localparam int unsigned VA_BITS = {VA_BITS};  // address fields in the word",
         f"  localparam int unsigned OPCODE_BITS = {OPCODE_BITS};  // bits [OPCODE_BITS-1:0] of a word",
         f"  localparam int unsigned N_SUPPORTED_VERSIONS = {len(SUPPORTED_VERSIONS)};",
         "  localparam int unsigned SUPPORTED_VERSIONS [N_SUPPORTED_VERSIONS] = "
         f"'{{{', '.join(map(str, SUPPORTED_VERSIONS))}}};",
         f"  localparam int unsigned PERM_R = {PERM_R};  // perm bit: read",
         f"  localparam int unsigned PERM_W = {PERM_W};  // perm bit: write",
         "",
         "  // Architectural parameters: the defaults of hw.isa.ArchParams. A build may differ:",
         "  // its P_* registers say what it has.",
         ]
    for f in dc_fields(ArchParams):
        v = getattr(arch, f.name)
        doc = _comment(ARCH_DOCS[f.name])
        if isinstance(v, tuple):
            L.append(f"  localparam int unsigned DEFAULT_{f.name.upper()} [{len(v)}] = "
                     f"'{{{', '.join(map(str, v))}}};  // {doc}")
        else:
            L.append(f"  localparam int unsigned DEFAULT_{f.name.upper()} = {v};  // {doc}")
    L += ["", "  typedef logic [WORD_BITS-1:0] word_t;", ""]
    L += _enum("op_e", OPCODE_BITS,
               [(f"OP_{op.name}", int(op), _op_note(op)) for op in Op], radix="h")
    L.append("")
    L += _enum("status_e", reg_field("STATUS", "status").width,
               [(f"STATUS_{s.name}", int(s), STATUS_DOCS[s]) for s in Status])
    L.append("")
    L += _enum("cause_e", reg_field("STATUS", "cause").width,
               [(f"CAUSE_{c.name}", int(c), CAUSE_DOCS[c]) for c in Cause])
    L.append("")
    # one packed struct per format, most significant field first
    L.append("  // Instruction formats: 256-bit packed structs, most significant field first;")
    L.append("  // reserved_<msb>_<lsb> must be zero (else ILLEGAL/RESERVED_BITS).")
    members = []
    for owner, ops in _format_groups():
        spans = [(f.lsb, f.width, f.name) for f in FORMATS[owner]] + [(0, OPCODE_BITS, None)]
        spans.sort(reverse=True)
        L.append(f"  // {', '.join(op.name for op in ops)}")
        L.append("  typedef struct packed {")
        top = WORD_BITS
        for lsb, width, name in spans:
            msb = lsb + width - 1
            if msb + 1 < top:
                L.append(f"    {_vec(top - msb - 1)} reserved_{top - 1}_{msb + 1};")
            if name is None:
                L.append("    op_e opcode;  // [7:0]")
            else:
                doc = next(f.doc for f in FORMATS[owner] if f.name == name)
                note = f"; {_comment(doc)}" if doc else ""
                L.append(f"    {_vec(width)} {name};  // [{msb}:{lsb}]{note}")
            top = lsb
        assert top == 0
        L.append(f"  }} insn_{_sv_ident(owner.name)}_t;")
        for op in ops[1:]:
            L.append(f"  typedef insn_{_sv_ident(owner.name)}_t insn_{_sv_ident(op.name)}_t;")
        members += [(op, owner) for op in ops]
    L += ["", "  // One instruction word seen through every format (all 256 bits wide).",
          "  typedef union packed {", "    word_t raw;"]
    L += [f"    insn_{_sv_ident(op.name)}_t as_{_sv_ident(op.name)};" for op, _ in members]
    L += ["  } insn_u;", ""]
    # decoded fields: every field name once, at its widest
    L.append("  // Every instruction field, decoded (a field the opcode's format lacks is 0).")
    L.append("  typedef struct packed {")
    L.append("    op_e op;")
    L += [f"    {_vec(w)} {name};" for name, w in item_fields().items()]
    L += ["  } insn_fields_t;", ""]
    return L


def _op_note(op: Op) -> str:
    """The first sentence of the op's prose in hw/isa.py (after an "ISA vN." tag)."""
    if op is Op.ILLEGAL:
        return "the all-zero word: never valid"
    sentences = re.split(r"(?<=\.)\s+", _comment(OP_DOCS[op]))
    if re.fullmatch(r"ISA v\d+\.", sentences[0]) and len(sentences) > 1:
        return f"{sentences[0]} {sentences[1]}"
    return sentences[0]


def _pkg_functions() -> list[str]:
    ops = _ops()
    L = ["  // ---------------------------------------------------------------- ISA functions",
         "  // An opcode a program may use (known, not ILLEGAL); OP_SINCE is checked by op_since.",
         "  function automatic bit is_valid_opcode(logic [OPCODE_BITS-1:0] opcode);",
         f"    return op_e'(opcode) inside {{{_opl(ops)}}};",
         "  endfunction", "",
         "  // The first ISA version that has the opcode.",
         "  function automatic int unsigned op_since(op_e op);",
         "    case (op)"]
    by_ver: dict[int, list[Op]] = {}
    for op, v in OP_SINCE.items():
        by_ver.setdefault(v, []).append(op)
    for v, vops in sorted(by_ver.items()):
        L.append(f"      {_opl(vops)}: return {v};")
    L += ["      default: return 1;", "    endcase", "  endfunction", "",
          "  // Element bytes of a reducing copy (0: not a reducing copy).",
          "  function automatic int unsigned element_bytes(op_e op);", "    case (op)"]
    for op, e in ELEMENT_BYTES.items():
        L.append(f"      OP_{op.name}: return {e};")
    L += ["      default: return 0;", "    endcase", "  endfunction", "",
          "  // The bits of a word outside the opcode's fields (all but the opcode for unknown opcodes).",
          "  function automatic word_t reserved_mask(op_e op);", "    case (op)"]
    for owner, group in _format_groups():
        L.append(f"      {_opl(group)}:")
        L.append(f"        return {WORD_BITS}'h{reserved_mask(owner):0{WORD_BITS // 4}x};")
    L += ["      default: return ~word_t'(2 ** OPCODE_BITS - 1);", "    endcase", "  endfunction", "",
          "  // A legal encoding: valid opcode and every reserved bit zero (hw.isa.decode's reserved_ok).",
          "  function automatic bit is_legal_word(word_t w);",
          "    return is_valid_opcode(w[OPCODE_BITS-1:0]) && (w & reserved_mask(op_e'(w[OPCODE_BITS-1:0]))) == '0;",
          "  endfunction", "",
          "  // One program.hex word -> its fields (the slices of hw.isa.FORMATS).",
          "  function automatic insn_fields_t decode_word(word_t w);",
          "    insn_fields_t f = '0;",
          "    f.op = op_e'(w[OPCODE_BITS-1:0]);",
          "    case (f.op)"]
    slices = decode_slices()
    for owner, group in _format_groups():
        if not slices[owner]:
            continue
        L.append(f"      {_opl(group)}: begin")
        for name, msb, lsb in slices[owner]:
            L.append(f"        f.{name} = w[{msb}:{lsb}];")
        L.append("      end")
    L += ["      default: ;", "    endcase", "    return f;", "  endfunction", "",
          "  // Fields -> word; a field the opcode's format lacks is not encoded, one wider",
          "  // than its format is cut (the item's constraints prevent both).",
          "  function automatic word_t encode_fields(insn_fields_t f);",
          "    word_t w = '0;",
          "    w[OPCODE_BITS-1:0] = f.op;",
          "    case (f.op)"]
    for owner, group in _format_groups():
        if not slices[owner]:
            continue
        L.append(f"      {_opl(group)}: begin")
        for name, msb, lsb in slices[owner]:
            L.append(f"        w[{msb}:{lsb}] = f.{name}[{msb - lsb}:0];")
        L.append("      end")
    L += ["      default: ;", "    endcase", "    return w;", "  endfunction", "",
          "  function automatic string perm_name(logic [1:0] perm);", "    case (perm)"]
    L += [f"      2'd{v}: return \"{s}\";" for v, s in sorted(PERM_NAMES.items())]
    L += ["      default: return \"?\";", "    endcase", "  endfunction", "",
          "  // The canonical text of one word, as `python -m gen disasm` prints it",
          "  // (\".word 0x...\" unless it is a legal encoding).",
          "  function automatic string disasm(word_t w);",
          "    insn_fields_t f = decode_word(w);",
          "    if (!is_legal_word(w)) return $sformatf(\".word 0x%h\", w);",
          "    case (f.op)"]
    for op in ops:
        if op is Op.VERSION:
            L.append('      OP_VERSION: return $sformatf("version %0d", f.version);')
            continue
        text, args = [op.name.lower()], []
        for fld in FORMATS[op]:
            if fld.name == "perm":
                text.append("perm=%s")
                args.append("perm_name(f.perm)")
            elif fld.name in HEX_FIELDS:
                text.append(f"{fld.name}=0x%0h")
                args.append(f"f.{fld.name}")
            else:
                text.append(f"{fld.name}=%0d")
                args.append(f"f.{fld.name}")
        call = f'"{" ".join(text)}"' + "".join(f", {a}" for a in args)
        L.append(f"      OP_{op.name}: return $sformatf({call});")
    L += ["      default: return $sformatf(\".word 0x%h\", w);", "    endcase", "  endfunction", ""]
    return L


def _pkg_regmap() -> list[str]:
    L = ["  // ---------------------------------------------------------------- host port registers",
         f"  // AXI4-Lite slave, 32-bit data, {ADDR_WIDTH}-bit byte addresses (docs/regmap.md).",
         f"  localparam int unsigned HOSTPORT_ADDR_WIDTH = {ADDR_WIDTH};",
         f"  localparam logic [31:0] HOSTPORT_MAGIC = 32'h{MAGIC:08x};  // the ID register",
         f"  localparam logic [1:0] AXI_OKAY = 2'd{OKAY};",
         f"  localparam logic [1:0] AXI_SLVERR = 2'd{SLVERR};  // write to RO/unmapped, imem write while running",
         ""]
    L += _enum("reg_e", ADDR_WIDTH, [(f"REG_{r.name}", r.offset, f"{r.access} {r.doc}") for r in REGISTERS],
               radix="h")
    L += ["", "  typedef enum logic [1:0] { ACCESS_RO = 2'd1, ACCESS_WO = 2'd2, ACCESS_RW = 2'd3 } access_e;",
          "", "  function automatic access_e reg_access(reg_e r);", "    case (r)"]
    by_access: dict[str, list[str]] = {}
    for r in REGISTERS:
        by_access.setdefault(r.access, []).append(f"REG_{r.name}")
    for acc, names in by_access.items():
        body = ",\n        ".join(", ".join(names[i:i + 4]) for i in range(0, len(names), 4))
        L.append(f"      {body}:\n        return ACCESS_{acc};")
    L += ["      default: return access_e'(0);", "    endcase", "  endfunction", "",
          "  // Field layouts of the registers with more than one field or a narrow one,",
          "  // most significant first (bits not named are reserved_<msb>_<lsb>)."]
    for r in REGISTERS:
        if not r.fields or (len(r.fields) == 1 and r.fields[0].width == 32):
            continue
        L.append(f"  typedef struct packed {{  // {r.name} (0x{r.offset:03x})")
        top = 32
        for f in sorted(r.fields, key=lambda f: -f.lsb):
            if f.msb + 1 < top:
                L.append(f"    {_vec(top - f.msb - 1)} reserved_{top - 1}_{f.msb + 1};")
            note = f"  // {_comment(f.doc)}" if f.doc else ""
            L.append(f"    {_vec(f.width)} {f.name};{note}")
            top = f.lsb
        if top:
            L.append(f"    {_vec(top)} reserved_{top - 1}_0;")
        L.append(f"  }} reg_{r.name.lower()}_t;")
    L.append("")
    return L


def pkg_text() -> str:
    lines = [f"// {PKG_FILE}: the ReshardIP coprocessor ISA and host-port register map.", HEADER.rstrip(),
             "`ifndef RESHARD_PKG_SV", "`define RESHARD_PKG_SV", "", "package reshard_pkg;", ""]
    lines += _pkg_isa() + _pkg_functions() + _pkg_regmap()
    lines += ["endpackage : reshard_pkg", "", "`endif  // RESHARD_PKG_SV", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------- reshard_seq_item.sv

def _item_constraints() -> list[str]:
    ops = _ops()
    widest = item_fields()
    L = ["  // Opcodes a program may use, none newer than the version it declares.",
         f"  constraint c_opcode {{",
         f"    op inside {{{_opl(ops)}}};"]
    L += [f"    (op == OP_{op.name}) -> isa_version >= {v};" for op, v in OP_SINCE.items()]
    L += ["  }", "", "  // A field the opcode's format lacks is zero, so encode() sets no reserved bit.",
          "  constraint c_unused {"]
    for name in widest:
        have = _ops_with(name)
        L.append(f"    !(op inside {{{_opl(have)}}}) -> {name} == 0;")
    L.append("  }")
    narrow = [(op, f) for op in ops for f in FORMATS[op] if f.width < widest[f.name]]
    if narrow:
        L += ["", "  // Fields narrower in some formats than in others.", "  constraint c_width {"]
        L += [f"    (op == OP_{op.name}) -> ({f.name} >> {f.width}) == 0;" for op, f in narrow]
        L.append("  }")
    L += ["", "  // VERSION names the version the program declares (one this hardware runs).",
          "  constraint c_version {", "    (op == OP_VERSION) -> version == isa_version;", "  }", ""]
    L += ["  // Field checks (ILLEGAL causes otherwise): gen/sv.py RULES, the golden model's.",
          "  constraint c_legal {"]
    for r in RULES:
        for name in r.fields:
            if r.kind == "below":
                L.append(f"    (op inside {{{_opl(r.ops)}}}) -> {name} < {r.knob};  "
                         f"// {r.cause.name}")
            elif r.kind == "address":
                L.append(f"    (op inside {{{_opl(r.ops)}}}) -> ({name} >> addr_bits) == 0;  "
                         f"// {r.cause.name}")
            elif r.kind == "page":
                for s in range(len(ArchParams().page_sizes)):
                    L.append(f"    (op inside {{{_opl(r.ops)}}} && size == {s}) -> "
                             f"({name} & {widest[name]}'(page_size[{s}] - 1)) == 0;  // {r.cause.name}")
            elif r.kind == "element":
                (op,) = r.ops
                L.append(f"    (op == OP_{op.name}) -> ({name} & {ELEMENT_BYTES[op] - 1}) == 0;  "
                         f"// {r.cause.name}")
            else:
                raise ValueError(f"unknown rule kind {r.kind!r}")
    L += ["  }", "",
          "  // Small copies unless a sequence asks for more (soft: any other constraint on",
          "  // row_bytes or rows wins); larger ones are just as legal.",
          "  constraint c_copy_size {", "    soft row_bytes <= 4096;", "    soft rows <= 16;", "  }"]
    return L


def item_text() -> str:
    fields = item_fields()
    arch = ArchParams()
    knob_lines = [f"  int unsigned {k} = DEFAULT_{k.upper()};  // {_comment(ARCH_DOCS[k])}" for k in _KNOBS]
    L = [f"// {ITEM_FILE}: a UVM sequence item for one ReshardIP coprocessor instruction.", HEADER.rstrip(),
         "// Compile after uvm_pkg and reshard_pkg.sv (docs/sv.md).",
         "`ifndef RESHARD_SEQ_ITEM_SV", "`define RESHARD_SEQ_ITEM_SV", "",
         "`include \"uvm_macros.svh\"", "",
         "package reshard_seq_pkg;", "  import uvm_pkg::*;", "  import reshard_pkg::*;", "",
         "  // One instruction. Randomized, it is legal on the hardware its knobs describe;",
         "  // decode() reads one word of a program.hex ($readmemh, 256 bits a line).",
         "  class reshard_insn_item extends uvm_sequence_item;",
         "    `uvm_object_utils(reshard_insn_item)", "",
         "    // Knobs (not randomized): the build the item must be legal on. Defaults are",
         "    // hw.isa.ArchParams(); set them from the P_* registers of the build under test.",
         ]
    L += [("  " + s) if s else s for s in knob_lines]
    L += [f"    int unsigned page_size [{len(arch.page_sizes)}] = DEFAULT_PAGE_SIZES;  "
          "// bytes of each `size` index",
          "    int unsigned isa_version = ISA_VERSION;  // the version the program declares", "",
          "    rand op_e op;"]
    L += [f"    rand bit [{w - 1}:0] {name};" for name, w in fields.items()]
    L.append("")
    L += [("  " + s) if s else s for s in _item_constraints()]
    to_f = "\n".join(f"      f.{name} = {name};" for name in fields)
    from_f = "\n".join(f"      {name} = f.{name};" for name in fields)
    L += ["",
          "    function new(string name = \"reshard_insn_item\");", "      super.new(name);", "    endfunction", "",
          "    function insn_fields_t to_fields();", "      insn_fields_t f = '0;", "      f.op = op;",
          to_f, "      return f;", "    endfunction", "",
          "    function void from_fields(insn_fields_t f);", "      op = f.op;", from_f, "    endfunction", "",
          "    // The instruction word: one line of program.hex.",
          "    function word_t encode();", "      return encode_fields(to_fields());", "    endfunction", "",
          "    // Sets the fields from one program.hex word; returns 0 when the word is not a legal",
          "    // encoding (unknown or zero opcode, a reserved bit set), whose fields are then",
          "    // what the opcode's format reads (encode() will not give the word back).",
          "    function bit decode(word_t w);", "      from_fields(decode_word(w));",
          "      return is_legal_word(w);", "    endfunction", "",
          "    // The same text as `python -m gen disasm`.",
          "    virtual function string convert2string();", "      return disasm(encode());", "    endfunction", "",
          "    virtual function void do_copy(uvm_object rhs);", "      reshard_insn_item that;",
          "      super.do_copy(rhs);", "      if (!$cast(that, rhs)) return;", "      from_fields(that.to_fields());",
          *(f"      {k} = that.{k};" for k in _KNOBS),
          "      page_size = that.page_size;", "      isa_version = that.isa_version;", "    endfunction", "",
          "    // Equal when the instructions are (the knobs are not compared).",
          "    virtual function bit do_compare(uvm_object rhs, uvm_comparer comparer);",
          "      reshard_insn_item that;", "      if (!$cast(that, rhs)) return 0;",
          "      return super.do_compare(rhs, comparer) && that.to_fields() == to_fields();",
          "    endfunction",
          "  endclass : reshard_insn_item", "",
          "endpackage : reshard_seq_pkg", "", "`endif  // RESHARD_SEQ_ITEM_SV", ""]
    return "\n".join(L)


# ---------------------------------------------------------------- writing

def sv_files() -> dict[str, str]:
    """``{file name: text}`` of everything ``python -m gen sv`` writes."""
    return {PKG_FILE: pkg_text(), ITEM_FILE: item_text()}


def check_sv(out) -> list[str]:
    """The generated files missing from or different in ``out`` (empty: up to date)."""
    out = Path(out)
    stale = []
    for name, text in sv_files().items():
        p = out / name
        try:
            same = p.read_text(encoding="ascii") == text
        except (OSError, UnicodeDecodeError):
            same = False
        if not same:
            stale.append(name)
    return stale


def write_sv(out) -> list[Path]:
    """Write the files into ``out``: all of them appear, or none is changed.

    A new ``out`` is built as a temporary sibling directory and renamed into
    place; into an existing one, each file is written to a temporary file in
    it and renamed (after all have been written). ``InputError`` (one line)
    when ``out`` cannot be created or written."""
    out = Path(out)
    files = sv_files()
    try:
        if out.exists() and not out.is_dir():
            raise InputError(f"--out {out}: exists and is not a directory")
        out.parent.mkdir(parents=True, exist_ok=True)
        fresh = not out.exists()
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent if fresh else out))
        try:
            for name, text in files.items():
                (tmp / name).write_text(text, encoding="ascii", newline="\n")
            if fresh:
                os.rename(tmp, out)
            else:
                for name in files:
                    os.replace(tmp / name, out / name)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as e:
        raise InputError(f"--out {out}: cannot write ({e.strerror or e})") from None
    return [out / name for name in files]
