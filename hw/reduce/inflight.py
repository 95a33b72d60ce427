"""The addresses of the beats inside a pipeline, for hazard checks."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["InFlight"]


class InFlight(wiring.Component):
    """A ring of the addresses of up to ``depth`` beats that entered a
    pipeline and have not left it, oldest first (beats leave in order), and
    a held ``probe`` address checked against them.

    ``push`` adds ``push_addr`` at the clock edge; ``pop`` removes the
    oldest (both in one cycle on a full ring reuse its slot). ``load``
    makes ``load_addr`` the probe at the clock edge (``load_alt_addr``
    while ``load_alt`` is high: a caller choosing between two candidates
    lets this ring compare both and choose after). ``hit``: some held
    address equals ``probe``, not counting the oldest while ``skip_oldest``
    is high (the caller takes that one's value from the pipeline's output
    instead).

    The comparisons are registered: each entry keeps a bit saying whether it
    equals the probe, worked out a cycle early for the entry and probe of
    the next cycle (every candidate compared, ``push`` and ``load``, which
    arrive late, only choosing among them). So ``hit`` is a few gates from
    flip-flops, not an address comparator deep.

    With ``push_probe=True`` a push adds the held probe itself and
    ``push_addr`` is unused: for a caller whose probe is always the next
    address it pushes (the head of its queue), so the pushed address comes
    from this ring's own register, not through the caller's multiplexers.

    Parameters
    ----------
    depth : int
        The most beats in flight (the pipeline's capacity).
    addr_width : int
    push_probe : bool
        Push the probe instead of ``push_addr`` (default False).

    Interface attributes
    --------------------
    push : ``In(1)``
    push_addr : ``In(addr_width)``
    pop : ``In(1)``
    load : ``In(1)``
    load_addr : ``In(addr_width)``
    load_alt : ``In(1)``
    load_alt_addr : ``In(addr_width)``
    skip_oldest : ``In(1)``
    probe : ``Out(addr_width)``
        The held probe address.
    hit : ``Out(1)``
    """

    def __init__(self, depth, addr_width, *, push_probe=False):
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
            raise ValueError(f"Depth must be a positive integer, not {depth!r}")
        self._depth = depth
        self._push_probe = bool(push_probe)
        super().__init__({"push": In(1), "push_addr": In(addr_width), "pop": In(1),
                          "load": In(1), "load_addr": In(addr_width),
                          "load_alt": In(1), "load_alt_addr": In(addr_width),
                          "skip_oldest": In(1), "probe": Out(addr_width), "hit": Out(1)})

    depth = property(lambda self: self._depth, doc="Number of entries.")
    push_probe = property(lambda self: self._push_probe, doc="A push adds the probe.")

    def elaborate(self, platform):
        m = Module()
        n = self._depth
        valid = [Signal(name=f"valid{k}") for k in range(n)]
        addr = [Signal.like(self.push_addr, name=f"addr{k}") for k in range(n)]
        match = [Signal(name=f"match{k}") for k in range(n)]     # addr[k] == probe
        head = Signal(range(n))              # the oldest entry
        tail = Signal(range(n))              # the next free slot

        def step(ptr):
            return Mux(ptr == n - 1, 0, ptr + 1)

        m.d.comb += self.hit.eq(Cat(*[
            valid[k] & match[k] & ~(self.skip_oldest & (head == k))
            for k in range(n)]).any())
        with m.If(self.load):
            m.d.sync += self.probe.eq(Mux(self.load_alt, self.load_alt_addr, self.load_addr))
        # next cycle's match bits: every (entry, probe) pairing compared from
        # registers and both load candidates; push, load and load_alt only select
        pushed = self.probe if self._push_probe else self.push_addr

        def equals_new(value, name):
            # value == the probe loaded at this edge: both candidates compared
            main, alt = Signal(name=f"{name}_main"), Signal(name=f"{name}_alt")
            m.d.comb += [main.eq(value == self.load_addr), alt.eq(value == self.load_alt_addr)]
            return Mux(self.load_alt, alt, main)

        pushed_new = equals_new(pushed, "pushed_new")
        pushed_held = Signal()               # pushed == probe
        m.d.comb += pushed_held.eq(1 if self._push_probe else pushed == self.probe)
        for k in range(n):
            kept_new = equals_new(addr[k], f"kept_new{k}")
            into_k = self.push & (tail == k)
            m.d.sync += match[k].eq(Mux(self.load, Mux(into_k, pushed_new, kept_new),
                                        Mux(into_k, pushed_held, match[k])))
        with m.If(self.pop):
            m.d.sync += head.eq(step(head))
            for k in range(n):
                with m.If(head == k):
                    m.d.sync += valid[k].eq(0)
        with m.If(self.push):                # after the pop, so a reused slot ends valid
            m.d.sync += tail.eq(step(tail))
            for k in range(n):
                with m.If(tail == k):
                    m.d.sync += [valid[k].eq(1), addr[k].eq(pushed)]
        return m
