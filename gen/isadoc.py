"""docs/isa.md, generated from ``hw/isa.py``: the instruction formats, the
per-instruction prose, the status and cause codes and the architectural
parameters all come from the tables there, so the page cannot drift from the
hardware, the assembler and the golden model."""
from __future__ import annotations

import dataclasses
import re
import textwrap
import tomllib
from importlib import metadata
from pathlib import Path

from hw.isa import (ARCH_DOCS, CAUSE_DOCS, FORMATS, GENERATION_ISA, HW_GENERATION, ISA_VERSION,
                    OP_DOCS, OP_SINCE, OPCODE_BITS, STATUS_DOCS, WORD_BITS, ArchParams, Cause, Op,
                    Status)

__all__ = ["isa_markdown", "verified_versions"]

#: The packages whose pinned versions are the traces this hardware is verified with.
VERIFIED_PACKAGES = ("verl", "torch")
_PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"

_INTRO = f"""\
# Reshard coprocessor ISA, version {ISA_VERSION}

Generated from `hw/isa.py` by `python -m gen isadoc` (a test fails when this
page is stale): the decoder, the assembler, the compiler and the golden model
read the same tables. The golden model (`model/golden.py`) is the executable
definition; this page says it in words.
"""

_ASM = """\
## Assembly syntax

`gen/asm.py` (`python -m gen asm IN.s -o OUT.hex`, `python -m gen disasm
IN.hex [-o OUT.s]`) reads and writes this text form; images are `$readmemh`
files of {bits}-bit words (`gen/hexfile.py`).

- One instruction per line; `;` starts a comment; blank lines are ignored.
- A line is a lower-case mnemonic ({mnemonics}) and `key=value` operands in
  any order, separated by blanks. Keys are the field names of the table
  above. Every field must be given: a missing one is an error that names it
  (never a silent 0).
- Values: decimal (`4096`) or hex (`0x1000`), `_` allowed between digits.
  `perm=` also takes `r`, `w`, `rw`, `-`; `staged=` is `0` or `1`; `size=` is
  the 2-bit page-size *index* (`size=0..3`), never a byte count.
- `version` takes its value positionally: `version {version}`.
- `.word 0x<hex>` emits a raw {bits}-bit word (any value, legal or not).
- The disassembler prints the canonical form: every field in table order,
  `src dst va pa src_stride dst_stride mask` in hex, `perm` as `r|w|rw|-`, the
  rest in decimal; a word that is not a legal encoding (opcode 0, unknown
  opcode, a reserved bit set) prints as `.word 0x` and {digits} hex digits.
  `asm(disasm(words)) == words` for every word.
- Errors name file, line and column: `prog.s:3:12: unknown field 'foo' for
  copy`. A program whose first instruction is `version N` with N not a version
  this hardware runs, or an instruction newer than the declared version, is
  refused unless `--allow-version-mismatch` is given.

```
version {version}
remap ctx=1 size=0 perm=rw staged=0 dev=0 va=0x10000 pa=0x0
copy chan=0 ctx=1 src=0x10000 dst=0x10800 row_bytes=256 rows=4 src_stride=0x100 dst_stride=0x200 tag=0
fence mask=0           ; mask=0: every channel
signal dev=1 sem=0
commit ctx=1
halt
```
"""


def _fields(op: Op) -> str:
    if not FORMATS[op]:
        return "none"
    return ", ".join(f"{f.name} [{f.lsb}+:{f.width}]" + (f" ({f.doc})" if f.doc else "")
                     for f in FORMATS[op])


def _bit_map(op: Op) -> str:
    """One line per field, most significant first: ``[msb:lsb] name``."""
    rows = [(f.lsb + f.width - 1, f.lsb, f.name) for f in FORMATS[op]]
    rows.append((OPCODE_BITS - 1, 0, f"opcode = 0x{int(op):02x}"))
    return "\n".join(f"  [{hi:3}:{lo:3}] {name}" for hi, lo, name in sorted(rows, reverse=True))


def _para(text: str) -> str:
    return textwrap.fill(text, 78, break_on_hyphens=False) + "\n"


def _pins(requirements) -> dict[str, str]:
    pins = {}
    for req in requirements:
        m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s;,]+)\s*", req)
        if m and m.group(1).lower() in VERIFIED_PACKAGES:
            pins[m.group(1).lower()] = m.group(2)
    return pins


def verified_versions() -> dict[str, str]:
    """The verl / torch versions the project is verified with: the ``==`` pins
    of pyproject.toml's dependencies (of the installed distribution's
    metadata when there is no pyproject.toml beside the package)."""
    if _PYPROJECT.is_file():
        reqs = tomllib.loads(_PYPROJECT.read_text())["project"]["dependencies"]
    else:
        reqs = [r for r in metadata.requires("reshardip") or [] if "extra ==" not in r]
    pins = _pins(reqs)
    missing = [p for p in VERIFIED_PACKAGES if p not in pins]
    if missing:
        raise ValueError(f"pyproject.toml pins no version of {', '.join(missing)}")
    return {p: pins[p] for p in VERIFIED_PACKAGES}


def _compatibility() -> str:
    """The "Compatibility" section: ISA version by hardware generation, and the
    verl / torch versions of the traces this generation is verified with."""
    gens = sorted(GENERATION_ISA)
    versions = sorted({v for vs in GENERATION_ISA.values() for v in vs})
    pins = verified_versions()
    out = ["## Compatibility\n"]
    out.append(_para(
        "A program names its ISA version in its first instruction (`VERSION`). A hardware "
        "generation runs the versions marked below, each with the meaning it had when it was "
        "introduced (`hw/isa.py`: `HW_GENERATION`, `GENERATION_ISA`, `OP_SINCE`). This hardware is "
        f"generation {HW_GENERATION}."))
    head = " | ".join(f"generation {g}" + (" (this hardware)" if g == HW_GENERATION else "")
                      for g in gens)
    out.append(f"| ISA version | adds | {head} |")
    out.append("|---|---|" + "---|" * len(gens))
    for v in versions:
        added = [op for op in FORMATS if OP_SINCE.get(op, 1) == v]
        adds = "the base instruction set" if v == min(versions) else \
            ", ".join(f"`{op.name}`" for op in added)
        cells = " | ".join("runs" if v in GENERATION_ISA[g] else "-" for g in gens)
        out.append(f"| {v} | {adds} | {cells} |")
    out.append("")
    pinned = " / ".join(f"{p} {pins[p]}" for p in VERIFIED_PACKAGES)
    out.append(_para(
        "By hardware generation, with the verl / torch versions of the traces it is verified "
        "against (for this generation, the pins of `pyproject.toml`; a trace's header records the "
        "versions it was captured with, `versions` in docs/trace-format.md):"))
    out.append("| hardware generation | runs ISA versions | traces verified with |")
    out.append("|---|---|---|")
    for g in gens:
        verified = pinned if g == HW_GENERATION else "- (not built from this tree)"
        this = " (this hardware)" if g == HW_GENERATION else ""
        out.append(f"| {g}{this} | {', '.join(map(str, GENERATION_ISA[g]))} | {verified} |")
    out.append("")
    out.append(_para(
        "The `manifest.json` of a compiled program directory records `isa_version` (the version "
        "its programs declare), `hw_generation` (the generation it was compiled for) and "
        "`versions` (verl and torch: the trace's, or, marked `\"from\": \"installed\"`, the "
        "installed ones when the programs were compiled from a model rather than a trace). "
        "`python -m gen run` refuses, in one line naming both sides and with exit status 2, a "
        "manifest for another hardware generation or for an ISA version this generation does "
        "not run."))
    return "\n".join(out)


def isa_markdown() -> str:
    """The text of docs/isa.md."""
    defaults = ArchParams()
    out = [_INTRO]
    out.append("## The machine\n")
    out.append(_para("A *system* is `devices` devices on an interconnect. Each device "
               "has a byte-addressed memory, an MMU, a DMA engine, a coprocessor and semaphores, "
               "sized by `ArchParams` (hardware, compiler and golden model are built with the same "
               "values, recorded in `manifest.json`):"))
    out.append("| parameter | default | meaning |\n|---|---|---|")
    for f in dataclasses.fields(ArchParams):
        v = getattr(defaults, f.name)
        shown = ", ".join(map(str, v)) if isinstance(v, tuple) else str(v)
        out.append(f"| `{f.name}` | {shown} | {ARCH_DOCS[f.name]} |")
    out.append("")
    out.append("## Instruction word\n")
    out.append(_para(f"{WORD_BITS} bits, little-endian. Bits "
               f"[{OPCODE_BITS - 1}:0] are the opcode. Every bit not in a field of that opcode is "
               "reserved and must be zero; a word with a non-zero reserved bit, an unknown opcode, "
               "or opcode 0 is illegal."))
    out.append("| op | name | fields (bit lsb, width) |\n|---|---|---|")
    out.append(f"| 0x{int(Op.ILLEGAL):02x} | (illegal) | all-zero word is never valid |")
    for op in FORMATS:
        out.append(f"| 0x{int(op):02x} | {op.name} | {_fields(op)} |")
    out.append("\n## Semantics\n")
    for op in FORMATS:
        args = " ".join(f.name for f in FORMATS[op])
        out.append(f"### {op.name}{' ' + args if args else ''}\n")
        out.append(f"```\n{_bit_map(op)}\n```\n")
        out.append(OP_DOCS[op] + "\n")
    out.append("### Errors\n")
    out.append(_para("Any other error stops the program at the offending instruction with `ILLEGAL` and "
               "a cause (table below). Checks happen in this order: `PC_OVERFLOW`; "
               "`VERSION_MISMATCH` at word 0 unless the opcode is VERSION; the opcode; the "
               "reserved bits; then the fields in the order of the format table (for an address "
               "field `ADDRESS_WIDTH` before `MISALIGNED`). Virtual address arithmetic "
               "(`src + i*src_stride + j`) wraps modulo `2**addr_bits`. A physical address at or "
               "beyond `mem_bytes` is an `OUT_OF_RANGE` translation fault of the COPY that "
               "reaches it. Fault records of different channels may be queued in any order; "
               "tools compare them sorted."))
    out.append("## Status codes\n\n| value | status | meaning |\n|---|---|---|")
    out += [f"| {int(s)} | `{s.name}` | {STATUS_DOCS[s]} |" for s in Status]
    out.append("\n## Causes\n\n| value | cause | meaning |\n|---|---|---|")
    out += [f"| {int(c)} | `{c.name}` | {CAUSE_DOCS[c]} |" for c in Cause]
    out.append("")
    out.append(_compatibility())
    out.append(_ASM.format(bits=WORD_BITS, digits=WORD_BITS // 4, version=ISA_VERSION,
                           mnemonics=" ".join(f"`{op.name.lower()}`" for op in FORMATS)))
    return "\n".join(out)
