"""Floating-point truncation to an integer value (round toward zero), float in, float out."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .common import bits_for, check_stages, shift_left, unpack
from .formats import FloatFormat, check_format, check_subnormals


class FTrunc(wiring.Component):
    """y = trunc(a) (numpy.trunc), IEEE bit patterns of `fmt`, combinational.

    Exact, so it needs no rounding mode: the mantissa bits below the binary point are
    cleared. |a| < 1 (subnormals included, in both subnormal modes) gives a zero of a's sign;
    integers, inf and values with no fraction bits pass through; NaN gives the canonical
    quiet NaN. `subnormals` is accepted so every unit takes the same options (a subnormal
    truncates to a signed zero either way). Not pipelined (`stages` 1 only).
    """

    CUTS = ()

    def __init__(self, fmt: FloatFormat, subnormals: str = "keep", stages: int = 1):
        self.fmt = check_format(fmt)
        self.subnormals = check_subnormals(subnormals)
        self.stages = check_stages(stages, self.CUTS)
        self.latency = 0
        super().__init__({"a": In(fmt.width), "y": Out(fmt.width)})

    def elaborate(self, platform):
        m = Module()
        fmt = self.fmt
        a = unpack(m, fmt, self.a, self.subnormals, "a")
        exp_field = self.a[fmt.man_bits:fmt.width - 1]
        below_one = exp_field < fmt.bias
        # fraction bits of a value with exponent field e >= bias: the lowest man_bits - (e - bias)
        fraction_bits = Signal(bits_for(fmt.man_bits), name="fraction_bits")
        m.d.comb += fraction_bits.eq(Mux(exp_field >= fmt.bias + fmt.man_bits, 0, fmt.bias + fmt.man_bits - exp_field))
        keep_mask = shift_left(m, Const(fmt.man_mask, fmt.man_bits), fraction_bits, "trunc")
        with m.If(a.is_nan):
            m.d.comb += self.y.eq(fmt.qnan_bits)
        with m.Elif(below_one):
            m.d.comb += self.y.eq(Cat(Const(0, fmt.width - 1), a.sign))
        with m.Else():
            m.d.comb += self.y.eq(Cat(self.a[:fmt.man_bits] & keep_mask, exp_field, a.sign))
        return m
