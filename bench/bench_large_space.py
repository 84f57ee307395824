"""A large design space searched multi-fidelity (issue 54): configs/jet_space.yaml (11,664 points)
by `dse sweep` from a cold cache, then the front of a 200-point random subset of the same space
with every point synthesised, and the hypervolume of the two fronts.

    python bench/bench_large_space.py [--spec configs/jet_space.yaml] [--jobs 2] [--subset 200]
                                      [--work /tmp/large-space] [--skip-sweep] [--skip-subset]

1. `dse sweep SPEC --n-jobs JOBS` with an empty TINYHW_CACHE: its wall time and CPU time (user +
   system of the process tree), the progress line's counts (points estimated, synthesised,
   skipped and why) and its front (pareto.csv: synthesised points only).
2. The same space with `search: {sampler: random, trials: SUBSET, fidelity: full}` (every point
   simulated on every test sample and synthesised), on the same cache: a point the first sweep
   synthesised is served from it (the same evaluation), the others run in full.
3. Each front's hypervolume (all objectives minimised; a maximised one negated) under one
   reference point, each objective's worst value over both fronts plus 10%, and their ratio.

Prints one JSON object per step and a Markdown summary.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def sweep(spec: Path, jobs: int, cache: Path, results: Path, log: Path) -> dict:
    env = {**os.environ, "TINYHW_CACHE": str(cache)}
    cmd = [sys.executable, "-m", "dse.cli", "sweep", str(spec), "--n-jobs", str(jobs), "--results", str(results),
           "--progress", "lines"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with log.open("w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in (0, 1):
        sys.exit(f"`{' '.join(cmd)}` exited with {proc.returncode}; see {log}")
    lines = log.read_text().splitlines()
    progress = next((ln for ln in reversed(lines) if ln.startswith("[")), "")
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "returncode": proc.returncode,
            "last_progress": progress, "load_avg_end": os.getloadavg()[0]}


def front(results: Path, spec) -> list[list[float]]:
    """The feasible synthesised front of pareto.csv, minimised."""
    import pandas as pd
    df = pd.read_csv(results / "pareto.csv")
    out = []
    for _, r in df.iterrows():
        out.append([(-1 if str(o.direction) == "maximize" else 1) * float(r[o.metric]) for o in spec.objectives])
    return out


def counts(results: Path) -> dict:
    from dse.results import load_results
    df = load_results(results)
    return {"trials": len(df), "synthesised": int((df["trial_state"] == "COMPLETE").sum()),
            "estimated_only": int((df["trial_state"] == "PRUNED").sum()),
            "failed": int((df["status"] == "FAIL").sum())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", type=Path, default=ROOT / "configs" / "jet_space.yaml")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--subset", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", type=Path, default=Path("/tmp/large-space"))
    ap.add_argument("--skip-sweep", action="store_true", help="reuse the sweep already in --work")
    ap.add_argument("--skip-subset", action="store_true")
    args = ap.parse_args()
    from dse.fidelity import hypervolume
    from dse.spec import load_spec
    spec = load_spec(args.spec)
    work = args.work.resolve()
    cache, results = work / "cache", work / "results"
    work.mkdir(parents=True, exist_ok=True)
    summary = {}
    if not args.skip_sweep:
        if cache.exists() and any(cache.iterdir()):
            sys.exit(f"{cache} is not empty: the sweep is measured from a cold cache (remove it, or --skip-sweep)")
        run = sweep(args.spec.resolve(), args.jobs, cache, results, work / "sweep.log")
        run.update(counts(results / spec.study))
        summary["sweep"] = run
        print(json.dumps({"step": "sweep", **run}), flush=True)
    fronts = {"sweep": front(results / spec.study, spec)}
    if not args.skip_subset:
        d = yaml.safe_load(args.spec.read_text())
        d["study"] = f"{spec.study}_random{args.subset}"
        d["search"] = {"sampler": "random", "trials": args.subset, "seed": args.seed, "fidelity": "full"}
        for m in d["models"]:               # paths relative to the original spec
            for k in ("weights", "onnx", "source"):
                if k in m:
                    m[k] = str((args.spec.resolve().parent / m[k]).resolve())
            if "data" in m and "file" in m["data"]:
                m["data"]["file"] = str((args.spec.resolve().parent / m["data"]["file"]).resolve())
        sub_spec = work / "subset.yaml"
        sub_spec.write_text(yaml.safe_dump(d, sort_keys=False))
        run = sweep(sub_spec, args.jobs, cache, results, work / "subset.log")
        run.update(counts(results / d["study"]))
        summary["subset"] = run
        print(json.dumps({"step": "subset", **run}), flush=True)
        fronts["subset"] = front(results / d["study"], spec)
    if len(fronts) == 2 and all(fronts.values()):
        both = fronts["sweep"] + fronts["subset"]
        reference = [max(col) + 0.1 * abs(max(col)) for col in zip(*both)]
        hv = {k: hypervolume(v, reference) for k, v in fronts.items()}
        summary["hypervolume"] = {"reference": reference, **{k: hv[k] for k in hv},
                                  "sweep_over_subset": hv["sweep"] / hv["subset"] if hv["subset"] else None,
                                  "front_sizes": {k: len(v) for k, v in fronts.items()}}
        print(json.dumps({"step": "hypervolume", **summary["hypervolume"]}), flush=True)
    (work / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
