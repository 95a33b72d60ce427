"""The reshard compiler: a ``minimal`` plan -> one coprocessor program per device.

Memory map of every device (the same on all, so windows line up):

- physical ``[0, train_span)``: the device's training shard buffer, mapped
  read-only at the same virtual addresses in context 0 (the copy context);
- physical ``[stage_pa, stage_pa + rollout_span)``: the staging area the
  rollout shard is assembled in; device d's staging area is mapped writable
  in context 0 of every device at ``stage_window(d)``, so a remote copy is a
  push into the destination's staging area;
- context 1 (the rollout context) maps the vLLM tensors at ``tensor_va``:
  pages whose bytes the device already holds, page-aligned, are remapped
  onto the training pages (zero copy); every other page maps the staging
  page of the same offset. These mappings are staged and switched in by one
  ``COMMIT`` once every device has signalled that its copies completed.

Each vLLM tensor's virtual address is chosen so that its largest local run
lands congruent, modulo the page size, with its training bytes: that is what
makes zero-copy remaps possible.

Each device issues its copies on one DMA channel in an all-to-all order
(:func:`_segments`): phases in which every destination's network input takes
from one source, so the reshard runs at the busiest port's bound
(docs/simulation.md, "A finding at scale").
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import NamedTuple

from hw.isa import ISA_VERSION, PERM_R, PERM_W, ArchParams, Op, encode
from model.errors import InputError
from model.plan import Plan, coalesce

CTX_COPY = 0
CTX_ROLLOUT = 1
SEM_DONE = 0
TENSOR_ALIGN = 64        # bytes; keeps DMA rows bus-aligned where possible


def _align(x: int, a: int) -> int:
    return -(-x // a) * a


class Copy(NamedTuple):
    """One DMA descriptor: ``rows`` rows of ``row_bytes`` bytes from virtual
    address ``src_va`` on device ``src_dev`` (rows ``src_stride`` apart) to
    ``dst_va`` (rows ``dst_stride`` apart), which lands on device ``dst_dev``;
    issued on DMA channel ``chan``. Before windows are applied, ``dst_va`` is
    an address in the destination's rollout span."""
    src_dev: int
    dst_dev: int
    src_va: int
    dst_va: int
    rows: int
    row_bytes: int
    src_stride: int
    dst_stride: int
    chan: int = 0

    #: the fields ``model.plan.coalesce`` merges
    GEOMETRY = ("src_va", "dst_va", "rows", "row_bytes", "src_stride", "dst_stride")

    @property
    def nbytes(self) -> int:
        return self.rows * self.row_bytes


@dataclass
class DeviceProgram:
    device: int
    words: list[int]
    asm: list[str]
    copies: list[Copy]
    tensors: list[dict]             # rollout tensors: name, shape, va, bytes
    remaps: list[tuple[int, int, int, int, int, int]]   # ctx, size_idx, perm, staged, va, pa
    bytes_copied: int = 0
    bytes_remapped: int = 0
    bytes_in: int = 0               # written into this device by others
    stats: dict = field(default_factory=dict)


@dataclass
class Compiled:
    plan: Plan
    arch: ArchParams
    train_span: int
    stage_pa: int
    rollout_span: int
    devices: list[DeviceProgram]

    def stage_window(self, d: int) -> int:
        return self.stage_pa + d * self.rollout_span

    def report(self, bus_bytes: int) -> list[dict]:
        out = []
        for p in self.devices:
            # memory ports: the DMA reads every byte it copies; its local beats enter memory
            # through one write port, other devices' beats (net_in) through another
            # (``hw.device``), so the two are separate bounds. (An FPGA build that shares one
            # physical write port, ``shared_write``, takes their sum: a tighter bound there.)
            reads = p.bytes_copied
            writes = sum(c.nbytes for c in p.copies if c.dst_dev == p.device)
            net_out = sum(c.nbytes for c in p.copies if c.dst_dev != p.device)
            ports = {"mem_read": reads, "mem_write": writes, "net_out": net_out, "net_in": p.bytes_in}
            out.append({"device": p.device, "descriptors": len(p.copies), "bytes_copied": p.bytes_copied,
                        "bytes_remapped": p.bytes_remapped, "remaps": len(p.remaps),
                        "instructions": len(p.words), "port_bytes": ports,
                        "lower_bound_beats": -(-max(ports.values()) // bus_bytes)})
        return out


def _greedy_pages(va: int, pa: int, n: int, sizes: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """Cover [va, va+n) -> [pa, ...) with the fewest aligned pages: (size_idx, va, pa)."""
    out = []
    end = va + n
    while va < end:
        for idx in range(len(sizes) - 1, -1, -1):
            s = sizes[idx]
            if va % s == 0 and pa % s == 0 and va + s <= end:
                break
        else:
            raise AssertionError("range not aligned to the smallest page")
        out.append((idx, va, pa))
        va += s
        pa += s
    return out


def choose_arch(plan: Plan, base: ArchParams | None = None, **overrides) -> tuple[ArchParams, int, int, int]:
    """Size device memory for the plan: (arch, train_span, stage_pa, rollout_span)."""
    es = plan.elem_bytes
    base = base or ArchParams()
    sizes = overrides.get("page_sizes") or base.page_sizes

    def span_align(n: int) -> int:
        # the smallest page that covers the region in at most 4 entries keeps the TLB small
        for s in sizes[1:]:
            if -(-n // s) <= 4:
                return s
        return sizes[-1]

    n_train = max(r.size for r in plan.train_layout.ranks) * es
    train_span = _align(n_train, span_align(n_train))
    # rollout span: tensors plus alignment slack (at most one page + TENSOR_ALIGN each)
    tensors = max(len(plan.rollout_tensors(g)) for g in range(plan.world))
    n_roll = max(r.size for r in plan.rollout_layout.ranks) * es + tensors * (sizes[0] + TENSOR_ALIGN)
    big = span_align(n_roll)
    rollout_span = _align(n_roll, big)
    # the staging base is aligned to the largest page so windows can use big pages
    stage_pa = _align(train_span, big)
    mem = stage_pa + rollout_span
    addr_bits = max(base.addr_bits, (stage_pa + plan.world * rollout_span - 1).bit_length())
    params = base.to_json()
    params.update(devices=plan.world, mem_bytes=mem, addr_bits=addr_bits)
    want_mem = overrides.pop("mem_bytes", None)
    if want_mem is None and overrides.pop("mem_pow2", False):
        # a power of two: one simulator build serves every model that rounds to it
        mem = 1 << (mem - 1).bit_length()
        params.update(mem_bytes=mem, addr_bits=max(addr_bits, mem.bit_length() - 1))
    overrides.pop("mem_pow2", None)
    if want_mem is not None:
        if want_mem < mem:
            raise InputError(f"the layouts need {mem:,} bytes of device memory (training {train_span:,} + "
                             f"rollout staging {rollout_span:,}); --mem-bytes is {want_mem:,}")
        params["mem_bytes"] = want_mem
    params.update({k: v for k, v in overrides.items() if v is not None})
    params["page_sizes"] = tuple(params["page_sizes"])
    try:
        arch = ArchParams(**params)
    except ValueError as e:
        raise InputError(f"architecture parameters: {e}") from None
    return arch, train_span, stage_pa, rollout_span


def compile_plan(plan: Plan, arch: ArchParams | None = None, only: list[int] | None = None,
                 **overrides) -> Compiled:
    if plan.scheme != "minimal":
        raise InputError(f"the compiler takes a 'minimal' plan, not {plan.scheme!r}")
    arch, train_span, stage_pa, rollout_span = choose_arch(plan, arch, **overrides)
    if arch.devices != plan.world:
        raise InputError(f"--devices {arch.devices} does not match the plan's world {plan.world}")
    es = plan.elem_bytes
    P = arch.page_sizes[0]
    world = plan.world
    comp = Compiled(plan, arch, train_span, stage_pa, rollout_span, [])

    # 1. per destination: tensor virtual addresses, remapped pages, and the copy runs
    layout: list[dict] = []
    for g in range(world):
        table = plan.rollout_tensors(g)
        runs = plan.runs_into(g)
        # largest local single-row run per tensor decides its alignment
        starts = [off for _, _, off in table]
        best: dict[int, tuple[int, int, int]] = {}
        for r in runs:
            if r.src == g and r.rows == 1 and r.row_elems * es >= P:
                ti = bisect.bisect_right(starts, r.dst_off) - 1
                if ti not in best or r.row_elems > best[ti][0]:
                    best[ti] = (r.row_elems, r.src_off, r.dst_off)
        va = 0
        tensors = []
        for ti, (name, shape, off) in enumerate(table):
            nbytes = 1
            for d in shape:
                nbytes *= d
            nbytes *= es
            va = _align(va, TENSOR_ALIGN)
            if ti in best:
                _, so, do = best[ti]
                want = (so * es - (do - off) * es) % P
                va += (want - va) % P
            tensors.append({"name": name, "shape": list(shape), "va": va, "bytes": nbytes, "off": off})
            va += nbytes
        if va > rollout_span:
            raise AssertionError("rollout span too small")
        tensor_va = [t["va"] - t["off"] * es for t in tensors]   # va = tensor_va[ti] + off*es

        def rva(off, _starts=starts, _tv=tensor_va):
            return _tv[bisect.bisect_right(_starts, off) - 1] + off * es

        remapped: dict[int, int] = {}     # rollout va page -> training pa page
        pieces: list[Copy] = []            # copies into g's rollout span (dst_va: rollout va)
        wanted = None if only is None else set(only)
        for r in runs:
            src = r.src
            if wanted is not None and src not in wanted:
                continue                   # another device's program, not compiled now
            sb, dva, nb = r.src_off * es, rva(r.dst_off), r.row_elems * es
            if src == g and r.rows == 1 and (dva - sb) % P == 0 and nb >= P:
                first = _align(dva, P)
                last = (dva + nb) // P * P
                if last > first:
                    for pg in range(first, last, P):
                        remapped[pg] = sb + (pg - dva)
                    if first > dva:
                        pieces.append(_row(src, g, sb, dva, first - dva))
                    if dva + nb > last:
                        pieces.append(_row(src, g, sb + (last - dva), last, dva + nb - last))
                    continue
            pieces.append(Copy(src, g, sb, dva, r.rows, nb, r.src_stride * es, r.dst_stride * es))
        layout.append({"self": g, "tensors": tensors, "remapped": remapped, "pieces": pieces, "span": va})

    # 2. TLB budget: drop the least valuable remaps until every device fits
    ctx0 = _ctx0_pages(arch, comp)
    for g in (range(world) if only is None else only):
        while True:
            ctx1 = _ctx1_pages(arch, comp, layout[g])
            if len(ctx0) + len(ctx1) <= arch.tlb_entries:
                break
            if not layout[g]["remapped"]:
                raise InputError(f"device {g} needs {len(ctx0) + len(ctx1)} TLB entries; the hardware has "
                                 f"{arch.tlb_entries} (raise --tlb-entries or use larger pages)")
            over = len(ctx0) + len(ctx1) - arch.tlb_entries
            _drop_smallest_remap_run(layout[g], P, 0.1 if over > 16 else 0.0)

    # 3. programs: each device pushes what it sources
    sources: list[list[Copy]] = [[] for _ in range(world)]
    for g in range(world):
        for p in layout[g]["pieces"]:
            sources[p.src_dev].append(p._replace(dst_va=comp.stage_window(g) + p.dst_va))
    incoming = [0] * world
    for g in range(world):
        incoming[g] = sum(p.nbytes for p in layout[g]["pieces"] if p.src_dev != g)
    if only is not None:
        # incoming bytes of a compiled device come from every source: count them from the plan
        for g in only:
            incoming[g] = sum(r.numel * es for r in plan.runs_into(g) if r.src != g)
    merged = {s: _merge_copies(sources[s]) for s in (range(world) if only is None else only)}
    traffic = [[0] * world for _ in range(world)]
    for s, cs in merged.items():
        for c in cs:
            traffic[s][c.dst_dev] += c.nbytes
    if len(merged) < world:
        # devices not compiled now: their pushes from the plan (remapped bytes included)
        for g in range(world):
            for r in plan.runs_into(g):
                if r.src not in merged:
                    traffic[r.src][g] += r.numel * es
    segments = _segments(traffic)
    for s in (range(world) if only is None else only):
        # the all-to-all in phases on one channel: its copies start in program order
        copies = [c._replace(chan=0) for c in _schedule(merged[s], segments[s])]
        fences = _ack_fences(copies, s, world)
        ctx1 = _ctx1_pages(arch, comp, layout[s])
        prog = _emit(arch, s, world, ctx0, ctx1, copies, fences)
        words, asm = prog
        bytes_remapped = sum(arch.page_sizes[i] for i, _va, _pa, remap in ctx1 if remap)
        dp = DeviceProgram(s, words, asm, copies, layout[s]["tensors"],
                           [(CTX_COPY, i, PERM_R if not w else PERM_W, 0, va, pa) for i, va, pa, w, _d in ctx0]
                           + [(CTX_ROLLOUT, i, PERM_R, 1, va, pa) for i, va, pa, _r in ctx1],
                           sum(c.nbytes for c in copies), bytes_remapped, incoming[s])
        if len(words) > arch.imem_words:
            raise InputError(f"device {s}: program of {len(words)} words does not fit instruction memory "
                             f"of {arch.imem_words} words (raise --imem-words)")
        comp.devices.append(dp)
    return comp


def _ctx0_pages(arch: ArchParams, comp: Compiled):
    """(size_idx, va, pa, writable, dev): training read-only, every staging window writable."""
    out = [(i, va, pa, False, None) for i, va, pa in _greedy_pages(0, 0, comp.train_span, arch.page_sizes)]
    for d in range(arch.devices):
        for i, va, pa in _greedy_pages(comp.stage_window(d), comp.stage_pa, comp.rollout_span, arch.page_sizes):
            out.append((i, va, pa, True, d))
    return out


def _ctx1_pages(arch: ArchParams, comp: Compiled, lay: dict):
    """(size_idx, va, pa, is_remap) covering the rollout span of one device."""
    P = arch.page_sizes[0]
    span = _align(max(lay["span"], P), P)
    remapped = lay["remapped"]
    out = []
    va = 0
    while va < span:
        if va in remapped:
            start, pa0 = va, remapped[va]
            while va in remapped and remapped[va] == pa0 + (va - start):
                va += P
            out += [(i, v, p, True) for i, v, p in _greedy_pages(start, pa0, va - start, arch.page_sizes)]
        else:
            start = va
            while va < span and va not in remapped:
                va += P
            out += [(i, v, p, False) for i, v, p in
                    _greedy_pages(start, comp.stage_pa + start, va - start, arch.page_sizes)]
    return out


def _drop_smallest_remap_run(lay: dict, P: int, fraction: float = 0.0):
    """Turn the shortest run(s) of remapped pages back into local copies.

    With ``fraction`` > 0, drops that share of all runs at once (big plans)."""
    remapped = lay["remapped"]
    runs, cur = [], []
    for va in sorted(remapped):
        if cur and va == cur[-1] + P and remapped[va] == remapped[cur[-1]] + P:
            cur.append(va)
        else:
            if cur:
                runs.append(cur)
            cur = [va]
    runs.append(cur)
    runs.sort(key=len)
    for victim in runs[:max(1, int(len(runs) * fraction))]:
        pa = remapped[victim[0]]
        for va in victim:
            del remapped[va]
        n = len(victim) * P
        # training bytes sit at physical = training-buffer offset
        lay["pieces"].append(_row(lay["self"], lay["self"], pa, victim[0], n))


def _row(src: int, dst: int, src_va: int, dst_va: int, n: int) -> Copy:
    """A one-row copy of n bytes."""
    return Copy(src, dst, src_va, dst_va, 1, n, n, n)


def _same_destination(a: Copy, b: Copy) -> bool:
    return a.dst_dev == b.dst_dev


def _merge_copies(copies: list[Copy]) -> list[Copy]:
    """Fewest descriptors: contiguous-on-both-sides runs into one, equal rows into 2-D
    (``model.plan.coalesce``; strides stay within the 32-bit stride fields)."""
    copies = sorted(copies, key=lambda c: (c.dst_dev, c.dst_va))
    return coalesce(copies, same=_same_destination, fields=Copy.GEOMETRY, max_stride=1 << 32)


def _emit(arch: ArchParams, dev: int, world: int, ctx0, ctx1, copies: list[Copy],
          fences: frozenset[int] = frozenset()):
    """The program; a FENCE before each copy whose index is in ``fences``."""
    words, asm = [], []

    def put(op, text, **f):
        words.append(encode(op, **f))
        asm.append(text)

    put(Op.VERSION, f"version version={ISA_VERSION}", version=ISA_VERSION)
    for i, va, pa, writable, d in ctx0:
        perm = PERM_W if writable else PERM_R
        put(Op.REMAP, "", ctx=CTX_COPY, size=i, perm=perm, staged=0, dev=dev if d is None else d, va=va, pa=pa)
    for i, va, pa, _remap in ctx1:
        put(Op.REMAP, "", ctx=CTX_ROLLOUT, size=i, perm=PERM_R, staged=1, dev=dev, va=va, pa=pa)
    for tag, c in enumerate(copies):
        if tag in fences:
            put(Op.FENCE, "", mask=0)
        put(Op.COPY, "", chan=c.chan, ctx=CTX_COPY, tag=tag & 0xFFFF, src=c.src_va, dst=c.dst_va,
            row_bytes=c.row_bytes, rows=c.rows,
            src_stride=c.src_stride if c.rows > 1 else 0, dst_stride=c.dst_stride if c.rows > 1 else 0)
    put(Op.FENCE, "", mask=0)
    for d in range(world):
        if d != dev:
            put(Op.SIGNAL, "", dev=d, sem=SEM_DONE)
    if world > 1:
        put(Op.WAIT, "", sem=SEM_DONE, count=world - 1)
    put(Op.COMMIT, "", ctx=CTX_ROLLOUT)
    put(Op.HALT, "")
    return words, asm


#: the smallest instruction memory of a shared simulator build (``CompileOptions.shared_build``)
SHARED_IMEM_WORDS = 1024

#: page sizes the compiler turns to when the default ones need more TLB
#: entries than the default TLB has (models of hundreds of megabytes)
LARGE_PAGES = (4096, 65536, 1 << 21, 1 << 25)


def compile_fitting(plan: Plan, *, tlb_entries=None, page_sizes=None, progress=lambda m: None,
                    **overrides) -> Compiled:
    """:func:`compile_plan`; where neither the TLB size nor the page sizes are
    given and the defaults cannot map the plan, :data:`LARGE_PAGES` and the
    smallest power-of-two TLB that holds the mappings (said through ``progress``)."""
    try:
        return compile_plan(plan, tlb_entries=tlb_entries, page_sizes=page_sizes, **overrides)
    except InputError as e:
        if tlb_entries is not None or page_sizes is not None or "TLB entries" not in str(e):
            raise
        first = e
    tlb = 64
    while tlb <= 4096:
        try:
            comp = compile_plan(plan, tlb_entries=tlb, page_sizes=LARGE_PAGES, **overrides)
        except InputError as e:
            if "TLB entries" not in str(e):
                raise
            tlb *= 2
            continue
        progress(f"the default pages and TLB do not fit ({first}); compiled for pages "
                 f"{','.join(map(str, LARGE_PAGES))} and {tlb} TLB entries")
        return comp
    raise first


# ---------------------------------------------------------------- schedule

def _max_weight_matching(w: list[list[int]]) -> list[int]:
    """The assignment of rows to columns of the square matrix ``w`` with the
    largest total weight (Hungarian algorithm, O(n^3)): ``col[row]``."""
    n = len(w)
    big = max((x for row in w for x in row), default=0)
    cost = [[big - x for x in row] for row in w]      # minimise
    INF = float("inf")
    u, v, p, way = [0] * (n + 1), [0] * (n + 1), [0] * (n + 1), [0] * (n + 1)
    for i in range(1, n + 1):
        p[0], j0 = i, 0
        minv, used = [INF] * (n + 1), [False] * (n + 1)
        while True:
            used[j0] = True
            i0, delta, j1 = p[j0], INF, 0
            for j in range(1, n + 1):
                if not used[j]:
                    cur = cost[i0 - 1][j - 1] - u[i0] - v[j]
                    if cur < minv[j]:
                        minv[j], way[j] = cur, j0
                    if minv[j] < delta:
                        delta, j1 = minv[j], j
            for j in range(n + 1):
                if used[j]:
                    u[p[j]] += delta
                    v[j] -= delta
                else:
                    minv[j] -= delta
            j0 = j1
            if p[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            p[j0] = p[j1]
            j0 = j1
    col = [0] * n
    for j in range(1, n + 1):
        col[p[j] - 1] = j - 1
    return col


def _segments(traffic: list[list[int]]) -> list[list[tuple[int, int]]]:
    """The order in which each source sends its bytes: per source, a list of
    ``(destination, bytes)``, from the traffic matrix (bytes, source x
    destination; the diagonal is a device's copies into its own memory).

    The remote part is an open shop: a destination's network input takes one
    beat a cycle, so two sources pushing into it at once share it. It is cut
    into phases in each of which every destination takes from at most one
    source (Gonzalez and Sahni's preemptive open shop): padded with idle time
    until every row and column sums to the busiest one, ``L``, the matrix is
    a sum of matchings (Birkhoff); taking the matching of the largest
    remaining total for as long as its smallest entry lasts empties an entry a
    phase, so there are at most ``world^2`` phases, and they add up to ``L``.
    Local copies use no network port (they enter memory through their own
    write port): a source fills its idle time in a phase with them, so that
    with no barrier between phases it does not run ahead into the next
    phase; of the local bytes left over, as many as every source has go
    first, the rest last.
    """
    world = len(traffic)
    real = [[0 if s == d else traffic[s][d] for d in range(world)] for s in range(world)]
    local = [traffic[s][s] for s in range(world)]
    rows = [sum(r) for r in real]
    cols = [sum(real[s][d] for s in range(world)) for d in range(world)]
    span = max(rows + cols, default=0)
    # idle padding: deficits of rows against deficits of columns (north-west corner)
    pad = [[0] * world for _ in range(world)]
    a, b = [span - x for x in rows], [span - x for x in cols]
    s = d = 0
    while s < world and d < world:
        x = min(a[s], b[d])
        pad[s][d] += x
        a[s] -= x
        b[d] -= x
        if a[s] == 0:
            s += 1
        else:
            d += 1
    phases = []               # (bytes, [(destination, real bytes) per source])
    while any(real[s][d] or pad[s][d] for s in range(world) for d in range(world)):
        tot = [[real[s][d] + pad[s][d] for d in range(world)] for s in range(world)]
        big = 1 + max(max(r) for r in tot)
        # a perfect matching on the remaining entries (one exists: all sums are equal),
        # the one with the most real bytes among them
        col = _max_weight_matching([[(big + real[s][d]) if tot[s][d] else 0 for d in range(world)]
                                    for s in range(world)])
        dur = min(tot[s][col[s]] for s in range(world) if tot[s][col[s]])
        sends = []
        for s in range(world):
            d = col[s]
            used = min(dur, real[s][d]) if tot[s][d] else 0
            if tot[s][d]:
                real[s][d] -= used
                pad[s][d] -= dur - used
            sends.append((d, used))
        phases.append((dur, sends))
    # phases in which every source has bytes to send first: a source's idle time
    # comes as late as it can, where running ahead meets nobody
    phases.sort(key=lambda ph: sum(used < ph[0] for _d, used in ph[1]))
    out: list[list[tuple[int, int]]] = [[] for _ in range(world)]

    def put(src, dst, n):
        if n > 0:
            if out[src] and out[src][-1][0] == dst:
                out[src][-1] = (dst, out[src][-1][1] + n)
            else:
                out[src].append((dst, n))

    for dur, sends in phases:
        for s, (d, used) in enumerate(sends):
            put(s, d, used)
            fill = min(dur - used, local[s])
            local[s] -= fill
            put(s, s, fill)
    # local bytes left over: what every source has goes first (they all start the
    # phases equally late, and no local copy follows a remote one: no FENCE), the rest last
    first = min(local, default=0)
    for s in range(world):
        if first:
            out[s].insert(0, (s, first))
        put(s, s, local[s] - first)
    return out


def _split(c: Copy, nbytes: int) -> tuple[Copy | None, Copy | None]:
    """``c`` cut after about ``nbytes`` bytes (whole rows of a 2-D copy; a
    destination address aligned to :data:`TENSOR_ALIGN` inside a row):
    (head, tail), either None when the cut falls at an end."""
    if c.rows > 1:
        k = round(nbytes / c.row_bytes)
        if k <= 0:
            return None, c
        if k >= c.rows:
            return c, None
        head = c._replace(rows=k)
        tail = c._replace(src_va=c.src_va + k * c.src_stride, dst_va=c.dst_va + k * c.dst_stride,
                          rows=c.rows - k)
        return (head if k > 1 else _row(c.src_dev, c.dst_dev, c.src_va, c.dst_va, c.row_bytes)._replace(
                    chan=c.chan),
                tail if c.rows - k > 1 else _row(c.src_dev, c.dst_dev, tail.src_va, tail.dst_va,
                                                 c.row_bytes)._replace(chan=c.chan))
    k = _align(c.dst_va + nbytes, TENSOR_ALIGN) - c.dst_va
    if k - nbytes > TENSOR_ALIGN // 2:
        k -= TENSOR_ALIGN
    if k <= 0:
        return None, c
    if k >= c.row_bytes:
        return c, None
    return (_row(c.src_dev, c.dst_dev, c.src_va, c.dst_va, k)._replace(chan=c.chan),
            _row(c.src_dev, c.dst_dev, c.src_va + k, c.dst_va + k, c.row_bytes - k)._replace(chan=c.chan))


def _ack_fences(copies: list[Copy], dev: int, world: int) -> frozenset[int]:
    """Where a local copy follows a remote one: the copies to put a FENCE before.

    A device's DMA takes one acknowledgement a cycle, a local beat's before a
    remote one's (``hw.device.NetworkPort``): while it writes into its own
    memory every cycle, the acks of its last remote beats wait, its ack queue
    fills, the ack network holds the destination's next ack, and the
    destination, whose ack queue serves all its sources, stops taking writes
    from every source until the local copy ends. The FENCE lets those acks
    drain first (a few dozen cycles). With two devices the destination has no
    other source to hold up: no FENCE."""
    if world <= 2:
        return frozenset()
    return frozenset(i for i in range(1, len(copies))
                     if copies[i].dst_dev == dev and copies[i - 1].dst_dev != dev)


def _schedule(copies: list[Copy], segments: list[tuple[int, int]]) -> list[Copy]:
    """One source's copies (merged, in destination order) in the order of its
    ``segments`` (:func:`_segments`), cut where a segment ends inside a copy;
    the last segment of a destination takes whatever is left of it."""
    by_dst: dict[int, list[Copy]] = {}
    for c in copies:
        by_dst.setdefault(c.dst_dev, []).append(c)
    last = {d: i for i, (d, _n) in enumerate(segments)}
    out: list[Copy] = []
    for i, (d, want) in enumerate(segments):
        queue = by_dst.get(d, [])
        if last[d] == i:
            out += queue
            queue.clear()
            continue
        while queue and want > 0:
            c = queue[0]
            if c.nbytes <= want + TENSOR_ALIGN // 2:
                out.append(queue.pop(0))
                want -= c.nbytes
                continue
            head, tail = _split(c, want)
            if head is not None:
                out.append(head)
            if tail is None:
                queue.pop(0)
            else:
                queue[0] = tail
            break
    for d in sorted(by_dst):           # a destination no segment names (none when traffic is exact)
        out += by_dst[d]
    return out
