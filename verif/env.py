"""The environment: AXI4-Lite driver (cocotbext-axi), write-beat monitors, golden scoreboard, coverage.

- :class:`HostDriver` turns :class:`verif.items.HostTxn` into AXI4-Lite accesses
  through ``cocotbext.axi.AxiLiteMaster``, one master per device, optionally
  with back-pressure on the read-data and write-response channels;
- :class:`WriteBeatMonitor` samples every device's SRAM write ports each cycle
  (word address, data, byte strobes, port) and its network input (address,
  data, strobes, channel), and publishes the beats;
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
                data = txn.data.to_bytes(4, "little")[lo:lo + n]
                r = await m.write(txn.addr + lo, data)
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


class Scoreboard(uvm_subscriber):
    """Predicts each write beat from the golden model's final memories (``expected``)."""

    def build_phase(self):
        self.expected = self.cdb_get("expected")          # per device: bytes
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
                                        f"(address {base + b:#x}) written {got:#04x}, the golden model "
                                        f"ends with {want:#04x}")
                    self.logger.error(self.first_error)
                    return
        self.checked += 1


class ReshardEnv(uvm_env):
    def build_phase(self):
        self.seqr = uvm_sequencer("seqr", self)
        self.driver = HostDriver("driver", self)
        self.monitor = WriteBeatMonitor("monitor", self)
        self.scoreboard = Scoreboard("scoreboard", self) if self.cdb_get("expected") is not None else None

    def connect_phase(self):
        self.driver.seq_item_port.connect(self.seqr.seq_item_export)
        if self.scoreboard:
            self.monitor.ap.connect(self.scoreboard.analysis_export)
