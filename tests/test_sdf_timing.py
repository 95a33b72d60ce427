"""gen.sdf_timing: every failing endpoint from an SDF, on small hand-made ones."""
import json

import pytest

from gen.sdf_timing import (endpoints_report, failing_endpoints, is_detour, parse_sdf, placed_locations,
                             signal_of, summarize)


def _ff(name, clk_q=500, setup=100):
    return f"""
  (CELL (CELLTYPE "TRELLIS_FF") (INSTANCE {name})
    (DELAY (ABSOLUTE (IOPATH CLK Q (400:450:{clk_q}) (400:450:{clk_q}))))
    (TIMINGCHECK (SETUPHOLD (posedge DI) (posedge CLK) (0:0:{setup}) (0:0:0))))"""


def _lut(name, delay=240, inputs="ABCD"):
    arcs = " ".join(f"(IOPATH {i} F (0:0:{delay}) (0:0:{delay}))" for i in inputs)
    return f"""
  (CELL (CELLTYPE "TRELLIS_COMB") (INSTANCE {name}) (DELAY (ABSOLUTE {arcs})))"""


def _net(a, b, delay):
    return f"(INTERCONNECT {a} {b} (0:0:{delay}) (0:0:{delay}))"


def _sdf(cells, nets):
    return f"""(DELAYFILE (SDFVERSION "3.0") (DESIGN "top") (TIMESCALE 1ps)
  (CELL (CELLTYPE "top") (INSTANCE ) (DELAY (ABSOLUTE {' '.join(nets)})))
  {''.join(cells)})"""


# a.q --(1000)--> l1.A --> l1.F --(2000)--> l2.B --> l2.F --(3000)--> b.DI : 0.5+1+0.24+2+0.24+3+0.1 = 7.08 ns
# a.q --(100)--> c.DI                                                       : 0.5+0.1+0.1 = 0.7 ns
# a.q --(9000)--> top.x.ring.0.3$DPRAM_COMB3.WRE (setup 200)                : 0.5+9+0.2 = 9.7 ns
SDF = _sdf(
    [_ff("top.x.a_TRELLIS_FF_Q"), _ff("top.x.b_TRELLIS_FF_Q_2"), _ff("top.y.c_TRELLIS_FF_Q"),
     _lut(r"top.x.b_TRELLIS_FF_Q_2_DI_LUT4_Z"), _lut(r"top.x.b_TRELLIS_FF_Q_2_DI_LUT4_Z_D_LUT4_Z"),
     """
  (CELL (CELLTYPE "TRELLIS_RAMW") (INSTANCE top.x.ring.0.3\\$DPRAM_COMB3)
    (TIMINGCHECK (SETUPHOLD (posedge WRE) (posedge WCK) (0:0:200) (0:0:0))))"""],
    [_net("top.x.a_TRELLIS_FF_Q/Q", r"top.x.b_TRELLIS_FF_Q_2_DI_LUT4_Z_D_LUT4_Z/A", 1000),
     _net(r"top.x.b_TRELLIS_FF_Q_2_DI_LUT4_Z_D_LUT4_Z/F", r"top.x.b_TRELLIS_FF_Q_2_DI_LUT4_Z/B", 2000),
     _net(r"top.x.b_TRELLIS_FF_Q_2_DI_LUT4_Z/F", "top.x.b_TRELLIS_FF_Q_2/DI", 3000),
     _net("top.x.a_TRELLIS_FF_Q/Q", "top.y.c_TRELLIS_FF_Q/DI", 100),
     _net("top.x.a_TRELLIS_FF_Q/Q", r"top.x.ring.0.3\$DPRAM_COMB3/WRE", 9000)])


def test_arrival_plus_setup_by_hand():
    worst, failing = failing_endpoints(parse_sdf(SDF), 7.0)
    assert worst == pytest.approx(9.7)
    assert [(e.pin, round(e.required_ns, 2)) for e in failing] == [
        (("top.x.ring.0.3$DPRAM_COMB3", "WRE"), 9.7), (("top.x.b_TRELLIS_FF_Q_2", "DI"), 7.08)]
    path = failing[1].path
    assert [p for p, _ in path] == [
        ("top.x.a_TRELLIS_FF_Q", "Q"), ("top.x.b_TRELLIS_FF_Q_2_DI_LUT4_Z_D_LUT4_Z", "A"),
        ("top.x.b_TRELLIS_FF_Q_2_DI_LUT4_Z_D_LUT4_Z", "F"), ("top.x.b_TRELLIS_FF_Q_2_DI_LUT4_Z", "B"),
        ("top.x.b_TRELLIS_FF_Q_2_DI_LUT4_Z", "F"), ("top.x.b_TRELLIS_FF_Q_2", "DI")]
    assert sum(d for _, d in path) == pytest.approx(7.08 - 0.1)   # (the setup is not an arc)
    assert failing_endpoints(parse_sdf(SDF), 9.7)[1] == []


def test_summary_groups_by_signal_worst_first():
    s = summarize(SDF, 1000 / 7.0)
    assert (s["worst_ns"], s["fmax_mhz"], s["endpoints"], s["signals"]) == (9.7, 103.09, 2, 2)
    assert s["tns_ns"] == pytest.approx(2.7 + 0.08)            # each endpoint's miss of 7 ns, summed
    assert [(g["signal"], g["endpoints"], g["worst_ns"]) for g in s["worst_signals"]] == [
        ("top.x.ring", 1, 9.7), ("top.x.b", 1, 7.08)]
    assert s["worst_signals"][1]["worst_path"] == [
        "top.x.a_TRELLIS_FF_Q", "top.x.b_TRELLIS_FF_Q_2_DI_LUT4_Z_D_LUT4_Z",
        "top.x.b_TRELLIS_FF_Q_2_DI_LUT4_Z", "top.x.b_TRELLIS_FF_Q_2"]
    assert (summarize(SDF, 100)["endpoints"], summarize(SDF, 100)["tns_ns"]) == (0, 0)
    assert summarize(SDF, 100)["median_routing_share"] is None


def test_where_a_paths_time_goes():
    """Routing is the arcs between cells (1 + 2 + 3 ns on b's path), logic the
    rest (0.5 clock-to-output, two 0.24 LUTs, 0.1 setup); the longest hop is
    3 ns; the RAM's path is one 9 ns hop and no cell between."""
    s = summarize(SDF, 1000 / 7.0)
    ring, b = s["worst_signals"]
    assert (b["routing_ns"], b["logic_ns"], b["cells"], b["longest_hop_ns"]) == (6.0, 1.08, 2, 3.0)
    assert (ring["routing_ns"], ring["logic_ns"], ring["cells"], ring["longest_hop_ns"]) == (9.0, 0.7, 0, 9.0)
    assert s["median_routing_share"] == round((6.0 / 7.08 + 9.0 / 9.7) / 2, 2)
    assert (s["median_longest_hop_ns"], s["median_cells"]) == (6.0, 1)


def test_a_combinational_loop_is_left_out_not_looped_on():
    sdf = _sdf([_ff("a_TRELLIS_FF_Q"), _lut("l1"), _lut("l2"), _ff("b_TRELLIS_FF_Q")],
               [_net("a_TRELLIS_FF_Q/Q", "b_TRELLIS_FF_Q/DI", 1000),
                _net("l1/F", "l2/A", 100), _net("l2/F", "l1/A", 100), _net("l2/F", "b_TRELLIS_FF_Q/DI", 100)])
    worst, failing = failing_endpoints(parse_sdf(sdf), 1.0)
    assert worst == pytest.approx(1.6) and len(failing) == 1


def test_signal_names_lose_the_tools_suffixes():
    assert signal_of("top.s.dma.chunks.fifo.inner_level_TRELLIS_FF_Q_CE_LUT4_Z") == "top.s.dma.chunks.fifo.inner_level"
    assert signal_of("top.s.front.ring.0.32$DPRAM_COMB3") == "top.s.front.ring"
    assert signal_of("top.s.fetch.imem.0.1_DIA15_LUT4_Z") == "top.s.fetch.imem"
    assert signal_of("top.s.sync.semaphores__0_TRELLIS_FF_Q_3") == "top.s.sync.semaphores__0"


def test_bad_sdf_is_an_error_and_the_report_says_unavailable(tmp_path):
    with pytest.raises(ValueError, match="unbalanced"):
        parse_sdf("(DELAYFILE (CELL")
    with pytest.raises(ValueError, match="no DELAYFILE"):
        parse_sdf("(CELL)")
    (tmp_path / "bad.sdf").write_text("(DELAYFILE (CELL")
    assert endpoints_report(tmp_path / "bad.sdf", 100, 90.0) == {
        "unavailable": f"{tmp_path / 'bad.sdf'}: SDF: unbalanced '(' or empty file"}
    assert "unavailable" in endpoints_report(tmp_path / "missing.sdf", 100, 90.0)
    (tmp_path / "ok.sdf").write_text(SDF)
    rep = endpoints_report(tmp_path / "ok.sdf", 1000 / 7.0, 103.09)
    assert rep["agrees_with_nextpnr"] and rep["endpoints"] == 2
    assert not endpoints_report(tmp_path / "ok.sdf", 1000 / 7.0, 90.0)["agrees_with_nextpnr"]


def test_the_command_prints_where_the_failing_paths_time_goes(capsys):
    from gen.cmd_fpga import _print_critical_path
    _print_critical_path({"failing_endpoints": summarize(SDF, 1000 / 7.0)})
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("fpga: 2 endpoints miss 142.857 MHz (by 2.78 ns in all), in 2 signals; routing is "
                      "89% of the median one, its longest hop 6.0 ns; the worst (endpoints, ns, of it "
                      "routing, longest hop, cells, signal):")
    assert err[1].split() == ["fpga:", "1", "9.70", "9.00", "9.00", "0", "top.x.ring"]
    assert err[2].split() == ["fpga:", "1", "7.08", "6.00", "3.00", "2", "top.x.b"]


# where nextpnr placed SDF's cells (its --write netlist): b's path makes its
# 3 ns hop between neighbouring tiles (a detour), the RAM's 9 ns hop crosses 40
PLACED = json.dumps({"modules": {"top": {"cells": {
    "top.x.a_TRELLIS_FF_Q": {"type": "TRELLIS_FF", "attributes": {"NEXTPNR_BEL": "X10/Y10/SLICEA.FF0"}},
    "top.x.b_TRELLIS_FF_Q_2_DI_LUT4_Z_D_LUT4_Z": {"attributes": {"NEXTPNR_BEL": "X12/Y10/SLICEB.K1"}},
    "top.x.b_TRELLIS_FF_Q_2_DI_LUT4_Z": {"attributes": {"NEXTPNR_BEL": "X20/Y14/SLICEC.K0"}},
    "top.x.b_TRELLIS_FF_Q_2": {"attributes": {"NEXTPNR_BEL": "X20/Y15/SLICEC.FF0"}},
    "top.x.ring.0.3$DPRAM_COMB3": {"attributes": {"NEXTPNR_BEL": "X40/Y30/SLICEA.K0"}},
    "top.y.c_TRELLIS_FF_Q": {"attributes": {}},
    "$gbuf$clk": {"attributes": {"NEXTPNR_BEL": "X67/Y0/TDCC2"}}}}}})


def test_a_hops_tiles_come_from_the_placed_netlist():
    """The cells' tiles from NEXTPNR_BEL (an unplaced cell has none); each
    failing path's longest hop gets its distance (x plus y); b's 3 ns between
    neighbours is a detour, the RAM's 9 ns over 50 tiles is not."""
    where = placed_locations(PLACED)
    assert where["top.x.a_TRELLIS_FF_Q"] == (10, 10) and where["$gbuf$clk"] == (67, 0)
    assert "top.y.c_TRELLIS_FF_Q" not in where
    s = summarize(SDF, 1000 / 7.0, where=where)
    ring, b = s["worst_signals"]
    assert (b["longest_hop_ns"], b["longest_hop_tiles"]) == (3.0, 1)       # X20/Y14 -> X20/Y15
    assert (ring["longest_hop_ns"], ring["longest_hop_tiles"]) == (9.0, 50)
    assert (s["median_longest_hop_tiles"], s["detours"]) == (25.5, 1)
    # a cell missing from the netlist gives no distance, not a wrong one
    partial = {k: v for k, v in where.items() if k != "top.x.b_TRELLIS_FF_Q_2"}
    assert summarize(SDF, 1000 / 7.0, where=partial)["worst_signals"][1]["longest_hop_tiles"] is None
    assert "median_longest_hop_tiles" not in summarize(SDF, 1000 / 7.0)


def test_a_detour_is_twice_nextpnrs_estimate_for_the_distance():
    """nextpnr's ECP5 estimate is 0.72 ns plus 0.12 a tile: the slowest
    routes of the device placed alone are not detours, the board's 5.5 ns over
    3 tiles and 9.8 over 15 are, and a long route over 31 tiles is just long."""
    assert not is_detour(1.65, 4) and not is_detour(2.76, 16) and not is_detour(5.24, 31)
    assert is_detour(5.47, 3) and is_detour(9.83, 15)
    assert is_detour(1.69, 1) and not is_detour(1.67, 1)          # 2 x (0.72 + 0.12) = 1.68


def test_the_report_reads_the_placed_netlist_or_says_why_not(tmp_path):
    (tmp_path / "ok.sdf").write_text(SDF)
    (tmp_path / "placed.json").write_text(PLACED)
    rep = endpoints_report(tmp_path / "ok.sdf", 1000 / 7.0, 103.09, tmp_path / "placed.json")
    assert rep["placed"] == str(tmp_path / "placed.json") and rep["detours"] == 1
    rep = endpoints_report(tmp_path / "ok.sdf", 1000 / 7.0, 103.09, tmp_path / "missing.json")
    assert rep["placed_unavailable"].startswith(str(tmp_path / "missing.json"))
    assert rep["endpoints"] == 2 and "detours" not in rep
    (tmp_path / "bad.json").write_text("{")
    assert "placed_unavailable" in endpoints_report(tmp_path / "ok.sdf", 1000 / 7.0, 103.09,
                                                    tmp_path / "bad.json")


def test_the_command_prints_each_long_hops_tiles(capsys):
    from gen.cmd_fpga import _print_critical_path
    _print_critical_path({"failing_endpoints": summarize(SDF, 1000 / 7.0, where=placed_locations(PLACED))})
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("fpga: 2 endpoints miss 142.857 MHz (by 2.78 ns in all), in 2 signals; routing is "
                      "89% of the median one, its longest hop 6.0 ns over 25.5 tiles (a detour, twice "
                      "nextpnr's estimate for its distance or more, in 1 path); the worst (endpoints, ns, "
                      "of it routing, longest hop, its tiles, cells, signal):")
    assert err[1].split() == ["fpga:", "1", "9.70", "9.00", "9.00", "50", "0", "top.x.ring"]
    assert err[2].split() == ["fpga:", "1", "7.08", "6.00", "3.00", "1", "2", "top.x.b"]
