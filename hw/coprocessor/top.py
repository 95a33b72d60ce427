"""The reshard coprocessor: fetch, decode and execute ISA v1 programs.

One :class:`Coprocessor` per device. It owns the instruction memory (a
``lib.memory.Memory`` of 256-bit words, initialised from a program and
writable by the host while stopped) and executes the program from word 0 when
started, one instruction at a time, in order:

* ``COPY`` goes into its channel's descriptor queue (the issue waits only
  while that queue is full); a feeder passes queued descriptors to the DMA,
  round-robin among the channels that have a free descriptor slot there, so a
  busy channel never holds up the others;
* ``REMAP`` / ``INVAL`` / ``COMMIT`` go to the MMU's command stream. An
  immediate ``REMAP``/``INVAL`` first waits until every channel has completed
  every descriptor issued to it (the ISA's implicit fence, no fault check). A
  *staged* ``REMAP`` waits too: the TLB is the page table, and placing a
  staged entry may evict an active one that a copy in flight still needs.
  Every MMU command also pulses the DMA's ``flush``;
* ``FENCE`` waits, per channel of its mask, until the channel has completed
  every descriptor issued to it (issued and completed descriptors are counted
  per channel, so a FENCE right after a COPY cannot slip through before the
  DMA has even seen the descriptor) or has faulted; a faulted channel stops
  the program with ``FAULT`` (the cause of the lowest-numbered one);
* ``SIGNAL`` sends a message (device, semaphore) to the interconnect,
  ``WAIT`` waits for a local semaphore and is aborted (``ABORTED``/
  ``DEADLOCK``) when the system reports quiescence on ``quiesced``;
* ``HALT`` waits for every channel, then stops ``HALTED`` (or ``FAULT``).

Illegal instructions are detected exactly as ``model/golden.py`` does, in the
same order: ``PC_OVERFLOW``; ``VERSION_MISMATCH`` at word 0 unless the opcode
is VERSION; ``BAD_OPCODE``; ``RESERVED_BITS``; then the fields in table
order (for an address field ``ADDRESS_WIDTH`` before ``MISALIGNED``);
``COMMIT``: ``BAD_CONTEXT``, ``COMMIT_UNFENCED``, ``FAULT``.

Decoding is generated from :data:`hw.isa.FORMATS`: every opcode's fields are a
:class:`amaranth.lib.data.FlexibleLayout` over the 256-bit word (see
:func:`instruction_layout`), and the reserved-bit masks come from
:func:`hw.isa.reserved_mask`, so no bit position is written here by hand.

Lock-step mode
--------------
With ``step_mode`` high the coprocessor executes one instruction per grant:
it waits for ``step_grant``, executes one instruction (or finds its WAIT
unsatisfied), pulses ``step_ack`` and waits for the grant to drop. The
system (:class:`hw.system.System`) passes the grant round-robin and waits for
every copy and message to land between grants, which is exactly the golden
model's schedule: used to compare racy programs bit for bit.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, ceil_log2

from ..dma import ChannelStatus, CopyDescriptor, DmaFault
from ..interconnect import round_robin
from ..isa import (FORMATS, ISA_VERSION, OPCODE_BITS, WORD_BITS, ArchParams, Cause, Op, Status,
                  reserved_mask)
from ..lib import chan_bits, check_bus_width, ctx_bits, dev_bits
from ..mmu import MmuCommand, MmuOp

__all__ = ["StatusCode", "CauseCode", "instruction_layout", "INSTRUCTION_LAYOUTS",
           "ImemWrite", "SignalMessage", "Coprocessor"]

#: :class:`hw.isa.Status` as an Amaranth enum (the status register's shape).
StatusCode = enum.Enum("StatusCode", {s.name: int(s) for s in Status})
#: :class:`hw.isa.Cause` as an Amaranth enum (the cause register's shape).
CauseCode = enum.Enum("CauseCode", {c.name: int(c) for c in Cause})


def instruction_layout(op: Op) -> data.FlexibleLayout:
    """The 256-bit instruction word of ``op`` as a layout: ``opcode`` and the
    fields of :data:`hw.isa.FORMATS` at their bit positions."""
    fields = {"opcode": data.Field(unsigned(OPCODE_BITS), 0)}
    for f in FORMATS[Op(op)]:
        fields[f.name] = data.Field(unsigned(f.width), f.lsb)
    return data.FlexibleLayout(WORD_BITS, fields)


#: One layout per opcode, generated from :data:`hw.isa.FORMATS`.
INSTRUCTION_LAYOUTS = {op: instruction_layout(op) for op in FORMATS}


class ImemWrite(data.StructLayout):
    """A host write into instruction memory: word address and 256-bit word."""
    def __init__(self, imem_words):
        super().__init__({"addr": max(1, ceil_log2(imem_words)), "data": WORD_BITS})


class SignalMessage(data.StructLayout):
    """A ``SIGNAL``: destination device and semaphore index."""
    def __init__(self, arch):
        super().__init__({"dev": dev_bits(arch), "sem": 8})


class Coprocessor(wiring.Component):
    """Fetches, decodes and executes a reshard program (ISA v1).

    Parameters
    ----------
    arch : :class:`hw.isa.ArchParams`
        Architectural parameters (``imem_words``, ``channels``, ``contexts``,
        ``devices``, ``semaphores``, ``page_sizes``, ``addr_bits``).
    device : int
        Index of this device (``0 .. arch.devices - 1``), reported in the
        parameter registers.
    data_width : int
        DMA bus width in bits (32, 64, 128, 256); write beats are counted in
        bytes per channel.
    program : list of int
        Initial contents of instruction memory (256-bit words); the rest is
        zero.
    fault_depth : int
        Depth of the fault-record FIFO (at least 1).
    desc_depth : int
        Depth of each channel's descriptor queue (at least 1).
    counter_width : int
        Width of the cycle and byte counters, 32..64.

    Interface attributes
    --------------------
    start : ``In(1)``
        Pulse: start the program at word 0 (ignored while running). Clears the
        semaphores, counters, fault FIFO and the DMA channels' errors first.
    quiesced : ``In(1)``
        The system is quiescent: a WAIT that is not satisfied stops with
        ``ABORTED``/``DEADLOCK``.
    step_mode, step_grant : ``In(1)``
        Lock-step execution (see the module documentation).
    step_ack : ``Out(1)``
        One instruction executed (or an unsatisfied WAIT found) under a grant.
    status : ``Out(StatusCode)``
        ``IDLE``, ``RUNNING``, ``HALTED``, ``FAULT``, ``ILLEGAL``, ``ABORTED``.
    cause : ``Out(CauseCode)``
        Why it stopped.
    pc : ``Out(range(imem_words + 1))``
        The instruction being executed, or where it stopped.
    blocked : ``Out(1)``
        Executing a WAIT whose semaphore is below its count.
    copies_done : ``Out(1)``
        Every channel has completed (or faulted on) every descriptor issued.
    imem_w : ``In(stream.Signature(ImemWrite(imem_words)))``
        Host writes into instruction memory; ready only while not running.
    desc : ``Out(stream.Signature(CopyDescriptor(arch, channels)))``
        To the DMA's ``desc``, fed from the per-channel queues.
    chan_status : ``In(ChannelStatus(arch)).array(channels)``
        From the DMA's ``status``.
    dma_clear : ``Out(channels)``
        To the DMA's ``clear``.
    dma_flush : ``Out(1)``
        To the DMA's ``flush``: pulsed with every MMU command.
    dma_fault : ``In(stream.Signature(DmaFault(arch, channels)))``
        From the DMA's ``fault``; always ready (records beyond the FIFO's
        depth are dropped and ``fault_overflow`` set).
    beat_valid, beat_chan, beat_be : ``In``
        A DMA write beat was accepted (``wr.valid & wr.ready``): its channel
        and byte enables, for the per-channel byte counters.
    mmu_cmd : ``Out(stream.Signature(MmuCommand(arch)))``
        To the MMU's ``cmd``.
    mmu_idle : ``In(1)``
        From the MMU's ``idle``.
    commit_ctx : ``Out(ctx bits)``
        The context of the COMMIT being executed.
    commit_bytes : ``In(counter_width)``
        Bytes of the staged entries of ``commit_ctx`` that map local memory
        (added to ``bytes_remapped`` when the COMMIT is issued).
    sig : ``Out(stream.Signature(SignalMessage(arch)))``
        SIGNAL messages to the interconnect.
    sig_in : ``In(stream.Signature(8))``
        Incoming SIGNALs (semaphore index); always ready.
    fault_rd : ``Out(stream.Signature(DmaFault(arch, channels)))``
        Fault records (channel, context, va, cause), oldest first.
    fault_overflow : ``Out(1)``
        A fault record was dropped since the start.
    cycles : ``Out(counter_width)``
        Cycles spent running since the last start.
    chan_bytes : ``Out(counter_width).array(channels)``
        Bytes written by each channel since the last start.
    descriptors : ``Out(32)``
        COPY instructions issued since the last start.
    bytes_remapped : ``Out(counter_width)``
        Zero-copy bytes made active by COMMITs (as ``model.golden`` counts).
    semaphores : ``Out(16).array(semaphores)``
        Semaphore values (saturating at 65535).
    """

    def __init__(self, arch, *, device=0, data_width=64, program=(), fault_depth=16,
                 desc_depth=16, counter_width=48):
        if not isinstance(arch, ArchParams):
            raise TypeError(f"arch must be an ArchParams, not {arch!r}")
        if not isinstance(device, int) or isinstance(device, bool) or not 0 <= device < arch.devices:
            raise ValueError(f"Device index must be an integer in 0..{arch.devices - 1}, "
                             f"not {device!r}")
        check_bus_width(data_width)
        program = list(program)
        if len(program) > arch.imem_words:
            raise ValueError(f"Program of {len(program)} words exceeds the instruction memory "
                             f"of {arch.imem_words} words")
        for i, w in enumerate(program):
            if not isinstance(w, int) or not 0 <= w < 1 << WORD_BITS:
                raise ValueError(f"Program word {i} is not a {WORD_BITS}-bit unsigned integer: "
                                 f"{w!r}")
        if not isinstance(fault_depth, int) or isinstance(fault_depth, bool) or fault_depth < 1:
            raise ValueError(f"Fault FIFO depth must be a positive integer, not {fault_depth!r}")
        if not isinstance(desc_depth, int) or isinstance(desc_depth, bool) or desc_depth < 1:
            raise ValueError(f"Descriptor queue depth must be a positive integer, "
                             f"not {desc_depth!r}")
        if (not isinstance(counter_width, int) or isinstance(counter_width, bool)
                or not 32 <= counter_width <= 64):
            raise ValueError(f"Counter width must be an integer in 32..64, not {counter_width!r}")
        self._arch = arch
        self._device = device
        self._data_width = data_width
        self._program = program
        self._fault_depth = fault_depth
        self._desc_depth = desc_depth
        self._counter_width = counter_width
        C = arch.channels
        cw = counter_width
        super().__init__({
            "start": In(1),
            "quiesced": In(1),
            "step_mode": In(1),
            "step_grant": In(1),
            "step_ack": Out(1),
            "status": Out(StatusCode),
            "cause": Out(CauseCode),
            "pc": Out(range(arch.imem_words + 1)),
            "blocked": Out(1),
            "copies_done": Out(1),
            "imem_w": In(stream.Signature(ImemWrite(arch.imem_words))),
            "desc": Out(stream.Signature(CopyDescriptor(arch, C))),
            "chan_status": In(ChannelStatus(arch)).array(C),
            "dma_clear": Out(C),
            "dma_flush": Out(1),
            "dma_fault": In(stream.Signature(DmaFault(arch, C))),
            "beat_valid": In(1),
            "beat_chan": In(chan_bits(C)),
            "beat_be": In(data_width // 8),
            "mmu_cmd": Out(stream.Signature(MmuCommand(arch))),
            "mmu_idle": In(1),
            "commit_ctx": Out(ctx_bits(arch)),
            "commit_bytes": In(cw),
            "sig": Out(stream.Signature(SignalMessage(arch))),
            "sig_in": In(stream.Signature(8)),
            "fault_rd": Out(stream.Signature(DmaFault(arch, C))),
            "fault_overflow": Out(1),
            "cycles": Out(cw),
            "chan_bytes": Out(cw).array(C),
            "descriptors": Out(32),
            "bytes_remapped": Out(cw),
            "semaphores": Out(16).array(arch.semaphores),
        })

    arch = property(lambda self: self._arch, doc="The architectural parameters.")
    device = property(lambda self: self._device, doc="This device's index.")
    data_width = property(lambda self: self._data_width, doc="DMA bus width in bits.")
    fault_depth = property(lambda self: self._fault_depth, doc="Fault FIFO depth.")
    desc_depth = property(lambda self: self._desc_depth, doc="Per-channel descriptor queue depth.")
    counter_width = property(lambda self: self._counter_width, doc="Counter width in bits.")

    @property
    def program(self):
        """The initial contents of instruction memory (a tuple of words)."""
        return tuple(self._program)

    def elaborate(self, platform):
        m = Module()
        arch = self._arch
        C = arch.channels
        A = arch.addr_bits
        W = arch.imem_words
        m.submodules.imem = imem = Memory(shape=WORD_BITS, depth=W, init=self._program)

        # ------------------------------------------------------------ state
        status = self.status
        running = Signal()
        m.d.comb += running.eq(status == StatusCode.RUNNING)
        pc = self.pc
        pc_next = Signal.like(pc)
        m.d.comb += pc_next.eq(pc)
        m.d.sync += pc.eq(pc_next)

        rp = imem.read_port(transparent_for=())
        wp = imem.write_port()
        m.d.comb += [rp.addr.eq(pc_next), rp.en.eq(1)]
        m.d.comb += [
            self.imem_w.ready.eq(~running),
            wp.addr.eq(self.imem_w.p.addr),
            wp.data.eq(self.imem_w.p.data),
            wp.en.eq(self.imem_w.valid & ~running),
        ]

        word = rp.data
        opcode = Signal(OPCODE_BITS)
        m.d.comb += opcode.eq(word[:OPCODE_BITS])
        ins = {op: data.View(INSTRUCTION_LAYOUTS[op], word) for op in FORMATS}

        # ------------------------------------------------- per-channel state
        st = self.chan_status
        issued = [Signal(16, name=f"issued{c}") for c in range(C)]   # accepted by the DMA
        cw_bytes = 64          # bytes of one descriptor: rows * row_bytes
        cdone = Signal(C)          # channel has completed or faulted on every descriptor
        cerr = Signal(C)

        # per-channel descriptor queues: a COPY waits only for room in its own
        # channel's queue, so a busy channel never holds up COPYs for the others
        dlayout = CopyDescriptor(arch, C)
        queues = []
        for c in range(C):
            q = SyncFIFOBuffered(width=dlayout.size, depth=self._desc_depth)
            m.submodules[f"descq{c}"] = q
            queues.append(q)
        q_empty = Signal(C)
        for c in range(C):
            m.d.comb += [
                q_empty[c].eq(queues[c].level == 0),
                cdone[c].eq(q_empty[c] & ~st[c].busy
                            & ((issued[c] == st[c].done_count) | st[c].error)),
                cerr[c].eq(st[c].error),
            ]
        # Feeder. The DMA holds two descriptors per channel (the one being walked
        # and the next); a descriptor leaves its slot once walked, certainly before
        # its last byte is written. So the coprocessor counts, per channel, the
        # descriptors the DMA accepted and those whose bytes have all been written
        # (the sizes of accepted descriptors wait in two registers and are matched
        # against the channel's write beats): with fewer than two accepted and not
        # yet written, a slot is free and the DMA takes the descriptor at once. A
        # faulted channel takes (and drops) anything. Round-robin among the
        # channels that qualify; an offer the DMA did not take is held (never
        # happens with this DMA, but keeps the stream contract).
        mb = Module()          # byte accounting (changes with every write beat)
        m.submodules.accounting = mb
        B = self._data_width // 8
        popcount = Signal(range(B + 1))
        mb.d.comb += popcount.eq(sum(self.beat_be[i] for i in range(B)))
        written = [Signal(16, name=f"written{c}") for c in range(C)]
        push = Signal(C)                       # the DMA accepted a descriptor of channel c
        fed_bytes = Signal(cw_bytes)           # its size, rows * row_bytes
        for c in range(C):
            # sizes of the (at most two) accepted descriptors not yet fully written
            sz = [Signal(cw_bytes, name=f"size{c}_{k}") for k in range(2)]
            cnt = Signal(range(3), name=f"sizes{c}")
            acc = Signal(cw_bytes, name=f"wbytes{c}")
            acc_next = Signal(cw_bytes + 1, name=f"wbytes_next{c}")
            pop = Signal(name=f"written_one{c}")
            mb.d.comb += [
                acc_next.eq(acc + Mux(self.beat_valid & (self.beat_chan == c), popcount, 0)),
                pop.eq((cnt != 0) & (acc_next >= sz[0])),
            ]
            with mb.If(self.dma_clear[c]):
                mb.d.sync += [acc.eq(0), cnt.eq(0), written[c].eq(st[c].done_count)]
            with mb.Else():
                mb.d.sync += acc.eq(Mux(pop, acc_next - sz[0], acc_next))
                with mb.If(pop):
                    mb.d.sync += written[c].eq(written[c] + 1)
                with mb.If(pop & push[c]):
                    with mb.If(cnt == 1):
                        mb.d.sync += sz[0].eq(fed_bytes)
                    with mb.Else():
                        mb.d.sync += [sz[0].eq(sz[1]), sz[1].eq(fed_bytes)]
                with mb.Elif(pop):
                    mb.d.sync += [sz[0].eq(sz[1]), cnt.eq(cnt - 1)]
                with mb.Elif(push[c] & (cnt != 2)):     # (a faulted channel may get more)
                    with mb.If(cnt == 0):
                        mb.d.sync += sz[0].eq(fed_bytes)
                    with mb.Else():
                        mb.d.sync += sz[1].eq(fed_bytes)
                    mb.d.sync += cnt.eq(cnt + 1)
        q_flush = Signal()     # CLEAR: drop whatever a stopped program left queued
        mf = Module()          # descriptor feeder
        m.submodules.feeder = mf
        eligible = Signal(C)
        for c in range(C):
            out = (issued[c] - written[c])[:16]
            mf.d.comb += eligible[c].eq(queues[c].r_stream.valid & ((out < 2) | st[c].error))
        last_feed = Signal(range(max(2, C)))
        pick = round_robin(mf, eligible, last_feed, C, "feed")
        hold = Signal()
        hold_ch = Signal(range(max(2, C)))
        feed = Signal(range(max(2, C)))
        mf.d.comb += [feed.eq(Mux(hold, hold_ch, pick)),
                     self.desc.valid.eq(hold | eligible.any())]
        for c in range(C):
            with mf.If(feed == c):
                mf.d.comb += self.desc.payload.eq(queues[c].r_stream.payload)
        mf.d.comb += fed_bytes.eq(self.desc.p.rows * self.desc.p.row_bytes)
        with mf.If(q_flush):
            mf.d.comb += [q.r_stream.ready.eq(1) for q in queues]
            mf.d.sync += hold.eq(0)
            mf.d.sync += [issued[c].eq(st[c].done_count) for c in range(C)]
        with mf.Elif(self.desc.valid & self.desc.ready):
            mf.d.sync += [last_feed.eq(feed), hold.eq(0)]
            for c in range(C):
                with mf.If(feed == c):
                    mf.d.comb += [queues[c].r_stream.ready.eq(1), push[c].eq(1)]
                    mf.d.sync += issued[c].eq(issued[c] + 1)
        with mf.Elif(self.desc.valid):
            mf.d.sync += [hold.eq(1), hold_ch.eq(feed)]

        all_done = Signal()
        m.d.comb += [all_done.eq(cdone.all()), self.copies_done.eq(all_done)]
        unfenced = Signal(C)

        def first_cause(mask):
            """Cause of the lowest-numbered faulted channel in ``mask`` (a Value)."""
            out = Signal(CauseCode, name="fault_cause")
            for c in reversed(range(C)):
                with m.If(mask[c] & cerr[c]):
                    m.d.comb += Value.cast(out).eq(Value.cast(st[c].cause))
            return out

        # --------------------------------------------------------- counters
        cw = self._counter_width
        with m.If(running):
            m.d.sync += self.cycles.eq(self.cycles + 1)
        bytes_clear = Signal()
        for c in range(C):
            with mb.If(bytes_clear):
                mb.d.sync += self.chan_bytes[c].eq(0)
            with mb.Elif(self.beat_valid & (self.beat_chan == c)):
                mb.d.sync += self.chan_bytes[c].eq(self.chan_bytes[c] + popcount)

        # ------------------------------------------------------- semaphores
        sem_inc = Signal(arch.semaphores)
        sem_dec = Signal(16)
        sem_dec_idx = Signal(8)
        m.d.comb += self.sig_in.ready.eq(1)
        for s in range(arch.semaphores):
            m.d.comb += sem_inc[s].eq(self.sig_in.valid & (self.sig_in.p == s))
            val = self.semaphores[s]
            nxt = (val + sem_inc[s]
                   - Mux(sem_dec_idx == s, sem_dec, 0))[:17]
            m.d.sync += val.eq(Mux(nxt[16], 0xFFFF, nxt[:16]))

        # ------------------------------------------------------- fault FIFO
        m.submodules.faults = ffifo = SyncFIFOBuffered(
            width=DmaFault(arch, C).size, depth=self._fault_depth)
        fifo_clear = Signal()
        m.d.comb += [
            ffifo.w_stream.valid.eq(self.dma_fault.valid),
            ffifo.w_stream.payload.eq(self.dma_fault.payload),
            self.dma_fault.ready.eq(1),
            self.fault_rd.valid.eq(ffifo.r_stream.valid),
            self.fault_rd.payload.eq(ffifo.r_stream.payload),
            ffifo.r_stream.ready.eq(self.fault_rd.ready | fifo_clear),
        ]
        with m.If(self.dma_fault.valid & ~ffifo.w_stream.ready):
            m.d.sync += self.fault_overflow.eq(1)

        # ------------------------------------------------------- decode/check
        icause = Signal(CauseCode)       # illegal-instruction cause, NONE if legal

        def addr_over(v):
            return v[A:].any() if A < v.shape().width else Const(0)

        def misaligned(v, size):
            ps = arch.page_sizes
            lowmask = Mux(size[1], Mux(size[0], ps[3] - 1, ps[2] - 1),
                          Mux(size[0], ps[1] - 1, ps[0] - 1))
            return (v[:A] & lowmask) != 0

        def checks(op):
            f = ins[op]
            out = []
            if op is Op.VERSION:
                out.append((f.version != ISA_VERSION, Cause.VERSION_MISMATCH))
            elif op is Op.COPY:
                out += [(f.chan >= C, Cause.BAD_CHANNEL),
                        (f.ctx >= arch.contexts, Cause.BAD_CONTEXT),
                        (addr_over(f.src), Cause.ADDRESS_WIDTH),
                        (addr_over(f.dst), Cause.ADDRESS_WIDTH)]
            elif op is Op.REMAP:
                out += [(f.ctx >= arch.contexts, Cause.BAD_CONTEXT),
                        (f.dev >= arch.devices, Cause.BAD_DEVICE),
                        (addr_over(f.va), Cause.ADDRESS_WIDTH),
                        (misaligned(f.va, f.size), Cause.MISALIGNED),
                        (addr_over(f.pa), Cause.ADDRESS_WIDTH),
                        (misaligned(f.pa, f.size), Cause.MISALIGNED)]
            elif op is Op.INVAL:
                out += [(f.ctx >= arch.contexts, Cause.BAD_CONTEXT),
                        (addr_over(f.va), Cause.ADDRESS_WIDTH),
                        (misaligned(f.va, f.size), Cause.MISALIGNED)]
            elif op is Op.SIGNAL:
                out += [(f.dev >= arch.devices, Cause.BAD_DEVICE),
                        (f.sem >= arch.semaphores, Cause.BAD_SEMAPHORE)]
            elif op is Op.WAIT:
                out.append((f.sem >= arch.semaphores, Cause.BAD_SEMAPHORE))
            elif op is Op.COMMIT:
                out.append((f.ctx >= arch.contexts, Cause.BAD_CONTEXT))
            return out

        md = Module()          # illegal-instruction checks (change only with the word)
        m.submodules.decoder = md
        with md.If(pc >= W):
            md.d.comb += icause.eq(CauseCode.PC_OVERFLOW)
        with md.Elif((pc == 0) & (opcode != Op.VERSION)):
            md.d.comb += icause.eq(CauseCode.VERSION_MISMATCH)
        with md.Else():
            with md.Switch(opcode):
                for op in FORMATS:
                    with md.Case(int(op)):
                        rmask = reserved_mask(op)
                        with md.If((word & Const(rmask, WORD_BITS)).any()):
                            md.d.comb += icause.eq(CauseCode.RESERVED_BITS)
                        for cond, cause in checks(op):
                            with md.Elif(cond):
                                md.d.comb += icause.eq(CauseCode[cause.name])
                with md.Default():
                    md.d.comb += icause.eq(CauseCode.BAD_OPCODE)

        # ------------------------------------------------------- step control
        stepped = Signal()
        go = Signal()
        m.d.comb += go.eq(~self.step_mode | (self.step_grant & ~stepped))
        with m.If(~self.step_grant):
            m.d.sync += stepped.eq(0)
        with m.If(self.step_ack):
            m.d.sync += stepped.eq(1)

        advance = Signal()
        stop = Signal()
        stop_status = Signal(StatusCode)
        stop_cause = Signal(CauseCode)
        with m.If(advance):
            m.d.comb += pc_next.eq(pc + 1)
        with m.If(stop):
            m.d.sync += [status.eq(stop_status), self.cause.eq(stop_cause)]
        m.d.comb += self.step_ack.eq(self.step_mode & (advance | stop | (self.blocked & go)))

        # --------------------------------------------------------- dispatch
        fc = ins[Op.COPY]
        newd = Signal(dlayout)
        m.d.comb += [
            newd.chan.eq(fc.chan), newd.ctx.eq(fc.ctx), newd.tag.eq(fc.tag),
            newd.src.eq(fc.src[:A]), newd.dst.eq(fc.dst[:A]),
            newd.row_bytes.eq(fc.row_bytes), newd.rows.eq(fc.rows),
            newd.src_stride.eq(fc.src_stride), newd.dst_stride.eq(fc.dst_stride),
        ]
        q_w_ready = Signal()
        for c in range(C):
            m.d.comb += queues[c].w_stream.payload.eq(newd)
            with m.If(fc.chan == c):
                m.d.comb += q_w_ready.eq(queues[c].w_stream.ready)
        fr, fi, fm = ins[Op.REMAP], ins[Op.INVAL], ins[Op.COMMIT]
        cmd = self.mmu_cmd.p
        with m.Switch(opcode):
            with m.Case(int(Op.REMAP)):
                m.d.comb += [cmd.op.eq(MmuOp.REMAP), cmd.ctx.eq(fr.ctx), cmd.size.eq(fr.size),
                             cmd.perm.eq(fr.perm), cmd.staged.eq(fr.staged), cmd.dev.eq(fr.dev),
                             cmd.va.eq(fr.va[:A]), cmd.pa.eq(fr.pa[:A])]
            with m.Case(int(Op.INVAL)):
                m.d.comb += [cmd.op.eq(MmuOp.INVAL), cmd.ctx.eq(fi.ctx), cmd.size.eq(fi.size),
                             cmd.staged.eq(fi.staged), cmd.va.eq(fi.va[:A])]
            with m.Default():
                m.d.comb += [cmd.op.eq(MmuOp.COMMIT), cmd.ctx.eq(fm.ctx)]
        m.d.comb += self.commit_ctx.eq(fm.ctx)
        m.d.comb += self.dma_flush.eq(self.mmu_cmd.valid & self.mmu_cmd.ready)
        fs, fw = ins[Op.SIGNAL], ins[Op.WAIT]
        m.d.comb += [self.sig.p.dev.eq(fs.dev), self.sig.p.sem.eq(fs.sem)]
        sem_val = Signal(16)
        m.d.comb += sem_val.eq(self.semaphores[0])
        for s in range(1, arch.semaphores):
            with m.If(fw.sem == s):
                m.d.comb += sem_val.eq(self.semaphores[s])

        ff = ins[Op.FENCE]
        fmask = Signal(C)
        m.d.comb += fmask.eq(Mux(ff.mask == 0, (1 << C) - 1, ff.mask[:C]))
        fmask_done = Signal()
        m.d.comb += fmask_done.eq((cdone | ~fmask).all())
        fence_cause = first_cause(fmask)
        all_cause = first_cause(Const((1 << C) - 1, C))

        with m.FSM(name="seq"):
            with m.State("STOPPED"):
                with m.If(self.start):
                    m.d.sync += [status.eq(StatusCode.RUNNING), self.cause.eq(CauseCode.NONE)]
                    m.d.sync += [self.cycles.eq(0), self.descriptors.eq(0),
                                 self.bytes_remapped.eq(0), unfenced.eq(0),
                                 self.fault_overflow.eq(0)]
                    m.d.comb += bytes_clear.eq(1)
                    m.d.sync += [s.eq(0) for s in self.semaphores]
                    m.next = "CLEAR"
            with m.State("CLEAR"):
                # wait for the DMA to drain, clear its channels' errors and the fault FIFO
                m.d.comb += [self.dma_clear.eq((1 << C) - 1), fifo_clear.eq(1)]
                m.d.comb += pc_next.eq(0)
                m.d.comb += q_flush.eq(1)          # discard leftovers, resync counts
                with m.If(~cerr.any() & ~(Cat(*[s.busy for s in st])).any()
                          & ~ffifo.r_stream.valid & q_empty.all()):
                    m.d.comb += bytes_clear.eq(1)
                    m.d.sync += self.fault_overflow.eq(0)
                    m.next = "EXEC"
            with m.State("EXEC"):
                with m.If(icause != CauseCode.NONE):
                    with m.If(go):
                        m.d.comb += [stop.eq(1), stop_status.eq(StatusCode.ILLEGAL),
                                     stop_cause.eq(icause)]
                        m.next = "STOPPED"
                with m.Else():
                    with m.Switch(opcode):
                        with m.Case(int(Op.VERSION)):
                            m.d.comb += advance.eq(go)
                        with m.Case(int(Op.COPY)):
                            with m.If(go & q_w_ready):
                                m.d.comb += advance.eq(1)
                                m.d.sync += self.descriptors.eq(self.descriptors + 1)
                                for c in range(C):
                                    with m.If(fc.chan == c):
                                        m.d.comb += queues[c].w_stream.valid.eq(1)
                                        m.d.sync += unfenced[c].eq(1)
                        with m.Case(int(Op.FENCE)):
                            with m.If(go & fmask_done):
                                with m.If((fmask & cerr).any()):
                                    m.d.comb += [stop.eq(1), stop_status.eq(StatusCode.FAULT),
                                                 stop_cause.eq(fence_cause)]
                                    m.next = "STOPPED"
                                with m.Else():
                                    m.d.comb += advance.eq(1)
                                    m.d.sync += unfenced.eq(unfenced & ~fmask)
                        with m.Case(int(Op.REMAP), int(Op.INVAL)):
                            need = (opcode == Op.REMAP) | ~fi.staged
                            m.d.comb += self.mmu_cmd.valid.eq(go & (all_done | ~need))
                            m.d.comb += advance.eq(self.mmu_cmd.valid & self.mmu_cmd.ready)
                        with m.Case(int(Op.SIGNAL)):
                            m.d.comb += self.sig.valid.eq(go)
                            m.d.comb += advance.eq(self.sig.valid & self.sig.ready)
                        with m.Case(int(Op.WAIT)):
                            with m.If(sem_val >= fw.count):
                                with m.If(go):
                                    m.d.comb += [advance.eq(1), sem_dec.eq(fw.count),
                                                 sem_dec_idx.eq(fw.sem)]
                            with m.Else():
                                m.d.comb += self.blocked.eq(1)
                                with m.If(self.quiesced):
                                    m.d.comb += [stop.eq(1), stop_status.eq(StatusCode.ABORTED),
                                                 stop_cause.eq(CauseCode.DEADLOCK)]
                                    m.next = "STOPPED"
                        with m.Case(int(Op.COMMIT)):
                            with m.If(go):
                                with m.If(unfenced.any()):
                                    m.d.comb += [stop.eq(1), stop_status.eq(StatusCode.ILLEGAL),
                                                 stop_cause.eq(CauseCode.COMMIT_UNFENCED)]
                                    m.next = "STOPPED"
                                with m.Elif(all_done & cerr.any()):
                                    m.d.comb += [stop.eq(1), stop_status.eq(StatusCode.FAULT),
                                                 stop_cause.eq(all_cause)]
                                    m.next = "STOPPED"
                                with m.Elif(all_done):
                                    m.d.comb += self.mmu_cmd.valid.eq(1)
                                    with m.If(self.mmu_cmd.ready):
                                        m.d.comb += advance.eq(1)
                                        m.d.sync += self.bytes_remapped.eq(
                                            self.bytes_remapped + self.commit_bytes)
                        with m.Case(int(Op.HALT)):
                            with m.If(go & all_done):
                                m.d.comb += stop.eq(1)
                                with m.If(cerr.any()):
                                    m.d.comb += [stop_status.eq(StatusCode.FAULT),
                                                 stop_cause.eq(all_cause)]
                                with m.Else():
                                    m.d.comb += [stop_status.eq(StatusCode.HALTED),
                                                 stop_cause.eq(CauseCode.NONE)]
                                m.next = "STOPPED"
        return m
