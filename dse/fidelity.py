"""Multi-fidelity evaluation (spec `search: {fidelity: multi}`): synthesise only the points
whose area could reach the Pareto front.

    outcome = evaluate_multi(study, spec, ctx, point, workdir, cache, log)
    outcome.row, outcome.cached, outcome.synthesized, outcome.decision.reason

Per point:
  1. the cheap fidelity: `dse.evaluate` with synthesis (and place-and-route) off: configure,
     compile, the exact cycle model, the overflow proof, and the design's features
     (dse.estimate); simulation and the bit-exact check too only when an objective or bound
     needs a simulated metric (accuracy), else they run with synthesis, so every synthesised
     point is simulated and checked and a point estimated only is not simulated at all.
     Cached like any evaluation (its key says synthesize=False, simulate=...).
  2. the estimate: a model fitted on every point already synthesised, by this study (its
     COMPLETE trials) and by any study on this machine (rows with features in the evaluation
     cache, same target), with its error measured by cross-validation (dse.estimate).
  3. the gate (`decide`): the full evaluation (simulation and checks unless the cheap tier ran
     them, then Yosys and, with timing, nextpnr) unless
        - the point cannot be feasible whatever its area: it failed a check, is not proven
          overflow-safe, or its optimistic estimate breaks a resource budget of the spec;
        - or its optimistic objective vector (each estimated metric at its optimistic bound,
          the estimate minus the measured error; exact metrics such as cycles as measured) is
          weakly dominated by a feasible, synthesised point of the same model x dtype.
     While fewer than dse.estimate.MIN_SAMPLES points are synthesised, or an objective has no
     fit, every point is synthesised.
     With `search.hv_tolerance` t (a grid only), also skipped: a point whose optimistic vector
     would add at most its allowance to the synthesised front's hypervolume, relative; the
     allowance is t times the point's share of the estimated LUTs of its model x dtype's points,
     so the allowances sum to t and go to the designs that are slow to synthesise
     (`hypervolume_share`, `Tolerance`, below).

A skipped point is told to Optuna as PRUNED: a trial stopped at a lower fidelity, which is what
PRUNED means. `Study.best_trials` (the front of pareto.csv) reads COMPLETE trials only, so the
reported front holds synthesised points and nothing else; samplers ignore PRUNED trials of a
multi-objective study (NSGA-II) or treat them as worse than complete ones (TPE), which is right
for points predicted dominated. Not used: constraints (a skipped point is not infeasible, and
an infeasible COMPLETE trial with estimated values would sit in trials.csv as if measured).
A grid puts its points in Optuna's trial queue (`enqueue_trial`) in the order of dse.study.order:
every point's cheap fidelity first, then the likely front first, so the points that dominate
the others are synthesised before them and the gate can skip those.

The row of a skipped point carries the estimates in luts/ffs/bram/lutram/dsp (and fmax_mhz,
latency_us with timing), `fidelity` = "estimate", `estimate_error` (JSON: each metric's measured
error bound, relative) and a note saying why it was not synthesised. Synthesised rows have
`fidelity` = "synth" ("synth_units" with the spec's `synthesis: units`); when an estimate
existed before synthesis, the trial keeps it
(user attribute `estimate`), so the sweep reports the estimator's error on points it had never
seen (`realised_error`) next to the cross-validated one.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from compiler.memo import HeldMemo
from compiler.timing_model import PLACED_ERROR as FMAX_ERROR
from dse.estimate import AREA_METRICS, ESTIMATED_METRICS, Estimate, Estimator, fit_estimator, load_prior
from dse.spec import NEEDS_SIMULATION, SYNTH_FIDELITY, DesignPoint, Spec

ESTIMATE_ATTR = "estimate"
"""Trial user attribute: metric -> the estimate made before the point was synthesised."""
CHEAP_ATTR = "cheap_points"
"""Study user attribute (search.hv_tolerance): model/dtype -> knobs (JSON) -> the exact objective
values and features of each point of the grid, from the cheap pass (dse.study.order)."""
OPTIMISTIC_ATTR = "optimistic"
"""Trial user attribute of a point skipped under hv_tolerance: its optimistic objective vector
(minimised), from which `describe` bounds what the skipped points could add to the final front."""
FIDELITY_TXT = "fidelity.txt"
"""In the results folder: what `describe` says at the end of a multi-fidelity sweep."""


@dataclass(frozen=True)
class Decision:
    synthesize: bool
    reason: str
    estimates: Mapping[str, Estimate] = dataclasses.field(default_factory=dict)
    hv_share: float | None = None   # skipped under hv_tolerance: the most it could add, relative
    vector: tuple[float, ...] = ()  # ... and its optimistic objective vector (minimised)
    kind: str = ""                  # why, in one word (the progress line's counts): SKIP_KINDS, or "" when synthesised


SKIP_KINDS = ("dominated", "tolerance", "infeasible", "failed")
"""Why a point was not synthesised: a synthesised point dominates its optimistic estimate; within
hv_tolerance; it cannot be feasible (wrong result, not overflow-safe, a budget broken even at its
optimistic estimate); it failed before synthesis."""


@dataclass(frozen=True)
class Outcome:
    row: dict[str, Any]
    cached: bool            # every evaluation behind the row came from the evaluation cache
    synthesized: bool
    decision: Decision


# ---------------------------------------------------------------------------------------------
# training samples: (features, measured row) of synthesised points

def _sample(row: Mapping[str, Any] | None, target: str, fidelity: str) -> tuple[dict[str, float], Mapping[str, Any]] | None:
    """(features, row) of a row synthesised for `target` at `fidelity` (synth | synth_units: the
    estimate learns the counts of the study's own kind of synthesis)."""
    if not row or row.get("fidelity") != fidelity or row.get("target") != target or row.get("luts") is None:
        return None
    try:
        features = json.loads(row.get("features") or "null")
    except ValueError:
        return None
    return (features, row) if isinstance(features, dict) else None


@functools.lru_cache(maxsize=8)
def _cache_samples(root: str, target: str, fidelity: str) -> tuple:
    """Synthesised rows in the evaluation cache (read once per process: a sweep's own new
    points come from its study)."""
    out = []
    for path in sorted(Path(root).glob("*/*.json")):
        try:
            s = _sample(json.loads(path.read_text()).get("row"), target, fidelity)
        except (OSError, ValueError, AttributeError):
            continue
        if s is not None:
            out.append(s)
    return tuple(out)


def training_samples(study, target: str, cache=None,
                     fidelity: str = "synth") -> list[tuple[dict[str, float], Mapping[str, Any]]]:
    """Points of the study and (with `cache`, an EvalCache) of the cache synthesised at
    `fidelity`, each design once (keyed by its features and point)."""
    from optuna.trial import TrialState
    seen, out = set(), []
    rows = [t.user_attrs.get("metrics") for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    samples = [_sample(r, target, fidelity) for r in rows]
    if cache is not None:
        samples += list(_cache_samples(str(cache.root), target, fidelity))
    for s in samples:
        if s is None:
            continue
        key = (json.dumps(s[0], sort_keys=True), s[1].get("model"), s[1].get("dtype"))
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


def fit(study, spec: Spec, cache=None) -> Estimator | None:
    """The study's estimator: the shipped calibration of the target corrected by the points
    synthesised so far (and, from dse.estimate.MIN_SAMPLES of them, fits on those alone).

    Fitted again only when those points change (_FITTED): every trial's gate asks, and on a
    grid of 10^4 points nearly every trial is a skip whose cost was mostly this fit (0.3-0.5 s
    with 146 points synthesised: configs/jet_space.yaml's study after two hours)."""
    metrics = AREA_METRICS + (("fmax_mhz",) if spec.timing else ())
    samples = training_samples(study, str(spec.target), cache, SYNTH_FIDELITY[spec.synthesis])
    prior = load_prior(str(spec.target))
    key = (metrics, tuple((json.dumps(f, sort_keys=True), tuple(r.get(m) for m in metrics)) for f, r in samples))
    return _FITTED.get((prior,), key, lambda: fit_estimator(samples, metrics=metrics, prior=prior))


_FITTED = HeldMemo(4)
"""(prior, metrics, samples) -> Estimator: the last few fits in this process."""


# ---------------------------------------------------------------------------------------------
# the gate

def _minimised(spec: Spec, values: Sequence[float]) -> list[float]:
    return [v if str(o.direction) == "minimize" else -v for o, v in zip(spec.objectives, values)]


def front(study, spec: Spec, model: str, dtype: str) -> list[list[float]]:
    """Objective vectors (minimised form) of the feasible COMPLETE trials of model x dtype:
    all synthesised (a skipped point is PRUNED, never COMPLETE)."""
    from optuna.trial import TrialState
    out = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if t.params.get("model") != model or t.params.get("dtype") != dtype:
            continue
        if all(v <= 0 for v in (t.user_attrs.get("constraints") or {}).values()) and t.values:
            out.append(_minimised(spec, t.values))
    return out


def optimistic(metric: str, row: Mapping[str, Any], est: Mapping[str, Estimate], maximize: bool) -> float | None:
    """The most favourable value `metric` can have within the estimate's error; exact metrics
    (cycles, errors of the outputs) as measured by the cheap evaluation."""
    if metric == "latency_us":
        cycles, fmax = row.get("cycles") or row.get("cycles_model"), est.get("fmax_mhz")
        return None if cycles is None or fmax is None or fmax.high <= 0 else cycles / fmax.high
    if metric in ESTIMATED_METRICS:
        e = est.get(metric)
        return None if e is None else (e.high if maximize else e.low)
    v = row.get(metric)
    if v is None:       # cycles of a point not simulated (yet): the cycle model's, exact
        v = row.get(f"{metric}_model")
    return None if v is None else float(v)


def group_key(model: str, dtype: str) -> str:
    return f"{model}/{dtype}"


def hypervolume(points: Sequence[Sequence[float]], reference: Sequence[float]) -> float:
    """Hypervolume (all minimised) of `points` bounded by `reference` (Optuna's exact algorithm;
    a point not better than the reference in every objective adds nothing)."""
    import numpy as np
    from optuna._hypervolume import compute_hypervolume
    inside = [p for p in points if all(a < r for a, r in zip(p, reference))]
    if not inside:
        return 0.0
    return float(compute_hypervolume(np.asarray(inside, dtype=float), np.asarray(reference, dtype=float)))


def hypervolume_share(front_points: Sequence[Sequence[float]], vector: Sequence[float],
                      reference: Sequence[float]) -> float:
    """How much `vector` would add to the hypervolume of `front_points`, relative to it.

    Why a sum of these shares bounds what skipping costs: the hypervolume of a union is
    submodular, so what a set of skipped points adds to the final front is at most the sum of
    what each adds alone, and what one adds to the final front is at most what it added to the
    (smaller) front it was judged against. Each share is relative to the front of its time,
    whose hypervolume is at most the final one's, so skipped points whose shares sum to at most
    t lose at most t of the final front's hypervolume (with each vector at its optimistic bound,
    i.e. within the estimator's measured error, and under one reference point)."""
    base = hypervolume(front_points, reference)
    if base <= 0:
        return math.inf
    return (hypervolume([*front_points, vector], reference) - base) / base


@dataclass(frozen=True)
class Tolerance:
    """What the hv_tolerance test needs for one model x dtype, from the grid's cheap pass
    (CHEAP_ATTR) and the current estimator."""
    reference: tuple[float, ...]    # the hypervolume reference point (minimised)
    total_luts: float               # estimated LUTs summed over the grid's points: the cost the allowances share


def tolerance_context(study, spec: Spec, model: str, dtype: str, estimator: Estimator | None,
                      front_points: Sequence[Sequence[float]] = ()) -> Tolerance | None:
    """The reference point is each objective's least favourable value over the grid's points
    (estimated metrics at the current central estimate, cycles exact; the synthesised front's
    as measured), plus 10%: bench/bench_sweep.py's rule on the measured grid. Follows the
    estimator as it learns (a reference fixed from the first few synthesised points
    underestimated the largest designs 16x): the grid's part is computed again whenever the
    estimator is refitted, and only then (_grid_worst)."""
    points = (_study_attr(study, CHEAP_ATTR) or {}).get(group_key(model, dtype))
    if not points or estimator is None:
        return None
    grid = _grid_worst(spec, points, estimator)
    if grid is None:
        return None
    worst, total = grid
    nadir = [max(col) for col in zip(worst, *front_points)]
    return Tolerance(tuple(w + 0.1 * abs(w) for w in nadir), total)


def _study_attr(study, name: str) -> Any:
    """A study's user attribute, read only, without Study.user_attrs' deep copy of them all: a
    grid's cheap points (CHEAP_ATTR) are megabytes, and every trial's gate reads them (the
    11,664-point jet space: 0.8 s a trial copying them)."""
    storage, study_id = getattr(study, "_storage", None), getattr(study, "_study_id", None)
    if storage is None or study_id is None:
        return study.user_attrs.get(name)
    return storage.get_study_user_attrs(study_id).get(name)


def _grid_worst(spec: Spec, points: Mapping[str, Any], estimator: Estimator) -> tuple[list[float], float] | None:
    """(each objective's least favourable value over the grid's `points` at the estimator's
    central estimates, minimised; the estimated LUTs summed), or None when an objective has no
    value. Remembered per estimator and spec (by identity) and the points' keys (a point's cheap
    row is the same whenever it is recorded; a database storage hands back a new object each
    read, the journal the same one): `fit` hands back the same Estimator until the synthesised
    points change, so the grid is estimated once per refit, not once per trial."""
    return _GRID_WORST.get((estimator, spec), tuple(points), lambda: _worst_over(spec, points, estimator))


def _worst_over(spec: Spec, points: Mapping[str, Any], estimator: Estimator) -> tuple[list[float], float] | None:
    worst: list[float] | None = None
    total = 0.0
    for p in points.values():
        est = estimator.predict(p["features"])
        if "luts" not in est:
            return None
        total += max(est["luts"].value, 0.0)
        central = {m: Estimate(e.value, e.value, e.value) for m, e in est.items()}
        values = [optimistic(o.metric, p["row"], central, str(o.direction) == "maximize") for o in spec.objectives]
        if any(v is None for v in values):
            return None
        vector = _minimised(spec, values)
        worst = vector if worst is None else [max(a, b) for a, b in zip(worst, vector)]
    return (worst, total) if worst is not None else None


_GRID_WORST = HeldMemo(4)


def decide(spec: Spec, row: Mapping[str, Any], estimator: Estimator | None,
           front_points: Sequence[Sequence[float]], tolerance: Tolerance | None = None) -> Decision:
    """Synthesise `row`'s point (the cheap evaluation's row) or not, and why (module docstring);
    `tolerance` for search.hv_tolerance."""
    if row.get("status") != "OK":
        return Decision(False, f"not synthesised: it failed in {row.get('stage')}", kind="failed")
    if row.get("correct") is False or row.get("overflow_safe") is False:     # None: not simulated yet
        why = "it computes a wrong result" if row.get("correct") is False else "it is not proven overflow-safe"
        est = {} if estimator is None or not row.get("features") else estimator.predict(json.loads(row["features"]))
        return Decision(False, f"not synthesised: {why}, so it is infeasible whatever its area", est, kind="infeasible")
    if estimator is None:
        return Decision(True, "synthesised: too few synthesised points to estimate from yet")
    est = estimator.predict(json.loads(row["features"]))
    for b in spec.constraints:
        v = optimistic(b.metric, row, est, maximize=b.kind == "min")
        if v is not None and (v > b.limit if b.kind == "max" else v < b.limit):
            return Decision(False, f"not synthesised: even its optimistic {b.metric} estimate {v:.0f} breaks "
                                   f"{b.key}: {b.limit:g}", est, kind="infeasible")
    vector = []
    for o in spec.objectives:
        v = optimistic(o.metric, row, est, maximize=str(o.direction) == "maximize")
        if v is None:
            return Decision(True, f"synthesised: no estimate of {o.metric}", est)
        vector.append(v)
    vector = _minimised(spec, vector)
    for f in front_points:
        if all(a <= b for a, b in zip(f, vector)):
            shown = ", ".join(f"{o.metric} {abs(v):.4g}" for o, v in zip(spec.objectives, vector))
            return Decision(False, f"not synthesised: even at its optimistic bound ({shown}) a synthesised "
                                   f"point dominates it", est, kind="dominated")
    t = spec.search.hv_tolerance
    # a point outside the reference (estimated: too tight for it) would add nothing by the
    # measure, which says nothing about it: never skipped for the tolerance
    if (t > 0 and tolerance is not None and tolerance.total_luts > 0 and front_points
            and all(v < r for v, r in zip(vector, tolerance.reference))):
        cost = max(est["luts"].value, 0.0) / tolerance.total_luts
        share = hypervolume_share(front_points, vector, tolerance.reference)
        if share <= t * cost:
            return Decision(False, f"not synthesised: even at its optimistic bound it would add at most "
                                   f"{share:.4%} to the synthesised front's hypervolume, within its allowance "
                                   f"{t * cost:.4%} (hv_tolerance {t:g} x its {cost:.2%} of the estimated LUTs "
                                   f"of this model x dtype)", est, hv_share=share, vector=tuple(vector),
                            kind="tolerance")
    return Decision(True, "synthesised: its optimistic estimate could reach the front", est)


def estimated_row(row: Mapping[str, Any], decision: Decision, estimator: Estimator | None) -> dict[str, Any]:
    """The cheap row with the estimates filled in and marked as such."""
    out = dict(row)
    est = decision.estimates
    for m in ESTIMATED_METRICS:
        if m in est:
            out[m] = est[m].value if m == "fmax_mhz" else int(round(est[m].value))
    if "fmax_mhz" in est and est["fmax_mhz"].value > 0 and (row.get("cycles") or row.get("cycles_model")):
        out["latency_us"] = (row.get("cycles") or row.get("cycles_model")) / est["fmax_mhz"].value
    if decision.hv_share is not None:
        out["hv_share"] = decision.hv_share
    if est:
        out["fidelity"] = "estimate"
        out["estimate_error"] = json.dumps({m: estimator.bounds(m) for m in est})
    notes = [n for n in (row.get("notes") or "").split("; ") if n]
    out["notes"] = "; ".join(notes + [decision.reason])
    return out


# ---------------------------------------------------------------------------------------------
# `dse eval --estimate`

@dataclass(frozen=True)
class PointEstimate:
    features: Mapping[str, float]
    estimates: Mapping[str, Estimate]       # metric -> estimate with its held-out error bounds
    prior: Any                              # dse.estimate.Prior: what the errors were measured on
    cycles: int
    compile_s: float                        # compiling the point (the compiler's work)
    estimate_s: float                       # counting its features and applying the table
    fmax: Any = None                        # compiler.timing_model.Estimate (dse.estimate.fmax_estimate)

    def lines(self) -> list[str]:
        """What `dse eval --estimate` prints: one line per metric with its measured error."""
        out = []
        order = sorted(self.estimates, key=lambda m: ESTIMATED_METRICS.index(m) if m in ESTIMATED_METRICS else 99)
        for m in order:                     # LUTs first, as the tool's tables
            e, mp = self.estimates[m], self.prior.metrics[m]
            out.append(f"{m:<7} {e.value:>10,.0f}   (held-out error {_rel(mp.median)} median; the true value "
                       f"within {e.low:,.0f} .. {e.high:,.0f}: at most {_rel(mp.over)} too high, {_rel(mp.under)} "
                       f"too low)")
        out.append(f"cycles  {self.cycles:>10,}   (the cycle model: exact)")
        if self.fmax is not None:
            out.append(f"fmax    {self.fmax.fmax_mhz:>10,.1f}   MHz (the delay model bounded by placement, "
                       f"{FMAX_ERROR}: docs/timing.md); its path: {self.fmax.where}")
        out.append(f"estimated in {self.estimate_s * 1000:.0f} ms after a {self.compile_s:.2f} s compile, from the "
                   f"shipped calibration ({self.prior.describe()}; errors measured on designs held out one "
                   f"family at a time: docs/estimator.md)")
        return out

    def as_row(self) -> dict[str, Any]:
        return {"estimate": {m: {"value": e.value, "low": e.low, "high": e.high} for m, e in self.estimates.items()},
                "held_out_error": {m: {"median": math.expm1(mp.median), "over": math.expm1(mp.over),
                                       "under": math.expm1(mp.under)} for m, mp in self.prior.metrics.items()},
                "cycles_model": self.cycles, "features": dict(self.features), "compile_s": self.compile_s,
                "estimate_s": self.estimate_s, "calibration": self.prior.describe(),
                **({"fmax_estimate_mhz": self.fmax.fmax_mhz, "fmax_estimate_path": self.fmax.where}
                   if self.fmax is not None else {})}


def _rel(log_err: float) -> str:
    return f"{math.expm1(log_err):.0%}"


def estimate_point(ctx, point: DesignPoint) -> PointEstimate:
    """Compile `point` and estimate its area from the shipped calibration (no simulation, no
    Yosys); raises ValueError when the target has no calibration."""
    import time
    from dse.estimate import design_features, fmax_estimate
    from dse.evaluate import compile_point
    prior = load_prior(ctx.target)
    if prior is None:
        raise ValueError(f"no shipped area calibration for target {ctx.target} (dse/estimator.json; "
                         f"bench/calibrate_estimator.py makes one)")
    t0 = time.perf_counter()
    design = compile_point(ctx, point)
    t1 = time.perf_counter()
    features = design_features(design, target=ctx.target)
    estimates = prior.predict(features)
    fmax = fmax_estimate(design, features, ctx.target)
    t2 = time.perf_counter()
    return PointEstimate(features, estimates, prior, design.cycle_model().total, t1 - t0, t2 - t1, fmax)


# ---------------------------------------------------------------------------------------------
# one point

def needs_simulation(spec: Spec) -> bool:
    """Whether the cheap fidelity must simulate: an objective or a bound the gate needs exactly
    comes only from a simulation (accuracy on the model's data)."""
    metrics = {o.metric for o in spec.objectives} | {b.metric for b in spec.constraints}
    return bool(metrics & NEEDS_SIMULATION)


def cheap_context(ctx, spec: Spec):
    """The cheap fidelity of an evaluation context (dse.evaluate.EvalContext): no synthesis, no
    place-and-route, and no simulation unless the spec's objectives need one (`needs_simulation`);
    a trained network the tool quantises takes its accuracy from its golden model instead
    (dse.models.accuracy.golden_samples: what simulating every sample would report, as the
    hardware must equal it on every sample), and is simulated only if it is synthesised."""
    return dataclasses.replace(ctx, synthesize=False, timing=False, simulate=needs_simulation(spec),
                               golden_accuracy=needs_simulation(spec))


def evaluate_multi(study, spec: Spec, ctx, point: DesignPoint, workdir: str | Path, cache,
                   log: Callable[[str], None] | None = None) -> Outcome:
    """The cheap evaluation, the gate, and full synthesis if the gate says so."""
    from dse.cache import cached_evaluate
    cheap_ctx = cheap_context(ctx, spec)
    row, cached, _ = cached_evaluate(cheap_ctx, point, workdir, cache, log)
    if row.get("status") != "OK" or not row.get("features"):
        # a failure is the point's result, as in a full evaluation (minus synthesis)
        return Outcome(row, cached, False, Decision(False, f"not synthesised: it failed in {row.get('stage')}",
                                                    kind="failed"))
    estimator = fit(study, spec, cache)
    front_points = front(study, spec, point.model, point.dtype)
    tolerance = None
    if spec.search.hv_tolerance > 0:
        tolerance = tolerance_context(study, spec, point.model, point.dtype, estimator, front_points)
    decision = decide(spec, row, estimator, front_points, tolerance)
    if not decision.synthesize:
        return Outcome(estimated_row(row, decision, estimator), cached, False, decision)
    # synthesis (and place-and-route) now; the checks too unless the cheap fidelity ran them
    # (then its row is kept, not checked again; else the compile and overflow proof run again:
    # milliseconds), so every synthesised point is simulated and checked
    checked = row if row.get("cycles") is not None else None        # simulated (not golden-only)
    full, full_cached, _ = cached_evaluate(ctx, point, workdir, cache, log, checked=checked)
    return Outcome(full, cached and full_cached, True, decision)


def realised_error(study) -> dict[str, tuple[float, float, int]]:
    """metric -> (median, max relative error, points) of the estimates made before synthesis
    against what synthesis then measured: the estimator's error on points it had not seen."""
    from optuna.trial import TrialState
    errs: dict[str, list[float]] = {}
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        est, row = t.user_attrs.get(ESTIMATE_ATTR) or {}, t.user_attrs.get("metrics") or {}
        for m, v in est.items():
            if row.get(m) is not None:
                errs.setdefault(m, []).append(abs(math.log1p(max(v, 0.0)) - math.log1p(row[m])))
    out = {}
    for m, e in errs.items():
        e.sort()
        out[m] = (math.expm1(e[len(e) // 2]), math.expm1(e[-1]), len(e))
    return out


def given_up(study, spec: Spec, estimator: Estimator | None) -> dict[tuple[str, str], tuple[int, float]]:
    """(model, dtype) -> (points skipped under hv_tolerance, the most they could add together to
    the hypervolume of the study's front, relative): the sum of what each optimistic vector adds
    alone to the final front under the final reference point, which bounds what they add
    together (submodularity, `hypervolume_share`)."""
    from optuna.trial import TrialState
    skipped: dict[tuple[str, str], list[list[float]]] = {}
    for t in study.get_trials(deepcopy=False, states=(TrialState.PRUNED,)):
        if t.user_attrs.get(OPTIMISTIC_ATTR) is not None:
            skipped.setdefault((t.params.get("model"), t.params.get("dtype")), []).append(t.user_attrs[OPTIMISTIC_ATTR])
    out = {}
    for (model, dtype), vectors in skipped.items():
        points = front(study, spec, model, dtype)
        tol = tolerance_context(study, spec, model, dtype, estimator, points)
        bound = math.inf if tol is None else sum(hypervolume_share(points, v, tol.reference) for v in vectors)
        out[(model, dtype)] = (len(vectors), bound)
    return out


def describe(study, spec: Spec, cache=None) -> str:
    """What `dse sweep` prints for a multi-fidelity study: how many points were synthesised,
    the estimator's cross-validated error and its error on points it predicted before synthesis."""
    from optuna.trial import TrialState
    trials = study.get_trials(deepcopy=False)
    pruned = sum(t.state is TrialState.PRUNED for t in trials)
    synth = sum(t.state is TrialState.COMPLETE for t in trials)
    est = fit(study, spec, cache)
    lines = [f"multi-fidelity: {synth} points synthesised, {pruned} estimated only (not synthesised)"]
    if spec.search.hv_tolerance > 0:
        lines.append(f"hv_tolerance {spec.search.hv_tolerance:g}: " + ("; ".join(
            f"{m} {d}: {n} point{'s' * (n != 1)} not synthesised for it; together they could add "
            f"{'less than 0.001%' if b < 1e-5 else f'at most {b:.3%}'} to the reported front's hypervolume"
            for (m, d), (n, b) in sorted(given_up(study, spec, est).items())) or "no point skipped for it"))
    if est is not None:
        lines.append(est.describe())
    real = realised_error(study)
    if real:
        lines.append("estimate error on points predicted before synthesis: " + ", ".join(
            f"{m} {med * 100:.0f}% median / {mx * 100:.0f}% max ({n} points)" for m, (med, mx, n) in real.items()))
    return "\n".join(lines)
