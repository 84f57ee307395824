"""Conversions: integer -> float, float -> integer, float -> float."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .common import Pipe, bits_for, check_stages, leading_zeros, round_pack, shift_left, special_mux, unpack
from .formats import FloatFormat, check_format, check_rounding, check_subnormals


def to_src_mag(value: float, fmt: FloatFormat) -> int | None:
    """The magnitude bits (exponent and mantissa fields) of `value` in `fmt` when it is exactly
    a finite `fmt` value above its smallest subnormal, else None (nothing in fmt lies beyond it)."""
    import math
    mant, exp = math.frexp(value)                      # value = mant * 2**exp, 0.5 <= mant < 1
    e = exp - 1                                        # unbiased exponent of the leading one
    if e > fmt.emax or e < fmt.emin:
        return None
    frac = mant * 2 - 1                                # in [0, 1)
    man = frac * (1 << fmt.man_bits)
    if man != int(man):
        return None
    return ((e + fmt.bias) << fmt.man_bits) | int(man)


def _check_int(int_width, int_signed) -> None:
    if not (isinstance(int_width, int) and not isinstance(int_width, bool) and 1 <= int_width <= 64):
        raise ValueError(f"int_width: expected an int in 1..64, got {int_width!r}")
    if not isinstance(int_signed, bool):
        raise ValueError(f"int_signed: expected True or False, got {int_signed!r}")


def _int_shape(int_width: int, int_signed: bool):
    return signed(int_width) if int_signed else unsigned(int_width)


class IntToFloat(wiring.Component):
    """y = float(a) rounded to `fmt`; a is an int_width-bit (un)signed integer (width 1
    unsigned is bool). Integers are never tiny, so `subnormals` changes nothing; it is
    accepted so every unit takes the same options. Too large for the format: inf (rne) or
    the largest finite number (rtz). `stages` = 2 puts a register boundary after the
    normalising shift ("norm"); at a target clock (CLOCK_CUTS) up to three more: after the
    rounding add ("pack"), after the magnitude ("magnitude"), between the leading-zero count
    and the shift ("lzc"). The result appears stages - 1 cycles after the operand."""

    CUTS = ("norm", "pack", "magnitude", "lzc")
    CLOCK_CUTS = ("pack", "magnitude", "lzc")

    def __init__(self, int_width: int, int_signed: bool, fmt: FloatFormat, rounding: str = "rne",
                 subnormals: str = "keep", stages: int = 1):
        _check_int(int_width, int_signed)
        self.int_width, self.int_signed = int_width, int_signed
        self.fmt = check_format(fmt)
        self.rounding = check_rounding(rounding)
        self.subnormals = check_subnormals(subnormals)
        self.stages = check_stages(stages, self.CUTS)
        self.latency = self.stages - 1
        super().__init__({"a": In(_int_shape(int_width, int_signed)), "y": Out(fmt.width)})

    def elaborate(self, platform):
        m = Module()
        fmt, width = self.fmt, self.int_width
        negative = self.a[-1] if self.int_signed else Const(0, 1)
        magnitude = Signal(width, name="magnitude")       # |INT_MIN| still fits unsigned
        m.d.comb += magnitude.eq(Mux(negative, -self.a, self.a))
        pipe = Pipe(m, self.CUTS, self.stages)
        magnitude, negative = pipe.cut("magnitude", magnitude, negative)
        lz = leading_zeros(m, magnitude, "norm")
        is_zero = magnitude == 0
        magnitude, lz, negative, is_zero = pipe.cut("lzc", magnitude, lz, negative, is_zero)
        norm = shift_left(m, magnitude, lz, "norm")
        exp = Signal(signed(bits_for(fmt.bias + width) + 1), name="exp")
        m.d.comb += exp.eq(fmt.bias + width - 1 - lz)
        negative, exp, norm, is_zero = pipe.cut("norm", negative, exp, norm, is_zero)
        finite, (is_zero,) = round_pack(m, fmt, rounding=self.rounding, subnormals=self.subnormals,
                                        sign=negative, exp=exp, sig=norm,
                                        exp_range=(fmt.bias, fmt.bias + width - 1), may_be_tiny=False,
                                        pipe=pipe, carry=(is_zero,))
        m.d.comb += self.y.eq(special_mux(
            m, fmt, finite=finite, is_nan=Const(0, 1), is_inf=Const(0, 1), inf_sign=Const(0, 1),
            is_zero=is_zero, zero_sign=Const(0, 1), name="i2f"))
        return m


class FloatToInt(wiring.Component):
    """y = trunc(a) as an int_width-bit integer (round toward zero).

    Out of range: the result wraps, y = trunc(a) mod 2**int_width (two's complement), the
    semantics of tinygrad's PYTHON device (ctypes truncation of int(x)). NaN and +-inf give 0.
    int_width=1, int_signed=False is bool: y = (a != 0), NaN and inf give 1 (as in C); with
    subnormals="flush" a subnormal counts as zero there. (For other widths a subnormal
    truncates to 0 in both modes.) `stages` = 2 puts a register boundary after the shift
    ("shift"): the result appears one cycle after the operand. At a target clock (CLOCK_CUTS)
    also between the shift amount and the shift ("amount"): the unpack, the amount's compare
    and subtraction and a 32-bit shift in one stage were a softmax MLP's critical path at
    target_mhz 150 (exp2's range reduction, 12.2 ns).
    """

    CUTS = ("shift", "amount")
    CLOCK_CUTS = ("amount",)

    def __init__(self, fmt: FloatFormat, int_width: int, int_signed: bool, subnormals: str = "keep",
                 stages: int = 1):
        self.fmt = check_format(fmt)
        _check_int(int_width, int_signed)
        self.int_width, self.int_signed = int_width, int_signed
        self.subnormals = check_subnormals(subnormals)
        self.stages = check_stages(stages, self.CUTS)
        self.latency = self.stages - 1
        super().__init__({"a": In(fmt.width), "y": Out(_int_shape(int_width, int_signed))})

    @property
    def is_bool(self) -> bool:
        return self.int_width == 1 and not self.int_signed

    def elaborate(self, platform):
        m = Module()
        fmt, width = self.fmt, self.int_width
        pipe = Pipe(m, self.CUTS, self.stages)
        x = unpack(m, fmt, self.a, self.subnormals, "a")
        if self.is_bool:
            m.d.comb += self.y.eq(pipe.cut("shift", pipe.cut("amount", x.mag != 0)))
            return m
        # |a| = sig * 2**(exp - bias - man_bits): shift sig left by exp - bias into a word with
        # man_bits fraction bits, keep the integer bits. Shifting everything out is the
        # wrap-around for huge values (a multiple of 2**int_width reads 0).
        below_one = x.exp < fmt.bias
        amount = Signal(fmt.exp_bits, name="int_shift")
        m.d.comb += amount.eq(Mux(below_one, 0, x.exp - fmt.bias))
        sig, amount, below_one, special, sign = pipe.cut("amount", x.sig, amount, below_one, x.is_nan | x.is_inf, x.sign)
        shifted = shift_left(m, Cat(sig, Const(0, width - 1)), amount, "int")
        magnitude = Signal(width, name="int_magnitude")
        m.d.comb += magnitude.eq(shifted[fmt.man_bits:])
        zero = special | below_one
        magnitude, zero, sign = pipe.cut("shift", magnitude, zero, sign)
        with m.If(zero):
            m.d.comb += self.y.eq(0)
        with m.Else():
            m.d.comb += self.y.eq(Mux(sign, -magnitude, magnitude))
        return m


class FloatToFloat(wiring.Component):
    """y = a converted from `src_fmt` to `dst_fmt`.

    Exact when every source value fits; otherwise rounded with `rounding`. Overflow gives inf
    (rne) or the largest finite number (rtz); inf stays inf; NaN gives the canonical quiet NaN.
    subnormals="flush": subnormal inputs read as signed zeros and results below the smallest
    normal (after rounding, see `round_pack`) become signed zeros. `stages` = 2 puts a
    register boundary before the rounding ("norm"); at a target clock (CLOCK_CUTS) up to two
    more, after the rounding add ("pack") and on the operand as it arrives ("inputs", the unit's
    own copy): the result appears stages - 1 cycles after the operand.

    emulated=True is tinygrad's software conversion (tinygrad/codegen/decomp/dtype.py `f2f`,
    how its PYTHON device stores and loads half below Python 3.12): subnormal inputs read as
    signed zeros ("denormals are zero"), and a finite input beyond dst's largest finite value
    becomes inf and one below dst's smallest normal a signed zero, both decided before any
    rounding (65504 < |x| < 65520 is inf, 2**-14 * (1 - 2**-12) is 0 in fp16, where IEEE
    rounding gives 65504 and 2**-14); the rest rounds to nearest even.
    """

    CUTS = ("norm", "pack", "inputs")
    CLOCK_CUTS = ("pack", "inputs")

    def __init__(self, src_fmt: FloatFormat, dst_fmt: FloatFormat, rounding: str = "rne",
                 subnormals: str = "keep", stages: int = 1, emulated: bool = False):
        self.src_fmt = check_format(src_fmt, "src_fmt")
        self.dst_fmt = check_format(dst_fmt, "dst_fmt")
        self.rounding = check_rounding(rounding)
        self.subnormals = check_subnormals(subnormals)
        self.stages = check_stages(stages, self.CUTS)
        self.latency = self.stages - 1
        if not isinstance(emulated, bool):
            raise ValueError(f"emulated: expected True or False, got {emulated!r}")
        if emulated and not (self.dst_fmt.has_inf and self.src_fmt.has_inf):
            raise ValueError("emulated: tinygrad's software conversion is defined between formats with inf")
        self.emulated = emulated
        super().__init__({"a": In(src_fmt.width), "y": Out(dst_fmt.width)})

    def elaborate(self, platform):
        m = Module()
        src, dst = self.src_fmt, self.dst_fmt
        pipe = Pipe(m, self.CUTS, self.stages)
        a = pipe.cut("inputs", self.a, duplicate=True)
        x = unpack(m, src, a, "flush" if self.emulated else self.subnormals, "a")
        specials = (x.is_nan, x.is_inf, x.is_zero, x.sign)
        if self.emulated:
            specials = self._emulated_range(x)
        if src == dst:          # only the subnormal policy and NaN canonicalisation apply
            finite, *specials = pipe.cut("norm", Cat(x.mag, x.sign), *specials)
            finite, *specials = pipe.cut("pack", finite, *specials)
        else:
            finite, specials = self._convert(m, pipe, x, specials)
        is_nan, is_inf, is_zero, sign = specials
        m.d.comb += self.y.eq(special_mux(
            m, dst, finite=finite, is_nan=is_nan, is_inf=is_inf, inf_sign=sign,
            is_zero=is_zero, zero_sign=sign, name="f2f"))
        return m

    def _emulated_range(self, x):
        """(is_nan, is_inf, is_zero, sign) with tinygrad's range checks before rounding: the
        magnitude bits compare as the magnitudes do, so two constant compares decide them."""
        src, dst = self.src_fmt, self.dst_fmt
        finite = ~(x.is_nan | x.is_inf)
        big = to_src_mag(dst.max_finite, src)
        tiny = to_src_mag(dst.min_normal, src)
        over = finite & (x.mag > big) if big is not None else Const(0, 1)
        under = (x.mag < tiny) if tiny is not None else Const(0, 1)
        return x.is_nan, x.is_inf | over, x.is_zero | under, x.sign

    def _convert(self, m, pipe, x, specials):
        src, dst = self.src_fmt, self.dst_fmt
        keep = self.subnormals == "keep"
        exp_width = max(src.exp_bits, dst.exp_bits) + 3
        rebias = dst.bias - src.bias
        # A source subnormal is (exp 1, leading zeros). Re-biased it is still a valid
        # round_pack input if it lands on exponent 1 or below; when the destination reaches
        # lower (e.g. fp16 -> fp32) it becomes a normal number there and must be normalised.
        normalise = keep and src.emin > dst.emin
        if normalise:
            lz = leading_zeros(m, x.sig, "norm")
            sig = shift_left(m, x.sig, lz, "norm")
            exp = Signal(signed(exp_width), name="exp")
            m.d.comb += exp.eq(x.exp + rebias - lz)
            exp_lo = 1 - (src.precision - 1) + rebias
        else:
            sig = x.sig
            exp = Signal(signed(exp_width), name="exp")
            m.d.comb += exp.eq(x.exp + rebias)
            exp_lo = 1 + rebias
        exp_hi = src.max_exp_field + rebias
        if self.emulated:       # a value below dst's smallest normal is a zero (_emulated_range)
            exp_lo = max(exp_lo, 1)
        sig, exp, *specials = pipe.cut("norm", sig, exp, *specials)
        finite, (*specials,) = round_pack(m, dst, rounding=self.rounding, subnormals=self.subnormals,
                                          sign=specials[-1], exp=exp, sig=sig, exp_range=(exp_lo, exp_hi),
                                          may_be_tiny=exp_lo < 1, pipe=pipe, carry=tuple(specials))
        return finite, specials
