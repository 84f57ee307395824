"""Quantisation-aware fine-tuning (dse/models/qat.py, a model's `qat:`): the fine-tuned network
keeps narrow formats accurate, its integer model computes what training computed, it is
deterministic and cached by content, and the spec refuses what it cannot do in one line."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dse.cli import main
from dse.models.chain import read_net
from dse.models.data import DataSpec, load_dataset, read_weights
from dse.models.prune import prune
from dse.models.qat import QatOptions, QatTimeLimit, cached_fine_tune, fake_quant_logits, fine_tune, parse_options
from dse.models.quantize import DenseNet
from dse.models.widths import Formats
from dse.spec import load_spec
from helpers import write_spec

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"


@pytest.fixture(scope="module")
def digits_data():
    return load_dataset(DataSpec(dataset="sklearn:digits"))


@pytest.fixture(scope="module")
def mlp():
    return DenseNet.from_arrays(read_weights(MODELS / "digits_mlp.npz"))


def _accuracy(q, data) -> float:
    x = data.x_test.reshape(len(data.x_test), -1)
    return float((q.reference(q.quantize_input(x)).argmax(1) == data.y_test).mean())


def test_fine_tuning_keeps_int3_accurate_and_the_integer_model_computes_what_it_trained(mlp, digits_data):
    """The digits MLP at int3: post-training quantisation 93.6% (88.2% while the hidden
    activations were signed, 2 of their 3 bits used), fine-tuned (10 epochs) 97.3%, float's; the
    quantiser's integer model of the fine-tuned network computes what the training's forward pass
    computes (the same activation grids, unsigned after the ReLU): its logits within 0.05% on
    average (a grid of 0..3 in training against the quantiser's 0..7 would be 12% off), the same
    argmax on every test sample."""
    d = digits_data
    ptq = _accuracy(mlp.quantize(dtype="int3", calibration=d.x_train), d)
    tuned = fine_tune(mlp, dtype="int3", formats=None, x=d.x_train, y=d.y_train, options=QatOptions(epochs=10))
    q = tuned.net.quantize(dtype="int3", calibration=d.x_train)
    assert round(ptq, 3) == 0.936
    assert _accuracy(q, d) >= 0.97 > ptq + 0.03
    assert tuned.epochs == 10 and tuned.seconds > 0 and tuned.train_accuracy > 0.95
    assert q.layers[0].hi == 7
    _computes_what_it_trained(tuned, q, "int3", d, 0.005)
    # the quantiser keeps the network's map and finds its learned ranges
    assert q.input_map is tuned.net.input_map and q.input_map.kind == "centred"
    assert tuned.net.layers[0].clip is not None and tuned.net.layers[1].clip is None


def _computes_what_it_trained(tuned, q, dtype: str, d, within: float, formats=None) -> None:
    """The integer model's logits (dequantised) equal the training forward pass's within
    `within` of their mean magnitude, and their argmax on every test sample."""
    trained = fake_quant_logits(tuned, dtype, formats, d.x_test, d.x_train)
    integer = q.dequantize(q.reference(q.quantize_input(d.x_test.reshape(len(d.x_test), -1))))
    assert np.abs(trained - integer).mean() < within * np.abs(integer).mean()
    assert (trained.argmax(1) == integer.argmax(1)).all()


def test_the_same_inputs_give_the_same_network(mlp, digits_data):
    d = digits_data
    a, b = (fine_tune(mlp, dtype="int4", formats=None, x=d.x_train, y=d.y_train, options=QatOptions(epochs=2))
            for _ in range(2))
    for la, lb in zip(a.net.layers, b.net.layers):
        np.testing.assert_array_equal(la.W, lb.W)
        np.testing.assert_array_equal(la.b, lb.b)
        assert la.clip == lb.clip
    c = fine_tune(mlp, dtype="int4", formats=None, x=d.x_train, y=d.y_train, options=QatOptions(epochs=2, seed=1))
    assert not np.array_equal(c.net.layers[0].W, a.net.layers[0].W)


def test_a_cnn_is_fine_tuned_through_its_convolution_and_max_pool(digits_data):
    """The digits CNN (conv 3x3, ReLU, 2x2 max-pool, dense) at int3: 80.2% quantised after
    training (behind the map the quantiser chooses; 65.3% while its pooled activations were
    signed), 95.3% fine-tuned for 3 epochs behind the centred per-channel map (the conv does not
    pad), which the quantiser keeps; integer model and training agree (logits within 0.14% on
    average; 26% off with training's grid 0..3 against the quantiser's 0..7)."""
    d = digits_data
    net = read_net(MODELS / "digits_cnn.onnx")
    ptq = _accuracy(net.quantize(dtype="int3", calibration=d.x_train), d)
    tuned = fine_tune(net, dtype="int3", formats=None, x=d.x_train, y=d.y_train, options=QatOptions(epochs=3))
    q = tuned.net.quantize(dtype="int3", calibration=d.x_train)
    assert round(ptq, 3) == 0.802 and _accuracy(q, d) > 0.94
    assert q.input_map is tuned.net.input_map and q.input_map.kind == "centred"
    assert [(s.lo, s.hi) for s in q.steps if s.M is not None] == [(0, 7)]
    _computes_what_it_trained(tuned, q, "int3", d, 0.01)


def test_mixed_widths_and_power_of_two_scales_are_what_it_trains_for(mlp, digits_data):
    """Per-layer widths and scale_digits: 1 (each requantisation multiplier a power of two): the
    quantised network has those widths and multipliers, and matches training."""
    d = digits_data
    f = Formats.of({"weight_bits@0": 3, "weight_bits@1": 4, "act_bits": 4, "scale_digits": 1})
    tuned = fine_tune(mlp, dtype="int8", formats=f, x=d.x_train, y=d.y_train, options=QatOptions(epochs=5))
    q = tuned.net.quantize(dtype="int8", calibration=d.x_train, formats=f)
    assert np.abs(q.layers[0].W).max() == 3 and np.abs(q.layers[1].W).max() == 7
    M = q.layers[0].M.astype(np.int64)
    assert ((M & (M - 1)) == 0).all()
    assert _accuracy(q, d) > 0.95
    assert q.layers[0].hi == 15
    # power-of-two multipliers are the scale ratios exactly: the logits are training's to float
    # precision, ties included (rounded up in both; 1.5% apart when training's float ties fell below)
    _computes_what_it_trained(tuned, q, "int8", d, 1e-12, f)


def test_held_out_samples_choose_the_epoch_kept(mlp, digits_data):
    """With `validation`, a fifth of the training split is held out and the epoch whose network
    scores best there is kept (the calibrated start, epoch 0, among them)."""
    d = digits_data
    options = QatOptions(epochs=4, validation=0.2)
    tuned = fine_tune(mlp, dtype="int2", formats=None, x=d.x_train, y=d.y_train, options=options)
    assert 0 <= tuned.kept_epoch <= 4 and 0.5 < tuned.held_out_accuracy <= 1
    again = fine_tune(mlp, dtype="int2", formats=None, x=d.x_train, y=d.y_train, options=options)
    assert (again.kept_epoch, again.held_out_accuracy) == (tuned.kept_epoch, tuned.held_out_accuracy)
    np.testing.assert_array_equal(again.net.layers[0].W, tuned.net.layers[0].W)
    last = fine_tune(mlp, dtype="int2", formats=None, x=d.x_train, y=d.y_train, options=QatOptions(epochs=4))
    assert last.kept_epoch == 4 and np.isnan(last.held_out_accuracy)


def test_a_pruned_network_keeps_its_zeros():
    data = load_dataset(DataSpec(file=MODELS / "jet_data.npz"))
    net = DenseNet.from_arrays(read_weights(MODELS / "jet_mlp.npz"))
    pruned = prune(net, sparsity=0.75, x=data.x_train, y=data.y_train)
    tuned = fine_tune(pruned, dtype="int4", formats=None, x=data.x_train, y=data.y_train, options=QatOptions(epochs=2),
                      pruned=True)
    for before, after in zip(pruned.layers, tuned.net.layers):
        assert ((after.W == 0) >= (before.W == 0)).all()
    q = tuned.net.quantize(dtype="int4", calibration=data.x_train)
    assert all((layer.W == 0).mean() >= 0.75 for layer in q.layers)


def test_the_cache_serves_the_same_network(mlp, digits_data, isolated_cache):
    d = digits_data
    kw = dict(dtype="int3", formats=None, x=d.x_train, y=d.y_train, options=QatOptions(epochs=2))
    first = cached_fine_tune(mlp, **kw)
    again = cached_fine_tune(mlp, **kw)
    assert not first.cached and again.cached and again.seconds == first.seconds
    for la, lb in zip(first.net.layers, again.net.layers):
        np.testing.assert_array_equal(la.W, lb.W)
        assert la.clip == lb.clip
    np.testing.assert_array_equal(first.net.input_map.scale, again.net.input_map.scale)
    assert _accuracy(first.net.quantize(dtype="int3", calibration=d.x_train), d) == \
        _accuracy(again.net.quantize(dtype="int3", calibration=d.x_train), d)
    other = cached_fine_tune(mlp, **{**kw, "options": QatOptions(epochs=2, seed=3)})
    assert not other.cached
    entries = [p for p in (isolated_cache / "qat").rglob("entry.json")]
    assert len(entries) == 2


def test_a_run_past_its_time_limit_is_an_error_not_a_shorter_run(mlp, digits_data):
    d = digits_data
    with pytest.raises(QatTimeLimit, match=r"1000 epochs take about \d+ s here .* beyond qat.time_limit 0.01 s: "
                                           r"lower qat.epochs or raise qat.time_limit"):
        fine_tune(mlp, dtype="int3", formats=None, x=d.x_train, y=d.y_train,
                  options=QatOptions(epochs=1000, time_limit=0.01))


def test_options():
    assert parse_options(True) == QatOptions() and parse_options(False) is None
    assert parse_options({"epochs": 3, "learning_rate": 0.001}) == QatOptions(epochs=3, learning_rate=0.001)


def test_a_data_file_without_a_training_split_is_split(tmp_path):
    d = load_dataset(DataSpec(dataset="sklearn:iris"))
    x, y = np.concatenate([d.x_train, d.x_test]), np.concatenate([d.y_train, d.y_test])
    np.savez(tmp_path / "d.npz", x=x, y=y)
    whole = load_dataset(DataSpec(file=tmp_path / "d.npz"))
    split = load_dataset(DataSpec(file=tmp_path / "d.npz", split=0.4))
    assert whole.train_is_test and not split.train_is_test
    assert (len(split.x_train), len(split.x_test)) == (60, 90)
    assert np.bincount(split.y_train).tolist() == [20, 20, 20]         # stratified
    assert sorted(map(tuple, np.concatenate([split.x_train, split.x_test]))) == sorted(map(tuple, x))


def _spec(**model) -> dict:
    return {"study": "t", "target": "ecp5", "dtypes": ["int3"],
            "models": [{"name": "m", "weights": str(MODELS / "digits_mlp.npz"), **model}],
            "data": {"dataset": "sklearn:digits"}, "objectives": ["accuracy", "luts"],
            "search": {"sampler": "grid", "seed": 0}}


@pytest.mark.parametrize("spec, message", [
    (_spec(qat={"epoch": 3}),
     "models[0].qat.epoch: unknown key; expected epochs, batch, learning_rate, scale_learning_rate, seed, "
     "validation, time_limit"),
    (_spec(qat={"epochs": 0}), "models[0].qat.epochs: expected an integer from 1 to 100000, got 0"),
    (_spec(qat={"learning_rate": "fast"}), "models[0].qat.learning_rate: expected a number from 1e-09 to 1, got 'fast'"),
    (_spec(qat="yes"), "models[0].qat: expected true, false or a mapping of epochs, batch, learning_rate, "
                       "scale_learning_rate, seed, validation, time_limit, got str 'yes'"),
    ({**_spec(), "models": [{"name": "g", "builtin": "gemv", "params": {"M": 4, "K": 8}, "qat": True}]},
     "models[0].qat: quantisation-aware fine-tuning applies to a trained network the tool quantises ('weights:' "
     "alone or 'onnx:'); a builtin or source model brings its own weights"),
    ({**_spec(qat=True), "data": {"dataset": "sklearn:digits", "split": 0.5}},
     "data.split: the scikit-learn datasets come split (75% to train on); 'split' takes a training split from a "
     "data file without one"),
    ({**_spec(qat=True), "data": {"file": str(MODELS / "jet_data.npz"), "split": 1.5}},
     "data.split: expected the fraction of the samples to train on, between 0 and 1 (exclusive), got 1.5"),
])
def test_bad_qat_input_is_one_line_exit_2(tmp_path, capsys, spec, message):
    assert main(["validate", str(write_spec(tmp_path, spec))]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"error: {message}\n")


def test_fine_tuning_needs_a_training_split_apart_from_the_test_samples(tmp_path, capsys):
    d = load_dataset(DataSpec(dataset="sklearn:digits"))
    np.savez(tmp_path / "digits.npz", x=d.x_test, y=d.y_test)
    spec = {**_spec(qat=True), "data": {"file": str(tmp_path / "digits.npz")}}
    assert main(["validate", str(write_spec(tmp_path, spec))]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (f"error: data: {tmp_path / 'digits.npz'} has no training split (x_train), and "
                                 "fine-tuning (qat) on the test samples would score the network on what it trained "
                                 "on: give 'split: F' (the fraction of the samples to train on) or x_train and "
                                 "y_train in the file\n")
    spec["data"]["split"] = 0.5
    path = write_spec(tmp_path, spec)
    assert main(["validate", str(path)]) == 0
    m = load_spec(path).model("m")
    assert m.trained.qat == QatOptions() and m.trained.dataset().x_train.shape == (225, 64)
    assert m.describe() == ("weights: digits_mlp.npz, fine-tuned at each integer format (30 epochs, batch 64, "
                            "Adam 0.01 (scales 0.01), seed 0)")


@pytest.mark.slow
def test_a_fine_tuned_point_through_dse_eval(tmp_path, capsys, isolated_cache, monkeypatch):
    """The digits MLP at int3 with qat (5 epochs) through `dse eval`: every one of the 450 test
    samples bit-exact through CXXRTL; the row says it was fine-tuned, for how long, and its
    accuracy before (post-training quantisation: 93.6%); fp32 runs the trained network."""
    spec = {**_spec(qat={"epochs": 5}), "dtypes": ["int3", "fp32"]}
    path = write_spec(tmp_path, spec)
    args = ["eval", str(path), "--model", "m", "--no-synth", "--json", "--sim", "cxxrtl"]
    assert main([*args, "--dtype", "int3"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["status"] == "OK" and row["correct"] and row["samples"] == 450
    assert row["qat"] is True and row["qat_epochs"] == 5 and row["qat_s"] > 0
    assert round(row["accuracy_ptq"], 3) == 0.936 and row["accuracy"] >= 0.95
    assert round(row["accuracy_float"], 3) == 0.973          # the trained network, not the fine-tuned one
    import dse.models.model
    monkeypatch.setattr(dse.models.model, "_CACHE", {})      # as a new process: the network from the qat cache
    assert main([*args, "--dtype", "int3"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["accuracy"] == row["accuracy"] and again["qat_s"] == row["qat_s"]
    assert "fine-tuned network from the qat cache" in again["notes"]
    assert main([*args, "--dtype", "fp32"]) == 0
    fp32 = json.loads(capsys.readouterr().out)
    assert fp32["qat"] is False and fp32["qat_s"] is None and round(fp32["accuracy"], 3) == 0.973
