"""Sequential vs dataflow (issue 43): interval, latency, LUTs, block RAM and Fmax.

Models: an autoencoder of MLPerf Tiny's AD08 shape (64-72-72-8-72-72-64) and an MLP of the
keyword-spotting shape (490-256-256-256-12), int8 with random weights (relu, shift 7, clamp
between layers); `kws3`, the keyword-spotting shape at FINN's 3-bit weights and activations
(declared to the compiler as 3-bit ranges, products in LUTs: mul lut); the digits MLP
(models/digits_mlp.npz) and CNN (models/digits_cnn.onnx), int8 quantised; `kws_trained`, the
keyword-spotting shape trained on a synthetic stand-in (models/kws_mlp.py) at w4a6, its narrowest
format within a point of float; and `kws_qat`, that network fine-tuned at w3a3 (docs/qat.md),
products in LUTs, target interval 300. Every test sample of a trained model is
streamed through the hardware and checked bit-exact (dse.models.accuracy.run_samples). For each model: the dataflow design with fold=auto at the
target interval (each layer's lanes x reduce_unroll the least that makes its stage fit, FINN's
SetFolding), and the sequential design with the *same* per-layer folding (so the same
multipliers: equal LUT budgets, within the control and buffer logic), each simulated in CXXRTL
(samples back to back for dataflow: measured interval and latency must equal the cycle model,
outputs equal to the sequential design's / the reference), synthesised (synth_ecp5) and, with
--pnr, placed and routed on the LFE5U-85F (router2; static placer and seed 1 unless --placer/--seed);
with --check-netlist, the synthesised netlist as nextpnr gets it runs the design's exported
testbench in Icarus Verilog (compiler.pnr.gate_sim), its PASS or FAIL line in the row.

Usage: python bench/bench_dataflow.py [--models ad08 kws kws3 kws_trained kws_qat digits_mlp digits_cnn]
                                      [--target ad08=100 ...] [--schedules dataflow sequential] [--fp-pipeline 3]
                                      [--pnr] [--check-netlist] [--no-synth]
                                      [--freq 100] [--placer static] [--seed 1] [--json out.json]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import yaml  # noqa: E402
from tinygrad import Tensor, dtypes  # noqa: E402

from compiler import HardwareConfig, compile_model, simulate_many  # noqa: E402
from compiler.synth.area import module_breakdown, synthesize  # noqa: E402
from compiler.tools import ToolError  # noqa: E402
from dse.estimate import design_features, fmax_estimate  # noqa: E402
from dse.spec import hardware_knobs  # noqa: E402
from pnr_seeds import add_pnr_arguments, median_seed, place_and_route_seeds, seed_fields, seeds_text  # noqa: E402

SHAPES = {"ad08": [64, 72, 72, 8, 72, 72, 64], "kws": [490, 256, 256, 256, 12], "kws3": [490, 256, 256, 256, 12]}
TARGETS = {"ad08": 100, "kws": 1024, "kws3": 400, "digits_mlp": 64, "digits_cnn": 512, "kws_trained": 550,
           "kws_qat": 300}
# narrow formats: (weight bits, activation bits, shift between layers, extra knobs); else int8
FORMATS = {"kws3": (3, 3, 4, {"mul": "lut"})}
SHIFT = 7


def unfolded(knobs: dict) -> dict:
    """`knobs` for the sequential design given the dataflow fold's layers: the fold's own knobs
    (fold_factors, target_interval) dropped as a manual point drops them."""
    return hardware_knobs({**knobs, "fold": "manual"})


def mlp(sizes, seed=0, wbits=8, abits=8, shift=SHIFT):
    """x, the output Tensor, a numpy reference function of x, and the declared input ranges:
    `wbits`-bit signed weights, `abits`-bit activations (unsigned after the first layer's
    input: relu, shift, clamp to 2**abits - 1 between layers; int8 tensors carry them)."""
    rng = np.random.default_rng(seed)
    wlo, whi = -(1 << (wbits - 1)), (1 << (wbits - 1)) - 1
    amax = 127 if abits == 8 else (1 << abits) - 1
    xlo = -128 if abits == 8 else 0
    ws = [rng.integers(wlo, whi + 1, (b, a)).astype(np.int8) for a, b in zip(sizes, sizes[1:])]
    x = Tensor(rng.integers(xlo, amax + 1, sizes[0]).astype(np.int8))
    h, Ws = x, []
    for i, w in enumerate(ws):
        W = Tensor(w)
        Ws.append(W)
        acc = W.cast(dtypes.int32) @ h.cast(dtypes.int32)
        h = acc if i == len(ws) - 1 else (acc.relu() >> shift).minimum(amax).cast(dtypes.int8)

    def ref(v):
        v = v.astype(np.int32)
        for i, w in enumerate(ws):
            v = w.astype(np.int32) @ v
            if i < len(ws) - 1:
                v = np.minimum(np.maximum(v, 0) >> shift, amax).astype(np.int32)
        return v
    ranges = {} if (wbits, abits) == (8, 8) else {x: (xlo, amax), **{W: (wlo, whi) for W in Ws}}
    return x, h, ref, ranges


def area_estimate(features) -> dict:
    """The shipped estimator's area (dse/estimate.py, no Yosys) from a design's features beside
    what synthesis measures, so each bench run shows the estimator's error on designs it was not
    calibrated on."""
    from dse.estimate import load_prior
    prior = load_prior("ecp5")
    if prior is None:
        return {}
    return {m: round(e.value) for m, e in prior.predict(features).items()}


def synth_pnr(design, name: str, args, root: Path) -> dict:
    features = design_features(design, target="ecp5")          # what both estimates read
    est = fmax_estimate(design, features, "ecp5")               # placement-bounded
    row: dict = {"fmax_estimate_mhz": round(est.fmax_mhz, 1), "estimate_path": est.where,
                 "area_estimate": area_estimate(features)}
    if args.no_synth:                      # simulation only (accuracy, bit-exactness), e.g. beside a run that builds it
        return row
    t = time.perf_counter()
    area = synthesize(design, "ecp5", root / name / "synth", timeout=args.timeout, netlist=True)
    row.update(luts=area.luts, ffs=area.ffs, bram=area.bram, dsp=area.dsp, synth_s=round(time.perf_counter() - t, 1),
               cells={k: v for k, v in area.cells.items() if not k.startswith("$")})
    if args.breakdown:                     # where the area goes, module by module (issue 53)
        parts = module_breakdown(design, "ecp5", root / name / "breakdown", timeout=args.timeout)
        row["breakdown"] = {m: {k: v for k, v in c.items() if v} for m, c in parts.items() if c["luts"] or c["ffs"]}
        print(json.dumps({"breakdown": row["breakdown"]}), flush=True)
    if args.check_netlist:                 # the netlist nextpnr gets, simulated cell by cell (compiler.pnr.gate_sim)
        from compiler.pnr.gate_sim import check_netlist
        check = check_netlist(design, area.netlist_path, root / name / "gate", timeout=args.timeout)
        row.update(netlist_check=check.message, netlist_check_s=round(check.seconds, 1))
        print(json.dumps({"netlist_check": check.message, "seconds": round(check.seconds, 1)}), flush=True)
    if args.pnr:
        t = time.perf_counter()
        try:
            reports = place_and_route_seeds(area.netlist_path, root / name / "pnr", args)
        except ToolError as exc:
            row.update(fmax_mhz=None, reason=f"place-and-route did not finish: {exc.reason}")
            return row
        rep = median_seed(reports)
        row.update(fmax_mhz=rep.fmax_mhz, fits=rep.fits, reason=rep.reason, device=rep.device,
                   critical_path=rep.critical_path, **seed_fields(reports),
                   pnr_s=round(time.perf_counter() - t, 1))
    return row


def bench_random(model: str, args, root: Path) -> list[dict]:
    sizes, target = SHAPES[model], args.targets[model]
    wbits, abits, shift, knobs = FORMATS.get(model, (8, 8, SHIFT, {}))
    knobs = {**knobs, **args.extra}
    rng = np.random.default_rng(1)
    lo, hi = (-128, 127) if abits == 8 else (0, (1 << abits) - 1)
    xs = [rng.integers(lo, hi + 1, sizes[0]).astype(np.int8) for _ in range(args.samples)]
    rows = []
    x, y, ref, ranges = mlp(sizes, wbits=wbits, abits=abits, shift=shift)
    flow = compile_model(y, config=HardwareConfig(schedule="dataflow", fold="auto", target_interval=target,
                                                  fp_pipeline=args.fp_pipeline, **knobs), stream=x, input_ranges=ranges)
    folding = {f"{k}@{i}": v for i, st in flow.config.layers for k, v in st}
    x2, y2, _, ranges2 = mlp(sizes, wbits=wbits, abits=abits, shift=shift)
    seq = compile_model(y2, config=HardwareConfig.from_dict({**folding, **unfolded(knobs), "fp_pipeline": args.fp_pipeline}),
                        input_ranges=ranges2)
    for sched, design, xt in (("dataflow", flow, x), ("sequential", seq, x2)):
        if sched not in args.schedules:
            continue
        cm = design.cycle_model()
        runs = simulate_many(design, [{xt: s} for s in xs], backend="cxxrtl")
        for s, r in zip(xs, runs):
            np.testing.assert_array_equal(np.asarray(r.outputs[0]).reshape(-1), ref(s))
            assert r.cycles == cm.total, (r.cycles, cm.total)
        intervals = [r.interval for r in runs[1:]] if sched == "dataflow" else [r.cycles for r in runs]
        assert all(i == cm.interval for i in intervals), (intervals, cm.interval)
        row = dict(model=model, schedule=sched, target=target, interval=cm.interval, latency=cm.total,
                   folding=" ".join(f"{dict(st)['lanes']}x{dict(st)['reduce_unroll']}" for _, st in design.config.layers),
                   stages=[c for _, c in design.flow.stage_cycles] if design.flow else [c for _, c in cm.kernels],
                   exact=True)
        row.update(synth_pnr(design, f"{model}-{sched}", args, root))
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def trained_model(model: str, root: Path, samples: int | None = None, formats=None):
    """(network, dataset, dtype, extra knobs, the integer model or None) of a trained model: the digits MLP and CNN of
    configs/digits*.yaml in int8; kws_trained, the keyword-spotting shape trained on a synthetic
    stand-in (models/kws_mlp.py) at w4a6, its narrowest format within a point of float (4-bit
    weights, 6-bit activations: 88.8% against 89.3%), products in DSP blocks up to the 85F's 156
    and the rest in LUTs (mul: auto; with every product in LUTs, mul: lut, target 300 took
    144,436 LUTs, beyond the 85F); kws_qat, the same network fine-tuned at w3a3 (`qat: true`'s
    defaults, seed 0: dse.models.qat, cached) and quantised at `formats` (--set scale_digits=1 ...),
    products in LUTs as kws3's, on the first 1,000 test samples unless --trained-samples (bench_qat's
    test split)."""
    from dse.models.data import DataSpec, load_dataset, read_weights
    if model in ("kws_trained", "kws_qat"):
        sys.path.insert(0, str(ROOT / "models"))
        import kws_mlp
        from dse.models.quantize import DenseNet
        root.mkdir(parents=True, exist_ok=True)
        np.savez(root / "kws_data.npz", **kws_mlp.data())
        net = DenseNet.from_arrays(read_weights(kws_mlp.WEIGHTS))
        if model == "kws_trained":
            return net, load_dataset(DataSpec(file=root / "kws_data.npz", samples=samples)), "w4a6", {}, None
        from dse.models.model import TrainedModel
        from dse.models.qat import QatOptions
        trained = TrainedModel("weights", kws_mlp.WEIGHTS, DataSpec(file=root / "kws_data.npz",
                               samples=samples or 1000), formats=formats, qat=QatOptions())
        t = time.perf_counter()
        q = trained.quantized("w3a3")        # fine-tuned (progress on stderr), then quantised
        print(json.dumps({"qat_s": round(time.perf_counter() - t, 1), "trained_s": trained.fine_tuned("w3a3").seconds}),
              flush=True)
        return net, trained.dataset(), "w3a3", {"mul": "lut"}, q
    from dse.spec import load_spec
    spec_path = ROOT / "configs" / ("digits.yaml" if model == "digits_mlp" else "digits_cnn.yaml")
    trained = load_spec(spec_path).model(model).trained
    data = trained.dataset() if samples is None else \
        load_dataset(dataclasses.replace(trained.data, samples=samples))
    return trained.net(), data, "int8", {}, None


def bench_trained(model: str, args, root: Path) -> list[dict]:
    from dse.models.accuracy import run_samples
    from dse.models.widths import Formats, is_format_knob
    formats = Formats.of({k: v for k, v in args.extra.items() if is_format_knob(k)}) or None
    net, data, dtype, knobs, quantized = trained_model(model, root, args.trained_samples, formats)
    knobs = {**knobs, **{k: v for k, v in args.extra.items() if not is_format_knob(k)}}
    target = args.targets[model]
    rows = []
    flow_run = run_samples(net=net, dtype=dtype, data=data, formats=formats, quantized=quantized, config=HardwareConfig(
        schedule="dataflow", fold="auto", target_interval=target, fp_pipeline=args.fp_pipeline, **knobs))
    folding = {f"{k}@{i}": v for i, st in flow_run.design.config.layers for k, v in st}
    seq_run = None
    if "sequential" in args.schedules:
        seq_run = run_samples(net=net, dtype=dtype, data=data, formats=formats, quantized=quantized,
                              config=HardwareConfig.from_dict({**folding, **unfolded(knobs), "fp_pipeline": args.fp_pipeline}))
        assert np.array_equal(flow_run.logits, seq_run.logits)      # sample for sample
    for sched, r in (("dataflow", flow_run), ("sequential", seq_run)):
        if sched not in args.schedules:
            continue
        design, cm = r.design, r.design.cycle_model()
        row = dict(model=model, schedule=sched, target=target, interval=cm.interval, latency=cm.total,
                   folding=" ".join(f"{dict(st)['lanes']}x{dict(st)['reduce_unroll']}" for _, st in design.config.layers),
                   stages=[c for _, c in design.flow.stage_cycles] if design.flow else [c for _, c in cm.kernels],
                   exact=True, samples=r.samples, accuracy=r.accuracy, note=design.schedule_note or None)
        row.update(synth_pnr(design, f"{model}-{sched}", args, root))
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def _n(v) -> str:
    """A count with thousands separators, "-" where it was not measured (--no-synth)."""
    return "-" if v is None else f"{v:,}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["ad08", "digits_mlp", "digits_cnn", "kws"])
    ap.add_argument("--target", nargs="*", default=[], help="MODEL=CYCLES target intervals")
    ap.add_argument("--fp-pipeline", type=int, default=3)
    ap.add_argument("--samples", type=int, default=4, help="samples streamed through a model with random weights")
    ap.add_argument("--trained-samples", type=int, help="test samples of a trained model (default: all)")
    ap.add_argument("--schedules", nargs="+", default=["dataflow", "sequential"], choices=["dataflow", "sequential"],
                    help="the rows to measure (the digits models simulate both, to compare them sample for sample)")
    ap.add_argument("--pnr", action="store_true")
    ap.add_argument("--check-netlist", action="store_true",
                    help="simulate the synthesised netlist with the design's exported testbench (Icarus Verilog)")
    ap.add_argument("--no-synth", action="store_true", help="simulate only: no synthesis, no place-and-route")
    add_pnr_arguments(ap)
    ap.add_argument("--device", default="LFE5U-85F", help="the part placed and routed on (LFE5U-85F-8: speed grade 8)")
    ap.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE",
                    help="a knob of every design, e.g. target_mhz=150, mul=lut, weight_bits=4 (YAML values)")
    ap.add_argument("--timeout", type=float, default=7200)
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--breakdown", action="store_true",
                    help="also synthesise with the hierarchy kept and report each module's LUTs and FFs")
    args = ap.parse_args()
    args.extra = {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in args.set)}
    args.targets = dict(TARGETS)
    for t in args.target:
        k, _, v = t.partition("=")
        args.targets[k] = int(v)
    root = args.workdir or Path(tempfile.mkdtemp(prefix="bench-dataflow-"))
    rows = []
    for model in args.models:
        rows += bench_random(model, args, root) if model in SHAPES else bench_trained(model, args, root)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1) + "\n")
    print("\n| model | schedule | lanes x reduce_unroll per layer | stages (cycles) | interval | latency | LUTs | FFs | "
          "block RAM | DSP | Fmax (MHz) | estimate (MHz) | samples/s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        f = r.get("fmax_mhz")
        sps = f"{f * 1e6 / r['interval']:,.0f}" if f else "-"
        seeds = f" ({text})" if (text := seeds_text(r)) else ""
        print(f"| {r['model']} | {r['schedule']} | {r['folding']} | {' / '.join(map(str, r['stages']))} | "
              f"{r['interval']:,} | {r['latency']:,} | {_n(r.get('luts'))} | {_n(r.get('ffs'))} | {r.get('bram', '-')} | "
              f"{r.get('dsp', '-')} | "
              f"{f'{f:.1f}' if f else '-'}{seeds} | {r['fmax_estimate_mhz']} | {sps} |")
    for r in rows:
        if r.get("critical_path"):
            print(f"{r['model']} {r['schedule']}: critical path {r['critical_path']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
