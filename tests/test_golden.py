"""Golden model tests: hand-written programs checked byte for byte against
expectations computed with plain Python loops, and hypothesis programs checked
against a tiny independent per-byte reference interpreter (``RefSystem``)."""
from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gen.asm import assemble
from hw.isa import (FORMATS, ISA_VERSION, OPCODE_BITS, WORD_BITS, ArchParams, Cause, Op, Status,
                    decode, encode, reserved_mask)
from model.golden import GoldenSystem, TranslationError
from tests import fpref
from verif.programs import SystemCase, systems

PG = 4096
ARCH = ArchParams(devices=3, mem_bytes=16 * PG, page_sizes=(PG, 4 * PG, 8 * PG, 16 * PG),
                  tlb_entries=24, contexts=4, channels=4, semaphores=4, imem_words=64,
                  addr_bits=20)


def pattern(n, seed):
    return bytes((i * 7 + seed * 13 + (i >> 8)) & 0xFF for i in range(n))


def mems(arch=ARCH, seeds=None):
    return [pattern(arch.mem_bytes, d if seeds is None else seeds[d]) for d in range(arch.devices)]


def run(progs, arch=ARCH, memories=None):
    """Assemble one program text per device (missing devices: version + halt)."""
    texts = list(progs) + ["version 1\nhalt"] * (arch.devices - len(progs))
    words = [assemble(t, f"dev{d}.s", allow_version_mismatch=True) for d, t in enumerate(texts)]
    sys_ = GoldenSystem(arch, words, memories if memories is not None else mems(arch))
    return sys_, sys_.run()


def ident(ctx=1, pages=range(16), perm="rw", dev=0, size=0, staged=0, va_off=0):
    return "\n".join(f"remap ctx={ctx} size={size} perm={perm} staged={staged} dev={dev} "
                     f"va={va_off + p * ARCH.page_sizes[size]:#x} pa={p * ARCH.page_sizes[size]:#x}"
                     for p in pages)


def ref_copy(mem_src: bytearray, mem_dst: bytearray, src, dst, row_bytes, rows, ss, ds):
    """Plain byte loop over physical memory (identity mapping)."""
    for i in range(rows):
        for j in range(row_bytes):
            mem_dst[dst + i * ds + j] = mem_src[src + i * ss + j]


# ---------------------------------------------------------------- COPY, byte exact
def test_copy_2d_strided_local():
    prog = f"""version 1
{ident(pages=range(16))}
copy chan=0 ctx=1 src=0x100 dst=0x8010 row_bytes=37 rows=11 src_stride=0x50 dst_stride=0x40 tag=0
fence mask=0
halt"""
    s, r = run([prog])
    exp = [bytearray(m) for m in mems()]
    ref_copy(exp[0], exp[0], 0x100, 0x8010, 37, 11, 0x50, 0x40)
    assert r.status == [Status.HALTED] * 3
    assert r.memories[0].tobytes() == bytes(exp[0])
    assert r.memories[1].tobytes() == bytes(exp[1])
    assert r.bytes_copied[0] == 37 * 11 and r.descriptors[0] == 1
    assert r.faults == []
    assert r.pc[0] == 16 + 3


def test_copy_many_rows_vector_path_and_row_crossing_pages():
    # 200 rows of 24 bytes with stride 150: some rows straddle a 4 KiB page
    prog = f"""version 1
{ident(pages=range(16))}
copy chan=1 ctx=1 src=0x10 dst=0x8000 row_bytes=24 rows=200 src_stride=150 dst_stride=24 tag=0
copy chan=2 ctx=1 src=0x7000 dst=0xc000 row_bytes=8 rows=300 src_stride=0x10 dst_stride=0x8 tag=0
fence mask=0
halt"""
    s, r = run([prog])
    exp = [bytearray(m) for m in mems()]
    ref_copy(exp[0], exp[0], 0x10, 0x8000, 24, 200, 150, 24)
    ref_copy(exp[0], exp[0], 0x7000, 0xc000, 8, 300, 0x10, 0x8)
    assert r.status[0] is Status.HALTED
    assert r.memories[0].tobytes() == bytes(exp[0])


def test_copy_remote_destination_and_scattered_mapping():
    # ctx 2: va page k -> device 1 page (15 - k); source ctx 2 pages 0..3 local
    maps = "\n".join(f"remap ctx=2 size=0 perm=w dev=1 va={(8 + k) * PG:#x} pa={(15 - k) * PG:#x} staged=0"
                     for k in range(4))
    prog = f"""version 1
{ident(ctx=2, pages=range(4), perm='r')}
{maps}
copy chan=3 ctx=2 src=0x0ff0 dst=0x8ff8 row_bytes=0x1800 rows=1 tag=0 src_stride=0 dst_stride=0
fence mask=0x8
halt"""
    s, r = run([prog])
    m0, m1 = mems()[0], bytearray(mems()[1])
    for j in range(0x1800):
        va = 0x8ff8 + j
        page, off = divmod(va, PG)
        m1[(15 - (page - 8)) * PG + off] = m0[0xff0 + j]
    assert r.status[0] is Status.HALTED
    assert r.memories[1].tobytes() == bytes(m1)
    assert r.memories[0].tobytes() == m0
    assert s.read_virtual(0, 2, 0x8ff8, 0x1800) == m0[0xff0:0xff0 + 0x1800]


def test_copy_zero_rows_or_bytes_is_nothing_even_unmapped():
    prog = """version 1
copy chan=0 ctx=0 src=0x100 dst=0x200 row_bytes=0 rows=5 tag=0 src_stride=0 dst_stride=0
copy chan=0 ctx=0 src=0x100 dst=0x200 row_bytes=5 rows=0 tag=0 src_stride=0 dst_stride=0
fence mask=0
halt"""
    s, r = run([prog])
    assert r.status[0] is Status.HALTED and r.faults == [] and r.descriptors[0] == 2
    assert r.memories[0].tobytes() == mems()[0]


def test_address_wraps_modulo_addr_bits():
    top = 1 << ARCH.addr_bits
    prog = f"""version 1
remap ctx=1 size=0 perm=rw dev=0 va={top - PG:#x} pa=0x3000 staged=0
remap ctx=1 size=0 perm=rw dev=0 va=0x0 pa=0x5000 staged=0
remap ctx=1 size=0 perm=rw dev=0 va=0x1000 pa=0x9000 staged=0
copy chan=0 ctx=1 src={top - 0x10:#x} dst=0x1000 row_bytes=0x20 rows=1 tag=0 src_stride=0 dst_stride=0
copy chan=1 ctx=1 src=0x1100 dst=0x1200 row_bytes=4 rows=3 src_stride={(1 << 32) - 0x40:#x} dst_stride=0x10 tag=0
fence mask=0
halt"""
    s, r = run([prog])
    m = bytearray(mems()[0])
    for j in range(0x20):
        va = (top - 0x10 + j) % top
        spa = (0x3000 + va - (top - PG)) if va >= top - PG else 0x5000 + va
        m[0x9000 + j] = m[spa]
    for i in range(3):
        for j in range(4):
            sva = (0x1100 + i * ((1 << 32) - 0x40) + j) % top   # wraps to 0x1100, 0x10c0, 0x1080
            m[0x9200 + i * 0x10 + j] = m[0x9000 + sva - 0x1000]
    assert r.status[0] is Status.HALTED, r.cause
    assert r.memories[0].tobytes() == bytes(m)


def test_overlapping_copy_is_a_forward_byte_loop():
    prog = f"""version 1
{ident(pages=range(4))}
copy chan=0 ctx=1 src=0x100 dst=0x103 row_bytes=50 rows=1 tag=0 src_stride=0 dst_stride=0
copy chan=0 ctx=1 src=0x400 dst=0x3f0 row_bytes=50 rows=1 tag=0 src_stride=0 dst_stride=0
fence mask=0
halt"""
    s, r = run([prog])
    m = bytearray(mems()[0])
    for j in range(50):
        m[0x103 + j] = m[0x100 + j]
    for j in range(50):
        m[0x3f0 + j] = m[0x400 + j]
    assert r.memories[0].tobytes() == bytes(m)


def test_lowest_numbered_overlapping_entry_wins():
    # entry 0: 4 KiB page at va 0x5000 -> pa 0xa000; entry 1: 16 KiB page at 0x4000 -> pa 0x0
    prog = """version 1
remap ctx=1 size=0 perm=r dev=0 va=0x5000 pa=0xa000 staged=0
remap ctx=1 size=1 perm=rw dev=0 va=0x4000 pa=0x0 staged=0
remap ctx=1 size=0 perm=w dev=0 va=0x20000 pa=0xf000 staged=0
copy chan=0 ctx=1 src=0x4800 dst=0x20000 row_bytes=0x2000 rows=1 tag=0 src_stride=0 dst_stride=0
fence mask=0
halt"""
    s, r = run([prog])
    m = bytearray(mems()[0])
    for j in range(0x2000):
        va = 0x4800 + j
        spa = 0xa000 + va - 0x5000 if 0x5000 <= va < 0x6000 else va - 0x4000
        m[0xf000 + j % PG] = m[spa] if j < PG else m[0xf000 + j % PG]
    # destination page is only 4 KiB: fault at va 0x21000 after 0x1000 bytes
    assert r.status[0] is Status.FAULT and r.pc[0] == 5
    assert r.faults == [{"device": 0, "channel": 0, "ctx": 1, "va": 0x21000, "cause": "NOT_MAPPED"}]
    assert r.memories[0].tobytes() == bytes(m)


# ---------------------------------------------------------------- faults
def check_partial(r, m_before, src, dst, n_done, total, dev=0):
    m = bytearray(m_before)
    for j in range(n_done):
        m[dst + j] = m_before[src + j]
    assert r.memories[dev].tobytes() == bytes(m)
    assert r.bytes_copied[0] == n_done < total


def test_fault_mid_copy_source_side_page_boundary():
    prog = f"""version 1
{ident(pages=[0, 1, 3, 4, 5, 6])}
copy chan=0 ctx=1 src=0x1f00 dst=0x4000 row_bytes=0x200 rows=1 tag=0 src_stride=0 dst_stride=0
copy chan=0 ctx=1 src=0x0 dst=0x5000 row_bytes=0x10 rows=1 tag=0 src_stride=0 dst_stride=0
copy chan=1 ctx=1 src=0x0 dst=0x6000 row_bytes=0x10 rows=1 tag=0 src_stride=0 dst_stride=0
fence mask=0x2
fence mask=0x1
halt"""
    s, r = run([prog])
    m0 = mems()[0]
    m = bytearray(m0)
    for j in range(0x100):
        m[0x4000 + j] = m0[0x1f00 + j]
    for j in range(0x10):                      # channel 1 unaffected
        m[0x6000 + j] = m0[j]
    assert r.memories[0].tobytes() == bytes(m)  # second copy on channel 0 discarded
    assert r.faults == [{"device": 0, "channel": 0, "ctx": 1, "va": 0x2000, "cause": "NOT_MAPPED"}]
    assert (r.status[0], r.cause[0], r.pc[0]) == (Status.FAULT, Cause.NOT_MAPPED, 6 + 5)
    assert r.descriptors[0] == 3 and r.bytes_copied[0] == 0x110


def test_fault_mid_copy_destination_side_no_write():
    prog = f"""version 1
{ident(pages=[0, 1, 2, 3])}
{ident(pages=[4], perm='w')}
{ident(pages=[5], perm='r')}
copy chan=2 ctx=1 src=0x100 dst=0x4f80 row_bytes=0x40 rows=4 src_stride=0x40 dst_stride=0x40 tag=0
halt"""
    s, r = run([prog])
    m0 = mems()[0]
    m = bytearray(m0)
    for j in range(0x80):
        m[0x4f80 + j] = m0[0x100 + j]
    assert r.memories[0].tobytes() == bytes(m)
    assert r.faults == [{"device": 0, "channel": 2, "ctx": 1, "va": 0x5000, "cause": "NO_WRITE"}]
    assert (r.status[0], r.cause[0]) == (Status.FAULT, Cause.NO_WRITE)


def test_fault_causes_no_read_remote_read_out_of_range():
    a = ArchParams(devices=2, mem_bytes=13 * PG, page_sizes=(PG, 4 * PG, 8 * PG, 16 * PG),
                   tlb_entries=8, contexts=2, channels=4, semaphores=2, addr_bits=20)
    prog = f"""version 1
remap ctx=1 size=0 perm=w dev=0 va=0x0 pa=0x0 staged=0
remap ctx=1 size=0 perm=rw dev=0 va=0x1000 pa=0x1000 staged=0
remap ctx=1 size=0 perm=rw dev=1 va=0x2000 pa=0x2000 staged=0
remap ctx=1 size=1 perm=rw dev=0 va=0x10000 pa=0xc000 staged=0
remap ctx=1 size=0 perm=rw dev=0 va=0x20000 pa=0x10000 staged=0
copy chan=0 ctx=1 src=0x0 dst=0x1000 row_bytes=4 rows=1 tag=0 src_stride=0 dst_stride=0
copy chan=1 ctx=1 src=0x2000 dst=0x1000 row_bytes=4 rows=1 tag=0 src_stride=0 dst_stride=0
copy chan=2 ctx=1 src=0x1000 dst=0x10ff0 row_bytes=0x20 rows=1 tag=0 src_stride=0 dst_stride=0
copy chan=3 ctx=1 src=0x20000 dst=0x1000 row_bytes=1 rows=1 tag=0 src_stride=0 dst_stride=0
halt"""
    s, r = run([prog], arch=a)
    faults = {(f["channel"], f["va"], f["cause"]) for f in r.faults}
    # channel 2: the 16 KiB page at va 0x10000 -> pa 0xc000 straddles the end of
    # memory (0xd000): 0x10 bytes land at pa 0xcff0, then va 0x11000 is out of range.
    assert faults == {(0, 0x0, "NO_READ"), (1, 0x2000, "REMOTE_READ"),
                      (2, 0x11000, "OUT_OF_RANGE"), (3, 0x20000, "OUT_OF_RANGE")}
    m0 = mems(a)[0]
    m = bytearray(m0)
    for j in range(0x10):
        m[0xcff0 + j] = m0[0x1000 + j]
    assert r.memories[0].tobytes() == bytes(m)
    assert (r.status[0], r.cause[0]) == (Status.FAULT, Cause.NO_READ)  # lowest faulted channel


def test_halt_with_faulted_channel_is_fault_and_immediate_remap_does_not_check():
    prog = """version 1
copy chan=1 ctx=0 src=0x0 dst=0x0 row_bytes=1 rows=1 tag=0 src_stride=0 dst_stride=0
remap ctx=0 size=0 perm=rw dev=0 va=0x0 pa=0x0 staged=0
inval ctx=0 size=0 va=0x0 staged=0
halt"""
    s, r = run([prog])
    assert (r.status[0], r.cause[0], r.pc[0]) == (Status.FAULT, Cause.NOT_MAPPED, 4)
    assert r.tlb[0] == []


# ---------------------------------------------------------------- TLB
def test_tlb_eviction_round_robin():
    a = ArchParams(devices=1, mem_bytes=16 * PG, page_sizes=(PG, 4 * PG, 8 * PG, 16 * PG),
                   tlb_entries=4, contexts=2, channels=2, semaphores=1, addr_bits=20)
    lines = [f"remap ctx=1 size=0 perm=rw dev=0 va={k * PG:#x} pa={k * PG:#x} staged=0" for k in range(4)]
    lines.append("remap ctx=1 size=0 perm=r dev=0 va=0x2000 pa=0xf000 staged=0")   # overwrite in place (entry 2)
    lines.append("inval ctx=1 size=0 va=0x1000 staged=0")                          # frees entry 1
    lines.append("remap ctx=1 size=0 perm=rw dev=0 va=0x8000 pa=0x8000 staged=0")  # -> entry 1 (lowest invalid)
    lines.append("remap ctx=1 size=0 perm=rw dev=0 va=0x9000 pa=0x9000 staged=0")  # evicts entry 0 (victim 0->1)
    lines.append("remap ctx=1 size=0 perm=rw dev=0 va=0xa000 pa=0xa000 staged=0")  # evicts entry 1 (victim 1->2)
    prog = "version 1\n" + "\n".join(lines) + """
copy chan=1 ctx=1 src=0x3000 dst=0xa000 row_bytes=8 rows=1 tag=0 src_stride=0 dst_stride=0
copy chan=0 ctx=1 src=0x0 dst=0x9000 row_bytes=8 rows=1 tag=0 src_stride=0 dst_stride=0
halt"""
    s, r = run([prog], arch=a)
    assert [(e["index"], e["va"], e["pa"], e["perm"]) for e in r.tlb[0]] == [
        (0, 0x9000, 0x9000, 3), (1, 0xa000, 0xa000, 3), (2, 0x2000, 0xf000, 1), (3, 0x3000, 0x3000, 3)]
    assert r.tlb_victim == [2]
    assert r.faults == [{"device": 0, "channel": 0, "ctx": 1, "va": 0x0, "cause": "NOT_MAPPED"}]
    m = bytearray(mems(a)[0])
    m[0xa000:0xa008] = m[0x3000:0x3008]
    assert r.memories[0].tobytes() == bytes(m)


def test_tlb_fill_plus_one_evicts_first_placed():
    n = ARCH.tlb_entries
    lines = [f"remap ctx=1 size=0 perm=rw dev=0 va={k * PG:#x} pa={k % 16 * PG:#x} staged=0" for k in range(n + 1)]
    prog = "version 1\n" + "\n".join(lines) + "\nhalt"
    s, r = run([prog])
    assert [e["va"] for e in r.tlb[0]] == [n * PG] + [k * PG for k in range(1, n)]
    with pytest.raises(TranslationError):
        s.read_virtual(0, 1, 0, 1)
    p = n % 16 * PG
    assert s.read_virtual(0, 1, n * PG + 5, 3) == mems()[0][p + 5:p + 8]


def test_staged_remap_invisible_until_commit():
    base = f"""version 1
{ident(ctx=1, pages=[0, 1])}
remap ctx=2 size=0 perm=r dev=0 va=0x0 pa=0x3000 staged=0
remap ctx=2 size=0 perm=r dev=0 va=0x1000 pa=0x4000 staged=1
remap ctx=2 size=1 perm=rw dev=1 va=0x10000 pa=0x8000 staged=1
"""
    # before COMMIT: staged page not visible, active page is
    s, r = run([base + "copy chan=0 ctx=2 src=0x1000 dst=0x0 row_bytes=1 rows=1 tag=0 src_stride=0 dst_stride=0\nfence mask=0\nhalt"])
    assert r.faults[0]["va"] == 0x1000 and r.faults[0]["cause"] == "NOT_MAPPED"
    assert s.read_virtual(0, 2, 0, 4) == mems()[0][0x3000:0x3004]
    with pytest.raises(TranslationError):
        s.read_virtual(0, 2, 0x1000, 1)
    # after COMMIT: staged entries active, old active entry of ctx 2 gone, ctx 1 untouched
    s, r = run([base + "commit ctx=2\nhalt"])
    assert r.status[0] is Status.HALTED
    assert s.read_virtual(0, 2, 0x1000, 4) == mems()[0][0x4000:0x4004]
    assert s.read_virtual(0, 2, 0x10000, 4) == mems()[1][0x8000:0x8004]
    with pytest.raises(TranslationError):
        s.read_virtual(0, 2, 0x0, 1)
    assert s.read_virtual(0, 1, 0x0, 4) == mems()[0][0:4]
    assert {(e["ctx"], e["va"], e["staged"]) for e in r.tlb[0]} == {
        (1, 0, 0), (1, 0x1000, 0), (2, 0x1000, 0), (2, 0x10000, 0)}
    assert r.bytes_remapped == [PG, 0, 0]          # remote page not counted


def test_commit_unfenced_and_what_clears_it():
    cases = {
        "copy chan=1 ctx=1 src=0 dst=0x1000 row_bytes=1 rows=1 tag=0 src_stride=0 dst_stride=0\ncommit ctx=2": Cause.COMMIT_UNFENCED,
        "copy chan=1 ctx=1 src=0 dst=0x1000 row_bytes=1 rows=1 tag=0 src_stride=0 dst_stride=0\nfence mask=0x1\ncommit ctx=2":
            Cause.COMMIT_UNFENCED,
        "copy chan=1 ctx=1 tag=0 src=0 dst=0x1000 row_bytes=1 rows=1 src_stride=0 dst_stride=0\n"
        "remap ctx=3 size=0 perm=r staged=0 dev=0 va=0 pa=0\n"
        "commit ctx=2": Cause.COMMIT_UNFENCED,
        "copy chan=1 ctx=1 src=0 dst=0x1000 row_bytes=1 rows=1 tag=0 src_stride=0 dst_stride=0\nfence mask=0x2\ncommit ctx=2": None,
        "copy chan=1 ctx=1 src=0 dst=0x1000 row_bytes=1 rows=1 tag=0 src_stride=0 dst_stride=0\nfence mask=0\ncommit ctx=2": None,
        "copy chan=1 ctx=1 src=0 dst=0x1000 row_bytes=0 rows=1 tag=0 src_stride=0 dst_stride=0\ncommit ctx=2": Cause.COMMIT_UNFENCED,
        "commit ctx=2": None,
    }
    for body, cause in cases.items():
        prog = f"version 1\n{ident(pages=[0, 1])}\nremap ctx=2 size=0 perm=r dev=0 va=0 pa=0x5000 staged=1\n{body}\nhalt"
        s, r = run([prog])
        if cause is None:
            assert r.status[0] is Status.HALTED, body
            assert s.read_virtual(0, 2, 0, 2) == mems()[0][0x5000:0x5002]
        else:
            assert (r.status[0], r.cause[0]) == (Status.ILLEGAL, cause), body
            assert r.pc[0] == prog.splitlines().index("commit ctx=2")
            with pytest.raises(TranslationError):
                s.read_virtual(0, 2, 0, 1)


def test_commit_after_fault_commits_nothing():
    head = f"version 1\n{ident(pages=[0])}\nremap ctx=2 size=0 perm=r dev=0 va=0 pa=0x5000 staged=1\n" \
           "copy chan=0 ctx=1 src=0xff0 dst=0x0 row_bytes=0x20 rows=1 tag=0 src_stride=0 dst_stride=0\n"
    for tail, status, cause in [("commit ctx=2\nhalt", Status.ILLEGAL, Cause.COMMIT_UNFENCED),
                                ("fence mask=0\ncommit ctx=2\nhalt", Status.FAULT, Cause.NOT_MAPPED)]:
        s, r = run([head + tail])
        assert (r.status[0], r.cause[0]) == (status, cause)
        assert any(e["ctx"] == 2 and e["staged"] == 1 for e in r.tlb[0])
        assert r.bytes_remapped[0] == 0
        with pytest.raises(TranslationError):
            s.read_virtual(0, 2, 0, 1)


def test_inval_and_read_virtual_errors():
    prog = f"""version 1
{ident(pages=[0, 1])}
inval ctx=1 size=0 va=0x1000 staged=0
inval ctx=1 size=1 va=0x0 staged=0
inval ctx=1 size=0 staged=1 va=0x0
halt"""
    s, r = run([prog])
    assert [e["va"] for e in r.tlb[0]] == [0]
    with pytest.raises(TranslationError):
        s.read_virtual(0, 1, 0xfff, 2)


# ---------------------------------------------------------------- semaphores
def test_signal_wait_chain_across_three_devices():
    p0 = f"""version 1
{ident(ctx=0, pages=[0], perm='r')}
remap ctx=0 size=0 perm=w dev=1 va=0x10000 pa=0x2000 staged=0
copy chan=0 ctx=0 src=0x100 dst=0x10100 row_bytes=0x80 rows=1 tag=0 src_stride=0 dst_stride=0
fence mask=0
signal dev=1 sem=2
wait sem=0 count=2
halt"""
    p1 = f"""version 1
wait sem=2 count=1
remap ctx=0 size=0 perm=r dev=1 va=0x0 pa=0x2000 staged=0
remap ctx=0 size=0 perm=w dev=2 va=0x1000 pa=0x7000 staged=0
copy chan=3 ctx=0 src=0x100 dst=0x1000 row_bytes=0x80 rows=1 tag=0 src_stride=0 dst_stride=0
fence mask=0
signal dev=2 sem=1
signal dev=0 sem=0
halt"""
    p2 = """version 1
wait sem=1 count=1
signal dev=0 sem=0
signal dev=2 sem=3
signal dev=2 sem=3
wait sem=3 count=1
halt"""
    s, r = run([p0, p1, p2])
    m = [bytearray(x) for x in mems()]
    m[1][0x2100:0x2180] = m[0][0x100:0x180]
    m[2][0x7000:0x7080] = m[1][0x2100:0x2180]
    assert r.status == [Status.HALTED] * 3
    assert [x.tobytes() for x in r.memories] == [bytes(x) for x in m]
    assert r.semaphores == [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1]]


def test_deadlock_aborts_waiters():
    p0 = "version 1\nwait sem=0 count=1\nhalt"
    p1 = "version 1\nsignal dev=0 sem=1\nwait sem=1 count=0\nwait sem=1 count=1\nhalt"
    p2 = "version 1\nhalt"
    s, r = run([p0, p1, p2])
    assert r.status == [Status.ABORTED, Status.ABORTED, Status.HALTED]
    assert r.cause == [Cause.DEADLOCK, Cause.DEADLOCK, Cause.NONE]
    assert r.pc == [1, 3, 1]
    assert r.semaphores[0][1] == 1


# ---------------------------------------------------------------- illegal
@pytest.mark.parametrize("words,cause,pc", [
    ([encode(Op.VERSION, version=ISA_VERSION + 1), encode(Op.HALT)], Cause.VERSION_MISMATCH, 0),
    ([encode(Op.HALT)], Cause.VERSION_MISMATCH, 0),
    ([0], Cause.VERSION_MISMATCH, 0),
    ([], Cause.VERSION_MISMATCH, 0),
    ([encode(Op.VERSION, version=1), encode(Op.VERSION, version=2)], Cause.VERSION_MISMATCH, 1),
    ([encode(Op.VERSION, version=1) | 1 << 100], Cause.RESERVED_BITS, 0),
    ([encode(Op.VERSION, version=1), 0x0a], Cause.BAD_OPCODE, 1),
    ([encode(Op.VERSION, version=1), 0xff | 1 << 200], Cause.BAD_OPCODE, 1),
    ([encode(Op.VERSION, version=1)], Cause.BAD_OPCODE, 1),               # runs into zero word
    ([encode(Op.VERSION, version=1), encode(Op.COPY, chan=4)], Cause.BAD_CHANNEL, 1),
    ([encode(Op.VERSION, version=1), encode(Op.COPY, chan=4, ctx=9)], Cause.BAD_CHANNEL, 1),
    ([encode(Op.VERSION, version=1), encode(Op.COPY, ctx=4)], Cause.BAD_CONTEXT, 1),
    ([encode(Op.VERSION, version=1), encode(Op.COPY, src=1 << 20)], Cause.ADDRESS_WIDTH, 1),
    ([encode(Op.VERSION, version=1), encode(Op.COPY, dst=1 << 47)], Cause.ADDRESS_WIDTH, 1),
    ([encode(Op.VERSION, version=1), encode(Op.REMAP, ctx=4)], Cause.BAD_CONTEXT, 1),
    ([encode(Op.VERSION, version=1), encode(Op.REMAP, dev=3)], Cause.BAD_DEVICE, 1),
    ([encode(Op.VERSION, version=1), encode(Op.REMAP, dev=3, va=1)], Cause.BAD_DEVICE, 1),
    ([encode(Op.VERSION, version=1), encode(Op.REMAP, va=0x800)], Cause.MISALIGNED, 1),
    ([encode(Op.VERSION, version=1), encode(Op.REMAP, size=1, va=0x1000)], Cause.MISALIGNED, 1),
    ([encode(Op.VERSION, version=1), encode(Op.REMAP, pa=0x10)], Cause.MISALIGNED, 1),
    ([encode(Op.VERSION, version=1), encode(Op.REMAP, va=1 << 20)], Cause.ADDRESS_WIDTH, 1),
    ([encode(Op.VERSION, version=1), encode(Op.REMAP, va=(1 << 20) + 1)], Cause.ADDRESS_WIDTH, 1),
    ([encode(Op.VERSION, version=1), encode(Op.REMAP, va=1, pa=1 << 20)], Cause.MISALIGNED, 1),
    ([encode(Op.VERSION, version=1), encode(Op.REMAP, pa=1 << 21)], Cause.ADDRESS_WIDTH, 1),
    ([encode(Op.VERSION, version=1), encode(Op.INVAL, ctx=15)], Cause.BAD_CONTEXT, 1),
    ([encode(Op.VERSION, version=1), encode(Op.INVAL, va=0x100)], Cause.MISALIGNED, 1),
    ([encode(Op.VERSION, version=1), encode(Op.INVAL, va=1 << 30)], Cause.ADDRESS_WIDTH, 1),
    ([encode(Op.VERSION, version=1), encode(Op.SIGNAL, dev=3)], Cause.BAD_DEVICE, 1),
    ([encode(Op.VERSION, version=1), encode(Op.SIGNAL, dev=3, sem=9)], Cause.BAD_DEVICE, 1),
    ([encode(Op.VERSION, version=1), encode(Op.SIGNAL, sem=4)], Cause.BAD_SEMAPHORE, 1),
    ([encode(Op.VERSION, version=1), encode(Op.WAIT, sem=4)], Cause.BAD_SEMAPHORE, 1),
    ([encode(Op.VERSION, version=1), encode(Op.COMMIT, ctx=4)], Cause.BAD_CONTEXT, 1),
    ([encode(Op.VERSION, version=1)] * 64, Cause.PC_OVERFLOW, 64),
])
def test_illegal_causes(words, cause, pc):
    s = GoldenSystem(ARCH, [words, [encode(Op.VERSION, version=1), encode(Op.HALT)],
                            [encode(Op.VERSION, version=1), encode(Op.HALT)]], mems())
    r = s.run()
    assert (r.status[0], r.cause[0], r.pc[0]) == (Status.ILLEGAL, cause, pc)
    assert r.status[1:] == [Status.HALTED, Status.HALTED]
    assert r.memories[0].tobytes() == mems()[0]


@pytest.mark.parametrize("op", list(FORMATS))
def test_reserved_bits_every_opcode(op):
    rm = reserved_mask(op)
    bits = [b for b in range(OPCODE_BITS, WORD_BITS) if rm >> b & 1]
    if op in (Op.COPY, Op.COPY_ADD_F32, Op.COPY_ADD_BF16):
        assert bits == []          # the copies use every bit of the word
        return
    for b in (bits[0], bits[len(bits) // 2], bits[-1]):
        words = [encode(Op.VERSION, version=2), encode(op) | 1 << b, encode(Op.HALT)]
        r = GoldenSystem(ARCH, [words] * 3, mems()).run()
        assert (r.status[0], r.cause[0], r.pc[0]) == (Status.ILLEGAL, Cause.RESERVED_BITS, 1), (op, b)


def test_constructor_checks():
    good = [[encode(Op.VERSION, version=1)]] * 3
    with pytest.raises(ValueError, match="exceeds mem_bytes"):
        GoldenSystem(ARCH, good, [bytes(ARCH.mem_bytes + 1)] * 3)
    with pytest.raises(ValueError, match="programs for 3 devices"):
        GoldenSystem(ARCH, good[:2], [b""] * 3)
    with pytest.raises(ValueError, match="imem_words"):
        GoldenSystem(ARCH, [[0] * 65] * 3, [b""] * 3)
    r = GoldenSystem(ARCH, good, [b"\x01\x02", bytearray(3), np.ones(5, np.uint8)]).run()
    assert r.memories[0][:3].tolist() == [1, 2, 0] and r.memories[2][:6].tolist() == [1] * 5 + [0]
    j = r.to_json()
    assert j["status"] == ["ILLEGAL"] * 3 and len(j["memory_sha256"]) == 3


def test_large_memory_many_descriptors():
    # 30,000 COPYs over 4 MiB memories: the vector and scalar paths at scale
    # (its speed is a benchmark's business, not this test's)
    a = ArchParams(devices=2, mem_bytes=4 << 20, page_sizes=(4096, 65536, 1 << 20, 2 << 20),
                   tlb_entries=64, contexts=4, channels=4, semaphores=8, imem_words=40000,
                   addr_bits=32)
    words = [encode(Op.VERSION, version=1)]
    words += [encode(Op.REMAP, ctx=1, size=3, perm=3, dev=0, va=0, pa=0),
              encode(Op.REMAP, ctx=1, size=3, perm=3, dev=1, va=2 << 20, pa=2 << 20)]
    words += [encode(Op.REMAP, ctx=2, size=0, perm=3, dev=0 if k < 20 else k % 2, va=k << 12,
                     pa=(k * 7 % 512) << 12) for k in range(40)]
    rng = np.random.default_rng(1)
    n = 30000
    for i in range(n):
        if i % 3 == 0:   # many short rows (vector path)
            words.append(encode(Op.COPY, chan=i % 4, ctx=1, src=int(rng.integers(0, 1 << 20)),
                                dst=(2 << 20) + int(rng.integers(0, 1 << 20)), row_bytes=64,
                                rows=100, src_stride=128, dst_stride=96))
        elif i % 3 == 1:  # scattered small pages
            words.append(encode(Op.COPY, chan=i % 4, ctx=2, src=int(rng.integers(0, 18 << 12)),
                                dst=int(rng.integers(20 << 12, 38 << 12)), row_bytes=300, rows=2,
                                src_stride=5000, dst_stride=5000))
        else:             # big contiguous
            words.append(encode(Op.COPY, chan=i % 4, ctx=1, src=int(rng.integers(0, 1 << 20)),
                                dst=(2 << 20) + int(rng.integers(0, 1 << 20)), row_bytes=65536,
                                rows=1))
    words += [encode(Op.FENCE), encode(Op.HALT)]
    mem = [rng.integers(0, 256, a.mem_bytes, dtype=np.uint8) for _ in range(2)]
    r = GoldenSystem(a, [words, [encode(Op.VERSION, version=1), encode(Op.HALT)]], mem).run()
    assert r.descriptors[0] == n and r.faults == [] and r.status[0] is Status.HALTED
    assert r.bytes_copied[0] > (n // 3) * (6400 + 65536)


# ---------------------------------------------------------------- ISA v2: reduce copies
# The independent side of the arithmetic: the sum of two f32 / bf16 numbers in
# Python floats (binary64), rounded to the format by ``_round`` below. binary64
# holds every f32 / bf16 number exactly (subnormals included), and rounding
# twice (to binary64, then to the format) equals rounding once because
# 53 >= 2p + 2 for p = 24 and p = 8 (Figueroa 1995), so this is the correctly
# rounded sum. It shares nothing with model/fpadd.py (numpy float32).
EB = {"f32": 4, "bf16": 2}
_FRAC = {"f32": 23, "bf16": 7}
_QNAN = {"f32": 0x7FC00000, "bf16": 0x7FC0}
_OPS = {"f32": "copy_add_f32", "bf16": "copy_add_bf16"}


def _to_float(fmt, bits):
    return struct.unpack("<f", struct.pack("<I", bits if fmt == "f32" else bits << 16))[0]


def _round(fmt, x):
    """Bit pattern of the binary64 ``x`` rounded to ``fmt``, nearest, ties to even,
    subnormals kept; every NaN the canonical one."""
    p = _FRAC[fmt]
    if math.isnan(x):
        return _QNAN[fmt]
    sign = (1 << (p + 8)) if math.copysign(1.0, x) < 0 else 0
    a = abs(x)
    if math.isinf(a):
        return sign | 0xFF << p
    if a == 0:
        return sign
    e = max(math.frexp(a)[1] - 1, -126)   # a's binade; the subnormals share -126's quantum
    k = round(a / 2.0 ** (e - p))         # Python rounds a float half to even, exactly
    if k == 1 << (p + 1):                 # rounded up into the next binade
        k, e = k >> 1, e + 1
    if e > 127:
        return sign | 0xFF << p
    if k < 1 << p:                        # subnormal (or zero)
        return sign | k
    return sign | (e + 127) << p | (k - (1 << p))


def ref_add(fmt, a, b):
    """The correctly rounded sum of the ``fmt`` bit patterns ``a`` and ``b``."""
    return _round(fmt, _to_float(fmt, a) + _to_float(fmt, b))


def _is_nan(fmt, x):
    p = _FRAC[fmt]
    return (x >> p) & 0xFF == 0xFF and x & ((1 << p) - 1) != 0


def test_ref_add_itself():
    # the reference's own anchors, worked by hand
    assert ref_add("f32", 0x3F800000, 0x3F800000) == 0x40000000               # 1 + 1 = 2
    assert ref_add("f32", 0x4B800000, 0x3F800000) == 0x4B800000               # 2**24 + 1: tie, even
    assert ref_add("f32", 0x4B800001, 0x3F800000) == 0x4B800002               # tie, up to even
    assert ref_add("f32", 0x00000001, 0x00000001) == 0x00000002               # subnormals kept
    assert ref_add("f32", 0x007FFFFF, 0x00000001) == 0x00800000               # into the normals
    assert ref_add("f32", 0x7F7FFFFF, 0x73800000) == 0x7F800000               # overflow: half ulp up
    assert ref_add("f32", 0x7F800000, 0xFF800000) == 0x7FC00000               # inf - inf
    assert ref_add("f32", 0x80000000, 0x80000000) == 0x80000000               # -0 + -0
    assert ref_add("f32", 0x3F800000, 0xBF800000) == 0x00000000               # x - x = +0
    assert ref_add("bf16", 0x4380, 0x3F80) == 0x4380                          # 256 + 1: tie, even
    assert ref_add("bf16", 0x4381, 0x3F80) == 0x4382                          # 258 + 1: tie, up
    assert ref_add("bf16", 0x0001, 0x8003) == 0x8002                          # subnormals kept
    assert ref_add("bf16", 0xFF81, 0x3F80) == 0x7FC0                          # sNaN: canonical


def _put(mem, addr, fmt, values):
    for k, v in enumerate(values):
        mem[addr + k * EB[fmt]: addr + (k + 1) * EB[fmt]] = int(v).to_bytes(EB[fmt], "little")


def _get(mem, addr, fmt, n):
    b = bytes(mem[addr: addr + n * EB[fmt]])
    return [int.from_bytes(b[k * EB[fmt]:(k + 1) * EB[fmt]], "little") for k in range(n)]


def _check_sums(fmt, olds, news, got):
    """Each result is the reference sum; where that is a NaN, the result is a NaN
    and the canonical one."""
    w = EB[fmt] * 2
    bad = []
    for a, b, g in zip(olds, news, got):
        r = ref_add(fmt, a, b)
        ok = (_is_nan(fmt, g) and g == _QNAN[fmt]) if _is_nan(fmt, r) else g == r
        if not ok:
            bad.append(f"{a:0{w}x} + {b:0{w}x}: got {g:0{w}x}, reference {r:0{w}x}")
    assert len(got) == len(olds) and not bad, f"{len(bad)} wrong:\n" + "\n".join(bad[:20])


def _operands(fmt, seed, n_random):
    """(old, new) bit patterns: every pair of the edge values of tests/fpref.py,
    then random pairs of nearby magnitudes (cancellation, rounding, carries)."""
    edges = fpref.edge_values(fmt)
    olds = [a for a in edges for _ in edges]
    news = [b for _ in edges for b in edges]
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n_random) * 2.0 ** rng.integers(-140, 120, n_random)).astype(np.float32)
    y = (x * rng.uniform(-2, 2, n_random)).astype(np.float32)
    xb, yb = x.view(np.uint32), y.view(np.uint32)
    if fmt == "bf16":
        xb, yb = xb >> 16, yb >> 16
    return olds + [int(v) for v in xb], news + [int(v) for v in yb]


def test_copy_add_f32_local_against_reference():
    olds, news = _operands("f32", 1, 1500)
    n = len(olds)
    m = mems()
    m0 = bytearray(m[0])
    _put(m0, 0x0000, "f32", news)
    _put(m0, 0x8000, "f32", olds)
    prog = f"""version 2
{ident(pages=range(16))}
copy_add_f32 chan=1 ctx=1 src=0x0 dst=0x8000 row_bytes={4 * n} rows=1 src_stride=0 dst_stride=0 tag=7
fence mask=0
halt"""
    s, r = run([prog], memories=[bytes(m0)] + m[1:])
    assert (r.status[0], r.faults) == (Status.HALTED, [])
    got = _get(r.memories[0], 0x8000, "f32", n)
    _check_sums("f32", olds, news, got)
    exp = bytearray(m0)
    _put(exp, 0x8000, "f32", got)
    assert r.memories[0].tobytes() == bytes(exp)             # nothing else written
    assert r.bytes_copied[0] == 4 * n and r.descriptors[0] == 1


def test_copy_add_bf16_remote_2d_strided_against_reference():
    olds, news = _operands("bf16", 2, 700)
    cols = 46
    rows = len(olds) // cols
    olds, news = olds[:rows * cols], news[:rows * cols]
    ss, ds = 2 * cols + 4, 2 * cols + 6          # source and destination rows at other pitches
    m = mems()
    m0, m1 = bytearray(m[0]), bytearray(m[1])
    for i in range(rows):
        _put(m0, 0x102 + i * ss, "bf16", news[i * cols:(i + 1) * cols])
        _put(m1, 0x3000 + i * ds, "bf16", olds[i * cols:(i + 1) * cols])
    # destination va 0x8000.. -> device 1 pa 0x3000..
    maps = "\n".join(f"remap ctx=2 size=0 perm=w dev=1 va={(8 + k) * PG:#x} pa={(3 + k) * PG:#x} staged=0"
                     for k in range(4))
    prog = f"""version 2
{ident(ctx=2, pages=range(4), perm='r')}
{maps}
copy_add_bf16 chan=0 ctx=2 src=0x102 dst=0x8000 row_bytes={2 * cols} rows={rows} src_stride={ss} dst_stride={ds} tag=0
fence mask=0
halt"""
    s, r = run([prog], memories=[bytes(m0), bytes(m1), m[2]])
    assert (r.status[0], r.faults) == (Status.HALTED, [])
    got = []
    for i in range(rows):
        got += _get(r.memories[1], 0x3000 + i * ds, "bf16", cols)
    _check_sums("bf16", olds, news, got)
    exp = bytearray(m1)
    for i in range(rows):
        _put(exp, 0x3000 + i * ds, "bf16", got[i * cols:(i + 1) * cols])
    assert r.memories[1].tobytes() == bytes(exp)
    assert r.memories[0].tobytes() == bytes(m0)              # the source side is not written
    assert r.bytes_copied[0] == 2 * rows * cols


@pytest.mark.parametrize("fmt,big", [("f32", 0x4B800000), ("bf16", 0x4380)])
def test_dst_stride_zero_adds_rows_in_order(fmt, big):
    # element 0: old = 2**(p+1) ("big"), rows +1, +1, -big: in order (big+1 is a
    # tie, to even: big) the result is 0, where -big first would give 2;
    # element 1: old = 0, rows +big, +1, +1: big, where 1 + 1 first gives big + 2
    one, minus_big = (0x3F800000, 0xCB800000) if fmt == "f32" else (0x3F80, 0xC380)
    e = EB[fmt]
    rows_vals = [[one, big], [one, one], [minus_big, one]]     # two elements a row
    m = mems()
    m0 = bytearray(m[0])
    for i, row in enumerate(rows_vals):
        _put(m0, 0x100 + i * 0x40, fmt, row)
    _put(m0, 0x9000, fmt, [big, 0])
    prog = f"""version 2
{ident(pages=range(16))}
{_OPS[fmt]} chan=0 ctx=1 src=0x100 dst=0x9000 row_bytes={2 * e} rows=3 src_stride=0x40 dst_stride=0 tag=0
halt"""
    s, r = run([prog], memories=[bytes(m0)] + m[1:])
    assert r.status[0] is Status.HALTED
    exp = [big, 0]
    for row in rows_vals:
        exp = [ref_add(fmt, a, b) for a, b in zip(exp, row)]
    assert exp == [0, big]
    assert _get(r.memories[0], 0x9000, fmt, 2) == exp
    assert r.bytes_copied[0] == 3 * 2 * e


def test_reduce_fault_destination_side_adds_bytes_before_only():
    m = mems()
    prog = f"""version 2
{ident(pages=[0, 1, 2, 3, 4])}
copy_add_f32 chan=2 ctx=1 src=0x100 dst=0x4f80 row_bytes=0x100 rows=1 src_stride=0 dst_stride=0 tag=0
fence mask=0
halt"""
    s, r = run([prog])
    assert r.faults == [{"device": 0, "channel": 2, "ctx": 1, "va": 0x5000, "cause": "NOT_MAPPED"}]
    assert (r.status[0], r.cause[0]) == (Status.FAULT, Cause.NOT_MAPPED)
    olds, news = _get(m[0], 0x4f80, "f32", 0x20), _get(m[0], 0x100, "f32", 0x20)
    _check_sums("f32", olds, news, _get(r.memories[0], 0x4f80, "f32", 0x20))
    exp = bytearray(m[0])
    _put(exp, 0x4f80, "f32", _get(r.memories[0], 0x4f80, "f32", 0x20))
    assert r.memories[0].tobytes() == bytes(exp)            # from va 0x5000 on: not written
    assert r.bytes_copied[0] == 0x80


@pytest.mark.parametrize("src,whole", [(0x1ffc, 1), (0x1fc0, 16)])
def test_reduce_fault_source_side_adds_the_elements_before_only(src, whole):
    # every field is element-aligned, so a fault (va 0x2000, unmapped) always
    # falls between whole elements: those before it are added, none after
    m = mems()
    prog = f"""version 2
{ident(pages=[0, 1, 4])}
copy_add_f32 chan=0 ctx=1 src={src:#x} dst=0x4000 row_bytes=0x80 rows=1 src_stride=0 dst_stride=0 tag=0
halt"""
    s, r = run([prog])
    assert r.faults == [{"device": 0, "channel": 0, "ctx": 1, "va": 0x2000, "cause": "NOT_MAPPED"}]
    olds = _get(m[0], 0x4000, "f32", whole)
    news = [int.from_bytes(m[0][src + 4 * k: src + 4 * k + 4], "little") for k in range(whole)]
    _check_sums("f32", olds, news, _get(r.memories[0], 0x4000, "f32", whole))
    exp = bytearray(m[0])
    _put(exp, 0x4000, "f32", [ref_add("f32", a, b) for a, b in zip(olds, news)])
    assert r.memories[0].tobytes() == bytes(exp)
    assert r.bytes_copied[0] == 4 * whole


def _v2(*words):
    return [encode(Op.VERSION, version=2), *words, encode(Op.HALT)]


CP = dict(chan=0, ctx=1, src=0x100, dst=0x8000, row_bytes=8, rows=2, src_stride=8, dst_stride=8)


@pytest.mark.parametrize("op,changes,cause", [
    (Op.COPY_ADD_F32, {}, None),
    (Op.COPY_ADD_F32, dict(src=0x103), Cause.MISALIGNED),      # src too: no element straddles a page
    (Op.COPY_ADD_F32, dict(src_stride=0x106), Cause.MISALIGNED),
    (Op.COPY_ADD_F32, dict(dst=0x8002), Cause.MISALIGNED),
    (Op.COPY_ADD_F32, dict(row_bytes=6), Cause.MISALIGNED),
    (Op.COPY_ADD_F32, dict(dst_stride=0x102), Cause.MISALIGNED),
    (Op.COPY_ADD_F32, dict(dst=0x8002, chan=4), Cause.BAD_CHANNEL),      # fields in table order
    (Op.COPY_ADD_F32, dict(dst=(1 << 20) | 2), Cause.ADDRESS_WIDTH),
    (Op.COPY_ADD_F32, dict(row_bytes=6, rows=0), Cause.MISALIGNED),      # even copying nothing
    (Op.COPY_ADD_BF16, dict(dst=0x8002, row_bytes=6, dst_stride=0x102, src=0x102), None),
    (Op.COPY_ADD_BF16, dict(src=0x101), Cause.MISALIGNED),
    (Op.COPY_ADD_BF16, dict(dst=0x8001), Cause.MISALIGNED),
    (Op.COPY_ADD_BF16, dict(row_bytes=7), Cause.MISALIGNED),
    (Op.COPY_ADD_BF16, dict(dst_stride=3), Cause.MISALIGNED),
])
def test_reduce_alignment(op, changes, cause):
    maps = [encode(Op.REMAP, ctx=1, size=0, perm=3, dev=0, va=k * PG, pa=k * PG) for k in range(16)]
    prog = _v2(*maps, encode(op, **{**CP, **changes}))
    r = GoldenSystem(ARCH, [prog, _v2(), _v2()], mems()).run()
    if cause is None:
        assert (r.status[0], r.descriptors[0]) == (Status.HALTED, 1)
        assert r.memories[0].tobytes() != mems()[0]
    else:
        assert (r.status[0], r.cause[0], r.pc[0]) == (Status.ILLEGAL, cause, 17)
        assert r.memories[0].tobytes() == mems()[0] and r.descriptors[0] == 0


@pytest.mark.parametrize("op", [Op.COPY_ADD_F32, Op.COPY_ADD_BF16])
def test_v2_opcodes_are_bad_opcode_in_a_v1_program(op):
    maps = [encode(Op.REMAP, ctx=1, size=0, perm=3, dev=0, va=k * PG, pa=k * PG) for k in range(16)]
    for fields in (CP, dict(CP, chan=15), dict(rows=0)):     # the opcode is checked before fields
        prog = [encode(Op.VERSION, version=1), *maps, encode(op, **fields), encode(Op.HALT)]
        r = GoldenSystem(ARCH, [prog, _v2(), _v2()], mems()).run()
        assert (r.status[0], r.cause[0], r.pc[0]) == (Status.ILLEGAL, Cause.BAD_OPCODE, 17)
        assert r.memories[0].tobytes() == mems()[0]
    prog[0] = encode(Op.VERSION, version=2)                  # the same program, declared v2
    assert GoldenSystem(ARCH, [prog, _v2(), _v2()], mems()).run().status[0] is Status.HALTED


@pytest.mark.parametrize("versions,status,cause,pc", [
    ([3], Status.ILLEGAL, Cause.VERSION_MISMATCH, 0),
    ([0], Status.ILLEGAL, Cause.VERSION_MISMATCH, 0),
    ([0xFFFF], Status.ILLEGAL, Cause.VERSION_MISMATCH, 0),
    ([2, 1], Status.ILLEGAL, Cause.VERSION_MISMATCH, 1),
    ([1, 2], Status.ILLEGAL, Cause.VERSION_MISMATCH, 1),
    ([2, 3], Status.ILLEGAL, Cause.VERSION_MISMATCH, 1),
    ([2, 2], Status.HALTED, Cause.NONE, 2),                 # a later VERSION repeating it: no-op
    ([1, 1], Status.HALTED, Cause.NONE, 2),
    ([1], Status.HALTED, Cause.NONE, 1),
    ([2], Status.HALTED, Cause.NONE, 1),
])
def test_version_words(versions, status, cause, pc):
    prog = [encode(Op.VERSION, version=v) for v in versions] + [encode(Op.HALT)]
    r = GoldenSystem(ARCH, [prog, _v2(), _v2()], mems()).run()
    assert (r.status[0], r.cause[0], r.pc[0]) == (status, cause, pc)


def test_v1_program_runs_unchanged_and_as_under_v2():
    # a v1 program (every v1 instruction) gives the same result declared either way
    # and what plain byte loops predict
    body = f"""{ident(pages=range(8))}
remap ctx=1 size=0 perm=w dev=1 va=0x8000 pa=0x2000 staged=0
copy chan=0 ctx=1 src=0x10 dst=0x3000 row_bytes=40 rows=7 src_stride=0x50 dst_stride=0x30 tag=1
copy chan=1 ctx=1 src=0x200 dst=0x8010 row_bytes=0x100 rows=2 src_stride=0x100 dst_stride=0x200 tag=2
fence mask=0
signal dev=1 sem=0
remap ctx=2 size=0 perm=r dev=0 va=0x0 pa=0x6000 staged=1
inval ctx=1 size=0 staged=0 va={7 * PG:#x}
commit ctx=2
halt"""
    p1 = "version 1\nwait sem=0 count=1\nhalt"
    _, r1 = run([f"version 1\n{body}", p1])
    _, r2 = run([f"version 2\n{body}", p1.replace("version 1", "version 2")])
    exp = [bytearray(m) for m in mems()]
    ref_copy(exp[0], exp[0], 0x10, 0x3000, 40, 7, 0x50, 0x30)
    ref_copy(exp[0], exp[1], 0x200, 0x2010, 0x100, 2, 0x100, 0x200)
    for r in (r1, r2):
        assert r.status == [Status.HALTED] * 3 and r.faults == []
        assert [m.tobytes() for m in r.memories] == [bytes(m) for m in exp]
        assert r.bytes_remapped[0] == PG
    assert r1.to_json() == r2.to_json()


@st.composite
def reduce_systems(draw):
    """``systems()`` cases with some COPYs turned into reduce copies, mostly with
    ``src``/``dst``/``row_bytes``/the strides rounded down to whole elements (so the
    adds happen on the random memories: NaNs, infinities, subnormals), sometimes
    left misaligned; sometimes declared version 1 (BAD_OPCODE)."""
    case = draw(systems(max_devices=2, max_body=16))
    progs = []
    for p in case.programs:
        q = []
        for w in p:
            dec = decode(w)
            if dec.op is Op.COPY and draw(st.integers(0, 2)):
                op = draw(st.sampled_from([Op.COPY_ADD_F32, Op.COPY_ADD_BF16]))
                f = dict(dec.fields)
                if draw(st.integers(0, 4)):
                    e = 4 if op is Op.COPY_ADD_F32 else 2
                    f.update({k: f[k] - f[k] % e for k in ("src", "dst", "row_bytes", "src_stride",
                                                             "dst_stride")})
                w = encode(op, **f)
            q.append(w)
        if q and q[0] == encode(Op.VERSION, version=2) and not draw(st.integers(0, 6)):
            q[0] = encode(Op.VERSION, version=1)
        progs.append(q)
    return SystemCase(case.arch, progs, case.memories)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reduce_systems())
def test_golden_reduce_copies_match_reference_interpreter(case):
    _compare(case)


# ---------------------------------------------------------------- reference interpreter
class RefSystem:
    """Independent, deliberately plain per-byte interpreter of ISA v2 and of v1
    programs (small memories). The versions and the v2 opcodes are spelled out
    here rather than read from ``hw/isa.py``; the sums are ``ref_add``'s."""

    def __init__(self, arch: ArchParams, programs, memories):
        self.a = arch
        self.mem = [bytearray(m) + bytearray(arch.mem_bytes - len(m)) for m in memories]
        self.prog = [list(p) + [0] * (arch.imem_words - len(p)) for p in programs]
        D = arch.devices
        self.pc = [0] * D
        self.status = ["RUNNING"] * D
        self.cause = ["NONE"] * D
        self.tlb = [[None] * arch.tlb_entries for _ in range(D)]
        self.victim = [0] * D
        self.cfault = [[None] * arch.channels for _ in range(D)]
        self.unfenced = [[False] * arch.channels for _ in range(D)]
        self.sem = [[0] * arch.semaphores for _ in range(D)]
        self.version = [0] * D
        self.faults = []

    @staticmethod
    def fields(word, op):
        return {f.name: (word >> f.lsb) & ((1 << f.width) - 1) for f in FORMATS[op]}

    def lookup(self, d, ctx, va):
        for e in self.tlb[d]:
            if e is not None and e["ctx"] == ctx and e["staged"] == 0:
                page = self.a.page_sizes[e["size"]]
                if e["va"] <= va < e["va"] + page:
                    return e
        return None

    def run(self):
        while True:
            live = [d for d in range(self.a.devices) if self.status[d] == "RUNNING"]
            if not live:
                return
            moved = False
            for d in live:
                moved |= self.step(d)
            if not moved:
                for d in live:
                    if self.status[d] == "RUNNING":
                        self.status[d], self.cause[d] = "ABORTED", "DEADLOCK"
                return

    def step(self, d):
        res = self.exec(d)
        if isinstance(res, tuple):
            self.status[d], self.cause[d] = res
            return True
        return res

    def exec(self, d):
        a = self.a
        pc = self.pc[d]
        if pc >= a.imem_words:
            return ("ILLEGAL", "PC_OVERFLOW")
        w = self.prog[d][pc]
        opc = w & 0xFF
        if pc == 0 and opc != 1:
            return ("ILLEGAL", "VERSION_MISMATCH")
        if opc == 0 or opc > 0x0B:
            return ("ILLEGAL", "BAD_OPCODE")
        if opc in (0x0A, 0x0B) and self.version[d] < 2:
            return ("ILLEGAL", "BAD_OPCODE")
        op = Op(opc)
        used = 0xFF
        for f in FORMATS[op]:
            used |= ((1 << f.width) - 1) << f.lsb
        if w & ~used:
            return ("ILLEGAL", "RESERVED_BITS")
        f = self.fields(w, op)
        lim = 1 << a.addr_bits

        def ill(c):
            return ("ILLEGAL", c)

        if op == Op.VERSION:
            if f["version"] not in (1, 2) or self.version[d] not in (0, f["version"]):
                return ill("VERSION_MISMATCH")
            self.version[d] = f["version"]
        elif op in (Op.COPY, Op.COPY_ADD_F32, Op.COPY_ADD_BF16):
            if f["chan"] >= a.channels:
                return ill("BAD_CHANNEL")
            if f["ctx"] >= a.contexts:
                return ill("BAD_CONTEXT")
            if f["src"] >= lim or f["dst"] >= lim:
                return ill("ADDRESS_WIDTH")
            fmt = {Op.COPY_ADD_F32: "f32", Op.COPY_ADD_BF16: "bf16"}.get(op)
            if fmt and any(f[k] % EB[fmt] for k in ("src", "dst", "row_bytes", "src_stride",
                                                     "dst_stride")):
                return ill("MISALIGNED")
            ch = f["chan"]
            self.unfenced[d][ch] = True
            if self.cfault[d][ch] is None:
                self.copy(d, ch, f, fmt)
        elif op == Op.FENCE:
            chans = [c for c in range(a.channels) if f["mask"] == 0 or f["mask"] & (1 << c)]
            for c in chans:
                if self.cfault[d][c] is not None:
                    return ("FAULT", self.cfault[d][c])
            for c in chans:
                self.unfenced[d][c] = False
        elif op in (Op.REMAP, Op.INVAL):
            if f["ctx"] >= a.contexts:
                return ill("BAD_CONTEXT")
            if op == Op.REMAP and f["dev"] >= a.devices:
                return ill("BAD_DEVICE")
            page = a.page_sizes[f["size"]]
            for k in ("va", "pa") if op == Op.REMAP else ("va",):
                if f[k] >= lim:
                    return ill("ADDRESS_WIDTH")
                if f[k] % page:
                    return ill("MISALIGNED")
            tlb = self.tlb[d]
            same = [i for i, e in enumerate(tlb) if e is not None and
                    (e["ctx"], e["staged"], e["size"], e["va"]) ==
                    (f["ctx"], f["staged"], f["size"], f["va"])]
            if op == Op.INVAL:
                if same:
                    tlb[same[0]] = None
            else:
                free = [i for i, e in enumerate(tlb) if e is None]
                if same:
                    i = same[0]
                elif free:
                    i = free[0]
                else:
                    i = self.victim[d]
                    self.victim[d] = (i + 1) % a.tlb_entries
                tlb[i] = dict(f)
        elif op == Op.SIGNAL:
            if f["dev"] >= a.devices:
                return ill("BAD_DEVICE")
            if f["sem"] >= a.semaphores:
                return ill("BAD_SEMAPHORE")
            self.sem[f["dev"]][f["sem"]] += 1
        elif op == Op.WAIT:
            if f["sem"] >= a.semaphores:
                return ill("BAD_SEMAPHORE")
            if self.sem[d][f["sem"]] < f["count"]:
                return False
            self.sem[d][f["sem"]] -= f["count"]
        elif op == Op.COMMIT:
            if f["ctx"] >= a.contexts:
                return ill("BAD_CONTEXT")
            if True in self.unfenced[d]:
                return ill("COMMIT_UNFENCED")
            for c in range(a.channels):
                if self.cfault[d][c] is not None:
                    return ("FAULT", self.cfault[d][c])
            tlb = self.tlb[d]
            for i, e in enumerate(tlb):
                if e is not None and e["ctx"] == f["ctx"]:
                    if e["staged"]:
                        e["staged"] = 0
                    else:
                        tlb[i] = None
        elif op == Op.HALT:
            for c in range(a.channels):
                if self.cfault[d][c] is not None:
                    return ("FAULT", self.cfault[d][c])
            return ("HALTED", "NONE")
        self.pc[d] += 1
        return True

    def copy(self, d, ch, f, fmt=None):
        """Byte by byte; a reduce copy (``fmt``) collects an element's bytes and
        adds it once all of them translated (every field of a reduce copy is
        element-aligned, so a fault never falls inside an element)."""
        a = self.a
        lim = 1 << a.addr_bits
        eb = EB[fmt] if fmt else 1
        for i in range(f["rows"]):
            pend = []
            for j in range(f["row_bytes"]):
                sva = (f["src"] + i * f["src_stride"] + j) % lim
                dva = (f["dst"] + i * f["dst_stride"] + j) % lim
                cause, va = None, None
                se = self.lookup(d, f["ctx"], sva)
                if se is None:
                    cause, va = "NOT_MAPPED", sva
                elif not se["perm"] & 1:
                    cause, va = "NO_READ", sva
                elif se["dev"] != d:
                    cause, va = "REMOTE_READ", sva
                elif se["pa"] + sva - se["va"] >= a.mem_bytes:
                    cause, va = "OUT_OF_RANGE", sva
                else:
                    de = self.lookup(d, f["ctx"], dva)
                    if de is None:
                        cause, va = "NOT_MAPPED", dva
                    elif not de["perm"] & 2:
                        cause, va = "NO_WRITE", dva
                    elif de["pa"] + dva - de["va"] >= a.mem_bytes:
                        cause, va = "OUT_OF_RANGE", dva
                if cause is not None:
                    self.cfault[d][ch] = cause
                    self.faults.append({"device": d, "channel": ch, "ctx": f["ctx"], "va": va,
                                        "cause": cause})
                    return
                spa, dpa = se["pa"] + sva - se["va"], de["pa"] + dva - de["va"]
                if fmt is None:
                    self.mem[de["dev"]][dpa] = self.mem[d][spa]
                    continue
                pend.append((self.mem[d][spa], de["dev"], dpa))
                if len(pend) == eb:
                    new = sum(b << (8 * k) for k, (b, _, _) in enumerate(pend))
                    old = sum(self.mem[dv][pa] << (8 * k) for k, (_, dv, pa) in enumerate(pend))
                    out = ref_add(fmt, old, new)
                    for k, (_, dv, pa) in enumerate(pend):
                        self.mem[dv][pa] = out >> (8 * k) & 0xFF
                    pend = []


def _compare(case: SystemCase):
    g = GoldenSystem(case.arch, case.programs, case.memories).run()
    ref = RefSystem(case.arch, case.programs, case.memories)
    ref.run()
    info = case.describe()
    assert [s.name for s in g.status] == ref.status, info
    assert [c.name for c in g.cause] == ref.cause, info
    assert g.pc == ref.pc, info
    assert g.faults == sorted(ref.faults, key=lambda f: (f["device"], f["channel"], f["va"])), info
    for d in range(case.arch.devices):
        assert g.memories[d].tobytes() == bytes(ref.mem[d]), (d, info)
    assert g.semaphores == ref.sem, info
    ref_tlb = [[{"index": i, **{k: e[k] for k in ("ctx", "staged", "size", "va", "pa", "dev", "perm")}}
                for i, e in enumerate(t) if e is not None] for t in ref.tlb]
    assert g.tlb == ref_tlb, info
    return g


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(systems())
def test_golden_matches_reference_interpreter(case):
    _compare(case)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(systems(max_devices=2, max_body=30, illegal_rate=0.0))
def test_golden_matches_reference_longer_programs(case):
    _compare(case)
