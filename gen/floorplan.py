"""Block RAM floorplans for multi-device board tops: each device's block
RAMs locked to a compact block in its own vertical stripe of the die.

nextpnr places a cell where its ``BEL`` attribute says (the YoWASP builds
have no Python for region constraints, but they honour this attribute). A
device's block RAMs are what anchor it: left free, the placer puts two
devices' memories on the same rows across the whole die and stretches each
device between its memory, its instruction memory and its MMU (see
docs/fpga-timing.md). Locked per device, they keep each device's logic on
its own side.

Run between synthesis and place and route on the synthesized netlist::

    python -m gen.floorplan_worker top.json --part LFE5U-85F --devices 2

(``python -m gen fpga --board ...`` does it in the build script when the
part has a site table in :data:`EBR_SITES`; other parts are placed freely).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from model.errors import InputError

__all__ = ["EBR_SITES", "Site", "plan_bram_sites", "apply_floorplan"]


@dataclass(frozen=True)
class Site:
    """A block RAM site: nextpnr's BEL name and its tile coordinates."""
    x: int
    y: int
    name: str


def _ecp5_ebr_sites(rows, group_columns):
    """ECP5 block RAMs come in groups of four (``EBR0``..``EBR3``) two
    columns apart, starting at each of ``group_columns``, on each of ``rows``."""
    return tuple(Site(x + 2 * k, y, f"X{x + 2 * k}/Y{y}/EBR{k}")
                 for y in rows for x in group_columns for k in range(4))


#: Block RAM (DP16KD) sites per part, as nextpnr-ecp5 0.11 names them. The
#: LFE5U-85F's 208 are four rows of 52; every name was checked by having
#: nextpnr place a block RAM there (a wrong one stops it at once).
EBR_SITES = {
    "LFE5U-85F": _ecp5_ebr_sites(rows=(22, 46, 70, 82),
                                 group_columns=(4, 13, 22, 31, 40, 49, 58,
                                                69, 78, 87, 96, 105, 114)),
}
#: nextpnr's tile grid width per part (for the devices' stripes).
_GRID_WIDTH = {"LFE5U-85F": 127}

_DEVICE = re.compile(r"^top\.system\.dev(\d+)\.")


def plan_bram_sites(cells: dict, part: str, devices: int) -> dict[str, str]:
    """``{cell name: site name}`` for the block RAMs (``DP16KD`` cells of
    ``cells``, a Yosys JSON module's cells) of each device ``top.system.devN``:
    device N gets the sites of the N-th of ``devices`` equal vertical stripes
    nearest the stripe's centre and the die's middle rows, in name order (so
    one memory's blocks sit together). Other block RAMs stay free; a part
    without a site table gets no plan."""
    sites = EBR_SITES.get(part)
    if sites is None or devices < 1:
        return {}
    width = _GRID_WIDTH[part]
    rows = sorted({s.y for s in sites})
    mid_y = (rows[len(rows) // 2 - 1] + rows[len(rows) // 2]) / 2 if len(rows) > 1 else rows[0]
    by_device: dict[int, list[str]] = {}
    for name, cell in sorted(cells.items()):
        m = _DEVICE.match(name)
        if cell.get("type") == "DP16KD" and m:
            by_device.setdefault(int(m[1]), []).append(name)
    plan = {}
    for dev, names in sorted(by_device.items()):
        if dev >= devices:
            raise InputError(f"floorplan: block RAM {names[0]!r} belongs to device {dev}, "
                             f"but the top has {devices} device(s)")
        lo, hi = width * dev / devices, width * (dev + 1) / devices
        centre = (lo + hi) / 2
        stripe = [s for s in sites if lo <= s.x < hi]
        if len(names) > len(stripe):
            raise InputError(f"floorplan: device {dev} has {len(names)} block RAMs, its stripe "
                             f"of the {part} (columns {lo:.0f}-{hi:.0f}) has {len(stripe)} sites")
        # the nearest sites, then in row-major order so a memory's blocks are neighbours
        chosen = sorted(stripe, key=lambda s: (abs(s.y - mid_y), abs(s.x - centre)))[:len(names)]
        chosen.sort(key=lambda s: (s.y, s.x))
        plan.update(zip(names, (s.name for s in chosen)))
    return plan


def apply_floorplan(path, part: str, devices: int) -> dict[int, int]:
    """Set the ``BEL`` attribute of each device's block RAMs in the Yosys
    JSON netlist at ``path`` (rewritten in place, atomically). Returns the
    number locked per device."""
    path = Path(path)
    try:
        netlist = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(f"floorplan: cannot read the netlist {path}: {e}") from None
    top = netlist.get("modules", {}).get("top")
    if top is None:
        raise InputError(f"floorplan: {path} has no module 'top'")
    plan = plan_bram_sites(top["cells"], part, devices)
    locked: dict[int, int] = {}
    for name, site in plan.items():
        top["cells"][name].setdefault("attributes", {})["BEL"] = site
        dev = int(_DEVICE.match(name)[1])
        locked[dev] = locked.get(dev, 0) + 1
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(netlist))
    os.replace(tmp, path)
    return locked
