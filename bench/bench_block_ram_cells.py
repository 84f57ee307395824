"""Block RAMs counted without their map against the full map: cells and Yosys time per design.

    python bench/bench_block_ram_cells.py                                   # configs/gemv.yaml's 15 points
    python bench/bench_block_ram_cells.py --specs configs/gemv.yaml configs/digits_dataflow.yaml --limit 6

Area-only ECP5 synthesis leaves memory_libmap's block RAM cells as black boxes instead of
running Yosys's block RAM map (compiler.synth.block_ram_cells). For each grid point of each spec
(its `synthesis:` mode: flat, units or kernels), the design is synthesised both ways from a cold cache:
`counted` (the flow every sweep and `dse eval` run now takes) and `mapped` (the full map, as
place-and-route's synthesis runs it). Prints LUTs, FFs, block RAMs, LUT RAM and DSPs of each,
their difference and both Yosys times, then the median and range of the LUT differences and
the time ratio. Every figure is measured here.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", nargs="+", type=Path, default=[ROOT / "configs" / "gemv.yaml"])
    ap.add_argument("--limit", type=int, help="at most this many grid points of each spec")
    args = ap.parse_args()
    os.environ["TINYHW_CACHE"] = tempfile.mkdtemp(prefix="tinyhw-bench-bram-")   # cold, and not the user's
    from compiler.synth import area, block_ram_cells
    from dse.evaluate import EvalContext, compile_point
    from dse.spec import load_spec
    from dse.study.grid import grid_points
    stand_in = block_ram_cells.commands
    print(f"{'design':<52} {'LUTs counted':>12} {'mapped':>7} {'diff':>6}  {'FF/BRAM/LUTRAM/DSP equal':>24}  "
          f"{'counted s':>9} {'mapped s':>8}")
    diffs, ratios, unequal = [], [], 0
    for path in args.specs:
        spec = load_spec(path)
        ctx = EvalContext.from_spec(spec)
        for point in grid_points(spec, 10**6)[:args.limit]:
            design = compile_point(ctx, point)
            reports = {}
            for way in ("counted", "mapped"):
                block_ram_cells.commands = stand_in if way == "counted" else (lambda: None)
                with tempfile.TemporaryDirectory() as work:
                    t0 = time.perf_counter()
                    reports[way] = (area.synthesize(design, spec.target, Path(work), use_cache=False,
                                                    units=spec.synthesis == "units",
                                                    kernels=spec.synthesis == "kernels"), time.perf_counter() - t0)
            block_ram_cells.commands = stand_in
            (c, cs), (m, ms) = reports["counted"], reports["mapped"]
            same = (c.ffs, c.bram, c.lutram, c.dsp) == (m.ffs, m.bram, m.lutram, m.dsp)
            unequal += not same
            diffs.append((c.luts - m.luts) / m.luts)
            ratios.append(cs / ms)
            name = f"{path.stem} {point.model} {point.dtype} {' '.join(f'{k}={v}' for k, v in point.knobs.items())}"
            print(f"{name[:52]:<52} {c.luts:>12,} {m.luts:>7,} {diffs[-1]:>+6.1%}  "
                  f"{'yes' if same else f'NO {c.ffs}/{c.bram}/{c.lutram}/{c.dsp} vs {m.ffs}/{m.bram}/{m.lutram}/{m.dsp}':>24}  "
                  f"{cs:>9.2f} {ms:>8.2f}", flush=True)
    if diffs:
        print(f"\n{len(diffs)} designs: LUTs counted/mapped median {statistics.median(diffs):+.2%}, "
              f"range {min(diffs):+.2%} to {max(diffs):+.2%}; FF/BRAM/LUT RAM/DSP different in {unequal}; "
              f"Yosys time counted/mapped median {statistics.median(ratios):.2f} "
              f"(range {min(ratios):.2f} to {max(ratios):.2f})")


if __name__ == "__main__":
    main()
