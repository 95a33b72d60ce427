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
    """Instruction memory (``imem_words`` words of 256 bits) and the program counter.

    The read port is addressed with the *next* program counter, so the word at
    ``pc`` is on ``insn`` in the cycle ``pc`` holds it: an instruction that
    retires in every cycle streams without bubbles.

    Parameters
    ----------
    imem_words : int
        Instruction memory depth.
    program : list of int
        Initial contents (the rest is zero).

    Interface attributes
    --------------------
    imem_w : ``In(stream.Signature(ImemWrite(imem_words)))``
        Host writes; ready while neither ``rewind`` nor ``run``.
    rewind : ``In(1)``
        Hold the program counter at word 0 (the program is being restarted).
    run : ``In(1)``
        Offer the instruction at ``pc`` on ``insn``.
    insn : ``Out(stream.Signature(Fetched(imem_words)))``
        The instruction at ``pc`` (valid while ``run``); taking it moves
        ``pc`` to the next word.
    pc : ``Out(range(imem_words + 1))``
        The program counter.
    """

    def __init__(self, imem_words, program=()):
        self._imem_words = imem_words
        self._program = list(program)
        super().__init__({
            "imem_w": In(stream.Signature(ImemWrite(imem_words))),
            "rewind": In(1),
            "run": In(1),
            "insn": Out(stream.Signature(Fetched(imem_words))),
            "pc": Out(range(imem_words + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.imem = imem = Memory(shape=WORD_BITS, depth=self._imem_words,
                                          init=self._program)
        pc_next = Signal.like(self.pc)
        with m.If(self.rewind):
            m.d.comb += pc_next.eq(0)
        with m.Elif(self.insn.valid & self.insn.ready):
            m.d.comb += pc_next.eq(self.pc + 1)
        with m.Else():
            m.d.comb += pc_next.eq(self.pc)
        m.d.sync += self.pc.eq(pc_next)

        rp = imem.read_port(transparent_for=())
        m.d.comb += [rp.addr.eq(pc_next), rp.en.eq(1)]
        m.d.comb += [
            self.insn.valid.eq(self.run),
            self.insn.p.pc.eq(self.pc),
            self.insn.p.word.eq(rp.data),
        ]

        wp = imem.write_port()
        writable = ~(self.rewind | self.run)
        m.d.comb += [
            self.imem_w.ready.eq(writable),
            wp.addr.eq(self.imem_w.p.addr),
            wp.data.eq(self.imem_w.p.data),
            wp.en.eq(self.imem_w.valid & writable),
        ]
        return m
