"""`dse report results/<study>`: the results of a sweep as tables, plots and one HTML page.

Long, and one thing: presenting a results folder (reading it, plots, Markdown and HTML). The
Pareto front and the "no feasible point" explanation it shows come from dse.results.

    results = load_study_results("results/gemv")       # trials.csv (+ study.journal) -> StudyResults
    files = write_report(results)                       # results/gemv/report/...

Files in results/<study>/report/, each written to a temporary file and moved into place:

    index.html                  everything below on one self-contained page (plots embedded as
                                PNG data, tables as HTML)
    report.md                   the same as Markdown (plots linked)
    pareto_<model>_<dtype>.csv  the Pareto-optimal feasible points of one model x dtype (every
    pareto_<model>_<dtype>.md   column of trials.csv / the table shown in the report)
    plot_<model>.png / .svg     cycles vs LUTs (latency_us vs LUTs when latency_us is an
                                objective), one per model: every feasible point, the Pareto
                                front of each dtype highlighted (filled markers, joined by its
                                staircase when the objectives are its two axes), dtypes by
                                colour and marker, infeasible points
                                (a constraint violated) as faint crosses in their dtype's colour
    plot_<model>.csv            exactly the points drawn, with how each was drawn
    accuracy_<model>.png/.svg   models with data only: accuracy against LUTs and against latency
    accuracy_<model>.csv        (latency_us when place-and-route measured every point, else cycles),
                                every feasible point, dtypes by colour, the float model's accuracy
                                dashed, and the best accuracy for an area / latency budget over
                                all dtypes as a staircase (front_luts / front_latency columns)
    formats_<model>.png/.svg    models with data only: accuracy and LUTs against the bits of each
    formats_<model>.csv         number format (its cheapest design; dse.format_table), the float
                                model's accuracy dashed; the smallest format within an accuracy
                                loss (`dse report --accuracy-loss`, default 1 point) named in the
                                summary of report.md and index.html
    breakdown_<model>.png/.svg  cycles per kernel run and in copies for each Pareto point
    breakdown_<model>.csv       (from the `cycle_breakdown` column: the compiler's cycle model,
                                which the evaluation checks equals the simulated cycles)

Pareto fronts are computed here from trials.csv with Optuna's own `Study.best_trials` (the same
rule as the sweep's pareto.csv: feasible trials of one model x dtype, the spec's objectives and
directions, one row per design point).

Provenance: the spec hash is the SHA-256 of the study's search space as the sweep recorded it in
study.journal (models with their parameters, dtypes, knobs, objectives, constraints, target:
what a trial means); tool versions, synthesis scripts, simulator and data seed are the distinct
values of the trials' own columns (several values are flagged: such points are not comparable);
dates are the first trial's start, the last trial's end and the report's own time.

One module (~750 lines): the report's sections (summary, provenance, tables, plots) read one
loaded study and write one folder; the pandas and plotting code is the bulk.
"""
from __future__ import annotations

import base64
import datetime
import hashlib
import html
import io
import json
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from compiler.tools import package_version
from dse.files import atomic_write_bytes, csv_text, md_cell, outputs_lock
from dse.format_table import DEFAULT_LOSS, format_rows, markdown_rows, smallest_format
from dse.paths import JOURNAL
from dse.results import TABLE_HEADINGS, pareto_front, why_no_feasible_point
from dse.spec import Direction, Objective, objectives_label

REPORT_DIR = "report"
DEFAULT_OBJECTIVES = (Objective("cycles", Direction.MINIMIZE), Objective("luts", Direction.MINIMIZE))
PLOT_SIZE_IN, PLOT_DPI = (7.0, 4.5), 120          # PNG: 840 x 540 pixels
PLOT_PIXELS = (int(PLOT_SIZE_IN[0] * PLOT_DPI), int(PLOT_SIZE_IN[1] * PLOT_DPI))
TABLE_METRICS = ("cycles", "luts", "ffs", "bram", "lutram", "dsp", "fmax_mhz", "latency_us", "acc_bits_required")
PROVENANCE_COLUMNS = ("target", "yosys_version", "synth_script", "nextpnr_version", "tinygrad_version",
                      "code_digest", "sim_backend", "data_seed")


class ReportError(ValueError):
    """The results cannot be read (no such folder, no trials.csv, a missing column)."""


# ---------------------------------------------------------------------------------------------
# reading a study's results

@dataclass(frozen=True)
class StudyResults:
    """A sweep's results folder, read: trials.csv as a typed DataFrame plus what the study's
    journal says about it (objectives, the knobs it varies, its search space)."""
    path: Path
    study: str
    trials: pd.DataFrame
    objectives: tuple[Objective, ...]
    knobs: tuple[str, ...]              # the knobs the study varies (columns of trials.csv)
    space: dict[str, Any] | None        # the search space recorded in study.journal (None: no journal)
    model_records: dict[str, Any] | None = None   # each model's definition recorded there (dse.models.record;
                                                  # None: no journal, or a study made before they were)

    @property
    def groups(self) -> list[tuple[str, str]]:
        """Every model x dtype with a trial, in the spec's order when known."""
        seen = list(dict.fromkeys(zip(self.trials["model"], self.trials["dtype"])))
        if self.space:
            models = {m[0]: i for i, m in enumerate(self.space.get("models", []))}
            dtypes = {d: i for i, d in enumerate(self.space.get("dtypes", []))}
            seen.sort(key=lambda g: (models.get(g[0], len(models)), dtypes.get(g[1], len(dtypes))))
        return seen

    @property
    def models(self) -> list[str]:
        return list(dict.fromkeys(m for m, _ in self.groups))

    @property
    def spec_hash(self) -> str | None:
        return None if self.space is None else space_hash(self.space)

    @property
    def mixed_code(self) -> str | None:
        """A sentence when the rows were computed by more than one version of the project's code
        (`code_digest`: a sweep resumed after an upgrade or an edit), else None."""
        if "code_digest" not in self.trials:
            return None
        counts = self.trials["code_digest"].dropna().astype(str).value_counts()
        if len(counts) < 2:
            return None
        parts = "; ".join(f"{digest[:12]} ({n} trial{'s' * (n != 1)})" for digest, n in counts.items())
        return (f"the rows were computed by {len(counts)} versions of the code ({parts}): numbers from "
                f"different code may not be comparable; `dse sweep --fresh` recomputes them with this one")

    def group(self, model: str, dtype: str) -> pd.DataFrame:
        t = self.trials
        return t[(t["model"] == model) & (t["dtype"] == dtype)]

    def feasible(self, model: str | None = None, dtype: str | None = None) -> pd.DataFrame:
        t = self.trials if model is None else self.group(model, dtype)  # type: ignore[arg-type]
        return t[t["feasible"].fillna(False).astype(bool)]

    def front(self, model: str, dtype: str) -> pd.DataFrame:
        """The Pareto-optimal feasible trials of one model x dtype, one per design point."""
        return pareto_front(self.feasible(model, dtype), self.objectives, self.knobs)


def space_hash(space: dict[str, Any]) -> str:
    """SHA-256 of a study's search space (canonical JSON)."""
    return hashlib.sha256(json.dumps(space, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def read_space(journal: Path) -> dict[str, Any] | None:
    """The search space the sweep recorded in its Optuna journal (None when there is none)."""
    from dse.study.space import SPACE_ATTR
    attrs = read_study_attrs(journal)
    return None if attrs is None else attrs[SPACE_ATTR]


def read_study_attrs(journal: Path) -> dict[str, Any] | None:
    """The user attributes of the study the sweep recorded in its Optuna journal (its search
    space, dse.study.space.SPACE_ATTR, and more); None when there is none."""
    if not journal.is_file():
        return None
    from optuna.storages.journal import JournalFileBackend, JournalStorage
    from dse.study.journal import JournalError, scan
    from dse.study.space import SPACE_ATTR
    from dse.study.storage import optuna
    optuna()
    try:
        studies = JournalStorage(JournalFileBackend(str(journal))).get_all_studies()
    except Exception:               # noqa: BLE001 - a damaged journal: say so, don't guess
        try:
            found = scan(journal, journal.read_bytes())     # which line, and what to do
        except JournalError as damage:
            raise ReportError(str(damage)) from None
        # only records cut short (dse.study.journal): read the others from a copy, leave the file
        # to `dse sweep`, which repairs it
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / journal.name
            copy.write_bytes(found.kept)
            studies = JournalStorage(JournalFileBackend(str(copy))).get_all_studies()
        print(f"note: {journal}: {len(found.torn)} record(s) cut short, read without them (`dse sweep SPEC` "
              "repairs the file)", file=sys.stderr, flush=True)
    for s in studies:
        if SPACE_ATTR in s.user_attrs:
            return dict(s.user_attrs)
    return None


def load_study_results(path: str | Path) -> StudyResults:
    """Read results/<study>/ (trials.csv, or pareto.csv alone for a baseline that keeps only
    the front; study.journal when present); raises ReportError."""
    from dse.results import PARETO_CSV, TRIALS_CSV, load_results
    path = Path(path)
    if not path.exists():
        raise ReportError(f"{path}: no such results folder (run `dse sweep SPEC` first)")
    if not path.is_dir():
        raise ReportError(f"{path}: expected a results folder (results/<study>/), got a file")
    csv = path / TRIALS_CSV if (path / TRIALS_CSV).is_file() else path / PARETO_CSV
    if not csv.is_file():
        raise ReportError(f"{path}: no {TRIALS_CSV} or {PARETO_CSV} in it (run `dse sweep SPEC` first)")
    from dse.results_csv import ResultsFileError
    try:
        with outputs_lock(path, shared=True):        # not while a sweep writes a new set
            df = load_results(csv)
    except ResultsFileError as exc:
        raise ReportError(str(exc)) from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ReportError(f"{csv}: not a results CSV: {exc}") from None
    missing = [c for c in ("number", "model", "dtype", "feasible", "status") if c not in df]
    if missing:
        raise ReportError(f"{csv}: not a results CSV of dse sweep (no column {', '.join(missing)})")
    df["model"], df["dtype"] = df["model"].astype(str), df["dtype"].astype(str)
    from dse.study.space import MODELS_ATTR, SPACE_ATTR
    attrs = read_study_attrs(path / JOURNAL) or {}
    space = attrs.get(SPACE_ATTR)
    if space:
        objectives = tuple(Objective(m, Direction(d)) for m, d in space.get("objectives", []))
        knobs = tuple(k for k in space.get("knobs", {}) if k in df)
    else:
        objectives = DEFAULT_OBJECTIVES
        knobs = _varied_knobs(df)
    objectives = objectives or DEFAULT_OBJECTIVES
    absent = [o.metric for o in objectives if o.metric not in df]
    if absent:
        raise ReportError(f"{csv}: the objective{'s' * (len(absent) > 1)} {', '.join(absent)} "
                          f"{'are' if len(absent) > 1 else 'is'} not a column")
    return StudyResults(path, path.name, df, objectives, knobs, space, attrs.get(MODELS_ATTR))


def _varied_knobs(df: pd.DataFrame) -> tuple[str, ...]:
    """Without the journal: the knob columns (between dtype and status) that take several values."""
    cols = list(df.columns)
    if "status" not in cols:
        return ()
    knobs = cols[cols.index("dtype") + 1:cols.index("status")]
    return tuple(k for k in knobs if df[k].nunique(dropna=False) > 1)


# ---------------------------------------------------------------------------------------------
# Pareto fronts (Optuna's)

# ---------------------------------------------------------------------------------------------
# files

def safe_name(name: str) -> str:
    """A model or dtype name as a file name part (spec names are already safe; be sure)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def markdown_table(df: pd.DataFrame) -> str:
    head = "| " + " | ".join(str(c) for c in df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    rows = ["| " + " | ".join(md_cell(v) for v in r) + " |" for r in df.itertuples(index=False)]
    return "\n".join([head, rule, *rows])


def _html_table(df: pd.DataFrame) -> str:
    shown = df.apply(lambda col: col.map(lambda v: "-" if md_cell(v) == "-" else (
        f"{v:.4g}" if isinstance(v, (float, np.floating)) else v)))
    return shown.to_html(index=False, escape=True, border=0, classes="t", na_rep="-")


# ---------------------------------------------------------------------------------------------
# tables

def knob_label(row: pd.Series | dict, knobs: Sequence[str]) -> str:
    return " ".join(f"{k}={md_cell(row[k])}" for k in knobs) or "defaults"


def pareto_table(results: StudyResults, front: pd.DataFrame) -> pd.DataFrame:
    """The columns a reader compares: trial, varied knobs, objectives, area, accumulator bits."""
    objs = [o.metric for o in results.objectives]
    metrics = [c for c in TABLE_METRICS if c in front and c not in objs and front[c].notna().any()]
    cols = ["number", *results.knobs, *objs, *metrics]
    if "overflow_safe" in front:
        cols.append("overflow_safe")
    return front[cols].rename(columns=TABLE_HEADINGS)


def parse_breakdown(value: Any) -> tuple[list[tuple[str, int]], int] | None:
    """The `cycle_breakdown` JSON -> ([(kernel, cycles), ...], copy cycles); None if absent."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        d = json.loads(value)
        return [(str(k), int(c)) for k, c in d["kernels"]], int(d["copies"])
    except (ValueError, KeyError, TypeError):
        return None


def breakdown_frame(results: StudyResults, front: pd.DataFrame) -> pd.DataFrame | None:
    """One row per Pareto point: trial, knobs, total cycles, cycles per kernel run, in copies.
    None when the trials carry no breakdown (a sweep older than the `cycle_breakdown` column)."""
    if "cycle_breakdown" not in front:
        return None
    rows = []
    for _, r in front.iterrows():
        parsed = parse_breakdown(r["cycle_breakdown"])
        if parsed is None:
            continue
        kernels, copies = parsed
        row: dict[str, Any] = {"model": r["model"], "dtype": r["dtype"], "trial": r["number"],
                               "design": knob_label(r, results.knobs), "cycles": r.get("cycles")}
        for name, cycles in kernels:
            row[name] = row.get(name, 0) + cycles         # a kernel run twice: its runs summed
        row["copies"] = copies
        rows.append(row)
    if not rows:
        return None
    df = pd.DataFrame(rows)
    kernel_cols = [c for c in df.columns if c not in ("model", "dtype", "trial", "design", "cycles", "copies")]
    df[kernel_cols] = df[kernel_cols].fillna(0).astype(int)
    return df[["model", "dtype", "trial", "design", "cycles", *kernel_cols, "copies"]]


def provenance(results: StudyResults, now: datetime.datetime) -> list[tuple[str, str]]:
    """(what, value) lines: spec hash, tool versions, scripts, dates."""
    t = results.trials
    out = [("study", results.study), ("results", str(results.path))]
    out.append(("spec hash (SHA-256 of the search space in study.journal)",
                results.spec_hash or "unknown: no study.journal in the results folder"))
    if results.space:
        out.append(("search space", json.dumps(results.space, sort_keys=True)))
    out.append(("objectives", objectives_label(results.objectives)))
    for col in PROVENANCE_COLUMNS:
        if col not in t:
            continue
        counts = t[col].dropna().astype(str).value_counts()
        if not len(counts):
            continue
        if len(counts) == 1:
            out.append((col, counts.index[0]))
        else:
            out.append((col, "MIXED, points are not comparable: "
                        + "; ".join(f"{v} ({n} trials)" for v, n in counts.items())))
    if "datetime_start" in t and t["datetime_start"].notna().any():
        out.append(("trials ran", f"{t['datetime_start'].dropna().min()} to "
                                  f"{t['datetime_complete'].dropna().max() if 'datetime_complete' in t else '?'}"))
    if "cached" in t:
        out.append(("trials served from the evaluation cache", f"{int(t['cached'].fillna(False).sum())} of {len(t)}"))
    out.append(("report written", now.isoformat(timespec="seconds")))
    out.append(("by", ", ".join(f"{d} {package_version(d)}" for d in ("tinyhw", "optuna", "pandas", "matplotlib"))))
    return out


# ---------------------------------------------------------------------------------------------
# plots (matplotlib's object API: no pyplot state, no display needed)

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def _figure():
    from matplotlib.figure import Figure
    return Figure(figsize=PLOT_SIZE_IN, dpi=PLOT_DPI, layout="constrained")


def _save(fig) -> tuple[bytes, bytes]:
    png, svg = io.BytesIO(), io.BytesIO()
    fig.savefig(png, format="png", dpi=PLOT_DPI)
    fig.savefig(svg, format="svg", metadata={"Date": None})    # no date: same data, same file
    return png.getvalue(), svg.getvalue()


def time_metric(results: StudyResults) -> str:
    """The plot's time axis: `latency_us` when it is an objective (the front is over wall time,
    and a point's cycles alone would misplace it), else `cycles`."""
    return "latency_us" if any(o.metric == "latency_us" for o in results.objectives) else "cycles"


TIME_LABELS = {"cycles": "cycles", "latency_us": "latency (us)"}


def plot_points(results: StudyResults, model: str) -> pd.DataFrame:
    """The points of one model's plot (every trial with both its time, `time_metric`, and LUTs),
    and how each is drawn: `pareto`, `feasible` or `infeasible`."""
    t = results.trials
    time = time_metric(results)             # an objective, so a column (load_study_results)
    part = t[(t["model"] == model) & t[time].notna() & t["luts"].notna()]
    fronts = {d: set(results.front(model, d)["number"]) for d in part["dtype"].unique()}
    feasible = part["feasible"].fillna(False).astype(bool)
    on_front = part.apply(lambda r: r["number"] in fronts[r["dtype"]], axis=1).astype(bool) if len(part) else feasible
    drawn = np.where(on_front, "pareto", np.where(feasible, "feasible", "infeasible"))
    cols = ["model", "dtype", "number", *results.knobs, "luts", "cycles", time, "feasible", "violations"]
    out = part[[c for c in dict.fromkeys(cols) if c in part]].copy()
    out["drawn_as"] = drawn
    return out.reset_index(drop=True)


def plot_model(results: StudyResults, model: str, points: pd.DataFrame) -> tuple[bytes, bytes]:
    """Cycles (or latency, `time_metric`) vs LUTs of one model, every dtype; PNG and SVG bytes."""
    fig = _figure()
    ax = fig.add_subplot()
    dtypes = [d for m, d in results.groups if m == model]
    colours = [f"C{i % 10}" for i in range(len(dtypes))]
    time = time_metric(results)
    # the front is over the spec's objectives: a staircase in this plane only when they are these two
    staircase = {o.metric for o in results.objectives} == {time, "luts"}
    for i, dt in enumerate(dtypes):
        p = points[points["dtype"] == dt]
        marker, colour = MARKERS[i % len(MARKERS)], colours[i]
        bad = p[p["drawn_as"] == "infeasible"]
        ax.scatter(bad["luts"], bad[time], marker="x", color=colour, alpha=0.35, s=28, zorder=1)
        other = p[p["drawn_as"] == "feasible"]
        ax.scatter(other["luts"], other[time], marker=marker, facecolors="none", edgecolors=colour,
                   alpha=0.7, s=36, zorder=2)
        front = p[p["drawn_as"] == "pareto"].sort_values("luts")
        if len(front) and staircase:
            ax.step(front["luts"], front[time], where="post", color=colour, alpha=0.8, lw=1.2, zorder=3)
        ax.scatter(front["luts"], front[time], marker=marker, color=colour, edgecolors="black",
                   linewidths=0.6, s=56, zorder=4,
                   label=f"{dt}: Pareto front ({len(front)})" if len(front) else f"{dt}: no feasible point")
        if len(other):
            ax.scatter([], [], marker=marker, facecolors="none", edgecolors=colour,
                       label=f"{dt}: other feasible ({len(other)})")
    n_bad = int((points["drawn_as"] == "infeasible").sum())
    if n_bad:
        ax.scatter([], [], marker="x", color="0.4", label=f"infeasible, in its dtype's colour ({n_bad})")
    from matplotlib.ticker import FuncFormatter
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    for axis, col in (("x", "luts"), ("y", time)):
        v = points[col].astype(float)
        if len(v) and v.min() > 0 and v.max() / v.min() > 20:
            (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
            target = ax.xaxis if axis == "x" else ax.yaxis
            target.set_major_formatter(plain)
            target.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:g}"[0] in "1235" else ""))
    ax.set_xlabel("LUTs")
    ax.set_ylabel(TIME_LABELS[time])
    ax.set_title(f"{results.study}: {model}, {TIME_LABELS[time]} vs LUTs")
    ax.grid(True, alpha=0.3, which="both")
    if len(points):
        ax.legend(fontsize="small", loc="best")
    else:
        ax.text(0.5, 0.5, f"no point with both {TIME_LABELS[time]} and LUTs", ha="center", va="center", transform=ax.transAxes)
    return _save(fig)


def accuracy_points(results: StudyResults, model: str) -> pd.DataFrame | None:
    """The points of one model's accuracy plot (feasible trials with an accuracy and LUTs), with
    the latency axis (`latency_us` when place-and-route measured every point, else `cycles`) and
    which points are on the front of accuracy against each axis over all dtypes together
    (`front_luts`, `front_latency`): the best accuracy for an area or latency budget. None: the
    model has no accuracy (no data)."""
    t = results.trials
    if "accuracy" not in t:
        return None
    part = t[(t["model"] == model) & t["accuracy"].notna() & t["luts"].notna()
             & t["feasible"].fillna(False).astype(bool)]
    if not len(part):
        return None
    latency = "latency_us" if "latency_us" in part and part["latency_us"].notna().all() else "cycles"
    cols = ["model", "dtype", "number", *results.knobs, "accuracy", "accuracy_float", "luts", latency]
    out = part[[c for c in dict.fromkeys(cols) if c in part]].reset_index(drop=True)
    for col, axis in (("front_luts", "luts"), ("front_latency", latency)):
        front = pareto_front(out, (Objective("accuracy", Direction.MAXIMIZE), Objective(axis, Direction.MINIMIZE)),
                             ("number",))
        out[col] = out["number"].isin(front["number"])
    out.attrs["latency"] = latency
    return out


def plot_formats(results: StudyResults, model: str, rows: pd.DataFrame) -> tuple[bytes, bytes]:
    """Accuracy and LUTs against each number format's bits (weights + activations), one point
    per format (its cheapest design), labelled; the float model's accuracy dashed."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(PLOT_SIZE_IN[0] * 1.4, PLOT_SIZE_IN[1]), dpi=PLOT_DPI, layout="constrained")
    bits = (rows["weight_bits"] + rows["act_bits"]).astype(float)
    for k, (col, label) in enumerate((("accuracy", "accuracy"), ("luts", "LUTs"))):
        ax = fig.add_subplot(1, 2, k + 1)
        y = pd.to_numeric(rows[col], errors="coerce")
        ok = rows["feasible"].astype(bool)
        ax.scatter(bits[ok], y[ok], color="C0", edgecolors="black", linewidths=0.5, zorder=3, label="feasible")
        if (~ok).any():
            ax.scatter(bits[~ok], y[~ok], color="C3", marker="x", zorder=3, label="infeasible (a constraint)")
        for b, v, name in zip(bits, y, rows["format"]):
            if pd.notna(v):
                ax.annotate(name, (b, v), textcoords="offset points", xytext=(3, 3), fontsize="x-small")
        if col == "accuracy":
            ref = rows["accuracy_float"].dropna()
            if len(ref):
                ax.axhline(float(ref.max()), color="0.3", ls="--", lw=1, label=f"float model ({ref.max():.2%})")
            ax.yaxis.set_major_formatter(_percent_formatter())
            ax.legend(fontsize="small", loc="best")
        elif len(y.dropna()) and y.min() > 0 and y.max() / y.min() > 8:
            ax.set_yscale("log")
        if len(bits) and bits.min() > 0 and bits.max() / bits.min() > 4:
            ax.set_xscale("log", base=2)       # 4 .. 64 bits: each doubling one step
        ax.set_xlabel("bits (weights + activations)")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3, which="both")
        ax.set_title(f"{label} vs bits", fontsize="medium")
    fig.suptitle(f"{results.study}: {model}, one point per number format")
    return _save(fig)


def plot_accuracy(results: StudyResults, model: str, points: pd.DataFrame) -> tuple[bytes, bytes]:
    """Accuracy against LUTs and against latency, dtypes by colour and marker, the float model's
    accuracy as a dashed line, the front over all dtypes as a grey staircase; PNG and SVG bytes."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(PLOT_SIZE_IN[0] * 1.4, PLOT_SIZE_IN[1]), dpi=PLOT_DPI, layout="constrained")
    latency = points.attrs.get("latency", "cycles")
    dtypes = [d for m, d in results.groups if m == model and d in set(points["dtype"])]
    for k, (axis, front_col, label) in enumerate((("luts", "front_luts", "LUTs"),
                                                  (latency, "front_latency",
                                                   "latency (µs)" if latency == "latency_us" else "cycles"))):
        ax = fig.add_subplot(1, 2, k + 1)
        front = points[points[front_col]].sort_values(axis)
        ax.step(front[axis], front["accuracy"], where="post", color="0.5", lw=1.2, zorder=1,
                label=f"best accuracy for a {label} budget")
        for i, dt in enumerate(dtypes):     # later dtypes smaller: points that coincide stay visible
            p = points[points["dtype"] == dt]
            ax.scatter(p[axis], p["accuracy"], marker=MARKERS[i % len(MARKERS)], color=f"C{i % 10}",
                       edgecolors="black", linewidths=0.5, s=max(16, 70 - 12 * i), zorder=3, label=dt)
        ref = points["accuracy_float"].dropna()
        if len(ref):
            ax.axhline(float(ref.median()), color="0.3", ls="--", lw=1, zorder=2,
                       label=f"float model ({ref.median():.2%})")
        values = pd.concat([points["accuracy"], ref]).astype(float)
        pad = max(0.01, float(values.max() - values.min()) * 0.1)
        ax.set_ylim(max(0.0, float(values.min()) - pad), min(1.0, float(values.max())) + pad / 2)
        v = points[axis].astype(float)
        if len(v) and v.min() > 0 and v.max() / v.min() > 20:
            ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("accuracy")
        ax.yaxis.set_major_formatter(_percent_formatter())
        ax.grid(True, alpha=0.3, which="both")
        ax.set_title(f"accuracy vs {label}", fontsize="medium")
        if k == 0:
            ax.legend(fontsize="small", loc="best")
    fig.suptitle(f"{results.study}: {model}")
    return _save(fig)


def _percent_formatter():
    from matplotlib.ticker import FuncFormatter
    return FuncFormatter(lambda v, _: f"{v:.1%}")


def plot_breakdown(model: str, df: pd.DataFrame) -> tuple[bytes, bytes]:
    """Horizontal stacked bars: the cycles of each Pareto point per kernel run and in copies."""
    fig = _figure()
    ax = fig.add_subplot()
    parts = [c for c in df.columns if c not in ("model", "dtype", "trial", "design", "cycles")]
    labels = [f"{r.dtype} #{r.trial}: {r.design}" for r in df.itertuples()]
    left = np.zeros(len(df))
    for i, part in enumerate(parts):
        values = df[part].to_numpy(dtype=float)
        colour = "0.55" if part == "copies" else f"C{i % 10}"
        ax.barh(labels, values, left=left, color=colour, label=part, hatch="//" if part == "copies" else None)
        left += values
    ax.invert_yaxis()
    ax.set_xlabel("cycles")
    ax.set_title(f"{model}: cycles per kernel and in copies", fontsize="medium")
    ax.tick_params(axis="y", labelsize="small")
    ax.legend(fontsize="small", loc="best")
    return _save(fig)


# ---------------------------------------------------------------------------------------------
# the report

@dataclass
class _Section:
    model: str
    plot: str                                       # file stem of the plot
    points: pd.DataFrame
    tables: list[tuple[str, pd.DataFrame, str]]     # (dtype, Pareto table, file stem)
    breakdown: pd.DataFrame | None
    unplotted: pd.DataFrame                         # failed trials (no cycles or LUTs)
    accuracy: str | None = None                     # file stem of the accuracy plot (models with data)
    formats: pd.DataFrame | None = None             # accuracy against number format (dse.format_table)
    formats_plot: str | None = None
    smallest: str = ""                              # the sentence naming the smallest format within the loss


def write_report(results: StudyResults, out_dir: str | Path | None = None,
                 now: datetime.datetime | None = None, accuracy_loss: float = DEFAULT_LOSS) -> list[Path]:
    """Write every report file (module docstring) into `out_dir` (default results/<study>/report/);
    returns their paths. Files of an earlier report that this one no longer has are removed.
    `accuracy_loss`: how far below the float model's accuracy the named smallest format may be."""
    out = Path(out_dir) if out_dir is not None else results.path / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    now = now or datetime.datetime.now(datetime.timezone.utc)
    written: list[Path] = []

    def put(name: str, data: str | bytes) -> Path:
        path = out / name
        atomic_write_bytes(path, data.encode() if isinstance(data, str) else data)
        written.append(path)
        return path

    images: dict[str, bytes] = {}
    sections = []
    for model in results.models:
        stem = f"plot_{safe_name(model)}"
        points = plot_points(results, model)
        png, svg = plot_model(results, model, points)
        put(f"{stem}.png", png)
        put(f"{stem}.svg", svg)
        put(f"{stem}.csv", csv_text(points))
        images[stem] = png
        tables = []
        fronts = []
        for m, dt in results.groups:
            if m != model:
                continue
            front = results.front(m, dt)
            fronts.append(front)
            tstem = f"pareto_{safe_name(m)}_{safe_name(dt)}"
            table = pareto_table(results, front)
            put(f"{tstem}.csv", csv_text(front))
            put(f"{tstem}.md", f"# {results.study}: {m} · {dt}, Pareto-optimal feasible points\n\n"
                               + (markdown_table(table) if len(table) else _why_empty(results, m, dt)) + "\n")
            tables.append((dt, table, tstem))
        bd = breakdown_frame(results, pd.concat(fronts)) if fronts else None
        if bd is not None:
            bstem = f"breakdown_{safe_name(model)}"
            png, svg = plot_breakdown(model, bd)
            put(f"{bstem}.png", png)
            put(f"{bstem}.svg", svg)
            put(f"{bstem}.csv", csv_text(bd))
            images[bstem] = png
        acc = accuracy_points(results, model)
        astem = None
        if acc is not None:
            astem = f"accuracy_{safe_name(model)}"
            png, svg = plot_accuracy(results, model, acc)
            put(f"{astem}.png", png)
            put(f"{astem}.svg", svg)
            put(f"{astem}.csv", csv_text(acc))
            images[astem] = png
        formats = format_rows(results.trials, model, results.knobs)
        fstem = None
        if formats is not None:
            fstem = f"formats_{safe_name(model)}"
            png, svg = plot_formats(results, model, formats)
            put(f"{fstem}.png", png)
            put(f"{fstem}.svg", svg)
            put(f"{fstem}.csv", csv_text(formats))
            images[fstem] = png
        t = results.trials
        unplotted = t[(t["model"] == model) & (t["cycles"].isna() | t["luts"].isna())]
        sections.append(_Section(model, stem, points, tables, bd, unplotted, astem, formats, fstem,
                                 smallest_format(formats, accuracy_loss)))

    prov = provenance(results, now)
    put("report.md", _markdown(results, sections, prov))
    put("index.html", _html(results, sections, prov, images))
    keep = {p.name for p in written}
    for old in out.iterdir():                   # files of models no longer in the results
        if old.is_file() and old.name not in keep and re.match(r"(plot|pareto|breakdown|accuracy|formats)_.*\.(png|svg|csv|md)$",
                                                               old.name):
            old.unlink()
    return written


def _why_empty(results: StudyResults, model: str, dtype: str) -> str:
    return why_no_feasible_point(results.group(model, dtype))


def _summary(results: StudyResults) -> str:
    t = results.trials
    ok = int((t["status"] == "OK").sum())
    feasible = int(t["feasible"].fillna(False).sum())
    objs = objectives_label(results.objectives)
    return (f"{len(t)} trials: {ok} evaluated OK, {len(t) - ok} failed, {feasible} feasible. "
            f"Objectives: {objs}. Varied knobs: {', '.join(results.knobs) or 'none'}.")


def _issues_table(results: StudyResults, s: _Section) -> pd.DataFrame:
    """Infeasible and failed trials of a model: what went wrong."""
    t = results.trials
    part = t[t["model"] == s.model]
    bad = part[~part["feasible"].fillna(False).astype(bool)]
    cols = [c for c in ("number", "dtype", *results.knobs, "status", "violations", "stage", "error",
                        "cycles", "luts") if c in bad]
    return bad[cols].rename(columns={"number": "trial"})


def _markdown(results: StudyResults, sections: list[_Section], prov: list[tuple[str, str]]) -> str:
    time = TIME_LABELS[time_metric(results)]
    lines = [f"# Study `{results.study}`: {time} vs area", "", _summary(results), ""]
    lines += [f"- {s.model}: {s.smallest}" for s in sections if s.smallest]
    lines += [""] if any(s.smallest for s in sections) else []
    for s in sections:
        lines += [f"## {s.model}", "", f"![{time} vs LUTs]({s.plot}.png) ([SVG]({s.plot}.svg), "
                  f"[points]({s.plot}.csv))", ""]
        if s.accuracy:
            lines += [f"![accuracy vs LUTs and latency]({s.accuracy}.png) ([SVG]({s.accuracy}.svg), "
                      f"[points]({s.accuracy}.csv))", ""]
        if s.formats is not None:
            lines += [f"### {s.model}: accuracy against number format ([CSV]({s.formats_plot}.csv))", "",
                      f"![accuracy and LUTs vs bits]({s.formats_plot}.png) ([SVG]({s.formats_plot}.svg))", "",
                      *markdown_rows(s.formats), ""]
        for dt, table, tstem in s.tables:
            lines += [f"### {s.model} · {dt}: Pareto front ([CSV]({tstem}.csv))", ""]
            lines += [markdown_table(table) if len(table) else _why_empty(results, s.model, dt), ""]
        if s.breakdown is not None:
            lines += [f"### {s.model}: cycles per kernel and in copies (Pareto points)", "",
                      f"![cycle breakdown](breakdown_{safe_name(s.model)}.png)", "",
                      markdown_table(s.breakdown.drop(columns="model")), ""]
        issues = _issues_table(results, s)
        if len(issues):
            lines += [f"### {s.model}: infeasible and failed trials", "", markdown_table(issues), ""]
    lines += ["## Provenance", "", *[f"- **{k}**: {md_cell(v)}" for k, v in prov], ""]
    return "\n".join(lines)


_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table.t{border-collapse:collapse;margin:.5em 0 1.5em;font-size:.9em}
table.t th,table.t td{border:1px solid #ccc;padding:.25em .6em;text-align:right}
table.t th{background:#f3f3f3}img{max-width:100%}code{background:#f3f3f3;padding:0 .2em}
dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em;font-size:.9em}dt{font-weight:bold}
dd{margin:0;word-break:break-all}.mixed{color:#b00}"""


def _img(images: dict[str, bytes], stem: str, alt: str) -> str:
    data = base64.b64encode(images[stem]).decode()
    return (f'<p><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}" width="{PLOT_PIXELS[0]}"><br>'
            f'<a href="{stem}.svg">SVG</a> · <a href="{stem}.png">PNG</a> · <a href="{stem}.csv">data (CSV)</a></p>')


def _html(results: StudyResults, sections: list[_Section], prov: list[tuple[str, str]],
          images: dict[str, bytes]) -> str:
    e = html.escape
    time = TIME_LABELS[time_metric(results)]
    body = [f"<h1>Study <code>{e(results.study)}</code>: {e(time)} vs area</h1>", f"<p>{e(_summary(results))}</p>"]
    if any(s.smallest for s in sections):
        body.append("<ul>" + "".join(f"<li>{e(s.model)}: {e(s.smallest.replace('**', ''))}</li>"
                                     for s in sections if s.smallest) + "</ul>")
    body.append("<ul>" + "".join(f'<li><a href="#{e(safe_name(s.model))}">{e(s.model)}</a></li>' for s in sections)
                + '<li><a href="#provenance">provenance</a></li></ul>')
    for s in sections:
        body.append(f'<h2 id="{e(safe_name(s.model))}">{e(s.model)}</h2>')
        body.append(_img(images, s.plot, f"{s.model}: {time} vs LUTs"))
        if s.accuracy:
            body.append(_img(images, s.accuracy, f"{s.model}: accuracy vs LUTs and latency"))
        if s.formats is not None:
            body.append(f"<h3>{e(s.model)}: accuracy against number format</h3>")
            body.append(_img(images, s.formats_plot, f"{s.model}: accuracy and LUTs vs bits"))
            body.append(_html_table(s.formats.drop(columns="accuracy_float")))
        for dt, table, tstem in s.tables:
            body.append(f'<h3>{e(s.model)} · {e(dt)}: Pareto front (<a href="{tstem}.csv">CSV</a>)</h3>')
            body.append(_html_table(table) if len(table) else f"<p>{e(_why_empty(results, s.model, dt))}</p>")
        if s.breakdown is not None:
            body.append(f"<h3>{e(s.model)}: cycles per kernel and in copies (Pareto points)</h3>")
            body.append(_img(images, f"breakdown_{safe_name(s.model)}", f"{s.model}: cycle breakdown"))
            body.append(_html_table(s.breakdown.drop(columns="model")))
        issues = _issues_table(results, s)
        if len(issues):
            body.append(f"<h3>{e(s.model)}: infeasible and failed trials</h3>")
            body.append(_html_table(issues))
    body.append('<h2 id="provenance">Provenance</h2><dl>')
    for k, v in prov:
        cls = ' class="mixed"' if v.startswith("MIXED") else ""
        body.append(f"<dt>{e(k)}</dt><dd{cls}>{e(v)}</dd>")
    body.append("</dl>")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{e(results.study)}: dse report</title><style>{_CSS}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")
