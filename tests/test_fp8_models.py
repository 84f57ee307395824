"""FP8 models end to end: tinygrad 0.14's fp8 kernels compiled, simulated and checked bit for bit.

What tinygrad does with fp8 (the compiler's renderer claims every dtype, so nothing is
emulated): the lowered kernel multiplies in fp8 (MUL on fp8e4m3), casts the product to
float32, sums in float32 and casts the sum back to fp8 on the store, as for fp16; elementwise
ops stay in fp8. Its fp8 rounding (`tinygrad.dtype.float_to_fp8`, what its PYTHON device runs)
is round to nearest even, saturating at the largest finite value. The zoo's golden models do
the same in numpy (ml_dtypes-exact rounding, tests/test_fp8_units.py), and the hardware must
equal both. A trained network in fp8 casts its operands to float32 (products summed in
float32: dse/models/quantize.py FP8_SCHEME), where the compiler builds FWideMul units.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
from tinygrad import Tensor, dtypes

from compiler import HardwareConfig, compile_model, simulate
from compiler.sim.cxxrtl import design_rtlil
from compiler.dtypes import FP8_NAMES
from compiler.hw import floatops
from dse.models import zoo
from dse.models.quantize import DenseNet
from dse.models.zoo import KERNEL, ZOO, InputRange, make_inputs, python_device_arith, reference, tinygrad_result
from helpers import options, same_float_bits, spec_dict, write_spec

GOLDEN = {"gemv": {"M": 4, "K": 24}, "matmul": {"M": 3, "K": 5, "N": 4}, "elementwise": {"N": 16},
          "mlp": {"IN": 16, "HIDDEN": 8, "OUT": 3}, "conv2d": {"C_IN": 2, "C_OUT": 2, "H": 5, "W": 4, "K": 3, "PAD": 1}}


def lowered_ops(t: Tensor) -> set[tuple[str, str]]:
    """(op, dtype) of every ALU op and cast in the kernels tinygrad lowers for `t`."""
    from compiler import frontend
    from tinygrad.uop.ops import GroupOp, Ops
    graph = frontend.trace(t)
    return {(u.op.name, u.dtype.name) for k in graph.kernels for u in k.uops
            if u.op in GroupOp.ALU or u.op is Ops.CAST}


@pytest.mark.parametrize("dtype", FP8_NAMES)
def test_tinygrad_multiplies_in_fp8_and_sums_in_float32(dtype):
    """The fact the golden models follow: a GEMV's product is an fp8 MUL, its sum a float ADD,
    the result cast back to fp8; an elementwise add stays in fp8."""
    built = ZOO["gemv"].build(dtype, M=2, K=4)
    tensors = zoo.input_tensors(built, make_inputs(built, 0))
    tg = {"fp8e4m3": "float8_e4m3", "fp8e5m2": "float8_e5m2"}[dtype]
    ops = lowered_ops(built.forward(*tensors))
    assert {("MUL", tg), ("CAST", "float"), ("ADD", "float"), ("CAST", tg)} <= ops
    assert ("MUL", "float") not in ops
    built = ZOO["elementwise"].build(dtype, N=4)
    ops = lowered_ops(built.forward(*zoo.input_tensors(built, make_inputs(built, 0))))
    assert {("ADD", tg), ("MAX", tg)} <= ops and not any(d == "float" for _, d in ops)


@pytest.mark.parametrize("dtype", FP8_NAMES)
@pytest.mark.parametrize("model", sorted(GOLDEN))
def test_golden_model_equals_tinygrad_bit_for_bit(model, dtype):
    built = ZOO[model].build(dtype, **GOLDEN[model])
    arrays = make_inputs(built, 1)
    got = tinygrad_result(built, arrays)
    assert same_float_bits(reference(model, dtype, GOLDEN[model], arrays, KERNEL), got, dtype)
    assert python_device_arith(dtype) == KERNEL          # the PYTHON device runs fp8 natively


@pytest.mark.parametrize("dtype", FP8_NAMES)
def test_overflow_saturates_like_tinygrad(dtype):
    """Sums beyond the largest finite value store it (tinygrad's saturating fp8 cast), in the
    golden model and in the hardware; the data reach it on both signs."""
    params = {"M": 16, "K": 24}
    built = ZOO["gemv"].build(dtype, **params)
    big = {"fp8e4m3": 24.0, "fp8e5m2": 480.0}[dtype]
    arrays = make_inputs(built, 2, InputRange(-big, big))
    want = reference("gemv", dtype, params, arrays)
    top = zoo.DTYPES[dtype].highest
    assert (want == top).any() and (want == -top).any() and np.isfinite(want).all()
    assert same_float_bits(want, tinygrad_result(built, arrays), dtype)
    design = compile_model(built.forward(*zoo.input_tensors(built, arrays)))
    assert same_float_bits(simulate(design).outputs[0], want, dtype)


@pytest.mark.parametrize("config", [{}, {"lanes": 2, "fp_pipeline": 2}, {"reduce_unroll": 4, "fp_sum": "tree"}],
                         ids=["plain", "lanes2-pipeline2", "tree4"])
@pytest.mark.parametrize("dtype", FP8_NAMES)
@pytest.mark.parametrize("model", ["gemv", "mlp", "elementwise", "conv2d"])
def test_compiled_fp8_models_are_bit_exact(model, dtype, config):
    if model == "elementwise" and config.get("fp_sum"):
        pytest.skip("no reduction to sum in a tree")
    params = GOLDEN[model]
    built = ZOO[model].build(dtype, **params)
    arrays = make_inputs(built, 3)
    design = compile_model(built.forward(*zoo.input_tensors(built, arrays)), config=HardwareConfig(**config))
    result = simulate(design)
    arith = zoo.Arith(sum_tree=config.get("reduce_unroll", 1) if config.get("fp_sum") else 1)
    assert same_float_bits(result.outputs[0], reference(model, dtype, params, arrays, arith), dtype)
    assert result.cycles == design.cycles_formula == design.cycle_model().total


def _small_net(rng) -> DenseNet:
    return DenseNet.from_arrays({"W1": rng.normal(0, 0.5, (6, 10)), "b1": rng.normal(0, 0.2, 6),
                                 "W2": rng.normal(0, 0.5, (3, 6)), "b2": rng.normal(0, 0.2, 3)})


@pytest.mark.parametrize("dtype,config", [("fp8e4m3", {}), ("fp8e5m2", {}), ("fp8e5m2", {"fp_pipeline": 2}),
                                          pytest.param("fp8e4m3", {"lanes": 2, "fp_pipeline": 3}, marks=pytest.mark.slow)],
                         ids=["e4m3", "e5m2", "e5m2-pipeline2", "e4m3-lanes2-pipeline3"])
def test_fp8_layers_sum_exact_products_in_float32(dtype, config):
    """A dense network in fp8 (FP8_SCHEME): operands cast to float32, products exact, sums in
    float32, each layer's output cast to fp8. The hardware equals DenseNet.reference and
    tinygrad on every sample, and multiplies in FWideMul units, not float32 multipliers."""
    rng = np.random.default_rng(4)
    net = _small_net(rng)
    x = rng.normal(0, 2, (4, 10))
    built, arrays = net.built(dtype), net.arrays(dtype)
    want = net.reference(dtype, x)
    assert want.dtype == np.float32 and same_float_bits(want, zoo.round_float(want, dtype), dtype)   # fp8 logits
    xs = zoo.round_float(x, dtype)
    for i in range(2):
        assert same_float_bits(tinygrad_result(built, {**arrays, "x": xs[i]}), want[i], dtype)
    tensors = zoo.input_tensors(built, {**arrays, "x": xs[0]})
    design = compile_model(built.forward(*tensors), config=HardwareConfig(**config))
    for i in range(len(xs)):
        assert same_float_bits(simulate(design, {tensors[0]: xs[i]}).outputs[0], want[i], dtype), f"sample {i}"
    text = design_rtlil(design)
    assert re.search(rf"{floatops.UNIT_PREFIX}\d+_wmul", text) and not re.search(rf"{floatops.UNIT_PREFIX}\d+_mul\b", text)


@pytest.mark.parametrize("dtype", FP8_NAMES)
def test_fp8_input_tensors_hold_the_bits(dtype):
    """fp8 arrays travel as float32 holders; the Tensors made from them hold exactly their bits."""
    a = zoo.round_float(np.array([1.0, -0.3, 1e6, -1e6, 2.0 ** -12, np.nan]), dtype)
    assert a.dtype == np.float32
    top = zoo.DTYPES[dtype].highest
    assert a[2] == top and a[3] == -top                        # saturating
    t = zoo.input_tensors(zoo.Built({"a": ((6,), dtype)}, lambda a: a), {"a": a})[0]
    got = t.bitcast(dtypes.uint8).numpy()
    assert list(got[:5]) == list(zoo.bits(a, dtype)[:5]) and np.isnan(t.float().numpy()[5])


@pytest.mark.slow
def test_a_spec_sweeps_the_fp8_dtypes(tmp_path, fake_synth):
    """`dse sweep` over fp16 and both fp8 formats: every point checked bit-exact against its
    golden model, cycles equal to the cycle model, the fronts written per model x dtype.
    (Yosys is test_sweep's stand-in here: the sweep machinery is what is tested.)"""
    from dse.results import load_results
    from dse.spec import load_spec
    from dse.sweep import sweep
    models = [{"name": "gemv_4x8", "builtin": "gemv", "params": {"M": 4, "K": 8}},
              {"name": "mlp_8", "builtin": "mlp", "params": {"IN": 8, "HIDDEN": 4, "OUT": 2}}]
    spec = load_spec(write_spec(tmp_path, {**spec_dict(models=models, dtypes=("fp16", "fp8e4m3", "fp8e5m2")),
                                           "knobs": {"lanes": [1, 2]}}))
    r = sweep(spec, options(tmp_path))
    assert (r.ran, r.failed) == (12, 0)
    df = load_results(r.results_dir)
    assert sorted(set(df["dtype"])) == ["fp16", "fp8e4m3", "fp8e5m2"]
    assert (df["status"] == "OK").all() and df["correct"].all() and df["feasible"].all()
    assert (df["cycles"] == df["cycles_model"]).all()
    assert (df["check_rule"] == "bit-exact vs numpy golden model (PYTHON-device arithmetic)").all()
    md = (r.results_dir / "pareto.md").read_text()
    assert "## gemv_4x8 · fp8e4m3" in md and "## mlp_8 · fp8e5m2" in md


@pytest.mark.parametrize("dtype", FP8_NAMES)
def test_compiled_casts_to_and_from_fp8_equal_tinygrad(dtype):
    """Kernels of one CAST: float32 / half / bfloat16 / int32 -> fp8 (rounded to nearest even,
    saturating; values at ties, past the largest finite value, subnormal, inf, NaN) and fp8 ->
    float32 / half / bfloat16 / int32 (exact; to int: truncation), against tinygrad's PYTHON
    device bit for bit."""
    fp8 = getattr(dtypes, dtype)
    fmt = zoo.DTYPES[dtype]
    top = fmt.highest
    f32 = np.array([0.0, -0.0, 1.0, 1.0625, 1.1875, -2.75, 3.0 * 2.0 ** -9, 2.0 ** -10, 2.0 ** -17, top,
                    top * 1.03, top * 1.07, -top * 4, 1e30, np.inf, -np.inf, np.nan, 0.3, -7.77, 100.5], np.float32)
    ints = np.array([0, 1, -1, 7, 17, 33, -100, 300, 1000, -70000, 2 ** 31 - 1], np.int32)
    finite8 = zoo.round_float(np.linspace(-top, top, 41), dtype)

    def check(make):
        want = make().numpy()
        got = simulate(compile_model(make())).outputs[0]
        assert np.asarray(got).shape == want.shape
        w, g = np.asarray(want, np.float64), np.asarray(got, np.float64)
        assert np.array_equal(np.isnan(w), np.isnan(g)), (w, g)
        ok = ~np.isnan(w)
        assert np.array_equal(w[ok], g[ok]) and np.array_equal(np.signbit(w[ok]), np.signbit(g[ok])), (w, g)

    for src in (dtypes.float32, dtypes.half, dtypes.bfloat16):
        check(lambda: Tensor(f32).cast(src).cast(fp8).cast(dtypes.float32).contiguous())
    check(lambda: Tensor(ints).cast(fp8).cast(dtypes.float32).contiguous())
    x8 = lambda: zoo.input_tensors(zoo.Built({"x": ((41,), dtype)}, None), {"x": finite8})[0]   # noqa: E731
    for dst in (dtypes.float32, dtypes.half, dtypes.bfloat16, dtypes.int32):
        check(lambda: x8().cast(dst).cast(dtypes.float32).contiguous() if dst == dtypes.bfloat16 else x8().cast(dst))
