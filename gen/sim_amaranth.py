"""Run programs on the RTL (``hw.system.System``) in the Amaranth simulator.

:func:`run_amaranth` takes a compiled directory (``gen.artifacts.load_compiled``)
and returns its :class:`gen.result.RunResult` (the type every executor returns):
final memories, TLBs, statuses, fault records and counters, read back from
the simulated hardware, plus ``cycles`` (the longest-running device's cycle
counter), ``lower_bound_cycles`` (bytes through the busiest port of any device
divided by the bus bytes per beat) and the simulator's speed.

:func:`run_system` is the engine underneath, for any ``ArchParams``, programs
and memories (the tests use it with hypothesis-generated programs; with
``lockstep=True`` the system follows the golden model's schedule exactly).
"""
from __future__ import annotations

import time

import numpy as np

from gen.result import RunResult
from hw.isa import Cause, Status

__all__ = ["run_system", "run_amaranth", "lower_bound_cycles", "read_memory", "axi_read",
           "axi_write", "read_fault_records"]


def _memdata_words(ctx, memdata) -> list[int]:
    """All words of a ``MemoryData``, read through the testbench API (``ctx.get``)."""
    get = ctx.get
    return [int(get(memdata[i])) for i in range(memdata.depth)]


def read_memory(ctx, mem) -> np.ndarray:
    """The whole contents of a ``hw.memory.BankedMemory`` as a uint8 array."""
    B = mem.data_width // 8
    banks = [_memdata_words(ctx, d) for d in mem.bank_data]
    nb = len(banks)
    words = [banks[w % nb][w // nb] for w in range(mem.words)]
    raw = b"".join(int(w).to_bytes(B, "little") for w in words)
    return np.frombuffer(raw, dtype=np.uint8).copy()


async def axi_write(ctx, bus, addr, data, strb=0xF):
    """One AXI4-Lite write from a testbench (we are the master); returns BRESP.
    ``strb``: the byte strobes (WSTRB)."""
    ctx.set(bus.awaddr, addr)
    ctx.set(bus.awvalid, 1)
    ctx.set(bus.wdata, data)
    ctx.set(bus.wstrb, strb)
    ctx.set(bus.wvalid, 1)
    ctx.set(bus.bready, 1)
    while True:
        _, _, awr, wr, bv, bresp = await ctx.tick().sample(bus.awready, bus.wready, bus.bvalid,
                                                           bus.bresp)
        if awr:
            ctx.set(bus.awvalid, 0)
        if wr:
            ctx.set(bus.wvalid, 0)
        if bv:
            ctx.set(bus.bready, 0)
            return int(bresp)


async def axi_read(ctx, bus, addr):
    """One AXI4-Lite read from a testbench; returns ``(RDATA, RRESP)``."""
    ctx.set(bus.araddr, addr)
    ctx.set(bus.arvalid, 1)
    ctx.set(bus.rready, 1)
    while True:
        _, _, arr, rv, rdata, rresp = await ctx.tick().sample(bus.arready, bus.rvalid, bus.rdata,
                                                              bus.rresp)
        if arr:
            ctx.set(bus.arvalid, 0)
        if rv:
            ctx.set(bus.rready, 0)
            return int(rdata), int(rresp)


async def read_fault_records(ctx, bus, device):
    """Pop every fault record of one device through its host port (fields decoded
    by ``hw.hostport.decode``, from the register table)."""
    from hw.hostport import decode, register
    out = []

    async def read(name):
        return decode(name, (await axi_read(ctx, bus, register(name).offset))[0])
    while True:
        if not (await read("STATUS"))["fault_valid"]:
            return out
        info = await read("FAULT_INFO")
        lo, hi = (await read("FAULT_VA"))["va"], (await read("FAULT_VA_HI"))["va"]
        await axi_write(ctx, bus, register("FAULT_POP").offset, 0)
        out.append({"device": device, "channel": info["chan"], "ctx": info["ctx"],
                    "va": hi << 32 | lo, "cause": Cause(info["cause"]).name})


def _read_tlb(ctx, mmu, arch):
    p0_bits = arch.page_sizes[0].bit_length() - 1
    out = []
    for i, e in enumerate(mmu.entries):
        if not ctx.get(e.valid):
            continue
        out.append({"index": i, "ctx": int(ctx.get(e.ctx)), "staged": int(ctx.get(e.staged)),
                    "size": int(ctx.get(e.size)), "va": int(ctx.get(e.vpn)) << p0_bits,
                    "pa": int(ctx.get(e.ppn)) << p0_bits, "dev": int(ctx.get(e.dev)),
                    "perm": int(ctx.get(e.perm))})
    return out


def run_system(arch, programs, memories, *, data_width=64, lockstep=False, vcd=None,
               progress=None, max_cycles=50_000_000, chunk=256, **device_kw) -> RunResult:
    """Build a :class:`hw.system.System`, run every program to the end, read it back.

    Returns a :class:`gen.result.RunResult` with the end state, ``semaphores``,
    ``fault_overflow`` and ``cycles_per_device`` of every device, ``sim_cycles``,
    ``sim_cycles_per_s``, ``elaborate_seconds`` and ``seconds``.
    """
    from amaranth.sim import Simulator

    from hw.system import System
    t_start = time.perf_counter()
    system = System(arch, data_width=data_width, programs=programs, memories=memories,
                    **device_kw)
    sim = Simulator(system)
    sim.add_clock(1e-8)
    out: dict = {}
    t_run = [0.0]

    async def bench(ctx):
        t_run[0] = time.perf_counter()
        ctx.set(system.step_mode, int(lockstep))
        ctx.set(system.start, 1)
        await ctx.tick()
        ctx.set(system.start, 0)
        n = 1
        last_report = time.perf_counter()
        while not ctx.get(system.done):
            await ctx.tick().repeat(chunk)
            n += chunk
            if n > max_cycles:
                raise RuntimeError(f"RTL simulation exceeded {max_cycles} cycles")
            now = time.perf_counter()
            if progress is not None and now - last_report > 2.0:
                last_report = now
                progress(f"sim: {n:,} cycles, {n / (now - t_run[0]):,.0f} cycles/s")
        t_run[0] = time.perf_counter() - t_run[0]
        out["sim_cycles"] = n
        devs = system.devices
        out["status"] = [Status(int(ctx.get(d.cop.status))).name for d in devs]
        out["cause"] = [Cause(int(ctx.get(d.cop.cause))).name for d in devs]
        out["pc"] = [int(ctx.get(d.cop.pc)) for d in devs]
        out["cycles_per_device"] = [int(ctx.get(d.cop.cycles)) for d in devs]
        out["bytes_copied"] = [sum(int(ctx.get(c)) for c in d.cop.chan_bytes) for d in devs]
        out["descriptors"] = [int(ctx.get(d.cop.descriptors)) for d in devs]
        out["bytes_remapped"] = [int(ctx.get(d.cop.bytes_remapped)) for d in devs]
        out["semaphores"] = [[int(ctx.get(s)) for s in d.cop.semaphores] for d in devs]
        out["fault_overflow"] = [int(ctx.get(d.cop.fault_overflow)) for d in devs]
        out["tlb"] = [_read_tlb(ctx, d.mmu, arch) for d in devs]
        faults = []
        for di in range(len(devs)):
            faults += await read_fault_records(ctx, system.host[di], di)
        out["faults"] = sorted(faults, key=lambda f: (f["device"], f["channel"], f["va"]))
        out["memories"] = [read_memory(ctx, d.mem) for d in devs]

    sim.add_testbench(bench)
    t_elab = time.perf_counter() - t_start
    if vcd:
        from pathlib import Path
        Path(vcd).parent.mkdir(parents=True, exist_ok=True)
        with sim.write_vcd(str(vcd)):
            sim.run()
    else:
        sim.run()
    return RunResult(
        "amaranth", out["memories"], out["tlb"], out["status"], out["cause"], out["pc"], out["faults"],
        out["bytes_copied"], out["descriptors"], out["bytes_remapped"],
        fault_overflow=out["fault_overflow"], semaphores=out["semaphores"],
        cycles_per_device=out["cycles_per_device"], sim_cycles=out["sim_cycles"],
        sim_cycles_per_s=out["sim_cycles"] / t_run[0] if t_run[0] > 0 else 0.0,
        elaborate_seconds=t_elab, seconds=time.perf_counter() - t_start)


def lower_bound_cycles(manifest: dict) -> int:
    """Max over devices and ports (memory read, memory write, network out,
    network in) of the bytes through the port divided by the bus bytes per beat."""
    bus_bytes = manifest["bus_bits"] // 8
    best = 0
    for dev in manifest["devices"]:
        ports = dev.get("report", {}).get("port_bytes", {})
        for v in ports.values():
            best = max(best, -(-int(v) // bus_bytes))
    return best


def run_amaranth(loaded, vcd=None, progress=None, **kw) -> RunResult:
    """Run a compiled directory on the RTL; its :class:`gen.result.RunResult`."""
    res = run_system(loaded.arch, loaded.programs, loaded.memories,
                     data_width=loaded.manifest["bus_bits"], vcd=vcd, progress=progress, **kw)
    res.lower_bound_cycles = lower_bound_cycles(loaded.manifest)
    return res
