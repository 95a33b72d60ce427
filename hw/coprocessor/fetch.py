"""Fetch: instruction memory and the program counter."""
from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..isa import check_arch
from .common import ImemWrite
from .predecode import Fetched, PredecodedWord, Predecoder, predecoded_entry

__all__ = ["Fetch"]


class Fetch(wiring.Component):
    """Instruction memory (``imem_words`` words of 256 bits, each stored with
    its :class:`~.predecode.Predecoded` checks) and the prefetcher.

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

    The checks a word decides alone are made before it is stored: at
    elaboration for ``program`` (:func:`~.predecode.predecode`), by a
    :class:`~.predecode.Predecoder` for host writes. So the decoder starts
    from their results, not from the block RAM's 256 bits of word.

    Parameters
    ----------
    arch : :class:`hw.isa.ArchParams`
        ``imem_words`` is the instruction memory's depth; the rest is what the
        checks check against.
    program : list of int
        Initial contents (the rest is zero).

    Interface attributes
    --------------------
    imem_w : ``In(stream.Signature(ImemWrite(imem_words)))``
        Host writes; ready while neither ``rewind`` nor ``run``; each is done
        two cycles after it is taken (no word is fetched before).
    rewind : ``In(1)``
        Drop the words read ahead and fetch again from word 0.
    run : ``In(1)``
        Fetch (ahead) while high.
    insn : ``Out(stream.Signature(Fetched(imem_words)))``
        The program's words in order, each with its address.
    """

    def __init__(self, arch, program=()):
        check_arch(arch)
        imem_words = arch.imem_words
        self._arch = arch
        self._program = list(program)
        if len(self._program) > imem_words:
            raise ValueError(f"program of {len(self._program)} words does not fit an "
                             f"instruction memory of {imem_words}")
        super().__init__({
            "imem_w": In(stream.Signature(ImemWrite(imem_words))),
            "rewind": In(1),
            "run": In(1),
            "insn": Out(stream.Signature(Fetched(imem_words))),
        })

    def elaborate(self, platform):
        m = Module()
        arch = self._arch
        n = arch.imem_words
        image = self._program + [0] * (n - len(self._program))
        # (written only while stopped, read only while running, so a read never
        # meets a write. Synthesis spares the flip-flops that emulate the old
        # data of such a collision, a word's width on each side, only for a
        # memory marked ``no_rw_check`` whose read register it merges itself:
        # hence a combinational read port and ``read_word``)
        m.submodules.imem = imem = Memory(
            shape=PredecodedWord().size, depth=n, attrs={"no_rw_check": 1},
            init=[predecoded_entry(arch, w) for w in image])
        rp, wp = imem.read_port(domain="comb"), imem.write_port()
        read_word = Signal(PredecodedWord())
        fetch_pc = Signal(range(n + 2))          # the next word to read
        read_valid = Signal()                    # read_word holds the word at read_pc
        read_pc = Signal(range(n + 1))
        out = self.insn
        out_free = Signal()
        read_free = Signal()
        issue = Signal()
        writing = Signal()                       # a host write on its way to the memory
        m.d.comb += [
            out_free.eq(~out.valid | out.ready),
            read_free.eq(~read_valid | out_free),
            issue.eq(read_free & self.run & ~writing & (fetch_pc <= n)),   # (no read meets a write)
            rp.addr.eq(fetch_pc),
        ]
        with m.If(issue):                        # else it holds a word not yet moved on
            m.d.sync += read_word.eq(rp.data)
        with m.If(out_free):
            m.d.sync += [out.valid.eq(read_valid), out.p.pc.eq(read_pc),
                         out.p.word.eq(read_word.word), out.p.pre.eq(read_word.pre)]
        with m.If(read_free):
            m.d.sync += [read_valid.eq(issue), read_pc.eq(fetch_pc)]
        with m.If(issue):
            m.d.sync += fetch_pc.eq(fetch_pc + 1)
        with m.If(self.rewind):
            m.d.sync += [fetch_pc.eq(0), read_valid.eq(0), out.valid.eq(0)]

        # a write is predecoded on its way and reaches the block RAM from the
        # predecoder's flip-flops, not from the host port across the die
        # (no fetch reads meanwhile: ``issue``)
        m.submodules.predecoder = predecoder = Predecoder(arch)
        writable = ~(self.rewind | self.run)
        m.d.comb += [predecoder.i.valid.eq(self.imem_w.valid & writable),
                     predecoder.i.p.eq(self.imem_w.p),
                     self.imem_w.ready.eq(writable),
                     writing.eq(predecoder.busy),
                     wp.addr.eq(predecoder.o.p.addr), wp.data.eq(predecoder.o.p.data),
                     wp.en.eq(predecoder.o.valid)]
        return m
