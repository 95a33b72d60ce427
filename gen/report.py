"""The main job's report: ``build/report/index.html``, static, pictures beside it.

A chip architect reads it top to bottom: each step of the main job with
what it printed and its checks, the FPGA builds and design-space sweeps
found under ``build/``, and
the iteration model for one configuration with its pictures and the
published figures beside the model's. No server, no scripts beyond marking
each picture loaded (so a broken one shows, and a test can tell).
"""
from __future__ import annotations

import html
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from gen.perf_run import fmt_s


@dataclass
class Step:
    """One main-job step: its title, what it printed, its checks (text, passed)."""
    key: str
    title: str
    lines: list[str] = field(default_factory=list)
    checks: list[tuple[str, bool]] = field(default_factory=list)


INTRO = {
    "trace": "verl 0.9.1's own FSDP2 engine on CPU ranks (gloo), every collective and shard recorded.",
    "layouts": "Layouts derived from the documented rules, checked range for range against the capture.",
    "plans": "Bytes of the minimal transfer plan against what verl moves today.",
    "golden": "The tiny reshard compiled to coprocessor programs and run on the golden model.",
    "rtl": "The same programs on the Amaranth RTL: cycles against the port lower bound.",
    "verilog": "The emitted Verilog under Verilator, cycle for cycle against the Amaranth simulation.",
    "loop": "verl trains with GRPO; every weight sync runs on the Verilog; the rollout generates from it.",
    "collectives": "The training step's all-gathers and reduce-scatters replayed on the Verilog (reduce-on-write).",
    "model": "One verl iteration on a real chip at real scale, phase by phase (pictures and sources below).",
}

CSS = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; color: #222; line-height: 1.45; }
h1 { border-bottom: 2px solid #444; } h2 { margin-top: 2em; border-bottom: 1px solid #bbb; }
pre { background: #f5f5f5; padding: .8em; overflow-x: auto; font-size: 12px; }
table { border-collapse: collapse; font-size: 13px; margin: .5em 0; }
td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
.ok { color: #1a7f37; font-weight: bold; } .fail { color: #c62828; font-weight: bold; }
img { max-width: 100%; border: 1px solid #ddd; margin: .5em 0; }
img[data-broken] { outline: 4px solid #c62828; }
nav a { margin-right: 1em; }
"""

#: marks each picture: data-loaded (its pixel width) or data-broken
IMG = '<img src="{src}" alt="{alt}" onload="this.dataset.loaded=this.naturalWidth" ' \
      'onerror="this.dataset.broken=1">'


def _e(x) -> str:
    return html.escape(str(x))


def _table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def find_fpga_reports(root: Path = Path("build")) -> list[dict]:
    """Every ``report.json`` an FPGA build left under ``build/fpga`` or ``build/bench_fpga``."""
    rows = []
    for p in sorted(list(root.glob("fpga/*/report.json")) + list(root.glob("bench_fpga/*/report.json"))):
        try:
            d = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        rows.append({"dir": str(p.parent), **d})
    return rows


def _fpga_section(reports: list[dict]) -> str:
    if not reports:
        return "<p>No FPGA build under <code>build/</code> yet: <code>python -m gen fpga --board ulx3s-85f</code> " \
               "or <code>--ooc --block device</code> makes one (docs/fpga.md).</p>"
    def lowest(v):
        v = list(v.values()) if isinstance(v, dict) else [v]
        v = [x for x in v if isinstance(x, (int, float))]
        return f"{min(v):.1f}" if v else "-"

    rows = []
    for d in reports:
        what = d.get("board") or f"{d.get('block') or '?'} (out of context)"
        status = d.get("status") or ("placed and routed" if d.get("lut4") else "-")
        fmax = lowest(d.get("fmax_mhz"))
        met = {True: "yes", False: "no"}.get(d.get("timing_met"), "-") if fmax != "-" else "-"
        rows.append([d["dir"], what, d.get("part", ""), status, fmax,
                     lowest(d.get("constraint_mhz")), met, d.get("lut4", "-"), d.get("ff", "-"),
                     d.get("build_seconds", "-")])
    return _table(["directory", "top", "part", "status", "Fmax MHz", "target MHz", "timing met", "LUT4", "FF",
                   "build s"], rows)


def find_sweeps(root: Path = Path("build")) -> list[dict]:
    """Every sweep (``python -m gen sweep``) that finished a run under ``build/sweep``."""
    import pyarrow.parquet as pq
    out = []
    for res in sorted(root.glob("sweep/*/results.parquet")):
        status = pq.read_table(res, columns=["status"]).column("status").to_pylist()
        front = res.parent / "pareto.txt"
        out.append({"name": res.parent.name, "dir": res.parent, "points": len(status),
                    "failed": sum(s != "ok" for s in status),
                    "fronts": front.read_text() if front.is_file() else "",
                    "pictures": sorted(res.parent.glob("pareto_*.png"))})
    return out


def _sweep_picture(sweep: dict, png: Path) -> str:
    return f"sweep-{sweep['name']}-{png.name}"


def _sweep_section(sweeps: list[dict]) -> str:
    if not sweeps:
        return "<p>No sweep under <code>build/sweep</code> yet: <code>python -m gen sweep " \
               "examples/sweep-small.yaml</code> makes one (docs/sweep.md).</p>"
    out = [_table(["sweep", "points", "failed", "table"],
                  [[s["name"], s["points"], s["failed"], f"{s['dir']}/results.parquet"] for s in sweeps])]
    for s in sweeps:
        out.append(f"<h3>{_e(s['name'])}</h3><pre>{_e(s['fronts'])}</pre>")
        out += [IMG.format(src=_e(_sweep_picture(s, p)), alt=_e(p.stem)) for p in s["pictures"]]
    return "\n".join(out)


def _perf_section(perf: dict, plots: list[Path], published: list[dict]) -> str:
    rows = [[p["name"], fmt_s(p["time_s"]), p["bound_by"],
             *(f"{p['utilization'][w]:.0%}" for w in ("compute", "hbm", "interconnect")),
             f"{p['peak_memory_gb']:.1f}"] for p in perf["phases"]]
    w = perf["workload"]
    out = [f"<p>{_e(perf['model'])} ({perf['parameters'] / 1e9:.2f}B parameters) on {perf['world']}x "
           f"{_e(perf['chip'])}: train {_e(perf['train'])}, rollout {_e(perf['rollout'])}; {_e(w['algorithm'])}, "
           f"batch {w['batch']} x n={w['rollout_n']}, {w['prompt_len']}+{w['response_len']} tokens. Each phase "
           f"takes the longest of its three walls; the others' utilization says how much headroom they have "
           f"(docs/perf.md).</p>",
           _table(["phase", "time", "bound by", "compute", "HBM", "interconnect", "GB per chip"], rows),
           f"<p>Iteration: <b>{fmt_s(perf['iteration_s'])}</b>; with the reshard IP's weight sync "
           f"{fmt_s(perf['iteration_s_with_ip_sync'])}. Peak memory {perf['peak_memory_gb']:.1f} GB per chip.</p>",
           _table(["weight sync", "GB per rank", "time"],
                  [[k, f"{s['bytes_per_rank'] / 1e9:.2f}", fmt_s(s["time_s"])] for k, s in perf["sync"].items()])]
    for p in plots:
        out.append(IMG.format(src=_e(p.name), alt=_e(p.stem)))
    out.append("<h3>Published figures beside the model's</h3>")
    out.append(_table(["topic", "source", "setting", "published", "this model", "the gap"],
                      [[r["topic"], r["source"], r["setting"], r["published"], r["model"], r["gap"]]
                       for r in published]))
    return "\n".join(out)


def _step_section(s: Step) -> str:
    checks = "".join(f'<li><span class="{"ok" if ok else "fail"}">{"ok" if ok else "FAIL"}</span> {_e(t)}</li>'
                     for t, ok in s.checks)
    # the checks are listed above the output; the output keeps what the step found
    lines = [ln for ln in s.lines if ln.strip() and not ln.lstrip().startswith(("[ok]", "[FAIL]"))]
    return (f"<p>{_e(INTRO.get(s.key, ''))}</p><ul>{checks}</ul>"
            f"<pre>{_e(chr(10).join(lines))}</pre>")


def write_report(steps: list[Step], verdict: str, perf: dict, plots: list[Path], published: list[dict],
                 out: Path, fpga: list[dict] | None = None, sweeps: list[dict] | None = None) -> Path:
    """Write ``out/index.html`` with the pictures beside it, all at once (a temporary directory renamed)."""
    sweeps = find_sweeps() if sweeps is None else sweeps
    sections = [(s.key, s.title, _step_section(s)) for s in steps]
    sections.append(("fpga", "FPGA builds", _fpga_section(find_fpga_reports() if fpga is None else fpga)))
    sections.append(("sweeps", "Design-space sweeps found under build/", _sweep_section(sweeps)))
    sections.append(("iteration-model", "The iteration model: pictures and published figures", _perf_section(perf, plots, published)))
    nav = "".join(f'<a href="#{k}">{_e(t.split(":")[0])}</a>' for k, t, _ in sections)
    body = "\n".join(f'<section id="{k}"><h2>{_e(t)}</h2>\n{h}</section>' for k, t, h in sections)
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>ReshardIP report</title>"
            f"<style>{CSS}</style></head><body><h1>ReshardIP: the main job's report</h1>"
            f"<p><b>{_e(verdict)}</b></p><nav>{nav}</nav>\n{body}\n</body></html>\n")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".report-", dir=out.parent))
    (tmp / "index.html").write_text(page)
    for p in plots:
        shutil.copy2(p, tmp / p.name)
    for sw in sweeps:
        for p in sw["pictures"]:
            shutil.copy2(p, tmp / _sweep_picture(sw, p))
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out / "index.html"
