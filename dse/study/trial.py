"""One trial: ask -> evaluate the point behind the evaluation cache -> tell, and the signals
that stop a run cleanly (`Interrupt`). Both drivers run their trials through `run_asked_trial`.
"""
from __future__ import annotations

import signal
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from dse.cache import cached_evaluate
from dse.evaluate import json_safe
from dse.fidelity import ESTIMATE_ATTR, OPTIMISTIC_ATTR, evaluate_multi
from dse.limits import FINALIZER_RETRY_S, in_finalizer
from dse.paths import point_dir
from dse.spec import DesignPoint, Spec
from dse.study.options import SweepOptions
from dse.study.space import CONSTRAINTS_ATTR, constraint_values, objective_values, point_params, suggest_point

# Signals that stop a sweep or worker cleanly: the trial in flight is marked interrupted (not a
# death of its point) and everything finished is kept. SIGHUP: a closed terminal or SSH session.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupt:
    """SIGINT/SIGTERM/SIGHUP: remember it; raise KeyboardInterrupt only while a point is being
    evaluated (never in the middle of a storage write, so the journal stays whole). A signal that
    lands inside a finalizer, where the KeyboardInterrupt would be printed and dropped, is sent
    again a moment later and raised then."""

    def __init__(self, raise_when_armed: bool = True) -> None:
        self.count = 0                  # signals received
        self.armed = False
        self.raise_when_armed = raise_when_armed
        self._old: dict[int, Any] = {}
        self._resent = False            # the next signal is our own, sent again after a finalizer

    @property
    def requested(self) -> bool:
        return self.count > 0

    @requested.setter
    def requested(self, value: bool) -> None:
        self.count = max(self.count, int(value))

    def __call__(self, signum, frame) -> None:
        if self._resent:
            self._resent = False
        else:
            self.count += 1
            if self.count > 1:
                return
        if not (self.armed and self.raise_when_armed):
            return
        if in_finalizer(frame):
            self._resent = True
            threading.Timer(FINALIZER_RETRY_S, signal.pthread_kill,
                            (threading.main_thread().ident, signum)).start()
            return
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


def trial_workdir(spec: Spec, options: SweepOptions, point: DesignPoint, number: int) -> Path:
    """The point's folder under the results (shared by every trial of the point when the cache
    is on; one per trial without it, so two evaluations never write the same files)."""
    d = point_dir(spec=spec, point=point, target=str(spec.target), seed=options.data_seed,
                  results_root=options.results_root)
    return d if options.use_cache else d.with_name(f"{d.name}-t{number}")


MAX_NOT_APPLICABLE_ASKS = 1000      # then the last point is evaluated (and fails at compile)


def prune_not_applicable(study, trial, spec: Spec) -> bool:
    """A sampler may propose a point that is not in the search space (Spec.not_applicable: a knob
    cannot apply to it); the grid never queues one. Such a trial is told PRUNED, with why,
    without compiling (it counts against no budget and is no row): True if it was."""
    from optuna.trial import TrialState
    why = spec.not_applicable(suggest_point(trial, spec))
    if why:
        trial.set_user_attr("not_applicable", why)
        study.tell(trial, state=TrialState.PRUNED)
    return bool(why)


def run_asked_trial(study, trial, spec: Spec, options: SweepOptions, ctx, cache, stop: Interrupt,
                    log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Evaluate an asked trial's point and tell the outcome; returns a progress event."""
    from optuna.trial import TrialState
    point = suggest_point(trial, spec)
    event: dict[str, Any] = {"number": trial.number, "model": point.model, "dtype": point.dtype,
                             "knobs": dict(point.knobs), "values": None, "feasible": False,
                             "cached": False, "error": None}
    t0 = time.perf_counter()
    row: dict[str, Any] | None = None
    estimated, estimate, vector, fidelity = False, {}, (), {}
    try:
        stop.armed = True
        try:
            if stop.requested:
                raise KeyboardInterrupt
            workdir = trial_workdir(spec, options, point, trial.number)
            if spec.search.fidelity == "multi":
                outcome = evaluate_multi(study, spec, ctx, point, workdir, cache, log)
                row, cached = outcome.row, outcome.cached
                estimated = not outcome.synthesized and row.get("status") == "OK"
                estimate = {m: e.value for m, e in outcome.decision.estimates.items()} if outcome.synthesized else {}
                vector = outcome.decision.vector
                fidelity = {"synthesized": outcome.synthesized, "skipped": outcome.decision.kind or None}
            else:
                row, cached, _ = cached_evaluate(ctx, point, workdir, cache, log)
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
    event.update(fidelity)                  # multi-fidelity: synthesised, or why not (the progress counts)
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
    if estimate:                            # made before synthesis: the estimator's true error
        trial.set_user_attr(ESTIMATE_ATTR, estimate)
    if vector:                              # skipped under hv_tolerance (dse.fidelity.given_up)
        trial.set_user_attr(OPTIMISTIC_ATTR, list(vector))
    if estimated:
        # multi-fidelity: stopped at the cheap fidelity (dse.fidelity); PRUNED keeps it off the
        # front (Study.best_trials reads COMPLETE trials) and counts it as evaluated
        study.tell(trial, state=TrialState.PRUNED)
        return {**event, "status": "OK", "estimated": True, "cached": cached, "seconds": seconds,
                "stage": None}
    values, missing = objective_values(spec, row)
    if values is None:
        # an OK row with a reason keeps that reason
        if row.get("status") == "OK" and not row.get("error"):
            reason = f"objective{'s' * (len(missing) > 1)} {', '.join(missing)} not measured"
            trial.set_user_attr("stage", "objectives")
            trial.set_user_attr("error", reason)
        study.tell(trial, state=TrialState.FAIL)
        return {**event, "status": "FAIL", "cached": cached, "seconds": seconds,
                "error": row.get("error") or f"{', '.join(missing)} not measured", "stage": row.get("stage")}
    constraints = constraint_values(spec, row)
    for name, v in constraints.items():
        trial.set_constraint(name, v)
    trial.set_user_attr(CONSTRAINTS_ATTR, constraints)
    study.tell(trial, values)
    feasible = all(v <= 0 for v in constraints.values())
    return {**event, "status": row.get("status", "OK"), "values": values, "feasible": feasible,
            "cached": cached, "seconds": seconds, "error": row.get("error"), "stage": row.get("stage")}
