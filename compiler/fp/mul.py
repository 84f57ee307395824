"""Floating-point multiplication."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .common import leading_zeros, round_pack, shift_left, special_mux, unpack
from .formats import FloatFormat, check_format, check_rounding, check_subnormals


class FMul(wiring.Component):
    """y = a * b, IEEE bit patterns of `fmt`, combinational.

    The 2p-bit significand product is normalised, then `round_pack` rounds it (and, with
    subnormals="keep", shifts tiny results onto the subnormal grid). 0 * inf is NaN.
    """

    def __init__(self, fmt: FloatFormat, rounding: str = "rne", subnormals: str = "keep"):
        self.fmt = check_format(fmt)
        self.rounding = check_rounding(rounding)
        self.subnormals = check_subnormals(subnormals)
        super().__init__({"a": In(fmt.width), "b": In(fmt.width), "y": Out(fmt.width)})

    def elaborate(self, platform):
        m = Module()
        fmt = self.fmt
        a = unpack(m, fmt, self.a, self.subnormals, "a")
        b = unpack(m, fmt, self.b, self.subnormals, "b")

        product = Signal(2 * fmt.precision, name="product")
        m.d.comb += product.eq(a.sig * b.sig)
        # Biased exponent of the product's top bit (bit 2p-1): the significands are 1.x
        # numbers, so their product has weight 2**1 at that bit.
        top_exp = Signal(signed(fmt.exp_bits + 3), name="top_exp")
        m.d.comb += top_exp.eq(a.exp + b.exp - (fmt.bias - 1))

        if self.subnormals == "keep":
            exp, norm, exp_range = self._normalise_keep(m, product, top_exp)
        else:
            exp, norm, exp_range = self._normalise_flush(m, product, top_exp)
        sign = a.sign ^ b.sign
        finite = round_pack(m, fmt, rounding=self.rounding, subnormals=self.subnormals,
                            sign=sign, exp=exp, sig=norm, exp_range=exp_range, may_be_tiny=True)
        m.d.comb += self.y.eq(special_mux(
            m, fmt, finite=finite,
            is_nan=a.is_nan | b.is_nan | (a.is_inf & b.is_zero) | (b.is_inf & a.is_zero),
            is_inf=a.is_inf | b.is_inf, inf_sign=sign,
            is_zero=a.is_zero | b.is_zero, zero_sign=sign, name="mul"))
        return m

    def _exp_bounds(self):
        fmt = self.fmt
        return 1 + 1 - (fmt.bias - 1), 2 * (fmt.exp_max_field - 1) - (fmt.bias - 1)

    def _normalise_keep(self, m, product, top_exp):
        """Left-shift out leading zeros (there are many only if an input is subnormal), but
        never below exponent 1; results that are still tiny are denormalised by round_pack.

        A subnormal times a normal has at most p leading zeros, so counting over the top p+1
        bits is enough; two subnormals underflow (top_exp < 1) and are not shifted at all.
        """
        p = self.fmt.precision
        lz = leading_zeros(m, product[p - 1:], "norm")
        limit = Signal(len(top_exp), name="norm_limit")
        m.d.comb += limit.eq(Mux(top_exp > 1, top_exp - 1, 0))
        shift = Signal(len(lz), name="norm_shift")
        m.d.comb += shift.eq(Mux(lz > limit, limit, lz))
        norm = shift_left(m, product, shift, "norm")
        exp = Signal(signed(len(top_exp) + 1), name="norm_exp")
        m.d.comb += exp.eq(top_exp - shift)
        return exp, norm, self._exp_bounds()

    def _normalise_flush(self, m, product, top_exp):
        """Normal inputs give a product in [1, 4): at most a one-bit shift, no exponent limit
        (flush mode rounds as if the exponent range were unbounded, then flushes)."""
        top = product[-1]
        norm = Signal(len(product), name="norm")
        m.d.comb += norm.eq(Mux(top, product, product << 1))
        exp = Signal(signed(len(top_exp) + 1), name="norm_exp")
        m.d.comb += exp.eq(top_exp - 1 + top)
        lo, hi = self._exp_bounds()
        return exp, norm, (lo - 1, hi)
