"""Hardware knobs that trade cycles for area: validation, bit-exactness, exact cycle model."""
from __future__ import annotations

import numpy as np
import pytest

import designs
from compiler import HardwareConfig, compile_model, simulate
from compiler.overflow import analyze_overflow, worst_case_inputs


def assert_exact(outputs, reference):
    assert len(outputs) == len(reference)
    for got, want in zip(outputs, reference):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------ validation

@pytest.mark.parametrize("knob, value, message", [
    ("acc_width", 0, "HardwareConfig.acc_width: expected None (the accumulator's dtype) or an integer from 1 to 64, got 0"),
    ("acc_width", 65, "got 65"),
    ("acc_width", "32", "got '32'"),
    ("acc_width", True, "got True"),
    ("loop_fusion", "yes", "HardwareConfig.loop_fusion: expected True or False, got 'yes'"),
])
def test_bad_knob_values_name_the_knob_and_the_value(knob, value, message):
    with pytest.raises(ValueError) as err:
        HardwareConfig(**{knob: value})
    assert message in str(err.value) and f"HardwareConfig.{knob}" in str(err.value)


# ------------------------------------------------------------------ acc_width

def test_acc_width_at_the_proven_need_is_exact_and_narrower_wraps():
    case = designs.gemv_int8(4, 784)
    need = analyze_overflow(compile_model(*case.outputs)).acc_bits_required
    assert need == 25
    for width, safe in ((need, True), (need - 1, False), (40, True)):
        design = compile_model(*case.outputs, config=HardwareConfig(acc_width=width))
        report = analyze_overflow(design)
        (acc,) = report.accumulators
        assert acc.width == width and acc.bits_required == need and acc.safe is safe
        worst = simulate(design, worst_case_inputs(design, {})).outputs[0]
        exact = 784 * 128 * 128
        assert (worst == (exact if safe else exact - (1 << width))).all()
        assert_exact(simulate(design).outputs, case.reference)   # random data fits 24 bits


def test_a_wrapping_accumulator_spans_its_register_for_the_next_kernel():
    case = designs.residual_mlp(N=8)
    first, second = analyze_overflow(compile_model(*case.outputs, config=HardwareConfig(acc_width=12))).accumulators
    assert first.bits_required == 19 and first.width == 12 and not first.safe
    # h = relu(acc) of a 12-bit register is 0..2047, not the 0..8*128*128 of the exact sum
    assert (second.lo, second.hi) == (8 * -128 * 2047, 8 * 127 * 2047)


@pytest.mark.slow
def test_acc_width_at_the_need_saves_flip_flops_and_luts(tmp_path):
    from compiler.synth import synthesize
    case = designs.gemv_int8(16, 784)
    wide = synthesize(compile_model(*case.outputs), "ecp5", workdir=tmp_path / "w32")
    narrow = synthesize(compile_model(*case.outputs, config=HardwareConfig(acc_width=25)), "ecp5",
                        workdir=tmp_path / "w25")
    assert narrow.ffs < wide.ffs and narrow.luts < wide.luts
