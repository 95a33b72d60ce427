"""The round-robin arbiter."""
from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["RoundRobin", "ParkedRoundRobin"]


def _check_count(count):
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"Requester count must be a positive integer, not {count!r}")
    return count


def _pick_after(m, domain, holder, requests, n, pick):
    """Assign ``pick(c)`` for the first requester ``c`` after ``holder`` (the
    holder itself last): the lowest-priority assignment comes first, so the
    highest one wins."""
    for c in reversed([(holder + 1 + k) % n for k in range(n)]):
        with m.If(requests[c]):
            m.d[domain] += pick(c)


class RoundRobin(wiring.Component):
    """Round-robin arbiter: grants the first request after the last grant.

    The grant is combinational from ``requests`` and the registered last
    grant; the last grant moves to ``grant`` at a clock edge where ``advance``
    is high. So a requester that was just served goes to the back of the
    queue, and with ``n`` requesters none waits more than ``n - 1`` grants.
    After reset the last grant is 0, so requester 1 has the highest priority.

    Parameters
    ----------
    count : int
        Number of requesters (at least 1).

    Interface attributes
    --------------------
    requests : ``In(count)``
        One bit per requester.
    grant : ``Out(range(count))``
        The requester granted this cycle (0 when none requests).
    valid : ``Out(1)``
        Some requester is asserted (``grant`` is meaningful).
    advance : ``In(1)``
        The grant was used: make it the last grant.
    """

    def __init__(self, count):
        self._count = _check_count(count)
        super().__init__({
            "requests": In(count),
            "grant": Out(range(max(2, count))),
            "valid": Out(1),
            "advance": In(1),
        })

    count = property(lambda self: self._count, doc="Number of requesters.")

    def elaborate(self, platform):
        m = Module()
        n = self._count
        last = Signal(range(max(2, n)))
        m.d.comb += self.valid.eq(self.requests.any())
        with m.Switch(last):
            for l in range(n):
                with m.Case(l):
                    _pick_after(m, "comb", l, self.requests, n, self.grant.eq)
        with m.If(self.advance & self.valid):
            m.d.sync += last.eq(self.grant)
        return m


class ParkedRoundRobin(wiring.Component):
    """Round-robin arbiter whose grant is a register: a requester learns it
    may go from a flip-flop, never from the other requesters' requests.

    ``grant`` (one-hot) names the requester that may go this cycle. At each
    clock edge the grant moves to the first requester after the granted one
    among this cycle's ``requests`` (the granted one itself last, so a lone
    requester keeps it), and goes home to requester 0 when nothing is
    requested (so an idle arbiter is in one state, whatever came before).
    So a requester that goes on requesting keeps full throughput, one that
    waits is granted within ``count - 1`` edges, and what it costs against
    :class:`RoundRobin` is a cycle whenever the grant is parked on a
    requester that has nothing to send while another has. With ``hold``
    high the grant stays where it is (the holder asked but could not go:
    its resource was busy). After reset requester 0 holds the grant.

    Parameters
    ----------
    count : int
        Number of requesters (at least 1).

    Interface attributes
    --------------------
    requests : ``In(count)``
        One bit per requester.
    grant : ``Out(count)``
        One-hot, from a register: the requester that may go this cycle.
    hold : ``In(1)``
        Keep the grant at this clock edge.
    grant_next : ``Out(count)``
        The grant after this clock edge (combinational), for a user that
        registers something from it, such as a ready for the next cycle.
    """

    def __init__(self, count):
        self._count = _check_count(count)
        super().__init__({"requests": In(count), "grant": Out(count, init=1), "hold": In(1),
                          "grant_next": Out(count)})

    count = property(lambda self: self._count, doc="Number of requesters.")

    def elaborate(self, platform):
        m = Module()
        n = self._count
        nxt = self.grant_next
        m.d.comb += nxt.eq(self.grant)
        with m.If(~self.hold):
            m.d.comb += nxt.eq(1)               # home, unless someone requests
            for g in range(n):
                with m.If(self.grant[g]):
                    _pick_after(m, "comb", g, self.requests, n, lambda c: nxt.eq(1 << c))
        m.d.sync += self.grant.eq(nxt)
        return m
