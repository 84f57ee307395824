"""The quantiser takes the graphs users export: input standardisation (Sub/Mul/Div by constants)
and batch norms folded into the adjacent conv or dense layer (dse/models/chain.py); what cannot
fold is refused naming the node. Each folded network is checked against the onnx package's own
reference evaluator running the original graph."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dse.cli import main
from dse.models.chain import load_onnx, read_chain
from dse.models.convnet import LayerNet
from dse.models.data import NotDenseChain, read_weights
from dse.models.quantize import DenseNet
from helpers import eval_model, model_spec, onnx_reference, save_onnx

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WEIGHTS = ROOT / "models" / "digits_mlp.npz"


def _standardised_mlp(path: Path, digits, style: str = "mul") -> Path:
    """The digits MLP behind a StandardScaler: x -> Sub(mean) -> Mul(1/std) (or Div(std), with
    the constants in Constant nodes, as PyTorch writes `(x - mean) / std`) -> Gemm -> Relu ->
    Gemm, its first layer rescaled so that the network computes what the MLP computes."""
    w = read_weights(WEIGHTS)
    mean = digits.x_train.mean(0)
    std = digits.x_train.std(0)
    std[std == 0] = 1.0                          # scikit-learn's StandardScaler keeps constant features
    consts = {"W1": (w["W1"] * std[None, :]).astype(np.float32), "b1": (w["b1"] + w["W1"] @ mean).astype(np.float32),
              "W2": w["W2"].astype(np.float32), "b2": w["b2"].astype(np.float32)}
    if style == "mul":
        consts |= {"mean": mean.astype(np.float32), "inv_std": (1 / std).astype(np.float32)}
        nodes = [helper.make_node("Sub", ["x", "mean"], ["c"]), helper.make_node("Mul", ["c", "inv_std"], ["s"])]
    else:
        nodes = [helper.make_node("Constant", [], ["mean"], value=onnx.numpy_helper.from_array(mean.astype(np.float32)[None, :])),
                 helper.make_node("Constant", [], ["std"], value=onnx.numpy_helper.from_array(std.astype(np.float32))),
                 helper.make_node("Sub", ["x", "mean"], ["c"]), helper.make_node("Div", ["c", "std"], ["s"])]
    nodes += [helper.make_node("Gemm", ["s", "W1", "b1"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["r"]),
              helper.make_node("Gemm", ["r", "W2", "b2"], ["y"], transB=1)]
    return save_onnx(path, nodes, consts, ["N", 64], ["N", 10])


@pytest.mark.parametrize("style", ["mul", "div"])
def test_input_standardisation_folds_into_the_first_layer(tmp_path, digits, style):
    path = _standardised_mlp(tmp_path / "mlp.onnx", digits, style)
    net = load_onnx(path)
    assert isinstance(net, DenseNet) and len(net.layers) == 2
    x = digits.x_test[:50]
    assert np.allclose(net.float_logits(x), onnx_reference(path, x), rtol=1e-4, atol=1e-4)
    mlp = DenseNet.from_arrays(read_weights(WEIGHTS))
    assert (net.float_logits(digits.x_test).argmax(1) == mlp.float_logits(digits.x_test).argmax(1)).mean() > 0.995


@pytest.mark.parametrize("dtype", ["int8", "int16"])
def test_a_standardised_network_quantises_to_every_integer_format(tmp_path, digits, dtype):
    """The numpy integer model (the hardware's golden model) within two points of float."""
    net = load_onnx(_standardised_mlp(tmp_path / "mlp.onnx", digits))
    q = net.quantize(dtype=dtype, calibration=digits.x_train)
    acc = (q.reference(q.quantize_input(digits.x_test)).argmax(1) == digits.y_test).mean()
    acc_float = (net.float_logits(digits.x_test).argmax(1) == digits.y_test).mean()
    assert acc_float > 0.95 and abs(acc - acc_float) <= 0.02


def _bn(name: str, rng, channels: int) -> tuple[dict, dict]:
    return {}, {f"{name}.scale": rng.uniform(0.5, 2, channels).astype(np.float32),
                f"{name}.B": rng.normal(0, 0.3, channels).astype(np.float32),
                f"{name}.mean": rng.normal(0, 0.5, channels).astype(np.float32),
                f"{name}.var": rng.uniform(0.2, 3, channels).astype(np.float32)}


def _bn_node(name: str, inp: str, out: str):
    return helper.make_node("BatchNormalization", [inp, f"{name}.scale", f"{name}.B", f"{name}.mean", f"{name}.var"],
                            [out], epsilon=1e-3)


def _cnn(path: Path, *, pads: int = 0, input_bn: bool = False, scale_only: bool = False) -> Path:
    """x (1x8x8) -> [BatchNorm | Mul] -> Conv 3x3 (4) -> BatchNorm -> Relu -> MaxPool -> Flatten
    -> BatchNorm(1-D, after the ReLU: folds into the Gemm's input side) -> Gemm (10)."""
    rng = np.random.default_rng(1)
    hw = (8 + 2 * pads - 2) // 2
    consts = {"conv.w": rng.normal(0, 0.1, (4, 1, 3, 3)).astype(np.float32),
              "conv.b": rng.normal(0, 0.1, 4).astype(np.float32),
              "fc.w": rng.normal(0, 0.3, (10, 4 * hw * hw)).astype(np.float32),
              "fc.b": rng.normal(0, 0.1, 10).astype(np.float32)}
    consts |= _bn("bn1", rng, 4)[1] | _bn("bn2", rng, 4 * hw * hw)[1]
    nodes, x = [], "x"
    if input_bn:
        consts |= _bn("bn0", rng, 1)[1]
        nodes.append(_bn_node("bn0", "x", "x0"))
        x = "x0"
    if scale_only:
        consts["k"] = np.array([[[[1 / 16]]]], np.float32)
        nodes.append(helper.make_node("Mul", ["x", "k"], ["x0"]))
        x = "x0"
    nodes += [helper.make_node("Conv", [x, "conv.w", "conv.b"], ["c"], kernel_shape=[3, 3], pads=[pads] * 4),
              _bn_node("bn1", "c", "n"), helper.make_node("Relu", ["n"], ["r"]),
              helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
              helper.make_node("Flatten", ["p"], ["f"]), _bn_node("bn2", "f", "g"),
              helper.make_node("Gemm", ["g", "fc.w", "fc.b"], ["y"], transB=1)]
    return save_onnx(path, nodes, consts, ["N", 1, 8, 8], ["N", 10])


@pytest.mark.parametrize("kw", [{}, {"input_bn": True}, {"pads": 1, "scale_only": True}])
def test_batch_norms_fold_into_convs_and_dense_layers(tmp_path, digits, kw):
    path = _cnn(tmp_path / "cnn.onnx", **kw)
    net = read_chain(path)
    assert isinstance(net, LayerNet)
    assert [type(layer).__name__ for layer in net.layers] == ["Conv", "MaxPool", "Flatten", "Linear"]
    assert net.layers[0].relu and not net.layers[-1].relu
    x = digits.x_test[:40]
    want = onnx_reference(path, x.reshape(-1, 1, 8, 8))
    assert np.allclose(net.float_logits(x), want, rtol=1e-4, atol=1e-4)
    q = net.quantize(dtype="int8", calibration=digits.x_train)
    got = q.dequantize(q.reference(q.quantize_input(x)))
    assert (got.argmax(1) == want.argmax(1)).mean() >= 0.95


def _refused(tmp_path, nodes, consts, shape=("N", 1, 8, 8)) -> str:
    path = save_onnx(tmp_path / "bad.onnx", nodes, consts, list(shape), ["N", 10])
    with pytest.raises(NotDenseChain) as e:
        read_chain(path)
    return str(e.value).replace(str(path), "F")


def test_what_cannot_fold_is_refused_naming_the_node(tmp_path):
    rng = np.random.default_rng(0)
    conv = {"w": rng.normal(0, 0.1, (2, 1, 3, 3)).astype(np.float32)}
    fc = {"fc": rng.normal(0, 0.1, (10, 72)).astype(np.float32)}
    tail = [helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Flatten", ["r"], ["f"]),
            helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1)]

    # a per-pixel scale before a conv: its weights are shared across the image
    msg = _refused(tmp_path, [helper.make_node("Mul", ["x", "k"], ["s"]),
                              helper.make_node("Conv", ["s", "w"], ["c"], kernel_shape=[3, 3], pads=[1] * 4), *tail],
                   {**conv, **fc, "k": rng.uniform(1, 2, (1, 1, 8, 8)).astype(np.float32)})
    assert msg == ("F: node #0 Mul (output 's'): cannot be folded into the conv F: node #1 Conv (output 'c'): its "
                   "constant varies across the image, and a conv's weights are shared across it")
    # a shift before a zero-padded conv
    msg = _refused(tmp_path, [helper.make_node("Sub", ["x", "m"], ["s"]),
                              helper.make_node("Conv", ["s", "w"], ["c"], kernel_shape=[3, 3], pads=[1] * 4), *tail],
                   {**conv, **fc, "m": np.array(8, np.float32)})
    assert msg.startswith("F: node #0 Sub (output 's'): cannot be folded into the conv F: node #1 Conv (output 'c'): "
                          "it shifts the value, and the conv's zero padding would need the shift too")
    # a constant divided by the value
    msg = _refused(tmp_path, [helper.make_node("Div", ["k", "x"], ["s"]),
                              helper.make_node("Conv", ["s", "w"], ["c"], kernel_shape=[3, 3], pads=[1] * 4), *tail],
                   {**conv, **fc, "k": np.array(1, np.float32)})
    assert msg == "F: node #0 Div (output 's'): divides a constant by the value, which is not affine"
    # an affine map with a ReLU after it before any layer
    msg = _refused(tmp_path, [helper.make_node("Conv", ["x", "w"], ["c0"], kernel_shape=[3, 3], pads=[1] * 4),
                              helper.make_node("Relu", ["c0"], ["r0"]), helper.make_node("Sub", ["r0", "m"], ["c"]),
                              *tail], {**conv, **fc, "m": np.array(1, np.float32)})
    assert msg == ("F: node #2 Sub (output 'c'): cannot be folded: a Relu (F: node #3 Relu (output 'r')) follows it "
                   "before any conv or dense layer")
    # an affine map after the last layer's ReLU: nothing after it to fold into
    msg = _refused(tmp_path, [helper.make_node("Flatten", ["x"], ["f"]), helper.make_node("Gemm", ["f", "g"], ["h"], transB=1),
                              helper.make_node("Relu", ["h"], ["r"]), helper.make_node("Mul", ["r", "k"], ["y"])],
                   {"g": rng.normal(0, 0.1, (10, 64)).astype(np.float32), "k": np.array(2, np.float32)})
    assert msg == "F: node #3 Mul (output 'y'): cannot be folded: no conv or dense layer follows it"


@pytest.mark.slow
def test_a_standardised_onnx_network_runs_int8_through_dse_eval(tmp_path, capsys, digits):
    """Before the folding, `dse validate` refused this network for int8 ("op Sub is not
    supported here"); now every test sample is bit-exact against the integer model."""
    _standardised_mlp(tmp_path / "mlp.onnx", digits, "div")
    spec = model_spec(tmp_path, ["int8"], onnx="mlp.onnx", data={"dataset": "sklearn:digits"})
    assert main(["validate", str(spec)]) == 0
    capsys.readouterr()
    row = eval_model(capsys, spec, "int8")
    assert row["status"] == "OK" and row["correct"] and row["samples"] == 450, row
    assert row["accuracy_float"] > 0.95 and abs(row["accuracy"] - row["accuracy_float"]) <= 0.02


def _viewed_cnn(path: Path, head: list[int], flat: list[int]) -> Path:
    """A CNN as PyTorch exports `x.view(-1, 1, 8, 8)` on flat samples and `h.view(-1, 36)` before
    its dense layer (Reshape by constant shapes, not Flatten), behind a standardisation of the flat
    input: x (N, 64) -> Sub -> Mul -> Reshape(head) -> Conv 3x3 (4) -> Relu -> MaxPool ->
    Reshape(flat) -> Gemm (10)."""
    rng = np.random.default_rng(2)
    consts = {"mean": np.full(64, 4.0, np.float32), "k": np.array(1 / 8, np.float32),
              "head": np.array(head, np.int64), "flat": np.array(flat, np.int64),
              "conv.w": rng.normal(0, 0.3, (4, 1, 3, 3)).astype(np.float32),
              "conv.b": rng.normal(0, 0.1, 4).astype(np.float32),
              "fc.w": rng.normal(0, 0.3, (10, 36)).astype(np.float32), "fc.b": rng.normal(0, 0.1, 10).astype(np.float32)}
    nodes = [helper.make_node("Sub", ["x", "mean"], ["c"]), helper.make_node("Mul", ["c", "k"], ["s"]),
             helper.make_node("Reshape", ["s", "head"], ["v"]),
             helper.make_node("Conv", ["v", "conv.w", "conv.b"], ["h"], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Reshape", ["p", "flat"], ["f"]),
             helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["y"], transB=1)]
    return save_onnx(path, nodes, consts, ["N", 64], ["N", 10])


@pytest.mark.parametrize("head, flat", [([-1, 1, 8, 8], [-1, 36]), ([0, 1, 8, -1], [0, -1])])
def test_reshapes_of_the_value_are_the_input_s_shape_and_a_flatten(tmp_path, digits, head, flat):
    """A Reshape before any layer is the shape the first layer reads a sample in; one before a
    dense layer is a Flatten. The folded network computes the graph (onnx's evaluator)."""
    path = _viewed_cnn(tmp_path / "cnn.onnx", head, flat)
    net = read_chain(path)
    assert net.input_shape == (1, 1, 8, 8)
    assert [type(layer).__name__ for layer in net.layers] == ["Conv", "MaxPool", "Flatten", "Linear"]
    x = digits.x_test[:40]
    want = onnx_reference(path, x)
    assert np.allclose(net.float_logits(x), want, rtol=1e-4, atol=1e-4)
    q = net.quantize(dtype="int8", calibration=digits.x_train)
    assert (q.dequantize(q.reference(q.quantize_input(x))).argmax(1) == want.argmax(1)).mean() >= 0.95


def test_a_reshape_that_moves_the_batch_or_unflattens_after_a_layer_is_refused(tmp_path):
    rng = np.random.default_rng(0)
    fc = {"fc": rng.normal(0, 0.1, (10, 64)).astype(np.float32)}
    gemm = helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1)
    msg = _refused(tmp_path, [helper.make_node("Reshape", ["x", "s"], ["f"]), gemm],
                   {**fc, "s": np.array([64], np.int64)}, shape=("N", 64))
    assert msg == ("F: node #0 Reshape (output 'f'): a Reshape to (64,) does not keep the batch axis first (a sample "
                   "of shape (64,) must stay one sample: (-1, ...) or (N, ...))")
    msg = _refused(tmp_path, [helper.make_node("Gemm", ["x", "fc"], ["h"], transB=1),
                              helper.make_node("Reshape", ["h", "s"], ["r"]),
                              helper.make_node("Conv", ["r", "w"], ["y"], kernel_shape=[1, 1])],
                   {**fc, "s": np.array([-1, 10, 1, 1], np.int64), "w": np.ones((10, 10, 1, 1), np.float32)},
                   shape=("N", 64))
    assert msg == ("F: node #1 Reshape (output 'r'): a Reshape of the value (1, 10) to (1, 10, 1, 1) after a layer; "
                   "only one to (batch, features), a Flatten, is read there")


@pytest.mark.slow
def test_a_cnn_on_flat_samples_reshaped_runs_int8_through_dse_eval(tmp_path, capsys, digits):
    """Refused for int8 before Reshape was read ("op Reshape is not supported here"); now every
    sample simulated is bit-exact against the integer model."""
    _viewed_cnn(tmp_path / "cnn.onnx", [-1, 1, 8, 8], [-1, 36])
    spec = model_spec(tmp_path, ["int8"], onnx="cnn.onnx", data={"dataset": "sklearn:digits", "samples": 20})
    assert main(["validate", str(spec)]) == 0
    capsys.readouterr()
    row = eval_model(capsys, spec, "int8")
    assert row["status"] == "OK" and row["correct"] and row["samples"] == 20, row


def test_a_reshape_to_the_batch_and_the_rest_computed_from_the_value_s_shape(tmp_path, digits):
    """`h.view(h.size(0), -1)` exported with a dynamic batch: Shape -> Gather(0) -> Unsqueeze ->
    Concat with -1 -> Reshape. The shape is evaluated for one sample: a Flatten."""
    rng = np.random.default_rng(3)
    consts = {"w": rng.normal(0, 0.3, (4, 1, 3, 3)).astype(np.float32), "fc": rng.normal(0, 0.3, (10, 36)).astype(np.float32),
              "zero": np.array(0, np.int64), "axes": np.array([0], np.int64), "rest": np.array([-1], np.int64)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Shape", ["p"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
             helper.make_node("Concat", ["n1", "rest"], ["target"], axis=0),
             helper.make_node("Reshape", ["p", "target"], ["f"]), helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1)]
    path = save_onnx(tmp_path / "cnn.onnx", nodes, consts, ["N", 1, 8, 8], ["N", 10])
    net = read_chain(path)
    assert [type(layer).__name__ for layer in net.layers] == ["Conv", "MaxPool", "Flatten", "Linear"]
    x = digits.x_test[:20]
    assert np.allclose(net.float_logits(x), onnx_reference(path, x.reshape(-1, 1, 8, 8)), rtol=1e-4, atol=1e-4)


def _pooled_cnn(path: Path, pool: str) -> Path:
    """Conv 3x3 (6) -> Relu -> an average pool (`pool`: GlobalAveragePool, a 2x2 AveragePool, or
    ReduceMean over H and W) -> [Flatten] -> Mul (a scale after the pool) -> Gemm (10)."""
    rng = np.random.default_rng(4)
    consts = {"w": rng.normal(0, 0.3, (6, 1, 3, 3)).astype(np.float32), "b": rng.normal(0, 0.1, 6).astype(np.float32),
              "k": np.array(0.5, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3]), helper.make_node("Relu", ["c"], ["r"])]
    if pool == "global":
        nodes += [helper.make_node("GlobalAveragePool", ["r"], ["p"]), helper.make_node("Flatten", ["p"], ["f"])]
        features = 6
    elif pool == "mean":
        nodes += [helper.make_node("ReduceMean", ["r"], ["f"], axes=[2, 3], keepdims=0)]   # opset 17: an attribute
        features = 6
    else:
        nodes += [helper.make_node("AveragePool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
                  helper.make_node("Flatten", ["p"], ["f"])]
        features = 6 * 3 * 3
    consts |= {"fc": rng.normal(0, 0.5, (10, features)).astype(np.float32), "fb": rng.normal(0, 0.1, 10).astype(np.float32)}
    nodes += [helper.make_node("Mul", ["f", "k"], ["s"]), helper.make_node("Gemm", ["s", "fc", "fb"], ["y"], transB=1)]
    return save_onnx(path, nodes, consts, ["N", 1, 8, 8], ["N", 10])


@pytest.mark.parametrize("pool", ["global", "mean", "window"])
def test_an_average_pool_folds_into_the_dense_layer_after_it(tmp_path, digits, pool):
    """Exact in real arithmetic: the dense layer reads the value before the pool, flattened, each
    weight spread over the elements it averaged (36 or 4 of them a channel)."""
    path = _pooled_cnn(tmp_path / "cnn.onnx", pool)
    net = read_chain(path)
    assert [type(layer).__name__ for layer in net.layers] == ["Conv", "Flatten", "Linear"]
    assert net.layers[-1].W.shape == (10, 6 * 6 * 6)
    x = digits.x_test[:40]
    want = onnx_reference(path, x.reshape(-1, 1, 8, 8))
    assert np.allclose(net.float_logits(x), want, rtol=1e-4, atol=1e-4)
    q = net.quantize(dtype="int8", calibration=digits.x_train)
    assert (q.dequantize(q.reference(q.quantize_input(x))).argmax(1) == want.argmax(1)).mean() >= 0.9


def test_an_average_pool_not_followed_by_a_dense_layer_is_refused(tmp_path):
    rng = np.random.default_rng(0)
    consts = {"w": rng.normal(0, 0.3, (2, 1, 3, 3)).astype(np.float32), "w2": rng.normal(0, 0.3, (2, 2, 2, 2)).astype(np.float32),
              "fc": rng.normal(0, 0.1, (10, 2)).astype(np.float32)}
    msg = _refused(tmp_path, [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3]),
                              helper.make_node("AveragePool", ["c"], ["p"], kernel_shape=[2, 2]),
                              helper.make_node("Conv", ["p", "w2"], ["c2"], kernel_shape=[2, 2]),
                              helper.make_node("Flatten", ["c2"], ["f"]), helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1)],
                   consts)
    assert msg == ("F: node #2 Conv (output 'c2'): a Conv after an average pool; the pool is read only where a dense "
                   "layer follows it (a Flatten, a Reshape or affine maps between), and folds into it")


@pytest.mark.slow
def test_a_cnn_with_a_global_average_pool_runs_int8_through_dse_eval(tmp_path, capsys, digits):
    _pooled_cnn(tmp_path / "cnn.onnx", "global")
    spec = model_spec(tmp_path, ["int8"], onnx="cnn.onnx", data={"dataset": "sklearn:digits", "samples": 20})
    row = eval_model(capsys, spec, "int8")
    assert row["status"] == "OK" and row["correct"] and row["samples"] == 20, row
