"""The shipped area estimator (dse/estimate.py `Prior`, dse/estimator.json written by
bench/calibrate_estimator.py): its table is of the current features, it estimates a study's
first point with the error measured on held-out families, a study's synthesised points correct it,
leave-one-family-out measures what it claims, and `dse eval --estimate` prints an estimate with
its error in well under a second after the compile."""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from dse.cli import main
from dse.estimate import (AREA_METRICS, FEATURES_VERSION, MIN_SAMPLES, PRIOR_FILE, PRIOR_WEIGHT, MetricPrior, Prior,
                          fit_estimator, fit_prior, held_out, load_prior)
from dse.fidelity import decide
from dse.spec import parse_spec


def prior(over: float = 0.2, under: float = 0.3) -> Prior:
    """A table: luts = 100 + 2 x."""
    mp = MetricPrior(("x",), (100.0, 2.0), over, under, 0.05)
    return Prior("ecp5", FEATURES_VERSION, 10, ("a", "b"), {"luts": mp})


def feats(x: float) -> dict:
    return {"version": FEATURES_VERSION, "x": float(x)}


def test_the_shipped_table_is_of_the_current_features_for_every_area_metric():
    data = json.loads(PRIOR_FILE.read_text())
    t = data["targets"]["ecp5"]
    assert t["features_version"] == FEATURES_VERSION, "design_features changed: re-run bench/calibrate_estimator.py fit"
    p = load_prior("ecp5")
    assert p is not None and set(p.metrics) == set(AREA_METRICS) and p.designs >= 40 and len(p.families) >= 6
    for m, mp in p.metrics.items():
        assert len(mp.coef) == len(mp.names) + 1 and all(c >= 0 for c in mp.coef[1:]), m   # non-negative costs
        assert mp.over >= 0 and mp.under >= 0 and mp.median <= max(mp.over, mp.under)
    assert load_prior("no-such-target") is None


def test_a_study_starts_from_the_table_with_its_held_out_error():
    est = fit_estimator([], metrics=("luts",), prior=prior())
    e = est.predict(feats(50))["luts"]
    assert e.value == pytest.approx(200.0)
    assert e.low == pytest.approx(201 * math.exp(-0.2) - 1) and e.high == pytest.approx(201 * math.exp(0.3) - 1)
    assert "shipped calibration" in est.describe() and "corrected by 0 synthesised points" in est.describe()
    # what the gate does with it at the first points: a point whose optimistic LUTs a synthesised
    # point of no more cycles beats is skipped
    spec = parse_spec({"study": "s", "target": "ecp5", "models": [{"name": "g", "builtin": "gemv"}],
                       "dtypes": ["int8"], "objectives": ["cycles", "luts"],
                       "search": {"sampler": "grid", "fidelity": "multi"}})
    row = {"status": "OK", "correct": None, "overflow_safe": True, "cycles_model": 100,
           "features": json.dumps(feats(50))}
    assert not decide(spec, row, est, [[100, 150]]).synthesize        # 150 < 201 e^-0.2 - 1 = 163.6
    assert decide(spec, row, est, [[100, 170]]).synthesize


def test_the_studys_points_correct_the_table_and_never_narrow_its_error_before_min_samples():
    twice = [(feats(x), {"luts": 2 * (100 + 2 * x)}) for x in (10, 20, 30)]
    est = fit_estimator(twice, metrics=("luts",), prior=prior())
    fit = est.fits["luts"]
    r = math.log(2 * 121 / 121)      # ~log 2 for each point
    assert fit.form == "prior" and fit.shift == pytest.approx(sum(np.log1p(2 * (100 + 2 * x)) - np.log1p(100 + 2 * x)
                                                                 for x in (10, 20, 30)) / (3 + PRIOR_WEIGHT))
    assert 0.55 * r < fit.shift < 0.6 * r
    assert fit.over >= 0.2 and fit.under >= 0.3       # the table's bounds until MIN_SAMPLES points
    assert fit.under > 0.3                            # ... widened by what the study saw (all too low)
    # from MIN_SAMPLES points the study's own error; a study whose points follow the table
    # exactly ends with a tight bound (and the table beats a fit on few points)
    exact = [(feats(x), {"luts": 100 + 2 * x}) for x in range(0, 10 * MIN_SAMPLES, 10)]
    est = fit_estimator(exact, metrics=("luts",), prior=prior())
    assert est.fits["luts"].over < 1e-9 and est.fits["luts"].under < 1e-9


def test_a_table_of_other_features_is_not_used():
    old = Prior("ecp5", FEATURES_VERSION - 1, 10, ("a",), prior().metrics)
    assert fit_estimator([], metrics=("luts",), prior=old) is None


def test_leaving_one_family_out_measures_an_exact_law_as_exact_and_a_new_feature_as_unknown():
    rng = np.random.default_rng(0)
    samples = []
    for fam in ("a", "b", "c"):
        for i in range(6):
            x, z = float(rng.integers(1, 100)), float(rng.integers(1, 50))
            samples.append({"family": fam, "name": f"{fam}{i}", "features": {"version": FEATURES_VERSION, "x": x, "z": z},
                            "luts": 50 + 3 * x + 7 * z, "ffs": 10 + x, "bram": 0, "lutram": 0, "dsp": 0})
    table = held_out(samples, metrics=("luts", "ffs"))
    st = table.stats("luts")
    assert st["n"] == 18 and st["max_rel"] < 1e-6 and st["spearman"] == pytest.approx(1.0)
    assert "| luts | 18 | 0.0% | 0.0% | 1.000 |" in table.markdown()
    # a family with a cost the others never show is estimated without it: the held-out error says so
    for s in samples:
        if s["family"] == "c":
            s["features"]["w"] = 10.0
            s["luts"] += 500
    st = held_out(samples, metrics=("luts",)).stats("luts", "c")
    assert st["median_rel"] > 0.5
    p = fit_prior(samples, metrics=("luts",), target="ecp5", held=held_out(samples, metrics=("luts",)))
    assert p["metrics"]["luts"]["names"] == ["w", "x", "z"] and p["metrics"]["luts"]["over"] >= 0


@pytest.mark.slow
def test_dse_eval_estimate_prints_the_estimate_with_its_error_in_well_under_a_second(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("study: s\ntarget: ecp5\nmodels: [{name: g, builtin: gemv, params: {M: 32, K: 128}}]\n"
                    "dtypes: [int8]\nknobs: {lanes: [4]}\nobjectives: [cycles, luts]\nsearch: {sampler: grid}\n")
    assert main(["eval", str(spec), "--model", "g", "--dtype", "int8", "--estimate", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["estimate_s"] < 0.25 and row["cycles_model"] > 0
    assert 40 < row["fmax_estimate_mhz"] < 400 and row["fmax_estimate_path"]     # the delay model's, with placement
    assert set(row["estimate"]) == set(AREA_METRICS) and row["estimate"]["luts"]["value"] > 100
    assert row["estimate"]["luts"]["low"] <= row["estimate"]["luts"]["value"] <= row["estimate"]["luts"]["high"]
    assert 0 < row["held_out_error"]["luts"]["median"] < row["held_out_error"]["luts"]["over"] + 1e-9 or \
        row["held_out_error"]["luts"]["median"] <= row["held_out_error"]["luts"]["under"]
    assert main(["eval", str(spec), "--model", "g", "--dtype", "int8", "--estimate"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("luts ") and "held-out error" in out and "cycles " in out and "estimated in" in out
    assert re.search(r"^fmax +\d+\.\d +MHz \(the delay model bounded by placement", out, re.M)
    assert re.search(r"\(ecp5, \d+ designs of \d+ families, Yosys \d+\.\d+;", out)      # the version, not the banner
    assert main(["eval", str(spec), "--model", "g", "--dtype", "int8", "--estimate", "--target", "xilinx"]) in (0, 2)


def test_the_flip_flops_table_prices_no_read_multiplexer():
    """A read multiplexer is logic: the FFs' table may not give its bits a cost, however the
    samples correlate (here the FFs follow the mux bits exactly), while the LUTs' table may."""
    samples = [{"family": fam, "name": f"{fam}{i}",
                "features": {"version": FEATURES_VERSION, "acc_bits": 10.0 * i + 5, "bram_mux_bits": 8.0 * i,
                             "host_mux_bits": 3.0 * i, "lutram_mux_bits": 2.0 * i},
                "luts": 100 + 8 * i, "ffs": 20 + 8 * i, "bram": 1, "lutram": 0, "dsp": 0}
               for fam in ("a", "b") for i in range(1, 6)]
    held = held_out(samples, metrics=("luts", "ffs"))
    table = fit_prior(samples, metrics=("luts", "ffs"), target="ecp5", held=held)["metrics"]
    assert table["ffs"]["names"] == ["acc_bits"]
    assert set(table["luts"]["names"]) == {"acc_bits", "bram_mux_bits", "host_mux_bits", "lutram_mux_bits"}
