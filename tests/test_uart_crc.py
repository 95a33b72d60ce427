"""The board self-test's pieces: UART transmitter and word-wide CRC-32."""
import random
import zlib

import pytest

from gen.simkit import run_simulation, stream_put, uart_receive
from hw.crc import Crc32
from hw.uart import UartTx


@pytest.mark.parametrize("divisor", [2, 5, 16])
def test_uart_sends_bytes_8n1(divisor):
    uart = UartTx(divisor)
    msg = b"PASS cycles=9426\r\n\x00\xff"
    got = []

    async def producer(ctx):
        rng = random.Random(divisor)
        for b in msg:
            await stream_put(ctx, uart.data, b, rng=rng, idle_prob=0.3)

    async def receiver(ctx):
        got.append(await uart_receive(ctx, uart.tx, divisor, len(msg)))

    run_simulation(uart, [producer, receiver])
    assert got == [msg]


def test_uart_rejects_bad_divisor():
    with pytest.raises(ValueError, match=r"Divisor must be an integer of at least 2, not 1"):
        UartTx(1)


@pytest.mark.parametrize("width", [32, 64, 256])
def test_crc32_equals_zlib(width):
    crc = Crc32(width)
    rng = random.Random(width)
    nbytes = width // 8
    images = [bytes(rng.randrange(256) for _ in range(nbytes * n)) for n in (1, 7, 3)]
    got = []

    async def tb(ctx):
        for img in images:
            ctx.set(crc.clear, 1)
            await ctx.tick()
            ctx.set(crc.clear, 0)
            assert ctx.get(crc.crc) == zlib.crc32(b"")
            for i in range(0, len(img), nbytes):
                if rng.random() < 0.3:          # idle cycles change nothing
                    await ctx.tick()
                ctx.set(crc.words.valid, 1)
                ctx.set(crc.words.payload, int.from_bytes(img[i:i + nbytes], "little"))
                await ctx.tick()
                ctx.set(crc.words.valid, 0)
            got.append(ctx.get(crc.crc))

    run_simulation(crc, [tb])
    assert got == [zlib.crc32(img) for img in images]


@pytest.mark.parametrize("passed,cycles,crc", [(1, 9426, 0x1C291CA3), (0, 0, 0),
                                               (1, 4294967295, 0xFFFFFFFF), (0, 1000000, 0xA)])
def test_verdict_line(passed, cycles, crc):
    from hw.verdict import VerdictLine
    from gen.simkit import stream_get
    line = VerdictLine()
    want = f"{'PASS' if passed else 'FAIL'} cycles={cycles} crc={crc:08x}\r\n".encode()
    got = bytearray()
    rng = random.Random(cycles)

    async def tb(ctx):
        ctx.set(line.passed, passed)
        ctx.set(line.cycles, cycles)
        ctx.set(line.crc, crc)
        ctx.set(line.start, 1)
        await ctx.tick()
        ctx.set(line.start, 0)
        assert ctx.get(line.busy)
        for _ in want:
            got.append(await stream_get(ctx, line.data, rng=rng, bp_prob=0.3))
        for _ in range(20):
            await ctx.tick()
            assert not ctx.get(line.data.valid)
        assert not ctx.get(line.busy)

    run_simulation(line, [tb])
    assert bytes(got) == want
