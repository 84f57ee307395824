"""Where a study lives and how processes share it: opening a storage (a journal file, or any
Optuna URL), heartbeats and stale trials on a shared database, and the PostgreSQL study lock.

A RUNNING trial whose heartbeat is older than `TINYHW_GRACE_S` (default 60; beats every
`TINYHW_HEARTBEAT_S`, default 10) is stale: the next process that looks fails it and Optuna's
retry callback queues its parameters again. Heartbeats are on for postgresql:// and mysql://
URLs. On a journal or SQLite file the processes are on one machine: a RUNNING trial belongs to
the run that took it while that run's lock is held (dse.study.locks), and is a leftover of a
killed run once it is not.
"""
from __future__ import annotations

import contextlib
import copy
import datetime
import hashlib
import os
import threading
import warnings
from pathlib import Path
from typing import Iterator

from dse.paths import journal_path
from dse.spec import Spec
from dse.study.options import SweepError, SweepOptions

HEARTBEAT_ENV, GRACE_ENV = "TINYHW_HEARTBEAT_S", "TINYHW_GRACE_S"
DEFAULT_HEARTBEAT_S, DEFAULT_GRACE_S = 10, 60
HEARTBEAT_SCHEMES = ("postgresql", "postgres", "mysql")

# A trial is retried this many times by Optuna's stale-trial callback, and a grid point whose
# evaluating process died more than this many times is recorded as a failure instead of being
# queued again (dse.study.grid).
MAX_RETRY = 3

RUN_ATTR = "tinyhw:run"     # system attribute of a trial: the run (dse.study.locks.RunLock) that took it


def optuna():
    """The optuna module, quiet: imported here only (slow to import, chatty at INFO)."""
    import optuna as _optuna_module
    _optuna_module.logging.set_verbosity(_optuna_module.logging.WARNING)
    warnings.filterwarnings("ignore", category=_optuna_module.exceptions.ExperimentalWarning)
    return _optuna_module


def storage_location(spec: Spec, options: SweepOptions) -> str:
    """The storage as a string a worker process can reopen: a URL, or a journal file path."""
    if options.storage:
        return options.storage
    return str(journal_path(study=spec.study, results_root=options.results_root))


def open_storage(location: str):
    """An Optuna storage: a URL ("scheme://...") as Optuna opens it, else a journal file."""
    opt = optuna()
    if "://" in location:
        try:
            if uses_heartbeat(location):        # a shared database: heartbeats, stale trials retried
                return rdb_storage(location)
            return opt.storages.get_storage(location)
        except Exception as exc:           # noqa: BLE001 - any driver error: bad input
            raise SweepError(f"--storage {location}: cannot open: {type(exc).__name__}: {exc}") from None
    from dse.study.journal import open_journal       # a torn last record is repaired there
    return open_journal(Path(location))


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
    optuna()
    from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
    # ask/tell with heartbeats is what this module does on purpose (the heartbeat is ours)
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
    interval = _env_int(HEARTBEAT_ENV, DEFAULT_HEARTBEAT_S)
    grace = max(_env_int(GRACE_ENV, DEFAULT_GRACE_S), 2 * interval)
    callback = RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY)
    return RDBStorage(url, heartbeat_interval=interval, grace_period=grace, heartbeat_stale_trial_callback=callback,
                      engine_kwargs={"pool_pre_ping": True})


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
    opt = optuna()
    opt.storages.fail_stale_trials(study)
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
        except opt.exceptions.UpdateFinishedTrialError:
            continue                                    # another worker got there first
        if callback is not None:
            callback(study, copy.deepcopy(storage.get_trial(t._trial_id)))


def release_dead_trials(study, location: str, run: str | None = None) -> None:
    """Fail the RUNNING trials of runs that are gone (the caller holds the study lock): with
    heartbeats the stale ones; on a journal or SQLite file those whose run lock is free
    (dse.study.locks) or that name no run (their process died between taking the trial and
    recording its name, which happen together under the study lock). Their points are not
    charged: they count for nothing and are taken again. `run`: this run's name, whose own
    trials are its business (a worker process that dies is charged by its sweep: DIED_ATTR)."""
    from optuna.trial import TrialState
    if heartbeat_enabled(study._storage):
        fail_stale_trials(study)
        return
    from dse.study.locks import locks_dir, run_alive, storage_file
    file = storage_file(location)
    where = locks_dir(file) if file is not None else None
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = t.system_attrs.get(RUN_ATTR)
        if owner is not None and (owner == run or (where is not None and run_alive(where, owner))):
            continue
        with contextlib.suppress(Exception):        # told by its run after all: nothing to do
            # interrupted: not evaluated, even with the metrics row its run recorded before dying
            # (or before the record of its outcome was torn from a journal: dse.study.journal)
            study._storage.set_trial_user_attr(t._trial_id, "interrupted", True)
            study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)


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
    """The process that holds it is the only one queueing points or asking for a trial: a
    PostgreSQL session-level advisory lock on the study, an flock beside a journal or SQLite file
    (dse.study.locks); a no-op on other storages."""
    if not location.lower().startswith(("postgresql", "postgres")):
        from dse.study.locks import file_study_lock, storage_file
        file = storage_file(location)
        with file_study_lock(file, study_name) if file is not None else contextlib.nullcontext():
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
