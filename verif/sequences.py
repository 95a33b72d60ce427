"""Sequences: register accesses, program loads, runs; the replay of a compiled reshard.

Every bus interaction is a :class:`verif.items.HostTxn` the driver carries out
through cocotbext-axi; a program is loaded as :class:`verif.items.InsnItem`
words written to ``IMEM_ADDR`` / ``IMEM_DATA0..7`` exactly as hw/hostport.py
documents, then started with ``CTRL.start`` and polled through ``STATUS``.
"""
from __future__ import annotations

from pyuvm import uvm_sequence

from hw.hostport import decode as decode_reg
from hw.hostport import encode as encode_reg
from hw.hostport import register
from hw.isa import Status
from verif import coverage
from verif.items import HostTxn, InsnItem, TransferItem


class HostSeq(uvm_sequence):
    """A sequence with register helpers; each access waits for its response."""

    async def reg_write(self, device: int, name: str, value: int, strobe: int = 0xF) -> HostTxn:
        txn = HostTxn("w", device, True, register(name).offset, value & 0xFFFFFFFF, strobe, name)
        await self.start_item(txn)
        await self.finish_item(txn)
        return txn

    async def reg_read(self, device: int, name: str) -> HostTxn:
        txn = HostTxn("r", device, False, register(name).offset, reg=name)
        await self.start_item(txn)
        await self.finish_item(txn)
        return txn


class PlanTransferSeq(uvm_sequence):
    """A compiled reshard's plan, one :class:`verif.items.TransferItem` per run (source and
    destination rank, offsets, rows, row bytes, strides), to the transfer predictor."""

    def __init__(self, name, items: list[TransferItem]):
        super().__init__(name)
        self.items = items

    async def body(self):
        for item in self.items:
            await self.start_item(item)
            await self.finish_item(item)


class ProgramLoadSeq(HostSeq):
    """Write a program's words into one device's instruction memory, from word 0."""

    def __init__(self, name, device: int, words: list[int], bus_bytes: int):
        super().__init__(name)
        self.device, self.words, self.bus_bytes = device, words, bus_bytes

    async def body(self):
        await self.reg_write(self.device, "IMEM_ADDR", 0)
        for w in self.words:
            coverage.sample_insn(InsnItem.from_word(w), self.bus_bytes)
            for i in range(8):
                r = await self.reg_write(self.device, f"IMEM_DATA{i}", (w >> (32 * i)) & 0xFFFFFFFF)
                if r.resp:
                    raise AssertionError(f"device {self.device}: IMEM_DATA{i} write answered {r.resp}")


class RunSeq(HostSeq):
    """Start every device, poll each STATUS until it leaves RUNNING; ``self.status`` per device."""

    def __init__(self, name, devices: int, max_polls: int = 100000):
        super().__init__(name)
        self.devices, self.max_polls = devices, max_polls
        self.status: list[dict] = []

    async def body(self):
        for d in range(self.devices):
            await self.reg_write(d, "CTRL", encode_reg("CTRL", start=1))
        self.status = []
        for d in range(self.devices):
            for _ in range(self.max_polls):
                st = decode_reg("STATUS", (await self.reg_read(d, "STATUS")).rdata)
                if st["status"] != Status.RUNNING:
                    break
            else:
                raise AssertionError(f"device {d} still RUNNING after {self.max_polls} STATUS polls")
            st["cycles"] = (await self.reg_read(d, "CYCLES_LO")).rdata
            st["descriptors"] = (await self.reg_read(d, "DESCRIPTORS")).rdata
            self.status.append(st)


class FaultDrainSeq(HostSeq):
    """Pop every fault record of one device: (chan, ctx, cause, va) in order."""

    def __init__(self, name, device: int):
        super().__init__(name)
        self.device = device
        self.faults: list[tuple] = []

    async def body(self):
        for _ in range(64):
            info = decode_reg("FAULT_INFO", (await self.reg_read(self.device, "FAULT_INFO")).rdata)
            if not info["valid"]:
                return
            lo = (await self.reg_read(self.device, "FAULT_VA")).rdata
            hi = (await self.reg_read(self.device, "FAULT_VA_HI")).rdata
            self.faults.append((info["chan"], info["ctx"], info["cause"], hi << 32 | lo))
            await self.reg_write(self.device, "FAULT_POP", 1)


class MemReadSeq(HostSeq):
    """Read words back through the memory window (MEM_ADDR, MEM_READ, MEM_RDATA*)."""

    def __init__(self, name, device: int, words: list[int], bus_bytes: int):
        super().__init__(name)
        self.device, self.words, self.bus_bytes = device, words, bus_bytes
        self.data: dict[int, bytes] = {}

    async def body(self):
        lanes = self.bus_bytes // 4
        for w in self.words:
            await self.reg_write(self.device, "MEM_ADDR", w)
            await self.reg_write(self.device, "MEM_READ", 1)
            parts = [(await self.reg_read(self.device, f"MEM_RDATA{i}")).rdata for i in range(lanes)]
            self.data[w] = b"".join(p.to_bytes(4, "little") for p in parts)


class RegisterSweepSeq(HostSeq):
    """Every register read and written (full strobe); every writable one written with every
    4-bit byte strobe (1..15, with holes too). A read-write register is read back after each
    strobed write: the enabled bytes must hold the new value, the others the old one (byte
    strobes are honoured, docs/regmap.md), within the field's width.

    Writes choose harmless values (no start, instruction and memory words of zeros near index
    0 of an idle device); ``self.log`` keeps every (txn, expected resp), ``self.readback``
    every (register, strobe, read, expected)."""

    PATTERN = 0xA5C3_5A3C

    def __init__(self, name, device: int):
        super().__init__(name)
        self.device = device
        self.log: list[tuple[HostTxn, int | None]] = []
        self.readback: list[tuple[str, int, int, int]] = []

    async def body(self):
        from hw.hostport import OKAY, REGISTERS, SLVERR
        for r in REGISTERS:
            self.log.append((await self.reg_read(self.device, r.name), OKAY if r.access != "WO" else None))
        for r in REGISTERS:
            value = 0 if r.access != "RO" else 0xFFFFFFFF
            want = SLVERR if r.access == "RO" else OKAY
            self.log.append((await self.reg_write(self.device, r.name, value), want))
        # read-write registers first (their values then back to 0), then the write-only ones with zeros
        for r in sorted((r for r in REGISTERS if r.access in ("RW", "WO")), key=lambda r: r.access != "RW"):
            width = sum(f.width for f in r.fields)
            fmask = (1 << width) - 1 if width < 32 else 0xFFFFFFFF
            held = (await self.reg_read(self.device, r.name)).rdata if r.access == "RW" else 0
            for strobe in range(1, 16):
                value = (self.PATTERN ^ (strobe * 0x1111_1111)) & 0xFFFFFFFF if r.access == "RW" else 0
                self.log.append((await self.reg_write(self.device, r.name, value, strobe=strobe), OKAY))
                if r.access == "RW":
                    bmask = sum(0xFF << (8 * b) for b in range(4) if strobe >> b & 1)
                    held = ((held & ~bmask) | (value & bmask)) & fmask
                    got = (await self.reg_read(self.device, r.name)).rdata
                    self.readback.append((r.name, strobe, got, held))
            if r.access == "RW":
                self.log.append((await self.reg_write(self.device, r.name, 0), OKAY))
