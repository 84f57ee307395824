"""compiler.export: the exported Verilog runs its own testbench in Icarus Verilog.

Each export is simulated by iverilog from the files alone: PASS, and the cycle count the
testbench measured equals the cycle model. The expected words are checked against the numpy
reference here, and one wrong expected word must turn the testbench to FAIL.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from tinygrad import Tensor

from compiler import HardwareConfig, compile_model, export_design
import designs
from dse.models import zoo
from helpers import needs_iverilog

TOOL_FIXTURES = {'swept'}     # they run Yosys or a C++ build: their users are slow (conftest.py)

ROOT = Path(__file__).resolve().parent.parent


def run_testbench(out: Path, top: str = "tinyhw_top") -> subprocess.CompletedProcess:
    subprocess.run(["iverilog", "-g2012", "-o", "tb.vvp", f"{top}.v", "tb.v"], cwd=out, check=True,
                   capture_output=True, text=True, timeout=120)
    return subprocess.run(["vvp", "-n", "tb.vvp"], cwd=out, capture_output=True, text=True, timeout=300)


def assert_passes(out: Path, cycles: int, top: str = "tinyhw_top") -> None:
    run = run_testbench(out, top)
    assert run.returncode == 0, run.stdout + run.stderr
    m = re.search(r"PASS: (\d+) output words match, (\d+) cycles", run.stdout)
    assert m, run.stdout
    assert int(m.group(2)) == cycles


def expected_words(out: Path, buffer: int, design) -> np.ndarray:
    """The element words of an output buffer, read back from the exported expected*.hex files."""
    info = json.loads((out / "interface.json").read_text())
    ports = sorted((p for p in info["host_ports"] if p["role"] == "output" and p["buffer"] == buffer),
                   key=lambda p: p["sel"])
    banks = [[0 if "x" in line else int(line, 16) for line in (out / p["file"]).read_text().split()]
             for p in ports]
    return design.buffer_words(buffer, banks)


def break_one_word(out: Path) -> None:
    """Flip the lowest bit of the first compared word of the first expected file."""
    path = sorted((out / "mem").glob("expected*.hex"))[0]
    lines = path.read_text().split("\n")
    i = next(i for i, line in enumerate(lines) if line and "x" not in line)
    lines[i] = format(int(lines[i], 16) ^ 1, f"0{len(lines[i])}x")
    path.write_text("\n".join(lines))


@pytest.mark.slow
@needs_iverilog
@pytest.mark.parametrize("config", [HardwareConfig(mem_read="sync"),
                                    HardwareConfig(mem_read="comb", lanes=4, reduce_unroll=2),
                                    HardwareConfig(mem_read="sync", lanes=2, reduce_unroll=2, fp_pipeline=3)],
                         ids=["sync", "comb-lanes4", "sync-p3-registered-bus"])
def test_int8_gemv_testbench_passes_and_fails_on_a_wrong_word(tmp_path, config):
    case = designs.gemv_int8(M=6, K=10)
    design = compile_model(*case.outputs, config=config)
    exp = export_design(design=design, out_dir=tmp_path)
    assert exp.cycles == design.cycle_model().total
    got = expected_words(tmp_path, design.graph.outputs[0], design).astype(np.uint32).view(np.int32)
    assert np.array_equal(got, case.reference[0].reshape(-1))
    assert_passes(tmp_path, exp.cycles)
    break_one_word(tmp_path)
    run = run_testbench(tmp_path)
    assert run.returncode != 0
    assert "FAIL: 1 mismatches" in run.stdout and "PASS" not in run.stdout


@pytest.mark.slow
@needs_iverilog
def test_fp32_mlp_testbench_passes(tmp_path):
    params = {"IN": 12, "HIDDEN": 6, "OUT": 3}
    built = zoo.check_built(zoo.ZOO["mlp"].build("fp32", **params))
    arrays = zoo.make_inputs(built, 0)
    design = compile_model(built.forward(*[Tensor(arrays[n]) for n in built.inputs]),
                           config=HardwareConfig(mem_read="sync"))
    exp = export_design(design=design, out_dir=tmp_path, top="mlp_fp32")
    want = zoo.reference("mlp", "fp32", params, arrays).astype(np.float32).reshape(-1)
    got = expected_words(tmp_path, design.graph.outputs[0], design).astype(np.uint32)
    assert np.array_equal(got, want.view(np.uint32))              # bit-exact (rne, KERNEL arithmetic)
    assert_passes(tmp_path, exp.cycles, top="mlp_fp32")


@pytest.mark.slow
@needs_iverilog
def test_lut_ram_tail_testbench_passes(tmp_path):
    """mem_tail="lut": the testbench loads W through the host bus into both of its parts."""
    rng = np.random.default_rng(0)
    W, x = rng.standard_normal((4, 130)).astype(np.float32), rng.standard_normal(130).astype(np.float32)
    design = compile_model(Tensor(W) @ Tensor(x), config=HardwareConfig(mem_tail="lut"))
    assert any(k.tails for k in design.top.kernels)
    exp = export_design(design=design, out_dir=tmp_path)
    assert_passes(tmp_path, exp.cycles)


@pytest.mark.slow
@needs_iverilog
def test_conv2d_testbench_passes(tmp_path):
    case = designs.conv2d_padded(C_IN=1, C_OUT=2, H=4, W=4)
    design = compile_model(*case.outputs, config=HardwareConfig(mem_read="sync"))
    exp = export_design(design=design, out_dir=tmp_path)
    got = expected_words(tmp_path, design.graph.outputs[0], design).astype(np.uint32).view(np.int32)
    assert np.array_equal(got, case.reference[0].reshape(-1))
    assert_passes(tmp_path, exp.cycles)


@pytest.mark.slow
def test_interface_describes_ports_buffers_and_cycles(tmp_path):
    case = designs.gemv_int8(M=4, K=8)
    design = compile_model(*case.outputs, config=HardwareConfig(mem_read="sync"))
    exp = export_design(design=design, out_dir=tmp_path)
    info = json.loads(exp.interface_json.read_text())
    assert {p["name"] for p in info["ports"]} == {"clk", "rst", "start", "done", "busy", "host_sel",
                                                   "host_addr", "host_wdata", "host_we", "host_rdata"}
    assert info["cycles"]["total"] == design.cycle_model().total == 4 * (8 + 0) + 1
    # the int32 sums of 8 int8 products need 19 bits: the output memory stores those, signed
    assert [(p["role"], p["depth"], p["width"], p["sign_extend"]) for p in info["host_ports"]] == \
        [("input", 32, 8, False), ("input", 8, 8, False), ("output", 4, 19, True)]
    assert info["resources"] is None and info["clock"] is None      # not measured: not invented
    assert "module tinyhw_top" in exp.verilog.read_text()
    text = exp.interface_md.read_text()
    assert "33 cycles from `start` to `done`" in text and "not measured" in text


def test_bad_top_name_is_rejected(tmp_path):
    design = compile_model(*designs.gemv_int8(M=2, K=2).outputs)
    with pytest.raises(ValueError, match="top: expected a Verilog identifier, got '1top'"):
        export_design(design=design, out_dir=tmp_path, top="1top")
    assert not any(tmp_path.iterdir())                               # nothing half-written


# ---------------------------------------------------------------------------------------------
# the explorer: dse export RESULTS_DIR --trial N and dse eval --export DIR

SPEC = """\
study: exp
target: ecp5
models:
  - name: g
    builtin: gemv
    params: {M: 4, K: 6}
dtypes: [int8]
knobs:
  lanes: [2]
objectives: [cycles, luts]
search: {sampler: grid, seed: 0}
"""


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A one-trial sweep (real Yosys synthesis) of a small int8 GEMV."""
    from dse.cli import main
    root = tmp_path_factory.mktemp("sweep")
    (root / "spec.yaml").write_text(SPEC)
    assert main(["sweep", str(root / "spec.yaml"), "--results", str(root / "results"), "--sim", "pysim",
                 "--progress", "off", "--no-cache"]) == 0
    return root


@pytest.mark.slow
@needs_iverilog
def test_dse_export_of_a_trial_passes_its_testbench(swept, tmp_path, capsys):
    from dse.cli import main
    from dse.results import load_results
    out = tmp_path / "hw"
    assert main(["export", str(swept / "results" / "exp"), "--trial", "0", "--out", str(out), "--sim", "pysim"]) == 0
    assert f"exported to {out}" in capsys.readouterr().out
    row = load_results(swept / "results" / "exp").iloc[0]
    info = json.loads((out / "interface.json").read_text())
    assert info["knobs"]["lanes"] == 2
    assert info["source"] == {"model": "gemv(M=4, K=6)", "dtype": "int8", "data_seed": 0, "inputs": {"W": 1, "x": 2},
                              "results": str(swept / "results" / "exp"), "trial": 0}
    assert {b["buffer"]: b["elements"] for b in info["buffers"] if b["role"] == "input"} == {1: 24, 2: 6}   # W, x
    assert info["cycles"]["total"] == row["cycles"] == row["cycles_model"]
    assert (info["resources"]["luts"], info["resources"]["ffs"]) == (row["luts"], row["ffs"])   # the sweep's figures
    assert_passes(out, int(row["cycles"]))


def test_dse_export_bad_input_exits_2(swept, tmp_path, capsys):
    from dse.cli import main
    results = str(swept / "results" / "exp")
    assert main(["export", results, "--trial", "5", "--out", str(tmp_path / "a")]) == 2
    assert f"error: {results}: no trial 5 (trials: 0..0)" in capsys.readouterr().err
    other = tmp_path / "other.yaml"
    other.write_text(SPEC.replace("{M: 4, K: 6}", "{M: 4, K: 8}"))
    assert main(["export", results, "--trial", "0", "--out", str(tmp_path / "b"), "--spec", str(other)]) == 2
    assert "--spec: model 'g' is gemv(M=4, K=8) there, but the sweep" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.slow
@needs_iverilog
def test_dse_export_behind_a_bus_passes_its_bus_testbench(swept, tmp_path, capsys):
    """--bus: the trial behind AXI4-Lite, with its C driver; tb.v drives the bus (tests/test_bus.py
    runs the cocotb testbenches)."""
    from dse.cli import main
    out = tmp_path / "hw"
    assert main(["export", str(swept / "results" / "exp"), "--trial", "0", "--out", str(out), "--sim", "pysim",
                 "--bus", "axi-lite"]) == 0
    assert f"exported to {out} behind axi-lite: tinyhw_top.v, tb.v, interface.md, interface.json, tinyhw.h, " \
           "tinyhw.c, tinyhw_top.h" in capsys.readouterr().out
    info = json.loads((out / "interface.json").read_text())
    assert info["bus"]["kind"] == "axi-lite" and info["resources"] is not None     # the sweep's figures stay
    run = run_testbench(out)
    assert run.returncode == 0 and "cycles (= the cycle model), over axi-lite" in run.stdout, run.stdout + run.stderr


def test_dse_export_bad_bus_exits_2_in_one_line(swept, tmp_path, capsys):
    from dse.cli import main
    results = str(swept / "results" / "exp")
    assert main(["export", results, "--trial", "0", "--out", str(tmp_path / "a"), "--bus", "axilite"]) == 2
    err = capsys.readouterr().err
    assert err == ("error: --bus: unknown bus 'axilite'; did you mean 'axi-lite'? known: native, axi-lite, "
                   "wishbone, axi-stream\n")
    assert main(["export", results, "--trial", "0", "--out", str(tmp_path / "b"), "--sim", "pysim",
                 "--bus", "axi-stream"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: export: bus 'axi-stream' streams samples into a dataflow design; k0_") \
        and err.endswith("is a sequential design (memories loaded over a bus, then run): use axi-lite or wishbone\n")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    assert main(["eval", str(swept / "spec.yaml"), "--model", "g", "--dtype", "int8", "--bus", "wishbone"]) == 2
    assert capsys.readouterr().err == "error: --bus goes with --export DIR\n"


@needs_iverilog
def test_dse_eval_export_passes_its_testbench(tmp_path, capsys):
    from dse.cli import main
    (tmp_path / "spec.yaml").write_text(SPEC)
    out = tmp_path / "hw"
    rc = main(["eval", str(tmp_path / "spec.yaml"), "--model", "g", "--dtype", "int8", "--no-synth", "--sim", "pysim",
               "--workdir", str(tmp_path / "work"), "--json", "--export", str(out)])
    assert rc == 0
    captured = capsys.readouterr()
    row = json.loads(captured.out)                     # stdout stays one JSON object
    assert f"exported to {out}" in captured.err
    assert json.loads((out / "interface.json").read_text())["resources"] is None    # --no-synth: not measured
    assert_passes(out, row["cycles"])


# ---------------------------------------------------------------------------------------------
# an ECP5 bitstream for a named part and package

@pytest.mark.slow
def test_ecp5_bitstream_for_a_named_part_unpacks(tmp_path):
    from compiler.pnr.bitstream import write_bitstream
    from compiler.tools import find_tool, run_tool
    design = compile_model(*designs.gemv_int8(M=4, K=6).outputs, config=HardwareConfig(mem_read="sync"))
    bit = write_bitstream(design=design, out_dir=tmp_path, device="25k", package="cabga381",
                          router="router2", placer="static", seed=2, freq_mhz=80)
    assert (bit.path.name, bit.device, bit.package, bit.constrained) == \
        ("tinyhw_top_LFE5U-25F_CABGA381.bit", "LFE5U-25F", "CABGA381", False)
    argv = " ".join(bit.argv)                  # the explorer's settings reach nextpnr
    assert "--router router2" in argv and "--placer static" in argv and "--seed 2" in argv and "--freq 80" in argv
    assert b"Part: LFE5U-25F-6CABGA381" in bit.path.read_bytes()[:64]      # ecppack's header
    assert bit.fmax_mhz is not None and bit.fmax_mhz > 0
    # no LPF of the user's: the clock on the package's clock pin, as the explorer's P&R has it
    assert (bit.log_dir / "clock.lpf").read_text() == 'LOCATE COMP "clk" SITE "G2";\n'
    # Project Trellis reads it back (a truncated or foreign file fails here)
    shutil.copyfile(bit.path, tmp_path / "check.bit")
    run_tool([find_tool("yowasp-ecpunpack"), "check.bit", "check.config"], cwd=tmp_path, log_name="unpack.log")
    assert ".tile" in (tmp_path / "check.config").read_text()


def test_bitstream_bad_part_and_package_are_rejected_before_any_tool_runs(tmp_path):
    from compiler.pnr.bitstream import write_bitstream
    design = compile_model(*designs.gemv_int8(M=2, K=2).outputs)
    with pytest.raises(ValueError, match="unknown ecp5 device 'LFE5U-99F'"):
        write_bitstream(design=design, out_dir=tmp_path, device="LFE5U-99F")
    with pytest.raises(ValueError, match="unknown package 'QFN9' for LFE5U-25F; known: CABGA381, CABGA256"):
        write_bitstream(design=design, out_dir=tmp_path, device="LFE5U-25F", package="QFN9")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("flag", [["--package", "CABGA381"], ["--router", "router2"], ["--pnr-seed", "3"]])
def test_dse_export_bitstream_options_need_bitstream(tmp_path, capsys, flag):
    from dse.cli import main
    assert main(["export", str(tmp_path), "--trial", "0", "--out", str(tmp_path / "o"), *flag]) == 2
    assert ("error: --package, --lpf, --router, --placer, --pnr-seed and --freq-mhz go with --bitstream PART"
            in capsys.readouterr().err)


def test_the_bitstream_reuses_the_nextpnr_settings_the_trials_fmax_was_measured_with():
    import argparse
    from dse.cli import CliError, bitstream_settings
    flags = dict(router=None, placer=None, pnr_seed=None, freq_mhz=None)
    row = {"pnr_router": "router2", "pnr_placer": "static", "pnr_seed": 3.0, "pnr_freq_mhz": 125.0,
           "pnr_regroup": "False"}                                                    # as from CSV
    assert bitstream_settings(argparse.Namespace(**flags), row) == \
        {"router": "router2", "placer": "static", "seed": 3, "freq_mhz": 125.0, "regroup": False, "ripup": False}
    assert bitstream_settings(argparse.Namespace(**flags), {**row, "pnr_regroup": True})["regroup"] is True
    # a repaired row's route is one nextpnr run: the ripup at the clock it aimed at (pnr_freq_mhz)
    repaired = bitstream_settings(argparse.Namespace(**flags), {**row, "pnr_repair": "True", "pnr_ripup": "True"})
    assert repaired["ripup"] is True and repaired["freq_mhz"] == 125.0 and "repair" not in repaired
    # a flag wins; a row without the record (no timing, or an old sweep) gets nextpnr's defaults
    assert bitstream_settings(argparse.Namespace(**{**flags, "pnr_seed": 7}), row)["seed"] == 7
    assert bitstream_settings(argparse.Namespace(**flags), {"pnr_router": float("nan")}) == \
        {"router": "router1", "placer": "heap", "seed": 1, "freq_mhz": 100.0, "regroup": True, "ripup": False}
    with pytest.raises(CliError, match="--bitstream: router: expected one of router1, router2, got 'route3'"):
        bitstream_settings(argparse.Namespace(**{**flags, "router": "route3"}), row)


def test_dse_export_refuses_bad_bitstream_settings_before_exporting(swept, tmp_path, capsys):
    from dse.cli import main
    results = str(swept / "results" / "exp")
    assert main(["export", results, "--trial", "0", "--out", str(tmp_path / "o"), "--bitstream", "25k",
                 "--placer", "sa"]) == 2
    assert "error: --bitstream: placer: expected one of heap, static, got 'sa'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    with pytest.raises(SystemExit):
        main(["export", results, "--trial", "0", "--out", str(tmp_path / "o"), "--bitstream", "25k",
              "--freq-mhz", "-5"])
    assert "--freq-mhz: expected a positive number, got '-5'" in capsys.readouterr().err


@pytest.mark.slow
def test_export_point_refuses_a_design_whose_cycle_model_changed(tmp_path):
    from dse.export import ExportError, export_point
    from dse.spec import DesignPoint
    from dse.frozen import FrozenMap
    from dse.models.model import ModelSpec
    model = ModelSpec("g", "gemv", None, None, FrozenMap({"M": 2, "K": 3}), FrozenMap())
    point = DesignPoint("g", "int8", FrozenMap({"mem_read": "sync"}))
    with pytest.raises(ExportError, match="the rebuilt design's cycle model says 7 cycles, the evaluation measured 5"):
        export_point(model=model, point=point, out_dir=tmp_path / "o", sim_backend="pysim",
                     measured={"cycles_model": 5})
    assert not (tmp_path / "o").exists()                             # refused before writing anything
    (tmp_path / "o" / "mem").mkdir(parents=True)
    (tmp_path / "o" / "mem" / "in9_b0_k0_mem_b1.hex").write_text("00\n")    # from an earlier export
    exp = export_point(model=model, point=point, out_dir=tmp_path / "o", sim_backend="pysim",
                       measured={"cycles_model": 7}, source={"trial": 3})
    assert sorted(p.name for p in (tmp_path / "o" / "mem").iterdir()) == sorted(Path(p.file).name for p in exp.ports)
    assert json.loads(exp.interface_json.read_text())["source"] == \
        {"model": "gemv(M=2, K=3)", "dtype": "int8", "data_seed": 0, "inputs": {"W": 1, "x": 2}, "trial": 3}


@pytest.mark.slow
def test_the_interface_states_the_clock_and_how_nextpnr_reached_it(tmp_path):
    from dse.export import export_point
    from dse.spec import DesignPoint
    from dse.frozen import FrozenMap
    from dse.models.model import ModelSpec
    model = ModelSpec("g", "gemv", None, None, FrozenMap({"M": 2, "K": 3}), FrozenMap())
    point = DesignPoint("g", "int8", FrozenMap({"mem_read": "sync"}))
    row = {"cycles_model": 7, "target": "ecp5", "fits": "True", "fmax_mhz": 140.0, "pnr_device": "LFE5U-25F",
           "pnr_package": "CABGA381", "pnr_router": "router2", "pnr_placer": "static", "pnr_seed": 2.0,
           "pnr_freq_mhz": 120.0}                                     # as trials.csv gives them
    exp = export_point(model=model, point=point, out_dir=tmp_path / "o", sim_backend="pysim", measured=row)
    clock = json.loads(exp.interface_json.read_text())["clock"]
    assert clock == {"fits": True, "fmax_mhz": 140.0, "device": "LFE5U-25F", "package": "CABGA381",
                     "target_mhz": 120.0, "router": "router2", "placer": "static", "seed": 2, "reason": None,
                     "latency_us": pytest.approx(7 / 140.0)}
    assert ("Clock: 140.0 MHz reached on LFE5U-25F CABGA381 (nextpnr router2, static placer, seed 2, target "
            "120 MHz): 0.05 us per run.") in exp.interface_md.read_text()


@pytest.mark.slow
@needs_iverilog
def test_an_exported_trained_network_holds_its_weights_and_first_sample(tmp_path):
    """The digits MLP in int8: the exported memories hold the quantised weights (not random
    data), and the testbench's expected outputs are the quantised model's logits of the
    first test sample."""
    import yaml
    from dse.export import export_point
    from dse.spec import DesignPoint, load_spec
    from dse.frozen import FrozenMap
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump({
        "study": "t", "target": "ecp5", "models": [{"name": "mlp", "weights": str(ROOT / "models" / "digits_mlp.npz")}],
        "data": {"dataset": "sklearn:digits", "samples": 5}, "dtypes": ["int8"], "objectives": ["accuracy"],
        "search": {"sampler": "grid"}}))
    model = load_spec(spec_path).models[0]
    exp = export_point(model=model, point=DesignPoint("mlp", "int8", FrozenMap({"mem_read": "sync"})),
                       out_dir=tmp_path / "o", sim_backend="pysim")
    q, real = model.trained.quantized("int8"), model.real_inputs("int8")
    want = q.reference(real.samples[:1])[0]
    got = expected_words(tmp_path / "o", exp.design.graph.outputs[0], exp.design).astype(np.uint32).view(np.int32)
    assert np.array_equal(got, want)
    assert_passes(tmp_path / "o", exp.cycles)


def test_an_exported_rows_timing_is_the_route_it_kept():
    # the row as trials.csv holds it (every timing row records pnr_regroup, which is no report field)
    from dse.export import _timing
    row = {"fits": "True", "fmax_mhz": 135.0, "target": "ecp5", "pnr_device": "LFE5U-85F", "pnr_router": "router2",
           "pnr_placer": "static", "pnr_seed": 2.0, "pnr_freq_mhz": 129.6, "pnr_regroup": "True", "pnr_repair": "True",
           "pnr_ripup": "True"}
    t = _timing(row)
    assert (t.fits, t.fmax_mhz, t.device, t.placer, t.seed, t.freq_mhz, t.ripup) == \
        (True, 135.0, "LFE5U-85F", "static", 2, 129.6, True)
    assert _timing({**row, "pnr_ripup": float("nan")}).ripup is False
