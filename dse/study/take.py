"""Taking the next trial of a shared study: what every process of `dse sweep` and every `dse
worker` does before each trial, so any number of them, started in any order, evaluate each grid
point once and stop at the budget together.

Under the study lock (dse.study.storage.study_lock: a PostgreSQL advisory lock, or an flock beside
a journal or SQLite file), one process at a time:
    1. releases the trials of dead runs: on a database with heartbeats the stale ones; on a file
       the RUNNING trials whose run lock is free (dse.study.locks), or that name no run at all
       (their process died between taking them and recording its name, both done under this
       lock). They are FAIL without a metrics row (not charged to their points) and count for
       nothing, so step 2 queues their grid points again;
    2. a grid takes the next point of its queue while the queue holds one; when it is empty, it
       looks at the study (dse.study.grid.study_state: every trial and every grid point, seconds
       at 10^4 points, so not before each trial) and queues the missing points (never queued, or
       their trial released in step 1) and takes one of them; another sampler asks only while
       evaluated + running trials are fewer than the budget;
    3. records which run took the trial (system attribute `tinyhw:run`) and, with heartbeats, a
       first beat.
A trial of a grid that did not come from the queue (a process that takes no lock popped the last
point first) is told FAIL as `interrupted`/`surplus` and does not count.

When nothing is left to take, `Take.elsewhere` says how many trials other runs are still
evaluating: a run waits for them (`poll`) rather than leave, so that it takes over a point whose
run dies, and every run ends with the study complete.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dse.spec import Sampler, Spec
from dse.study.grid import queue_points, study_state
from dse.study.storage import RUN_ATTR, heartbeat_enabled, release_dead_trials, study_lock

POLL_S = 1.0                # between looks while the last trials run elsewhere


@dataclass(frozen=True, kw_only=True)
class Take:
    trial: Any | None               # an optuna Trial, RUNNING and recorded as this run's; None: none left
    elsewhere: int                  # trials other live runs are evaluating


def running_elsewhere(study, run: str | None) -> int:
    from optuna.trial import TrialState
    return sum(1 for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
               if run is None or t.system_attrs.get(RUN_ATTR) != run)


def queued(study) -> bool:
    """Whether the study's trial queue holds a point (a WAITING trial)."""
    from optuna.trial import TrialState
    return bool(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))


def from_queue(study, trial) -> bool:
    return "fixed_params" in study._storage.get_trial_system_attrs(trial._trial_id)


def take_trial(study, spec: Spec, *, location: str, trials: int | None, run: str | None) -> Take:
    """Steps 1-3 above: the next trial for run `run`, or none (with what runs elsewhere)."""
    from optuna.trial import TrialState
    grid = spec.search.sampler is Sampler.GRID
    while True:
        trial = None
        with study_lock(location, spec.study):
            release_dead_trials(study, location, run)
            if grid and queued(study):
                trial = study.ask()
            elif grid:
                state = study_state(study, spec, trials)
                queue_points(study, spec, state.missing, state.abandoned)
                if state.missing:
                    trial = study.ask()
            else:
                state = study_state(study, spec, trials)
                if state.evaluated + state.running < state.budget:    # a queued retry is popped first
                    trial = study.ask()
            if trial is not None:
                if run is not None:
                    study._storage.set_trial_system_attr(trial._trial_id, RUN_ATTR, run)
                if heartbeat_enabled(study._storage):
                    study._storage.record_heartbeat(trial._trial_id)    # at once: a trial never
                                                                        # beaten is stale only late
            elsewhere = running_elsewhere(study, run)
        if trial is not None and grid and not from_queue(study, trial):
            trial.set_user_attr("interrupted", True)
            trial.set_user_attr("surplus", True)
            study.tell(trial, state=TrialState.FAIL)
            continue
        return Take(trial=trial, elsewhere=elsewhere)
