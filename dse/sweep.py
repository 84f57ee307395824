"""`dse sweep`: explore a spec's design space with one Optuna study, evaluating each point with
`dse.evaluate`, and write the results.

    result = sweep(load_spec("configs/gemv.yaml"), SweepOptions(n_jobs=2))
    result.results_dir            # results/gemv/: trials.csv, pareto.csv, pareto.md, study.journal

Optuna stays at the edge. A trial's parameters are the design point: `model`, `dtype` and
one categorical parameter per knob of the spec. The driver below maps them to a
`DesignPoint`, calls `cached_evaluate` (a pure `evaluate(point) -> metrics` behind the
evaluation cache) and tells Optuna the outcome:

    every objective measured    COMPLETE with the objective values (directions from the spec)
                                and named constraints (`Trial.set_constraint`, the mechanism
                                every Optuna 5 sampler and `Study.best_trials` read; a value
                                <= 0 is satisfied): `correct` (outputs match the reference),
                                `overflow_safe` (the proven accumulator width fits),
                                `checks` (the evaluation passed every check, e.g. simulated
                                cycles == the cycle model), with `timing: true` `fits`
                                (some device holds the design), and each resource budget of
                                the spec (`luts_max: 5000` gives `luts_max` = luts - 5000).
                                A point computing a wrong result is thus an infeasible trial
                                the samplers learn from, not a dropped row.
    an objective not measured   FAIL (the point failed to configure, compile, simulate or
                                synthesise, or no device holds it so it has no fmax); the
                                reason is in the trial's user attributes
                                `stage`, `error`, `error_type`, and the whole metrics row in
                                `metrics`. The sweep goes on.

Samplers (spec `search.sampler`), all seeded from `search.seed`:
    grid    every point of models x dtypes x knobs, in an order shuffled with the seed
            (`search.trials` smaller than the grid: the first that many of that order). The
            points are put in Optuna's trial queue (`Study.enqueue_trial`) and workers pop
            them, so each point is evaluated exactly once even with several processes.
    random  RandomSampler.
    tpe     TPESampler (multi-objective TPE when the spec has several objectives).
    nsga2   NSGAIISampler; the population is a quarter of the budget (4..50), so a 40-trial
            sweep runs 4 generations instead of one random population of 50.
With --n-jobs 1 a study is reproducible from the seed. Several processes share the storage;
each process' sampler is seeded from (seed, trials already in the study, process index), so a
resumed study does not replay the points it already has; the order in which processes finish
makes parallel TPE/NSGA-II runs differ in their later points (the grid and the trial counts do
not).

Budget and resume. `search.trials` (or --trials) counts the trials already evaluated in the
study (COMPLETE and FAIL); running the same command again runs only what is missing: nothing,
if the study is complete. Trials cut short by Ctrl-C are FAIL with user attribute
`interrupted` and do not count: their points are run again on resume (grid: re-queued). The
study also records the spec's search space; resuming with a different one (models with their
parameters and input ranges, dtypes, knobs, objectives, constraints, target, data seed) is
refused with a message, or starts over with --fresh.

Storage. Default: a journal file, results/<study>/study.journal (Optuna's JournalStorage with
JournalFileBackend: an append-only log under a file lock, so several processes write to it
without SQLite's "database is locked"). --storage takes any Optuna storage URL
(sqlite:///x.db, postgresql://...) or the path of a journal file. On postgresql:// and mysql://
URLs trials record heartbeats and stale ones are retried; `dse worker` (dse/worker.py) joins such a
study from other machines.

Parallel jobs: --n-jobs N starts N worker processes (spawned: evaluation is CPU bound, threads
would not run in parallel) sharing the storage; the remaining budget is split between them so
the total is exact.

Ctrl-C: the trial being evaluated is marked FAIL (interrupted), everything finished stays in
the storage, and the output files are written from the storage before exiting.

Outputs (dse.results): trials.csv, pareto.csv, pareto.md in results/<study>/, written
atomically from the storage at the end of every run.
"""
from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
import traceback
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from dse.spec import DesignPoint, FrozenMap, Sampler, Spec

SPACE_ATTR = "tinyhw:space"
"""Study user attribute holding the search space the study was created for."""
CONSTRAINTS_ATTR = "constraints"
"""Trial user attribute: the constraint values by name (the same values as Optuna's)."""


class SweepError(ValueError):
    """A sweep cannot start (bad storage, a study made for another search space)."""


@dataclass(frozen=True)
class SweepOptions:
    results_root: Path = Path("results")    # outputs go to <results_root>/<study>/
    storage: str | None = None              # Optuna storage URL or journal path; None: the default journal
    n_jobs: int = 1                         # worker processes
    trials: int | None = None               # overrides the spec's search.trials
    fresh: bool = False                     # delete the study from the storage first
    use_cache: bool = True
    cache_dir: Path | None = None           # None: dse.cache.cache_dir()
    sim_backend: str = "auto"
    data_seed: int = 0
    progress: str = "auto"                  # "auto" (a bar on a terminal, lines otherwise), "bar", "lines", "off"

    def __post_init__(self) -> None:
        if self.n_jobs < 1:
            raise ValueError(f"n_jobs: expected a positive integer, got {self.n_jobs!r}")
        if self.trials is not None and self.trials < 1:
            raise ValueError(f"trials: expected a positive integer, got {self.trials!r}")
        if self.progress not in ("auto", "bar", "lines", "off"):
            raise ValueError(f"progress: expected auto, bar, lines or off, got {self.progress!r}")


@dataclass(frozen=True)
class SweepResult:
    study: str
    results_dir: Path
    files: tuple[Path, ...]         # trials.csv, pareto.csv, pareto.md
    budget: int                     # trials the study should have when complete
    done_before: int                # evaluated trials the study had when this run started
    ran: int                        # trials finished in this run (evaluated or from the cache)
    cached: int                     # of those, served from the cache
    failed: int                     # of those, FAIL
    interrupted: bool
    seconds: float
    feasible: int                   # feasible trials in the whole study
    pareto: int                     # rows of pareto.csv
    worker_errors: tuple[str, ...] = ()


# ---------------------------------------------------------------------------------------------
# trial <-> design point

def search_space(spec: Spec) -> dict[str, list[Any]]:
    """The trial parameters and their categorical choices: model, dtype, each knob."""
    space: dict[str, list[Any]] = {"model": [m.name for m in spec.models], "dtype": list(spec.dtypes)}
    space.update({k.name: list(k.values) for k in spec.knobs})
    return space


def suggest_point(trial, spec: Spec) -> DesignPoint:
    """The design point a trial's suggestions name."""
    space = search_space(spec)
    values = {name: trial.suggest_categorical(name, choices) for name, choices in space.items()}
    knobs = FrozenMap((k.name, values[k.name]) for k in spec.knobs)
    return DesignPoint(values["model"], values["dtype"], knobs)


def point_params(point: DesignPoint) -> dict[str, Any]:
    return {"model": point.model, "dtype": point.dtype, **dict(point.knobs)}


def space_fingerprint(spec: Spec, data_seed: int = 0) -> dict[str, Any]:
    """What a study's trials mean: resuming under a different one is refused."""
    return {
        "models": [[m.name, m.describe(), str(m.source or ""),
                    {dt: [r.min, r.max] for dt, r in m.input_ranges.items()}] for m in spec.models],
        "data_seed": data_seed,
        "dtypes": list(spec.dtypes),
        "knobs": {k.name: list(k.values) for k in spec.knobs},
        "objectives": [[o.metric, str(o.direction)] for o in spec.objectives],
        "constraints": sorted([b.key, b.limit] for b in spec.constraints),
        "target": str(spec.target),
    }


def constraint_values(spec: Spec, row: dict[str, Any]) -> dict[str, float]:
    """Named constraint values of a measured row (<= 0: satisfied)."""
    def flag(ok: Any) -> float:
        return 0.0 if ok is True else 1.0
    out = {"correct": flag(row.get("correct")), "overflow_safe": flag(row.get("overflow_safe")),
           "checks": flag(row.get("status") == "OK")}
    if spec.timing:                         # place-and-route found a device that holds it
        out["fits"] = flag(row.get("fits"))
    for b in spec.constraints:
        v = row.get(b.metric)
        out[b.key] = 1.0 if v is None else float(v - b.limit if b.kind == "max" else b.limit - v)
    return out


def objective_values(spec: Spec, row: dict[str, Any]) -> tuple[list[float] | None, list[str]]:
    """(values in spec order, or None; the objectives that were not measured)."""
    missing = [o.metric for o in spec.objectives if row.get(o.metric) is None]
    if missing:
        return None, missing
    return [float(row[o.metric]) for o in spec.objectives], []


# ---------------------------------------------------------------------------------------------
# storage and study

def _optuna():
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna


def storage_location(spec: Spec, options: SweepOptions) -> str:
    """The storage as a string a worker process can reopen: a URL, or a journal file path."""
    if options.storage:
        return options.storage
    return str(results_dir(spec, options) / "study.journal")


def open_storage(location: str):
    """An Optuna storage: a URL ("scheme://...") as Optuna opens it, else a journal file."""
    optuna = _optuna()
    if "://" in location:
        try:
            from dse.worker import rdb_storage, uses_heartbeat
            if uses_heartbeat(location):        # a shared database: heartbeats, stale trials retried
                return rdb_storage(location)
            return optuna.storages.get_storage(location)
        except Exception as exc:           # noqa: BLE001 - any driver error: bad input
            raise SweepError(f"--storage {location}: cannot open: {type(exc).__name__}: {exc}") from None
    from optuna.storages.journal import JournalFileBackend, JournalStorage
    path = Path(location)
    path.parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(str(path)))


def results_dir(spec: Spec, options: SweepOptions) -> Path:
    return Path(options.results_root) / spec.study


def make_sampler(spec: Spec, seed: int, n_jobs: int = 1):
    optuna = _optuna()
    s = spec.search.sampler
    if s is Sampler.TPE:
        return optuna.samplers.TPESampler(seed=seed, constant_liar=n_jobs > 1)
    if s is Sampler.NSGA2:
        population = max(4, min(50, spec.search.trials // 4))
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=population)
    # random; and grid, whose points all come from the trial queue (the sampler is never asked
    # while the queue holds a point, and the driver asks exactly as many times as it holds)
    return optuna.samplers.RandomSampler(seed=seed)


def worker_seed(seed: int, trials_in_study: int, worker: int) -> int:
    return int(np.random.SeedSequence([seed, trials_in_study, worker]).generate_state(1)[0])


def _is_evaluated(t) -> bool:
    """A trial that counts against the budget: its point was evaluated (a trial cut short by
    Ctrl-C, or left RUNNING by a killed sweep, is FAIL without a metrics row)."""
    from optuna.trial import TrialState
    return t.state is TrialState.COMPLETE or (t.state is TrialState.FAIL and "metrics" in t.user_attrs
                                              and not t.user_attrs.get("interrupted"))


# A grid point whose evaluating process died (killed, out of memory) more than this many times
# is recorded as a failure instead of being queued again.
MAX_RETRY = 3


DIED_ATTR = "died"
"""User attribute of a trial whose own evaluating process died while the sweep that ran it
stayed alive (the sweep saw its worker process exit abnormally mid-trial): the only kind of
death a point is charged with. A trial left RUNNING because the whole sweep was killed (a CI
time-out, a closed laptop, the OOM killer taking the process group) is not the point's fault:
it is failed without this mark when the study is next opened, and its point is simply run again."""


def _died(t) -> bool:
    from optuna.trial import TrialState
    return t.state is TrialState.FAIL and t.user_attrs.get(DIED_ATTR) is True


def record_death(location: str, study_name: str, number: int, exitcode: int | None) -> None:
    """Mark trial `number` as killed with its process (see DIED_ATTR) and fail it."""
    from optuna.trial import TrialState
    storage = open_storage(location)
    study = _optuna().load_study(study_name=study_name, storage=storage)
    trial_id = storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
    if storage.get_trial(trial_id).state is not TrialState.RUNNING:
        return                                  # it finished after all
    storage.set_trial_user_attr(trial_id, DIED_ATTR, True)
    storage.set_trial_user_attr(trial_id, "error", f"its evaluating process died (exit code {exitcode})")
    study.tell(number, state=TrialState.FAIL, skip_if_finished=True)


def deaths_by_point(trials, spec: Spec) -> Counter:
    """How many times each point's process died (keys as `_point_key`)."""
    return Counter(_point_key(t.user_attrs.get("point") or t.params, spec) for t in trials if _died(t))


def give_up(study, spec: Spec, point, deaths: int) -> None:
    """Record a grid point whose process died `deaths` times as a FAIL trial with a metrics row:
    it counts as evaluated, is not queued again, and trials.csv says why."""
    optuna = _optuna()
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState
    params = point_params(point)
    error = (f"the process evaluating this point died {deaths} times (killed, out of memory, or a "
             "tool that takes the process down); not retried again")
    row = {"model": point.model, "dtype": point.dtype, "knobs": dict(point.knobs), "status": "FAIL",
           "stage": "worker", "error": error}
    space = search_space(spec)
    study.add_trial(optuna.trial.create_trial(
        state=TrialState.FAIL, params=params,
        distributions={k: CategoricalDistribution(space[k]) for k in params},
        user_attrs={"point": params, "metrics": row, "stage": "worker", "error": error}))


def untaken_points(points, taken: set, deaths: Counter, spec: Spec):
    """The grid `points` whose keys are not in `taken`, split into (to queue, to give up): a
    point whose process died more than MAX_RETRY times is given up, with its death count."""
    missing, abandoned = [], []
    for p in points:
        k = _point_key(point_params(p), spec)
        if k in taken:
            continue
        if deaths[k] > MAX_RETRY:
            abandoned.append((p, deaths[k]))
        else:
            missing.append(p)
    return missing, abandoned


def queue_points(study, spec: Spec, missing, abandoned) -> None:
    """Record the given-up points once (`give_up`) and put the missing ones in the trial queue."""
    for p, deaths in abandoned:
        give_up(study, spec, p, deaths)
    for p in missing:
        study.enqueue_trial(point_params(p), user_attrs={"point": point_params(p)})


def grid_points(spec: Spec, budget: int) -> list[DesignPoint]:
    """The grid in its seeded order, cut to `budget` points."""
    points = list(spec.points())
    order = np.random.default_rng(spec.search.seed).permutation(len(points))
    return [points[i] for i in order[:budget]]


def _point_key(params: dict[str, Any], spec: Spec) -> tuple:
    return (params.get("model"), params.get("dtype"), *(params.get(k.name) for k in spec.knobs))


def prepare_study(spec: Spec, options: SweepOptions, location: str):
    """Create or resume the study; returns (study, budget, evaluated trials, trials to run).
    Marks trials left RUNNING by a killed sweep as interrupted and, for the grid, queues the
    points not evaluated yet (never one that is already queued)."""
    optuna = _optuna()
    from optuna.trial import TrialState
    storage = open_storage(location)
    directions = [str(o.direction) for o in spec.objectives]
    if options.fresh:
        with contextlib.suppress(KeyError):
            optuna.delete_study(study_name=spec.study, storage=storage)
    study = optuna.create_study(study_name=spec.study, storage=storage, directions=directions,
                                load_if_exists=True, sampler=optuna.samplers.RandomSampler(seed=0))
    space = json.loads(json.dumps(space_fingerprint(spec, options.data_seed)))
    known = study.user_attrs.get(SPACE_ATTR)
    if known is None:
        study.set_user_attr(SPACE_ATTR, space)
    elif known != space:
        changed = ", ".join(k for k in space if space[k] != known.get(k)) or "the layout"
        raise SweepError(f"study {spec.study!r} in {location} was made for another search space "
                         f"(changed: {changed}); run with --fresh to start it over, or rename the study")
    if [str(d.name).lower() for d in study.directions] != directions:
        raise SweepError(f"study {spec.study!r} in {location} optimises other directions; use --fresh")

    from dse.worker import fail_stale_trials, heartbeat_enabled
    trials = study.get_trials(deepcopy=False)
    if heartbeat_enabled(storage):          # shared by workers: fail only trials whose heartbeat stopped
        fail_stale_trials(study)
        trials = []
    for t in trials:                        # left RUNNING by a sweep that was killed
        if t.state is TrialState.RUNNING:
            with contextlib.suppress(Exception):
                study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
    trials = study.get_trials(deepcopy=False)
    evaluated = [t for t in trials if _is_evaluated(t)]
    running = [t for t in trials if t.state is TrialState.RUNNING]     # live, in other workers

    if spec.search.sampler is Sampler.GRID:
        budget = min(options.trials or spec.search.trials, spec.space_size)
        wanted = grid_points(spec, budget)
        have = {_point_key(t.params, spec) for t in evaluated}
        queued = {_point_key(t.user_attrs.get("point", {}), spec) for t in trials if t.state is TrialState.WAITING}
        busy = {_point_key(t.user_attrs.get("point") or t.params, spec) for t in running}
        queued |= busy                      # running in another worker: not queued again
        missing, abandoned = untaken_points(wanted, have | queued, deaths_by_point(trials, spec), spec)
        queue_points(study, spec, missing, abandoned)
        have |= {_point_key(point_params(p), spec) for p, _ in abandoned}
        to_run = sum(1 for p in wanted if _point_key(point_params(p), spec) not in have | busy)
        done = len(evaluated) + len(abandoned)
    else:
        budget = options.trials or spec.search.trials
        to_run = max(0, budget - len(evaluated) - len(running))
        done = len(evaluated)
    return study, budget, done, to_run


# ---------------------------------------------------------------------------------------------
# the worker: ask, evaluate, tell

@dataclass(frozen=True)
class _Job:
    spec: Spec
    options: SweepOptions
    location: str
    seed_base: int                  # trials in the study when the run started


# Signals that stop a sweep or worker cleanly: the trial in flight is marked interrupted (not a
# death of its point) and everything finished is kept. SIGHUP: a closed terminal or SSH session.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _Interrupt:
    """SIGINT/SIGTERM/SIGHUP: remember it; raise KeyboardInterrupt only while a point is being
    evaluated (never in the middle of a storage write, so the journal stays whole)."""

    def __init__(self, raise_when_armed: bool = True) -> None:
        self.count = 0                  # signals received
        self.armed = False
        self.raise_when_armed = raise_when_armed
        self._old: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.count > 0

    @requested.setter
    def requested(self, value: bool) -> None:
        self.count = max(self.count, int(value))

    def __call__(self, signum, frame) -> None:
        self.count += 1
        if self.count == 1 and self.armed and self.raise_when_armed:
            raise KeyboardInterrupt

    def install(self, signals=(signal.SIGINT,)) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for s in signals:
            self._old[s] = signal.signal(s, self)

    def restore(self) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old.clear()


def _workdir(spec: Spec, options: SweepOptions, point: DesignPoint, number: int) -> Path:
    from dse.cli import point_dir
    rel = point_dir(spec, point, str(spec.target), options.data_seed).relative_to(Path("results") / spec.study)
    d = results_dir(spec, options) / rel
    return d if options.use_cache else d.with_name(f"{d.name}-t{number}")


MAX_INAPPLICABLE_ASKS = 1000      # then the last point is evaluated (and fails at compile)


def run_trial(study, spec: Spec, options: SweepOptions, ctx, cache, stop: _Interrupt,
              log: Callable[[str], None] | None = None,
              on_start: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Ask for one trial, evaluate its point, tell the outcome; returns a progress event.
    `on_start(number)` is told which trial is being evaluated (so a parent process that sees
    this one die can charge the trial with its death)."""
    from dse.worker import heartbeat
    trial = study.ask()
    for _ in range(MAX_INAPPLICABLE_ASKS):
        if not prune_inapplicable(study, trial, spec):
            break
        trial = study.ask()
    if on_start is not None:
        on_start(trial.number)
    with heartbeat(study, trial):
        return run_asked_trial(study, trial, spec, options, ctx, cache, stop, log)


def prune_inapplicable(study, trial, spec: Spec) -> bool:
    """A sampler may propose a point that is not in the search space (Spec.left_out: a knob
    cannot apply to it); the grid never queues one. Such a trial is told PRUNED, with why,
    without compiling (it counts against no budget and is no row): True if it was."""
    from optuna.trial import TrialState
    why = spec.left_out(suggest_point(trial, spec))
    if why:
        trial.set_user_attr("not_applicable", why)
        study.tell(trial, state=TrialState.PRUNED)
    return bool(why)


def run_asked_trial(study, trial, spec: Spec, options: SweepOptions, ctx, cache, stop: _Interrupt,
                    log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Evaluate an asked trial's point and tell the outcome; returns a progress event."""
    from optuna.trial import TrialState
    from dse.cache import cached_evaluate
    from dse.evaluate import json_safe
    point = suggest_point(trial, spec)
    event: dict[str, Any] = {"number": trial.number, "model": point.model, "dtype": point.dtype,
                             "knobs": dict(point.knobs), "values": None, "feasible": False,
                             "cached": False, "error": None}
    t0 = time.perf_counter()
    row: dict[str, Any] | None = None
    try:
        stop.armed = True
        try:
            if stop.requested:
                raise KeyboardInterrupt
            row, cached, _ = cached_evaluate(ctx, point, _workdir(spec, options, point, trial.number), cache, log)
        finally:
            stop.armed = False
    except KeyboardInterrupt:
        stop.requested = True
    except Exception as exc:                # noqa: BLE001 - a bug here must not end the sweep
        row = {**point_params(point), "knobs": dict(point.knobs), "status": "FAIL", "stage": "sweep",
               "error": f"{type(exc).__name__}: {exc}", "error_type": type(exc).__name__,
               "notes": traceback.format_exc(limit=5)}
        cached = False
    seconds = time.perf_counter() - t0
    if row is None or (stop.requested and row.get("status") != "OK"):
        # cut short (a tool killed by the same Ctrl-C fails too: that is not the point's fault)
        trial.set_user_attr("interrupted", True)
        study.tell(trial, state=TrialState.FAIL)
        return {**event, "status": "INTERRUPTED", "error": "interrupted", "seconds": seconds}

    row = json_safe(row)
    trial.set_user_attr("metrics", row)
    trial.set_user_attr("cached", cached)
    trial.set_user_attr("trial_s", round(seconds, 3))
    for k in ("stage", "error", "error_type"):
        if row.get(k):
            trial.set_user_attr(k, row[k])
    values, missing = objective_values(spec, row)
    if values is None:
        # an OK row with a reason (a design that does not fit: no Fmax) keeps that reason
        if row.get("status") == "OK" and not row.get("error"):
            reason = f"objective{'s' * (len(missing) > 1)} {', '.join(missing)} not measured"
            trial.set_user_attr("stage", "objectives")
            trial.set_user_attr("error", reason)
        study.tell(trial, state=TrialState.FAIL)
        return {**event, "status": "FAIL", "cached": cached, "seconds": seconds,
                "error": row.get("error") or f"{', '.join(missing)} not measured", "stage": row.get("stage")}
    constraints = constraint_values(spec, row)
    for name, v in constraints.items():
        _set_constraint(study, trial, name, v)
    trial.set_user_attr(CONSTRAINTS_ATTR, constraints)
    study.tell(trial, values)
    feasible = all(v <= 0 for v in constraints.values())
    return {**event, "status": row.get("status", "OK"), "values": values, "feasible": feasible,
            "cached": cached, "seconds": seconds, "error": row.get("error"), "stage": row.get("stage")}


def _set_constraint(study, trial, name: str, value: float) -> None:
    if hasattr(trial, "set_constraint"):            # Optuna >= 5
        trial.set_constraint(name, value)
    else:                                           # Optuna 4: the list form samplers read
        attrs = study._storage.get_trial_system_attrs(trial._trial_id)
        study._storage.set_trial_system_attr(trial._trial_id, "constraints",
                                             list(attrs.get("constraints") or []) + [value])


def work(job: _Job, worker: int, share: int, emit: Callable[[dict[str, Any]], None],
         stop: _Interrupt) -> None:
    """Run `share` trials of the study (one worker)."""
    optuna = _optuna()
    from dse.cache import EvalCache
    from dse.evaluate import EvalContext
    spec, options = job.spec, job.options
    storage = open_storage(job.location)
    sampler = make_sampler(spec, worker_seed(spec.search.seed, job.seed_base, worker), options.n_jobs)
    study = optuna.load_study(study_name=spec.study, storage=storage, sampler=sampler)
    ctx = EvalContext.from_spec(spec, data_seed=options.data_seed, sim_backend=options.sim_backend)
    cache = EvalCache(options.cache_dir) if options.use_cache else None
    for _ in range(share):
        if stop.requested:
            break
        with contextlib.redirect_stdout(sys.stderr):     # tools' chatter must not mix with results
            event = run_trial(study, spec, options, ctx, cache, stop,
                              on_start=lambda n: emit({"type": "started", "worker": worker, "number": n}))
        emit({**event, "worker": worker})


def _worker_main(job: _Job, worker: int, share: int, events) -> None:
    """Entry point of a worker process."""
    stop = _Interrupt()
    stop.install(STOP_SIGNALS)
    try:
        work(job, worker, share, events.put, stop)
    except BaseException as exc:            # noqa: BLE001 - reported to the parent
        events.put({"type": "worker_error", "worker": worker,
                    "error": "".join(traceback.format_exception(exc))})
    finally:
        events.put({"type": "done", "worker": worker})


# ---------------------------------------------------------------------------------------------
# the driver

def shares(total: int, n: int) -> list[int]:
    """`total` split into n near-equal parts (the first ones larger)."""
    return [total // n + (i < total % n) for i in range(n)]


def sweep(spec: Spec, options: SweepOptions = SweepOptions()) -> SweepResult:
    """Run (or resume) the study of `spec` and write its output files."""
    from dse.progress import Progress
    from dse.results import write_outputs
    t0 = time.perf_counter()
    location = storage_location(spec, options)
    out = results_dir(spec, options)
    out.mkdir(parents=True, exist_ok=True)
    from dse.worker import study_lock
    with study_lock(location, spec.study):      # PostgreSQL: not while a `dse worker` queues points
        study, budget, done_before, to_run = prepare_study(spec, options, location)
    job = _Job(spec, options, location, len(study.get_trials(deepcopy=False)))
    progress = Progress(total=budget, initial=done_before, objectives=spec.objectives,
                        mode=options.progress, n_jobs=options.n_jobs, desc=spec.study)
    stats = {"ran": 0, "cached": 0, "failed": 0}
    errors: list[str] = []

    def on_event(event: dict[str, Any]) -> None:
        if event.get("type") == "started":
            return
        if event.get("type") == "worker_error":
            errors.append(event["error"])
            progress.message(f"worker {event['worker']} stopped: {event['error'].strip().splitlines()[-1]}")
            return
        if event["status"] == "INTERRUPTED":
            return
        stats["ran"] += 1
        stats["cached"] += bool(event.get("cached"))
        stats["failed"] += event["status"] != "OK"
        progress.update(event)

    interrupted = False
    jobs = max(1, min(options.n_jobs, to_run))
    try:
        if to_run == 0:
            pass
        elif jobs == 1:
            interrupted = _run_here(job, to_run, on_event)
        else:
            interrupted = _run_processes(job, shares(to_run, jobs), on_event)
    finally:
        progress.close()
        files, summary = write_outputs(study, spec, out)
    return SweepResult(spec.study, out, files, budget, done_before, stats["ran"], stats["cached"],
                       stats["failed"], interrupted, time.perf_counter() - t0, summary["feasible"],
                       summary["pareto"], tuple(errors))


def _run_here(job: _Job, share: int, on_event) -> bool:
    stop = _Interrupt()
    stop.install(STOP_SIGNALS)
    try:
        work(job, 0, share, on_event, stop)
    finally:
        stop.restore()
    return stop.requested


def _run_processes(job: _Job, parts: list[int], on_event) -> bool:
    """Run the shares in worker processes; returns whether the run was interrupted. The
    parent only listens: a Ctrl-C (which the terminal also sends to the workers) or a SIGINT
    sent to the parent alone is forwarded; a second one stops waiting for the workers."""
    mp = multiprocessing.get_context("spawn")
    events = mp.Queue()
    procs = [mp.Process(target=_worker_main, args=(job, i, n, events), name=f"dse-sweep-{i}")
             for i, n in enumerate(parts) if n > 0]
    stop = _Interrupt(raise_when_armed=False)
    stop.install(STOP_SIGNALS)
    try:
        for p in procs:
            p.start()
        finished: set[int] = set()
        evaluating: dict[int, int] = {}         # worker -> the trial it is evaluating
        forwarded = 0
        deadline: float | None = None
        while len(finished) < len(procs):
            if stop.count > forwarded:
                forwarded = stop.count
                if forwarded == 1:
                    for p in procs:
                        if p.is_alive() and p.pid:
                            with contextlib.suppress(OSError):
                                os.kill(p.pid, signal.SIGINT)
                    deadline = time.monotonic() + 60
                else:
                    deadline = time.monotonic()
            if deadline is not None and time.monotonic() >= deadline:
                for p in procs:
                    if p.is_alive():
                        p.terminate()
                break
            try:
                ev = events.get(timeout=0.25)
            except queue.Empty:
                for i, p in enumerate(procs):       # a worker that died without saying so
                    if i not in finished and not p.is_alive() and p.exitcode not in (0, None):
                        finished.add(i)
                        if i in evaluating and not stop.requested:      # killed with its point
                            with contextlib.suppress(Exception):
                                record_death(job.location, job.spec.study, evaluating[i], p.exitcode)
                        on_event({"type": "worker_error", "worker": i,
                                  "error": f"worker {i} exited with code {p.exitcode}"})
                continue
            if ev.get("type") == "started":
                evaluating[ev["worker"]] = ev["number"]
            elif "number" in ev:
                evaluating.pop(ev.get("worker"), None)
            if ev.get("type") == "done":
                finished.add(ev["worker"])
            elif ev.get("type") == "worker_error" and stop.requested and "KeyboardInterrupt" in ev["error"]:
                pass
            else:
                on_event(ev)
        for p in procs:
            p.join(timeout=10)
    finally:
        stop.restore()
    return stop.requested
