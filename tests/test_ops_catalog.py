"""tinygrad's own op tests (test/backend/test_ops.py), forward cases at small shapes, compiled
and simulated (pysim; cycles == the cycle model) and compared with tinygrad's result: bit for bit
where the catalog says "exact", within the case's test_ops tolerance where it says "close"
(tests/ops_catalog.py says why for each). docs/ops.md's table is generated from the same catalog."""
from __future__ import annotations

import numpy as np
import pytest

from compiler import HardwareConfig, compile_model, ir  # first: it picks tinygrad's device
from ops_catalog import CASES, run_case
from tinygrad import Tensor
from tinygrad_ref import make_inputs, tinygrad_outputs

# cases measured at 3 s or more in pysim (float transcendental chains: exp2/log2/sin polynomials
# and the losses built on them): end-to-end, still run in CI, and compiled at fp_pipeline 1
# (SLOW_CONFIG). Unpipelined, such a chain is one combinational path through dozens of float
# units, and Amaranth's simulator settles it in as many passes each cycle (it reads the values
# of the pass before); a register after each unit halves their time (mish 30 -> 14 s,
# binary_crossentropy_logits 38 -> 18 s) for more cycles, still checked against the cycle model.
# The values are the same at every fp_pipeline (test_pipeline); the default is what the fast
# cases and docs/ops.md's table run.
SLOW = {
    "softmax", "softmax_other_axis", "log_softmax", "softmin", "logsumexp", "logcumsumexp", "pow", "pow_int",
    "sin", "cos", "tan", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "sigmoid", "logsigmoid", "silu",
    "swish", "mish", "softplus", "celu", "gelu", "quick_gelu", "erf", "logaddexp", "binary_crossentropy",
    "binary_crossentropy_logits", "binary_crossentropy_reductions", "cross_entropy_class_indices",
    "cross_entropy_smoothing", "sparse_categorical_crossentropy", "nll_loss", "scaled_dot_product_attention",
    "scaled_dot_product_attention_causal", "scaled_dot_product_attention/mask",
}
assert SLOW <= set(CASES), SLOW - set(CASES)
SLOW_CONFIG = HardwareConfig(fp_pipeline=1)
# cases that are another case under a second name in tinygrad (Tensor.silu is swish;
# sparse_categorical_crossentropy with its defaults is what cross_entropy computes on class
# indices), on the same shapes and seed: the same kernels, inputs and reference, so simulating
# both checks nothing the first does not (12 s of pysim for the two). The twin is still compiled
# and compared with its first below (test_twin_cases_compile_to_their_firsts_kernels).
TWINS = {"swish": "silu", "sparse_categorical_crossentropy": "cross_entropy_class_indices"}
assert set(TWINS) | set(TWINS.values()) <= set(CASES)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
                                  for n in CASES if n not in TWINS])
def test_op_against_tinygrad(name):
    case = CASES[name]
    outcome = run_case(case, config=SLOW_CONFIG if name in SLOW else None)
    if case.expect.startswith("unsupported"):
        assert outcome.status == "unsupported", (outcome.status, outcome.detail)
        assert case.expect.removeprefix("unsupported: ") in outcome.detail
        return
    assert outcome.status == case.expect, f"{name}: {outcome.status} ({outcome.detail})"


def test_the_catalog_covers_60_test_ops_cases():
    assert len(CASES) >= 60
    assert sum(case.expect in ("exact", "close") for case in CASES.values()) >= 60


def _compiled(name: str):
    """(inputs, tinygrad's outputs, the compiled design's kernel fingerprints and plan) of a case."""
    case = CASES[name]
    arrays = make_inputs(case.args)
    out = case.forward(*[Tensor(a) for a in arrays])
    design = compile_model(*(out if isinstance(out, (tuple, list)) else (out,)))
    return arrays, tinygrad_outputs(case.forward, arrays), ([ir.fingerprint(k) for k in design.kernels],
                                                            repr((design.phases, design.host)))


@pytest.mark.parametrize("twin", sorted(TWINS))
def test_twin_cases_compile_to_their_firsts_kernels(twin):
    first = TWINS[twin]
    assert CASES[twin].expect == CASES[first].expect and CASES[first].reference is CASES[twin].reference is None
    (ins_a, want_a, hw_a), (ins_b, want_b, hw_b) = _compiled(twin), _compiled(first)
    assert all(np.array_equal(a, b) for a, b in zip(ins_a, ins_b, strict=True))
    assert all(np.array_equal(a, b) for a, b in zip(want_a, want_b, strict=True))
    assert hw_a == hw_b
