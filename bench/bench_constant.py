"""Trained weights built into the logic (weights: constant): latency, interval, area and accuracy
of whole MLPs, fully parallel, placed and routed on an LFE5U-85F (issue 44).

Each row: the trained network (pruned and retrained first with --prune, dse/models/prune.py),
quantised (int8 or int16, dse/models/quantize.py), compiled with the given knobs, every test
sample run through CXXRTL (dse.models.accuracy.run_samples: bit-exact against the numpy golden
model on every sample, cycles equal to the cycle model), synthesised (synth_ecp5) and, with
--pnr, placed and routed by nextpnr-ecp5 on the LFE5U-85F (CABGA381, speed 6; router2, static
placer, seed 1, --freq 100; --device, --placer, --seed, --freq to change them). latency_ns = cycles x 1000 / fmax_mhz, start to done.

    python bench/bench_constant.py --model jet --prune 0.75 --set weights=constant --set lanes=64 \\
        --set reduce_unroll=64 --set fp_pipeline=3 --set adder_levels=3 --pnr
    python bench/bench_constant.py --model digits --set weights=memory --set lanes=4

--set takes hardware knobs and the quantiser's format knobs (weight_bits, act_bits, scale_digits).
--qat fine-tunes the (pruned) network at the row's format first (dse/models/qat.py, the spec's
`qat:` with its defaults but --qat-epochs and --qat-seed; served from $TINYHW_CACHE/qat when
trained before), and the row's accuracy is the fine-tuned network's, through the hardware:

    python bench/bench_constant.py --model jet --dtype int4 --prune 0.75 --qat --set weights=constant ...

Models: jet (models/jet_mlp.npz on models/jet_data.npz, 16-64-32-32-5), digits
(models/digits_mlp.npz on scikit-learn's digits, 64-32-10). Prints one Markdown row per run
(header with --header) and, with --json FILE, appends the row as JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from compiler import HardwareConfig  # noqa: E402
from compiler.synth.area import synthesize  # noqa: E402
from dse.models.accuracy import run_samples  # noqa: E402
from dse.estimate import design_features, fmax_estimate  # noqa: E402
from dse.models.data import DataSpec  # noqa: E402
from dse.models.model import TrainedModel  # noqa: E402
from dse.models.qat import QatOptions  # noqa: E402
from dse.models.widths import Formats, is_format_knob, quantisable  # noqa: E402
from pnr_seeds import add_pnr_arguments, median_seed, place_and_route_seeds, seed_fields, seeds_text  # noqa: E402

MODELS = {
    "jet": (ROOT / "models" / "jet_mlp.npz", DataSpec(file=ROOT / "models" / "jet_data.npz")),
    "digits": (ROOT / "models" / "digits_mlp.npz", DataSpec(dataset="sklearn:digits")),
}
HEADER = ("| model | dtype | pruned | knobs | accuracy | cycles | interval | Fmax MHz | latency ns | LUTs | FFs | BRAM | DSP "
          "| synth s | pnr s |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="jet")
    ap.add_argument("--dtype", default="int8")
    ap.add_argument("--prune", type=float, default=0.0)
    ap.add_argument("--qat", action="store_true", help="fine-tune at the row's format first (docs/qat.md)")
    ap.add_argument("--qat-epochs", type=int, default=QatOptions.epochs)
    ap.add_argument("--qat-seed", type=int, default=QatOptions.seed)
    ap.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE")
    ap.add_argument("--pnr", action="store_true", help="place and route on the LFE5U-85F")
    ap.add_argument("--device", default="LFE5U-85F", help="the part placed and routed on (LFE5U-85F-8: speed grade 8)")
    add_pnr_arguments(ap)
    ap.add_argument("--timeout", type=float, default=4 * 3600)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/tinyhw-bench-constant"))
    ap.add_argument("--header", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.qat and not quantisable(args.dtype):
        ap.error(f"--qat: fine-tuning needs an integer dtype (int4, w3a4, ...), not {args.dtype}")
    if args.qat_epochs < 1:
        ap.error(f"--qat-epochs: expected an integer from 1, got {args.qat_epochs}")
    knobs = {k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in args.set)}
    formats = Formats.of(knobs)          # the quantiser's (weight_bits, act_bits, scale_digits)
    config = HardwareConfig.from_dict({k: v for k, v in knobs.items() if not is_format_knob(k)})
    weights, spec = MODELS[args.model]
    # the spec's trained model: pruned and retrained, fine-tuned at the format with --qat (cached)
    options = QatOptions(epochs=args.qat_epochs, seed=args.qat_seed) if args.qat else None
    trained = TrainedModel("weights", weights, spec, prune=args.prune, formats=formats or None, qat=options)
    net, data = trained.net(), trained.dataset()
    quantized = trained.quantized(args.dtype) if args.qat else None
    row = {"model": args.model, "dtype": args.dtype, "prune": args.prune, "knobs": knobs}
    if args.qat:
        row.update(qat=options.as_dict())
    t0 = time.perf_counter()
    r = run_samples(net=net, dtype=args.dtype, data=data, config=config, formats=formats or None, quantized=quantized)
    interval = r.design.cycle_model().interval
    row.update(accuracy=r.accuracy, accuracy_float=r.accuracy_float, samples=r.samples, cycles=r.cycles,
               interval=interval, sim_s=time.perf_counter() - t0)
    name = f"{args.model}-{args.dtype}-p{args.prune}-" + "-".join(f"{k}{v}" for k, v in sorted(knobs.items())) \
        + (f"-qat{args.qat_epochs}s{args.qat_seed}" if args.qat else "")
    work = args.workdir / name
    t0 = time.perf_counter()
    area = synthesize(r.design, "ecp5", work / "synth", timeout=args.timeout, netlist=args.pnr)
    row.update(luts=area.luts, ffs=area.ffs, bram=area.bram, lutram=area.lutram, dsp=area.dsp,
               synth_s=time.perf_counter() - t0)
    est = fmax_estimate(r.design, design_features(r.design, target="ecp5"), "ecp5")   # placement-bounded
    row.update(fmax_estimate_mhz=round(est.fmax_mhz, 1), estimate_path=est.where)
    if args.pnr:
        t0 = time.perf_counter()
        reports = place_and_route_seeds(area.netlist_path, work / "pnr", args)
        rep = median_seed(reports)
        row.update(fits=rep.fits, fmax_mhz=rep.fmax_mhz, device=rep.device, pnr_s=time.perf_counter() - t0,
                   reason=None if rep.fits else rep.reason, critical_path=rep.critical_path,
                   utilisation=dict(rep.utilisation), **seed_fields(reports))
        if rep.fits and rep.fmax_mhz:
            row["latency_ns"] = r.cycles * 1000.0 / rep.fmax_mhz
    if args.header:
        print(HEADER)
    fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
    knob_text = ", ".join([f"{k}={v}" for k, v in knobs.items()] + ([args.device] if args.device != "LFE5U-85F" else [])
                          + ([f"qat {args.qat_epochs} epochs, seed {args.qat_seed}"] if args.qat else []))
    print(f"| {args.model} | {args.dtype} | {args.prune:.0%} | {knob_text} | {100 * r.accuracy:.1f}% | {r.cycles} | {interval} "
          f"| {fmt(row.get('fmax_mhz'), '.1f')} | {fmt(row.get('latency_ns'), '.0f')} | {area.luts:,} | {area.ffs:,} "
          f"| {area.bram} | {area.dsp} | {row['synth_s']:.0f} | {fmt(row.get('pnr_s'), '.0f')} |", flush=True)
    if row.get("fits") is False:
        print(f"  does not fit: {row['reason']}")
    if text := seeds_text(row):
        print(f"  {text}")
    print(f"  estimate {row['fmax_estimate_mhz']} MHz ({row['estimate_path']})")
    if row.get("utilisation"):        # nextpnr's own count: TRELLIS_COMB is LUT4s and carry halves
        print("  nextpnr: " + ", ".join(f"{k} {u:,}/{n:,}" for k, (u, n) in row["utilisation"].items()
                                        if k in ("TRELLIS_COMB", "TRELLIS_FF", "MULT18X18D", "DP16KD")))
    if row.get("critical_path"):
        print(f"  critical path {row['critical_path']}")
    if args.json:
        with args.json.open("a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
