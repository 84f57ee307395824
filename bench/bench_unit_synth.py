"""Per-unit against flat synthesis on the zoo: LUTs, FFs, block RAMs, DSPs and Yosys time.

    python bench/bench_unit_synth.py                        # every zoo model x fp16, bf16, fp32 (~20 min)
    python bench/bench_unit_synth.py --models gemv --dtypes fp32 --lanes 1,4

For each design (zoo defaults, the GEMV at 128x784) three syntheses for ECP5, each from a cold
synthesis cache:
  flat    the flow of `synthesis: flat` (synth_ecp5 on the whole design)
  units   `synthesis: units` (compiler.synth.units): the design with its float units as black
          boxes, each distinct unit synthesised once and counted per instance
  hier    one synth_ecp5 run with `keep_hierarchy` on each float unit's module: what a user who
          keeps the units as modules in their own flow gets; `units` should count the same
Prints one row per design and the median and range of units/flat and units/hier LUT ratios.
Every figure is measured here; nothing is estimated.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_MODELS = ("gemv", "matmul", "elementwise", "conv2d", "mlp_softmax", "layernorm", "act_mlp", "attention")


def build(model: str, dtype: str, lanes: int):
    from compiler import HardwareConfig, compile_model
    from dse.models import zoo
    params = {"M": 128, "K": 784} if model == "gemv" else {}
    built = zoo.ZOO[model].build(dtype, **params)
    arrays = zoo.make_inputs(built, 0)
    return compile_model(built.forward(*zoo.input_tensors(built, arrays)), config=HardwareConfig(lanes=lanes))


def keep_hierarchy(text: str) -> str:
    """The RTLIL with `keep_hierarchy` on every float unit's module (compiler.synth.units' units)."""
    from compiler.hw.floatops import UNIT_PREFIX
    return re.sub(rf"^(module \\\S+\.{UNIT_PREFIX}\d+_\w+)$", r"attribute \\keep_hierarchy 1\n\1", text, flags=re.M)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS))
    ap.add_argument("--dtypes", default="fp16,bf16,fp32")
    ap.add_argument("--lanes", default="1", help="comma-separated lane counts (the GEMV also gets 4 by default)")
    args = ap.parse_args()
    os.environ["TINYHW_CACHE"] = tempfile.mkdtemp(prefix="tinyhw-bench-units-")   # cold, and not the user's
    from compiler.synth.rtlil_text import convert
    from compiler.synth.area import synthesize, synthesize_rtlil
    from compiler.synth.units import split_units
    print(f"{'design':<28} {'flat LUT':>9} {'units':>7} {'hier':>7} {'u/flat':>7} {'u/hier':>7}  "
          f"{'FF/BRAM/DSP equal':>17}  {'flat s':>6} {'units s':>7}  units")
    to_flat, to_hier, fallbacks = [], [], 0
    for model in args.models.split(","):
        for dtype in args.dtypes.split(","):
            lanes_list = [int(x) for x in args.lanes.split(",")]
            if model == "gemv" and args.lanes == "1":
                lanes_list = [1, 4]
            for lanes in lanes_list:
                name = f"{model} {dtype} lanes={lanes}"
                try:
                    design = build(model, dtype, lanes)
                except Exception as exc:                    # noqa: BLE001 - a zoo model this dtype cannot build
                    print(f"{name:<28} not built: {type(exc).__name__}: {str(exc)[:80]}")
                    continue
                text = convert(design.top)
                split = split_units(text)
                t0 = time.perf_counter()
                flat = synthesize(design, "ecp5", use_cache=False)
                t1 = time.perf_counter()
                units = synthesize(design, "ecp5", units=True)
                t2 = time.perf_counter()
                hier = synthesize_rtlil(keep_hierarchy(text), "ecp5", use_cache=False, mul=design.config.mul)
                same = (flat.ffs, flat.bram, flat.dsp) == (units.ffs, units.bram, units.dsp)
                r_flat, r_hier = units.luts / flat.luts, units.luts / hier.luts
                to_flat.append(r_flat)
                to_hier.append(r_hier)
                mark = "*" if flat.fallback else " "     # flat run fell back to the classic LUT mapping
                fallbacks += bool(flat.fallback)
                print(f"{name:<28} {flat.luts:>8,}{mark} {units.luts:>7,} {hier.luts:>7,} {r_flat:>7.3f} {r_hier:>7.3f}  "
                      f"{'yes' if same else 'NO':>17}  {t1 - t0:>6.1f} {t2 - t1:>7.1f}  "
                      f"{units.units} instances of {len(split.units)}", flush=True)
    if fallbacks:
        print("* the flat run fell back to the classic LUT mapping (abc9 out of WebAssembly stack: compiler/synth/area.py); "
              "the per-unit runs used abc9")
    if to_flat:
        print(f"units/flat LUTs: median {statistics.median(to_flat):.3f}, range {min(to_flat):.3f}-{max(to_flat):.3f}; "
              f"units/hier: median {statistics.median(to_hier):.3f}, range {min(to_hier):.3f}-{max(to_hier):.3f} "
              f"({len(to_flat)} designs)")


if __name__ == "__main__":
    main()
