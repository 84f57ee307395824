"""Synthesis of large designs: flat against per-kernel (`synthesis: kernels`), wall time and
resources, on the bench designs (issue 54): the jet-shaped MLP with constant weights, the AD08
autoencoder and the keyword-spotting MLP (both dataflow, random weights), as
bench/calibrate_estimator.py builds them.

    python bench/bench_kernel_synth.py [--designs jet-int6-p75 ad08-dataflow100 kws3-dataflow400]
                                       [--modes flat kernels] [--jobs 2] [--json out.jsonl]

Every run bypasses the synthesis cache (use_cache=False), so each time is a real Yosys run;
`kernels` runs `--jobs` Yosys processes at a time. Prints one JSON line per design and mode:
compile and synthesis wall seconds, Yosys seconds summed over its runs, and the resources;
then the per-kernel LUTs against flat.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

BENCH = ("jet-int6-p75", "ad08-dataflow100", "kws3-dataflow400")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--designs", nargs="+", default=list(BENCH))
    ap.add_argument("--modes", nargs="+", default=["flat", "kernels"], choices=["flat", "kernels"])
    ap.add_argument("--jobs", type=int, default=2, help="Yosys runs at a time for per-kernel synthesis")
    ap.add_argument("--timeout", type=float, default=4 * 3600)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    os.environ["TINYHW_SYNTH_JOBS"] = str(args.jobs)
    from calibrate_estimator import corpus, design_of
    from compiler.synth.area import synthesize
    entries = {e.name: e for e in corpus()}
    rows = []
    for name in args.designs:
        t0 = time.perf_counter()
        design = design_of(entries[name], "ecp5")
        compile_s = time.perf_counter() - t0
        for mode in args.modes:
            with tempfile.TemporaryDirectory(prefix="bench-kernels-") as tmp:
                t0 = time.perf_counter()
                area = synthesize(design, "ecp5", Path(tmp), timeout=args.timeout, use_cache=False,
                                  kernels=mode == "kernels")
                wall = time.perf_counter() - t0
            row = {"design": name, "mode": mode, "kernels": len(design.kernels), "compile_s": round(compile_s, 1),
                   "synth_wall_s": round(wall, 1), "yosys_s": round(area.seconds, 1), "luts": area.luts,
                   "ffs": area.ffs, "bram": area.bram, "lutram": area.lutram, "dsp": area.dsp,
                   "fallback": bool(area.fallback), "script": area.script.splitlines()[0][:120],
                   "load_avg": round(os.getloadavg()[0], 1)}
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.json:
                with args.json.open("a") as f:
                    f.write(json.dumps(row) + "\n")
    for name in args.designs:
        by = {r["mode"]: r for r in rows if r["design"] == name}
        if "flat" in by and "kernels" in by:
            f, k = by["flat"], by["kernels"]
            print(f"{name}: flat {f['synth_wall_s']:.0f} s, {f['luts']:,} LUTs; per kernel {k['synth_wall_s']:.0f} s, "
                  f"{k['luts']:,} LUTs ({k['luts'] / f['luts'] - 1:+.1%})")


if __name__ == "__main__":
    main()
