"""The exact product of two narrow floats in a wider format: y = float(a) * float(b).

tinygrad multiplies fp8 values in float32 when the model casts them first (an FP8 layer whose
products are summed in float32, dse/models/quantize.py): the kernel is CAST, CAST, MUL in float32.
Two fp8 significands have 4 bits each, so every such product is exact in float32, and a full
float32 multiplier (24 x 24 bits, 4 DSP blocks, ~850 LUTs) behind two conversions computes
what a 4 x 4 multiplier and an exponent add give: `FWideMul` is that unit. It equals
FMul(dst)(FloatToFloat(src, dst)(a), FloatToFloat(src, dst)(b)) bit for bit, in every rounding
mode (nothing rounds), for every input (tests/test_fp8_units.py checks all 65,536 pairs).
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .common import Pipe, bits_for, leading_zeros, shift_left, special_mux, unpack
from .formats import FloatFormat, check_format, check_subnormals

# Register boundaries, in the order they are enabled: after the significand product ("product":
# a DSP block's output register), before it ("operands": its input registers), between the
# leading-zero count and the normalising shift ("norm"); then registers on the result only
# ("out0".."out3", so that at fp_pipeline 3 the unit takes as many stages as a multiplier, FMul);
# at a target clock (CLOCK_CUTS) also on the operands as they arrive ("inputs": the unit's own
# copies, where another unit reads the same value) and a second register after the product
# ("land": the first moves into a DSP block's output register, compiler/pnr/dsp_registers.py,
# and this one stays in the fabric beside it, so the route out of the DSP column is a stage of
# its own, not one with the leading-zero count: 9.3 ns on an fp16 matmul at target_mhz 150).
_CUTS = ("product", "operands", "norm", "out0", "out1", "out2", "out3", "inputs", "land")


def exact_in(src: FloatFormat, dst: FloatFormat) -> bool:
    """Whether every product of two finite `src` values is a normal (or zero) `dst` value:
    the significand product fits, and the exponents stay inside dst's normal range."""
    smallest = 2 * (src.emin - src.man_bits)                  # two smallest subnormals
    largest = 2 * (src.emax + 1)                              # below 2**largest
    return (2 * src.precision <= dst.precision and smallest >= dst.emin and largest <= dst.emax
            and dst.has_inf and src.width < dst.width)


class FWideMul(wiring.Component):
    """y = a * b with a, b bit patterns of `src_fmt` and y one of `dst_fmt`, exact (see the
    module). `subnormals="flush"` reads subnormal operands as zeros (the products are never
    tiny in dst). NaN and inf follow FMul: 0 * inf is NaN; E4M3 has no inf. `stages` > 1
    registers the result stages - 1 times (latency stages - 1, like FMul)."""

    CUTS = _CUTS
    CLOCK_CUTS = ("inputs", "land")

    def __init__(self, src_fmt: FloatFormat, dst_fmt: FloatFormat, subnormals: str = "keep", stages: int = 1):
        self.src_fmt = check_format(src_fmt, "src_fmt")
        self.dst_fmt = check_format(dst_fmt, "dst_fmt")
        if not exact_in(self.src_fmt, self.dst_fmt):
            raise ValueError(f"FWideMul: products of {src_fmt.name} values are not all exact in {dst_fmt.name}")
        self.subnormals = check_subnormals(subnormals)
        if not (isinstance(stages, int) and not isinstance(stages, bool) and 1 <= stages <= len(_CUTS) + 1):
            raise ValueError(f"stages: expected an int from 1 to {len(_CUTS) + 1}, got {stages!r}")
        self.stages, self.latency = stages, stages - 1
        super().__init__({"a": In(src_fmt.width), "b": In(src_fmt.width), "y": Out(dst_fmt.width)})

    def elaborate(self, platform):
        m = Module()
        src, dst = self.src_fmt, self.dst_fmt
        pipe = Pipe(m, _CUTS, self.stages)
        a_bits, b_bits = pipe.cut("inputs", self.a, self.b, duplicate=True)
        a = unpack(m, src, a_bits, self.subnormals, "a")
        b = unpack(m, src, b_bits, self.subnormals, "b")
        p = src.precision
        sign = a.sign ^ b.sign
        # value = product * 2**(ea + eb - 2 bias - 2 man); its top bit (2p - 1) has weight 2**1
        exp_ab = Signal(signed(bits_for(2 * src.exp_max_field + dst.bias) + 2), name="exp_ab")
        m.d.comb += exp_ab.eq(a.exp + b.exp - 2 * src.bias + dst.bias + 1)
        specials = (a.is_nan | b.is_nan | (a.is_inf & b.is_zero) | (b.is_inf & a.is_zero),   # NaN
                    a.is_inf | b.is_inf, a.is_zero | b.is_zero, sign)                       # inf, zero
        a_sig, b_sig, exp_ab, *specials = pipe.cut("operands", a.sig, b.sig, exp_ab, *specials)
        product = Signal(2 * p, name="product")
        if p <= 4:
            # a few partial products in LUTs: Yosys would give a $mul of any size a DSP block
            m.d.comb += product.eq(sum(Mux(b_sig[i], a_sig << i, 0) for i in range(p)))
        else:
            m.d.comb += product.eq(a_sig * b_sig)
        product, exp_ab, *specials = pipe.cut("product", product, exp_ab, *specials)
        product, exp_ab, *specials = pipe.cut("land", product, exp_ab, *specials)
        lz = leading_zeros(m, product, "norm")
        product, lz, exp_ab, *specials = pipe.cut("norm", product, lz, exp_ab, *specials)
        norm = shift_left(m, product, lz, "norm")
        exp = Signal(signed(len(exp_ab) + 1), name="exp")
        m.d.comb += exp.eq(exp_ab - lz)
        man = norm[:2 * p - 1]                          # below the leading one
        is_nan, is_inf, is_zero, sign = specials
        finite = Signal(dst.width, name="finite")
        m.d.comb += finite.eq(Cat(Const(0, dst.man_bits - len(man)), man, exp[:dst.exp_bits], sign))
        y = special_mux(m, dst, finite=finite, is_nan=is_nan, is_inf=is_inf, inf_sign=sign,
                        is_zero=is_zero, zero_sign=sign, name="wmul")
        for name in ("out0", "out1", "out2", "out3"):
            y = pipe.cut(name, y)
        m.d.comb += self.y.eq(y)
        return m
