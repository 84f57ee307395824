"""Writing output files: atomically (compiler.tools' writer: a reader never sees half a file),
and the CSV and Markdown cell text that trials.csv, pareto.md, reports and check.md share."""
from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd

from compiler.tools import FileLock, atomic_write_bytes, atomic_write_text

__all__ = ["atomic_write_bytes", "atomic_write_text", "csv_text", "md_cell", "outputs_lock"]

OUTPUTS_LOCK = ".outputs.lock"


def csv_text(df: pd.DataFrame) -> str:
    buf = io.StringIO()
    df.to_csv(buf, index=False)
    return buf.getvalue()


def md_cell(v: Any) -> str:
    """A value as a Markdown table cell: '-' for missing, 4 significant digits for floats."""
    if v is None or v is pd.NA or (isinstance(v, float) and v != v):
        return "-"
    if isinstance(v, (float, np.floating)):
        return f"{v:.4g}"
    return str(v).replace("|", "\\|").replace("\n", " ")


@contextlib.contextmanager
def outputs_lock(folder: str | Path, *, shared: bool = False) -> Iterator[None]:
    """An flock on a results folder's outputs: writers of a set of files hold it exclusively
    (each one's set is whole before the next starts), readers of several of them shared (a
    no-op without flock)."""
    with FileLock(Path(folder) / OUTPUTS_LOCK, shared=shared).held():
        yield
