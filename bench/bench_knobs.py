"""lanes x reduce_unroll on the int8 128x784 GEMV: cycles (simulated), LUTs, FFs, BRAM, DSP.

For every point: compile, simulate (CXXRTL when it builds here, else pysim) and check the
outputs bit for bit against numpy and the cycles against the analytic model, synthesise with
Yosys for the target (compiler.synth.area: `synth_ecp5`, `stat -json`). `ratio` is cycles divided
by the MAC bound M*K / (lanes * reduce_unroll); the goal is ratio <= 1.05 plus a small fill.
CXXRTL binaries are built up front in bundles on all cores (--jobs).

Usage: python bench/bench_knobs.py [--factors 1,2,4,8] [--target ecp5] [--backend auto|cxxrtl|pysim]
                                   [--no-synth] [--json FILE] [knob=value ...]
Extra `knob=value` arguments (e.g. loop_fusion=False acc_width=25) apply to every point.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import numpy as np  # noqa: E402
import yaml  # noqa: E402

import designs  # noqa: E402
from compiler import HardwareConfig, compile_model, simulate  # noqa: E402

M, K = 128, 784


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--factors", default="1,2,4,8", help="values for both lanes and reduce_unroll")
    ap.add_argument("--target", default="ecp5")
    ap.add_argument("--backend", default="auto", choices=("auto", "cxxrtl", "pysim"))
    ap.add_argument("--no-synth", action="store_true")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--json", type=Path, help="write the rows as JSON here")
    ap.add_argument("knobs", nargs="*", help="extra knob=value for every point (YAML scalars)")
    args = ap.parse_args(argv)
    factors = [int(f) for f in args.factors.split(",")]
    extra = {}
    for kv in args.knobs:
        name, _, value = kv.partition("=")
        extra[name] = yaml.safe_load(value)

    case = designs.gemv_int8(M, K)
    points = []
    t0 = time.perf_counter()
    for lanes in factors:
        for u in factors:
            config = HardwareConfig(**{**extra, "lanes": lanes, "reduce_unroll": u})
            points.append((lanes, u, compile_model(*case.outputs, config=config)))
    print(f"compiled {len(points)} points in {time.perf_counter() - t0:.1f} s", flush=True)

    backend = args.backend
    if backend in ("auto", "cxxrtl"):
        from compiler.sim import cxxrtl
        t0 = time.perf_counter()
        try:
            cxxrtl.build_many([d for *_, d in points], jobs=args.jobs)
            backend = "cxxrtl"
            print(f"CXXRTL binaries ready in {time.perf_counter() - t0:.1f} s", flush=True)
        except Exception as exc:                          # noqa: BLE001 - fall back, say why
            if args.backend == "cxxrtl":
                raise
            print(f"CXXRTL unavailable ({type(exc).__name__}: {exc}); simulating with pysim", flush=True)
            backend = "pysim"

    rows = []
    header = (f"{'lanes':>5} {'unroll':>6} {'cycles':>8} {'model':>8} {'ratio':>7} {'LUTs':>6} {'FFs':>5} "
              f"{'BRAM':>4} {'LUTRAM':>6} {'DSP':>4} {'exact':>5} {'sim s':>6} {'synth s':>7}")
    print(f"\nint8 GEMV {M}x{K}, target {args.target}, simulated with {backend}"
          + (f", knobs {extra}" if extra else ""))
    print(header)
    for lanes, u, design in points:
        t0 = time.perf_counter()
        result = simulate(design, backend=backend)
        sim_s = time.perf_counter() - t0
        exact = all(np.array_equal(a, b) for a, b in zip(result.outputs, case.reference))
        area = None
        synth_s = 0.0
        if not args.no_synth:
            from compiler.synth.area import synthesize
            t0 = time.perf_counter()
            area = synthesize(design, args.target)
            synth_s = time.perf_counter() - t0
        bound = M * K / (lanes * u)
        row = dict(lanes=lanes, reduce_unroll=u, cycles=result.cycles, model=design.cycles_formula,
                   ratio=result.cycles / bound, exact=exact, sim_s=sim_s, synth_s=synth_s,
                   luts=area and area.luts, ffs=area and area.ffs, bram=area and area.bram,
                   lutram=area and area.lutram, dsp=area and area.dsp)
        rows.append(row)
        fmt = lambda v: "-" if v is None else str(v)  # noqa: E731
        print(f"{lanes:>5} {u:>6} {result.cycles:>8} {design.cycles_formula:>8} {row['ratio']:>7.4f} "
              f"{fmt(row['luts']):>6} {fmt(row['ffs']):>5} {fmt(row['bram']):>4} {fmt(row['lutram']):>6} "
              f"{fmt(row['dsp']):>4} {str(exact):>5} {sim_s:>6.2f} {synth_s:>7.1f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    bad = [r for r in rows if not r["exact"] or r["cycles"] != r["model"]]
    if bad:
        print(f"\n{len(bad)} point(s) not bit-exact or off the cycle model", file=sys.stderr)
        return 1
    worst = max(r["cycles"] - 1.05 * M * K / (r["lanes"] * r["reduce_unroll"]) for r in rows)
    print(f"\nall points bit-exact and on the cycle model; largest excess over 1.05 x the MAC bound: "
          f"{worst:.1f} cycles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
