"""Per-model number formats: a model's own `dtypes:` in a spec (a float-only model beside an
ONNX network the tool quantises, in one study)."""
from __future__ import annotations

import pytest
import yaml

from dse.cli import main
from dse.frozen import FrozenMap
from dse.results import pareto_markdown
from dse.spec import DesignPoint, load_spec
from dse.study.space import space_fingerprint
from helpers import cnn_onnx


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
    assert s.search.trials == 6 and not s.not_applicable()
    # a sampler may propose a pairing the models do not run: pruned with why, not compiled
    assert s.left_out(DesignPoint("soft", "int8", FrozenMap({"lanes": 1}))) == "model soft runs fp16 only (its dtypes)"
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
