"""`dse worker`: one of many processes, on one machine or many, that share a study in a database
(Optuna's RDBStorage, e.g. PostgreSQL) and evaluate its trials until the budget is spent.

    dse worker configs/gemv.yaml --storage postgresql://user:pw@db-host/tinyhw     # on every machine
    dse sweep  configs/gemv.yaml --storage postgresql://user:pw@db-host/tinyhw     # or any mix of both

A worker joins the study (creating it when absent, with the same name and search-space checks as
`dse sweep`) and loops: fail the stale trials, decide what is left, take one trial, evaluate it,
tell the outcome. It stops when the budget (search.trials, or the grid) is spent and no trial is
still running elsewhere (a trial running on a machine that dies is taken over once it is stale),
then writes trials.csv, pareto.csv and pareto.md from the storage into results/<study>/.

No point is evaluated twice:
    grid    the points are in Optuna's trial queue (`Study.enqueue_trial`, as `dse sweep` does);
            a worker takes one only while holding a PostgreSQL advisory lock keyed on the study
            (`study_lock`), so two workers never both ask for the last point, and missing points
            are queued under the same lock. A trial that did not come from the queue (another
            storage without the lock, or a `dse sweep` racing the worker) is told FAIL as
            `interrupted`/`surplus` before anything is evaluated, and does not count.
    random, tpe, nsga2
            a worker asks only while evaluated + running + queued trials < budget (under the lock).

A worker killed mid-trial (kill -9, a lost machine) loses only that trial. Every trial records a
heartbeat (`heartbeat`, every `TINYHW_HEARTBEAT_S` seconds, default 10) in the database; a RUNNING
trial whose heartbeat is older than `TINYHW_GRACE_S` (default 60) is stale: the next worker or sweep
that looks marks it FAIL (`optuna.storages.fail_stale_trials`) and Optuna's
`RetryFailedTrialCallback` queues its parameters again (with the same user attributes, so the grid
sees the point as queued). A stale FAIL has no metrics row and does not count against the budget;
in trials.csv it is an INTERRUPTED row. A stale trial is not charged to its point: the worker
that evaluated it died as a whole (a lost machine, kill -9), which says nothing about the point.
Only a trial whose own evaluating process died while the process that ran it stayed alive (a
`dse sweep --n-jobs N` worker process, seen by its parent: `dse.sweep.DIED_ATTR`) counts as a
death; a grid point with more than `MAX_RETRY` (3) such deaths is not queued again: it is
recorded once as a FAIL trial in stage `worker` that says so (`dse.sweep.give_up`), so one point
that always takes its process down cannot stall the study. Heartbeats are on for postgresql:// and mysql:// URLs;
SQLite and journal files keep `dse sweep`'s single-machine rule (a RUNNING trial found at start is
a leftover of a killed sweep and is failed at once).
"""
from __future__ import annotations

import contextlib
import copy
import datetime
import hashlib
import os
import socket
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from dse.spec import Sampler, Spec
from dse.sweep import (MAX_RETRY, STOP_SIGNALS, SweepOptions, _Interrupt, _is_evaluated, _optuna, _point_key,
                       deaths_by_point, grid_points, queue_points, results_dir, storage_location, untaken_points)

HEARTBEAT_ENV, GRACE_ENV = "TINYHW_HEARTBEAT_S", "TINYHW_GRACE_S"
DEFAULT_HEARTBEAT_S, DEFAULT_GRACE_S = 10, 60
HEARTBEAT_SCHEMES = ("postgresql", "postgres", "mysql")


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"${name}: expected a positive number of seconds, got {raw!r}") from None
    if value < 1:
        raise ValueError(f"${name}: expected a positive number of seconds, got {raw!r}")
    return value


def uses_heartbeat(location: str) -> bool:
    """Whether `location` is a database URL on which trials record heartbeats."""
    scheme = location.split("://", 1)[0].split("+", 1)[0].lower() if "://" in location else ""
    return scheme in HEARTBEAT_SCHEMES


def rdb_storage(url: str):
    """Optuna's RDBStorage for `url` with heartbeats and retry of stale trials."""
    _optuna()
    from optuna.storages import RDBStorage
    try:                                                # Optuna >= 4.9
        from optuna.storages import RetryHeartbeatStaleTrialCallback as RetryFailedTrialCallback
    except ImportError:
        from optuna.storages import RetryFailedTrialCallback
    # ask/tell with heartbeats is what this module does on purpose (the heartbeat is ours)
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
    interval = _env_int(HEARTBEAT_ENV, DEFAULT_HEARTBEAT_S)
    grace = max(_env_int(GRACE_ENV, DEFAULT_GRACE_S), 2 * interval)
    callback = RetryFailedTrialCallback(max_retry=MAX_RETRY)
    kw: dict[str, Any] = {"heartbeat_interval": interval, "grace_period": grace,
                          "engine_kwargs": {"pool_pre_ping": True}}
    try:
        return RDBStorage(url, heartbeat_stale_trial_callback=callback, **kw)
    except TypeError:                                   # Optuna 4: the older keyword
        return RDBStorage(url, failed_trial_callback=callback, **kw)


def heartbeat_enabled(storage) -> bool:
    from optuna.storages._heartbeat import is_heartbeat_enabled
    return is_heartbeat_enabled(storage)


@contextlib.contextmanager
def heartbeat(study, trial) -> Iterator[None]:
    """Record the trial's heartbeat in a background thread while the block runs (nothing on a
    storage without heartbeats)."""
    storage = study._storage
    if not heartbeat_enabled(storage):
        yield
        return
    interval = storage.get_heartbeat_interval()
    done = threading.Event()

    def beat() -> None:
        while True:
            with contextlib.suppress(Exception):        # a lost connection must not end the trial
                storage.record_heartbeat(trial._trial_id)
            if done.wait(interval):
                return

    thread = threading.Thread(target=beat, name=f"heartbeat-{trial.number}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=5)


def fail_stale_trials(study) -> None:
    """Optuna's `fail_stale_trials`, plus the trials it never sees: a RUNNING trial with no
    heartbeat at all (its worker died between taking it and the first beat) is stale once it
    started more than twice the grace period ago by this machine's clock."""
    optuna = _optuna()
    optuna.storages.fail_stale_trials(study)
    storage = study._storage
    if not heartbeat_enabled(storage):
        return
    from optuna.trial import TrialState
    rdb = getattr(storage, "_backend", storage)        # Study wraps RDBStorage in a cache
    grace = rdb.grace_period or 2 * storage.get_heartbeat_interval()
    cutoff = datetime.datetime.now() - datetime.timedelta(seconds=2 * grace)
    beaten = _trials_with_heartbeat(rdb, study._study_id)
    callback = storage.get_heartbeat_stale_trial_callback()
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t._trial_id in beaten or t.datetime_start is None or t.datetime_start > cutoff:
            continue
        try:
            if not storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue                                    # another worker got there first
        if callback is not None:
            callback(study, copy.deepcopy(storage.get_trial(t._trial_id)))


def _trials_with_heartbeat(rdb, study_id: int) -> set[int]:
    """Ids of the study's trials that recorded a heartbeat (Optuna's own RDB tables)."""
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session
    with _create_scoped_session(rdb.scoped_session) as session:
        rows = (session.query(models.TrialHeartbeatModel.trial_id)
                .join(models.TrialModel, models.TrialModel.trial_id == models.TrialHeartbeatModel.trial_id)
                .filter(models.TrialModel.study_id == study_id).all())
    return {tid for (tid,) in rows}


@contextlib.contextmanager
def study_lock(location: str, study_name: str) -> Iterator[None]:
    """A PostgreSQL session-level advisory lock on the study (a no-op on other storages): the
    worker that holds it is the only one queueing points or asking for a trial."""
    if not location.lower().startswith(("postgresql", "postgres")):
        yield
        return
    import sqlalchemy
    key = int.from_bytes(hashlib.sha256(f"tinyhw:{study_name}".encode()).digest()[:8], "big", signed=True)
    engine = sqlalchemy.create_engine(location, poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": key})
            try:
                yield
            finally:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
    finally:
        engine.dispose()


# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class WorkerOptions:
    sweep: SweepOptions
    poll_s: float = 2.0                 # wait between looks while the rest runs elsewhere

    def __post_init__(self) -> None:
        if self.poll_s <= 0:
            raise ValueError(f"poll_s: expected a positive number of seconds, got {self.poll_s!r}")


@dataclass(frozen=True)
class WorkerResult:
    study: str
    budget: int
    evaluated: int          # evaluated trials in the whole study at the end
    ran: int                # trials this worker finished (evaluated or from the cache)
    cached: int
    failed: int
    interrupted: bool
    seconds: float
    feasible: int
    pareto: int
    files: tuple


@dataclass(frozen=True)
class _State:
    budget: int
    evaluated: int
    running: int
    waiting: int
    missing: tuple          # grid points neither evaluated, running nor queued
    abandoned: tuple = ()   # grid points whose worker died more than MAX_RETRY times: (point, deaths)


def _state(study, spec: Spec, trials_opt: int | None) -> _State:
    from optuna.trial import TrialState
    trials = study.get_trials(deepcopy=False)
    evaluated = [t for t in trials if _is_evaluated(t)]
    running = [t for t in trials if t.state is TrialState.RUNNING]
    waiting = [t for t in trials if t.state is TrialState.WAITING]
    if spec.search.sampler is Sampler.GRID:
        budget = min(trials_opt or spec.search.trials, spec.space_size)
        # a running trial's params appear one by one as its point is suggested: the user
        # attribute `point`, set when it was queued, names it whole
        taken = {_point_key(t.params, spec) for t in evaluated}
        taken |= {_point_key(t.user_attrs.get("point") or t.params, spec) for t in running}
        taken |= {_point_key(t.user_attrs.get("point", t.params), spec) for t in waiting}
        missing, abandoned = untaken_points(grid_points(spec, budget), taken, deaths_by_point(trials, spec), spec)
        return _State(budget, len(evaluated), len(running), len(waiting), tuple(missing), tuple(abandoned))
    budget = trials_opt or spec.search.trials
    return _State(budget, len(evaluated), len(running), len(waiting), ())


def _from_queue(study, trial) -> bool:
    return "fixed_params" in study._storage.get_trial_system_attrs(trial._trial_id)


def run_worker(spec: Spec, options: WorkerOptions, emit: Callable[[dict[str, Any]], None] | None = None) -> WorkerResult:
    """Join (or create) the study of `spec` in `options.sweep.storage` and evaluate trials until
    its budget is spent; then write the output files."""
    from optuna.trial import TrialState
    from dse.cache import EvalCache
    from dse.evaluate import EvalContext
    from dse.results import write_outputs
    from dse.sweep import SweepError, make_sampler, prepare_study, prune_inapplicable, run_asked_trial, worker_seed
    optuna = _optuna()
    t0 = time.perf_counter()
    sopt = options.sweep
    if not sopt.storage:
        raise SweepError("dse worker needs --storage URL (the database all workers share)")
    location = storage_location(spec, sopt)
    out = results_dir(spec, sopt)
    out.mkdir(parents=True, exist_ok=True)
    with study_lock(location, spec.study):
        study, _, _, _ = prepare_study(spec, sopt, location)
    me = int.from_bytes(hashlib.sha256(f"{socket.gethostname()}:{os.getpid()}".encode()).digest()[:4], "big")
    sampler = make_sampler(spec, worker_seed(spec.search.seed, len(study.trials), me), n_jobs=2)
    study = optuna.load_study(study_name=spec.study, storage=study._storage, sampler=sampler)
    ctx = EvalContext.from_spec(spec, data_seed=sopt.data_seed, sim_backend=sopt.sim_backend)
    cache = EvalCache(sopt.cache_dir) if sopt.use_cache else None
    grid = spec.search.sampler is Sampler.GRID
    stats = {"ran": 0, "cached": 0, "failed": 0}
    stop = _Interrupt()
    stop.install(STOP_SIGNALS)
    state = None
    try:
        while not stop.requested:
            trial = None
            with study_lock(location, spec.study):
                fail_stale_trials(study)
                state = _state(study, spec, sopt.trials)
                if grid:
                    # e.g. interrupted by Ctrl-C elsewhere, or out of Optuna's retries
                    queue_points(study, spec, state.missing, state.abandoned)
                    if state.waiting + len(state.missing) > 0:
                        trial = study.ask()
                elif state.evaluated + state.running < state.budget:     # a queued retry is popped first
                    trial = study.ask()
                if trial is not None and heartbeat_enabled(study._storage):
                    study._storage.record_heartbeat(trial._trial_id)    # at once: a trial never
                                                                        # beaten is stale only late
            if trial is None:
                if state.running == 0 and (state.evaluated >= state.budget or grid):
                    break                       # spent, and nothing left to take over
                time.sleep(options.poll_s)
                continue
            if grid and not _from_queue(study, trial):      # raced a process that holds no lock
                trial.set_user_attr("interrupted", True)
                trial.set_user_attr("surplus", True)
                study.tell(trial, state=TrialState.FAIL)
                continue
            if prune_inapplicable(study, trial, spec):
                continue
            with heartbeat(study, trial), contextlib.redirect_stdout(sys.stderr):
                event = run_asked_trial(study, trial, spec, sopt, ctx, cache, stop)
            if event["status"] == "INTERRUPTED":
                break
            stats["ran"] += 1
            stats["cached"] += bool(event.get("cached"))
            stats["failed"] += event["status"] != "OK"
            if emit:
                emit(event)
    finally:
        stop.restore()
        files, summary = write_outputs(study, spec, out)
    final = _state(study, spec, sopt.trials)
    return WorkerResult(spec.study, final.budget, final.evaluated, stats["ran"], stats["cached"], stats["failed"],
                        stop.requested, time.perf_counter() - t0, summary["feasible"], summary["pareto"],
                        tuple(files))
