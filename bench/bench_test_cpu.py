"""CPU of test modules at two commits, on this machine: where a suite's extra time comes from.

    python bench/bench_test_cpu.py 8dcb044 main tests/test_float_semantics.py
    python bench/bench_test_cpu.py 8dcb044 main "tests/test_sweep.py tests/test_kill.py" --together

Each commit is cloned from this repository into a temporary folder, and each module (or group
of modules, one argument) is run there with `python -m pytest -n 0 -q`, its own empty
TINYHW_CACHE (a warm cache hides CXXRTL and Yosys builds) and the clone first on PYTHONPATH
(absolute, so the sweeps' worker subprocesses import the clone too). Prints user + sys CPU of
pytest and every process it waited for, and the wall time. CPU seconds depend on the machine
and on what else it runs (the same module has cost twice as much on one machine as on another),
so figures are compared between commits of one run of this script, never with older figures;
--together runs the two commits at the same time, so both see the same load.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def clone(rev: str, where: Path) -> Path:
    path = where / rev.replace("/", "_")
    subprocess.run(["git", "clone", "-q", str(ROOT), str(path)], check=True)
    subprocess.run(["git", "-C", str(path), "checkout", "-q", rev], check=True)
    return path


def start(path: Path, modules: str, tmp: Path) -> tuple[subprocess.Popen, float, Path]:
    cache = Path(tempfile.mkdtemp(dir=tmp, prefix="cache-"))
    log = cache.with_suffix(".log")
    env = dict(os.environ, TINYHW_CACHE=str(cache), PYTHONPATH=str(path))
    cmd = [sys.executable, "-m", "pytest", "-n", "0", "-q", "-p", "no:cacheprovider", *modules.split()]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=path, env=env, stdout=out, stderr=subprocess.STDOUT)
    return proc, time.perf_counter(), log


def finish(proc: subprocess.Popen, t0: float, log: Path) -> tuple[float, float, str]:
    """CPU seconds (user + sys) of pytest and the processes it waited for (os.wait4 reports
    them per child, so two runs at once are told apart), wall seconds, pytest's last line."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    return usage.ru_utime + usage.ru_stime, wall, lines[-1] if lines else ""


def run(paths: dict[str, Path], modules: str, together: bool, tmp: Path) -> None:
    results, running = {}, {}
    for rev, path in paths.items():
        running[rev] = start(path, modules, tmp)
        if not together:
            results[rev] = finish(*running.pop(rev))
    for rev, started in running.items():
        results[rev] = finish(*started)
    for rev, (cpu, wall, last) in results.items():
        print(f"{modules} @ {rev}: CPU {cpu:.0f} s, wall {wall:.0f} s  ({last})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("modules", nargs="+", help="a test module, or several in one quoted argument")
    ap.add_argument("--together", action="store_true", help="run both commits at once (same load)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-test-cpu-") as tmp:
        paths = {rev: clone(rev, Path(tmp)) for rev in (args.old, args.new)}
        for modules in args.modules:
            run(paths, modules, args.together, Path(tmp))


if __name__ == "__main__":
    main()
