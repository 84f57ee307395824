"""Float models end to end: fp32, fp16 and bf16 through compile_model + simulate.

In "rne" mode the hardware must equal, bit for bit, a numpy model doing the same operations in
the same order (dse.models.zoo.reference) in the arithmetic of its fp_semantics knob
(zoo.arith_for: tinygrad's PYTHON-device rounding by default, KERNEL arithmetic with "op");
the other modes against the same sequence of operations built from compiler.fp.reference with
their rounding rule.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from tinygrad import Tensor, dtypes

from compiler import HardwareConfig, compile_model, simulate
from compiler import fp
from compiler.fp import reference as fpref
from dse.models import zoo
from helpers import run_zoo, same_bits

FLOATS = ["fp32", "fp16", "bf16"]
MODELS = {"gemv": {"M": 6, "K": 20}, "mlp": {"IN": 16, "HIDDEN": 8, "OUT": 4}, "elementwise": {"N": 12}}


@pytest.mark.parametrize("semantics", ["tinygrad", "op"])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("model", sorted(MODELS))
def test_float_models_bit_exact_in_rne(model, dtype, semantics):
    design, result, arrays = run_zoo(model, dtype, MODELS[model], HardwareConfig(fp_semantics=semantics))
    want = zoo.reference(model, dtype, MODELS[model], arrays, zoo.arith_for(dtype, semantics))
    assert same_bits(result.outputs[0], want)
    assert result.cycles == design.cycles_formula
    if dtype == "fp16" and model != "elementwise":     # products in half (op) or exact in float32
        other = zoo.arith_for(dtype, {"tinygrad": "op", "op": "tinygrad"}[semantics])
        assert not same_bits(want, zoo.reference(model, dtype, MODELS[model], arrays, other))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("model, unroll, lanes, pipeline", [
    ("gemv", 4, 1, 0), ("gemv", 3, 2, 2), ("gemv", 32, 1, 1), ("mlp", 5, 1, 0), ("matmul", 4, 2, 0),
    ("conv2d", 2, 1, 0)])
def test_float_tree_sums_bit_exact_against_the_golden_model_in_tree_order(model, unroll, lanes, pipeline, dtype):
    """fp_sum=tree: the golden model sums in the compiler's tree order (tails of -0.0 where
    the unroll does not divide K, e.g. 20 by 3; 32 clamps to K), so the design is bit-exact
    against it, and the cycle model holds. The sequential order gives other bits."""
    params = {**MODELS, "matmul": {"M": 3, "K": 6, "N": 4}, "conv2d": {"C_IN": 2, "C_OUT": 2, "H": 4, "W": 4}}[model]
    config = HardwareConfig(reduce_unroll=unroll, lanes=lanes, fp_pipeline=pipeline, fp_sum="tree")
    design, result, arrays = run_zoo(model, dtype, params, config)
    assert result.cycles == design.cycles_formula == design.cycle_model().total
    tree = zoo.reference(model, dtype, params, arrays, replace(zoo.arith_for(dtype, "tinygrad"), sum_tree=unroll))
    assert same_bits(result.outputs[0], tree)
    if model == "gemv" and dtype == "fp32":
        assert not same_bits(tree, zoo.reference(model, dtype, params, arrays))


@pytest.mark.parametrize("rounding,subnormals", [("rtz", "keep"), ("rne", "flush"), ("rtz", "flush")])
def test_fp16_gemv_in_other_modes_matches_the_same_rule(rounding, subnormals):
    """y[i] = cast_half(sum_k float(half(W[i,k] * x[k]))), each op rounded by the mode's rule."""
    M, K = 5, 24
    rng = np.random.default_rng(3)
    W = (rng.standard_normal((M, K)) * 1e-3).astype(np.float16)      # products reach subnormals
    x = (rng.standard_normal(K) * 1e-2).astype(np.float16)
    cfg = HardwareConfig(fp_rounding=rounding, fp_subnormals=subnormals, fp_semantics="op")
    design = compile_model(Tensor(W) @ Tensor(x), config=cfg)
    got = simulate(design).outputs[0]
    wb, xb = W.view(np.uint16), x.view(np.uint16)
    want = []
    for i in range(M):
        acc = np.zeros(1, np.uint32)                                     # fp32 +0
        for k in range(K):
            p = fpref.mul(wb[i, k:k + 1], xb[k:k + 1], fp.FP16, rounding, subnormals)
            p32 = fpref.float_to_float(p, fp.FP16, fp.FP32, rounding, subnormals)
            acc = fpref.add(acc, p32, fp.FP32, rounding, subnormals)
        want.append(fpref.float_to_float(acc, fp.FP32, fp.FP16, rounding, subnormals)[0])
    np.testing.assert_array_equal(got.view(np.uint16), np.array(want, np.uint16))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", FLOATS)
def test_gemv_128x784_bit_exact_and_close_to_tinygrad(dtype):
    params = {"M": 128, "K": 784}
    built = zoo.check_built(zoo.ZOO["gemv"].build(dtype, **params))
    arrays = zoo.make_inputs(built, 0)
    tensors = [Tensor(arrays[n]).cast(dtypes.bfloat16) if dtype == "bf16" else Tensor(arrays[n])
               for n in built.inputs]
    design = compile_model(built.forward(*tensors))
    got = simulate(design, backend="cxxrtl").outputs[0]
    assert same_bits(got, zoo.reference("gemv", dtype, params, arrays, zoo.arith_for(dtype, "tinygrad")))
    ref = zoo.reference("gemv", dtype, params, arrays, zoo.python_device_arith(dtype))
    if dtype != "fp32":             # fp16 and bf16 round where tinygrad's PYTHON device rounds
        assert same_bits(got, ref)
        return
    # its fp32 multiply-adds are fused (one rounding), the hardware's are not: close, not equal;
    # the figures are printed by bench/bench_float_accuracy.py
    err = np.max(np.abs(got.astype(np.float64) - np.asarray(ref, np.float64)))
    assert err <= 784 * 2.0 ** -23 * np.max(np.abs(ref))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16", "fp8e4m3"])
def test_a_trained_float_network_with_tree_sums_is_checked_in_tree_order(dtype):
    """fp_sum=tree with reduce_unroll 4: each sample bit-exact against the network's golden model
    summing in the hardware's trees (DenseNet.reference `trees`, zoo.tree_sum); it summed in order
    before, so every sample of such a point failed its check."""
    from pathlib import Path
    from dse.models.accuracy import run_samples
    from dse.models.data import DataSpec, load_dataset, read_weights
    from dse.models.quantize import DenseNet
    net = DenseNet.from_arrays(read_weights(Path(__file__).resolve().parent.parent / "models" / "digits_mlp.npz"))
    data = load_dataset(DataSpec(dataset="sklearn:digits", samples=6))
    config = HardwareConfig(lanes=2, reduce_unroll=4, fp_sum="tree", fp_pipeline=3)
    r = run_samples(net=net, dtype=dtype, data=data, config=config)
    assert r.samples == 6 and r.cycles == r.cycles_model
    x = data.x_test.reshape(len(data.x_test), -1)
    assert not np.array_equal(net.reference("fp32", x, trees=[4, 4]), net.reference("fp32", x)) or dtype != "fp32"


def test_a_float_conv_chain_with_tree_sums_is_refused_not_misjudged(tmp_path):
    """Its golden model sums in order only and its kernels are not its layers one to one: the
    accuracy stage says so instead of failing every sample."""
    from dse.models.accuracy import run_samples
    from dse.models.chain import read_net
    from dse.models.data import DataSpec, load_dataset
    from helpers import cnn_onnx
    path, _ = cnn_onnx(tmp_path / "cnn.onnx")
    data = load_dataset(DataSpec(dataset="sklearn:digits", samples=2))
    config = HardwareConfig(fp_sum="tree", fp_pipeline=3, layers=((0, (("reduce_unroll", 3),)),))
    with pytest.raises(ValueError, match=r"fp_sum=tree with reduce_unroll > 1 \(per kernel \[3, 1, 1\]\) in a float "
                                         r"network whose layers are not its kernels one to one"):
        run_samples(net=read_net(path), dtype="fp32", data=data, config=config)
