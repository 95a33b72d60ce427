# amaranth: UnusedElaboratable=no
"""DMA engine: byte-exact copies against a plain-Python model of docs/isa.md
(and model.golden), Forencich-style length/offset sweeps on every bus width,
2-D strides, faults mid-transfer on either side, channels interleaved,
hypothesis-randomised descriptors with idle/back-pressure on every stream."""
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hw.isa import ArchParams, ISA_VERSION, Op, encode
from hw.dma import DMA
from hw.mmu import TranslateCause
from gen.simkit import (DmaHarness, MemoryModel, TlbModel, mmu_command, run_simulation,
                       stream_get, stream_put)

ARCH = ArchParams(devices=2, mem_bytes=1 << 16, page_sizes=(1024, 4096, 16384, 65536),
                  tlb_entries=32, contexts=4, channels=4, addr_bits=20)

SRC_VA, DST_VA, RDST_VA = 0x00000, 0x10000, 0x20000
REGION = 0x4000


def standard_map(ctx=0):
    """Source: 4 KiB pages, read-only; local destination: 1 KiB pages, write-only;
    remote destination (device 1): 4 KiB pages. Physical pages are scrambled."""
    cmds = []
    for k, p in enumerate([3, 0, 2, 1]):
        cmds.append(dict(op="REMAP", ctx=ctx, size=1, perm=1, dev=0, va=SRC_VA + k * 4096,
                         pa=p * 4096))
    perm = [5, 12, 0, 9, 3, 15, 6, 1, 10, 13, 2, 7, 14, 4, 11, 8]
    for k, p in enumerate(perm):
        cmds.append(dict(op="REMAP", ctx=ctx, size=0, perm=2, dev=0, va=DST_VA + k * 1024,
                         pa=0x4000 + p * 1024))
    for k, p in enumerate([2, 0, 3, 1]):
        cmds.append(dict(op="REMAP", ctx=ctx, size=1, perm=2, dev=1, va=RDST_VA + k * 4096,
                         pa=p * 4096))
    return cmds


# ----------------------------------------------------------- reference model
def reference(arch, tlb, mems, descs, local_dev=0):
    """Byte-by-byte COPY semantics of docs/isa.md. ``descs``: {chan: [desc]}.
    Returns (faults sorted, {chan: (done_count, last_tag, error)})."""
    amask = (1 << arch.addr_bits) - 1
    faults = []
    status = {}
    for ch, lst in descs.items():
        done, tag, err = 0, 0, None
        for d in lst:
            if err is not None:
                break
            for i in range(d["rows"]):
                for j in range(d["row_bytes"]):
                    sv = (d["src"] + i * d["src_stride"] + j) & amask
                    tv = (d["dst"] + i * d["dst_stride"] + j) & amask
                    spa, sdev, c = tlb.translate(d["ctx"], sv, False)
                    if c:
                        err = (ch, d["ctx"], sv, c)
                        break
                    tpa, tdev, c = tlb.translate(d["ctx"], tv, True)
                    if c:
                        err = (ch, d["ctx"], tv, c)
                        break
                    mems[tdev][tpa] = mems[local_dev][spa]
                if err is not None:
                    break
            if err is None:
                done, tag = done + 1, d["tag"]
            else:
                faults.append(err)
        status[ch] = (done, tag, err)
    return sorted(faults), status


# ------------------------------------------------------------------- driver
def run_dma(descs, *, width=32, channels=4, seed=0, stall=0.2, idle=0.2, tlb_cmds=None,
            arch=ARCH, memory=False, burst_len=16, outstanding=8, mems=None, fault_bp=0.3,
            gate=0.0, max_cycles=60_000, golden=False):
    """Run ``descs`` ({chan: [desc]}) on a DMA+MMU and compare with the reference."""
    rng = random.Random(seed)
    tlb_cmds = standard_map() if tlb_cmds is None else tlb_cmds
    if mems is None:
        mems = [bytearray(random.Random(seed * 7 + d).randbytes(arch.mem_bytes))
                for d in range(arch.devices)]
    init = [bytes(m) for m in mems]
    h = DmaHarness(arch, memory=memory, init=init[0], data_width=width, channels=channels,
                   burst_len=burst_len, outstanding=outstanding)
    dma = h.dma
    model = MemoryModel(dma, mems, rng=random.Random(seed + 1), stall=stall) if not memory else None
    tlb = TlbModel(arch, 0)
    state = {"mapped": False, "fed": False, "cycles": 0, "faults": [], "status": None}

    async def main(ctx):
        for c in tlb_cmds:
            await stream_put(ctx, h.mmu.cmd, mmu_command(**c))
            tlb.apply(c)
        await ctx.tick().until(h.mmu.idle)
        state["mapped"] = True
        start = 0
        while True:
            await ctx.tick()
            start += 1
            assert start < max_cycles, "timeout"
            if state["fed"] and not any(
                    ctx.get(dma.status[c].busy) for c in range(channels)):
                break
        state["cycles"] = start
        state["status"] = {c: (ctx.get(dma.status[c].done_count), ctx.get(dma.status[c].done_tag),
                               ctx.get(dma.status[c].error), ctx.get(dma.status[c].cause),
                               ctx.get(dma.status[c].va))
                           for c in range(channels)}
        if memory:
            for a in range(0, arch.mem_bytes, 4096):
                mems[0][a:a + 4096] = h.mem.sim_read(ctx, a, 4096)

    async def feeder(ctx):
        # one descriptor stream: channels interleaved at random, each in order
        while not state["mapped"]:
            await ctx.tick()
        queues = {ch: list(lst) for ch, lst in descs.items() if lst}
        while queues:
            ch = rng.choice(sorted(queues))
            await stream_put(ctx, dma.desc, dict(queues[ch].pop(0), chan=ch), rng=rng,
                             idle_prob=idle)
            if not queues[ch]:
                del queues[ch]
        state["fed"] = True

    async def faults(ctx):
        while True:
            r = await stream_get(ctx, dma.fault, rng=rng, bp_prob=fault_bp)
            state["faults"].append((int(r.chan), int(r.ctx), int(r.va), r.cause.value))

    async def gates(ctx):
        while True:
            ctx.set(h.gate_req, rng.random() >= gate)
            ctx.set(h.gate_rsp, rng.random() >= gate)
            await ctx.tick()

    async def remote(ctx):
        # remote writes (real-memory harness): random back-pressure, delayed acks
        pend = []
        B = width // 8
        while True:
            ctx.set(h.remote.ready, rng.random() >= stall)
            if pend and pend[0][0] <= 0:
                ctx.set(h.remote_ack.valid, 1)
                ctx.set(h.remote_ack.payload, pend[0][1])
            else:
                ctx.set(h.remote_ack.valid, 0)
            _, _, v, r, p, av, ar = await ctx.tick().sample(
                h.remote.valid, h.remote.ready, h.remote.payload, h.remote_ack.valid,
                h.remote_ack.ready)
            if av and ar:
                pend.pop(0)
            pend = [(t - 1, c) for t, c in pend]
            if v and r:
                dat = int(p.data).to_bytes(B, "little")
                for lane in range(B):
                    if int(p.be) >> lane & 1:
                        mems[int(p.dev)][int(p.addr) * B + lane] = dat[lane]
                pend.append((rng.randrange(4), int(p.chan)))

    bgs = [faults]
    if model is not None:
        bgs.append(model.run)
    else:
        bgs.append(remote)
    if gate:
        bgs.append(gates)
    run_simulation(h, [main, feeder], bgs)

    exp = [bytearray(m) for m in init]
    exp_faults, exp_status = reference(arch, tlb, exp, descs)
    for d in range(arch.devices):
        if exp[d] != mems[d]:
            bad = [i for i in range(arch.mem_bytes) if exp[d][i] != mems[d][i]]
            raise AssertionError(f"device {d}: {len(bad)} bytes differ, first at pa "
                                 f"0x{bad[0]:x}: got {mems[d][bad[0]]:#x} want {exp[d][bad[0]]:#x}")
    assert sorted(state["faults"]) == exp_faults
    for ch, (done, tag, err) in exp_status.items():
        got = state["status"][ch]
        assert got[0] == done & 0xFFFF, (ch, got, done)
        if done:
            assert got[1] == tag
        assert got[2] == (err is not None)
        if err is not None:
            assert (got[3].value, got[4]) == (err[3], err[2])
    if golden:
        compare_golden(arch, tlb_cmds, descs, init, mems)
    return state


def compare_golden(arch, tlb_cmds, descs, init, mems):
    """Run the same MMU commands and COPYs through model.golden (channel by
    channel, as the regions are disjoint) and compare the final memories."""
    from model.golden import run_golden
    prog = [encode(Op.VERSION, version=ISA_VERSION)]
    for c in tlb_cmds:
        f = {k: v for k, v in mmu_command(**c).items() if k != "op"}
        prog.append(encode(Op.REMAP, **f))
    for ch, lst in descs.items():
        for d in lst:
            prog.append(encode(Op.COPY, chan=ch, **d))
    prog.append(encode(Op.FENCE, mask=0))
    prog.append(encode(Op.HALT))
    idle = [encode(Op.VERSION, version=ISA_VERSION), encode(Op.HALT)]
    res = run_golden(arch, [prog] + [idle] * (arch.devices - 1), init)
    for d in range(arch.devices):
        assert bytes(res.memories[d]) == bytes(mems[d]), f"golden differs on device {d}"


class Alloc:
    """Hands out destination addresses with guard bytes between regions."""

    def __init__(self, base, size, B, guard=5):
        self.base, self.end, self.B, self.guard = base, base + size, B, guard
        self.next = base

    def take(self, nbytes, off):
        a = -(-self.next // self.B) * self.B + off
        if a + nbytes > self.end:
            return None
        self.next = a + nbytes + self.guard
        return a


def desc(src, dst, row_bytes, rows=1, src_stride=0, dst_stride=0, tag=0, ctx=0):
    return dict(ctx=ctx, tag=tag, src=src, dst=dst, row_bytes=row_bytes, rows=rows,
                src_stride=src_stride, dst_stride=dst_stride)


def sweep(width, lengths, offsets, seed, remote_every=3):
    """1-D copies for every (length, src offset, dst offset), spread over 4 channels."""
    B = width // 8
    rng = random.Random(seed)
    loc = Alloc(DST_VA, REGION, B)
    rem = Alloc(RDST_VA, REGION, B)
    descs = {c: [] for c in range(4)}
    n = 0
    for length in lengths:
        for so in offsets:
            for do in offsets:
                al = rem if n % remote_every == 2 else loc
                dst = al.take(length, do)
                if dst is None:
                    continue
                src = rng.randrange(0, REGION - length - B) // B * B + so
                descs[n % 4].append(desc(src, dst, length, tag=n & 0xFFFF))
                n += 1
    return descs


# -------------------------------------------------------------------- tests
def test_constructor_errors():
    with pytest.raises(TypeError, match=r"arch must be an ArchParams, not None"):
        DMA(None)
    with pytest.raises(ValueError, match=r"Bus width must be one of 32, 64, 128, 256, not 48"):
        DMA(ARCH, data_width=48)
    with pytest.raises(ValueError, match=r"Channel count must be an integer in 1\.\.16, not 17"):
        DMA(ARCH, channels=17)
    with pytest.raises(ValueError, match=r"Outstanding read count must be an integer in 2\.\.256, not 1"):
        DMA(ARCH, outstanding=1)
    with pytest.raises(ValueError, match=r"Burst length must be a power of two in 1\.\.256, not 12"):
        DMA(ARCH, burst_len=12)
    with pytest.raises(ValueError, match=r"Burst of 64 beats of 256 bits exceeds the smallest page \(1024 bytes\)"):
        DMA(ARCH, data_width=256, burst_len=64)
    with pytest.raises(ValueError, match=r"Ack limit must be an integer in 1\.\.65535, not 0"):
        DMA(ARCH, ack_limit=0)
    with pytest.raises(TypeError, match=r"Ring scratch must be a bool, not 1"):
        DMA(ARCH, ring_scratch=1)


def test_properties():
    d = DMA(ARCH, data_width=64, channels=5, outstanding=6, burst_len=8)
    assert (d.data_width, d.channels, d.outstanding, d.burst_len) == (64, 5, 6, 8)
    assert d.mem_addr_width == 13
    assert d.ring_scratch and not DMA(ARCH, ring_scratch=False).ring_scratch
    with pytest.raises(AttributeError):
        d.channels = 3


@pytest.mark.parametrize("width", [32, 64, 128, 256])
def test_sweep_lengths_offsets(width):
    """Lengths 1..4 bus words (a representative subset above 32 bits), offsets 0..B."""
    B = width // 8
    if B == 4:
        lengths = range(1, 4 * B + 1)
        offsets = range(0, B + 1)
    else:
        lengths = sorted({1, 2, 3, B - 1, B, B + 1, 2 * B - 1, 2 * B + 3, 3 * B, 4 * B - 1, 4 * B})
        offsets = sorted({0, 1, B // 2 + 1, B - 1, B})
    run_dma(sweep(width, lengths, offsets, seed=width), width=width, seed=width)


@pytest.mark.slow
@pytest.mark.parametrize("width", [64, 128])
def test_sweep_full(width):
    B = width // 8
    run_dma(sweep(width, range(1, 4 * B + 1), range(0, B + 1, max(1, B // 8)), seed=1),
            width=width, seed=3, stall=0.1, idle=0.05)


@pytest.mark.parametrize("width", [32, 256])
def test_long_and_page_crossing(width):
    """Long copies crossing 1 KiB / 4 KiB page boundaries on both sides, with
    offsets just below a page edge."""
    B = width // 8
    descs = {0: [desc(0x0ffd, DST_VA + 0x3f9, 3000, tag=1)],
             1: [desc(0x1fff - 7, DST_VA + 0x1400 - 3, 700, tag=2),
                 desc(0x2c00 + 1, DST_VA + 0x1800, 2 * 1024 + 5, tag=3)],
             2: [desc(0x0400 - 1, RDST_VA + 0x0fff, 5000, tag=4)],
             3: [desc(0x3000 + B, DST_VA + 0x2c00 + B // 2, 4 * 1024 - B, tag=5)]}
    run_dma(descs, width=width, seed=5, golden=True)


@pytest.mark.parametrize("width", [32, 128])
def test_2d_strides(width):
    descs = {
        0: [desc(0x0010, DST_VA + 0x0003, 37, rows=9, src_stride=301, dst_stride=41, tag=10),
            desc(0x0800, DST_VA + 0x0400, 16, rows=20, src_stride=16, dst_stride=16, tag=11)],
        1: [desc(0x2000 - 5, DST_VA + 0x0bf0, 64, rows=12, src_stride=1000, dst_stride=100, tag=12)],
        2: [desc(0x0100, RDST_VA + 0x2001, 33, rows=15, src_stride=700, dst_stride=1023, tag=13),
            desc(0x0000, DST_VA + 0x2000, 0, rows=5, tag=14),        # zero-length: completes
            desc(0x0000, DST_VA + 0x2000, 8, rows=0, tag=15)],
        3: [desc(0x3f00, DST_VA + 0x3000, 1, rows=200, src_stride=1, dst_stride=3, tag=16)],
    }
    run_dma(descs, width=width, seed=11, golden=True)


@pytest.mark.parametrize("width", [32, 64])
def test_unaligned_continued_chunks(width):
    """Long copies whose source byte offset is above the destination's: every
    chunk after a row's first reuses the word the previous chunk read last
    (the reader skips it), with channels interleaved, rows that continue each
    other (stride = row) and rows that do not, under stalls."""
    B = width // 8
    descs = {c: [] for c in range(4)}
    n = 0
    for s in range(1, B):
        for d in range(0, s):
            c = n % 4
            src = 0x200 * n + s
            dst = DST_VA + 0x300 * n + d
            if n % 3 == 2:
                descs[c].append(desc(src, dst, 40 + 7 * n, rows=3, src_stride=40 + 7 * n,
                                     dst_stride=40 + 7 * n + B, tag=n))
            else:
                descs[c].append(desc(src, dst, 150 + 13 * n, tag=n))
            n += 1
            if n == 12:
                break
        if n == 12:
            break
    run_dma(descs, width=width, seed=21 + width, stall=0.2, idle=0.1)


def test_2d_wrapping_stride():
    """A stride of 2**20 - 16 (addr_bits=20) walks backwards by wrapping."""
    descs = {0: [desc(0x3000, DST_VA + 0x1000, 12, rows=40, src_stride=(1 << 20) - 16,
                      dst_stride=(1 << 20) - 20, tag=3)]}
    run_dma(descs, width=64, seed=2)


def fault_map():
    """standard_map with holes: src va 0x2000 page removed, local dst 0x11800 page
    made read-only, a remote-read source page, an out-of-range page."""
    cmds = [c for c in standard_map() if c["va"] not in (0x2000,)]
    cmds.append(dict(op="REMAP", ctx=0, size=0, perm=1, dev=0, va=DST_VA + 0x1800, pa=0x4000))
    cmds.append(dict(op="REMAP", ctx=0, size=0, perm=3, dev=1, va=0x30000, pa=0))
    cmds.append(dict(op="REMAP", ctx=0, size=3, perm=3, dev=0, va=0x40000, pa=0xF0000))
    return cmds


@pytest.mark.parametrize("width", [32, 64])
def test_faults_mid_transfer(width):
    descs = {
        # src runs into the unmapped page 0x2000: bytes before it land, none after
        0: [desc(0x1f00 + 3, DST_VA + 0x0000, 600, tag=1),
            desc(0x0000, DST_VA + 0x0400, 64, tag=2)],          # discarded
        # dst runs into the read-only page 0x11800 (NO_WRITE) in the 3rd row
        1: [desc(0x0100, DST_VA + 0x1000, 64, tag=3),
            desc(0x0200, DST_VA + 0x1700 + 1, 100, rows=4, src_stride=100, dst_stride=128, tag=4),
            desc(0x0300, DST_VA + 0x0c00, 16, tag=5)],          # discarded
        # remote read source
        2: [desc(0x30000 + 5, DST_VA + 0x2000, 10, tag=6)],
        # out of range destination, after a good copy; and src + dst both bad: src wins
        3: [desc(0x0500, DST_VA + 0x2400, 50, tag=7),
            desc(0x0600, 0x40000 + 0x100, 50, tag=8)],
    }
    st_ = run_dma(descs, width=width, seed=4, tlb_cmds=fault_map(), golden=False)
    assert len(st_["faults"]) == 4
    descs2 = {0: [desc(0x2000 + 1, 0x40000, 8, tag=9)]}
    st2 = run_dma(descs2, width=width, seed=5, tlb_cmds=fault_map())
    assert st2["faults"] == [(0, 0, 0x2001, int(TranslateCause.NOT_MAPPED.value))]


@pytest.mark.parametrize("first", [
    desc(0x1ff0, DST_VA, 100, tag=1),
    # faults in its 2nd row, while the walker still holds it: the slots are
    # emptied under it (once left the channel stuck after the clear)
    desc(0x1f00, DST_VA, 64, rows=64, src_stride=64, dst_stride=64, tag=1),
], ids=["one-row", "mid-walk"])
def test_fault_then_clear_and_reuse(first):
    """After a fault the channel discards descriptors until cleared; then works again."""
    rng = random.Random(3)
    arch = ARCH
    mems = [bytearray(rng.randbytes(arch.mem_bytes)) for _ in range(2)]
    init = [bytes(m) for m in mems]
    h = DmaHarness(arch, data_width=32, channels=4)
    dma = h.dma
    model = MemoryModel(dma, mems, rng=random.Random(1), stall=0.2)
    cmds = fault_map()
    tlb = TlbModel(arch)

    async def wait_idle(ctx, ch):
        for _ in range(5000):
            await ctx.tick()
            if not ctx.get(dma.status[ch].busy):
                return
        raise AssertionError("timeout")

    async def main(ctx):
        for c in cmds:
            await stream_put(ctx, h.mmu.cmd, mmu_command(**c))
            tlb.apply(c)
        ctx.set(dma.fault.ready, 1)
        await stream_put(ctx, dma.desc, dict(first, chan=1))
        await wait_idle(ctx, 1)
        assert ctx.get(dma.status[1].error)
        assert ctx.get(dma.status[1].va) == 0x2000
        # discarded while in error
        await stream_put(ctx, dma.desc, dict(desc(0x0000, DST_VA + 0x400, 100, tag=2), chan=1))
        await wait_idle(ctx, 1)
        assert ctx.get(dma.status[1].done_count) == 0
        ctx.set(dma.clear, 0b0010)
        await ctx.tick()
        ctx.set(dma.clear, 0)
        assert not ctx.get(dma.status[1].error)
        await stream_put(ctx, dma.desc, dict(desc(0x0000, DST_VA + 0x800, 100, tag=3), chan=1))
        await wait_idle(ctx, 1)
        assert ctx.get(dma.status[1].done_count) == 1
        assert ctx.get(dma.status[1].done_tag) == 3
        assert not ctx.get(dma.status[1].error)

    run_simulation(h, [main], [model.run])
    exp = [bytearray(m) for m in init]
    reference(arch, tlb, exp, {1: [first]})
    reference(arch, tlb, exp, {1: [desc(0x0000, DST_VA + 0x800, 100, tag=3)]})
    assert exp == mems


def test_real_memory_and_gated_mmu():
    """DMA + MMU + BankedMemory; the MMU streams are randomly stalled."""
    descs = {0: [desc(0x0003, DST_VA + 0x0101, 999, tag=1)],
             1: [desc(0x1003, DST_VA + 0x1001, 64, rows=7, src_stride=80, dst_stride=70, tag=2)],
             2: [desc(0x2000, RDST_VA + 0x10, 256, tag=3)],
             3: [desc(0x3001, DST_VA + 0x2000, 5, rows=30, src_stride=9, dst_stride=7, tag=4)]}
    run_dma(descs, width=64, seed=9, memory=True, gate=0.3, golden=True)


def test_many_back_to_back_descriptors():
    descs = {c: [desc(0x100 * c + 8 * i, DST_VA + 0x1000 * c + 24 * i, 16, tag=i)
                 for i in range(40)] for c in range(4)}
    run_dma(descs, width=32, seed=12, stall=0.0, idle=0.0)


def test_single_channel_config():
    descs = {0: [desc(0x0011, DST_VA + 0x0005, 300, rows=3, src_stride=400, dst_stride=350, tag=1)]}
    run_dma(descs, width=32, channels=1, seed=13)


@st.composite
def random_job(draw):
    width = draw(st.sampled_from([32, 64, 128, 256]))
    B = width // 8
    nch = draw(st.integers(1, 4))
    loc = Alloc(DST_VA, REGION, B, guard=draw(st.integers(1, 9)))
    rem = Alloc(RDST_VA, REGION, B, guard=3)
    descs = {}
    for ch in range(nch):
        lst = []
        for k in range(draw(st.integers(1, 3))):
            rows = draw(st.integers(0, 5))
            rb = draw(st.integers(0, 5 * B))
            ds = rb + draw(st.integers(0, 2 * B))
            ss = draw(st.integers(0, 3 * B))
            span = ds * max(rows - 1, 0) + rb
            al = rem if draw(st.booleans()) else loc
            dst = al.take(max(span, 1), draw(st.integers(0, B - 1)))
            if dst is None:
                continue
            src = draw(st.integers(0, REGION - ss * 5 - rb - 1))
            lst.append(desc(src, dst, rb, rows, ss, ds, tag=draw(st.integers(0, 0xFFFF))))
        descs[ch] = lst
    return width, descs, draw(st.integers(0, 1 << 16))


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(random_job())
def test_random_descriptors(job):
    width, descs, seed = job
    run_dma(descs, width=width, seed=seed, stall=0.3, idle=0.3, gate=0.2)
