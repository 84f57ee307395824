"""Trained networks in FP8 (dse/models/quantize.py FP8_SCHEME, dse/models/fp8net.py) and max-reductions in
E4M3 (compiler/max_identity.py): every sample bit-exact against the numpy golden model, which
tinygrad matches."""
from __future__ import annotations

import numpy as np
import pytest
from tinygrad import Tensor

from compiler import compile_model, simulate
from compiler.dtypes import FP8_NAMES
from compiler.fp.formats import FORMATS
from dse.models import fp8net, zoo
from dse.models.accuracy import run_samples
from dse.models.convnet import Conv, Flatten, LayerNet, Linear, MaxPool
from dse.models.data import Dataset
from dse.models.quantize import FP8_SCHEME
from helpers import cnn_onnx, eval_model, model_spec, same_float_bits


def _cnn(rng) -> LayerNet:
    return LayerNet((1, 1, 8, 8), (Conv(rng.normal(0, 0.05, (3, 1, 3, 3)), rng.normal(0, 0.1, 3), (1, 1), (1, 1, 1, 1),
                                        relu=True),
                                   MaxPool((2, 2), (2, 2)), Flatten(),
                                   Linear(rng.normal(0, 0.3, (5, 48)), rng.normal(0, 0.1, 5), relu=True),
                                   Linear(rng.normal(0, 0.3, (10, 5)), rng.normal(0, 0.1, 10))))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["fp8e4m3"])
def test_an_fp8_cnn_chain_is_bit_exact_and_equals_tinygrad(dtype, digits):
    """Conv + ReLU, max-pool, two dense layers in fp8: the golden model equals tinygrad on
    samples, and the hardware equals the golden model on every one (run_samples checks)."""
    net = _cnn(np.random.default_rng(3))
    x = digits.x_test[:3]
    want = fp8net.reference(net, dtype, x)
    built, arrays, xs = fp8net.built(net, dtype), fp8net.arrays(net, dtype), fp8net.samples(net, x, dtype)
    assert same_float_bits(zoo.tinygrad_result(built, {**arrays, "x": xs[0]}).reshape(-1), want[0], dtype)
    data = Dataset("digits[:3]", digits.x_train, digits.y_train, x, digits.y_test[:3])
    r = run_samples(net=net, dtype=dtype, data=data, backend="pysim")
    assert same_float_bits(r.logits, want, dtype) and r.samples == 3 and r.quantization == FP8_SCHEME


@pytest.mark.parametrize("dtype", FP8_NAMES)
def test_max_reductions_in_fp8_give_the_maximum(dtype):
    """tinygrad starts a max-reduction at -inf cast to the dtype: NaN in E4M3 (no inf). Its
    unoptimised kernels (NOOPT=1, the form the hardware is compiled from) then return NaN for
    every max; its default schedule returns the maximum, and so does the hardware, which starts
    E4M3 max-reductions at -448 (compiler/max_identity.py)."""
    from tinygrad.helpers import Context
    rng = np.random.default_rng(5)
    x = zoo.round_float(rng.normal(0, 4, (1, 2, 4, 4)), dtype)
    want_pool, want_rows = x.reshape(1, 2, 2, 2, 2, 2).max(axis=(3, 5)), x.reshape(8, 4).max(axis=1)

    def tensor():
        return zoo.input_tensors(zoo.Built({"x": (x.shape, dtype)}, None), {"x": x})[0]
    for ops, want in ((lambda t: t.max_pool2d(kernel_size=(2, 2)), want_pool), (lambda t: t.reshape(8, 4).max(axis=1), want_rows)):
        assert same_float_bits(simulate(compile_model(ops(tensor()))).outputs[0], want, dtype)
        assert same_float_bits(ops(tensor()).float().numpy(), want, dtype)                  # tinygrad's default schedule
        with Context(NOOPT=1):
            unoptimised = ops(tensor()).float().numpy()
        assert np.isnan(unoptimised).all() if not FORMATS[dtype].has_inf else same_float_bits(unoptimised, want, dtype)
    lowest = compile_model(Tensor(np.full(4, -448.0, np.float32)).cast(tensor().dtype).max(axis=0, keepdim=True))
    assert simulate(lowest).outputs[0].tolist() == [-448.0]


@pytest.mark.parametrize("dtype", FP8_NAMES)
def test_softmax_in_fp8_is_checked_against_tinygrad(dtype, tmp_path):
    """mlp_softmax (a max, exp2, a sum, a division) in fp8: within the float tolerance of
    tinygrad's result, which for E4M3 is its default schedule (NOOPT=1 gives NaN)."""
    from dse.evaluate import EvalContext, Status, evaluate
    from dse.spec import DesignPoint, FrozenMap, parse_spec
    spec = parse_spec({"study": "sm", "target": "ecp5", "dtypes": [dtype], "objectives": ["cycles"],
                       "models": [{"name": "sm", "builtin": "mlp_softmax", "params": {"IN": 8, "HIDDEN": 8, "OUT": 4}}],
                       "search": {"sampler": "grid"}})
    m = evaluate(EvalContext.from_spec(spec, sim_backend="pysim", synthesize=False),
                 DesignPoint("sm", dtype, FrozenMap({})), tmp_path)
    assert m.status is Status.OK and m.correct is True and m.max_abs_err == 0.0, m.error


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["fp8e4m3"])
def test_an_onnx_cnn_in_fp8_runs_the_fp8_scheme_with_notes(tmp_path, capsys, monkeypatch, dtype):
    """`onnx:` with a Conv/MaxPool/Gemm chain at an fp8 point: the chain's FP8 build (not the whole
    graph in tinygrad's fp8 arithmetic), every sample bit-exact, the scheme in the row."""
    monkeypatch.setenv("TINYHW_CACHE", str(tmp_path / "cache"))
    cnn_onnx(tmp_path / "cnn.onnx")
    spec = model_spec(tmp_path, [dtype], onnx="cnn.onnx", data={"dataset": "sklearn:digits", "samples": 16})
    row = eval_model(capsys, spec, dtype)
    assert row["status"] == "OK" and row["correct"] and row["cycles"] == row["cycles_model"], row
    assert row["samples"] == 16 and row["quantization"] == FP8_SCHEME and FP8_SCHEME in row["notes"]
