"""optuna-dashboard opens a finished study (dse/dashboard.py, `dse dashboard`): its JSON API,
called in-process through the WSGI application, lists the study and every trial with the values
and metrics the sweep stored. Also the bare `optuna-dashboard results/<study>/study.journal`
(optuna-dashboard's own guess of the storage), which docs/sweep.md mentions."""
from __future__ import annotations

import io
import json

import pytest

from dse.cli import main
from dse.spec import load_spec
from dse.sweep import sweep
from helpers import options, spec_dict, write_spec

optuna_dashboard = pytest.importorskip("optuna_dashboard")


def get(app, path: str) -> tuple[str, object]:
    """(status line, decoded JSON body) of a GET through the WSGI application."""
    path, _, query = path.partition("?")
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": query, "SERVER_NAME": "localhost",
               "SERVER_PORT": "8080", "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(b""),
               "wsgi.errors": io.StringIO(), "CONTENT_LENGTH": "0"}
    status = []
    body = b"".join(app(environ, lambda s, headers, exc_info=None: status.append(s)))
    return status[0], json.loads(body)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("dash")
    mp = pytest.MonkeyPatch()
    from helpers import fake_area
    mp.setattr("compiler.synth.area.synthesize", lambda design, target="ecp5", workdir=None, timeout=600, **_:
               fake_area(design, target))
    try:
        r = sweep(load_spec(write_spec(tmp_path, spec_dict(study="dash"))), options(tmp_path))
    finally:
        mp.undo()
    assert r.ran == 4
    return r.results_dir


@pytest.mark.parametrize("how", ["dse", "optuna-dashboard"])
def test_the_dashboard_opens_a_finished_study(finished, how):
    from dse.dashboard import dashboard_app
    journal = finished / "study.journal"
    app = dashboard_app(finished) if how == "dse" else optuna_dashboard.wsgi(str(journal))
    status, studies = get(app, "/api/studies")
    assert status.startswith("200")
    (study,) = studies["study_summaries"]
    assert study["study_name"] == "dash"
    assert [d for d in study["directions"]] == ["minimize", "minimize"]      # cycles, luts
    status, detail = get(app, f"/api/studies/{study['study_id']}?after=0")
    assert status.startswith("200")
    trials = detail["trials"]
    assert len(trials) == 4 and all(t["state"] == "Complete" for t in trials)
    rows = {t["number"]: t for t in trials}
    loaded = optuna_load(journal)
    stored = {t.number: t for t in loaded.trials}
    for n, t in rows.items():
        assert t["values"] == stored[n].values                              # the objectives as told
        attrs = {a["key"]: a["value"] for a in t["user_attrs"]}
        # optuna-dashboard shows the start of a long attribute (the metrics row)
        assert f'"model": "{stored[n].params["model"]}"' in attrs["metrics"]
        assert {p["name"]: p["param_external_value"] for p in t["params"]}["mem_read"] == stored[n].params["mem_read"]
    assert sorted(t["number"] for t in detail["best_trials"]) == sorted(t.number for t in loaded.best_trials)


def optuna_load(journal):
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalStorage
    return optuna.load_study(study_name="dash", storage=JournalStorage(JournalFileBackend(str(journal))))


def test_dse_dashboard_without_a_study_is_one_line_exit_2(tmp_path, capsys):
    assert main(["dashboard", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no study here (expected a results folder with study.journal" in err
    assert main(["dashboard", str(tmp_path), "--port", "0"]) == 2
    assert "--port: expected 1 to 65535, got 0" in capsys.readouterr().err
