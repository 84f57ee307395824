"""Amaranth Python simulator speed on the int8 MLP 784-128-10 (two kernels and a copy).

Prints simulated cycles, wall time and cycles per second (median of several runs).
Usage: python bench/bench_pysim.py [--repeat N]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import numpy as np  # noqa: E402

import designs  # noqa: E402
from compiler import HardwareConfig, compile_model, simulate  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for mode in ("sync", "comb"):
        case = designs.mlp_int8()
        t0 = time.perf_counter()
        design = compile_model(*case.outputs, config=HardwareConfig(mem_read=mode))
        compile_s = time.perf_counter() - t0
        runs, walls = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            r = simulate(design)
            walls.append(time.perf_counter() - t0)
            runs.append(r.seconds)
            assert all(np.array_equal(o, ref) for o, ref in zip(r.outputs, case.reference)), "wrong result"
        run_s = statistics.median(runs)
        print(f"int8 MLP 784-128-10 mem_read={mode}: {r.cycles} cycles, compile {compile_s:.2f} s, "
              f"simulate (median of {args.repeat}) {statistics.median(walls):.2f} s incl. loading, "
              f"{run_s:.2f} s running = {r.cycles / run_s:,.0f} cycles/s")


if __name__ == "__main__":
    main()
