"""Float units in the delay model (compiler/float_timing.py): each unit's slowest stage from its
Fmax placed alone, interpolated between the stage counts measured, and a float design's
estimate bounded by its slowest unit."""
from __future__ import annotations

import numpy as np
import pytest
from tinygrad import Tensor

from compiler import HardwareConfig, compile_model
from compiler.float_timing import MEASURED, MEASURED_IN_CLOCK_ORDER, MEASURED_IN_RING, measured, unit_period_ns
from compiler.timing_model import DELAYS

GRADE6, GRADE8 = DELAYS[("ecp5", 6)], DELAYS[("ecp5", 8)]


@pytest.mark.parametrize("key", sorted(MEASURED))
def test_a_unit_takes_its_measured_period_and_no_longer_with_more_stages(key):
    points = MEASURED[key]
    assert [s for s, _ in points] == sorted({s for s, _ in points})
    for stages, mhz in points:
        # its own figure, or a smaller count's where that one measured faster (placement noise)
        fastest = max(m for s, m in points if s <= stages)
        assert unit_period_ns(key, stages, GRADE6) == pytest.approx(1000 / fastest)
    top = points[-1][0]
    periods = [unit_period_ns(key, s, GRADE6) for s in range(1, top + 3)]
    assert all(a >= b - 1e-9 for a, b in zip(periods, periods[1:])), periods
    assert unit_period_ns(key, top, GRADE8) < unit_period_ns(key, top, GRADE6)
    in_clock_order = measured(key, clock=True)
    for stages, mhz in MEASURED_IN_CLOCK_ORDER.get(key, ()):
        fastest = max(m for s, m in in_clock_order if s <= stages)
        assert (stages, mhz) in in_clock_order
        assert unit_period_ns(key, stages, GRADE6, clock=True) == pytest.approx(1000 / fastest)


@pytest.mark.parametrize("key", sorted(MEASURED_IN_RING))
def test_a_rings_fused_multiply_add_is_timed_from_its_own_figures(key):
    """A ring's FMulAdd with its product before its stages (FMulAdd ring=True) is another unit
    than the one MEASURED times at those stage counts: its own figures."""
    for stages, mhz in MEASURED_IN_RING[key]:
        assert unit_period_ns(key, stages, GRADE6, clock=True, ring=True) == pytest.approx(1000 / mhz)
    periods = [unit_period_ns(key, s, GRADE6, True, True) for s in range(1, 14)]
    assert all(a >= b - 1e-9 for a, b in zip(periods, periods[1:])), periods


def test_an_unmeasured_unit_is_not_timed():
    assert unit_period_ns(("FAdd", "fp8e4m3"), 4, GRADE6) is None
    assert unit_period_ns(("FAdd", "fp32"), 4, DELAYS[("ice40", None)]) is None


def test_a_float_sum_is_estimated_at_its_adder_not_its_integer_paths():
    """A float32 sum to a scalar: its adder on a one-cycle loop, combinational, closed at 24.8
    MHz placed and routed (docs/timing.md), where the integer paths alone estimated 196; at a
    target clock its padding rows pipeline the adder (96.6 MHz placed)."""
    y = Tensor(np.random.default_rng(0).standard_normal(40).astype(np.float32)).sum()
    one_cycle = compile_model(y, config=HardwareConfig(fp_pipeline=3)).timing_estimate()
    assert one_cycle.fmax_mhz <= dict(MEASURED[("FAdd", "fp32")])[1] * 1.001
    assert "FAdd fp32 at 1 stage" in one_cycle.where
    ring = compile_model(y, config=HardwareConfig(fp_pipeline=3, target_mhz=150)).timing_estimate()
    assert 3 * one_cycle.fmax_mhz < ring.fmax_mhz
