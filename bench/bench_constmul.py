"""Products by constants: what each way of building them costs on ECP5 (weights: constant).

The design: y = x * w elementwise over N lanes in one step (lanes = N), x int8 at run time, w
N int8 weights drawn uniformly from the nonzero int8 values (seeded; the first few fixed to
0, 1, -1, 64: a product by zero vanishes, by +-1 or a power of two is a wire). Rows:

  shift-add      weights: constant: each product as its canonical signed digits, shifted copies
                 of x added and subtracted (compiler/passes/constants.py), the tool's choice
  const * (LUT)  the product left a `$mul` by a constant, built in LUTs (mul: lut: the radix-4
                 LUT multiplier of compiler/synth/lut_multiplier.py, then ABC with the constant)
  const * (DSP)  the same `$mul` by a constant in DSP blocks (mul: dsp)
  memory * (LUT) weights: memory: a general 8x8 product in LUTs, the weight read from a memory
  memory * (DSP) weights: memory with DSPs

Every design is simulated once in CXXRTL against numpy before it is synthesised. Prints a
Markdown table: LUTs, FFs, DSPs in all and per product, and the average canonical signed digits
of the weights.

Usage: python bench/bench_constmul.py [--n 64] [--seed 0]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from tinygrad import Tensor, dtypes  # noqa: E402

from compiler import HardwareConfig, compile_model, simulate  # noqa: E402
from compiler.hw import datapath  # noqa: E402
from compiler.passes import constants  # noqa: E402
from compiler.synth.area import synthesize  # noqa: E402

ROWS = [("shift-add", {"weights": "constant"}, None),
        ("const * (LUT)", {"weights": "constant", "mul": "lut"}, -1),
        ("const * (DSP)", {"weights": "constant", "mul": "dsp"}, -1),
        ("memory * (LUT)", {"weights": "memory", "mul": "lut"}, None),
        ("memory * (DSP)", {"weights": "memory", "mul": "dsp"}, None)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    w = rng.choice(np.r_[-128:0, 1:128], args.n).astype(np.int8)
    w[:4] = [0, 1, -1, 64]
    xv = rng.integers(-128, 128, args.n).astype(np.int8)
    digits = np.mean([len(constants.csd(int(c))) for c in w if c])
    print(f"{args.n} products of an int8 x by int8 constants (average {digits:.2f} signed digits)\n")
    print("| product | LUTs | FFs | DSP | LUTs per product | synth s |\n|---|---|---|---|---|---|")
    default, mul_const = constants.SHIFT_ADD_MAX_ADDERS, datapath.mul_const
    for name, knobs, adders in ROWS:
        # the `$mul` rows: no product expanded, not even the datapath's few-digit shortcut
        constants.SHIFT_ADD_MAX_ADDERS = default if adders is None else adders
        datapath.mul_const = mul_const if adders is None else (lambda v, c: v * c)
        x = Tensor(xv).realize()
        y = (x.cast(dtypes.int32) * Tensor(w).cast(dtypes.int32)).contiguous()
        design = compile_model(y, config=HardwareConfig.from_dict({**knobs, "lanes": args.n}), stream=x)
        got = simulate(design, backend="cxxrtl").outputs[0]
        if not np.array_equal(np.asarray(got).reshape(-1), xv.astype(np.int32) * w.astype(np.int32)):
            raise AssertionError(f"{name}: the simulated products differ from numpy")
        t0 = time.perf_counter()
        area = synthesize(design, "ecp5")
        print(f"| {name} | {area.luts:,} | {area.ffs:,} | {area.dsp} | {area.luts / args.n:.1f} "
              f"| {time.perf_counter() - t0:.0f} |", flush=True)
    constants.SHIFT_ADD_MAX_ADDERS, datapath.mul_const = default, mul_const


if __name__ == "__main__":
    main()
