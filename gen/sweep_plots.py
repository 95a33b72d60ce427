"""Pareto fronts of a sweep's rows, as PNGs and a summary table.

A point is on the front when no other point is at least as good on both
axes and better on one (both axes minimized). Each picture is drawn only
when the rows hold its figures (a sweep without synthesis has no LUT4).
"""
from __future__ import annotations

from pathlib import Path


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indexes of the points no other point dominates (minimizing both coordinates)."""
    front = []
    for i, (x, y) in enumerate(points):
        if not any((a <= x and b <= y) and (a < x or b < y) for j, (a, b) in enumerate(points) if j != i):
            front.append(i)
    return sorted(front, key=lambda i: points[i])


def _ok(rows, *keys):
    return [r for r in rows if r["status"] == "ok" and all(r.get(k) is not None for k in keys)]


def _cycles_key(rows) -> str | None:
    """Simulated cycles where the sweep ran Verilator, else the calibrated prediction."""
    if _ok(rows, "cycles"):
        return "cycles"
    return "predicted_cycles" if _ok(rows, "predicted_cycles") else None


def _label(r) -> str:
    return f"{r['bus_bits']}b x{r.get('arch_channels') or r.get('channels') or '?'}ch"


def _scatter(path: Path, rows, x: str, y: str, xlabel: str, ylabel: str, title: str, label=_label):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    pts = [(float(r[x]), float(r[y])) for r in rows]
    front = pareto_front(pts)
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=110)
    ax.scatter([p[0] for p in pts], [p[1] for p in pts], color="#9aa5b1", label="points", zorder=2)
    fx, fy = [pts[i][0] for i in front], [pts[i][1] for i in front]
    ax.step(fx, fy, where="post", color="#c0392b", zorder=3)
    ax.scatter(fx, fy, color="#c0392b", label="Pareto front", zorder=4)
    for i in front:
        ax.annotate(label(rows[i]), pts[i], textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return [rows[i] for i in front]


def _cycles_vs_hw(path: Path, rows, ykey: str):
    """Cycles against channels, one line per bus width; the front over (channels x bus bits, cycles)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=110)
    for bus in sorted({r["bus_bits"] for r in rows}):
        sel = sorted((r for r in rows if r["bus_bits"] == bus), key=lambda r: r["arch_channels"])
        ax.plot([r["arch_channels"] for r in sel], [r[ykey] for r in sel], marker="o", label=f"{bus}-bit bus")
    pts = [(float(r["arch_channels"] * r["bus_bits"]), float(r[ykey])) for r in rows]
    front = [rows[i] for i in pareto_front(pts)]
    ax.scatter([r["arch_channels"] for r in front], [r[ykey] for r in front], s=120, facecolors="none",
               edgecolors="#c0392b", label="Pareto front (channels x bus bits, cycles)", zorder=4)
    ax.set_xticks(sorted({r["arch_channels"] for r in rows}))
    ax.set_xlabel("DMA channels")
    ax.set_ylabel(f"sync {ykey.replace('_', ' ')}")
    ax.set_title("Reshard cycles against channels and bus width", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return front


def _unique(rows, cols):
    """One row per distinct value of ``cols`` (points that differ only elsewhere plot as one)."""
    seen = {}
    for r in rows:
        seen.setdefault(tuple(r.get(c) for c in cols), r)
    return list(seen.values())


_HW = ("bus_bits", "arch_channels", "arch_tlb_entries")
_ENGINE = ("chip", "engine_clock_mhz_used", "engine_bus_bits_used", "engine_channels_used")


def fronts(rows, out: Path) -> list[tuple[str, Path, list[dict], tuple]]:
    """(title, PNG path, rows on the front, columns that tell them apart) of every
    picture the rows allow; the PNGs are written."""
    out = Path(out)
    made = []
    cyc = _cycles_key(rows)
    if cyc and _ok(rows, cyc, "lut4"):
        cols = ("block", *_HW, cyc, "lut4", "ff", "fmax_mhz")
        p = out / "pareto_cycles_vs_lut4.png"
        made.append(("sync cycles against LUT4", p,
                     _scatter(p, _unique(_ok(rows, cyc, "lut4"), cols), "lut4", cyc, "LUT4 (out of context)",
                              f"sync {cyc.replace('_', ' ')}", "Reshard cycles against area"), cols))
    if cyc and _ok(rows, cyc, "arch_channels"):
        cols = ("model", "train", "rollout", *_HW, cyc)
        p = out / "pareto_cycles_vs_channels_bus.png"
        made.append(("sync cycles against channels and bus width", p,
                     _cycles_vs_hw(p, _unique(_ok(rows, cyc, "arch_channels"), cols), cyc), cols))
    if _ok(rows, "iteration_s_with_ip_sync", "engine_clock_mhz_used"):
        cols = (*_ENGINE, "sync_ip_s", "iteration_s_with_ip_sync")
        p = out / "pareto_iteration_vs_clock.png"
        made.append(("iteration time (IP sync) against engine clock", p,
                     _scatter(p, _unique(_ok(rows, "iteration_s_with_ip_sync", "engine_clock_mhz_used"), cols),
                              "engine_clock_mhz_used", "iteration_s_with_ip_sync", "engine clock (MHz)",
                              "iteration time with the IP's sync (s)", "Iteration time against engine clock",
                              label=lambda r: f"{r['engine_bus_bits_used']}b x{r['engine_channels_used']}ch"),
                     cols))
    return made


def front_table(made) -> list[str]:
    """The fronts as a text table: one block per picture."""
    lines = []
    for title, _, rows, cols in made:
        lines.append(f"Pareto front: {title} ({len(rows)} point(s))")
        cells = [[_fmt(r.get(c)) for c in cols] for r in rows]
        widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
        lines.append("  " + "  ".join(c.rjust(w) for c, w in zip(cols, widths)))
        lines += ["  " + "  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells]
    return lines


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def write_pareto(rows, out) -> list[Path]:
    """Write the PNGs and ``pareto.txt`` (the fronts' table) into ``out``; the PNG paths."""
    made = fronts(rows, out)
    tmp = Path(out) / ".pareto.txt.tmp"
    tmp.write_text("\n".join(front_table(made)) + "\n")
    tmp.replace(Path(out) / "pareto.txt")
    return [p for _, p, _, _ in made]
