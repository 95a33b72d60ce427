"""The MMU's port and inter-stage layouts, and the parameters every stage derives."""
from __future__ import annotations

from amaranth.lib import data, enum
from amaranth.utils import bits_for, exact_log2

from ..isa import Cause, Op, field_of
from ..lib import MAX_EXTRA_COPIES, ctx_bits, dev_bits, page_offset_mask

__all__ = ["TranslateCause", "MmuOp", "translate_request", "translate_response",
           "MmuCommand", "TlbEntry", "TlbMatch", "TlbSelection", "PRIORITY_GROUP"]


#: The translation causes, as :class:`hw.isa.Cause` values.
_TRANSLATE_CAUSES = (Cause.NONE, Cause.NOT_MAPPED, Cause.NO_READ, Cause.NO_WRITE,
                     Cause.REMOTE_READ, Cause.OUT_OF_RANGE)
#: The ISA fields an MMU command and a TLB entry carry, with their widths.
SIZE_BITS = field_of(Op.REMAP, "size").width
PERM_BITS = field_of(Op.REMAP, "perm").width
STAGED_BITS = field_of(Op.REMAP, "staged").width


class TranslateCause(enum.Enum, shape=bits_for(max(_TRANSLATE_CAUSES))):
    """Translation fault causes; the values are those of :class:`hw.isa.Cause`."""
    NONE = int(Cause.NONE)
    NOT_MAPPED = int(Cause.NOT_MAPPED)
    NO_READ = int(Cause.NO_READ)
    NO_WRITE = int(Cause.NO_WRITE)
    REMOTE_READ = int(Cause.REMOTE_READ)
    OUT_OF_RANGE = int(Cause.OUT_OF_RANGE)


class MmuOp(enum.Enum, shape=bits_for(max(Op.REMAP, Op.INVAL, Op.COMMIT))):
    """MMU command opcodes; the values are the ISA opcodes (:class:`hw.isa.Op`)."""
    REMAP = int(Op.REMAP)
    INVAL = int(Op.INVAL)
    COMMIT = int(Op.COMMIT)


def translate_request(arch, tag_width):
    """Layout of a translation request: ``ctx``, ``va``, ``write`` (0: read
    access), and ``tag`` when ``tag_width`` is not 0."""
    fields = {"ctx": ctx_bits(arch), "va": arch.addr_bits, "write": 1}
    if tag_width:
        fields["tag"] = tag_width
    return data.StructLayout(fields)


def translate_response(arch, tag_width):
    """Layout of a translation response: ``pa``, ``dev``, ``cause``, ``tag``.

    ``pa`` and ``dev`` are meaningful only when ``cause`` is ``NONE``; there
    is no ``tag`` when ``tag_width`` is 0."""
    fields = {"pa": arch.addr_bits, "dev": dev_bits(arch), "cause": TranslateCause}
    if tag_width:
        fields["tag"] = tag_width
    return data.StructLayout(fields)


class MmuCommand(data.StructLayout):
    """An MMU command: the fields of the ISA's REMAP / INVAL / COMMIT.

    ``op`` selects the command; ``size``, ``perm``, ``staged``, ``dev``,
    ``va`` and ``pa`` are used as the ISA defines (COMMIT uses only ``ctx``).
    ``va`` and ``pa`` must be aligned to the page size (the coprocessor checks
    it); the MMU ignores their in-page bits.
    """
    def __init__(self, arch):
        super().__init__({
            "op": MmuOp,
            "ctx": ctx_bits(arch),
            "size": SIZE_BITS,
            "perm": PERM_BITS,
            "staged": STAGED_BITS,
            "dev": dev_bits(arch),
            "va": arch.addr_bits,
            "pa": arch.addr_bits,
        })


class TlbEntry(data.StructLayout):
    """One TLB entry. ``vpn``/``ppn`` are in units of the smallest page."""
    def __init__(self, arch):
        pn = arch.addr_bits - exact_log2(arch.page_sizes[0])
        super().__init__({
            "valid": 1,
            "staged": STAGED_BITS,
            "ctx": ctx_bits(arch),
            "size": SIZE_BITS,
            "perm": PERM_BITS,
            "dev": dev_bits(arch),
            "vpn": pn,
            "ppn": pn,
        })


def _page_numbers(arch):
    """(in-page bits of the smallest page, width of a page number)."""
    p0_bits = exact_log2(arch.page_sizes[0])
    return p0_bits, arch.addr_bits - p0_bits


def _offset_mask(arch, size):
    """Bits of a page number (smallest-page units) that lie inside a page of ``size``."""
    _, pn = _page_numbers(arch)
    return page_offset_mask(arch.page_sizes, size, unit=arch.page_sizes[0], width=pn)


def _check_tag_width(tag_width):
    if not isinstance(tag_width, int) or isinstance(tag_width, bool) or not 0 <= tag_width <= 16:
        raise ValueError(f"Tag width must be an integer in 0..16, not {tag_width!r}")


def TlbMatch(arch, tag_width):
    """Layout between the match and select stages: the request and its hits
    by group of :data:`PRIORITY_GROUP` entries: ``first`` has bit ``i`` set
    when entry ``i`` is the lowest-index entry of its group that hits, and
    ``group_hit`` bit ``g`` when some entry of group ``g`` hits."""
    return data.StructLayout({
        "req": translate_request(arch, tag_width),
        "first": arch.tlb_entries,
        "group_hit": _groups(arch),
    })


PRIORITY_GROUP = 4
"""Entries whose priority the match stage resolves among themselves; the
select stage resolves it among the groups (a LUT level each, no carry chain
after the comparators)."""


def _groups(arch):
    return -(-arch.tlb_entries // PRIORITY_GROUP)


def _copies(arch):
    """Copies of the request (and of the command) the comparators read: one
    per group, at most the plain register and its extra copies."""
    return min(_groups(arch), 1 + MAX_EXTRA_COPIES)


def _copy_of(arch, k):
    """Which copy entry ``k``'s comparators read: the groups are shared out
    among the copies in runs, so no one register spans all the comparators
    and each can sit near its own (FPGA timing)."""
    return k // PRIORITY_GROUP * _copies(arch) // _groups(arch)


def TlbSelection(arch, tag_width):
    """Layout between the select and check stages: the request, whether some
    entry hit, and the lowest-index hit entry's ``perm``, ``dev``, ``size``, ``ppn``."""
    _, pn = _page_numbers(arch)
    return data.StructLayout({
        "req": translate_request(arch, tag_width),
        "hit": 1,
        "perm": PERM_BITS,
        "dev": dev_bits(arch),
        "size": SIZE_BITS,
        "ppn": pn,
    })
