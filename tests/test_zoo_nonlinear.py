"""The nonlinear zoo models (softmax, layernorm, tanh/GELU/sigmoid, attention) through dse.

They have no numpy golden model: every point is checked against tinygrad's own result within
the float tolerance the row states, cycles against the model (dse/evaluate.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from dse.evaluate import EvalContext, Status, evaluate
from dse.spec import DesignPoint, SpecError, load_spec, parse_spec
from dse.frozen import FrozenMap
from dse.models.zoo import ZOO

ROOT = Path(__file__).resolve().parent.parent
NONLINEAR = ["mlp_softmax", "layernorm", "act_mlp", "attention"]


def spec(dtypes=("fp32", "bf16", "fp16")):
    return parse_spec({"study": "nl", "target": "ecp5",
                       "models": [{"name": m, "builtin": m} for m in NONLINEAR],
                       "dtypes": list(dtypes), "knobs": {"fp_pipeline": [1]},
                       "objectives": ["cycles", "luts"], "search": {"sampler": "grid"}})


def run(model: str, dtype: str, tmp_path):
    ctx = EvalContext.from_spec(spec(), sim_backend="pysim", synthesize=False)
    return evaluate(ctx, DesignPoint(model, dtype, FrozenMap({"fp_pipeline": 1})), tmp_path)


def test_registered_without_a_golden_model():
    for name in NONLINEAR:
        assert ZOO[name].reference is None and ZOO[name].floats_only and ZOO[name].doc


def test_the_spec_in_configs_validates():
    s = load_spec(ROOT / "configs" / "nonlinear.yaml")
    assert [m.name for m in s.models] == NONLINEAR and not any(m.golden for m in s.models)


def test_an_integer_dtype_is_refused_naming_the_model():
    with pytest.raises(SpecError, match=r"models\[0\]\.builtin.*'mlp_softmax' needs a float dtype.*int8"):
        spec(("fp32", "int8"))


def test_layernorm_bf16_within_the_tolerance_it_states(tmp_path):
    m = run("layernorm", "bf16", tmp_path)
    assert m.status is Status.OK, m.error
    assert m.correct and m.cycles == m.cycles_model
    assert "vs tinygrad's result (no numpy golden model)" in m.check_rule
    assert 0 < m.max_abs_err <= 18 * 2.0 ** -7
    # the division by sqrt(var + eps) has no finite bound in the interval analysis
    assert m.overflow_safe is None and "not proven either way" in " ".join(m.notes)
    assert m.overflow_confirmed is None          # no verdict, so nothing was confirmed


@pytest.mark.slow
@pytest.mark.parametrize("model, dtype", [("mlp_softmax", "fp32"), ("act_mlp", "fp16"), ("attention", "bf16")])
def test_nonlinear_points_are_correct(model, dtype, tmp_path):
    m = run(model, dtype, tmp_path)
    assert m.status is Status.OK, m.error
    assert m.correct and m.cycles == m.cycles_model and "tinygrad" in m.check_rule


@pytest.mark.slow
@pytest.mark.parametrize("model, dtype", [("layernorm", "fp16"), ("mlp_softmax", "fp32")])
def test_nonlinear_points_at_a_target_clock(model, dtype, tmp_path):
    """At a target clock the dividers and square roots take a boundary up to every recurrence
    row (recurrence.CLOCK_CUTS), and softmax's float32 denominator ends its kernel
    (passes/split_sums.py): still within tolerance, cycles as modelled."""
    knobs = {"fp_pipeline": 3, "target_mhz": 150}
    s = parse_spec({"study": "nl", "target": "ecp5", "models": [{"name": model, "builtin": model}],
                    "dtypes": [dtype], "knobs": {k: [v] for k, v in knobs.items()},
                    "objectives": ["cycles", "luts"], "search": {"sampler": "grid"}})
    ctx = EvalContext.from_spec(s, sim_backend="cxxrtl", synthesize=False)
    m = evaluate(ctx, DesignPoint(model, dtype, FrozenMap(knobs)), tmp_path)
    assert m.status is Status.OK, m.error
    assert m.correct and m.cycles == m.cycles_model and "tinygrad" in m.check_rule
