"""Constant layers as shared adder graphs (compiler/passes/adder_graph.py, `adder_graph`,
`adder_depth`): the graph is da4ml's, checked against the matrix and emitted as integer IR; every
design is simulated bit-exact against numpy with cycles equal to the cycle model."""
from __future__ import annotations

import numpy as np
import pytest
from tinygrad import Tensor, dtypes

from compiler import CompileError, HardwareConfig, compile_model, ir, simulate
from compiler.passes import adder_graph
from compiler.passes.adder_graph import Add, Output, Plan, per_product_adders, plan_of

# the tests that solve a graph need da4ml (the test extra installs it); the rest run without it
needs_da4ml = pytest.mark.skipif(not adder_graph.da4ml_available(),
                                 reason="da4ml is not installed (pip install -e \".[test]\" installs it)")

K = ir.OpKind


def _layer(W: np.ndarray, bias: np.ndarray | None = None, shift: int | None = None):
    """x (int8 Tensor), y = W x (+ bias, then relu >> shift clipped to 127 when shift is given)."""
    x = Tensor(np.zeros(W.shape[1], np.int8)).realize()
    y = Tensor(W.astype(np.int8)).cast(dtypes.int32) @ x.cast(dtypes.int32)
    if bias is not None:
        y = y + Tensor(bias.astype(np.int32))
    if shift is not None:
        y = (y.relu() >> shift).minimum(127).cast(dtypes.int8).cast(dtypes.int32)
    return x, y


def _reference(W, x, bias=None, shift=None):
    y = W.astype(np.int64) @ x.astype(np.int64)
    if bias is not None:
        y = y + bias
    if shift is not None:
        y = np.minimum(np.maximum(y, 0) >> shift, 127)
    return y


def _adders(design) -> int:
    return sum(isinstance(v, ir.Op) and v.op in (K.ADD, K.SUB, K.NEG) and not v.dtype.is_float
               for k in design.kernels for v in ir.toposort([o for s, _ in k.stores() for o in ir.store_operands(s)]))


def _depth(design) -> int:
    """Adder levels on the longest path of the design's kernels."""
    depth: dict[int, int] = {}
    for k in design.kernels:
        for v in ir.toposort([o for s, _ in k.stores() for o in ir.store_operands(s)]):
            here = 1 if isinstance(v, ir.Op) and v.op in (K.ADD, K.SUB, K.NEG) else 0
            depth[id(v)] = here + max((depth[id(o)] for o in ir.operands(v)), default=0)
    return max(depth.values())


def _compile(W, style, bias=None, shift=None, **knobs):
    x, y = _layer(W, bias, shift)
    config = HardwareConfig.from_dict({"weights": "constant", "lanes": W.shape[0], "reduce_unroll": W.shape[1],
                                       "adder_graph": style, **knobs})
    return x, compile_model(y, config=config, stream=x, input_ranges={x: (-128, 127)})


def _check(design, x, W, samples, bias=None, shift=None):
    for s in samples:
        r = simulate(design, {x: s})
        assert np.array_equal(np.asarray(r.outputs[0]).reshape(-1), _reference(W, s, bias, shift))
        assert r.cycles == design.cycle_model().total


@needs_da4ml
def test_a_dense_layer_shares_partial_sums_and_stays_exact():
    rng = np.random.default_rng(0)
    W = rng.integers(-128, 128, (8, 12))
    samples = [np.full(12, -128, np.int8), np.full(12, 127, np.int8)] + [rng.integers(-128, 128, 12).astype(np.int8)
                                                                        for _ in range(3)]
    xs, shared = _compile(W, "shared")
    xp, alone = _compile(W, "per_product")
    assert _adders(alone) == per_product_adders(W.T)            # each weight's digits, a tree per output
    assert _adders(shared) < 0.8 * _adders(alone)                # partial sums computed once
    _check(shared, xs, W, samples)
    _check(alone, xp, W, samples)


@needs_da4ml
def test_a_pruned_layer_with_bias_and_requantisation_stays_exact():
    rng = np.random.default_rng(1)
    W = rng.integers(-32, 32, (10, 16))
    W[rng.random(W.shape) < 0.75] = 0
    bias = rng.integers(-3000, 3000, 10)
    x, design = _compile(W, "shared", bias=bias, shift=6, fp_pipeline=3, adder_levels=2)
    _, alone = _compile(W, "per_product", bias=bias, shift=6, fp_pipeline=3, adder_levels=2)
    assert _adders(design) < _adders(alone)
    _check(design, x, W, [rng.integers(-128, 128, 16).astype(np.int8) for _ in range(4)], bias, 6)


@needs_da4ml
def test_adder_depth_bounds_the_graph_and_trades_adders():
    rng = np.random.default_rng(2)
    W = rng.integers(-8, 8, (16, 16))
    _, free = _compile(W, "shared")
    x, tight = _compile(W, "shared", adder_depth=0)
    # the least depth of any graph: each output's digits summed in a balanced tree
    least = max(int(np.ceil(np.log2(max(sum(bin(abs(int(c))).count("1") for c in row), 1)))) for row in W)
    assert _depth(tight) <= least + 1 <= _depth(free)
    assert _adders(free) <= _adders(tight)
    _check(tight, x, W, [rng.integers(-128, 128, 16).astype(np.int8) for _ in range(2)])


def test_shared_without_da4ml_is_one_clear_error_and_auto_builds_per_product(monkeypatch):
    monkeypatch.setattr(adder_graph, "da4ml_available", lambda: False)
    W = np.array([[3, 5], [7, 3]])
    with pytest.raises(CompileError, match="adder_graph: shared needs the da4ml package"):
        _compile(W, "shared")
    _, auto = _compile(W, "auto")
    _, alone = _compile(W, "per_product")
    assert _adders(auto) == _adders(alone)


@needs_da4ml
def test_a_graph_that_disagrees_with_its_matrix_is_not_used(monkeypatch):
    real = adder_graph.solve_da4ml

    def wrong(W, *args):
        plan = real(W, *args)
        out = plan.outputs[0]
        outputs = (Output(out.node, out.shift + 1, out.negate),) + plan.outputs[1:]     # twice the first output
        return Plan(plan.inputs, plan.adds, outputs)
    monkeypatch.setattr(adder_graph, "solve_da4ml", wrong)
    rng = np.random.default_rng(3)
    W = rng.integers(-128, 128, (6, 8))
    x, design = _compile(W, "shared")
    _, alone = _compile(W, "per_product")
    assert _adders(design) == _adders(alone)                     # the products stay as they were
    _check(design, x, W, [rng.integers(-128, 128, 8).astype(np.int8)])


def test_plan_coefficients_and_depth():
    # x0, x1 -> n2 = x0 + (x1 << 1); n3 = (n2 << 2) - x0; outputs: n3, -(n2), zero
    plan = Plan(2, (Add(0, 1, 0, 1, False), Add(2, 0, 2, 0, True)),
                (Output(3, 0, False), Output(2, 1, True), Output(None, 0, False)))
    assert plan.coefficients().tolist() == [[3, -2, 0], [8, -4, 0]]
    assert plan.depth() == 2


class _Op:
    def __init__(self, id0, id1, opcode, data):
        self.id0, self.id1, self.opcode, self.data = id0, id1, opcode, data


class _Stage:
    def __init__(self, ops, inp_shifts, out_idxs, out_shifts, out_negs):
        self.ops, self.inp_shifts, self.out_idxs, self.out_shifts, self.out_negs = \
            ops, inp_shifts, out_idxs, out_shifts, out_negs


class _Pipeline:
    def __init__(self, *stages):
        self.solutions = stages


def test_da4ml_fractional_steps_become_left_shifts():
    """buf2 = x0 + x1 / 2 (a half step), out = buf2 << 1 = 2 x0 + x1: every node is built with
    left shifts, the output's exponent is 0."""
    stage = _Stage([_Op(0, -1, -1, 0), _Op(1, -1, -1, 0), _Op(0, 1, 0, -1)], [0, 0], [2], [1], [False])
    plan = plan_of(_Pipeline(stage), 2)
    assert plan.adds == (Add(0, 1, 1, 0, False),)
    assert plan.coefficients().tolist() == [[2], [1]]
    # an output that would need a right shift (an exact division, not one of two's complement) is refused
    stage = _Stage([_Op(0, -1, -1, 0), _Op(1, -1, -1, 0), _Op(0, 1, 0, -1)], [0, 0], [2], [0], [False])
    assert plan_of(_Pipeline(stage), 2) is None
    # an op that is not an addition (a relu, opcode 2) is refused
    stage = _Stage([_Op(0, -1, -1, 0), _Op(0, -1, 2, 0)], [0], [1], [0], [False])
    assert plan_of(_Pipeline(stage), 1) is None


@pytest.mark.parametrize("knobs, message", [
    ({"adder_graph": "cse"}, "HardwareConfig.adder_graph: expected one of 'auto', 'shared', 'per_product'"),
    ({"adder_depth": -1}, "HardwareConfig.adder_depth: expected None"),
])
def test_bad_knob_values_are_refused(knobs, message):
    with pytest.raises(ValueError, match=message):
        HardwareConfig.from_dict(knobs)


@needs_da4ml
def test_a_transposed_view_is_solved_as_the_matrix_it_shows():
    """da4ml reads its matrix's buffer row-major: a transposed view (W.T of an out x in layer)
    must give the graph of W.T, not of W."""
    W = np.random.default_rng(4).integers(-8, 8, (6, 6))
    plan = adder_graph.solve_da4ml(W.T, [(-128, 127)] * 6, [0.0] * 6, None)
    assert np.array_equal(plan.coefficients(), W.T.astype(object))


@needs_da4ml
def test_the_graph_of_fewest_sites_among_six_orders_computes_the_matrix_and_is_no_deeper():
    """adder_graph._best_order: the same matrix solved in six row orders, the kept graph's
    inputs renumbered back to the matrix's rows (its coefficients are the matrix), its LUT cost
    no more and its adder levels no more than the given order's; a 32x32 layer of 3-bit weights,
    75% zero, where another order is cheaper (docs/area.md)."""
    rng = np.random.default_rng(0)
    W = rng.integers(-4, 4, (32, 32))
    W[rng.random(W.shape) < 0.75] = 0
    K = W.T
    intervals, latencies = [(-4, 3)] * 32, [0.0] * 32
    first = adder_graph.solve_da4ml(K, intervals, latencies, None)
    best = adder_graph._best_order(K, intervals, latencies, None)
    assert np.array_equal(best.coefficients(), K.astype(object))
    assert adder_graph.lut_cost(best, intervals) < adder_graph.lut_cost(first, intervals)
    assert best.depth(latencies) <= first.depth(latencies)
    # one order past ORDER_WEIGHTS: the given order's graph itself
    dense = rng.integers(-4, 4, (40, 40))
    assert np.count_nonzero(dense) > adder_graph.ORDER_WEIGHTS
    one = adder_graph._best_order(dense, [(-4, 3)] * 40, [0.0] * 40, None)
    assert one == adder_graph.fewer_negations(adder_graph.solve_da4ml(dense, [(-4, 3)] * 40, [0.0] * 40, None),
                                              [(-4, 3)] * 40)
    # the natural order (the rows as the user's matrix has them) is the one solved alone
    perm = np.random.default_rng(1).permutation(40)
    alone = adder_graph._best_order(dense[perm], [(-4, 3)] * 40, [0.0] * 40, None, natural=np.argsort(perm))
    assert np.array_equal(alone.coefficients(), dense[perm].astype(object))
    assert adder_graph.lut_cost(alone, [(-4, 3)] * 40) == adder_graph.lut_cost(one, [(-4, 3)] * 40)


def _negations(plan: Plan) -> list[int]:
    return [o.node for o in plan.outputs if o.negate]


def test_a_negated_output_is_computed_negated_where_its_adders_allow():
    """adder_graph.fewer_negations: an output -(x0 - x1) is built x1 - x0; -((x0 - x1) + x2)
    as (x1 - x0) - x2, the inner node flipped too; -(x0 + x1) keeps its negation (inputs are never
    negated); a node flipped for one output and read unnegated by another costs that one a
    negation, kept only when the bits it saves are more. Every plan computes its matrix."""
    wide = [(-128, 127)] * 3

    def check(plan, want_negations):
        after = adder_graph.fewer_negations(plan, wide)
        assert np.array_equal(after.coefficients(), plan.coefficients())
        assert _negations(after) == want_negations
        return after
    after = check(Plan(2, (Add(0, 1, 0, 0, True),), (Output(2, 0, True),)), [])
    assert after.adds == (Add(1, 0, 0, 0, True),)
    after = check(Plan(3, (Add(0, 1, 0, 0, True), Add(3, 2, 0, 0, False)), (Output(4, 1, True),)), [])
    assert after.adds == (Add(1, 0, 0, 0, True), Add(3, 2, 0, 0, True))
    check(Plan(2, (Add(0, 1, 0, 0, False),), (Output(2, 0, True),)), [2])
    # n3 (10 bits) negated, n2 = x0 - x1 (9 bits) read by a second output as it is: flipping n2
    # moves the negation to the narrower output
    check(Plan(3, (Add(0, 1, 0, 0, True), Add(3, 2, 0, 0, False)), (Output(4, 0, True), Output(3, 0, False))), [3])
    # ... but not when n2 is read by two outputs (two 9-bit negations for one of 10 bits)
    check(Plan(3, (Add(0, 1, 0, 0, True), Add(3, 2, 0, 0, False)),
               (Output(4, 0, True), Output(3, 0, False), Output(3, 1, False))), [4])
