"""The order in which a multi-fidelity grid sweep queues its points (spec `search: {sampler:
grid, fidelity: multi}`): every point's cheap fidelity first, then the points in order of how
likely their estimate puts them on the Pareto front.

    missing = synthesis_order(study, missing, spec=spec, options=options)   # in prepare_study

Why: the gate (dse.fidelity.decide) skips a point only when a *synthesised* point already
dominates its optimistic estimate. In the grid's seeded order, many dominated points come up
before the points that dominate them exist, so they are synthesised anyway (measured on
configs/gemv_space.yaml: 5 of 40 points skipped where 29 were dominated). Queued front first,
the front is synthesised early and the gate then has the points it needs to skip the rest.

1. Cheap pass: every point's cheap evaluation (`dse.fidelity.cheap_context`: compile, cycle
   model, overflow proof, features; simulation and check only when an objective needs them,
   i.e. accuracy; no Yosys), in `options.n_jobs` processes. The rows go to the evaluation
   cache, so each trial's own cheap evaluation is a cache hit (without the cache it runs
   again: the order is still right, only slower).
2. Rank: per model x dtype, non-dominated sorting (rank 0 = the estimated front, rank 1 = the
   front of the rest, ...) of the objective vectors in which an estimated metric (luts, ...) is
   the estimator's central estimate when it can be fitted (dse.fidelity.fit: this study's and
   the cache's synthesised points), else `prior_area` of the features; exact metrics (cycles,
   output errors) as measured. A prior only orders the queue: the gate still decides with the
   fitted estimator and its measured error, and the front still holds synthesised points only.
3. Queue: rank 0 of every model x dtype, then rank 1, ...; points that failed, compute a wrong
   result (when simulated) or are not proven overflow-safe (never synthesised) last; ties in the
   seeded grid order. With `search.hv_tolerance`, the points of a rank go smallest first (by
   estimated or prior LUTs): the gate then judges the large designs at the fast end of the
   front, the slowest to synthesise, against a front that already has the rest, where what
   they can add to its hypervolume is smallest. The grid's exact objective values and features
   go into the study (dse.fidelity.CHEAP_ATTR) for the gate's hypervolume reference point.

The order is fixed when the points are queued (Optuna's trial queue is first in, first out);
the gate is what adapts as points are synthesised.
"""
from __future__ import annotations

import contextlib
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any, Callable, Mapping, Sequence

from dse.estimate import ESTIMATED_METRICS
from dse.fidelity import CHEAP_ATTR, cheap_context, fit, group_key, needs_simulation
from dse.paths import point_dir
from dse.spec import DesignPoint, Spec
from dse.study.options import SweepOptions

# Rough LUT4-equivalents per feature unit: a prior that only has to rank designs of one model x
# dtype by size before any point is synthesised (a float adder or converter bit costs about an
# order of magnitude more than an integer adder bit; a bit of a small memory in LUT RAM about a
# sixteenth of a LUT).
_PRIOR = {"mul_bits": 1.0, "fmul_bits": 1.0, "fadd_bits": 16.0, "fconv_bits": 8.0, "add_bits": 1.0,
          "logic_bits": 1.0, "acc_bits": 1.0, "read_bits": 1.0, "small_mem_bits": 1 / 16,
          "np2_addr_bits": 16.0, "addr_bits": 1.0, "pipeline_bits": 1.0, "shift_bits": 1.0}


def prior_area(features: Mapping[str, float]) -> float:
    """A size of the design from its features (see _PRIOR): for ordering only, never reported."""
    return sum(w * float(features.get(name, 0.0)) for name, w in _PRIOR.items())


def cheap_row(spec: Spec, options: SweepOptions, point: DesignPoint) -> dict[str, Any]:
    """The point's cheap evaluation (from or into the evaluation cache)."""
    from dse.cache import EvalCache, cached_evaluate
    from dse.evaluate import EvalContext
    ctx = cheap_context(EvalContext.from_spec(spec, data_seed=options.data_seed, sim_backend=options.sim_backend),
                        spec)
    cache = EvalCache(options.cache_dir) if options.use_cache else None
    workdir = point_dir(spec=spec, point=point, target=str(spec.target), seed=options.data_seed,
                        results_root=options.results_root)
    if cache is None:       # trials have their own folders then (dse.study.trial.trial_workdir)
        workdir = workdir.with_name(f"{workdir.name}-cheap")
    try:
        with contextlib.redirect_stdout(sys.stderr):    # tools' chatter must not mix with results
            return cached_evaluate(ctx, point, workdir, cache)[0]
    except Exception as exc:                            # noqa: BLE001 - the trial will say why
        return {"status": "FAIL", "stage": "sweep", "error": f"{type(exc).__name__}: {exc}"}


def _build_group(point: DesignPoint) -> tuple:
    """Points that build the same model (model, dtype, formats, pruning) and differ in hardware
    knobs only: one trace serves them all in a process (dse.evaluate.built_point)."""
    from dse.spec import PRUNE_KNOB
    return (point.model, point.dtype, point.formats().settings, str(point.knobs.get(PRUNE_KNOB)))


CHUNK = 32
"""Points a cheap-pass process takes at a time, in build groups (its trace is reused)."""
PROGRESS_EVERY = 500


def cheap_rows(spec: Spec, options: SweepOptions, points: Sequence[DesignPoint],
               log: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """`cheap_row` of every point, in `options.n_jobs` processes (spawned, as the sweep's), each
    taking CHUNK points of one build group at a time; the rows in `points`' order. `log` hears
    how far it is every PROGRESS_EVERY points."""
    import time
    jobs = min(options.n_jobs, len(points))
    order = sorted(range(len(points)), key=lambda i: (_build_group(points[i]), i))
    grouped = [points[i] for i in order]
    t0, rows = time.monotonic(), []

    def collect(results) -> None:
        for row in results:
            rows.append(row)
            n = len(rows)
            if log is not None and (n % PROGRESS_EVERY == 0) and n < len(grouped):
                left = (time.monotonic() - t0) / n * (len(grouped) - n)
                log(f"multi-fidelity: cheap evaluation {n}/{len(grouped)} points, {time.monotonic() - t0:.0f} s, "
                    f"ETA {left:.0f} s")
    if jobs <= 1:
        collect(cheap_row(spec, options, p) for p in grouped)
    else:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
            collect(pool.map(cheap_row, [spec] * len(grouped), [options] * len(grouped), grouped, chunksize=CHUNK))
    out: list[dict[str, Any]] = [{}] * len(points)
    for i, row in zip(order, rows):
        out[i] = row
    return out


def _vector(spec: Spec, row: Mapping[str, Any], predicted: Mapping[str, float] | None) -> list[float]:
    """The point's objective vector, minimised: estimated metrics from `predicted` (estimates)
    or the prior, exact ones as measured (unknown: the most favourable value, so it goes early)."""
    features = json.loads(row.get("features") or "{}")
    out = []
    for o in spec.objectives:
        maximize = str(o.direction) == "maximize"
        m = "cycles" if o.metric == "latency_us" else o.metric       # latency follows cycles first
        if m in ESTIMATED_METRICS:
            v = predicted.get(m) if predicted is not None else None
            if v is None:
                v = 0.0 if maximize else prior_area(features)
        else:
            v = row.get(m) if row.get(m) is not None else row.get(f"{m}_model")
            if v is None:
                v = float("inf") if maximize else float("-inf")
        out.append(-float(v) if maximize else float(v))
    return out


MAX_RANKS = 50
"""Fronts peeled off a model x dtype's points before the rest are queued as one last rank: on a
grid of ten thousand points the likely front and the next few fronts are what the order is for
(the gate skips the points far behind them whatever their order)."""


def pareto_ranks(vectors: Sequence[Sequence[float]], max_ranks: int = MAX_RANKS) -> list[int]:
    """Non-dominated sorting (all minimised): 0 for the front, 1 for the front of the rest, ...;
    points behind `max_ranks` fronts all get rank `max_ranks`. Each front is found in one pass in
    lexicographic order, where a point can only be dominated by one before it, so only against
    the front found so far (ten thousand points of three objectives: about a second a front)."""
    import numpy as np
    if not len(vectors):
        return []
    v = np.asarray(vectors, dtype=float).reshape(len(vectors), -1)
    ranks = np.full(len(v), max_ranks, dtype=int)
    left = np.lexsort(v.T[::-1])                        # by the first objective, then the next, ...
    for rank in range(max_ranks):
        if not len(left):
            break
        front = np.empty((len(left), v.shape[1]))
        n, behind = 0, []
        for i in left:
            p = v[i]
            f = front[:n]
            if n and ((f <= p).all(axis=1) & (f < p).any(axis=1)).any():
                behind.append(i)
            else:
                front[n] = p
                n += 1
                ranks[i] = rank
        left = np.asarray(behind, dtype=int)
    return ranks.tolist()


def _never(row: Mapping[str, Any]) -> bool:
    """A point the gate will never synthesise: it failed, or cannot be feasible."""
    return (row.get("status") != "OK" or not row.get("features") or row.get("correct") is False
            or row.get("overflow_safe") is False)


def rank_points(spec: Spec, points: Sequence[DesignPoint], rows: Sequence[Mapping[str, Any]],
                predict: Callable[[Mapping[str, float]], Mapping[str, float]] | None) -> list[DesignPoint]:
    """`points` (with their cheap `rows`, in the seeded grid order) in synthesis order
    (module docstring); `predict(features)` gives each estimated metric's central estimate."""
    never = [i for i, r in enumerate(rows) if _never(r)]
    groups: dict[tuple[str, str], list[int]] = {}
    for i, p in enumerate(points):
        if i not in never:
            groups.setdefault((p.model, p.dtype), []).append(i)
    rank, size = {}, {}
    for members in groups.values():
        vectors = []
        for i in members:
            features = json.loads(rows[i]["features"])
            predicted = predict(features) if predict else None
            luts = (predicted or {}).get("luts")
            size[i] = luts if luts is not None else prior_area(features)
            vectors.append(_vector(spec, rows[i], predicted))
        for i, r in zip(members, pareto_ranks(vectors)):
            rank[i] = r
    never_rank = max(rank.values(), default=0) + 1
    smallest_first = spec.search.hv_tolerance > 0
    order = sorted(range(len(points)),
                   key=lambda i: (rank.get(i, never_rank), size.get(i, 0.0) if smallest_first else 0.0, i))
    return [points[i] for i in order]


def record_cheap_points(study, spec: Spec, points: Sequence[DesignPoint], rows: Sequence[Mapping[str, Any]]) -> None:
    """Each feasible-looking point's exact objective values and features, per model x dtype and
    keyed by its knobs, into the study (dse.fidelity.CHEAP_ATTR; a resumed study's points are
    replaced, not counted twice)."""
    keep = {o.metric for o in spec.objectives} | {f"{o.metric}_model" for o in spec.objectives} | {"cycles_model"}
    held = dict(study.user_attrs.get(CHEAP_ATTR) or {})
    for p, r in zip(points, rows):
        if not _never(r):
            held.setdefault(group_key(p.model, p.dtype), {})[json.dumps(dict(p.knobs), sort_keys=True)] = {
                "row": {k: r[k] for k in keep if r.get(k) is not None}, "features": json.loads(r["features"])}
    study.set_user_attr(CHEAP_ATTR, held)


def synthesis_order(study, points: Sequence[DesignPoint], *, spec: Spec, options: SweepOptions,
                    log: Callable[[str], None] | None = None) -> list[DesignPoint]:
    """The cheap pass over `points`, then `points` in synthesis order (module docstring)."""
    if not points:
        return []
    if log is not None:
        what = "simulation, checks" if needs_simulation(spec) else "overflow proof; no simulation"
        log(f"multi-fidelity: cheap evaluation of {len(points)} points (compile, cycle model, {what}) "
            f"before any synthesis, to synthesise the likely front first")
    rows = cheap_rows(spec, options, points, log)
    if spec.search.hv_tolerance > 0:
        record_cheap_points(study, spec, points, rows)
    from dse.cache import EvalCache
    estimator = fit(study, spec, EvalCache(options.cache_dir) if options.use_cache else None)
    if estimator is None:
        return rank_points(spec, points, rows, None)
    return rank_points(spec, points, rows, lambda f: {m: e.value for m, e in estimator.predict(f).items()})
