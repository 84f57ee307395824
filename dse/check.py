"""`dse check results/<study>`: the regression gate for CI.

    outcome = check("results/gemv", gate="configs/gemv.yaml", baseline="tests/data/baseline_ci", tolerance=1.0)
    outcome.passed, outcome.regressions, outcome.markdown

Three checks, per model x dtype, each optional:

    threshold   a gate rule (the spec's `gate:` section, or a gate file with the same syntax)
                holds when some feasible point of every model x dtype it matches meets *all*
                of the rule's bounds at once: `{model: gemv, cycles_max: 9000, luts_max: 2000}`
                says "a GEMV of at most 9000 cycles in at most 2000 LUTs can still be built".
                A failing rule is reported with the feasible point closest to meeting it (the
                smallest worst relative excess), one row per bound that point misses.
    pareto      every Pareto-optimal feasible point of the baseline is still matched: some
                feasible point of the current results is at least as good on every objective
                within the tolerance (minimised: now <= baseline * (1 + PCT/100); maximised:
                now >= baseline * (1 - PCT/100)). An unmatched point is reported with the
                current point closest to matching it, one row per objective it misses.
    hypervolume the hypervolume of the current feasible points is not smaller than that of
                the baseline's points made worse by the tolerance on every objective (the same
                "within PCT" as for single points; a percentage of the hypervolume itself would
                not be: on a narrow front 20% more LUTs can cost 60% of the volume). All are
                computed by Optuna's own `compute_hypervolume` on one normalisation: each
                objective (maximised ones negated) mapped to [0, 1] over the baseline and current
                points together, the reference point 1.1 on every axis (so extreme points
                count too; loosened points beyond it add nothing).
                Matching every baseline point implies this check, so it fails only alongside a
                `pareto` row; its row says how much of the front was lost as one number, and
                its value is shown for every model x dtype even when everything holds.

A model x dtype of the baseline that has no feasible point now fails both baseline checks. A
model x dtype that is new (not in the baseline) is shown, not checked. The tolerance defaults to
0: evaluations are deterministic for fixed tool versions, so any change is a real one.

Gate files. `--gate FILE` is either a spec (a YAML mapping with `study:`; its `gate:` section is
used) or a gate file: the YAML of a spec's `gate:` section on its own (a mapping of bounds for
every model x dtype, or a list of rules with optional `model:`/`dtype:`), or that under a single
`gate:` key. It is validated by dse.spec (unknown keys and bad values are errors naming the YAML
path), against the models and dtypes of the results; a rule matching no model x dtype of the
results is an error too.

Output: a Markdown summary (one row per model x dtype) and, when something failed, a table of
each regression (check, model, dtype, point, metric, baseline, now, change) for a pull-request
comment; printed and written to results/<study>/check.md.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from dse.files import atomic_write_text, md_cell
from dse.report import ReportError, StudyResults, knob_label, load_study_results, markdown_table
from dse.results import pareto_front
from dse.spec import (Bound, Direction, GateRule, Objective, SpecError, load_spec, load_yaml, objectives_label,
                      parse_gate)

CHECK_MD = "check.md"
HV_REFERENCE = 1.1          # the reference point, per normalised axis
EPS = 1e-9                  # float slack of the comparisons (objectives are integers or rounded floats)


class CheckError(ValueError):
    """Bad input to the check (missing folder, malformed gate file, bad tolerance): exit code 2."""


@dataclass(frozen=True)
class Regression:
    check: str              # threshold, pareto, hypervolume
    model: str
    dtype: str
    point: str              # the design point concerned (knob values, trial number), or "-"
    metric: str
    baseline: str           # the baseline value, or the limit ("<= 5000")
    now: str
    change: str             # "+12.5%"


@dataclass(frozen=True)
class GroupSummary:
    model: str
    dtype: str
    feasible: int
    thresholds: str         # "2/2 rules hold", "-"
    matched: str            # "3/3 baseline Pareto points matched", "-"
    hypervolume: str        # "0.812 -> 0.812 (+0.0%)", "-"


@dataclass(frozen=True)
class CheckOutcome:
    study: str
    regressions: tuple[Regression, ...]
    groups: tuple[GroupSummary, ...]
    checked: tuple[str, ...]            # which checks ran: threshold, pareto, hypervolume
    markdown: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def passed(self) -> bool:
        return not self.regressions


# ---------------------------------------------------------------------------------------------
# inputs

def load_gate(path: str | Path, results: StudyResults) -> tuple[GateRule, ...]:
    """The gate rules of a spec or gate file, validated against the results; raises SpecError
    (YAML path of the mistake) or CheckError."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise CheckError(f"--gate {path}: file not found") from None
    except OSError as e:
        raise CheckError(f"--gate {path}: cannot read: {e.strerror or e}") from None
    data = load_yaml(text, str(path))
    if isinstance(data, dict) and "study" in data:          # a whole spec
        spec = load_spec(path)
        if not spec.gate:
            raise CheckError(f"--gate {path}: the spec has no `gate:` section")
        rules = spec.gate
    else:
        if isinstance(data, dict) and list(data) == ["gate"]:
            data = data["gate"]
        if data is None:
            raise CheckError(f"--gate {path}: the gate file is empty")
        models = list(dict.fromkeys(results.trials["model"]))
        dtypes = list(dict.fromkeys(results.trials["dtype"]))
        timing = "fmax_mhz" in results.trials and bool(results.trials["fmax_mhz"].notna().any())
        try:
            rules = parse_gate(data, models, dtypes, timing=timing)
        except SpecError as e:
            raise SpecError(f"{path}: {e.path}" if e.path else str(path), e.message) from None
    for i, rule in enumerate(rules):
        if not any(rule.matches(m, d) for m, d in results.groups):
            where = " x ".join(x for x in (rule.model, rule.dtype) if x) or "every model x dtype"
            raise CheckError(f"--gate {path}: rule gate[{i}] ({where}) matches no model x dtype of "
                             f"{results.path} ({', '.join(f'{m} x {d}' for m, d in results.groups)})")
        for b in rule.bounds:
            if b.metric not in results.trials:
                raise CheckError(f"--gate {path}: gate[{i}].{b.key}: the results have no {b.metric} column")
    return rules


def _tolerance(pct: float) -> float:
    if not isinstance(pct, (int, float)) or not math.isfinite(pct) or not 0 <= pct < 100:
        raise CheckError(f"--tolerance: expected a percentage in [0, 100), got {pct!r}")
    return pct / 100.0


# ---------------------------------------------------------------------------------------------
# the checks

def _pct(now: float, base: float) -> str:
    if base == 0:
        return "n/a" if now == 0 else "+inf%"
    return f"{(now - base) / abs(base) * 100:+.1f}%"


def _point(row: pd.Series, results: StudyResults) -> str:
    return f"#{row['number']} {knob_label(row, results.knobs)}"


def check_thresholds(results: StudyResults, rules: Sequence[GateRule]) -> tuple[list[Regression], dict]:
    """Every rule on every model x dtype it matches; returns (regressions, {group: (held, total)})."""
    out: list[Regression] = []
    counts: dict[tuple[str, str], list[int]] = {}
    for model, dtype in results.groups:
        for rule in rules:
            if not rule.matches(model, dtype):
                continue
            c = counts.setdefault((model, dtype), [0, 0])
            c[1] += 1
            feasible = results.feasible(model, dtype).dropna(subset=[b.metric for b in rule.bounds])
            if not len(feasible):
                for b in rule.bounds:
                    out.append(Regression("threshold", model, dtype, "-", b.metric, _limit(b),
                                          "no feasible point", "-"))
                continue
            excess = np.column_stack([_excess(feasible[b.metric].astype(float).to_numpy(), b) for b in rule.bounds])
            worst = excess.max(axis=1)
            if worst.min() <= EPS:
                c[0] += 1
                continue
            best = feasible.iloc[int(np.argmin(worst))]
            for b in rule.bounds:
                v = float(best[b.metric])
                if not b.ok(v):
                    out.append(Regression("threshold", model, dtype, _point(best, results), b.metric,
                                          _limit(b), md_cell(_num(v)), _pct(v, b.limit)))
    return out, {g: tuple(c) for g, c in counts.items()}


def _limit(b: Bound) -> str:
    return f"{'<=' if b.kind == 'max' else '>='} {md_cell(_num(b.limit))}"


def _num(v: float) -> float | int:
    return int(v) if float(v).is_integer() else v


def _excess(values: np.ndarray, b: Bound) -> np.ndarray:
    """How far past the bound, relative to it (<= 0: within)."""
    scale = abs(b.limit) or 1.0
    return (values - b.limit) / scale if b.kind == "max" else (b.limit - values) / scale


def _losses(df: pd.DataFrame, objectives: Sequence[Objective]) -> np.ndarray:
    """Objective values as losses (maximised ones negated), one row per point."""
    cols = [df[o.metric].astype(float).to_numpy() * (-1.0 if o.direction is Direction.MAXIMIZE else 1.0)
            for o in objectives]
    return np.column_stack(cols) if cols else np.zeros((len(df), 0))


def check_pareto(results: StudyResults, baseline: StudyResults, tol: float) -> tuple[list[Regression], dict]:
    """Each baseline Pareto point matched within `tol` by some current feasible point."""
    objs = results.objectives
    out: list[Regression] = []
    counts: dict[tuple[str, str], tuple[int, int]] = {}
    for model, dtype in baseline.groups:
        front = pareto_front(baseline.feasible(model, dtype), objs, baseline.knobs)
        if not len(front):
            continue
        now = results.feasible(model, dtype).dropna(subset=[o.metric for o in objs])
        if not len(now):
            counts[(model, dtype)] = (0, len(front))
            out.append(Regression("pareto", model, dtype, "-", "feasible points", str(len(baseline.feasible(model, dtype))),
                                  "0", "-100.0%"))
            continue
        cur = now[[o.metric for o in objs]].astype(float).to_numpy()
        matched = 0
        for _, p in front.iterrows():
            base = np.array([float(p[o.metric]) for o in objs])
            # relative shortfall of each current point on each objective (<= tol: matched)
            short = np.column_stack([
                (cur[:, j] - base[j]) / (abs(base[j]) or 1.0) if o.direction is Direction.MINIMIZE
                else (base[j] - cur[:, j]) / (abs(base[j]) or 1.0) for j, o in enumerate(objs)])
            worst = short.max(axis=1)
            if worst.min() <= tol + EPS:
                matched += 1
                continue
            best = now.iloc[int(np.argmin(worst))]
            for j, o in enumerate(objs):
                if short[int(np.argmin(worst)), j] > tol + EPS:
                    out.append(Regression("pareto", model, dtype,
                                          f"{knob_label(p, baseline.knobs)} (baseline #{p['number']}; "
                                          f"closest now {_point(best, results)})",
                                          o.metric, md_cell(_num(base[j])), md_cell(_num(float(best[o.metric]))),
                                          _pct(float(best[o.metric]), base[j])))
        counts[(model, dtype)] = (matched, len(front))
    return out, counts


def hypervolumes(base: np.ndarray, now: np.ndarray, *others: np.ndarray) -> tuple[float, ...]:
    """Hypervolumes of sets of loss vectors under one normalisation, that of `base` and `now`
    together (module docstring); points of `others` past the reference point are clipped to it
    (they add no volume)."""
    from optuna._hypervolume import compute_hypervolume      # Optuna's exact WFG algorithm
    both = np.vstack([a for a in (base, now) if len(a)])
    lo, hi = both.min(axis=0), both.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    ref = np.full(both.shape[1], HV_REFERENCE)

    def hv(a: np.ndarray) -> float:
        return float(compute_hypervolume(np.minimum((a - lo) / span, ref), ref)) if len(a) else 0.0
    return tuple(hv(a) for a in (base, now, *others))


def loosened(losses: np.ndarray, tol: float) -> np.ndarray:
    """Loss vectors made worse by `tol` on every objective (what a matched point may be)."""
    return losses + np.abs(losses) * tol


def check_hypervolume(results: StudyResults, baseline: StudyResults, tol: float) -> tuple[list[Regression], dict]:
    """The current hypervolume against the baseline's with every baseline point loosened by the
    tolerance (so "within PCT" means the same as for single points)."""
    objs = results.objectives
    out: list[Regression] = []
    values: dict[tuple[str, str], tuple[float, float, float]] = {}
    for model, dtype in baseline.groups:
        b = baseline.feasible(model, dtype).dropna(subset=[o.metric for o in objs])
        if not len(b):
            continue
        n = results.feasible(model, dtype).dropna(subset=[o.metric for o in objs])
        base = _losses(b, objs)
        hv_b, hv_n, hv_min = hypervolumes(base, _losses(n, objs), loosened(base, tol))
        values[(model, dtype)] = (hv_b, hv_n, hv_min)
        if hv_n < hv_min - EPS:
            limit = f"{hv_b:.4f}" + (f" (>= {hv_min:.4f} within {tol * 100:g}%)" if tol else "")
            out.append(Regression("hypervolume", model, dtype, "-", "hypervolume (" + ", ".join(
                o.metric for o in objs) + ", normalised)", limit, f"{hv_n:.4f}", _pct(hv_n, hv_b)))
    return out, values


# ---------------------------------------------------------------------------------------------
# the whole check

def check(results_dir: str | Path, gate: str | Path | None = None, baseline: str | Path | None = None,
          tolerance: float = 0.0, write: bool = True) -> CheckOutcome:
    """Run the checks that were asked for and write check.md; raises CheckError, SpecError or
    ReportError for bad input."""
    if gate is None and baseline is None:
        raise CheckError("nothing to check: give --gate FILE (thresholds) and/or --baseline DIR "
                         "(Pareto points and hypervolume of an earlier run)")
    tol = _tolerance(tolerance)
    results = load_study_results(results_dir)
    if not (results.path / "trials.csv").is_file():
        raise CheckError(f"{results.path}: no trials.csv (the results to check must be a sweep's)")
    rules = load_gate(gate, results) if gate is not None else ()
    base = None
    if baseline is not None:
        try:
            base = load_study_results(baseline)
        except ReportError as e:
            raise CheckError(f"--baseline: {e}") from None
        absent = [o.metric for o in results.objectives if o.metric not in base.trials]
        if absent:
            raise CheckError(f"--baseline {baseline}: no column {', '.join(absent)} (objectives of {results.study})")
    regressions: list[Regression] = []
    checked = []
    thr: dict = {}
    par: dict = {}
    hvs: dict = {}
    if rules:
        r, thr = check_thresholds(results, rules)
        regressions += r
        checked.append("threshold")
    if base is not None:
        r, par = check_pareto(results, base, tol)
        regressions += r
        r2, hvs = check_hypervolume(results, base, tol)
        regressions += r2
        checked += ["pareto", "hypervolume"]
    groups = list(results.groups) + [g for g in (base.groups if base else []) if g not in results.groups]
    summary = []
    for g in groups:
        feasible = len(results.feasible(*g)) if g in results.groups else 0
        t = f"{thr[g][0]}/{thr[g][1]} hold" if g in thr else "-"
        m = f"{par[g][0]}/{par[g][1]} matched" if g in par else ("new" if base is not None and g not in base.groups else "-")
        h = "-"
        if g in hvs:
            hv_b, hv_n, hv_min = hvs[g]
            h = f"{hv_b:.4f} -> {hv_n:.4f} ({_pct(hv_n, hv_b)}{f'; >= {hv_min:.4f} needed' if tol else ''})"
        summary.append(GroupSummary(g[0], g[1], feasible, t, m, h))
    outcome = CheckOutcome(results.study, tuple(regressions), tuple(summary), tuple(checked))
    md = render_markdown(outcome, results, gate, baseline, tolerance)
    outcome = CheckOutcome(outcome.study, outcome.regressions, outcome.groups, outcome.checked, md)
    if write:
        atomic_write_text(results.path / CHECK_MD, md)
    return outcome


def render_markdown(outcome: CheckOutcome, results: StudyResults, gate: Any, baseline: Any, tolerance: float) -> str:
    n = len(outcome.regressions)
    verdict = "PASS" if outcome.passed else f"FAIL: {n} regression{'s' * (n != 1)}"
    against = []
    if gate is not None:
        against.append(f"gate `{gate}`")
    if baseline is not None:
        against.append(f"baseline `{baseline}` (tolerance {tolerance:g}%)")
    objs = objectives_label(results.objectives)
    lines = [f"## dse check `{outcome.study}`: {verdict}", "",
             f"`{results.path}` against {' and '.join(against)}; objectives: {objs}.", ""]
    if results.mixed_code:
        lines += [f"**Mixed code:** {results.mixed_code}.", ""]
    summary = pd.DataFrame([{"model": g.model, "dtype": g.dtype, "feasible points": g.feasible,
                             "thresholds": g.thresholds, "baseline Pareto points": g.matched,
                             "hypervolume baseline -> now": g.hypervolume} for g in outcome.groups])
    if len(summary):
        lines += [markdown_table(summary), ""]
    if outcome.regressions:
        reg = pd.DataFrame([{"check": r.check, "model": r.model, "dtype": r.dtype, "point": r.point,
                             "metric": r.metric, "baseline": r.baseline, "now": r.now, "change": r.change}
                            for r in outcome.regressions])
        lines += ["### Regressions", "", markdown_table(reg), ""]
    return "\n".join(lines)
