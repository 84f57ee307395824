"""tinygrad's own op tests (test/backend/test_ops.py), forward cases at small shapes, compiled
and simulated (pysim; cycles == the cycle model) and compared with tinygrad's result: bit for bit
where the catalog says "exact", within the case's test_ops tolerance where it says "close"
(tests/ops_catalog.py says why for each). docs/ops.md's table is generated from the same catalog."""
from __future__ import annotations

import pytest

from ops_catalog import CASES, run_case

# the cases that take longest in pysim (the float transcendental chains): end-to-end, run in CI
SLOW = {name for name, case in CASES.items() if case.expect == "close" and not any(
    k in name for k in ("matmul", "dot", "conv", "einsum", "mean", "var", "lerp", "div", "interpolate", "normalize"))}


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
