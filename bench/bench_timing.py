"""Fmax and latency of the int8 and fp32 GEMV 128x784 on an ECP5-85k (issue 9).

For each dtype and each `fp_pipeline` value 0..3, the design is compiled, simulated with
CXXRTL (outputs bit-exact against the numpy golden model, cycles equal to the cycle model), synthesised
with Yosys (`synth_ecp5`, netlist written by the same run) and placed and routed with
nextpnr-ecp5 on the LFE5U-85F, CABGA381, speed grade 6, --freq 100, seed 1 (compiler.pnr.timing).
latency_us = cycles / fmax_mhz.

Goal (issue 9): >= 100 MHz int8 and >= 80 MHz fp32, with lower latency than the
single-cycle designs (fp_pipeline 0).

Columns: C = the stage in which stores commit (the cycles each kernel run adds), L = rows
interleaved through a float sum (accumulator ways), parts = block-RAM parts of the deepest
split memory (compiler/hw/pipeline.py, compiler/passes/split_deep.py).

Usage: python bench/bench_timing.py [--dtypes int8 fp32] [--M 128 --K 784] [--device 85k]
                                    [--pipelines 0 1 2 3] [--jobs 2] [--no-sim] [--no-cache]
                                    [--freq MHZ] [--set KNOB=VALUE ...] [--workdir DIR] [--json out.json]
The GEMVs of docs/timing.md "Rewrites for the clock": --dtypes int8 --pipelines 3 --M 16 --K 64
--set lanes=4 --set reduce_unroll=4 --set target_mhz=200 --freq 200 --router router2 --placer heap.
Place-and-route results are cached under $TINYHW_CACHE/pnr (--no-cache runs nextpnr again).
fp32 place-and-route alone takes about 4 minutes on a 2-core machine.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import yaml  # noqa: E402

from compiler import HardwareConfig, compile_model, simulate  # noqa: E402
from compiler.pnr.timing import ROUTERS  # noqa: E402
from compiler.synth.area import synthesize  # noqa: E402
from compiler.tools import ToolError  # noqa: E402
from dse.models import zoo  # noqa: E402
from dse.evaluate import compare, tree_terms  # noqa: E402
from dse.estimate import design_features, fmax_estimate  # noqa: E402
from pnr_seeds import add_pnr_arguments, median_seed, place_and_route_seeds, seed_fields, seeds_text  # noqa: E402


def build_design(dtype: str, M: int, K: int, config: HardwareConfig):
    """The GEMV compiled for `config`, and its numpy golden output for the seeded inputs (float
    sums in the hardware's tree order with fp_sum=tree). A narrow or mixed `dtype` (w4a8: 4-bit
    weights, 8-bit x) declares its inputs' ranges to the compiler (zoo.declared_ranges)."""
    tg = zoo.import_tinygrad()
    built = zoo.gemv(dtype, M, K)
    arrays = zoo.make_inputs(built, 0)
    tensors = [tg.Tensor(np.asarray(arrays[name])).realize() for name in built.inputs]
    arith = dataclasses.replace(zoo.KERNEL, sum_tree=tree_terms(config))
    return (compile_model(built.forward(*tensors), config=config, input_ranges=zoo.declared_ranges(built, tensors)),
            zoo.reference("gemv", dtype, {"M": M, "K": K}, arrays, arith))


def measure(dtype: str, config: HardwareConfig, args, root: Path, *, pnr: bool = True) -> dict:
    """Compile, simulate (args.sim), synthesise and place and route (`pnr`) one GEMV design;
    also used by bench_bandwidth.py. `args` holds M, K, sim, timeout, device and cache, and
    may hold router, placer and seeds (place and route once per seed: the median's row)."""
    name = f"{dtype}-p{config.fp_pipeline}-{config.lanes}x{config.reduce_unroll}" + \
        ("-lut-tail" if config.mem_tail == "lut" else "") + (f"-t{config.target_mhz:g}" if config.target_mhz else "")
    workdir = root / name
    row: dict = {"dtype": dtype, "fp_pipeline": config.fp_pipeline, "lanes": config.lanes,
                 "reduce_unroll": config.reduce_unroll, "mem_tail": config.mem_tail}
    t0 = time.perf_counter()
    design, want = build_design(dtype, args.M, args.K, config)
    row["cycles"] = design.cycle_model().total
    est = fmax_estimate(design, design_features(design, target="ecp5"), "ecp5")     # placement-bounded
    row.update(fmax_estimate_mhz=round(est.fmax_mhz, 1), estimate_path=est.where, target_mhz=config.target_mhz)
    if design.mul_note:
        row["mul_note"] = design.mul_note
    scheds = design.schedules
    # the pipeline's drain (cycles a store trails its step), interleaved rows, split memories
    row["commit"] = max((sc.commit for sc in scheds), default=0)
    row["ways"] = max((a.ways for k in design.kernels for a in k.accs), default=1)
    row["parts"] = max((len(b.banks) for kb in design.banking for b in kb.values()), default=1)
    if args.sim:
        t = time.perf_counter()
        sim = simulate(design, None, backend="cxxrtl")
        row["sim_s"] = time.perf_counter() - t
        if sim.cycles != row["cycles"]:
            raise AssertionError(f"{name}: simulated {sim.cycles} cycles, the cycle model says {row['cycles']}")
        exact, _ = compare(sim.outputs[0], want, is_float=zoo.DTYPES[dtype].is_float)
        if not exact:
            raise AssertionError(f"{name}: simulated outputs differ from the numpy golden model")
        row["exact"] = True
    t = time.perf_counter()
    area = synthesize(design, "ecp5", workdir / "synth", timeout=args.timeout, netlist=True)
    row.update(synth_s=time.perf_counter() - t, luts=area.luts, ffs=area.ffs, bram=area.bram, dsp=area.dsp,
               lutram=area.lutram)
    if not pnr:
        return row
    t = time.perf_counter()
    try:
        reports = place_and_route_seeds(area.netlist_path, workdir / "pnr", args, router=args.router,
                                        use_cache=args.cache)
    except ToolError as exc:                 # a time-out or crash: keep the row, say why
        row.update(pnr_wall_s=time.perf_counter() - t, fits=None, fmax_mhz=None, latency_us=None,
                   reason=f"place-and-route did not finish: {exc.reason}", device=args.device, cached=False,
                   critical_path=None, total_s=time.perf_counter() - t0)
        return row
    rep = median_seed(reports)
    row.update(pnr_wall_s=time.perf_counter() - t, pnr_s=sum(r.seconds for r in reports),
               cached=all(r.cached for r in reports), fits=rep.fits,
               device=rep.device, package=rep.package, fmax_mhz=rep.fmax_mhz, reason=rep.reason,
               latency_us=rep.latency_us(row["cycles"]), total_s=time.perf_counter() - t0,
               nextpnr=rep.nextpnr_version, log=rep.log_path, critical_path=rep.critical_path,
               seed=rep.seed, **seed_fields(reports))
    return row


def fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", nargs="+", default=["int8", "fp32"])
    ap.add_argument("--M", type=int, default=128)
    ap.add_argument("--K", type=int, default=784)
    ap.add_argument("--device", default="85k")
    ap.add_argument("--pipelines", nargs="+", type=int, default=[0, 1, 2, 3])
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--no-sim", dest="sim", action="store_false")
    ap.add_argument("--no-cache", dest="cache", action="store_false")
    ap.add_argument("--router", choices=ROUTERS, default="router1", help="nextpnr router (compiler/pnr/timing.py)")
    add_pnr_arguments(ap, placer="heap")
    ap.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE",
                    help="a knob of every design, e.g. lanes=4, reduce_unroll=4, target_mhz=200 (YAML values)")
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    pipelines = list(args.pipelines)
    root = args.workdir or Path(tempfile.mkdtemp(prefix="tinyhw-bench-timing-"))
    extra = {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in args.set)}
    jobs = [(d, HardwareConfig.from_dict({"fp_pipeline": p, **extra})) for d in args.dtypes for p in pipelines]
    print(f"GEMV {args.M}x{args.K}, ECP5 {args.device}, nextpnr --freq {args.freq:g} --placer {args.placer} "
          f"--seed {' '.join(map(str, args.seeds))}; knobs {extra or 'default'}; work in {root}", flush=True)
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        rows = list(pool.map(lambda job: measure(*job, args, root), jobs))

    head = (f"{'dtype':6} {'fp_pipeline':>11} {'cycles':>8} {'C':>3} {'L':>2} {'parts':>5} {'LUT':>6} {'FF':>6} "
            f"{'BRAM':>4} {'DSP':>3} {'device':>10} {'Fmax MHz':>8} {'est MHz':>7} {'latency us':>10} {'synth s':>7} "
            f"{'P&R s':>7}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['dtype']:6} {r['fp_pipeline']:>11} {r['cycles']:>8} {r['commit']:>3} {r['ways']:>2} {r['parts']:>5} "
              f"{r['luts']:>6} {r['ffs']:>6} {r['bram']:>4} "
              f"{r['dsp']:>3} {r['device']:>10} {fmt(r['fmax_mhz'], '8.1f')} {fmt(r['fmax_estimate_mhz'], '7.1f')} "
              f"{fmt(r['latency_us'], '10.1f')} "
              f"{r['synth_s']:7.1f} {fmt(r.get('pnr_s'), '7.1f')}{' (cached)' if r.get('cached') else ''}")
        if not r["fits"]:
            print(f"    does not fit: {r['reason']}")
        elif r["critical_path"]:
            print(f"    critical path {r['critical_path']}")
        if text := seeds_text(r):
            print(f"    the median of {text}")
    for dtype in args.dtypes:
        base = next((r for r in rows if r["dtype"] == dtype and r["fp_pipeline"] == 0), None)
        best = min((r for r in rows if r["dtype"] == dtype and r["latency_us"]), key=lambda r: r["latency_us"],
                   default=None)
        if base and best and base is not best:
            print(f"{dtype}: best latency {best['latency_us']:.1f} us at fp_pipeline={best['fp_pipeline']} "
                  f"({base['latency_us'] / best['latency_us']:.2f}x the single-cycle design's "
                  f"{base['latency_us']:.1f} us)")
    if args.sim:
        print("every design simulated in CXXRTL: outputs bit-exact against the numpy golden model, "
              "cycles equal to the cycle model")
    print(f"{rows[0]['nextpnr']}; P&R s is nextpnr's own wall time (of the original run when cached)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
