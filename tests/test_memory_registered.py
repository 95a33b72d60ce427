# amaranth: UnusedElaboratable=no
"""BankedMemory(registered=True), the FPGA board's memory: every read port
answers three cycles after its request at full rate and in order under
random back-pressure; a write lands at the edge after it is taken, so a
read taken after a write sees it; with shared ports too."""
import random

import pytest

from gen.simkit import run_simulation
from hw.memory import BankedMemory


def test_properties():
    assert BankedMemory(size=64, registered=True).read_latency == 3
    assert BankedMemory(size=64).read_latency == 1
    assert BankedMemory(size=64, registered=True).registered


def test_latency_and_rate():
    """Requests every cycle, responses always taken: each word comes back
    ``read_latency`` cycles after its request, one a cycle."""
    init = bytes(range(64))
    mem = BankedMemory(data_width=32, size=64, banks=2, registered=True, init=init)
    issued, answered = [], []

    async def tb(ctx):
        ctx.set(mem.read[0].rsp.ready, 1)
        for cycle in range(24):
            ctx.set(mem.read[0].req.valid, cycle < 16)
            ctx.set(mem.read[0].req.p, cycle % 16)
            _, _, rq, rv, data = await ctx.tick().sample(mem.read[0].req.ready,
                                                          mem.read[0].rsp.valid,
                                                          mem.read[0].rsp.p)
            if cycle < 16 and rq:
                issued.append(cycle)
            if rv:
                answered.append((cycle, data))

    run_simulation(mem, [tb])
    assert issued == list(range(16))
    assert [c for c, _ in answered] == [c + mem.read_latency for c in issued]
    assert [d for _, d in answered] == [int.from_bytes(init[4 * a:4 * a + 4], "little")
                                        for a in range(16)]


@pytest.mark.parametrize("banks,rports,wports,shared", [
    (1, 1, 1, False), (2, 2, 2, False), (2, 3, 2, True)])
def test_random_access(banks, rports, wports, shared):
    """Random byte-enable writes and reads with random back-pressure: a read
    taken at cycle c returns a value its word held from the last write taken
    before c until the response; every word ends as the model's."""
    B, words = 4, 16 * banks
    size = B * words
    rng = random.Random(banks * 7 + rports)
    init = rng.randbytes(size)
    mem = BankedMemory(data_width=32, size=size, banks=banks, read_ports=rports,
                       write_ports=wports, init=init, registered=True,
                       shared_write=shared, shared_read=shared)
    model = bytearray(init)
    # per word: [(cycle the value became current (taken), value)]
    history = [[(-1, int.from_bytes(init[a * B:(a + 1) * B], "little"))] for a in range(words)]
    errors, got = [], [0] * rports

    async def tb(ctx):
        pending = [[] for _ in range(rports)]     # (word, cycle taken)
        for cycle in range(500):
            offered = []
            for p in range(wports):
                v = rng.random() < 0.4
                a, d, be = rng.randrange(words), rng.getrandbits(32), rng.getrandbits(B)
                ctx.set(mem.write[p].valid, v)
                ctx.set(mem.write[p].payload, {"addr": a, "data": d, "be": be})
                offered.append((v, a, d, be))
            reqs = []
            for p in range(rports):
                v, a = rng.random() < 0.7, rng.randrange(words)
                ctx.set(mem.read[p].req.valid, v)
                ctx.set(mem.read[p].req.p, a)
                ctx.set(mem.read[p].rsp.ready, rng.random() < 0.7)
                reqs.append((v, a))
            sample = [mem.write[p].ready for p in range(wports)]
            for p in range(rports):
                sample += [mem.read[p].req.ready, mem.read[p].rsp.valid, mem.read[p].rsp.ready,
                           mem.read[p].rsp.p]
            _, _, *vals = await ctx.tick().sample(*sample)
            w_ready, vals = vals[:wports], vals[wports:]
            for p in range(rports):
                rq, rv, rr, data = vals[4 * p:4 * p + 4]
                if rv and rr:
                    a, taken = pending[p].pop(0)
                    start = max(i for i, (c, _) in enumerate(history[a]) if c < taken)
                    allowed = [v for _, v in history[a][start:]]
                    if data not in allowed:
                        errors.append((p, a, taken, cycle, data, allowed))
                    got[p] += 1
                if reqs[p][0] and rq:
                    pending[p].append((reqs[p][1], cycle))
            for p, (v, a, d, be) in enumerate(offered):   # higher port wins on a collision
                if v and w_ready[p]:
                    db = d.to_bytes(B, "little")
                    for lane in range(B):
                        if be >> lane & 1:
                            model[a * B + lane] = db[lane]
                    history[a].append((cycle, int.from_bytes(model[a * B:(a + 1) * B], "little")))
        for p in range(wports):
            ctx.set(mem.write[p].valid, 0)
        for p in range(rports):
            ctx.set(mem.read[p].req.valid, 0)
        for _ in range(4):
            await ctx.tick()
        assert mem.sim_read(ctx, 0, size) == bytes(model)

    run_simulation(mem, [tb])
    assert not errors, errors[:5]
    assert min(got) > 100


def test_shared_registered_reads_keep_latency_and_rate():
    """The board's memory: three read ports share one physical port behind
    one request slice. With every port requesting every cycle and every
    response taken, one request is taken a cycle (never two), each answers
    ``read_latency`` cycles after it was taken, and each port gets its words
    in order."""
    init = bytes(range(256))
    mem = BankedMemory(data_width=32, size=256, read_ports=3, registered=True,
                       shared_read=True, init=init)
    taken, answered = [[] for _ in range(3)], [[] for _ in range(3)]

    async def tb(ctx):
        nxt = [16 * p for p in range(3)]
        for p in range(3):
            ctx.set(mem.read[p].rsp.ready, 1)
            ctx.set(mem.read[p].req.valid, 1)
        for cycle in range(40):
            for p in range(3):
                ctx.set(mem.read[p].req.p, nxt[p])
            sample = []
            for p in range(3):
                sample += [mem.read[p].req.ready, mem.read[p].rsp.valid, mem.read[p].rsp.p]
            _, _, *vals = await ctx.tick().sample(*sample)
            assert sum(vals[3 * p] for p in range(3)) <= 1, "two requests taken in one cycle"
            for p in range(3):
                rq, rv, data = vals[3 * p:3 * p + 3]
                if rq:
                    taken[p].append((cycle, nxt[p]))
                    nxt[p] += 1
                if rv:
                    answered[p].append((cycle, data))

    run_simulation(mem, [tb])
    word = [int.from_bytes(init[4 * a:4 * a + 4], "little") for a in range(64)]
    assert sum(len(t) for t in taken) >= 37               # one a cycle after the first
    for p in range(3):
        assert len(taken[p]) >= 12                         # round robin: each gets a turn
        got = answered[p]
        assert [c for c, _ in got] == [c + mem.read_latency for c, _ in taken[p]][:len(got)]
        assert [d for _, d in got] == [word[a] for _, a in taken[p]][:len(got)]


def test_shared_registered_request_ready_is_a_register():
    """The board's shared read port: a port's ``req.ready`` comes from a
    flip-flop, so within a cycle it does not follow any port's request valid
    or response ready (the DMA's read request decides with it); it is high
    for exactly the granted port while the request slice has room."""
    mem = BankedMemory(data_width=32, size=64, read_ports=3, registered=True, shared_read=True)
    rng = random.Random(4)

    async def tb(ctx):
        for cycle in range(60):
            ready = [ctx.get(mem.read[p].req.ready) for p in range(3)]
            assert sum(ready) <= 1, "two ports ready at once"
            for _ in range(3):                       # same cycle, other inputs
                for p in range(3):
                    ctx.set(mem.read[p].req.valid, rng.random() < 0.6)
                    ctx.set(mem.read[p].req.p, rng.randrange(16))
                    ctx.set(mem.read[p].rsp.ready, rng.random() < 0.3)
                assert [ctx.get(mem.read[p].req.ready) for p in range(3)] == ready
            await ctx.tick()

    run_simulation(mem, [tb])
