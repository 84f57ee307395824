"""What the digit-recurrence units (FDiv, FSqrt) share: normalising a subnormal operand and
where their optional register boundaries go.

Both units compute one result bit per row of an unrolled array of compare-subtract rows
(radix 2, restoring): no multiplier, no lookup table, and the final remainder gives the
sticky bit, so the result is correctly rounded by `round_pack` like every other unit. A
row is a (p+2)-bit subtract, so the combinational path is long; `stages` cuts the array
into up to 8 evenly spread parts (see `boundary_rows`), at a target clock up to one a row, the
rounding into four (round_pack's cuts) and the operands' normalisation into two.
"""
from __future__ import annotations

from typing import Callable

from amaranth.hdl import Const, Module, Signal, Value, signed

from .common import Pipe, Unpacked, leading_zeros, shift_left
from .formats import FloatFormat

_PARTS = 32


def _halving_order(parts: int) -> tuple[str, ...]:
    """"fJ" for the fractions J / parts of a unit's length, ordered so every prefix is spread
    evenly: the middle, then the quarters, the eighths, and so on."""
    out, step = [], parts // 2
    while step >= 1:
        out += [f"f{j}" for j in range(step, parts, 2 * step)]
        step //= 2
    return tuple(out)


# Register boundaries between segments, enabled in this order (1 cut: the middle; 3: the
# quarters; 7: eighths, what fp_pipeline builds at most); at a target clock (CLOCK_CUTS) first
# four inside the first and last segments (EDGE_CUTS: round_pack's three in the rounding, a
# shift, an add and the result's checks, 20.1 ns in an fp32 divider placed alone at 28 stages;
# then "operands" between the operands' leading-zero counts and their shifts, 11.7 ns once the
# rounding was cut), then up to one a segment: a row is a carry chain of p + 3 bits and its
# select, and at eight stages (2 to 4 rows each) dividers placed alone closed at 39-60 MHz,
# square roots at 62-107 (docs/float-units.md).
SEGMENT_CUTS = _halving_order(_PARTS)
ROUND_CUTS = ("denorm", "round", "pack")
EDGE_CUTS = ROUND_CUTS + ("operands",)       # not between segments
CUTS = SEGMENT_CUTS[:7] + EDGE_CUTS + SEGMENT_CUTS[7:]
CLOCK_CUTS = CUTS[7:]


def cut_order(rows: int) -> tuple[str, ...]:
    """The boundaries a unit of `rows` rows can have, in CUTS' order: every one of EDGE_CUTS,
    and as many segment cuts as there are places between its rows + 2 segments (the 8-bit
    formats' 4 to 6 rows have fewer than 7)."""
    fit = SEGMENT_CUTS[:rows + 1]
    return fit[:7] + EDGE_CUTS + fit[7:]


def stage_limit(rows: int, clock: bool) -> int:
    """The most stages a unit of `rows` rows is cut into: all of cut_order at a target clock
    (`clock`), else its segment cuts among the first 7 of CUTS."""
    return len(cut_order(rows)) + 1 if clock else min(7, rows + 1) + 1


class RecurrenceUnit:
    """What FDiv and FSqrt share as classes: their boundaries (CUTS, CLOCK_CUTS), their rows
    (a result bit each: precision + EXTRA_ROWS) and the most stages those allow."""

    CUTS = CUTS
    CLOCK_CUTS = CLOCK_CUTS
    EXTRA_ROWS = 0

    @classmethod
    def row_count(cls, fmt: FloatFormat) -> int:
        """Recurrence rows in `fmt`, one a result bit."""
        return fmt.precision + cls.EXTRA_ROWS

    @classmethod
    def stage_limit(cls, fmt: FloatFormat, clock: bool = False) -> int:
        """The most stages it can be cut into in `fmt` (stage_limit; `clock`: with its
        CLOCK_CUTS, at a target clock)."""
        return stage_limit(cls.row_count(fmt), clock)

    @property
    def rows(self) -> int:
        return self.row_count(self.fmt)


def boundary_rows(rows: int, cuts: int = len(SEGMENT_CUTS)) -> dict[str, int]:
    """Cut name -> segment after which its boundary sits, for a unit of `rows` recurrence rows
    with its first `cuts` segment cuts (SEGMENT_CUTS) enabled.

    The unit is rows + 2 segments long (operand normalisation, the rows, rounding): cut "fJ"
    sits after segment round(J/32 * (rows + 2)). Where two enabled boundaries would sit after
    one segment (few rows for the cuts: the 8-bit formats' 4 to 6 rows, or a target clock's
    cut a segment) they are spread evenly instead."""
    total = rows + 2
    names = SEGMENT_CUTS[:cuts]
    out = {name: min(max(round(int(name[1:]) * total / _PARTS), 1), total - 1) for name in names}
    if len(set(out.values())) != len(out):
        if len(names) > total - 1:
            raise ValueError(f"{rows} recurrence rows are too few for {len(names)} distinct register boundaries")
        spread = [round((k + 1) * total / (len(names) + 1)) for k in range(len(names))]
        out = dict(zip(sorted(names, key=lambda n: int(n[1:])), spread))
    return out


def row_segments(m: Module, stages: int, rows: int) -> tuple[Callable[..., tuple], Pipe]:
    """(`segment(k, *values)`, the unit's Pipe) for a unit of `rows` recurrence rows cut into
    `stages` pipeline stages: `values` registered after segment k where a boundary
    (boundary_rows) sits there, else passed on unchanged; the Pipe's EDGE_CUTS are for the
    unit's rounding (round_pack) and its operands (normalised_operands)."""
    order = cut_order(rows)
    if stages > len(order) + 1:
        raise ValueError(f"{rows} recurrence rows are too few for {stages} stages (at most {len(order) + 1})")
    pipe = Pipe(m, order, stages)
    segment_cuts = sum(1 for name in order[:stages - 1] if name not in EDGE_CUTS)
    cut_after = {seg: name for name, seg in boundary_rows(rows, segment_cuts).items()}

    def segment(k: int, *values):
        return pipe.cut(cut_after[k], *values) if k in cut_after else values
    return segment, pipe


def normalised_operands(m: Module, fmt: FloatFormat, xs: dict[str, Unpacked], subnormals: str, pipe: Pipe,
                        carry: tuple = ()) -> tuple[list[tuple[Value, Value]], tuple]:
    """([(significand with its top bit set, signed biased exponent)] of finite nonzero operands
    `xs` (name -> unpacked), the `carry` values across the "operands" boundary).

    With subnormals="keep" a subnormal's leading zeros are shifted out and taken off its
    exponent (which may drop below 1); with "flush" subnormals already read as zero. Boundary
    "operands" (a target clock's) sits between the leading-zero counts and the shifts: the
    count and the shift were the slowest stage of dividers and square roots cut at every row."""
    sigs, lzs, exps = [], [], []
    for name, x in xs.items():
        exp = Signal(signed(fmt.exp_bits + 2), name=f"{name}_nexp")
        lz = Const(0, 1) if subnormals == "flush" else leading_zeros(m, x.sig, f"{name}_sub")
        m.d.comb += exp.eq(x.exp - lz)
        sigs.append(x.sig)
        lzs.append(lz)
        exps.append(exp)
    n = len(xs)
    out = pipe.cut("operands", *sigs, *lzs, *exps, *carry)
    out = list(out) if isinstance(out, tuple) else [out]
    sigs, lzs, exps, carry = out[:n], out[n:2 * n], out[2 * n:3 * n], tuple(out[3 * n:])
    shifted = [sig if subnormals == "flush" else shift_left(m, sig, lz, f"{name}_sub")
               for sig, lz, name in zip(sigs, lzs, xs)]
    return list(zip(shifted, exps)), carry


def lowest_exponent(fmt: FloatFormat, subnormals: str) -> int:
    """The smallest biased exponent `normalised_operands` returns."""
    return 1 - (fmt.precision - 1) if subnormals == "keep" else 1
