"""Assembler and disassembler for the reshard coprocessor ISA (hw/isa.py).

Assembly syntax
---------------
One instruction per line; ``;`` starts a comment to the end of the line;
blank lines are ignored. A line is a lower-case mnemonic (the ``Op`` name in
lower case: ``version copy fence remap inval signal wait commit halt
copy_add_f32 copy_add_bf16``)
followed by ``key=value`` operands, separated by blanks, in any order. The
keys are the field names of ``hw.isa.FORMATS``; every field must be given (a
missing one is an error naming it, never a silent 0).

Values are decimal (``4096``) or hex (``0x1000``), ``_`` allowed between
digits. Special operands:

* ``perm=`` takes ``r``, ``w``, ``rw`` or ``-`` (none); ``perm=0..3`` also works;
* ``staged=`` takes ``0`` or ``1``;
* ``size=`` is the 2-bit page-size *index* into ``ArchParams.page_sizes``
  (``size=0..3``), never a byte count;
* ``version`` takes its value positionally: ``version 1`` (``version
  version=1`` is accepted too);
* ``.word 0x<hex>`` emits a raw 256-bit word (any value, even an illegal
  instruction); the disassembler prints every word that does not decode to a
  legal instruction (unknown opcode, opcode 0, reserved bits set) this way,
  as ``.word 0x`` plus 64 hex digits, so disassembly is total.

Example::

    version 1
    remap ctx=1 size=0 perm=rw staged=0 dev=0 va=0x10000 pa=0x0
    copy chan=0 ctx=1 src=0x10000 dst=0x20000 row_bytes=256 rows=4 src_stride=0x100 dst_stride=0x200
    fence mask=0          ; mask=0: every channel
    signal dev=1 sem=0
    wait sem=0 count=1
    commit ctx=1
    halt

The disassembler prints a canonical form: every field in ``FORMATS`` order,
addresses (``src dst va pa``), strides and ``mask`` in hex, ``perm`` as
``r|w|rw|-``, everything else in decimal. ``disasm(asm(x))`` is canonical and
``asm(disasm(words)) == words`` for every word.

Errors name the file, line and column (1-based) of the offending text:
``prog.s:3:12: unknown field 'foo' for copy``; they are ``InputError``.
A program whose first instruction is ``version N`` with N not in
``SUPPORTED_VERSIONS`` is refused, and so is an instruction newer than the
version the program declares (``copy_add_f32`` in a ``version 1`` program),
unless ``allow_version_mismatch=True``.
"""
from __future__ import annotations

import re

from hw.isa import FORMATS, OP_SINCE, SUPPORTED_VERSIONS, WORD_BITS, Op, decode
from model.errors import InputError

__all__ = ["assemble", "disassemble", "disassemble_word", "MNEMONICS",
           "HEX_FIELDS", "PERM_NAMES"]

MNEMONICS: dict[str, Op] = {op.name.lower(): op for op in FORMATS}
HEX_FIELDS = frozenset({"src", "dst", "va", "pa", "src_stride", "dst_stride", "mask"})
PERM_NAMES = {0: "-", 1: "r", 2: "w", 3: "rw"}
_PERM_VALUES = {v: k for k, v in PERM_NAMES.items()}

_TOKEN = re.compile(r"\S+")
_INT = re.compile(r"^(?:0[xX][0-9a-fA-F](?:_?[0-9a-fA-F])*|[0-9](?:_?[0-9])*)$")


def _parse_int(text: str) -> int | None:
    if not _INT.match(text):
        return None
    return int(text.replace("_", ""), 0 if text[:2].lower() == "0x" else 10)


def assemble(text: str, filename: str = "<input>", *,
             allow_version_mismatch: bool = False) -> list[int]:
    """Assemble source text into a list of 256-bit instruction words."""
    words: list[int] = []
    first_version: tuple[int, int, int] | None = None   # (value, line, col)

    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split(";", 1)[0]
        toks = [(m.group(), m.start() + 1) for m in _TOKEN.finditer(line)]
        if not toks:
            continue

        def err(col: int, msg: str):
            return InputError(f"{filename}:{lineno}:{col}: {msg}")

        mnem, mcol = toks[0]
        if mnem == ".word":
            if len(toks) != 2:
                raise err(mcol, ".word takes exactly one value")
            v = _parse_int(toks[1][0])
            if v is None or v >= 1 << WORD_BITS:
                raise err(toks[1][1], f"bad .word value {toks[1][0]!r} "
                                      f"(need an integer below 2**{WORD_BITS})")
            words.append(v)
            continue
        op = MNEMONICS.get(mnem)
        if op is None:
            raise err(mcol, f"unknown mnemonic {mnem!r} (expected one of "
                            f"{', '.join(MNEMONICS)} or .word)")
        fmt = {f.name: f for f in FORMATS[op]}
        values: dict[str, int] = {}
        for tok, col in toks[1:]:
            if "=" not in tok:
                if op is Op.VERSION and not values:
                    key, val, vcol = "version", tok, col
                else:
                    raise err(col, f"expected key=value, not {tok!r}")
            else:
                key, val = tok.split("=", 1)
                vcol = col + len(key) + 1
            if key not in fmt:
                raise err(col, f"unknown field {key!r} for {mnem}"
                               + (f" (fields: {', '.join(fmt)})" if fmt else " (it has no fields)"))
            if key in values:
                raise err(col, f"field {key!r} given twice")
            if key == "perm" and val in _PERM_VALUES:
                v = _PERM_VALUES[val]
            else:
                v = _parse_int(val)
                if v is None:
                    hint = " (use r, w, rw or -)" if key == "perm" else ""
                    raise err(vcol, f"bad value {val!r} for field {key!r}{hint}")
            if key == "staged" and v not in (0, 1):
                raise err(vcol, f"staged must be 0 or 1, not {val!r}")
            f = fmt[key]
            if v > f.mask:
                raise err(vcol, f"value {val} does not fit in field {key!r} ({f.width} bits)")
            values[key] = v
        missing = [k for k in fmt if k not in values]
        if missing:
            example = " ".join(f"{k}=0" for k in missing)
            raise err(mcol, f"{mnem} is missing field(s) {', '.join(missing)} (every field must be given, "
                            f"e.g. {example})")
        if (first_version is not None and OP_SINCE.get(op, 0) > first_version[0]
                and not allow_version_mismatch):
            raise err(mcol, f"{mnem} needs ISA version {OP_SINCE[op]}; the program declares "
                            f"version {first_version[0]}")
        word = int(op)
        for key, v in values.items():
            word |= v << fmt[key].lsb
        if op is Op.VERSION and not words and first_version is None:
            first_version = (values.get("version", 0), lineno, mcol)
        words.append(word)

    if (first_version is not None and first_version[0] not in SUPPORTED_VERSIONS
            and not allow_version_mismatch):
        v, lineno, col = first_version
        raise InputError(f"{filename}:{lineno}:{col}: program is for ISA version {v}, this "
                         f"hardware runs versions {', '.join(map(str, SUPPORTED_VERSIONS))} (use "
                         f"--allow-version-mismatch to assemble it anyway)")
    return words


def disassemble_word(word: int) -> str:
    """Canonical text of one word (``.word 0x...`` unless it decodes legally)."""
    if not 0 <= word < 1 << WORD_BITS:
        raise ValueError(f"not a {WORD_BITS}-bit word: {word!r}")
    dec = decode(word)
    if dec.op is None or dec.op is Op.ILLEGAL or not dec.reserved_ok:
        return f".word 0x{word:0{WORD_BITS // 4}x}"
    op = dec.op
    if op is Op.VERSION:
        return f"version {dec.fields['version']}"
    parts = [op.name.lower()]
    for f in FORMATS[op]:
        v = dec.fields[f.name]
        if f.name == "perm":
            s = PERM_NAMES[v]
        elif f.name in HEX_FIELDS:
            s = f"0x{v:x}"
        else:
            s = str(v)
        parts.append(f"{f.name}={s}")
    return " ".join(parts)


def disassemble(words: list[int]) -> str:
    """Canonical text of a program, one instruction per line, newline-terminated."""
    return "".join(disassemble_word(w) + "\n" for w in words)
