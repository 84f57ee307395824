"""Models that need the division, square-root and truncation units, compiled and simulated
against tinygrad's own result (tests/tinygrad_ref.py: its PYTHON device; cycles == the cycle
model) within a stated number of float32 ULP (as rtol = ULP * 2**-23), and, where the op is
one correctly rounded IEEE operation, bit for bit against numpy float32. At fp_pipeline 2 (0: the op catalog).

ULP tolerances (measured, docs/float-units.md): exact ops 0 against numpy; against tinygrad
1 ULP where tinygrad's device rounds an intermediate differently, and 2-8 ULP where tinygrad's
EXP2/LOG2 polynomials (the same decomposition on both sides, evaluated by float units here and
by Python floats rounded to float32 there) meet a division or a cancellation (gelu near 0).
"""
from __future__ import annotations

import numpy as np
import pytest
from tinygrad import Tensor

from tinygrad_ref import Arg, check_forward

from compiler import HardwareConfig, compile_model, simulate

RNG = np.random.default_rng(14)
X = RNG.standard_normal((3, 8)).astype(np.float32)
POS = (np.abs(X) + 0.1).astype(np.float32)

# name: (model, input, numpy result for a bit-exact check or None, ULP tolerance vs tinygrad)
CASES = {
    "div": (lambda t: t / (t.abs() + 1), X, lambda x: x / (np.abs(x) + np.float32(1)), 1),
    "reciprocal": (lambda t: t.reciprocal(), X, lambda x: np.float32(1) / x, 0),
    "sqrt": (lambda t: t.sqrt(), POS, np.sqrt, 0),
    "rsqrt": (lambda t: t.rsqrt(), POS, lambda x: np.float32(1) / np.sqrt(x), 1),
    "trunc": (lambda t: (t * 3).trunc(), X, lambda x: np.trunc(x * np.float32(3)), 0),
    "floor": (lambda t: (t * 3).floor(), X, lambda x: np.floor(x * np.float32(3)), 0),
    "ceil": (lambda t: (t * 3).ceil(), X, lambda x: np.ceil(x * np.float32(3)), 0),
    "round": (lambda t: (t * 2.5).round(), X, None, 0),       # zero signs: see ZERO_SIGN
    "sigmoid": (lambda t: t.sigmoid(), X, None, 2),
    "tanh": (lambda t: t.tanh(), X, None, 4),
    "gelu": (lambda t: t.gelu(), X, None, 8),          # 7 measured, at |gelu(x)| ~ 5e-3
    "silu": (lambda t: t.silu(), X, None, 2),
    "log": (lambda t: t.log(), POS, None, 2),
    "softmax": (lambda t: t.softmax(-1), X, None, 2),
    "log_softmax": (lambda t: t.log_softmax(-1), X, None, 4),
    "layernorm": (lambda t: t.layernorm(), X, None, 2),
    "std": (lambda t: t.std(-1), X, None, 2),
}

# tinygrad's PYTHON device computes TRUNC through a Python int, so trunc(-0.3) is +0.0 there
# while IEEE (numpy, the FTrunc unit) gives -0.0: for these ops zero signs may differ from
# tinygrad (values may not: compared with atol = the smallest normal); they are checked bit for
# bit against numpy instead (round: by value, numpy and tinygrad build -0 differently).
ZERO_SIGN = {"trunc", "floor", "ceil", "round"}


# fp_pipeline 2 here; at 0 (the default) every case but layernorm is also a case of
# tests/test_ops_catalog.py, so only layernorm runs at 0 here
@pytest.mark.slow
@pytest.mark.parametrize("name,fp_pipeline", [(n, 2) for n in sorted(CASES)] + [("layernorm", 0)])
def test_against_tinygrad(name, fp_pipeline):
    model, x, exact, tol = CASES[name]
    atol = float(np.finfo(np.float32).tiny) if name in ZERO_SIGN else 0.0
    result = check_forward(model, [Arg(data=x)], rtol=tol * 2.0 ** -23, atol=atol,
                           config=HardwareConfig(fp_pipeline=fp_pipeline))
    got = result.outputs[0]
    if exact is not None:
        with np.errstate(all="ignore"):
            ref = np.asarray(exact(x), np.float32)
        np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))
    if name == "round":
        np.testing.assert_array_equal(got, np.round(x * np.float32(2.5)))


def test_division_is_one_unit():
    """With FDIV claimed, a * (1 / b) is one correctly rounded division, not two roundings."""
    a = np.array([1.0, 3.0, 10.0, 7.0], np.float32)
    b = np.array([3.0, 7.0, 3.0, 10.0], np.float32)
    design = compile_model(Tensor(a) / Tensor(b))
    got = simulate(design).outputs[0]
    np.testing.assert_array_equal(got.view(np.uint32), (a / b).view(np.uint32))


@pytest.mark.parametrize("name,model,want", [
    ("div", lambda t: t / (t.abs() + 1), lambda x: x / (np.abs(x) + np.float16(1))),
    ("sqrt", lambda t: (t * t).sqrt(), lambda x: np.sqrt(x * x)),   # (tinygrad's abs keeps -0.0)
    ("floor", lambda t: t.floor(), np.floor),
])
def test_fp16_bit_exact_against_numpy_float16(name, model, want):
    """In fp16 every op is rounded to half, as numpy float16 does (tinygrad's PYTHON device
    differs by up to 1 half ULP in div/sqrt: measured 4e-4 relative)."""
    x = np.array([0.3, -1.7, 2.5, 7.0, 0.01, -0.0, 3.3, 100.0], np.float16)
    design = compile_model(model(Tensor(x)))
    result = simulate(design)
    assert result.cycles == design.cycle_model().total
    np.testing.assert_array_equal(result.outputs[0].view(np.uint16), want(x).view(np.uint16))
