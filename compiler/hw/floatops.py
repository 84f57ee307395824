"""Float operations in the datapath: which ones the hardware has, and how each is built.

Floats are IEEE bit patterns. NEG (flip the sign), WHERE and BITCAST are wiring; arithmetic,
comparisons and conversions instantiate the float units of compiler/fp.
"""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Value

from .. import ir
from ..config import HardwareConfig
from ..errors import UnsupportedError

K = ir.OpKind

WIRING = {K.NEG, K.WHERE, K.BITCAST}


def check(kernel: str, v: ir.Op, config: HardwareConfig) -> None:
    if v.op in WIRING:
        return
    raise UnsupportedError(kernel, v.op.name, _float_dtype(v).name, "no float unit for it yet")


def _float_dtype(v: ir.Op):
    return v.dtype if v.dtype.is_float else next(s.dtype for s in v.srcs if s.dtype.is_float)


class FloatOps:
    def __init__(self, m: Module, config: HardwareConfig, kernel: str):
        self.m, self.config, self.kernel = m, config, kernel
        self.units = 0

    def emit(self, v: ir.Op, s: list[Value]) -> Value:
        if v.op is K.NEG:
            return s[0] ^ (1 << (v.dtype.bits - 1))
        if v.op is K.WHERE:
            return Mux(s[0], s[1], s[2])
        if v.op is K.BITCAST:
            return s[0]
        raise UnsupportedError(self.kernel, v.op.name, _float_dtype(v).name, "no float unit for it yet")
