"""Area against integer width (issue 42): a zoo model at int2 .. int8 (and mixed formats such as
w4a8), every design simulated in CXXRTL bit-exact against the numpy golden model with cycles
equal to the cycle model, then synthesised by Yosys (synth_ecp5): LUTs, flip-flops, block RAM,
LUT RAM and DSPs as measured, the accumulator width the compiler built, and the bits the weights'
memories hold. The narrow formats are int8 Tensors whose ranges the compiler is told
(dse.models.zoo.declared_ranges -> compile_model's input_ranges), so the memories, products and
sums are sized to the bits, not to the container (docs/compiler.md, value bounds).

Usage: python bench/bench_int_widths.py [--model mlp|gemv] [--params IN=64,HIDDEN=32,OUT=10,SHIFT=6]
                                        [--dtypes int2 int3 ... int8 w4a8] [--lanes 1 4] [--mul auto lut]
                                        [--fp-pipeline 0] [--no-sim] [--workdir DIR] [--json out.json]
Defaults: the digits MLP's builtin equivalent (mlp 64-32-10, SHIFT 6) at int2 .. int8, lanes 1 and 4,
mul auto (the device's DSPs) and lut (every product in LUTs, where its width shows). Synthesis is
cached under $TINYHW_CACHE.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from compiler import HardwareConfig, compile_model, simulate  # noqa: E402
from compiler.hw.kernel import acc_shape  # noqa: E402
from compiler.synth.area import synthesize  # noqa: E402
from dse.models import zoo  # noqa: E402


def parse_params(text: str) -> dict[str, int]:
    try:
        return {k: int(v) for k, v in (kv.split("=") for kv in text.split(",") if kv)}
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAME=INT,NAME=INT, got {text!r}") from None


def measure(model: str, params: dict, dtype: str, config: HardwareConfig, *, sim: bool, workdir: Path) -> dict:
    built = zoo.ZOO[model].build(dtype, **params)
    arrays = zoo.make_inputs(built, 0)
    tensors = zoo.input_tensors(built, arrays)
    design = compile_model(built.forward(*tensors), config=config, input_ranges=zoo.declared_ranges(built, tensors))
    row = {"dtype": dtype, "lanes": config.lanes, "mul": config.mul, "cycles": design.cycle_model().total}
    if sim:
        result = simulate(design, backend="cxxrtl")
        want = zoo.reference(model, dtype, params, arrays)
        if not np.array_equal(np.asarray(result.outputs[0]).reshape(-1), np.asarray(want).reshape(-1)):
            raise AssertionError(f"{dtype} lanes {config.lanes}: outputs differ from the numpy golden model")
        if result.cycles != row["cycles"]:
            raise AssertionError(f"{dtype}: simulated {result.cycles} cycles, the cycle model says {row['cycles']}")
        row["exact"] = True
    weights = {n for n, (_, dt) in built.inputs.items() if dt == zoo.weights_dtype(dtype)} - {"x"}
    ids = {design.buffer_of(t) for n, t in zip(built.inputs, tensors) if n in weights}
    kernels = design.source_kernels
    row["weight_bits"] = sum(b.width * b.size for pos, k in enumerate(kernels) for b in k.buffers
                             if any((pos, b.slot) in hb.holders for hb in design.host if hb.id in ids))
    row["acc_bits"] = max((acc_shape(a, config).width for k in design.kernels for a in k.accs), default=0)
    t = time.perf_counter()
    area = synthesize(design, "ecp5", workdir / f"{dtype}-l{config.lanes}-{config.mul}")
    row.update(synth_s=time.perf_counter() - t, luts=area.luts, ffs=area.ffs, bram=area.bram, lutram=area.lutram,
               dsp=area.dsp)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mlp", choices=sorted(zoo.ZOO))
    ap.add_argument("--params", type=parse_params, default={"IN": 64, "HIDDEN": 32, "OUT": 10, "SHIFT": 6})
    ap.add_argument("--dtypes", nargs="+", default=[f"int{b}" for b in range(2, 9)])
    ap.add_argument("--lanes", nargs="+", type=int, default=[1, 4])
    ap.add_argument("--mul", nargs="+", default=["auto", "lut"], choices=["auto", "dsp", "lut"])
    ap.add_argument("--fp-pipeline", type=int, default=0)
    ap.add_argument("--no-sim", dest="sim", action="store_false")
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    root = args.workdir or Path(tempfile.mkdtemp(prefix="tinyhw-bench-int-widths-"))
    print(f"{args.model} {args.params} on ECP5 (synth_ecp5), fp_pipeline {args.fp_pipeline}; work in {root}", flush=True)
    print(f"{'dtype':>6} {'lanes':>5} {'mul':>4} {'cycles':>7} {'LUT':>6} {'FF':>6} {'BRAM':>4} {'LUTRAM':>6} "
          f"{'DSP':>4} {'acc bits':>8} {'weight bits':>11}", flush=True)
    rows = []
    for mul, lanes, dtype in itertools.product(args.mul, args.lanes, args.dtypes):
        config = HardwareConfig(lanes=lanes, mul=mul, fp_pipeline=args.fp_pipeline)
        r = measure(args.model, args.params, dtype, config, sim=args.sim, workdir=root)
        rows.append(r)
        print(f"{r['dtype']:>6} {r['lanes']:>5} {r['mul']:>4} {r['cycles']:>7,} {r['luts']:>6,} {r['ffs']:>6,} "
              f"{r['bram']:>4} {r['lutram']:>6} {r['dsp']:>4} {r['acc_bits']:>8} {r['weight_bits']:>11,}", flush=True)
    if args.sim:
        print("every design simulated in CXXRTL: outputs bit-exact against the numpy golden model, cycles equal "
              "to the cycle model")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
