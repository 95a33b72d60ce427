"""BankedMemory with shared_write: several write ports through one physical
port (as FPGA block RAM needs), granted round-robin, nothing lost."""
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
