"""Area (and Fmax) estimates without synthesis: features a compiled design shows for free, and
a model fitted on the points the explorer has already synthesised.

    features = design_features(design, target="ecp5")         # in evaluate's compile stage
    model = fit_estimator(samples)                              # samples: [(features, row), ...]
    model.predict(features)        # {"luts": Estimate(value, low, high), ...}
    model.errors                   # metric -> measured cross-validation error (relative, log scale)

Why these features: Yosys' area is close to a sum over the hardware the compiler builds, and
each part is visible in the transformed KernelIR (lanes and reduce_unroll replicate the
datapath there) and in the memory banking, before any Amaranth object exists. Counting them
takes milliseconds; synthesis takes seconds to minutes.

Why two model forms per metric: a sum of parts (`additive`, least squares on the raw counts
weighted by 1/y so every point counts by its relative error) fits designs that grow by adding
units; a power law (`loglog`, least squares on log(1 + x)) fits metrics that scale with the
parallelism as a whole. Both are fitted, each is scored by cross-validation on the synthesised
points, and the one with the smaller error is kept: the choice is measured, not assumed.

The error is measured, never assumed, on each side: over the held-out points of a k-fold
cross-validation (leave-one-out up to 20 points), `over` is the largest log((1 + estimate) /
(1 + measured)) (how far an estimate was too high) and `under` the largest the other way.
The optimistic bound of a minimised metric, `low` = (1 + estimate) * exp(-over) - 1, is what the
gating rule (dse.fidelity) compares with the front: a point is skipped only when even its
optimistic bound is dominated. Only overestimates can hide a front point, so only they widen
that margin; `high` (with `under`) serves maximised metrics (fmax_mhz). `errors[m]` is the
larger of the two.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

FEATURES_VERSION = 8
"""Bumped when `design_features` changes meaning: samples of another version are not used."""

AREA_METRICS = ("luts", "ffs", "bram", "lutram", "dsp")
ESTIMATED_METRICS = AREA_METRICS + ("fmax_mhz",)
"""What the estimator predicts; `latency_us` follows from cycles / fmax_mhz."""

# Block RAM shapes (depth x width) a memory bank can be cut into, per target family: the
# analytic block count is one feature, so the fit only calibrates it.
_BRAM_SHAPES = {
    "ecp5": ((16384, 1), (8192, 2), (4096, 4), (2048, 9), (1024, 18), (512, 36)),     # DP16KD
    "xilinx": ((16384, 1), (8192, 2), (4096, 4), (2048, 9), (1024, 18), (512, 36)),   # RAMB18
    "ice40": ((2048, 2), (1024, 4), (512, 8), (256, 16)),                              # SB_RAM40_4K
}
# Banks smaller than this many bits go to LUT RAM or flip-flops, larger ones to block RAM: what
# Yosys' memory mapping chose for the GEMV banks of configs/gemv_space.yaml on ECP5 (1,376 and
# 1,024 bits: LUT RAM; 1,824 and 2,048: block RAM). Other targets use the same split; the fit
# calibrates the rest.
_BRAM_MIN_BITS = 1536
MIN_SAMPLES = 8
"""Synthesised points needed before the estimator is trusted at all."""
_RIDGE = 1e-6


def _blocks(depth: int, width: int, target: str) -> int:
    shapes = _BRAM_SHAPES.get(target, _BRAM_SHAPES["ecp5"])
    return min(math.ceil(depth / d) * math.ceil(width / w) for d, w in shapes)


def design_features(design, *, target: str) -> dict[str, float]:
    """Counts of what the compiled `design` (compiler.design.Design) will build, by kind and
    width. Cheap: it walks the KernelIR and the banking, and builds no hardware."""
    from compiler import ir, ranges
    from compiler.hw import floatops
    from compiler.hw.bram import memory_tail
    from compiler.hw.kernel import acc_ranges, acc_shape
    from compiler.synth import multipliers
    K = ir.OpKind
    f: dict[str, float] = {"version": FEATURES_VERSION}

    def add(name: str, v: float) -> None:
        f[name] = f.get(name, 0.0) + v

    products: list[tuple[str, int, int]] = []     # (feature, operand width a, b) of every multiplier
    for k in design.kernels:
        roots = [v for s, _ in k.stores() for v in ir.store_operands(s)]
        intervals = ranges.analyze(k, acc_ranges(k, design.config))

        def bits(v) -> int:
            """The width the datapath gives an integer value: its interval's (an int8 load cast
            to int32 stays 8 bits wide in the RTL), so int8 and int16 products differ."""
            return intervals[id(v)].shape.width if id(v) in intervals else v.dtype.bits
        for v in ir.toposort(roots):        # each node once: one node, one unit of hardware
            if isinstance(v, ir.Load):
                add("read_ports", 1)
                add("read_bits", bits(v))          # a narrow buffer's loads: its stored bits
            if not isinstance(v, ir.Op):
                continue
            w = v.dtype.bits
            src_w = max((s.dtype.bits for s in v.srcs), default=w)
            if v.op in (K.MUL, K.MULACC):
                if v.dtype.is_float:
                    add("fmul", 1)
                    # fp8 operands cast to fp32 multiply in an FWideMul: its significands' width
                    narrow = floatops.wide_product_sources(v)
                    p = (narrow[0].dtype if narrow else v.dtype).man_bits + 1
                    products.append(("fmul_bits", p, p))
                    if v.op is K.MULACC:     # a fused multiply-add: its adder spans ~3 significands
                        add("fadd", 1)
                        add("fadd_bits", 3 * p)
                else:
                    add("mul", 1)
                    products.append(("mul_bits", bits(v.srcs[0]), bits(v.srcs[-1])))
            elif v.op in (K.ADD, K.SUB, K.NEG, K.MAX, K.CMPLT, K.CMPNE, K.CMPEQ):
                if any(s.dtype.is_float for s in v.srcs) or v.dtype.is_float:
                    add("fadd", 1)
                    add("fadd_bits", src_w)
                else:
                    # at the widths the datapath gives them: a constant-weight layer's thousands
                    # of shift-and-add adders are 10 to 20 bits wide, not their int32's 32
                    add("add_bits", max(bits(s) for s in v.srcs))
            elif v.op in (K.SHL, K.SHR) and isinstance(v.srcs[1], ir.Const):
                pass                         # a shift by a constant is wiring
            elif v.op in (K.CAST, K.EMU_CAST) and (v.dtype.is_float or any(s.dtype.is_float for s in v.srcs)):
                add("fconv", 1)
                add("fconv_bits", max(w, src_w))
            else:
                add("logic_bits", w)
        for a in k.accs:                    # the register as built: sized to its bounds (hw/kernel.py)
            add("acc_bits", acc_shape(a, design.config).width * a.ways)
        add("steps_log2", math.log2(1 + sum(lp.bound for lp in k.loops.values())))

    # the products the `mul` knob builds in LUTs (compiler.synth.multipliers' rule) are their own
    # feature, at the operand widths the datapath gives them (their value intervals), so the
    # DSP / LUT split under `auto` is the rule's on the real products. (Counted at the IR's
    # widths, an int8 product cast to int32 was 32 x 32 bits: int8 and int16 designs looked
    # alike and the int16 16 x 16 GEMV, 88.8k LUTs, was estimated at 25k.)
    cells = [multipliers.MulCell("ir", str(i), a, b, a + b) for i, (_, a, b) in enumerate(products)]
    in_luts = multipliers.lut_cells(cells, target, design.config.mul)
    for (name, a, b), cell in zip(products, cells):
        add(("lut_" + name) if (cell.module, cell.name) in in_luts else name, a * b)

    external = {(sh.reader[0], b) for sh in design.shares for b in design.banking_of(*sh.reader).banks}
    comb = design.config.mem_read == "comb"
    for pos, k in enumerate(design.source_kernels or design.kernels):
        packed = {s: p for p in design.packs_of(pos) for s in p.slots}     # mem_pack: one memory per group
        for b in k.buffers:
            bk = design.banking_of(pos, b.slot)
            for bank in bk.banks:
                if (pos, bank) in external or (bank in packed and packed[bank].slots[0] != bank):
                    continue
                depth, width = bk.layout.words, b.width * (len(packed[bank].slots) if bank in packed else 1)
                addr = max(1, math.ceil(math.log2(max(depth, 2))))
                add("banks", 1)
                tail = memory_tail(design.config, depth, width, b.stored)
                if tail:                                 # mem_tail: the last words in LUT RAM
                    add("tail_bits", tail * width)
                    add("tail_banks", 1)
                    depth -= tail
                if comb:
                    add("comb_mem_bits", depth * width)
                elif depth * width >= _BRAM_MIN_BITS:
                    add("bram_blocks", _blocks(depth, width, target))
                    add("bram_banks", 1)
                else:
                    add("small_mem_bits", depth * width)
                    add("small_banks", 1)
                add("addr_bits", addr)
                # a lane count that is not a power of two: bank and address by division, tails gated
                if any(d.factor & (d.factor - 1) for d in bk.layout.dims):
                    add("np2_addr_bits", addr)
    p = design.config.fp_pipeline
    add("pipeline_bits", p * (f.get("fmul_bits", 0.0) ** 0.5 + f.get("fadd_bits", 0.0)
                              + f.get("mul_bits", 0.0) ** 0.5 + f.get("read_bits", 0.0)))
    add("fp_pipeline", p)
    return f


# ---------------------------------------------------------------------------------------------
# too large for every device

LUT_FLOOR_PER_ADD_BIT = 0.5
"""The fewest LUT4s an adder bit of the design (`add_bits`) has cost in synthesis, with margin:
constant-weight MLPs fully unrolled measured 0.66 (the jet-shaped MLP 90% pruned: 12,248 LUTs
for 16,815 bits of adders; Yosys drops the constant low bits of shifted terms), so half is a
floor no design here went under."""

LOGIC_SITES = {"ecp5": "TRELLIS_COMB", "ice40": "ICESTORM_LC"}


def too_large(features: Mapping[str, float], target: str) -> str:
    """Why no device of `target` can hold a design with these features ("" when one might):
    its adders alone need more LUTs than the family's largest part has (LUT_FLOOR_PER_ADD_BIT),
    so synthesis and place-and-route, hours for such a design, are not run."""
    from compiler.devices import DEVICES
    if target not in LOGIC_SITES or target not in DEVICES:
        return ""
    floor = LUT_FLOOR_PER_ADD_BIT * features.get("add_bits", 0.0)
    largest = max(DEVICES[target], key=lambda d: d.capacity[LOGIC_SITES[target]])
    have = largest.capacity[LOGIC_SITES[target]]
    if floor <= have:
        return ""
    return (f"too large for every {target} device: its {features['add_bits']:,.0f} bits of adders need at least "
            f"{floor:,.0f} LUTs, the largest part ({largest.name}) has {have:,}; not synthesised")


# ---------------------------------------------------------------------------------------------
# the model

@dataclass(frozen=True)
class Estimate:
    value: float            # the model's estimate
    low: float              # (1 + value) * exp(-error) - 1, at least 0: the optimistic bound for a minimised metric
    high: float             # (1 + value) * exp(+error) - 1


@dataclass(frozen=True)
class _Fit:
    form: str                       # "additive" or "loglog"
    names: tuple[str, ...]
    coef: np.ndarray
    over: float                     # cross-validated max of log((1 + est) / (1 + y)), at least 0: how far too high
    under: float                    # ... of log((1 + y) / (1 + est)): how far too low


@dataclass(frozen=True)
class Estimator:
    """Per-metric fits on `samples` synthesised points; `errors` their measured error."""
    fits: Mapping[str, _Fit]
    samples: int
    cv_folds: int
    errors: Mapping[str, float] = field(default_factory=dict)
    median_errors: Mapping[str, float] = field(default_factory=dict)

    def predict(self, features: Mapping[str, float]) -> dict[str, Estimate]:
        out = {}
        for metric, fit in self.fits.items():
            v = max(0.0, float(_predict(fit.form, fit.names, fit.coef, [features])[0]))
            out[metric] = Estimate(v, max(0.0, (1 + v) * math.exp(-fit.over) - 1), (1 + v) * math.exp(fit.under) - 1)
        return out

    def bounds(self, metric: str) -> dict[str, float]:
        """The measured relative error bounds of `metric`: how far an estimate was too high / too low."""
        fit = self.fits[metric]
        return {"over": round(math.expm1(fit.over), 4), "under": round(math.expm1(fit.under), 4)}

    def describe(self) -> str:
        """One line: the measured error of every metric (what `dse sweep` prints)."""
        parts = [f"{m} {_pct(self.median_errors[m])} median, at most {_pct(self.fits[m].over)} too high / "
                 f"{_pct(self.fits[m].under)} too low ({self.fits[m].form})" for m in self.errors]
        return (f"area estimate from {self.samples} synthesised points, {self.cv_folds}-fold cross-validated "
                f"error: " + ", ".join(parts))


def _pct(log_err: float) -> str:
    return f"{(math.exp(log_err) - 1) * 100:.0f}%"


def _names(samples: Sequence[Mapping[str, float]]) -> tuple[str, ...]:
    names = sorted({n for s in samples for n in s if n != "version"})
    return tuple(n for n in names if any(s.get(n, 0.0) for s in samples))


def _matrix(form: str, names: Sequence[str], feats: Iterable[Mapping[str, float]]) -> np.ndarray:
    X = np.array([[float(f.get(n, 0.0)) for n in names] for f in feats], dtype=float).reshape(-1, len(names))
    if form == "loglog":
        X = np.log1p(np.maximum(X, 0.0))
    return np.hstack([np.ones((X.shape[0], 1)), X])


def _predict(form: str, names, coef: np.ndarray, feats) -> np.ndarray:
    y = _matrix(form, names, feats) @ coef
    return np.expm1(np.clip(y, -50, 50)) if form == "loglog" else y


def _solve(form: str, names, feats, y: np.ndarray) -> np.ndarray:
    X = _matrix(form, names, feats)
    if form == "loglog":
        target, weight = np.log1p(np.maximum(y, 0.0)), np.ones_like(y)
    else:
        target, weight = y, 1.0 / np.maximum(y, 1.0)     # relative error: small designs count as much
    Xw, tw = X * weight[:, None], target * weight
    scale = np.maximum(np.abs(Xw).max(axis=0), 1e-12)  # ridge on comparable columns
    A = Xw / scale
    coef = np.linalg.solve(A.T @ A + _RIDGE * len(y) * np.eye(A.shape[1]), A.T @ tw)
    return coef / scale


def _folds(n: int) -> list[np.ndarray]:
    k = n if n <= 20 else 10
    return [np.arange(n)[i::k] for i in range(k)]


def fit_estimator(samples: Sequence[tuple[Mapping[str, float], Mapping[str, Any]]], *,
                  metrics: Sequence[str] = AREA_METRICS) -> Estimator | None:
    """Fit every metric of `metrics` on `samples` ((features, measured row) pairs of synthesised
    points); None when fewer than MIN_SAMPLES have the features of this version."""
    samples = [(f, r) for f, r in samples if f.get("version") == FEATURES_VERSION]
    fits, errors, medians = {}, {}, {}
    folds = 0
    for metric in metrics:
        pts = [(f, float(r[metric])) for f, r in samples if r.get(metric) is not None]
        if len(pts) < MIN_SAMPLES:
            continue
        feats = [f for f, _ in pts]
        y = np.array([v for _, v in pts])
        names = _names(feats)
        best: tuple[float, _Fit, float] | None = None
        for form in ("additive", "loglog"):
            signed = np.zeros(len(y))            # log((1 + est) / (1 + y)) of each held-out point
            for held in _folds(len(y)):
                train = np.setdiff1d(np.arange(len(y)), held)
                coef = _solve(form, names, [feats[i] for i in train], y[train])
                est = np.maximum(_predict(form, names, coef, [feats[i] for i in held]), 0.0)
                signed[held] = np.log1p(est) - np.log1p(y[held])
            mean = float(np.abs(signed).mean())   # the form that is closer on average is kept
            if best is None or mean < best[0]:
                fit = _Fit(form, names, _solve(form, names, feats, y), max(0.0, float(signed.max())),
                           max(0.0, float(-signed.min())))
                best = (mean, fit, float(np.median(np.abs(signed))))
        _, fits[metric], medians[metric] = best
        errors[metric] = max(fits[metric].over, fits[metric].under)
        folds = len(_folds(len(y)))
    if not fits:
        return None
    return Estimator(fits, len(samples), folds, errors, medians)
