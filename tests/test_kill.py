"""Killing sweeps: a sweep killed as a whole (SIGKILL to its process group, as a CI time-out, a
closed laptop or the OOM killer would) charges nothing to the points it was running, and
resuming ends with every point COMPLETE exactly once; a worker process killed alone while its
sweep lives is charged to the point it was evaluating, which the sweep's other worker runs again.
Two sweeps of one study, one of them killed: tests/test_shared_study.py."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def _sweep_cmd(spec: Path, results: Path) -> list[str]:
    return [sys.executable, "-m", "dse.cli", "sweep", str(spec), "--n-jobs", "2", "--sim", "pysim",
            "--progress", "lines", "--results", str(results)]


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "TINYHW_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}


def _study(results: Path, name: str):
    from optuna.storages.journal import JournalFileBackend, JournalStorage
    storage = JournalStorage(JournalFileBackend(str(results / name / "study.journal")))
    return optuna.load_study(study_name=name, storage=storage)


def test_a_sweep_killed_six_times_then_resumed_completes_every_point_once(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "study": "kill", "target": "ecp5",
        "models": [{"name": "g", "builtin": "gemv", "params": {"M": 4, "K": 8}}],
        "dtypes": ["int8"], "knobs": {"lanes": [1, 2, 4], "mem_read": ["sync", "comb"]},
        "objectives": ["cycles", "luts"], "search": {"sampler": "grid"}}, sort_keys=False))
    results = tmp_path / "results"
    rng = random.Random(7)
    for _ in range(6):
        proc = subprocess.Popen(_sweep_cmd(spec, results), cwd=tmp_path, env=_env(tmp_path),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(rng.uniform(1.0, 6.0))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    done = subprocess.run(_sweep_cmd(spec, results), cwd=tmp_path, env=_env(tmp_path), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    trials = _study(results, "kill").get_trials(deepcopy=False)
    complete = [tuple(sorted(t.params.items())) for t in trials if t.state.name == "COMPLETE"]
    assert len(complete) == 6 and len(set(complete)) == 6        # every grid point, exactly once
    assert not any(t.user_attrs.get("died") for t in trials)      # nobody's fault
    assert not any(t.user_attrs.get("stage") == "worker" for t in trials)   # nothing given up


SLOW_MODEL = """
import multiprocessing
import time

def build(dtype, N=4):
    if multiprocessing.current_process().name.startswith("dse-sweep"):
        time.sleep(8)               # in a sweep's worker: slow enough to be killed mid-evaluation
    return {"x": ((N,), dtype)}, lambda x: x + 1
"""


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs /proc to find the worker processes")
def test_a_worker_killed_alone_is_charged_to_its_point(tmp_path):
    (tmp_path / "slow.py").write_text(SLOW_MODEL)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "study": "alone", "target": "ecp5", "models": [{"name": "s", "source": "slow.py:build"}],
        "dtypes": ["int8"], "knobs": {"lanes": [1, 2]},
        "objectives": ["cycles", "luts"], "search": {"sampler": "grid"}}, sort_keys=False))
    results = tmp_path / "results"
    proc = subprocess.Popen(_sweep_cmd(spec, results), cwd=tmp_path, env=_env(tmp_path),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:          # both workers inside an evaluation
            if (results / "alone" / "study.journal").exists():
                running = [t for t in _study(results, "alone").get_trials(deepcopy=False)
                           if t.state.name == "RUNNING"]
                if len(running) == 2:
                    time.sleep(1.0)                 # past ask(): both are in the model's 8 s sleep
                    break
            time.sleep(0.5)
        else:
            pytest.fail("the workers never started evaluating")
        workers = [c for c in _children(proc.pid)
                   if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]
        assert len(workers) == 2
        os.kill(workers[0], signal.SIGKILL)
        proc.wait(timeout=120)                      # the other worker finishes both points
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    trials = _study(results, "alone").get_trials(deepcopy=False)
    died = [t for t in trials if t.user_attrs.get("died")]
    assert len(died) == 1 and died[0].state.name == "FAIL"
    assert died[0].user_attrs["error"] == "its evaluating process died (exit code -9)"
    # the other worker then runs the charged point again (one death is within its retries), so
    # the run ends with both points COMPLETE, once each
    complete = [tuple(sorted(t.params.items())) for t in trials if t.state.name == "COMPLETE"]
    assert len(complete) == 2 and len(set(complete)) == 2
