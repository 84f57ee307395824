"""What the host does to a raw sample before the design takes it: an affine map per element and
a rounding, the same arithmetic in numpy (what the explorer evaluates) and in C (what the
exported design's user compiles), so that both give the same words.

    hi = HostInput(input="x", buffer=0, scale=A, shift=C, rounding="HALF_EVEN", lo=-127, hi=127,
                   element="int8", how="per feature onto [-1, 1], then 127 steps")
    words = hi(x)                        # (n, elements): clip(round(A * x + C), lo, hi)

A float input (`rounding` "") takes v = A * x + C, which the host rounds to the element's
format (nearest even). The explorer makes these records for the networks it quantises
(dse/models/standardise.py says why a feature is mapped); compiler/export.py writes them into
the exported interface (`host_input` in interface.json, a section of interface.md, the
per-element constants in host_input.csv) and a C header, `<top>_host_input.h`, whose function
computes the same words in double precision (compile without contraction of a * x + c into a
fused multiply-add, `-ffp-contract=off`, so it rounds as numpy does).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROUNDING_MODES = ("ROUND", "HALF_EVEN", "CEIL", "FLOOR", "UP", "DOWN", "HALF_UP", "HALF_DOWN")

# each mode as a C expression of the double `v` (sgn: -1, 0 or 1), mirroring round_mode's numpy
_C_ROUND = {"ROUND": "nearbyint(v)", "HALF_EVEN": "nearbyint(v)", "CEIL": "ceil(v)", "FLOOR": "floor(v)",
            "UP": "sgn * ceil(fabs(v))", "DOWN": "trunc(v)", "HALF_UP": "sgn * floor(fabs(v) + 0.5)",
            "HALF_DOWN": "sgn * ceil(fabs(v) - 0.5)"}


def round_mode(v: np.ndarray, mode: str) -> np.ndarray:
    """`v` rounded to integers by a QONNX rounding mode (ROUND is to nearest, ties to even;
    UP and DOWN are away from and toward zero; HALF_UP and HALF_DOWN break ties so)."""
    v = np.asarray(v, np.float64)
    if mode in ("ROUND", "HALF_EVEN"):
        return np.round(v)
    if mode == "CEIL":
        return np.ceil(v)
    if mode == "FLOOR":
        return np.floor(v)
    if mode == "UP":
        return np.sign(v) * np.ceil(np.abs(v))
    if mode == "DOWN":
        return np.trunc(v)
    if mode == "HALF_UP":
        return np.sign(v) * np.floor(np.abs(v) + 0.5)
    if mode == "HALF_DOWN":
        return np.sign(v) * np.ceil(np.abs(v) - 0.5)
    raise ValueError(f"unknown rounding mode {mode!r}")


@dataclass(frozen=True)
class HostInput:
    input: str                   # the model's input name
    scale: np.ndarray = field(repr=False)   # A, one per element of a sample (flattened, row-major)
    shift: np.ndarray = field(repr=False)   # C
    rounding: str                # a ROUNDING_MODES name; "" for a float input (rounded to `element` by the host)
    element: str                 # the element type the design's input holds (int8, int5, fp16, ...)
    lo: int | None = None        # the integers' range (integer inputs)
    hi: int | None = None
    how: str = ""                # how A and C were chosen, in words
    buffer: int | None = None    # the design's buffer of this input (set by the export)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Raw samples (n, ...) as the design's input values (n, elements): integers as float64
        for an integer input, A * x + C before the host's rounding for a float one."""
        x = np.asarray(x, np.float64).reshape(len(x), -1)
        v = x * self.scale[None, :] + self.shift[None, :]
        if not self.rounding:
            return v
        return np.clip(round_mode(v, self.rounding), self.lo, self.hi)

    def formula(self) -> str:
        """The step in one line: `word[i]` is element i of input `input`, `x[i]` of the raw sample."""
        if not self.rounding:
            return f"word[i] = A[i] * x[i] + C[i], rounded to {self.element} (to nearest, ties to even)"
        mode = {"ROUND": "to nearest, ties to even", "HALF_EVEN": "to nearest, ties to even", "CEIL": "up",
                "FLOOR": "down", "UP": "away from zero", "DOWN": "toward zero",
                "HALF_UP": "to nearest, ties away from zero", "HALF_DOWN": "to nearest, ties toward zero"}[self.rounding]
        return f"word[i] = clip(round(A[i] * x[i] + C[i]), {self.lo}, {self.hi}), rounding {mode}"

    def as_dict(self) -> dict:
        return {"input": self.input, "buffer": self.buffer, "elements": int(self.scale.size), "element": self.element,
                "formula": self.formula(), "rounding": self.rounding or "float", "lo": self.lo, "hi": self.hi,
                "how": self.how, "constants": "host_input.csv"}

    def csv(self) -> str:
        rows = ["element,A,C"] + [f"{i},{a!r},{c!r}" for i, (a, c) in enumerate(zip(self.scale.tolist(),
                                                                                  self.shift.tolist()))]
        return "\n".join(rows) + "\n"

    def c_header(self, top: str) -> str:
        """`<top>_host_input.h`: the constants and `<top>_prepare_<input>(const double *x, out)`."""
        up, name = top.upper(), f"{top}_prepare_{self.input}"
        n = self.scale.size

        def table(v: np.ndarray) -> str:
            return ",\n    ".join(", ".join(repr(float(a)) for a in v[i:i + 4]) for i in range(0, n, 4))
        lines = [f"/* {top}_host_input.h: the host's step before the design takes input `{self.input}`"
                 f"{'' if self.buffer is None else f' (buffer {self.buffer})'}, from interface.md:",
                 f"   {self.formula()}.",
                 f"   A and C: {self.how}. Compile with -ffp-contract=off (A * x + C rounded as two operations). */",
                 f"#ifndef {up}_HOST_INPUT_H", f"#define {up}_HOST_INPUT_H", "", "#include <math.h>",
                 "#include <stdint.h>", "", f"#define {up}_{self.input.upper()}_ELEMENTS {n}", "",
                 f"static const double {up}_{self.input.upper()}_A[{n}] = {{\n    {table(self.scale)}\n}};",
                 f"static const double {up}_{self.input.upper()}_C[{n}] = {{\n    {table(self.shift)}\n}};", ""]
        a, c = f"{up}_{self.input.upper()}_A[i]", f"{up}_{self.input.upper()}_C[i]"
        if not self.rounding:
            lines += [f"/* v[i] = A[i] * x[i] + C[i]; round each to {self.element} before writing it. */",
                      f"static inline void {name}(const double *x, double *v) {{",
                      f"    for (int i = 0; i < {n}; i++) v[i] = {a} * x[i] + {c};", "}"]
        else:
            lines += [f"/* q[i]: the integer the design's input word holds ({self.element}, [{self.lo}, {self.hi}]). */",
                      f"static inline void {name}(const double *x, int32_t *q) {{",
                      f"    for (int i = 0; i < {n}; i++) {{",
                      f"        double v = {a} * x[i] + {c};",
                      "        double sgn = (v > 0) - (v < 0);", "        (void)sgn;",
                      f"        double r = {_C_ROUND[self.rounding]};",
                      f"        q[i] = (int32_t)(r < {self.lo} ? {self.lo} : r > {self.hi} ? {self.hi} : r);",
                      "    }", "}"]
        return "\n".join(lines + ["", f"#endif /* {up}_HOST_INPUT_H */", ""])

    def write(self, out: Path, top: str) -> list[Path]:
        """host_input.csv and `<top>_host_input.h` in `out`."""
        from .tools import atomic_write_text
        paths = [out / "host_input.csv", out / f"{top}_host_input.h"]
        atomic_write_text(paths[0], self.csv())
        atomic_write_text(paths[1], self.c_header(top))
        return paths
