"""EXP2, LOG2 and SIN as tinygrad decomposes them (the renderer does not claim them): per op,
an fp32 elementwise model of N elements at fp_pipeline 0 and 3, its cycles (== the cycle
model, checked), ECP5 area of the whole design (compiler.synth.area, ecp5), and its accuracy in ULP
against tinygrad's own result on its PYTHON device (the CPU reference) over inputs spread
across each op's useful range. A Yosys failure is printed in the area columns; LUTs marked * were
mapped without abc9 (it ran out of WebAssembly call stack: compiler/synth/area.py).

Usage: python bench/bench_transcendental.py [--n 64]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from tinygrad import Tensor  # noqa: E402

from compiler import HardwareConfig, compile_model, simulate  # noqa: E402
from compiler.synth.area import synthesize  # noqa: E402
from compiler.tools import ToolError  # noqa: E402


def ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    def ordered(x):
        i = np.asarray(x, np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    return np.abs(ordered(a) - ordered(b))


OPS = {
    "exp2": (lambda t: t.exp2(), lambda rng, n: rng.uniform(-20, 20, n)),
    "log2": (lambda t: t.log2(), lambda rng, n: np.exp2(rng.uniform(-30, 30, n))),
    "sin": (lambda t: t.sin(), lambda rng, n: rng.uniform(-100, 100, n)),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=64, help="elements (default 64)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print("| op | fp_pipeline | cycles | LUT | FF | DSP | max ULP vs tinygrad | mean ULP | max ULP vs float64 numpy |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, (op, inputs) in OPS.items():
        x = inputs(rng, args.n).astype(np.float32)
        want = op(Tensor(x)).numpy()
        exact = getattr(np, name)(x.astype(np.float64)).astype(np.float32)
        for level in (0, 3):
            design = compile_model(op(Tensor(x)), config=HardwareConfig(fp_pipeline=level))
            result = simulate(design, backend="cxxrtl")
            assert result.cycles == design.cycles_formula
            got = result.outputs[0]
            try:
                area = synthesize(design, "ecp5")
                # * : abc9 ran out of WASM call stack, LUTs mapped without it (compiler/synth/area.py)
                cells = f"{area.luts}{' *' if area.fallback else ''} | {area.ffs} | {area.dsp}"
            except ToolError as exc:
                cells = f"yosys failed: {str(exc).splitlines()[0][:60]} | - | -"
            d = ulps(got, want)
            print(f"| {name} | {level} | {result.cycles} | {cells} | {d.max()} | {d.mean():.2f} "
                  f"| {ulps(got, exact).max()} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
