"""Every endpoint that misses the clock, from nextpnr's SDF (``--sdf``).

nextpnr prints one critical path per clock: after a fix, the next seed or
build shows the next one. A routed design's SDF holds every cell arc
(``IOPATH``), every routed connection (``INTERCONNECT``) and every setup
check (``TIMINGCHECK``), with the delays nextpnr's own timing analysis uses,
so one pass over it finds all the failing endpoints at once. Arrival times
take each arc's worst-case value; a clock pin's arc to an output starts a
path (a flip-flop's or a block RAM's clock-to-output), a setup check ends
one. On the ulx3s-85f board tops the worst endpoint found here matches
nextpnr's Fmax to the picosecond.

* :func:`parse_sdf`: the SDF text as a :class:`TimingGraph`;
* :func:`failing_endpoints`: the endpoints over a period, worst first, each
  with its path;
* :func:`group_endpoints`: the same by the signal they belong to (the cell
  name without the suffixes Yosys and nextpnr add), for the report;
* :func:`path_split`: a path's routing and logic, and its longest hop.
"""
from __future__ import annotations

import re
import statistics
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["TimingGraph", "Endpoint", "parse_sdf", "failing_endpoints", "group_endpoints",
           "signal_of", "summarize", "path_split"]

_TOKEN = re.compile(r'\(|\)|"[^"]*"|(?:\\.|[^\s()])+')
Pin = tuple[str, str]                        # (cell instance, port)


@dataclass
class TimingGraph:
    """Arcs between pins with worst-case delays in picoseconds."""
    arcs: dict = field(default_factory=lambda: defaultdict(list))   # pin -> [(pin, ps)]
    launch: dict = field(default_factory=dict)    # output pin -> clock-to-output, ps
    setup: dict = field(default_factory=dict)     # input pin -> setup time, ps


@dataclass
class Endpoint:
    """A setup check that fails: ``required_ns`` is arrival plus setup;
    ``path`` the pins from the launching output, each with the delay of the
    arc that reaches it (ns)."""
    pin: Pin
    required_ns: float
    path: list


def _tree(text: str) -> list:
    stack, cur = [], []
    for tok in _TOKEN.findall(text):
        if tok == "(":
            stack.append(cur)
            cur.append([])
            cur = cur[-1]
        elif tok == ")":
            if not stack:
                raise ValueError("SDF: unbalanced ')'")
            cur = stack.pop()
        else:
            cur.append(tok)
    if stack or not cur:
        raise ValueError("SDF: unbalanced '(' or empty file")
    return cur[0]


def _worst(triple: list) -> int:
    """``(min:typ:max)`` parsed as ``['min:typ:max']``: the max."""
    return int(float(triple[0].split(":")[-1])) if triple and triple[0] else 0


def _pin(text: str) -> Pin:
    inst, _, port = text.replace("\\", "").rpartition("/")
    return inst, port


def _port(item) -> str:
    """A port, or the port of an edge (``(posedge CLK)``)."""
    return (item[-1] if isinstance(item, list) else item).replace("\\", "")


def parse_sdf(text: str) -> TimingGraph:
    """Read nextpnr's SDF. Raises :class:`ValueError` on text that is not one."""
    root = _tree(text)
    if not root or root[0] != "DELAYFILE":
        raise ValueError("SDF: no DELAYFILE")
    g = TimingGraph()
    for cell in root[1:]:
        if isinstance(cell, list) and cell and cell[0] == "CELL":
            _read_cell(g, cell)
    return g


def _read_cell(g: TimingGraph, cell: list) -> None:
    inst = next((item[1].replace("\\", "") for item in cell[1:]
                 if item[0] == "INSTANCE" and len(item) > 1), "")
    clocks = set()
    for item in cell[1:]:
        if item[0] != "TIMINGCHECK":
            continue
        for check in item[1:]:
            if check[0] in ("SETUPHOLD", "SETUP"):
                clocks.add(_port(check[2]))
                pin = (inst, _port(check[1]))
                g.setup[pin] = max(g.setup.get(pin, 0), _worst(check[3]))
    for item in cell[1:]:
        if item[0] != "DELAY":
            continue
        for block in item[1:]:               # ABSOLUTE / INCREMENT
            for arc in block[1:]:
                if arc[0] == "INTERCONNECT":
                    g.arcs[_pin(arc[1])].append((_pin(arc[2]), _worst(arc[3])))
                elif arc[0] == "IOPATH":
                    src, dst = _port(arc[1]), (inst, _port(arc[2]))
                    # (a clock pin: named by the cell's setup checks, or by its
                    # name where a cell has none, such as a block RAM's read side)
                    if src in clocks or src.startswith("CLK"):
                        g.launch[dst] = max(g.launch.get(dst, 0), _worst(arc[3]))
                    else:
                        g.arcs[(inst, src)].append((dst, _worst(arc[3])))


def _arrivals(g: TimingGraph):
    """Latest arrival at each pin reached from a launch, and its predecessor
    (topological order; pins on a combinational loop are left out)."""
    indegree = defaultdict(int)
    for outs in g.arcs.values():
        for dst, _ in outs:
            indegree[dst] += 1
    arrival = dict(g.launch)
    before = {}
    ready = deque(p for p in set(g.arcs) | set(g.launch) if indegree[p] == 0)
    while ready:
        src = ready.popleft()
        t = arrival.get(src)
        for dst, delay in g.arcs.get(src, ()):
            if t is not None and t + delay > arrival.get(dst, -1):
                arrival[dst] = t + delay
                before[dst] = (src, delay)
            indegree[dst] -= 1
            if indegree[dst] == 0:
                ready.append(dst)
    return arrival, before


def failing_endpoints(g: TimingGraph, period_ns: float) -> tuple[float, list[Endpoint]]:
    """The worst endpoint's arrival plus setup (ns) and every endpoint over
    ``period_ns``, worst first."""
    arrival, before = _arrivals(g)
    worst, failing = 0.0, []
    for pin, setup in g.setup.items():
        if pin not in arrival:
            continue
        need = (arrival[pin] + setup) / 1000
        worst = max(worst, need)
        if need > period_ns:
            path, p = [], pin
            while p in before:
                src, delay = before[p]
                path.append((p, delay / 1000))
                p = src
            path.append((p, g.launch.get(p, 0) / 1000))
            failing.append(Endpoint(pin, need, path[::-1]))
    failing.sort(key=lambda e: -e.required_ns)
    return worst, failing


_SUFFIX = re.compile(r"_TRELLIS_|_LUT4_|_LUT4$|_PFUMX|_L6MUX|_CCU2|\$|_DPRAM|_D[IO][AB]\d|_AD[AB]\d"
                     r"|_SB_|_DFF")


def signal_of(cell: str) -> str:
    """The signal a cell belongs to: Yosys's and nextpnr's suffixes and a
    memory's block indices removed (``top.x.ring.0.32$DPRAM_COMB3`` ->
    ``top.x.ring``)."""
    name = _SUFFIX.split(cell)[0]
    return re.sub(r"(\.\d+)+$", "", name) or cell


def path_split(e: Endpoint) -> dict:
    """Where ``e``'s time goes: ``routing_ns`` (the arcs between two cells),
    ``logic_ns`` (clock-to-output, the arcs through cells, and the setup),
    ``cells`` (how many cells it passes through, launch and capture not
    counted) and its ``longest_hop_ns`` (the longest single route). A path
    whose routing is most of it, in one long hop, needs its cells nearer
    together (or fewer loads on that net), not fewer levels of logic."""
    routing = longest = 0.0
    cells = 0
    for (prev, _), (pin, delay) in zip(e.path, e.path[1:]):
        if prev[0] != pin[0]:
            routing += delay
            longest = max(longest, delay)
        else:
            cells += 1
    return {"routing_ns": round(routing, 2), "logic_ns": round(e.required_ns - routing, 2),
            "cells": cells, "longest_hop_ns": round(longest, 2)}


def group_endpoints(failing: list[Endpoint]) -> list[dict]:
    """The failing endpoints by signal, the worst group first: each with its
    count, its worst figure, that endpoint's path (cells only) and where its
    time goes (:func:`path_split`)."""
    groups: dict[str, list[Endpoint]] = {}
    for e in failing:
        groups.setdefault(signal_of(e.pin[0]), []).append(e)
    out = []
    for signal, items in sorted(groups.items(), key=lambda kv: -kv[1][0].required_ns):
        worst = items[0]
        cells = [p[0] for p, _ in worst.path]
        out.append({"signal": signal, "endpoints": len(items),
                    "worst_ns": round(worst.required_ns, 2),
                    "worst_path": [c for i, c in enumerate(cells) if i == 0 or c != cells[i - 1]],
                    **path_split(worst)})
    return out


def summarize(text: str, constraint_mhz: float, *, groups: int = 25) -> dict:
    """The report's ``failing_endpoints``: the constraint, the worst figure,
    how many endpoints miss it, by how much in all (``tns_ns``, the total
    negative slack: the sum of each failing endpoint's miss; it ranks two
    netlists less noisily than the worst path alone) and the ``groups``
    worst signals."""
    period = 1000 / constraint_mhz
    worst, failing = failing_endpoints(parse_sdf(text), period)
    grouped = group_endpoints(failing)
    splits = [path_split(e) for e in failing]
    median = (lambda xs: round(statistics.median(xs), 2) if xs else None)
    return {"constraint_mhz": constraint_mhz, "worst_ns": round(worst, 2),
            "fmax_mhz": round(1000 / worst, 2) if worst else None,
            "endpoints": len(failing), "tns_ns": round(sum(e.required_ns - period for e in failing), 2),
            # over the failing endpoints: how much of a path is routing, and its longest hop
            "median_routing_share": median([x["routing_ns"] / e.required_ns for x, e in zip(splits, failing)]),
            "median_longest_hop_ns": median([x["longest_hop_ns"] for x in splits]),
            "median_cells": median([x["cells"] for x in splits]),
            "signals": len(grouped), "worst_signals": grouped[:groups]}


def endpoints_report(sdf_path, constraint_mhz: float, fmax_mhz: float | None) -> dict:
    """:func:`summarize` for the SDF at ``sdf_path`` (a design with one clock),
    with ``agrees_with_nextpnr``: its worst figure against nextpnr's Fmax
    ``fmax_mhz`` (within 0.5 %). An SDF that is missing or unreadable gives
    ``{"unavailable": why}``, never a guess."""
    path = Path(sdf_path)
    try:
        summary = summarize(path.read_text(), constraint_mhz)
    except (OSError, ValueError) as e:
        return {"unavailable": f"{path}: {e}"}
    mine = summary["fmax_mhz"]
    summary["agrees_with_nextpnr"] = bool(mine and fmax_mhz and abs(mine - fmax_mhz) <= 0.005 * fmax_mhz)
    summary["sdf"] = str(path)
    return summary
