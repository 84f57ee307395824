"""Accumulator overflow proof: static bounds, confirmed by simulating worst-case inputs."""
from __future__ import annotations

import numpy as np

import designs
from compiler import compile_model, simulate
from compiler.overflow import analyze_overflow, worst_case_inputs


def test_int8_dot_product_784_needs_25_bits_not_24():
    design = compile_model(*designs.gemv_int8(128, 784).outputs)
    report = analyze_overflow(design)
    (acc,) = report.accumulators
    assert (acc.lo, acc.hi) == (784 * -128 * 127, 784 * 128 * 128)     # (-128)*(-128) = 16384
    assert acc.bits_required == report.acc_bits_required == 25
    # the register is sized to the proof (compiler/bounds.py), not to int32
    assert acc.width == 25 and acc.safe and report.safe
    assert design.kernels[0].accs[0].bounds == (acc.lo, acc.hi)


def test_worst_case_inputs_reach_the_bound_in_simulation():
    design = compile_model(*designs.gemv_int8(8, 784).outputs)
    worst = worst_case_inputs(design, {})
    assert all((a == -128).all() for a in worst.values())
    out = simulate(design, worst).outputs[0]
    assert (out == 784 * 128 * 128).all()
    assert out.max() == analyze_overflow(design).accumulators[0].hi


def test_input_ranges_narrow_the_bound_and_flow_between_kernels():
    design = compile_model(*designs.mlp_int8(IN=784, HIDDEN=16, OUT=4).outputs)
    x, w1, w2 = design.graph.inputs
    narrow = analyze_overflow(design, {x: (-8, 7), w1: (-8, 7), w2: (-8, 7)})
    first, second = narrow.accumulators
    assert (first.lo, first.hi) == (784 * -8 * 7, 784 * 64)
    # the hidden layer is requantised to 0..127 before the second kernel reads it
    assert (second.lo, second.hi) == (16 * 127 * -8, 16 * 127 * 7)
    assert narrow.acc_bits_required == 17


def test_full_range_int32_products_are_reported_unsafe():
    report = analyze_overflow(compile_model(*designs.conv2d_padded().outputs))
    (acc,) = report.accumulators
    assert not acc.safe and not report.safe and acc.bits_required > 32


def test_running_max_stays_in_range():
    report = analyze_overflow(compile_model(*designs.sibling_loops().outputs))
    (acc,) = report.accumulators
    assert acc.safe and acc.lo == np.iinfo(np.int32).min


def test_nested_reduce_loops_count_each_product_once():
    """conv2d 3x3: acc = 0 outside two nested REDUCE loops: 9 products, not 27."""
    from tinygrad import Tensor, dtypes
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (1, 1, 5, 5)).astype(np.int8)
    w = rng.integers(-128, 128, (2, 1, 3, 3)).astype(np.int8)
    y = Tensor(x).cast(dtypes.int32).conv2d(Tensor(w).cast(dtypes.int32), padding=1)
    (acc,) = analyze_overflow(compile_model(y)).accumulators
    assert (acc.lo, acc.hi, acc.bits_required) == (9 * -128 * 127, 9 * 128 * 128, 19)


def test_a_shift_by_an_amount_in_a_known_range_is_bounded_by_its_ends():
    """x << e and x >> e with e read from [lo, hi] (a requantisation's stored exponent): the
    extremes lie at the range's ends, for either sign of x; an amount that may be negative or
    past 63 is not bounded here."""
    from compiler import ir
    from compiler.ranges import Interval, exact_interval
    K = ir.OpKind
    x, e = Interval(-300, 200), Interval(2, 5)
    assert exact_interval(K.SHL, [x, e], [None, None]) == Interval(-300 << 5, 200 << 5)
    assert exact_interval(K.SHR, [x, e], [None, None]) == Interval(-300 >> 2, 200 >> 2)
    assert exact_interval(K.SHR, [Interval(5, 200), e], [None, None]) == Interval(0, 50)
    assert exact_interval(K.SHL, [x, Interval(-1, 3)], [None, None]) is None
    assert exact_interval(K.SHL, [x, Interval(0, 64)], [None, None]) is None
