"""Float operations in the datapath: which ones the hardware has, and how each is built.

Floats are IEEE bit patterns. NEG (flip the sign), WHERE and BITCAST are wiring; arithmetic,
comparisons and conversions instantiate the float units of compiler/fp, configured with the
design's `fp_rounding` and `fp_subnormals` knobs. Division (FDIV, RECIPROCAL), SQRT and TRUNC
have their own units; anything else (EXP2, LOG2, SIN: tinygrad decomposes them into
polynomials unless the renderer claims them) is rejected at compile time.
"""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Value

from .. import fp, ir
from ..config import HardwareConfig
from ..dtypes import DType
from ..errors import UnsupportedError
from ..fp.widemul import FWideMul, exact_in

K = ir.OpKind

UNIT_PREFIX = "fp"
"""Float unit submodules are named `fp<N>_<op>` (compiler.synth.units finds them by it)."""

WIRING = {K.NEG, K.WHERE, K.BITCAST}
UNITS = {K.ADD, K.SUB, K.MUL, K.MAX, K.CMPLT, K.CMPNE, K.CMPEQ, K.CAST, K.FDIV, K.RECIPROCAL, K.SQRT, K.TRUNC}


def fmt_of(d: DType) -> fp.FloatFormat:
    return fp.FORMATS[d.name]


def _float_dtype(v: ir.Op) -> DType:
    return v.dtype if v.dtype.is_float else next(s.dtype for s in v.srcs if s.dtype.is_float)


def _is_one(v: ir.Value) -> bool:
    return isinstance(v, ir.Const) and v.value == 1.0


def is_float_op(v: ir.Op) -> bool:
    return v.dtype.is_float or any(s.dtype.is_float for s in v.srcs)


def unit_of(v: ir.Op):
    """The float unit class that computes `v` (None: wiring, no unit)."""
    op = v.op
    if op in (K.ADD, K.SUB):
        return fp.FAdd
    if op is K.MUL:
        return fp.FMul
    if op is K.MAX:
        return fp.FMax
    if op in (K.CMPLT, K.CMPNE, K.CMPEQ):
        return fp.FCompare
    if op in (K.FDIV, K.RECIPROCAL):
        return fp.FDiv
    if op is K.SQRT:
        return fp.FSqrt
    if op is K.TRUNC:
        return fp.FTrunc
    if op is K.CAST:
        src, dst = v.srcs[0].dtype, v.dtype
        if src.is_float and dst.is_float:
            return None if src == dst else fp.FloatToFloat
        if dst.is_float:
            return fp.IntToFloat
        return None if dst.is_bool else fp.FloatToInt
    return None


def wide_product_sources(v: ir.Op) -> list[ir.Value] | None:
    """For a float MUL of two values cast from one narrower float format in which every
    product is exact in the MUL's format (fp8 -> fp32: an FP8 layer summed in float32), the
    casts' sources: the datapath multiplies them in an FWideMul, a small unit that equals the
    casts and the multiplier bit for bit. None for any other op."""
    if v.op is not K.MUL or not v.dtype.is_float:
        return None
    if not all(isinstance(s, ir.Op) and s.op is K.CAST for s in v.srcs):
        return None
    narrow = {s.srcs[0].dtype for s in v.srcs}
    if len(narrow) != 1 or not (d := narrow.pop()).is_float:
        return None
    # 8-bit sources only: the unit is tested exhaustively there (fp16 -> fp32 would be exact too)
    return [s.srcs[0] for s in v.srcs] if d.bits <= 8 and exact_in(fmt_of(d), fmt_of(v.dtype)) else None


def max_stages(v: ir.Op) -> int:
    """Pipeline stages the unit of float op `v` can be cut into (1: not pipelined)."""
    unit = unit_of(v)
    if unit is None:
        return 1
    top = len(unit.CUTS) + 1
    if unit in (fp.FDiv, fp.FSqrt):      # a recurrence has no more boundaries than segments (fp8: 6 to 8)
        p = fmt_of(_float_dtype(v)).precision
        top = min(top, (p + 2 if unit is fp.FDiv else p + 1) + 2)
    return top


def check(kernel: str, v: ir.Op, config: HardwareConfig) -> None:
    if v.op in WIRING or v.op in UNITS:
        return
    raise UnsupportedError(kernel, v.op.name, _float_dtype(v).name, "no float unit for it yet")


class FloatOps:
    """Instantiates one float unit per operation, as submodules of the datapath module.
    `stages` > 1 builds a pipelined unit (its result comes stages - 1 cycles after its operands)."""

    def __init__(self, m: Module, config: HardwareConfig, kernel: str):
        self.m, self.config, self.kernel = m, config, kernel
        self.units = 0

    def unit(self, component, name: str, **inputs: Value):
        self.m.submodules[f"{UNIT_PREFIX}{self.units}_{name}"] = component
        self.units += 1
        self.m.d.comb += [getattr(component, port).eq(val) for port, val in inputs.items()]
        return component

    def emit(self, v: ir.Op, s: list[Value], stages: int = 1) -> Value:
        op, d = v.op, v.dtype
        rnd, sub = self.config.fp_rounding, self.config.fp_subnormals
        if stages > 1 and stages > max_stages(v):
            raise ValueError(f"{self.kernel}: {op.name} cannot be cut into {stages} stages")
        n = {"stages": stages} if stages > 1 else {}
        if op is K.NEG:
            return s[0] ^ (1 << (d.bits - 1))
        if op is K.WHERE:
            return Mux(s[0], s[1], s[2])
        if op is K.BITCAST:
            return s[0]
        if op in (K.ADD, K.SUB):
            return self.unit(fp.FAdd(fmt_of(d), rnd, sub, subtract=op is K.SUB, **n), op.value, a=s[0], b=s[1]).y
        if op is K.MUL:
            return self.unit(fp.FMul(fmt_of(d), rnd, sub, **n), "mul", a=s[0], b=s[1]).y
        if op is K.MAX:
            return self.unit(fp.FMax(fmt_of(d), sub), "max", a=s[0], b=s[1]).y
        if op in (K.CMPLT, K.CMPNE, K.CMPEQ):
            c = self.unit(fp.FCompare(fmt_of(v.srcs[0].dtype), sub), "cmp", a=s[0], b=s[1])
            return c.lt if op is K.CMPLT else (c.eq if op is K.CMPEQ else ~c.eq)
        if op is K.FDIV and not _is_one(v.srcs[0]):
            return self.unit(fp.FDiv(fmt_of(d), rnd, sub, **n), "div", a=s[0], b=s[1]).y
        if op in (K.FDIV, K.RECIPROCAL):          # 1 / x: no dividend port, its logic folded
            return self.unit(fp.FDiv(fmt_of(d), rnd, sub, reciprocal=True, **n), "rcp", b=s[-1]).y
        if op is K.SQRT:
            return self.unit(fp.FSqrt(fmt_of(d), rnd, sub, **n), "sqrt", a=s[0]).y
        if op is K.TRUNC:
            return self.unit(fp.FTrunc(fmt_of(d), sub), "trunc", a=s[0]).y
        if op is K.CAST:
            return self.cast(v.srcs[0].dtype, d, s[0], n)
        raise UnsupportedError(self.kernel, op.name, _float_dtype(v).name, "no float unit for it yet")

    def wide_mul(self, v: ir.Op, src: DType, s: list[Value], stages: int = 1) -> Value:
        """`v` (see wide_product_sources) from the casts' sources `s`, of dtype `src`."""
        n = {"stages": stages} if stages > 1 else {}
        unit = FWideMul(fmt_of(src), fmt_of(v.dtype), self.config.fp_subnormals, **n)
        return self.unit(unit, "wmul", a=s[0], b=s[1]).y

    def cast(self, src: DType, dst: DType, a: Value, n: dict) -> Value:
        rnd, sub = self.config.fp_rounding, self.config.fp_subnormals
        if src.is_float and dst.is_float:
            if src == dst:
                return a
            return self.unit(fp.FloatToFloat(fmt_of(src), fmt_of(dst), rnd, sub, **n), "f2f", a=a).y
        if dst.is_float:              # int or bool -> float
            return self.unit(fp.IntToFloat(src.bits, src.signed and not src.is_bool, fmt_of(dst), rnd, sub, **n),
                             "i2f", a=a).y
        if dst.is_bool:               # x != 0; NaN is true, as in C
            f = fmt_of(src)
            if sub == "flush":        # subnormals read as zero
                return a[f.man_bits:f.width - 1] != 0
            return a[:f.width - 1] != 0
        return self.unit(fp.FloatToInt(fmt_of(src), dst.bits, dst.signed, sub, **n), "f2i", a=a).y
