"""Real models: trained weights, datasets, post-training quantisation, ONNX import, accuracy.

The digits MLP 64-32-10 (models/digits_mlp.npz) on sklearn's digits test split (450 samples),
every sample through the CXXRTL hardware in one process per design.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler import HardwareConfig
from dse.models import zoo
from dse.models.accuracy import run_samples
from dse.models.chain import load_onnx, output_function, read_net
from dse.models.data import DataError, DataSpec, data_input, load_dataset, match_weights, read_weights
from dse.models.quantize import DenseNet, quantize
from helpers import cnn_onnx, eval_model, model_spec, save_onnx

ROOT = Path(__file__).resolve().parent.parent
WEIGHTS = ROOT / "models" / "digits_mlp.npz"


@pytest.fixture(scope="module")
def net():
    return DenseNet.from_arrays(read_weights(WEIGHTS))


@pytest.mark.slow
def test_digits_fp32_predicts_as_the_float_model_and_int8_is_within_two_points(digits, net):
    fp32 = run_samples(net=net, dtype="fp32", data=digits, config=HardwareConfig(lanes=2))
    assert fp32.samples == len(digits.x_test) == 450
    assert fp32.agreement == 1.0                       # same argmax as float64 on every sample
    assert fp32.accuracy == fp32.accuracy_float > 0.95
    assert fp32.max_abs_err < 1e-4                     # (run_samples checked bit-exactness vs DenseNet.reference)
    int8 = run_samples(net=net, dtype="int8", data=digits, config=HardwareConfig(lanes=2))
    # run_samples raised unless every sample == the numpy int32 reference (see the test below)
    assert int8.cycles == int8.cycles_model
    assert abs(int8.accuracy - int8.accuracy_float) <= 0.02
    assert int8.quantization and "per output channel" in int8.quantization


@pytest.mark.slow
def test_a_sample_that_differs_from_its_reference_fails_naming_it(digits, net, monkeypatch):
    from dse.models import quantize as qmod
    from dse.models.accuracy import SampleCheckError
    small = load_dataset(DataSpec(dataset="sklearn:digits", samples=8))
    real = qmod.QuantNet.reference

    def off_by_one_on_sample_5(self, xq):
        out = real(self, xq).copy()
        out[5, 3] += 1
        return out
    monkeypatch.setattr(qmod.QuantNet, "reference", off_by_one_on_sample_5)
    with pytest.raises(SampleCheckError, match=r"sample 5: hardware .* != reference .* \(1 of 8 samples differ\)"):
        run_samples(net=net, dtype="int8", data=small)
    monkeypatch.undo()
    monkeypatch.setattr(qmod.DenseNet, "reference", lambda self, dtype, x, *semantics: np.zeros((len(x), 10), np.float32))
    with pytest.raises(SampleCheckError, match=r"sample 0: .* \(8 of 8 samples differ\)"):
        run_samples(net=net, dtype="fp16", data=small)


def test_quantised_reference_equals_tinygrad_on_the_integer_model(digits, net):
    """The numpy int32 reference of the quantised model against tinygrad running the same
    integer model (its own semantics, PYTHON device) on a few samples, int8 and int16."""
    for dtype in ("int8", "int16"):
        q = quantize(net=net, dtype=dtype, calibration=digits.x_train)
        xs = q.quantize_input(digits.x_test[:3])
        for x in xs:
            got = zoo.tinygrad_result(q.built(), {**q.arrays(), "x": x})
            np.testing.assert_array_equal(got, q.reference(x))


def test_a_layer_dead_on_the_calibration_data_quantises(digits, net):
    """A hidden layer whose every ReLU stays off on the calibration samples (its outputs all 0):
    the next layer's output is its bias, which the quantised model keeps (it failed before,
    needing a requantisation shift below 1)."""
    from dse.models.quantize import Dense
    dead = DenseNet((Dense(net.layers[0].W, net.layers[0].b - 1e3, True), net.layers[1]))
    x = digits.x_test.reshape(len(digits.x_test), -1)
    for dtype in ("int8", "int4"):
        q = quantize(net=dead, dtype=dtype, calibration=digits.x_train)
        got = q.dequantize(q.reference(q.quantize_input(x)))
        np.testing.assert_allclose(got, dead.float_logits(x), atol=0.02 * np.abs(net.layers[1].b).max())


def test_a_conv_layer_dead_on_the_calibration_data_quantises(tmp_path, digits):
    """The same for the layer-chain quantiser (a CNN): every channel of the conv off."""
    rng = np.random.default_rng(0)
    w = {"conv.weight": rng.normal(0, 0.3, (4, 1, 3, 3)).astype(np.float32),
         "conv.bias": np.full(4, -1e3, np.float32),
         "fc.weight": rng.normal(0, 0.3, (10, 36)).astype(np.float32),
         "fc.bias": rng.normal(0, 1.0, (10,)).astype(np.float32)}
    net = read_net(cnn_onnx(tmp_path / "dead.onnx", w=w)[0])
    x = digits.x_test[:20]
    q = net.quantize(dtype="int8", calibration=digits.x_train)
    got = q.dequantize(q.reference(q.quantize_input(x)))
    np.testing.assert_allclose(got, net.float_logits(x), atol=0.02)


def test_int16_quantisation_is_closer_to_float_than_int8(digits, net):
    x = digits.x_test
    f = net.float_logits(x)
    errs = {}
    for dtype in ("int8", "int16"):
        q = quantize(net=net, dtype=dtype, calibration=digits.x_train)
        errs[dtype] = np.abs(q.dequantize(q.reference(q.quantize_input(x))) - f).max()
    assert errs["int16"] < errs["int8"] / 10


def _onnx_file(path: Path, weights: dict, extra_softmax: bool = False) -> Path:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    nodes = [helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "W2", "b2"], ["y"], transB=1)]
    out = "y"
    if extra_softmax:
        nodes.append(helper.make_node("Softmax", ["y"], ["p"]))
        out = "p"
    graph = helper.make_graph(
        nodes, "digits_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 10])],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in weights.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.slow
def test_onnx_export_gives_the_same_rows_as_the_tinygrad_model(tmp_path, digits, net):
    path = _onnx_file(tmp_path / "digits.onnx", read_weights(WEIGHTS))
    loaded = load_onnx(path)
    small = load_dataset(DataSpec(dataset="sklearn:digits", samples=60))
    for dtype in ("fp32", "int8"):
        a = run_samples(net=net, dtype=dtype, data=small)
        b = run_samples(net=loaded, dtype=dtype, data=small)
        np.testing.assert_array_equal(a.logits, b.logits)
        assert (a.accuracy, a.accuracy_float, a.agreement, a.cycles) == (b.accuracy, b.accuracy_float, b.agreement, b.cycles)
        # the float64 baseline goes through BLAS, whose summation order may differ by layout
        assert a.max_abs_err == pytest.approx(b.max_abs_err, rel=1e-9)


def test_a_classifiers_last_softmax_is_left_to_the_host(tmp_path, net):
    """A Softmax (or LogSoftmax, Sigmoid) after the last layer does not change the class: the
    chain ends at the logits before it (chain.OUTPUT_OPS)."""
    soft = _onnx_file(tmp_path / "soft.onnx", read_weights(WEIGHTS), extra_softmax=True)
    loaded = load_onnx(soft)
    for a, b in zip(loaded.layers, net.layers, strict=True):
        np.testing.assert_array_equal(a.W, b.W.astype(np.float32))
        assert a.relu == b.relu
    # what the row's note says (dse.evaluate)
    assert output_function(soft) == "Softmax"
    assert output_function(_onnx_file(tmp_path / "plain.onnx", read_weights(WEIGHTS))) is None


def test_onnx_op_the_dense_path_cannot_build_is_named(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import helper
    w = read_weights(WEIGHTS)
    inner = [helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], transB=1), helper.make_node("Softmax", ["h"], ["s"]),
             helper.make_node("Gemm", ["s", "W2", "b2"], ["y"], transB=1)]
    path = save_onnx(tmp_path / "inner.onnx", inner, {k: np.asarray(v, np.float32) for k, v in w.items()}, [1, 64],
                     [1, 10])
    with pytest.raises(DataError, match=r"inner.onnx: node #2 Gemm \(output 'y'\): follows the output's Softmax; "):
        load_onnx(path)
    lsm = _onnx_file(tmp_path / "lsm.onnx", w)
    model = onnx.load(lsm)
    model.graph.node.append(helper.make_node("Erf", ["y"], ["p"]))
    model.graph.output[0].name = "p"
    onnx.save(model, lsm)
    with pytest.raises(DataError, match=r"lsm.onnx: node #3 Erf \(output 'p'\): op Erf is not supported"):
        load_onnx(lsm)


def test_bad_weights_and_data_are_named(tmp_path, digits, net):
    inputs = net.built("fp32").inputs
    w = read_weights(WEIGHTS)
    np.savez(tmp_path / "bad.npz", **{**w, "W1": w["W1"][:, :10]})
    with pytest.raises(DataError, match=r"bad.npz: array 'W1' has shape \(32, 10\), the model's input needs \(32, 64\)"):
        match_weights(tmp_path / "bad.npz", read_weights(tmp_path / "bad.npz"), inputs)
    np.savez(tmp_path / "extra.npz", **w, W9=np.zeros(3))
    with pytest.raises(DataError, match=r"extra.npz: array 'W9' is not an input of the model"):
        match_weights(tmp_path / "extra.npz", read_weights(tmp_path / "extra.npz"), inputs)
    partial = {k: v for k, v in w.items() if k != "b2"}
    with pytest.raises(DataError, match=r"the weights leave 2 inputs \(x, b2\)"):
        data_input(inputs, partial, digits)
    assert data_input(inputs, w, digits) == "x"
    iris = load_dataset(DataSpec(dataset="sklearn:iris"))
    with pytest.raises(DataError, match=r"sklearn:iris samples have shape \(4,\), model input 'x' needs \(64,\)"):
        data_input(inputs, w, iris)
    with pytest.raises(DataError, match=r"unknown dataset 'sklearn:mnist'; known: sklearn:digits"):
        load_dataset(DataSpec(dataset="sklearn:mnist"))
    with pytest.raises(DataError, match="data.samples: 9999 asked"):
        load_dataset(DataSpec(dataset="sklearn:wine", samples=9999))
    np.savez(tmp_path / "noy.npz", x=digits.x_test[:5])
    d = load_dataset(DataSpec(file=tmp_path / "noy.npz"))
    assert d.y_test is None and d.x_test.shape == (5, 64)
    np.savez(tmp_path / "nox.npz", X=digits.x_test[:5])
    with pytest.raises(DataError, match=r"nox.npz: no array 'x'"):
        load_dataset(DataSpec(file=tmp_path / "nox.npz"))


def test_safetensors_weights_read_like_npz(tmp_path):
    import json
    w = read_weights(WEIGHTS)
    # the safetensors layout written by hand (tinygrad's safe_save needs a compiling device)
    header, blob = {}, b""
    for k, v in w.items():
        header[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [len(blob), len(blob) + v.nbytes]}
        blob += np.ascontiguousarray(v, "<f4").tobytes()
    head = json.dumps(header).encode()
    (tmp_path / "w.safetensors").write_bytes(len(head).to_bytes(8, "little") + head + blob)
    got = read_weights(tmp_path / "w.safetensors")
    assert got.keys() == w.keys()
    for k in w:
        np.testing.assert_array_equal(got[k], w[k])


@pytest.mark.slow
def test_unlabelled_samples_score_agreement_with_the_float_model(tmp_path, digits, net):
    np.savez(tmp_path / "unlabelled.npz", x=digits.x_test[:20])
    d = load_dataset(DataSpec(file=tmp_path / "unlabelled.npz"))
    r = run_samples(net=net, dtype="int8", data=d)
    assert r.accuracy_float == 1.0 and r.accuracy == r.agreement


# ---------------------------------------------------------------------------------------------
# through the explorer: a spec with `weights:` / `onnx:` and `data:`

import json  # noqa: E402

import yaml  # noqa: E402

from dse.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _eval(capsys, spec: Path, dtype: str) -> dict:
    assert main(["eval", str(spec), "--model", "digits_mlp", "--dtype", dtype, "--no-synth", "--json",
                 "--sim", "cxxrtl"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_digits_spec_rows_carry_accuracy_and_onnx_gives_the_same_rows(tmp_path, capsys):
    rows = {dt: _eval(capsys, ROOT / "configs" / "digits.yaml", dt) for dt in ("int8", "fp32")}
    for dt, r in rows.items():
        assert r["status"] == "OK" and r["correct"] and r["cycles"] == r["cycles_model"], r
        assert r["samples"] == 450                      # the whole test split, each sample bit-exact
    assert rows["fp32"]["accuracy"] == rows["fp32"]["accuracy_float"] and rows["fp32"]["agreement"] == 1.0
    assert abs(rows["int8"]["accuracy"] - rows["int8"]["accuracy_float"]) <= 0.02
    assert rows["int8"]["quantization"].startswith("input per ") and "symmetric" in rows["int8"]["quantization"]

    onnx_file = _onnx_file(tmp_path / "digits.onnx", read_weights(WEIGHTS))
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "study": "digits_onnx", "target": "ecp5", "models": [{"name": "digits_mlp", "onnx": str(onnx_file)}],
        "data": {"dataset": "sklearn:digits"}, "dtypes": ["int8", "fp32"],
        "objectives": ["accuracy", "luts"], "search": {"sampler": "grid"}}, sort_keys=False))
    for dt, r in rows.items():
        o = _eval(capsys, spec, dt)
        for k in ("accuracy", "accuracy_float", "agreement", "samples", "cycles", "correct"):
            assert o[k] == r[k], (dt, k)


def _spec(tmp_path: Path, **model) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"study": "t", "target": "ecp5", "models": [{"name": "m", **model}],
                                    "dtypes": ["int8"], "objectives": ["accuracy"], "search": {"sampler": "grid"}},
                                   sort_keys=False))
    return path


@pytest.mark.parametrize("model, message", [
    ({"weights": "nope.npz", "data": {"dataset": "sklearn:digits"}}, "models[0].weights: file not found: {tmp}/nope.npz"),
    ({"weights": str(WEIGHTS)}, "models[0]: a trained network needs 'data' (here or at the top level) to measure "
                                "its accuracy on"),
    ({"weights": str(WEIGHTS), "data": {"dataset": "sklearn:digitz"}},
     "models[0].data.dataset: unknown dataset 'sklearn:digitz'; did you mean 'sklearn:digits'?"),
    ({"weights": str(WEIGHTS), "data": {"dataset": "sklearn:iris"}},
     "models[0].data: sklearn:iris samples have shape (4,) (4 values), the network takes 64"),
    ({"onnx": "m.onnx", "source": "x.py", "data": {"dataset": "sklearn:digits"}},
     "models[0]: give one of 'builtin', 'source', 'weights' or 'onnx', not source and onnx ('weights' alone "
     "is a trained dense network: arrays W1, b1, W2, b2, ...; beside 'source' or 'builtin' it fills that "
     "model's inputs by name)"),
    ({"builtin": "gemv", "data": {"dataset": "sklearn:digits"}},
     "models[0].data: dtype int8: data: the weights leave 2 inputs (W, x) for the samples; name one with data.input"),
])
def test_bad_trained_model_entries_are_named(tmp_path, capsys, model, message):
    assert main(["validate", str(_spec(tmp_path, **model))]) == 2
    assert capsys.readouterr().err == f"error: {message.format(tmp=tmp_path)}\n"


# ---------------------------------------------------------------------------------------------
# weights beside a zoo model or a user's function (`weights:` + `data:`, dse.spec.ModelFiles)

SOURCE_MLP = """
def build(dtype, I=64, H=32, O=10):
    def forward(x, W1, b1, W2, b2):
        return W2 @ (W1 @ x + b1).relu() + b2
    return ({"x": ((I,), dtype), "W1": ((H, I), dtype), "b1": ((H,), dtype),
             "W2": ((O, H), dtype), "b2": ((O,), dtype)}, forward)
"""


@pytest.mark.slow
def test_a_users_function_with_weights_and_data_scores_every_sample(tmp_path, capsys, digits, monkeypatch, isolated_cache):
    (tmp_path / "mlp.py").write_text(SOURCE_MLP)
    spec = model_spec(tmp_path, ["fp32"], source="mlp.py:build", weights=str(WEIGHTS),
                       data={"dataset": "sklearn:digits", "samples": 40})
    row = eval_model(capsys, spec, "fp32")
    assert row["status"] == "OK" and row["correct"] and row["cycles"] == row["cycles_model"], row
    assert row["samples"] == 40
    # the same network in numpy, float64: predictions equal the hardware's on all 40 samples
    w = read_weights(WEIGHTS)
    x = digits.x_test[:40]
    logits = (np.maximum(x @ w["W1"].T.astype(np.float64) + w["b1"], 0) @ w["W2"].T.astype(np.float64) + w["b2"])
    assert row["accuracy"] == float((logits.argmax(1) == digits.y_test[:40]).mean()) > 0.9
    assert row["agreement"] == 1.0 and row["accuracy_float"] == row["accuracy"]
    assert row["logit_max_err"] < 1e-3
    # tinygrad's per-sample results are kept: a second point (other knobs) does not recompute them
    from dse.models import accuracy
    accuracy.tinygrad_outputs_for.cache_clear()
    calls = []
    real = zoo.tinygrad_result
    monkeypatch.setattr(zoo, "tinygrad_result", lambda *a: calls.append(1) or real(*a))
    again = eval_model(capsys, spec, "fp32", "--set", "lanes=2")
    assert again["accuracy"] == row["accuracy"] and again["samples"] == 40
    assert len(calls) == 2      # the point's own check and its worst-case confirm; the 40 samples: from the cache


@pytest.mark.slow
def test_a_zoo_model_with_integer_weights_is_bit_exact_on_every_sample(tmp_path, capsys, digits):
    """The zoo's int8 MLP (no biases, requantised by a shift) with weights the user quantised
    and the raw digits pixels (0..16, whole numbers, so int8 takes them as they are)."""
    w = read_weights(WEIGHTS)
    W1 = np.round(w["W1"] / np.abs(w["W1"]).max() * 127).astype(np.int8)
    W2 = np.round(w["W2"] / np.abs(w["W2"]).max() * 127).astype(np.int8)
    np.savez(tmp_path / "q.npz", W1=W1, W2=W2)
    spec = model_spec(tmp_path, ["int8"], builtin="mlp", params={"IN": 64, "HIDDEN": 32, "OUT": 10, "SHIFT": 6},
                       weights="q.npz", data={"dataset": "sklearn:digits", "samples": 100})
    row = eval_model(capsys, spec, "int8")
    assert row["status"] == "OK" and row["correct"] and row["samples"] == 100, row
    # the integer model in numpy (evaluate checked the hardware against the zoo's golden model on every sample)
    x = digits.x_test[:100].astype(np.int64)
    h = np.clip((x @ W1.T.astype(np.int64)) >> 6, 0, 127)
    pred = (h @ W2.T.astype(np.int64)).argmax(1)
    assert row["accuracy"] == float((pred == digits.y_test[:100]).mean())
    assert row["accuracy"] > 0.8
    assert row["logit_mean_err"] is None or np.isnan(row["logit_mean_err"])   # no scale known for user integers


@pytest.mark.slow
def test_every_sample_of_a_zoo_model_is_checked(tmp_path, capsys, monkeypatch):
    w = read_weights(WEIGHTS)
    np.savez(tmp_path / "q.npz", W1=np.round(w["W1"] * 100).astype(np.int8), W2=np.round(w["W2"] * 20).astype(np.int8))
    spec = model_spec(tmp_path, ["int8"], builtin="mlp", params={"IN": 64, "HIDDEN": 32, "OUT": 10, "SHIFT": 6},
                       weights="q.npz", data={"dataset": "sklearn:digits", "samples": 12})
    real, seen = zoo.reference, []

    def wrong_on_the_ninth_call(*a, **k):
        seen.append(1)
        out = real(*a, **k)
        return out + 1 if len(seen) == 9 else out
    monkeypatch.setattr(zoo, "reference", wrong_on_the_ninth_call)
    assert main(["eval", str(spec), "--model", "m", "--dtype", "int8", "--no-synth", "--json", "--sim", "cxxrtl"]) == 1
    row = json.loads(capsys.readouterr().out)
    assert row["status"] == "FAIL" and row["stage"] == "accuracy"
    assert "sample" in row["error"] and "!= reference" in row["error"]


@pytest.mark.parametrize("model, message", [
    ({"weights": "w.npz", "data": {"dataset": "sklearn:digits"}},
     "models[0].weights: dtype int8: {tmp}/w.npz: array 'W1' holds values that are not whole numbers, but the "
     "model's input is int8: give integer (quantised) values, or the network alone as 'weights:'/'onnx:' for the "
     "tool's post-training quantisation"),
    ({"weights": "short.npz", "data": {"dataset": "sklearn:digits"}},
     "models[0].weights: dtype int8: {tmp}/short.npz: array 'W1' has shape (32, 60), the model's input needs (32, 64)"),
    ({"weights": "w1.npz", "data": {"dataset": "sklearn:digits"}},
     "models[0].data: dtype int8: data: the weights leave 4 inputs (x, b1, W2, b2) for the samples; name one with "
     "data.input"),
    ({"weights": "q.npz", "data": {"dataset": "sklearn:iris"}},
     "models[0].data: dtype int8: data: sklearn:iris samples have shape (4,), model input 'x' needs (64,)"),
    ({"weights": "q.npz", "data": {"dataset": "sklearn:digits", "input": "W1"}},
     "models[0].data: dtype int8: data.input: 'W1' is filled by the weights file {tmp}/q.npz already"),
])
def test_bad_weights_beside_a_model_are_named(tmp_path, capsys, model, message):
    (tmp_path / "mlp.py").write_text(SOURCE_MLP)
    w = read_weights(WEIGHTS)
    np.savez(tmp_path / "w.npz", **w)
    np.savez(tmp_path / "short.npz", **{**w, "W1": w["W1"][:, :60]})
    np.savez(tmp_path / "w1.npz", W1=np.round(w["W1"] * 10).astype(np.int8))
    np.savez(tmp_path / "q.npz", **{k: np.round(v * 10).astype(np.int8) for k, v in w.items()})
    spec = model_spec(tmp_path, ["int8"], source="mlp.py:build", **model)
    assert main(["validate", str(spec)]) == 2
    assert capsys.readouterr().err == f"error: {message.format(tmp=tmp_path)}\n"


# ---------------------------------------------------------------------------------------------
# an ONNX graph that is not a dense chain: the whole graph through tinygrad's importer (floats)


def _cnn_numpy(x: np.ndarray, w: dict) -> np.ndarray:
    """The CNN in float64 numpy, independent of tinygrad and of dse.models.convnet: logits (n, 10)."""
    img = x.reshape(-1, 8, 8)
    C = len(w["conv.weight"])
    conv = np.zeros((len(img), C, 6, 6))
    for dy in range(3):
        for dx in range(3):
            conv += w["conv.weight"][None, :, 0, dy, dx, None, None].astype(np.float64) * img[:, None, dy:dy + 6, dx:dx + 6]
    conv = np.maximum(conv + w["conv.bias"][None, :, None, None], 0)
    pooled = conv.reshape(len(img), C, 3, 2, 3, 2).max(axis=(3, 5))
    return pooled.reshape(len(img), 9 * C) @ w["fc.weight"].T.astype(np.float64) + w["fc.bias"]


@pytest.mark.slow
def test_an_onnx_cnn_runs_whole_and_scores_like_numpy(tmp_path, capsys, digits, monkeypatch, isolated_cache):
    path, w = cnn_onnx(tmp_path / "cnn.onnx")
    spec = model_spec(tmp_path, ["fp32"], onnx="cnn.onnx", data={"dataset": "sklearn:digits", "samples": 24})
    row = eval_model(capsys, spec, "fp32")
    assert row["status"] == "OK" and row["correct"] and row["cycles"] == row["cycles_model"], row
    assert row["samples"] == 24 and row["agreement"] == 1.0
    logits = _cnn_numpy(digits.x_test[:24], w)
    assert row["accuracy"] == float((logits.argmax(1) == digits.y_test[:24]).mean())
    assert row["accuracy_float"] == row["accuracy"]
    assert row["overflow_safe"] is True         # max-pool's -inf start is the identity, not an overflow


@pytest.mark.parametrize("dtype, op, message", [
    ("int8", "LpPool", "models[0].onnx: dtype int8: the tool's post-training quantisation covers chains of "
                       "convolutions, max-pools and dense layers, and {tmp}/cnn.onnx: node #2 LpPool (output "
                       "'p'): op LpPool is not supported here (the quantiser takes: Conv, Gemm, MatMul, Relu, "
                       "MaxPool, Flatten, Reshape, AveragePool, GlobalAveragePool, ReduceMean, Add, Sub, Mul, Div, "
                       "BatchNormalization, Identity, Dropout, Softmax, LogSoftmax, Sigmoid, Quant, "
                       "IntQuant, BipolarQuant, QuantizeLinear, DequantizeLinear, Clip); run this graph in fp32, "
                       "fp16 or bf16"),
    ("fp32", "NoSuchPool", "models[0].onnx: {tmp}/cnn.onnx: node #2 NoSuchPool (output 'p'): tinygrad's ONNX importer "
                           "has no op NoSuchPool"),
])
def test_onnx_graphs_the_tool_cannot_run_are_named(tmp_path, capsys, dtype, op, message):
    cnn_onnx(tmp_path / "cnn.onnx", op)
    spec = model_spec(tmp_path, [dtype], onnx="cnn.onnx", data={"dataset": "sklearn:digits"})
    assert main(["validate", str(spec)]) == 2
    assert capsys.readouterr().err == f"error: {message.format(tmp=tmp_path)}\n"


def _trained_cnn(digits) -> dict:
    """A CNN for digits whose classifier is trained: 8 fixed random 3x3 filters (input scale
    1/16 folded in), ReLU, 2x2 max-pool, and a dense layer fitted by scikit-learn's logistic
    regression on those features (97% on the test split)."""
    from sklearn.linear_model import LogisticRegression
    rng = np.random.default_rng(0)
    w = {"conv.weight": (rng.normal(0, 0.3, (8, 1, 3, 3)) / 16).astype(np.float32),
         "conv.bias": rng.normal(0, 0.1, (8,)).astype(np.float32),
         "fc.weight": np.zeros((10, 72), np.float32), "fc.bias": np.zeros(10, np.float32)}
    features = _cnn_numpy(digits.x_train, {**w, "fc.weight": np.eye(72, dtype=np.float32)[:, :72],
                                           "fc.bias": np.zeros(72, np.float32)})
    clf = LogisticRegression(max_iter=2000).fit(features, digits.y_train)
    return {**w, "fc.weight": clf.coef_.astype(np.float32), "fc.bias": clf.intercept_.astype(np.float32)}


@pytest.mark.slow
def test_a_trained_onnx_cnn_quantises_to_int8_within_two_points(tmp_path, capsys, digits, monkeypatch, isolated_cache):
    """int8: the tool's quantisation of the Conv/MaxPool/Gemm chain, all 450 test samples, every
    one bit-exact against its numpy integer model (run_samples); fp32: the whole graph, 40
    samples (tinygrad computes each one's reference: 0.1 s a sample), each against tinygrad."""
    w = _trained_cnn(digits)
    cnn_onnx(tmp_path / "cnn.onnx", w=w)
    logits = _cnn_numpy(digits.x_test, w)
    right = logits.argmax(1) == digits.y_test
    int8 = eval_model(capsys, model_spec(tmp_path, ["int8"], onnx="cnn.onnx", data={"dataset": "sklearn:digits"}), "int8")
    assert int8["status"] == "OK" and int8["correct"] and int8["cycles"] == int8["cycles_model"], int8
    assert int8["samples"] == 450 and int8["overflow_safe"] is True
    assert int8["accuracy_float"] == float(right.mean()) > 0.95
    assert abs(int8["accuracy"] - int8["accuracy_float"]) <= 0.02
    assert int8["quantization"].startswith("input per tensor scaled into [-1, 1] by the host; zero points 0; input "
                                           "signed symmetric, activations after a ReLU unsigned (b bits: 0 to 2**b - 1)")
    fp32 = eval_model(capsys, model_spec(tmp_path, ["fp32"], onnx="cnn.onnx",
                                       data={"dataset": "sklearn:digits", "samples": 40}), "fp32")
    assert fp32["status"] == "OK" and fp32["correct"] and fp32["samples"] == 40, fp32
    assert fp32["accuracy"] == fp32["accuracy_float"] == float(right[:40].mean())


def test_the_cnn_integer_model_equals_tinygrad(digits):
    """The quantised CNN's numpy reference against tinygrad running the same integer model."""
    from dse.models.convnet import Conv, Flatten, LayerNet, Linear, MaxPool
    rng = np.random.default_rng(3)
    net = LayerNet((1, 1, 8, 8), (Conv(rng.normal(0, 0.05, (3, 1, 3, 3)), rng.normal(0, 0.1, 3), (1, 1), (1, 1, 1, 1),
                                       relu=True),
                                  MaxPool((2, 2), (2, 2)), Flatten(),
                                  Linear(rng.normal(0, 0.3, (5, 48)), rng.normal(0, 0.1, 5), relu=True),
                                  Linear(rng.normal(0, 0.3, (10, 5)), rng.normal(0, 0.1, 10))))
    q = net.quantize(dtype="int8", calibration=digits.x_train)
    xs = q.quantize_input(digits.x_test[:3])
    built = q.built()
    for x, want in zip(xs, q.reference(xs)):
        got = zoo.tinygrad_result(built, {**q.arrays(), "x": x})
        assert np.array_equal(got.reshape(-1), want)


def test_running_an_onnx_graph_leaves_its_initialisers_as_read(tmp_path):
    """One tinygrad OnnxRunner per file and process serves every dtype: a run with other
    weights (an fp16 point's, a worst-case input's) must not change what the next reads."""
    from dse.models.data import onnx_built, onnx_initialisers
    path, w = cnn_onnx(tmp_path / "cnn.onnx")
    built = onnx_built(path, "fp16")
    arrays = zoo.make_inputs(built, 0)
    built.forward(*zoo.input_tensors(built, arrays)).realize()
    assert np.array_equal(onnx_initialisers(path)["conv_weight"], w["conv.weight"])


# ---------------------------------------------------------------------------------------------
# files that cannot make a network or its data: refused at `dse validate`, naming the file, the
# array and the place, before any number goes through quantisation or a reference

def _bad_files(tmp_path: Path, digits) -> None:
    w = read_weights(WEIGHTS)
    x, y = digits.x_test[:40], digits.y_test[:40]

    def poked(a, index, value):
        a = np.array(a)
        a[index] = value
        return a
    np.savez(tmp_path / "w_nan.npz", **{**w, "W1": poked(w["W1"], (3, 5), np.nan)})
    np.savez(tmp_path / "w_inf.npz", **{**w, "b2": poked(w["b2"], 4, -np.inf)})
    np.savez(tmp_path / "w_zero.npz", **{**w, "W2": np.zeros_like(w["W2"])})
    np.savez(tmp_path / "ok.npz", x=x, y=y)
    np.savez(tmp_path / "x_nan.npz", x=poked(x, (7, 12), np.nan), y=y)
    np.savez(tmp_path / "x_inf.npz", x=x, y=y, x_train=poked(x, (2, 63), np.inf))
    np.savez(tmp_path / "empty.npz", x=np.zeros((0, 64)), y=np.zeros(0, np.int64))
    np.savez(tmp_path / "y_neg.npz", x=x, y=poked(y, 5, -1))
    np.savez(tmp_path / "y_big.npz", x=x, y=poked(y, 5, 12))


@pytest.mark.parametrize("dtypes, model, message", [
    (["int8"], {"weights": "w_nan.npz", "data": {"file": "ok.npz"}},
     "models[0].weights: {tmp}/w_nan.npz: array 'W1' holds nan at index (3, 5): weights must be finite numbers"),
    (["fp32"], {"weights": "w_inf.npz", "data": {"file": "ok.npz"}},
     "models[0].weights: {tmp}/w_inf.npz: array 'b2' holds -inf at index (4,): weights must be finite numbers"),
    (["fp32"], {"weights": str(WEIGHTS), "data": {"file": "x_nan.npz"}},
     "models[0].data: {tmp}/x_nan.npz: 'x' sample 7, feature 12 is nan: every value must be a finite number"),
    (["int8"], {"weights": str(WEIGHTS), "data": {"file": "x_inf.npz"}},
     "models[0].data: {tmp}/x_inf.npz: 'x_train' sample 2, feature 63 is inf: every value must be a finite number"),
    (["int8"], {"weights": str(WEIGHTS), "data": {"file": "empty.npz"}},
     "models[0].data: {tmp}/empty.npz: 'x' has shape (0, 64): no samples"),
    (["int8"], {"weights": str(WEIGHTS), "data": {"file": "y_neg.npz"}},
     "models[0].data: {tmp}/y_neg.npz: 'y' holds the label -1 (sample 5); a label is a class index, from 0"),
    (["fp32"], {"weights": str(WEIGHTS), "data": {"file": "y_big.npz"}},
     "models[0].data: {tmp}/y_big.npz: the label 12 (test sample 5) is not one of the network's 10 classes (its "
     "outputs: labels 0 to 9)"),
    (["int8"], {"weights": "w_zero.npz", "data": {"file": "ok.npz"}},
     "models[0].weights: dtype int8: every weight of layer 2 (W2) is zero, so its outputs are its biases whatever "
     "the input: no weight scale to quantise it by"),
    (["int8"], {"weights": str(WEIGHTS), "data": {"file": "ok.npz"}, "prune": 0.999},
     "models[0].prune: 0.999 leaves layer 2 (W2, 320 weights) no weight (it keeps round(0.001 x 320) = 0), so its "
     "outputs would be its biases whatever the input; a sparsity below 0.9984 keeps one"),
    # weights beside a zoo model: the same check
    (["fp32"], {"builtin": "mlp", "params": {"IN": 64, "HIDDEN": 32, "OUT": 10}, "weights": "w_nan.npz",
                "data": {"file": "ok.npz"}},
     "models[0].weights: dtype fp32: {tmp}/w_nan.npz: array 'W1' holds nan at index (3, 5): weights must be finite numbers"),
])
def test_files_that_cannot_make_a_network_are_named_at_validate(tmp_path, capsys, digits, dtypes, model, message):
    _bad_files(tmp_path, digits)
    spec = model_spec(tmp_path, dtypes, **model)
    assert main(["validate", str(spec)]) == 2
    assert capsys.readouterr() == ("", f"error: {message.format(tmp=tmp_path)}\n")


def test_a_dtype_the_network_cannot_be_quantised_to_leaves_out_only_its_points(tmp_path, capsys):
    """A layer of 64 inputs at their largest times weights at theirs: int16's 13-bit activations x
    16-bit weights overflow its int32 accumulator, int8's do not; int16 is left out, said once
    with the model, the dtype and why, and `dse eval` of it is a usage error."""
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "big.npz", W1=rng.normal(1, 0.01, (8, 64)), b1=np.zeros(8), W2=rng.normal(0, 1, (3, 8)),
             b2=np.zeros(3))
    x = rng.uniform(0, 16, (30, 64))
    x[0] = 16
    np.savez(tmp_path / "data.npz", x=x, y=rng.integers(0, 3, 30))
    spec = model_spec(tmp_path, ["int8", "int16", "fp32"], weights="big.npz", data={"file": "data.npz"})
    assert main(["validate", str(spec)]) == 0
    why = "model m cannot run in int16: an accumulator of layer 1 exceeds int32 on the calibration data"
    assert capsys.readouterr().out.splitlines()[1:] == [
        f"not applicable, left out of the search space: 1 point (e.g. m int16): {why}"]
    from dse.spec import load_spec
    assert [p.dtype for p in load_spec(spec).points()] == ["int8", "fp32"]
    assert main(["eval", str(spec), "--model", "m", "--dtype", "int16"]) == 2
    assert capsys.readouterr().err == f"error: --dtype: {why}\n"
    # the only dtype: the spec's error, as before
    spec = model_spec(tmp_path, ["int16"], weights="big.npz", data={"file": "data.npz"})
    assert main(["validate", str(spec)]) == 2
    assert capsys.readouterr().err == ("error: models[0].weights: dtype int16: an accumulator of layer 1 exceeds "
                                       "int32 on the calibration data\n")


def _mlp_onnx(path: Path, nodes, w2_inputs: int) -> Path:
    from onnx import helper
    from helpers import save_onnx
    rng = np.random.default_rng(0)
    consts = {"W1": rng.normal(0, 0.1, (32, 64)).astype(np.float32), "b1": np.zeros(32, np.float32),
              "W2": rng.normal(0, 0.1, (10, w2_inputs)).astype(np.float32), "b2": np.zeros(10, np.float32)}
    return save_onnx(path, [helper.make_node(*n[:3], **n[3]) for n in nodes], consts, ["N", 64], ["N", 10])


@pytest.mark.parametrize("skip, dtype, message", [
    (False, "fp32", "{tmp}/m.onnx: node #3 Gemm (output 'y'): a dense layer of 30 inputs on a value of shape (1, 32): "
                    "the graph's shapes do not fit (no dtype can run it: fix the file)"),
    (False, "int8", "{tmp}/m.onnx: node #3 Gemm (output 'y'): a dense layer of 30 inputs on a value of shape (1, 32): "
                    "the graph's shapes do not fit (no dtype can run it: fix the file)"),
    # not a chain (a skip connection): the graph runs whole in floats, its shapes checked by tinygrad
    (True, "fp32", "{tmp}/m.onnx: node #4 Gemm (output 'y'): tinygrad cannot run it (RuntimeError: cannot dot "
                   "(1, 32) and (30, 10))"),
])
def test_an_onnx_graph_whose_layers_do_not_chain_is_named_by_node(tmp_path, capsys, skip, dtype, message):
    pytest.importorskip("onnx")
    head = [("Flatten", ["x"], ["f"], {}), ("Gemm", ["f", "W1", "b1"], ["h"], {"transB": 1}),
            ("Relu", ["h"], ["r"], {})]
    tail = [("Add", ["r", "h"], ["s"], {}), ("Gemm", ["s", "W2", "b2"], ["y"], {"transB": 1})] if skip else \
        [("Gemm", ["r", "W2", "b2"], ["y"], {"transB": 1})]
    _mlp_onnx(tmp_path / "m.onnx", head + tail, 30)
    spec = model_spec(tmp_path, [dtype], onnx="m.onnx", data={"dataset": "sklearn:digits", "samples": 8})
    assert main(["validate", str(spec)]) == 2
    assert capsys.readouterr().err == f"error: models[0].onnx: {message.format(tmp=tmp_path)}\n"


def test_a_non_finite_onnx_initialiser_is_named_by_node(tmp_path, capsys):
    pytest.importorskip("onnx")
    import onnx
    nodes = [("Flatten", ["x"], ["f"], {}), ("Gemm", ["f", "W1", "b1"], ["h"], {"transB": 1}),
             ("Relu", ["h"], ["r"], {}), ("Gemm", ["r", "W2", "b2"], ["y"], {"transB": 1})]
    path = _mlp_onnx(tmp_path / "m.onnx", nodes, 32)
    model = onnx.load(str(path))
    for t in model.graph.initializer:
        if t.name == "b1":
            t.CopyFrom(onnx.numpy_helper.from_array(np.array([0] * 31 + [np.nan], np.float32), "b1"))
    onnx.save(model, str(path))
    spec = model_spec(tmp_path, ["int8", "fp32"], onnx="m.onnx", data={"dataset": "sklearn:digits", "samples": 8})
    assert main(["validate", str(spec)]) == 2
    assert capsys.readouterr().err == (f"error: models[0].onnx: {path}: node #1 Gemm (output 'h'): its constant 'b1' "
                                       "holds nan at index (31,): weights must be finite numbers\n")


def test_a_cnn_layer_of_zero_weights_is_named_and_its_float_dtypes_run(tmp_path, capsys):
    rng = np.random.default_rng(0)
    w = {"conv.weight": rng.normal(0, 0.3, (4, 1, 3, 3)).astype(np.float32),
         "conv.bias": rng.normal(0, 0.1, (4,)).astype(np.float32),
         "fc.weight": np.zeros((10, 36), np.float32), "fc.bias": rng.normal(0, 0.1, (10,)).astype(np.float32)}
    cnn_onnx(tmp_path / "cnn.onnx", w=w)
    spec = model_spec(tmp_path, ["int8", "fp32"], onnx="cnn.onnx", data={"dataset": "sklearn:digits", "samples": 8})
    assert main(["validate", str(spec)]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        "not applicable, left out of the search space: 1 point (e.g. m int8): model m cannot run in int8: every "
        "weight of layer 2 (fc_weight) is zero, so its outputs are its biases whatever the input: no weight scale to "
        "quantise it by"]
