"""Trial <-> design point, and what a measured row means to Optuna: the search space, its
fingerprint (resuming under another one is refused), objective and constraint values."""
from __future__ import annotations

import math
from typing import Any

from dse.models.record import model_record
from dse.spec import DesignPoint, Direction, Spec

from dse.frozen import FrozenMap

SPACE_ATTR = "tinyhw:space"
"""Study user attribute holding the search space the study was created for."""
MODELS_ATTR = "tinyhw:models"
"""Study user attribute holding each model's whole definition and its files' SHA-256 by name
(dse.models.record), as the study's trials were evaluated: what `dse export` rebuilds a trial
from, and what a resumed sweep compares its spec's models with. Studies made before it lack it."""
CONSTRAINTS_ATTR = "constraints"
"""Trial user attribute: the constraint values by name (the same values as Optuna's)."""

PointKey = tuple
"""A design point as a hashable tuple (model, dtype, knob values in spec order)."""


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


def point_key(params: dict[str, Any], spec: Spec) -> PointKey:
    """A point's key from trial parameters (or a `point` user attribute)."""
    return (params.get("model"), params.get("dtype"), *(params.get(k.name) for k in spec.knobs))


def space_fingerprint(spec: Spec, data_seed: int = 0) -> dict[str, Any]:
    """What a study's trials mean: resuming under a different one is refused."""
    return {
        "models": [[m.name, m.describe(), str(m.source or ""),
                    {dt: [r.min, r.max] for dt, r in m.input_ranges.items()},
                    # a model's own dtypes (left out where they are the spec's: older studies keep their print)
                    *([list(m.dtypes)] if m.dtypes and m.dtypes != spec.dtypes else [])] for m in spec.models],
        "data_seed": data_seed,
        "dtypes": list(spec.dtypes),
        "knobs": {k.name: list(k.values) for k in spec.knobs},
        "objectives": [[o.metric, str(o.direction)] for o in spec.objectives],
        "constraints": sorted([b.key, b.limit] for b in spec.constraints),
        "target": str(spec.target),
        # multi-fidelity rows are estimates where full ones are measured: resuming across is refused
        **({"fidelity": spec.search.fidelity} if spec.search.fidelity != "full" else {}),
        **({"hv_tolerance": spec.search.hv_tolerance} if spec.search.hv_tolerance else {}),
        **({"synthesis": spec.synthesis} if spec.synthesis != "flat" else {}),
    }


def models_record(spec: Spec) -> dict[str, Any]:
    """Each model of `spec` by name as dse.models.record.model_record gives it (its files hashed)."""
    return {m.name: model_record(m, spec.model_dtypes(m.name)) for m in spec.models}


def constraint_values(spec: Spec, row: dict[str, Any]) -> dict[str, float]:
    """Named constraint values of a measured row (<= 0: satisfied)."""
    def flag(ok: Any) -> float:
        return 0.0 if ok is True else 1.0
    # overflow_safe None: a float value the proof cannot bound (exp, division): not excluded
    out = {"correct": flag(row.get("correct")), "overflow_safe": flag(row.get("overflow_safe") is not False),
           "checks": flag(row.get("status") == "OK")}
    if spec.timing or row.get("fits") is False:   # a device holds it (place-and-route, or the
        out["fits"] = flag(row.get("fits"))        # estimate of one too large for all: dse.estimate)
    for b in spec.constraints:
        v = row.get(b.metric)
        out[b.key] = 1.0 if v is None else float(v - b.limit if b.kind == "max" else b.limit - v)
    return out


def objective_values(spec: Spec, row: dict[str, Any]) -> tuple[list[float] | None, list[str]]:
    """(values in spec order, or None; the objectives that were not measured).

    A design no device holds (`fits` false) is a result, not a failure: its Fmax and latency
    get the worst value there is (+inf to minimise, -inf to maximise) and the `fits` constraint
    marks it infeasible, so it is a COMPLETE trial the samplers learn from and `best_trials`
    leaves out. Its row keeps them empty (nothing was measured)."""
    def value(o) -> float | None:
        v = row.get(o.metric)
        if v is None and row.get("fits") is False:       # timing, or area never synthesised
            return -math.inf if o.direction == Direction.MAXIMIZE else math.inf
        return None if v is None else float(v)
    values = [value(o) for o in spec.objectives]
    missing = [o.metric for o, v in zip(spec.objectives, values) if v is None]
    return (None, missing) if missing else (values, [])
