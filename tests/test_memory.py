# amaranth: UnusedElaboratable=no
"""BankedMemory: random reads/writes with byte enables and back-pressure
against a bytearray model, on several bank and port counts."""
import random

import pytest

from hw.memory import BankedMemory
from gen.simkit import run_simulation


def test_constructor_errors():
    with pytest.raises(ValueError, match=r"Bus width must be one of 32, 64, 128, 256, not 48"):
        BankedMemory(data_width=48)
    with pytest.raises(ValueError, match=r"Bank count must be a positive power of two, not 3"):
        BankedMemory(banks=3)
    with pytest.raises(ValueError, match=r"Memory size must be a positive multiple of 8 bytes "
                                         r"\(2 banks of 4-byte words\), not 100"):
        BankedMemory(size=100, banks=2)
    with pytest.raises(ValueError, match=r"Read port count must be at least 1, not 0"):
        BankedMemory(read_ports=0)
    with pytest.raises(ValueError, match=r"Write port count must be at least 1, not 0"):
        BankedMemory(write_ports=0)
    with pytest.raises(ValueError, match=r"Initial contents of 9 bytes exceed the memory size of 8 bytes"):
        BankedMemory(size=8, init=bytes(9))


def test_properties():
    m = BankedMemory(data_width=64, size=1024, banks=4, read_ports=2, write_ports=3)
    assert (m.data_width, m.size, m.banks, m.read_ports, m.write_ports) == (64, 1024, 4, 2, 3)
    assert (m.words, m.addr_width) == (128, 7)
    with pytest.raises(AttributeError):
        m.size = 5


@pytest.mark.parametrize("width,banks,rports,wports", [
    (32, 1, 1, 1), (32, 4, 2, 2), (64, 2, 1, 2), (128, 8, 3, 1), (256, 2, 2, 1)])
def test_random_access(width, banks, rports, wports):
    B = width // 8
    size = B * banks * 16
    rng = random.Random(width * 131 + banks)
    init = rng.randbytes(size - 3)
    mem = BankedMemory(data_width=width, size=size, banks=banks, read_ports=rports,
                       write_ports=wports, init=init)
    model = bytearray(init + bytes(3))
    words = size // B

    async def tb(ctx):
        assert mem.sim_read(ctx, 0, size) == bytes(model)
        expect = [[] for _ in range(rports)]     # per read port: expected words, in order
        got = [[] for _ in range(rports)]
        for cycle in range(400):
            # drive writes and read requests for this cycle
            writes = []
            for p in range(wports):
                if rng.random() < 0.5:
                    a, d, be = rng.randrange(words), rng.getrandbits(width), rng.getrandbits(B)
                    ctx.set(mem.write[p].valid, 1)
                    ctx.set(mem.write[p].payload, {"addr": a, "data": d, "be": be})
                    writes.append((a, d, be))
                else:
                    ctx.set(mem.write[p].valid, 0)
            reqs = []
            for p in range(rports):
                v = rng.random() < 0.7
                a = rng.randrange(words)
                ctx.set(mem.read[p].req.valid, v)
                ctx.set(mem.read[p].req.payload, a)
                ctx.set(mem.read[p].rsp.ready, rng.random() < 0.7)
                reqs.append((v, a))
            sample = []
            for p in range(rports):
                sample += [mem.read[p].req.ready, mem.read[p].rsp.valid, mem.read[p].rsp.ready,
                           mem.read[p].rsp.payload]
            _, _, *vals = await ctx.tick().sample(*sample)
            for p in range(rports):
                rq_ready, rs_valid, rs_ready, rs_data = vals[4 * p:4 * p + 4]
                if rs_valid and rs_ready:
                    got[p].append(rs_data)
                v, a = reqs[p]
                if v and rq_ready:
                    # not transparent: the read sees memory before this cycle's writes
                    expect[p].append(int.from_bytes(model[a * B:(a + 1) * B], "little"))
            for a, d, be in writes:   # higher port wins on a collision
                db = d.to_bytes(B, "little")
                for lane in range(B):
                    if be >> lane & 1:
                        model[a * B + lane] = db[lane]
        for p in range(rports):
            ctx.set(mem.read[p].req.valid, 0)
            ctx.set(mem.read[p].rsp.ready, 1)
        for p in range(wports):
            ctx.set(mem.write[p].valid, 0)
        await ctx.tick()
        for p in range(rports):
            if ctx.get(mem.read[p].rsp.valid) and len(got[p]) < len(expect[p]):
                got[p].append(ctx.get(mem.read[p].rsp.payload))
            assert got[p] == expect[p][:len(got[p])]
            assert len(expect[p]) - len(got[p]) <= 1
            assert len(got[p]) > 100
        assert mem.sim_read(ctx, 0, size) == bytes(model)

    run_simulation(mem, [tb])


def test_sim_write_unaligned():
    mem = BankedMemory(data_width=32, size=64, banks=2)

    async def tb(ctx):
        mem.sim_write(ctx, 5, b"abcdefg")
        assert mem.sim_read(ctx, 4, 9) == b"\0abcdefg\0"

    run_simulation(mem, [tb])
