"""Floating-point addition and subtraction."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .common import Pipe, check_stages, leading_zeros, round_pack, shift_left, shift_right_sticky, special_mux, unpack
from .formats import FloatFormat, check_format, check_rounding, check_subnormals

# Alignment keeps three bits below the significand (guard, round, sticky): enough for correct
# rounding after a one-bit normalisation in either direction.
_EXTRA = 3


class FAdd(wiring.Component):
    """y = a + b (or a - b with subtract=True), IEEE bit patterns of `fmt`, combinational.

    Single-path adder: order operands by magnitude, align the smaller with a sticky right
    shift, add or subtract, normalise with one leading-zero count and left shift (limited so
    the exponent never drops below 1, which leaves subnormal results on their grid), round.
    An exact zero sum is +0 unless both operands are -0 (IEEE, for rne and rtz); inf - inf is NaN.

    `stages` > 1 pipelines it (see common.Pipe): register boundaries after the aligned add
    ("sum"), after the normalising shift ("norm"), after the operand swap ("swap"), between
    the leading-zero count and the normalising shift ("lzc"), between the aligning shift
    and the add ("align"), and at a target clock only (CLOCK_CUTS, hw.pipeline.float_stages)
    after the rounding add ("pack"), between the magnitude compare and the operand swap it
    selects ("order"), on the operands as they arrive ("inputs": the unit's own copies, where
    another unit reads the same value) and inside the leading-zero count, after its 8-bit
    slices ("count"), enabled in that order; the result appears
    `latency` = stages - 1 cycles after the operands. `clock`: built for a target clock, where
    an adder has all its boundaries unless it is a ring's with fewer rows than that (a float
    sum's, passes/interleave): it enables them in CLOCK_ORDER, which puts "pack" before "sum".
    Placed alone at 6 stages (fp32, LFE5U-25F, seeds 1 / 2): with "sum" 95.7 / 99.3 MHz, its
    rounding add and result multiplexer in one stage; with "pack" 106.6 / 108.8, the add and the
    leading-zero count in one.
    """

    CUTS = ("sum", "norm", "swap", "lzc", "align", "pack", "order", "inputs", "count")
    CLOCK_CUTS = ("pack", "order", "inputs", "count")
    CLOCK_ORDER = ("norm", "swap", "lzc", "align", "pack", "sum", "order", "inputs", "count")

    def __init__(self, fmt: FloatFormat, rounding: str = "rne", subnormals: str = "keep",
                 subtract: bool = False, stages: int = 1, clock: bool = False):
        self.fmt = check_format(fmt)
        self.rounding = check_rounding(rounding)
        self.subnormals = check_subnormals(subnormals)
        if not isinstance(subtract, bool):
            raise ValueError(f"subtract: expected True or False, got {subtract!r}")
        self.subtract = subtract
        self.stages = check_stages(stages, self.CUTS)
        self.latency = self.stages - 1
        self.order = self.CLOCK_ORDER if clock else self.CUTS
        super().__init__({"a": In(fmt.width), "b": In(fmt.width), "y": Out(fmt.width)})

    def elaborate(self, platform):
        m = Module()
        fmt = self.fmt
        pipe = Pipe(m, self.order, self.stages)
        a_bits, b_bits = pipe.cut("inputs", self.a, self.b, duplicate=True)
        b_bits = b_bits ^ fmt.sign_mask if self.subtract else b_bits
        a = unpack(m, fmt, a_bits, self.subnormals, "a")
        b = unpack(m, fmt, b_bits, self.subnormals, "b")
        # the special cases, decided from the operands alone, travel along with the value
        specials = (a.is_nan | b.is_nan | (a.is_inf & b.is_inf & (a.sign ^ b.sign)),   # NaN
                    a.is_inf | b.is_inf, Mux(a.is_inf, a.sign, b.sign),             # inf, its sign
                    # Exact zero: x + (-x) is +0 in rne and rtz; only (-0) + (-0) stays -0.
                    a.sign & b.sign)

        big_sign, big_exp, total, specials = self._add_aligned(m, pipe, a, b, specials)
        # pipelined: the shift cap as a mask beside the add (no compare behind the count);
        # combinational: a compare after the count, which takes fewer LUTs (810 vs 930 for fp32)
        cap = self._shift_cap(m, big_exp, len(total)) if self.stages > 1 else None
        if cap is not None:
            big_sign, big_exp, total, cap, *specials = pipe.cut("sum", big_sign, big_exp, total, cap, *specials)
        is_zero = total == 0
        exp, norm, (big_sign, is_zero, *specials) = self._normalise(m, pipe, big_exp, total, cap,
                                                                    (big_sign, is_zero, *specials))
        big_sign, exp, norm, is_zero, *specials = pipe.cut("norm", big_sign, exp, norm, is_zero, *specials)
        finite, (is_zero, *specials) = round_pack(
            m, fmt, rounding=self.rounding, subnormals=self.subnormals, sign=big_sign, exp=exp, sig=norm,
            exp_range=(1, fmt.max_exp_field + 1), may_be_tiny=True, pipe=pipe, carry=(is_zero, *specials))
        is_nan, is_inf, inf_sign, zero_sign = specials
        m.d.comb += self.y.eq(special_mux(
            m, fmt, finite=finite, is_nan=is_nan, is_inf=is_inf, inf_sign=inf_sign,
            is_zero=is_zero, zero_sign=zero_sign, name="add"))
        return m

    def _add_aligned(self, m, pipe, a, b, specials):
        """Order by magnitude, align the smaller operand, add or subtract the significands.

        Returns the sign and exponent of the larger operand and the sum, precision+4 bits
        wide with its binary point where the larger operand's leading one sat plus one carry
        bit on top, and _EXTRA guard bits below (the lowest one is sticky).
        """
        p = self.fmt.precision
        a_big = Signal(name="a_big")
        # both exponent differences beside the magnitude compare, then a pick: no subtracter behind it
        a_minus_b, b_minus_a = (Signal(self.fmt.exp_bits, name=f"align_{n}") for n in ("ab", "ba"))
        m.d.comb += [a_big.eq(a.mag >= b.mag), a_minus_b.eq(a.exp - b.exp), b_minus_a.eq(b.exp - a.exp)]
        eff_sub = a.sign ^ b.sign
        # at a target clock the compare is registered before its flag selects every bit of both
        a_sign, a_exp, a_sig, b_sign, b_exp, b_sig, a_big, a_minus_b, b_minus_a, eff_sub, *specials = pipe.cut(
            "order", a.sign, a.exp, a.sig, b.sign, b.exp, b.sig, a_big, a_minus_b, b_minus_a, eff_sub, *specials)
        big_sign = Mux(a_big, a_sign, b_sign)
        big_exp = Signal(self.fmt.exp_bits, name="big_exp")
        big_sig = Signal(p, name="big_sig")
        small_sig = Signal(p, name="small_sig")
        m.d.comb += [big_exp.eq(Mux(a_big, a_exp, b_exp)), big_sig.eq(Mux(a_big, a_sig, b_sig)),
                     small_sig.eq(Mux(a_big, b_sig, a_sig))]
        distance = Signal(self.fmt.exp_bits, name="align_distance")
        m.d.comb += distance.eq(Mux(a_big, a_minus_b, b_minus_a))
        big_sign, big_exp, big_sig, small_sig, distance, eff_sub, *specials = pipe.cut(
            "swap", big_sign, big_exp, big_sig, small_sig, distance, eff_sub, *specials)
        aligned, sticky = shift_right_sticky(m, Cat(Const(0, _EXTRA), small_sig), distance, "align")
        big_sign, big_exp, big_sig, aligned, sticky, eff_sub, *specials = pipe.cut(
            "align", big_sign, big_exp, big_sig, aligned, sticky, eff_sub, *specials)

        # One adder: subtraction adds the one's complement with carry-in 1. Since the big
        # operand has the larger magnitude, the difference is never negative.
        width = p + _EXTRA + 1
        addend = Cat(aligned | sticky, Const(0, 1))
        total = Signal(width, name="sum")
        m.d.comb += total.eq(Cat(Const(0, _EXTRA), big_sig) + Mux(eff_sub, ~addend, addend) + eff_sub)
        return big_sign, big_exp, total, specials

    @staticmethod
    def _shift_cap(m, big_exp, width):
        """A one-hot word with its bit `big_exp` places from the top (0 if big_exp >= width):
        OR-ed into the sum before the leading-zero count, it caps the count at big_exp without
        a compare behind the count. Depends on the exponent only, so it is built beside the add."""
        cap = Signal(width, name="norm_cap")
        for i in range(width):
            m.d.comb += cap[width - 1 - i].eq(big_exp == i)
        return cap

    def _normalise(self, m, pipe, big_exp, total, cap, carry):
        """Shift the leading one to the top; the top bit has exponent big_exp + 1.

        The shift is capped at big_exp so the exponent stays >= 1: a result below the smallest
        normal is then exactly a subnormal (such a result is always exact). Values in `carry`
        cross the optional "lzc" boundary with it and are returned.
        """
        if cap is None:
            lz = leading_zeros(m, total, "norm")
            shift = Signal(len(lz), name="norm_shift")
            m.d.comb += shift.eq(Mux(lz > big_exp, big_exp, lz))
        else:
            held = (big_exp, total, *carry)

            def cut(slices: list) -> list:       # at a target clock: the slices' counts registered
                nonlocal held
                out = pipe.cut("count", *slices, *held)
                held = out[len(slices):]
                return list(out[:len(slices)])
            shift = leading_zeros(m, total | cap, "norm", cut=cut)
            big_exp, total, *carry = held
        big_exp, total, shift, *carry = pipe.cut("lzc", big_exp, total, shift, *carry)
        norm = shift_left(m, total, shift, "norm")
        exp = Signal(signed(self.fmt.exp_bits + 2), name="norm_exp")
        m.d.comb += exp.eq(big_exp + 1 - shift)
        return exp, norm, carry
