"""Writing output files: atomically (a reader never sees half a file), and the CSV and
Markdown cell text that trials.csv, pareto.md, reports and check.md share."""
from __future__ import annotations

import contextlib
import io
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write to a temporary file next to `path`, then os.replace it into place."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)                # mkstemp's 0600 would hide a published file
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


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
