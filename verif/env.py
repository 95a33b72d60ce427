"""The environment: AXI4-Lite driver (cocotbext-axi), write-beat monitors, golden scoreboard, coverage.

- :class:`HostDriver` turns :class:`verif.items.HostTxn` into AXI4-Lite accesses
  through ``cocotbext.axi.AxiLiteMaster``, one master per device, optionally
  with back-pressure on the read-data and write-response channels;
- :class:`WriteBeatMonitor` samples every device's SRAM write ports each cycle
  (word address, data, byte strobes, port) and publishes the beats;
- :class:`DmaMonitor` samples every device's DMA write port (each beat with its
  source device, destination device, channel, word address, data, strobes and
  operation) and the semaphore unit (a WAIT that blocked before its SIGNAL, or
  found it already there);
- :class:`InterconnectMonitor` samples the crossbar: every message offered on an
  input (source, destination queue) and every message delivered on an output
  (with the source device the crossbar stamps), and the stalls of each stream;
- :class:`InterconnectScoreboard` checks the crossbar against its inputs: each
  delivered message is the oldest undelivered one from the same source to the
  same destination, none is lost or invented;
- :class:`TransferPredictor` takes the plan's :class:`verif.items.TransferItem`
  (from :class:`verif.sequences.PlanTransferSeq`) and checks, after the run,
  that every destination byte of every transfer holds its source byte, and was
  written by a monitored beat unless the compiler remapped its page (zero copy);
- :class:`Scoreboard` predicts every beat from the golden model's end state
  (each reshard destination byte is written once, so a beat must carry the
  bytes the golden memory ends with) and fails on the first difference,
  naming device, port, address and byte;
- :mod:`verif.coverage` keeps the functional coverage.
"""
from __future__ import annotations

import itertools
import os

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge
from cocotbext.axi import AxiLiteBus, AxiLiteMaster
from pyuvm import uvm_analysis_port, uvm_component, uvm_driver, uvm_env, uvm_sequencer, uvm_subscriber

from verif import coverage


class HostDriver(uvm_driver):
    """Drives host-port transactions; ``backpressure`` stalls R and B every other cycle."""

    def build_phase(self):
        self.dut = cocotb.top
        self.backpressure = False
        self.masters = []
        self.debug = bool(os.environ.get("RESHARD_UVM_DEBUG"))

    def start_of_simulation_phase(self):
        devices = self.cdb_get("devices")
        for d in range(devices):
            m = AxiLiteMaster(AxiLiteBus.from_prefix(self.dut, f"host__{d}_"), self.dut.clk, self.dut.rst)
            m.write_if.log.setLevel("WARNING")
            m.read_if.log.setLevel("WARNING")
            self.masters.append(m)

    def set_backpressure(self, on: bool):
        self.backpressure = on
        for m in self.masters:
            # one generator per channel: a shared one would hand R every pause and B none
            m.read_if.r_channel.set_pause_generator(itertools.cycle([1, 0]) if on else None)
            m.write_if.b_channel.set_pause_generator(itertools.cycle([1, 0]) if on else None)
        coverage.sample_backpressure(on)

    async def run_phase(self):
        while True:
            txn = await self.seq_item_port.get_next_item()
            m = self.masters[txn.device]
            if txn.write:
                lo = (txn.strobe & -txn.strobe).bit_length() - 1
                n = txn.strobe.bit_length() - lo
                if txn.strobe >> lo == (1 << n) - 1:
                    # contiguous: the bytes at their address, as software writes them
                    r = await m.write(txn.addr + lo, txn.data.to_bytes(4, "little")[lo:lo + n])
                else:
                    # a strobe with holes (0b0101, ...): AxiLiteMaster sends a whole aligned word with
                    # the strobe ANDed with its lane mask, so the mask is narrowed for this one write
                    # (one write in flight per master: the driver waits for each response)
                    m.write_if.strb_mask = txn.strobe
                    try:
                        r = await m.write(txn.addr, txn.data.to_bytes(4, "little"))
                    finally:
                        m.write_if.strb_mask = 0xF
                txn.resp = int(r.resp)
            else:
                r = await m.read(txn.addr, 4)
                txn.resp, txn.rdata = int(r.resp), int.from_bytes(r.data, "little")
            coverage.sample_register(txn)
            if self.debug:
                self.logger.warning(txn.convert2string())
            self.seq_item_port.item_done()


class WriteBeatMonitor(uvm_component):
    """Every memory write beat and every network-input beat of every device, each cycle."""

    def build_phase(self):
        self.ap = uvm_analysis_port("ap", self)
        self.dut = cocotb.top
        self.beats = 0

    def _handles(self, d: int):
        dev = getattr(self.dut, f"dev{d}")
        bank = dev.mem.bank0
        return bank, dev

    async def run_phase(self):
        devices = self.cdb_get("devices")
        word_bytes = self.cdb_get("bus_bits") // 8
        ports = [(d, *self._handles(d)) for d in range(devices)]
        while True:
            await RisingEdge(self.dut.clk)
            await ReadOnly()
            for d, bank, dev in ports:
                we = int(bank.we.value)
                if we:
                    nports = len(bank.we) // word_bytes
                    waddr, wdata = int(bank.waddr.value), int(bank.wdata.value)
                    abits = len(bank.waddr) // nports
                    for p in range(nports):
                        strobe = (we >> (p * word_bytes)) & ((1 << word_bytes) - 1)
                        if strobe:
                            addr = (waddr >> (p * abits)) & ((1 << abits) - 1)
                            data = (wdata >> (p * word_bytes * 8)) & ((1 << (word_bytes * 8)) - 1)
                            self.beats += 1
                            self.ap.write(("mem", d, p, addr, data, strobe))


def _fields(layout) -> list[tuple[str, int, int]]:
    """(name, offset, width) of each field of an Amaranth struct layout (how a packed payload is cut)."""
    return [(name, f.offset, f.width) for name, f in layout]


def unpack(fields, value: int) -> dict:
    return {n: (value >> o) & ((1 << w) - 1) for n, o, w in fields}


class DmaMonitor(uvm_component):
    """Every DMA write beat of every device (``dev{d}.net.wr``: destination, word address, data,
    strobes, channel, operation; the source is the device) and every WAIT that retired (whether
    it blocked first); stalls of the DMA write port (valid without ready)."""

    def build_phase(self):
        self.ap = uvm_analysis_port("ap", self)
        self.dut = cocotb.top
        self.beats = 0

    async def run_phase(self):
        from hw.dma.layouts import DmaWrite
        from hw.isa import ArchParams
        devices = self.cdb_get("devices")
        arch = ArchParams.from_json(self.cdb_get("arch"))
        fields = _fields(DmaWrite(arch, self.cdb_get("bus_bits"), arch.channels))
        devs = [getattr(self.dut, f"dev{d}") for d in range(devices)]
        ports = [(d, dev.net.wr__valid, dev.net.wr__ready, dev.net.wr__payload, dev.cop.sync.blocked,
                  dev.cop.sync.sem_taken) for d, dev in enumerate(devs)]
        was_blocked = [False] * devices
        stalled = set()
        while True:
            await RisingEdge(self.dut.clk)
            await ReadOnly()
            for d, valid, ready, payload, blocked, sem_taken in ports:
                if int(valid.value):
                    if int(ready.value):
                        b = unpack(fields, int(payload.value))
                        self.beats += 1
                        coverage.sample_dma_beat(d, b["dev"], b["chan"])
                        self.ap.write(("dma", d, b["dev"], b["chan"], b["addr"], b["data"], b["be"], b["op"]))
                    elif d not in stalled:
                        stalled.add(d)
                        coverage.sample_stall(f"dma.wr{d}")
                if int(blocked.value):
                    was_blocked[d] = True
                elif int(sem_taken.value):
                    coverage.sample_wait("wait-before-signal" if was_blocked[d] else "signal-before-wait")
                    was_blocked[d] = False


class InterconnectMonitor(uvm_component):
    """The crossbar's request network: every message taken from an input queue
    (``req_in[i][j]``: source ``i``, destination ``j``) and every message delivered on an
    output (``req_out[j]``, with the ``src`` the crossbar stamped): kind (write or signal),
    channel, word address, data, strobes, operation, semaphore. Stalls of each stream
    (valid without ready) are coverage. Asleep while the crossbar is empty (``busy``)."""

    def build_phase(self):
        self.ap = uvm_analysis_port("ap", self)
        self.dut = cocotb.top
        self.delivered = 0

    async def run_phase(self):
        from hw.interconnect import NetRequest
        from hw.isa import ArchParams
        D = self.cdb_get("devices")
        arch = ArchParams.from_json(self.cdb_get("arch"))
        fields = _fields(NetRequest(arch, self.cdb_get("bus_bits"), arch.channels))
        ic = self.dut.interconnect
        ins = [(f"net.in{i}to{j}", i, j, getattr(ic, f"req_in__{i}__{j}__valid"),
                getattr(ic, f"req_in__{i}__{j}__ready"), getattr(ic, f"req_in__{i}__{j}__payload"))
               for i in range(D) for j in range(D)]
        outs = [(f"net.out{j}", j, getattr(ic, f"req_out__{j}__valid"), getattr(ic, f"req_out__{j}__ready"),
                 getattr(ic, f"req_out__{j}__payload")) for j in range(D)]
        stalled = set()
        while True:
            await RisingEdge(self.dut.clk)
            await ReadOnly()
            if not int(ic.busy.value):
                continue
            for name, i, j, valid, ready, payload in ins:
                if int(valid.value):
                    if int(ready.value):
                        m = unpack(fields, int(payload.value))
                        self.ap.write(("net_in", i, j, m))
                    elif name not in stalled:
                        stalled.add(name)
                        coverage.sample_stall(name)
            for name, j, valid, ready, payload in outs:
                if int(valid.value):
                    if int(ready.value):
                        m = unpack(fields, int(payload.value))
                        self.delivered += 1
                        coverage.sample_net(m["src"], j, "WRITE" if m["kind"] == 0 else "SIGNAL")
                        self.ap.write(("net_out", m["src"], j, m))
                    elif name not in stalled:
                        stalled.add(name)
                        coverage.sample_stall(name)


class InterconnectScoreboard(uvm_subscriber):
    """The crossbar against its own inputs: a message delivered to ``j`` stamped ``src = i``
    must be the oldest undelivered one taken from ``req_in[i][j]`` (every field but ``src``),
    and at the end nothing taken is undelivered."""

    def build_phase(self):
        self.queues: dict[tuple[int, int], list[dict]] = {}
        self.checked = self.taken = 0
        self.first_error: str | None = None
        self.corrupt = bool(os.environ.get("RESHARD_UVM_CORRUPT_NET"))

    def _fail(self, msg):
        if not self.first_error:
            self.first_error = msg
            self.logger.error(msg)

    def write(self, t):
        kind, i, j, m = t
        q = self.queues.setdefault((i, j), [])
        if kind == "net_in":
            self.taken += 1
            if self.corrupt and self.taken == 4:
                m = dict(m, data=m["data"] ^ 1)   # a deliberately wrong record (tests/test_uvm.py)
            q.append(m)
            return
        if self.first_error:
            return
        if not q:
            self._fail(f"interconnect: device {j} received a message stamped from device {i} that device "
                       f"{i} never sent to it: {m}")
            return
        want = q.pop(0)
        diff = [k for k in want if k != "src" and want[k] != m[k]]
        if diff:
            k = diff[0]
            self._fail(f"interconnect: message {self.checked} delivered from device {i} to device {j}: {k} "
                       f"{m[k]:#x}, sent {want[k]:#x} (address {want['addr']:#x})")
            return
        self.checked += 1

    def undelivered(self) -> str | None:
        for (i, j), q in sorted(self.queues.items()):
            if q:
                return f"interconnect: {len(q)} message(s) from device {i} to device {j} never delivered"
        return None


class Scoreboard(uvm_subscriber):
    """Predicts each write beat from the golden model's final memories (``expected``)."""

    def build_phase(self):
        self.expected = self.cdb_get("expected")          # per device: bytes
        self.reference = "the golden model"               # what ``expected`` comes from, for the message
        self.word_bytes = self.cdb_get("bus_bits") // 8
        self.checked = 0
        self.first_error: str | None = None

    def write(self, beat):
        if self.first_error:
            return
        _, d, port, addr, data, strobe = beat
        base = addr * self.word_bytes
        for b in range(self.word_bytes):
            if strobe >> b & 1:
                got = data >> (8 * b) & 0xFF
                want = self.expected[d][base + b]
                if got != want:
                    self.first_error = (f"device {d} write port {port}: word {addr:#x} byte {b} "
                                        f"(address {base + b:#x}) written {got:#04x}, {self.reference} "
                                        f"ends with {want:#04x}")
                    self.logger.error(self.first_error)
                    return
        self.checked += 1


class WrittenBytes(uvm_subscriber):
    """Which bytes of each device's memory some monitored SRAM write beat enabled."""

    def build_phase(self):
        self.word_bytes = self.cdb_get("bus_bits") // 8
        self.mask: dict[int, bytearray] = {}

    def write(self, beat):
        _, d, _port, addr, _data, strobe = beat
        m = self.mask.setdefault(d, bytearray())
        base = addr * self.word_bytes
        if len(m) < base + self.word_bytes:
            m.extend(bytes(base + self.word_bytes - len(m)))
        for b in range(self.word_bytes):
            if strobe >> b & 1:
                m[base + b] = 1


class TransferPredictor(uvm_driver):
    """Takes the plan's TransferItems from its sequencer; :meth:`check` checks them after the run
    (verif.transfers.check_transfer) and samples their coverage."""

    def build_phase(self):
        self.items = []
        self.beats = WrittenBytes("beats", self)

    async def run_phase(self):
        while True:
            item = await self.seq_item_port.get_next_item()
            self.items.append(item)
            self.seq_item_port.item_done()

    def check(self, manifest: dict, initial, final, bus_bytes: int) -> str | None:
        """The first transfer whose destination bytes are wrong or were never written, or None."""
        import numpy as np

        from verif.transfers import Layout, check_transfer, classify
        lay = Layout(manifest)
        initial = [np.frombuffer(bytes(m), np.uint8) for m in initial]
        final = [np.frombuffer(bytes(m), np.uint8) for m in final]
        written = []
        for d, m in enumerate(final):
            w = np.zeros(len(m), bool)
            got = np.frombuffer(bytes(self.beats.mask.get(d, b"")), np.uint8)[:len(m)]
            w[:len(got)] = got.astype(bool)
            written.append(w)
        for item in self.items:
            zero_copy, err = check_transfer(item, lay, initial, final, written)
            if err:
                return err
            row, path = classify(item, bus_bytes, zero_copy)
            coverage.sample_transfer(path, "strided" if item.rows > 1 else "one-row", row)
        return None


class ReshardEnv(uvm_env):
    def build_phase(self):
        self.seqr = uvm_sequencer("seqr", self)
        self.driver = HostDriver("driver", self)
        self.monitor = WriteBeatMonitor("monitor", self)
        self.dma_monitor = DmaMonitor("dma_monitor", self)
        self.net_monitor = InterconnectMonitor("net_monitor", self)
        self.net_scoreboard = InterconnectScoreboard("net_scoreboard", self)
        self.scoreboard = Scoreboard("scoreboard", self) if self.cdb_get("expected") is not None else None
        # plan transfers (verif.sequences.PlanTransferSeq) go to the predictor through their own sequencer
        self.xfer_seqr = uvm_sequencer("xfer_seqr", self)
        self.xfers = TransferPredictor("xfers", self)

    def connect_phase(self):
        self.driver.seq_item_port.connect(self.seqr.seq_item_export)
        self.xfers.seq_item_port.connect(self.xfer_seqr.seq_item_export)
        self.net_monitor.ap.connect(self.net_scoreboard.analysis_export)
        self.monitor.ap.connect(self.xfers.beats.analysis_export)
        if self.scoreboard:
            self.monitor.ap.connect(self.scoreboard.analysis_export)
