"""The reshard coprocessor: fetch, decode and execute ISA v1 programs.

One :class:`Coprocessor` per device, a composition of stage components (one
file each; ``==>`` a ``lib.stream``, ``-->`` plain signals)::

    imem_w ==> Fetch ==insn==> Decoder ==> RegisterSlice ==insn+cause==> Sequencer <-- start, ...
               imem, read-ahead illegal checks                 STOPPED/CLEAR/EXEC, pc --> status,
                                                               lock-step, dispatch        cause
                             +================copy========+     |    |
                             v           +======sync============+    +=====mmu=====+
                        CopyIssue        v                                         v
             issued <------+ |       SyncUnit ==sig==> (network)            MmuCommandUnit
             (SyncUnit,      |       FENCE SIGNAL      <==sig_in==          REMAP INVAL COMMIT
              Counters)      |       WAIT HALT, sems   --unfenced---------> ==cmd==> (MMU)
                             v       ==stop==> Sequencer                    ==stop==> Sequencer
free_slots, chan_status --> DescriptorFeeder ==desc==> (DMA)                --flush--> (DMA)
                            queue per channel, RoundRobin                   --committed--> Counters
                            --done--> SyncUnit, MmuCommandUnit, copies_done
      beat, issued, committed, commit_bytes --> Counters --> cycles, chan_bytes, descriptors,
                                                             bytes_remapped
      dma_fault ==> FaultQueue ==> fault_rd; fault_overflow

* :class:`~.fetch.Fetch` (``fetch.py``): instruction memory (``lib.memory``,
  host-writable while stopped) read ahead of execution (programs have no
  jumps), one word a cycle, through the block RAM's register and one more.
  Each word is stored with the checks it decides alone
  (:mod:`.predecode`: made at elaboration for the initial image, by a
  two-stage :class:`~.predecode.Predecoder` for host writes).
* :class:`~.decode.Decoder` (``decode.py``): the illegal-instruction checks,
  in ``model/golden.py``'s order, widths from :data:`hw.isa.FORMATS`, in two
  stages with a :class:`hw.lib.RegisterSlice` between them (the address
  checks, then the priority among the word's predecoded checks, the
  version checks and those), and
  where a legal instruction goes (its unit, as one flag each); registered by
  another :class:`hw.lib.RegisterSlice`, so that decoding and executing an
  instruction are in different cycles and the retire decision reads flags.
* :class:`~.sequencer.Sequencer` (``sequencer.py``): start, clear the
  previous run's leftovers, execute in order, stop; lock-step grants;
  dispatch of each legal instruction to its unit; the program counter.
* :class:`~.issue.CopyIssue` (``issue.py``): a COPY becomes a descriptor.
* :class:`~.feeder.DescriptorFeeder` (``feeder.py``): per-channel
  descriptor queues, round-robin into the DMA whenever the DMA has a free
  slot for the channel (its ``free_slots``, registered), through a
  late-ready :class:`hw.lib.RegisterSlice`;
  per-channel completion (``done``).
* :class:`~.sync.SyncUnit` (``sync.py``): FENCE, SIGNAL, WAIT, HALT, the
  semaphores and the unfenced-channel set.
* :class:`~.mmu_cmd.MmuCommandUnit` (``mmu_cmd.py``): REMAP, INVAL, COMMIT.
* :class:`~.counters.Counters` (``counters.py``) and
  :class:`~.faults.FaultQueue` (``faults.py``).
* ``common.py``: the payload layouts and widths they share.

Execution, one instruction at a time, in order:

* ``COPY`` goes into its channel's descriptor queue (the issue waits only
  while that queue is full); the feeder passes queued descriptors to the DMA,
  round-robin among the channels that have a free descriptor slot there, so a
  busy channel never holds up the others;
* ``REMAP`` / ``INVAL`` / ``COMMIT`` go to the MMU's command stream. An
  immediate ``REMAP``/``INVAL`` first waits until every channel has completed
  every descriptor issued to it (the ISA's implicit fence, no fault check). A
  *staged* ``REMAP`` waits too: the TLB is the page table, and placing a
  staged entry may evict an active one that a copy in flight still needs.
  A ``COMMIT`` also waits until the MMU is idle (``mmu_idle``); the bytes
  it activates (``commit_bytes``, summed by the device from the TLB as the
  MMU places the COMMIT) are added to ``bytes_remapped`` three cycles after
  it is sent. Every MMU command also pulses the DMA's ``flush``;
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

Lock-step mode
--------------
With ``step_mode`` high the coprocessor executes one instruction per grant:
it waits for ``step_grant``, executes one instruction (or finds its WAIT
unsatisfied), pulses ``step_ack`` and waits for the grant to drop. The
system (:class:`hw.system.System`) passes the grant round-robin and waits for
every copy and message to land between grants, which is exactly the golden
model's schedule: used to compare racy programs bit for bit.
"""
from .common import (StatusCode, CauseCode, instruction_layout, INSTRUCTION_LAYOUTS, ImemWrite,
                     SignalMessage)
from .top import Coprocessor

__all__ = ["StatusCode", "CauseCode", "instruction_layout", "INSTRUCTION_LAYOUTS",
           "ImemWrite", "SignalMessage", "Coprocessor"]
