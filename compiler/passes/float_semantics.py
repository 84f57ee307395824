"""Float arithmetic as tinygrad's PYTHON device computes it (`fp_semantics: tinygrad`, the default).

A lowered kernel says what tinygrad's graph computes op by op, each op rounded to its dtype;
that is what the hardware builds with `fp_semantics: op`. tinygrad's PYTHON device, the
reference every design is checked against, rounds less often, and this pass rewrites a kernel
so that the hardware rounds where that device does (measured on tinygrad 0.14, Python 3.11:
docs/float-units.md, "Where tinygrad rounds"):

1. Fused multiply-adds. The PYTHON renderer claims MULACC, so tinygrad rewrites `a * b + c`
   (an ADD with a MUL operand; the first operand when both are MULs; a SUB never) into one op
   that Python computes in float64 and rounds to the dtype once. In bf16 and fp8 such an ADD
   becomes MULACC(a, b, c) (an FMulAdd unit). fp32 stays two roundings (see the docs: a fused
   fp32 accumulator would change every fp32 sum's hardware).
2. fp16 below Python 3.12. The device cannot hold half there (ops_python.PythonRenderer.
   supported_dtypes), so tinygrad emulates it in float32 (codegen/decomp/dtype.py): a load
   converts to float32 reading subnormals as zero, every half op runs in float32 (its fused
   multiply-adds too), a cast to half inside the kernel only clamps beyond +-65504 to +-inf,
   and a store (or an accumulator update) converts back once: EMU_CAST (FloatToFloat with
   `emulated`: beyond 65504 inf, below 2**-14 zero, decided before rounding; else to nearest
   even). A product of two halves is exact in float32, so its fused add is a plain float32 add
   (the fp16 GEMV keeps its accumulator's shape and an exact FWideMul product); only products
   of float32 intermediates become MULACC units (float32 via float64, as Python rounds them).
"""
from __future__ import annotations

import sys

import numpy as np

from .. import ir
from ..dtypes import BOOL, FP16, FP32, DType

K = ir.OpKind

HALF_EMULATED = sys.version_info < (3, 12)
"""tinygrad's PYTHON device emulates fp16 in float32 below Python 3.12 (no struct 'e' memoryviews)."""

FUSED = frozenset({"bf16", "fp8e4m3", "fp8e5m2"} | (set() if HALF_EMULATED else {"fp16"}))
"""Dtypes whose own `a * b + c` the hardware fuses (fp16 below 3.12: its float32 ops, item 2)."""

HALF_MAX = 65504.0


def as_tinygrad_computes(k: ir.KernelIR) -> ir.KernelIR:
    """`k` rewritten to round where tinygrad's PYTHON device rounds (see the module)."""
    r = _Rewriter(k)
    body = r.stmts(k.body)
    return ir.make_kernel(k.name, k.buffers, k.accs, body)


class _Rewriter:
    def __init__(self, k: ir.KernelIR):
        self.half_accs = {a.index for a in k.accs if a.dtype == FP16} if HALF_EMULATED else set()
        self.half_bufs = {b.slot for b in k.buffers if b.dtype == FP16} if HALF_EMULATED else set()
        self.memo: dict[int, ir.Value] = {}
        self.halves: set[int] = set()      # float32 values that are halves, not subnormal (exact products)
        self.emulated_muls: set[int] = set()     # float32 MULs of half ops: tinygrad fuses their adds
        self.clamps: dict[int, ir.Value] = {}    # an in-kernel cast to half -> the value it clamps
        self.narrowed: dict[int, ir.Value] = {}  # float32 value -> its half (one conversion per value)

    # ------------------------------------------------------------ statements
    def stmts(self, body: tuple) -> tuple:
        return tuple(self.stmt(s) for s in body)

    def stmt(self, s: ir.Stmt) -> ir.Stmt:
        if isinstance(s, ir.Loop):
            return ir.Loop(s.id, s.axis, s.bound, self.stmts(s.body))
        if isinstance(s, ir.AccStore):
            v = self.value(s.value)
            return ir.AccStore(s.acc, self.narrow(v) if s.acc in self.half_accs else v)
        v = self.value(s.value)
        gate = None if s.gate is None else self.value(s.gate)
        return ir.BufStore(s.buf, self.value(s.index), self.narrow(v) if s.buf in self.half_bufs else v, gate)

    # ------------------------------------------------------------ values
    def value(self, v: ir.Value) -> ir.Value:
        if id(v) not in self.memo:
            self.memo[id(v)] = self._value(v)
        return self.memo[id(v)]

    def _value(self, v: ir.Value) -> ir.Value:
        if isinstance(v, ir.Const):
            if v.dtype == FP16 and HALF_EMULATED:     # tinygrad's half literal, restated in float32
                value = float(np.float16(v.value))
                return self._half(ir.Const(value, FP32), not _subnormal_half(value))
            return v
        if isinstance(v, ir.Load):
            half = v.dtype == FP16 and HALF_EMULATED
            parts = [None if x is None else self.value(x) for x in (v.index, v.gate)]
            # a half load's `alt` is a half in memory's terms, converted with the data
            alt = v.alt if v.alt is None or (half and isinstance(v.alt, ir.Const)) else \
                self.narrow(self.value(v.alt)) if half else self.value(v.alt)
            parts.append(alt)
            load = v if all(a is b for a, b in zip(parts, (v.index, v.gate, v.alt))) \
                else ir.Load(v.buf, parts[0], v.dtype, parts[1], parts[2])
            if half:
                return self._half(ir.Op(K.EMU_CAST, FP32, (load,)))
            return load
        if isinstance(v, ir.AccLoad):
            if v.acc in self.half_accs:
                return self._half(ir.Op(K.EMU_CAST, FP32, (v,)))
            return v
        if isinstance(v, ir.Op):
            return self.op(v)
        return v

    def op(self, v: ir.Op) -> ir.Value:
        srcs = tuple(self.value(s) for s in v.srcs)
        half_in = HALF_EMULATED and any(s.dtype == FP16 for s in v.srcs)
        half_out = HALF_EMULATED and v.dtype == FP16
        if v.op is K.CAST and half_out:
            if v.srcs[0].dtype == FP16:
                return srcs[0]
            x = srcs[0] if srcs[0].dtype == FP32 else ir.Op(K.CAST, FP32, srcs)
            return x if id(x) in self.halves else self.clamp(x)
        if v.op is K.CAST and half_in:                    # from the float32 value, never rounded to half
            return srcs[0] if v.dtype == FP32 else ir.Op(K.CAST, v.dtype, srcs)
        if v.op is K.BITCAST and half_out:                # the bits of a half, loaded as tinygrad loads one
            return self._half(ir.Op(K.EMU_CAST, FP32, (ir.Op(K.BITCAST, FP16, srcs),)))
        if v.op is K.BITCAST and half_in:
            return ir.Op(K.BITCAST, v.dtype, (self.narrow(srcs[0]),))
        dtype = FP32 if half_out else v.dtype
        out = self.fused(v, dtype, srcs) if v.op is K.ADD else None
        if out is None:
            out = v if not half_out and all(a is b for a, b in zip(srcs, v.srcs)) else ir.Op(v.op, dtype, srcs)
        if half_out and v.op is K.MUL:
            self.emulated_muls.add(id(out))
        if half_out and self._keeps_half(out):
            self.halves.add(id(out))
        return out

    def fused(self, v: ir.Op, dtype: DType, srcs: tuple) -> ir.Value | None:
        """tinygrad's `a * b + c` -> MULACC(a, b, c) for this ADD, or None (not fused)."""
        for i in (0, 1):
            m = srcs[i]
            if not (isinstance(m, ir.Op) and m.op is K.MUL and m.dtype == dtype):
                continue
            if dtype.name not in FUSED and id(m) not in self.emulated_muls:
                return None
            if all(id(s) in self.halves for s in m.srcs):
                return None               # a product of halves is exact in float32: the add rounds once
            return ir.Op(K.MULACC, dtype, (m.srcs[0], m.srcs[1], srcs[1 - i]))
        return None

    def _keeps_half(self, v: ir.Op) -> bool:
        """Whether float32 op `v` of non-subnormal halves is one of them (it picks or negates)."""
        data = v.srcs[1:] if v.op is K.WHERE else v.srcs
        return v.op in (K.MAX, K.WHERE, K.NEG) and all(id(s) in self.halves for s in data)

    def _half(self, v: ir.Value, normal: bool = True) -> ir.Value:
        if normal:
            self.halves.add(id(v))
        return v

    # ------------------------------------------------------------ tinygrad's conversions
    def clamp(self, x: ir.Value) -> ir.Value:
        """A cast to half inside the kernel: beyond +-65504 +-inf, else the float32 value itself."""
        lo = ir.Op(K.CMPLT, BOOL, (x, ir.Const(-HALF_MAX, FP32)))
        hi = ir.Op(K.CMPLT, BOOL, (ir.Const(HALF_MAX, FP32), x))
        out = ir.Op(K.WHERE, FP32, (lo, ir.Const(-np.inf, FP32),
                                    ir.Op(K.WHERE, FP32, (hi, ir.Const(np.inf, FP32), x))))
        self.clamps[id(out)] = x
        return out

    def narrow(self, x: ir.Value) -> ir.Value:
        """float32 `x` stored as half, as tinygrad's emulation stores it (EMU_CAST). Values that
        are halves already stay in half: a MAX, WHERE or NEG of them is one of them."""
        if id(x) not in self.narrowed:
            self.narrowed[id(x)] = self._narrow(x)
        return self.narrowed[id(x)]

    def _narrow(self, x: ir.Value) -> ir.Value:
        if id(x) in self.clamps:                      # the store clamps the same way
            x = self.clamps[id(x)]
        if id(x) in self.halves:
            if isinstance(x, ir.Const):
                return ir.Const(x.value, FP16)
            if x.op is K.EMU_CAST:
                h = x.srcs[0]
                # a half accumulator only ever receives stored (flushed) values
                return h if isinstance(h, ir.AccLoad) else ir.Op(K.EMU_CAST, FP16, (h,))
            srcs = tuple(s if (x.op is K.WHERE and i == 0) else self.narrow(s) for i, s in enumerate(x.srcs))
            return ir.Op(x.op, FP16, srcs)
        return ir.Op(K.EMU_CAST, FP16, (x,))


def _subnormal_half(value: float) -> bool:
    return value != 0 and abs(value) < 2.0 ** -14 and np.isfinite(value)
