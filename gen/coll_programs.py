"""Per-device coprocessor programs for all-gather, reduce-scatter and all-reduce.

Three algorithms (docs/collectives.md has the diagrams and the proofs of the
synchronisation):

- ``ring``: p-1 steps; at step k rank s sends one chunk to rank s-1 (a plain
  COPY for all-gather, a ``COPY_ADD`` for reduce-scatter, added at the
  receiver), then FENCE and SIGNAL s-1; rank s-1 WAITs for that signal
  before forwarding the chunk. Direction and the all-reduce's chunks
  (:func:`chunk_bounds` ``gloo``) are gloo's, so the ring all-reduce sums in
  gloo's order.
- ``direct``: every rank pushes to every other rank at once (one channel per
  destination), then an all-to-all SIGNAL/WAIT barrier; reduce-scatter
  pushes into the owner's staging slots and the owner sums them with one
  local ``COPY_ADD`` whose rows all add into the same chunk (``dst_stride=0``:
  summed in row order).
- ``halving-doubling`` (power-of-two worlds): recursive halving for
  reduce-scatter (log2 p steps, each halving the segment exchanged with the
  partner ``s ^ d``, d = p/2, p/4, ..., 1), recursive doubling for all-gather
  (d = 1, 2, ..., p/2).

All-reduce is reduce-scatter followed by all-gather on the same buffer.
Buffers are in place: an all-gather's input is rank s's chunk of its output
buffer, a reduce-scatter's output is rank s's chunk of its input buffer (as
NCCL's in-place collectives and FSDP2's own all-gather place them); ring and
halving-doubling reduce-scatters use the input buffer as their workspace.

Memory and addresses: every device's context 0 maps device d's physical
memory ``[0, mem_bytes)`` read/write at virtual ``d * mem_bytes`` (the same
map on every device), so ``va(d, pa)`` names any byte of the system; copies
read their own device's window and write the destination's.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hw.isa import PERM_R, PERM_W, ArchParams, Op, encode

__all__ = ["ALGORITHMS", "OPS", "Layout", "Transfer", "Programs", "chunk_bounds", "generate",
           "summation_order", "port_bytes", "MAX_WORLD"]

ALGORITHMS = ("ring", "direct", "halving-doubling")
OPS = ("all_gather", "reduce_scatter", "all_reduce")
ISA_V2 = 2
CTX = 0
GLOO_MAX_SEGMENT = 1 << 20   # gloo's AllreduceOptions::kMaxSegmentSize
MAX_WORLD = 16          # halving-doubling's per-step semaphores: 1 + 3 + 4 <= 8

# semaphores (8 on the default architecture)
SEM_DATA = 0            # ring data; halving-doubling reduce-scatter data
SEM_BARRIER_RS = 1      # direct reduce-scatter barrier
SEM_BARRIER_AG = 2      # direct all-gather barrier
SEM_READY = 1           # halving-doubling: step i >= 1 readiness uses SEM_READY + i - 1 (1..3)
SEM_AG = 4              # halving-doubling all-gather: step i uses SEM_AG + i (4..7)


def chunk_bounds(n_elems: int, p: int, elem_bytes: int = 4, chunking: str = "even") -> list[int]:
    """Element offsets of the p chunks: chunk j is ``[b[j], b[j+1])``.

    ``even``: sizes differ by at most one element (all-gather and reduce-scatter chunks are the
    ranks' own inputs / outputs). ``gloo``: gloo's ring all-reduce split (gloo/allreduce.cc, as
    documented there): segments of ceil(bytes / 2p) rounded up to whole elements (at most
    GLOO_MAX_SEGMENT bytes), their number rounded up to a multiple of p, p consecutive equal shares;
    the last chunks may be short or empty. With it the ring sums every element in gloo's order.
    """
    if chunking == "even":
        return [j * n_elems // p for j in range(p + 1)]
    if chunking != "gloo":
        raise ValueError(f"unknown chunking {chunking!r}")
    total = n_elems * elem_bytes
    if total == 0:
        return [0] * (p + 1)
    seg = min(-(-total // (2 * p)), GLOO_MAX_SEGMENT // elem_bytes * elem_bytes)
    seg = -(-seg // elem_bytes) * elem_bytes
    n_seg = max(-(-total // seg), 2 * p)
    n_seg = -(-n_seg // p) * p
    share = n_seg // p * seg // elem_bytes
    return [min(n_elems, j * share) for j in range(p + 1)]


@dataclass(frozen=True)
class Layout:
    """One collective's buffers, at the same physical addresses on every device.

    ``buf``: the all-gather output / reduce-scatter input / all-reduce buffer,
    ``n_elems`` elements of ``elem_bytes``; ``slots``: the direct
    reduce-scatter's p-1 staging slots, ``slot_stride`` bytes apart.
    """
    op: str
    p: int
    n_elems: int
    elem_bytes: int
    buf: int = 0
    slots: int = 0
    slot_stride: int = 0
    chunking: str = "even"

    @property
    def bounds(self) -> list[int]:
        return chunk_bounds(self.n_elems, self.p, self.elem_bytes, self.chunking)

    def chunk(self, j: int) -> tuple[int, int]:
        """(physical offset, bytes) of chunk j of the buffer."""
        b = self.bounds
        return self.buf + b[j] * self.elem_bytes, (b[j + 1] - b[j]) * self.elem_bytes

    def span(self, lo: int, hi: int) -> tuple[int, int]:
        """(offset, bytes) of chunks lo..hi-1 (contiguous)."""
        b = self.bounds
        return self.buf + b[lo] * self.elem_bytes, (b[hi] - b[lo]) * self.elem_bytes


@dataclass(frozen=True)
class Transfer:
    """One descriptor as the port model sees it (group ranks, physical offsets)."""
    src: int
    dst: int
    nbytes: int
    add: bool


@dataclass
class Programs:
    """Per-device instruction words and assembly text, and the descriptors issued."""
    words: list[list[int]]
    asm: list[list[str]]
    transfers: list[Transfer] = field(default_factory=list)


class _Prog:
    """One device's program under construction."""

    def __init__(self, arch: ArchParams, device: int, ranks: list[int], add_op: Op | None, out: Programs):
        self.arch, self.device, self.ranks, self.add_op, self.out = arch, device, ranks, add_op, out
        self.words: list[int] = []
        self.asm: list[str] = []
        self.tag = 0
        self.put(Op.VERSION, version=ISA_V2)
        size_idx, page = _window_page(arch)
        for d in range(arch.devices):
            for pa in range(0, arch.mem_bytes, page):
                self.put(Op.REMAP, ctx=CTX, size=size_idx, perm=PERM_R | PERM_W, staged=0, dev=d,
                         va=d * arch.mem_bytes + pa, pa=pa)

    def put(self, op: Op, **f) -> None:
        self.words.append(encode(op, **f))
        args = " ".join(f"{k}={v}" for k, v in f.items())
        self.asm.append(f"{op.name.lower()} {args}".rstrip())

    def va(self, g: int, pa: int) -> int:
        return self.ranks[g] * self.arch.mem_bytes + pa

    def copy(self, src_g: int, src: int, dst_g: int, dst: int, nbytes: int, *, add: bool = False,
             chan: int = 0, rows: int = 1, src_stride: int = 0, dst_stride: int = 0) -> None:
        if nbytes == 0 or rows == 0:
            return
        op = self.add_op if add else Op.COPY
        self.put(op, chan=chan % self.arch.channels, ctx=CTX, tag=self.tag & 0xFFFF, src=self.va(src_g, src),
                 dst=self.va(dst_g, dst), row_bytes=nbytes, rows=rows, src_stride=src_stride,
                 dst_stride=dst_stride)
        self.tag += 1
        self.out.transfers.append(Transfer(self.ranks[src_g], self.ranks[dst_g], nbytes * rows, add))

    def fence(self) -> None:
        self.put(Op.FENCE, mask=0)

    def signal(self, g: int, sem: int) -> None:
        self.put(Op.SIGNAL, dev=self.ranks[g], sem=sem)

    def wait(self, sem: int, count: int = 1) -> None:
        self.put(Op.WAIT, sem=sem, count=count)


def _window_page(arch: ArchParams) -> tuple[int, int]:
    """The largest page size that divides ``mem_bytes`` (windows are whole pages)."""
    for i in range(len(arch.page_sizes) - 1, -1, -1):
        if arch.mem_bytes % arch.page_sizes[i] == 0:
            return i, arch.page_sizes[i]
    raise ValueError("mem_bytes is not a multiple of the smallest page")


# ---------------------------------------------------------------- algorithms

def _ring_rs(pr: _Prog, s: int, lay: Layout) -> None:
    # gloo's direction: rank s sends to s-1, so chunk j starts at rank j-1 and ends added into rank j
    p = lay.p
    prv = (s - 1) % p
    for k in range(1, p):
        if k >= 2:
            pr.wait(SEM_DATA)             # chunk (s+k) holds the sum of ranks s+1 .. s+k-1 now
        off, n = lay.chunk((s + k) % p)
        pr.copy(s, off, prv, off, n, add=True)
        pr.fence()
        pr.signal(prv, SEM_DATA)
    if p > 1:
        pr.wait(SEM_DATA)                 # the last add into my own chunk has landed


def _ring_ag(pr: _Prog, s: int, lay: Layout) -> None:
    p = lay.p
    prv = (s - 1) % p
    for k in range(1, p):
        if k >= 2:
            pr.wait(SEM_DATA)             # chunk (s+k-1) arrived from s+1
        off, n = lay.chunk((s + k - 1) % p)
        pr.copy(s, off, prv, off, n)
        pr.fence()
        pr.signal(prv, SEM_DATA)
    if p > 1:
        pr.wait(SEM_DATA)


def _direct_rs(pr: _Prog, s: int, lay: Layout) -> None:
    p = lay.p
    for k in range(1, p):
        t = (s + k) % p
        off, n = lay.chunk(t)
        slot = lay.slots + ((s - t) % p - 1) * lay.slot_stride   # rank s is the ((s-t)%p)-th after t
        pr.copy(s, off, t, slot, n, chan=k - 1)
    _barrier(pr, s, p, SEM_BARRIER_RS)
    off, n = lay.chunk(s)
    # slot i holds rank s+1+i's chunk: one copy adds them all into my chunk, in row order
    pr.copy(s, lay.slots, s, off, n, add=True, rows=p - 1, src_stride=lay.slot_stride, dst_stride=0)
    pr.fence()


def _direct_ag(pr: _Prog, s: int, lay: Layout) -> None:
    p = lay.p
    off, n = lay.chunk(s)
    for k in range(1, p):
        pr.copy(s, off, (s + k) % p, off, n, chan=k - 1)
    _barrier(pr, s, p, SEM_BARRIER_AG)


def _barrier(pr: _Prog, s: int, p: int, sem: int) -> None:
    pr.fence()
    for k in range(1, p):
        pr.signal((s + k) % p, sem)
    if p > 1:
        pr.wait(sem, p - 1)


def _hd_rs(pr: _Prog, s: int, lay: Layout) -> None:
    p = lay.p
    lo, hi = 0, p
    d = p // 2
    step = 0
    while d >= 1:
        partner = s ^ d
        mid = (lo + hi) // 2
        keep, send = ((lo, mid), (mid, hi)) if s < mid else ((mid, hi), (lo, mid))
        if step >= 1:
            pr.wait(SEM_DATA)                     # the previous partner's add landed in my half
            pr.signal(partner, SEM_READY + step - 1)
            pr.wait(SEM_READY + step - 1)         # ... and in the new partner's half
        off, n = lay.span(*send)
        pr.copy(s, off, partner, off, n, add=True)
        pr.fence()
        pr.signal(partner, SEM_DATA)
        lo, hi = keep
        d //= 2
        step += 1
    if p > 1:
        pr.wait(SEM_DATA)


def _hd_ag(pr: _Prog, s: int, lay: Layout) -> None:
    p = lay.p
    d, step = 1, 0
    while d < p:
        if step >= 1:
            pr.wait(SEM_AG + step - 1)            # the block I forward is complete
        lo = s & ~(d - 1)
        off, n = lay.span(lo, lo + d)
        pr.copy(s, off, s ^ d, off, n)
        pr.fence()
        pr.signal(s ^ d, SEM_AG + step)
        d *= 2
        step += 1
    if p > 1:
        pr.wait(SEM_AG + step - 1)


_RS = {"ring": _ring_rs, "direct": _direct_rs, "halving-doubling": _hd_rs}
_AG = {"ring": _ring_ag, "direct": _direct_ag, "halving-doubling": _hd_ag}


def check_algorithm(algorithm: str, p: int) -> str | None:
    """Why ``algorithm`` cannot run on ``p`` ranks (None: it can)."""
    if algorithm not in ALGORITHMS:
        return f"unknown algorithm {algorithm!r} (use {', '.join(ALGORITHMS)})"
    if algorithm == "halving-doubling" and p & (p - 1):
        return f"halving-doubling needs a power-of-two number of ranks, not {p}"
    if not 1 <= p <= MAX_WORLD:
        return f"{p} ranks: the collective programs support 1..{MAX_WORLD}"
    return None


def generate(arch: ArchParams, ranks: list[int], lay: Layout, algorithm: str, add_op: Op | None) -> Programs:
    """One program per device of ``arch`` for the collective ``lay.op`` among ``ranks``.

    ``ranks[g]`` is the device of group rank g; devices outside the group run
    an empty program (VERSION, HALT). ``add_op`` is ``Op.COPY_ADD_F32`` or
    ``Op.COPY_ADD_BF16`` for reductions.
    """
    why = check_algorithm(algorithm, lay.p)
    if why:
        raise ValueError(why)
    if lay.op not in OPS:
        raise ValueError(f"unknown collective {lay.op!r}")
    if lay.op != "all_gather" and add_op not in (Op.COPY_ADD_F32, Op.COPY_ADD_BF16):
        raise ValueError(f"{lay.op} needs a COPY_ADD opcode")
    out = Programs([], [])
    for dev in range(arch.devices):
        pr = _Prog(arch, dev, ranks, add_op, out)
        if dev in ranks:
            s = ranks.index(dev)
            if lay.op in ("reduce_scatter", "all_reduce"):
                _RS[algorithm](pr, s, lay)
            if lay.op in ("all_gather", "all_reduce"):
                _AG[algorithm](pr, s, lay)
        pr.put(Op.HALT)
        if len(pr.words) > arch.imem_words:
            raise ValueError(f"device {dev}: {len(pr.words)} instructions exceed imem_words={arch.imem_words}")
        out.words.append(pr.words)
        out.asm.append(pr.asm)
    return out


def summation_order(algorithm: str, p: int, j: int):
    """The order in which the programs sum chunk j's p contributions, as a tree
    of group ranks: an int is a rank's value, a pair ``(a, b)`` is ``a + b``."""
    if algorithm == "ring":
        # starts at rank j-1, gathers j-2, ..., j+1 on its way, ends added into rank j's own value
        t = (j - 1) % p
        for k in range(2, p + 1):
            t = (t, (j - k) % p)
        return t
    if algorithm == "direct":
        t = j
        for k in range(1, p):
            t = (t, (j + k) % p)
        return t
    if algorithm == "halving-doubling":
        # at distance d, the keeper of chunk j adds the partner's partial sum of the same ranks' set
        def tree(rank: int, d: int):
            # partial sum of chunk j held by `rank` after the steps of distances > d ... down to d
            if d == p:
                return rank
            return (tree(rank, d * 2), tree(rank ^ d, d * 2))
        return tree(j, 1)
    raise ValueError(algorithm)


def port_bytes(transfers: list[Transfer], devices: int) -> list[dict[str, int]]:
    """Bytes through each device's ports: DMA memory reads, local writes, network
    out and in, and the read-add-write reads at the destination."""
    ports = [{"mem_read": 0, "mem_write": 0, "net_out": 0, "net_in": 0, "rmw_read": 0} for _ in range(devices)]
    for t in transfers:
        ports[t.src]["mem_read"] += t.nbytes
        if t.src == t.dst:
            ports[t.dst]["mem_write"] += t.nbytes
        else:
            ports[t.src]["net_out"] += t.nbytes
            ports[t.dst]["net_in"] += t.nbytes
        if t.add:
            ports[t.dst]["rmw_read"] += t.nbytes
    return ports
