"""Floating-point square root, by an unrolled radix-2 digit recurrence."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .common import check_stages, round_pack, special_mux, unpack
from .formats import FloatFormat, check_format, check_rounding, check_subnormals
from .recurrence import RecurrenceUnit, lowest_exponent, normalised_operands, row_segments


class FSqrt(RecurrenceUnit, wiring.Component):
    """y = sqrt(a), IEEE bit patterns of `fmt`, correctly rounded.

    The significand (normalised, subnormals too with subnormals="keep") is doubled when the
    exponent is odd, so the radicand M is in [1, 4) and the exponent halves exactly; p + 1
    restoring square-root rows give floor(sqrt(M * 2**(2p))), p significant bits and a guard
    bit, and the final remainder's OR is the sticky bit. The result is always a normal
    number and never overflows. sqrt(-0) = -0, sqrt(+inf) = +inf, sqrt(x < 0) and
    sqrt(-inf) are NaN. `stages` > 1 (up to 8; at a target clock up to stage_limit) enables
    the register boundaries of `recurrence.CUTS`; the result appears `latency` = stages - 1
    cycles later.
    """

    EXTRA_ROWS = 1

    def __init__(self, fmt: FloatFormat, rounding: str = "rne", subnormals: str = "keep", stages: int = 1):
        self.fmt = check_format(fmt)
        self.rounding = check_rounding(rounding)
        self.subnormals = check_subnormals(subnormals)
        self.stages = check_stages(stages, self.CUTS[:self.stage_limit(fmt, clock=True) - 1])
        self.latency = self.stages - 1
        super().__init__({"a": In(fmt.width), "y": Out(fmt.width)})

    def elaborate(self, platform):
        m = Module()
        fmt, p = self.fmt, self.fmt.precision
        segment, pipe = row_segments(m, self.stages, self.rows)

        a = unpack(m, fmt, self.a, self.subnormals, "a")
        specials = (a.is_nan | (a.sign & ~a.is_zero), a.is_inf, a.is_zero, a.sign)   # NaN, inf, zero, its sign
        ((x, x_exp),), specials = normalised_operands(m, fmt, {"a": a}, self.subnormals, pipe, tuple(specials))
        # unbiased exponent E = x_exp - bias; the bias is odd, so E is odd when x_exp is even
        odd = ~x_exp[0]
        radicand = Signal(2 * p + 2, name="radicand")          # M * 2**(2p), M in [1, 4)
        m.d.comb += radicand.eq(Mux(odd, Cat(Const(0, p + 2), x), Cat(Const(0, p + 1), x)))
        exp = Signal(signed(fmt.exp_bits + 3), name="r_exp")
        m.d.comb += exp.eq(((x_exp - fmt.bias) >> 1) + fmt.bias)    # floor(E / 2), biased
        radicand, exp, *specials = segment(1, radicand, exp, *specials)

        # Row i brings down the next two radicand bits and tries root digit 1: the remainder
        # r = X_i - q**2 (X_i the radicand's top 2(i+1) bits) must stay >= 4q + 1.
        q, rem = Const(0, 1), Const(0, 1)
        for i in range(self.rows):
            top = 2 * p + 2 - 2 * i
            width = i + 3
            trial = Signal(width, name=f"row{i}_rem_in")
            m.d.comb += trial.eq(Cat(radicand[top - 2:top], rem))
            diff = Signal(width + 1, name=f"row{i}_diff")
            m.d.comb += diff.eq(trial - Cat(Const(1, 2), q))
            fits = ~diff[-1]
            nxt = Signal(i + 2, name=f"row{i}_rem")           # < 2q + 1 after this row
            m.d.comb += nxt.eq(Mux(fits, diff, trial))
            q_next = Signal(i + 1, name=f"row{i}_root")
            m.d.comb += q_next.eq(Cat(fits, q) if i else fits)
            q, rem = q_next, nxt
            if i < self.rows - 1:
                rem, q, radicand, exp, *specials = segment(2 + i, rem, q, radicand, exp, *specials)

        norm = Signal(p + 2, name="r_norm")                    # root (top bit set), sticky
        m.d.comb += norm.eq(Cat(rem.any(), q))
        norm, exp, *specials = segment(self.rows + 1, norm, exp, *specials)
        lo, hi = lowest_exponent(fmt, self.subnormals), fmt.max_exp_field
        finite, (is_nan, is_inf, is_zero, sign) = round_pack(
            m, fmt, rounding=self.rounding, subnormals=self.subnormals, sign=Const(0, 1), exp=exp, sig=norm,
            exp_range=((lo - fmt.bias) // 2 + fmt.bias, (hi - fmt.bias) // 2 + fmt.bias), may_be_tiny=False,
            pipe=pipe, carry=tuple(specials))
        m.d.comb += self.y.eq(special_mux(
            m, fmt, finite=finite, is_nan=is_nan, is_inf=is_inf, inf_sign=Const(0, 1),
            is_zero=is_zero, zero_sign=sign, name="sqrt"))
        return m
