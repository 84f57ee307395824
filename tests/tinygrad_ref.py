"""Compare a compiled, simulated model with tinygrad's own result for the same forward pass.

    check_forward(lambda x, y: x.cat(y, dim=1), [((2, 3), dtypes.float32), ((2, 3), dtypes.float32)])

The forward function is called twice on fresh Tensors of the same numpy inputs: once for
tinygrad to compute the reference (its PYTHON device, `Tensor.numpy()`), once for
`compile_model` (scheduling rewrites the Tensors it is given, so one graph cannot serve both).
Every output must match the reference in shape, dtype and value (bit for bit unless a
tolerance is given; NaNs match NaNs), and the simulated cycles must equal the cycle model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from tinygrad import Tensor, dtypes
from tinygrad.dtype import DType as TinygradDType

from compiler import HardwareConfig, SimResult, compile_model, simulate


@dataclass(frozen=True)
class Arg:
    """One input of a forward function: random data of this shape and dtype, or `data`."""
    shape: tuple[int, ...] = ()
    dtype: TinygradDType = dtypes.float32
    low: float = -2.0              # floats: uniform(low, high); ints: integers in [low, high]
    high: float = 2.0
    data: np.ndarray | None = None


def make_inputs(args: Sequence[Arg | tuple], *, seed: int = 0) -> list[np.ndarray]:
    """numpy data for each input; a plain (shape, dtype) tuple is an Arg with default range."""
    rng = np.random.default_rng(seed)
    arrays = []
    for a in args:
        a = a if isinstance(a, Arg) else Arg(*a)
        if a.data is not None:
            arrays.append(np.asarray(a.data))
            continue
        np_dtype = np.dtype(a.dtype.fmt) if a.dtype != dtypes.bool else np.dtype(bool)
        if a.dtype == dtypes.bool:
            arrays.append(rng.integers(0, 2, a.shape).astype(bool))
        elif dtypes.is_float(a.dtype):
            arrays.append(rng.uniform(a.low, a.high, a.shape).astype(np_dtype))
        else:
            low = max(int(a.low), np.iinfo(np_dtype).min)
            arrays.append(rng.integers(low, int(a.high) + 1, a.shape).astype(np_dtype))
    return arrays


def tinygrad_outputs(forward: Callable, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """tinygrad's own result of `forward` on these inputs."""
    out = forward(*[Tensor(a) for a in arrays])
    return [t.numpy() for t in (out if isinstance(out, (tuple, list)) else (out,))]


def check_forward(forward: Callable, args: Sequence[Arg | tuple], *, atol: float = 0.0, rtol: float = 0.0,
                  config: HardwareConfig | None = None, backend: str = "pysim", seed: int = 0) -> SimResult:
    """Compile and simulate `forward` and assert its outputs equal tinygrad's (see module doc)."""
    arrays = make_inputs(args, seed=seed)
    want = tinygrad_outputs(forward, arrays)
    out = forward(*[Tensor(a) for a in arrays])
    design = compile_model(*(out if isinstance(out, (tuple, list)) else (out,)), config=config)
    result = simulate(design, backend=backend)
    assert result.cycles == design.cycle_model().total, (result.cycles, design.cycle_model())
    assert len(result.outputs) == len(want)
    for i, (got, ref) in enumerate(zip(result.outputs, want)):
        assert got.shape == ref.shape, f"output {i}: shape {got.shape}, tinygrad {ref.shape}"
        assert got.dtype == ref.dtype, f"output {i}: dtype {got.dtype}, tinygrad {ref.dtype}"
        if atol or rtol:
            np.testing.assert_allclose(got, ref, atol=atol, rtol=rtol, equal_nan=True, err_msg=f"output {i}")
        else:
            np.testing.assert_array_equal(got, ref, err_msg=f"output {i}")
            if got.dtype.kind == "f":                  # bit for bit: -0.0 is not 0.0
                real = ~np.isnan(ref)
                np.testing.assert_array_equal(np.signbit(got[real]), np.signbit(ref[real]), err_msg=f"output {i} signs")
    return result
