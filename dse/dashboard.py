"""optuna-dashboard on a study's storage (`dse dashboard results/<study>`).

    app = dashboard_app("results/gemv/study.journal")     # a WSGI application
    serve("results/gemv/study.journal", host="127.0.0.1", port=8080)

Why not `optuna-dashboard results/<study>/study.journal` alone: that works (it opens the file
as Optuna's JournalStorage, read by the same format), but with Optuna's default journal lock, a
symlink, where every `dse sweep` and `dse worker` writing the journal takes an flock
(dse.study.journal). Reading needs no lock; the dashboard's writes (notes, a trial told or
skipped from its page) would not exclude a sweep's. Opened here, the storage is the one the
sweep opens (dse.study.storage.open_storage: the flock, a torn last record repaired first, and
any Optuna URL such as postgresql://), so the dashboard can stay open while the study runs.

optuna-dashboard is an optional dependency (`pip install optuna-dashboard`, or the test extras).
"""
from __future__ import annotations

from pathlib import Path

from dse.paths import JOURNAL
from dse.study.options import SweepError
from dse.study.storage import open_storage


class DashboardError(SweepError):
    """No storage to show, or optuna-dashboard is not installed: one line."""


def storage_location(results_or_storage: str | Path) -> str:
    """A URL as it is; a results folder -> its study.journal; a journal file as it is."""
    text = str(results_or_storage)
    if "://" in text:
        return text
    path = Path(text)
    if path.is_dir():
        path = path / JOURNAL
    if not path.is_file():
        raise DashboardError(f"{results_or_storage}: no study here (expected a results folder with {JOURNAL}, "
                             f"a journal file, or a storage URL)")
    return str(path)


def _optuna_dashboard():
    try:
        import optuna_dashboard
    except ImportError:
        raise DashboardError("optuna-dashboard is not installed: pip install optuna-dashboard") from None
    return optuna_dashboard


def dashboard_app(results_or_storage: str | Path):
    """The dashboard as a WSGI application over the study's storage (opened as dse opens it)."""
    dashboard = _optuna_dashboard()
    return dashboard.wsgi(open_storage(storage_location(results_or_storage)))


def serve(results_or_storage: str | Path, *, host: str = "127.0.0.1", port: int = 8080) -> None:
    """Run the dashboard until interrupted (optuna-dashboard's own server)."""
    dashboard = _optuna_dashboard()
    dashboard.run_server(open_storage(storage_location(results_or_storage)), host=host, port=port)
