"""A float sum that a later loop of its kernel reads ends its kernel at a target clock
(compiler/passes/split_sums.py), so its adder is pipelined as a ring: results the same bits as
the design without a target clock, cycles as modelled."""
from __future__ import annotations

import numpy as np
from tinygrad import Tensor

from compiler import HardwareConfig, compile_model, ir, simulate

K = ir.OpKind


def _softmax():
    """softmax of 10 fp32 values: tinygrad 0.14 fuses its denominator's sum with the division
    that reads it into one kernel."""
    v = np.random.default_rng(0).standard_normal(10).astype(np.float32)
    x = Tensor(v).realize()
    return x, v, x.softmax()


def _float_sums(design) -> dict[str, list[int]]:
    """Kernel name -> the ways of each accumulator it updates with a float add."""
    out: dict[str, list[int]] = {}
    for k in design.kernels:
        ways = {a.index: a.ways for a in k.accs}
        for s, _ in k.stores():
            if isinstance(s, ir.AccStore) and s.value.dtype.is_float and isinstance(s.value, ir.Op) \
                    and s.value.op is K.ADD:
                out.setdefault(k.name, []).append(ways[s.acc])
    return out


def test_a_softmax_denominator_read_by_the_division_is_pipelined_at_a_target_clock():
    x, v, y = _softmax()
    plain = compile_model(y, config=HardwareConfig(fp_pipeline=3, lanes=2), stream=x)
    clocked = compile_model(y, config=HardwareConfig(fp_pipeline=3, lanes=2, target_mhz=150), stream=x)
    # without a target clock the sum stays in the kernel that divides by it, on a one-cycle loop
    assert any(w == [1] for w in _float_sums(plain).values())
    sums = _float_sums(clocked)
    assert all(w > 1 for ways in sums.values() for w in ways), sums
    names = [k.name for k in clocked.kernels]
    cut = next(n for n in names if n.endswith("_sum"))
    assert names.index(cut[:-len("_sum")] + "_rest") == names.index(cut) + 1
    assert len(clocked.kernels) == len(plain.kernels) + 1
    a, b = simulate(plain, {x: v}), simulate(clocked, {x: v})
    assert np.asarray(b.outputs[0]).tobytes() == np.asarray(a.outputs[0]).tobytes()
    assert b.cycles == clocked.cycle_model().total
    e = np.exp(v.astype(np.float64) - v.max())
    np.testing.assert_allclose(np.asarray(b.outputs[0]).reshape(-1), e / e.sum(), rtol=1e-5)
    est = clocked.timing_estimate()
    assert "FAdd fp32 at 1 stage" not in est.where and 1000 / est.period_ns > 60, est


def test_without_a_target_clock_no_kernel_is_cut():
    x, _, y = _softmax()
    for config in (HardwareConfig(fp_pipeline=3), HardwareConfig(fp_pipeline=0, target_mhz=None)):
        design = compile_model(y, config=config, stream=x)
        assert not any(k.name.endswith(("_sum", "_rest")) for k in design.kernels)
