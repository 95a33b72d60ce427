"""A compiled reshard's plan transfers as :class:`verif.items.TransferItem`, and the check of each.

The plan (``model.plan``, recomputed from the compiled manifest's source) says,
for every run, which bytes of a source rank's training buffer land where in a
destination rank's rollout buffer. The compiler puts rank ``g``'s rollout buffer
at the virtual addresses of the manifest's tensor table, reached through the
rollout context (context 1) of the TLB it expects after the COMMIT: each page
maps either the destination's staging area (the bytes are copied there) or,
for a zero-copy page, the destination's own training page. The check is
independent of the golden model: every destination byte of every transfer,
translated that way, must hold the source byte from the source device's
initial memory, and a byte in a staging page must have been written by a write
beat the monitor saw.
"""
from __future__ import annotations

import bisect

import numpy as np

from verif.items import TransferItem

#: transfer classes: row length against the bus (a whole number of beats from an
#: aligned address; an unaligned start or a partial last beat; shorter than a beat) ...
ROW_CLASSES = ("aligned", "unaligned", "sub-beat")
#: ... and the path its bytes take: a copy within the device, a zero-copy remap (with any
#: unaligned edges copied), a copy through the interconnect
PATHS = ("local-copy", "zero-copy", "remote-copy")


def plan_of(manifest: dict):
    """The ``minimal`` plan the compiled directory was made from."""
    from model.models import load_model
    from model.plan import make_plan
    from model.specs import parse_spec
    src = manifest["source"]
    return make_plan(load_model(src["model"]), parse_spec(src["train"], "train"),
                     parse_spec(src["rollout"], "rollout"), src["dtype"], "minimal")


def transfer_items(manifest: dict) -> list[TransferItem]:
    plan = plan_of(manifest)
    return [TransferItem.from_plan(t, plan.elem_bytes) for t in plan.transfers]


class Layout:
    """Where rank ``g``'s rollout-buffer bytes are: tensor table and rollout-context TLB."""

    def __init__(self, manifest: dict):
        arch = manifest["arch"]
        self.es = manifest["source"]["elem_bytes"]
        self.page_sizes = arch["page_sizes"]
        regions = manifest["regions"]
        self.train_pa = regions["train_pa"]
        self.stage_pa, self.stage_end = regions["stage_pa"], regions["stage_pa"] + regions["rollout_span"]
        self.tensors, self.pages = [], []
        for dev in manifest["devices"]:
            ts = sorted(dev["tensors"], key=lambda t: t["off"])
            self.tensors.append(([t["off"] * self.es for t in ts], [t["va"] for t in ts]))
            ps = sorted((e["va"], self.page_sizes[e["size"]], e["pa"], e["dev"])
                        for e in dev["report"]["expected_tlb"] if e["ctx"] == 1)
            self.pages.append(([p[0] for p in ps], ps))

    def va(self, g: int, off: int) -> int:
        starts, vas = self.tensors[g]
        k = bisect.bisect_right(starts, off) - 1
        return vas[k] + off - starts[k]

    def translate(self, g: int, va: int) -> tuple[int, int, int]:
        """(device, physical address, bytes to the end of the page) of a rollout virtual address."""
        starts, ps = self.pages[g]
        k = bisect.bisect_right(starts, va) - 1
        if k < 0 or not ps[k][0] <= va < ps[k][0] + ps[k][1]:
            raise LookupError(f"rank {g}: rollout address {va:#x} is not mapped")
        pva, size, pa, dev = ps[k]
        return dev, pa + va - pva, pva + size - va


def classify(item: TransferItem, bus_bytes: int, zero_copy: bool) -> tuple[str, str]:
    if item.row_bytes < bus_bytes:
        row = "sub-beat"
    elif item.row_bytes % bus_bytes == 0 and item.dst_offset % bus_bytes == 0 and (
            item.rows == 1 or item.dst_stride % bus_bytes == 0):
        row = "aligned"
    else:
        row = "unaligned"
    path = "remote-copy" if item.src != item.dst else ("zero-copy" if zero_copy else "local-copy")
    return row, path


def check_transfer(item: TransferItem, lay: Layout, initial, final, written) -> tuple[bool, str | None]:
    """(some byte is zero-copy, the first difference or None). ``initial``/``final``: per device,
    uint8 arrays; ``written``: per device, a bool array of the bytes some monitored beat wrote."""
    g, s = item.dst, item.src
    zero_copy = False
    for r in range(item.rows):
        off, soff, left = item.dst_offset + r * item.dst_stride, item.src_offset + r * item.src_stride, item.row_bytes
        while left:
            try:
                dev, pa, room = lay.translate(g, lay.va(g, off))
            except LookupError as e:
                return zero_copy, f"{item.convert2string()}: {e}"
            n = min(left, room)
            spa = lay.train_pa + soff
            where = f"{item.convert2string()}: row {r}, rollout byte {off:#x} (device {dev} address {pa:#x})"
            if dev != g:
                return zero_copy, f"{where}: the rollout context maps device {dev}, not {g}"
            got, want = final[g][pa:pa + n], initial[s][spa:spa + n]
            if not np.array_equal(got, want):
                i = int(np.flatnonzero(got != want)[0])
                return zero_copy, (f"{where}: byte {i} is {int(got[i]):#04x}, the source (device {s} address "
                                   f"{spa + i:#x}) is {int(want[i]):#04x}")
            if lay.stage_pa <= pa < lay.stage_end:
                hole = np.flatnonzero(~written[g][pa:pa + n])
                if hole.size:
                    return zero_copy, f"{where}: byte {int(hole[0])} was never written by a monitored beat"
            elif s == g and pa == spa:
                zero_copy = True
            else:
                return zero_copy, f"{where}: mapped outside the staging area onto a page that is not the source"
            off, soff, left = off + n, soff + n, left - n
    return zero_copy, None
