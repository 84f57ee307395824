"""Combinational IEEE-754 float units, written once and parameterised by format.

Every unit is an `amaranth.lib.wiring.Component` with only combinational logic; data ports
hold IEEE bit patterns. Options: rounding "rne" (round to nearest, ties to even) or "rtz"
(toward zero; overflow gives the largest finite number), subnormals "keep" (IEEE gradual
underflow) or "flush" (subnormal inputs read as signed zeros; results rounded as if the
exponent range were unbounded below, and those under the smallest normal become signed
zeros). NaN results are the canonical quiet NaN (sign 0, top mantissa bit set).
"""
from .add import FAdd
from .compare import FCompare, FMax
from .convert import FloatToFloat, FloatToInt, IntToFloat
from .formats import BF16, FORMATS, FP16, FP32, FloatFormat
from .mul import FMul

__all__ = ["FloatFormat", "FP32", "FP16", "BF16", "FORMATS", "FAdd", "FMul", "FCompare", "FMax",
           "IntToFloat", "FloatToInt", "FloatToFloat"]
