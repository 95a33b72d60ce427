"""``$readmemh`` image files: writer and reader.

Format written::

    // word_bits=256 base=0x0 words=12
    // <comment lines, each prefixed with "// ">
    @0
    <word 0: word_bits/4 hex digits>
    <word 1>
    @40
    <word 64>
    ...

Each line holds one word of ``word_bits`` bits as ``word_bits/4`` hex digits,
most significant first; a word is built from ``word_bits/8`` consecutive
bytes of the image, little-endian (byte 0 of the word is its least
significant byte). ``@<hex>`` sets the *word* address of the next word.
Runs of at least ``ZERO_RUN`` zero words are skipped with a new ``@`` line
(memory that ``$readmemh`` does not load stays zero in our testbenches); the
last word of the image is always written, so the reader recovers the length.

The reader accepts any ``$readmemh``-style text: ``//`` comments (whole-line
or trailing), blank lines, ``@`` jumps, several words per line, ``_`` inside
numbers. A malformed line raises ``InputError`` naming ``file:line``.
Writes go to a temporary file that is renamed into place.
"""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import numpy as np

from model.errors import InputError

__all__ = ["write_hex", "read_hex", "read_hex_bytes", "ZERO_RUN", "atomic_write_text"]

ZERO_RUN = 8
_HEX = re.compile(r"^[0-9a-fA-F](?:_?[0-9a-fA-F])*$")


def _check_word_bits(word_bits: int):
    if not isinstance(word_bits, int) or word_bits <= 0 or word_bits % 8:
        raise ValueError(f"word_bits must be a positive multiple of 8, not {word_bits!r}")


def atomic_write_text(path, text: str):
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="ascii", newline="\n") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _words_as_bytes(data, word_bits: int) -> np.ndarray:
    """(n, word_bytes) uint8 array, little-endian bytes of each word."""
    wb = word_bits // 8
    if isinstance(data, (bytes, bytearray, memoryview, np.ndarray)):
        b = np.frombuffer(bytes(data), dtype=np.uint8) if not isinstance(data, np.ndarray) \
            else np.asarray(data, dtype=np.uint8).reshape(-1)
        pad = (-b.size) % wb
        if pad:
            b = np.concatenate([b, np.zeros(pad, dtype=np.uint8)])
        return b.reshape(-1, wb)
    words = list(data)
    out = bytearray()
    for i, w in enumerate(words):
        if not isinstance(w, (int, np.integer)) or not 0 <= int(w) < 1 << word_bits:
            raise ValueError(f"word {i} is not a {word_bits}-bit unsigned integer: {w!r}")
        out += int(w).to_bytes(wb, "little")
    return np.frombuffer(bytes(out), dtype=np.uint8).reshape(-1, wb)


def write_hex(path, data, word_bits: int, base_word: int = 0, comment: str = "") -> None:
    """Write ``data`` (bytes, or a list of ``word_bits``-bit ints) as a
    ``$readmemh`` image whose first word lies at word address ``base_word``."""
    _check_word_bits(word_bits)
    if base_word < 0:
        raise ValueError(f"base_word must be >= 0, not {base_word!r}")
    arr = _words_as_bytes(data, word_bits)
    n = arr.shape[0]
    digits = word_bits // 4
    lines = [f"// word_bits={word_bits} base=0x{base_word:x} words={n}\n"]
    for c in comment.splitlines():
        lines.append(f"// {c}\n".replace("// \n", "//\n"))
    if n:
        # hex text of every word, most significant byte first
        text = arr[:, ::-1].tobytes().hex()
        nonzero = arr.any(axis=1)
        nonzero[-1] = True                    # keep the length recoverable
        nz = np.flatnonzero(nonzero)             # never empty: the last word is in it
        gaps = np.flatnonzero(np.diff(nz) - 1 >= ZERO_RUN)
        starts = [0 if nz[0] < ZERO_RUN else int(nz[0])] + [int(nz[k + 1]) for k in gaps]
        ends = [int(nz[k]) + 1 for k in gaps] + [n]
        for i, j in zip(starts, ends):
            lines.append(f"@{base_word + i:x}\n")
            seg = text[i * digits:j * digits]
            lines.append("\n".join(seg[k:k + digits] for k in range(0, len(seg), digits)) + "\n")
    atomic_write_text(path, "".join(lines))


def read_hex(path, word_bits: int) -> tuple[int, list[int]]:
    """Read a ``$readmemh`` image: (first word address, words from there on).

    Words between ``@`` jumps that the file does not set are 0."""
    _check_word_bits(word_bits)
    base, arr = _read(path, word_bits)
    wb = word_bits // 8
    raw = arr.tobytes()
    return base, [int.from_bytes(raw[i:i + wb], "little") for i in range(0, len(raw), wb)]


def read_hex_bytes(path, word_bits: int, size: int, exact: bool = False) -> bytes:
    """Read a ``$readmemh`` image as ``size`` bytes of memory starting at word
    address 0 (unset bytes are 0). Data beyond ``size`` is an InputError; with
    ``exact``, so is an image that ends short of ``size`` (the writer always
    writes the last word, so a whole image ends exactly at ``size``)."""
    _check_word_bits(word_bits)
    base, arr = _read(path, word_bits)
    wb = word_bits // 8
    start = base * wb
    flat = arr.reshape(-1)
    if exact and start + flat.size < size:
        raise InputError(f"{path}: image holds {start + flat.size:,} bytes, the memory is {size:,} bytes "
                         f"(a truncated image?)")
    if start + flat.size > size and flat[max(0, size - start):].any():
        raise InputError(f"{path}: image extends to byte 0x{start + flat.size:x}, beyond "
                         f"the {size} bytes expected")
    out = np.zeros(size, dtype=np.uint8)
    k = max(0, min(flat.size, size - start))
    out[start:start + k] = flat[:k]
    return out.tobytes()


def _read(path, word_bits: int) -> tuple[int, np.ndarray]:
    wb = word_bits // 8
    digits = word_bits // 4
    try:
        text = Path(path).read_text(encoding="ascii", errors="strict")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not a text file ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror})") from None
    chunks: list[tuple[int, list[str]]] = []   # (word address, hex strings)
    addr = 0
    cur: list[str] | None = None
    base = None
    hdr_base = hdr_words = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if lineno == 1 or line.startswith("//"):
            m = re.match(r"^//\s*word_bits=(\d+)(?:\s+base=0x([0-9a-fA-F]+))?"
                         r"(?:\s+words=(\d+))?", line)
            if m:
                if int(m.group(1)) != word_bits:
                    raise InputError(f"{path}:{lineno}: image has word_bits={m.group(1)}, "
                                     f"expected {word_bits}")
                if m.group(2) is not None:
                    hdr_base = int(m.group(2), 16)
                if m.group(3) is not None:
                    hdr_words = int(m.group(3))
        line = line.split("//", 1)[0]
        for tok in line.split():
            if tok.startswith("@"):
                a = tok[1:]
                if not _HEX.match(a):
                    raise InputError(f"{path}:{lineno}: bad address {tok!r}")
                addr = int(a.replace("_", ""), 16)
                cur = None
                continue
            if not _HEX.match(tok):
                raise InputError(f"{path}:{lineno}: bad hex word {tok!r}")
            h = tok.replace("_", "").lstrip("0") or "0"
            if len(h) > digits:
                raise InputError(f"{path}:{lineno}: word {tok!r} wider than {word_bits} bits")
            if base is None or addr < base:
                base = addr if base is None else min(base, addr)
            if cur is None:
                cur = []
                chunks.append((addr, cur))
            cur.append(h.rjust(digits, "0"))
            addr += 1
    if hdr_base is not None:
        base = hdr_base if base is None else min(base, hdr_base)
    if base is None:
        return 0, np.zeros((0, wb), dtype=np.uint8)
    end = max([a + len(c) for a, c in chunks] + [base])
    if hdr_words is not None and hdr_base == base:
        if end < base + hdr_words:
            # the writer always writes the last word: less data than declared is a cut file
            raise InputError(f"{path}: the header declares {hdr_words:,} words, the data ends at word "
                             f"{end - base:,} (a truncated image of {(end - base) * wb:,} bytes?)")
        end = max(end, base + hdr_words)
    out = np.zeros((end - base, wb), dtype=np.uint8)
    for a, c in chunks:
        b = np.frombuffer(bytes.fromhex("".join(c)), dtype=np.uint8).reshape(-1, wb)[:, ::-1]
        out[a - base:a - base + len(c)] = b
    return base, out
