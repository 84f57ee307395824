"""dse report: files exist, the plot is an image of the data behind it (plot_<model>.csv against
trials.csv), Pareto fronts equal the sweep's pareto.csv, cycle breakdowns add up, provenance,
bad input exits 2."""
from __future__ import annotations

import datetime
import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from compiler.synth.area import AreaReport
from compiler.tools import ToolError
from dse.cli import main
from dse.report import PLOT_PIXELS, ReportError, load_study_results, space_hash, write_report
from dse.results import pareto_front
from dse.spec import Direction, Objective, load_spec
from dse.sweep import SweepOptions, sweep

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "tests" / "data" / "baseline_ci"


def read_png(path: Path) -> np.ndarray:
    from matplotlib import image
    return image.imread(path)


@pytest.fixture
def baseline_copy(tmp_path) -> Path:
    """The committed CI baseline (a real sweep's trials.csv and pareto.csv, no journal)."""
    d = tmp_path / "ci_gate"
    shutil.copytree(BASELINE, d)
    return d


# ---------------------------------------------------------------------------------------------
# a fake-synthesis sweep with two dtypes, infeasible points and a failed trial (fast: pysim)

def fake_area(design, target: str) -> AreaReport:
    comb = design.config.mem_read == "comb"
    wide = any(b.dtype.bits == 16 for k in design.kernels for b in k.buffers)
    luts = 100 * len(design.kernels) + (40 if comb else 0) + 60 * (design.config.lanes - 1) + (30 if wide else 0)
    return AreaReport(target=target, luts=luts, ffs=50, bram=0 if comb else 1, lutram=0, dsp=1,
                      yosys_version="fake yosys 1.0", script="fake_synth -top top", seconds=0.0)


@pytest.fixture(scope="module")
def fake_study(tmp_path_factory) -> Path:
    """One sweep for the module; tests that write into it copy it first."""
    tmp_path = tmp_path_factory.mktemp("fake")

    def synthesize(design, target="ecp5", workdir=None, timeout=600, **options):
        if design.config.lanes == 2 and design.config.mem_read == "sync" and "E_" in design.kernels[0].name:
            raise ToolError("yosys", "fake yosys crashed")
        return fake_area(design, target)
    spec = {"study": "fake", "target": "ecp5",
            "models": [{"name": "gemv_4x8", "builtin": "gemv", "params": {"M": 4, "K": 8}},
                       {"name": "add_8", "builtin": "elementwise", "params": {"N": 8}}],
            "dtypes": ["int8", "int16"], "knobs": {"mem_read": ["sync", "comb"], "lanes": [1, 2]},
            "objectives": ["cycles", "luts"], "constraints": {"luts_max": 190},
            "search": {"sampler": "grid", "seed": 0}}
    path = tmp_path / "fake.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("compiler.synth.area.synthesize", synthesize)
        r = sweep(load_spec(path), SweepOptions(results_root=tmp_path / "results", cache_dir=tmp_path / "cache",
                                                sim_backend="pysim", progress="off"))
    assert r.ran == 16
    return r.results_dir


# ---------------------------------------------------------------------------------------------

def test_report_files_exist_and_the_plot_is_the_data(baseline_copy, capsys):
    assert main(["report", str(baseline_copy)]) == 0
    out = baseline_copy / "report"
    assert capsys.readouterr().out.strip() == f"{out / 'index.html'} (18 files in {out})"
    trials = pd.read_csv(baseline_copy / "trials.csv")
    pareto = pd.read_csv(baseline_copy / "pareto.csv")
    for model in ("gemv_8x16", "add_relu_32"):
        for f in (f"plot_{model}.png", f"plot_{model}.svg", f"plot_{model}.csv", f"pareto_{model}_int8.csv",
                  f"pareto_{model}_int8.md", f"breakdown_{model}.png", f"breakdown_{model}.svg",
                  f"breakdown_{model}.csv"):
            assert (out / f).is_file() and (out / f).stat().st_size > 0, f
        # the CSV behind the plot: every trial of the model, at its (luts, cycles), drawn as it should be
        points = pd.read_csv(out / f"plot_{model}.csv")
        mine = trials[trials["model"] == model]
        assert sorted(points["number"]) == sorted(mine["number"])
        merged = points.merge(mine, on="number", suffixes=("", "_t"))
        assert (merged["luts"] == merged["luts_t"]).all() and (merged["cycles"] == merged["cycles_t"]).all()
        front = set(pareto.loc[pareto["model"] == model, "number"])
        assert set(points.loc[points["drawn_as"] == "pareto", "number"]) == front
        assert set(points.loc[points["drawn_as"] == "feasible", "number"]) == set(mine["number"]) - front
        # a real image of the right size, not blank; an SVG document
        png = read_png(out / f"plot_{model}.png")
        assert png.shape[:2] == (PLOT_PIXELS[1], PLOT_PIXELS[0]) and png.std() > 0.05
        assert ET.parse(out / f"plot_{model}.svg").getroot().tag.endswith("svg")
        # the Pareto table: the sweep's own front
        table = pd.read_csv(out / f"pareto_{model}_int8.csv")
        assert list(table["number"]) == list(pareto.loc[pareto["model"] == model, "number"])
    assert not list(out.glob(".*.tmp"))
    html = (out / "index.html").read_text()
    assert html.count("data:image/png;base64,") == 4         # 2 plots + 2 breakdowns, embedded
    assert "| 2 | comb | 2 | 65 | 195 |" in (out / "pareto_gemv_8x16_int8.md").read_text()
    assert "<td>65</td>" in html and "<td>195</td>" in html


def test_cycle_breakdown_adds_up_to_the_cycles(baseline_copy):
    write_report(load_study_results(baseline_copy))
    bd = pd.read_csv(baseline_copy / "report" / "breakdown_gemv_8x16.csv")
    assert list(bd.columns) == ["model", "dtype", "trial", "design", "cycles", "k0_r_8_16", "copies"]
    assert list(bd["trial"]) == [2, 0] and list(bd["design"]) == ["mem_read=comb lanes=2", "mem_read=comb lanes=1"]
    parts = bd.drop(columns=["model", "dtype", "trial", "design", "cycles"]).sum(axis=1)
    assert (parts == bd["cycles"]).all()


def test_provenance_without_a_journal(baseline_copy):
    write_report(load_study_results(baseline_copy), now=datetime.datetime(2026, 1, 2, 3, 4, 5))
    md = (baseline_copy / "report" / "report.md").read_text()
    assert "- **spec hash (SHA-256 of the search space in study.journal)**: unknown: no study.journal" in md
    assert "- **yosys_version**: Yosys 0.70 (git sha1 28ba3cb92" in md
    assert "- **synth_script**: read_rtlil design.il; synth_ecp5 -top top -nowidelut; tee -q -o stat.json stat -json" in md
    assert "- **tinygrad_version**: 0.14.0" in md
    assert "- **trials ran**: 2026-12-01T13:06:02 to 2026-12-01T13:06:03" in md
    assert "- **report written**: 2026-01-02T03:04:05" in md


def test_mixed_tool_versions_are_flagged(baseline_copy):
    t = pd.read_csv(baseline_copy / "trials.csv")
    t.loc[0, "yosys_version"] = "Yosys 0.38"
    t.to_csv(baseline_copy / "trials.csv", index=False)
    write_report(load_study_results(baseline_copy))
    md = (baseline_copy / "report" / "report.md").read_text()
    assert "- **yosys_version**: MIXED, points are not comparable: Yosys 0.70" in md
    assert "; Yosys 0.38 (1 trials)" in md


def test_report_of_a_sweep_with_dtypes_infeasible_and_failed_points(fake_study, tmp_path):
    fake_study = Path(shutil.copytree(fake_study, tmp_path / "fake"))
    results = load_study_results(fake_study)
    assert results.knobs == ("mem_read", "lanes") and results.spec_hash is not None
    assert results.groups == [("gemv_4x8", "int8"), ("gemv_4x8", "int16"), ("add_8", "int8"), ("add_8", "int16")]
    # the fronts are the sweep's pareto.csv (both Optuna's best_trials)
    pareto = pd.read_csv(fake_study / "pareto.csv")
    for m, d in results.groups:
        assert list(results.front(m, d)["number"]) == list(pareto[(pareto["model"] == m) & (pareto["dtype"] == d)]["number"])
    files = write_report(results)
    out = fake_study / "report"
    assert {p.name for p in files} == {p.name for p in out.iterdir()}
    points = pd.read_csv(out / "plot_gemv_4x8.csv")
    assert set(points["dtype"]) == {"int8", "int16"}                  # one plot, both dtypes
    t = results.trials
    infeasible = t[(t["model"] == "gemv_4x8") & (t["trial_state"] == "COMPLETE") & ~t["feasible"].astype(bool)]
    assert len(infeasible) and set(points.loc[points["drawn_as"] == "infeasible", "number"]) == set(infeasible["number"])
    assert (infeasible["violations"].str.contains("luts_max") == (infeasible["luts"] > 190)).all()
    assert infeasible["violations"].str.contains("overflow_safe").any()   # int16 dot products can overflow
    # the failed trials (no LUTs: yosys "crashed") are not drawn but listed
    failed = t[t["status"] == "FAIL"]
    assert len(failed) == 2 and set(failed["model"]) == {"add_8"}
    assert not set(failed["number"]) & set(pd.read_csv(out / "plot_add_8.csv")["number"])
    md = (out / "report.md").read_text()
    assert "### add_8: infeasible and failed trials" in md and "fake yosys crashed" in md
    assert f"- **spec hash (SHA-256 of the search space in study.journal)**: {results.spec_hash}" in md
    assert "- **yosys_version**: fake yosys 1.0" in md and "- **synth_script**: fake_synth -top top" in md
    # the legend names each dtype's front: check the SVG's text
    svg = (out / "plot_gemv_4x8.svg").read_text()
    assert "int8: Pareto front (" in svg and "infeasible, in its dtype's colour (" in svg
    assert "int16: no feasible point" in svg                # full-range int16 dot products may overflow
    png = read_png(out / "plot_gemv_4x8.png")
    assert png.shape[:2] == (PLOT_PIXELS[1], PLOT_PIXELS[0])


def test_spec_hash_is_the_journal_search_space(fake_study):
    from dse.report import read_space
    space = read_space(fake_study / "study.journal")
    assert space["dtypes"] == ["int8", "int16"] and space["objectives"] == [["cycles", "minimize"], ["luts", "minimize"]]
    assert load_study_results(fake_study).spec_hash == space_hash(space) == space_hash(json.loads(json.dumps(space)))


def test_stale_report_files_are_removed(baseline_copy):
    (baseline_copy / "report").mkdir()
    (baseline_copy / "report" / "plot_gone.png").write_bytes(b"old")
    (baseline_copy / "report" / "notes.txt").write_text("mine")
    write_report(load_study_results(baseline_copy))
    assert not (baseline_copy / "report" / "plot_gone.png").exists()
    assert (baseline_copy / "report" / "notes.txt").exists()          # not ours: kept


def test_pareto_front_follows_directions():
    df = pd.DataFrame({"number": [0, 1, 2, 3], "model": "m", "dtype": "d", "k": [1, 2, 3, 4],
                       "cycles": [10, 20, 10, 5], "fmax_mhz": [100.0, 300.0, 50.0, 10.0]})
    objs = (Objective("cycles", Direction.MINIMIZE), Objective("fmax_mhz", Direction.MAXIMIZE))
    assert list(pareto_front(df, objs, ["k"])["number"]) == [3, 0, 1]
    assert list(pareto_front(df, objs[:1], ["k"])["number"]) == [3]


def test_bad_input_exits_2(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'nope'}: no such results folder (run `dse sweep SPEC` first)\n"
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2
    assert "no trials.csv or pareto.csv in it" in capsys.readouterr().err
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "trials.csv").write_text("a,b\n1,2\n")
    assert main(["report", str(tmp_path / "bad")]) == 2
    assert capsys.readouterr().err.endswith("not a results CSV of dse sweep (no column number, model, dtype, feasible, status)\n")
    with pytest.raises(ReportError, match="expected a results folder"):
        load_study_results(tmp_path / "bad" / "trials.csv")


def test_models_with_data_get_an_accuracy_plot_and_its_fronts(baseline_copy):
    """A results folder whose gemv rows carry accuracy (as a model with `data:` would): the
    report draws accuracy against LUTs and cycles; the CSV behind it holds every feasible point
    and marks the best accuracy for each budget, checked here by brute force."""
    t = pd.read_csv(baseline_copy / "trials.csv")
    gemv = t["model"] == "gemv_8x16"
    rng = np.random.default_rng(1)
    t.loc[gemv, "accuracy"] = np.round(rng.uniform(0.8, 0.99, int(gemv.sum())), 3)
    t.loc[gemv, "accuracy_float"] = 0.97
    t.to_csv(baseline_copy / "trials.csv", index=False)
    files = write_report(load_study_results(baseline_copy))
    out = baseline_copy / "report"
    assert out / "accuracy_gemv_8x16.png" in files and not (out / "accuracy_add_relu_32.png").exists()
    points = pd.read_csv(out / "accuracy_gemv_8x16.csv")
    feasible = t[gemv & t["feasible"].fillna(False).astype(bool)]
    assert sorted(points["number"]) == sorted(feasible["number"])

    def best_for_budget(df: pd.DataFrame, axis: str) -> set[int]:
        return {int(r.number) for r in df.itertuples()
                if not any((o[axis] <= getattr(r, axis)) and (o["accuracy"] >= r.accuracy)
                           and ((o[axis] < getattr(r, axis)) or (o["accuracy"] > r.accuracy))
                           for _, o in df.iterrows())}
    assert set(points.loc[points["front_luts"], "number"]) == best_for_budget(points, "luts")
    assert set(points.loc[points["front_latency"], "number"]) == best_for_budget(points, "cycles")
    png = read_png(out / "accuracy_gemv_8x16.png")
    assert png.shape[1] > PLOT_PIXELS[0] and png.std() > 0.05      # two panels side by side
    assert ET.parse(out / "accuracy_gemv_8x16.svg").getroot().tag.endswith("svg")
    assert "accuracy_gemv_8x16.png" in (out / "report.md").read_text()
    # and accuracy against number format: one format (int8), its cheapest feasible design
    assert (out / "index.html").read_text().count("data:image/png;base64,") == 6
    formats = pd.read_csv(out / "formats_gemv_8x16.csv")
    cheapest = feasible.sort_values("luts").iloc[0]
    assert list(formats["format"]) == ["int8"] and formats["trial"][0] == cheapest["number"]
    assert "- gemv_8x16: " in (out / "report.md").read_text()


def test_a_latency_objective_puts_latency_on_the_plot(baseline_copy):
    # a timing study's front is over wall time: its plot draws latency_us, not cycles, and a
    # point without a latency (it fits no device) is not drawn
    import dataclasses

    from dse.report import plot_points, time_metric
    results = load_study_results(baseline_copy)
    assert time_metric(results) == "cycles"
    t = results.trials.copy()
    t["latency_us"] = t["cycles"] / 100.0
    t.loc[t.index[0], "latency_us"] = float("nan")
    timed = dataclasses.replace(results, trials=t, objectives=(Objective("latency_us", Direction.MINIMIZE),
                                                               Objective("luts", Direction.MINIMIZE)))
    assert time_metric(timed) == "latency_us"
    model = t.loc[t.index[0], "model"]
    points = plot_points(timed, model)
    mine = t[t["model"] == model]
    assert "latency_us" in points and set(points["number"]) == set(mine["number"]) - {t.loc[t.index[0], "number"]}
    assert list(points["latency_us"]) == list(points["cycles"] / 100.0)
    files = write_report(timed)
    md = (baseline_copy / "report" / "report.md").read_text()
    assert md.startswith("# Study `ci_gate`: latency (us) vs area") and len(files) > 3
    assert "latency (us) vs LUTs" in (baseline_copy / "report" / f"plot_{model}.svg").read_text()
