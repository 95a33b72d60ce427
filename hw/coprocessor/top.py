"""The coprocessor top: its stages joined (see the package documentation)."""
from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..dma import ChannelStatus, CopyDescriptor, DmaFault
from ..isa import WORD_BITS, check_arch
from ..lib import RegisterSlice, check_bus_width, counter_shape, sem_bits
from ..mmu import MmuCommand
from .common import (CauseCode, Decoded, ImemWrite, SignalMessage, StatusCode, WriteBeatSignature,
                     semaphore_shape)
from .counters import Counters, commit_bytes_shape
from .decode import Decoder
from .faults import FaultQueue
from .feeder import DescriptorFeeder
from .fetch import Fetch
from .issue import CopyIssue
from .mmu_cmd import MmuCommandUnit
from .sequencer import Sequencer
from .sync import SyncUnit

__all__ = ["Coprocessor"]


def _positive(value, what):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{what} must be a positive integer, not {value!r}")


class Coprocessor(wiring.Component):
    """Fetches, decodes and executes a reshard program (ISA v1).

    Parameters
    ----------
    arch : :class:`hw.isa.ArchParams`
        Architectural parameters (``imem_words``, ``channels``, ``contexts``,
        ``devices``, ``semaphores``, ``page_sizes``, ``addr_bits``,
        ``tlb_entries``).
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
        Depth of the fault-record queue (at least 1).
    desc_depth : int
        Depth of each channel's descriptor queue (at least 1).
    counter_width : int
        Width of the cycle and byte counters, 32..64.

    Interface attributes
    --------------------
    start : ``In(1)``
        Pulse: start the program at word 0 (ignored while running). Clears the
        semaphores, counters, fault queue and the DMA channels' errors first.
    quiesced : ``In(1)``
        The system is quiescent: a WAIT that is not satisfied stops with
        ``ABORTED``/``DEADLOCK``.
    step_mode, step_grant : ``In(1)``
        Lock-step execution (see the package documentation).
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
        To the DMA's ``desc``.
    chan_status : ``In(ChannelStatus(arch)).array(channels)``
        From the DMA's ``status``.
    dma_free_slots : ``In(range(3)).array(channels)``
        From the DMA's ``free_slots``.
    dma_clear : ``Out(channels)``
        To the DMA's ``clear``.
    dma_flush : ``Out(1)``
        To the DMA's ``flush``: pulsed with every MMU command.
    dma_fault : ``In(stream.Signature(DmaFault(arch, channels)))``
        From the DMA's ``fault``; always ready (records beyond the queue's
        depth are dropped and ``fault_overflow`` set).
    beat : ``In(WriteBeatSignature(channels, data_width))``
        A DMA write beat was accepted (``wr.valid & wr.ready``): its channel
        and byte enables.
    mmu_cmd : ``Out(stream.Signature(MmuCommand(arch)))``
        To the MMU's ``cmd``.
    mmu_idle : ``In(1)``
        From the MMU's ``idle``: a COMMIT is sent only when every earlier
        command has taken effect. Reset value 1 (a testbench answering for
        the MMU may leave it alone).
    commit_bytes : ``In(commit_bytes_shape(arch))``
        Bytes of the staged entries of the COMMIT's context that map local
        memory, in the third cycle after the COMMIT is sent (the device sums
        them from the TLB as the MMU places the COMMIT); added to
        ``bytes_remapped`` then.
    sig : ``Out(stream.Signature(SignalMessage(arch)))``
        SIGNAL messages to the interconnect.
    sig_in : ``In(stream.Signature(sem_bits(arch)))``
        Incoming SIGNALs (semaphore index); always ready.
    fault_rd : ``Out(stream.Signature(DmaFault(arch, channels)))``
        Fault records (channel, context, va, cause), oldest first.
    fault_overflow : ``Out(1)``
        A fault record was dropped since the start.
    cycles : ``Out(counter_width)``
        Cycles spent running since the last start.
    chan_bytes : ``Out(counter_width).array(channels)``
        Bytes written by each channel since the last start.
    descriptors : ``Out(counter_shape(imem_words))``
        COPY instructions issued since the last start.
    bytes_remapped : ``Out(counter_width)``
        Zero-copy bytes made active by COMMITs (as ``model.golden`` counts).
    semaphores : ``Out(semaphore_shape()).array(semaphores)``
        Semaphore values (saturating at the largest WAIT count).
    """

    def __init__(self, arch, *, device=0, data_width=64, program=(), fault_depth=16,
                 desc_depth=16, counter_width=48):
        check_arch(arch)
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
        _positive(fault_depth, "Fault FIFO depth")
        _positive(desc_depth, "Descriptor queue depth")
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
        C, cw = arch.channels, counter_width
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
            "dma_free_slots": In(range(3)).array(C),
            "dma_clear": Out(C),
            "dma_flush": Out(1),
            "dma_fault": In(stream.Signature(DmaFault(arch, C))),
            "beat": In(WriteBeatSignature(C, data_width)),
            "mmu_cmd": Out(stream.Signature(MmuCommand(arch))),
            "mmu_idle": In(1, init=1),
            "commit_bytes": In(commit_bytes_shape(arch)),
            "sig": Out(stream.Signature(SignalMessage(arch))),
            "sig_in": In(stream.Signature(sem_bits(arch))),
            "fault_rd": Out(stream.Signature(DmaFault(arch, C))),
            "fault_overflow": Out(1),
            "cycles": Out(cw),
            "chan_bytes": Out(cw).array(C),
            "descriptors": Out(counter_shape(arch.imem_words)),
            "bytes_remapped": Out(cw),
            "semaphores": Out(semaphore_shape()).array(arch.semaphores),
        })

    arch = property(lambda self: self._arch, doc="The architectural parameters.")
    device = property(lambda self: self._device, doc="This device's index.")
    data_width = property(lambda self: self._data_width, doc="DMA bus width in bits.")
    fault_depth = property(lambda self: self._fault_depth, doc="Fault queue depth.")
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
        m.submodules.fetch = fetch = Fetch(arch, self._program)
        m.submodules.decode = decode = Decoder(arch)
        # a two-register queue: the sequencer's late ready reaches a few flip-flops,
        # not the enables of the whole decoded instruction; the flags the units
        # decide with read their own copy of its pointer; its few hundred bits load in
        # four groups, each from control flip-flops of its own
        m.submodules.decoded = decoded = RegisterSlice(
            Decoded(arch.imem_words), late_ready=True, urgent=("cause", "unit", "op", "fence_all"),
            groups=4)
        m.submodules.sequencer = seq = Sequencer(arch.imem_words)
        m.submodules.issue = issue = CopyIssue(arch)
        m.submodules.feeder = feeder = DescriptorFeeder(arch, depth=self._desc_depth)
        m.submodules.sync = sync = SyncUnit(arch)
        m.submodules.mmu_cmd = mmu = MmuCommandUnit(arch)
        m.submodules.counters = counters = Counters(arch, data_width=self._data_width,
                                                    counter_width=self._counter_width)
        m.submodules.faults = faults = FaultQueue(arch, depth=self._fault_depth)

        # instructions: fetch -> decode -> (slice) -> sequencer -> units (-> stop requests)
        wiring.connect(m, wiring.flipped(self.imem_w), fetch.imem_w)
        wiring.connect(m, fetch.insn, decode.i)
        wiring.connect(m, decode.o, decoded.i)
        wiring.connect(m, decoded.o, seq.insn)
        wiring.connect(m, seq.copy, issue.insn)
        wiring.connect(m, seq.sync, sync.insn)
        wiring.connect(m, seq.mmu, mmu.insn)
        wiring.connect(m, sync.stop, seq.sync_stop)
        wiring.connect(m, mmu.stop, seq.mmu_stop)
        # copies: issue -> feeder -> DMA; DMA faults -> fault queue -> host
        wiring.connect(m, issue.desc, feeder.w)
        wiring.connect(m, feeder.desc, wiring.flipped(self.desc))
        wiring.connect(m, wiring.flipped(self.beat), counters.beat)
        wiring.connect(m, wiring.flipped(self.dma_fault), faults.w)
        wiring.connect(m, faults.r, wiring.flipped(self.fault_rd))
        # commands, signals
        wiring.connect(m, mmu.cmd, wiring.flipped(self.mmu_cmd))
        wiring.connect(m, sync.sig, wiring.flipped(self.sig))
        wiring.connect(m, wiring.flipped(self.sig_in), sync.sig_in)

        # the leftovers drained, seen a cycle later: a run begins (and clears its
        # byte counters) from a register, not from every channel's DMA status
        m.d.sync += seq.drained.eq(feeder.drained & faults.empty)
        m.d.comb += [
            # sequencer
            seq.start.eq(self.start), seq.step_mode.eq(self.step_mode),
            seq.step_grant.eq(self.step_grant), self.step_ack.eq(seq.step_ack),
            self.status.eq(seq.status), self.cause.eq(seq.cause), self.pc.eq(seq.pc),
            seq.blocked.eq(sync.blocked), self.blocked.eq(sync.blocked),
            fetch.rewind.eq(seq.restart), decode.flush.eq(seq.restart),
            decoded.flush.eq(seq.restart),
            fetch.run.eq(seq.clearing | seq.run),
            issue.step.eq(seq.step), sync.step.eq(seq.step), mmu.step.eq(seq.step),
            # clearing a stopped program's leftovers
            feeder.flush.eq(seq.clearing), faults.flush.eq(seq.clearing),
            self.dma_clear.eq(seq.clearing.replicate(C)),
            faults.clear_overflow.eq(seq.restart | seq.begin),
            self.fault_overflow.eq(faults.overflow),
            # completion, fences
            sync.done.eq(feeder.done), mmu.done.eq(feeder.done),
            self.copies_done.eq(feeder.done.all()),
            sync.issued.eq(issue.issued), mmu.unfenced.eq(sync.unfenced),
            sync.restart.eq(seq.restart), sync.quiesced.eq(self.quiesced),
            self.dma_flush.eq(mmu.flush),
            mmu.mmu_idle.eq(self.mmu_idle),
            # counters
            counters.restart.eq(seq.restart), counters.begin.eq(seq.begin),
            counters.running.eq(seq.clearing | seq.run), counters.issued.eq(issue.issued),
            counters.committed.eq(mmu.committed), counters.commit_bytes.eq(self.commit_bytes),
            self.cycles.eq(counters.cycles), self.descriptors.eq(counters.descriptors),
            self.bytes_remapped.eq(counters.bytes_remapped),
        ]
        for c in range(C):
            m.d.comb += [feeder.chan_status[c].eq(self.chan_status[c]),
                         feeder.free_slots[c].eq(self.dma_free_slots[c]),
                         sync.chan_status[c].eq(self.chan_status[c]),
                         mmu.chan_status[c].eq(self.chan_status[c]),
                         self.chan_bytes[c].eq(counters.chan_bytes[c])]
        m.d.comb += [out.eq(sem) for out, sem in zip(self.semaphores, sync.semaphores)]
        return m
