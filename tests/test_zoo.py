"""The model zoo: numpy golden models against tinygrad's own results, seeded inputs, params.

Integers are compared exactly. Floats are compared bit for bit against the golden model run
with `python_device_arith(dtype)`, the rounding tinygrad's PYTHON device really does; the
kernel-semantics golden model (`KERNEL`) is also bit-exact for bf16 and within a few ulps for
fp32 (tinygrad fuses multiply-add) and fp16 (tinygrad emulates half in float32 on Python 3.11).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dse.models import zoo
from dse.models.user_model import load_function
from dse.models.zoo import KERNEL, ZOO, InputRange, make_inputs, python_device_arith, reference, tinygrad_result

DATA = Path(__file__).resolve().parent / "data"

SMALL = {
    "gemv": {"M": 4, "K": 24},
    "matmul": {"M": 3, "K": 5, "N": 4},
    "elementwise": {"N": 16},
    "mlp": {"IN": 16, "HIDDEN": 8, "OUT": 3, "SHIFT": 6},
    "conv2d": {"C_IN": 2, "C_OUT": 2, "H": 5, "W": 4, "K": 3, "PAD": 1},
}


def same(a: np.ndarray, b: np.ndarray, dtype: str) -> bool:
    """Same dtype, shape and bit patterns (so -0.0 != 0.0 and NaN == NaN)."""
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(zoo.bits(a, dtype), zoo.bits(b, dtype))


def run(model: str, dtype: str, params: dict, seed: int = 1, input_range: InputRange | None = None):
    built = ZOO[model].build(dtype, **params)
    arrays = make_inputs(built, seed, input_range)
    return arrays, tinygrad_result(built, arrays)


GOLDEN = [name for name, m in ZOO.items() if m.reference is not None]


@pytest.mark.parametrize("dtype", ["int8", "fp32", "fp16", "bf16"])
@pytest.mark.parametrize("model", GOLDEN)
def test_reference_equals_tinygrad_bit_for_bit(model, dtype):
    arrays, got = run(model, dtype, SMALL[model])
    assert same(reference(model, dtype, SMALL[model], arrays, python_device_arith(dtype)), got, dtype)
    kernel = reference(model, dtype, SMALL[model], arrays, KERNEL)
    if dtype in ("int8", "bf16") or model == "elementwise":     # no rounding choices to differ in
        assert same(kernel, got, dtype)
    else:   # sums of +-1-sized products: a few ulps of 1.0
        tol = {"fp32": 2.0**-20, "fp16": 2.0**-8}[dtype]
        assert np.allclose(kernel.astype(np.float64), got.astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["int16", "int32", "uint8"])
@pytest.mark.parametrize("model", ["gemv", "conv2d", "mlp"])
def test_other_integer_dtypes_exact(model, dtype):
    arrays, got = run(model, dtype, SMALL[model])
    assert got.dtype == np.int32
    assert np.array_equal(reference(model, dtype, SMALL[model], arrays), got)


def test_int32_accumulator_wraps_like_tinygrad():
    p = {"M": 2, "K": 8}
    built = ZOO["gemv"].build("int32", **p)
    arrays = {"W": np.full((2, 8), 2**20, np.int32), "x": np.full(8, 2**12 + 1, np.int32)}
    got = tinygrad_result(built, arrays)
    exact = 8 * 2**20 * (2**12 + 1)
    wrapped = (exact + 2**31) % 2**32 - 2**31
    assert exact > 2**31 and got.tolist() == [wrapped] * 2 == reference("gemv", "int32", p, arrays).tolist()


def test_int8_worst_case_dot_product_is_exact():
    """(-128)*(-128) * 784 = 12845056 needs 25 bits: int32 accumulation keeps it exact."""
    p = {"M": 1, "K": 784}
    arrays = {"W": np.full((1, 784), -128, np.int8), "x": np.full(784, -128, np.int8)}
    got = tinygrad_result(ZOO["gemv"].build("int8", **p), arrays)
    assert got.tolist() == [784 * 128 * 128] == reference("gemv", "int8", p, arrays).tolist()


def test_mlp_int8_requantisation_is_integer_exact():
    p = SMALL["mlp"]
    arrays, got = run("mlp", "int8", p)
    h = arrays["W1"].astype(np.int64) @ arrays["x"].astype(np.int64)
    q = np.clip(h >> p["SHIFT"], 0, 127)
    assert 0 < np.count_nonzero(q) and np.array_equal(got, (arrays["W2"].astype(np.int64) @ q).astype(np.int32))


def test_conv2d_padding_and_output_shape():
    p = {"C_IN": 1, "C_OUT": 1, "H": 3, "W": 3, "K": 3, "PAD": 1}
    arrays = {"x": np.arange(9, dtype=np.int8).reshape(1, 3, 3), "w": np.ones((1, 1, 3, 3), np.int8)}
    got = tinygrad_result(ZOO["conv2d"].build("int8", **p), arrays)
    assert got.tolist() == [[[8, 15, 12], [21, 36, 27], [20, 33, 24]]] == reference("conv2d", "int8", p, arrays).tolist()
    with pytest.raises(ValueError, match=r"kernel size K=5 is larger than the padded input \(3x3\)"):
        ZOO["conv2d"].build("int8", H=3, W=3, K=5, PAD=0)


def test_kernel_rounding_differs_where_tinygrad_fuses():
    """Documents why python_device_arith exists: fp32 MULACC rounds once, KERNEL twice."""
    arrays, got = run("gemv", "fp32", {"M": 16, "K": 64}, seed=3)
    fused = reference("gemv", "fp32", {"M": 16, "K": 64}, arrays, python_device_arith("fp32"))
    kernel = reference("gemv", "fp32", {"M": 16, "K": 64}, arrays, KERNEL)
    assert same(fused, got, "fp32") and not same(kernel, got, "fp32")


def test_user_model_runs_in_tinygrad():
    build = load_function(DATA / "user_models.py", "scale_add")
    built = zoo.check_built(build("int8", N=8))
    arrays = make_inputs(built, seed=0)
    expected = 3 * arrays["a"].astype(np.int32) + arrays["b"].astype(np.int32)
    assert np.array_equal(tinygrad_result(built, arrays), expected)


# --- seeded inputs

def test_make_inputs_is_seeded_and_typed():
    built = ZOO["mlp"].build("int8", IN=32, HIDDEN=16, OUT=4)
    a, b, c = make_inputs(built, 7), make_inputs(built, 7), make_inputs(built, 8)
    assert list(a) == ["x", "W1", "W2"]
    assert all(np.array_equal(a[k], b[k]) for k in a) and not np.array_equal(a["W1"], c["W1"])
    assert [(v.shape, v.dtype) for v in a.values()] == [((32,), np.int8), ((16, 32), np.int8), ((4, 16), np.int8)]


@pytest.mark.parametrize("dtype", list(zoo.DTYPES))
def test_default_ranges(dtype):
    arrays = make_inputs(ZOO["elementwise"].build(dtype, N=20000), seed=0)
    a = arrays["a"]
    assert a.dtype == zoo.storage(dtype)
    r = zoo.default_input_range(dtype)
    if zoo.DTYPES[dtype].is_float:
        assert r == InputRange(-1.0, 1.0) and a.min() >= -1 and a.max() <= 1 and np.std(a) > 0.5
        tiny = 2.0 ** -14 if dtype == "fp16" else np.finfo(np.float32).tiny
        assert not np.any((a != 0) & (np.abs(a) < tiny))                # no subnormals
        assert np.array_equal(zoo.round_float(a, dtype), a.astype(zoo.storage(dtype)))  # representable
    else:
        lo, hi = zoo.DTYPES[dtype].lowest, zoo.DTYPES[dtype].highest
        assert a.min() >= lo and a.max() <= hi
        if hi - lo < 2**16:
            assert (a.min(), a.max()) == (lo, hi)                         # the full range, both ends


def test_input_range_is_respected_and_checked():
    built = ZOO["gemv"].build("int8", M=16, K=64)
    a = make_inputs(built, 0, InputRange(-8, 7))
    assert a["W"].min() == -8 and a["W"].max() == 7
    with pytest.raises(ValueError, match=r"\[-200, 7\] is outside the int8 range \[-128, 127\]"):
        make_inputs(built, 0, InputRange(-200, 7))
    with pytest.raises(ValueError, match="int8 data needs integer bounds"):
        make_inputs(built, 0, InputRange(-0.5, 0.5))
    f = make_inputs(ZOO["gemv"].build("fp16", M=16, K=64), 0, InputRange(-4, 4))["W"]
    assert f.dtype == np.float16 and f.min() >= -4 and f.max() <= 4 and f.max() > 3


# --- numerics helpers

def test_round_float_bf16_is_round_to_nearest_even():
    one = 1.0
    halfway_down, halfway_up = one + 2**-8, one + 3 * 2**-8          # ties between bf16 neighbours
    got = zoo.round_float(np.array([halfway_down, halfway_up, one + 2**-8 + 2**-20, np.nan]), "bf16")
    assert got[:3].tolist() == [1.0, 1.0 + 2**-6, 1.0 + 2**-7] and np.isnan(got[3])
    assert zoo.bits(np.array([1.0], np.float32), "bf16").tolist() == [0x3F80]


def test_round_float_emulated_flushes_and_overflows():
    x = np.array([2.0**-15, -(2.0**-15), 65510.0, 70000.0], np.float32)
    assert zoo.round_float(x, "fp16").tolist() == [2.0**-15, -(2.0**-15), 65504.0, np.inf]
    emu = zoo.round_float(x, "fp16", emulated=True)
    assert emu.tolist() == [0.0, 0.0, np.inf, np.inf] and np.signbit(emu[1])


def test_bits():
    assert zoo.bits(np.array([1.0, -2.0], np.float16), "fp16").tolist() == [0x3C00, 0xC000]
    assert zoo.bits(np.array([-1], np.int8), "int8").tolist() == [0xFF]


# --- zoo parameters and the contract

def test_zoo_params_come_from_signatures():
    assert {n: m.defaults() for n, m in ZOO.items()} == {
        "gemv": {"M": 128, "K": 784}, "matmul": {"M": 16, "K": 16, "N": 16}, "elementwise": {"N": 256},
        "mlp": {"IN": 784, "HIDDEN": 128, "OUT": 10, "SHIFT": 11},
        "conv2d": {"C_IN": 1, "C_OUT": 2, "H": 8, "W": 8, "K": 3, "PAD": 1},
        "mlp_softmax": {"IN": 16, "HIDDEN": 16, "OUT": 10}, "layernorm": {"ROWS": 4, "N": 16},
        "act_mlp": {"IN": 8, "HIDDEN": 8, "OUT": 4}, "attention": {"S": 8, "D": 16}}
    assert all(m.doc for m in ZOO.values())
    assert ZOO["gemv"].resolve_params({"K": 16}) == {"M": 128, "K": 16}
    with pytest.raises(zoo.ParamError, match="unknown parameter 'Q' for builtin model 'gemv'; its parameters: M, K"):
        ZOO["gemv"].resolve_params({"Q": 1})
    with pytest.raises(zoo.ParamError, match="expected an integer >= 0, got -1") as e:
        ZOO["mlp"].resolve_params({"SHIFT": -1})
    assert e.value.param == "SHIFT"


@pytest.mark.parametrize("result,message", [
    ((1, 2, 3), "build() must return (inputs, forward), got tuple"),
    (({}, print), "build() must return a non-empty dict of inputs first, got {}"),
    (({"x": ((4,), "int17")}, print), "input 'x': unknown dtype 'int17'; int17: integers take 2 to 16 bits "
                                       "(int2 .. int16), or int32"),
    (({"x": ((4,), "w4a8")}, print), "input 'x': 'w4a8' names two element types, not one: give weights "
                                      "weights_dtype(dtype) ('int4') and activations activations_dtype(dtype) ('int8') "
                                      "(from dse.models.zoo import weights_dtype, activations_dtype)"),
    (({"x": [(4,), "int8"]}, print), "input 'x': expected (shape, dtype_name), got [(4,), 'int8']"),
    (({"x": ((4,), "int8")}, None), "build() must return a callable forward second, got None"),
])
def test_check_built_errors(result, message):
    with pytest.raises(ValueError) as e:
        zoo.check_built(result)
    assert str(e.value) == message


# --- full-size models (the PYTHON device interprets every op: 5-25 s each)

@pytest.mark.slow
@pytest.mark.parametrize("model,dtype", [("gemv", "int8"), ("gemv", "fp16"), ("mlp", "int8")])
def test_full_size_reference_equals_tinygrad(model, dtype):
    arrays, got = run(model, dtype, {}, seed=0)
    assert same(reference(model, dtype, {}, arrays, python_device_arith(dtype)), got, dtype)


def test_bf16_input_tensors_hold_the_bits_tinygrad_casts_to():
    """bf16-exact data takes a fast path (a buffer from the bytes); it must hold the bits
    tinygrad's own cast gives. Data that is not bf16-exact still goes through the cast."""
    from tinygrad import Tensor, dtypes
    built = zoo.ZOO["gemv"].build("bf16", M=4, K=8)
    exact = zoo.make_inputs(built, 3)
    rough = {k: v + np.float32(1e-4) for k, v in exact.items()}          # not bf16-exact
    for arrays in (exact, rough):
        for t, (name, a) in zip(zoo.input_tensors(built, arrays), arrays.items()):
            want = Tensor(a).cast(dtypes.bfloat16).bitcast(dtypes.uint16).numpy()
            assert t.dtype == dtypes.bfloat16 and t.shape == a.shape
            assert np.array_equal(t.bitcast(dtypes.uint16).numpy(), want), name
