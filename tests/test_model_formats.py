"""Per-model and per-layer number formats: a model's own `dtypes:` in a spec (a float-only model
beside an ONNX network the tool quantises, in one study), and the format knobs `weight_bits`,
`act_bits` and their `@<layer>` forms (mixed precision, steered by the accuracy constraint)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from compiler import HardwareConfig
from dse.cli import main
from dse.frozen import FrozenMap
from dse.models import zoo
from dse.models.chain import read_chain
from dse.models.data import read_weights
from dse.models.widths import Formats, Widths
from dse.models.quantize import DenseNet
from dse.results import load_results, pareto_markdown
from dse.spec import DesignPoint, load_spec
from dse.study.space import space_fingerprint
from dse.sweep import sweep
from helpers import cnn_onnx, options


def _spec(tmp_path, top_dtypes=None, **extra) -> dict:
    cnn_onnx(tmp_path / "cnn.onnx")
    d = {"study": "mixed", "target": "ecp5",
         "models": [{"name": "cnn", "onnx": "cnn.onnx", "data": {"dataset": "sklearn:digits", "samples": 20},
                     "dtypes": ["int8", "fp32"]},
                    {"name": "soft", "builtin": "mlp_softmax", "params": {"IN": 8, "HIDDEN": 8, "OUT": 4},
                     "dtypes": ["fp16"]},
                    {"name": "gemv", "builtin": "gemv", "params": {"M": 4, "K": 8}}],
         "knobs": {"lanes": [1, 2]}, "objectives": ["cycles", "luts"], "search": {"sampler": "grid"}, **extra}
    if top_dtypes is not None:
        d["dtypes"] = top_dtypes
    else:
        del d["models"][2]
    return d


def _write(tmp_path, d: dict):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def test_a_float_only_model_beside_a_quantised_onnx_net_is_one_study(tmp_path, capsys):
    """Before: `dse validate` refused the spec (mlp_softmax has no int8, the CNN needs one)."""
    path = _write(tmp_path, _spec(tmp_path))
    assert main(["validate", str(path)]) == 0
    assert "-> 6 design points" in capsys.readouterr().out     # (2 + 1) dtypes x 2 lanes
    s = load_spec(path)
    assert s.dtypes == ("int8", "fp32", "fp16") and s.model_dtypes("soft") == ("fp16",)
    assert [(p.model, p.dtype) for p in s.points()][::2] == [("cnn", "int8"), ("cnn", "fp32"), ("soft", "fp16")]
    assert s.search.trials == 6 and not s.not_applicable_points()
    # a sampler may propose a pairing the models do not run: pruned with why, not compiled
    assert s.not_applicable(DesignPoint("soft", "int8", FrozenMap({"lanes": 1}))) == "model soft runs fp16 only (its dtypes)"
    assert "## soft · fp16" in pareto_markdown(s, _empty(), _empty()) and "## soft · int8" not in \
        pareto_markdown(s, _empty(), _empty())


def _empty():
    import pandas as pd
    return pd.DataFrame()


def test_models_without_their_own_dtypes_take_the_top_level_ones(tmp_path):
    s = load_spec(_write(tmp_path, _spec(tmp_path, top_dtypes=["int8"])))
    assert s.dtypes == ("int8", "fp32", "fp16")
    assert s.model_dtypes("gemv") == ("int8",) and s.model_dtypes("cnn") == ("int8", "fp32")
    assert s.space_size == (2 + 1 + 1) * 2
    fingerprint = space_fingerprint(s)["models"]
    assert fingerprint[0][-1] == ["int8", "fp32"] and fingerprint[2][-1] == ["int8"]


def test_a_spec_without_per_model_dtypes_is_unchanged(tmp_path):
    """Studies written before keep their fingerprint: no model carries a list of its own."""
    d = _spec(tmp_path, top_dtypes=["int8", "fp32"])
    for m in d["models"]:
        m.pop("dtypes", None)
    d["models"] = [d["models"][0], d["models"][2]]
    s = load_spec(_write(tmp_path, d))
    assert all(m.dtypes == () for m in s.models)
    assert all(len(entry) == 4 for entry in space_fingerprint(s)["models"])


@pytest.mark.parametrize("change, message", [
    (lambda d: d["models"][1].pop("dtypes"), "models[1]: needs 'dtypes' (here or at the top level): the number "
                                             "formats to run it in"),
    (lambda d: d["models"][1].__setitem__("dtypes", ["int8"]),
     "models[1].builtin: builtin model 'mlp_softmax' needs a float dtype: its exp, division or square root have no "
     "integer meaning; dtype int8 cannot run it (use fp32, fp16 or bf16)"),
    (lambda d: d["models"][1].__setitem__("dtypes", ["fp61"]), "models[1].dtypes[0]: unknown dtype 'fp16'"),
    (lambda d: d["models"][1].__setitem__("dtypes", []), "models[1].dtypes: must not be empty"),
])
def test_bad_model_dtypes_are_one_line_exit_2(tmp_path, capsys, change, message):
    d = _spec(tmp_path)
    change(d)
    assert main(["validate", str(_write(tmp_path, d))]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}".split("'fp16'")[0]) and err.count("\n") == 1


def test_eval_of_a_dtype_the_model_does_not_run_is_refused(tmp_path, capsys):
    path = _write(tmp_path, _spec(tmp_path))
    assert main(["eval", str(path), "--model", "soft", "--dtype", "fp32", "--no-synth"]) == 2
    assert capsys.readouterr().err == "error: --dtype: model 'soft' runs fp16 only (its dtypes: in the spec)\n"


# ---------------------------------------------------------------------------------------------
# per-layer widths: the format knobs (dse/models/widths.py)

ROOT = Path(__file__).resolve().parent.parent
WEIGHTS = ROOT / "models" / "digits_mlp.npz"


@pytest.fixture(scope="module")
def mlp():
    return DenseNet.from_arrays(read_weights(WEIGHTS))


def test_format_knobs_set_each_layers_widths(digits, mlp):
    q = mlp.quantize(dtype="int8", calibration=digits.x_train,
                     formats=Formats.of({"weight_bits@0": 3, "act_bits": 6, "weight_bits@W2": 5}))
    assert q.widths == Widths(6, (3, 5), (6, 6), (None, None))
    assert np.abs(q.layers[0].W).max() == 3 and np.abs(q.layers[1].W).max() == 15
    assert q.input_qmax == 31 and q.layers[0].hi == 63        # the input signed, the ReLU's output unsigned: 6 bits each
    xs = q.quantize_input(digits.x_test)
    assert np.abs(xs).max() <= 31
    built = q.built()                                   # the golden model is what tinygrad computes
    assert np.array_equal(zoo.tinygrad_result(built, {**q.arrays(), "x": xs[0]}).reshape(-1), q.reference(xs[:1])[0])
    acc = (q.reference(xs).argmax(1) == digits.y_test).mean()
    assert acc > 0.9


def test_one_layer_matters_more_than_the_other(digits, mlp):
    """Mixed precision: 2-bit weights in the first layer keep 93% of the digits; in the last
    they lose two thirds (measured: 93.33% and 33.56%; 8 bits 97.56%)."""
    def acc(**k):
        q = mlp.quantize(dtype="int8", calibration=digits.x_train, formats=Formats.of(k))
        return (q.reference(q.quantize_input(digits.x_test)).argmax(1) == digits.y_test).mean()
    first, last = acc(**{"weight_bits@0": 2}), acc(**{"weight_bits@1": 2})
    assert first > 0.9 > 0.5 > last


def test_format_knobs_on_a_cnn_leave_declared_layers_alone(tmp_path, digits):
    path, _ = cnn_onnx(tmp_path / "cnn.onnx")
    net = read_chain(path)
    q = net.quantize(dtype="int8", calibration=digits.x_train, formats=Formats.of({"weight_bits@conv_weight": 3}))
    assert np.abs(q.arrays()["W1"]).max() == 3 and np.abs(q.arrays()["W2"]).max() == 127


def _format_spec(tmp_path, knobs: dict, dtypes=("int8", "fp32"), gemv: bool = True) -> Path:
    return _write(tmp_path, {"study": "bits", "target": "ecp5",
                             "models": [{"name": "mlp", "weights": str(WEIGHTS), "data": {"dataset": "sklearn:digits"}},
                                        {"name": "gemv", "builtin": "gemv", "params": {"M": 4, "K": 8}}][:1 + gemv],
                             "dtypes": list(dtypes), "knobs": knobs, "objectives": ["luts", "accuracy"],
                             "constraints": {"accuracy_min": 0.9}, "search": {"sampler": "grid"}})


def test_format_knobs_in_a_spec(tmp_path, capsys):
    path = _format_spec(tmp_path, {"weight_bits@0": [2, 4, 8], "weight_bits@W2": [4, 8]})
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "illegal" not in out           # format knobs are not HardwareConfig's
    s = load_spec(path)
    # int8 of the network: 3 x 2; its fp32 and the gemv's two dtypes: one point each (the first values)
    assert s.space_size == 6 + 1 + 2
    left = {why for _, why in s.not_applicable_points()}
    assert left == {"weight_bits sets the widths of a network the tool quantises, in an integer dtype; elsewhere "
                    "it is the same design as weight_bits@0=2, which the space holds",
                    "weight_bits sets the widths of a network the tool quantises, in an integer dtype; elsewhere "
                    "it is the same design as weight_bits@W2=4, which the space holds"}
    assert "not applicable" in out
    p = next(p for p in s.points() if p.dtype == "int8")
    assert p.hardware_config() == HardwareConfig() and p.formats().as_dict() == {"weight_bits@0": 2, "weight_bits@W2": 4}
    (tmp_path / "d").mkdir()
    digits = load_spec(_format_spec(tmp_path / "d", {"scale_digits": [1, 2]}))
    assert {p.formats().as_dict()["scale_digits"] for p in digits.points() if p.dtype == "int8"} == {1, 2}
    assert main(["layers", str(path), "--model", "mlp"]) == 0
    out = capsys.readouterr().out
    assert "  0  k0_r_32_64 = W1  (lanes up to 32, reduce_unroll up to 64)\n" in out
    assert ("mlp: 2 conv/dense layers for weight_bits@, act_bits@ and scale_digits@\n  0  W1 = k0_r_32_64\n"
            "  1  W2 = k1_r_10_32\n") in out


@pytest.mark.parametrize("knobs, message", [
    ({"weight_bits@fc": [4]}, "knobs.weight_bits@fc: model 'mlp' has no layer 'fc' to quantise; its conv/dense "
                              "layers: 0 (W1 or k0_r_32_64), 1 (W2 or k1_r_10_32)"),
    ({"weight_bits": [1, 4]}, "knobs.weight_bits[0]: expected an integer >= 2"),
    ({"act_bits@1": [4]}, "knobs.act_bits@1: the last layer outputs int32 logits, not activations"),
    ({"weight_bits": [4, 4]}, "knobs.weight_bits[1]: duplicate value 4 (also at [0])"),
    ({"scale_digits": [1, 9]}, "knobs.scale_digits[1]: expected at most 8 (non-zero signed digits of a requantisation "
                                            "multiplier), got 9"),
    ({"scale_digits@W2": [1]}, "knobs.scale_digits@W2: the last layer outputs int32 logits, not activations"),
    ({"act_bits@k1_r_10_32": [4]}, "knobs.act_bits@k1_r_10_32: the last layer outputs int32 logits, not activations"),
    ({"weight_bits@W1": [2, 9]}, "knobs.weight_bits@W1[1]: weight_bits@W1=9 does not fit int8: its weights hold 2 to "
                                 "8 bits"),
])
def test_bad_format_knobs_are_one_line_exit_2(tmp_path, capsys, knobs, message):
    assert main(["validate", str(_format_spec(tmp_path, knobs))]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1


@pytest.mark.parametrize("dtypes, knobs, message", [
    (("int4", "int5"), {"act_bits": [4, 6]}, "knobs.act_bits[1]: act_bits=6 fits none of the spec's integer dtypes "
                                             "(bits of activations: int4 2 to 4, int5 2 to 5)"),
    (("fp32", "fp16"), {"weight_bits": [4]}, "knobs.weight_bits: weight_bits sets the widths of a network the tool "
                                             "quantises, in an integer dtype; no point of the spec is one (dtypes: "
                                             "fp32, fp16)"),
])
def test_a_format_knob_no_point_can_take_is_a_usage_error(tmp_path, capsys, dtypes, knobs, message):
    assert main(["validate", str(_format_spec(tmp_path, knobs, dtypes))]) == 2
    assert capsys.readouterr() == ("", f"error: {message}\n")


def test_where_a_format_knob_does_not_apply_it_is_said_once(tmp_path, capsys):
    """A width one dtype holds and another not leaves out the other's points; a float dtype's
    points run without the knob: both said once, and --set refuses either for one point."""
    path = _format_spec(tmp_path, {"weight_bits": [8, 4]}, ("int4", "int8", "fp32"))
    assert main(["validate", str(path)]) == 0
    why = "sets the widths of a network the tool quantises, in an integer dtype"
    assert capsys.readouterr().out.splitlines()[1:] == [
        "not applicable, left out of the search space: 1 point (e.g. mlp int4): weight_bits=8 does not fit int4: its "
        "weights hold 2 to 4 bits",
        f"not applicable, left out of the search space: 4 points (e.g. mlp fp32): weight_bits {why}; elsewhere it is "
        "the same design as weight_bits=8, which the space holds",
        f"not applied: weight_bits {why}: the points of mlp fp32, gemv int4, gemv int8, gemv fp32 run without it"]
    for dtype, sets, message in [
            ("int4", ["weight_bits=6"], "--set weight_bits=6: does not fit int4: its weights hold 2 to 4 bits"),
            ("int4", [], "weight_bits=8, the spec's first value, does not fit int4: its weights hold 2 to 4 bits; give "
                         "one with --set weight_bits=N"),
            ("fp32", ["weight_bits@W1=4"], f"--set weight_bits@W1=4: weight_bits {why}; mlp fp32 is not one")]:
        assert main(["eval", str(path), "--model", "mlp", "--dtype", dtype,
                     *(a for s in sets for a in ("--set", s))]) == 2
        assert capsys.readouterr().err == f"error: {message}\n"


def test_a_layer_has_one_pair_of_names_for_both_kinds_of_knob(tmp_path, capsys):
    """lanes@W1 is the kernel that computes W1; weight_bits@k1_r_10_32 the conv/dense layer that
    kernel computes: each name good for either kind of knob."""
    from dse.models.model import kernel_config, layer_kernels
    path = _format_spec(tmp_path, {"lanes@W1": [1, 4], "weight_bits@k1_r_10_32": [4]}, ("int8",), gemv=False)
    assert main(["validate", str(path)]) == 0
    m = load_spec(path).model("mlp")
    assert layer_kernels(m, "int8") == {"W1": 0, "W2": 1}
    config = kernel_config(m, "int8", HardwareConfig.from_dict({"lanes@W1": 4, "reduce_unroll@0": 2}))
    assert config.resolve_layers(["k0_r_32_64", "k1_r_10_32"]).layers == ((0, (("lanes", 4), ("reduce_unroll", 2))),)
    trained = m.with_formats(Formats.of({"weight_bits@k1_r_10_32": 4, "act_bits@0": 6})).trained
    assert trained.kernel_formats("int8") == Formats.of({"weight_bits@W2": 4, "act_bits@0": 6})
    with pytest.raises(ValueError, match=r"weight_bits@k1_r_10_32: layer k1_r_10_32 computes W2, given weight_bits "
                                         r"twice \(by two names\)"):
        m.with_formats(Formats.of({"weight_bits@k1_r_10_32": 4, "weight_bits@W2": 6})).trained.kernel_formats("int8")
    for knob in ("lanes@W9", "weight_bits@k9"):
        assert main(["validate", str(_format_spec(tmp_path, {knob: [4]}, ("int8",), gemv=False))]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: knobs.lanes@W9: model 'mlp' (int8) has no layer 'W9'; its 2 layers: 0 (k0_r_32_64 or W1), 1 "
        "(k1_r_10_32 or W2)",
        "error: knobs.weight_bits@k9: model 'mlp' has no layer 'k9' to quantise; its conv/dense layers: 0 (W1 or "
        "k0_r_32_64), 1 (W2 or k1_r_10_32)"]


@pytest.mark.slow
def test_both_names_of_a_layer_evaluate_the_same_design(tmp_path, capsys):
    import json
    rows = []
    for i, knobs in enumerate([{"lanes@W1": [4], "weight_bits@k1_r_10_32": [4], "act_bits@k0_r_32_64": [6]},
                               {"lanes@0": [4], "weight_bits@W2": [4], "act_bits@0": [6]}]):
        (tmp_path / str(i)).mkdir()
        path = _format_spec(tmp_path / str(i), knobs, ("int8",), gemv=False)
        assert main(["eval", str(path), "--model", "mlp", "--dtype", "int8", "--no-synth", "--json",
                     "--workdir", str(tmp_path / f"w{i}")]) == 0
        rows.append(json.loads(capsys.readouterr().out))
    keys = ("status", "cycles", "cycle_breakdown", "mean_weight_bits", "mean_act_bits", "accuracy", "correct")
    assert [rows[0][k] for k in keys] == [rows[1][k] for k in keys]
    assert (rows[0]["cycles"], rows[0]["mean_weight_bits"], rows[0]["mean_act_bits"]) == (884, 6.0, 7.0)


@pytest.mark.slow
def test_the_accuracy_constraint_steers_a_mixed_precision_search(tmp_path, fake_synth):
    """Per-layer widths as parameters: the points whose accuracy falls below accuracy_min are
    infeasible, so the front holds only those that keep it (every sample bit-exact)."""
    d = yaml.safe_load(_format_spec(tmp_path, {"weight_bits@0": [2, 8], "weight_bits@1": [2, 8]},
                                    dtypes=("int8",)).read_text())
    d["models"] = d["models"][:1]
    s = load_spec(_write(tmp_path, d))
    r = sweep(s, options(tmp_path, sim_backend="cxxrtl"))
    df = load_results(r.results_dir)
    assert len(df) == 4 and (df["status"] == "OK").all() and df["correct"].all()
    by = {(row["weight_bits@0"], row["weight_bits@1"]): row for _, row in df.iterrows()}
    assert by[(8, 8)]["accuracy"] == pytest.approx(0.9756, abs=1e-4) and by[(2, 8)]["accuracy"] > 0.9
    assert by[(8, 2)]["accuracy"] < 0.5 and not by[(8, 2)]["feasible"] and not by[(2, 2)]["feasible"]
    assert by[(2, 8)]["feasible"] and by[(8, 8)]["feasible"]
    assert by[(2, 8)]["mean_weight_bits"] == 5 and by[(2, 8)]["mean_act_bits"] == 8
    md = (r.results_dir / "pareto.md").read_text()
    assert ("mlp: Smallest format within 1 point of the float model's accuracy (97.33%): **int8 weight_bits@0=8 "
            "weight_bits@1=8** (8-bit weights, 8-bit activations): 97.56%") in md
    assert "## mlp: accuracy against number format" in md


# ---------------------------------------------------------------------------------------------
# reports: accuracy against number format (dse/format_table.py)

def _trials():
    import pandas as pd
    rows = [("int8", None, 0.975, 600, 2, True, 0), ("int8", None, 0.975, 1400, 2, True, 1),
            ("int8", 4, 0.967, 450, 1, True, 2), ("int8", 2, 0.28, 300, 1, True, 3),
            ("int8", 3, 0.907, 380, 1, True, 4), ("fp32", None, 0.973, 5600, 6, True, 5),
            ("fp8e4m3", None, 0.973, 3500, 2, False, 6)]
    return pd.DataFrame([{"model": "mlp", "dtype": d, "weight_bits": w, "accuracy": a, "accuracy_float": 0.9733,
                          "luts": l, "ffs": 100, "bram": b, "dsp": 1, "cycles": 2444, "feasible": f, "correct": True,
                          "number": n} for d, w, a, l, b, f, n in rows])


def test_the_smallest_format_within_an_accuracy_loss_is_named():
    from dse.format_table import format_rows, smallest_format
    rows = format_rows(_trials(), "mlp", ["lanes", "weight_bits"])
    assert list(rows["format"]) == ["fp32", "int8", "fp8e4m3", "int8 weight_bits=4", "int8 weight_bits=3",
                                    "int8 weight_bits=2"]
    assert rows.set_index("format").loc["int8", "trial"] == 0           # the cheapest design of the format
    assert smallest_format(rows, 0.01) == ("Smallest format within 1 point of the float model's accuracy (97.33%): "
                                           "**int8 weight_bits=4** (4-bit weights, 8-bit activations): 96.70%, "
                                           "450 LUTs, 1 block RAM (trial 2).")
    assert "**int8 weight_bits=3**" in smallest_format(rows, 0.07)
    assert "**int8**" in smallest_format(rows, 0.0)                      # 97.5% is above float
    assert smallest_format(rows[rows["format"] == "int8 weight_bits=2"], 0.01).startswith(
        "No feasible format within 1 point")


# ---------------------------------------------------------------------------------------------
# post-training quantisation to N bits: intN and wNaM (dse.models.formats)

@pytest.mark.parametrize("dtype, w, a", [("int2", 2, 2), ("int3", 3, 3), ("int4", 4, 4), ("int6", 6, 6),
                                         ("w4a8", 4, 8), ("w2a6", 2, 6), ("int16", 16, 13)])
def test_the_quantiser_takes_every_signed_format(digits, mlp, tmp_path, dtype, w, a):
    """Weights on a w-bit grid and activations in a bits: each input declared at its width (so the
    hardware is sized to it), the golden model equal to tinygrad's, for the MLP and the CNN."""
    cnn, _ = cnn_onnx(tmp_path / "cnn.onnx")
    for net in (mlp, read_chain(cnn)):
        q = net.quantize(dtype=dtype, calibration=digits.x_train.reshape(len(digits.x_train), -1))
        built = q.built()
        assert {k: t for k, (_, t) in built.inputs.items() if k[0] in "xW"} == \
            {"x": f"int{a}", **{k: f"int{w}" for k in q.arrays() if k[0] == "W"}}
        qmax_w, qmax_a = 2 ** (w - 1) - 1, 2 ** (a - 1) - 1
        assert all(np.abs(v).max() <= qmax_w for k, v in q.arrays().items() if k[0] == "W")
        xs = q.quantize_input(digits.x_test[:2].reshape(2, -1))
        assert np.abs(xs).max() <= qmax_a and xs.dtype == zoo.storage(f"int{a}")
        # the hidden activations follow a ReLU: unsigned, all a bits ([0, 3] at int2, not {0, 1})
        hidden = ([(0, layer.hi) for layer in q.layers if layer.M is not None] if isinstance(net, DenseNet)
                  else [(s.lo, s.hi) for s in q.steps if s.M is not None])
        assert hidden == [(0, 2 ** a - 1)] and q.mean_bits() == (w, a)
        got = zoo.tinygrad_result(built, {**q.arrays(), "x": xs[0]})
        assert np.array_equal(np.asarray(got).reshape(-1), q.reference(xs)[0].reshape(-1))


def test_an_activation_without_a_relu_stays_signed(digits):
    """A conv with no ReLU after it outputs signed activations ([-qmax, qmax], qmax = 2**(b-1) - 1),
    the next one's ReLU unsigned ones ([0, 2**b - 1]), each stored at b bits; the golden model
    equals tinygrad's."""
    from dse.models.convnet import Conv, Flatten, LayerNet, Linear
    rng = np.random.default_rng(3)
    net = LayerNet((1, 1, 8, 8), (Conv(rng.normal(0, 0.3, (3, 1, 3, 3)), rng.normal(0, 0.1, 3), (1, 1), (1, 1, 1, 1)),
                                  Conv(rng.normal(0, 0.3, (4, 3, 3, 3)), rng.normal(0, 0.1, 4), (2, 2), (0, 0, 0, 0),
                                       relu=True),
                                  Flatten(), Linear(rng.normal(0, 0.3, (10, 36)), rng.normal(0, 0.1, 10))))
    x = digits.x_train.reshape(-1, 1, 8, 8)
    for dtype, b in (("int3", 3), ("int4", 4), ("w8a6", 6)):
        q = net.quantize(dtype=dtype, calibration=x)
        assert [(s.lo, s.hi) for s in q.steps if s.M is not None] == [(-(2 ** (b - 1) - 1), 2 ** (b - 1) - 1),
                                                                       (0, 2 ** b - 1)]
        assert q.mean_bits()[1] == b
        xs = q.quantize_input(digits.x_test[:3])
        got = zoo.tinygrad_result(q.built(), {**q.arrays(), "x": xs[0]})
        assert np.array_equal(np.asarray(got).reshape(-1), q.reference(xs[:1])[0])


def test_accuracy_grows_with_the_bits(digits, mlp):
    """The digits MLP quantised to each width (numpy integer model, 450 samples; the hardware
    runs are the slow test and configs/digits_formats.yaml)."""
    acc = {}
    for dtype in ("int2", "int3", "int4", "int6", "int8", "w4a8"):
        q = mlp.quantize(dtype=dtype, calibration=digits.x_train)
        acc[dtype] = (q.reference(q.quantize_input(digits.x_test)).argmax(1) == digits.y_test).mean()
    assert acc["int2"] < 0.5 < acc["int3"] < acc["int4"] < acc["int6"] <= acc["int8"]
    assert acc["int4"] > 0.94 and acc["w4a8"] > acc["int4"] and acc["int8"] == pytest.approx(0.9756, abs=1e-4)


def test_formats_the_tool_cannot_quantise_to_are_named(tmp_path, capsys):
    d = yaml.safe_load(_format_spec(tmp_path, {}, dtypes=("uint8",)).read_text())
    d["models"] = d["models"][:1]
    d.pop("knobs")
    assert main(["validate", str(_write(tmp_path, d))]) == 2
    assert capsys.readouterr().err == ("error: models[0].weights: dtype uint8: a trained float network runs in a "
                                       "signed integer format (int8, int4, w4a8, ...: quantised) or a float dtype, "
                                       "not uint8\n")


@pytest.mark.slow
@pytest.mark.parametrize("model, dtype", [("mlp", "int4"), ("mlp", "w4a8"), ("cnn", "int3")])
def test_narrow_formats_run_bit_exact_on_every_sample(tmp_path, capsys, model, dtype):
    """Through `dse eval`: the hardware sized to the format, every test sample bit-exact against
    the integer model, cycles equal to the cycle model."""
    from helpers import eval_model, model_spec
    if model == "mlp":
        spec = model_spec(tmp_path, [dtype], weights=str(WEIGHTS), data={"dataset": "sklearn:digits"})
    else:
        spec = model_spec(tmp_path, [dtype], onnx=str(ROOT / "models" / "digits_cnn.onnx"),
                          data={"dataset": "sklearn:digits", "samples": 100})
    row = eval_model(capsys, spec, dtype)
    assert row["status"] == "OK" and row["correct"] and row["cycles"] == row["cycles_model"], row
    assert row["samples"] == (450 if model == "mlp" else 100) and row["overflow_safe"] is True
    w, a = {"int4": (4, 4), "w4a8": (4, 8), "int3": (3, 3)}[dtype]
    assert (row["mean_weight_bits"], row["mean_act_bits"]) == (w, a)


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["sequential", "dataflow"])
def test_the_trained_cnn_at_a_target_clock_is_bit_exact(tmp_path, capsys, schedule):
    """The digits CNN at target_mhz 200: its convolution and dense layers address their weights
    with scaled counters (i0 * 72) in loops of two steps (the sum, then the bias), which the
    GEMV-shaped tests did not have; every sample bit-exact, cycles as modelled."""
    from helpers import eval_model, model_spec
    spec = model_spec(tmp_path, ["int8"], onnx=str(ROOT / "models" / "digits_cnn.onnx"),
                      data={"dataset": "sklearn:digits", "samples": 30})
    knobs = ["--set", "fp_pipeline=3", "--set", "target_mhz=200", "--set", f"schedule={schedule}"]
    if schedule == "dataflow":
        knobs += ["--set", "fold=auto", "--set", "target_interval=512"]
    row = eval_model(capsys, spec, "int8", *knobs)
    assert row["status"] == "OK" and row["correct"] and row["cycles"] == row["cycles_model"], row
    assert row["samples"] == 30


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
def test_a_cnn_chain_in_a_float_format_is_bit_exact(tmp_path, digits, dtype):
    """A CNN chain's float points run its own build (dse/models/floatnet.py), every sample
    bit-exact against the golden model in the default fp_semantics (fp16: tinygrad's emulation,
    exact products and one rounding per layer; bf16, fp32: products rounded to the dtype;
    float32 sums in the kernels' order), where the whole ONNX graph could only be checked
    within a tolerance."""
    from dse.models.accuracy import run_samples
    from dse.models.data import DataSpec, load_dataset
    from dse.models.floatnet import FloatNet
    data = load_dataset(DataSpec(dataset="sklearn:digits", samples=12))
    net = read_chain(ROOT / "models" / "digits_cnn.onnx")
    r = run_samples(net=net, dtype=dtype, data=data, backend="cxxrtl")
    assert r.samples == 12 and r.accuracy == (FloatNet(net).reference(dtype, data.x_test).argmax(1) == data.y_test).mean()


@pytest.mark.slow
def test_dse_eval_exports_the_point_with_its_format_knobs(tmp_path, capsys):
    """`dse eval --set weight_bits=2 --export`: the exported weights are the 2-bit ones the point
    was evaluated with (export_point applies the point's format knobs as evaluate does)."""
    import json
    path = _format_spec(tmp_path, {"weight_bits": [2, 8]})
    out = tmp_path / "hw"
    assert main(["eval", str(path), "--model", "mlp", "--dtype", "int8", "--set", "weight_bits=2", "--no-synth",
                 "--workdir", str(tmp_path / "work"), "--json", "--export", str(out)]) == 0
    capsys.readouterr()
    ports = json.loads((out / "interface.json").read_text())["host_ports"]
    weights = [p for p in ports if p["role"] == "input" and p["width"] <= 2]
    assert weights, [(p["name"] if "name" in p else p["file"], p["width"]) for p in ports]
    for p in weights:                   # two's complement 2-bit words: 0..3
        assert all(int(w, 16) <= 3 for w in (out / p["file"]).read_text().split() if "x" not in w)


def test_dse_eval_set_on_a_layer_the_network_lacks_is_a_usage_error(tmp_path, capsys):
    """`--set weight_bits@W9=4` on a 2-layer network: exit 2 and one line listing its layers, before
    anything is built (it was a FAILed build, exit 1)."""
    path = _format_spec(tmp_path, {"weight_bits": [8]})
    rc = main(["eval", str(path), "--model", "mlp", "--dtype", "int8", "--set", "weight_bits@W9=4", "--no-synth",
               "--workdir", str(tmp_path / "work")])
    err = capsys.readouterr().err
    assert rc == 2 and err == ("error: --set weight_bits@W9=4: model 'mlp' has no layer 'W9' to quantise; its "
                               "conv/dense layers: 0 (W1 or k0_r_32_64), 1 (W2 or k1_r_10_32)\n")    # as dse validate says
    assert not (tmp_path / "work").exists()
