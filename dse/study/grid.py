"""The budget of a study: which trials count, which points are taken, died or given up, the grid
queue, and creating or resuming a study (`prepare_study`). One copy for both drivers: `dse
sweep` prepares a study once; `dse worker` looks again (`study_state`) before every trial.
"""
from __future__ import annotations

import contextlib
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from dse.spec import DesignPoint, Sampler, Spec
from dse.study.options import SweepError, SweepOptions
from dse.models.record import record_change
from dse.study.space import (MODELS_ATTR, SPACE_ATTR, PointKey, models_record, point_key, point_params,
                             search_space, space_fingerprint)
from dse.study.storage import MAX_RETRY, open_storage, optuna, release_dead_trials

DIED_ATTR = "died"
"""User attribute of a trial whose own evaluating process died while the sweep that ran it
stayed alive (the sweep saw its worker process exit abnormally mid-trial): the only kind of
death a point is charged with. A trial left RUNNING because the whole sweep was killed (a CI
time-out, a closed laptop, the OOM killer taking the process group) is not the point's fault:
it is failed without this mark when the study is next opened, and its point is simply run again."""


def make_sampler(spec: Spec, seed: int, n_jobs: int = 1):
    opt = optuna()
    s = spec.search.sampler
    if s is Sampler.TPE:
        return opt.samplers.TPESampler(seed=seed, constant_liar=n_jobs > 1)
    if s is Sampler.NSGA2:
        population = max(4, min(50, spec.search.trials // 4))
        return opt.samplers.NSGAIISampler(seed=seed, population_size=population)
    # random; and grid, whose points all come from the trial queue (the sampler is never asked
    # while the queue holds a point, and the driver asks exactly as many times as it holds)
    return opt.samplers.RandomSampler(seed=seed)


def worker_seed(seed: int, trials_in_study: int, worker: int) -> int:
    return int(np.random.SeedSequence([seed, trials_in_study, worker]).generate_state(1)[0])


def is_evaluated(t) -> bool:
    """A trial that counts against the budget: its point was evaluated (a trial cut short by
    Ctrl-C, or left RUNNING by a killed sweep, is FAIL without a metrics row). PRUNED: a point the
    multi-fidelity search estimated instead of synthesising (dse.fidelity)."""
    from optuna.trial import TrialState
    return t.state is TrialState.COMPLETE or (t.state in (TrialState.FAIL, TrialState.PRUNED)
                                              and "metrics" in t.user_attrs and not t.user_attrs.get("interrupted"))


def died(t) -> bool:
    from optuna.trial import TrialState
    return t.state is TrialState.FAIL and t.user_attrs.get(DIED_ATTR) is True


def record_death(location: str, study_name: str, number: int, exitcode: int | None) -> None:
    """Mark trial `number` as killed with its process (see DIED_ATTR) and fail it."""
    from optuna.trial import TrialState
    storage = open_storage(location)
    study = optuna().load_study(study_name=study_name, storage=storage)
    trial_id = storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
    if storage.get_trial(trial_id).state is not TrialState.RUNNING:
        return                                  # it finished after all
    storage.set_trial_user_attr(trial_id, DIED_ATTR, True)
    storage.set_trial_user_attr(trial_id, "error", f"its evaluating process died (exit code {exitcode})")
    study.tell(number, state=TrialState.FAIL, skip_if_finished=True)


def deaths_by_point(trials, spec: Spec) -> Counter:
    """How many times each point's process died (keys as `point_key`)."""
    return Counter(point_key(t.user_attrs.get("point") or t.params, spec) for t in trials if died(t))


def give_up(study, spec: Spec, point: DesignPoint, deaths: int) -> None:
    """Record a grid point whose process died `deaths` times as a FAIL trial with a metrics row:
    it counts as evaluated, is not queued again, and trials.csv says why."""
    opt = optuna()
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState
    params = point_params(point)
    error = (f"the process evaluating this point died {deaths} times (killed, out of memory, or a "
             "tool that takes the process down); not retried again")
    row = {"model": point.model, "dtype": point.dtype, "knobs": dict(point.knobs), "status": "FAIL",
           "stage": "worker", "error": error}
    space = search_space(spec)
    study.add_trial(opt.trial.create_trial(
        state=TrialState.FAIL, params=params,
        distributions={k: CategoricalDistribution(space[k]) for k in params},
        user_attrs={"point": params, "metrics": row, "stage": "worker", "error": error}))


def untaken_points(points, taken: set, deaths: Counter, spec: Spec):
    """The grid `points` whose keys are not in `taken`, split into (to queue, to give up): a
    point whose process died more than MAX_RETRY times is given up, with its death count."""
    missing, abandoned = [], []
    for p in points:
        k = point_key(point_params(p), spec)
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


def grid_budget(spec: Spec, trials: int | None) -> int:
    return min(trials or spec.search.trials, spec.space_size)


@dataclass(frozen=True, kw_only=True)
class TakenPoints:
    """The keys of the points a study's trials hold, by trial state."""
    evaluated: set[PointKey]
    running: set[PointKey]
    waiting: set[PointKey]


def taken_points(trials, spec: Spec) -> TakenPoints:
    """A running trial's params appear one by one as its point is suggested: the user attribute
    `point`, set when it was queued, names it whole."""
    from optuna.trial import TrialState
    return TakenPoints(
        evaluated={point_key(t.params, spec) for t in trials if is_evaluated(t)},
        running={point_key(t.user_attrs.get("point") or t.params, spec)
                 for t in trials if t.state is TrialState.RUNNING},
        waiting={point_key(t.user_attrs.get("point", t.params), spec)
                 for t in trials if t.state is TrialState.WAITING})


@dataclass(frozen=True, kw_only=True)
class StudyState:
    budget: int
    evaluated: int
    running: int
    waiting: int
    missing: tuple[DesignPoint, ...]                 # grid points neither evaluated, running nor queued
    abandoned: tuple[tuple[DesignPoint, int], ...] = ()   # grid points whose process died more than
                                                          # MAX_RETRY times: (point, deaths)


def study_state(study, spec: Spec, trials_opt: int | None) -> StudyState:
    """Where the study stands against its budget, now."""
    from optuna.trial import TrialState
    trials = study.get_trials(deepcopy=False)
    evaluated = sum(1 for t in trials if is_evaluated(t))
    running = sum(1 for t in trials if t.state is TrialState.RUNNING)
    waiting = sum(1 for t in trials if t.state is TrialState.WAITING)
    if spec.search.sampler is Sampler.GRID:
        budget = grid_budget(spec, trials_opt)
        taken = taken_points(trials, spec)
        missing, abandoned = untaken_points(grid_points(spec, budget), taken.evaluated | taken.running | taken.waiting,
                                            deaths_by_point(trials, spec), spec)
        return StudyState(budget=budget, evaluated=evaluated, running=running, waiting=waiting,
                          missing=tuple(missing), abandoned=tuple(abandoned))
    return StudyState(budget=trials_opt or spec.search.trials, evaluated=evaluated, running=running,
                      waiting=waiting, missing=())


@dataclass(frozen=True, kw_only=True)
class PreparedStudy:
    study: Any              # optuna.Study
    budget: int             # trials the study should have when complete
    done: int               # evaluated trials (and given-up grid points) it has
    to_run: int             # trials left for this run
    running: int = 0        # trials other live runs are evaluating
    points: tuple = ()      # a grid's points left for this run (DesignPoints, in the grid's order)


def _open_or_set_aside(location: str, fresh: bool):
    from dse.study.journal import JournalError, set_aside
    try:
        return open_storage(location)
    except JournalError:
        if not fresh or "://" in location:
            raise
        moved = set_aside(Path(location))
        print(f"note: --fresh: {location} is damaged beyond a torn record; set aside as {moved.name}, "
              "starting over", file=sys.stderr, flush=True)
        return open_storage(location)


def _check_models(study, spec: Spec, location: str, *, new: bool) -> None:
    """Record a new study's models (dse.models.record: definitions, files by content); resuming
    one, refuse a model whose definition or file content is not the recorded one. Its trials
    were evaluated from the recorded files: keeping their rows beside the new file's, or calling
    the study complete, would mix two models under one name (a file's name and place are the
    same, so the search space's fingerprint cannot tell). A file moved with its content kept is
    the same model: the record then says where it is now."""
    models = json.loads(json.dumps(models_record(spec)))
    known = study.user_attrs.get(MODELS_ATTR)
    if known is None:
        if new:
            study.set_user_attr(MODELS_ATTR, models)
        else:
            print(f"note: study {spec.study!r} in {location} was made before studies recorded their models' files: "
                  "a weights or data file changed since is not noticed, and `dse export` needs --spec; --fresh "
                  "starts it over with them recorded", file=sys.stderr, flush=True)
        return
    for name, record in models.items():
        change = record_change(known[name], record) if name in known else None
        if change is not None:
            what, then, now = change
            raise SweepError(f"study {spec.study!r} in {location}: model {name!r}: {what} is not the one its trials "
                             f"were evaluated with ({then} then, {now} now): run with --fresh to evaluate them again "
                             "(the evaluation cache keeps the points of unchanged models), or rename the study")
    if known != models:
        study.set_user_attr(MODELS_ATTR, models)


def prepare_study(spec: Spec, options: SweepOptions, location: str,
                  order: Callable[[Any, list[DesignPoint]], list[DesignPoint]] | None = None) -> PreparedStudy:
    """Create or resume the study (the caller holds the study lock). Fails the trials left
    RUNNING by a run that is gone (dse.study.storage.release_dead_trials) and, for the grid,
    queues the points not evaluated yet (never one that is already queued), in the seeded order
    or, with `order(study, points)`, in the order it returns (a multi-fidelity grid:
    dse.study.order). With --fresh a journal damaged beyond repair is set aside, not refused."""
    opt = optuna()
    from optuna.trial import TrialState
    storage = _open_or_set_aside(location, options.fresh)
    directions = [str(o.direction) for o in spec.objectives]
    if options.fresh:
        with contextlib.suppress(KeyError):
            opt.delete_study(study_name=spec.study, storage=storage)
    study = opt.create_study(study_name=spec.study, storage=storage, directions=directions,
                             load_if_exists=True, sampler=opt.samplers.RandomSampler(seed=0))
    space = json.loads(json.dumps(space_fingerprint(spec, options.data_seed)))
    known = study.user_attrs.get(SPACE_ATTR)
    if known is None:
        study.set_user_attr(SPACE_ATTR, space)
    elif known != space:
        changed = ", ".join(k for k in {**known, **space} if space.get(k) != known.get(k)) or "the layout"
        raise SweepError(f"study {spec.study!r} in {location} was made for another search space "
                         f"(changed: {changed}); run with --fresh to start it over, or rename the study")
    _check_models(study, spec, location, new=known is None)
    if [str(d.name).lower() for d in study.directions] != directions:
        raise SweepError(f"study {spec.study!r} in {location} optimises other directions; use --fresh")

    release_dead_trials(study, location)    # left RUNNING by a run that was killed
    trials = study.get_trials(deepcopy=False)
    evaluated = sum(1 for t in trials if is_evaluated(t))
    running = sum(1 for t in trials if t.state is TrialState.RUNNING)     # live, in other runs

    if spec.search.sampler is Sampler.GRID:
        budget = grid_budget(spec, options.trials)
        wanted = grid_points(spec, budget)
        taken = taken_points(trials, spec)
        missing, abandoned = untaken_points(wanted, taken.evaluated | taken.waiting | taken.running,
                                            deaths_by_point(trials, spec), spec)
        if order is not None and missing:
            missing = order(study, missing)
        queue_points(study, spec, missing, abandoned)
        have = taken.evaluated | {point_key(point_params(p), spec) for p, _ in abandoned}
        points = tuple(p for p in wanted if point_key(point_params(p), spec) not in have | taken.running)
        to_run = len(points)
        done = evaluated + len(abandoned)
    else:
        budget = options.trials or spec.search.trials
        to_run = max(0, budget - evaluated - running)
        done, points = evaluated, ()
    return PreparedStudy(study=study, budget=budget, done=done, to_run=to_run, running=running, points=points)
