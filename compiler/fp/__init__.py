"""Combinational IEEE-754 float units, written once and parameterised by format.

Every unit is an `amaranth.lib.wiring.Component` with only combinational logic; data ports
hold bit patterns of a `FloatFormat` (FP32, FP16, BF16, and the OCP 8-bit floats FP8E4M3 and
FP8E5M2). The numpy model in
`reference.py` defines the exact semantics; tests/test_fp_units.py checks the units against
it bit for bit (through CXXRTL, see `harness.py`).

Semantics, for the numerics reader:
  * rounding="rne": round to nearest, ties to even. "rtz": toward zero; a finite result too
    large for the format gives the largest finite number with its sign (inf inputs stay inf).
  * subnormals="keep": IEEE gradual underflow. "flush": subnormal inputs read as zeros of
    their sign; results are rounded to full precision as if the exponent were unbounded
    below, and a rounded result under the smallest normal becomes a zero of its sign
    (IEEE "tininess after rounding"; exact tiny results are flushed too). A value just
    under the smallest normal that rounds up to it is kept.
  * NaN results are the canonical quiet NaN (sign 0, top mantissa bit set), whatever the
    input NaNs. 0 * inf, inf - inf are NaN. x + (-x) is +0 in both modes, (-0) + (-0) is -0.
  * FCompare: IEEE (NaN: lt = eq = 0; +0 == -0). FMax: numpy.maximum, NaN propagates; for
    max(+0, -0) numpy returns the first operand for float16 and the second for float32
    (x86-64, numpy 2.4); FMax follows it per format (bf16 like float32); `zero_tie` overrides.
  * FDiv (a / b, or 1 / b with reciprocal=True) and FSqrt are correctly rounded like FAdd
    and FMul: 0/0, inf/inf, sqrt(x < 0) are NaN; x/0 is a signed inf; sqrt(-0) = -0.
    FTrunc is numpy.trunc (exact: |x| < 1 gives a zero of x's sign).
  * FloatToInt: truncation toward zero; out-of-range values wrap modulo 2**int_width
    (tinygrad's PYTHON device: ctypes truncation of int(x)); NaN and +-inf give 0. To bool
    (int_width=1, unsigned): x != 0, NaN gives 1.
  * FloatToFloat: widening is exact; narrowing rounds, overflows to inf (rne) or the
    largest finite number (rtz).
  * OCP FP8 (docs/fp8.md): E5M2 is IEEE-like; E4M3 has no inf, its only NaN is S.1111.111
    and 448 is its largest finite number: an infinite result (an inf converted, x / 0) is NaN.
    FP8E4M3 and FP8E5M2 saturate as tinygrad does (and OCP's saturating mode): a finite
    result beyond the largest finite number rounds to it, in every rounding mode; inf inputs
    stay inf (E5M2). `nonsaturating(fmt)` gives ml_dtypes' behaviour instead: overflow to
    inf (E5M2) or NaN (E4M3). The sign of a NaN result is not specified (compare NaN as NaN).
  * FWideMul(src, dst): the exact product of two `src` values in `dst` (fp8 x fp8 in fp32),
    what FloatToFloat on both operands and an FMul(dst) give, without rounding anything.
  * FMulAdd(src, dst, via): a * b + c rounded once to dst, or first to `via` bits (53: Python's
    float64, how tinygrad's PYTHON device computes its MULACC op): muladd.py.
  * FMax(python=True): Python's max(a, b) = b if b > a else a (a NaN or a zero tie gives a), what
    tinygrad's PYTHON device computes for MAX. FloatToFloat(emulated=True): tinygrad's software
    half conversion (subnormal inputs read as zero; beyond the largest finite value inf and below
    the smallest normal zero, decided before rounding).
"""
from .add import FAdd
from .compare import FCompare, FMax
from .convert import FloatToFloat, FloatToInt, IntToFloat
from .formats import BF16, FORMATS, FP8E4M3, FP8E5M2, FP16, FP32, FloatFormat, nonsaturating
from .divide import FDiv
from .mul import FMul
from .muladd import FMulAdd
from .sqrt import FSqrt
from .trunc import FTrunc
from .widemul import FWideMul

__all__ = ["FloatFormat", "FP32", "FP16", "BF16", "FP8E4M3", "FP8E5M2", "FORMATS", "nonsaturating", "FAdd", "FMul", "FDiv", "FSqrt", "FTrunc", "FCompare", "FMax",
           "IntToFloat", "FloatToInt", "FloatToFloat", "FWideMul", "FMulAdd"]
