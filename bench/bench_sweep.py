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
After the runs, the n-jobs 2 study again with --fresh and the evaluation cache emptied but the
synthesis cache ($TINYHW_CACHE/synth) kept: every design is compiled and simulated again and
Yosys is not run at all, which is what the synthesis cache buys when the hardware is unchanged.

A fixed reference workload is timed before and after the sweeps (Yosys mapping an 8-term 8-bit
dot product to LUTs, written here in Verilog, so it does not change with the compiler): it says
how fast this machine was during the run, so figures of two machines or days can be compared by
their ratio to it, not by their seconds.

    python bench/bench_sweep.py --compare            # full grid vs multi-fidelity (docs/multi-fidelity.md)

--compare runs each spec (default configs/gemv.yaml and configs/gemv_space.yaml) twice from a
cold cache with --n-jobs 2: `search.fidelity: full` (every point synthesised) and `multi`
(synthesis only where the estimate could reach the front). It prints, for each: the time to
finish, points per hour, how many points were synthesised, and the hypervolume of the reported
(synthesised) front relative to the full grid's, per model x dtype and summed. The reference
point of each model x dtype is 1.1 x the worst value of each objective over the full grid's
feasible points, so every front point counts. A spec's `search.hv_tolerance` applies to the
multi-fidelity run only (the full grid synthesises every point). Goals (issue 20): gemv.yaml at >= 1,000
points/hour; the large space at >= 99% of the grid's hypervolume in <= 30% of its time.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compiler.tools import cores  # noqa: E402


def run(spec: Path, jobs: int, cache: Path, results: Path, extra: list[str]) -> tuple[float, "object", list[str]]:
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
    return seconds, load_results(results / load_spec(spec).study), proc.stdout.strip().splitlines()


REFERENCE_VERILOG = """
module ref(input clk, input [63:0] a, input [63:0] b, output reg [20:0] y);
  integer i;
  reg [20:0] s;
  always @(posedge clk) begin
    s = 0;
    for (i = 0; i < 8; i = i + 1) s = s + $signed(a[i*8 +: 8]) * $signed(b[i*8 +: 8]);
    y <= s;
  end
endmodule
"""


def reference_seconds() -> float:
    """Wall time of the fixed reference workload (module docstring), one Yosys process."""
    from compiler.tools import yosys
    with tempfile.TemporaryDirectory(prefix="bench-reference-") as tmp:
        (Path(tmp) / "ref.v").write_text(REFERENCE_VERILOG)
        t0 = time.perf_counter()
        yosys("read_verilog ref.v; synth_ecp5 -nodsp -top ref; stat", cwd=Path(tmp))
        return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", type=Path, default=ROOT / "configs" / "gemv.yaml")
    ap.add_argument("--jobs", default="1,2", help="comma-separated --n-jobs values (default 1,2)")
    ap.add_argument("--trials", type=int, help="trial budget (default: the spec's)")
    ap.add_argument("--compare", nargs="*", type=Path, metavar="SPEC",
                    help="full grid vs multi-fidelity on these specs (none given: configs/gemv.yaml and "
                         "configs/gemv_space.yaml)")
    ap.add_argument("--sim", help="--sim of the --compare sweeps (default: pysim for configs/gemv_space.yaml, "
                                  "whose 4k-cycle designs simulate in a second, where a CXXRTL build takes 6-18 s; "
                                  "auto for the others)")
    ap.add_argument("--keep", type=Path, metavar="DIR",
                    help="--compare: copy each run's results folder (trials.csv, pareto.csv, ...) into DIR")
    args = ap.parse_args()
    if args.compare is not None:
        specs = args.compare or [ROOT / "configs" / "gemv.yaml", ROOT / "configs" / "gemv_space.yaml"]
        print(f"{cores()} usable CPUs, load average {os.getloadavg()[0]:.1f} at the start; --n-jobs 2, cold cache per run")
        for spec in specs:
            compare(spec, ["--sim", args.sim or ("pysim" if spec.name == "gemv_space.yaml" else "auto")], args.keep)
        return
    extra = ["--trials", str(args.trials)] if args.trials else []
    jobs = [int(j) for j in args.jobs.split(",")]
    print(f"spec {args.spec.relative_to(ROOT) if args.spec.is_relative_to(ROOT) else args.spec}, "
          f"{cores()} usable CPUs, cold cache per run")
    reference = [reference_seconds()]
    print(f"reference workload (Yosys, 8-term 8-bit dot product in LUTs): {reference[0]:.1f} s")
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
            print(f"    {summary[0]}")
        last = jobs[-1]
        cache, results = tmp / f"cache-{last}", tmp / f"results-{last}"
        seconds, df, _ = run(args.spec, last, cache, results, extra)
        print(f"re-run, study complete: {seconds:.1f} s (nothing to evaluate)")
        seconds, df, _ = run(args.spec, last, cache, results, extra + ["--fresh"])
        print(f"re-run with --fresh on the warm cache: {len(df)} trials, {int(df['cached'].sum())} from the cache, "
              f"in {seconds:.1f} s")
        # what the synthesis cache alone buys: evaluations cold, synthesis warm
        import shutil
        shutil.rmtree(cache / "evals", ignore_errors=True)
        seconds, df, _ = run(args.spec, last, cache, results, extra + ["--fresh"])
        print(f"re-run with --fresh, the evaluation cache emptied, the synthesis cache kept: {len(df)} trials "
              f"in {seconds:.1f} s -> {len(df) / seconds * 3600:.0f} evaluations/hour "
              f"({int(df['notes'].fillna('').str.contains('synthesis cache').sum())} synthesised from its cache)")
    if 1 in rates and 2 in rates:
        print(f"n-jobs 2 / n-jobs 1 throughput: {rates[2] / rates[1]:.2f}x")
    reference.append(reference_seconds())
    print(f"reference workload again: {reference[1]:.1f} s (median of the two {statistics.median(reference):.1f} s)")


def _minimised(df, objectives) -> list[tuple[float, ...]]:
    return [tuple(float(r[o.metric]) * (1 if str(o.direction) == "minimize" else -1) for o in objectives)
            for _, r in df.iterrows()]


def compare(spec_path: Path, extra: list[str], keep: Path | None = None) -> None:
    """Full grid vs multi-fidelity on one spec, each from a cold cache (module docstring)."""
    import yaml
    from dse.fidelity import hypervolume
    from dse.results import load_results
    from dse.spec import SYNTH_FIDELITY, load_spec
    spec = load_spec(spec_path)
    synthesised = list(SYNTH_FIDELITY.values())        # rows' fidelity, flat or per-unit (spec `synthesis`)
    if len(spec.objectives) != 2:
        sys.exit(f"{spec_path}: --compare computes a 2-objective hypervolume; the spec has {len(spec.objectives)}")
    data = yaml.safe_load(spec_path.read_text())
    print(f"\n{spec_path.relative_to(ROOT) if spec_path.is_relative_to(ROOT) else spec_path}: "
          f"{spec.space_size} points, objectives {', '.join(o.metric for o in spec.objectives)}, {' '.join(extra)}")
    out = {}
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
        tmp = Path(tmp)
        for fidelity in ("full", "multi"):
            path = tmp / f"{fidelity}.yaml"
            search = {**data["search"], "fidelity": fidelity}
            if fidelity == "full":
                search.pop("hv_tolerance", None)        # a multi-fidelity key: the grid synthesises all
            path.write_text(yaml.safe_dump({**data, "search": search}, sort_keys=False))
            seconds, df, summary = run(path, 2, tmp / f"cache-{fidelity}", tmp / f"results-{fidelity}", extra)
            pareto = load_results(tmp / f"results-{fidelity}" / spec.study / "pareto.csv")
            if keep is not None:
                import shutil
                shutil.copytree(tmp / f"results-{fidelity}" / spec.study, keep / fidelity / spec.study,
                                dirs_exist_ok=True)
            out[fidelity] = (seconds, df, pareto)
            synth = int(df["fidelity"].isin(synthesised).sum()) if "fidelity" in df else 0
            simulated = int(df["correct"].notna().sum())
            print(f"  {fidelity:5}: {len(df)} points in {seconds:.0f} s -> {len(df) / seconds * 3600:.0f} points/hour; "
                  f"{simulated} simulated, {synth} synthesised; front {len(pareto)} points "
                  f"({'all synthesised' if pareto['fidelity'].isin(synthesised).all() else 'NOT all synthesised'})")
            for line in summary[1:]:
                if not line.startswith("  "):
                    print(f"         {line}")
        full_s, full_df, full_front = out["full"]
        multi_s, _, multi_front = out["multi"]
        total_full = total_multi = 0.0
        for (model, dtype), grid in full_df[full_df["feasible"].fillna(False)].groupby(["model", "dtype"]):
            worst = [max(v) for v in zip(*_minimised(grid, spec.objectives))]
            ref = tuple(w + 0.1 * abs(w) for w in worst)
            sel = lambda f: f[(f["model"] == model) & (f["dtype"] == dtype)]     # noqa: E731
            hv_full = hypervolume(_minimised(sel(full_front), spec.objectives), ref)
            hv_multi = hypervolume(_minimised(sel(multi_front), spec.objectives), ref)
            total_full, total_multi = total_full + hv_full, total_multi + hv_multi
            print(f"  {model} {dtype}: hypervolume multi / full = {hv_multi / hv_full:.4f}" if hv_full else
                  f"  {model} {dtype}: empty front")
        print(f"  => hypervolume {total_multi / total_full * 100:.2f}% of the grid's in "
              f"{multi_s / full_s * 100:.0f}% of its time ({multi_s:.0f} s vs {full_s:.0f} s); "
              f"load average now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
