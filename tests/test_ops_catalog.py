"""tinygrad's own op tests (test/backend/test_ops.py), forward cases at small shapes, compiled
and simulated (pysim; cycles == the cycle model) and compared with tinygrad's result: bit for bit
where the catalog says "exact", within the case's test_ops tolerance where it says "close"
(tests/ops_catalog.py says why for each). docs/ops.md's table is generated from the same catalog."""
from __future__ import annotations

import pytest

from ops_catalog import CASES, run_case

# cases measured at 3 s or more in pysim (float transcendental chains: exp2/log2/sin polynomials
# and the losses built on them): end-to-end, still run in CI
SLOW = {
    "softmax", "softmax_other_axis", "log_softmax", "softmin", "logsumexp", "logcumsumexp", "pow", "pow_int",
    "sin", "cos", "tan", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "sigmoid", "logsigmoid", "silu",
    "swish", "mish", "softplus", "celu", "gelu", "quick_gelu", "erf", "logaddexp", "binary_crossentropy",
    "binary_crossentropy_logits", "binary_crossentropy_reductions", "cross_entropy_class_indices",
    "cross_entropy_smoothing", "sparse_categorical_crossentropy", "nll_loss", "scaled_dot_product_attention",
    "scaled_dot_product_attention_causal", "scaled_dot_product_attention/mask",
}
assert SLOW <= set(CASES), SLOW - set(CASES)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in CASES])
def test_op_against_tinygrad(name):
    case = CASES[name]
    outcome = run_case(case)
    if case.expect.startswith("unsupported"):
        assert outcome.status == "unsupported", (outcome.status, outcome.detail)
        assert case.expect.removeprefix("unsupported: ") in outcome.detail
        return
    assert outcome.status == case.expect, f"{name}: {outcome.status} ({outcome.detail})"


def test_the_catalog_covers_60_test_ops_cases():
    assert len(CASES) >= 60
    assert sum(case.expect in ("exact", "close") for case in CASES.values()) >= 60
