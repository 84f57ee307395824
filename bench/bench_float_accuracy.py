"""Float accuracy of the hardware against tinygrad's own result.

For GEMV 128x784 and the MLP 784-128-10 in fp32, fp16 and bf16 (rne, subnormals kept), in both
`fp_semantics` settings: the hardware is bit-exact against the numpy model of its arithmetic
(zoo.arith_for: tinygrad's PYTHON-device rounding, or every op rounded to its dtype), and this
prints the max ULP distance to tinygrad's own result (in the output format) and the max
absolute error: 0 for fp16 and bf16 with `tinygrad`; fp32 multiply-adds are fused in tinygrad
and not in the hardware.
Usage: python bench/bench_float_accuracy.py
"""
from __future__ import annotations

import numpy as np
from tinygrad import Tensor, dtypes

from compiler import HardwareConfig, compile_model, simulate
from dse.models import zoo

CASES = [("gemv", {"M": 128, "K": 784}), ("mlp", {"IN": 784, "HIDDEN": 128, "OUT": 10})]


def ordered(bits: np.ndarray, width: int) -> np.ndarray:
    """Map float bit patterns to integers whose difference counts ULPs."""
    b = bits.astype(np.int64)
    sign = b >> (width - 1)
    mag = b & ((1 << (width - 1)) - 1)
    return np.where(sign == 1, -mag, mag)


def as_bits(a: np.ndarray, dtype: str) -> tuple[np.ndarray, int]:
    a = np.asarray(a)
    if dtype == "fp32":
        return a.astype(np.float32).view(np.uint32), 32
    if dtype == "fp16":
        return a.astype(np.float16).view(np.uint16), 16
    return (a.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16), 16


def main() -> None:
    print(f"{'model':6s} {'dtype':5s} {'fp_semantics':12s} {'vs its numpy model':>19s} {'max ULP vs tinygrad':>20s} "
          f"{'max abs err':>12s}")
    for model, params in CASES:
        for dtype in ("fp32", "fp16", "bf16"):
            built = zoo.check_built(zoo.ZOO[model].build(dtype, **params))
            arrays = zoo.make_inputs(built, 0)
            tg = zoo.tinygrad_result(built, arrays)
            for semantics in ("tinygrad", "op"):
                tensors = [Tensor(arrays[n]).cast(dtypes.bfloat16) if dtype == "bf16" else Tensor(arrays[n])
                           for n in built.inputs]
                design = compile_model(built.forward(*tensors), config=HardwareConfig(fp_semantics=semantics))
                got = simulate(design, backend="cxxrtl").outputs[0]
                model_out = zoo.reference(model, dtype, params, arrays, zoo.arith_for(dtype, semantics))
                gb, w = as_bits(got, dtype)
                exact = np.array_equal(gb, as_bits(model_out, dtype)[0])
                ulp = int(np.max(np.abs(ordered(gb, w) - ordered(as_bits(tg, dtype)[0], w))))
                err = float(np.max(np.abs(np.asarray(got, np.float64) - np.asarray(tg, np.float64))))
                print(f"{model:6s} {dtype:5s} {semantics:12s} {'bit-exact' if exact else 'MISMATCH':>19s} {ulp:>20d} "
                      f"{err:>12.3g}")


if __name__ == "__main__":
    main()
