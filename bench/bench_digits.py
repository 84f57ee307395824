"""The digits MLP 64-32-10 (models/digits_mlp.npz) over dtypes x lanes: accuracy and cost.

Every point runs all 450 test samples of sklearn's digits (seeded split, dse.models.data) through
its CXXRTL simulation in one process (dse.models.accuracy.run_samples: bit-exact against the numpy
golden model, the quantised one for integers, and cycles equal to the analytic model, on every
sample), then Yosys synthesises it for --target (LUTs, FFs, BRAM, DSP). Printed: a Markdown
table (the one in docs/real-models.md) with the wall time of each point's sample run (compile,
the C++ build unless cached, and the 450 simulations; noisy on a shared machine).

Usage: python bench/bench_digits.py [--lanes 1 4] [--dtypes int8 int16 fp16 bf16 fp32 fp8e4m3 fp8e5m2] [--target ecp5]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from compiler import HardwareConfig
from compiler.synth.area import synthesize
from dse.models.accuracy import run_samples
from dse.models.data import DataSpec, load_dataset, read_weights
from dse.models.quantize import DenseNet

WEIGHTS = Path(__file__).resolve().parent.parent / "models" / "digits_mlp.npz"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lanes", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--dtypes", nargs="+", default=["int8", "int16", "fp16", "bf16", "fp32", "fp8e4m3", "fp8e5m2"])
    ap.add_argument("--target", default="ecp5")
    args = ap.parse_args()
    data = load_dataset(DataSpec(dataset="sklearn:digits"))
    net = DenseNet.from_arrays(read_weights(WEIGHTS))
    print("| dtype | lanes | accuracy | accuracy_float | agree w/ float | max logit err | cycles "
          "| LUTs | FFs | BRAM | DSP | run s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for dtype in args.dtypes:
        for lanes in args.lanes:
            t0 = time.perf_counter()
            r = run_samples(net=net, dtype=dtype, data=data, config=HardwareConfig(lanes=lanes))
            seconds = time.perf_counter() - t0
            area = synthesize(r.design, args.target)
            print(f"| {dtype} | {lanes} | {100 * r.accuracy:.2f}% | {100 * r.accuracy_float:.2f}% | "
                  f"{100 * r.agreement:.2f}% | {r.max_abs_err:.3g} | {r.cycles} | {area.luts} | {area.ffs} | "
                  f"{area.bram} | {area.dsp} | {seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
