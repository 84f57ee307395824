"""Float operations in the datapath: which ones the hardware has, and how each is built.

Floats are IEEE bit patterns. NEG (flip the sign), WHERE and BITCAST are wiring; arithmetic,
comparisons and conversions instantiate the float units of compiler/fp, configured with the
design's `fp_rounding` and `fp_subnormals` knobs. Division (FDIV, RECIPROCAL), SQRT and TRUNC
have their own units; anything else (EXP2, LOG2, SIN: tinygrad decomposes them into
polynomials unless the renderer claims them) is rejected at compile time.

MAX is Python's max (FMax(python=True)), what tinygrad's PYTHON device computes: relu(-0.0) is
+0.0 and relu(NaN) is 0. MULACC (a fused multiply-add) and EMU_CAST (tinygrad's software half
conversion) come from compiler/passes/float_semantics.py, never from a lowered kernel.
"""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Value

from .. import fp, ir
from ..config import HardwareConfig
from ..dtypes import DType
from ..errors import UnsupportedError
from ..fp.muladd import FMulAdd
from ..fp.widemul import FWideMul, exact_in

K = ir.OpKind

UNIT_PREFIX = "fp"
"""Float unit submodules are named `fp<N>_<op>` (compiler.synth.units finds them by it)."""

WIRING = {K.NEG, K.WHERE, K.BITCAST}
UNITS = {K.ADD, K.SUB, K.MUL, K.MAX, K.CMPLT, K.CMPNE, K.CMPEQ, K.CAST, K.FDIV, K.RECIPROCAL, K.SQRT, K.TRUNC,
         K.MULACC, K.EMU_CAST}

VIA_FLOAT64 = 53
"""tinygrad's PYTHON device computes a MULACC in Python floats: rounded to float64's 53 bits,
then to the dtype (fp8 sums are exact in float64, so theirs round once: `via` None)."""


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
    if op is K.MULACC:
        return FMulAdd
    if op is K.EMU_CAST:
        return fp.FloatToFloat
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
    casts and the multiplier bit for bit. Also for two halves loaded as tinygrad emulates
    them (EMU_CAST fp16 -> fp32, subnormals read as zero: an FWideMul that flushes them). None
    for any other op."""
    if v.op is not K.MUL or not v.dtype.is_float:
        return None
    kinds = {s.op for s in v.srcs if isinstance(s, ir.Op)}
    if len(kinds) != 1 or len([s for s in v.srcs if isinstance(s, ir.Op)]) != 2 or not kinds <= {K.CAST, K.EMU_CAST}:
        return None
    narrow = {s.srcs[0].dtype for s in v.srcs}
    if len(narrow) != 1 or not (d := narrow.pop()).is_float:
        return None
    # 8-bit sources: tested exhaustively; fp16 only for the emulated loads (tests/test_float_semantics.py)
    tested = d.bits <= 8 or (kinds == {K.EMU_CAST} and d.name == "fp16")
    return [s.srcs[0] for s in v.srcs] if tested and exact_in(fmt_of(d), fmt_of(v.dtype)) else None


def unit_stages(unit: type, clock: bool = False) -> int:
    """Pipeline stages a float unit class can be cut into: one more than its boundaries, its
    CLOCK_CUTS (the last of its CUTS) counted only at a target clock (`clock`)."""
    return len(unit.CUTS) + 1 - (0 if clock else len(getattr(unit, "CLOCK_CUTS", ())))


def max_stages(v: ir.Op, clock: bool = False, ring: bool = False) -> int:
    """Pipeline stages the unit of float op `v` can be cut into (1: not pipelined): unit_stages.
    `ring`: a ring's fused multiply-add, its stages from the accumulator on (FMulAdd ring=True)."""
    unit = FWideMul if wide_product_sources(v) is not None else unit_of(v)
    if unit is None:
        return 1
    if ring and unit is FMulAdd:
        return len(FMulAdd.RING_ORDER) + 1
    top = unit_stages(unit, clock)
    if unit in (fp.FDiv, fp.FSqrt):      # a recurrence has no more boundaries than segments (fp8: 6 to 8)
        top = min(top, unit.stage_limit(fmt_of(_float_dtype(v)), clock))
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
        # at a target clock a ring's unit (FAdd, FMulAdd) may have fewer stages than boundaries:
        # it takes them in its CLOCK_ORDER
        self.clock = config.target_mhz is not None

    def unit(self, component, name: str, **inputs: Value):
        self.m.submodules[f"{UNIT_PREFIX}{self.units}_{name}"] = component
        self.units += 1
        self.m.d.comb += [getattr(component, port).eq(val) for port, val in inputs.items()]
        return component

    def emit(self, v: ir.Op, s: list[Value], stages: int = 1, ring: bool = False) -> Value:
        """`ring`: a ring's fused multiply-add, whose addend (s[2], the accumulator) is taken
        FMulAdd.LEAD cycles after its other operands (pipeline.ring_lead)."""
        op, d = v.op, v.dtype
        rnd, sub = self.config.fp_rounding, self.config.fp_subnormals
        if stages > 1 and stages > max_stages(v, clock=True, ring=ring):
            raise ValueError(f"{self.kernel}: {op.name} cannot be cut into {stages} stages")
        if ring and op is not K.MULACC:
            raise ValueError(f"{self.kernel}: {op.name} has no ring form with a lead (only MULACC)")
        n = {"stages": stages} if stages > 1 else {}
        if op is K.NEG:
            return s[0] ^ (1 << (d.bits - 1))
        if op is K.WHERE:
            return Mux(s[0], s[1], s[2])
        if op is K.BITCAST:
            return s[0]
        if op in (K.ADD, K.SUB):
            return self.unit(fp.FAdd(fmt_of(d), rnd, sub, subtract=op is K.SUB, clock=self.clock, **n),
                             op.value, a=s[0], b=s[1]).y
        if op is K.MUL:
            return self.unit(fp.FMul(fmt_of(d), rnd, sub, **n), "mul", a=s[0], b=s[1]).y
        if op is K.MAX:
            return self.unit(fp.FMax(fmt_of(d), sub, python=True), "max", a=s[0], b=s[1]).y
        if op is K.MULACC:
            return self.mulacc(d, s, n | ({"ring": True} if ring else {}))
        if op is K.EMU_CAST:
            unit = fp.FloatToFloat(fmt_of(v.srcs[0].dtype), fmt_of(d), rnd, sub, emulated=True, **n)
            return self.unit(unit, "emu", a=s[0]).y
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
        emulated = v.srcs[0].op is K.EMU_CAST          # tinygrad's half loads read subnormals as zero
        unit = FWideMul(fmt_of(src), fmt_of(v.dtype), "flush" if emulated else self.config.fp_subnormals, **n)
        return self.unit(unit, "wmul", a=s[0], b=s[1]).y

    def mulacc(self, d: DType, s: list[Value], n: dict) -> Value:
        """a * b + c as tinygrad's PYTHON device rounds its MULACC in dtype `d`: in float64,
        then to d (bf16 through float32: tinygrad's bf16 rounding goes through ctypes' float)."""
        rnd, sub = self.config.fp_rounding, self.config.fp_subnormals
        fmt = fmt_of(d)
        if d.name == "bf16":
            y = self.unit(FMulAdd(fmt, fp.FP32, VIA_FLOAT64, rnd, sub, clock=self.clock, **n), "fma",
                          a=s[0], b=s[1], c=s[2]).y
            return self.unit(fp.FloatToFloat(fp.FP32, fmt, rnd, sub), "f2f", a=y).y
        via = None if fmt.width <= 8 else VIA_FLOAT64
        return self.unit(FMulAdd(fmt, fmt, via, rnd, sub, clock=self.clock, **n), "fma", a=s[0], b=s[1], c=s[2]).y

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
