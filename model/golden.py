"""Golden model: the executable definition of the reshard coprocessor ISA.

A numpy interpreter of ISA v2 (and of v1 programs; ``hw/isa.py``, ``docs/isa.md``) over D device
memories. The Amaranth simulation, the Verilog run and the FPGA must agree
with it bit for bit on final memories, statuses and fault records.

Execution model
---------------
* Devices run round-robin, one instruction each per round (device 0 first).
  A device blocked in ``WAIT`` makes no progress in that round. When a whole
  round makes no progress, every device still running is blocked in an
  unsatisfiable ``WAIT`` and stops ``ABORTED``/``DEADLOCK`` at that WAIT.
* A ``COPY`` executes entirely when it is issued (the architectural meaning:
  results must not depend on timing). It is processed as the byte stream the
  ISA defines: row by row, ascending, each byte read after every earlier byte
  of the copy was written (so even overlapping copies, which the ISA leaves
  unspecified, have one deterministic result here: that of a forward byte
  loop).
* A reduce copy (``COPY_ADD_F32``/``COPY_ADD_BF16``) is the same byte stream,
  each piece written as old + new element by element (``model/fpadd.py``).
  Every address, length and stride of a reduce copy is element-aligned, so a
  page boundary (and so a fault) never falls inside an element.
* Translation of one byte, source side first: no valid non-staged entry of
  the context contains the address -> ``NOT_MAPPED``; missing permission ->
  ``NO_READ``/``NO_WRITE``; source entry naming another device ->
  ``REMOTE_READ``; physical address >= ``mem_bytes`` -> ``OUT_OF_RANGE``
  (checked per byte, so a page straddling the end of memory faults at the
  first byte beyond it). The fault record's ``va`` is the virtual address of
  the failing side (source or destination).
* A faulted channel discards its later COPYs (they still count as issued: in
  ``descriptors`` and for ``COMMIT_UNFENCED``). ``FENCE`` (on the covered
  channels), ``COMMIT`` and ``HALT`` (on all channels) stop with ``FAULT``
  when a channel faulted; the status cause is then the translation cause of
  the lowest-numbered faulted channel checked. An immediate ``REMAP``/``INVAL``
  waits without a fault check (docs/isa.md) and does not count as a FENCE for
  ``COMMIT_UNFENCED``: only an explicit FENCE clears a channel's unfenced
  flag.
* Check order of an instruction: at word 0 the opcode must be VERSION (else
  ``VERSION_MISMATCH``, even for an unknown or zero opcode); elsewhere an
  unknown/zero opcode is ``BAD_OPCODE``. Then reserved bits, then the fields
  in table order; for an address field, ``ADDRESS_WIDTH`` before
  ``MISALIGNED``. ``INVAL`` requires an aligned ``va`` too (``MISALIGNED``).
  A ``VERSION`` must name a supported version (``SUPPORTED_VERSIONS``), which
  becomes the program's; a later ``VERSION`` is a no-op if it names the
  program's version, else ``VERSION_MISMATCH``. An opcode newer than the
  program's version (``OP_SINCE``) is ``BAD_OPCODE``, before the reserved
  bits. A reduce copy checks COPY's fields, then ``dst``, ``row_bytes``,
  ``dst_stride`` against its element size (``MISALIGNED``). ``COMMIT``: ``BAD_CONTEXT``, then
  ``COMMIT_UNFENCED``, then ``FAULT``. Bits of a FENCE mask at or above
  ``channels`` are ignored.
* The program is loaded into ``imem_words`` words of instruction memory, the
  rest zero (so running off the end of a short program is ``BAD_OPCODE`` on
  the zero word); fetching at ``pc == imem_words`` is ``PC_OVERFLOW``, with
  ``pc`` reported as ``imem_words``.
* Statistics: ``bytes_copied`` counts bytes written by COPYs;
  ``descriptors`` counts COPY instructions issued (including discarded ones);
  ``bytes_remapped`` is, at each successful ``COMMIT``, the sum of the page
  sizes of the staged entries that become active and map memory of the local
  device (zero-copy bytes; immediate REMAPs are not counted).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from hw.isa import (COPY_OPS, ELEMENT_BYTES, ELEMENT_FIELDS, OP_SINCE, PERM_R, PERM_W,
                    SUPPORTED_VERSIONS, WORD_BITS, ArchParams, Cause, Decoded, Op, Status, check_arch,
                    decode)

from .fpadd import add_bytes

__all__ = ["GoldenSystem", "GoldenResult", "TranslationError", "run_golden"]


class TranslationError(LookupError):
    """``read_virtual`` met an address that the active mapping cannot translate."""


class _Stop(Exception):
    def __init__(self, status: Status, cause: Cause):
        self.status = status
        self.cause = cause


@dataclass
class _Entry:
    valid: bool = False
    ctx: int = 0
    staged: int = 0
    size: int = 0
    va: int = 0
    pa: int = 0
    dev: int = 0
    perm: int = 0


@dataclass
class GoldenResult:
    memories: list[np.ndarray]
    status: list[Status]
    cause: list[Cause]
    pc: list[int]
    faults: list[dict]
    bytes_copied: list[int]
    descriptors: list[int]
    bytes_remapped: list[int]
    tlb: list[list[dict]]
    semaphores: list[list[int]]
    tlb_victim: list[int] = field(default_factory=list)
    steps: int = 0

    def to_json(self) -> dict:
        """Everything but the memories themselves (their SHA-256 instead)."""
        return {
            "status": [Status(s).name for s in self.status],
            "cause": [Cause(c).name for c in self.cause],
            "pc": list(self.pc),
            "faults": [dict(f) for f in self.faults],
            "bytes_copied": list(self.bytes_copied),
            "descriptors": list(self.descriptors),
            "bytes_remapped": list(self.bytes_remapped),
            "tlb": [[dict(e) for e in t] for t in self.tlb],
            "tlb_victim": list(self.tlb_victim),
            "semaphores": [list(s) for s in self.semaphores],
            "memory_sha256": [hashlib.sha256(m.tobytes()).hexdigest() for m in self.memories],
            "steps": self.steps,
        }


class _Device:
    def __init__(self, arch: ArchParams, index: int, program: list[int], memory: np.ndarray):
        self.index = index
        self.mem = memory
        words = list(program) + [0] * (arch.imem_words - len(program))
        self.imem: list[Decoded] = [decode(w) for w in words]
        self.pc = 0
        self.version = 0          # the program's ISA version, once its VERSION ran
        self.status = Status.RUNNING
        self.cause = Cause.NONE
        self.tlb = [_Entry() for _ in range(arch.tlb_entries)]
        self.victim = 0
        self.chan_fault: list[Cause | None] = [None] * arch.channels
        self.unfenced = [False] * arch.channels
        self.sem = [0] * arch.semaphores
        self.bytes_copied = 0
        self.descriptors = 0
        self.bytes_remapped = 0
        self._active: dict[int, list] = {}
        self.memo: dict[tuple[int, int], tuple | None] = {}   # (ctx, granule) -> translation

    def active(self, ctx: int) -> list:
        """Valid non-staged entries of ``ctx``: (va, page, pa, dev, perm), lowest index first."""
        a = self._active.get(ctx)
        if a is None:
            a = [(e.va, e.size, e.pa, e.dev, e.perm) for e in self.tlb
                 if e.valid and not e.staged and e.ctx == ctx]
            self._active[ctx] = a
        return a

    def tlb_changed(self):
        self._active.clear()
        self.memo.clear()


class GoldenSystem:
    """D devices, each running one program over its own physical memory.

    Parameters
    ----------
    arch : ArchParams
    programs : list of list of int
        One program (256-bit instruction words) per device.
    memories : list of bytes, bytearray or numpy uint8 array
        One initial physical memory per device; shorter ones are zero-padded.
    """

    def __init__(self, arch: ArchParams, programs: list[list[int]], memories):
        check_arch(arch)
        if len(programs) != arch.devices:
            raise ValueError(f"{len(programs)} programs for {arch.devices} devices")
        if len(memories) != arch.devices:
            raise ValueError(f"{len(memories)} memories for {arch.devices} devices")
        self.arch = arch
        self._pages = arch.page_sizes
        self._amask = (1 << arch.addr_bits) - 1
        self._gbits = arch.page_sizes[0].bit_length() - 1
        self.devices: list[_Device] = []
        for d, (prog, mem) in enumerate(zip(programs, memories)):
            if len(prog) > arch.imem_words:
                raise ValueError(f"device {d}: program of {len(prog)} words exceeds "
                                 f"imem_words={arch.imem_words}")
            for i, w in enumerate(prog):
                if not isinstance(w, (int, np.integer)) or not 0 <= int(w) < 1 << WORD_BITS:
                    raise ValueError(f"device {d}: word {i} is not a {WORD_BITS}-bit integer: {w!r}")
            m = np.zeros(arch.mem_bytes, dtype=np.uint8)
            src = np.frombuffer(bytes(mem), dtype=np.uint8) if not isinstance(mem, np.ndarray) \
                else np.asarray(mem, dtype=np.uint8).reshape(-1)
            if src.size > arch.mem_bytes:
                raise ValueError(f"device {d}: memory of {src.size} bytes exceeds "
                                 f"mem_bytes={arch.mem_bytes}")
            m[:src.size] = src
            self.devices.append(_Device(arch, d, [int(w) for w in prog], m))
        self._faults: list[dict] = []
        self._steps = 0

    # ------------------------------------------------------------------ run
    def run(self, max_steps: int = 10_000_000) -> GoldenResult:
        devs = self.devices
        while True:
            progress = False
            running = False
            for dev in devs:
                if dev.status is not Status.RUNNING:
                    continue
                running = True
                if self._step(dev):
                    progress = True
                    self._steps += 1
                    if self._steps > max_steps:
                        raise RuntimeError(f"golden model exceeded max_steps={max_steps}")
            if not running:
                break
            if not progress:
                for dev in devs:
                    if dev.status is Status.RUNNING:
                        dev.status, dev.cause = Status.ABORTED, Cause.DEADLOCK
                break
        return self.result(copy=False)

    def result(self, copy: bool = True) -> GoldenResult:
        """The state now; ``copy=False`` hands over the memories themselves
        (what :meth:`run` does: a gigabyte copy is not free)."""
        devs = self.devices
        tlbs = []
        for dev in devs:
            tlbs.append([{"index": i, "ctx": e.ctx, "staged": e.staged, "size": e.size,
                          "va": e.va, "pa": e.pa, "dev": e.dev, "perm": e.perm}
                         for i, e in enumerate(dev.tlb) if e.valid])
        return GoldenResult(
            memories=[dev.mem.copy() if copy else dev.mem for dev in devs],
            status=[dev.status for dev in devs],
            cause=[dev.cause for dev in devs],
            pc=[dev.pc for dev in devs],
            faults=sorted((dict(f) for f in self._faults),
                          key=lambda f: (f["device"], f["channel"], f["va"])),
            bytes_copied=[dev.bytes_copied for dev in devs],
            descriptors=[dev.descriptors for dev in devs],
            bytes_remapped=[dev.bytes_remapped for dev in devs],
            tlb=tlbs,
            semaphores=[list(dev.sem) for dev in devs],
            tlb_victim=[dev.victim for dev in devs],
            steps=self._steps,
        )

    # --------------------------------------------------------------- decode
    def _step(self, dev: _Device) -> bool:
        """Execute one instruction; False if blocked in WAIT."""
        try:
            return self._exec(dev)
        except _Stop as s:
            dev.status, dev.cause = s.status, s.cause
            return True

    def _check_addr(self, value: int, page: int | None):
        if value >> self.arch.addr_bits:
            raise _Stop(Status.ILLEGAL, Cause.ADDRESS_WIDTH)
        if page is not None and value & (page - 1):
            raise _Stop(Status.ILLEGAL, Cause.MISALIGNED)

    def _check_ctx(self, ctx: int):
        if ctx >= self.arch.contexts:
            raise _Stop(Status.ILLEGAL, Cause.BAD_CONTEXT)

    def _check_faults(self, dev: _Device, chans):
        for c in chans:
            if dev.chan_fault[c] is not None:
                raise _Stop(Status.FAULT, dev.chan_fault[c])

    def _exec(self, dev: _Device) -> bool:
        arch = self.arch
        if dev.pc >= arch.imem_words:
            raise _Stop(Status.ILLEGAL, Cause.PC_OVERFLOW)
        dec = dev.imem[dev.pc]
        op = dec.op
        if dev.pc == 0 and op is not Op.VERSION:
            raise _Stop(Status.ILLEGAL, Cause.VERSION_MISMATCH)
        if op is None or op is Op.ILLEGAL:
            raise _Stop(Status.ILLEGAL, Cause.BAD_OPCODE)
        if OP_SINCE.get(op, 0) > dev.version:
            raise _Stop(Status.ILLEGAL, Cause.BAD_OPCODE)
        if not dec.reserved_ok:
            raise _Stop(Status.ILLEGAL, Cause.RESERVED_BITS)
        f = dec.fields
        if op is Op.VERSION:
            if f["version"] not in SUPPORTED_VERSIONS or dev.version not in (0, f["version"]):
                raise _Stop(Status.ILLEGAL, Cause.VERSION_MISMATCH)
            dev.version = f["version"]
        elif op in COPY_OPS:
            chan = f["chan"]
            if chan >= arch.channels:
                raise _Stop(Status.ILLEGAL, Cause.BAD_CHANNEL)
            self._check_ctx(f["ctx"])
            self._check_addr(f["src"], None)
            self._check_addr(f["dst"], None)
            elem = ELEMENT_BYTES.get(op)
            if elem and any(f[k] % elem for k in ELEMENT_FIELDS):
                raise _Stop(Status.ILLEGAL, Cause.MISALIGNED)
            f = dict(f, element=elem or 0)
            dev.descriptors += 1
            dev.unfenced[chan] = True
            if dev.chan_fault[chan] is None:
                self._copy(dev, chan, f)
        elif op is Op.FENCE:
            mask = f["mask"] or (1 << arch.channels) - 1
            chans = [c for c in range(arch.channels) if mask >> c & 1]
            self._check_faults(dev, chans)
            for c in chans:
                dev.unfenced[c] = False
        elif op is Op.REMAP:
            self._check_ctx(f["ctx"])
            if f["dev"] >= arch.devices:
                raise _Stop(Status.ILLEGAL, Cause.BAD_DEVICE)
            page = self._pages[f["size"]]
            self._check_addr(f["va"], page)
            self._check_addr(f["pa"], page)
            self._place(dev, _Entry(True, f["ctx"], f["staged"], f["size"], f["va"], f["pa"],
                                    f["dev"], f["perm"]))
        elif op is Op.INVAL:
            self._check_ctx(f["ctx"])
            self._check_addr(f["va"], self._pages[f["size"]])
            key = (f["ctx"], f["staged"], f["size"], f["va"])
            for e in dev.tlb:
                if e.valid and (e.ctx, e.staged, e.size, e.va) == key:
                    e.valid = False
                    dev.tlb_changed()
                    break
        elif op is Op.SIGNAL:
            if f["dev"] >= arch.devices:
                raise _Stop(Status.ILLEGAL, Cause.BAD_DEVICE)
            if f["sem"] >= arch.semaphores:
                raise _Stop(Status.ILLEGAL, Cause.BAD_SEMAPHORE)
            self.devices[f["dev"]].sem[f["sem"]] += 1
        elif op is Op.WAIT:
            sem = f["sem"]
            if sem >= arch.semaphores:
                raise _Stop(Status.ILLEGAL, Cause.BAD_SEMAPHORE)
            if dev.sem[sem] < f["count"]:
                return False
            dev.sem[sem] -= f["count"]
        elif op is Op.COMMIT:
            ctx = f["ctx"]
            self._check_ctx(ctx)
            if any(dev.unfenced):
                raise _Stop(Status.ILLEGAL, Cause.COMMIT_UNFENCED)
            self._check_faults(dev, range(arch.channels))
            for e in dev.tlb:
                if e.valid and e.ctx == ctx:
                    if e.staged:
                        e.staged = 0
                        if e.dev == dev.index:
                            dev.bytes_remapped += self._pages[e.size]
                    else:
                        e.valid = False
            dev.tlb_changed()
        elif op is Op.HALT:
            self._check_faults(dev, range(arch.channels))
            raise _Stop(Status.HALTED, Cause.NONE)
        else:  # pragma: no cover - every Op is handled above
            raise AssertionError(op)
        dev.pc += 1
        return True

    def _place(self, dev: _Device, new: _Entry):
        tlb = dev.tlb
        key = (new.ctx, new.staged, new.size, new.va)
        slot = None
        for i, e in enumerate(tlb):
            if e.valid and (e.ctx, e.staged, e.size, e.va) == key:
                slot = i
                break
        if slot is None:
            for i, e in enumerate(tlb):
                if not e.valid:
                    slot = i
                    break
        if slot is None:
            slot = dev.victim
            dev.victim = (dev.victim + 1) % len(tlb)
        tlb[slot] = new
        dev.tlb_changed()

    # ----------------------------------------------------------- translate
    def _lookup(self, dev: _Device, ctx: int, va: int):
        """(va_base, page, pa, dev, perm, run) of the winning entry, or None.

        ``run`` is how many bytes from ``va`` on keep this translation."""
        key = (ctx, va >> self._gbits)
        memo = dev.memo
        if key in memo:
            t = memo[key]
        else:
            t = memo[key] = self._lookup_granule(dev, ctx, va)
        if t is None:
            return None
        eva, page, pa, edev, perm, end = t
        return eva, page, pa, edev, perm, end - va

    def _lookup_granule(self, dev: _Device, ctx: int, va: int):
        """Winning entry for ``va`` and the address where its reign ends (the end of
        its page, or the start of a lower-numbered entry). Constant over a granule
        (smallest page): every entry starts at a multiple of it."""
        act = dev.active(ctx)
        pages = self._pages
        for k, (eva, size, pa, edev, perm) in enumerate(act):
            page = pages[size]
            if va & ~(page - 1) == eva:
                end = eva + page
                for (ova, _s, _p, _d, _m) in act[:k]:
                    if va < ova < end:
                        end = ova
                return eva, page, pa, edev, perm, end
        return None

    def _fault(self, dev: _Device, chan: int, ctx: int, va: int, cause: Cause):
        dev.chan_fault[chan] = cause
        self._faults.append({"device": dev.index, "channel": chan, "ctx": ctx, "va": va,
                             "cause": cause.name})

    def _copy(self, dev: _Device, chan: int, f: dict):
        rows, rb = f["rows"], f["row_bytes"]
        if rows == 0 or rb == 0:
            return
        if rows >= 8 and rb <= 2 * self._pages[0] and rows * rb <= 1 << 20 \
                and not f["element"] and self._copy_vector(dev, f):
            return
        self._copy_scalar(dev, chan, f)

    def _copy_scalar(self, dev: _Device, chan: int, f: dict):
        ctx, src, dst = f["ctx"], f["src"], f["dst"]
        rows, rb, ss, ds = f["rows"], f["row_bytes"], f["src_stride"], f["dst_stride"]
        amask = self._amask
        top = amask + 1
        mem_bytes = self.arch.mem_bytes
        mems = [d.mem for d in self.devices]
        local = dev.index
        smem = dev.mem
        for i in range(rows):
            s = (src + i * ss) & amask
            t = (dst + i * ds) & amask
            j = 0
            while j < rb:
                sv = (s + j) & amask
                tv = (t + j) & amask
                n = min(rb - j, top - sv, top - tv)
                # source side
                tr = self._lookup(dev, ctx, sv)
                if tr is None:
                    return self._fault(dev, chan, ctx, sv, Cause.NOT_MAPPED)
                eva, _page, epa, edev, perm, run = tr
                if not perm & PERM_R:
                    return self._fault(dev, chan, ctx, sv, Cause.NO_READ)
                if edev != local:
                    return self._fault(dev, chan, ctx, sv, Cause.REMOTE_READ)
                spa = epa + (sv - eva)
                if spa >= mem_bytes:
                    return self._fault(dev, chan, ctx, sv, Cause.OUT_OF_RANGE)
                n = min(n, run, mem_bytes - spa)
                # destination side
                tr = self._lookup(dev, ctx, tv)
                if tr is None:
                    return self._fault(dev, chan, ctx, tv, Cause.NOT_MAPPED)
                eva, _page, epa, edev, perm, run = tr
                if not perm & PERM_W:
                    return self._fault(dev, chan, ctx, tv, Cause.NO_WRITE)
                tpa = epa + (tv - eva)
                if tpa >= mem_bytes:
                    return self._fault(dev, chan, ctx, tv, Cause.OUT_OF_RANGE)
                n = min(n, run, mem_bytes - tpa)
                dmem = mems[edev]
                elem = f["element"]      # pieces are whole elements: every field aligned
                if elem and edev == local and spa < tpa < spa + n:
                    # forward over an overlap, as the byte stream: each element's
                    # source read after every earlier element was written
                    for k in range(0, n, elem):
                        dmem[tpa + k:tpa + k + elem] = add_bytes(
                            dmem[tpa + k:tpa + k + elem], smem[spa + k:spa + k + elem], elem)
                elif elem:
                    dmem[tpa:tpa + n] = add_bytes(dmem[tpa:tpa + n], smem[spa:spa + n], elem)
                elif edev == local and spa < tpa < spa + n:
                    # forward byte loop over an overlap: the first (tpa-spa) bytes repeat
                    dmem[tpa:tpa + n] = np.resize(smem[spa:tpa].copy(), n)
                else:
                    dmem[tpa:tpa + n] = smem[spa:spa + n]
                dev.bytes_copied += n
                j += n

    def _translate_vec(self, dev: _Device, ctx: int, vas: np.ndarray, need: int, local: bool):
        """Per-byte translation of ``vas`` (uint64): (pa int64, dev int64), or None
        if any byte would fault (the scalar path then defines the fault)."""
        gb = np.uint64(self._gbits)
        g = vas >> gb
        srt = np.sort(g)
        gran = srt[np.concatenate(([True], srt[1:] != srt[:-1]))]
        inv = np.searchsorted(gran, g)
        mem_bytes = self.arch.mem_bytes
        gpa = np.empty(gran.size, dtype=np.int64)
        gdev = np.empty(gran.size, dtype=np.int64)
        for k, gnum in enumerate(gran.tolist()):
            va = gnum << self._gbits
            t = self._lookup(dev, ctx, va)
            if t is None:
                return None
            eva, _page, epa, edev, perm, _run = t
            pa = epa + (va - eva)
            if not perm & need or (local and edev != dev.index) or pa >= mem_bytes:
                return None
            gpa[k] = pa
            gdev[k] = edev
        off = (vas & np.uint64(self._pages[0] - 1)).astype(np.int64)
        return gpa[inv] + off, gdev[inv]

    def _copy_vector(self, dev: _Device, f: dict) -> bool:
        """Many short rows: translate every byte with numpy (one TLB look-up per
        distinct smallest page), gather, scatter. Returns False, having done
        nothing, when a byte would fault or when bytes of the copy overlap (a
        destination byte written twice, or a destination byte also read): the
        scalar path defines those cases exactly."""
        ctx, rows, rb = f["ctx"], f["rows"], f["row_bytes"]
        am = np.uint64(self._amask)
        idx = np.arange(rows, dtype=np.uint64)
        off = np.arange(rb, dtype=np.uint64)
        with np.errstate(over="ignore"):
            S = (np.uint64(f["src"]) + idx * np.uint64(f["src_stride"]))
            D = (np.uint64(f["dst"]) + idx * np.uint64(f["dst_stride"]))
            svas = ((S[:, None] + off) & am).reshape(-1)
            dvas = ((D[:, None] + off) & am).reshape(-1)
        ts = self._translate_vec(dev, ctx, svas, PERM_R, True)
        if ts is None:
            return False
        td = self._translate_vec(dev, ctx, dvas, PERM_W, False)
        if td is None:
            return False
        spa, _ = ts
        dpa, ddev = td
        mem_bytes = self.arch.mem_bytes
        key = np.sort(ddev * mem_bytes + dpa)
        if (key[1:] == key[:-1]).any():
            return False                       # a destination byte is written twice
        local = dpa[ddev == dev.index]
        if local.size:
            ss = np.sort(spa)
            k = np.minimum(np.searchsorted(ss, local), ss.size - 1)
            if (ss[k] == local).any():
                return False                   # a destination byte is also a source byte
        data = dev.mem[spa]
        if (ddev == ddev[0]).all():
            self.devices[int(ddev[0])].mem[dpa] = data
        else:
            for d in range(self.arch.devices):
                m = ddev == d
                self.devices[d].mem[dpa[m]] = data[m]
        dev.bytes_copied += rows * rb
        return True

    # --------------------------------------------------------------- access
    def read_virtual(self, dev: int, ctx: int, va: int, n: int) -> bytes:
        """``n`` bytes at virtual ``va`` of context ``ctx`` of device ``dev``,
        through its active (committed) mapping; permissions are not checked.
        Raises TranslationError on an unmapped or out-of-range address."""
        d = self.devices[dev]
        out = bytearray()
        amask = self._amask
        while len(out) < n:
            v = (va + len(out)) & amask
            tr = self._lookup(d, ctx, v)
            if tr is None:
                raise TranslationError(f"device {dev} context {ctx}: va 0x{v:x} is not mapped")
            eva, _page, epa, edev, _perm, run = tr
            pa = epa + (v - eva)
            if pa >= self.arch.mem_bytes:
                raise TranslationError(f"device {dev} context {ctx}: va 0x{v:x} maps to pa "
                                       f"0x{pa:x} beyond memory")
            k = min(run, n - len(out), self.arch.mem_bytes - pa, amask + 1 - v)
            out += self.devices[edev].mem[pa:pa + k].tobytes()
        return bytes(out)


def run_golden(arch: ArchParams, programs, memories, max_steps: int = 10_000_000) -> GoldenResult:
    """Convenience: build a GoldenSystem and run it."""
    return GoldenSystem(arch, programs, memories).run(max_steps)
