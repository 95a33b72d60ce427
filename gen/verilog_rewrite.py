"""Rewrites of the emitted Verilog that make Verilator's per-cycle code cheaper (C++ harness).

Verilator evaluates every combinational statement on every cycle, idle or not
(it tracks no activity), and Yosys writes Amaranth's netlist in a form that
costs it work the hardware does not do. Two rewrites, the behaviour unchanged
(the harness's results and cycle counts are checked against the Amaranth
simulator and the golden model by the test suite):

- :func:`payload_logic_under_valid`: a pipeline stage loads its payload only
  with a request (``with m.If(i.valid)`` in ``hw.reduce.common`` and
  ``hw.mmu``), but the logic computing the payload reaches Verilog as
  ``assign`` statements and ``always @*`` blocks of its own, evaluated every
  cycle. Every such definition whose only reader is the stage's
  ``if (i__valid) begin ... end`` branch (directly or through other such
  definitions) moves into that branch, in dependency order; when the branch
  is not taken its variables keep stale values that nothing reads.
- :func:`next_state_into_clocked_blocks`: Yosys writes every register as
  ``always @(posedge clk) r <= n;`` with the next state ``n`` an ``always @*``
  block starting from ``n = r;``, so Verilator copies every register, however
  wide, every cycle. Folded into the clocked block, an idle register costs
  only its conditions.

On the tiny 2-device reshard the two took the harness from 18,770 to 14,402
instructions a cycle (the reduce datapath, idle in a weight sync, had been a
fifth of them). The plain Verilog testbench keeps the Verilog as emitted.
"""
from __future__ import annotations

import re

_MODULE = re.compile(r"(?ms)^module (\\\S+|\w+) ?\((.*?)\);\n.*?^endmodule\n")
_ASSIGN = re.compile(r"^  assign (\\\S+ |[A-Za-z_][\w$]*) = (.*);$")
_DECL = re.compile(r"^  (wire|reg) (\[[^\]]*\] )?(\\\S+ |[A-Za-z_][\w$]*) ?;$")
# the target of a procedural assignment: ``    lz0 = 4'hb;``, ``    \\@L8 [9] = \\@L32 ;``
_TARGET = re.compile(r"^ +(\\\S+ |[A-Za-z_][\w$]*) ?(?:\[[^\]]*\] ?)?= ")
_ASSIGNS = re.compile(r"(?<![=!<>])=(?!=)")
# identifiers: escaped (up to the space that ends them) or plain; sized constants skipped
_TOKEN = re.compile(r"\d*'[sS]?[bBoOdDhH][0-9a-fA-FxXzZ_?]+|\\\S+|[A-Za-z_][\w$]*")
BRANCH = "if (i__valid) begin"


def _names(text: str) -> list[str]:
    return [t for t in _TOKEN.findall(text) if "'" not in t]


def _blocks(lines: list[str]) -> list[tuple[int, int]]:
    """(first, last) line of each ``always @*`` block."""
    out, i = [], 0
    while i < len(lines):
        if lines[i] == "  always @* begin":
            out.append((i, lines.index("  end", i)))
            i = out[-1][1]
        i += 1
    return out


def _targets(block: list[str]) -> set[str]:
    return {t.group(1).strip() for t in map(_TARGET.match, block) if t}


def _branches(lines: list[str]) -> list[tuple[int, int]]:
    """(first, last) line of each ``if (i__valid) begin`` ... ``end`` (no ``else``) inside a
    register's next-state block (an ``always @*`` block whose target a clocked block loads)."""
    loaded = {t.strip() for ln in lines if " <= " in ln for t in _names(ln.split(" <= ", 1)[1])}
    out = []
    for start, end in _blocks(lines):
        if not _targets(lines[start + 1:end]) & loaded:
            continue
        for j in range(start + 1, end):
            if lines[j].strip() != BRANCH:
                continue
            indent = lines[j][:len(lines[j]) - len(lines[j].lstrip())]
            close = next(k for k in range(j + 1, end) if lines[k].startswith(f"{indent}end"))
            if lines[close] == f"{indent}end":
                out.append((j, close))
    return out


def _understood(block: list[str]) -> bool:
    """Every assignment in these lines assigns a name _TARGET reads (not ``{a, b} = ...``)."""
    return all(_TARGET.match(t) or not _ASSIGNS.search(t) or t.lstrip().startswith("(*")
               for t in block)


class _Definition:
    """What computes one name: an ``assign`` or an ``always @*`` block assigning only it."""

    def __init__(self, lines: list[int], body: list[str], reads: set[str], wire: bool):
        self.lines, self.body, self.reads, self.wire = lines, body, reads, wire


def _definitions(lines: list[str]) -> dict[str, _Definition]:
    defs: dict[str, _Definition] = {}
    for i, ln in enumerate(lines):
        if a := _ASSIGN.match(ln):
            name = a.group(1).strip()
            defs[name] = _Definition([i], [f"{name} = {a.group(2)};"], set(_names(a.group(2))), True)
    for start, end in _blocks(lines):
        inner = lines[start + 1:end]
        targets = _targets(inner)
        if len(targets) == 1 and _understood(inner):
            name = targets.pop()
            reads = set(_names("\n".join(inner))) - {name}
            defs[name] = _Definition(list(range(start, end + 1)), [t[2:] for t in inner], reads, False)
    return defs


def _gate_module(text: str) -> tuple[str, int]:
    lines = text.split("\n")
    branches = _branches(lines)
    if not branches:
        return text, 0
    header_ports = set(_names(_MODULE.match(text).group(2)))
    wires, regs, declarations = {}, set(), set()   # wire name -> its declaration's line; reg names
    for i, ln in enumerate(lines):
        if d := _DECL.match(ln):
            declarations.add(i)
            if d.group(1) == "wire":
                wires[d.group(3).strip()] = i
            else:
                regs.add(d.group(3).strip())
    defs = _definitions(lines)
    candidates = {n for n, d in defs.items() if n not in header_ports
                  and (n in wires if d.wire else n in regs)
                  and not any(d.lines[0] <= last and first <= d.lines[-1] for first, last in branches)}
    # who reads each name: ("def", name), ("branch", k) or ("other", line)
    site_of = {}
    for n, d in defs.items():
        for i in d.lines:
            site_of[i] = ("def", n)
    for k, (first, last) in enumerate(branches):
        for i in range(first + 1, last):
            site_of[i] = ("branch", k)
    readers: dict[str, set] = {}
    for i, ln in enumerate(lines):
        if i in declarations:
            continue
        site = site_of.get(i, ("other", i))
        if site[0] == "def" and defs[site[1]].wire:
            names = defs[site[1]].reads
        else:                                    # a block's own target is not a reader
            names = set(_names(ln)) - ({site[1]} if site[0] == "def" else set())
        for n in names:
            readers.setdefault(n, set()).add(site)
    # names nothing reads (Amaranth's aliases of named signals, ``assign diff0 = \\@L10 [7:0];``)
    # would otherwise count as readers outside the branch: they go, as Verilator drops them anyway
    dead = {n for n in candidates if defs[n].wire and not readers.get(n)}
    while dead:
        for n in dead:
            lines[defs[n].lines[0]] = lines[wires[n]] = None
            for r in defs[n].reads:
                readers.get(r, set()).discard(("def", n))
            candidates.discard(n)
        dead = {n for n in candidates if defs[n].wire and not readers.get(n)}
    moved = 0
    for k, (first, last) in enumerate(branches):
        roots = set(_names("\n".join(lines[first + 1:last]))) & candidates
        cone = _cone(roots, candidates, defs)
        while True:                              # drop what anything outside reads
            keep = {n for n in cone
                    if readers.get(n, set()) <= {("branch", k)} | {("def", c) for c in cone}}
            keep = _cone(roots & keep, keep, defs)
            if keep == cone:
                break
            cone = keep
        if not cone:
            continue
        indent = lines[first][:len(lines[first]) - len(lines[first].lstrip())] + "  "
        body = [f"{indent}{b}" for n in _in_order(cone, defs) for b in defs[n].body]
        lines[first] = lines[first] + "\n" + "\n".join(body)
        for n in cone:
            for i in defs[n].lines:
                lines[i] = None
            if defs[n].wire:
                lines[wires[n]] = lines[wires[n]].replace("  wire ", "  reg ", 1)
        candidates -= cone
        moved += len(cone)
    return "\n".join(ln for ln in lines if ln is not None), moved


def _cone(roots: set, allowed: set, defs: dict) -> set:
    seen, todo = set(), [r for r in roots if r in allowed]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        todo.extend(d for d in defs[n].reads if d in allowed and d not in seen)
    return seen


def _in_order(cone: set, defs: dict) -> list[str]:
    """The cone's definitions, each after the ones it reads."""
    out, done = [], set()

    def visit(n, path=()):
        if n in done:
            return
        if n in path:
            raise ValueError(f"combinational loop through {n}")
        for d in sorted(defs[n].reads & cone, key=lambda d: defs[d].lines[0]):
            visit(d, path + (n,))
        done.add(n)
        out.append(n)
    for n in sorted(cone, key=lambda n: defs[n].lines[0]):
        visit(n)
    return out


def payload_logic_under_valid(design: str) -> tuple[str, int]:
    """(the design with each stage's payload logic under its ``valid``, definitions moved)."""
    return _per_module(design, _gate_module)


_CLOCKED = re.compile(r"^  always @\(posedge (\w+)\)$")
_LOAD = re.compile(r"^    (\\\S+ |[A-Za-z_][\w$]*) ?<= (\\\S+ |[A-Za-z_][\w$]*) ?;$")


def _fold_module(text: str) -> tuple[str, int]:
    lines = text.split("\n")
    header_ports = set(_names(_MODULE.match(text).group(2)))
    loads = {}                                   # next-state name -> (register, clock, first line)
    for i in range(len(lines) - 1):
        if (c := _CLOCKED.match(lines[i])) and (ld := _LOAD.match(lines[i + 1])):
            loads.setdefault(ld.group(2).strip(), []).append((ld.group(1).strip(), c.group(1), i))
    uses: dict[str, int] = {}
    for ln in lines:
        for n in _names(ln):
            uses[n] = uses.get(n, 0) + 1
    decls = {}
    for i, ln in enumerate(lines):
        if (d := _DECL.match(ln)) and d.group(1) == "reg":
            decls[d.group(3).strip()] = i
    folded = 0
    for first, last in _blocks(lines):
        body = lines[first:last + 1]
        targets = _targets(body)
        loaded = [n for n in targets if n in loads]
        if len(loaded) != 1 or not _understood(body):
            continue
        name = loaded[0]
        if name in header_ports or name not in decls or len(loads[name]) != 1:
            continue
        reg, clock, at = loads[name][0]
        inside: dict[str, int] = {}
        for ln in body:
            for n in _names(ln):
                inside[n] = inside.get(n, 0) + 1
        reads_own = any(name in _names(ln.split(" = ", 1)[1]) for ln in body if " = " in ln)
        # nothing outside names it but its declaration and the clocked load; the block's
        # other targets (stage logic moved in by payload_logic_under_valid) stay inside
        if (reads_own or uses[name] != inside[name] + 2
                or any(uses[t] != inside[t] + 1 for t in targets - {name})):
            continue
        out = [f"  always @(posedge {clock}) begin"]
        reg_ref = reg + " " if reg.startswith("\\") else reg
        for ln in body[1:-1]:
            t = _TARGET.match(ln)
            if " ".join(ln.split()) in ("if (\\@L0 ) begin end", f"{name} = {reg_ref.strip()};",
                                        f"{name} = {reg_ref}"[:-1] + " ;"):
                continue                         # the event simulators' start-up trigger; holding
            if t and t.group(1).strip() == name:
                lhs, rhs = ln.split(" = ", 1)
                at_name = lhs.index(name)
                rest = lhs[at_name + len(name):].strip()
                ln = f"{lhs[:at_name]}{reg_ref}{rest} <= {rhs}".replace("  <=", " <=")
            out.append(ln)
        out.append("  end")
        lines[first] = "\n".join(out)
        for i in range(first + 1, last + 1):
            lines[i] = None
        lines[at] = lines[at + 1] = lines[decls[name]] = None
        folded += 1
    return "\n".join(ln for ln in lines if ln is not None), folded


def next_state_into_clocked_blocks(design: str) -> tuple[str, int]:
    """(the design with each register's next-state block folded into its clocked block, how many).

    Yosys writes every register as ``always @(posedge clk) r <= n;`` and the
    next state ``n`` as an ``always @*`` block that starts from ``n = r;`` and
    overwrites it under the load conditions; Verilator then copies every
    register, however wide, on every cycle. Folded, the block's assignments to
    ``n`` become non-blocking assignments to ``r`` in the clocked block (the
    default ``n = r;`` goes), so an idle register costs its conditions only.
    Only where ``n`` is named nowhere else.
    """
    return _per_module(design, _fold_module)


def _per_module(design: str, rewrite) -> tuple[str, int]:
    """``rewrite`` (module text -> (text, count)) applied to every module; the counts summed."""
    total = 0

    def module(m):
        nonlocal total
        text, n = rewrite(m.group(0))
        total += n
        return text
    return _MODULE.sub(module, design), total
