"""Many-sample simulation: samples per second through one CXXRTL process (compiler.simulate_many).

The design is the zoo's int8 MLP 64-32-10 (the size of an MLP on sklearn's 8x8 digits), built
once; --samples random inputs are run through one process of its binary, every output checked
bit for bit against the zoo's numpy golden model and every cycle count against the analytic
model. Printed: cycles per sample, wall time of the whole batch (process start, file I/O and
decoding included; the binary is built before timing starts), samples per second, and the ratio
to the goal of 1,000 samples/s. The driver runs on one core (it is one process).

Usage: python bench/bench_samples.py [--samples N] [--repeat R] [--lanes L]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from compiler import HardwareConfig, compile_model, simulate_many
from compiler.sim import cxxrtl
from dse.models import zoo

GOAL = 1000.0      # samples per second (issue 15)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--lanes", type=int, default=1)
    args = ap.parse_args()
    tg = zoo.import_tinygrad()
    params = {"IN": 64, "HIDDEN": 32, "OUT": 10, "SHIFT": 9}
    built = zoo.mlp("int8", **params)
    arrays = zoo.make_inputs(built, seed=0)
    tensors = {name: tg.Tensor(a) for name, a in arrays.items()}
    design = compile_model(built.forward(*tensors.values()), config=HardwareConfig(lanes=args.lanes))
    cxxrtl.build(design)
    rng = np.random.default_rng(1)
    xs = rng.integers(-128, 128, (args.samples, 64)).astype(np.int8)
    samples = [{tensors["x"]: x} for x in xs]
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        results = simulate_many(design, samples)
        times.append(time.perf_counter() - t0)
    for x, r in zip(xs, results):
        want = zoo.reference("mlp", "int8", params, {**arrays, "x": x})
        np.testing.assert_array_equal(r.outputs[0], want)
        assert r.cycles == design.cycles_formula
    t = statistics.median(times)
    rate = args.samples / t
    print(f"int8 MLP 64-32-10, lanes={args.lanes}: {design.cycles_formula} cycles/sample, {args.samples} samples "
          f"bit-exact; batch wall time median of {args.repeat}: {t:.3f} s (min {min(times):.3f} s)")
    print(f"samples/s: {rate:,.0f} (goal {GOAL:,.0f}: ratio {rate / GOAL:.2f}); "
          f"simulated cycles/s: {rate * design.cycles_formula / 1e6:.1f} M")


if __name__ == "__main__":
    main()
