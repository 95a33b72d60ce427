"""A board build's seeds (``--pnr-seed 1-5``): the seed list, the build
script cut at its nextpnr line, the choice of the placement to pack, and the
flow itself with stand-in tools (the real tools: the icebreaker build in
tests/test_fpga.py)."""
import os
import time

import pytest

from gen.pnr_seeds import SeedResult, best_seed, parse_seeds, run_seeds, seed_command, split_script
from model.errors import InputError


def test_seed_lists_ranges_and_their_errors():
    assert parse_seeds(7) == [7]
    assert parse_seeds("0") == [0]
    assert parse_seeds("1-5") == [1, 2, 3, 4, 5]
    assert parse_seeds("4, 1-3,3,9") == [4, 1, 2, 3, 9]           # in the order given, each once
    with pytest.raises(InputError, match=r"^--pnr-seed: the range 5-2 runs backwards$"):
        parse_seeds("5-2")
    for bad in ("-1", "x", "1-", "1,,2", "1-2-3", ""):
        with pytest.raises(InputError, match=r"^--pnr-seed: '.*' is not a seed, a range A-B"):
            parse_seeds(bad)
    with pytest.raises(InputError, match=r"^--seeds: 0-64 is more than 64 seeds$"):
        parse_seeds("0-64", "--seeds")


def _plan_script(platform_cls, **opts):
    """Amaranth's own build script for a counter on a board."""
    from amaranth.hdl import Elaboratable, Module, Signal
    from amaranth.lib import io

    class Blink(Elaboratable):
        def elaborate(self, platform):
            m = Module()
            count = Signal(4)
            m.d.sync += count.eq(count + 1)
            led = io.Buffer("o", platform.request("led", 0, dir="-"))
            m.submodules.led = led
            m.d.comb += led.o.eq(count[3])
            return m
    plan = platform_cls().build(Blink(), name="top", do_build=False,
                                nextpnr_opts=["--report", "top_report.json", "--sdf", "top.sdf",
                                              "--write", "top_placed.json", "--seed", "1"],
                                **opts)
    return plan.files[f"{plan.script}.sh"]


@pytest.mark.parametrize("board", ["icebreaker", "ulx3s"])
def test_amaranth_build_script_cut_at_its_nextpnr_line(board):
    if board == "icebreaker":
        from amaranth_boards.icebreaker import ICEBreakerPlatform as Platform
        tool, pack, config = "NEXTPNR_ICE40", '"$ICEPACK" top.asc top.bin', "top.asc"
    else:
        from amaranth_boards.ulx3s import ULX3S_85F_Platform as Platform
        tool, pack, config = "NEXTPNR_ECP5", '"$ECPPACK"', "top.config"
    text = _plan_script(Platform)
    parts = split_script(text)
    assert parts.preamble + parts.synth + parts.pnr + parts.pack == text
    assert parts.synth.startswith('"$YOSYS"') and parts.pnr.startswith(f'"${tool}"')
    assert parts.pack.startswith(pack) and "set -e" in parts.preamble and f": ${{{tool}:=" in parts.preamble
    line = seed_command(parts.pnr, 12, "seeds/s12").split()
    assert line[line.index("--seed") + 1] == "12"
    for option, name in (("--log", "top.tim"), ("--report", "top_report.json"), ("--sdf", "top.sdf"),
                         ("--write", "top_placed.json")):
        assert line[line.index(option) + 1] == f"seeds/s12/{name}"
    assert f"seeds/s12/{config}" in line
    assert line[line.index("--json") + 1] == "top.json"         # its input stays in the build directory


def test_a_script_without_one_nextpnr_line_is_refused():
    with pytest.raises(RuntimeError, match="not one Yosys line followed by one nextpnr line: 1 and 0"):
        split_script('set -e\n"$YOSYS" x\n"$ECPPACK" y\n')
    with pytest.raises(RuntimeError, match="has no --seed"):
        seed_command('"$NEXTPNR_ECP5" --json top.json\n', 2, "seeds/s2")


def test_best_placement_is_the_fastest_then_the_fewest_failing_endpoints():
    def r(seed, rc, fmax, endpoints=None, tns=None):
        return SeedResult(seed, None, rc, 1.0, fmax_mhz=fmax, endpoints=endpoints, tns_ns=tns)
    results = [r(1, 0, 86.5, 89, 26.1), r(2, 0, 88.0, 61, 17.8), r(3, None, None), r(4, 1, None),
               r(5, 0, 88.0, 40, 30.0), r(6, 0, 88.0, 40, 12.0)]
    assert best_seed(results).seed == 6
    assert best_seed(results[:3]).seed == 2
    assert best_seed([r(7, 0, 50.0, 0, 0.0), r(8, 0, 50.0, 0, 0.0)]).seed == 7
    assert best_seed(results[2:4]) is None


# stand-in tools: "nextpnr" notes how many placements run beside it (peers), then
# writes its seed's Fmax (seed * 10 MHz, 20 for seed 9) and a configuration naming
# its seed; "ecppack" copies the configuration it packs
_SCRIPT = """set -e
: ${YOSYS:=yosys}
"$YOSYS" -c 'echo netlist > top.json'
"$NEXTPNR_ECP5" -c 's=$1; touch run.$s; sleep 2; ls run.* | wc -l > seeds/s$s/peers; rm run.$s; f=$((s * 10)); [ $s = 9 ] && f=20; [ $s = 4 ] && exit 5; echo $f > $2; echo seed$s > $3' --seed 1 top_report.json top.config
"$ECPPACK" -c 'cp top.config top.bit'
"""


def _judge(r):
    r.fmax_mhz = float((r.directory / "top_report.json").read_text())
    r.endpoints, r.tns_ns = 0, 0.0


def test_each_seed_placed_in_its_directory_and_the_fastest_packed(tmp_path):
    env = dict(os.environ, YOSYS="sh", NEXTPNR_ECP5="sh", ECPPACK="sh")
    seen = []
    status, results, best = run_seeds(tmp_path, _SCRIPT, [9, 3, 4, 6], env=env, judge=_judge, jobs=2,
                                      progress=seen.append)
    assert status == "built" and best.seed == 6
    assert [(r.seed, r.rc, r.fmax_mhz) for r in results] == [(9, 0, 20.0), (3, 0, 30.0), (4, 5, None),
                                                             (6, 0, 60.0)]
    for r in results:
        assert r.directory == tmp_path / "seeds" / f"s{r.seed}"
    assert (tmp_path / "top.bit").read_text() == "seed6\n"                  # the packed placement
    assert (tmp_path / "top_report.json").read_text() == "60\n"
    assert (tmp_path / "top.json").read_text() == "netlist\n"               # one synthesis
    assert "seed 4: nextpnr failed (exit 5)" in "\n".join(seen)
    peers = [int((r.directory / "peers").read_text()) for r in results]
    assert max(peers) == 2                          # two at a time, never more


def test_seeds_stopped_at_the_time_limit_leave_nothing_packed(tmp_path):
    env = dict(os.environ, YOSYS="sh", NEXTPNR_ECP5="sh", ECPPACK="sh")
    script = _SCRIPT.replace("sleep 2", "sleep 30")
    t0 = time.monotonic()
    status, results, best = run_seeds(tmp_path, script, [1, 2], env=env, judge=_judge, jobs=2,
                                      time_limit_s=2)
    assert status == "timeout" and best is None and [r.rc for r in results] == [None, None]
    assert time.monotonic() - t0 < 30 and not (tmp_path / "top.bit").exists()


def test_placements_without_a_figure_fail_the_build_in_words(tmp_path):
    env = dict(os.environ, YOSYS="sh", NEXTPNR_ECP5="sh", ECPPACK="sh")
    said = []
    status, results, best = run_seeds(tmp_path, _SCRIPT, [1], env=env, judge=lambda r: None, jobs=1,
                                      progress=said.append)
    assert status == "failed" and best is None and results[0].rc == 0
    assert "place and route failed (seed 1: no Fmax in its report)" in said[-1]


def test_the_command_prints_each_placement_and_the_spread(capsys):
    from gen.cmd_fpga import _print_seeds
    seeds = [{"seed": 2, "finished": True, "fmax_mhz": 88.04, "failing_endpoints": 61, "tns_ns": 17.78},
             {"seed": 3, "finished": True, "fmax_mhz": 86.3, "failing_endpoints": 86, "tns_ns": 37.6},
             {"seed": 4, "finished": False, "fmax_mhz": None, "failing_endpoints": None, "tns_ns": None}]
    _print_seeds({"nextpnr_seeds": seeds, "nextpnr_seed": 2, "built": True})
    assert capsys.readouterr().err.splitlines() == [
        "fpga: seed   2: 88.04 MHz, 61 endpoints miss the clock by 17.78 ns in all  <- packed",
        "fpga: seed   3: 86.3 MHz, 86 endpoints miss the clock by 37.6 ns in all",
        "fpga: seed   4: did not finish",
        "fpga: 2 placements of one netlist: Fmax 86.3 to 88.04 MHz, median 87.17 MHz"]
    _print_seeds({"nextpnr_seeds": seeds[:1], "nextpnr_seed": 2, "built": True})
    assert capsys.readouterr().err == ""                  # one placement: nothing to compare
