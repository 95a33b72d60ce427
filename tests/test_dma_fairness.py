# amaranth: UnusedElaboratable=no
"""DMA fairness: channels given equal long descriptors and no stalls share
the engine round-robin, so their beats interleave chunk by chunk and they
finish about one burst apart. The same check fails when the arbiter is made
fixed-priority (channel 0 first), which is what it is for."""

import hw.dma.frontend
from hw.isa import ArchParams
from gen.simkit import DmaHarness, MemoryModel, mmu_command, run_simulation, stream_put, FixedPriority

ARCH = ArchParams(devices=2, mem_bytes=1 << 16, page_sizes=(1024, 4096, 16384, 65536),
                  tlb_entries=32, contexts=4, channels=4, addr_bits=20)
BURST = 16
BEATS = 192           # per channel: 12 bursts


def run_equal_channels(channels=4, width=32):
    """Each channel copies ``BEATS`` aligned words; returns the channel of
    every write beat in order and each channel's last-beat cycle."""
    B = width // 8
    n = BEATS * B
    mems = [bytearray(ARCH.mem_bytes) for _ in range(ARCH.devices)]
    h = DmaHarness(ARCH, data_width=width, channels=channels, burst_len=BURST)
    dma = h.dma
    model = MemoryModel(dma, mems, latency=(1, 1), ack_delay=(0, 0))
    beats, last = [], {}

    async def main(ctx):
        for k in range(4):
            await stream_put(ctx, h.mmu.cmd, mmu_command("REMAP", size=1, perm=1,
                                                         va=k * 4096, pa=k * 4096))
            await stream_put(ctx, h.mmu.cmd, mmu_command("REMAP", size=1, perm=2,
                                                         va=0x10000 + k * 4096,
                                                         pa=0x8000 + k * 4096))
        await ctx.tick().until(h.mmu.idle)
        for c in range(channels):
            await stream_put(ctx, dma.desc, dict(chan=c, ctx=0, tag=c, src=c * n,
                                                 dst=0x10000 + c * n, row_bytes=n, rows=1,
                                                 src_stride=0, dst_stride=0))
        cycle = 0
        while len(beats) < channels * BEATS:
            _, _, v, r, p = await ctx.tick().sample(dma.wr.valid, dma.wr.ready, dma.wr.payload)
            cycle += 1
            assert cycle < 20 * channels * BEATS, "timeout"
            if v and r:
                beats.append(int(p.chan))
                last[int(p.chan)] = cycle

    run_simulation(h, [main], [model.run])
    return beats, last


def unfairness(beats, last, channels):
    """What is wrong with the sharing, as a list of complaints (empty: fair)."""
    bad = []
    # interleaving: until the first channel is done, every window of one burst
    # per channel holds beats of every channel
    span = channels * BURST
    first_done = min(i for i in range(len(beats)) if beats[:i + 1].count(beats[i]) == BEATS)
    for i in range(0, first_done - span, BURST):
        seen = set(beats[i:i + span])
        if len(seen) != channels:
            bad.append(f"beats {i}..{i + span}: only channels {sorted(seen)}")
            break
    # finishing: one after the other, about one burst apart
    ends = sorted(last.values())
    for a, b in zip(ends, ends[1:]):
        if b - a > BURST + 4:
            bad.append(f"finish times {ends} are more than a burst apart")
            break
    return bad


def test_channels_share_round_robin():
    beats, last = run_equal_channels(channels=4)
    assert sorted(last) == [0, 1, 2, 3]
    assert not unfairness(beats, last, 4)
    # and the whole batch still ran at a beat per cycle
    assert max(last.values()) - min(last.values()) <= 4 * (BURST + 4)


def test_fairness_check_catches_fixed_priority(monkeypatch):
    monkeypatch.setattr(hw.dma.frontend, "RoundRobin", FixedPriority)
    beats, last = run_equal_channels(channels=4)
    assert unfairness(beats, last, 4)
