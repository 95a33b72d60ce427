"""The multi-channel 2-D DMA engine, as stage components in PULP iDMA's
split (one clock domain): the front-end takes descriptors and arbitrates
between channels, the mid-end (the walker) cuts 2-D jobs into legal chunks,
the back-end (translator, reader, writer) only moves bytes, and completion
does the accounting. Each stage is a ``wiring.Component``; they are joined by typed
``lib.stream`` interfaces (:mod:`.layouts`), the top (:class:`DMA`, in
:mod:`.top`) is their composition.

::

      desc
       |
       v
   +----------+  grant   +--------+  chunk   +---------+     +------------+ <--> xlat_req,
   | FrontEnd |--------->| Walker |--------->| chunks  |---->| Translator |      xlat_rsp
   | 2 slots  |<---------| 2-D,   |          | Queue 3 |     | page cache,|      (MMU)
   | a chan,  |  walked  | cuts   |          +---------+     | fault mark |
   | round-   |          +--------+                          +------------+
   | robin    |<-- halt (also to the Walker) ------------------|  cmd |   flush
   +----------+                                                    v
                                                              +---------+
                                                              |  cmds   |
                                                              | Queue 4 |
                                                              +---------+
                                                                   v
       rd (memory) <--------------------------------------------+--------+
                                                                | Reader |
                                                                +--------+
                                                         cmd_out |      | data
                                                                 v      |
                                                            +---------+ |
                                                            |  reads  | |
                                                            | Queue 4 | |
                                                            +---------+ |
                                                                 v      v
                                                              +----------+ ---> wr
                                                              |  Writer  | ---> fault
                                                              +----------+
                                                    retire, beat |    ^ ack_full
                                                                 v    |
       wr_ack ---------------------------------------------> +------------+ ---> status[]
       issued (Walker), dropped (Translator) --------------> | Completion | ---> cleared
       clear, busy (FrontEnd, Walker) ----------------------> +------------+   (Translator)

* :mod:`.frontend` :class:`FrontEnd`: two descriptor slots per channel (LUT
  RAM) and the round-robin arbiter (:class:`hw.lib.RoundRobin`) that grants
  the walker one channel per cycle.
* :mod:`.walker` :class:`Walker`: the mid-end; per-channel walk state in LUT
  RAM, one chunk per grant, cut at row ends, smallest-page ends of the source
  and destination and destination burst windows; three stages (read the
  state, cut the chunk, write the state back, the write-back forwarded to a
  read of the same channel in its cycle).
* :mod:`.translate` :class:`Translator`: per-channel page cache, the MMU
  port, and the fault marker that halts a channel.
* :mod:`.reader` :class:`Reader`: word reads of each command, credit-limited,
  into the read-data queue; marks commands whose first word is already held.
* :mod:`.writer` :class:`Writer`: the realigning shifter and byte enables;
  fault records.
* :mod:`.decode`: the reader's and writer's word and beat counts as small
  tables (no carry chain on a command's low address bits).
* :mod:`.completion` :class:`Completion`: in-flight and acknowledgement
  counts, done counts and tags, errors, status.
* :mod:`.layouts`: the port and inter-stage payloads, and
  :class:`DmaGeometry` (the widths every stage derives).

Chunks
------
A chunk is the longest piece of the byte stream that stays inside one row,
one smallest page of the source, one smallest page of the destination and
one ``burst_len``-beat window of the destination. The walker issues at most
one chunk a cycle; one channel alone gets a grant every second cycle
(plenty: a chunk is at least one beat and usually many); several share the
grants round-robin, so their beats interleave chunk by chunk. Starting a
descriptor costs its channel one grant (and, when the same channel's grant
arrives in the cycle its previous descriptor ends, one more cycle: the
front end is given time to offer the next descriptor); the back-end never
waits for it as long as earlier chunks are queued. The reader and the writer
decode each command as they take it, off their queue's LUT RAM read, into a
two-entry register slice (:mod:`.decode`: the counts and the state a
command starts in are worked out there, so the slice's output is loaded as
it is), and start it from there (registered for 125 MHz on an ECP5).

Translation
-----------
The translator looks a chunk up as it takes it and registers the lookup: a
chunk on the channel's cached source and destination pages leaves through
the translator's output slice two cycles after it was taken, one chunk a
cycle; otherwise the translator asks the MMU, source first, then
destination, one request at a time. A descriptor's first chunk is always
translated afresh, and ``flush`` empties every cache a cycle after it is
seen (the translator registers it). The first failing translation stops the
channel: a ``FAULT`` command carrying the record goes down the pipe behind the
commands already translated, the channel's later chunks and descriptors are
dropped, nothing after it is written, and the record leaves on ``fault``
after every earlier write beat of the channel was issued. The channel then
reports ``error`` (with ``cause`` and ``va``) and discards descriptors until
``clear``.

Back-end
--------
The reader issues ``ceil((src % B + len) / B)`` word reads per chunk (one
fewer when the chunk continues its row and its first word is the previous
chunk's last, which the writer still holds); the writer turns them into
``ceil((dst % B + len) / B)`` write beats through a 2-word window shifted by
``(src - dst) mod B`` bytes.

Completion
----------
A write beat is *accepted* when ``wr.valid & wr.ready``. It is *done* when the
destination returns one ``wr_ack`` (payload: channel) for it; acks of
different beats may come back in any order. A channel's descriptors are
reported complete (``status[i].done_count`` and ``done_tag``) once their last
beat was issued and the channel has no unacknowledged write, so completion
means "visible at the destination" as far as the acks promise it. Wiring
``wr_ack`` to ``wr.valid & wr.ready`` (same cycle) makes "accepted" the
completion point.
"""
from .layouts import ChannelStatus, CopyDescriptor, DmaFault, DmaGeometry, DmaWrite
from .top import DMA

__all__ = ["CopyDescriptor", "DmaWrite", "ChannelStatus", "DmaFault", "DMA", "DmaGeometry"]
