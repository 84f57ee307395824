"""Every on-disk location of the explorer, in one place.

    results/<study>/                         results_dir: a sweep's outputs
        study.journal                        JOURNAL: the default Optuna storage
        trials.csv, pareto.csv, pareto.md    dse.results
        report/, check.md                    dse.report, dse.check
        points/<model>-<dtype>-<hash>/       point_dir: one design point's work files
    $TINYHW_CACHE/evals                      eval_cache_dir: the evaluation cache (dse.cache)

The cache root ($TINYHW_CACHE, else ~/.cache/tinyhw) is `compiler.tools.cache_root`, shared with
the compiler's own caches.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from compiler.cache import EVALS

if TYPE_CHECKING:
    from dse.spec import DesignPoint, Spec

RESULTS_ROOT = Path("results")
JOURNAL = "study.journal"


def results_dir(*, study: str, results_root: Path = RESULTS_ROOT) -> Path:
    """<results_root>/<study>/: where a study's outputs go."""
    return Path(results_root) / study


def journal_path(*, study: str, results_root: Path = RESULTS_ROOT) -> Path:
    """The default storage of a study: a journal file in its results folder."""
    return results_dir(study=study, results_root=results_root) / JOURNAL


def point_dir(*, spec: Spec, point: DesignPoint, target: str, seed: int,
              results_root: Path = RESULTS_ROOT) -> Path:
    """<results_root>/<study>/points/<model>-<dtype>-<hash>/, the hash over everything that makes
    the point (model definition, dtype, knobs, target, input range, data seed)."""
    m = spec.model(point.model)
    key = json.dumps({"model": m.describe(), "source": str(m.source or ""), "dtype": point.dtype,
                      "knobs": dict(point.knobs), "target": target, "seed": seed,
                      "range": repr(m.input_range(point.dtype))}, sort_keys=True, default=str)
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    return results_dir(study=spec.study, results_root=results_root) / "points" / f"{point.model}-{point.dtype}-{digest}"


def eval_cache_dir() -> Path:
    """$TINYHW_CACHE/evals, TINYHW_CACHE defaulting to ~/.cache/tinyhw (compiler.cache.EVALS)."""
    return EVALS.folder
