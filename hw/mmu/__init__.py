"""The MMU: a software-managed, fully associative TLB with staged entries.

There is no page-table walker: the TLB *is* the page table (``docs/isa.md``),
so its capacity, placement and lookup priority are architectural and follow
the golden model exactly:

* ``REMAP`` overwrites a valid entry with the same (ctx, staged, size, va) in
  place; otherwise it takes the lowest-numbered invalid entry; otherwise it
  evicts the entry at the round-robin victim pointer, which then advances.
* ``INVAL`` invalidates the entry with the same (ctx, staged, size, va).
* ``COMMIT`` invalidates the context's active entries and activates its staged
  ones, in one clock edge.
* A translation of ``va`` in context ``c`` uses the valid, non-staged entries
  of ``c`` containing ``va``; the lowest-numbered one wins.

The block diagram is its composition::

    req --> MatchStage --> SelectStage --> CheckStage --> rsp
            (request reg,   (lowest group,   (permissions,
             hits, each      the winner's     range, pa)
             group's first)  fields)
                 ^               ^
                 +--- entries ---+---- CommandUnit <-- cmd      (idle)
                 hold <------------- fields_write / fields_free

Translation is a three-register pipeline (request, hits, selected
entry) that accepts one request per cycle and never inserts bubbles on hits
or misses: a request accepted at edge *t* has its hits computed from the TLB
and registered (each group's lowest) at edge *t+1*, the winning entry's fields registered
at edge *t+2*, and is answered (``rsp.valid``) in the cycle after edge *t+2*:
**three cycles from request to response**, hit or fault alike (two before
the match and the priority were split for timing). The pipeline stalls as a
whole while ``rsp`` is not ready.

Each translation sees either the state before or after any command, never a
mix: the hit vector reads the entries' ``valid``, ``staged``, ``ctx``,
``size`` and ``vpn`` at one edge, the fields (``perm``, ``dev``, ``ppn``,
``size``) are read at a later edge. ``INVAL`` and ``COMMIT`` change only
``valid`` and ``staged``, which the select stage does not read, so a
translation they overtake between the two edges sees the state before them.
``REMAP`` also writes fields, so it executes only at an edge where no hit
vector is waiting for its fields (``fields_free``: the select stage's input
is empty, copies of the match stage's valid register inverted), and while it waits the match stage registers no new hit vector
(``hold``): under a continuous translation stream a REMAP costs two bubbles,
INVAL and COMMIT none. (The coprocessor sends a REMAP only while every DMA
channel is done, so in a device a REMAP costs nothing.)

Commands take effect three edges after they are accepted, and the next one
is accepted at the edge where the previous one takes effect: one command
every three cycles (:class:`CommandUnit`).

* :mod:`.layouts`: the port and inter-stage layouts (:func:`TlbMatch`,
  :func:`TlbSelection`), the TLB entry and command, and the priority groups.
* :mod:`.lookup`: :class:`MatchStage`, :class:`SelectStage`, :class:`CheckStage`.
* :mod:`.command`: :class:`CommandUnit`, the TLB registers and the command engine.
* :mod:`.top`: :class:`MMU`, their composition.
"""

from .command import CommandUnit
from .layouts import (PRIORITY_GROUP, MmuCommand, MmuOp, TlbEntry, TlbMatch, TlbSelection,
                      TranslateCause, translate_request, translate_response)
from .lookup import CheckStage, MatchStage, SelectStage
from .top import MMU

__all__ = ["TranslateCause", "MmuOp", "translate_request", "translate_response",
           "MmuCommand", "TlbEntry", "TlbMatch", "TlbSelection", "PRIORITY_GROUP",
           "MatchStage", "SelectStage", "CheckStage", "CommandUnit", "MMU"]
