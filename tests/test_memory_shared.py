"""BankedMemory with shared_write / shared_read: several write (read) ports
through one physical port (as FPGA block RAM needs), granted round-robin,
nothing lost."""
import random

import pytest

from gen.simkit import run_simulation
from hw.memory import BankedMemory

PORTS = 3


@pytest.mark.parametrize("banks", [1, 2])
def test_shared_write_port_serialises_every_write(banks):
    mem = BankedMemory(data_width=32, size=256, banks=banks, write_ports=PORTS, read_ports=1,
                       shared_write=True)
    rng = random.Random(banks)
    jobs = [[(rng.randrange(64), rng.randrange(1 << 32), rng.randrange(1, 16)) for _ in range(40)]
            for _ in range(PORTS)]
    accepted, finished, final = [], [], []

    def writer(p):
        async def tb(ctx):
            port = mem.write[p]
            for addr, data, be in jobs[p]:
                while rng.random() < 0.3:
                    await ctx.tick()
                ctx.set(port.valid, 1)
                ctx.set(port.p, {"addr": addr, "data": data, "be": be})
                await ctx.tick().until(port.ready)
                ctx.set(port.valid, 0)
            finished.append(p)
        return tb

    async def monitor(ctx):
        while True:
            ready = [ctx.get(mem.write[p].ready) for p in range(PORTS)]
            valid = [ctx.get(mem.write[p].valid) for p in range(PORTS)]
            assert sum(ready) <= 1, "two write ports granted in one cycle"
            for p in range(PORTS):
                if ready[p] and valid[p]:
                    w = mem.write[p].p
                    accepted.append((p, ctx.get(w.addr), ctx.get(w.data), ctx.get(w.be)))
            await ctx.tick()

    async def reader(ctx):
        while len(finished) < PORTS:
            await ctx.tick()
        await ctx.tick()
        final.append(mem.sim_read(ctx, 0, 256))

    run_simulation(mem, [writer(p) for p in range(PORTS)] + [reader], background=[monitor])
    # every write went through exactly once, in its port's order
    for p in range(PORTS):
        assert [(a, d, b) for q, a, d, b in accepted if q == p] == jobs[p]
    model = bytearray(256)
    for _, addr, data, be in accepted:          # in the order they were granted
        for lane in range(4):
            if be >> lane & 1:
                model[addr * 4 + lane] = data >> (8 * lane) & 0xFF
    assert final == [bytes(model)]


def test_ports_are_always_ready_without_sharing():
    mem = BankedMemory(data_width=32, size=64, write_ports=2)

    async def tb(ctx):
        for p in range(2):
            ctx.set(mem.write[p].valid, 1)
        assert all(ctx.get(mem.write[p].ready) for p in range(2))

    run_simulation(mem, [tb])


@pytest.mark.parametrize("banks", [1, 2])
def test_shared_read_port_answers_each_port_in_order(banks):
    """Three read ports through one physical port, each with random request
    gaps and random back-pressure on its responses: every port gets exactly
    the words it asked for, in order (no port sees a response it did not ask
    for), and no two requests are taken in one cycle."""
    rng = random.Random(10 + banks)
    init = bytes(rng.randrange(256) for _ in range(256))
    mem = BankedMemory(data_width=32, size=256, banks=banks, read_ports=PORTS, write_ports=1,
                       init=init, shared_read=True)
    words = [int.from_bytes(init[4 * i:4 * i + 4], "little") for i in range(64)]
    asks = [[rng.randrange(64) for _ in range(40)] for _ in range(PORTS)]
    got = [[] for _ in range(PORTS)]

    def requester(p):
        async def tb(ctx):
            port = mem.read[p]
            for addr in asks[p]:
                while rng.random() < 0.3:
                    await ctx.tick()
                ctx.set(port.req.valid, 1)
                ctx.set(port.req.p, addr)
                await ctx.tick().until(port.req.ready)
                ctx.set(port.req.valid, 0)
        return tb

    def receiver(p):
        async def tb(ctx):
            port = mem.read[p]
            while len(got[p]) < len(asks[p]):
                ready = rng.random() < 0.6
                ctx.set(port.rsp.ready, ready)
                _, _, valid, data = await ctx.tick().sample(port.rsp.valid, port.rsp.p)
                if valid and ready:
                    got[p].append(data)
            ctx.set(port.rsp.ready, 0)
        return tb

    async def monitor(ctx):
        while True:
            granted = [ctx.get(mem.read[p].req.ready) and ctx.get(mem.read[p].req.valid)
                       for p in range(PORTS)]
            assert sum(granted) <= 1, "two read requests taken in one cycle"
            await ctx.tick()

    run_simulation(mem, [requester(p) for p in range(PORTS)]
                   + [receiver(p) for p in range(PORTS)], background=[monitor])
    for p in range(PORTS):
        assert got[p] == [words[a] for a in asks[p]]
