"""The area estimator's calibration: the project's own designs, synthesised, and the per-family
coefficients fitted on them (dse/estimator.json, shipped with the package; dse.estimate.Prior).

    python bench/calibrate_estimator.py collect [--target ecp5] [--only FAMILY ...] [--skip-bench]
    python bench/calibrate_estimator.py fit [--target ecp5]        # writes dse/estimator.json, prints the tables
    python bench/calibrate_estimator.py list                       # the corpus, one line per design

`collect` compiles every design of the corpus (below), computes its features
(dse.estimate.design_features) and synthesises it (compiler.synth.area.synthesize: Yosys's family
flow, flat, through the synthesis cache, so a second collect costs only the compiles), one design
at a time, smallest families first, and appends (family, name, features, measured resources,
Yosys seconds, the synthesis command) to bench/data/estimator_<target>.jsonl (a design already
there is not run again unless its hardware (its RTLIL, source locations aside), its features or
the family's synthesis command changed). `fit`
reads that file, fits each metric's coefficients on all designs (dse.estimate.fit_prior:
non-negative least squares on relative error) and measures the error on designs the fit has
not seen: every family held out in turn (the fit on the other families predicts it). The held-out errors go into the table with the coefficients: they are
the error a study's estimate starts with (dse.fidelity's gate widens every estimate by them).

The corpus: families of the designs this project builds (zoo GEMVs and the other zoo models in
integers and floats, trained MLPs and a CNN with their weights in memories, sequential and
dataflow, MLPs with constant weights, random-weight MLPs of the AD08 and keyword-spotting
shapes), small to medium, and the three bench designs (jet, AD08, KWS: `--skip-bench` leaves
them out, they take minutes each).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

DATA = ROOT / "bench" / "data"
MODELS = ROOT / "models"


@dataclass(frozen=True)
class Entry:
    family: str
    name: str
    dtype: str = "int8"
    knobs: dict = field(default_factory=dict)
    model: dict | None = None               # a spec's models[] entry (with data:); or
    build: Callable[[], Any] | None = None  # a function returning the compiled Design
    bench: bool = False                     # one of the bench designs: minutes of Yosys


def gemv(M, K, **params):
    return {"name": f"gemv_{M}x{K}", "builtin": "gemv", "params": {"M": M, "K": K, **params}}


def zoo(builtin, **params):
    return {"name": builtin, "builtin": builtin, "params": params}


DIGITS = {"name": "digits_mlp", "weights": str(MODELS / "digits_mlp.npz"), "data": {"dataset": "sklearn:digits"}}
CNN = {"name": "digits_cnn", "onnx": str(MODELS / "digits_cnn.onnx"), "data": {"dataset": "sklearn:digits", "samples": 20}}
JET = {"name": "jet", "weights": str(MODELS / "jet_mlp.npz"), "data": {"file": str(MODELS / "jet_data.npz")}}
CONST = {"weights": "constant", "lanes": 64, "reduce_unroll": 64}
PIPE = {"fp_pipeline": 3, "adder_levels": 3, "schedule": "dataflow"}


def _iris(hidden: tuple[int, ...]) -> dict:
    """An iris MLP (scikit-learn, seed 0) written once under bench/data/ (its weights are the design)."""
    path = DATA / f"iris_{'_'.join(map(str, hidden))}.npz"
    if not path.is_file():
        import numpy as np
        from sklearn.neural_network import MLPClassifier
        from dse.models.data import DataSpec, load_dataset
        d = load_dataset(DataSpec(dataset="sklearn:iris"))
        clf = MLPClassifier(hidden, max_iter=3000, random_state=0).fit(d.x_train, d.y_train)
        DATA.mkdir(parents=True, exist_ok=True)
        np.savez(path, **{f"W{i}": W.T for i, W in enumerate(clf.coefs_, 1)},
                 **{f"b{i}": b for i, b in enumerate(clf.intercepts_, 1)})
    return {"name": f"iris_{'_'.join(map(str, hidden))}", "weights": str(path), "data": {"dataset": "sklearn:iris"}}


def _random_mlp(sizes, target: int, wbits=8, abits=8, shift=7, knobs=None, schedule="dataflow"):
    """bench/bench_dataflow.py's random-weight MLP of `sizes`, dataflow with fold auto at `target`
    (or sequential with that folding)."""
    def build():
        from bench_dataflow import mlp
        from compiler import HardwareConfig, compile_model
        x, y, _, ranges = mlp(sizes, wbits=wbits, abits=abits, shift=shift)
        config = HardwareConfig(schedule="dataflow", fold="auto", target_interval=target, **(knobs or {}))
        flow = compile_model(y, config=config, stream=x, input_ranges=ranges)
        if schedule == "dataflow":
            return flow
        folding = {f"{k}@{i}": v for i, st in flow.config.layers for k, v in st}
        x2, y2, _, ranges2 = mlp(sizes, wbits=wbits, abits=abits, shift=shift)
        return compile_model(y2, config=HardwareConfig.from_dict({**folding, **(knobs or {})}), input_ranges=ranges2)
    return build


AD08 = [64, 72, 72, 8, 72, 72, 64]
KWS = [490, 256, 256, 256, 12]


def corpus() -> list[Entry]:
    e: list[Entry] = []
    # integer GEMVs: lanes x reduce_unroll, memory packing, pipelining, LUT products
    for lanes, ru in [(1, 1), (2, 2), (4, 1), (1, 8), (4, 4), (8, 2), (3, 3), (8, 8), (16, 4)]:
        e.append(Entry("gemv_int", f"gemv32x128-l{lanes}-r{ru}", "int8", {"lanes": lanes, "reduce_unroll": ru},
                       gemv(32, 128)))
    e += [Entry("gemv_int", "gemv32x128-l4-r4-pack1", "int8", {"lanes": 4, "reduce_unroll": 4, "mem_pack": 1}, gemv(32, 128)),
          Entry("gemv_int", "gemv32x128-l4-r4-lut", "int8", {"lanes": 4, "reduce_unroll": 4, "mul": "lut"}, gemv(32, 128)),
          Entry("gemv_int", "gemv32x128-l4-r4-fp3", "int8", {"lanes": 4, "reduce_unroll": 4, "fp_pipeline": 3}, gemv(32, 128)),
          Entry("gemv_int", "gemv128x784-l1", "int8", {}, gemv(128, 784)),
          Entry("gemv_int", "gemv128x784-l4-r4", "int8", {"lanes": 4, "reduce_unroll": 4}, gemv(128, 784)),
          Entry("gemv_int", "gemv32x128-int16-l2-r2", "int16", {"lanes": 2, "reduce_unroll": 2}, gemv(32, 128)),
          Entry("gemv_int", "gemv32x128-int16-l2-fp3", "int16", {"lanes": 2, "fp_pipeline": 3}, gemv(32, 128)),
          Entry("gemv_int", "gemv32x128-int4-l4-r4", "int4", {"lanes": 4, "reduce_unroll": 4}, gemv(32, 128)),
          Entry("gemv_int", "gemv32x128-comb-l2", "int8", {"lanes": 2, "mem_read": "comb"}, gemv(32, 128)),
          # constant weights outside the constant family: held out, its shift-and-add adders'
          # cost a bit had been learned from accumulators' adders only
          Entry("gemv_int", "gemv8x16-const", "int8", CONST, gemv(8, 16))]
    # float GEMVs
    for dt in ("fp16", "bf16", "fp32"):
        for lanes in (1, 2):
            e.append(Entry("gemv_float", f"gemv16x64-{dt}-l{lanes}", dt, {"lanes": lanes}, gemv(16, 64)))
    e.append(Entry("gemv_float", "gemv16x64-fp32-fp2", "fp32", {"fp_pipeline": 2}, gemv(16, 64)))
    # other zoo models
    e += [Entry("zoo", "matmul8", "int8", {}, zoo("matmul", M=8, K=8, N=8)),
          Entry("zoo", "matmul8-l4", "int8", {"lanes": 4}, zoo("matmul", M=8, K=8, N=8)),
          Entry("zoo", "conv2d", "int8", {}, zoo("conv2d")),
          Entry("zoo", "conv2d-l2-r3", "int8", {"lanes": 2, "reduce_unroll": 3}, zoo("conv2d", C_IN=2, C_OUT=4)),
          Entry("zoo", "elementwise64", "int8", {}, zoo("elementwise", N=64)),
          Entry("zoo", "elementwise64-l8", "int8", {"lanes": 8}, zoo("elementwise", N=64)),
          Entry("zoo", "mlp64", "int8", {}, zoo("mlp", IN=64, HIDDEN=32, OUT=10)),
          Entry("zoo", "mlp64-l4", "int8", {"lanes": 4, "reduce_unroll": 2}, zoo("mlp", IN=64, HIDDEN=32, OUT=10)),
          Entry("zoo", "matmul8-comb-l2", "int8", {"lanes": 2, "mem_read": "comb"}, zoo("matmul", M=8, K=8, N=8)),
          Entry("zoo", "conv2d-int16-fp3", "int16", {"lanes": 2, "fp_pipeline": 3}, zoo("conv2d", C_IN=2, C_OUT=4)),
          Entry("zoo", "matmul8-fp16", "fp16", {}, zoo("matmul", M=8, K=8, N=8)),
          # pipelined float units outside gemv_float: held out, that family's fp_pipeline 2 GEMV
          # had its float units costed from unpipelined ones only (fp_path_bits)
          Entry("zoo", "matmul8-fp16-fp2", "fp16", {"fp_pipeline": 2}, zoo("matmul", M=8, K=8, N=8)),
          Entry("zoo", "layernorm-bf16", "bf16", {}, zoo("layernorm")),
          # an fp32 unit outside gemv_float: held out, that family's fp32 GEMVs had their units
          # costed from 16-bit formats alone (38% to 46% too high once LUTs were mapped as LUT4s
          # only: the alignment and normalisation shifters do not grow linearly with the width)
          Entry("zoo", "matmul8-fp32", "fp32", {}, zoo("matmul", M=8, K=8, N=8)),
          # weights deeper than a block RAM at 1 and 2 lanes: a read multiplexer over the stacked
          # blocks (bram_mux_bits), which only the 128x784 GEMV had (held out, it had no cost)
          Entry("zoo", "mlp784-l1", "int8", {}, zoo("mlp", IN=784, HIDDEN=32, OUT=10)),
          Entry("zoo", "mlp784-l2", "int8", {"lanes": 2}, zoo("mlp", IN=784, HIDDEN=32, OUT=10)),
          Entry("zoo", "mlp1568-l1", "int8", {}, zoo("mlp", IN=1568, HIDDEN=32, OUT=10)),   # 25 blocks deep
          Entry("zoo", "mlp16-const", "int8", CONST, zoo("mlp", IN=16, HIDDEN=8, OUT=4))]
    # trained MLP and CNN, weights in memories
    for dt, knobs in [("int8", {}), ("int8", {"lanes": 4}), ("int4", {"lanes": 4}), ("w4a8", {"lanes": 2}),
                      ("int8", {"lanes": 4, "mul": "lut"}), ("int6", {"lanes": 8, "reduce_unroll": 4})]:
        e.append(Entry("trained", "-".join(["digits", dt, *(f"{k}{v}" for k, v in knobs.items())]), dt, knobs, DIGITS))
    # scale_digits 1: each output channel's multiplier a power of two, a shift by an amount
    # loaded from memory (a barrel shifter, `shift_bits`), here and in the jet family
    e.append(Entry("trained", "digits-int8-sd1-lanes4", "int8", {"scale_digits": 1, "lanes": 4}, DIGITS))
    e += [Entry("trained", "digits-int8-dataflow64", "int8", {"schedule": "dataflow", "fold": "auto",
                                                                "target_interval": 64}, DIGITS),
          Entry("trained", "digits-int8-comb-l2", "int8", {"lanes": 2, "mem_read": "comb"}, DIGITS),
          Entry("trained", "cnn-int8", "int8", {}, CNN),
          Entry("trained", "cnn-int8-l4", "int8", {"lanes": 4}, CNN)]
    # constant weights, fully unrolled
    e += [Entry("constant", "iris6-int8", "int8", CONST, {**_iris((6,)), "prune": 0.4}),
          Entry("constant", "iris16_8-int8-sd2", "int8", {**CONST, "scale_digits": 2}, _iris((16, 8))),
          Entry("constant", "iris16_8-int6-pipe", "int6", {**CONST, **PIPE, "scale_digits": 1}, _iris((16, 8))),
          Entry("constant", "jet-int4-p90-pipe", "int4", {**CONST, **PIPE, "scale_digits": 1}, {**JET, "prune": 0.9}),
          Entry("constant", "jet-int6-p90-pipe", "int6", {**CONST, **PIPE, "scale_digits": 1}, {**JET, "prune": 0.9})]
    # the jet tagger's MLP with its weights in memories, as configs/jet_space.yaml sweeps it
    # (per-layer weight widths, scale digits, folding): points that study synthesised
    for name, wb, sd, prune, lanes, ru in [("jet-sd1-l1", (6, 6, 6, 4), 1, 0, (1, 1, 1), 1),
                                           ("jet-sd1-l4", (6, 4, 6, 8), 1, 0, (4, 4, 1), 4),
                                           ("jet-sd2-l16", (4, 6, 6, 8), 2, 0, (16, 4, 4), 4),
                                           ("jet-sd2-l16x16-p50", (8, 8, 8, 6), 2, 0.5, (16, 16, 4), 4)]:
        knobs = {**{f"weight_bits@{i}": b for i, b in enumerate(wb)}, "scale_digits": sd, "prune": prune,
                 **{f"lanes@{i}": n for i, n in enumerate(lanes)}, "reduce_unroll": ru}
        e.append(Entry("jet", name, "int8", knobs, JET))
    # random-weight MLPs, dataflow and sequential (AD08 and keyword-spotting shapes, smaller)
    e += [Entry("random_mlp", "mlp16-18-18-4-dataflow32", build=_random_mlp([16, 18, 18, 4], 32)),
          Entry("random_mlp", "mlp16-18-18-4-seq32", build=_random_mlp([16, 18, 18, 4], 32, schedule="sequential")),
          Entry("random_mlp", "mlp32-36-8-36-32-dataflow64", build=_random_mlp([32, 36, 8, 36, 32], 64)),
          Entry("random_mlp", "mlp64-32-32-6-w3a3-lut", build=_random_mlp([64, 32, 32, 6], 64, wbits=3, abits=3, shift=4,
                                                                           knobs={"mul": "lut"})),
          Entry("random_mlp", "mlp128-64-10-seq256", build=_random_mlp([128, 64, 10], 256, schedule="sequential")),
          Entry("random_mlp", "mlp64-72-8-dataflow-fp3", build=_random_mlp([64, 72, 8], 128, knobs={"fp_pipeline": 3})),
          # folded to 1 lane: a 784 x 32 weight memory of 13 stacked block RAMs (bram_mux_bits)
          Entry("random_mlp", "mlp784-32-10-seq", build=_random_mlp([784, 32, 10], 32768, schedule="sequential")),
          Entry("random_mlp", "mlp784-32-10-dataflow", build=_random_mlp([784, 32, 10], 32768)),
          Entry("random_mlp", "mlp1024-64-10-seq", build=_random_mlp([1024, 64, 10], 65536, schedule="sequential")),
          Entry("random_mlp", "mlp1568-32-10-seq", build=_random_mlp([1568, 32, 10], 65536, schedule="sequential"))]
    # the bench designs
    e += [Entry("bench_jet", "jet-int6-p75", "int6", {**CONST, **PIPE, "scale_digits": 1}, {**JET, "prune": 0.75}, bench=True),
          Entry("bench_ad08", "ad08-dataflow100", build=_random_mlp(AD08, 100), bench=True),
          Entry("bench_kws", "kws3-dataflow400", build=_random_mlp(KWS, 400, wbits=3, abits=3, shift=4,
                                                                  knobs={"mul": "lut"}), bench=True)]
    return e


# ---------------------------------------------------------------------------------------------

def design_of(entry: Entry, target: str):
    """The entry's compiled Design (a spec point through dse.evaluate.compile_point, or its builder)."""
    if entry.build is not None:
        return entry.build()
    from dse.evaluate import EvalContext, compile_point
    from dse.frozen import FrozenMap
    from dse.spec import DesignPoint, parse_spec
    model = {k: v for k, v in entry.model.items()}
    spec = parse_spec({"study": "calibrate", "target": target, "models": [model], "dtypes": [entry.dtype],
                       "objectives": ["cycles", "luts"], "search": {"sampler": "grid"}})
    return compile_point(EvalContext.from_spec(spec), DesignPoint(model["name"], entry.dtype, FrozenMap(entry.knobs)))


def samples_path(target: str) -> Path:
    return DATA / f"estimator_{target}.jsonl"


def read_samples(target: str) -> list[dict]:
    path = samples_path(target)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def hardware_hash(design) -> str:
    """What the design is, for `collect`: its RTLIL without source locations (a change of the
    compiler's code elsewhere moves them), so a design whose hardware the compiler now builds
    otherwise is synthesised again even where its features are the same."""
    import hashlib
    from compiler.synth.area import design_rtlil
    text = "\n".join(line for line in design_rtlil(design).splitlines() if not line.lstrip().startswith("attribute \\src"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def collect(args) -> None:
    from compiler.synth.area import TARGETS, synthesize
    from dse.estimate import design_features
    have = {s["name"]: s for s in read_samples(args.target)}
    entries = [x for x in corpus() if (not args.only or x.family in args.only or x.name in args.only)
               and not (args.skip_bench and x.bench)]
    DATA.mkdir(parents=True, exist_ok=True)
    for entry in entries:
        t0 = time.perf_counter()
        try:
            design = design_of(entry, args.target)
        except Exception as exc:        # noqa: BLE001 - say which design and go on
            print(f"{entry.name}: does not compile: {type(exc).__name__}: {exc}", flush=True)
            continue
        compile_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        features = design_features(design, target=args.target)
        features_s = time.perf_counter() - t0
        hardware = hardware_hash(design)
        old = have.get(entry.name)
        if old is not None and old["features"] == features and old.get("flow") == TARGETS[args.target] \
                and old.get("hardware") == hardware:
            print(f"{entry.name}: unchanged", flush=True)
            continue
        with tempfile.TemporaryDirectory(prefix="calibrate-") as tmp:
            t0 = time.perf_counter()
            try:
                area = synthesize(design, args.target, Path(tmp), timeout=args.timeout)
            except Exception as exc:    # noqa: BLE001
                print(f"{entry.name}: synthesis failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                continue
            wall = time.perf_counter() - t0
        row = {"family": entry.family, "name": entry.name, "target": args.target, "features": features,
               "luts": area.luts, "ffs": area.ffs, "bram": area.bram, "lutram": area.lutram, "dsp": area.dsp,
               "yosys_s": round(area.seconds, 1), "cached": area.cached, "wall_s": round(wall, 1),
               "compile_s": round(compile_s, 2), "features_s": round(features_s, 4),
               "yosys_version": area.yosys_version, "flow": TARGETS[args.target], "fallback": bool(area.fallback),
               "hardware": hardware}
        have[entry.name] = row
        samples_path(args.target).write_text("".join(json.dumps(r) + "\n" for r in have.values()))
        print(json.dumps({k: v for k, v in row.items() if k != "features"}), flush=True)


def fit(args) -> None:
    from dse.estimate import AREA_METRICS, fit_prior, held_out, write_prior
    samples = read_samples(args.target)
    if not samples:
        sys.exit(f"no samples in {samples_path(args.target)}: run `collect` first")
    table = held_out(samples, metrics=AREA_METRICS)
    prior = fit_prior(samples, metrics=AREA_METRICS, target=args.target, held=table)
    path = write_prior(prior)
    print(f"wrote {path} ({len(samples)} designs, {len({s['family'] for s in samples})} families)\n")
    print(table.markdown())


def list_corpus(args) -> None:
    for x in corpus():
        print(f"{x.family:<12} {x.name:<36} {x.dtype:<6} {json.dumps(x.knobs)}{'  (bench)' if x.bench else ''}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--target", default="ecp5", choices=["ecp5", "ice40", "xilinx"])
    c.add_argument("--only", nargs="*", help="families or design names")
    c.add_argument("--skip-bench", action="store_true")
    c.add_argument("--timeout", type=float, default=3 * 3600)
    c.set_defaults(run=collect)
    f = sub.add_parser("fit")
    f.add_argument("--target", default="ecp5", choices=["ecp5", "ice40", "xilinx"])
    f.set_defaults(run=fit)
    sub.add_parser("list").set_defaults(run=list_corpus)
    args = ap.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
