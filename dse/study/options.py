"""What a sweep or worker run asks for (SweepOptions) and the error of a study that cannot start."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dse.paths import RESULTS_ROOT


class SweepError(ValueError):
    """A sweep cannot start (bad storage, a study made for another search space)."""


@dataclass(frozen=True, kw_only=True)
class SweepOptions:
    results_root: Path = RESULTS_ROOT       # outputs go to <results_root>/<study>/
    storage: str | None = None              # Optuna storage URL or journal path; None: the default journal
    n_jobs: int = 1                         # worker processes
    trials: int | None = None               # overrides the spec's search.trials
    fresh: bool = False                     # delete the study from the storage first
    use_cache: bool = True
    cache_dir: Path | None = None           # None: dse.paths.eval_cache_dir()
    sim_backend: str = "auto"
    data_seed: int = 0
    progress: str = "auto"                  # "auto" (a bar on a terminal, lines otherwise), "bar", "lines", "off"

    def __post_init__(self) -> None:
        if self.n_jobs < 1:
            raise ValueError(f"n_jobs: expected a positive integer, got {self.n_jobs!r}")
        if self.trials is not None and self.trials < 1:
            raise ValueError(f"trials: expected a positive integer, got {self.trials!r}")
        if self.progress not in ("auto", "bar", "lines", "off"):
            raise ValueError(f"progress: expected auto, bar, lines or off, got {self.progress!r}")
