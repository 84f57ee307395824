"""`dse worker` on a real PostgreSQL server (dse/worker.py): several workers share one study
without repeating a point, and a worker killed mid-trial loses only that trial.

The server is started on loopback in a temporary directory from the Debian `postgresql` package's
binaries (/usr/lib/postgresql/*/bin; `.ci/run` installs them); when they or the `psycopg2` driver
are missing the tests skip and say why. initdb refuses to run as root, so as root the server runs
as the `postgres` user the package creates."""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.dir = Path(tempfile.mkdtemp(prefix="tinyhw-pg-"))
        self.data = self.dir / "data"
        self.port = _free_port()
        self.user: str | None = None
        if os.geteuid() == 0:
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                pytest.skip("running as root and there is no `postgres` user to run the server as "
                            "(initdb refuses root); install the Debian postgresql package")
            self.user = "postgres"
            os.chmod(self.dir, 0o755)
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)

    def run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        argv = [str(self.bindir / cmd[0]), *cmd[1:]]
        if self.user:
            argv = ["runuser", "-u", self.user, "--", *argv]
        return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=60)

    def start(self) -> None:
        self.run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
        # _free_port's port is free when asked, not necessarily when the server binds it: another
        # process (another pytest-xdist worker's server or client) may take it in between. Then
        # the server does not start; try another port.
        for attempt in range(3):
            opts = f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={self.dir} -c fsync=off"
            try:
                self.run("pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.dir / "log"), "-w", "-t", "30",
                         "start")
                return
            except subprocess.CalledProcessError:
                log = (self.dir / "log").read_text(errors="replace") if (self.dir / "log").exists() else ""
                if attempt == 2 or "already in use" not in log:
                    raise
                self.port = _free_port()

    def stop(self) -> None:
        self.run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, db: str = "postgres") -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{db}"


@pytest.fixture(scope="module")
def pg():
    bindir = _pg_bin()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): "
                    "apt-get install postgresql, as .ci/run does")
    pytest.importorskip("psycopg2", reason="the PostgreSQL driver is missing: pip install -e '.[postgres]'")
    server = PgServer(bindir)
    try:
        server.start()
    except subprocess.CalledProcessError as e:
        server.stop()
        pytest.fail(f"could not start PostgreSQL: {e.cmd}: {e.stderr}")
    yield server
    server.stop()


@pytest.fixture
def database(pg, request):
    """A fresh database per test: its URL."""
    import sqlalchemy
    name = "t_" + request.node.name.lower().replace("[", "_").replace("]", "")[:50]
    engine = sqlalchemy.create_engine(pg.url(), isolation_level="AUTOCOMMIT")
    with engine.connect() as c:
        c.execute(sqlalchemy.text(f'DROP DATABASE IF EXISTS "{name}"'))
        c.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return pg.url(name)


def write_spec(tmp_path: Path, lanes=(1, 2, 4)) -> Path:
    spec = {"study": "pgw", "target": "ecp5",
            "models": [{"name": "add_16", "builtin": "elementwise", "params": {"N": 16}}],
            "dtypes": ["int8"], "knobs": {"mem_read": ["sync", "comb"], "lanes": list(lanes)},
            "objectives": ["cycles", "luts"], "search": {"sampler": "grid", "seed": 0}}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def start_worker(tmp_path: Path, spec: Path, url: str, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "TINYHW_CACHE": str(tmp_path / "tinyhw")}
    cmd = [sys.executable, "-m", "dse.cli", "worker", str(spec), "--storage", url, "--sim", "pysim",
           "--poll", "0.3", *extra]
    env["PYTHONFAULTHANDLER"] = "1"             # a hung worker's stacks, on SIGABRT
    return subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def finish(p: subprocess.Popen, timeout: float = 50) -> tuple[str, str]:
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.kill(p.pid, signal.SIGABRT)          # PYTHONFAULTHANDLER: the stacks go to stderr
        time.sleep(2)
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        pytest.fail(f"worker did not finish in {timeout} s:\n{err[-3000:]}")
    assert p.returncode == 0, f"worker exited {p.returncode}:\n{err[-3000:]}"
    return out, err


def load(url: str):
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name="pgw", storage=url)


def complete_points(study) -> list[tuple]:
    from optuna.trial import TrialState
    return [tuple(sorted(t.params.items())) for t in study.get_trials(states=(TrialState.COMPLETE,))]


def test_two_workers_share_one_study_without_repeating_a_point(tmp_path, database):
    spec = write_spec(tmp_path)
    workers = [start_worker(tmp_path, spec, database) for _ in range(2)]
    logs = [finish(w) for w in workers]
    study = load(database)
    points = complete_points(study)
    assert len(study.trials) == 6, "; ".join(f"{t.number} {t.state.name} {t.params} {t.user_attrs.get('surplus')} {'fixed_params' in t.system_attrs}" for t in study.trials)
    assert len(points) == 6 and len(set(points)) == 6
    ran = [sum(line.startswith("trial ") for line in err.splitlines()) for _, err in logs]
    assert sum(ran) == 6, ran
    trials = pd.read_csv(tmp_path / "results" / "pgw" / "trials.csv")
    assert len(trials) == 6 and (trials["trial_state"] == "COMPLETE").all()
    pareto = pd.read_csv(tmp_path / "results" / "pgw" / "pareto.csv")
    assert len(pareto) >= 1 and (tmp_path / "results" / "pgw" / "pareto.md").exists()
    # a sweep on the same study finds nothing left to do, and rewrites the outputs
    r = subprocess.run([sys.executable, "-m", "dse.cli", "sweep", str(spec), "--storage", database,
                        "--sim", "pysim", "--progress", "off"], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, "TINYHW_CACHE": str(tmp_path / "tinyhw")}, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "6/6 trials; this run 0" in r.stdout


def test_a_worker_killed_mid_trial_loses_only_that_trial(tmp_path, database):
    from optuna.trial import TrialState
    spec = write_spec(tmp_path, lanes=(1, 2))
    beat = ("--heartbeat", "1", "--grace", "2")
    first = start_worker(tmp_path, spec, database, *beat)
    deadline = time.monotonic() + 40
    victim = None
    while victim is None:
        assert first.poll() is None, f"the first worker ended before a trial ran:\n{first.communicate()[1][-3000:]}"
        assert time.monotonic() < deadline, "no trial became RUNNING within 40 s"
        try:
            running = load(database).get_trials(states=(TrialState.RUNNING,))
        except KeyError:                    # the study does not exist yet
            running = []
        if running:
            victim = running[0]
        else:
            time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)          # the worker and any tool it runs
    first.communicate()

    second = start_worker(tmp_path, spec, database, *beat)
    finish(second)
    study = load(database)
    points = complete_points(study)
    assert len(points) == 4 and len(set(points)) == 4
    killed = study.trials[victim.number]
    assert killed.state is TrialState.FAIL and "metrics" not in killed.user_attrs
    # its point ran again. The point it was queued with, not its params: the worker may die
    # between two suggest calls, leaving some of the point's parameters recorded and some not
    point = killed.user_attrs.get("point") or killed.params
    assert tuple(sorted(point.items())) in points
    trials = pd.read_csv(tmp_path / "results" / "pgw" / "trials.csv")
    assert (trials["trial_state"] == "COMPLETE").sum() == 4
