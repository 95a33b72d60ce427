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
* :func:`path_split`: a path's routing and logic, and its longest hop;
* :func:`placed_locations`: each cell's tile, from the netlist nextpnr
  writes once it has placed (``--write``), so that a hop's delay can be set
  beside the distance it covers: a route of several nanoseconds between
  neighbouring tiles went around congestion, it did not cross the die.
"""
from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["TimingGraph", "Endpoint", "parse_sdf", "failing_endpoints", "group_endpoints",
           "signal_of", "summarize", "path_split", "placed_locations", "is_detour"]

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


#: nextpnr's own estimate of a route's delay on ECP5 at speed 6 (its static
#: placer's model, ecp5/arch.cc): 0.72 ns plus 0.12 ns a tile, x plus y.
ESTIMATE_NS, ESTIMATE_NS_PER_TILE = 0.72, 0.12


def is_detour(delay_ns: float, tiles: int) -> bool:
    """A route that took at least twice what nextpnr's ECP5 placer estimates
    for its distance went around congestion rather than across the die. No
    route of the 85F device placed alone comes near it (at most 1.65 ns over
    2-4 tiles, 2.76 over 16-40, 2026-12-08); on the 2-device board 5.5 ns
    over 3 tiles and 9.8 over 15 did. (The tiles of an iCE40 are smaller:
    there the rule flags less than it should.)"""
    return delay_ns >= 2 * (ESTIMATE_NS + ESTIMATE_NS_PER_TILE * tiles)


_BEL_TILE = re.compile(r"X(\d+)/Y(\d+)/")


def placed_locations(text: str) -> dict[str, tuple[int, int]]:
    """Each placed cell's tile ``(x, y)``, from the JSON netlist nextpnr
    writes after placing (``--write``): the ``NEXTPNR_BEL`` attribute
    (``X37/Y73/SLICEA.K1``). The cell names are the SDF's instances."""
    where = {}
    for module in json.loads(text).get("modules", {}).values():
        for name, cell in module.get("cells", {}).items():
            m = _BEL_TILE.match(str(cell.get("attributes", {}).get("NEXTPNR_BEL", "")))
            if m:
                where[name] = (int(m[1]), int(m[2]))
    return where


def path_split(e: Endpoint, where: dict | None = None) -> dict:
    """Where ``e``'s time goes: ``routing_ns`` (the arcs between two cells),
    ``logic_ns`` (clock-to-output, the arcs through cells, and the setup),
    ``cells`` (how many cells it passes through, launch and capture not
    counted) and its ``longest_hop_ns`` (the longest single route). A path
    whose routing is most of it, in one long hop, needs its cells nearer
    together (or fewer loads on that net), not fewer levels of logic. With
    the cells' tiles (``where``, :func:`placed_locations`) also
    ``longest_hop_tiles``, the distance that hop covers (x plus y, None
    for a cell not in ``where``): a long hop over few tiles is a detour."""
    routing = longest = 0.0
    cells = 0
    hop = None
    for (prev, _), (pin, delay) in zip(e.path, e.path[1:]):
        if prev[0] != pin[0]:
            routing += delay
            if hop is None or delay > longest:
                longest, hop = delay, (prev[0], pin[0])
        else:
            cells += 1
    split = {"routing_ns": round(routing, 2), "logic_ns": round(e.required_ns - routing, 2),
             "cells": cells, "longest_hop_ns": round(longest, 2)}
    if where is not None:
        a, b = (where.get(c) for c in hop) if hop else (None, None)
        split["longest_hop_tiles"] = abs(a[0] - b[0]) + abs(a[1] - b[1]) if a and b else None
    return split


def group_endpoints(failing: list[Endpoint], where: dict | None = None) -> list[dict]:
    """The failing endpoints by signal, the worst group first: each with its
    count, its worst figure, that endpoint's path (cells only) and where its
    time goes (:func:`path_split`, with ``where``)."""
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
                    **path_split(worst, where)})
    return out


def summarize(text: str, constraint_mhz: float, *, groups: int = 25, where: dict | None = None) -> dict:
    """The report's ``failing_endpoints``: the constraint, the worst figure,
    how many endpoints miss it, by how much in all (``tns_ns``, the total
    negative slack: the sum of each failing endpoint's miss; it ranks two
    netlists less noisily than the worst path alone) and the ``groups``
    worst signals. With the cells' tiles (``where``) also the median
    distance of the failing paths' longest hops and how many of those hops
    are detours (:func:`is_detour`)."""
    period = 1000 / constraint_mhz
    worst, failing = failing_endpoints(parse_sdf(text), period)
    grouped = group_endpoints(failing, where)
    splits = [path_split(e, where) for e in failing]
    median = (lambda xs: round(statistics.median(xs), 2) if xs else None)
    summary = {"constraint_mhz": constraint_mhz, "worst_ns": round(worst, 2),
               "fmax_mhz": round(1000 / worst, 2) if worst else None,
               "endpoints": len(failing), "tns_ns": round(sum(e.required_ns - period for e in failing), 2),
               # over the failing endpoints: how much of a path is routing, and its longest hop
               "median_routing_share": median([x["routing_ns"] / e.required_ns
                                               for x, e in zip(splits, failing)]),
               "median_longest_hop_ns": median([x["longest_hop_ns"] for x in splits]),
               "median_cells": median([x["cells"] for x in splits])}
    if where is not None:
        tiles = [x for x in splits if x["longest_hop_tiles"] is not None]
        summary["median_longest_hop_tiles"] = median([x["longest_hop_tiles"] for x in tiles])
        summary["detours"] = sum(is_detour(x["longest_hop_ns"], x["longest_hop_tiles"]) for x in tiles)
    return {**summary, "signals": len(grouped), "worst_signals": grouped[:groups]}


def endpoints_report(sdf_path, constraint_mhz: float, fmax_mhz: float | None,
                     placed_path=None) -> dict:
    """:func:`summarize` for the SDF at ``sdf_path`` (a design with one clock),
    with ``agrees_with_nextpnr``: its worst figure against nextpnr's Fmax
    ``fmax_mhz`` (within 0.5 %), and with the tiles of the placed netlist at
    ``placed_path`` when there is one (``placed``: its path, or
    ``placed_unavailable``: why not). An SDF that is missing or unreadable
    gives ``{"unavailable": why}``, never a guess."""
    path = Path(sdf_path)
    where, placed_note = None, {}
    if placed_path is not None:
        try:
            where = placed_locations(Path(placed_path).read_text())
            placed_note = {"placed": str(placed_path)}
        except (OSError, ValueError) as e:
            placed_note = {"placed_unavailable": f"{placed_path}: {e}"}
    try:
        summary = summarize(path.read_text(), constraint_mhz, where=where)
    except (OSError, ValueError) as e:
        return {"unavailable": f"{path}: {e}"}
    mine = summary["fmax_mhz"]
    summary["agrees_with_nextpnr"] = bool(mine and fmax_mhz and abs(mine - fmax_mhz) <= 0.005 * fmax_mhz)
    summary["sdf"] = str(path)
    summary.update(placed_note)
    return summary
