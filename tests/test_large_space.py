"""Large design spaces (issue 54): the `prune` knob, the multi-fidelity default of large grids,
the progress line's counts, the cheap pass's grouping and the fast non-dominated sorting."""
from __future__ import annotations

import datetime
import io
import itertools
from pathlib import Path

import numpy as np
import pytest

from dse.cli import CliError, main, parse_sets
from dse.progress import Progress
from dse.spec import LARGE_GRID, PRUNE_KNOB, DesignPoint, hardware_knobs, parse_spec

ROOT = Path(__file__).resolve().parent.parent
JET = {"name": "jet", "weights": str(ROOT / "models" / "jet_mlp.npz"), "data": {"file": str(ROOT / "models" / "jet_data.npz")}}


def spec_dict(knobs: dict, models=(JET,), search=None) -> dict:
    return {"study": "s", "target": "ecp5", "models": [dict(m) for m in models], "dtypes": ["int8"],
            "knobs": knobs, "objectives": ["cycles", "luts"],
            "search": search or {"sampler": "grid", "seed": 0}}


# ---------------------------------------------------------------------------------------------
# prune: a knob of the model

def test_prune_is_a_knob_of_the_model_not_of_the_hardware():
    spec = parse_spec(spec_dict({PRUNE_KNOB: [0, 0.5], "lanes": [1, 4]}))
    assert [k.name for k in spec.knobs] == [PRUNE_KNOB, "lanes"]
    assert dict(zip([k.name for k in spec.knobs], [k.values for k in spec.knobs]))[PRUNE_KNOB] == (0.0, 0.5)
    assert hardware_knobs({PRUNE_KNOB: 0.5, "lanes": 4}) == {"lanes": 4}
    model = spec.models[0]
    pruned = DesignPoint(model.name, "int8", {PRUNE_KNOB: 0.5, "lanes": 4}).model_of(model)
    dense = DesignPoint(model.name, "int8", {PRUNE_KNOB: 0.0, "lanes": 4}).model_of(model)
    zeros = [float(np.mean(layer.W == 0)) for layer in pruned.trained.net().layers]
    assert all(abs(z - 0.5) < 0.02 for z in zeros), zeros          # each layer keeps round(0.5 x n)
    original = model.trained.net().layers
    assert all(np.array_equal(a.W, b.W) for a, b in zip(dense.trained.net().layers, original))     # 0: not pruned


@pytest.mark.parametrize("knobs, models, message", [
    ({PRUNE_KNOB: [0, 1.0]}, (JET,),
     "knobs.prune[1]: expected a sparsity from 0 (no pruning) up to, not including, 1"),
    ({PRUNE_KNOB: [0.5]}, ({**JET, "prune": 0.25},),
     "knobs.prune: model jet has a prune: of its own (0.25); give the sparsities in one place"),
    ({PRUNE_KNOB: [0.5]}, ({"name": "g", "builtin": "gemv", "params": {"M": 4, "K": 8}},),
     "knobs.prune: pruning applies to a trained dense network the tool quantises"),
    ({PRUNE_KNOB: [0.9999]}, (JET,), "knobs.prune[0]: model jet: 0.9999 leaves layer 1 (W1, 1024 weights) no weight"),
])
def test_bad_prune_knobs_are_one_line_exit_2(tmp_path, capsys, knobs, models, message):
    import yaml
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec_dict(knobs, models), sort_keys=False))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_set_prune_on_the_command_line():
    assert parse_sets(["prune=0.5", "lanes=4"]) == {"prune": 0.5, "lanes": 4}
    # a knob that is off by default is turned off with `null`, as in a spec; another cannot be off
    assert parse_sets(["target_mhz=null"], {"target_mhz": 150, "fp_pipeline": 3}) == {"target_mhz": None}
    with pytest.raises(CliError, match=r"lanes=null: .*\(lanes cannot be off\)"):
        parse_sets(["lanes=null"])
    with pytest.raises(CliError, match=r"--set prune=1\.5: expected a sparsity from 0"):
        parse_sets(["prune=1.5"])


# ---------------------------------------------------------------------------------------------
# a large grid is searched multi-fidelity unless the spec says otherwise

def test_a_grid_of_a_thousand_points_or_more_defaults_to_multi_fidelity():
    big = {"weight_bits@0": [4, 5, 6, 7, 8], "weight_bits@1": [4, 5, 6, 7, 8], "lanes@0": [1, 2, 4, 8, 16],
           "lanes@1": [1, 2, 4, 8, 16], "scale_digits": [1, 2]}           # 1,250 points
    assert np.prod([len(v) for v in big.values()]) >= LARGE_GRID
    assert parse_spec(spec_dict(big)).search.fidelity == "multi"
    assert parse_spec(spec_dict(big, search={"sampler": "grid", "seed": 0, "fidelity": "full"})).search.fidelity == "full"
    small = {"weight_bits@0": [4, 8], "lanes@0": [1, 4]}
    assert parse_spec(spec_dict(small)).search.fidelity == "full"
    assert parse_spec(spec_dict(big, search={"sampler": "nsga2", "trials": 50, "seed": 0})).search.fidelity == "full"


# ---------------------------------------------------------------------------------------------
# the progress line counts what the multi-fidelity pass did

def test_the_progress_line_counts_points_estimated_synthesised_and_skipped_by_why():
    out = io.StringIO()
    spec = parse_spec(spec_dict({"lanes": [1, 4]}))
    p = Progress(total=5, initial=0, objectives=spec.objectives, mode="lines", stream=out)
    base = {"model": "jet", "dtype": "int8", "knobs": {"lanes": 1}, "status": "OK", "values": [10.0, 100.0],
            "feasible": True, "cached": False, "seconds": 0.1}
    for n, (synth, why) in enumerate([(True, None), (False, "dominated"), (False, "dominated"),
                                      (False, "infeasible"), (True, None)]):
        p.update({**base, "number": n, "synthesized": synth, "skipped": why, "estimated": not synth})
    assert p.fidelity() == "estimated 5, synthesised 2, skipped 3 (dominated 2, infeasible 1)"
    last = out.getvalue().splitlines()[-1]
    assert "| estimated 5, synthesised 2, skipped 3 (dominated 2, infeasible 1), fail 0, cached 0, ETA " in last
    full = Progress(total=1, initial=0, objectives=spec.objectives, mode="lines", stream=io.StringIO())
    full.update({**base, "number": 0})
    assert full.fidelity() == ""                       # a full sweep says nothing of it


def test_the_eta_follows_the_pace_of_the_recent_trials(monkeypatch):
    """A grid queued front first synthesises early and skips late: the ETA must take the recent
    pace, not the whole run's (slow syntheses, then a RECENT-long stretch of fast skips)."""
    from dse import progress as progress_module
    clock = [0.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: clock[0])
    spec = parse_spec(spec_dict({"lanes": [1, 4]}))
    total = 10 + 2 * progress_module.RECENT
    p = Progress(total=total, initial=0, objectives=spec.objectives, mode="off")
    event = {"model": "jet", "dtype": "int8", "knobs": {}, "status": "OK", "number": 0}
    for _ in range(10):                             # ten syntheses of 60 s
        clock[0] += 60.0
        p.update(event)
    assert p.eta() == str(datetime.timedelta(seconds=60 * (total - 10)))
    for _ in range(progress_module.RECENT):         # then skips of 0.5 s
        clock[0] += 0.5
        p.update(event)
    assert p.eta() == str(datetime.timedelta(seconds=round(0.5 * progress_module.RECENT)))
    for _ in range(progress_module.RECENT):
        p.update(event)
    assert p.eta() == "0:00:00"


# ---------------------------------------------------------------------------------------------
# the cheap pass: grouped by build, rows in the points' order

def test_cheap_rows_group_points_by_build_and_return_them_in_order(monkeypatch):
    from dse.study import order
    spec = parse_spec(spec_dict({"weight_bits@0": [4, 8], "lanes": [1, 4, 16]}))
    points = [DesignPoint("jet", "int8", {"weight_bits@0": w, "lanes": n})
              for n, w in itertools.product([1, 4, 16], [4, 8])]      # builds interleaved
    seen = []

    def fake(spec_, options_, point):
        seen.append(point)
        return {"point": point}
    monkeypatch.setattr(order, "cheap_row", fake)

    class Options:
        n_jobs = 1
    rows = order.cheap_rows(spec, Options(), points)
    assert [r["point"] for r in rows] == points
    widths = [p.knobs["weight_bits@0"] for p in seen]
    assert widths == sorted(widths)                    # each build's points run together


# ---------------------------------------------------------------------------------------------
# non-dominated sorting

def _naive_ranks(vectors):
    ranks, left, rank = [-1] * len(vectors), set(range(len(vectors))), 0
    while left:
        front = {i for i in left if not any(all(a <= b for a, b in zip(vectors[j], vectors[i]))
                                            and vectors[j] != vectors[i] for j in left)}
        for i in front:
            ranks[i] = rank
        left -= front
        rank += 1
    return ranks


@pytest.mark.parametrize("seed", range(5))
def test_pareto_ranks_equal_the_definition_on_random_vectors_with_ties(seed):
    from dse.study.order import pareto_ranks
    rng = np.random.default_rng(seed)
    vectors = rng.integers(0, 6, size=(120, 3)).astype(float).tolist()     # many equal values and points
    assert pareto_ranks(vectors, max_ranks=1000) == _naive_ranks(vectors)
    capped = pareto_ranks(vectors, max_ranks=2)
    assert capped == [min(r, 2) for r in _naive_ranks(vectors)]


# ---------------------------------------------------------------------------------------------
# the gate's estimator is fitted once per set of synthesised points

def test_the_gates_estimator_is_fitted_again_only_when_the_synthesised_points_change(monkeypatch):
    """On a grid of 10^4 points nearly every trial is a skip whose cost was refitting the
    estimator: the fit is kept while the study's synthesised points are the same, and is the fit
    of exactly those points when they change."""
    import json
    import optuna
    from dse import fidelity
    from dse.estimate import FEATURES_VERSION, fit_estimator, load_prior
    spec = parse_spec(spec_dict({"lanes": [1, 4]}))
    study = optuna.create_study(directions=["minimize", "minimize"])

    def synthesised(n: int) -> None:
        features = {"version": FEATURES_VERSION, "mul_bits": 64.0 * n, "add_bits": 100.0 * n, "acc_bits": 20.0}
        row = {"fidelity": "synth", "target": "ecp5", "model": "jet", "dtype": "int8", "luts": 300.0 + 90 * n,
               "ffs": 200.0 + 10 * n, "bram": 0.0, "lutram": 0.0, "dsp": 0.0, "features": json.dumps(features)}
        study.add_trial(optuna.trial.create_trial(values=[100.0 * n, row["luts"]], user_attrs={"metrics": row}))

    calls = []
    real = fidelity.fit_estimator
    monkeypatch.setattr(fidelity, "fit_estimator", lambda *a, **k: calls.append(1) or real(*a, **k))
    for n in range(1, 10):
        synthesised(n)
    first = fidelity.fit(study, spec)
    assert fidelity.fit(study, spec) is first and len(calls) == 1          # the same points: kept
    synthesised(10)
    second = fidelity.fit(study, spec)
    assert second is not first and len(calls) == 2
    samples = fidelity.training_samples(study, "ecp5")
    again = fit_estimator(samples, metrics=fidelity.AREA_METRICS, prior=load_prior("ecp5"))
    probe = {"version": FEATURES_VERSION, "mul_bits": 320.0, "add_bits": 500.0, "acc_bits": 20.0}
    assert second.samples == 10 and second.predict(probe) == again.predict(probe)
    monkeypatch.setattr(fidelity, "load_prior", lambda target: None)     # another prior: fitted again
    assert fidelity.fit(study, spec).prior is None and len(calls) == 3


def test_the_hv_tolerance_reference_estimates_the_grid_once_per_fit(monkeypatch):
    """The reference point and the allowances of hv_tolerance estimate every point of the grid:
    once per fitted estimator, not once per trial (on the 11,664-point jet space it was 82% of a
    skipped trial's 2 s, half of it copying the study's attributes), and the same values as
    estimated afresh. The synthesised front's points still move the reference at every call."""
    import json
    import optuna
    from dse import fidelity
    from dse.estimate import FEATURES_VERSION, fit_estimator, load_prior
    spec = parse_spec(spec_dict({"lanes": [1, 4]}))
    study = optuna.create_study(directions=["minimize", "minimize"])
    features = lambda n: {"version": FEATURES_VERSION, "mul_bits": 64.0 * n, "add_bits": 100.0 * n,  # noqa: E731
                          "acc_bits": 20.0}
    for n in range(1, 10):
        row = {"fidelity": "synth", "target": "ecp5", "luts": 300.0 + 90 * n, "ffs": 200.0 + 10 * n, "bram": 0.0,
               "lutram": 0.0, "dsp": 0.0, "features": json.dumps(features(n))}
        study.add_trial(optuna.trial.create_trial(values=[100.0 * n, row["luts"]], user_attrs={"metrics": row}))
    model, dtype = spec.models[0].name, spec.dtypes[0]
    grid = {f"p{n}": {"features": features(n), "row": {"cycles": 1000 - 10 * n, "status": "OK"}} for n in range(1, 40)}
    study.set_user_attr(fidelity.CHEAP_ATTR, {fidelity.group_key(model, dtype): grid})
    estimator = fit_estimator(fidelity.training_samples(study, "ecp5"), metrics=fidelity.AREA_METRICS,
                              prior=load_prior("ecp5"))
    calls = []
    real = type(estimator).predict
    monkeypatch.setattr(type(estimator), "predict", lambda self, f: calls.append(1) or real(self, f))
    first = fidelity.tolerance_context(study, spec, model, dtype, estimator)
    assert len(calls) == len(grid)
    luts = [real(estimator, p["features"])["luts"].value for p in grid.values()]
    assert first.total_luts == pytest.approx(sum(max(v, 0.0) for v in luts), rel=1e-12)
    assert first.reference == pytest.approx((1.1 * max(luts), 1.1 * 990)) or \
        first.reference == pytest.approx((1.1 * 990, 1.1 * max(luts)))
    far = [[10.0 * r for r in first.reference]]
    again = fidelity.tolerance_context(study, spec, model, dtype, estimator, far)
    assert len(calls) == len(grid)                                          # the grid not estimated again
    assert again.total_luts == first.total_luts and again.reference == pytest.approx(tuple(1.1 * v for v in far[0]))
    other = fit_estimator(fidelity.training_samples(study, "ecp5"), metrics=fidelity.AREA_METRICS, prior=None)
    fidelity.tolerance_context(study, spec, model, dtype, other)
    assert len(calls) == 2 * len(grid)                                      # refitted: estimated again
