"""The design-space explorer: specs (dse.spec), one point's evaluation (dse.evaluate), sweeps
(dse.sweep) and their results (`dse.load_results(path) -> pandas.DataFrame`)."""
from __future__ import annotations

__all__ = ["load_results"]


def __getattr__(name: str):
    # lazy: `import dse` (and every dse submodule) stays free of pandas
    if name == "load_results":
        from dse.results import load_results
        return load_results
    raise AttributeError(f"module 'dse' has no attribute {name!r}")
