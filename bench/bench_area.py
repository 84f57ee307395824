"""Area per product at the field's floor (issue 53): constant layers beside da4ml, general products
by width, each against a theoretical count of the same arithmetic.

For each format wWaA (W-bit signed weights, A-bit signed activations, declared to the compiler as
ranges, so every value is sized to them) and each weight density (dense, and --sparsity of the
weights zero), one seeded random layer y = W x of --shape OUTxIN:

  constant   weights: constant, fully unrolled (lanes OUT, reduce_unroll IN), fp_pipeline 0 (one
             combinational step, as da4ml's combinational logic), every sample simulated in CXXRTL
             bit-exact against numpy, cycles equal to the cycle model; synthesised (synth_ecp5).
             `interface`: the same design with an identity-like matrix (each output one input:
             no adder), its ports, banks and control; `arith` = luts - interface (an 8-bit
             identity's interface: the real layer's outputs are wider, so arith holds some of its
             interface). With --adders-apart, `adders apart`: the design's datapath module
             synthesised with -noflatten (compiler.synth.area.module_breakdown, with the LUT
             mapping the flat synthesis kept), which holds the adders alone, as da4ml's
             -noflatten netlist does. With --packed, `packed sites`: the LUT4 sites nextpnr
             packs the whole design into (each carry chain's carry-in takes one more).
  da4ml      the same matrix through da4ml's own flow (quantize, matmul, comb_trace, RTLModel:
             combinational Verilog whose every adder is a `shift_adder` module), checked bit-exact
             in Icarus Verilog on the same samples, synthesised with the same synth_ecp5 (the
             compiler's flags, compiler.synth.area.TARGETS) with -noflatten (each adder stays
             the carry chain it is, as in ours, whose sums are kept wires), counted the same
             way: LUT4 + 2 x CCU2C.
  product    one A x W product alone (no layer): LUT4 + 2 x CCU2C of the ECP5 carry-chain map, of
             the radix-4 rows, of Yosys's own (synth_ecp5 -nodsp) and with DSPs.
  memory     weights in memories, the layer folded to --lanes x --reduce-unroll products a cycle,
             with mul lut (every product in LUTs) and mul auto (DSPs up to the 85F's 156), simulated
             and synthesised likewise; per product = luts / (lanes x reduce_unroll).

Theory: `adders` of the layer built product by product (each weight's signed digits, one adder
fewer per output than terms) and of da4ml's graph, and `bits`, the carry-chain bits those adders
need at the widths their values' intervals take (an ECP5 adder costs about one LUT4 a bit: a CCU2C
holds two); for a general product, the A x W partial-product bits.

    python bench/bench_area.py [--formats w2a2 w4a4 w4a6 w8a8] [--shape 32x32] [--sparsity 0.75]
        [--modes constant da4ml memory product] [--lanes 8 --reduce-unroll 4] [--set adder_graph=per_product]
        [--adder-depths 0 1 2 none] [--adders-apart] [--packed]
        [--json out.jsonl] [--workdir DIR]

Prints one Markdown row per (format, density, mode). Synthesis is cached under $TINYHW_CACHE.
"""
from __future__ import annotations

import argparse
import json
import subprocess
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
from compiler.passes.constants import csd  # noqa: E402
from compiler.synth.area import TARGETS, synthesize  # noqa: E402
try:
    from compiler.synth.area import module_breakdown  # noqa: E402
except ImportError:                        # the compiler before issue 53
    module_breakdown = None
try:
    from compiler.synth.area import classic_mapping  # noqa: E402
except ImportError:                        # the compiler before 2026-12-06
    def classic_mapping(area) -> bool:
        return bool(area.fallback)
from compiler.tools import yosys  # noqa: E402

DEFAULT_FORMATS = ["w2a2", "w3a3", "w4a4", "w4a6", "w6a6", "w8a8"]


def parse_format(text: str) -> tuple[int, int]:
    w, _, a = text[1:].partition("a")
    return int(w), int(a)


def signed_range(bits: int) -> tuple[int, int]:
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def matrix(shape: tuple[int, int], wbits: int, sparsity: float, seed: int) -> np.ndarray:
    """OUTxIN int weights of `wbits` bits, a fraction `sparsity` of them zero (seeded)."""
    rng = np.random.default_rng(seed)
    lo, hi = signed_range(wbits)
    W = rng.integers(lo, hi + 1, shape)
    W[rng.random(shape) < sparsity] = 0
    return W.astype(np.int64)


def samples(n_in: int, abits: int, count: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed + 1)
    lo, hi = signed_range(abits)
    out = [np.full(n_in, lo), np.full(n_in, hi)]                # the extremes first
    out += [rng.integers(lo, hi + 1, n_in) for _ in range(count)]
    return [s.astype(np.int8) for s in out]


def layer(W: np.ndarray, wbits: int, abits: int):
    """(x Tensor, y Tensor, input_ranges) of y = W x in int32."""
    x = Tensor(np.zeros(W.shape[1], np.int8)).realize()
    w = Tensor(W.astype(np.int8)).realize()
    y = w.cast(dtypes.int32) @ x.cast(dtypes.int32)
    return x, y, {x: signed_range(abits), w: signed_range(wbits)}


# ---------------------------------------------------------------------------------------------
# theory

def bits_of(lo: int, hi: int) -> int:
    if lo >= 0:
        return max(1, int(hi).bit_length())
    return max(int(-lo - 1).bit_length(), int(hi).bit_length()) + 1


def per_product_theory(W: np.ndarray, alo: int, ahi: int) -> tuple[int, int]:
    """(adders, carry bits) of y = W x built product by product: each weight's digits (a
    shift-and-add at the product's width less its low zero bits), then a balanced tree per
    output at its partial sums' widths."""
    adders = bits = 0
    for row in W:
        terms = []
        for c in row:
            if not c:
                continue
            digits, low = len(csd(int(c))), (int(c) & -int(c)).bit_length() - 1
            lo, hi = sorted((int(c) * alo, int(c) * ahi))
            adders += digits - 1
            bits += (digits - 1) * (bits_of(lo, hi) - low)
            terms.append((lo, hi))
        while len(terms) > 1:
            nxt = []
            for i in range(0, len(terms) - 1, 2):
                lo, hi = terms[i][0] + terms[i + 1][0], terms[i][1] + terms[i + 1][1]
                adders += 1
                bits += bits_of(lo, hi)
                nxt.append((lo, hi))
            terms = nxt + terms[len(terms) - len(terms) % 2:]
    return adders, bits


def graph_theory(W: np.ndarray, alo: int, ahi: int) -> tuple[int, int] | None:
    """(adders, carry bits) of da4ml's graph for W (compiler.passes.adder_graph's reading of it):
    each adder as wide as its value's interval, less the low bits only one operand has."""
    try:
        from compiler.passes.adder_graph import da4ml_available, solve_da4ml
    except ImportError:                    # the compiler before issue 53
        return None
    if not da4ml_available():
        return None
    K = W.T
    plan = solve_da4ml(K, [(alo, ahi)] * K.shape[0], [0.0] * K.shape[0], None)
    coeffs = [np.eye(K.shape[0], dtype=np.int64)[j] for j in range(K.shape[0])]
    bits = 0
    for add in plan.adds:
        v = coeffs[add.a] * (1 << add.shift_a) + (-1 if add.sub else 1) * coeffs[add.b] * (1 << add.shift_b)
        coeffs.append(v)
        lo = int(np.where(v > 0, v * alo, v * ahi).sum())
        hi = int(np.where(v > 0, v * ahi, v * alo).sum())
        bits += max(bits_of(lo, hi) - abs(add.shift_a - add.shift_b), 1)
    return len(plan.adds), bits


def depth_trade(W: np.ndarray, alo: int, ahi: int, depths: list[str]) -> None:
    """da4ml's graph for W at each adder_depth bound (the solver alone, no synthesis): its
    adders and its longest path in adders, the graph checked against the matrix."""
    from compiler.passes.adder_graph import solve_da4ml
    K = W.T
    for d in depths:
        bound = None if d == "none" else int(d)
        plan = solve_da4ml(K, [(alo, ahi)] * K.shape[0], [0.0] * K.shape[0], bound)
        if not np.array_equal(plan.coefficients(), K.astype(object)):
            raise AssertionError(f"adder_depth {d}: da4ml's graph differs from the matrix")
        print(f"  adder_depth {d}: {len(plan.adds)} adders, {plan.depth()} levels", flush=True)


# ---------------------------------------------------------------------------------------------
# ours

def ours(W, wbits, abits, config: HardwareConfig, xs, name: str, args, breakdown: bool = False,
         apart: bool = False) -> dict:
    """The design of y = W x for `config`, simulated bit-exact and synthesised. `breakdown`: print
    each module's share of a -noflatten synthesis; `apart`: its datapath modules' LUT4 + 2 x CCU2C
    in the row (`adders_apart`: a constant layer's adders alone, the host interface being the top
    module and the registers and controller the kernel's, each adder a carry chain, counted as
    da4ml's -noflatten netlist is)."""
    x, y, ranges = layer(W, wbits, abits)
    t = time.perf_counter()
    design = compile_model(y, config=config, stream=x, input_ranges=ranges)
    model = design.cycle_model()
    runs = simulate_many(design, [{x: s} for s in xs], backend="cxxrtl")
    for s, r in zip(xs, runs):
        want = W @ s.astype(np.int64)
        got = np.asarray(r.outputs[0]).reshape(-1)
        if not np.array_equal(got, want):
            raise AssertionError(f"{name}: outputs differ from numpy")
        if r.cycles != model.total:
            raise AssertionError(f"{name}: {r.cycles} cycles simulated, the cycle model says {model.total}")
    sim_s = time.perf_counter() - t
    t = time.perf_counter()
    area = synthesize(design, "ecp5", args.workdir / name, timeout=args.timeout, netlist=args.packed)
    packed = {"packed": packed_sites(area.netlist_path, args.workdir / name / "pack", args)} if args.packed else {}
    modules = module_breakdown(design, "ecp5", args.workdir / name / "breakdown", timeout=args.timeout,
                               classic=classic_mapping(area)) if breakdown or apart else {}
    if breakdown:
        print_breakdown(name, modules)
    extra = {"adders_apart": sum(m["luts"] for mod, m in modules.items() if mod.endswith(".datapath"))} if apart else {}
    return dict(**extra, **packed, adders=adders(design), luts=area.luts, lut4=area.cells.get("LUT4", 0), ccu2c=area.cells.get("CCU2C", 0),
                pfumx=area.cells.get("PFUMX", 0), ffs=area.ffs, dsp=area.dsp, bram=area.bram, lutram=area.lutram,
                cycles=model.total, exact=True, sim_s=round(sim_s, 1), synth_s=round(time.perf_counter() - t, 1),
                cached=area.cached)


def packed_sites(netlist_path: str, work: Path, args) -> int:
    """LUT4 sites of the netlist as nextpnr-ecp5 packs it on the LFE5U-85F, after the rewrites
    place-and-route makes (compiler.pnr.timing.prepare: its carry chains' unread carry-outs and
    constant carry-ins, which nextpnr would give cells of their own)."""
    from compiler.pnr import timing
    net = json.loads(Path(netlist_path).read_text())
    timing.prepare(net, "ecp5")
    return timing.packed_sites(net, work, timeout=args.timeout)


def print_breakdown(name: str, modules: dict) -> None:
    """Each module's LUTs and FFs (its own cells, times its instances), largest first."""
    total = sum(m["luts"] for m in modules.values()) or 1
    print(f"  where {name}'s area goes (synth_ecp5 -noflatten; a module's own cells x its instances):")
    for mod, m in sorted(modules.items(), key=lambda kv: -kv[1]["luts"]):
        if m["luts"] or m["ffs"]:
            print(f"    {mod}: x{m['instances']} {m['luts']:,} LUTs ({100 * m['luts'] / total:.0f}%), {m['ffs']:,} FFs, "
                  f"{m['bram']} BRAM, {m['dsp']} DSP")


def adders(design) -> int:
    """Integer adders and subtracters of the design's kernels (ADD, SUB, NEG nodes)."""
    from compiler import ir
    n = 0
    for k in design.kernels:
        for v in ir.toposort([o for s, _ in k.stores() for o in ir.store_operands(s)]):
            n += isinstance(v, ir.Op) and v.op in (ir.OpKind.ADD, ir.OpKind.SUB, ir.OpKind.NEG) \
                and not v.dtype.is_float and not v.dtype.is_bool
    return n


def identity(shape: tuple[int, int]) -> np.ndarray:
    """An OUTxIN matrix with one +1 per output (output k reads input k mod IN): a constant layer
    with no adder, whose design is the interface alone."""
    W = np.zeros(shape, np.int64)
    for k in range(shape[0]):
        W[k, k % shape[1]] = 1
    return W


# ---------------------------------------------------------------------------------------------
# one product alone

def product_row(wbits: int, abits: int, args) -> str:
    """One signed A x W product alone through synth_ecp5, LUT4 + 2 x CCU2C: the ECP5 carry-chain
    map (compiler/synth/lut_multiplier.py), the radix-4 rows (its map for other families), Yosys's
    own (-nodsp) and with DSPs."""
    from compiler.synth.lut_multiplier import Shape, map_file
    shape = Shape(abits, wbits, abits + wbits, True)
    work = args.workdir / f"product-w{wbits}a{abits}"
    work.mkdir(parents=True, exist_ok=True)
    (work / "t.v").write_text(f"module top(input signed [{abits - 1}:0] a, input signed [{wbits - 1}:0] b, "
                              f"output [{abits + wbits - 1}:0] y); assign y = a * b; endmodule\n")
    cells = []
    for how, target in (("chain", "ecp5"), ("radix4", ""), ("nodsp", None), ("dsp", None)):
        if target is not None:
            (work / f"{how}.v").write_text(map_file({shape}, target))
            flow = f"proc\ntechmap -map {how}.v t:$mul\n{TARGETS['ecp5']}\n"
        else:
            flow = TARGETS["ecp5"] + (" -nodsp" if how == "nodsp" else "") + "\n"
        yosys(f"read_verilog t.v\n{flow}tee -q -o {how}.json stat -json\n", cwd=work, log_name=f"{how}.log",
              timeout=args.timeout)
        c = json.loads((work / f"{how}.json").read_text())["design"]["num_cells_by_type"]
        dsp = int(c.get("MULT18X18D", 0))
        cells.append(f"{int(c.get('LUT4', 0)) + 2 * int(c.get('CCU2C', 0))}" + (f" + {dsp} DSP" if dsp else ""))
    return f"| w{wbits}a{abits} ({abits}x{wbits} signed) | " + " | ".join(cells) + " |"


# ---------------------------------------------------------------------------------------------
# da4ml

def da4ml_row(W, wbits, abits, xs, name: str, args) -> dict:
    from da4ml.codegen import RTLModel
    from da4ml.trace import FixedVariableArrayInput, comb_trace
    from da4ml.trace.ops import quantize
    n_out, n_in = W.shape
    inp = FixedVariableArrayInput((n_in,))
    out = quantize(inp, 1, abits - 1, 0) @ W.T.astype(np.float64)
    comb = comb_trace(inp, out)
    work = args.workdir / name
    RTLModel(comb, "cmvm", work, flavor="verilog", latency_cutoff=-1).write()
    src = work / "src"
    used = (src / "cmvm.v").read_text()     # only the modules it instantiates (Icarus cannot read them all)
    statics = sorted(p.name for p in (src / "static").glob("*.v") if f"{p.stem} #" in used or f"{p.stem} " in used)
    check_icarus(comb, W, abits, xs, src, statics)
    # da4ml's top is `cmvm`: renamed `top`, so the compiler's own synthesis command runs unchanged
    script = ("".join(f"read_verilog static/{s}\n" for s in statics) + "read_verilog cmvm.v\nrename cmvm top\n"
              f"{TARGETS['ecp5']} -noflatten\ntee -q -o stat.json stat -json\n")
    t = time.perf_counter()
    yosys(script, cwd=src, log_name="yosys.log", timeout=args.timeout)
    cells = json.loads((src / "stat.json").read_text())["design"]["num_cells_by_type"]
    lut4, ccu2c = int(cells.get("LUT4", 0)), int(cells.get("CCU2C", 0))
    return dict(luts=lut4 + 2 * ccu2c + int(cells.get("PFUMX", 0)) * 0, lut4=lut4, ccu2c=ccu2c,
                pfumx=int(cells.get("PFUMX", 0)), ffs=int(cells.get("TRELLIS_FF", 0)), dsp=int(cells.get("MULT18X18D", 0)),
                adders=sum(1 for op in comb.ops if op.opcode in (0, 1)), exact=True,
                synth_s=round(time.perf_counter() - t, 1))


def check_icarus(comb, W, abits: int, xs, src: Path, statics: list[str]) -> None:
    """da4ml's Verilog run in Icarus on the samples: each output equal to numpy's W x."""
    kin = np.array(comb.inp_kifs).T
    kout = np.array(comb.out_kifs).T
    in_w = [int(k + i + f) for k, i, f in kin]
    out_w = [int(k + i + f) for k, i, f in kout]
    words = []
    for s in xs:
        word, pos = 0, 0
        for v, w in zip(s, in_w):
            word |= (int(v) & ((1 << w) - 1)) << pos
            pos += w
        words.append(word)
    total_in = sum(in_w)
    (src / "vectors.hex").write_text("".join(f"{w:x}\n" for w in words))
    (src / "tb.v").write_text(f"""`timescale 1ns/1ps
module tb;
  reg [{total_in - 1}:0] mem [0:{len(words) - 1}];
  reg [{total_in - 1}:0] x;
  wire [{sum(out_w) - 1}:0] y;
  integer i;
  cmvm dut(.model_inp(x), .model_out(y));
  initial begin
    $readmemh("vectors.hex", mem);
    for (i = 0; i < {len(words)}; i = i + 1) begin x = mem[i]; #1; $display("%h", y); end
  end
endmodule
""")
    files = [f"static/{s}" for s in statics] + ["cmvm.v", "tb.v"]
    subprocess.run(["iverilog", "-g2012", "-o", "tb.vvp", *files], cwd=src, check=True, capture_output=True)
    lines = subprocess.run(["vvp", "-n", "tb.vvp"], cwd=src, check=True, capture_output=True, text=True).stdout.split()
    for s, line in zip(xs, lines):
        word, pos, got = int(line, 16), 0, []
        for (k, i, f), w in zip(kout, out_w):
            field = (word >> pos) & ((1 << w) - 1) if w else 0
            if k and w and field >> (w - 1):
                field -= 1 << w
            got.append(field * 2.0 ** (-f))
            pos += w
        if not np.array_equal(np.array(got), (W @ s.astype(np.int64)).astype(float)):
            raise AssertionError("da4ml's Verilog differs from numpy in Icarus")


# ---------------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--formats", nargs="+", default=DEFAULT_FORMATS)
    ap.add_argument("--shape", default="32x32", help="OUTxIN")
    ap.add_argument("--sparsity", type=float, default=0.75, help="the pruned rows' fraction of zero weights")
    ap.add_argument("--densities", nargs="+", default=["dense", "pruned"], choices=["dense", "pruned"])
    ap.add_argument("--modes", nargs="*", default=["constant", "da4ml", "memory"],
                    choices=["constant", "da4ml", "memory", "product"])
    ap.add_argument("--lanes", type=int, default=8)
    ap.add_argument("--reduce-unroll", type=int, default=4)
    ap.add_argument("--muls", nargs="+", default=["lut", "auto"], help="memory rows: the mul knob")
    ap.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE", help="a hardware knob for our rows")
    ap.add_argument("--samples", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=7200)
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--label", default="", help="a name for this run's rows (before, after)")
    ap.add_argument("--adder-depths", nargs="+", metavar="D",
                    help="also print da4ml's graph (adders, levels) at each adder_depth bound (an integer or none)")
    ap.add_argument("--breakdown", action="store_true",
                    help="memory rows: also synthesise with the hierarchy kept and print each module's share")
    ap.add_argument("--adders-apart", action="store_true",
                    help="constant rows: also synthesise with the hierarchy kept and report the datapath "
                         "module's LUTs (the adders alone) beside da4ml's")
    ap.add_argument("--packed", action="store_true",
                    help="our rows: also the LUT4 sites nextpnr packs the netlist into (packed_sites)")
    args = ap.parse_args()
    args.workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-area-"))
    extra = {k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in args.set)}
    n_out, n_in = (int(v) for v in args.shape.split("x"))
    if "product" in args.modes:
        print("| product | carry chains (ECP5) | radix-4 rows | synth_ecp5 -nodsp | synth_ecp5 |\n|---|---|---|---|---|")
        for fmt in args.formats:
            print(product_row(*parse_format(fmt), args), flush=True)
        args.modes = [m for m in args.modes if m != "product"]
        if not args.modes:
            return 0
    print("| run | format | weights | mode | luts | LUT4 | CCU2C | FFs | DSP | per product | interface | "
          "arith | adders apart | packed sites | adders (ours / per product / da4ml) | carry bits (per product / da4ml graph) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    interfaces: dict[tuple[int, int], dict] = {}
    for fmt in args.formats:
        wbits, abits = parse_format(fmt)
        alo, ahi = signed_range(abits)
        xs = samples(n_in, abits, args.samples, args.seed)
        for density in args.densities:
            sparsity = args.sparsity if density == "pruned" else 0.0
            W = matrix((n_out, n_in), wbits, sparsity, args.seed)
            nnz = int((W != 0).sum())
            naive = per_product_theory(W, alo, ahi)
            graph = graph_theory(W, alo, ahi) if {"constant", "da4ml"} & set(args.modes) else None
            if args.adder_depths:
                print(f"  {fmt} {density} {args.shape}: {naive[0]} adders product by product")
                depth_trade(W, alo, ahi, args.adder_depths)
            base = dict(run=args.label, format=fmt, density=density, shape=args.shape, nonzero=nnz,
                        theory_per_product=naive, theory_graph=graph)
            rows = []
            if "constant" in args.modes:
                full = HardwareConfig.from_dict({"weights": "constant", "lanes": n_out, "reduce_unroll": n_in, **extra})
                key = (wbits, abits)
                if key not in interfaces:
                    interfaces[key] = ours(identity((n_out, n_in)), wbits, abits, full, xs,
                                           f"identity-{fmt}-{args.shape}", args)
                r = ours(W, wbits, abits, full, xs, f"const-{fmt}-{density}-{args.shape}", args,
                         apart=args.adders_apart)
                r["interface"] = interfaces[key]["luts"]
                r["arith"] = r["luts"] - r["interface"]
                r["per_product"] = r["arith"] / max(nnz, 1)
                rows.append(("constant", r))
            if "da4ml" in args.modes:
                r = da4ml_row(W, wbits, abits, xs, f"da4ml-{fmt}-{density}-{args.shape}", args)
                r["arith"] = r["adders_apart"] = r["luts"]
                r["per_product"] = r["luts"] / max(nnz, 1)
                rows.append(("da4ml", r))
            if "memory" in args.modes:
                for mul in args.muls:
                    cfg = HardwareConfig.from_dict({"lanes": args.lanes, "reduce_unroll": args.reduce_unroll,
                                                    "fp_pipeline": 3, "mul": mul, **extra})
                    r = ours(W, wbits, abits, cfg, xs, f"mem-{mul}-{fmt}-{density}-{args.shape}", args,
                             breakdown=args.breakdown)
                    r["per_product"] = r["luts"] / (args.lanes * args.reduce_unroll)
                    rows.append((f"memory, mul {mul}, {args.lanes}x{args.reduce_unroll}", r))
            for mode, r in rows:
                row = {**base, "mode": mode, **r}
                g = graph or ("-", "-")
                print(f"| {args.label} | {fmt} | {density} ({nnz} non-zero) | {mode} | {r['luts']:,} | {r['lut4']:,} | "
                      f"{r['ccu2c']:,} | {r['ffs']:,} | {r['dsp']} | {r['per_product']:.1f} | "
                      f"{r.get('interface', '-')} | {r.get('arith', '-')} | {r.get('adders_apart', '-')} | {r.get('packed', '-')} | "
                      f"{r.get('adders', '-')} / {naive[0]} / {g[0]} | {naive[1]} / {g[1]} |", flush=True)
                if args.json:
                    with args.json.open("a") as f:
                        f.write(json.dumps(row, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
