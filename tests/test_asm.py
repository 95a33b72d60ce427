"""Assembler / disassembler: encodings, round trips, error messages, CLI."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from gen.asm import assemble, disassemble, disassemble_word
from gen.cli import main as cli_main
from gen.hexfile import read_hex
from hw.isa import FORMATS, ISA_VERSION, SUPPORTED_VERSIONS, WORD_BITS, Op, decode, encode
from model.errors import InputError
from verif.programs import any_words, valid_words

REPO = Path(__file__).resolve().parents[1]


def test_assemble_every_instruction_by_hand():
    src = """
    ; a comment line

    version 1
    copy dst_stride=0x20 chan=3 ctx=2 tag=7 src=0x1000 dst=0x2_000 row_bytes=16 rows=4 src_stride=32
    fence mask=0x5          ; trailing comment
    fence mask=0
    remap ctx=1 size=2 perm=rw staged=1 dev=3 va=0x100000 pa=0x200000
    remap perm=r ctx=0 size=0 staged=0 dev=0 va=0 pa=0
    remap perm=w ctx=0 size=0 staged=0 dev=0 va=0 pa=0
    remap perm=- ctx=0 size=0 staged=0 dev=0 va=0 pa=0
    remap perm=2 ctx=0 size=0 staged=0 dev=0 va=0 pa=0
    inval ctx=1 size=1 staged=1 va=0x10000
    signal dev=2 sem=5
    wait sem=5 count=3
    commit ctx=1
    halt
    version version=1
    .word 0x12345
    """
    words = assemble(src)
    assert words == [
        encode(Op.VERSION, version=1),
        encode(Op.COPY, chan=3, ctx=2, tag=7, src=0x1000, dst=0x2000, row_bytes=16, rows=4,
               src_stride=32, dst_stride=0x20),
        encode(Op.FENCE, mask=5),
        encode(Op.FENCE),
        encode(Op.REMAP, ctx=1, size=2, perm=3, staged=1, dev=3, va=0x100000, pa=0x200000),
        encode(Op.REMAP, perm=1), encode(Op.REMAP, perm=2), encode(Op.REMAP, perm=0),
        encode(Op.REMAP, perm=2),
        encode(Op.INVAL, ctx=1, size=1, staged=1, va=0x10000),
        encode(Op.SIGNAL, dev=2, sem=5),
        encode(Op.WAIT, sem=5, count=3),
        encode(Op.COMMIT, ctx=1),
        encode(Op.HALT),
        encode(Op.VERSION, version=1),
        0x12345,
    ]
    # bit positions independently of hw.isa.encode: COPY src at bit 32, dst at bit 80
    assert (words[1] >> 32) & (2**48 - 1) == 0x1000 and (words[1] >> 80) & (2**48 - 1) == 0x2000
    assert words[1] & 0xFF == 0x02 and (words[1] >> 8) & 0xF == 3 and words[1] >> 224 == 0x20


def test_disassemble_canonical_form():
    text = disassemble(assemble(
        "version 1\ncopy src=4096 chan=1 ctx=0 tag=0 dst=0 row_bytes=0 rows=0 src_stride=0 dst_stride=0\nremap perm=rw va=65536 size=1 ctx=0 staged=0 dev=0 pa=0\nfence mask=3\nhalt\n.word 0"))
    assert text.splitlines() == [
        "version 1",
        "copy chan=1 ctx=0 tag=0 src=0x1000 dst=0x0 row_bytes=0 rows=0 src_stride=0x0 dst_stride=0x0",
        "remap ctx=0 size=1 perm=rw staged=0 dev=0 va=0x10000 pa=0x0",
        "fence mask=0x3",
        "halt",
        ".word 0x" + "0" * 64,
    ]
    # canonical text is a fixed point
    assert disassemble(assemble(text)) == text


def test_disassemble_illegal_words_as_dot_word():
    for w in [0, 0xFF, encode(Op.HALT) | 1 << 255, encode(Op.FENCE) | 1 << 30]:
        s = disassemble_word(w)
        assert s == f".word 0x{w:064x}"
        assert assemble(s) == [w]


@settings(max_examples=400, deadline=None)
@given(st.lists(any_words(), max_size=8))
def test_round_trip_any_words(words):
    text = disassemble(words)
    assert assemble(text, allow_version_mismatch=True) == words
    assert disassemble(assemble(text, allow_version_mismatch=True)) == text


@settings(max_examples=300, deadline=None)
@given(valid_words())
def test_valid_words_disassemble_to_mnemonics(word):
    s = disassemble_word(word)
    assert not s.startswith(".word")
    d = decode(word)
    assert s.split()[0] == d.op.name.lower()
    # every field present, in FORMATS order (version is positional)
    if d.op is not Op.VERSION:
        assert [t.split("=")[0] for t in s.split()[1:]] == [f.name for f in FORMATS[d.op]]
    assert assemble(s, allow_version_mismatch=True) == [word]


@pytest.mark.parametrize("line,col,msg", [
    ("copy foo=1 chan=0 ctx=0 tag=0 src=0 dst=0 row_bytes=0 rows=0 src_stride=0 dst_stride=0", 6, "unknown field 'foo' for copy"),
    ("copy chan=1 chan=2 ctx=0 tag=0 src=0 dst=0 row_bytes=0 rows=0 src_stride=0 dst_stride=0", 13, "field 'chan' given twice"),
    ("frob x=1", 1, "unknown mnemonic 'frob'"),
    ("COPY chan=1", 1, "unknown mnemonic 'COPY'"),
    ("copy chan=16 ctx=0 tag=0 src=0 dst=0 row_bytes=0 rows=0 src_stride=0 dst_stride=0", 11, "does not fit in field 'chan' (4 bits)"),
    ("copy src=0x1000000000000 chan=0 ctx=0 tag=0 dst=0 row_bytes=0 rows=0 src_stride=0 dst_stride=0", 10, "does not fit in field 'src' (48 bits)"),
    ("copy chan=abc ctx=0 tag=0 src=0 dst=0 row_bytes=0 rows=0 src_stride=0 dst_stride=0", 11, "bad value 'abc' for field 'chan'"),
    ("copy chan=-1 ctx=0 tag=0 src=0 dst=0 row_bytes=0 rows=0 src_stride=0 dst_stride=0", 11, "bad value '-1'"),
    ("copy chan", 6, "expected key=value"),
    ("remap perm=x ctx=0 size=0 staged=0 dev=0 va=0 pa=0", 12, "bad value 'x' for field 'perm' (use r, w, rw or -)"),
    ("remap perm=4 ctx=0 size=0 staged=0 dev=0 va=0 pa=0", 12, "does not fit in field 'perm'"),
    ("remap staged=2 ctx=0 size=0 perm=0 dev=0 va=0 pa=0", 14, "staged must be 0 or 1"),
    ("remap size=4K ctx=0 perm=0 staged=0 dev=0 va=0 pa=0", 12, "bad value '4K' for field 'size'"),
    ("halt now=1", 6, "unknown field 'now' for halt (it has no fields)"),
    ("copy chan=0 ctx=0", 1, "copy is missing field(s) tag, src, dst, row_bytes, rows, src_stride, dst_stride"),
    ("  fence", 3, "fence is missing field(s) mask (every field must be given, e.g. mask=0)"),
    ("remap ctx=1 size=0 perm=rw dev=0 va=0 pa=0", 1, "remap is missing field(s) staged"),
    ("inval ctx=1 size=0 va=0", 1, "inval is missing field(s) staged"),
    ("signal dev=1", 1, "signal is missing field(s) sem"),
    ("wait sem=0", 1, "wait is missing field(s) count"),
    ("commit", 1, "commit is missing field(s) ctx"),
    (".word", 1, ".word takes exactly one value"),
    (".word 0x" + "1" * 65, 7, "bad .word value"),
    ("  wait  sem=1 cnt=2", 15, "unknown field 'cnt' for wait"),
])
def test_error_messages_name_file_line_column(line, col, msg):
    src = "version 1\n; comment\n" + line + "   ; trailing\n"
    with pytest.raises(InputError) as ei:
        assemble(src, "prog.s")
    text = str(ei.value)
    assert text.startswith(f"prog.s:3:{col}: "), text
    assert msg in text


def test_version_mismatch_refused_unless_allowed():
    src = f"; header\nversion {ISA_VERSION + 1}\nhalt\n"
    with pytest.raises(InputError, match=r"prog\.s:2:1: program is for ISA version 3, this hardware "
                                         r"runs versions 1, 2 \(use --allow-version-mismatch"):
        assemble(src, "prog.s")
    assert assemble(src, "prog.s", allow_version_mismatch=True)[0] == encode(Op.VERSION, version=3)
    with pytest.raises(InputError, match=r"p\.s:1:1: program is for ISA version 0,"):
        assemble("version 0\nhalt", "p.s")
    # only the first instruction counts; a program without version is assembled
    assert assemble("halt\nversion 7") == [encode(Op.HALT), encode(Op.VERSION, version=7)]


@pytest.mark.parametrize("version", [1, 2])
def test_every_supported_version_is_accepted(version):
    assert SUPPORTED_VERSIONS == (1, 2)
    src = f"version {version}\nfence mask=0\nhalt\n"
    assert assemble(src, "p.s") == [encode(Op.VERSION, version=version), encode(Op.FENCE),
                                    encode(Op.HALT)]


COPY_FIELDS = "chan=3 ctx=2 tag=0xbeef src=0x1003 dst=0x20040 row_bytes=256 rows=9 " \
              "src_stride=0x104 dst_stride=0x0"


@pytest.mark.parametrize("op", [Op.COPY_ADD_F32, Op.COPY_ADD_BF16])
def test_reduce_copy_mnemonics_round_trip(op):
    mnem = op.name.lower()
    assert mnem in ("copy_add_f32", "copy_add_bf16")
    words = assemble(f"version 2\n{mnem} {COPY_FIELDS}\nhalt\n", "p.s")
    want = encode(op, chan=3, ctx=2, tag=0xBEEF, src=0x1003, dst=0x20040, row_bytes=256, rows=9,
                  src_stride=0x104, dst_stride=0)
    assert words[1] == want and words[1] & 0xFF == int(op)
    text = disassemble(words)
    assert text.splitlines()[1] == f"{mnem} chan=3 ctx=2 tag=48879 src=0x1003 dst=0x20040 " \
                                   "row_bytes=256 rows=9 src_stride=0x104 dst_stride=0x0"
    assert assemble(text) == words
    # every field required, as for copy
    with pytest.raises(InputError, match=rf"p\.s:2:1: {mnem} is missing field\(s\) dst_stride"):
        assemble(f"version 2\n{mnem} {COPY_FIELDS.replace(' dst_stride=0x0', '')}", "p.s")


@pytest.mark.parametrize("op", [Op.COPY_ADD_F32, Op.COPY_ADD_BF16])
def test_reduce_copy_needs_isa_version_2(op):
    mnem = op.name.lower()
    src = f"version 1\nfence mask=0\n   {mnem} {COPY_FIELDS}\nhalt\n"
    with pytest.raises(InputError) as ei:
        assemble(src, "prog.s")
    assert str(ei.value) == f"prog.s:3:4: {mnem} needs ISA version 2; the program declares version 1"
    words = assemble(src, "prog.s", allow_version_mismatch=True)
    assert words[2] & 0xFF == int(op)
    # the same instruction in a version 2 program
    assert assemble(src.replace("version 1", "version 2"), "prog.s")[2] == words[2]


def test_version_1_programs_assemble_as_before():
    src = """version 1
remap ctx=1 size=0 perm=rw staged=0 dev=0 va=0x10000 pa=0x0
copy chan=0 ctx=1 src=0x10000 dst=0x10800 row_bytes=256 rows=4 src_stride=0x100 dst_stride=0x200 tag=0
fence mask=0
signal dev=1 sem=0
wait sem=0 count=1
inval ctx=1 size=0 staged=0 va=0x10000
commit ctx=1
halt
"""
    words = assemble(src, "v1.s")
    assert words[0] == encode(Op.VERSION, version=1)
    assert [decode(w).op for w in words] == [Op.VERSION, Op.REMAP, Op.COPY, Op.FENCE, Op.SIGNAL,
                                             Op.WAIT, Op.INVAL, Op.COMMIT, Op.HALT]
    assert words[2] == encode(Op.COPY, chan=0, ctx=1, src=0x10000, dst=0x10800, row_bytes=256,
                              rows=4, src_stride=0x100, dst_stride=0x200, tag=0)
    assert assemble(disassemble(words), "v1.s") == words


def test_cli_asm_disasm(tmp_path, capsys):
    s = tmp_path / "p.s"
    s.write_text("version 1\nremap ctx=1 perm=rw va=0x1000 size=0 staged=0 dev=0 pa=0\ncopy chan=1 rows=2 row_bytes=8 ctx=0 tag=0 src=0 dst=0 src_stride=0 dst_stride=0\nhalt\n")
    out = tmp_path / "out" / "p.hex"
    assert cli_main(["asm", str(s), "-o", str(out)]) == 0
    base, words = read_hex(out, WORD_BITS)
    assert base == 0 and words == assemble(s.read_text())
    assert cli_main(["disasm", str(out), "-o", str(tmp_path / "d.s")]) == 0
    d = (tmp_path / "d.s").read_text()
    assert assemble(d) == words
    assert "remap ctx=1 size=0 perm=rw staged=0 dev=0 va=0x1000 pa=0x0" in d
    capsys.readouterr()
    assert cli_main(["disasm", str(out)]) == 0
    assert capsys.readouterr().out == d
    assert not list(tmp_path.glob("**/*.tmp"))


def test_cli_errors_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.s"
    bad.write_text("version 1\n\ncopy chan=1 bogus=3 ctx=0 tag=0 src=0 dst=0 row_bytes=0 rows=0 src_stride=0 dst_stride=0\n")
    assert cli_main(["asm", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"error: {bad}:3:13: unknown field 'bogus' for copy (fields: chan, ctx, tag, " \
                          "src, dst, row_bytes, rows, src_stride, dst_stride)"
    v3 = tmp_path / "v3.s"
    v3.write_text("version 3\nhalt\n")
    assert cli_main(["asm", str(v3)]) == 2
    assert "--allow-version-mismatch" in capsys.readouterr().err
    assert not (tmp_path / "v3.hex").exists()
    assert cli_main(["asm", str(v3), "--allow-version-mismatch"]) == 0
    assert read_hex(tmp_path / "v3.hex", WORD_BITS)[1][0] == encode(Op.VERSION, version=3)
    v1add = tmp_path / "v1add.s"
    v1add.write_text("version 1\ncopy_add_bf16 " + COPY_FIELDS + "\nhalt\n")
    assert cli_main(["asm", str(v1add)]) == 2
    assert capsys.readouterr().err.strip() == (f"error: {v1add}:2:1: copy_add_bf16 needs ISA version 2; "
                                               "the program declares version 1")
    assert not (tmp_path / "v1add.hex").exists()
    assert cli_main(["asm", str(tmp_path / "missing.s")]) == 2
    h = tmp_path / "bad.hex"
    h.write_text("@0\nzz\n")
    assert cli_main(["disasm", str(h)]) == 2
    assert f"{h}:2: bad hex word 'zz'" in capsys.readouterr().err


def test_python_m_gen_asm_subprocess(tmp_path):
    s = tmp_path / "p.s"
    s.write_text("version 1\nhalt\n")
    r = subprocess.run([sys.executable, "-m", "gen", "asm", str(s)], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    words = read_hex(tmp_path / "p.hex", WORD_BITS)[1]
    assert words == [encode(Op.VERSION, version=1), encode(Op.HALT)]
    s.write_text("version 1\nhalt 3\n")
    r = subprocess.run([sys.executable, "-m", "gen", "asm", str(s)], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and ":2:6:" in r.stderr
