"""The GEMV 128x784 at the block-RAM bandwidth bound of an LFE5U-85F (issue 16).

The 85F has 208 DP16KD block RAMs of 2 ports x 18 bits: about 800 int8 weights a cycle, so the
int8 GEMV cannot take fewer than M*K/800 = 125 cycles there. Each int8 row is lanes x
reduce_unroll products a cycle at the `--pipelines` levels (3: each product's own operand
copies and registered adder trees; 4 adds a second register on each product: docs/pipeline.md),
with mem_pack=auto (banks packed four to a 36-bit block-RAM word, compiler/hw/packing.py) and
mul=auto (the 85F's 156 DSPs, the other products in LUTs, compiler/synth/multipliers.py): compiled,
simulated in CXXRTL (outputs bit-exact against the numpy golden model, cycles equal to the cycle
model), synthesised (synth_ecp5) and placed and routed by nextpnr-ecp5 on the LFE5U-85F (speed
grade 6, --freq 100, router2 and the static placer: router1 does not converge on these
designs). `bound x` is cycles over the bandwidth bound. Then: the sequential int8 GEMV's block
RAMs (synthesis only), and fp32 rows with fp_sum=tree (float sums unrolled as a tree;
docs/float_sums.md) and mem_tail=lut (each weight bank's last, nearly empty block-RAM row in LUT
RAM: docs/memory-packing.md).

Goals: int8 <= 250 cycles at >= 100 MHz (stretch <= 130); sequential int8 <= 51 block RAMs;
fp32 <= 3,200 cycles.

Usage: python bench/bench_bandwidth.py [--int8 8x56 16x16] [--pipelines 3] [--fp32 4x8] [--fp32-pipeline 2]
                                       [--fp32-mem-tail lut]
                                       [--freq 100] [--router router2] [--placer static] [--seeds 1 2 3] [--regroup]
                                       [--no-sim] [--no-pnr] [--workdir DIR] [--json out.json]
Place-and-route and synthesis are cached under $TINYHW_CACHE. Measured on 2026-11-27 (2-core
machine, two place-and-routes side by side): the 8x56 at fp_pipeline 3 synthesises in ~2 minutes
and routes in 9-20 (seeds 1, 2, 3: 102.9, 93.8, 101.0 MHz; 238 cycles, median 2.36 us); the
fp32 4x8 at fp_pipeline 2 routes in ~13 minutes (44.9 MHz, 3,158 cycles, 70.3 us). Other shapes
and levels: docs/memory-packing.md.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_timing import fmt, measure  # noqa: E402

from compiler import HardwareConfig  # noqa: E402
from compiler.devices import find_device  # noqa: E402
from compiler.pnr.timing import ROUTERS  # noqa: E402
from pnr_seeds import add_pnr_arguments, seeds_text  # noqa: E402

M, K = 128, 784
WORDS_PER_CYCLE = 800          # 208 DP16KD x 2 ports x 18 bits / 9 bits per int8 weight, rounded
# 4-bit weights (w4a8): a weight's memory is written a word at a time (compiler/hw/subword.py), so
# nine share a 36-bit word instead of taking a 9-bit byte each: 208 x 36 / 4 weights a cycle
W4_WORDS_PER_CYCLE = 208 * 36 // 4
BOUNDS = {"int8": M * K / WORDS_PER_CYCLE, "w4a8": M * K / W4_WORDS_PER_CYCLE}


def parse_shape(text: str) -> tuple[int, int]:
    try:
        lanes, unroll = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LANESxREDUCE_UNROLL such as 16x16, got {text!r}") from None
    return lanes, unroll


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--int8", nargs="*", type=parse_shape, default=[(8, 56), (16, 16)])
    ap.add_argument("--w4a8", nargs="*", type=parse_shape, default=[],
                    help="shapes of the GEMV with 4-bit weights (int4 values in int8, declared to the compiler) "
                         "and int8 x, at the --pipelines levels")
    ap.add_argument("--fp32", nargs="*", type=parse_shape, default=[(4, 8)])
    ap.add_argument("--device", default="85k")
    ap.add_argument("--pipelines", nargs="+", type=int, default=[3],
                    help="fp_pipeline values of the int8 rows (3 adds operand copies and adder-tree registers, "
                         "4 a second product register)")
    ap.add_argument("--fp32-pipeline", type=int, default=2,
                    help="fp_pipeline of the fp32 rows (the 4x8 at 3 did not route in 2 hours)")
    ap.add_argument("--fp32-mem-tail", choices=("block", "lut"), default="lut",
                    help="mem_tail of the fp32 rows (lut: each bank's last, nearly empty block-RAM row in LUT RAM)")
    ap.add_argument("--target-mhz", type=float,
                    help="target_mhz of the int8 and w4a8 rows: registers placed for this clock on --device "
                         "(compiler/timing_model.py); nextpnr then aims at it (--freq is raised to it)")
    ap.add_argument("--timeout", type=float, default=7200,
                    help="seconds for each design's place-and-route (the 8x56 routes in 9-20 minutes; the 26x17 "
                         "took ~40 on a free core, over an hour beside another route)")
    ap.add_argument("--no-sim", dest="sim", action="store_false")
    ap.add_argument("--no-sequential", dest="sequential", action="store_false",
                    help="leave out the sequential int8 GEMV's synthesis (its block RAMs)")
    ap.add_argument("--no-pnr", dest="pnr", action="store_false")
    ap.add_argument("--no-cache", dest="cache", action="store_false")
    ap.add_argument("--router", choices=ROUTERS, default="router2",
                    help="nextpnr router (default router2: router1 does not converge on these designs)")
    add_pnr_arguments(ap)
    ap.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE",
                    help="a knob of the int8 and w4a8 rows, e.g. dsp_pack=off (YAML values)")
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    args.M, args.K = M, K
    device = find_device("ecp5", args.device)
    if args.target_mhz:
        args.freq = max(args.freq, args.target_mhz)
    root = args.workdir or Path(tempfile.mkdtemp(prefix="tinyhw-bench-bandwidth-"))
    bound = BOUNDS["int8"]
    cap = device.capacity
    print(f"GEMV {M}x{K} on {device.name} (LUT4 {cap['TRELLIS_COMB']:,}, DP16KD {cap['DP16KD']}, "
          f"MULT18X18D {cap['MULT18X18D']}); "
          f"int8 bandwidth bound M*K/{WORDS_PER_CYCLE} = {bound:.0f} cycles, with 4-bit weights "
          f"M*K/{W4_WORDS_PER_CYCLE} = {BOUNDS['w4a8']:.0f}; work in {root}", flush=True)

    rows = []
    timed = {"target_mhz": args.target_mhz, "device": device.name} if args.target_mhz else {}
    timed |= {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in args.set)}
    for dtype, shapes, levels, extra in (("int8", args.int8, args.pipelines, timed),
                                         ("w4a8", args.w4a8, args.pipelines, timed),
                                         ("fp32", args.fp32, [args.fp32_pipeline],
                                          {"fp_sum": "tree", "mem_tail": args.fp32_mem_tail})):
        for (lanes, unroll), level in itertools.product(shapes, levels):
            config = HardwareConfig(lanes=lanes, reduce_unroll=unroll, fp_pipeline=level,
                                    **({"mem_pack": "auto", "mul": "auto"} | extra))
            row = measure(dtype, config, args, root, pnr=args.pnr)
            row["kind"] = dtype
            rows.append(row)
            _print(row, BOUNDS.get(dtype, bound))
    seq = None
    if args.sequential:
        seq = measure("int8", HardwareConfig(), argparse.Namespace(**{**vars(args), "sim": False}), root, pnr=False)
        seq["kind"] = "int8 sequential"
        rows.append(seq)
        _print(seq, bound)

    print()
    for dtype in ("int8", "w4a8", "fp32"):
        fitting = [r for r in rows if r["kind"] == dtype and r.get("fits") and r.get("fmax_mhz")]
        if fitting:
            best = min(fitting, key=lambda r: r["latency_us"])
            print(f"{dtype}: fastest that fits: {best['lanes']}x{best['reduce_unroll']} at fp_pipeline "
                  f"{best['fp_pipeline']}, {best['cycles']} cycles "
                  f"at {best['fmax_mhz']:.1f} MHz = {best['latency_us']:.2f} us"
                  + (f", {best['cycles'] / BOUNDS[dtype]:.2f}x the bandwidth bound" if dtype in BOUNDS else ""))
    if seq:
        print(f"int8 sequential: {seq['bram']} block RAMs (goal <= 51)")
    if args.sim:
        print("every parallel design simulated in CXXRTL: outputs bit-exact against the numpy golden model, "
              "cycles equal to the cycle model")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str) + "\n")
    return 0


def _print(r: dict, bound: float) -> None:
    fits = r.get("fits")
    print(f"{r['kind']:15} {r['lanes']:>3}x{r['reduce_unroll']:<3} P{r['fp_pipeline']} cycles {r['cycles']:>6} "
          f"(bound x {r['cycles'] / bound:5.2f})  LUT {r['luts']:>6,} FF {r['ffs']:>6,} BRAM {r['bram']:>3} "
          f"LUTRAM {r['lutram']:>4} "
          f"DSP {r['dsp']:>3}  Fmax {fmt(r.get('fmax_mhz'), '6.1f')} MHz  latency {fmt(r.get('latency_us'), '7.2f')} us"
          f"  synth {r['synth_s']:.0f} s" + (f"  P&R {r['pnr_wall_s']:.0f} s" if 'pnr_wall_s' in r else "")
          + (f"\n    {text}" if (text := seeds_text(r)) else "")
          + f"\n    estimate {r['fmax_estimate_mhz']} MHz ({r['estimate_path']})"
          + (f"\n    critical path {r['critical_path']}" if r.get("critical_path") else "")
          + ("\n    endpoints later than the clock the route aimed at, per seed: "
             + ", ".join(f"{fmt(n, ',')} later than {1000 / aim:.2f} ns ({fmt(t, '.1f')} ns in all)"
                         for n, t, aim in zip(r['failing_endpoints'], r['tns_ns'], r['aim_mhz']))
             if r.get("failing_endpoints") else "")
          + (f"\n    {r['mul_note']}" if r.get("mul_note") else "")
          + ("" if fits else f"\n    {r['reason']}" if r.get("reason") else ""), flush=True)


if __name__ == "__main__":
    sys.exit(main())
