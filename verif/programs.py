"""Hypothesis strategies for reshard-coprocessor programs, shared by the golden
model tests and the RTL tests.

Use::

    from hypothesis import given
    from tests.programs import systems, SystemCase

    @given(systems())
    def test_something(case: SystemCase):
        result = GoldenSystem(case.arch, case.programs, case.memories).run()

``systems()`` draws a small multi-device system (``ArchParams`` with scaled
page sizes, a few KiB of memory per device, small TLBs) and one program per
device plus random initial memories. The programs are mostly valid and
exercise every instruction: REMAPs (immediate and staged, mixed page sizes,
remote devices, pages straddling the end of memory), COPYs into mapped and
unmapped space (so every translation-fault cause occurs, at page boundaries
on either side and with address wrap-around), FENCEs with masks, INVAL,
COMMIT (fenced and unfenced), SIGNAL/WAIT across devices (sometimes
deadlocking), and now and then an illegal word (reserved bits, bad opcode,
bad field value, wrong version) or a program without HALT (running into the
zero words or past the instruction memory).

Knobs (keyword arguments of ``systems``): ``max_devices``, ``max_body``
(instructions between VERSION and HALT), ``illegal_rate`` (probability per
instruction of an illegal one), ``min_mem_pages``/``max_mem_pages``. Keep them
small for the Amaranth simulator; the golden model does not care.

``valid_words()`` draws single legal instruction words (every opcode, random
field values, reserved bits zero); ``any_words()`` draws arbitrary 256-bit
words, biased toward near-legal ones. Both are used by the assembler tests.
"""
from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from hypothesis import strategies as st

from hw.isa import FORMATS, ISA_VERSION, WORD_BITS, ArchParams, Op, encode, reserved_mask

__all__ = ["SystemCase", "systems", "arch_params", "valid_words", "any_words"]


@dataclass
class SystemCase:
    arch: ArchParams
    programs: list[list[int]]
    memories: list[bytes]

    def describe(self) -> str:
        """The programs as assembly, for failure messages."""
        from gen.asm import disassemble
        out = [f"arch={self.arch}"]
        for d, p in enumerate(self.programs):
            out.append(f"--- device {d}")
            out.append(disassemble(p))
        return "\n".join(out)


@st.composite
def arch_params(draw, max_devices: int = 3, min_mem_pages: int = 4, max_mem_pages: int = 16):
    """Small ArchParams: page sizes scaled down to 64..1024 bytes."""
    g = draw(st.sampled_from([64, 128]))
    page_sizes = (g, g * 2, g * 4, g * 8)
    mem_bytes = g * draw(st.integers(min_mem_pages, max_mem_pages))
    mem_bits = (mem_bytes - 1).bit_length()
    return ArchParams(
        devices=draw(st.integers(1, max_devices)),
        mem_bytes=mem_bytes,
        page_sizes=page_sizes,
        tlb_entries=draw(st.sampled_from([1, 2, 4, 6, 8, 12, 16])),
        contexts=draw(st.integers(1, 3)),
        channels=draw(st.integers(1, 3)),
        semaphores=draw(st.integers(1, 3)),
        imem_words=64,
        addr_bits=draw(st.sampled_from([mem_bits, mem_bits + 1, mem_bits + 3])),
    )


_PERMILLE = st.sampled_from(range(1000))


def _chance(draw, p: float) -> bool:
    # st.integers is heavily biased toward its bounds; sampled_from is near uniform
    return draw(_PERMILLE) < p * 1000


@st.composite
def _program(draw, arch: ArchParams, dev: int, max_body: int, illegal_rate: float):
    A = arch.addr_bits
    amask = (1 << A) - 1
    pages = arch.page_sizes
    mapped: list[tuple[int, int, int]] = []   # (ctx, va, length) of mapped regions

    def pick_ctx():
        if _chance(draw, 0.01):
            return draw(st.integers(arch.contexts, 15))          # BAD_CONTEXT
        return draw(st.integers(0, arch.contexts - 1))

    def pick_va(size):
        page = pages[size]
        # mostly a small virtual window so pages collide and get reused
        if draw(st.booleans()):
            return (draw(st.integers(0, 7)) * page) & amask & ~(page - 1)
        return draw(st.integers(0, amask)) & ~(page - 1)

    def region(ctx):
        cands = [(va, ln) for c, va, ln in mapped if c == ctx]
        if cands and _chance(draw, 0.85):
            return draw(st.sampled_from(cands))
        return None

    def random_copy_geometry():
        rows = draw(st.sampled_from([0, 1, 1, 2, 3, 9]))
        row_bytes = draw(st.sampled_from([0, 1, 3, 16, 40, pages[0], pages[0] + 5, 300]))
        def stride():
            return draw(st.sampled_from(
                [0, row_bytes, row_bytes + 8, pages[0], 2 * pages[0], (1 << 32) - pages[0],
                 draw(st.integers(0, (1 << 32) - 1))]))
        return rows, row_bytes, stride(), stride()

    def fitting_copy(rs, rd):
        """A copy whose every byte lies inside regions rs and rd (as mapped when drawn)."""
        (sva, sl), (dva, dl) = rs, rd
        lim = min(sl, dl)
        rows = draw(st.sampled_from([1, 1, 2, 3, 4, 8, 9, 12]))
        if rows >= 8 and lim >= 8 * rows and _chance(draw, 0.6):
            # many short aligned rows (the golden model's vector path): row_bytes a
            # power of two, rows aligned to it, so no row crosses a page
            row_bytes = draw(st.sampled_from([b for b in (1, 2, 4, 8, 16) if b * rows <= lim]))
            def stride(ln):
                k = (ln // row_bytes - 1) // (rows - 1)
                if _chance(draw, 0.15):
                    return 0
                return row_bytes * draw(st.integers(1, max(1, k)))
            ss, ds = stride(sl), stride(dl)
            s0 = sva + row_bytes * draw(st.integers(0, max(0, (sl - (rows - 1) * ss) // row_bytes - 1)))
            d0 = dva + row_bytes * draw(st.integers(0, max(0, (dl - (rows - 1) * ds) // row_bytes - 1)))
            return s0 & amask, d0 & amask, rows, row_bytes, ss, ds
        row_bytes = draw(st.integers(1, max(1, lim // rows)))
        def stride(ln):
            if rows == 1:
                return draw(st.sampled_from([0, row_bytes]))
            most = (ln - row_bytes) // (rows - 1)
            return draw(st.integers(min(row_bytes, max(0, most)), max(0, most)))
        ss, ds = stride(sl), stride(dl)
        s0 = sva + draw(st.integers(0, max(0, sl - (rows - 1) * ss - row_bytes)))
        d0 = dva + draw(st.integers(0, max(0, dl - (rows - 1) * ds - row_bytes)))
        return s0 & amask, d0 & amask, rows, row_bytes, ss, ds

    def illegal():
        kind = draw(st.integers(0, 5))
        if kind == 0:
            return 0                                              # BAD_OPCODE (zero)
        if kind == 1:
            return draw(st.integers(max(Op) + 1, 255))            # BAD_OPCODE
        if kind == 2:
            op = draw(st.sampled_from([o for o in FORMATS if reserved_mask(o)]))  # not COPY
            rm = reserved_mask(op)
            bit = draw(st.sampled_from([b for b in range(WORD_BITS) if rm >> b & 1]))
            return int(op) | (1 << bit)                           # RESERVED_BITS
        if kind == 3:
            return encode(Op.VERSION, version=draw(st.integers(0, 0xFFFF)))
        if kind == 4:                                             # ADDRESS_WIDTH
            if A >= 48:
                return encode(Op.COPY, chan=0)
            return encode(Op.COPY, src=draw(st.integers(1 << A, (1 << 48) - 1)))
        return encode(Op.REMAP, size=1, va=pages[0], pa=0)        # MISALIGNED

    body = []
    # setup: a few valid immediate mappings of runs of pages (read-write, mostly
    # local), so that most copies move bytes
    for _ in range(draw(st.integers(0, 4))):
        size = draw(st.sampled_from([0, 0, 1, 2]))
        page = pages[size]
        ctx = draw(st.integers(0, arch.contexts - 1))
        va = pick_va(size)
        npages = max(1, arch.mem_bytes // page)
        count = draw(st.integers(1, min(3, npages)))
        pa = draw(st.integers(0, npages - count)) * page
        if _chance(draw, 0.15):
            # the run's last page straddles or passes the end of memory (OUT_OF_RANGE)
            pa = max(0, ((arch.mem_bytes - 1) // page - count + 1 + draw(st.integers(0, 1))) * page)
        d = dev if _chance(draw, 0.75) else draw(st.integers(0, arch.devices - 1))
        for k in range(count):
            body.append(encode(Op.REMAP, ctx=ctx, size=size, perm=3, dev=d,
                               va=(va + k * page) & amask, pa=(pa + k * page) & amask))
        mapped.append((ctx, va, count * page))
    n = draw(st.integers(0, max_body))
    kinds = ["remap"] * 5 + ["copy"] * 6 + ["fence"] * 3 + ["inval", "signal", "wait",
                                                           "commit", "commit"]
    for _ in range(n):
        if _chance(draw, illegal_rate):
            body.append(illegal())
            continue
        k = draw(st.sampled_from(kinds))
        if k == "remap":
            size = draw(st.sampled_from([0, 0, 0, 1, 1, 2, 3]))
            page = pages[size]
            ctx = pick_ctx()
            va = pick_va(size)
            d = draw(st.integers(0, arch.devices - 1)) if _chance(draw, 0.25) else dev
            if _chance(draw, 0.01):
                d = draw(st.integers(arch.devices, 255))            # BAD_DEVICE
            npages = max(1, arch.mem_bytes // page)
            pa = draw(st.integers(0, npages)) * page               # sometimes at/after the end
            pa &= amask
            perm = draw(st.sampled_from([1, 2, 3, 3, 3, 0]))
            staged = int(_chance(draw, 0.2))
            body.append(encode(Op.REMAP, ctx=ctx, size=size, perm=perm, staged=staged, dev=d,
                               va=va, pa=pa))
            if ctx < arch.contexts and perm == 3 and not staged:
                mapped.append((ctx, va, page))
        elif k == "copy":
            chan = draw(st.integers(0, arch.channels - 1))
            if _chance(draw, 0.005):
                chan = draw(st.integers(arch.channels, 15))        # BAD_CHANNEL
            ctx = pick_ctx()
            rs, rd = region(ctx), region(ctx)
            if rs is not None and rd is not None:
                src, dst, rows, row_bytes, ss, ds = fitting_copy(rs, rd)
            else:
                src, dst = draw(st.integers(0, amask)), draw(st.integers(0, amask))
                rows, row_bytes, ss, ds = random_copy_geometry()
            if _chance(draw, 0.1):      # nudge: run off the end of a region
                src = (src + draw(st.sampled_from([-1, 1, pages[0]]))) & amask
            body.append(encode(Op.COPY, chan=chan, ctx=ctx, tag=draw(st.integers(0, 0xFFFF)),
                               src=src, dst=dst, row_bytes=row_bytes, rows=rows,
                               src_stride=ss & 0xFFFF_FFFF, dst_stride=ds & 0xFFFF_FFFF))
        elif k == "fence":
            mask = 0 if draw(st.booleans()) else draw(st.integers(0, 0xFFFF))
            body.append(encode(Op.FENCE, mask=mask))
        elif k == "inval":
            if mapped and draw(st.booleans()):
                ctx, va, _ = draw(st.sampled_from(mapped))
                size = draw(st.integers(0, 3))
                va &= ~(pages[size] - 1)
            else:
                ctx, size = pick_ctx(), draw(st.integers(0, 3))
                va = pick_va(size)
            body.append(encode(Op.INVAL, ctx=ctx, size=size, staged=draw(st.integers(0, 1)),
                               va=va))
        elif k == "signal":
            d = draw(st.integers(0, arch.devices - 1))
            sem = draw(st.integers(0, arch.semaphores - 1))
            if _chance(draw, 0.01):
                sem = draw(st.integers(arch.semaphores, 255))      # BAD_SEMAPHORE
            body.append(encode(Op.SIGNAL, dev=d, sem=sem))
        elif k == "wait":
            body.append(encode(Op.WAIT, sem=draw(st.integers(0, arch.semaphores - 1)),
                               count=draw(st.sampled_from([0, 1, 1, 2]))))
        else:
            if _chance(draw, 0.7):
                body.append(encode(Op.FENCE, mask=0))
            body.append(encode(Op.COMMIT, ctx=pick_ctx()))
    prog = [encode(Op.VERSION, version=ISA_VERSION)] + body
    if not _chance(draw, 0.1):
        prog.append(encode(Op.HALT))
    return prog[:arch.imem_words]


@st.composite
def systems(draw, max_devices: int = 3, max_body: int = 14, illegal_rate: float = 0.01,
            min_mem_pages: int = 4, max_mem_pages: int = 16, arch: ArchParams | None = None) -> SystemCase:
    """A whole system: ArchParams, one program and one initial memory per device.

    With ``arch`` given, every example uses that architecture (programs are cut
    to its ``imem_words``): what a compiled simulator, built once, needs.
    """
    fixed = arch is not None
    if not fixed:
        arch = draw(arch_params(max_devices=max_devices, min_mem_pages=min_mem_pages,
                                max_mem_pages=max_mem_pages))
    progs = [draw(_program(arch, d, max_body, illegal_rate)) for d in range(arch.devices)]
    if fixed:
        progs = [p[:arch.imem_words] for p in progs]
    else:
        # small programs: shrink imem_words so PC_OVERFLOW happens too
        longest = max(len(p) for p in progs)
        imem = longest + draw(st.sampled_from([0, 0, 1, 3]))
        arch = dataclasses.replace(arch, imem_words=imem)
    mems = []
    for _ in range(arch.devices):
        seed = draw(st.integers(0, 2**32 - 1))
        # cheap pseudo-random fill (hypothesis-drawn bytes of KiB size are slow)
        r = random.Random(seed)
        mems.append(r.randbytes(arch.mem_bytes))
    return SystemCase(arch, progs, mems)


def valid_words():
    """Single legal instruction words: every opcode, random fields, reserved bits 0."""
    def for_op(op):
        fields = {f.name: st.integers(0, f.mask) for f in FORMATS[op]}
        return st.fixed_dictionaries(fields).map(lambda kw: encode(op, **kw))
    return st.one_of([for_op(op) for op in FORMATS])


def any_words():
    """Arbitrary 256-bit words, half of them legal instructions, the rest near-legal
    (a reserved bit flipped, an unknown opcode) or random."""
    flipped = st.tuples(valid_words(), st.integers(0, WORD_BITS - 1)).map(
        lambda t: t[0] ^ (1 << t[1]))
    return st.one_of(valid_words(), flipped, st.integers(0, (1 << WORD_BITS) - 1),
                     st.integers(0, 255))


def _provider():
    """Hypothesis's own provider of random choices, less one thing: 5% of the time it picks a
    "constant" from a pool that includes literals found in the local modules loaded in this
    process (``sys.modules``), so a process that imported other modules (the simulator's,
    pytest's) drew other cases from the same seed. Without the constants the choices depend
    on the seed alone."""
    from hypothesis.internal.conjecture.providers import HypothesisProvider

    class SeedOnlyProvider(HypothesisProvider):
        def _maybe_draw_constant(self, choice_type, constraints, *, p=0.05):
            return None

    return SeedOnlyProvider


def draw_cases(strategy, seed: int, n: int, max_tries: int | None = None) -> list:
    """``n`` distinct examples of ``strategy`` for a seed, outside a test (a UVM sequence's stimulus).

    The same seed draws the same cases in any process: each attempt is one Hypothesis
    ``ConjectureData`` fed by ``random.Random(seed * 1_000_003 + attempt)`` through the provider
    of :func:`_provider` (Hypothesis's generation, so the distribution of the hypothesis tests,
    without the engine's adaptive search, whose first examples are the simplest and whose
    choices depended on the process). Attempts a strategy rejects (a failed filter) are skipped."""
    from hypothesis.errors import StopTest
    from hypothesis.internal.conjecture.data import ConjectureData
    provider = _provider()
    out: list = []
    seen: set[str] = set()
    tries = max_tries if max_tries is not None else 50 * n
    for attempt in range(tries):
        if len(out) == n:
            break
        data = ConjectureData(random=random.Random(seed * 1_000_003 + attempt), provider=provider)
        try:
            case = data.draw(strategy)
        except StopTest:
            continue
        key = repr(getattr(case, "programs", case))
        if key not in seen:
            seen.add(key)
            out.append(case)
    return out
