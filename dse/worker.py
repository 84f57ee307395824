"""`dse worker`: one of many processes, on one machine or many, that share a study in a database
(Optuna's RDBStorage, e.g. PostgreSQL) and evaluate its trials until the budget is spent.

    dse worker configs/gemv.yaml --storage postgresql://user:pw@db-host/tinyhw     # on every machine
    dse sweep  configs/gemv.yaml --storage postgresql://user:pw@db-host/tinyhw     # or any mix of both

A worker joins the study (creating it when absent, with the same name and search-space checks as
`dse sweep`) and loops: take a trial (dse.study.take, exactly what every process of `dse sweep`
does: fail the stale trials, decide what is left, take one), evaluate it, tell the outcome. It stops when the budget (search.trials, or the grid) is spent and no trial is
still running elsewhere (a trial running on a machine that dies is taken over once it is stale),
then writes trials.csv, pareto.csv and pareto.md from the storage into results/<study>/.

No point is evaluated twice:
    grid    the points are in Optuna's trial queue (`Study.enqueue_trial`, as `dse sweep` does);
            a worker takes one only while holding a PostgreSQL advisory lock keyed on the study
            (`study_lock`; an flock beside a journal or SQLite file), so two workers never both
            ask for the last point, and missing points are queued under the same lock. A trial that did not come from the queue (another
            storage without the lock, or a `dse sweep` racing the worker) is told FAIL as
            `interrupted`/`surplus` before anything is evaluated, and does not count.
    random, tpe, nsga2
            a worker asks only while evaluated + running + queued trials < budget (under the lock).

A worker killed mid-trial (kill -9, a lost machine) loses only that trial. Every trial records a
heartbeat (`dse.study.storage.heartbeat`, every `TINYHW_HEARTBEAT_S` seconds, default 10) in the database; a RUNNING
trial whose heartbeat is older than `TINYHW_GRACE_S` (default 60) is stale: the next worker or sweep
that looks marks it FAIL (`optuna.storages.fail_stale_trials`) and Optuna's
`RetryFailedTrialCallback` queues its parameters again (with the same user attributes, so the grid
sees the point as queued). A stale FAIL has no metrics row and does not count against the budget;
in trials.csv it is an INTERRUPTED row. A stale trial is not charged to its point: the worker
that evaluated it died as a whole (a lost machine, kill -9), which says nothing about the point.
Only a trial whose own evaluating process died while the process that ran it stayed alive (a
`dse sweep --n-jobs N` worker process, seen by its parent: `dse.study.grid.DIED_ATTR`) counts as a
death; a grid point with more than `MAX_RETRY` (3) such deaths is not queued again: it is
recorded once as a FAIL trial in stage `worker` that says so (`dse.study.grid.give_up`), so one point
that always takes its process down cannot stall the study. Heartbeats are on for postgresql:// and mysql:// URLs.
On a journal or SQLite file (one machine) a RUNNING trial is alive while the run that took it holds
its run lock (dse.study.locks): the kernel drops it when that process dies, so the next look fails
the trial at once, without a grace period.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from dse.cache import EvalCache
from dse.evaluate import EvalContext
from dse.paths import results_dir
from dse.results import write_outputs
from dse.spec import Spec
from dse.study.grid import make_sampler, prepare_study, study_state, worker_seed
from dse.study.locks import run_lock
from dse.study.options import SweepError, SweepOptions
from dse.study.storage import GRACE_ENV, HEARTBEAT_ENV, heartbeat, optuna, storage_location, study_lock
from dse.study.take import take_trial
from dse.study.trial import STOP_SIGNALS, Interrupt, prune_not_applicable, run_asked_trial

__all__ = ["GRACE_ENV", "HEARTBEAT_ENV", "WorkerOptions", "WorkerResult", "run_worker"]


@dataclass(frozen=True, kw_only=True)
class WorkerOptions:
    sweep: SweepOptions
    poll_s: float = 2.0                 # wait between looks while the rest runs elsewhere

    def __post_init__(self) -> None:
        if self.poll_s <= 0:
            raise ValueError(f"poll_s: expected a positive number of seconds, got {self.poll_s!r}")


@dataclass(frozen=True, kw_only=True)
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
    files: tuple[Path, ...]


def run_worker(spec: Spec, options: WorkerOptions, emit: Callable[[dict[str, Any]], None] | None = None) -> WorkerResult:
    """Join (or create) the study of `spec` in `options.sweep.storage` and evaluate trials until
    its budget is spent; then write the output files."""
    t0 = time.perf_counter()
    sopt = options.sweep
    if not sopt.storage:
        raise SweepError("dse worker needs --storage URL (the database all workers share)")
    location = storage_location(spec, sopt)
    out = results_dir(study=spec.study, results_root=sopt.results_root)
    out.mkdir(parents=True, exist_ok=True)
    with study_lock(location, spec.study):
        study = prepare_study(spec, sopt, location).study
    me = int.from_bytes(hashlib.sha256(f"{socket.gethostname()}:{os.getpid()}".encode()).digest()[:4], "big")
    sampler = make_sampler(spec, worker_seed(spec.search.seed, len(study.trials), me), n_jobs=2)
    study = optuna().load_study(study_name=spec.study, storage=study._storage, sampler=sampler)
    ctx = EvalContext.from_spec(spec, data_seed=sopt.data_seed, sim_backend=sopt.sim_backend)
    cache = EvalCache(sopt.cache_dir) if sopt.use_cache else None
    stats = {"ran": 0, "cached": 0, "failed": 0}
    stop = Interrupt()
    stop.install(STOP_SIGNALS)
    with run_lock(location) as run:        # on a journal or SQLite file: this worker is alive
        try:
            while not stop.requested:
                taken = take_trial(study, spec, location=location, trials=sopt.trials, run=run.name if run else None)
                if taken.trial is None:
                    if taken.elsewhere == 0:
                        break                       # spent, and nothing left to take over
                    time.sleep(options.poll_s)
                    continue
                trial = taken.trial
                if prune_not_applicable(study, trial, spec):
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
    final = study_state(study, spec, sopt.trials)
    return WorkerResult(study=spec.study, budget=final.budget, evaluated=final.evaluated, ran=stats["ran"],
                        cached=stats["cached"], failed=stats["failed"], interrupted=stop.requested,
                        seconds=time.perf_counter() - t0, feasible=summary["feasible"], pareto=summary["pareto"],
                        files=tuple(files))
