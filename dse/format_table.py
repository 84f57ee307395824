"""Accuracy against number format: for a model with data, one row per format it ran in (its dtype
and format knobs), the cheapest design of each, and the smallest format within an accuracy loss.

    rows = format_rows(trials, "digits_mlp", knobs=["lanes", "weight_bits@0"])
    smallest_format(rows, loss=0.01)   # "Smallest format within 1 point of the float model (97.33%): ..."

A format's bits are its weights' and activations' widths: for a point the tool quantised, the
row's `mean_weight_bits` and `mean_act_bits` (the widths its quantiser used, mean over the
layers); else an integer format's (int8 8/8, w4a8 4/8, int16 16/13: dse.models.widths), a
float's (fp32 32, fp16 and bf16 16, fp8 8), or what the format knobs set. The row of a format is its design
with the fewest LUTs among the feasible ones (else among the correct ones, marked infeasible):
what that format costs at least here. `dse report` and pareto.md show them (dse/report.py,
dse/results.py).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import pandas as pd

from dse.models.widths import default_bits, is_format_knob, quantisable
from dse.models.zoo import DTYPES

DEFAULT_LOSS = 0.01          # one point of accuracy
COLUMNS = ["format", "weight_bits", "act_bits", "accuracy", "loss", "luts", "ffs", "bram", "dsp", "cycles",
           "feasible", "trial"]


def _bits(dtype: str) -> tuple[float, float]:
    if quantisable(dtype):
        return default_bits(dtype)
    d = DTYPES.get(dtype)
    return (d.bits, d.bits) if d is not None else (math.nan, math.nan)


def format_of(dtype: str, knobs: dict[str, Any]) -> tuple[str, float, float]:
    """(label, weight bits, activation bits) of a point's number format."""
    given = {k: int(v) for k, v in knobs.items() if is_format_knob(k) and v is not None and not pd.isna(v)}
    w, a = _bits(dtype)
    w, a = given.get("weight_bits", w), given.get("act_bits", a)
    per_w = [v for k, v in given.items() if k.startswith("weight_bits@")]
    per_a = [v for k, v in given.items() if k.startswith("act_bits@")]
    w_mean = (sum(per_w) + w) / (len(per_w) + 1) if per_w else w
    a_mean = (sum(per_a) + a) / (len(per_a) + 1) if per_a else a
    label = " ".join([dtype, *(f"{k}={v}" for k, v in sorted(given.items()))])
    return label, float(w_mean), float(a_mean)


def format_rows(trials: pd.DataFrame, model: str, knobs: Sequence[str]) -> pd.DataFrame | None:
    """One row per number format of `model` (None: the model has no accuracy)."""
    if "accuracy" not in trials or not len(trials):
        return None
    part = trials[(trials["model"] == model) & trials["accuracy"].notna()]
    if "correct" in part:
        part = part[part["correct"].fillna(False).astype(bool)]
    if not len(part):
        return None
    fmt_knobs = [k for k in knobs if is_format_knob(k) and k in part]
    rows = []
    for _, r in part.iterrows():
        label, w, a = format_of(r["dtype"], {k: r[k] for k in fmt_knobs})
        if pd.notna(r.get("mean_weight_bits")) and pd.notna(r.get("mean_act_bits")):
            w, a = float(r["mean_weight_bits"]), float(r["mean_act_bits"])     # what the quantiser used
        rows.append({"format": label, "weight_bits": w, "act_bits": a, "accuracy": float(r["accuracy"]),
                     "accuracy_float": float(r["accuracy_float"]) if pd.notna(r.get("accuracy_float")) else math.nan,
                     "luts": r.get("luts"), "ffs": r.get("ffs"), "bram": r.get("bram"), "dsp": r.get("dsp"),
                     "cycles": r.get("cycles"), "feasible": bool(r.get("feasible")) if pd.notna(r.get("feasible"))
                     else False, "trial": r.get("number")})
    df = pd.DataFrame(rows)
    df["_luts"] = pd.to_numeric(df["luts"], errors="coerce").fillna(math.inf)
    best = (df.sort_values(["feasible", "_luts"], ascending=[False, True])
              .groupby("format", sort=False).head(1))
    best = best.assign(loss=best["accuracy_float"] - best["accuracy"])
    best = best.sort_values(["weight_bits", "act_bits", "_luts"], ascending=[False, False, True])
    return best[COLUMNS + ["accuracy_float"]].reset_index(drop=True)


def smallest_format(rows: pd.DataFrame | None, loss: float = DEFAULT_LOSS) -> str:
    """The sentence naming the smallest feasible format (fewest weight + activation bits, then
    fewest LUTs) whose accuracy is within `loss` of the float model's."""
    if rows is None or not len(rows):
        return ""
    ref = rows["accuracy_float"].dropna()
    if not len(ref):
        return ""
    float_acc = float(ref.max())
    points = f"{loss * 100:g} point{'s' * (loss != 0.01)}"
    ok = rows[rows["feasible"] & (rows["accuracy"] >= float_acc - loss - 1e-12)]
    if not len(ok):
        best = rows.sort_values("accuracy", ascending=False).iloc[0]
        return (f"No feasible format within {points} of the float model's accuracy ({float_acc:.2%}); the most "
                f"accurate: {best['format']} at {best['accuracy']:.2%}.")
    ok = ok.assign(_bits=ok["weight_bits"] + ok["act_bits"],
                   _luts=pd.to_numeric(ok["luts"], errors="coerce").fillna(math.inf))
    r = ok.sort_values(["_bits", "_luts"]).iloc[0]
    cost = "" if pd.isna(r["luts"]) else f", {int(r['luts']):,} LUTs" + (
        "" if pd.isna(r["bram"]) else f", {int(r['bram'])} block RAM")
    return (f"Smallest format within {points} of the float model's accuracy ({float_acc:.2%}): **{r['format']}** "
            f"({_fmt_bits(r['weight_bits'])}-bit weights, {_fmt_bits(r['act_bits'])}-bit activations): "
            f"{r['accuracy']:.2%}{cost} (trial {int(r['trial'])}).")


def _fmt_bits(v: float) -> str:
    return f"{v:g}" if float(v).is_integer() else f"{v:.1f}"


def markdown_rows(rows: pd.DataFrame) -> list[str]:
    """The table in Markdown lines."""
    heads = ["format", "weight bits", "act bits", "accuracy", "loss", "LUTs", "FFs", "BRAM", "DSP", "cycles",
             "feasible", "trial"]
    out = ["| " + " | ".join(heads) + " |", "|" + "|".join("---" for _ in heads) + "|"]
    for _, r in rows.iterrows():
        cells = [r["format"], _fmt_bits(r["weight_bits"]), _fmt_bits(r["act_bits"]), f"{r['accuracy']:.2%}",
                 "-" if pd.isna(r["loss"]) else f"{r['loss'] * 100:+.2f} pt",
                 *("-" if pd.isna(r[c]) else f"{int(r[c]):,}" for c in ("luts", "ffs", "bram", "dsp", "cycles")),
                 "yes" if r["feasible"] else "no", "-" if pd.isna(r["trial"]) else str(int(r["trial"]))]
        out.append("| " + " | ".join(cells) + " |")
    return out
