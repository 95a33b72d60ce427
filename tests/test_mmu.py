# amaranth: UnusedElaboratable=no
"""MMU: translation, permissions, placement (vs. a Python model and model.golden),
atomic COMMIT under traffic, pipelining without bubbles, three-cycle latency."""
import random

import pytest
from amaranth.hdl import Fragment

from hw.isa import ArchParams, Op, encode, ISA_VERSION
from hw.mmu import MMU, TranslateCause
from gen.simkit import TlbModel, mmu_command, rtl_tlb, run_simulation, stream_put

ARCH = ArchParams(devices=2, mem_bytes=1 << 16, page_sizes=(1024, 4096, 16384, 65536),
                  tlb_entries=8, contexts=4, addr_bits=20)


def test_constructor_errors():
    with pytest.raises(TypeError, match=r"arch must be an ArchParams, not 3"):
        MMU(3)
    with pytest.raises(ValueError, match=r"Local device must be an integer in 0\.\.1, not 2"):
        MMU(ARCH, local_dev=2)
    with pytest.raises(ValueError, match=r"Tag width must be an integer in 0\.\.16, not 17"):
        MMU(ARCH, tag_width=17)


def test_properties():
    mmu = MMU(ARCH, local_dev=1, tag_width=3)
    assert (mmu.arch, mmu.local_dev, mmu.tag_width) == (ARCH, 1, 3)
    assert len(mmu.entries) == ARCH.tlb_entries
    Fragment.get(mmu, None)     # elaborated: no "created but never used" warning
    with pytest.raises(AttributeError):
        mmu.local_dev = 0


async def program(ctx, mmu, model, cmds):
    for c in cmds:
        await stream_put(ctx, mmu.cmd, mmu_command(**c))
        model.apply(c)
    await ctx.tick().until(mmu.idle)


async def check_translations(ctx, mmu, model, queries, rng=None, idle_prob=0.0, bp_prob=0.0):
    """Issue queries (ctx, va, write) and compare the responses to the model."""
    results = []
    pending = list(queries)
    sent = 0
    got = 0
    ctx.set(mmu.rsp.ready, 0)
    while got < len(queries):
        send = sent < len(queries) and not (rng and rng.random() < idle_prob)
        if send:
            c, va, w = queries[sent]
            ctx.set(mmu.req.valid, 1)
            ctx.set(mmu.req.payload, {"ctx": c, "va": va, "write": w, "tag": sent & 15})
        else:
            ctx.set(mmu.req.valid, 0)
        ready = not (rng and rng.random() < bp_prob)
        ctx.set(mmu.rsp.ready, ready)
        _, _, rq_ready, rs_valid, rs = await ctx.tick().sample(mmu.req.ready, mmu.rsp.valid,
                                                              mmu.rsp.payload)
        if send and rq_ready:
            sent += 1
        if ready and rs_valid:
            c, va, w = pending[got]
            pa, dev, cause = model.translate(c, va, w)
            assert int(rs.tag) == got & 15
            assert rs.cause.value == cause, (hex(va), w, rs.cause, cause)
            if cause == TlbModel.NONE:
                assert (int(rs.pa), int(rs.dev)) == (pa, dev), hex(va)
            results.append(rs)
            got += 1
    ctx.set(mmu.req.valid, 0)
    ctx.set(mmu.rsp.ready, 0)
    return results


MAP = [
    dict(op="REMAP", ctx=0, size=0, perm=3, dev=0, va=0x00000, pa=0x0400),
    dict(op="REMAP", ctx=0, size=1, perm=1, dev=0, va=0x01000, pa=0x8000),     # read only
    dict(op="REMAP", ctx=0, size=2, perm=2, dev=1, va=0x04000, pa=0xC000),     # write only, remote
    dict(op="REMAP", ctx=0, size=3, perm=3, dev=0, va=0x10000, pa=0x0000),     # 64 KiB
    dict(op="REMAP", ctx=0, size=0, perm=3, dev=0, va=0x10400, pa=0x7000),     # shadowed by 3? no: 3 wins
    dict(op="REMAP", ctx=1, size=0, perm=3, dev=1, va=0x00000, pa=0x2000),
    dict(op="REMAP", ctx=1, size=1, perm=3, dev=0, va=0x20000, pa=0xF000),     # straddles the end
    dict(op="REMAP", ctx=2, size=3, perm=3, dev=0, va=0xF0000, pa=0x10000),    # beyond memory
]


def test_translate_and_causes():
    mmu = MMU(ARCH, local_dev=0)
    model = TlbModel(ARCH, 0)
    rng = random.Random(1)

    async def tb(ctx):
        await program(ctx, mmu, model, MAP)
        assert rtl_tlb(ctx, mmu) == model.rtl_view()
        qs = []
        for c in range(4):
            for va in [0, 0x3ff, 0x400, 0x1000, 0x1fff, 0x2000, 0x4000, 0x7fff, 0x10000,
                       0x10400, 0x1ffff, 0x20000, 0x20fff, 0xF0000, 0xFFFFF]:
                for w in (0, 1):
                    qs.append((c, va + rng.randrange(0, 4) * (va % 1024 == 0), w))
        rs = await check_translations(ctx, mmu, model, qs, rng, 0.3, 0.3)
        causes = {r.cause for r in rs}
        assert causes == set(TranslateCause), causes

    run_simulation(mmu, [tb])


def test_lowest_index_wins_and_inval():
    mmu = MMU(ARCH)
    model = TlbModel(ARCH)

    async def tb(ctx):
        cmds = [
            dict(op="REMAP", ctx=0, size=0, perm=3, dev=0, va=0x4400, pa=0x1000),
            dict(op="REMAP", ctx=0, size=1, perm=1, dev=0, va=0x4000, pa=0x8000),
            dict(op="REMAP", ctx=0, size=2, perm=3, dev=0, va=0x4000, pa=0xC000),
        ]
        await program(ctx, mmu, model, cmds)
        qs = [(0, va, w) for va in (0x4000, 0x4400, 0x47ff, 0x4800, 0x5000, 0x7fff) for w in (0, 1)]
        await check_translations(ctx, mmu, model, qs)
        await program(ctx, mmu, model, [dict(op="INVAL", ctx=0, size=0, staged=0, va=0x4400),
                                        dict(op="INVAL", ctx=0, size=1, staged=1, va=0x4000)])
        assert rtl_tlb(ctx, mmu) == model.rtl_view()
        await check_translations(ctx, mmu, model, qs)

    run_simulation(mmu, [tb])


def random_commands(rng, arch, n, vas=8):
    cmds = []
    for _ in range(n):
        kind = rng.choices(["REMAP", "INVAL", "COMMIT"], [6, 2, 1])[0]
        size = rng.randrange(4)
        page = arch.page_sizes[size]
        ctx = rng.randrange(arch.contexts)
        va = rng.randrange(vas) * page % (1 << arch.addr_bits)
        if kind == "REMAP":
            cmds.append(dict(op="REMAP", ctx=ctx, size=size, perm=rng.randrange(4),
                             staged=rng.randrange(2), dev=rng.randrange(arch.devices), va=va,
                             pa=rng.randrange(4) * page % (1 << arch.addr_bits)))
        elif kind == "INVAL":
            cmds.append(dict(op="INVAL", ctx=ctx, size=size, staged=rng.randrange(2), va=va))
        else:
            cmds.append(dict(op="COMMIT", ctx=ctx))
    return cmds


def golden_tlb(arch, cmds):
    """TLB contents and victim pointer after ``cmds``, from model.golden."""
    from model.golden import run_golden
    prog = [encode(Op.VERSION, version=ISA_VERSION)]
    for c in cmds:
        f = {k: v for k, v in c.items() if k != "op"}
        if c["op"] == "INVAL":
            f = {k: f[k] for k in ("ctx", "size", "staged", "va")}
        elif c["op"] == "COMMIT":
            f = {"ctx": f["ctx"]}
        prog.append(encode(Op[c["op"]], **f))
    prog.append(encode(Op.HALT))
    res = run_golden(arch, [prog] + [[encode(Op.VERSION, version=ISA_VERSION), encode(Op.HALT)]]
                     * (arch.devices - 1), [b""] * arch.devices)
    assert res.status[0].name == "HALTED", (res.status, res.cause)
    p0 = arch.page_sizes[0]
    view = [None] * arch.tlb_entries
    for e in res.tlb[0]:
        view[e["index"]] = (e["staged"], e["ctx"], e["size"], e["perm"], e["dev"],
                            e["va"] // p0, e["pa"] // p0)
    return view, res.tlb_victim[0]


@pytest.mark.parametrize("seed", range(3))
def test_placement_matches_models(seed):
    arch = ArchParams(devices=2, mem_bytes=1 << 16, page_sizes=(1024, 4096, 16384, 65536),
                      tlb_entries=6, contexts=2, addr_bits=20)
    rng = random.Random(seed)
    cmds = random_commands(rng, arch, 60, vas=4)
    mmu = MMU(arch)
    model = TlbModel(arch)

    async def tb(ctx):
        for i in range(0, len(cmds), 10):
            await program(ctx, mmu, model, cmds[i:i + 10])
            assert rtl_tlb(ctx, mmu) == model.rtl_view()
            assert ctx.get(mmu.victim) == model.victim
            qs = [(rng.randrange(2), rng.randrange(1 << 18), rng.randrange(2)) for _ in range(20)]
            await check_translations(ctx, mmu, model, qs, rng, 0.2, 0.2)

    run_simulation(mmu, [tb])
    view, victim = golden_tlb(arch, cmds)
    assert view == model.rtl_view()
    assert victim == model.victim


def test_no_bubbles_on_hits():
    """1000 back-to-back hit translations: one response per cycle, 0 bubbles."""
    mmu = MMU(ARCH)
    model = TlbModel(ARCH)
    n = 1000

    async def tb(ctx):
        await program(ctx, mmu, model, MAP[:4])
        ctx.set(mmu.rsp.ready, 1)
        ctx.set(mmu.req.valid, 1)
        first = None
        got = 0
        cycle = 0
        sent = 0
        while got < n:
            if sent < n:
                ctx.set(mmu.req.payload, {"ctx": 0, "va": (sent * 4) % 0x400, "write": 0, "tag": 0})
            else:
                ctx.set(mmu.req.valid, 0)
            _, _, rdy, v, p = await ctx.tick().sample(mmu.req.ready, mmu.rsp.valid, mmu.rsp.payload)
            if rdy and sent < n:
                sent += 1
            if v:
                assert p.cause == TranslateCause.NONE
                if first is None:
                    first = cycle
                got += 1
            cycle += 1
        bubbles = (cycle - first) - n
        assert bubbles == 0
        assert first == 3     # request accepted at edge 0, response valid three cycles later

    run_simulation(mmu, [tb])


def test_commit_atomic_under_traffic():
    """Translations stream while COMMITs swap the context's mapping: every
    response is entirely the old or entirely the new mapping, and once a
    response saw the new mapping none sees the old one."""
    arch = ArchParams(devices=2, mem_bytes=1 << 16, page_sizes=(1024, 4096, 16384, 65536),
                      tlb_entries=16, contexts=2, addr_bits=20)
    mmu = MMU(arch)
    rng = random.Random(7)
    pages = 4
    gens = 6

    def mapping(gen):
        # generation g maps va page k to pa page (k + g) * 4 (+ other bits) of ctx 0
        return [dict(op="REMAP", ctx=0, size=0, perm=3 if gen % 2 == 0 else 1, dev=0,
                     va=k * 1024, pa=((k * 7 + gen * 5) % 64) * 1024, staged=1)
                for k in range(pages)]

    async def tb(ctx):
        for c in mapping(0):
            await stream_put(ctx, mmu.cmd, mmu_command(**c))
        await stream_put(ctx, mmu.cmd, mmu_command("COMMIT", ctx=0))
        await ctx.tick().until(mmu.idle)
        seen = []
        gen = 0
        next_gen_at = 20
        staged = list(mapping(1))
        cycle = 0
        ctx.set(mmu.rsp.ready, 1)
        while gen < gens or cycle < next_gen_at + 10:
            # translation stream: every cycle a request for a random page
            ctx.set(mmu.req.valid, 1)
            k = rng.randrange(pages)
            ctx.set(mmu.req.payload, {"ctx": 0, "va": k * 1024 + 3, "write": rng.randrange(2),
                                      "tag": k})
            # command stream: stage the next generation, then COMMIT
            cmd = None
            if gen < gens and cycle >= next_gen_at:
                cmd = staged[0] if staged else dict(op="COMMIT", ctx=0)
                ctx.set(mmu.cmd.valid, 1)
                ctx.set(mmu.cmd.payload, mmu_command(**cmd))
            else:
                ctx.set(mmu.cmd.valid, 0)
            _, _, crdy, v, p = await ctx.tick().sample(mmu.cmd.ready, mmu.rsp.valid, mmu.rsp.payload)
            if cmd is not None and crdy:
                if staged:
                    staged.pop(0)
                else:
                    gen += 1
                    staged = list(mapping(gen + 1)) if gen + 1 <= gens else []
                    next_gen_at = cycle + rng.randrange(1, 8)
            if v:
                seen.append((int(p.tag), int(p.pa), p.cause.value))
            cycle += 1
        ctx.set(mmu.req.valid, 0)
        ctx.set(mmu.cmd.valid, 0)
        # classify each response by generation
        last_gen = 0
        for k, pa, cause in seen:
            cands = [g for g in range(gens + 1)
                     if pa == ((k * 7 + g * 5) % 64) * 1024 + 3]
            assert cands, (k, hex(pa))
            g = max(c for c in cands if c >= last_gen) if any(c >= last_gen for c in cands) else None
            assert g is not None, "a response used an older mapping after a newer one"
            last_gen = g
        assert last_gen == gens

    run_simulation(mmu, [tb])


def test_miss_to_fault_latency():
    mmu = MMU(ARCH)

    async def tb(ctx):
        ctx.set(mmu.rsp.ready, 1)
        ctx.set(mmu.req.valid, 1)
        ctx.set(mmu.req.payload, {"ctx": 3, "va": 0x1234, "write": 0, "tag": 0})
        await ctx.tick()
        ctx.set(mmu.req.valid, 0)
        cycles = 0
        while not ctx.get(mmu.rsp.valid):
            await ctx.tick()
            cycles += 1
        assert ctx.get(mmu.rsp.p.cause) == TranslateCause.NOT_MAPPED
        assert cycles == 2     # response valid in the 3rd cycle after the request cycle

    run_simulation(mmu, [tb])


def test_no_fault_queue():
    """The MMU keeps no fault records (the DMA's, with their channel, are the
    ones the coprocessor queues): no fault ports, no ``fault_depth``."""
    mmu = MMU(ARCH)
    assert set(mmu.signature.members) == {"req", "rsp", "cmd", "idle", "commit_ctx", "commit_place",
                                          "tlb_index", "tlb_entry"}
    with pytest.raises(TypeError):
        MMU(ARCH, fault_depth=4)


def test_tlb_read_back_port():
    """``tlb_index`` / ``tlb_entry`` show the entry a REMAP placed (the host port's view),
    a cycle after the index is set."""
    from amaranth.sim import Simulator
    from hw.isa import ArchParams
    from hw.mmu import MMU, MmuOp
    arch = ArchParams(tlb_entries=4, mem_bytes=1 << 16, addr_bits=20)
    dut = MMU(arch)

    async def bench(ctx):
        ctx.set(dut.cmd.p.op, MmuOp.REMAP)
        ctx.set(dut.cmd.p.ctx, 1)
        ctx.set(dut.cmd.p.size, 0)
        ctx.set(dut.cmd.p.perm, 3)
        ctx.set(dut.cmd.p.va, 0x3000)
        ctx.set(dut.cmd.p.pa, 0x5000)
        ctx.set(dut.cmd.valid, 1)
        await ctx.tick().until(dut.cmd.ready)
        ctx.set(dut.cmd.valid, 0)
        await ctx.tick().until(dut.idle)
        ctx.set(dut.tlb_index, 0)
        await ctx.tick()                                  # the entry is registered
        e = ctx.get(dut.tlb_entry)
        assert (e.valid, e.ctx, e.perm, e.vpn, e.ppn) == (1, 1, 3, 3, 5)
        ctx.set(dut.tlb_index, 1)
        assert ctx.get(dut.tlb_entry).valid == 1          # still entry 0's, until the edge
        await ctx.tick()
        assert ctx.get(dut.tlb_entry).valid == 0

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


def test_back_to_back_commands():
    """Commands offered back to back are accepted every third cycle (the next
    one at the edge where the previous one takes effect) and land as the model."""
    mmu = MMU(ARCH)
    model = TlbModel(ARCH)
    cmds = random_commands(random.Random(3), ARCH, 30)

    async def tb(ctx):
        ctx.set(mmu.cmd.valid, 1)
        edges = []
        cycle = 0
        for c in cmds:
            ctx.set(mmu.cmd.payload, mmu_command(**c))
            while True:
                _, _, ready = await ctx.tick().sample(mmu.cmd.ready)
                cycle += 1
                if ready:
                    break
            edges.append(cycle)
            model.apply(c)
        ctx.set(mmu.cmd.valid, 0)
        await ctx.tick().until(mmu.idle)
        assert [b - a for a, b in zip(edges, edges[1:])] == [3] * (len(cmds) - 1)
        assert rtl_tlb(ctx, mmu) == model.rtl_view()

    run_simulation(mmu, [tb])


def test_commit_place_shows_the_commit_being_placed():
    """``commit_place`` is high for one cycle, the one after a COMMIT is
    accepted, with its context on ``commit_ctx``; never for REMAP or INVAL."""
    mmu = MMU(ARCH)
    cmds = [dict(op="REMAP", ctx=1, size=0, perm=3, dev=0, va=0, pa=0, staged=1),
            dict(op="COMMIT", ctx=1), dict(op="INVAL", ctx=0, size=0, va=0, staged=0),
            dict(op="COMMIT", ctx=2)]
    seen = []

    async def tb(ctx):
        ctx.set(mmu.cmd.valid, 1)
        cycle = 0
        for c in cmds:
            ctx.set(mmu.cmd.payload, mmu_command(**c))
            while True:
                _, _, ready, place, cctx = await ctx.tick().sample(mmu.cmd.ready, mmu.commit_place,
                                                                   mmu.commit_ctx)
                cycle += 1
                if place:
                    seen.append((cycle, int(cctx)))
                if ready:
                    break
            if c["op"] == "COMMIT":
                seen.append(("accepted", cycle))
        ctx.set(mmu.cmd.valid, 0)
        for _ in range(4):
            _, _, place, cctx = await ctx.tick().sample(mmu.commit_place, mmu.commit_ctx)
            cycle += 1
            if place:
                seen.append((cycle, int(cctx)))

    run_simulation(mmu, [tb])
    first, second = [e[1] for e in seen if e[0] == "accepted"]
    assert [e for e in seen if e[0] != "accepted"] == [(first + 1, 1), (second + 1, 2)]
