"""What the bus wrappers (compiler.bus.wrapper) cost on one design point: area from Yosys `synth_ecp5`
and Fmax from nextpnr-ecp5, for the design's own top (native host bus) and the same design
behind AXI4-Lite and behind Wishbone.

The point: the int8 GEMV M x K (default 16 x 16) with `lanes`, block RAM reads; it is
simulated (pysim) and checked bit for bit against numpy first. Each top is synthesised once
(the netlist from the same run) and placed and routed once per seed on the part given
(default LFE5U-25F, speed grade 6, 100 MHz target, nextpnr's default router and placer);
Fmax is the clock's after routing, the median over the seeds. The wrapper's cost is the
difference to the native top.

Usage: python bench/bench_bus.py [--M 16 --K 16 --lanes 2] [--fp-pipeline 0] [--seeds 1 2 3]
                                 [--device 25k] [--jobs 2] [--workdir DIR] [--json out.json]
Synthesis and place-and-route are cached under $TINYHW_CACHE (synth/, pnr/).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from tinygrad import Tensor  # noqa: E402

from compiler import HardwareConfig, compile_model, simulate  # noqa: E402
from compiler.bus import wrap  # noqa: E402
from compiler.pnr.timing import place_and_route  # noqa: E402
from compiler.synth import rtlil_text  # noqa: E402
from compiler.synth.area import synthesize_rtlil  # noqa: E402

VARIANTS = ("native", "axi-lite", "wishbone")


def gemv(M: int, K: int, config: HardwareConfig):
    rng = np.random.default_rng(0)
    W = rng.integers(-128, 128, (M, K)).astype(np.int8)
    x = rng.integers(-128, 128, (K,)).astype(np.int8)
    y = Tensor(W).cast("int32") @ Tensor(x).cast("int32")
    want = W.astype(np.int32) @ x.astype(np.int32)
    return compile_model(y, config=config), want


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--M", type=int, default=16)
    p.add_argument("--K", type=int, default=16)
    p.add_argument("--lanes", type=int, default=2)
    p.add_argument("--fp-pipeline", type=int, default=0)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--device", default="25k")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--workdir", type=Path)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    root = args.workdir or Path(tempfile.mkdtemp(prefix="bench-bus-"))
    config = HardwareConfig(mem_read="sync", lanes=args.lanes, fp_pipeline=args.fp_pipeline)
    design, want = gemv(args.M, args.K, config)
    result = simulate(design)
    got = np.asarray(result.outputs[0]).reshape(-1)
    if not np.array_equal(got, want) or result.cycles != design.cycle_model().total:
        print(f"the design computes a wrong result ({got} vs {want}) or takes {result.cycles} cycles", file=sys.stderr)
        return 1
    name = f"int8 GEMV {args.M}x{args.K}, lanes {args.lanes}, fp_pipeline {args.fp_pipeline}"
    print(f"{name}: {result.cycles} cycles, outputs bit-exact against numpy", flush=True)

    def synth(variant: str):
        top = design.top if variant == "native" else wrap(design, variant)
        t = time.monotonic()
        area = synthesize_rtlil(rtlil_text.convert(top, name="top"), "ecp5", root / variant / "synth", netlist=True,
                                mul=config.mul)
        print(f"  {variant}: synthesised in {time.monotonic() - t:.1f} s", flush=True)
        return variant, area

    def pnr(variant: str, area, seed: int):
        t = time.monotonic()
        rep = place_and_route(area.netlist_path, "ecp5", root / variant / f"pnr{seed}", device=args.device, seed=seed)
        print(f"  {variant} seed {seed}: {rep.fmax_mhz} MHz on {rep.device} ({time.monotonic() - t:.1f} s)", flush=True)
        return variant, seed, rep

    with ThreadPoolExecutor(args.jobs) as pool:
        areas = dict(pool.map(synth, VARIANTS))
        runs = list(pool.map(lambda vs: pnr(vs[0], areas[vs[0]], vs[1]),
                             [(v, s) for v in VARIANTS for s in args.seeds]))
    rows = []
    base = areas["native"]
    for v in VARIANTS:
        a = areas[v]
        fmax = [r.fmax_mhz for vv, _, r in runs if vv == v and r.fits and r.fmax_mhz]
        rows.append({"top": v, "luts": a.luts, "ffs": a.ffs, "bram": a.bram, "lutram": a.lutram, "dsp": a.dsp,
                     "d_luts": a.luts - base.luts, "d_ffs": a.ffs - base.ffs,
                     "fmax_mhz": fmax, "fmax_median": statistics.median(fmax) if fmax else None,
                     "device": next((r.device for vv, _, r in runs if vv == v), None)})
    print(f"\n{name} on ECP5 ({rows[0]['device']}, nextpnr seeds {', '.join(map(str, args.seeds))}):\n")
    print("| top | LUT | FF | BRAM | LUTRAM | DSP | wrapper LUT | wrapper FF | Fmax MHz (median; per seed) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        per = ", ".join(f"{f:.1f}" for f in r["fmax_mhz"])
        med = f"{r['fmax_median']:.1f}" if r["fmax_median"] else "-"
        d = ("-", "-") if r["top"] == "native" else (f"+{r['d_luts']}", f"+{r['d_ffs']}")
        print(f"| {r['top']} | {r['luts']} | {r['ffs']} | {r['bram']} | {r['lutram']} | {r['dsp']} | {d[0]} | {d[1]} | "
              f"{med} ({per}) |")
    if args.json:
        args.json.write_text(json.dumps({"point": name, "cycles": result.cycles, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
