"""The board top in simulation: it loads, runs, reads back and reports its own
verdict on LEDs and the UART, passing with the real program and failing with a
corrupted expected image."""
import random
import zlib

import pytest

from gen.asm import assemble
from gen.simkit import run_simulation
from hw.board import BoardTop
from hw.isa import ArchParams
from model.golden import GoldenSystem

DIVISOR = 4
ARCH = ArchParams(devices=2, mem_bytes=1024, page_sizes=(256, 512, 1024, 2048), tlb_entries=4,
                  contexts=2, channels=2, semaphores=2, imem_words=16, addr_bits=12)
PROGRAMS_TEXT = [
    # device 0: copies 200 bytes locally and 64 bytes into device 1
    """version 1
       remap ctx=0 size=2 perm=rw dev=0 va=0x000 pa=0x000 staged=0
       remap ctx=0 size=1 perm=w dev=1 va=0x400 pa=0x200 staged=0
       copy chan=0 ctx=0 src=0x010 dst=0x300 row_bytes=100 rows=2 src_stride=0x80 dst_stride=0x70 tag=0
       copy chan=1 ctx=0 src=0x123 dst=0x405 row_bytes=64 rows=1 tag=0 src_stride=0 dst_stride=0
       fence mask=0
       halt""",
    """version 1
       remap ctx=1 size=2 perm=rw dev=1 va=0 pa=0 staged=0
       copy chan=1 ctx=1 src=0x001 dst=0x100 row_bytes=31 rows=3 src_stride=0x20 dst_stride=0x21 tag=0
       fence mask=0
       halt""",
]


def _memories():
    rng = random.Random(1)
    return [bytes(rng.randrange(256) for _ in range(ARCH.mem_bytes)) for _ in range(2)]


def _expected_crc(programs_text):
    """CRC-32 of the golden model's final memories for these programs."""
    memories = _memories()
    res = GoldenSystem(ARCH, [assemble(t) for t in programs_text], memories).run()
    expected = b"".join(bytes(m) for m in res.memories)
    assert expected != b"".join(memories)           # the program changes something
    return zlib.crc32(expected)


def _board(corrupt=False, programs_text=PROGRAMS_TEXT):
    """The board top running ``programs_text``, expecting the real programs'
    result (its CRC flipped in one bit with ``corrupt``)."""
    crc = _expected_crc(PROGRAMS_TEXT) ^ (1 if corrupt else 0)
    top = BoardTop(ARCH, data_width=64, programs=[assemble(t) for t in programs_text],
                   memories=_memories(), expected_crc=crc, uart_divisor=DIVISOR, shared_write=True,
                   shared_read=True)
    return top, crc


async def _uart_line(ctx, tx, divisor):
    from gen.simkit import uart_receive
    out = bytearray()
    while not out.endswith(b"\r\n"):
        out += await uart_receive(ctx, tx, divisor, 1)
    return out.decode()


@pytest.mark.parametrize("corrupt", [False, True])
def test_board_top_reports_its_verdict(corrupt):
    top, crc = _board(corrupt)
    lines = []

    async def tb(ctx):
        lines.append(await _uart_line(ctx, top.tx, DIVISOR))
        assert ctx.get(top.led_pass) == (not corrupt)
        assert ctx.get(top.led_fail) == corrupt
        # rerun: the LEDs go dark, then the same verdict comes back
        ctx.set(top.rerun, 1)
        await ctx.tick()
        ctx.set(top.rerun, 0)
        await ctx.tick()
        assert not ctx.get(top.led_pass) and not ctx.get(top.led_fail)
        lines.append(await _uart_line(ctx, top.tx, DIVISOR))

    # the self-test leaves its wait (clearing the CRC) only once the system is
    # done: the run it just started, not what the last run left
    read_back_done = []

    async def watch_read_back(ctx):
        async for _clk, _rst, clear, done in ctx.tick().sample(top.selftest.crc_clear,
                                                               top.system.done):
            if clear:
                read_back_done.append(done)

    run_simulation(top, [tb], background=[watch_read_back])
    assert read_back_done == [1, 1]
    word, cycles, crc_text = lines[0].split()
    assert word == ("FAIL" if corrupt else "PASS")
    assert int(cycles.removeprefix("cycles=")) > 0
    assert crc_text == f"crc={crc ^ (1 if corrupt else 0):08x}"     # the CRC the board computed
    assert lines[1] == lines[0]


@pytest.mark.slow
def test_board_top_verilog_passes_and_fails_over_the_uart():
    """The board top's Verilog under Verilator (the check ``python -m gen fpga``
    runs before building), its UART line decoded by a Verilog testbench: PASS
    with the real programs; FAIL with a corrupted program (device 0's first
    copy reads one byte further on), reporting the CRC of what the corrupted
    program really produces (the golden model's), with the fail LED on."""
    from gen.fpga_board import parse_verdict, simulate_board_verilator
    top, crc = _board()
    line, leds = simulate_board_verilator(top, divisor=DIVISOR, limit=5_000_000)
    v = parse_verdict(line)
    assert v["passed"] is True and v["crc"] == crc and v["cycles"] > 0, line
    assert leds == {"pass": 1, "fail": 0}

    bad_text = [PROGRAMS_TEXT[0].replace("src=0x010", "src=0x011"), PROGRAMS_TEXT[1]]
    assert bad_text[0] != PROGRAMS_TEXT[0]
    bad_crc = _expected_crc(bad_text)
    assert bad_crc != crc
    top, _ = _board(programs_text=bad_text)
    line, leds = simulate_board_verilator(top, divisor=DIVISOR, limit=5_000_000)
    v = parse_verdict(line)
    assert v["passed"] is False and v["crc"] == bad_crc, line
    assert line.startswith("FAIL cycles=")
    assert leds == {"pass": 0, "fail": 1}
