"""Building blocks shared by the float units: unpacking, leading-zero count, shifters, and
the one rounding/packing stage every arithmetic unit ends with.

All helpers add combinational logic to a `Module` and return Amaranth values. Widths are kept
to what the formats need: shifters truncate at every stage instead of using Amaranth's
`<<` by a signal (whose result is as wide as the largest possible shift).

A value that the next level reads more than once (a shifter's stage, a leading-zero tree's
halves) is a named signal, not an expression: Amaranth's fragment transforms and its Python
simulator's compiler walk an expression once per reference (measured with cProfile), so a value
read twice a level cost 2^levels walks.
The netlist is the same (bench_fp_area.py: the same LUT4 and CCU2C counts for fp32 and fp16
adders, multipliers and fused multiply-adds); the float chain of tests/ops_catalog.py's
binary_crossentropy_logits compiles and simulates in pysim in 13.9 s instead of 23.4, and
test_pipeline's pipelined units (CXXRTL) take 54 s instead of 64 (cold caches, a loaded machine).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed

from ..synth.rtlil_text import DATA_ATTRIBUTE, DUPLICATE_ATTRIBUTE
from .formats import FloatFormat


@dataclass(frozen=True)
class Unpacked:
    """Fields of one float operand, after the subnormal policy has been applied.

    sig: precision-bit significand with the implicit bit made explicit (0 for subnormals).
    exp: biased exponent with subnormals read as exponent 1 (their true scale), exp_bits wide.
    mag: the operand without its sign bit; ordered like the magnitudes (flushed subnormals read 0).
    """
    sign: Value
    exp: Value
    sig: Value
    mag: Value
    is_zero: Value
    is_inf: Value
    is_nan: Value


def unpack(m: Module, fmt: FloatFormat, bits: Value, subnormals: str, name: str) -> Unpacked:
    """Split an IEEE bit pattern; with subnormals="flush" a subnormal reads as a signed zero."""
    exp_field = bits[fmt.man_bits:fmt.width - 1]
    man = bits[:fmt.man_bits]
    exp_zero = exp_field == 0
    exp_ones = exp_field == fmt.exp_max_field

    sign = Signal(name=f"{name}_sign")
    exp = Signal(fmt.exp_bits, name=f"{name}_exp")
    sig = Signal(fmt.precision, name=f"{name}_sig")
    mag = Signal(fmt.width - 1, name=f"{name}_mag")
    is_zero = Signal(name=f"{name}_zero")
    is_inf = Signal(name=f"{name}_inf")
    is_nan = Signal(name=f"{name}_nan")
    if subnormals == "flush":
        man = Mux(exp_zero, 0, man)          # a subnormal reads as zero: clear its mantissa
    m.d.comb += [
        sign.eq(bits[fmt.width - 1]),
        # Subnormals have the scale of exponent 1 but no implicit bit.
        exp.eq(Mux(exp_zero, 1, exp_field)),
        sig.eq(Cat(man, ~exp_zero)),
        mag.eq(Cat(man, exp_field)),
        is_zero.eq(exp_zero & (man == 0)),
    ]
    if fmt.has_inf:
        m.d.comb += [is_inf.eq(exp_ones & (bits[:fmt.man_bits] == 0)),
                     is_nan.eq(exp_ones & (bits[:fmt.man_bits] != 0))]
    else:                                    # OCP FN: S.1..1.1..1 is the only NaN, no inf
        m.d.comb += is_nan.eq(exp_ones & bits[:fmt.man_bits].all())
    return Unpacked(sign, exp, sig, mag, is_zero, is_inf, is_nan)


def bits_for(n: int) -> int:
    """Bits of an unsigned value that can hold 0..n."""
    return max(1, n.bit_length())


CUT_SLICE = 8
"""Bits of the slices a split leading-zero count registers (leading_zeros' `cut`)."""


def leading_zeros(m: Module, value: Value, name: str, cut: Callable[[list], list] | None = None) -> Value:
    """Count of leading zeros of `value` (its width when it is zero), as a balanced tree.

    The input is padded at the bottom with ones to a power of two, so the padded word is never
    all zero and the count saturates at the true width. Each tree level merges two halves: if
    the upper half is all zero the count is half + count(lower), else count(upper). This is
    the classic LZC tree; it maps to a few LUT levels instead of a long priority chain.

    `cut` (optional) takes the (all_zero, count) pairs of the tree's 8-bit slices, flattened, and
    returns them registered (a pipelined unit's boundary, with the caller's other values): the
    slices' counts in one stage, their merging in the next.
    """
    width = len(value)
    size = 1
    while size < max(width, 2):
        size *= 2
    padded = Signal(size, name=f"{name}_lz_in")     # sliced at every leaf: named once
    m.d.comb += padded.eq(Cat(Const((1 << (size - width)) - 1, size - width), value) if size > width else value)
    level = 0

    def merge(lo: tuple[Value, Value], hi: tuple[Value, Value]) -> tuple[Value, Value]:
        """(all_zero, count) of two neighbouring slices' (the upper one `hi`)."""
        nonlocal level
        (lo_zero, lo_count), (hi_zero, hi_count) = lo, hi
        # each half's flag is read twice above it: named (module docstring)
        zero, count = Signal(name=f"{name}_lz{level}_zero"), Signal(len(hi_count) + 1, name=f"{name}_lz{level}")
        level += 1
        m.d.comb += [zero.eq(hi_zero & lo_zero), count.eq(Cat(Mux(hi_zero, lo_count, hi_count), hi_zero))]
        return zero, count

    def tree(bits: Value) -> tuple[Value, Value]:
        """(all_zero, count) for a power-of-two slice; count has log2(len) bits."""
        if len(bits) == 2:
            return ~(bits[0] | bits[1]), ~bits[1]
        half = len(bits) // 2
        lo = tree(bits[:half])
        return merge(lo, tree(bits[half:]))

    if cut is None or size <= CUT_SLICE:
        all_zero, count = tree(padded)
    else:
        slices = [tree(padded[k:k + CUT_SLICE]) for k in range(0, size, CUT_SLICE)]
        flat = cut([x for pair in slices for x in pair])
        pairs = [(flat[k], flat[k + 1]) for k in range(0, len(flat), 2)]
        while len(pairs) > 1:           # merge neighbours, lower slice first
            pairs = [merge(lo, hi) for lo, hi in zip(pairs[::2], pairs[1::2])]
        all_zero, count = pairs[0]
    out = Signal(bits_for(width), name=f"{name}_lz")
    if size > width:
        m.d.comb += out.eq(count)            # padding ones stop the count at `width`
    else:
        m.d.comb += out.eq(Mux(all_zero, width, count))
    return out


def shift_left(m: Module, value: Value, amount: Value, name: str) -> Value:
    """`value << amount`, truncated to len(value); shifts >= len(value) give zero."""
    width = len(value)
    out = value
    for i in range(len(amount)):
        step = 1 << i
        if step >= width:
            out = Mux(amount[i:].any(), 0, out)
            break
        stage = Signal(width, name=f"{name}_shl{i}")   # read twice by the next stage: named once
        m.d.comb += stage.eq(Mux(amount[i], Cat(Const(0, step), out[:width - step]), out))
        out = stage
    sig = Signal(width, name=f"{name}_shl")
    m.d.comb += sig.eq(out)
    return sig


def shift_right_sticky(m: Module, value: Value, amount: Value, name: str) -> tuple[Value, Value]:
    """(`value >> amount`, OR of every bit shifted out); shifts >= len(value) give (0, value != 0).
    The sticky bit is not gathered level by level behind the shifter's multiplexers: it is the
    OR of `value`'s bits under a mask of the `amount` lowest positions (a thermometer code of
    `amount`, a few LUT levels beside the shifter), so it arrives with the shifted value."""
    width = len(value)
    out = value
    below = Const(0, width)                 # bit i set when i < amount: the bits shifted out
    for i in range(len(amount)):
        step = 1 << i
        if step >= width:
            big = amount[i:].any()
            out = Mux(big, 0, out)
            below = Mux(big, Const((1 << width) - 1, width), below)
            break
        stage = Signal(width, name=f"{name}_shr{i}")   # read three times by the next stage: named once
        m.d.comb += stage.eq(Mux(amount[i], out[step:], out))
        out = stage
        below = Mux(amount[i], Cat(Const((1 << step) - 1, step), below[:width - step]), below)
    shifted = Signal(width, name=f"{name}_shr")
    mask = Signal(width, name=f"{name}_shr_mask")
    sticky_sig = Signal(name=f"{name}_sticky")
    m.d.comb += [shifted.eq(out), mask.eq(below), sticky_sig.eq((value & mask).any())]
    return shifted, sticky_sig


def denormalise(m: Module, subnormals: str, exp: Value, exp_lo: int, name: str) -> tuple[Value, Value]:
    """(the right shift that moves a value of biased exponent `exp` onto the subnormal grid,
    the exponent after it): 1 - exp and 1 where exp < 1, else 0 and exp; (0, exp) where nothing
    can be below the smallest normal (`exp_lo` >= 1) or subnormals are flushed. round_pack's
    gradual underflow; a unit that knows its exponent's candidates before its significand
    computes this for each beforehand and picks (FMul), so no carry chain follows the pick."""
    if not (subnormals == "keep" and exp_lo < 1):
        return Const(0, 1), exp
    tiny = exp < 1
    amount_width = bits_for(max(1 - exp_lo, 0))
    amount = Signal(amount_width, name=f"{name}_denorm_amount")
    m.d.comb += amount.eq(Mux(tiny, (1 - exp)[:amount_width], 0))
    return amount, Mux(tiny, 1, exp)


def round_pack(m: Module, fmt: FloatFormat, *, rounding: str, subnormals: str, sign: Value,
               exp: Value, sig: Value, exp_range: tuple[int, int], may_be_tiny: bool,
               name: str = "rnd", pipe: "Pipe | None" = None, carry: tuple = (),
               denormalised: Value | None = None) -> Value:
    """Round a finite nonzero value to `fmt` and return its bit pattern.

    The value is sig / 2**(len(sig)-1) * 2**(exp - bias): `sig` holds the significand with its
    leading one at the top bit and any extra low bits (guard and sticky information) below
    the precision-bit significand. `exp` is a signed biased exponent. Allowed inputs:
      * normalised (top bit set), any exponent;
      * exp == 1 with top bit clear: a subnormal, aligned on the subnormal grid already;
      * with subnormals="keep", exp < 1 with anything: shifted right here onto the subnormal
        grid (with sticky) before rounding, which is IEEE gradual underflow.
    `exp_range` bounds `exp` so logic that cannot fire is not built; `may_be_tiny` says
    whether the result can be below the smallest normal.

    Rounding adds the increment to the packed (exponent-1, significand) word: a carry out of
    the significand bumps the exponent, turns a subnormal into the smallest normal and the
    largest finite into inf, so none of those needs its own logic.

    subnormals="flush": the value is rounded to full precision as if the exponent were
    unbounded below, and a rounded result below the smallest normal becomes a signed zero
    (the IEEE 754 "tininess after rounding" test, as x86 SSE uses; every tiny result is
    flushed, exact or not). Example, fp16: (1 - 2**-12) * 2**-14 rounds to 2**-14 and is
    kept; (1 - 2**-11) * 2**-14 is exact at 11 bits, below 2**-14, and becomes 0.

    `pipe` (optional) may put register boundaries there: "denorm" before the denormalising
    shift, "round" between it and the rounding add, "pack" after the add; `carry` are the
    caller's values that must cross them too. With `carry` given, returns (bit pattern,
    carried values). `denormalised`: the shift amount the caller computed with `denormalise`,
    `exp` then being the exponent it returned.
    """
    exp_lo, exp_hi = exp_range
    gradual = subnormals == "keep" and exp_lo < 1
    # Pad narrow inputs with zeros; a denormalising shift needs a guard bit to shift into.
    min_extra = 1 if gradual else 0
    extra = len(sig) - fmt.precision
    if extra < min_extra:
        sig, extra = Cat(Const(0, min_extra - extra), sig), min_extra
    if extra > 2:
        # Only the guard bit and the OR of the bits below it matter for rounding: fold them
        # into one sticky bit now, so the denormalising shifter is precision+2 bits wide.
        sig, extra = Cat(sig[:extra - 1].any(), sig[extra - 1:]), 2

    sticky_in = Const(0, 1)
    carried = list(carry)
    # Gradual underflow: move the value onto the subnormal grid (exponent 1).
    amount, exp = (denormalised, exp) if denormalised is not None else denormalise(m, subnormals, exp, exp_lo, name)
    if pipe is not None:                # (also without the shift: a unit's latency is its cut count)
        sig, exp, amount, sign, *carried = pipe.cut("denorm", sig, exp, amount, sign, *carried)
    if gradual:
        sig, sticky_in = shift_right_sticky(m, sig, amount, f"{name}_denorm")
    if pipe is not None:
        sig, exp, sticky_in, sign, *carried = pipe.cut("round", sig, exp, sticky_in, sign, *carried)

    kept = sig[extra:]
    if extra >= 1:
        guard = sig[extra - 1]
        sticky = sig[:extra - 1].any() | sticky_in if extra >= 2 else sticky_in
    else:
        guard, sticky = Const(0, 1), sticky_in
    if rounding == "rne":
        increment = guard & (sticky | kept[0])
    else:                                           # rtz: drop the extra bits
        increment = Const(0, 1)

    # Packed magnitude as a signed word: exponent field over mantissa field.
    packed_width = max(bits_for(abs(exp_hi) + 1), bits_for(abs(exp_lo) + 1)) + fmt.man_bits + 3
    packed = Signal(signed(packed_width), name=f"{name}_packed")
    m.d.comb += packed.eq(((exp - 1) << fmt.man_bits) + kept + increment)

    if pipe is not None:
        packed, sign, *carried = pipe.cut("pack", packed, sign, *carried)

    result = Signal(fmt.width - 1, name=f"{name}_mag")
    m.d.comb += result.eq(packed[:fmt.width - 1])
    # The checks below look at the bits above the mantissa field (the exponent, any carry out
    # of it, and the sign) instead of comparing the whole word: a few LUTs instead of a
    # second carry chain behind the rounding adder's.
    high = packed[fmt.man_bits:packed_width - 1]
    negative = packed[packed_width - 1]
    if exp_hi + 1 >= fmt.exp_max_field:            # rounding may carry into the top exponent
        if fmt.has_inf:
            # packed >= inf_bits: not negative, and the exponent field all ones or carried past it
            beyond = high[:fmt.exp_bits].all()
        else:
            # packed > max_finite_bits: the NaN pattern (every bit of both fields set) or beyond
            beyond = high[:fmt.exp_bits].all() & packed[:fmt.man_bits].all()
        overflow = ~negative & (high[fmt.exp_bits:].any() | beyond)
        saturate = fmt.overflow_bits if rounding == "rne" else fmt.max_finite_bits
        with m.If(overflow):
            m.d.comb += result.eq(saturate)
    if subnormals == "flush" and may_be_tiny:
        with m.If(negative | (high == 0)):          # packed < min_normal_bits
            m.d.comb += result.eq(0)

    out = Signal(fmt.width, name=f"{name}_out")
    m.d.comb += out.eq(Cat(result, sign))
    return (out, tuple(carried)) if carry else out


class Pipe:
    """Register boundaries of a pipelined unit. A unit names its possible boundaries in order
    of priority (`order`); a unit built with `stages` = n enables the first n - 1 of them.
    `cut(name, *values)` returns the values registered (one cycle later) when boundary `name`
    is enabled, else the values themselves; every value used after a boundary must cross it.
    The registers are free-running (no enable): a unit accepts a new operand every cycle and
    its result appears `latency` cycles after the operands."""

    def __init__(self, m: Module, order: tuple[str, ...], stages: int):
        self.m = m
        self.enabled = frozenset(order[:stages - 1])
        self.latency = len(self.enabled)

    def cut(self, name: str, *values, duplicate: bool = False):
        """`duplicate`: the registers are the unit's own even where another unit's have the same
        inputs (DUPLICATE_ATTRIBUTE: Yosys would merge them), so each sits by its unit."""
        if name not in self.enabled:
            return values if len(values) != 1 else values[0]
        out = []
        for i, v in enumerate(values):
            v = Value.cast(v)
            reg = Signal(v.shape(), name=f"{name}_q{i}", reset_less=True,   # data: hw.datapath.Datapath.register
                         attrs={DATA_ATTRIBUTE: 1} | ({DUPLICATE_ATTRIBUTE: 1} if duplicate else {}))
            self.m.d.sync += reg.eq(v)
            out.append(reg)
        return tuple(out) if len(out) != 1 else out[0]


def check_stages(stages, cuts: tuple[str, ...]) -> int:
    """`stages` for a unit whose possible boundaries are `cuts`: 1 .. len(cuts) + 1."""
    top = len(cuts) + 1
    if not (isinstance(stages, int) and not isinstance(stages, bool) and 1 <= stages <= top):
        raise ValueError(f"stages: expected an int from 1 to {top}, got {stages!r}")
    return stages


def special_mux(m: Module, fmt: FloatFormat, *, finite: Value, is_nan: Value, is_inf: Value,
                inf_sign: Value, is_zero: Value, zero_sign: Value, name: str) -> Value:
    """Select the result: canonical NaN, then signed inf, then signed zero, else `finite`.
    In a format without inf an infinite result (an inf source of a conversion, x / 0) is NaN."""
    y = Signal(fmt.width, name=f"{name}_y")
    if not fmt.has_inf:
        is_nan, is_inf = is_nan | is_inf, Const(0, 1)
    with m.If(is_nan):
        m.d.comb += y.eq(fmt.qnan_bits)
    with m.Elif(is_inf):
        m.d.comb += y.eq(Cat(Const(fmt.inf_bits if fmt.has_inf else 0, fmt.width - 1), inf_sign))
    with m.Elif(is_zero):
        m.d.comb += y.eq(Cat(Const(0, fmt.width - 1), zero_sign))
    with m.Else():
        m.d.comb += y.eq(finite)
    return y
