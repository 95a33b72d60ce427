"""Fetch: instruction memory and the program counter."""
from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..isa import WORD_BITS
from .common import Fetched, ImemWrite

__all__ = ["Fetch"]


class Fetch(wiring.Component):
    """Instruction memory (``imem_words`` words of 256 bits) and the prefetcher.

    Programs run straight through (no instruction jumps), so the fetcher reads
    ahead of execution instead of waiting for an instruction to retire: a read
    stage (the block RAM's own output register) and an output register, each
    a stream stage that holds its word while the next one is full. So the
    block RAM's slow clock-to-output and the decoder never meet in one cycle,
    and the address never depends on what the execution units decide. A
    stream without back-pressure gets a word every cycle; the first word of a
    run leaves two cycles after ``run`` rises.

    After the word at ``imem_words - 1``, one more word is offered with ``pc``
    = ``imem_words`` (its contents undefined) for the decoder to stop with
    ``PC_OVERFLOW``; then fetching stops.

    Parameters
    ----------
    imem_words : int
        Instruction memory depth.
    program : list of int
        Initial contents (the rest is zero).

    Interface attributes
    --------------------
    imem_w : ``In(stream.Signature(ImemWrite(imem_words)))``
        Host writes; ready while neither ``rewind`` nor ``run``; each is done a
        cycle after it is taken (no word is fetched in that cycle).
    rewind : ``In(1)``
        Drop the words read ahead and fetch again from word 0.
    run : ``In(1)``
        Fetch (ahead) while high.
    insn : ``Out(stream.Signature(Fetched(imem_words)))``
        The program's words in order, each with its address.
    """

    def __init__(self, imem_words, program=()):
        self._imem_words = imem_words
        self._program = list(program)
        super().__init__({
            "imem_w": In(stream.Signature(ImemWrite(imem_words))),
            "rewind": In(1),
            "run": In(1),
            "insn": Out(stream.Signature(Fetched(imem_words))),
        })

    def elaborate(self, platform):
        m = Module()
        n = self._imem_words
        # (written only while stopped, read only while running, so a read never
        # meets a write. Synthesis spares the flip-flops that emulate the old
        # data of such a collision, a word's width on each side, only for a
        # memory marked ``no_rw_check`` whose read register it merges itself:
        # hence a combinational read port and ``read_word``)
        m.submodules.imem = imem = Memory(shape=WORD_BITS, depth=n, init=self._program,
                                          attrs={"no_rw_check": 1})
        rp, wp = imem.read_port(domain="comb"), imem.write_port()
        read_word = Signal(WORD_BITS)
        fetch_pc = Signal(range(n + 2))          # the next word to read
        read_valid = Signal()                    # read_word holds the word at read_pc
        read_pc = Signal(range(n + 1))
        out = self.insn
        out_free = Signal()
        read_free = Signal()
        issue = Signal()
        m.d.comb += [
            out_free.eq(~out.valid | out.ready),
            read_free.eq(~read_valid | out_free),
            issue.eq(read_free & self.run & ~wp.en & (fetch_pc <= n)),   # (no read meets a write)
            rp.addr.eq(fetch_pc),
        ]
        with m.If(issue):                        # else it holds a word not yet moved on
            m.d.sync += read_word.eq(rp.data)
        with m.If(out_free):
            m.d.sync += [out.valid.eq(read_valid), out.p.pc.eq(read_pc), out.p.word.eq(read_word)]
        with m.If(read_free):
            m.d.sync += [read_valid.eq(issue), read_pc.eq(fetch_pc)]
        with m.If(issue):
            m.d.sync += fetch_pc.eq(fetch_pc + 1)
        with m.If(self.rewind):
            m.d.sync += [fetch_pc.eq(0), read_valid.eq(0), out.valid.eq(0)]

        # a write is registered and done a cycle after it is taken: the host
        # port's word reaches flip-flops next to it, not the block RAM's
        # inputs across the die (no fetch reads meanwhile: ``issue``)
        writable = ~(self.rewind | self.run)
        m.d.comb += self.imem_w.ready.eq(writable)
        m.d.sync += [wp.addr.eq(self.imem_w.p.addr), wp.data.eq(self.imem_w.p.data),
                     wp.en.eq(self.imem_w.valid & writable)]
        return m
