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
                                `overflow_safe` (the proven accumulator width fits; not
                                violated when a float value has no finite bound),
                                `checks` (the evaluation passed every check, e.g. simulated
                                cycles == the cycle model), with `timing: true` `fits`
                                (some device holds the design), and each resource budget of
                                the spec (`luts_max: 5000` gives `luts_max` = luts - 5000).
                                A point computing a wrong result is thus an infeasible trial
                                the samplers learn from, not a dropped row; so is a design no
                                device holds (its latency_us / fmax_mhz objective is told as
                                the worst value, +inf / -inf; its row leaves them empty).
    an objective not measured   FAIL (the point failed to configure, compile, simulate or
                                synthesise); the reason is in the trial's user attributes
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
without SQLite's "database is locked"; a record torn by a kill, a full disk or a power loss is
repaired on open: dse.study.journal). --storage takes any Optuna storage URL
(sqlite:///x.db, postgresql://...) or the path of a journal file. On postgresql:// and mysql://
URLs trials record heartbeats and stale ones are retried; `dse worker` (dse/worker.py) joins such a
study from other machines. Everything both drivers share (storage, budget, grid queue, one
trial's ask -> evaluate -> tell) is in dse/study/; this module holds the local process pool.

Parallel jobs and shared studies: --n-jobs N starts N worker processes (spawned: evaluation is
CPU bound, threads would not run in parallel) sharing the storage. Each takes one trial at a
time from the study itself (dse.study.take, under the study lock, as `dse worker` does), so the
total is exact, no worker sits idle while another still has a queue of its own (with fixed
shares, one trial ran alone for 1,073 s of the 1,992 s of configs/gemv_space_large.yaml's full
grid), and two `dse sweep`s of one study at once are simply more workers: a grid point
COMPLETE, RUNNING or queued is never evaluated again. The run holds a run lock
(dse.study.locks) for its life; a RUNNING trial of a run that died is failed and its point
taken again; a process with nothing left to take waits for the other runs' trials, to take
over any whose run dies. The counts printed are the study's.

Ctrl-C: the trial being evaluated is marked FAIL (interrupted), everything finished stays in
the storage, and the output files are written from the storage before exiting.

Outputs (dse.results): trials.csv, pareto.csv, pareto.md in results/<study>/, written
atomically from one snapshot of the storage at the end of every run, the three under the
folder's outputs lock (the last run to write leaves a consistent, newest set).
"""
from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import queue
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from compiler.tools import cores
from dse.cache import EvalCache
from dse.evaluate import EvalContext
from dse.fidelity import FIDELITY_TXT, describe
from dse.files import atomic_write_text
from dse.paths import results_dir
from dse.prebuild import prebuild
from dse.progress import Progress
from dse.results import write_outputs
from dse.spec import Sampler, Spec
from dse.study.grid import is_evaluated, make_sampler, prepare_study, record_death, worker_seed
from dse.study.locks import run_lock
from dse.study.options import SweepError, SweepOptions
from dse.study.order import synthesis_order
from dse.study.storage import heartbeat, open_storage, optuna, storage_location, study_lock
from dse.study.take import POLL_S, take_trial
from dse.study.trial import MAX_NOT_APPLICABLE_ASKS, STOP_SIGNALS, Interrupt, prune_not_applicable, run_asked_trial

__all__ = ["SweepError", "SweepOptions", "SweepResult", "sweep"]


@dataclass(frozen=True, kw_only=True)
class SweepResult:
    study: str
    results_dir: Path
    files: tuple[Path, ...]         # trials.csv, pareto.csv, pareto.md
    budget: int                     # trials the study should have when complete
    done_before: int                # evaluated trials the study had when this run started
    evaluated: int                  # evaluated trials the study has at the end (every run's)
    ran: int                        # trials finished in this run (evaluated or from the cache)
    cached: int                     # of those, served from the cache
    failed: int                     # of those, FAIL
    interrupted: bool
    seconds: float
    feasible: int                   # feasible trials in the whole study
    pareto: int                     # rows of pareto.csv
    worker_errors: tuple[str, ...] = ()
    estimated: int = 0              # of `ran`, estimated only (multi-fidelity: not synthesised)
    fidelity_report: str = ""       # multi-fidelity: synthesised vs estimated, the estimate's measured error


# ---------------------------------------------------------------------------------------------
# a local worker process: ask, evaluate, tell

@dataclass(frozen=True)
class _Job:
    spec: Spec
    options: SweepOptions
    location: str
    seed_base: int                  # trials in the study when the run started
    run: str | None = None          # the run's name (dse.study.locks.RunLock): its trials are its own


class EvaluatedCount:
    """Evaluated trials of the whole study (every run's), as the budget counts them, counted
    after each trial: a finished trial's verdict is final, so each is judged once (a look at
    every trial's attributes after each of 11,664 trials was a quarter of an hour of a sweep)."""

    def __init__(self) -> None:
        self.verdicts: dict[int, bool] = {}

    def __call__(self, study) -> int:
        n = 0
        for t in study.get_trials(deepcopy=False):
            if t.number not in self.verdicts and t.state.is_finished():
                self.verdicts[t.number] = is_evaluated(t)
            n += self.verdicts.get(t.number, False)
        return n


def work(job: _Job, worker: int, emit: Callable[[dict[str, Any]], None], stop: Interrupt,
         evaluating=None) -> None:
    """Take trials of the study and evaluate them until none is left to take (dse.study.take:
    shared with other processes of this run, other sweeps and `dse worker`s). `evaluating`: an
    array shared with the parent, whose slot `worker` holds the number of the trial being
    evaluated (-1 between trials)."""
    spec, options = job.spec, job.options
    storage = open_storage(job.location)
    sampler = make_sampler(spec, worker_seed(spec.search.seed, job.seed_base, worker), options.n_jobs)
    study = optuna().load_study(study_name=spec.study, storage=storage, sampler=sampler)
    # fewer workers than cores: each point's synthesis runs beside its simulation (EvalContext.overlap)
    ctx = EvalContext.from_spec(spec, data_seed=options.data_seed, sim_backend=options.sim_backend,
                                overlap=options.n_jobs < cores())
    cache = EvalCache(options.cache_dir) if options.use_cache else None
    parent = os.getppid()
    not_applicable, waiting = 0, False
    evaluated_count = EvaluatedCount()
    while not stop.requested:
        if evaluating is not None and os.getppid() != parent:
            return                          # the sweep is gone: its trials are nobody's now
        taken = take_trial(study, spec, location=job.location, trials=options.trials, run=job.run)
        if taken.trial is None:
            if taken.elsewhere == 0:
                return
            if not waiting:
                emit({"type": "waiting", "worker": worker, "elsewhere": taken.elsewhere})
                waiting = True
            time.sleep(POLL_S)
            continue
        waiting = False
        trial = taken.trial
        if not_applicable < MAX_NOT_APPLICABLE_ASKS and prune_not_applicable(study, trial, spec):
            not_applicable += 1
            continue
        not_applicable = 0
        if evaluating is not None:
            evaluating[worker] = trial.number   # a parent that sees this process die charges it
        with heartbeat(study, trial), contextlib.redirect_stdout(sys.stderr):   # tools' chatter
            event = run_asked_trial(study, trial, spec, options, ctx, cache, stop)   # apart from results
        if evaluating is not None:
            evaluating[worker] = -1
        emit({**event, "worker": worker, "study_done": evaluated_count(study)})


def _worker_main(job: _Job, worker: int, events, evaluating) -> None:
    """Entry point of a worker process."""
    stop = Interrupt()
    stop.install(STOP_SIGNALS)
    try:
        work(job, worker, events.put, stop, evaluating)
    except BaseException as exc:            # noqa: BLE001 - reported to the parent
        events.put({"type": "worker_error", "worker": worker,
                    "error": "".join(traceback.format_exception(exc))})
    finally:
        events.put({"type": "done", "worker": worker})


# ---------------------------------------------------------------------------------------------
# the driver

def sweep(spec: Spec, options: SweepOptions = SweepOptions()) -> SweepResult:
    """Run (or resume) the study of `spec` and write its output files."""
    t0 = time.perf_counter()
    location = storage_location(spec, options)
    out = results_dir(study=spec.study, results_root=options.results_root)
    out.mkdir(parents=True, exist_ok=True)
    order = None
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if options.progress != "off" else None
    if spec.search.fidelity == "multi" and spec.search.sampler is Sampler.GRID:
        # every point's cheap fidelity first, then the likely front queued first (dse.study.order)
        order = functools.partial(synthesis_order, spec=spec, options=options, log=say)
    with study_lock(location, spec.study):      # not while another sweep or worker queues points
        prepared = prepare_study(spec, options, location, order)
    with run_lock(location) as run:
        prebuild(spec, options, prepared.points, say)   # one g++ run a bundle of designs, not one a trial
        return _drive(spec, options, location, prepared, run.name if run else None, out, t0)


def _drive(spec: Spec, options: SweepOptions, location: str, prepared, run: str | None, out: Path,
           t0: float) -> SweepResult:
    study, budget, done_before, to_run = prepared.study, prepared.budget, prepared.done, prepared.to_run
    job = _Job(spec, options, location, len(study.get_trials(deepcopy=False)), run)
    progress = Progress(total=budget, initial=done_before, objectives=spec.objectives,
                        mode=options.progress, n_jobs=options.n_jobs, desc=spec.study)
    stats = {"ran": 0, "cached": 0, "failed": 0, "estimated": 0}
    errors: list[str] = []

    said_waiting = [False]

    def on_event(event: dict[str, Any]) -> None:
        if event.get("type") == "waiting":
            if not said_waiting[0]:
                n = event["elsewhere"]
                progress.message(f"nothing left to take: waiting for {n} trial{'s' * (n != 1)} another run is "
                                 "evaluating (its point is taken over if that run dies)")
                said_waiting[0] = True
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
        stats["estimated"] += bool(event.get("estimated"))
        progress.update(event)

    interrupted = False
    jobs = max(1, min(options.n_jobs, to_run))
    try:
        if to_run == 0 and prepared.running == 0:
            pass
        elif jobs == 1:
            interrupted = _run_here(job, on_event)
        else:
            interrupted = _run_processes(job, jobs, on_event)
    finally:
        progress.close()
        files, summary = write_outputs(study, spec, out)
        report = ""
        if spec.search.fidelity == "multi":
            report = describe(study, spec, EvalCache(options.cache_dir) if options.use_cache else None)
            atomic_write_text(out / FIDELITY_TXT, report + "\n")
            files += (out / FIDELITY_TXT,)
    return SweepResult(study=spec.study, results_dir=out, files=files, budget=budget, done_before=done_before,
                       evaluated=summary["evaluated"],
                       ran=stats["ran"], cached=stats["cached"], failed=stats["failed"], interrupted=interrupted,
                       seconds=time.perf_counter() - t0, feasible=summary["feasible"], pareto=summary["pareto"],
                       worker_errors=tuple(errors), estimated=stats["estimated"], fidelity_report=report)


def _run_here(job: _Job, on_event) -> bool:
    stop = Interrupt()
    stop.install(STOP_SIGNALS)
    try:
        work(job, 0, on_event, stop)
    finally:
        stop.restore()
    return stop.requested


def _run_processes(job: _Job, jobs: int, on_event) -> bool:
    """Run the study's trials in `jobs` worker processes; returns whether the run was interrupted.
    The parent only listens: a Ctrl-C (which the terminal also sends to the workers) or a SIGINT
    sent to the parent alone is forwarded; a second one stops waiting for the workers."""
    mp = multiprocessing.get_context("spawn")
    events = mp.Queue()
    # the trial each worker is evaluating, in shared memory rather than on the queue: an event
    # put just before a SIGKILL may never leave the worker (the queue's feeder thread dies with it)
    evaluating = mp.Array("i", [-1] * jobs, lock=False)
    procs = [mp.Process(target=_worker_main, args=(job, i, events, evaluating), name=f"dse-sweep-{i}")
             for i in range(jobs)]
    stop = Interrupt(raise_when_armed=False)
    stop.install(STOP_SIGNALS)
    try:
        for p in procs:
            p.start()
        finished: set[int] = set()
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
                        if evaluating[i] >= 0 and not stop.requested:   # killed with its point
                            with contextlib.suppress(Exception):
                                record_death(job.location, job.spec.study, evaluating[i], p.exitcode)
                        on_event({"type": "worker_error", "worker": i,
                                  "error": f"worker {i} exited with code {p.exitcode}"})
                continue
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
