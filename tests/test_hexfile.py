"""$readmemh writer/reader."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gen.hexfile import ZERO_RUN, read_hex, read_hex_bytes, write_hex
from model.errors import InputError


def test_format_byte_order_and_header(tmp_path):
    p = tmp_path / "m.hex"
    write_hex(p, bytes(range(1, 17)), 64, comment="device 0\nsecond line")
    lines = p.read_text().splitlines()
    assert lines == ["// word_bits=64 base=0x0 words=2", "// device 0", "// second line", "@0",
                     "0807060504030201", "100f0e0d0c0b0a09"]


def test_words_and_base(tmp_path):
    p = tmp_path / "w.hex"
    write_hex(p, [1, 2**256 - 1, 0], 256, base_word=0x20)
    text = p.read_text().splitlines()
    assert text[1] == "@20" and text[2] == "0" * 63 + "1" and text[3] == "f" * 64
    assert read_hex(p, 256) == (0x20, [1, 2**256 - 1, 0])
    with pytest.raises(ValueError, match="word 0 is not a 8-bit"):
        write_hex(p, [256], 8)


def test_zero_runs_skipped_and_length_kept(tmp_path):
    p = tmp_path / "z.hex"
    data = bytearray(8 * 1000)
    data[0] = 1
    data[8 * 500 + 3] = 0xAB
    write_hex(p, bytes(data), 64)
    lines = [l for l in p.read_text().splitlines() if not l.startswith("//")]
    assert lines == ["@0", "0000000000000001", "@1f4", "00000000ab000000", "@3e7", "0" * 16]
    assert read_hex_bytes(p, 64, len(data)) == bytes(data)
    base, words = read_hex(p, 64)
    assert base == 0 and len(words) == 1000 and words[500] == 0xAB << 24
    # short zero runs are written out
    write_hex(p, [1] + [0] * (ZERO_RUN - 1) + [2], 32)
    assert sum(1 for l in p.read_text().splitlines() if l.startswith("@")) == 1


def test_leading_zeros_and_big_image_fast(tmp_path):
    p = tmp_path / "big.hex"
    rng = np.random.default_rng(0)
    mem = np.zeros(4 << 20, dtype=np.uint8)
    mem[1 << 20:(1 << 20) + 65536] = rng.integers(0, 256, 65536, dtype=np.uint8)
    mem[-1] = 7
    write_hex(p, mem, 128)
    assert p.stat().st_size < 300_000
    assert read_hex_bytes(p, 128, mem.size) == mem.tobytes()
    assert not list(tmp_path.glob("*.tmp"))


def test_reader_tolerates_readmemh_syntax(tmp_path):
    p = tmp_path / "r.hex"
    p.write_text("// hand written\n\n@2 // jump\nab cd_ef\n  1  // trailing comment\n@0\nff\n")
    assert read_hex(p, 16) == (0, [0xFF, 0, 0xAB, 0xCDEF, 1])
    assert read_hex_bytes(p, 16, 12) == bytes([0xFF, 0, 0, 0, 0xAB, 0, 0xEF, 0xCD, 1, 0, 0, 0])


@pytest.mark.parametrize("text,line,msg", [
    ("@0\n12\nxyz\n", 3, "bad hex word 'xyz'"),
    ("// c\n@zz\n", 2, "bad address '@zz'"),
    ("@0\n123\n", 2, "wider than 8 bits"),
    ("// word_bits=16 base=0x0\n@0\n12\n", 1, "word_bits=16, expected 8"),
])
def test_reader_errors_name_file_and_line(tmp_path, text, line, msg):
    p = tmp_path / "bad.hex"
    p.write_text(text)
    with pytest.raises(InputError) as ei:
        read_hex(p, 8)
    assert str(ei.value).startswith(f"{p}:{line}: ") and msg in str(ei.value)


def test_reader_size_and_missing(tmp_path):
    p = tmp_path / "s.hex"
    write_hex(p, bytes([1] * 32), 64)
    with pytest.raises(InputError, match="beyond the 16 bytes"):
        read_hex_bytes(p, 64, 16)
    with pytest.raises(InputError, match="no such file"):
        read_hex(tmp_path / "nope.hex", 64)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([8, 32, 64, 256]), st.integers(0, 40),
       st.lists(st.tuples(st.integers(0, 300), st.integers(0, 255)), max_size=20),
       st.integers(0, 300))
def test_round_trip_bytes(tmp_path_factory, word_bits, base, pokes, size):
    data = bytearray(size)
    for pos, val in pokes:
        if pos < size:
            data[pos] = val
    p = tmp_path_factory.mktemp("h") / "x.hex"
    write_hex(p, bytes(data), word_bits, base_word=base)
    wb = word_bits // 8
    b, words = read_hex(p, word_bits)
    padded = bytes(data) + bytes((-len(data)) % wb)
    assert b == base
    assert words == [int.from_bytes(padded[i:i + wb], "little") for i in range(0, len(padded), wb)]
    assert read_hex_bytes(p, word_bits, base * wb + len(padded)) == bytes(base * wb) + padded
