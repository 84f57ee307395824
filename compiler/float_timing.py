"""Float units in the delay model (compiler/timing_model.py times integer ops; a float unit is a
block of its own whose stages it cannot see): the slowest stage of each float unit a kernel
builds, at the stage count the schedule gave it, from the unit placed and routed alone.

`MEASURED` holds, per unit and format, its Fmax placed alone at some stage counts:
`python bench/bench_fp_area.py --pnr` (one stage, what fp_pipeline 0 builds; eight for the
recurrence units) and `--clock` (every boundary, what target_mhz builds; with `--stages`, the
fewer a slower target builds: fewest_stages), LFE5U-85F grade 6 (a few on the 25F, named at
MEASURED), nextpnr router2, seed 1, each unit between input and output registers. Between two measured
counts the period is interpolated linearly in 1/stages (a unit's logic split into s stages,
plus what every stage pays: period = a + b / s); below the fewest it grows as the logic a stage
holds (period * fewest / s: pessimistic, only where one stage was not measured), above the most
it stays at the most's. A unit or format not measured is not timed.

Why: without it a float design's `fmax_estimate_mhz` was its integer paths' alone, 185-196 MHz
for a float sum that closed at 24 (one combinational adder on a one-cycle loop) and at 97
(pipelined in a ring), and a sweep that prunes points by the estimate (dse: a large grid
synthesises only points that can reach the front) would keep the wrong ones.

Limits: a unit placed alone has its inputs and outputs beside it; in a design its routes are
longer (the float probes of docs/timing.md closed 5-15% below their slowest unit alone), and the
units' cuts are not evenly spread, so a count between two measured ones can be off by a third
(FDiv fp32 at 8 stages: 42.6 MHz measured, 53 by the line through 1 and 32 stages).
"""
from __future__ import annotations

from typing import Iterator

from . import ir
from .fp.widemul import FWideMul
from .hw import floatops
from .timing_model import DELAYS, Delays

MEASURED_GRADE = 6
MEASURED: dict[tuple[str, str], tuple[tuple[int, float], ...]] = {
    # (unit, format) -> ((stages, MHz), ...), ascending stages; conversions "src->dst". One
    # stage and the recurrence units at eight (--pnr) and every unit at its most (--clock) on
    # f82fcb4, 2026-12-06; FMulAdd at 12 on dd13686, at 13 on 04f8bb5, at 16 on b9f199c, bf16's
    # at 8 on a7ac805 (the same netlists as now: its later cuts only add boundaries; at 15 on
    # 4af49a1, 72.6 / 104.6 / 92.4 MHz, within a seed of 13's, left out). On an LFE5U-25F (the
    # same grade's cells, a smaller die; the thirty-fourth session's scratch runs): FAdd fp32 at
    # 6 on b6c5f23, FMulAdd fp32 at 8 on 4236d44.
    # FMul at 3, 4, 5, 6 and 8 on c401382 (`--clock --stages 3,4,5,6,8`; its cuts are the same
    # with and without a target clock up to 8: its CLOCK_CUTS are the 9th and 10th), 2026-12-06
    ("FAdd", "fp32"): ((1, 29.6), (6, 95.7), (10, 162.9)),
    ("FAdd", "fp16"): ((1, 34.7), (10, 193.0)),
    ("FAdd", "bf16"): ((10, 171.1),),
    ("FMul", "fp32"): ((1, 23.7), (3, 66.5), (4, 88.4), (5, 89.4), (6, 84.5), (8, 149.9), (10, 151.6)),
    ("FMul", "fp16"): ((1, 33.4), (3, 75.4), (4, 120.6), (5, 123.9), (6, 124.3), (8, 176.1), (10, 175.7)),
    ("FMul", "bf16"): ((3, 74.1), (4, 118.3), (5, 132.5), (6, 121.1), (8, 182.2), (10, 182.1)),
    ("FWideMul", "fp16"): ((2, 96.3), (3, 93.6), (4, 147.5), (6, 140.6), (8, 159.6), (10, 161.6)),
    # FMulAdd at 1 and 8 (fp_pipeline's, its CUTS order) on b4ebb7e, 2026-12-06 (a scratch run
    # of bench_fp_area's `muladd` and `synthesise`); at a target clock MEASURED_IN_CLOCK_ORDER
    ("FMulAdd", "fp32"): ((1, 13.2), (8, 42.7)),
    ("FMulAdd", "fp16"): ((1, 16.8), (8, 64.0)),
    ("FMulAdd", "bf16"): ((1, 14.8), (8, 66.6)),
    # the recurrence units at 12 stages up on c401382 (`--clock --stages 8,12,16,20,24`; at 8
    # the same figures as before): a count's figure is its slowest segment's, in steps
    ("FDiv", "fp32"): ((1, 7.7), (8, 42.6), (12, 58.2), (16, 60.1), (20, 108.7), (24, 99.5), (32, 133.1)),
    ("FDiv", "fp16"): ((1, 17.6), (8, 58.3), (12, 139.4), (16, 143.1), (19, 157.9)),
    ("FDiv", "bf16"): ((1, 20.5), (8, 57.1), (12, 145.4), (16, 164.2)),
    ("FSqrt", "fp32"): ((1, 10.3), (8, 65.7), (12, 65.8), (16, 65.8), (20, 120.8), (24, 109.6), (31, 135.5)),
    ("FSqrt", "fp16"): ((1, 22.9), (8, 101.4), (12, 138.5), (16, 138.6), (18, 154.3)),
    ("FSqrt", "bf16"): ((1, 31.6), (8, 100.2), (12, 142.0), (15, 177.3)),
    # the conversions and FWideMul at 2 stages up on c401382 (`--clock --stages 2,3,4,6,8`)
    ("IntToFloat", "int32->fp32"): ((2, 76.8), (3, 72.8), (4, 95.0), (5, 162.7)),
    ("IntToFloat", "int32->fp16"): ((2, 80.6), (3, 73.7), (4, 99.2), (5, 145.8)),
    ("IntToFloat", "int32->bf16"): ((2, 75.0), (3, 73.2), (4, 98.2), (5, 162.6)),
    ("FloatToFloat", "fp16->fp32"): ((2, 165.5), (3, 155.3), (4, 218.5)),
    ("FloatToFloat", "fp32->fp16"): ((2, 101.9), (3, 153.3), (4, 160.1)),
    ("FloatToFloat", "bf16->fp32"): ((2, 119.0), (3, 188.4), (4, 149.5)),
    ("FloatToFloat", "fp32->bf16"): ((2, 105.6), (3, 153.3), (4, 153.8)),
    # combinational at any clock (a row max's unit on its accumulator's one-cycle loop); on
    # 83dd24c, 2026-12-06 (--clock --only FMax,FCompare)
    ("FMax", "fp32"): ((1, 136.6),),
    ("FMax", "fp16"): ((1, 149.7),),
    ("FMax", "bf16"): ((1, 152.6),),
    ("FCompare", "fp32"): ((1, 163.0),),
    ("FCompare", "fp16"): ((1, 187.6),),
    ("FCompare", "bf16"): ((1, 179.7),),
}

MEASURED_IN_CLOCK_ORDER: dict[tuple[str, str], tuple[tuple[int, float], ...]] = {
    # a unit at a target clock, with fewer stages than its boundaries, takes them in its
    # CLOCK_ORDER: these replace MEASURED's figures there. FAdd at 3, 4, 5, 6 and 8 on c401382
    # (`--clock --stages 3,4,5,6,8`, 2026-12-06), fp32 at 6 the slower of two runs (113.0 there,
    # 106.6 on the LFE5U-25F on b6c5f23). FMulAdd (via 53) on b4ebb7e (`--clock --only FMulAdd
    # --stages 8,12,14,16`; 4, 6, 10 and 13 by a scratch run of the bench's functions), 2026-12-06
    ("FAdd", "fp32"): ((3, 54.8), (4, 68.0), (5, 104.7), (6, 106.6), (8, 161.1)),
    ("FAdd", "fp16"): ((3, 69.2), (4, 82.4), (5, 113.4), (6, 138.9), (8, 178.4)),
    ("FAdd", "bf16"): ((3, 69.4), (4, 93.6), (5, 111.2), (6, 135.6), (8, 185.0)),
    ("FMulAdd", "fp32"): ((4, 23.7), (6, 51.8), (8, 56.2), (10, 68.8), (12, 85.8), (13, 80.7), (14, 86.5),
                          (16, 92.7), (17, 130.1)),
    ("FMulAdd", "fp16"): ((4, 28.4), (6, 64.4), (8, 64.6), (10, 81.1), (12, 110.8), (13, 115.6), (14, 133.7),
                          (16, 133.0), (17, 132.3)),
    ("FMulAdd", "bf16"): ((4, 23.3), (6, 52.8), (8, 51.5), (10, 71.3), (12, 99.0), (13, 110.8), (14, 124.4),
                          (16, 120.1), (17, 133.0)),
}

MEASURED_IN_RING: dict[tuple[str, str], tuple[tuple[int, float], ...]] = {
    # a ring's fused multiply-add at a target clock (FMulAdd ring=True): its product through
    # every boundary before the accumulator enters, the stages from there in RING_ORDER
    # (`bench_fp_area.py --clock --only FMulAdd --ring-stages 8,12,13`), LFE5U-85F, on b4ebb7e,
    # 2026-12-06 (at 12 before its first rounding's split and c's count: 101.2 / 98.2 / 104.2)
    ("FMulAdd", "fp32"): ((8, 70.8), (12, 95.2), (13, 123.6)),
    ("FMulAdd", "fp16"): ((8, 72.2), (12, 111.8), (13, 132.7)),
    ("FMulAdd", "bf16"): ((8, 68.5), (12, 95.0), (13, 125.5)),
}


def unit_key(v: ir.Op) -> tuple[str, str] | None:
    """(unit, format) of float op `v` as MEASURED names it, None for wiring (no unit)."""
    wide = floatops.wide_product_sources(v)
    unit = FWideMul if wide is not None else floatops.unit_of(v)
    if unit is None:
        return None
    if wide is not None:
        return unit.__name__, wide[0].dtype.name
    if unit.__name__ in ("FloatToFloat", "IntToFloat", "FloatToInt"):
        return unit.__name__, f"{v.srcs[0].dtype.name}->{v.dtype.name}"
    return unit.__name__, floatops._float_dtype(v).name


def measured(key: tuple[str, str], clock: bool = False, ring: bool = False) -> tuple[tuple[int, float], ...]:
    """(stages, MHz) measured of unit `key`, ascending stages (unit_period_ns' `clock`, `ring`)."""
    points = MEASURED_IN_RING.get(key, ()) if ring else MEASURED.get(key, ())
    if clock and not ring and key in MEASURED_IN_CLOCK_ORDER:
        points = tuple(sorted((dict(points) | dict(MEASURED_IN_CLOCK_ORDER[key])).items()))
    return points


def unit_period_ns(key: tuple[str, str], stages: int, d: Delays, clock: bool = False,
                   ring: bool = False) -> float | None:
    """The slowest stage of unit `key` cut into `stages` stages on the part of `d` (module
    docstring; `clock`: built for a target clock, in its CLOCK_ORDER; `ring`: a ring's fused
    multiply-add with its product before its stages, MEASURED_IN_RING), None where it was not
    measured."""
    points = measured(key, clock, ring)
    if not points or d.family != "ecp5":
        return None
    scale = d.clk_q / DELAYS[("ecp5", MEASURED_GRADE)].clk_q
    # a boundary more never lengthens a path: where a count measured slower than a smaller one
    # (placement noise, FMul fp32 at 6 stages 84.5 MHz, at 5 89.4), it takes the smaller's figure
    ns, best = [], float("inf")
    for s, mhz in points:
        best = min(best, 1000.0 / mhz)
        ns.append((s, best))
    if stages >= ns[-1][0]:
        return ns[-1][1] * scale
    if stages <= ns[0][0]:                           # its logic split fewer ways than measured
        s0, p0 = ns[0]
        return p0 * s0 / stages * scale
    for (s0, p0), (s1, p1) in zip(ns, ns[1:]):
        if stages <= s1:
            return (p1 + (p0 - p1) * (1 / stages - 1 / s1) / (1 / s0 - 1 / s1)) * scale
    raise AssertionError("unreachable")


# A unit in a design closes below its figure placed alone (its routes are longer: the float
# probes of docs/timing.md closed 5-15% under their slowest unit; at target_mhz 100 with units
# at fewer stages, relu(a + b) bf16 at 116.6 MHz against its adder's 135.6 alone at 6 stages,
# 1.16, and the gemv 48x80 bf16 at 94.1 and 95.9 against its multiplier's 118.3 at 4 and 132.5
# at 5, 1.26 and 1.38: a stage of many LUT levels, its operands' count and normalising shift,
# spreads in a design): a target clock gives it the fewest stages whose figure alone is this
# much above the target
IN_DESIGN = 1.4


def fewest_stages(v: ir.Op, most: int, period_ns: float, d: Delays) -> int:
    """The fewest stages, at most `most`, at which float op `v`'s unit placed alone was measured
    IN_DESIGN times faster than `period_ns` on the part of `d`; `most` where none was or the unit
    was not measured. Only measured counts: between two, a unit's figure moves in steps (FDiv
    fp32: 60.1 MHz at 16 stages, 108.7 at 20), which the interpolation does not see. With every
    boundary a unit has, a target below its best paid for registers and cycles it did not
    need: act_mlp bf16 took 938 cycles at any target, 764 at 75 MHz with this (docs/timing.md)."""
    key = unit_key(v)
    if key is None or d.family != "ecp5":
        return most
    for stages, _ in measured(key, clock=True):
        if stages < most and unit_period_ns(key, stages, d, clock=True) * IN_DESIGN <= period_ns:
            return stages
    return most


def ring_period_ns(keys: frozenset[tuple[str, str]], stages: int, period_ns: float, d: Delays) -> float | None:
    """The period a float sum's ring runs at, in a design at a target clock of `period_ns`, with
    its adders (`keys`) cut into `stages` stages: their slowest figure alone IN_DESIGN slower,
    never below the target's (a faster ring does not make the design faster); None where one was
    not measured (interleave_ways' `adder_ns`)."""
    ns = [unit_period_ns(key, stages, d, clock=True) for key in keys]
    if not ns or None in ns:
        return None
    return max(period_ns, max(ns) * IN_DESIGN)


def float_units(kernel: ir.KernelIR, stages: dict[int, int]) -> Iterator[tuple[ir.Op, tuple[str, str], int]]:
    """(op, unit key, stages) of every float unit `kernel` builds, `stages` the schedule's
    unit_stages (one where absent)."""
    seen: set[int] = set()
    for s, _ in kernel.stores():
        for v in ir.toposort(ir.store_operands(s)):
            if id(v) in seen or not isinstance(v, ir.Op) or not floatops.is_float_op(v):
                continue
            seen.add(id(v))
            if (key := unit_key(v)) is not None:
                yield v, key, stages.get(id(v), 1)


def slowest_unit(kernel: ir.KernelIR, stages: dict[int, int], d: Delays, clock: bool = False,
                 lead: dict[int, int] | None = None) -> tuple[float, str]:
    """(ns, what) of the slowest stage among `kernel`'s timed float units (`clock`: built for a
    target clock; `lead`: Schedule.unit_lead, the rings' fused multiply-adds whose product comes
    before their stages)."""
    worst, what = 0.0, ""
    for v, key, n in float_units(kernel, stages):
        ring = id(v) in (lead or {})
        ns = unit_period_ns(key, n, d, clock, ring)
        if ns is not None and ns > worst:
            worst, what = ns, f"a float unit's stage: {key[0]} {key[1]}{' (a ring: its product before)' if ring else ''} " \
                              f"at {n} stage{'s' if n > 1 else ''} (placed alone: compiler/float_timing.py)"
    return worst, what
