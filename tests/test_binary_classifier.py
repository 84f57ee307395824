"""A network of one output is a binary classifier (dse/models/classes.py): its output is class 1's
logit, positive for class 1. Accuracy, pruning and fine-tuning read it so, on a trained one."""
from __future__ import annotations

import numpy as np
import pytest

from dse.models.classes import classes, cross_entropy, predicted
from dse.models.data import DataSpec, load_dataset
from dse.models.prune import prune
from dse.models.quantize import Dense, DenseNet
from helpers import eval_model, model_spec


def test_one_output_predicts_class_one_where_it_is_positive():
    assert predicted(np.array([[2.0], [-0.5], [0.0]])).tolist() == [1, 0, 0]
    assert predicted(np.array([[0.1, 0.3, -1.0], [2.0, 0.0, 1.0]])).tolist() == [1, 0]
    assert classes(1) == 2 and classes(10) == 10


@pytest.mark.parametrize("outputs", [1, 3])
def test_the_loss_gradient_is_the_losss_slope(outputs):
    rng = np.random.default_rng(0)
    z, y = rng.normal(0, 3, (6, outputs)), rng.integers(0, classes(outputs), 6)
    loss, grad, _ = cross_entropy(z, y)
    eps = 1e-6
    for i, j in np.ndindex(z.shape):
        step = np.zeros_like(z)
        step[i, j] = eps
        slope = (cross_entropy(z + step, y)[0] - cross_entropy(z - step, y)[0]) / (2 * eps)
        assert grad[i, j] == pytest.approx(slope, abs=1e-6)
    if outputs == 1:       # the logistic loss: -log sigmoid(z) for class 1, -log(1 - sigmoid(z)) for 0
        s = 1 / (1 + np.exp(-z[:, 0]))
        assert loss == pytest.approx(float(-np.where(y == 1, np.log(s), np.log(1 - s)).mean()))


@pytest.fixture(scope="module")
def cancer():
    return load_dataset(DataSpec(dataset="sklearn:breast_cancer"))


def _logistic(data) -> DenseNet:
    """A 30-8-1 network trained (full-batch gradient descent on the logistic loss) on the
    training split, its input scaling folded into the first layer."""
    rng = np.random.default_rng(0)
    x, y = data.x_train.reshape(len(data.x_train), -1), data.y_train
    scale = np.abs(x).max(0)
    xs = x / scale
    W1, b1 = rng.normal(0, 0.5, (8, x.shape[1])), np.zeros(8)
    W2, b2 = rng.normal(0, 0.5, (1, 8)), np.zeros(1)
    for _ in range(600):
        h = np.maximum(xs @ W1.T + b1, 0)
        _, g, _ = cross_entropy(h @ W2.T + b2, y)
        gh = (g @ W2) * (h > 0)
        W2 -= 0.5 * g.T @ h
        b2 -= 0.5 * g.sum(0)
        W1 -= 0.5 * gh.T @ xs
        b1 -= 0.5 * gh.sum(0)
    return DenseNet((Dense(W1 / scale, b1, True), Dense(W2, b2, False)))


def _spec(tmp_path, net: DenseNet, dtypes: list[str]):
    """A spec of `net` (its weights in net.npz) on breast_cancer, in `dtypes`."""
    np.savez(tmp_path / "net.npz", **{f"{p}{i}": getattr(layer, p).astype(np.float32)
                                      for i, layer in enumerate(net.layers, 1) for p in "Wb"})
    return model_spec(tmp_path, dtypes, weights="net.npz", data={"dataset": "sklearn:breast_cancer"})


def test_each_layer_of_a_binary_classifier_is_a_kernel_of_its_own(tmp_path, capsys, cancer):
    """tinygrad fuses a layer into a next one of a single output; the tool keeps them apart, so
    per-layer knobs name both (and fp16 rounds the hidden layer where its golden model does)."""
    from dse.cli import main
    spec = _spec(tmp_path, _logistic(cancer), ["int8", "fp16"])
    assert main(["layers", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "m (int8, fp16): 2 layers" in out and "k0_r_8_30 = W1" in out and "k1_r_8 = W2" in out


def test_a_pruned_binary_classifier_keeps_its_accuracy(cancer):
    net = _logistic(cancer)
    x = cancer.x_test.reshape(len(cancer.x_test), -1)
    dense = float((predicted(net.float_logits(x)) == cancer.y_test).mean())
    assert dense > 0.85
    pruned = prune(net, sparsity=0.5, x=cancer.x_train, y=cancer.y_train)
    assert float((predicted(pruned.float_logits(x)) == cancer.y_test).mean()) > dense - 0.05


@pytest.mark.slow              # a CXXRTL build
@pytest.mark.parametrize("dtype", ["int8", "fp16"])
def test_a_binary_classifier_runs_and_scores_like_its_float_model(tmp_path, capsys, cancer, dtype):
    """Every test sample through the hardware, bit-exact against the golden model (fp16: each
    layer rounded at its store; tinygrad fused the one-output layer with the one before, which
    then was never rounded, and 66 of 143 samples were 1 ULP off)."""
    net = _logistic(cancer)
    row = eval_model(capsys, _spec(tmp_path, net, [dtype]), dtype)
    assert row["status"] == "OK" and row["correct"] and row["samples"] == len(cancer.x_test)
    x = cancer.x_test.reshape(len(cancer.x_test), -1)
    assert row["accuracy_float"] == pytest.approx(float((predicted(net.float_logits(x)) == cancer.y_test).mean()))
    assert row["accuracy_float"] > 0.85 and abs(row["accuracy"] - row["accuracy_float"]) <= 0.03
    assert row["agreement"] >= 0.95
