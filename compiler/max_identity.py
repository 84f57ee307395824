"""A max-reduction's starting value in a float format without -inf (OCP E4M3).

tinygrad starts a MAX reduction at the dtype's lowest value, -inf; E4M3 has no inf, and -inf
cast to it is NaN, so a max-pool or `max()` over fp8e4m3 data lowers to an accumulator that
starts at NaN. tinygrad's PYTHON device still returns the data's maximum (Python's `max(x, nan)`
is x: the NaN is the second operand), while the hardware's MAX is numpy.maximum, which keeps a
NaN. The lowest finite value (-448) is the identity of max over every E4M3 value that is not
NaN, so such an accumulator starts there instead: the hardware then gives tinygrad's result.
"""
from __future__ import annotations

import math
from dataclasses import replace

from . import ir
from .fp.formats import FORMATS

K = ir.OpKind


def _uncast(v: ir.Value) -> ir.Value:
    while isinstance(v, ir.Op) and v.op is K.CAST:
        v = v.srcs[0]
    return v


def _finite_max_dtypes(k: ir.KernelIR) -> dict[int, ir.DType]:
    """Accumulator index -> the dtype of the MAX that updates it, where that dtype has no inf."""
    out = {}
    for s, _ in k.stores():
        m = _uncast(s.value) if isinstance(s, ir.AccStore) else None
        if isinstance(m, ir.Op) and m.op is K.MAX and m.dtype.is_float and not FORMATS[m.dtype.name].has_inf \
                and any(isinstance(x := _uncast(o), ir.AccLoad) and x.acc == s.acc for o in m.srcs):
            out[s.acc] = m.dtype
    return out


def finite_max_identities(k: ir.KernelIR) -> ir.KernelIR:
    """`k` with every NaN start of a MAX accumulator in a format without inf replaced by that
    format's lowest finite value (see the module)."""
    fix = _finite_max_dtypes(k)
    if not fix:
        return k

    def rewrite(stmt: ir.Stmt) -> ir.Stmt:
        if isinstance(stmt, ir.Loop):
            return replace(stmt, body=tuple(rewrite(s) for s in stmt.body))
        if isinstance(stmt, ir.AccStore) and stmt.acc in fix:
            start = _uncast(stmt.value)
            if isinstance(start, ir.Const) and isinstance(start.value, float) and math.isnan(start.value):
                lowest = -FORMATS[fix[stmt.acc].name].max_finite
                return ir.AccStore(stmt.acc, ir.Const(lowest, stmt.value.dtype))
        return stmt
    return ir.make_kernel(k.name, k.buffers, k.accs, tuple(rewrite(s) for s in k.body))
