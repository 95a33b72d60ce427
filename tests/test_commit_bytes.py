# amaranth: UnusedElaboratable=no
"""CommitBytes (hw/device.py): the local staged bytes of a COMMIT's context,
summed from the TLB as the MMU places it, against a sum computed here."""
from __future__ import annotations

import random

from gen.simkit import run_simulation
from hw.device import CommitBytes
from hw.isa import ArchParams

ARCH = ArchParams(devices=3, mem_bytes=1 << 16, page_sizes=(256, 1024, 4096, 16384),
                  tlb_entries=6, contexts=4, channels=2, addr_bits=20)


def test_commit_bytes_sums_the_local_staged_pages_of_the_context():
    rng = random.Random(11)
    dut = CommitBytes(ARCH, local_dev=1)
    seen = []

    async def tb(ctx):
        for _ in range(30):
            entries = [{"valid": rng.randrange(2), "staged": rng.randrange(2),
                        "ctx": rng.randrange(4), "dev": rng.randrange(3), "size": rng.randrange(4)}
                       for _ in range(ARCH.tlb_entries)]
            c = rng.randrange(4)
            want = sum(ARCH.page_sizes[e["size"]] for e in entries
                       if e["valid"] and e["staged"] and e["ctx"] == c and e["dev"] == 1)
            for k, e in enumerate(entries):
                ctx.set(dut.entries[k], e)
            ctx.set(dut.ctx, c)
            ctx.set(dut.place, 1)
            await ctx.tick()
            ctx.set(dut.place, 0)
            for k in range(ARCH.tlb_entries):          # the TLB changes after the PLACE edge
                ctx.set(dut.entries[k], {"valid": 1, "staged": 1, "ctx": c, "dev": 1, "size": 3})
            busy = [ctx.get(dut.busy)]
            await ctx.tick()
            busy.append(ctx.get(dut.busy))
            seen.append((ctx.get(dut.total), want, busy))
            for _ in range(rng.randrange(3)):
                await ctx.tick()
                assert ctx.get(dut.total) == want           # held until the next COMMIT

    run_simulation(dut, [tb])
    assert all(got == want and busy == [1, 0] for got, want, busy in seen), seen
    assert any(want for _, want, _ in seen) and not all(want for _, want, _ in seen)
