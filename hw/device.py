"""One device: memory, MMU, DMA, coprocessor and a port on the interconnect.

::

                 +-------------------------------------------------+
     host -----> | HostPort --> Coprocessor --desc--> DMA --rd--> BankedMemory
                 |                  |  \\--cmd--> MMU <--xlat--/ |   ^     ^
                 |                  sig          wr: local ------+---/     |
                 |                   \\          wr: remote -> out FIFO --> net_out
     net_in -----+--- write -> memory write port 1, ack -> ack_out         |
                 |--- signal -> semaphores              ack_in -> DMA wr_ack
                 +-------------------------------------------------+

Local write beats (``dev`` = this device) go straight into memory write port
0 and are acknowledged in the same cycle; remote beats and SIGNAL messages
leave through a FIFO on ``net_out``. Incoming remote beats are written into
memory write port 1 and acknowledged on ``ack_out`` in the cycle they are
accepted (so an ack means "visible"). Acks of this device's remote writes
arrive on ``ack_in`` and share the DMA's ``wr_ack`` with local acks (local
first).
"""
from __future__ import annotations

from amaranth.hdl import Cat, Elaboratable, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from .coprocessor import Coprocessor, StatusCode
from .dma import DMA
from .hostport import ADDR_WIDTH, AxiLiteSignature, HostPort
from .interconnect import NetAck, NetKind, NetRequest
from .isa import ArchParams
from .lib import check_bus_width
from .memory import BankedMemory
from .mmu import MMU

__all__ = ["Device"]


class _CommitBytes(Elaboratable):
    """Sum of the page sizes of the valid staged entries of context ``ctx``
    that map memory of device ``me`` (the zero-copy bytes a COMMIT activates)."""

    def __init__(self, arch, me, entries, ctx):
        self.arch, self.me, self.entries, self.ctx = arch, me, entries, ctx
        self.total = Signal(48)

    def elaborate(self, platform):
        m = Module()
        ps = self.arch.page_sizes
        terms = []
        for e in self.entries:
            size_bytes = Mux(e.size[1], Mux(e.size[0], ps[3], ps[2]), Mux(e.size[0], ps[1], ps[0]))
            terms.append(Mux(e.valid & e.staged & (e.ctx == self.ctx) & (e.dev == self.me),
                             size_bytes, 0))
        total = terms[0]
        for t in terms[1:]:
            total = total + t
        m.d.comb += self.total.eq(total)
        return m


class Device(wiring.Component):
    """A device: BankedMemory + MMU + DMA + Coprocessor + HostPort + network port.

    Parameters
    ----------
    arch : :class:`hw.isa.ArchParams`
    index : int
        This device's number on the interconnect.
    data_width : int
        Memory and DMA bus width in bits (32, 64, 128, 256).
    program : list of int
        Initial instruction memory.
    memory : bytes-like
        Initial physical memory (zero-padded to ``arch.mem_bytes``).
    banks : int
        Memory banks (a power of two).
    outstanding, burst_len : int
        DMA read credits and maximum burst (default: 16 beats, or fewer so a
        burst fits the smallest page).
    net_depth : int
        Depth of each outgoing per-destination queue (at least 2).
    ack_depth : int
        Depth of the FIFO of incoming acks (at least 2).
    desc_depth : int
        Coprocessor per-channel descriptor queue depth.
    fault_depth : int
        Coprocessor fault-record FIFO depth.
    sram_macro : bool
        Memory banks as ``reshard_sram`` macro instances (for the emitted Verilog).

    Interface attributes
    --------------------
    net_out : ``Out(stream.Signature(NetRequest(...))).array(devices)``
        Remote write beats and SIGNALs to the interconnect, one queue per
        destination device (``net_out[j]``: messages for device ``j``).
    net_in : ``In(stream.Signature(NetRequest(...)))``
        Messages for this device.
    ack_out : ``Out(stream.Signature(NetAck(...)))``
        Acks of incoming write beats, to their source.
    ack_in : ``In(stream.Signature(NetAck(...)))``
        Acks of this device's remote write beats.
    start : ``In(1)``
        Start the program (or-ed with the host port's start).
    quiesced, step_mode, step_grant : ``In(1)``
        To the coprocessor (quiescence abort, lock-step mode).
    step_ack : ``Out(1)``
        From the coprocessor.
    running : ``Out(1)``
        The coprocessor is running.
    stuck : ``Out(1)``
        Stopped or blocked in an unsatisfied WAIT.
    quiet : ``Out(1)``
        Every DMA channel has completed its descriptors, no MMU command is
        pending and the outgoing queues are empty.
    host : ``In(AxiLiteSignature(...))``
        The host port (AXI4-Lite slave).
    """

    def __init__(self, arch, *, index=0, data_width=64, program=(), memory=b"", banks=1,
                 outstanding=8, burst_len=None, net_depth=16, ack_depth=16, desc_depth=16,
                 fault_depth=16, sram_macro=False):
        if not isinstance(arch, ArchParams):
            raise TypeError(f"arch must be an ArchParams, not {arch!r}")
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < arch.devices:
            raise ValueError(f"Device index must be an integer in 0..{arch.devices - 1}, "
                             f"not {index!r}")
        check_bus_width(data_width)
        if not isinstance(net_depth, int) or isinstance(net_depth, bool) or net_depth < 2:
            raise ValueError(f"Network FIFO depth must be an integer of at least 2, "
                             f"not {net_depth!r}")
        if not isinstance(ack_depth, int) or isinstance(ack_depth, bool) or ack_depth < 2:
            raise ValueError(f"Ack FIFO depth must be an integer of at least 2, not {ack_depth!r}")
        B = data_width // 8
        if burst_len is None:
            burst_len = max(1, min(16, arch.page_sizes[0] // B))
        self._arch = arch
        self._index = index
        self._data_width = data_width
        self._net_depth = net_depth
        self._ack_depth = ack_depth
        self.mem = BankedMemory(data_width=data_width, size=arch.mem_bytes, banks=banks,
                                read_ports=2, write_ports=3,
                                init=b"" if sram_macro else memory, macro=sram_macro)
        self.mmu = MMU(arch, local_dev=index, tag_width=4)
        self.dma = DMA(arch, data_width=data_width, outstanding=outstanding,
                       burst_len=burst_len, xlat_tag_width=4)
        self.cop = Coprocessor(arch, device=index, data_width=data_width, program=program,
                               fault_depth=fault_depth, desc_depth=desc_depth)
        self.hostport = HostPort(self.cop, data_width=data_width)
        req = stream.Signature(NetRequest(arch, data_width, arch.channels))
        ack = stream.Signature(NetAck(arch, arch.channels))
        super().__init__({
            "net_out": Out(req).array(arch.devices),
            "net_in": In(req),
            "ack_out": Out(ack),
            "ack_in": In(ack),
            "start": In(1),
            "quiesced": In(1),
            "step_mode": In(1),
            "step_grant": In(1),
            "step_ack": Out(1),
            "running": Out(1),
            "stuck": Out(1),
            "quiet": Out(1),
            "host": In(AxiLiteSignature(ADDR_WIDTH)),
        })

    arch = property(lambda self: self._arch, doc="The architectural parameters.")
    index = property(lambda self: self._index, doc="This device's number.")
    data_width = property(lambda self: self._data_width, doc="Bus width in bits.")

    def elaborate(self, platform):
        m = Module()
        arch = self._arch
        me = self._index
        m.submodules.mem = mem = self.mem
        m.submodules.mmu = mmu = self.mmu
        m.submodules.dma = dma = self.dma
        m.submodules.cop = cop = self.cop
        m.submodules.hostport = hp = self.hostport

        # The glue is split into small modules by what changes together: the
        # simulator re-evaluates a module's whole combinational logic when any
        # of its inputs changes, so one big glue module would run many times
        # a cycle for nothing.
        def glue(name):
            g = Module()
            m.submodules[name] = g
            return g

        # host port <-> coprocessor
        g = glue("glue_host")
        wiring.connect(g, wiring.flipped(self.host), hp.bus)
        wiring.connect(g, hp.imem_w, cop.imem_w)
        wiring.connect(g, cop.fault_rd, hp.fault_rd)
        g.d.comb += [hp.status.eq(cop.status), hp.cause.eq(cop.cause), hp.pc.eq(cop.pc),
                     hp.fault_overflow.eq(cop.fault_overflow), hp.cycles.eq(cop.cycles),
                     hp.descriptors.eq(cop.descriptors), hp.bytes_remapped.eq(cop.bytes_remapped)]
        g.d.comb += [hp.chan_bytes[c].eq(cop.chan_bytes[c]) for c in range(arch.channels)]
        # the host's window onto data memory and the TLB (loading images, reading results)
        wiring.connect(g, hp.mem_w, mem.write[2])
        wiring.connect(g, hp.mem_r, mem.read[1])
        g.d.comb += [mmu.tlb_index.eq(hp.tlb_index), hp.tlb_entry.eq(mmu.tlb_entry)]

        # coprocessor <-> DMA, MMU, system
        g = glue("glue_ctl")
        wiring.connect(g, cop.desc, dma.desc)
        wiring.connect(g, cop.mmu_cmd, mmu.cmd)
        wiring.connect(g, dma.fault, cop.dma_fault)
        g.d.comb += [
            dma.clear.eq(cop.dma_clear),
            dma.flush.eq(cop.dma_flush),
            cop.mmu_idle.eq(mmu.idle),
            cop.start.eq(self.start | hp.start),
            cop.quiesced.eq(self.quiesced),
            cop.step_mode.eq(self.step_mode),
            cop.step_grant.eq(self.step_grant),
            self.step_ack.eq(cop.step_ack),
            self.running.eq(cop.status == StatusCode.RUNNING),
            self.stuck.eq((cop.status != StatusCode.RUNNING) | cop.blocked),
            mmu.fault.ready.eq(1),          # the DMA's records (with channel) are the ones kept
            mmu.fault_clear.eq(0),
        ]
        g = glue("glue_status")
        for c in range(arch.channels):
            g.d.comb += cop.chan_status[c].eq(dma.status[c])

        # DMA <-> MMU, memory read port
        g = glue("glue_xlat")
        # the request payload is zeroed while not valid (a don't-care): the MMU's
        # large lookup logic then changes only around translations in simulation
        g.d.comb += [
            mmu.req.valid.eq(dma.xlat_req.valid),
            mmu.req.payload.eq(Mux(dma.xlat_req.valid, dma.xlat_req.payload, 0)),
            dma.xlat_req.ready.eq(mmu.req.ready),
        ]
        wiring.connect(g, mmu.rsp, dma.xlat_rsp)
        g = glue("glue_rd")
        wiring.connect(g, dma.rd, mem.read[0])

        # zero-copy bytes of a COMMIT (own module: recomputed only when the TLB changes)
        m.submodules.commit_bytes = cb = _CommitBytes(arch, me, mmu.entries, cop.commit_ctx)
        g = glue("glue_commit")
        g.d.comb += cop.commit_bytes.eq(cb.total)

        # DMA write beats: local into memory port 0, remote into the outgoing FIFO
        g = glue("glue_wr")
        wr = dma.wr
        local = Signal()
        local_fire = Signal()
        g.d.comb += [local.eq(wr.p.dev == me), local_fire.eq(wr.valid & local)]
        g.d.comb += [
            mem.write[0].valid.eq(local_fire),
            mem.write[0].p.addr.eq(wr.p.addr),
            mem.write[0].p.data.eq(wr.p.data),
            mem.write[0].p.be.eq(wr.p.be),
            cop.beat_valid.eq(wr.valid & wr.ready),
            cop.beat_chan.eq(wr.p.chan),
            cop.beat_be.eq(wr.p.be),
        ]
        layout = NetRequest(arch, self._data_width, arch.channels)
        D = arch.devices
        voqs = []
        for j in range(D):
            # one queue per destination; the one to this device carries only SIGNALs
            q = SyncFIFOBuffered(width=layout.size, depth=4 if j == me else self._net_depth)
            m.submodules[f"voq{j}"] = q
            voqs.append(q)
        msg = Signal(layout)
        remote_v = Signal()
        g.d.comb += remote_v.eq(wr.valid & ~local)
        with g.If(remote_v):
            g.d.comb += [msg.dst.eq(wr.p.dev), msg.kind.eq(NetKind.WRITE), msg.chan.eq(wr.p.chan),
                         msg.addr.eq(wr.p.addr), msg.data.eq(wr.p.data), msg.be.eq(wr.p.be)]
        with g.Else():
            g.d.comb += [msg.dst.eq(cop.sig.p.dev), msg.kind.eq(NetKind.SIGNAL),
                         msg.sem.eq(cop.sig.p.sem)]
        w_ready = Signal()
        for j, q in enumerate(voqs):
            g.d.comb += [q.w_stream.payload.eq(msg),
                         q.w_stream.valid.eq((remote_v | cop.sig.valid) & (msg.dst == j))]
            with g.If(msg.dst == j):
                g.d.comb += w_ready.eq(q.w_stream.ready)
        g.d.comb += [
            wr.ready.eq(local | w_ready),
            cop.sig.ready.eq(~remote_v & w_ready),
        ]
        # acks: local beats are visible when accepted; remote ones when acked. The
        # DMA takes one ack a cycle, local ones first: remote acks wait in a FIFO so
        # that a burst of local writes never holds up the interconnect.
        m.submodules.ack_fifo = afifo = SyncFIFOBuffered(width=len(self.ack_in.p.chan),
                                                         depth=self._ack_depth)
        g.d.comb += [
            dma.wr_ack.valid.eq(local_fire | afifo.r_stream.valid),
            dma.wr_ack.p.eq(Mux(local_fire, wr.p.chan, afifo.r_stream.payload)),
            afifo.r_stream.ready.eq(~local_fire),
        ]
        g = glue("glue_ack")
        g.d.comb += [
            afifo.w_stream.valid.eq(self.ack_in.valid),
            afifo.w_stream.payload.eq(self.ack_in.p.chan),
            self.ack_in.ready.eq(afifo.w_stream.ready),
        ]
        for j, q in enumerate(voqs):
            g = glue(f"glue_out{j}")
            wiring.connect(g, q.r_stream, wiring.flipped(self.net_out[j]))

        # incoming: writes into memory port 1 (acked when accepted), signals
        m.submodules.ack_out_fifo = aofifo = SyncFIFOBuffered(width=NetAck(arch, arch.channels).size,
                                                              depth=4)
        g = glue("glue_in")
        nin = self.net_in
        is_write = Signal()
        ack = Signal(NetAck(arch, arch.channels))
        g.d.comb += [is_write.eq(nin.p.kind == NetKind.WRITE),
                     ack.dst.eq(nin.p.src), ack.chan.eq(nin.p.chan)]
        g.d.comb += [
            mem.write[1].valid.eq(nin.valid & is_write & aofifo.w_stream.ready),
            mem.write[1].p.addr.eq(nin.p.addr),
            mem.write[1].p.data.eq(nin.p.data),
            mem.write[1].p.be.eq(nin.p.be),
            aofifo.w_stream.valid.eq(nin.valid & is_write),
            aofifo.w_stream.payload.eq(ack),
            cop.sig_in.valid.eq(nin.valid & ~is_write),
            cop.sig_in.p.eq(nin.p.sem),
            nin.ready.eq(Mux(is_write, aofifo.w_stream.ready, 1)),
        ]
        g = glue("glue_ack_out")
        wiring.connect(g, aofifo.r_stream, wiring.flipped(self.ack_out))

        g = glue("glue_quiet")
        g.d.comb += self.quiet.eq(cop.copies_done & mmu.idle
                                  & Cat(*[q.level == 0 for q in voqs]).all())
        return m
