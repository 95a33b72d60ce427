"""The collective tests: the collective compiler's ring all-reduces and verl's captured schedule.

Apart from :mod:`verif.tests` (the reshard, register and random-program tests),
whose ``BaseTest`` and back-door helpers they use; ``verif.tests.run`` starts them.
"""
from __future__ import annotations

import json
import os

import numpy as np

from verif import coverage
from verif.sequences import MemReadSeq
from verif.tests import BaseTest, _ending, backdoor_read_range, backdoor_zero, check_memory


class CollectiveReplayTest(BaseTest):
    """Ring all-reduces (fp32 and bf16, reduce-on-write COPY_ADD) from the collective compiler on
    random data; status and memories against the golden model (a reduction writes a byte more
    than once, so the end state, not each beat, is predicted)."""

    def setup(self):
        from hw.isa import ArchParams
        return ArchParams.from_json(self.cfg["arch"]), self.cfg["bus_bits"]

    async def body(self):
        from gen.coll_programs import generate
        from gen.coll_run import ADD_OPS, ELEM_BYTES, _layout
        from gen.result import run_golden
        wb = self.bus_bits // 8
        rng = np.random.default_rng(self.cfg["seed"])
        loaded_len = [0] * self.arch.devices
        for k, dtype in enumerate(("float32", "bfloat16")):
            es = ELEM_BYTES[dtype]
            nbytes = 2048 * self.arch.devices
            lay = _layout("all_reduce", self.arch.devices, nbytes, es)
            progs = generate(self.arch, list(range(self.arch.devices)), lay, "ring", ADD_OPS[dtype])
            mems = []
            for _ in range(self.arch.devices):
                m = np.zeros(self.arch.mem_bytes, np.uint8)
                vals = rng.standard_normal(nbytes // es).astype(np.float32)
                m[:nbytes] = (vals.view(np.uint8) if es == 4
                              else (vals.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8))
                mems.append(m)
            gold = run_golden(self.arch, progs.words, [m.copy() for m in mems])
            status = await self.run_case(progs.words, mems, loaded_len)
            for d, st in enumerate(status):
                coverage.sample_ending(_ending(st))
                if _ending(st) != f"{gold.status[d]}/{gold.cause[d]}":
                    raise AssertionError(f"{dtype} all-reduce device {d}: ended {_ending(st)}, golden "
                                         f"{gold.status[d]}/{gold.cause[d]}")
                check_memory(self.dut, d, gold.memories[d], wb, f"{dtype} all-reduce")


class CollectiveCaptureReplayTest(BaseTest):
    """A captured collective schedule: verl's FSDP2 training step on micro-qwen2 (2 CPU ranks, gloo;
    verif.schedule), every collective the hardware runs replayed in issue order, compiled by the
    collective compiler (``auto`` algorithm, as ``python -m gen collectives``). Each collective's
    input tensors are backdoor-loaded in place, the programs go through the host ports, and the
    outputs are compared bit for bit with gloo's recorded output tensors (an ``avg`` is the
    hardware's sum scaled by 1/2 on the host). On two ranks every SRAM write beat of these
    collectives carries its final value (an all-gather copies each chunk once; a ring
    reduce-scatter's one reduce-on-write step writes the sum), so the beat scoreboard is active
    too, predicting each beat from gloo's output (for ``avg``: twice it, exact in binary)."""

    def setup(self):
        from hw.isa import ArchParams
        self.schedule = json.loads(open(self.cfg["schedule"]).read())
        self.expected = [b""] * ArchParams.from_json(self.cfg["arch"]).devices    # set per collective
        return ArchParams.from_json(self.cfg["arch"]), self.cfg["bus_bits"]

    async def body(self):
        from gen.coll_numerics import _bits, _values
        from gen.coll_programs import generate
        from gen.collectives import (ADD_OPS, ELEM_BYTES, Collective, _layout, _need, buffer_bytes,
                                     choose_algorithm)
        wb = self.bus_bits // 8
        data = np.load(self.schedule["data"])
        calls = self.schedule["collectives"]
        if self.cfg.get("collectives"):                     # a prefix of the schedule (tests/test_uvm.py)
            calls = calls[:self.cfg["collectives"]]
        if not calls:
            raise AssertionError(f"the captured schedule {self.cfg['schedule']} has no collective to run")
        loaded_len = [0] * self.arch.devices
        sb = self.env.scoreboard
        sb.reference = "gloo's output"
        footprint, done = 0, []
        for n, m in enumerate(calls):
            c = Collective(m["index"], m["phase"], m["op"], m["dtype"], m["reduce_op"], m["ranks"], m["bytes"], [])
            es, p = ELEM_BYTES[c.dtype], c.p
            alg = choose_algorithm("auto", c.op, buffer_bytes(c), p)
            lay = _layout(c.op, p, buffer_bytes(c), es)
            bounds = [x * es for x in lay.bounds]
            progs = generate(self.arch, c.ranks, lay, alg, ADD_OPS.get(c.dtype))
            ins = [data[f"c{c.index}_in{s}"] for s in range(p)]
            gloo = [data[f"c{c.index}_out{s}"] for s in range(p)]
            corrupt = os.environ.get("RESHARD_UVM_CORRUPT_GLOO")
            if corrupt and n == len(calls) - 1:
                # a deliberately wrong reference (tests/test_uvm.py), one byte of rank 1's output: a third
                # of the way in (an all-gather's beat from rank 0 writes it), or two thirds ("own": in an
                # all-gather rank 1's own chunk, which no beat writes; the output comparison must see it)
                gloo[1] = gloo[1].copy()
                gloo[1][len(gloo[1]) * (2 if corrupt == "own" else 1) // 3] ^= 0x40
            # in place (gen.coll_programs): an all-gather's input is rank s's chunk of the output
            # buffer, a reduction's output rank s's chunk (reduce-scatter) or all (all-reduce) of it
            mems = [np.zeros(self.arch.mem_bytes, np.uint8) for _ in range(self.arch.devices)]
            where = []
            for s, dev in enumerate(c.ranks):
                mems[dev][bounds[s] if c.op == "all_gather" else 0:][:len(ins[s])] = ins[s]
                where.append(bounds[s] if c.op == "reduce_scatter" else 0)
            want = [m.copy() for m in mems]
            for s, dev in enumerate(c.ranks):
                out = gloo[s] if c.reduce_op != "avg" else _bits(_values(gloo[s], c.dtype) * np.float32(p), c.dtype)
                want[dev][where[s]:where[s] + len(out)] = out
            sb.expected = [bytes(w) for w in want]
            # the backdoor load skips zero words and reset clears no memory: zero what the previous
            # collective's buffers covered first
            for d in range(self.arch.devices):
                backdoor_zero(self.dut, d, footprint, wb)
            footprint = _need(lay)
            coverage.sample_collective(c.phase, c.op, c.dtype, c.reduce_op or "none")
            name = f"{c.name()} {c.dtype} {c.bytes:,} B ({alg})"
            before = self.cycles
            status = await self.run_case(progs.words, mems, loaded_len)
            done.append({"index": c.index, "phase": c.phase, "op": c.op, "dtype": c.dtype, "reduce_op": c.reduce_op,
                         "bytes": c.bytes, "algorithm": alg, "cycles": self.cycles - before})
            json.dump(done, open("collectives.json", "w"), indent=1)     # beside the record: cycles of each
            if sb.first_error:      # named here: the failure report quotes the scoreboard's message
                sb.first_error = f"{name}: {sb.first_error}" + (" (x2: the hardware sums, avg halves)"
                                                                 if c.reduce_op == "avg" else "")
                raise AssertionError(sb.first_error)
            for s, dev in enumerate(c.ranks):
                st = status[dev]
                coverage.sample_ending(_ending(st))
                if _ending(st) != "HALTED/NONE":
                    raise AssertionError(f"{name} device {dev}: ended {_ending(st)}")
                lo, nb = where[s], len(gloo[s])
                got = np.frombuffer(backdoor_read_range(self.dut, dev, lo, nb, wb), np.uint8)
                if c.reduce_op == "avg":
                    got = _bits(_values(got.copy(), c.dtype) / np.float32(p), c.dtype)
                if not np.array_equal(got, gloo[s]):
                    i = int(np.flatnonzero(got != gloo[s])[0])
                    raise AssertionError(f"{name} rank {s} (device {dev}): output byte {i} (address "
                                         f"{lo + i:#x}) is {int(got[i]):#04x}, gloo's output {int(gloo[s][i]):#04x}")
            # the front door agrees with the back door on the output's first word
            d0, w0 = c.ranks[0], where[0] // wb
            peek = MemReadSeq("peek", d0, [w0], wb)
            await peek.start(self.env.seqr)
            if peek.data[w0] != bytes(want[d0][w0 * wb:(w0 + 1) * wb]):
                raise AssertionError(f"{name}: MEM_RDATA of word {w0} on device {d0}: {peek.data[w0].hex()}, "
                                     f"predicted {bytes(want[d0][w0 * wb:(w0 + 1) * wb]).hex()}")
        if sb.checked == 0:
            raise AssertionError("the scoreboard saw no write beat")
