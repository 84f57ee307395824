"""Reading a results CSV (trials.csv, pareto.csv) that may have been cut short.

The sweep writes these files atomically, but a copy (a CI artifact, a full disk, an interrupted
`cp` or `scp`) can still end in the middle of a row, and pandas would read that row with its
last values cut (luts 237 read as 23) or missing. Every row of a whole file ends with a line
end, outside quotes, with as many fields as the header, so:

    a last row without its line end (or inside a quoted field)
                                    a torn row: the file is read without it, and one line on
                                    stderr says so (the file itself is left as it is)
    any other row with a wrong number of fields, bytes that are not UTF-8
                                    ResultsFileError: one line naming the file, the row and the
                                    way out (`dse sweep SPEC` writes the three files again from
                                    the study's storage, evaluating nothing)
"""
from __future__ import annotations

import csv
import io
import sys
from pathlib import Path
from typing import Iterator

import pandas as pd

WAY_OUT = "run `dse sweep SPEC` again: it writes trials.csv, pareto.csv and pareto.md from the study, evaluating nothing"


class ResultsFileError(ValueError):
    """A results CSV damaged beyond a torn last row."""


def _records(text: str) -> tuple[list[tuple[list[str], int]], bool]:
    """The CSV records of `text` with the offset where each ends, and whether the text ends
    inside a quoted field."""
    consumed = [0]

    def lines() -> Iterator[str]:           # split at line feeds only (str.splitlines also splits
        parts = text.split("\n")             # at form feeds and such, which a field may hold)
        for i, part in enumerate(parts):
            line = part + "\n" if i < len(parts) - 1 else part
            if line:
                consumed[0] += len(line)
                yield line
    out: list[tuple[list[str], int]] = []
    reader = csv.reader(lines(), strict=True)
    try:
        for row in reader:
            out.append((row, consumed[0]))
    except csv.Error:
        return out, True
    return out, False


def intact_text(path: Path, data: bytes) -> tuple[str, int]:
    """The whole rows of a results CSV's bytes and how many bytes of a torn last row were left
    out; raises ResultsFileError for other damage."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(data) - 3:       # a character cut at the very end is part of a torn row
            raise ResultsFileError(f"{path}: byte {exc.start} is not UTF-8 text: the file is damaged; "
                                   f"{WAY_OUT}") from None
        text = data[:exc.start].decode("utf-8")
    records, open_quote = _records(text)
    if not records:
        raise ResultsFileError(f"{path}: empty (no header line); {WAY_OUT}")
    header, header_end = records[0]
    if header_end == len(text) and not text.endswith("\n"):
        raise ResultsFileError(f"{path}: cut short inside its header line, no row survives; {WAY_OUT}")
    keep = len(text)
    if open_quote:                          # the last record was cut inside a quoted field
        keep = records[-1][1]
    elif not text.endswith(("\n", "\r")) and len(records) > 1:
        keep = records[-2][1]
        records = records[:-1]
    for i, (row, _) in enumerate(records[1:], start=2):
        if row and len(row) != len(header):
            raise ResultsFileError(f"{path}: record {i} has {len(row)} fields, the header {len(header)}: the file "
                                   f"is damaged; {WAY_OUT}")
    return text[:keep], len(data) - len(text[:keep].encode("utf-8"))


def read_results_csv(path: Path) -> pd.DataFrame:
    """A results CSV as read by pandas, without a torn last row (told on stderr)."""
    data = Path(path).read_bytes()
    text, dropped = intact_text(Path(path), data)
    if dropped:
        print(f"note: {path}: its last row was cut short ({dropped} bytes without a line end): read without it; "
              f"{WAY_OUT}", file=sys.stderr, flush=True)
    df = pd.read_csv(io.StringIO(text))
    return df.rename(columns={old: new for old, new in RENAMED.items() if old in df and new not in df})


RENAMED = {"schedule.1": "schedule_built"}
"""Columns of files written before a rename, as pandas reads them -> their name now: trials.csv
and pareto.csv held the knob `schedule` and the metric (the schedule as built) under one name,
the metric second (pandas reads it as `schedule.1`)."""
