"""One Verilog module for every set of identical ones: smaller simulators, faster builds.

Amaranth elaborates every instance on its own, so a 4-device system is four
copies of the device (and each device has a copy of every channel's and
lane's logic), each under its own module name. The copies differ only in
names Yosys numbers globally: wires such as ``\\$11`` or ``\\start$150`` and
ports such as ``\\port$13753$0`` that cross the hierarchy. Verilator compiles
each module name into C++ of its own, so the C++ compiler sees the design D
times over.

:func:`share_identical_modules` renames those numbered names by their order
in each module (ports in the header's order, with the parents' named
connections ``.\\port$13753$0 (...)`` renamed to match), then keeps one
module of each set whose text is then identical, pointing every instance at
it, and repeats until nothing more merges (children merging make parents
identical). Only names are changed: the netlist is the same.
"""
from __future__ import annotations

import re

_MODULE = re.compile(r"(?ms)^module (\\\S+|\w+) ?\((.*?)\);\n.*?^endmodule\n")
_ESCAPED = re.compile(r"\\\S+")
# an instance of an escaped-name module: "  \name  inst (" ... "  );"
_INSTANCE = re.compile(r"(?ms)^  (\\\S+) +(?:#\(.*?\) )?\S+ +\(\n.*?^  \);\n")
_CONNECTION = re.compile(r"\.(\\\S+) \(")


def _port_names(header: str) -> list[str]:
    return [p.strip() for p in header.split(",") if p.strip()]


def share_identical_modules(text: str, top: str) -> tuple[str, int]:
    """(Verilog with identical modules shared, how many modules were dropped)."""
    order, mods, headers = [], {}, {}
    for m in _MODULE.finditer(text):
        order.append(m.group(1))
        mods[m.group(1)] = m.group(0)
        headers[m.group(1)] = m.group(2)
    if not order:
        return text, 0
    names = set(order)
    # 1. numbered ports get names by position (not the top's: its ports are the interface)
    port_map = {}
    for n in order:
        numbered = [p for p in _port_names(headers[n]) if p.startswith("\\") and "$" in p]
        port_map[n] = {} if n == top else {p: f"\\@P{i}" for i, p in enumerate(numbered)}

    def rename_connections(body: str) -> str:
        def inst(mt):
            pm = port_map.get(mt.group(1), {})
            if not pm:
                return mt.group(0)
            return _CONNECTION.sub(lambda c: f".{pm.get(c.group(1), c.group(1))} (", mt.group(0))
        return _INSTANCE.sub(inst, body)

    # 2. every other numbered name by its first appearance
    def canonical(n: str) -> str:
        if n == top:
            return rename_connections(mods[n])
        local: dict[str, str] = {}
        pm = port_map[n]

        def name(mt):
            t = mt.group(0)
            if t == n:
                return "\\@SELF@"
            if t in pm:
                return pm[t]
            if t in names or "$" not in t or t.startswith("\\@"):     # "@": names given here
                return t
            if t not in local:
                local[t] = f"\\@L{len(local)}"
            return local[t]
        return _ESCAPED.sub(name, rename_connections(mods[n]))

    bodies = {n: canonical(n) for n in order}
    same: dict[str, str] = {}
    while True:
        groups: dict[str, list[str]] = {}
        for n in order:
            if n not in same and n != top:
                groups.setdefault(bodies[n], []).append(n)
        merged = {dup: g[0] for g in groups.values() for dup in g[1:]}
        if not merged:
            break
        same.update(merged)
        for n in order:
            if n not in same:
                bodies[n] = _ESCAPED.sub(lambda mt: merged.get(mt.group(0), mt.group(0)), bodies[n])
    kept = [bodies[n].replace("\\@SELF@", n) for n in order if n not in same]
    start = _MODULE.search(text).start()
    return text[:start] + "".join(kept), len(same)


def compile_shared_modules_once(text: str, keep_inlined: str = "reshard_sram",
                                min_bytes: int = 4096) -> tuple[str, int]:
    """Ask Verilator not to inline modules instanced more than once (and at least
    ``min_bytes`` long), so each is one C++ class the compiler sees once.

    Verilator otherwise inlines every module into the top, undoing the
    sharing in the C++ it writes. Modules that contain ``keep_inlined`` (the
    SRAM model, whose array the C++ harness reaches by its flat name) stay
    inlined. Returns the text and how many modules were marked.
    """
    blocks = {m.group(1): m for m in _MODULE.finditer(text)}
    children = {n: re.findall(r"(?ms)^  (\\\S+|\w+) +(?:#\(.*?\) )?\S+ +\(\n", m.group(0))
                for n, m in blocks.items()}
    uses: dict[str, int] = {}
    for kids in children.values():
        for k in kids:
            uses[k] = uses.get(k, 0) + 1
    holds: dict[str, bool] = {}

    def contains(n: str) -> bool:
        if n not in holds:
            holds[n] = n == keep_inlined or any(contains(k) for k in children.get(n, ()))
        return holds[n]
    marked = {n for n, m in blocks.items()
              if uses.get(n, 0) > 1 and len(m.group(0)) >= min_bytes and not contains(n)}

    def mark(m):
        if m.group(1) not in marked:
            return m.group(0)
        body = m.group(0)
        cut = body.index(");\n") + 3
        return body[:cut] + "  /*verilator no_inline_module*/\n" + body[cut:]
    return _MODULE.sub(mark, text), len(marked)
