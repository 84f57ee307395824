"""Sweep throughput: evaluations per hour for a spec (default configs/gemv.yaml) on this machine,
from a cold cache, with --n-jobs 1 and 2, and the time of a re-run served from the cache.

    python bench/bench_sweep.py                      # the full gemv.yaml grid, n-jobs 1 then 2 (~15 min)
    python bench/bench_sweep.py --jobs 2             # only n-jobs 2
    python bench/bench_sweep.py --trials 8           # the first 8 grid points only (quicker ratio)

Each run is `dse sweep` in a subprocess (startup included, as a user sees it) with its own empty
TINYHW_CACHE (so CXXRTL binaries and evaluations are all cold) and its own results folder.
After the n-jobs 2 run, the same study is run again with --fresh on the now-warm cache: every
trial is then served from the evaluation cache, which is what "re-running is immediate"
means in numbers (a plain re-run of a finished study has nothing to do at all; its time is
printed too).
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
sys.path.insert(0, str(ROOT))


def run(spec: Path, jobs: int, cache: Path, results: Path, extra: list[str]) -> tuple[float, "object", str]:
    from dse.results import load_results
    env = {**os.environ, "TINYHW_CACHE": str(cache)}
    cmd = [sys.executable, "-m", "dse.cli", "sweep", str(spec), "--n-jobs", str(jobs), "--results", str(results),
           "--progress", "lines", *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    seconds = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        sys.exit(f"`{' '.join(cmd)}` exited with {proc.returncode}:\n{proc.stderr[-3000:]}")
    if "locked" in proc.stderr:
        sys.exit(f"storage lock errors with --n-jobs {jobs}:\n{proc.stderr[-3000:]}")
    from dse.spec import load_spec
    return seconds, load_results(results / load_spec(spec).study), proc.stdout.strip().splitlines()[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", type=Path, default=ROOT / "configs" / "gemv.yaml")
    ap.add_argument("--jobs", default="1,2", help="comma-separated --n-jobs values (default 1,2)")
    ap.add_argument("--trials", type=int, help="trial budget (default: the spec's)")
    args = ap.parse_args()
    extra = ["--trials", str(args.trials)] if args.trials else []
    jobs = [int(j) for j in args.jobs.split(",")]
    print(f"spec {args.spec.relative_to(ROOT) if args.spec.is_relative_to(ROOT) else args.spec}, "
          f"{os.cpu_count()} CPUs, cold cache per run")
    rates: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        tmp = Path(tmp)
        for j in jobs:
            cache, results = tmp / f"cache-{j}", tmp / f"results-{j}"
            seconds, df, summary = run(args.spec, j, cache, results, extra)
            fresh = int((~df["cached"]).sum())
            ok = int((df["status"] == "OK").sum())
            rates[j] = fresh / seconds * 3600
            per = df.loc[~df["cached"], "total_s"].astype(float)
            print(f"--n-jobs {j}: {len(df)} trials ({fresh} evaluated, {len(df) - fresh} from the cache, {ok} OK) "
                  f"in {seconds:.0f} s -> {rates[j]:.0f} evaluations/hour "
                  f"(one evaluation: median {per.median():.1f} s, max {per.max():.1f} s)")
            print(f"    {summary}")
        last = jobs[-1]
        cache, results = tmp / f"cache-{last}", tmp / f"results-{last}"
        seconds, df, _ = run(args.spec, last, cache, results, extra)
        print(f"re-run, study complete: {seconds:.1f} s (nothing to evaluate)")
        seconds, df, _ = run(args.spec, last, cache, results, extra + ["--fresh"])
        print(f"re-run with --fresh on the warm cache: {len(df)} trials, {int(df['cached'].sum())} from the cache, "
              f"in {seconds:.1f} s")
    if 1 in rates and 2 in rates:
        print(f"n-jobs 2 / n-jobs 1 throughput: {rates[2] / rates[1]:.2f}x")


if __name__ == "__main__":
    main()
