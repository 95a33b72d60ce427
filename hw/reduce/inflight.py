"""The addresses of the beats inside a pipeline, for hazard checks."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["InFlight"]


class InFlight(wiring.Component):
    """A ring of the addresses of up to ``depth`` beats that entered a
    pipeline and have not left it, oldest first (beats leave in order), and
    one comparator per entry.

    ``push`` adds ``push_addr`` at the clock edge; ``pop`` removes the
    oldest (both in one cycle on a full ring reuse its slot). ``hit`` is
    combinational: some held address equals ``probe``, not counting the
    oldest while ``skip_oldest`` is high (the caller takes that one's value
    from the pipeline's output instead).

    Parameters
    ----------
    depth : int
        The most beats in flight (the pipeline's capacity).
    addr_width : int

    Interface attributes
    --------------------
    push : ``In(1)``
    push_addr : ``In(addr_width)``
    pop : ``In(1)``
    probe : ``In(addr_width)``
    skip_oldest : ``In(1)``
    hit : ``Out(1)``
    """

    def __init__(self, depth, addr_width):
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
            raise ValueError(f"Depth must be a positive integer, not {depth!r}")
        self._depth = depth
        super().__init__({"push": In(1), "push_addr": In(addr_width), "pop": In(1),
                          "probe": In(addr_width), "skip_oldest": In(1), "hit": Out(1)})

    depth = property(lambda self: self._depth, doc="Number of entries.")

    def elaborate(self, platform):
        m = Module()
        n = self._depth
        valid = [Signal(name=f"valid{k}") for k in range(n)]
        addr = [Signal.like(self.push_addr, name=f"addr{k}") for k in range(n)]
        head = Signal(range(n))              # the oldest entry
        tail = Signal(range(n))              # the next free slot

        def step(ptr):
            return Mux(ptr == n - 1, 0, ptr + 1)

        m.d.comb += self.hit.eq(Cat(*[
            valid[k] & (addr[k] == self.probe) & ~(self.skip_oldest & (head == k))
            for k in range(n)]).any())
        with m.If(self.pop):
            m.d.sync += head.eq(step(head))
            for k in range(n):
                with m.If(head == k):
                    m.d.sync += valid[k].eq(0)
        with m.If(self.push):                # after the pop, so a reused slot ends valid
            m.d.sync += tail.eq(step(tail))
            for k in range(n):
                with m.If(tail == k):
                    m.d.sync += [valid[k].eq(1), addr[k].eq(self.push_addr)]
        return m
