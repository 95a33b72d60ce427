"""The pyuvm tests: a compiled reshard replayed, the register map swept, constrained-random programs
(the collective tests are in :mod:`verif.tests_collectives`).

Each test gets its configuration (compiled directory, seed, record path) from
the JSON file ``$RESHARD_UVM_CONFIG`` names, runs, and writes a record (result,
cycles, message, coverage) that :mod:`verif.runner` collects. A failure names
its first difference.
"""
from __future__ import annotations

import json
import os
import traceback

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge
from pyuvm import ConfigDB, uvm_test

from verif import coverage
from verif.env import ReshardEnv
from verif.sequences import FaultDrainSeq, MemReadSeq, ProgramLoadSeq, RegisterSweepSeq, RunSeq

TESTS = ("reshard_replay", "register_sweep", "random_programs", "collective_replay", "directed_faults",
         "directed_traffic", "collective_capture_replay")


def config() -> dict:
    return json.loads(open(os.environ["RESHARD_UVM_CONFIG"]).read())


def backdoor_load(dut, device: int, image: bytes, word_bytes: int) -> None:
    """Write a memory image straight into the SRAM model (the UVM backdoor), skipping zero words."""
    mem = getattr(dut, f"dev{device}").mem.bank0.mem
    words = np.frombuffer(image, dtype=np.uint8).reshape(-1, word_bytes)
    for i in np.flatnonzero(words.any(axis=1)):
        mem[int(i)].value = int.from_bytes(words[i].tobytes(), "little")


def backdoor_read(dut, device: int, nbytes: int, word_bytes: int) -> bytes:
    mem = getattr(dut, f"dev{device}").mem.bank0.mem
    return b"".join(int(mem[i].value).to_bytes(word_bytes, "little") for i in range(nbytes // word_bytes))


def backdoor_zero(dut, device: int, nbytes: int, word_bytes: int) -> None:
    """Zero the words of ``[0, nbytes)`` of a device's memory through the back door."""
    mem = getattr(dut, f"dev{device}").mem.bank0.mem
    for i in range(-(-nbytes // word_bytes)):
        mem[i].value = 0


def backdoor_read_range(dut, device: int, start: int, nbytes: int, word_bytes: int) -> bytes:
    """Bytes ``[start, start + nbytes)`` of a device's memory through the back door (whole words read)."""
    mem = getattr(dut, f"dev{device}").mem.bank0.mem
    lo, hi = start // word_bytes, -(-(start + nbytes) // word_bytes)
    raw = b"".join(int(mem[i].value).to_bytes(word_bytes, "little") for i in range(lo, hi))
    return raw[start - lo * word_bytes:start - lo * word_bytes + nbytes]


def check_memory(dut, device: int, expected, word_bytes: int, what: str) -> None:
    """A device's whole memory, read through the back door, against ``expected``; the first
    differing byte is named (``what`` says which case)."""
    mem = backdoor_read(dut, device, len(expected), word_bytes)
    if mem != bytes(expected):
        i = next(i for i in range(len(mem)) if mem[i] != expected[i])
        raise AssertionError(f"{what} device {device}: memory byte {i:#x} is {mem[i]:#04x}, "
                             f"golden {int(expected[i]):#04x}")


class BaseTest(uvm_test):
    """Common: configuration into the ConfigDB, the environment, the record at the end."""
    expected: list | None = None

    def build_phase(self):
        self.cfg = config()
        self.dut = cocotb.top
        self.arch, self.bus_bits = self.setup()
        ConfigDB().set(None, "*", "devices", self.arch.devices)
        ConfigDB().set(None, "*", "bus_bits", self.bus_bits)
        ConfigDB().set(None, "*", "expected", self.expected)
        ConfigDB().set(None, "*", "arch", self.arch.to_json())
        self.env = ReshardEnv("env", self)
        self.message, self.cycles = "", 0

    def setup(self):
        raise NotImplementedError

    async def body(self):
        raise NotImplementedError

    async def run_phase(self):
        self.raise_objection()
        try:
            self.env.driver.set_backpressure(self.cfg["seed"] % 2 == 1)
            await self.body()
            sb = self.env.scoreboard
            if sb and sb.first_error:
                raise AssertionError(sb.first_error)
            net = self.env.net_scoreboard
            await settle(self.dut)
            why = net.first_error or net.undelivered()
            if why:
                raise AssertionError(why)
            self.result = "pass"
        except Exception as e:          # recorded, then reported to cocotb as the failure
            self.result, self.message = "fail", f"{type(e).__name__}: {e}"
            self.logger.error(traceback.format_exc())
            sb = self.env.scoreboard
            if sb and sb.first_error:   # the scoreboard saw it first, beat by beat: its message names it
                self.message = f"AssertionError: {sb.first_error}"
            elif self.env.net_scoreboard.first_error:
                self.message = f"AssertionError: {self.env.net_scoreboard.first_error}"
        self.drop_objection()

    async def run_case(self, programs, memories, loaded_len: list[int]) -> list[dict]:
        """Reset, memories by backdoor, programs through the host ports (each padded with zeros over
        what the previous case left: the golden model's instruction memory is the program then
        zeros, and reset clears no memory), run, wait until done; each device's STATUS record."""
        wb = self.bus_bits // 8
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 3)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)
        for d in range(self.arch.devices):
            backdoor_load(self.dut, d, bytes(memories[d]), wb)
            words = list(programs[d]) + [0] * max(0, loaded_len[d] - len(programs[d]))
            loaded_len[d] = len(programs[d])
            await ProgramLoadSeq("load", d, words, wb).start(self.env.seqr)
        run = RunSeq("run", self.arch.devices)
        await run.start(self.env.seqr)
        await settle(self.dut)
        self.cycles += max(st["cycles"] for st in run.status)
        return run.status

    def report_phase(self):
        rec = {"result": self.result, "cycles": self.cycles, "message": self.message,
               "coverage": coverage.snapshot()}
        open(self.cfg["record"], "w").write(json.dumps(rec))
        assert self.result == "pass", self.message


class ReshardReplayTest(BaseTest):
    """A compiled reshard: memories by backdoor, programs and the run through the host ports,
    every write beat predicted by the golden model, the end state compared in full."""

    def setup(self):
        from gen.artifacts import load_compiled
        from gen.result import run_golden
        self.loaded = load_compiled(self.cfg["compiled"])
        arch, bus_bits = self.loaded.arch, self.loaded.manifest["bus_bits"]
        self.golden = run_golden(arch, self.loaded.programs, [m.copy() for m in self.loaded.memories])
        self.expected = [bytes(m) for m in self.golden.memories]
        if os.environ.get("RESHARD_UVM_CORRUPT_EXPECTED"):
            # a deliberately wrong prediction (tests/test_uvm.py): the first byte the reshard changes
            init = bytes(self.loaded.memories[1])
            i = next(i for i, (a, b) in enumerate(zip(init, self.expected[1])) if a != b)
            self.expected[1] = self.expected[1][:i] + bytes([self.expected[1][i] ^ 0x5A]) + self.expected[1][i + 1:]
        return arch, bus_bits

    async def body(self):
        from verif.sequences import PlanTransferSeq
        from verif.transfers import transfer_items
        wb = self.bus_bits // 8
        items = transfer_items(self.loaded.manifest)
        if os.environ.get("RESHARD_UVM_CORRUPT_PLAN"):
            # a deliberately wrong transfer (tests/test_uvm.py): the first remote one, a row later
            k = next(k for k, t in enumerate(items) if t.src != t.dst)
            items[k].src_offset += items[k].row_bytes
        await PlanTransferSeq("plan", items).start(self.env.xfer_seqr)
        for d, image in enumerate(self.loaded.memories):
            backdoor_load(self.dut, d, bytes(image), wb)
        seqr = self.env.seqr
        for d, words in enumerate(self.loaded.programs):
            await ProgramLoadSeq("load", d, list(words), wb).start(seqr)
        run = RunSeq("run", self.arch.devices)
        await run.start(seqr)
        await settle(self.dut)
        self.cycles = max(s["cycles"] for s in run.status)
        for d, st in enumerate(run.status):
            coverage.sample_ending(_ending(st))
            if st["status"] != 2:
                raise AssertionError(f"device {d} ended with STATUS {st}, the golden model {self.golden.status[d]}")
            if st["descriptors"] != self.golden.descriptors[d]:
                raise AssertionError(f"device {d}: DESCRIPTORS {st['descriptors']}, golden {self.golden.descriptors[d]}")
        await ClockCycles(self.dut.clk, 2)
        for d in range(self.arch.devices):
            check_memory(self.dut, d, self.expected[d], wb, "reshard")
            # the front door agrees with the back door on the first words written
            sample = MemReadSeq("peek", d, list(range(4)), wb)
            await sample.start(self.env.seqr)
            for w, data in sample.data.items():
                if data != self.expected[d][w * wb:(w + 1) * wb]:
                    raise AssertionError(f"device {d} MEM_RDATA of word {w}: {data.hex()}, golden "
                                         f"{self.expected[d][w * wb:(w + 1) * wb].hex()}")
        if self.env.scoreboard.checked == 0:
            raise AssertionError("the scoreboard saw no write beat")
        final = [backdoor_read(self.dut, d, self.arch.mem_bytes, wb) for d in range(self.arch.devices)]
        why = self.env.xfers.check(self.loaded.manifest, self.loaded.memories, final, wb)
        if why:
            raise AssertionError(f"plan transfer {why}")
        if len(self.env.xfers.items) != len(items):
            raise AssertionError(f"the predictor got {len(self.env.xfers.items)} of {len(items)} transfers")


async def settle(dut, limit: int = 100_000) -> None:
    """Wait until every device has stopped and every copy and message has landed (``done``):
    a stopped sequencer can still have copies in flight."""
    for _ in range(limit):
        if int(dut.done.value):
            return
        await RisingEdge(dut.clk)
    raise AssertionError(f"the system was not done {limit} cycles after every device stopped")


async def _read_pc(seqr, d):
    from verif.sequences import HostSeq

    class _Pc(HostSeq):
        async def body(self):
            self.pc = (await self.reg_read(d, "PC")).rdata
    seq = _Pc("pc")
    await seq.start(seqr)
    return seq.pc


def _ending(st: dict) -> str:
    from hw.isa import Cause, Status
    return f"{Status(st['status']).name}/{Cause(st['cause']).name}"


class RegisterSweepTest(BaseTest):
    """Every register read and written with full and partial strobes; responses as the map says."""

    def setup(self):
        from hw.isa import ArchParams
        return ArchParams(**self.cfg["arch"]) if "arch" in self.cfg else ArchParams(), self.cfg["bus_bits"]

    async def body(self):
        from hw.hostport import MAGIC
        for d in range(self.arch.devices):
            # every field at the register map's width: this sweep found TLB_INDEX held only the
            # bits that index the TLB (fixed in hw/hostport.py; docs/uvm.md, "Bugs found")
            sweep = RegisterSweepSeq("sweep", d)
            await sweep.start(self.env.seqr)
            for txn, want in sweep.log:
                if want is not None and txn.resp != want:
                    raise AssertionError(f"device {d}: {txn.convert2string()}, expected response {want}")
            for reg, strobe, got, want in sweep.readback:
                if got != want:
                    raise AssertionError(f"device {d}: {reg} written with strobe {strobe:04b} reads back "
                                         f"{got:#x}, expected {want:#x} (only the enabled bytes change)")
            reads = {t.reg: t.rdata for t, _ in sweep.log if not t.write}
            checks = {"ID": MAGIC, "DEVICE": d, "P_DEVICES": self.arch.devices, "P_BUS_BITS": self.bus_bits,
                      "P_CHANNELS": self.arch.channels, "P_TLB_ENTRIES": self.arch.tlb_entries}
            for reg, want in checks.items():
                if reads[reg] != want:
                    raise AssertionError(f"device {d}: {reg} read {reads[reg]:#x}, expected {want:#x}")


class RandomProgramsTest(BaseTest):
    """Constrained-random programs (verif.programs, the hypothesis tests' distribution) on this
    architecture; status, cause, PC, fault records and memories against the golden model."""
    lockstep = True

    def setup(self):
        from hw.isa import ArchParams
        return ArchParams.from_json(self.cfg["arch"]), self.cfg["bus_bits"]

    def cases(self) -> list:
        from verif.programs import draw_cases, systems
        # the constraints a user may override (gen uvm --max-body, --illegal-rate)
        return draw_cases(systems(arch=self.arch, max_body=self.cfg.get("max_body", 12),
                                  illegal_rate=self.cfg.get("illegal_rate", 0.05)),
                          self.cfg["seed"], self.cfg.get("cases", 4))

    async def body(self):
        from gen.result import run_golden
        from gen.simkit import racy_copies
        from hw.isa import Cause
        wb = self.bus_bits // 8
        cases = self.cases()
        # the drawn stimulus beside the record, so a failing case can be rerun anywhere
        np.savez_compressed("cases.npz", **{f"c{k}_mem{d}": np.frombuffer(m, np.uint8)
                                            for k, c in enumerate(cases) for d, m in enumerate(c.memories)})
        json.dump([[[f"{w:x}" for w in p] for p in c.programs] for c in cases], open("cases.json", "w"))
        loaded_len = [0] * self.arch.devices
        # random programs may race (two devices writing one byte); lock-step mode runs them in the
        # golden model's schedule exactly (hw/system.py), as the RTL hypothesis tests do
        self.dut.step_mode.value = int(self.lockstep)
        for k, case in enumerate(cases):
            if self.cfg.get("only_case") is not None and k != self.cfg["only_case"]:
                continue
            gold = run_golden(self.arch, case.programs, [np.frombuffer(m, np.uint8).copy() for m in case.memories])
            # a copy whose source and destination overlap has results the ISA leaves unspecified
            # (docs/isa.md): its memories are not compared (as tests/test_coprocessor.py does)
            overlap = racy_copies(self.arch, case.programs,
                                  [np.frombuffer(m, np.uint8).copy() for m in case.memories], across=False)
            status = await self.run_case(case.programs, case.memories, loaded_len)
            for d, st in enumerate(status):
                got = _ending(st)
                want = f"{gold.status[d]}/{gold.cause[d]}"
                coverage.sample_ending(got)
                if got != want:
                    imem = getattr(self.dut, f"dev{d}").cop.fetch.imem
                    pc = await _read_pc(self.env.seqr, d)
                    raise AssertionError(f"case {k} device {d}: ended {got} at PC {pc} (word there "
                                         f"{int(imem[pc].value):#x}), the golden model {want} at PC {gold.pc[d]}")
                drain = FaultDrainSeq("faults", d)
                await drain.start(self.env.seqr)
                want_f = sorted((f["channel"], f["ctx"], f["cause"], f["va"]) for f in gold.faults if f["device"] == d)
                got_f = sorted((ch, ctx, Cause(c).name, va) for ch, ctx, c, va in drain.faults)
                if not st["fault_overflow"] and got_f != want_f:
                    raise AssertionError(f"case {k} device {d}: fault records {got_f}, golden {want_f}")
                if overlap:
                    continue
                check_memory(self.dut, d, gold.memories[d], wb, f"case {k}")


class DirectedFaultsTest(RandomProgramsTest):
    """Directed programs for what random ones rarely reach: each translation fault the random
    programs seldom end with (a copy from a write-only page, into a read-only page, from a page
    mapped past the end of memory), staged REMAPs of the larger page sizes in both contexts and
    an INVAL of one of them."""

    def cases(self) -> list:
        from hw.isa import ISA_VERSION, PERM_R, PERM_W, Op, encode
        from verif.programs import SystemCase
        a, page = self.arch, self.arch.page_sizes[0]
        big = self.arch.page_sizes[3]
        staged = [encode(Op.REMAP, ctx=c, size=sz, perm=PERM_R, staged=1, dev=0, va=(4 + k) * big, pa=0)
                  for k, (sz, c) in enumerate(((1, 1), (3, 0), (3, 1)))]

        def program(src_perm, dst_perm, src_pa):
            return [encode(Op.VERSION, version=ISA_VERSION),
                    encode(Op.REMAP, ctx=0, size=0, perm=src_perm, dev=0, va=0x10 * page, pa=src_pa),
                    encode(Op.REMAP, ctx=0, size=0, perm=dst_perm, dev=0, va=0x20 * page, pa=2 * page),
                    *staged, encode(Op.INVAL, ctx=1, size=3, staged=1, va=5 * big),
                    encode(Op.COPY, chan=0, ctx=0, src=0x10 * page, dst=0x20 * page, row_bytes=64, rows=1),
                    encode(Op.FENCE, mask=0), encode(Op.HALT)]
        idle = [encode(Op.VERSION, version=ISA_VERSION), encode(Op.HALT)]
        rw = PERM_R | PERM_W
        progs = [program(PERM_W, rw, page),              # NO_READ
                 program(rw, PERM_R, page),              # NO_WRITE
                 program(rw, rw, a.mem_bytes + page)]    # OUT_OF_RANGE
        mem = bytes(range(256)) * (a.mem_bytes // 256)
        return [SystemCase(a, [p, idle], [mem, mem]) for p in progs]


class DirectedTrafficTest(RandomProgramsTest):
    """Free-running traffic the lock-stepped random programs never make: both devices at once
    copy to each other on channels 1..3 (plain and reduce-on-write copies) and within themselves
    on the same channels, while each reduces into its own memory on channel 0 through the
    crossbar, so two sources contend for each crossbar output, the reduce units and the outgoing
    queues back-pressure, and every (source, destination, channel) carries beats; then each
    signals itself and the other. No copy overlaps another's bytes, so the end state is the
    golden model's whatever the timing. Also a staged REMAP of the third page size in context 0."""
    lockstep = False

    def cases(self) -> list:
        from hw.isa import ISA_VERSION, PERM_R, PERM_W, Op, encode
        from verif.programs import SystemCase
        a = self.arch
        big = a.page_sizes[1]                       # 64 KiB: [0, big) sources, [big, 2 big) destinations
        rw = PERM_R | PERM_W

        def program(d):
            o = 1 - d
            p = [encode(Op.VERSION, version=ISA_VERSION)]
            for va, dev, pa in ((0, d, 0), (big, d, big), (2 * big, o, big)):
                p.append(encode(Op.REMAP, ctx=0, size=1, perm=rw, dev=dev, va=va, pa=pa))
            p.append(encode(Op.REMAP, ctx=0, size=2, perm=PERM_R, staged=1, dev=d, va=16 * big, pa=0))
            n = 0x1000
            # channel 0: reduce into this device's own slot 0 (through the crossbar to itself)
            p.append(encode(Op.COPY_ADD_F32, chan=0, ctx=0, src=0, dst=big, row_bytes=n // 4, rows=4,
                            src_stride=n // 4, dst_stride=n // 4))
            # channels 1..3: into the other device's slots 1..3 (chan 2 a reduce copy)
            for c in (1, 2, 3):
                op = Op.COPY_ADD_F32 if c == 2 else Op.COPY
                p.append(encode(op, chan=c, ctx=0, src=c * n, dst=2 * big + c * n, row_bytes=n, rows=1))
            # and channels 1..3 into this device's own slots 4..6 (local beats, straight into memory)
            for c in (1, 2, 3):
                p.append(encode(Op.COPY, chan=c, ctx=0, src=(3 + c) * n, dst=big + (3 + c) * n, row_bytes=n // 2,
                                rows=2, src_stride=n // 2, dst_stride=n // 2))
            # a SIGNAL to itself and one to the other device, each awaited after the copies
            p += [encode(Op.SIGNAL, dev=d, sem=1), encode(Op.SIGNAL, dev=o, sem=2), encode(Op.FENCE, mask=0),
                  encode(Op.WAIT, sem=1, count=1), encode(Op.WAIT, sem=2, count=1)]
            return p + [encode(Op.HALT)]
        rng = np.random.default_rng(self.cfg["seed"])
        mems = []
        for _ in range(a.devices):
            m = np.zeros(a.mem_bytes, np.uint8)
            m[:2 * big] = rng.standard_normal(2 * big // 4).astype(np.float32).view(np.uint8)
            mems.append(m.tobytes())
        return [SystemCase(a, [program(d) for d in range(a.devices)], mems)]


async def run(dut) -> None:
    """The cocotb entry: clock, reset, then the pyuvm test the configuration names."""
    from cocotb.clock import Clock
    from pyuvm import uvm_root
    name = config()["test"]
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.step_mode.value = 0
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 2)
    from verif.tests_collectives import CollectiveCaptureReplayTest, CollectiveReplayTest
    cls = {"reshard_replay": ReshardReplayTest, "register_sweep": RegisterSweepTest,
           "random_programs": RandomProgramsTest, "collective_replay": CollectiveReplayTest,
           "directed_faults": DirectedFaultsTest, "directed_traffic": DirectedTrafficTest,
           "collective_capture_replay": CollectiveCaptureReplayTest}[name]
    await uvm_root().run_test(cls)
