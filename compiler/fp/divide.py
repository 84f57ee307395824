"""Floating-point division and reciprocal, by an unrolled radix-2 digit recurrence."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .common import check_stages, round_pack, special_mux, unpack
from .formats import FloatFormat, check_format, check_rounding, check_subnormals
from .recurrence import RecurrenceUnit, lowest_exponent, normalised_operands, row_segments


class FDiv(RecurrenceUnit, wiring.Component):
    """y = a / b, IEEE bit patterns of `fmt`, correctly rounded; with reciprocal=True there is
    no `a` port and y = 1 / b.

    Both significands are normalised (subnormal operands too, with subnormals="keep"), then
    p + 2 restoring division rows produce the quotient x / y in (1/2, 2) with p + 1
    significant bits and the remainder; its OR is the sticky bit, so `round_pack` rounds the
    exact quotient. 0/0 and inf/inf are NaN, x/0 is a signed inf, x/inf a signed zero.

    Why a digit recurrence (docs/float-units.md has the figures): it needs no DSP block and
    no correction step, and its rows are plain carry chains that `stages` can cut anywhere;
    Newton-Raphson would need a seed table, two or three full-width multiplies per step and
    a remainder check to be correctly rounded. `stages` > 1 (up to 8; at a target clock up
    to stage_limit) enables the register boundaries of `recurrence.CUTS`; the result appears
    `latency` = stages - 1 cycles later.
    """

    EXTRA_ROWS = 2

    def __init__(self, fmt: FloatFormat, rounding: str = "rne", subnormals: str = "keep",
                 reciprocal: bool = False, stages: int = 1):
        self.fmt = check_format(fmt)
        self.rounding = check_rounding(rounding)
        self.subnormals = check_subnormals(subnormals)
        if not isinstance(reciprocal, bool):
            raise ValueError(f"reciprocal: expected True or False, got {reciprocal!r}")
        self.reciprocal = reciprocal
        self.stages = check_stages(stages, self.CUTS[:self.stage_limit(fmt, clock=True) - 1])
        self.latency = self.stages - 1
        ports = {"b": In(fmt.width), "y": Out(fmt.width)}
        if not reciprocal:
            ports["a"] = In(fmt.width)
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        fmt, p = self.fmt, self.fmt.precision
        segment, pipe = row_segments(m, self.stages, self.rows)

        a_bits = Const(fmt.bias << fmt.man_bits, fmt.width) if self.reciprocal else self.a
        a = unpack(m, fmt, a_bits, self.subnormals, "a")
        b = unpack(m, fmt, self.b, self.subnormals, "b")
        specials = (a.is_nan | b.is_nan | (a.is_zero & b.is_zero) | (a.is_inf & b.is_inf),   # NaN
                    a.is_inf | b.is_zero, a.is_zero | b.is_inf)                             # inf, zero
        sign = a.sign ^ b.sign
        ((x, x_exp), (y, y_exp)), (sign, *specials) = normalised_operands(
            m, fmt, {"a": a, "b": b}, self.subnormals, pipe, (sign, *specials))
        exp_width = fmt.exp_bits + 4
        exp = Signal(signed(exp_width), name="q_exp")
        m.d.comb += exp.eq(x_exp - y_exp + fmt.bias)
        # segment 1 is the operand normalisation, rows are segments 2 .. rows + 1
        rem, y, exp, sign, *specials = segment(1, Cat(x, Const(0, 1)), y, exp, sign, *specials)

        # Row i: compare the partial remainder (always < 2y) with y, subtract if it fits, and
        # double it for the next row. Quotient bits come out most significant first.
        bits = []
        for i in range(self.rows):
            diff = Signal(p + 2, name=f"row{i}_diff")
            m.d.comb += diff.eq(rem - y)
            fits = ~diff[-1]                        # rem >= y (no borrow)
            nxt = Signal(p + 1, name=f"row{i}_rem")
            m.d.comb += nxt.eq(Mux(fits, diff[:p + 1], rem))
            bits.append(fits)
            if i == self.rows - 1:
                rem = nxt                           # the final remainder: its OR is sticky
                break
            rem = Cat(Const(0, 1), nxt[:p])         # doubled (< 2y)
            rem, y, exp, sign, *carry = segment(2 + i, rem, y, exp, sign, *bits, *specials)
            bits, specials = list(carry[:len(bits)]), carry[len(bits):]

        # q = floor(x * 2**(p+1) / y) has p + 2 bits; its top bit (weight 1 of x / y) is set
        # when x >= y. If not, shift left once (and take one off the exponent).
        q = Cat(*reversed(bits))
        sticky = rem.any()
        top = q[-1]
        norm = Signal(p + 3, name="q_norm")
        m.d.comb += norm.eq(Mux(top, Cat(sticky, q), Cat(sticky, Const(0, 1), q[:p + 1])))
        exp_q = Signal(signed(exp_width), name="q_exp_norm")
        m.d.comb += exp_q.eq(exp - ~top)
        lo = lowest_exponent(fmt, self.subnormals)
        hi = fmt.max_exp_field
        norm, exp_q, sign, *specials = segment(self.rows + 1, norm, exp_q, sign, *specials)
        finite, (sign, is_nan, is_inf, is_zero) = round_pack(
            m, fmt, rounding=self.rounding, subnormals=self.subnormals, sign=sign, exp=exp_q, sig=norm,
            exp_range=(lo - hi + fmt.bias - 1, hi - lo + fmt.bias), may_be_tiny=True, pipe=pipe,
            carry=(sign, *specials))
        m.d.comb += self.y.eq(special_mux(
            m, fmt, finite=finite, is_nan=is_nan, is_inf=is_inf, inf_sign=sign,
            is_zero=is_zero, zero_sign=sign, name="div"))
        return m
