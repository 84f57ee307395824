"""A study's results as files, and back as a pandas DataFrame.

    write_outputs(study, spec, Path("results/gemv"))    # from the Optuna storage
    df = load_results("results/gemv")                   # trials.csv as a DataFrame

trials.csv, one row per trial that ran (queued trials not yet run are left out):
    number, model, dtype        the trial number and the design point
    <knob>...                   one column per HardwareConfig knob (defaults filled in)
    status                      OK, FAIL (the evaluation failed: `stage`, `error`) or INTERRUPTED
    trial_state                 Optuna's: COMPLETE (every objective measured, or a design no
                                device holds: infeasible by `fits`) or FAIL, or with
                                `search.fidelity: multi` PRUNED (area estimated, not synthesised:
                                `fidelity` says which; docs/multi-fidelity.md)
    feasible, violations        every constraint met; the names of those that were not
    stage, error, error_type    where and why a point failed
    cached                      served from the evaluation cache (no tool ran for this trial)
    <metrics>...                every field of dse.evaluate.Metrics: cycles, cycles_model,
                                correct, max_abs_err, ulp_vs_sequential, check_rule, luts, ffs, bram, lutram, dsp,
                                fmax_estimate_mhz and fmax_estimate_path (the delay model's, before
                                synthesis), with timing fmax_mhz, latency_us, samples_per_s, pnr_device,
                                pnr_speed_grade, pnr_critical_path (nextpnr's slowest path),
                                pnr_failing_endpoints and pnr_tns_ns (ECP5: register inputs
                                later than nextpnr's clock period, their total lateness) and the
                                nextpnr settings, acc_bits_required, overflow_safe, max_magnitude,
                                overflow_confirmed, saturated (fp8 outputs at the format's
                                largest magnitude), the stage times compile_s, simulate_s,
                                overflow_s, synth_s, total_s (of the evaluation that produced
                                the row) and provenance (target, params as JSON, sim_backend,
                                yosys_version, synth_script, tinygrad_version, data_seed,
                                workdir, log_path, notes; code_digest: the SHA-256 of the
                                project's code the row was computed with), fidelity (synth, or synth_units
                                with `synthesis: units`, and synth_units: float unit instances
                                counted from their own synthesis), and for the multi-fidelity
                                search features, fidelity estimate, estimate_error,
                                hv_share (skipped under search.hv_tolerance)
    trial_s                     wall time of this trial (near 0 when cached)
    datetime_start, datetime_complete

pareto.csv: the same columns for the Pareto-optimal feasible trials of each model x dtype over
the spec's objectives (Optuna's own `Study.best_trials`, on one in-memory study per group),
one row per distinct design point. pareto.md: those points as Markdown tables, one per model x
dtype, and for a model x dtype without a feasible point the reason (its most common failure or
violated constraint).

Every file is written to a temporary file and moved into place (os.replace): a reader sees the
old file or the new one, never half of one.
"""
from __future__ import annotations

import collections
import dataclasses
import json
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd

from dse.files import atomic_write_text, csv_text, md_cell, outputs_lock
from dse.format_table import format_rows, markdown_rows, smallest_format
from dse.spec import Direction, Objective, Spec, objectives_label

TRIALS_CSV, PARETO_CSV, PARETO_MD = "trials.csv", "pareto.csv", "pareto.md"
BOOL_COLUMNS = ("feasible", "cached", "correct", "overflow_safe", "overflow_confirmed")
INT_COLUMNS = ("number", "cycles", "cycles_model", "luts", "ffs", "bram", "lutram", "dsp",
               "acc_bits_required", "data_seed", "saturated")
_HEAD = ["number", "model", "dtype"]
_STATUS = ["status", "trial_state", "feasible", "violations", "stage", "error", "error_type", "cached"]
TABLE_HEADINGS = {"number": "trial", "acc_bits_required": "acc bits"}
"""Column -> heading in the Markdown tables of Pareto points (pareto.md and the report's)."""
_SKIP = {"model", "dtype", "knobs", "status", "stage", "error", "error_type", "cached"}


def _metric_fields() -> list[str]:
    from dse.evaluate import Metrics
    return [f.name for f in dataclasses.fields(Metrics) if f.name not in _SKIP]


def _knob_names(spec: Spec, rows: Iterable[dict[str, Any]]) -> list[str]:
    names = [k.name for k in spec.knobs]
    try:
        from compiler.config import HardwareConfig
        names += [n for n in HardwareConfig.knob_names() if n not in names]
    except ImportError:
        pass
    for r in rows:
        names += [n for n in (r.get("knobs") or {}) if n not in names]
    return names


def trial_rows(study, spec: Spec, trials: Sequence[Any] | None = None) -> list[dict[str, Any]]:
    """One flat dict per trial that ran, in trial-number order (of `trials`, a snapshot of the
    study's trials, when given)."""
    from optuna.trial import TrialState
    if trials is None:
        trials = study.get_trials(deepcopy=False)
    trials = [t for t in trials if t.state not in (TrialState.WAITING,)
              and "not_applicable" not in t.user_attrs]      # pruned before compiling: never ran
    metrics = [t.user_attrs.get("metrics") or {} for t in trials]
    knob_names = _knob_names(spec, metrics)
    fields = _metric_fields()
    rows = []
    for t, m in zip(trials, metrics):
        knobs = {**{k: v for k, v in t.params.items() if k not in ("model", "dtype")}, **(m.get("knobs") or {})}
        constraints = t.user_attrs.get("constraints") or {}
        if t.user_attrs.get("interrupted") or (t.state is TrialState.FAIL and not m):
            status, error, stage = "INTERRUPTED", "interrupted before the evaluation finished", None
        elif t.state is TrialState.RUNNING:
            status, error, stage = "RUNNING", None, None
        else:
            status, error, stage = m.get("status", "FAIL"), t.user_attrs.get("error"), t.user_attrs.get("stage")
        violations = [k for k, v in constraints.items() if v > 0]
        row = {"number": t.number, "model": t.params.get("model", m.get("model")),
               "dtype": t.params.get("dtype", m.get("dtype")),
               **{k: knobs.get(k) for k in knob_names},
               "status": status, "trial_state": t.state.name,
               "feasible": t.state is TrialState.COMPLETE and not violations,
               "violations": ", ".join(violations), "stage": stage, "error": error,
               "error_type": t.user_attrs.get("error_type"), "cached": bool(t.user_attrs.get("cached", False))}
        for f in fields:
            v = m.get(f)
            if f == "params":
                v = json.dumps(v, sort_keys=False) if v else None
            row[f] = v
        row["trial_s"] = t.user_attrs.get("trial_s")
        row["datetime_start"] = t.datetime_start.isoformat(timespec="seconds") if t.datetime_start else None
        row["datetime_complete"] = t.datetime_complete.isoformat(timespec="seconds") if t.datetime_complete else None
        rows.append(row)
    return rows


def trials_frame(study, spec: Spec, trials: Sequence[Any] | None = None) -> pd.DataFrame:
    rows = trial_rows(study, spec, trials)
    knobs = _knob_names(spec, [])
    if rows:
        keys = list(rows[0])
        knobs = keys[len(_HEAD):keys.index("status")]
    columns = _HEAD + knobs + _STATUS + _metric_fields() + ["trial_s", "datetime_start", "datetime_complete"]
    return _typed(pd.DataFrame(rows, columns=columns))


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    for c in BOOL_COLUMNS:
        if c in df:
            df[c] = df[c].map(_to_bool).astype("boolean")
    for c in INT_COLUMNS:
        if c in df:
            df[c] = pd.to_numeric(df[c], errors="coerce").astype("Int64")
    return df


def _to_bool(v: Any) -> Any:
    if isinstance(v, str):
        return {"true": True, "false": False}.get(v.strip().lower(), pd.NA)
    if v is None or (isinstance(v, float) and v != v):
        return pd.NA
    return bool(v)


# ---------------------------------------------------------------------------------------------
# Pareto fronts

def pareto_front(df: pd.DataFrame, objectives: Sequence[Objective], knobs: Sequence[str] = ()) -> pd.DataFrame:
    """The rows of `df` on the Pareto front over `objectives`, by Optuna's `Study.best_trials`
    on an in-memory study, one row per design point (the first trial of it), sorted by the
    objectives. Rows missing an objective value are ignored."""
    df = df.dropna(subset=[o.metric for o in objectives])
    if not len(df):
        return df
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)     # dse.study.storage is above this module
    study = optuna.create_study(directions=[str(o.direction) for o in objectives])
    study.add_trials([optuna.trial.create_trial(values=[float(r[o.metric]) for o in objectives])
                      for _, r in df.iterrows()])                # trial i is row i of df
    best = sorted(t.number for t in study.best_trials)
    front = df.iloc[best]
    point = [c for c in ("model", "dtype", *knobs) if c in front]
    front = front.drop_duplicates(subset=point, keep="first") if point else front
    return front.sort_values([o.metric for o in objectives],
                             ascending=[o.direction is Direction.MINIMIZE for o in objectives])


def pareto_rows(df: pd.DataFrame, spec: Spec) -> pd.DataFrame:
    """The feasible Pareto front of each model x dtype (`pareto_front`), in spec order."""
    feasible = df[df["feasible"].fillna(False).astype(bool)] if len(df) else df
    knobs = [k.name for k in spec.knobs]
    order = _group_order(spec)
    keys = sorted({(m, d) for m, d in zip(feasible["model"], feasible["dtype"])}, key=order)
    fronts = [pareto_front(feasible[(feasible["model"] == m) & (feasible["dtype"] == d)], spec.objectives, knobs)
              for m, d in keys]
    return pd.concat(fronts).reset_index(drop=True) if fronts else df.iloc[0:0]


# ---------------------------------------------------------------------------------------------
# files

def write_outputs(study, spec: Spec, out_dir: str | Path) -> tuple[tuple[Path, ...], dict[str, Any]]:
    """trials.csv, pareto.csv and pareto.md from one snapshot of the storage, each written
    atomically, the three under the folder's outputs lock: processes sharing a study each write
    a whole set, the last one's wins, and the snapshot is taken inside the lock, so the last
    set written is also the newest."""
    from dse.study.grid import is_evaluated
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = (out_dir / TRIALS_CSV, out_dir / PARETO_CSV, out_dir / PARETO_MD)
    with outputs_lock(out_dir):
        trials = study.get_trials(deepcopy=False)
        df = trials_frame(study, spec, trials)
        pareto = pareto_rows(df, spec)
        atomic_write_text(paths[0], csv_text(df))
        atomic_write_text(paths[1], csv_text(pareto))
        atomic_write_text(paths[2], pareto_markdown(spec, df, pareto))
    summary = {"trials": len(df), "feasible": int(df["feasible"].fillna(False).sum()) if len(df) else 0,
               "pareto": len(pareto), "evaluated": sum(1 for t in trials if is_evaluated(t))}
    return paths, summary


def _group_order(spec: Spec):
    models = {m.name: i for i, m in enumerate(spec.models)}
    dtypes = {d: i for i, d in enumerate(spec.dtypes)}
    return lambda key: (models.get(key[0], len(models)), dtypes.get(key[1], len(dtypes)), str(key))


def pareto_markdown(spec: Spec, df: pd.DataFrame, pareto: pd.DataFrame) -> str:
    objectives = objectives_label(spec.objectives)
    bounds = "".join(f", {b.metric} {'<=' if b.kind == 'max' else '>='} {b.limit:g}" for b in spec.constraints)
    n_ok = int((df["status"] == "OK").sum()) if len(df) else 0
    n_running = int((df["status"] == "RUNNING").sum()) if len(df) else 0    # in another run, at the snapshot
    running = f"{n_running} running, " if n_running else ""
    n_feasible = int(df["feasible"].fillna(False).sum()) if len(df) else 0
    fits = ", fits a device" if spec.timing else ""
    lines = [f"# Pareto front: study `{spec.study}`", "",
             f"Target {spec.target}; objectives: {objectives}; constraints: correct, overflow_safe, "
             f"checks passed{fits}{bounds}. {len(df)} trials: {n_ok} OK, {len(df) - n_ok - n_running} failed or interrupted, "
             f"{running}{n_feasible} feasible. Pareto-optimal feasible points per model x dtype, one row per design point."
             + (" Area by per-unit synthesis (`synthesis: units`: each float unit synthesised on its own, "
                "counted per instance; docs/synthesis.md)." if spec.synthesis == "units" else "")
             + (" Area by per-kernel synthesis (`synthesis: kernels`: each kernel synthesised on its own and "
                "the counts summed; docs/synthesis.md)." if spec.synthesis == "kernels" else ""),
             ""]
    knob_cols = [k.name for k in spec.knobs]
    formats = {m.name: format_rows(df, m.name, knob_cols) for m in spec.models}
    lines += [f"{m}: {sentence}" for m, rows in formats.items() if (sentence := smallest_format(rows))]
    if any(rows is not None for rows in formats.values()):
        lines.append("")
    obj_cols = [o.metric for o in spec.objectives]
    extra = [c for c in ("cycles", "luts", "ffs", "bram", "lutram", "dsp", "acc_bits_required") if c not in obj_cols]
    cols = ["number"] + knob_cols + obj_cols + extra
    heads = [TABLE_HEADINGS.get(c, c) for c in cols]
    for m in spec.models:
        for dt in m.dtypes or spec.dtypes:
            lines.append(f"## {m.name} · {dt}")
            lines.append("")
            part = pareto[(pareto["model"] == m.name) & (pareto["dtype"] == dt)] if len(pareto) else pareto
            if len(part):
                lines.append("| " + " | ".join(heads) + " |")
                lines.append("|" + "|".join("---" for _ in heads) + "|")
                for _, r in part.iterrows():
                    lines.append("| " + " | ".join(md_cell(r.get(c)) for c in cols) + " |")
            else:
                lines.append(why_no_feasible_point(df[(df["model"] == m.name) & (df["dtype"] == dt)] if len(df) else df))
            lines.append("")
        if formats[m.name] is not None:
            lines += [f"## {m.name}: accuracy against number format", "",
                      "Each format's design with the fewest LUTs (feasible first); loss: points below the float "
                      "model.", "", *markdown_rows(formats[m.name]), ""]
    return "\n".join(lines)


def why_no_feasible_point(part: pd.DataFrame) -> str:
    """Why the trials of one model x dtype (rows of trials.csv) hold no feasible point: their most
    common failure and the constraints they violate. pareto.md and the report both say this."""
    if not len(part):
        return "No trial evaluated this model x dtype."
    def column(name: str) -> pd.Series:
        return part[name] if name in part else pd.Series([None] * len(part), index=part.index)
    complete = column("trial_state") == "COMPLETE"
    failed = part[~complete]
    reasons = collections.Counter(
        f"{r.get('stage') or '?'}: {r.get('error')}" if r.get("status") != "INTERRUPTED" else "interrupted"
        for _, r in failed.iterrows())
    infeasible = collections.Counter(v for s in column("violations")[complete]
                                     for v in str(s).split(", ") if v and s == s)
    bits = []
    if reasons:
        (top, n), = reasons.most_common(1)
        bits.append(f"{len(failed)} failed (most common, {n}x: {top})")
    if infeasible:
        bits.append("infeasible: " + ", ".join(f"{k} violated {n}x" for k, n in infeasible.most_common()))
    return f"No feasible point in {len(part)} trial{'s' * (len(part) != 1)}" + (": " + "; ".join(bits) if bits else "") + "."


def load_results(path: str | Path) -> pd.DataFrame:
    """trials.csv of a sweep as a DataFrame (`path`: the results folder or the CSV file), with
    booleans as pandas' nullable boolean and counts as nullable integers. A file cut short in
    its last row is read without that row (said on stderr); other damage raises
    dse.results_csv.ResultsFileError."""
    path = Path(path)
    if path.is_dir():
        path = path / TRIALS_CSV
    if not path.is_file():
        raise FileNotFoundError(f"no sweep results at {path}: run `dse sweep SPEC` first")
    from dse.results_csv import read_results_csv        # a torn last row is left out, and said
    return _typed(read_results_csv(path))
