"""Floating-point comparison and maximum."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .common import Unpacked, check_stages, unpack
from .formats import FloatFormat, check_format, check_subnormals

ZERO_TIES = ("first", "second")


def less_than(m: Module, a: Unpacked, b: Unpacked, name: str) -> Signal:
    """a < b for non-NaN operands (NaN is the caller's business); -0 and +0 are equal."""
    both_zero = a.is_zero & b.is_zero
    lt = Signal(name=f"{name}_lt")
    m.d.comb += lt.eq(~both_zero & Mux(a.sign != b.sign, a.sign,
                                       Mux(a.sign, b.mag < a.mag, a.mag < b.mag)))
    return lt


class FCompare(wiring.Component):
    """lt = a < b, eq = a == b (IEEE: false if either is NaN, +0 == -0), combinational.

    With subnormals="flush" a subnormal compares equal to zero. Not pipelined (`stages` 1 only).
    """

    CUTS = ()

    def __init__(self, fmt: FloatFormat, subnormals: str = "keep", stages: int = 1):
        self.fmt = check_format(fmt)
        self.subnormals = check_subnormals(subnormals)
        self.stages = check_stages(stages, self.CUTS)
        self.latency = 0
        super().__init__({"a": In(fmt.width), "b": In(fmt.width), "lt": Out(1), "eq": Out(1)})

    def elaborate(self, platform):
        m = Module()
        a = unpack(m, self.fmt, self.a, self.subnormals, "a")
        b = unpack(m, self.fmt, self.b, self.subnormals, "b")
        ordered = ~(a.is_nan | b.is_nan)
        same = (a.is_zero & b.is_zero) | ((a.sign == b.sign) & (a.mag == b.mag))
        m.d.comb += [
            self.lt.eq(ordered & less_than(m, a, b, "cmp")),
            self.eq.eq(ordered & same),
        ]
        return m


def numpy_zero_tie(fmt: FloatFormat) -> str:
    """Which operand numpy.maximum returns for two equal operands (only visible for +0/-0).

    Measured with numpy 2.4 on x86-64: the float16 loop computes `a >= b ? a : b` (first),
    the float32/float64 loops `a > b ? a : b` (second, the semantics of x86 MAXPS).
    bfloat16 (no numpy type) follows float32, as software computes bf16 through float32.
    """
    return "first" if (fmt.exp_bits, fmt.man_bits) == (5, 10) else "second"


class FMax(wiring.Component):
    """y = numpy.maximum(a, b), combinational.

    NaN in either input gives the canonical quiet NaN. For max(+0, -0) and max(-0, +0)
    numpy's choice depends on the dtype (see `numpy_zero_tie`); `zero_tie` ("first" or
    "second": which operand to return when a == b) overrides it. python=True is Python's
    max(a, b) instead, what tinygrad's PYTHON device computes for MAX: `a < b ? b : a` with
    IEEE's less-than, so a NaN operand gives a (max(nan, 1) is nan, max(1, nan) is 1) and a
    zero tie gives a (relu(-0.0) = max(0.0, -0.0) = +0.0). With subnormals="flush" subnormal
    inputs are read as signed zeros, and the result is that zero. Not pipelined (`stages` 1 only).
    """

    CUTS = ()

    def __init__(self, fmt: FloatFormat, subnormals: str = "keep", zero_tie: str | None = None, stages: int = 1,
                 python: bool = False):
        self.fmt = check_format(fmt)
        self.subnormals = check_subnormals(subnormals)
        self.stages = check_stages(stages, self.CUTS)
        self.latency = 0
        if not isinstance(python, bool):
            raise ValueError(f"python: expected True or False, got {python!r}")
        if python and zero_tie is not None:
            raise ValueError("zero_tie: Python's max always returns the first of two equal operands; give one of "
                             "zero_tie and python=True")
        self.python = python
        if zero_tie is None:
            zero_tie = "first" if python else numpy_zero_tie(fmt)
        if zero_tie not in ZERO_TIES:
            raise ValueError(f"zero_tie: expected None, 'first' or 'second', got {zero_tie!r}")
        self.zero_tie = zero_tie
        super().__init__({"a": In(fmt.width), "b": In(fmt.width), "y": Out(fmt.width)})

    def elaborate(self, platform):
        m = Module()
        fmt = self.fmt
        a = unpack(m, fmt, self.a, self.subnormals, "a")
        b = unpack(m, fmt, self.b, self.subnormals, "b")
        # One comparator either way: "first" is a < b ? b : a, "second" is b < a ? a : b.
        if self.zero_tie == "first":
            take_b = less_than(m, a, b, "max")
        else:
            take_b = ~less_than(m, b, a, "max")
        if self.python:                 # IEEE a < b is false when either is NaN: a
            m.d.comb += self.y.eq(Mux(take_b & ~(a.is_nan | b.is_nan), Cat(b.mag, b.sign), Cat(a.mag, a.sign)))
            return m
        with m.If(a.is_nan | b.is_nan):
            m.d.comb += self.y.eq(fmt.qnan_bits)
        with m.Else():
            # Cat(mag, sign) is the (possibly flushed) operand.
            m.d.comb += self.y.eq(Mux(take_b, Cat(b.mag, b.sign), Cat(a.mag, a.sign)))
        return m
