# amaranth: UnusedElaboratable=no
"""One test per MMU stage (hw/mmu/: MatchStage, SelectStage, CheckStage,
CommandUnit): its stream contract under random idle cycles and back-pressure
(an offer that is not taken stays, with the same payload, until it is; nothing
is lost, duplicated or reordered) and what it must compute, against plain
Python; and the REMAP interlock between the command unit and the lookup."""
from __future__ import annotations

import copy
import random

import pytest
from amaranth.hdl import ClockDomain, Module

from gen.simkit import TlbModel, run_simulation, stream_get, stream_put, stream_monitor
from hw.isa import ArchParams
from hw.mmu import PRIORITY_GROUP, CheckStage, CommandUnit, MatchStage, MMU, SelectStage
from gen.simkit import mmu_command
from tests.test_mmu import random_commands

ARCH = ArchParams(devices=2, mem_bytes=1 << 16, page_sizes=(1024, 4096, 16384, 65536),
                  tlb_entries=8, contexts=4, addr_bits=20)
P0 = ARCH.page_sizes[0]
N = 120          # transfers per test


def producer(stream, items, rng, idle_prob=0.3):
    async def tb(ctx):
        for it in items:
            await stream_put(ctx, stream, it, rng=rng, idle_prob=idle_prob)
    return tb


def random_tlb(rng, n_cmds=40):
    model = TlbModel(ARCH)
    for c in random_commands(rng, ARCH, n_cmds, vas=4):
        model.apply(c)
    return model


def entry_value(e):
    """A TlbModel entry as the RTL's TlbEntry payload."""
    if e is None:
        return {"valid": 0}
    return {"valid": 1, "staged": e["staged"], "ctx": e["ctx"], "size": e["size"],
            "perm": e["perm"], "dev": e["dev"], "vpn": e["va"] // P0, "ppn": e["pa"] // P0}


def model_hits(model, ctx, va):
    hits = 0
    for k, e in enumerate(model.entries):
        if e is None or e["staged"] or e["ctx"] != ctx:
            continue
        if va & ~(ARCH.page_sizes[e["size"]] - 1) == e["va"]:
            hits |= 1 << k
    return hits


def random_requests(rng, model, n):
    """Requests that mostly hit (addresses inside mapped pages) and sometimes miss."""
    mapped = [e for e in model.entries if e is not None]
    out = []
    for i in range(n):
        if mapped and rng.random() < 0.7:
            e = rng.choice(mapped)
            ctx, va = e["ctx"], e["va"] + rng.randrange(ARCH.page_sizes[e["size"]])
        else:
            ctx, va = rng.randrange(ARCH.contexts), rng.randrange(1 << ARCH.addr_bits)
        out.append({"ctx": ctx, "va": va, "write": rng.randrange(2), "tag": i & 15})
    return out


def grouped(hits):
    """The match stage's output, from the priority rule itself: each group of
    PRIORITY_GROUP entries keeps its lowest hit; a bit per group that hits."""
    first = groups = 0
    for g in range(0, ARCH.tlb_entries, PRIORITY_GROUP):
        part = hits >> g & ((1 << PRIORITY_GROUP) - 1)
        first |= (part & -part) << g
        groups |= (part != 0) << (g // PRIORITY_GROUP)
    return first, groups


@pytest.mark.parametrize("seed", range(2))
def test_match_stage(seed):
    """The hits of a random TLB, each group's lowest kept, and the groups that
    hit; ``hold`` (random) never lets a request in; ``empty``'s copies are
    ``o.valid`` inverted."""
    rng = random.Random(seed)
    model = random_tlb(rng)
    dut = MatchStage(ARCH)
    reqs = random_requests(rng, model, N)
    log = []

    async def consumer(ctx):
        for k, e in enumerate(model.entries):
            ctx.set(dut.entries[k], entry_value(e))
        for r in reqs:
            p = await stream_get(ctx, dut.o, rng=rng, bp_prob=0.4)
            assert int(p.req.va) == r["va"] and int(p.req.tag) == r["tag"]
            first, groups = grouped(model_hits(model, r["ctx"], r["va"]))
            assert (int(p.first), int(p.group_hit)) == (first, groups), hex(r["va"])

    async def hold(ctx):
        all_empty = (1 << len(dut.empty)) - 1
        while True:
            ctx.set(dut.hold, rng.random() < 0.2)
            _, _, held, valid, ready = await ctx.tick().sample(dut.hold, dut.o.valid,
                                                                dut.o.ready)
            if held and (not valid or ready):
                assert not ctx.get(dut.o.valid), "a hit vector was registered under hold"
            # every copy of "o is empty" agrees with o.valid (from the first edge)
            assert ctx.get(dut.empty) == (0 if ctx.get(dut.o.valid) else all_empty)

    run_simulation(dut, [producer(dut.i, reqs, rng), consumer],
                   [stream_monitor(dut.o, log=log, name="match.o"), hold])
    assert len(log) == N


@pytest.mark.parametrize("seed", range(2))
def test_select_stage(seed):
    """The winning entry's fields."""
    rng = random.Random(10 + seed)
    model = random_tlb(rng)
    dut = SelectStage(ARCH)
    items, all_hits = [], []
    for r in random_requests(rng, model, N):     # the TLB's hits, or any
        hits = (model_hits(model, r["ctx"], r["va"]) if rng.random() < 0.5
                else rng.randrange(1 << ARCH.tlb_entries))
        first, groups = grouped(hits)
        items.append({"req": r, "first": first, "group_hit": groups})
        all_hits.append(hits)
    log = []

    async def consumer(ctx):
        for k, e in enumerate(model.entries):
            ctx.set(dut.entries[k], entry_value(e))
        for it, hits in zip(items, all_hits):
            p = await stream_get(ctx, dut.o, rng=rng, bp_prob=0.4)
            assert int(p.req.va) == it["req"]["va"]
            assert p.hit == (hits != 0)
            if hits:                                 # the lowest-index hit wins
                e = entry_value(model.entries[(hits & -hits).bit_length() - 1])
                got = (int(p.perm), int(p.dev), int(p.size), int(p.ppn))
                assert got == tuple(e.get(f, 0) for f in ("perm", "dev", "size", "ppn"))

    run_simulation(dut, [producer(dut.i, items, rng), consumer],
                   [stream_monitor(dut.o, log=log, name="select.o")])
    assert len(log) == N


def clocked(dut):
    m = Module()
    m.domains.sync = ClockDomain()
    m.submodules.dut = dut
    return m


@pytest.mark.parametrize("local_dev", range(2))
def test_check_stage(local_dev):
    """Causes in the architectural order, and the physical address."""
    rng = random.Random(20 + local_dev)
    model = TlbModel(ARCH, local_dev)
    dut = CheckStage(ARCH, local_dev=local_dev)
    items, expect = [], []
    for i in range(N):
        size = rng.randrange(4)
        page = ARCH.page_sizes[size]
        e = dict(ctx=0, staged=0, size=size, perm=rng.randrange(4), dev=rng.randrange(2),
                 va=rng.randrange(1 << ARCH.addr_bits) & ~(page - 1),
                 pa=rng.randrange(1 << ARCH.addr_bits) & ~(page - 1) & ~(1 << 19) * (i & 1))
        hit = rng.random() < 0.9
        model.entries = [e if hit else None] + [None] * (ARCH.tlb_entries - 1)
        va, write = e["va"] + rng.randrange(page), rng.randrange(2)
        items.append({"req": {"ctx": 0, "va": va, "write": write, "tag": i & 15}, "hit": hit,
                      "perm": e["perm"], "dev": e["dev"], "size": size, "ppn": e["pa"] // P0})
        expect.append(model.translate(0, va, write))
    log = []

    async def consumer(ctx):
        for i, (pa, dev, cause) in enumerate(expect):
            p = await stream_get(ctx, dut.o, rng=rng, bp_prob=0.4)
            assert p.cause.value == cause and int(p.tag) == i & 15
            if cause == TlbModel.NONE:
                assert (int(p.pa), int(p.dev)) == (pa, dev)

    run_simulation(clocked(dut), [producer(dut.i, items, rng), consumer],
                   [stream_monitor(dut.o, log=log, name="check.o")])
    assert len(log) == N
    assert {c for _, _, c in expect} == set(range(6))


@pytest.mark.parametrize("seed", range(2))
def test_command_unit(seed):
    """Placement as the model, under random idle cycles; a REMAP waits while
    ``fields_free`` is low (holding ``fields_write``), INVAL and COMMIT do not."""
    arch = ArchParams(devices=2, mem_bytes=1 << 16, page_sizes=(1024, 4096, 16384, 65536),
                      tlb_entries=6, contexts=2, addr_bits=20)
    rng = random.Random(30 + seed)
    cmds = random_commands(rng, arch, 80, vas=4)
    dut = CommandUnit(arch)
    model = TlbModel(arch)
    stats = {"waited": 0}

    def view(ctx):
        out = []
        for e in dut.entries:
            if not ctx.get(e.valid):
                out.append(None)
            else:
                out.append(tuple(ctx.get(getattr(e, f)) for f in
                                 ("staged", "ctx", "size", "perm", "dev", "vpn", "ppn")))
        return out

    async def tb(ctx):
        for c in cmds:
            await stream_put(ctx, dut.cmd, mmu_command(**c), rng=rng, idle_prob=0.3)
            assert not ctx.get(dut.idle)
            before = view(ctx)
            while not ctx.get(dut.idle):
                free = rng.random() < 0.5
                ctx.set(dut.fields_free, (1 << len(dut.fields_free)) - 1 if free else 0)
                write = ctx.get(dut.fields_write)
                assert not write or c["op"] == "REMAP", "only a REMAP waits for the fields"
                await ctx.tick()
                if write and not free:
                    stats["waited"] += 1
                    assert view(ctx) == before, "a REMAP wrote while fields_free was low"
            model.apply(c)
            assert view(ctx) == model.rtl_view()
            assert ctx.get(dut.victim) == model.victim

    run_simulation(dut, [tb])
    assert stats["waited"] > 0


@pytest.mark.parametrize("bp_prob", [0.0, 0.3])
def test_remap_eviction_under_traffic(bp_prob):
    """REMAPs evict and refill entries while translations stream every cycle:
    every response equals the translation of one TLB state in the command
    sequence, never a mix (the hit vector of one state with another state's
    fields), the states seen never go backwards, and a REMAP costs at most two
    bubbles (without back-pressure). Without the interlock (``hold`` tied low,
    or ``fields_free`` tied high under back-pressure) this fails."""
    mmu = MMU(ARCH)
    rng = random.Random(5)
    n_pages = ARCH.tlb_entries + 4
    cmds = [dict(op="REMAP", ctx=0, size=0, perm=rng.choice([1, 3]), dev=rng.randrange(2),
                 va=(i % n_pages) * P0, pa=rng.randrange(64) * P0) for i in range(40)]
    states = [TlbModel(ARCH)]
    for c in cmds:
        states.append(copy.deepcopy(states[-1]))
        states[-1].apply(c)

    async def tb(ctx):
        ctx.set(mmu.rsp.ready, 1)
        ctx.set(mmu.req.valid, 1)
        todo, offer = list(cmds), None
        sent, seen, cycle, accepted, settled = [], [], 0, 0, None
        while settled is None or cycle < settled + 12:
            va = rng.randrange(n_pages) * P0 + rng.randrange(P0)
            ctx.set(mmu.req.payload, {"ctx": 0, "va": va, "write": rng.randrange(2),
                                      "tag": 0})
            ready = rng.random() >= bp_prob
            ctx.set(mmu.rsp.ready, ready)
            if offer is None and todo and rng.random() < 0.5:
                offer = todo.pop(0)
                ctx.set(mmu.cmd.payload, mmu_command(**offer))
            ctx.set(mmu.cmd.valid, offer is not None)
            _, _, crdy, rrdy, p, v, rs = await ctx.tick().sample(
                mmu.cmd.ready, mmu.req.ready, mmu.req.payload, mmu.rsp.valid, mmu.rsp.payload)
            if offer is not None and crdy:
                offer = None
            if rrdy:
                accepted += 1
                sent.append((int(p.va), int(p.write)))
            if v and ready:
                cause = rs.cause.value
                seen.append((int(rs.pa), int(rs.dev), cause) if cause == TlbModel.NONE
                            else (None, None, cause))
            cycle += 1
            if settled is None and not todo and offer is None and ctx.get(mmu.idle):
                settled, n_settled = cycle, len(sent)    # later requests see the last state
        ctx.set(mmu.req.valid, 0)
        ctx.set(mmu.cmd.valid, 0)
        last = 0
        for (va, w), (pa, dev, cause) in zip(sent, seen):
            ok = [g for g in range(last, len(states))
                  if _result(states[g].translate(0, va, w)) == (pa, dev, cause)]
            assert ok, f"va {va:#x}: ({pa:#x}, {dev}, {cause}) matches no TLB state from {last}"
            last = ok[0]
        assert all(_result(states[-1].translate(0, va, w)) == r
                   for (va, w), r in zip(sent[n_settled:], seen[n_settled:]))
        if not bp_prob:
            assert cycle - accepted <= 2 * len(cmds)   # at most two bubbles per REMAP

    run_simulation(mmu, [tb])


def _result(t):
    pa, dev, cause = t
    return (pa, dev, cause) if cause == TlbModel.NONE else (None, None, cause)
