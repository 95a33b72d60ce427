r"""One device: memory, MMU, DMA, coprocessor and a port on the interconnect.

::

              +--------------------------------------------------------------+
   host ----> | HostPort --imem/regs--> Coprocessor --desc--> DMA --rd--> BankedMemory
              |    |  \--mem window----------------------------------------> (ports r1, w2)
              |    \--tlb read-back--> MMU <--cmd--/   |  \--xlat--> MMU     ^  ^
              |                    (PLACE) \--> CommitBytes --> Coprocessor    |  |
              |                 Coprocessor --sig--+   DMA --wr--+           |  |
              |                                    v             v           |  |
              |              NetworkPort: local beats ---------------------> w0  |
              |                           remote and reduce beats, signals -> queues -> net_out[j]
   net_in --> |                           incoming writes -------------------> w1, acks -> ack_out
              |                           incoming reduce beats -> ReduceOnWrite -> r2, w3, acks
              |                           incoming signals -> Coprocessor.sig_in
   ack_in --> |                           acks -> DMA wr_ack (local first)
              +--------------------------------------------------------------+

:class:`NetworkPort` routes the DMA's write beats (local ones into memory
write port 0, straight or, with a shared write port, through a register
slice, acknowledged when the memory takes them; remote ones, reduce
beats (ISA v2) wherever they go, and SIGNALs through one queue per
destination) and serves the network side (incoming beats into write port 1,
acknowledged when accepted, so an ack means "visible"; incoming reduce beats
through a read-add-write unit on read port 2 and write port 3, acknowledged
when their sums are written). :class:`CommitBytes` sums the local staged pages of the context a
COMMIT activates, while the MMU places it (the coprocessor's ``bytes_remapped``). The MMU's own fault
queue is not used: the DMA's fault records (with their channel) are the ones
the coprocessor keeps.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from .coprocessor import Coprocessor, SignalMessage, StatusCode
from .coprocessor.counters import commit_bytes_shape
from .dma import DMA, DmaWrite
from .hostport import ADDR_WIDTH, AxiLiteSignature, HostPort
from .interconnect import NetAck, NetKind, NetRequest
from .isa import check_arch
from .lib import Queue, RegisterSlice, chan_bits, check_bus_width, ctx_bits, page_bytes, sem_bits
from .memory import BankedMemory, ReadPortSignature, WritePortSignature, WriteRequest
from .mmu import MMU, TlbEntry
from .reduce import ReduceOnWrite, ReduceOp

__all__ = ["Device", "CommitBytes", "NetworkPort"]

#: Depth of the queues that only decouple a handoff: signals to this device
#: itself, and acks of incoming writes.
HANDOFF_DEPTH = 4


class CommitBytes(wiring.Component):
    """The zero-copy bytes a COMMIT of context ``ctx`` makes active: the sum of
    the page sizes of the valid staged TLB entries of ``ctx`` that map memory
    of this device (decoded with :func:`hw.lib.page_bytes`).

    Two registers: each entry's term is registered at the edge that ends a
    cycle with ``place`` high (the MMU placing the COMMIT: the entries and
    ``ctx`` are then the TLB it acts on), their sum at the next edge; so
    ``total`` holds the sum from the second cycle after ``place``. ``busy``
    is high while a sum is on its way.

    Parameters
    ----------
    arch : :class:`hw.isa.ArchParams`
    local_dev : int
        This device's number.

    Interface attributes
    --------------------
    entries : ``In(TlbEntry(arch)).array(tlb_entries)``
        The TLB.
    ctx : ``In(ctx bits)``
    place : ``In(1)``
    total : ``Out(commit_bytes_shape(arch))``
    busy : ``Out(1)``
    """

    def __init__(self, arch, local_dev):
        self._arch = arch
        self._local_dev = local_dev
        super().__init__({
            "entries": In(TlbEntry(arch)).array(arch.tlb_entries),
            "ctx": In(ctx_bits(arch)),
            "place": In(1),
            "total": Out(commit_bytes_shape(arch)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        # counted in smallest pages (short adders), in a balanced tree
        sizes = self._arch.page_sizes
        units = tuple(p // sizes[0] for p in sizes)
        terms = []
        for k, e in enumerate(self.entries):
            term = Signal(range(units[-1] + 1), name=f"term{k}")
            with m.If(self.place):
                m.d.sync += term.eq(Mux(e.valid & e.staged & (e.ctx == self.ctx)
                                        & (e.dev == self._local_dev), page_bytes(units, e.size), 0))
            terms.append(term)
        summing = Signal()
        m.d.sync += summing.eq(self.place)
        while len(terms) > 1:
            terms = [a + b for a, b in zip(terms[0::2], terms[1::2])] + terms[len(terms) & ~1:]
        total = Signal.like(self.total)
        with m.If(summing):       # loaded only then: a simulator sums on those cycles alone
            m.d.sync += total.eq(terms[0] << exact_log2(sizes[0]))
        m.d.comb += [self.total.eq(total), self.busy.eq(summing)]
        return m


class NetworkPort(wiring.Component):
    """A device's port on the interconnect, and where its DMA's writes go.

    * Outgoing: a plain DMA write beat for this device (``dev`` =
      ``local_dev``) goes into memory (``local_w``) and is acknowledged in
      the cycle the memory takes it; a beat for another
      device, a reduce beat (``op`` an add, ISA v2) for any device, this one
      included, and every SIGNAL from the coprocessor (write beats first),
      goes into the queue of its destination, leaving on ``net_out[dst]``:
      so every reduction happens in one place, the destination's network
      input.
    * Acks to the DMA (``wr_ack``, one a cycle): local beats first; acks of
      remote beats (``ack_in``) wait in a queue, so that a burst of local
      writes never holds up the interconnect.
    * Incoming (``net_in``): plain write beats go into memory (``remote_w``)
      and are acknowledged (``ack_out``, through a small queue) when
      accepted, so an ack means "visible"; reduce beats go through a
      :class:`~hw.reduce.ReduceOnWrite` (reading through ``reduce_rd``,
      writing through ``reduce_w``) and are acknowledged when their sum is
      written (a plain write waits while a sum is offered); SIGNALs go to
      ``sig_in`` a cycle later, through a register.

    Parameters
    ----------
    arch : :class:`hw.isa.ArchParams`
    local_dev : int
    data_width : int
    net_depth : int
        Depth of each outgoing per-destination queue.
    ack_depth : int
        Depth of the queue of incoming acks.
    register_wr : bool
        The DMA's beats enter through a :class:`hw.lib.RegisterSlice` (a
        cycle later): ``wr.ready`` is then a register's (the DMA's write
        decisions do not wait for this port's routing), and with a shared
        write port its grant depends on no unregistered DMA write. The acks
        to the DMA leave from a register (a cycle later; the DMA takes one
        every cycle).

    Interface attributes
    --------------------
    wr : ``In(stream.Signature(DmaWrite(...)))``
        The DMA's write beats.
    wr_ack : ``Out(stream.Signature(chan bits))``
        To the DMA, which takes one every cycle.
    sig : ``In(stream.Signature(SignalMessage(arch)))``
    sig_in : ``Out(stream.Signature(sem bits))``
        To the coprocessor, which must always be ready: a signal leaves a
        register a cycle after it arrived, and is not held.
    local_w, remote_w, reduce_w : ``Out(WritePortSignature(...))``
        Memory write ports (ready low while a shared write port serves
        another writer).
    reduce_rd : ``Out(ReadPortSignature(...))``
        A memory read port, for the reductions' old words.
    net_out, net_in, ack_out, ack_in
        As the :class:`Device`'s.
    idle : ``Out(1)``
        Every outgoing queue is empty and no signal is on its way to the
        coprocessor.
    """

    def __init__(self, arch, *, local_dev, data_width, net_depth, ack_depth,
                 register_wr=False):
        self._arch, self._local_dev = arch, local_dev
        self._register_wr = bool(register_wr)
        self._net_depth, self._ack_depth = net_depth, ack_depth
        C, D = arch.channels, arch.devices
        mem_addr = max(1, ceil_log2(arch.mem_bytes) - exact_log2(data_width // 8))
        self._mem_addr, self._data_width = mem_addr, data_width
        self._request = NetRequest(arch, data_width, C)
        self._ack = NetAck(arch, C)
        req, ack = stream.Signature(self._request), stream.Signature(self._ack)
        super().__init__({
            "wr": In(stream.Signature(DmaWrite(arch, data_width, C))),
            "wr_ack": Out(stream.Signature(chan_bits(C))),
            "sig": In(stream.Signature(SignalMessage(arch))),
            "sig_in": Out(stream.Signature(sem_bits(arch))),
            "local_w": Out(WritePortSignature(mem_addr, data_width)),
            "remote_w": Out(WritePortSignature(mem_addr, data_width)),
            "reduce_w": Out(WritePortSignature(mem_addr, data_width)),
            "reduce_rd": Out(ReadPortSignature(mem_addr, data_width)),
            "net_out": Out(req).array(D),
            "net_in": In(req),
            "ack_out": Out(ack),
            "ack_in": In(ack),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        me, D = self._local_dev, self._arch.devices
        nin = self.net_in
        if self._register_wr:
            m.submodules.wr_slice = wr_slice = RegisterSlice(self.wr.p.shape())
            wiring.connect(m, wiring.flipped(self.wr), wr_slice.i)
            wr = wr_slice.o
        else:
            wr = self.wr
        # outgoing: local beats into memory, remote beats and signals into queues
        local, remote = Signal(), Signal()
        plain_here = (wr.p.dev == me) & (wr.p.op == ReduceOp.WRITE)
        m.d.comb += [local.eq(wr.valid & plain_here), remote.eq(wr.valid & ~plain_here)]
        into_mem = stream.Signature(data.StructLayout({
            "req": WriteRequest(self._mem_addr, self._data_width),
            "chan": len(wr.p.chan)})).create(path=("local_beat",))
        m.d.comb += [into_mem.valid.eq(local), into_mem.p.req.addr.eq(wr.p.addr),
                     into_mem.p.req.data.eq(wr.p.data), into_mem.p.req.be.eq(wr.p.be),
                     into_mem.p.chan.eq(wr.p.chan),
                     self.local_w.valid.eq(into_mem.valid), self.local_w.p.eq(into_mem.p.req),
                     into_mem.ready.eq(self.local_w.ready)]
        msg = Signal(self._request)
        with m.If(remote):
            m.d.comb += [msg.dst.eq(wr.p.dev), msg.kind.eq(NetKind.WRITE), msg.chan.eq(wr.p.chan),
                         msg.addr.eq(wr.p.addr), msg.data.eq(wr.p.data), msg.be.eq(wr.p.be),
                         msg.op.eq(wr.p.op)]
        with m.Else():
            m.d.comb += [msg.dst.eq(self.sig.p.dev), msg.kind.eq(NetKind.SIGNAL),
                         msg.sem.eq(self.sig.p.sem)]
        # the queue a beat or a signal would go to has room: from their payloads
        # (not through ``msg``, whose choice depends on the beat's valid)
        beat_room, sig_room, empty = Signal(), Signal(), Signal(D)
        for j in range(D):
            q = Queue(self._request, self._net_depth)
            m.submodules[f"out{j}"] = q
            wiring.connect(m, q.r, wiring.flipped(self.net_out[j]))
            m.d.comb += [q.w.payload.eq(msg),
                         q.w.valid.eq((remote | self.sig.valid) & (msg.dst == j)),
                         empty[j].eq(q.level == 0)]
            with m.If(wr.p.dev == j):
                m.d.comb += beat_room.eq(q.w.ready)
            with m.If(self.sig.p.dev == j):
                m.d.comb += sig_room.eq(q.w.ready)
        written = Signal()                       # a local beat entered memory
        m.d.comb += [written.eq(into_mem.valid & into_mem.ready),
                     wr.ready.eq(Mux(plain_here, into_mem.ready, beat_room)),
                     self.sig.ready.eq(~remote & sig_room)]
        # acks to the DMA: a local beat's at once, else a remote one's
        m.submodules.acks_in = acks = Queue(len(self.ack_in.p.chan), self._ack_depth)
        m.d.comb += [acks.w.valid.eq(self.ack_in.valid), acks.w.payload.eq(self.ack_in.p.chan),
                     self.ack_in.ready.eq(acks.w.ready),
                     acks.r.ready.eq(~written & self.wr_ack.ready)]
        ack_valid, ack_chan = Signal(), Signal.like(self.wr_ack.p)
        m.d.comb += [ack_valid.eq(written | acks.r.valid),
                     ack_chan.eq(Mux(written, into_mem.p.chan, acks.r.payload))]
        if self._register_wr:
            # the DMA takes an ack every cycle: a register, so that a write port's
            # grant does not reach the DMA's completion counts in the same cycle
            m.d.sync += [self.wr_ack.valid.eq(ack_valid), self.wr_ack.p.eq(ack_chan)]
        else:
            m.d.comb += [self.wr_ack.valid.eq(ack_valid), self.wr_ack.p.eq(ack_chan)]
        arriving = self._incoming(m, nin)
        m.d.comb += self.idle.eq(empty.all() & ~arriving)
        return m


    def _incoming(self, m, nin):
        """Incoming messages: plain writes into memory, acked when accepted;
        reduce beats through the reduce-on-write unit, acked when written;
        signals to the coprocessor, through a register. Returns that
        register's valid (a signal on its way)."""
        m.submodules.acks_out = acks_out = Queue(self._ack, HANDOFF_DEPTH)
        wiring.connect(m, acks_out.r, wiring.flipped(self.ack_out))
        dev_w = len(nin.p.src)
        m.submodules.reduce = rmw = ReduceOnWrite(addr_width=self._mem_addr,
                                                  data_width=self._data_width,
                                                  user_width=dev_w + len(nin.p.chan))
        wiring.connect(m, rmw.rd, wiring.flipped(self.reduce_rd))
        is_write, is_reduce, summed = Signal(), Signal(), Signal()
        m.d.comb += [
            is_write.eq(nin.p.kind == NetKind.WRITE),
            is_reduce.eq(nin.p.op != ReduceOp.WRITE),
            # a sum leaves the unit when memory and the ack queue both take it
            self.reduce_w.valid.eq(rmw.wr.valid & acks_out.w.ready),
            self.reduce_w.p.eq(rmw.wr.p),
            rmw.wr.ready.eq(self.reduce_w.ready & acks_out.w.ready),
            summed.eq(rmw.wr.valid & rmw.wr.ready),
            rmw.i.valid.eq(nin.valid & is_write & is_reduce),
            rmw.i.p.addr.eq(nin.p.addr), rmw.i.p.data.eq(nin.p.data), rmw.i.p.be.eq(nin.p.be),
            rmw.i.p.op.eq(nin.p.op), rmw.i.p.user.eq(Cat(nin.p.src, nin.p.chan)),
        ]
        # A plain write waits while a sum is offered (so the two never need the
        # ack queue in one cycle); its valid never depends on a write port's
        # ready, which a shared write port derives from every writer's valid.
        plain = Signal()
        m.d.comb += [
            plain.eq(nin.valid & is_write & ~is_reduce & acks_out.w.ready & ~rmw.wr.valid),
            self.remote_w.valid.eq(plain),
            self.remote_w.p.addr.eq(nin.p.addr), self.remote_w.p.data.eq(nin.p.data),
            self.remote_w.p.be.eq(nin.p.be),
            acks_out.w.valid.eq(summed | (plain & self.remote_w.ready)),
            acks_out.w.p.dst.eq(Mux(summed, rmw.wr_user[:dev_w], nin.p.src)),
            acks_out.w.p.chan.eq(Mux(summed, rmw.wr_user[dev_w:], nin.p.chan)),
            nin.ready.eq(~is_write | Mux(is_reduce, rmw.i.ready, plain & self.remote_w.ready)),
        ]
        # a SIGNAL reaches the coprocessor from a register, a cycle later: the
        # interconnect is across the die, and the semaphores' update would
        # otherwise share a cycle with that route (the coprocessor always takes
        # it, so the register never holds one back)
        arriving = Signal()
        m.d.sync += [arriving.eq(nin.valid & ~is_write), self.sig_in.p.eq(nin.p.sem)]
        m.d.comb += self.sig_in.valid.eq(arriving)
        return arriving


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
    shared_write : bool
        The memory's four writers (local DMA beats, incoming network beats,
        the host window, the reduce-on-write unit) share one physical write port, granted round-robin
        (FPGA block RAM has one); the default gives each its own port.
    shared_read : bool
        The memory's three readers (the DMA, the host window, the
        reduce-on-write unit) share one physical read port, granted
        round-robin: on an FPGA every physical read port is a copy of the
        block RAMs. The default gives each its own port.
    registered_memory : bool
        The memory's block RAMs behind registers on every side
        (:class:`~hw.memory.BankedMemory` ``registered``: reads answer three
        cycles after their request, writes land a cycle after they are
        taken): what an FPGA needs when a word's bits lie in block RAMs
        across the chip. Costs cycles, not results.

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
                 fault_depth=16, sram_macro=False, shared_write=False,
                 shared_read=False, registered_memory=False):
        check_arch(arch)
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
                                read_ports=3, write_ports=4, shared_write=shared_write,
                                shared_read=shared_read, registered=registered_memory,
                                init=b"" if sram_macro else memory, macro=sram_macro)
        self.mmu = MMU(arch, local_dev=index, tag_width=0)    # the DMA needs no tags: in order
        self.dma = DMA(arch, data_width=data_width, outstanding=outstanding,
                       burst_len=burst_len)
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
        m.submodules.mem = mem = self.mem
        m.submodules.mmu = mmu = self.mmu
        m.submodules.dma = dma = self.dma
        m.submodules.cop = cop = self.cop
        m.submodules.hostport = hp = self.hostport
        m.submodules.net = net = NetworkPort(arch, local_dev=self._index,
                                             data_width=self._data_width,
                                             net_depth=self._net_depth, ack_depth=self._ack_depth,
                                             register_wr=self.mem.shared_write)
        m.submodules.commit_bytes = cb = CommitBytes(arch, self._index)

        # host port: registers, instruction memory, windows onto data memory and the TLB
        wiring.connect(m, wiring.flipped(self.host), hp.bus)
        wiring.connect(m, hp.imem_w, cop.imem_w)
        wiring.connect(m, cop.fault_rd, hp.fault_rd)
        # the host's window writes reach memory a cycle later, through a register:
        # with one shared write port, the host's address decoding would
        # otherwise be in the path of every writer's grant
        m.submodules.host_write = host_write = RegisterSlice(WriteRequest(mem.addr_width,
                                                                           self._data_width))
        wiring.connect(m, hp.mem_w, host_write.i)
        wiring.connect(m, host_write.o, mem.write[2])
        wiring.connect(m, hp.mem_r, mem.read[1])
        m.d.comb += [
            hp.status.eq(cop.status), hp.cause.eq(cop.cause), hp.pc.eq(cop.pc),
            hp.fault_overflow.eq(cop.fault_overflow), hp.cycles.eq(cop.cycles),
            hp.descriptors.eq(cop.descriptors), hp.bytes_remapped.eq(cop.bytes_remapped),
            mmu.tlb_index.eq(hp.tlb_index), hp.tlb_entry.eq(mmu.tlb_entry),
        ]
        m.d.comb += [hp.chan_bytes[c].eq(cop.chan_bytes[c]) for c in range(arch.channels)]

        # coprocessor: descriptors and status to and from the DMA, commands to the MMU
        wiring.connect(m, cop.desc, dma.desc)
        wiring.connect(m, dma.fault, cop.dma_fault)
        wiring.connect(m, cop.mmu_cmd, mmu.cmd)
        m.d.comb += [cop.chan_status[c].eq(dma.status[c]) for c in range(arch.channels)]
        m.d.comb += [cop.dma_free_slots[c].eq(dma.free_slots[c]) for c in range(arch.channels)]
        m.d.comb += [
            dma.clear.eq(cop.dma_clear), dma.flush.eq(cop.dma_flush),
            cop.beat.valid.eq(dma.wr.valid & dma.wr.ready),
            cop.beat.chan.eq(dma.wr.p.chan), cop.beat.be.eq(dma.wr.p.be),
            # a COMMIT's bytes, taken from the TLB while the MMU places it (the
            # coprocessor adds them three cycles after sending it)
            cb.ctx.eq(mmu.commit_ctx), cb.place.eq(mmu.commit_place),
            cop.commit_bytes.eq(cb.total), cop.mmu_idle.eq(mmu.idle),
        ]
        m.d.comb += [cb.entries[i].eq(e) for i, e in enumerate(mmu.entries)]

        # DMA: translation, reads, writes (through the network port)
        wiring.connect(m, dma.xlat_req, mmu.req)
        wiring.connect(m, mmu.rsp, dma.xlat_rsp)
        wiring.connect(m, dma.rd, mem.read[0])
        wiring.connect(m, dma.wr, net.wr)
        wiring.connect(m, net.wr_ack, dma.wr_ack)
        wiring.connect(m, net.local_w, mem.write[0])
        wiring.connect(m, net.remote_w, mem.write[1])
        wiring.connect(m, net.reduce_w, mem.write[3])
        wiring.connect(m, net.reduce_rd, mem.read[2])
        # SIGNALs leave through a register: the network's ready is late
        m.submodules.sig_out = sig_out = RegisterSlice(SignalMessage(arch))
        wiring.connect(m, cop.sig, sig_out.i)
        wiring.connect(m, sig_out.o, net.sig)
        wiring.connect(m, net.sig_in, cop.sig_in)
        for j in range(arch.devices):
            wiring.connect(m, net.net_out[j], wiring.flipped(self.net_out[j]))
        wiring.connect(m, wiring.flipped(self.net_in), net.net_in)
        wiring.connect(m, net.ack_out, wiring.flipped(self.ack_out))
        wiring.connect(m, wiring.flipped(self.ack_in), net.ack_in)

        # system control
        m.d.comb += [
            cop.start.eq(self.start | hp.start),
            cop.quiesced.eq(self.quiesced),
            cop.step_mode.eq(self.step_mode),
            cop.step_grant.eq(self.step_grant),
            self.step_ack.eq(cop.step_ack),
            self.running.eq(cop.status == StatusCode.RUNNING),
            self.stuck.eq((cop.status != StatusCode.RUNNING) | cop.blocked),
            self.quiet.eq(cop.copies_done & mmu.idle & ~cb.busy & net.idle & ~sig_out.o.valid),
        ]
        return m
