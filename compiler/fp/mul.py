"""Floating-point multiplication."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .common import Pipe, check_stages, denormalise, leading_zeros, round_pack, shift_left, special_mux, unpack
from .formats import FloatFormat, check_format, check_rounding, check_subnormals


class FMul(wiring.Component):
    """y = a * b, IEEE bit patterns of `fmt`, combinational.

    With subnormals="keep" a subnormal operand is normalised before the multiplier, so the
    2p-bit product always has its leading one in the top two bits; `round_pack` rounds it
    and shifts tiny results onto the subnormal grid. 0 * inf is NaN.

    `stages` > 1 pipelines it (see common.Pipe): register boundaries after the significand
    product ("product"), before the multiplier ("operands"), between the denormalising shift
    and the rounding add ("round"), after that add ("pack"), before the denormalising
    shift ("denorm"), after four half-width partial products ("partial"), between the
    leading-zero count and the shift that normalise a subnormal operand ("subnorm") and, at a
    target clock only (CLOCK_CUTS), after the sum of the two middle partial products ("sums")
    and on the operands as they arrive ("inputs", the unit's own copies), enabled in that order;
    the result appears
    `latency` = stages - 1 cycles after the operands.
    """

    CUTS = ("product", "operands", "round", "pack", "denorm", "partial", "subnorm", "sums", "inputs")
    CLOCK_CUTS = ("sums", "inputs")

    def __init__(self, fmt: FloatFormat, rounding: str = "rne", subnormals: str = "keep", stages: int = 1):
        self.fmt = check_format(fmt)
        self.rounding = check_rounding(rounding)
        self.subnormals = check_subnormals(subnormals)
        self.stages = check_stages(stages, self.CUTS)
        self.latency = self.stages - 1
        super().__init__({"a": In(fmt.width), "b": In(fmt.width), "y": Out(fmt.width)})

    def elaborate(self, platform):
        m = Module()
        fmt = self.fmt
        pipe = Pipe(m, self.CUTS, self.stages)
        a_bits, b_bits = pipe.cut("inputs", self.a, self.b, duplicate=True)
        a = unpack(m, fmt, a_bits, self.subnormals, "a")
        b = unpack(m, fmt, b_bits, self.subnormals, "b")

        # exponent of the product before normalisations, and the special cases
        exp_ab = Signal(signed(fmt.exp_bits + 4), name="exp_ab")
        m.d.comb += exp_ab.eq(a.exp + b.exp - fmt.bias)
        sign = a.sign ^ b.sign
        specials = (a.is_nan | b.is_nan | (a.is_inf & b.is_zero) | (b.is_inf & a.is_zero),   # NaN
                    a.is_inf | b.is_inf, a.is_zero | b.is_zero)                             # inf, zero
        if self.subnormals == "keep":
            x_sig, y_sig, lz, lz_max, (exp_ab, sign, *specials) = self._normalise_operand(
                m, pipe, a, b, (exp_ab, sign, *specials))
        else:
            x_sig, y_sig, exp_ab, sign, *specials = pipe.cut("subnorm", a.sig, b.sig, exp_ab, sign, *specials)
            lz, lz_max = Const(0, 1), 0
        exp_sum = Signal(signed(fmt.exp_bits + 4), name="exp_sum")
        m.d.comb += exp_sum.eq(exp_ab - lz)
        x_sig, y_sig, exp_sum, sign, *specials = pipe.cut("operands", x_sig, y_sig, exp_sum, sign, *specials)
        product = Signal(2 * fmt.precision, name="product")
        if "partial" in pipe.enabled:
            # four half-width products (one DSP block each), registered, then their sum
            h = (fmt.precision + 1) // 2
            partials = [x_sig[:h] * y_sig[:h], x_sig[:h] * y_sig[h:], x_sig[h:] * y_sig[:h], x_sig[h:] * y_sig[h:]]
            (ll, lh, hl, hh), exp_sum, sign, *specials = (lambda *r: (r[:4], *r[4:]))(
                *pipe.cut("partial", *partials, exp_sum, sign, *specials))
            # ll and hh << 2h do not overlap: their sum is a concatenation, and one adder adds
            # the middle products' sum (registered between the two at a target clock)
            middle = Signal(2 * h + 1, name="middle")
            m.d.comb += middle.eq(lh + hl)
            ll, hh, middle, exp_sum, sign, *specials = pipe.cut("sums", ll, hh, middle, exp_sum, sign, *specials)
            m.d.comb += product.eq(Cat(ll[:2 * h], hh) + (middle << h))
        elif fmt.precision <= 4:
            # fp8: a few partial products in LUTs (Yosys would give a $mul of any size a DSP block)
            m.d.comb += product.eq(sum(Mux(y_sig[i], x_sig << i, 0) for i in range(fmt.precision)))
        else:
            m.d.comb += product.eq(x_sig * y_sig)
        # The product's exponent is exp_sum or exp_sum + 1 (below). With the product registered:
        # both, with their shifts onto the subnormal grid, computed beside the multiplier, so its
        # top bit only picks one (a sum, a compare and a subtraction after that register were
        # FMul's slowest stage at a target clock); combinational, one sum after it (fewer LUTs).
        exp_lo = 1 + 1 - fmt.bias - lz_max
        exp_hi = 2 * fmt.max_exp_field - fmt.bias + 1
        early = "product" in pipe.enabled
        candidates = []
        for t in ((0, 1) if early else ()):
            exp_t = Signal(signed(fmt.exp_bits + 4), name=f"exp_{t}")
            m.d.comb += exp_t.eq(exp_sum + t)
            candidates += denormalise(m, self.subnormals, exp_t, exp_lo, f"mul_{t}")
        carried = candidates or [exp_sum]                  # the candidates replace the sum
        product, sign, *rest = pipe.cut("product", product, sign, *carried, *specials)
        carried, specials = rest[:len(carried)], rest[len(carried):]

        # Normal significands are in [1, 2), so the product is in [1, 4): its leading one is
        # in bit 2p-1 (weight 2**1) or bit 2p-2. Shift it to the top, keeping p significand
        # bits, a guard bit, and one sticky bit for everything below (the OR of the bits that
        # end up below the guard bit either way, then the one bit that depends on the shift).
        p = fmt.precision
        top = product[-1]
        low = product[:p - 2].any()
        norm = Signal(p + 2, name="norm")
        m.d.comb += norm.eq(Mux(top, Cat(low | product[p - 2], product[p - 1:]),
                                Cat(low, product[p - 2:2 * p - 1])))
        exp = Signal(signed(fmt.exp_bits + 4), name="exp")
        denormalised = None
        if early:
            amount0, exp0, amount1, exp1 = carried
            m.d.comb += exp.eq(Mux(top, exp1, exp0))
            denormalised = Mux(top, amount1, amount0)
        else:
            m.d.comb += exp.eq(carried[0] + top)

        finite, (sign, is_nan, is_inf, is_zero) = round_pack(
            m, fmt, rounding=self.rounding, subnormals=self.subnormals, sign=sign, exp=exp, sig=norm,
            exp_range=(exp_lo, exp_hi), may_be_tiny=True, pipe=pipe, carry=(sign, *specials),
            denormalised=denormalised)
        m.d.comb += self.y.eq(special_mux(
            m, fmt, finite=finite, is_nan=is_nan, is_inf=is_inf, inf_sign=sign,
            is_zero=is_zero, zero_sign=sign, name="mul"))
        return m

    def _normalise_operand(self, m, pipe, a, b, carry):
        """Normalise the subnormal operand's significand (a if it is subnormal, else b).

        Only one normaliser is needed: if both operands are subnormal the product is far
        below the smallest subnormal whatever is normalised, and round_pack's denormalising
        shift turns it into a sticky bit. Returns (normalised significand, other
        significand, leading-zero count, its maximum, `carry` after the optional "subnorm"
        boundary between the count and the shift).
        """
        p = self.fmt.precision
        a_sub = ~a.sig[-1]
        pick = Signal(p, name="sub_sig")
        other = Signal(p, name="other_sig")
        m.d.comb += [pick.eq(Mux(a_sub, a.sig, b.sig)), other.eq(Mux(a_sub, b.sig, a.sig))]
        # both operands' counts beside the pick, then a pick of the count: no multiplexer before it
        lz = Signal(range(p + 1), name="sub_lz")
        m.d.comb += lz.eq(Mux(a_sub, leading_zeros(m, a.sig, "sub_a"), leading_zeros(m, b.sig, "sub_b")))
        pick, other, lz, *carry = pipe.cut("subnorm", pick, other, lz, *carry)
        return shift_left(m, pick, lz, "sub"), other, lz, p, carry
