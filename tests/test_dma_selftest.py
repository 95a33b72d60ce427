"""The DMA self-test top (the iCE40 board's subset): it reloads its memory,
copies, reads back and reports its own verdict. The expected CRC comes from
the golden model; a corrupted descriptor makes it fail with the CRC of what
the golden model computes for the corrupted descriptors, which proves the
line reports the memory really read back."""
import random
import zlib

import pytest

from gen.dma_selftest import dma_selftest_case
from gen.fpga_board import parse_verdict, simulate_board_verilator
from gen.simkit import run_simulation, stream_get, stream_put, uart_receive
from hw.dma_selftest import DmaSelfTest, IdentityTranslator
from hw.mmu import TranslateCause
from model.golden import GoldenSystem

DIVISOR = 4


def _corrupted(case):
    """The same case with the first descriptor's source moved: the expected
    CRC stays the real one, the hardware runs the corrupted descriptor."""
    from gen.asm import assemble
    descs = [dict(d) for d in case.descriptors]
    descs[0]["src"] += 1
    program = ["version 1", "remap ctx=0 size=1 perm=rw dev=0 va=0 pa=0 staged=0"]
    program += ["copy " + " ".join(f"{k}={v}" for k, v in d.items()) for d in descs] + ["fence mask=0", "halt"]
    mem = GoldenSystem(case.arch, [assemble("\n".join(program))], [case.image]).run().memories[0]
    return descs, zlib.crc32(bytes(mem))


def _top(case, descriptors=None):
    return DmaSelfTest(case.arch, image=case.image, descriptors=descriptors or case.descriptors,
                       expected_crc=case.expected_crc, uart_divisor=DIVISOR)


async def _line(ctx, tx):
    out = bytearray()
    while not out.endswith(b"\r\n"):
        out += await uart_receive(ctx, tx, DIVISOR, 1)
    return out.decode().strip()


@pytest.mark.parametrize("corrupt", [False, True])
def test_dma_selftest_reports_its_verdict(corrupt):
    case = dma_selftest_case(mem_bytes=1024, count=8, seed=3)
    assert case.expected != case.image
    descs, corrupt_crc = _corrupted(case) if corrupt else (None, None)
    top = _top(case, descs)
    lines = []

    async def tb(ctx):
        lines.append(await _line(ctx, top.tx))
        assert ctx.get(top.led_pass) == (not corrupt)
        assert ctx.get(top.led_fail) == corrupt
        ctx.set(top.rerun, 1)
        await ctx.tick()
        ctx.set(top.rerun, 0)
        await ctx.tick()
        assert not ctx.get(top.led_pass) and not ctx.get(top.led_fail)
        lines.append(await _line(ctx, top.tx))

    run_simulation(top, [tb])
    v = parse_verdict(lines[0])
    assert v["passed"] == (not corrupt)
    assert v["crc"] == (corrupt_crc if corrupt else case.expected_crc)
    # the copies take at least a cycle per 4-byte beat, and reruns reload the image first
    assert v["cycles"] >= case.bytes_copied // 4
    assert lines[1] == lines[0]


def _first_line(top):
    lines = []

    async def tb(ctx):
        lines.append(await _line(ctx, top.tx))

    run_simulation(top, [tb])
    return lines[0]


def test_dma_selftest_verilog_agrees():
    """The Verilog under Verilator prints the Amaranth simulator's line, cycle
    count included, for the real and the corrupted descriptors."""
    case = dma_selftest_case(mem_bytes=1024, count=8, seed=3)
    line, leds = simulate_board_verilator(_top(case), divisor=DIVISOR, limit=2_000_000)
    assert line == _first_line(_top(case))
    v = parse_verdict(line)
    assert v["passed"] is True and v["crc"] == case.expected_crc and v["cycles"] > 0
    assert leds == {"pass": 1, "fail": 0}
    descs, crc = _corrupted(case)
    line, leds = simulate_board_verilator(_top(case, descs), divisor=DIVISOR, limit=2_000_000)
    assert line == _first_line(_top(case, descs))
    assert parse_verdict(line)["passed"] is False and parse_verdict(line)["crc"] == crc
    assert leds == {"pass": 0, "fail": 1}


def test_dma_selftest_checks_its_parameters():
    case = dma_selftest_case(mem_bytes=1024, count=4)
    with pytest.raises(ValueError, match="Image is 3 bytes"):
        DmaSelfTest(case.arch, image=b"abc", descriptors=case.descriptors, expected_crc=0, uart_divisor=4)
    with pytest.raises(ValueError, match="at least one descriptor"):
        DmaSelfTest(case.arch, image=case.image, descriptors=[], expected_crc=0, uart_divisor=4)
    with pytest.raises(ValueError, match="Descriptor 0: channel 9"):
        DmaSelfTest(case.arch, image=case.image, descriptors=[{"chan": 9}], expected_crc=0, uart_divisor=4)
    with pytest.raises(ValueError, match=r"Descriptor 0: unknown fields \['bogus'\]"):
        DmaSelfTest(case.arch, image=case.image, descriptors=[{"bogus": 1}], expected_crc=0, uart_divisor=4)


def test_identity_translator_under_back_pressure():
    rng = random.Random(5)
    case = dma_selftest_case(mem_bytes=1024, count=1)
    dut = IdentityTranslator(case.arch)
    vas = [0, 1, 0x3FF, 0x123, 0x200]
    got = []

    async def put(ctx):
        for va in vas:
            await stream_put(ctx, dut.req, {"ctx": 0, "va": va, "write": va & 1}, rng=rng, idle_prob=0.3)

    async def get(ctx):
        for _ in vas:
            got.append(await stream_get(ctx, dut.rsp, rng=rng, bp_prob=0.5))

    run_simulation(dut, [put, get])
    assert [g.pa for g in got] == vas
    assert [g.dev for g in got] == [0] * len(vas)
    assert [g.cause for g in got] == [TranslateCause.NONE] * len(vas)
