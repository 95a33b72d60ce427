# amaranth: UnusedElaboratable=no
"""One test per coprocessor stage (hw/coprocessor/): its stream contract under
random idle cycles and back-pressure (an offer that is not taken stays, with
the same payload, until it is), and what it must deliver."""
from __future__ import annotations

import dataclasses
import random

import pytest
from amaranth.hdl import ClockDomain, Module
from amaranth.lib import data

from gen.simkit import run_simulation, stream_get, stream_put, stream_monitor
from hw.coprocessor.common import CauseCode, StatusCode, UnitInsn, dispatch_of, unit_insn_of
from hw.coprocessor.counters import Counters
from hw.coprocessor.decode import CauseSelect, Decoder, PcChecks
from hw.coprocessor.faults import FaultQueue
from hw.coprocessor.feeder import DescriptorFeeder
from hw.coprocessor.fetch import Fetch
from hw.coprocessor.issue import CopyIssue
from hw.coprocessor.mmu_cmd import MmuCommandUnit
from hw.coprocessor.predecode import PredecodedWord, Predecoder, predecode, predecoded_entry
from hw.coprocessor.sequencer import UNIT_OPS, Sequencer
from hw.coprocessor.sync import SyncUnit
from hw.isa import FORMATS, ISA_VERSION, OPCODE_BITS, ArchParams, Cause, Op, Status, encode
from hw.mmu import MmuOp

PG = 256
ARCH = ArchParams(devices=3, mem_bytes=16 * PG, page_sizes=(PG, 4 * PG, 8 * PG, 16 * PG),
                  tlb_entries=8, contexts=4, channels=3, semaphores=4, imem_words=16,
                  addr_bits=20)
V = encode(Op.VERSION, version=ISA_VERSION)


def code(x):
    """An enum-shaped value read back from simulation, as an integer."""
    return x.value if hasattr(x, "value") else int(x)


def clocked(dut):
    """A combinational stage with a ``sync`` domain, so that it can be clocked."""
    m = Module()
    m.domains.sync = ClockDomain()
    m.submodules.dut = dut
    return m


def field(word, op, name):
    f = next(f for f in FORMATS[op] if f.name == name)
    return (word >> f.lsb) & f.mask


def random_copy(rng, arch=ARCH, chan=None):
    return encode(Op.COPY, chan=rng.randrange(arch.channels) if chan is None else chan,
                  ctx=rng.randrange(arch.contexts), tag=rng.randrange(1 << 16),
                  src=rng.randrange(1 << arch.addr_bits), dst=rng.randrange(1 << arch.addr_bits),
                  row_bytes=rng.randrange(1 << 32), rows=rng.randrange(1 << 32),
                  src_stride=rng.randrange(1 << 32), dst_stride=rng.randrange(1 << 32))


# ------------------------------------------------------------------ fetch
def test_fetch_synthesizes_without_collision_flip_flops(tmp_path):
    """From RTLIL, as the board builds read it, the block RAM takes the read
    register (``read_word``), and no flip-flops emulate a read that meets a
    write: what is left is the output register and the predecoder's two
    write stages (908 bits; the read register as flip-flops would add a
    stored entry, 314 bits)."""
    from yosys_stat import ecp5_cells
    cells = ecp5_cells(tmp_path, Fetch(dataclasses.replace(ARCH, imem_words=512), [1, 2, 3]),
                       "fetch", "DP16KD", "TRELLIS_FF", via="rtlil")
    assert PredecodedWord().size == 314
    assert cells["DP16KD"] == 9                      # 314 bits in 36-bit block RAMs
    assert cells["TRELLIS_FF"] < 908 + 64


def test_fetch_streams_the_program_in_order_and_takes_host_writes_only_when_stopped():
    rng = random.Random(1)
    prog = [rng.getrandbits(256) for _ in range(10)]
    dut = Fetch(ARCH, prog)
    seen = []

    async def tb(ctx):
        await stream_put(ctx, dut.imem_w, {"addr": 12, "data": 0x1234})     # stopped: taken
        ctx.set(dut.rewind, 1)
        await ctx.tick()
        assert not ctx.get(dut.imem_w.ready)
        ctx.set(dut.rewind, 0)
        ctx.set(dut.run, 1)
        for _ in range(17):                  # 16 words, then the PC_OVERFLOW word
            await stream_get(ctx, dut.insn, rng=rng, bp_prob=0.5)
        assert not ctx.get(dut.imem_w.ready)
        for _ in range(4):                   # nothing past the overflow word
            await ctx.tick()
            assert not ctx.get(dut.insn.valid)
        ctx.set(dut.rewind, 1)               # rewind: from word 0 again
        await ctx.tick()
        ctx.set(dut.rewind, 0)
        await stream_get(ctx, dut.insn)

    run_simulation(dut, [tb], [stream_monitor(dut.insn, log=seen, name="insn")])
    words = prog + [0, 0, 0x1234, 0, 0, 0]
    got = [(v & 0x1f, (v >> 5) & ((1 << 256) - 1)) for v in seen]
    assert got[:16] == [(i, w) for i, w in enumerate(words)]
    assert got[16][0] == 16 and got[17] == (0, prog[0]) and len(got) == 18
    # each word with its checks: the initial image's made at elaboration, the
    # host's word (at 12) by the predecoder on its way in
    assert [v >> 5 for v in seen[:16]] == [predecoded_entry(ARCH, w) for w in words]


def test_fetch_reads_ahead_one_word_a_cycle():
    prog = list(range(1, 9))
    dut = Fetch(dataclasses.replace(ARCH, imem_words=8), prog)
    arrivals = []

    async def tb(ctx):
        ctx.set(dut.run, 1)
        ctx.set(dut.insn.ready, 1)
        for cycle in range(12):
            if ctx.get(dut.insn.valid):
                arrivals.append((cycle, ctx.get(dut.insn.p.word.bits) & 0xff))
            await ctx.tick()

    run_simulation(dut, [tb])
    # two cycles to the first word, then one word a cycle
    assert arrivals[:8] == [(2 + k, k + 1) for k in range(8)]


# ------------------------------------------------------------------ decode
def _edge_words(rng, per_op=12):
    """Words of every opcode, each field 0, 1, all ones or random, some with a
    reserved bit set; and a few words of no opcode."""
    words = []
    for op in FORMATS:
        for _ in range(per_op):
            fields = {f.name: rng.choice([0, 1, rng.getrandbits(f.width), f.mask])
                      for f in FORMATS[op]}
            w = encode(op, **fields)
            if rng.random() < 0.2:
                w |= 1 << rng.randrange(8, 256)
            words.append(w)
    return words + [0, 0x0c, 0xff, (1 << 256) - 1]


@pytest.mark.parametrize("addr_bits", [20, 48])
def test_predecoder_agrees_with_the_initial_images_predecode(addr_bits):
    """A host write's checks (the predecoder, two stages, a write a cycle)
    are the initial image's (``predecode``), word for word and in order."""
    rng = random.Random(addr_bits)
    arch = dataclasses.replace(ARCH, addr_bits=addr_bits)
    words = _edge_words(rng)
    dut = Predecoder(arch)
    got = []

    async def tb(ctx):
        for k, w in enumerate(words + [None] * 4):
            if w is not None:
                await stream_put(ctx, dut.i, {"addr": k % arch.imem_words, "data": w},
                                 rng=rng, idle_prob=0.3)
            else:
                await ctx.tick()
        assert not ctx.get(dut.busy)

    async def out(ctx):
        async for clk, _, valid, addr, entry in ctx.tick().sample(dut.o.valid, dut.o.p.addr,
                                                                  dut.o.p.data.as_value()):
            if valid:
                got.append((addr, entry))

    run_simulation(clocked(dut), [tb], [out])
    assert got == [(k % arch.imem_words, predecoded_entry(arch, w)) for k, w in enumerate(words)]
    own = [predecode(arch, w)["fails"][Op(w & 0xff).name.lower()] for w in words
           if w & 0xff in {int(op) for op in FORMATS}]
    assert any(own) and not all(own)               # legal and illegal words both checked


def test_decoder_causes_match_the_golden_model():
    from model.golden import GoldenSystem
    rng = random.Random(2)
    arch = ArchParams(devices=3, mem_bytes=16 * PG, page_sizes=ARCH.page_sizes, tlb_entries=8,
                      contexts=4, channels=3, semaphores=4, imem_words=16, addr_bits=20)
    words = _edge_words(rng, per_op=6)
    # word 0 first: the decoder takes the program's version from it
    cases = [(0, V)] + [(1, w) for w in words] + [(0, encode(Op.HALT)), (0, V), (16, V)]
    expect = []
    for pc, w in cases:
        if pc == 16:
            expect.append(int(Cause.PC_OVERFLOW))
            continue
        prog = [w, encode(Op.HALT)] if pc == 0 else [V, w, encode(Op.HALT)]
        r = GoldenSystem(arch, [prog, [V, encode(Op.HALT)], [V, encode(Op.HALT)]],
                         [bytes(arch.mem_bytes)] * 3).run()
        illegal = r.status[0] is Status.ILLEGAL and r.cause[0] is not Cause.COMMIT_UNFENCED
        expect.append(int(r.cause[0]) if illegal and r.pc[0] == pc else 0)
    dut = Decoder(arch)
    got = []

    async def producer(ctx):
        for pc, w in cases:
            await stream_put(ctx, dut.i, {"pc": pc, "word": {"bits": w}, "pre": predecode(arch, w)},
                             rng=rng, idle_prob=0.3)

    async def consumer(ctx):
        for _ in cases:
            p = await stream_get(ctx, dut.o, rng=rng, bp_prob=0.4)
            got.append(int(p.cause.value) if hasattr(p.cause, "value") else int(p.cause))
            units.append({name: int(getattr(p.unit, name)) for name in dispatch_of(0)})
            flags.append(({f: int(getattr(p.op, f)) for f in unit_insn_of(0)["op"]},
                          int(p.fence_all)))

    log, units, flags = [], [], []
    run_simulation(clocked(dut), [producer, consumer], [stream_monitor(dut.o, log=log, name="o")])
    assert got == expect
    # the pre-decoded dispatch: the unit of a legal instruction's opcode, none for an illegal one
    assert units == [dispatch_of(w & ((1 << OPCODE_BITS) - 1), c) for (_, w), c in zip(cases, expect)]
    # the units' flags: the opcode's flag (legal or not) and a FENCE mask of 0
    assert flags == [(unit_insn_of(w)["op"], unit_insn_of(w)["fence_all"]) for _, w in cases]
    assert any(expect) and not all(expect)


def test_decoder_stages_check_their_arch():
    for cls in (Decoder, PcChecks, CauseSelect, Predecoder, Fetch):
        with pytest.raises(TypeError, match="arch must be an ArchParams, not 'x'"):
            cls("x")


# ------------------------------------------------------------------ sequencer
def test_sequencer_dispatches_in_order_and_stops():
    rng = random.Random(3)
    dut = Sequencer(16)
    ops = [Op.VERSION] + [rng.choice([op for ops in UNIT_OPS.values() for op in ops])
                          for _ in range(40)]
    words = [encode(op) for op in ops]
    unit_of = {op: name for name, ops_ in UNIT_OPS.items() for op in ops_}
    logs = {name: [] for name in UNIT_OPS}

    async def tb(ctx):
        ctx.set(dut.drained, 1)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        assert code(ctx.get(dut.status)) == StatusCode.RUNNING.value
        await ctx.tick().until(dut.run)
        for pc, (op, w) in enumerate(zip(ops, words)):
            await stream_put(ctx, dut.insn, {"pc": pc, **unit_insn_of(w), "cause": CauseCode.NONE,
                                             "unit": dispatch_of(op)}, rng=rng, idle_prob=0.3)
        # an illegal instruction stops the program where it is, a cycle after it is seen
        ctx.set(dut.insn.valid, 1)
        ctx.set(dut.insn.p, {"pc": 7, "word": {"bits": 0x55}, "cause": CauseCode.BAD_OPCODE,
                             "unit": dispatch_of(0x55, Cause.BAD_OPCODE)})
        await ctx.tick()
        assert code(ctx.get(dut.status)) == StatusCode.RUNNING.value and not ctx.get(dut.insn.ready)
        await ctx.tick()
        ctx.set(dut.insn.valid, 0)
        assert (code(ctx.get(dut.status)), code(ctx.get(dut.cause))) == (
            StatusCode.ILLEGAL.value, CauseCode.BAD_OPCODE.value)
        assert not ctx.get(dut.run)

    def unit(name):
        async def consume(ctx):
            port = getattr(dut, name)
            while True:
                await stream_get(ctx, port, rng=rng, bp_prob=0.5)
        return consume

    run_simulation(dut, [tb], [unit(n) for n in UNIT_OPS]
                   + [stream_monitor(getattr(dut, n), log=logs[n], name=n) for n in UNIT_OPS])
    for name in UNIT_OPS:
        assert logs[name] == [UnitInsn().const(unit_insn_of(w)).as_value().value
                              for op, w in zip(ops, words) if unit_of.get(op) == name]


def test_sequencer_restarts_only_when_stopped():
    """``start`` pulses ``restart`` in the cycle it arrives while stopped, and
    is ignored in CLEAR and EXEC; after a stop it restarts again."""
    dut = Sequencer(16)
    restarts = []

    async def tb(ctx):
        ctx.set(dut.start, 1)                    # stopped: restart, into CLEAR
        assert ctx.get(dut.restart)
        await ctx.tick()
        for _ in range(3):                       # CLEAR (nothing drained yet): ignored
            restarts.append(ctx.get(dut.restart))
            assert ctx.get(dut.clearing)
            await ctx.tick()
        ctx.set(dut.drained, 1)
        await ctx.tick().until(dut.run)
        for _ in range(3):                       # EXEC: ignored
            restarts.append(ctx.get(dut.restart))
            await ctx.tick()
        ctx.set(dut.start, 0)
        ctx.set(dut.insn.valid, 1)               # an illegal instruction stops it
        ctx.set(dut.insn.p, {"pc": 3, "word": {"bits": 0x55}, "cause": CauseCode.BAD_OPCODE,
                             "unit": dispatch_of(0x55, Cause.BAD_OPCODE)})
        await ctx.tick().repeat(2)
        ctx.set(dut.insn.valid, 0)
        assert code(ctx.get(dut.status)) == StatusCode.ILLEGAL.value
        assert not ctx.get(dut.restart)
        ctx.set(dut.start, 1)                    # stopped again: restart
        assert ctx.get(dut.restart)
        await ctx.tick()
        assert code(ctx.get(dut.status)) == StatusCode.RUNNING.value and ctx.get(dut.clearing)

    run_simulation(dut, [tb])
    assert restarts == [0] * 6


def test_sequencer_lock_step_one_instruction_per_grant():
    dut = Sequencer(16)
    acks = []

    async def tb(ctx):
        ctx.set(dut.drained, 1)
        ctx.set(dut.step_mode, 1)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        await ctx.tick().until(dut.run)
        ctx.set(dut.insn.valid, 1)
        ctx.set(dut.insn.p, {"pc": 0, "word": {"bits": V}, "cause": CauseCode.NONE,
                             "unit": dispatch_of(Op.VERSION)})
        for cycle in range(12):
            ctx.set(dut.step_grant, cycle % 4 in (1, 2))
            _, _, ack, taken = await ctx.tick().sample(dut.step_ack, dut.insn.ready)
            acks.append((int(ack), int(taken)))

    run_simulation(dut, [tb])
    assert acks == [(0, 0), (1, 1), (0, 0), (0, 0)] * 3


# ------------------------------------------------------------------ COPY issue
def test_copy_issue_turns_copies_into_descriptors():
    rng = random.Random(4)
    dut = CopyIssue(ARCH)
    words = [random_copy(rng) for _ in range(30)]
    got, issued = [], []

    async def producer(ctx):
        for w in words:
            await stream_put(ctx, dut.insn, unit_insn_of(w), rng=rng, idle_prob=0.3)

    async def stepper(ctx):
        # lock-step: a grant is held until the instruction at hand retires
        while True:
            if not (ctx.get(dut.step) and ctx.get(dut.insn.valid)):
                ctx.set(dut.step, rng.random() < 0.7)
            _, _, iss = await ctx.tick().sample(dut.issued)
            if iss:
                issued.append(iss)

    async def consumer(ctx):
        for _ in words:
            p = await stream_get(ctx, dut.desc, rng=rng, bp_prob=0.4)
            got.append({n: int(getattr(p, n)) for n in ("chan", "ctx", "tag", "src", "dst",
                                                        "row_bytes", "rows", "src_stride",
                                                        "dst_stride")})

    run_simulation(clocked(dut), [producer, consumer], [stepper, stream_monitor(dut.desc, log=[], name="desc"),
                                               stream_monitor(dut.insn, log=[], name="insn")])
    assert got == [{n: field(w, Op.COPY, n) for n in got[0]} for w in words]
    assert issued == [1 << field(w, Op.COPY, "chan") for w in words]


# ------------------------------------------------------------------ feeder
def test_feeder_per_channel_order_and_offers_only_what_the_dma_has_room_for():
    """A DMA model with two descriptor slots per channel frees them in random
    order across channels and takes offers under random back-pressure: per
    channel the order is kept, and a descriptor is offered only for a channel
    the DMA has room for, so a full channel never blocks the others."""
    rng = random.Random(5)
    dut = DescriptorFeeder(ARCH, depth=4)
    descs = [{"chan": rng.randrange(3), "ctx": 0, "tag": i, "src": 0, "dst": 0,
              "row_bytes": rng.randrange(0, 13), "rows": rng.randrange(1, 3),
              "src_stride": 0, "dst_stride": 0} for i in range(60)]
    taken = {c: [] for c in range(3)}
    slots = {c: 0 for c in range(3)}         # descriptors the DMA holds
    done = [0, 0, 0]
    offers = []

    async def producer(ctx):
        for d in descs:
            await stream_put(ctx, dut.w, d, rng=rng, idle_prob=0.2)

    async def dma(ctx):
        while True:
            for ch in range(3):
                ctx.set(dut.free_slots[ch], 2 - slots[ch])
                ctx.set(dut.chan_status[ch].busy, slots[ch] > 0)
                ctx.set(dut.chan_status[ch].done_count, done[ch] % 256)
            ready = rng.random() < 0.7
            ctx.set(dut.desc.ready, ready)
            _, _, valid, p = await ctx.tick().sample(dut.desc.valid, dut.desc.payload)
            if valid:
                offers.append(slots[p.chan] < 2)
            if valid and ready:
                taken[p.chan].append(int(p.tag))
                slots[p.chan] += 1
            for ch in range(3):                  # a random channel completes one
                if slots[ch] and rng.random() < 0.15:
                    slots[ch] -= 1
                    done[ch] += 1

    async def waiter(ctx):
        # (~180 cycles: a feeder that loses count of its offers stalls; fail, don't hang)
        for _ in range(2000):
            if sum(len(v) for v in taken.values()) == len(descs) and ctx.get(dut.done) == 7:
                return
            await ctx.tick()
        raise AssertionError("the feeder stalled")

    run_simulation(dut, [producer, waiter], [dma, stream_monitor(dut.desc, log=[], name="desc")])
    for c in range(3):
        assert taken[c] == [d["tag"] for d in descs if d["chan"] == c]
    assert offers and all(offers)


def test_feeder_is_not_done_while_a_descriptor_is_on_its_way():
    """From the cycle after a descriptor is written until the DMA has taken
    and completed it, its channel is not ``done`` (it passes the input slice,
    the queue and the offer on the way); the other channels stay done."""
    dut = DescriptorFeeder(ARCH, depth=4)
    desc = {"chan": 1, "ctx": 0, "tag": 3, "src": 0, "dst": 0, "row_bytes": 4, "rows": 1,
            "src_stride": 0, "dst_stride": 0}
    log = []

    async def tb(ctx):
        for ch in range(3):
            ctx.set(dut.free_slots[ch], 2)
        for _ in range(3):
            await ctx.tick()
        assert ctx.get(dut.done) == 0b111
        await stream_put(ctx, dut.w, desc)
        took = None
        for cycle in range(12):
            ctx.set(dut.desc.ready, 1)
            _, _, done, valid = await ctx.tick().sample(dut.done, dut.desc.valid)
            log.append(int(done))
            if valid and took is None:
                took = cycle
                ctx.set(dut.chan_status[1].busy, 1)       # the DMA works on it ...
        ctx.set(dut.chan_status[1].busy, 0)
        ctx.set(dut.chan_status[1].done_count, 1)         # ... and completes it
        for _ in range(3):
            await ctx.tick()
        log.append(int(ctx.get(dut.done)))
        assert took is not None

    run_simulation(dut, [tb])
    assert all(d == 0b101 for d in log[:-1]), log
    assert log[-1] == 0b111


# ------------------------------------------------------------------ sync unit
def test_sync_unit_signal_wait_fence_halt():
    rng = random.Random(7)
    dut = SyncUnit(ARCH)
    prog = [encode(Op.SIGNAL, dev=d, sem=s) for d, s in [(1, 2), (2, 0), (0, 3)]]
    prog += [encode(Op.WAIT, sem=1, count=3), encode(Op.FENCE, mask=0b010),
             encode(Op.SIGNAL, dev=2, sem=1), encode(Op.HALT)]
    sent = []
    stops = []

    async def tb(ctx):
        ctx.set(dut.step, 1)
        ctx.set(dut.done, 0b101)
        ctx.set(dut.issued, 0b010)
        await ctx.tick()
        ctx.set(dut.issued, 0)
        assert ctx.get(dut.unfenced) == 0b010
        for w in prog[:3]:
            await stream_put(ctx, dut.insn, unit_insn_of(w), rng=rng, idle_prob=0.3)
        ctx.set(dut.insn.valid, 1)
        ctx.set(dut.insn.p, unit_insn_of(prog[3]))                         # WAIT sem=1 count=3
        await ctx.tick()
        assert not ctx.get(dut.blocked)             # its operands are being registered
        for _ in range(3):
            await ctx.tick()
            assert ctx.get(dut.blocked) and not ctx.get(dut.insn.ready)
            await stream_put(ctx, dut.sig_in, 1)
            assert not ctx.get(dut.blocked)         # a signal came: not known below until checked
        await ctx.tick().until(dut.insn.ready)
        ctx.set(dut.insn.p, unit_insn_of(prog[4]))                         # FENCE chan 1: waits
        await ctx.tick()
        assert ctx.get(dut.semaphores[1]) == 0
        for _ in range(3):
            assert not ctx.get(dut.insn.ready)
            await ctx.tick()
        ctx.set(dut.done, 0b111)
        await ctx.tick().until(dut.insn.ready)
        ctx.set(dut.insn.valid, 0)
        await ctx.tick()
        assert ctx.get(dut.unfenced) == 0
        await stream_put(ctx, dut.insn, unit_insn_of(prog[5]), rng=rng, idle_prob=0.3)
        ctx.set(dut.insn.valid, 1)
        ctx.set(dut.insn.p, unit_insn_of(prog[6]))                         # HALT
        _, _, v, p = await ctx.tick().sample(dut.stop.valid, dut.stop.payload)
        stops.append((int(v), code(p.status), code(p.cause)))
        ctx.set(dut.insn.valid, 0)

    async def network(ctx):
        while True:
            p = await stream_get(ctx, dut.sig, rng=rng, bp_prob=0.5)
            sent.append((int(p.dev), int(p.sem)))

    run_simulation(dut, [tb], [network, stream_monitor(dut.sig, log=[], name="sig")])
    assert sent == [(1, 2), (2, 0), (0, 3), (2, 1)]
    assert stops == [(1, StatusCode.HALTED.value, CauseCode.NONE.value)]


@pytest.mark.parametrize("delay", range(6))
def test_sync_unit_counts_a_signal_that_arrives_as_a_wait_takes(delay):
    """A signal for a WAIT's semaphore arriving in any cycle around the WAIT's
    retire (one of these is the very edge it subtracts at) is counted: the
    semaphore ends at the signals received less the count."""
    dut = SyncUnit(ARCH)
    retired = []

    async def tb(ctx):
        ctx.set(dut.step, 1)
        ctx.set(dut.done, (1 << ARCH.channels) - 1)
        for _ in range(2):
            await stream_put(ctx, dut.sig_in, 1)
        ctx.set(dut.insn.valid, 1)
        ctx.set(dut.insn.p, unit_insn_of(encode(Op.WAIT, sem=1, count=2)))
        for cycle in range(8):
            ctx.set(dut.sig_in.valid, cycle == delay)
            ctx.set(dut.sig_in.p, 1)
            _, _, taken = await ctx.tick().sample(dut.insn.ready)
            if taken:
                retired.append(cycle)
                ctx.set(dut.insn.valid, 0)
        ctx.set(dut.sig_in.valid, 0)
        await ctx.tick()
        assert ctx.get(dut.semaphores[1]) == 2 + 1 - 2
        assert ctx.get(dut.semaphores[0]) == 0

    run_simulation(dut, [tb])
    assert len(retired) == 1


# ------------------------------------------------------------------ MMU command unit
def test_mmu_command_unit_sends_commands_and_checks_commit():
    rng = random.Random(8)
    dut = MmuCommandUnit(ARCH)
    words = [encode(Op.REMAP, ctx=1, size=1, perm=3, staged=1, dev=2, va=0x400, pa=0x800),
             encode(Op.INVAL, ctx=2, size=0, staged=1, va=0x100),
             encode(Op.INVAL, ctx=3, size=0, staged=0, va=0x200),
             encode(Op.COMMIT, ctx=1)]
    got = []

    async def tb(ctx):
        ctx.set(dut.step, 1)
        ctx.set(dut.done, 0b011)                  # channel 2 busy: only the staged INVAL goes
        ctx.set(dut.insn.valid, 1)
        ctx.set(dut.insn.p, unit_insn_of(words[0]))
        for _ in range(4):
            await ctx.tick()
            assert not ctx.get(dut.cmd.valid)
        ctx.set(dut.insn.valid, 0)
        await stream_put(ctx, dut.insn, unit_insn_of(words[1]), rng=rng, idle_prob=0.3)
        ctx.set(dut.done, 0b111)
        for w in (words[0], words[2]):
            await stream_put(ctx, dut.insn, unit_insn_of(w), rng=rng, idle_prob=0.3)
        ctx.set(dut.unfenced, 0b100)              # COMMIT after an unfenced COPY: illegal
        ctx.set(dut.insn.valid, 1)
        ctx.set(dut.insn.p, unit_insn_of(words[3]))
        _, _, v, p = await ctx.tick().sample(dut.stop.valid, dut.stop.payload)
        assert (v, code(p.status), code(p.cause)) == (1, StatusCode.ILLEGAL.value,
                                                       CauseCode.COMMIT_UNFENCED.value)
        ctx.set(dut.unfenced, 0)
        ctx.set(dut.insn.valid, 0)
        await stream_put(ctx, dut.insn, unit_insn_of(words[3]), rng=rng, idle_prob=0.3)
        for _ in range(30):                       # the COMMIT leaves its register
            await ctx.tick()

    async def mmu(ctx):
        while True:
            p = await stream_get(ctx, dut.cmd, rng=rng, bp_prob=0.5)
            got.append((code(p.op), int(p.ctx), int(p.staged), int(p.va), int(p.pa)))

    flushes = []

    async def flush_mon(ctx):
        async for _, _, f in ctx.tick().sample(dut.flush):
            if f:
                flushes.append(1)

    run_simulation(clocked(dut), [tb], [mmu, flush_mon, stream_monitor(dut.cmd, log=[], name="cmd")])
    assert got == [(MmuOp.INVAL.value, 2, 1, 0x100, 0), (MmuOp.REMAP.value, 1, 1, 0x400, 0x800),
                   (MmuOp.INVAL.value, 3, 0, 0x200, 0), (MmuOp.COMMIT.value, 1, 0, 0, 0)]
    assert len(flushes) == 4



def test_mmu_command_unit_commit_waits_for_an_idle_mmu():
    """A COMMIT is sent only while the command register is empty and
    ``mmu_idle`` (every earlier command has taken effect: the commit bytes are
    read from the TLB as the MMU places it); a REMAP does not wait for it.
    A command leaves from the register in the cycle after it was taken, and
    ``committed`` pulses as the MMU takes a COMMIT."""
    dut = MmuCommandUnit(ARCH)
    log = []

    async def tb(ctx):
        ctx.set(dut.step, 1)
        ctx.set(dut.done, 0b111)
        ctx.set(dut.cmd.ready, 1)
        ctx.set(dut.mmu_idle, 0)
        ctx.set(dut.insn.valid, 1)
        ctx.set(dut.insn.p, unit_insn_of(encode(Op.REMAP, ctx=1, staged=1)))
        log.append(await ctx.tick().sample(dut.cmd.valid, dut.committed, dut.insn.ready))
        ctx.set(dut.insn.p, unit_insn_of(encode(Op.COMMIT, ctx=1)))
        for cycle in range(8):
            ctx.set(dut.mmu_idle, cycle >= 3)
            log.append(await ctx.tick().sample(dut.cmd.valid, dut.committed, dut.insn.ready))
            if log[-1][-1]:
                break
        ctx.set(dut.insn.valid, 0)
        log.append(await ctx.tick().sample(dut.cmd.valid, dut.committed, dut.insn.ready))

    run_simulation(clocked(dut), [tb])
    assert [tuple(x[2:]) for x in log] == [(0, 0, 1), (1, 0, 0), (0, 0, 0), (0, 0, 0), (0, 0, 1),
                                           (1, 1, 0)]

# ------------------------------------------------------------------ counters
def test_counters_count_bytes_per_channel_and_clear():
    rng = random.Random(9)
    dut = Counters(ARCH, data_width=32, counter_width=32)
    want = [0, 0, 0]

    async def tb(ctx):
        ctx.set(dut.running, 1)
        for _ in range(50):
            c, be = rng.randrange(3), rng.randrange(16)
            v = rng.random() < 0.7
            ctx.set(dut.beat.valid, v)
            ctx.set(dut.beat.chan, c)
            ctx.set(dut.beat.be, be)
            ctx.set(dut.issued, 1 << c if rng.random() < 0.2 else 0)
            await ctx.tick()
            want[c] += bin(be).count("1") if v else 0
        ctx.set(dut.beat.valid, 0)
        ctx.set(dut.issued, 0)
        await ctx.tick()
        assert [ctx.get(b) for b in dut.chan_bytes] == want
        assert ctx.get(dut.cycles) == 51 and ctx.get(dut.descriptors) > 0
        ctx.set(dut.committed, 1)
        await ctx.tick()
        ctx.set(dut.committed, 0)
        ctx.set(dut.commit_bytes, 7 * PG)        # not yet: the MMU is placing the COMMIT
        await ctx.tick()
        await ctx.tick()                         # ... then the device sums its terms
        ctx.set(dut.commit_bytes, 4 * PG)        # the sum, in the third cycle after it
        await ctx.tick()
        ctx.set(dut.commit_bytes, 9 * PG)
        await ctx.tick()
        ctx.set(dut.restart, 1)
        assert ctx.get(dut.bytes_remapped) == 4 * PG
        await ctx.tick()
        assert [ctx.get(b) for b in dut.chan_bytes] == [0, 0, 0]
        assert (ctx.get(dut.cycles), ctx.get(dut.descriptors), ctx.get(dut.bytes_remapped)) == (0, 0, 0)

    run_simulation(dut, [tb])


# ------------------------------------------------------------------ fault queue
def test_fault_queue_keeps_order_and_flags_overflow():
    rng = random.Random(10)
    dut = FaultQueue(ARCH, depth=4)
    recs = [{"chan": rng.randrange(3), "ctx": rng.randrange(4), "va": rng.randrange(1 << 20),
             "cause": rng.randrange(1, 6)} for _ in range(20)]
    log = []

    async def producer(ctx):
        for i, r in enumerate(recs):
            while i - len(log) >= 3:                  # never more than the queue holds
                await ctx.tick()
            await stream_put(ctx, dut.w, r, rng=rng, idle_prob=0.6)
        await ctx.tick().until(dut.empty)
        assert not ctx.get(dut.overflow)
        ctx.set(dut.w.valid, 1)                       # 8 records at once: 4 dropped
        for r in recs[:8]:
            ctx.set(dut.w.payload, r)
            await ctx.tick()
        ctx.set(dut.w.valid, 0)
        await ctx.tick()
        assert ctx.get(dut.overflow)
        ctx.set(dut.clear_overflow, 1)
        ctx.set(dut.flush, 1)
        await ctx.tick().until(dut.empty)
        ctx.set(dut.clear_overflow, 0)
        ctx.set(dut.flush, 0)
        assert not ctx.get(dut.overflow)

    async def host(ctx):
        for _ in recs:
            await stream_get(ctx, dut.r, rng=rng, bp_prob=0.5)

    run_simulation(dut, [producer, host], [stream_monitor(dut.r, log=log, name="r", unless=dut.flush)])
    assert len(log) >= len(recs)
    layout = dut.r.payload.shape()
    got = [data.Const(layout, v) for v in log[:len(recs)]]
    assert [(g.chan, g.ctx, g.va, code(g.cause)) for g in got] == \
        [(r["chan"], r["ctx"], r["va"], r["cause"]) for r in recs]
