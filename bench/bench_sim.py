"""Simulation back ends compared on the 128x784 GEMV, int8 and fp32: Amaranth pysim vs CXXRTL.

For each design: compile time (CXXRTL: RTLIL + Yosys + g++, from an empty cache unless
--keep-cache), run time from start to done (CXXRTL: median of --repeat runs of the cached
binary), simulated cycles per second, the wall time of one cached CXXRTL `simulate` call
(process start, loading and reading back included) and the pysim/CXXRTL run-time ratio.
Both back ends must agree bit for bit on the outputs and on the cycle count.

Usage: python bench/bench_sim.py [--repeat N] [--keep-cache] [--mem-read sync|comb]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import numpy as np  # noqa: E402
from tinygrad import Tensor  # noqa: E402

import designs  # noqa: E402
from compiler import HardwareConfig, UnsupportedError, compile_model, simulate  # noqa: E402

M, K = 128, 784


def gemv_fp32(seed: int = 0) -> designs.Case:
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((M, K)).astype(np.float32)
    x = rng.standard_normal(K).astype(np.float32)
    # numpy sums in another order: the reference is only close, the back ends must be identical
    return designs.Case((Tensor(W) @ Tensor(x),), (W @ x,))


def bench(kind: str, make, mem_read: str, repeat: int) -> None:
    label = f"{kind} GEMV {M}x{K}"
    case = make()
    try:
        design = compile_model(*case.outputs, config=HardwareConfig(mem_read=mem_read))
    except UnsupportedError as exc:
        print(f"{kind}: not yet supported ({exc})")
        return
    first = simulate(design, backend="cxxrtl")           # builds the binary
    runs, walls = [first.seconds], []
    for _ in range(repeat - 1):
        t0 = time.perf_counter()
        r = simulate(design, backend="cxxrtl")
        walls.append(time.perf_counter() - t0)
        runs.append(r.seconds)
    cx_run = statistics.median(runs)
    t0 = time.perf_counter()
    py = simulate(design, backend="pysim")
    py_wall = time.perf_counter() - t0
    same = py.cycles == first.cycles and all(
        a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b) for a, b in zip(py.outputs, first.outputs))
    exact = all(np.array_equal(o, ref) for o, ref in zip(first.outputs, case.reference))
    close = exact or all(np.allclose(o, ref, rtol=1e-4, atol=1e-4) for o, ref in zip(first.outputs, case.reference))
    print(f"{label} (mem_read={mem_read}): {first.cycles:,} cycles; back ends agree: {same}; "
          f"reference: {'bit-exact' if exact else 'close' if close else 'MISMATCH'}")
    print(f"  pysim : compile      - s  run {py.seconds:8.3f} s  {py.cycles / py.seconds:>14,.0f} cycles/s"
          f"  (wall {py_wall:.2f} s with loading)")
    print(f"  cxxrtl: compile {first.build_seconds:6.2f} s  run {cx_run:8.5f} s  {first.cycles / cx_run:>14,.0f} cycles/s"
          f"  (median of {len(runs)}; cached simulate() wall {statistics.median(walls) if walls else float('nan'):.3f} s)")
    print(f"  run-time ratio pysim/cxxrtl: {py.seconds / cx_run:,.0f}x;"
          f" the cxxrtl compile costs as much as pysim running {first.build_seconds * py.cycles / py.seconds:,.0f} cycles")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="CXXRTL runs per design (median)")
    ap.add_argument("--keep-cache", action="store_true", help="use the normal binary cache (compile may be 0 s)")
    ap.add_argument("--mem-read", default="sync", choices=("sync", "comb"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tinyhw-bench-cache-") as tmp:
        if not args.keep_cache:
            os.environ["TINYHW_CACHE"] = tmp
        bench("int8", lambda: designs.gemv_int8(M, K), args.mem_read, args.repeat)
        bench("fp32", gemv_fp32, args.mem_read, args.repeat)


if __name__ == "__main__":
    main()
