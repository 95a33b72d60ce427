"""``python -m gen sv``: the SystemVerilog package and UVM sequence item.

Three kinds of check, all against the Python tables (hw/isa.py, hw.hostport):

* the generated text names every opcode, field, status, cause and register
  with the tables' values (no pyslang needed), and ``decode_word``'s bit
  slices recover the fields of real compiled program words;
* pyslang parses and elaborates the files with a small ``uvm_pkg`` stub
  (tests/sv/), with no diagnostic at all, and reports deliberately broken
  edits;
* slang's constant evaluator runs the package's ``decode_word``,
  ``encode_fields``, ``is_legal_word`` and ``disasm`` on every word of the
  compiled tiny-qwen2 reshard and on hand-made words, and they must agree
  with ``hw.isa.decode`` and ``gen.asm.disassemble_word``.

The item's legality constraints come from ``gen.sv.RULES``; each rule's
boundary runs through the golden model here.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from gen.api import CompileOptions, compile_reshard
from gen.asm import assemble, disassemble_word
from gen.cli import main
from gen.sv import (ITEM_FILE, PKG_FILE, RULES, check_sv, decode_slices, item_fields, rule_violation,
                    sv_files)
from hw.hostport import ADDR_WIDTH, REGISTERS
from hw.isa import (ELEMENT_BYTES, FORMATS, OP_SINCE, SUPPORTED_VERSIONS, WORD_BITS, ArchParams, Cause, Op,
                    Status, decode, encode, field_of, reserved_mask)
from model.golden import run_golden

STUBS = Path(__file__).resolve().parent / "sv"
STUB_FILES = [STUBS / "uvm_pkg_stub.sv"]
TOP = STUBS / "top.sv"


# ---------------------------------------------------------------- words to check

@pytest.fixture(scope="module")
def program_words() -> list[int]:
    """Every word of the compiled tiny-qwen2 reshard (both devices)."""
    built = compile_reshard(CompileOptions(images=False))
    words = [w for d in built.devices for w in d.words]
    assert len(words) > 100
    return words


# one of each opcode, with non-zero fields everywhere a field can be
HAND_WRITTEN = """\
version 2
copy chan=3 ctx=2 tag=0xbeef src=0x123456789abc dst=0xfedcba987654 row_bytes=0xdeadbeef rows=7 src_stride=0x80000001 dst_stride=0xffffffff
copy_add_f32 chan=1 ctx=1 tag=1 src=0x1000 dst=0x2000 row_bytes=64 rows=2 src_stride=0x40 dst_stride=0x40
copy_add_bf16 chan=2 ctx=3 tag=65535 src=0x2 dst=0x4 row_bytes=6 rows=1 src_stride=0x0 dst_stride=0x2
fence mask=0xa5a5
remap ctx=15 size=3 perm=w staged=1 dev=255 va=0xffffffffffff pa=0x800000000001
remap ctx=1 size=0 perm=r staged=0 dev=1 va=0x10000 pa=0x0
inval ctx=7 size=2 staged=1 va=0xabcdef012345
signal dev=200 sem=255
wait sem=17 count=65535
commit ctx=9
halt
"""


def _illegal_words() -> list[int]:
    halt = encode(Op.HALT)
    return [0, 0xFF, 0x0C, halt | 1 << 8, halt | 1 << (WORD_BITS - 1),
            encode(Op.REMAP, ctx=1) | 1 << 17, encode(Op.WAIT) | 1 << 8, encode(Op.INVAL) | 1 << 14]


def _all_words(program_words) -> list[int]:
    return program_words + assemble(HAND_WRITTEN) + _illegal_words()


# ---------------------------------------------------------------- text vs the tables

def test_package_names_every_table_entry_with_its_value():
    pkg = sv_files()[PKG_FILE]
    for op in Op:
        assert re.search(rf"^    OP_{op.name} = 8'h{int(op):02x}[, ]", pkg, re.M), op
        if op is Op.ILLEGAL:
            continue
        for f in FORMATS[op]:
            assert f"logic [{f.width - 1}:0] {f.name};  // [{f.lsb + f.width - 1}:{f.lsb}]" in pkg, (op, f)
    for s in Status:
        assert re.search(rf"^    STATUS_{s.name} = 3'd{int(s)}[, ]", pkg, re.M), s
    for c in Cause:
        assert re.search(rf"^    CAUSE_{c.name} = 6'd{int(c)}[, ]", pkg, re.M), c
    for r in REGISTERS:
        assert re.search(rf"^    REG_{r.name} = {ADDR_WIDTH}'h{r.offset:02x}[, ]  // {r.access} ", pkg, re.M), r.name
    versions = ", ".join(map(str, SUPPORTED_VERSIONS))
    assert f"SUPPORTED_VERSIONS [N_SUPPORTED_VERSIONS] = '{{{versions}}};" in pkg
    arch = ArchParams()
    assert f"DEFAULT_CHANNELS = {arch.channels};" in pkg
    assert f"DEFAULT_PAGE_SIZES [4] = '{{{', '.join(map(str, arch.page_sizes))}}};" in pkg


def test_register_structs_are_32_bits_and_place_every_field():
    pkg = sv_files()[PKG_FILE]
    for r in REGISTERS:
        if not r.fields or (len(r.fields) == 1 and r.fields[0].width == 32):
            assert f"reg_{r.name.lower()}_t;" not in pkg
            continue
        m = re.search(rf"typedef struct packed {{  // {r.name} \(0x{r.offset:03x}\)\n(.*?)\n  }} reg_{r.name.lower()}_t;",
                      pkg, re.S)
        assert m, r.name
        members = re.findall(r"logic \[(\d+):0\] (\w+);", m.group(1))
        assert sum(int(msb) + 1 for msb, _ in members) == 32, r.name
        lsb = 32
        placed = {}
        for msb, name in members:            # most significant first
            lsb -= int(msb) + 1
            placed[name] = (lsb, int(msb) + 1)
        for f in r.fields:
            assert placed[f.name] == (f.lsb, f.width), (r.name, f.name)


def test_decode_slices_recover_the_fields_of_real_words(program_words):
    """The slices ``decode_word`` is generated from, applied in Python to every
    word of a compiled program, give what ``hw.isa.decode`` gives; and each
    slice is in the generated function, under its opcode."""
    slices = decode_slices()
    words = program_words + assemble(HAND_WRITTEN)
    seen = set()
    for w in words:
        dec = decode(w)
        got = {name: (w >> lsb) & ((1 << (msb - lsb + 1)) - 1) for name, msb, lsb in slices[dec.op]}
        assert got == dec.fields, disassemble_word(w)
        seen.add(dec.op)
    assert seen == set(slices)
    pkg = sv_files()[PKG_FILE]
    body = pkg[pkg.index("function automatic insn_fields_t decode_word"):]
    body = body[:body.index("endfunction")]
    for op, sl in slices.items():
        if not sl:
            continue
        case = re.search(rf"^      ([A-Z_0-9, ]*\bOP_{op.name}\b[A-Z_0-9, ]*): begin\n(.*?)^      end", body, re.M | re.S)
        assert case, op
        assert case.group(2).split("\n")[:-1] == [f"        f.{n} = w[{msb}:{lsb}];" for n, msb, lsb in sl]


def test_item_fields_cover_every_format_and_constraints_cover_every_rule():
    item = sv_files()[ITEM_FILE]
    widest = item_fields()
    for op in Op:
        if op is Op.ILLEGAL:
            assert "OP_ILLEGAL" not in item      # never randomized
            continue
        for f in FORMATS[op]:
            assert widest[f.name] >= f.width
            assert f"    rand bit [{widest[f.name] - 1}:0] {f.name};" in item
    for r in RULES:
        for name in r.fields:
            lines = [ln for ln in item.splitlines() if ln.endswith(f"// {r.cause.name}") and f"{name} " in ln
                     and all(f"OP_{op.name}" in ln for op in r.ops)]
            assert lines, (r, name)
    # every instruction-local ILLEGAL cause is a rule, or one of the encoding checks
    # (c_opcode, c_unused, c_version); the rest are about a whole program
    encoding = {Cause.BAD_OPCODE, Cause.RESERVED_BITS, Cause.VERSION_MISMATCH}
    program = {Cause.COMMIT_UNFENCED, Cause.PC_OVERFLOW, Cause.DEADLOCK}
    illegal = {c for c in Cause if c >= Cause.BAD_OPCODE}
    assert illegal == {r.cause for r in RULES} | encoding | program


# ---------------------------------------------------------------- the rules vs the golden model

def _golden_status(arch: ArchParams, declared: int, op: Op, fields: dict):
    """(status, cause) of device 0 running VERSION ``declared``; the instruction; HALT."""
    halt = encode(Op.HALT)
    progs = [[encode(Op.VERSION, version=declared), encode(op, **fields), halt]] + \
            [[encode(Op.VERSION, version=declared), halt] for _ in range(arch.devices - 1)]
    mems = [np.zeros(arch.mem_bytes, np.uint8) for _ in range(arch.devices)]
    res = run_golden(arch, progs, mems)
    return res.status[0], res.cause[0]


# fields the sweeps start from (every other field 0, which is legal)
_BASE = {Op.REMAP: {"perm": 3}}


@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"{r.kind}-{r.cause.name}-{'-'.join(o.name for o in r.ops)}")
def test_each_rule_is_the_golden_models(rule):
    """The value a rule forbids stops the golden model with the rule's cause;
    the nearest value it allows runs to HALT."""
    # distinct values, so that a rule bound to the wrong parameter fails
    arch = ArchParams(devices=3, contexts=5, channels=6, semaphores=7, mem_bytes=1 << 16)
    for op in rule.ops:
        version = max(SUPPORTED_VERSIONS)
        for name in rule.fields:
            if rule.kind == "below":
                bad, good, extra = getattr(arch, rule.knob), getattr(arch, rule.knob) - 1, {}
            elif rule.kind == "address":
                bad, good, extra = 1 << arch.addr_bits, (1 << arch.addr_bits) - arch.page_sizes[-1], {}
            elif rule.kind == "page":
                bad, good, extra = arch.page_sizes[0], arch.page_sizes[1], {"size": 1}
            else:
                bad, good, extra = 1, 2 * 4, {}
            assert bad <= field_of(op, name).mask
            fields = {**_BASE.get(op, {}), **extra}
            assert _golden_status(arch, version, op, {**fields, name: good}) == (Status.HALTED, Cause.NONE), \
                (op, name, good)
            assert _golden_status(arch, version, op, {**fields, name: bad}) == (Status.ILLEGAL, rule.cause), \
                (op, name, bad)


def test_the_rules_are_every_check_the_golden_model_makes_of_one_instruction():
    """Each field of each opcode swept over values around every limit (one field
    at a time, in programs of both ISA versions): the golden model stops with
    ILLEGAL exactly when ``rule_violation`` (the constraints, read in Python)
    says so, with its cause; so a check missing from RULES fails here."""
    arch = ArchParams(devices=3, contexts=5, channels=6, semaphores=7, mem_bytes=1 << 12)
    # 0..8 cover the knobs (3, 5, 6, 7) and their neighbours and the element sizes
    probes = [*range(9), arch.page_sizes[1], arch.page_sizes[1] + 4096,
              (1 << arch.addr_bits) - arch.page_sizes[-1], 1 << arch.addr_bits]
    checked = illegal = 0
    for op in Op:
        if op is Op.ILLEGAL:
            continue
        for version in SUPPORTED_VERSIONS:
            base = {**_BASE.get(op, {}), **({"version": version} if op is Op.VERSION else {})}
            if version != max(SUPPORTED_VERSIONS):       # the older version: the opcode alone
                sweep = [(base, None)]
            else:
                sweep = [({**base, "size": size, f.name: v} if f.name in ("va", "pa") else {**base, f.name: v}, f)
                         for f in FORMATS[op] for v in probes if v <= f.mask
                         for size in ((0, 1) if f.name in ("va", "pa") else (0,))]
            for fields, _ in sweep:
                want = rule_violation(op, fields, arch, version)
                got = _golden_status(arch, version, op, fields)
                if want is None:
                    assert got[0] is not Status.ILLEGAL, (version, op, fields, got)
                else:
                    assert got == (Status.ILLEGAL, want), (version, op, fields, got)
                    illegal += 1
                checked += 1
    assert checked > 400 and illegal > 100


# ---------------------------------------------------------------- the command

def test_command_writes_checks_and_refuses_bad_out(tmp_path, capsys):
    out = tmp_path / "sv"
    assert main(["sv", "--check", "--out", str(out)]) == 1          # missing: stale
    assert not out.exists()
    assert main(["sv", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(sv_files())
    for name, text in sv_files().items():
        assert (out / name).read_text() == text
    assert main(["sv", "--check", "--out", str(out)]) == 0
    assert check_sv(out) == []
    (out / PKG_FILE).write_text((out / PKG_FILE).read_text().replace("8'h02", "8'h12", 1))
    assert check_sv(out) == [PKG_FILE]
    assert main(["sv", "--check", "--out", str(out)]) == 1
    (out / "mine.sv").write_text("// the user's\n")
    assert main(["sv", "--out", str(out)]) == 0                       # into an existing directory
    assert check_sv(out) == [] and (out / "mine.sv").read_text() == "// the user's\n"
    assert sorted(p.name for p in out.iterdir()) == sorted([*sv_files(), "mine.sv"])   # no temporaries left
    capsys.readouterr()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["sv", "--out", str(blocker / "sv")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out ") and err.count("\n") == 1
    assert main(["sv", "--out", str(blocker)]) == 2
    assert "not a directory" in capsys.readouterr().err


# ---------------------------------------------------------------- pyslang

def _elaborate(sources: dict[str, str], top: str = "reshard_sv_top") -> tuple[list[str], list[str]]:
    """Parse and elaborate ``{name: text}`` (in order) with tests/sv/ on the
    include path: (errors, warnings), formatted by slang."""
    pyslang = pytest.importorskip("pyslang")
    from pyslang import ast, parsing, syntax
    sm = pyslang.SourceManager()
    pp = parsing.PreprocessorOptions()
    pp.additionalIncludePaths = [str(STUBS)]
    bag = pyslang.Bag([pp])
    comp = ast.Compilation(bag)
    for name, text in sources.items():
        comp.addSyntaxTree(syntax.SyntaxTree.fromText(text, sm, name, name, bag))
    diags = list(comp.getAllDiagnostics())
    assert [i.name for i in comp.getRoot().topInstances] == [top]
    engine = pyslang.DiagnosticEngine(sm)
    errors = [engine.formatMessage(d) for d in diags if d.isError()]
    warnings = [engine.formatMessage(d) for d in diags if not d.isError()]
    return errors, warnings


def _sources(**edits) -> dict[str, str]:
    files = sv_files()
    src = {p.name: p.read_text() for p in STUB_FILES}
    src.update({name: files[name] for name in (PKG_FILE, ITEM_FILE)})
    src[TOP.name] = TOP.read_text()
    for name, (old, new) in edits.items():
        name = name.replace("__", ".")
        assert old in src[name], (name, old)
        src[name] = src[name].replace(old, new, 1)
    return src


def test_pyslang_elaborates_the_package_and_item_with_no_diagnostic():
    errors, warnings = _elaborate(_sources())
    assert errors == [] and warnings == []


def test_the_example_in_docs_sv_md_elaborates():
    doc = (Path(__file__).resolve().parent.parent / "docs" / "sv.md").read_text()
    example = re.search(r"```systemverilog\n(module tb_top;\n.*?\nendmodule)\n```", doc, re.S)
    assert example, "docs/sv.md has no tb_top example"
    src = _sources()
    del src[TOP.name]
    src["tb_top.sv"] = example.group(1) + "\n"
    errors, warnings = _elaborate(src, top="tb_top")
    assert errors == [] and warnings == []
    broken = dict(src, **{"tb_top.sv": src["tb_top.sv"].replace("item.decode(", "item.decodes(")})
    assert any("decodes" in e for e in _elaborate(broken, top="tb_top")[0])


@pytest.mark.parametrize("file, old, new, expect", [
    # a format one bit short: the packed union of all formats no longer lines up
    (PKG_FILE, "logic [31:0] rows;", "logic [30:0] rows;", "packed union"),
    # a constraint on a field the item does not have
    (ITEM_FILE, "rand bit [3:0] chan;", "rand bit [3:0] channel;", "chan"),
    # an opcode that does not exist
    (ITEM_FILE, "op inside {OP_VERSION,", "op inside {OP_VERSION2,", "OP_VERSION2"),
    # the stub without the registration macro's support
    ("uvm_pkg_stub.sv", "class uvm_object_registry", "class uvm_object_registryx", "uvm_object_registry"),
])
def test_pyslang_reports_a_broken_edit(file, old, new, expect):
    errors, _ = _elaborate(_sources(**{file.replace(".", "__"): (old, new)}))
    assert errors and any(expect in e for e in errors), errors


class _Slang:
    """The generated package loaded into slang's constant evaluator."""

    def __init__(self, pkg: str):
        from pyslang import ast
        self.session = ast.ScriptSession()
        self.session.eval(pkg)
        assert not [d for d in self.session.getDiagnostics() if d.isError()]

    def __call__(self, expr: str):
        return self.session.eval(expr).value

    def call(self, fn: str, word: int):
        return self(f"reshard_pkg::{fn}({WORD_BITS}'h{word:0{WORD_BITS // 4}x})")


@pytest.fixture(scope="module")
def slang_pkg():
    pytest.importorskip("pyslang")
    return _Slang(sv_files()[PKG_FILE])


def test_slang_runs_the_package_decoder_on_real_program_words(program_words, slang_pkg):
    """decode_word / encode_fields / is_legal_word / disasm, evaluated by slang on
    every word of the compiled reshard, hand-written words of every opcode and
    illegal words, agree with hw.isa.decode and the Python disassembler."""
    widths = item_fields()
    words = _all_words(program_words)
    legal = 0
    for w in words:
        dec = decode(w)
        ok = dec.op is not None and dec.op is not Op.ILLEGAL and dec.reserved_ok
        assert slang_pkg.call("disasm", w) == disassemble_word(w)
        assert int(slang_pkg.call("is_legal_word", w)) == ok, hex(w)
        packed = int(slang_pkg.call("decode_word", w))   # insn_fields_t: op, then the fields, MSB first
        got, pos = {}, 0
        for name in reversed(widths):
            got[name] = (packed >> pos) & ((1 << widths[name]) - 1)
            pos += widths[name]
        assert packed >> pos == w & 0xFF
        expect = dict.fromkeys(widths, 0) | (dec.fields if dec.op not in (None, Op.ILLEGAL) else {})
        assert got == expect, disassemble_word(w)
        if ok:
            legal += 1
            back = slang_pkg(f"reshard_pkg::encode_fields(reshard_pkg::decode_word("
                             f"{WORD_BITS}'h{w:0{WORD_BITS // 4}x}))")
            assert int(back) == w, disassemble_word(w)
    assert legal == len(program_words) + len(assemble(HAND_WRITTEN))
    assert legal < len(words)


def test_slang_agrees_on_the_legality_helpers(slang_pkg):
    for op in Op:
        assert int(slang_pkg(f"reshard_pkg::is_valid_opcode(8'h{int(op):02x})")) == (op is not Op.ILLEGAL)
        if op is not Op.ILLEGAL:
            assert int(slang_pkg(f"reshard_pkg::reserved_mask(reshard_pkg::OP_{op.name})")) == reserved_mask(op)
            assert int(slang_pkg(f"reshard_pkg::op_since(reshard_pkg::OP_{op.name})")) == OP_SINCE.get(op, 1)
            assert int(slang_pkg(f"reshard_pkg::element_bytes(reshard_pkg::OP_{op.name})")) == \
                ELEMENT_BYTES.get(op, 0)
    assert int(slang_pkg("reshard_pkg::is_valid_opcode(8'hff)")) == 0
    for r in REGISTERS:
        acc = slang_pkg(f"reshard_pkg::reg_access(reshard_pkg::REG_{r.name})")
        assert int(acc) == {"RO": 1, "WO": 2, "RW": 3}[r.access], r.name
