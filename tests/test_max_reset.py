"""compiler/passes/max_reset.py: a running maximum's reset select after its compare."""
from __future__ import annotations

import re

import numpy as np
import pytest
from tinygrad import Tensor, dtypes

from compiler import HardwareConfig, compile_model, ir, simulate
from compiler.dtypes import BOOL, FP32, INT32
from compiler.passes.max_reset import move_max_resets
from compiler.passes.rewrite import const, op

K = ir.OpKind


def _kernel(value: ir.Value) -> ir.KernelIR:
    """One store of `value` into buffer 0 per element of buffer 1 (the shapes of the IR, not a
    reduction: move_max_resets looks at ops alone)."""
    d = value.dtype
    store = ir.BufStore(0, ir.Counter(0), value)
    buffers = (ir.BufferDecl(0, d, 4, False, True), ir.BufferDecl(1, d, 4, True, False))
    return ir.make_kernel("k", buffers, (ir.AccDecl(0, d),), (ir.Loop(0, ir.Axis.OUTPUT, 4, (store,)),))


def _stored(kernel: ir.KernelIR) -> ir.Value:
    (s, _), = kernel.stores()
    return s.value


@pytest.mark.parametrize("reset_first", [True, False])
def test_max_of_a_reset_to_the_least_value_becomes_a_select_after_the_max(reset_first):
    c = op(K.CMPEQ, BOOL, ir.Counter(0), const(0))
    a, b = ir.AccLoad(0, INT32), ir.Load(1, ir.Counter(0), INT32)
    reset = op(K.WHERE, INT32, c, const(INT32.min, INT32), a)
    v = op(K.MAX, INT32, *((reset, b) if reset_first else (b, reset)))
    out = _stored(move_max_resets(_kernel(v)))
    assert out.op is K.WHERE and out.srcs[0] is c and out.srcs[1] is b
    assert out.srcs[2].op is K.MAX and {id(x) for x in out.srcs[2].srcs} == {id(a), id(b)}


@pytest.mark.parametrize("dtype, k", [(INT32, 0), (INT32, INT32.min + 1), (FP32, float("-inf"))])
def test_other_resets_and_float_maxima_stay(dtype, k):
    """Only the dtype's least value is max's identity (0 is not for signed x); a float max
    keeps its form (NaN)."""
    c = op(K.CMPEQ, BOOL, ir.Counter(0), const(0))
    a, b = ir.AccLoad(0, dtype), ir.Load(1, ir.Counter(0), dtype)
    v = op(K.MAX, dtype, op(K.WHERE, dtype, c, const(k, dtype), a), b)
    kernel = _kernel(v)
    assert move_max_resets(kernel) is kernel


@pytest.mark.parametrize("knobs", [dict(), dict(fp_pipeline=3, target_mhz=200), dict(fp_pipeline=3, lanes=2)])
def test_a_max_pool_is_bit_exact_and_compares_at_its_values_width(knobs):
    """A 2x2 max pool of int8 values accumulated in int32 (tinygrad's reset: int32's least
    value): bit-exact, and every compare of the design is at most 9 bits wide (written as
    tinygrad gives it, the reset select made the compare 32 bits wide)."""
    from amaranth.back import rtlil
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (1, 2, 6, 6)).astype(np.int8)
    t = Tensor(x)
    y = t.cast(dtypes.int32).max_pool2d(kernel_size=(2, 2))
    ref = x.astype(np.int32).reshape(1, 2, 3, 2, 3, 2).max(axis=(3, 5))
    design = compile_model(y, config=HardwareConfig(**knobs))
    r = simulate(design, {t: x})
    np.testing.assert_array_equal(np.asarray(r.outputs[0]).reshape(ref.shape), ref)
    assert r.cycles == design.cycle_model().total
    text = rtlil.convert(design.top, name="top")
    widths = [max(int(a), int(b)) for a, b in re.findall(
        r"cell \$(?:gt|lt|ge|le) \S+\n(?:\s+parameter \\[AB]_SIGNED \d+\n)*\s+parameter \\A_WIDTH (\d+)\n"
        r"\s+parameter \\B_WIDTH (\d+)", text)]
    assert widths and max(widths) <= 9
