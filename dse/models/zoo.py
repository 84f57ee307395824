"""The model zoo, the model contract, seeded input data and numpy golden models.

The contract every model follows, zoo or user file::

    def build(dtype: str, **params) -> (inputs, forward)

``inputs`` is an ordered dict mapping each input name to ``(shape, dtype_name)`` (weights are
inputs too; ``dtype_name`` is one of ``DTYPES``) and ``forward(*tensors)`` takes tinygrad Tensors
in that order and returns the output Tensor. ``build`` only describes the model: it must not
touch tinygrad devices, so a spec can be validated without running anything.

Data types (the names a spec's ``dtypes:`` list accepts; dse/models/formats.py):

    int8, int16, int32, uint8   integers; the zoo casts them to int32 before any arithmetic,
                                so results are int32 (wrapping modulo 2**32, like the hardware)
    int2 .. int16, uint2 .. uint16  narrow integers: N-bit values in tinygrad's int8/int16
                                (uint8/uint16); inputs are drawn in the N-bit range, and the
                                compiler is told it (`declared_ranges`), so it builds N-bit hardware
    wNaM                        mixed: N-bit weights, M-bit activations (w4a8); a model gives each
                                input `weights_dtype(dtype)` or `activations_dtype(dtype)`
    fp16, bf16, fp32            IEEE half, bfloat16, single; fp16/bf16 products are summed in
                                float32 and the sum is cast back (tinygrad's own rule)
    fp8e4m3, fp8e5m2            OCP 8-bit floats (E4M3: no inf, max 448; E5M2: IEEE-like), as
                                tinygrad computes them: round to nearest even, overflow
                                saturating at the largest finite value; products rounded to
                                fp8, summed in float32, the sum cast back (docs/fp8.md)

numpy has no bfloat16 or fp8: bf16 and fp8 arrays travel as float32 arrays holding exact
values; `bits` gives the raw 16- or 8-bit patterns.

`reference` is each zoo model's numpy golden model, in the lowered kernel's order (reductions
k = 0..K-1). How floats round is an `Arith`: `KERNEL` (every op rounds to its dtype, as the
kernel is written) or `python_device_arith(dtype)` (what tinygrad's PYTHON device computes,
bit for bit; `tinygrad_result` runs it); `arith_for(dtype, fp_semantics)` is the one the
hardware computes under that knob.

One module (~670 lines): each builtin model beside its numpy golden model, which change
together (a model's kernel order is its reference's order).
"""
from __future__ import annotations

import importlib.metadata
import inspect
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from compiler import dtypes as hw_dtypes
from compiler.dtypes import DType
from dse.models import formats
from dse.models.formats import activations_dtype, weights_dtype  # noqa: F401 - part of the model contract


# ---------------------------------------------------------------------------------------------
# data types

class _Dtypes(dict):
    """Element type name -> DType (iterating gives these); a mixed format's name (w4a8) also
    looks up, as the DType of its activations under the format's name (formats.mixed_type)."""

    def __missing__(self, name):
        d = formats.mixed_type(name)
        if d is None:
            raise KeyError(name)
        return d

    def __contains__(self, name) -> bool:
        return dict.__contains__(self, name) or formats.mixed_type(name) is not None


# The spec's dtypes are the compiler's (compiler.dtypes: bits, float format, finite range).
DTYPES: dict[str, DType] = _Dtypes(formats.ELEMENTS)
BF16_MAX = hw_dtypes.BF16.highest


def storage(dtype: str) -> np.dtype:
    """The numpy dtype of arrays holding `dtype` values: bf16 and fp8 values travel in float32."""
    return np.dtype(np.float32) if DTYPES[dtype].held_as_bits else DTYPES[dtype].numpy


@dataclass(frozen=True)
class InputRange:
    """Closed interval random input data is drawn from."""
    min: float
    max: float


def default_input_range(dtype: str) -> InputRange:
    """Integers: the type's full range. Floats: [-1, 1] (keeps fp16 sums of a few thousand
    products far from overflow)."""
    d = DTYPES[dtype]
    return InputRange(-1.0, 1.0) if d.is_float else InputRange(int(d.lowest), int(d.highest))


def check_input_range(r: InputRange, dtype: str) -> None:
    """Raise ValueError if `r` cannot be used for data of `dtype`."""
    d = DTYPES[dtype]
    if not d.is_float and not (float(r.min).is_integer() and float(r.max).is_integer()):
        raise ValueError(f"{dtype} data needs integer bounds, got min={r.min!r}, max={r.max!r}")
    if r.min < d.lowest or r.max > d.highest:
        raise ValueError(f"[{r.min}, {r.max}] is outside the {dtype} range [{_fmt(d.lowest)}, {_fmt(d.highest)}]")
    if r.min > r.max:
        raise ValueError(f"min ({r.min}) is greater than max ({r.max})")


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e16 else f"{v:g}"


# ---------------------------------------------------------------------------------------------
# the model contract

class Built(NamedTuple):
    """What `build(dtype, **params)` returns (a plain tuple is accepted and converted)."""
    inputs: dict[str, tuple[tuple[int, ...], str]]
    forward: Callable[..., Any]


MAX_ELEMENTS = 1 << 24
"""The most elements one model input may have (and the largest value of a zoo model's size
parameters): 16 Mi int8 elements are 128 Mbit, more on-chip memory than any FPGA of the targets
here has (the largest ECP5, the LFE5U-85F, has 3.7 Mbit of block RAM). Larger sizes could never
fit, and would only make numpy or the compiler run out of memory or time first."""


def check_built(result: Any) -> Built:
    """Check that `result` follows the contract; raise ValueError saying what is wrong."""
    if not isinstance(result, tuple) or len(result) != 2:
        raise ValueError(f"build() must return (inputs, forward), got {type(result).__name__}")
    inputs, forward = result
    if not isinstance(inputs, dict) or not inputs:
        raise ValueError(f"build() must return a non-empty dict of inputs first, got {inputs!r}")
    for name, entry in inputs.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"input names must be identifiers, got {name!r}")
        if not (isinstance(entry, tuple) and len(entry) == 2):
            raise ValueError(f"input {name!r}: expected (shape, dtype_name), got {entry!r}")
        shape, dt = entry
        if not (isinstance(shape, tuple) and shape and all(type(s) is int and s > 0 for s in shape)):
            raise ValueError(f"input {name!r}: shape must be a non-empty tuple of positive ints, got {shape!r}")
        if formats.mixed_type(dt) is not None:
            raise ValueError(f"input {name!r}: {dt!r} names two element types, not one: give weights "
                             f"weights_dtype(dtype) ({formats.weights_dtype(dt)!r}) and activations "
                             f"activations_dtype(dtype) ({formats.activations_dtype(dt)!r}) "
                             f"(from dse.models.zoo import weights_dtype, activations_dtype)")
        if dt not in DTYPES:
            raise ValueError(f"input {name!r}: {formats.FormatError(f'unknown dtype {dt!r}{formats.suggest(dt)}')}")
        if (n := int(np.prod(shape, dtype=object))) > MAX_ELEMENTS:
            raise ValueError(f"input {name!r}: shape {shape} has {n:,} elements, more than the {MAX_ELEMENTS:,} "
                             f"this tool builds: no FPGA target here could hold it")
    if not callable(forward):
        raise ValueError(f"build() must return a callable forward second, got {forward!r}")
    return Built(dict(inputs), forward)


def import_tinygrad():
    """Import tinygrad, defaulting to its PYTHON device (the only one on machines without a GPU
    or C compiler) when DEV is unset, even if tinygrad was imported before DEV was set."""
    os.environ.setdefault("DEV", "PYTHON")
    import tinygrad
    from tinygrad.helpers import DEV
    if not DEV.device:
        DEV.value = os.environ["DEV"]
    return tinygrad


def input_tensors(built: Built, arrays: Mapping[str, np.ndarray]) -> list:
    """Realized tinygrad Tensors holding the input data (bf16 arrays are float32 holders)."""
    tg = import_tinygrad()
    out = []
    for name, (_, dt) in built.inputs.items():
        a = np.asarray(arrays[name])
        if dt == "bf16" and a.dtype == np.float32 and not (a.view(np.uint32) & 0xFFFF).any():
            # Already bf16 values: their top halves are the bf16 bits. tinygrad's cast would
            # give the same bits, but on its PYTHON device it runs element by element (0.8 s
            # for the 100k weights of a GEMV 128x784); a buffer made from the bytes is instant.
            hi = (a.view(np.uint32) >> 16).astype(np.uint16)
            t = tg.Tensor(hi.tobytes(), dtype=tg.dtypes.bfloat16).reshape(a.shape)
        elif dt in hw_dtypes.FP8_NAMES:
            t = _fp8_tensor(a, dt)
        else:
            t = tg.Tensor(a)
            if dt == "bf16":
                t = t.cast(tg.dtypes.bfloat16)
        out.append(t.realize())
    return out


def declared_ranges(built: Built, tensors: list, input_range: InputRange | None = None,
                    fixed: frozenset[str] | set[str] = frozenset()) -> dict:
    """compile_model's `input_ranges` for the input Tensors of `built` (in input order): what each
    integer input may hold, where that is less than its Tensor's type holds. An input of a narrow
    type holds its type's values (int4 in an int8 Tensor: [-8, 7]); an input drawn at random holds
    the spec's `input_range` when there is one; an input filled from a file (`fixed`: weights,
    data samples, checked against their type when loaded) its type's. The hardware is sized to
    these ranges (compiler/bounds.py)."""
    out = {}
    for (name, (_, dt)), t in zip(built.inputs.items(), tensors):
        d = DTYPES[dt]
        if d.is_float:
            continue
        r = default_input_range(dt) if name in fixed or input_range is None else input_range
        lo, hi = int(r.min), int(r.max)
        if (lo, hi) != (d.container.min, d.container.max):
            out[t] = (lo, hi)
    return out


def _fp8_tensor(a: np.ndarray, dtype: str):
    """An fp8 Tensor from the bit patterns of `a` (float32 holders of fp8 values, or values to
    round): built from bytes, as tinygrad's elementwise cast takes seconds on its PYTHON device."""
    tg = import_tinygrad()
    raw = hw_dtypes.to_words(np.asarray(a, np.float32), DTYPES[dtype]).astype(np.uint8)
    return tg.Tensor(raw.tobytes(), dtype=hw_dtypes.to_tinygrad(DTYPES[dtype])).reshape(np.shape(a))


def _widen(t, dtype: str):
    """Integer inputs are cast to int32 before arithmetic: tinygrad's `matmul(dtype=int32)`
    still multiplies in the input type and wraps, so the cast must come first."""
    return t if DTYPES[dtype].is_float else t.cast(import_tinygrad().dtypes.int32)


# ---------------------------------------------------------------------------------------------
# the zoo

def gemv(dtype: str, M: int = 128, K: int = 784) -> Built:
    """y = W @ x: matrix-vector product, W is (M, K), x is (K,)."""
    def forward(W, x):
        return _widen(W, dtype) @ _widen(x, dtype)
    return Built({"W": ((M, K), weights_dtype(dtype)), "x": ((K,), activations_dtype(dtype))}, forward)


def matmul(dtype: str, M: int = 16, K: int = 16, N: int = 16) -> Built:
    """C = A @ B: matrix product, A is (M, K) (activations), B is (K, N) (weights)."""
    def forward(A, B):
        return _widen(A, dtype) @ _widen(B, dtype)
    return Built({"A": ((M, K), activations_dtype(dtype)), "B": ((K, N), weights_dtype(dtype))}, forward)


def elementwise(dtype: str, N: int = 256) -> Built:
    """y = relu(a + b) over vectors of N elements (integers add in int32, no wrap)."""
    def forward(a, b):
        return (_widen(a, dtype) + _widen(b, dtype)).relu()
    act = activations_dtype(dtype)
    return Built({"a": ((N,), act), "b": ((N,), act)}, forward)


def mlp(dtype: str, IN: int = 784, HIDDEN: int = 128, OUT: int = 10, SHIFT: int = 11) -> Built:
    """y = W2 @ relu(W1 @ x), a two-layer perceptron IN-HIDDEN-OUT.

    Integer dtypes requantise between layers, integer-exact: h = W1 @ x in int32, then
    clip(h >> SHIFT, 0, top) in the activations' type (the clip is the relu; top = 127 for int8
    activations, 7 for int4), then W2 @ h in int32. Choose SHIFT for the input range: with
    full-range int8 inputs the default 11 suits IN around 784.
    """
    act, w = activations_dtype(dtype), weights_dtype(dtype)
    def forward(x, W1, W2):
        h = _widen(W1, dtype) @ _widen(x, dtype)
        if DTYPES[dtype].is_float:
            h = h.relu()
        else:   # lowers to SHR, CMPLT and WHERE
            tg = import_tinygrad()
            h = (h >> SHIFT).clip(0, int(DTYPES[act].highest)).cast(hw_dtypes.to_tinygrad(DTYPES[act]))
            h = h.cast(tg.dtypes.int32)
        return _widen(W2, dtype) @ h
    return Built({"x": ((IN,), act), "W1": ((HIDDEN, IN), w), "W2": ((OUT, HIDDEN), w)}, forward)


def conv2d(dtype: str, C_IN: int = 1, C_OUT: int = 2, H: int = 8, W: int = 8, K: int = 3, PAD: int = 1) -> Built:
    """y = conv2d(x, w) with zero padding PAD and stride 1; x is (C_IN, H, W), w is
    (C_OUT, C_IN, K, K), y is (C_OUT, H+2*PAD-K+1, W+2*PAD-K+1). Padding becomes gated loads."""
    if K > H + 2 * PAD or K > W + 2 * PAD:
        raise ValueError(f"kernel size K={K} is larger than the padded input ({H + 2 * PAD}x{W + 2 * PAD})")
    def forward(x, w):
        y = _widen(x, dtype).reshape(1, C_IN, H, W).conv2d(_widen(w, dtype), padding=PAD)
        return y.reshape(C_OUT, H + 2 * PAD - K + 1, W + 2 * PAD - K + 1)
    return Built({"x": ((C_IN, H, W), activations_dtype(dtype)), "w": ((C_OUT, C_IN, K, K), weights_dtype(dtype))},
                 forward)


def _float_only(model: str, dtype: str) -> None:
    """The nonlinear models need float arithmetic: their exp, division and square root have no
    integer meaning in the kernel (tinygrad would quietly compute them in float32)."""
    if not DTYPES[dtype].is_float:
        floats = ", ".join(n for n, d in DTYPES.items() if d.is_float)
        raise ValueError(f"builtin model {model!r} needs a float dtype ({floats}), got {dtype!r}")


def mlp_softmax(dtype: str, IN: int = 16, HIDDEN: int = 16, OUT: int = 10) -> Built:
    """y = softmax(W2 @ relu(W1 @ x)): a classifier IN-HIDDEN-OUT ending in softmax (floats only)."""
    _float_only("mlp_softmax", dtype)
    def forward(x, W1, W2):
        return (W2 @ (W1 @ x).relu()).softmax()
    return Built({"x": ((IN,), dtype), "W1": ((HIDDEN, IN), dtype), "W2": ((OUT, HIDDEN), dtype)}, forward)


def layernorm(dtype: str, ROWS: int = 4, N: int = 16) -> Built:
    """y = layernorm(x) * g + b over the last axis of x (ROWS, N), eps 1e-5 (floats only)."""
    _float_only("layernorm", dtype)
    def forward(x, g, b):
        return x.layernorm(axis=-1, eps=1e-5) * g + b
    return Built({"x": ((ROWS, N), dtype), "g": ((N,), dtype), "b": ((N,), dtype)}, forward)


def act_mlp(dtype: str, IN: int = 8, HIDDEN: int = 8, OUT: int = 4) -> Built:
    """y = W3 @ gelu(W2 @ tanh(W1 @ x)) then sigmoid: a perceptron IN-HIDDEN-HIDDEN-OUT with
    tanh, GELU (tinygrad's tanh form) and sigmoid activations (floats only)."""
    _float_only("act_mlp", dtype)
    def forward(x, W1, W2, W3):
        return (W3 @ (W2 @ (W1 @ x).tanh()).gelu()).sigmoid()
    return Built({"x": ((IN,), dtype), "W1": ((HIDDEN, IN), dtype), "W2": ((HIDDEN, HIDDEN), dtype),
                  "W3": ((OUT, HIDDEN), dtype)}, forward)


def attention(dtype: str, S: int = 8, D: int = 16) -> Built:
    """y = softmax(Q K^T / sqrt(D)) V with Q, K, V = x Wq, x Wk, x Wv: one attention head over a
    sequence of S tokens of width D (floats only)."""
    _float_only("attention", dtype)
    def forward(x, Wq, Wk, Wv):
        q, k, v = x @ Wq, x @ Wk, x @ Wv
        return q.scaled_dot_product_attention(k, v)
    return Built({"x": ((S, D), dtype), "Wq": ((D, D), dtype), "Wk": ((D, D), dtype), "Wv": ((D, D), dtype)},
                 forward)


class ParamError(ValueError):
    """A bad model parameter; `param` names it (None: the parameter set as a whole)."""

    def __init__(self, param: str | None, message: str):
        super().__init__(message)
        self.param, self.message = param, message


@dataclass(frozen=True)
class Param:
    name: str
    default: int
    minimum: int        # smallest legal value (1 for sizes)
    maximum: int        # largest legal value (MAX_ELEMENTS for sizes: no target could hold more)


@dataclass(frozen=True)
class ZooModel:
    """A builtin model: its build function, parameters (from the signature) and golden model.
    `reference` None: no numpy golden model (the nonlinear models, whose exp2/log2 are
    tinygrad's own polynomials): points are checked against tinygrad's result within the
    float tolerance (dse/evaluate.py). `floats_only`: integer dtypes are refused."""
    name: str
    build: Callable[..., Built]
    reference: Callable[..., np.ndarray] | None
    params: tuple[Param, ...]
    floats_only: bool = False
    data_inputs: tuple[str, ...] = ("x",)   # given at run time; the other inputs are its weights
                                            # (weights: constant builds their seeded data in)

    @classmethod
    def of(cls, build: Callable[..., Built], reference: Callable[..., np.ndarray] | None,
           minimums: Mapping[str, int] = {}, maximums: Mapping[str, int] = {}, floats_only: bool = False,
           data_inputs: tuple[str, ...] = ("x",)) -> "ZooModel":
        sig = list(inspect.signature(build).parameters.values())[1:]
        return cls(build.__name__, build, reference,
                   tuple(Param(p.name, p.default, minimums.get(p.name, 1), maximums.get(p.name, MAX_ELEMENTS))
                         for p in sig), floats_only, data_inputs)

    @property
    def doc(self) -> str:
        """The docstring's first paragraph, on one line."""
        return " ".join((self.build.__doc__ or "").strip().split("\n\n")[0].split())

    def defaults(self) -> dict[str, int]:
        return {p.name: p.default for p in self.params}

    def resolve_params(self, given: Mapping[str, Any]) -> dict[str, int]:
        """Defaults overridden by `given`, each checked; raises ParamError."""
        known = {p.name: p for p in self.params}
        for name, value in given.items():
            if name not in known:
                raise ParamError(name, f"unknown parameter {name!r} for builtin model {self.name!r}; "
                                       f"its parameters: {', '.join(known)}")
            p = known[name]
            if type(value) is not int or value < p.minimum:
                what = "a positive integer" if p.minimum == 1 else f"an integer >= {p.minimum}"
                raise ParamError(name, f"expected {what}, got {value!r}")
            if value > p.maximum:
                why = " (a larger size could never fit any FPGA target here)" if p.maximum == MAX_ELEMENTS else ""
                raise ParamError(name, f"expected at most {p.maximum:,}{why}, got {value!r}")
        return {**self.defaults(), **given}


# ---------------------------------------------------------------------------------------------
# seeded input data

def make_inputs(built: Built | tuple, seed: int, input_range: InputRange | None = None) -> dict[str, np.ndarray]:
    """Seeded random data for every input, drawn in input order from one generator.

    Integers are uniform over [min, max] inclusive; floats uniform over [min, max], rounded to
    the dtype (so a bound that is not representable may be exceeded by half an ulp). Subnormal
    floats are replaced by zero (tinygrad's software fp16 reads them as zero, and hardware
    float units commonly flush them), so every rounding mode agrees on the inputs.
    Default range: `default_input_range`.
    """
    built = check_built(built)
    rng = np.random.default_rng(seed)
    arrays = {}
    for name, (shape, dt) in built.inputs.items():
        r = input_range or default_input_range(dt)
        check_input_range(r, dt)
        d = DTYPES[dt]
        if d.is_float:
            arrays[name] = _flush_subnormals(round_float(rng.uniform(r.min, r.max, shape), dt), dt)
        else:
            arrays[name] = rng.integers(int(r.min), int(r.max), shape, dtype=np.int64, endpoint=True).astype(storage(dt))
    return arrays


def bits(array: np.ndarray, dtype: str) -> np.ndarray:
    """Raw bit patterns of `array` holding `dtype` values, as unsigned integers (bf16: the top
    16 bits of its float32 holder). Memories are initialised from these."""
    d = DTYPES[dtype]
    if dtype == "bf16":
        return (np.asarray(array, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    if dtype in hw_dtypes.FP8_NAMES:
        return hw_dtypes.to_words(np.asarray(array, np.float32), d).astype(np.uint8).reshape(np.shape(array))
    return np.asarray(array, storage(dtype)).view(f"uint{d.container.bits}")


# ---------------------------------------------------------------------------------------------
# running a model in tinygrad itself

def tinygrad_result(built: Built | tuple, arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """Run the model in tinygrad (PYTHON device unless DEV is set) and return its output.

    Kernels are built with NOOPT=1, so every reduction runs sequentially k = 0..K-1 as in the
    lowered kernel the hardware is compiled from (where tinygrad cannot build a kernel that way,
    with its default schedule). bf16 outputs come back as float32 holders. A model with an
    fp8e4m3 input runs with the default schedule: tinygrad 0.14 starts a max-reduction at -inf
    cast to E4M3, which is NaN, and its unoptimised kernels then return NaN for every max
    (softmax, max-pool); its default schedule and the hardware (compiler/max_identity.py)
    return the maximum. Float sums may then run in another order, which the tolerance of the
    models checked against tinygrad allows for (docs/fp8.md).
    """
    built = check_built(built)
    tg = import_tinygrad()
    from tinygrad.helpers import Context
    tensors = []
    for name, (shape, dt) in built.inputs.items():
        a = np.asarray(arrays[name])
        if a.shape != shape or a.dtype != storage(dt):
            raise ValueError(f"input {name!r}: expected {storage(dt)} {shape}, got {a.dtype} {a.shape}")
        if dt in hw_dtypes.FP8_NAMES:
            t = _fp8_tensor(a, dt)
        else:
            t = tg.Tensor(a)
        if dt == "bf16":
            t = t.cast(tg.dtypes.bfloat16)
        tensors.append(t.realize())
    if any(dt == "fp8e4m3" for _, dt in built.inputs.values()):
        return built.forward(*tensors).numpy()
    try:
        with Context(NOOPT=1):
            return built.forward(*tensors).numpy()
    except Exception:   # noqa: BLE001 - tinygrad's own failure, not the model's
        # tinygrad 0.14 fails to verify some fp16 reductions under NOOPT=1 (a conv summing into
        # a float accumulator): its default schedule computes them, in another summation order,
        # which the float tolerance of a user's model allows for (integers are exact in any order)
        try:
            return built.forward(*tensors).numpy()
        except Exception as e:  # noqa: BLE001 - e.g. an fp16 vector's max to a scalar, 2026-12-06
            raise RuntimeError(f"tinygrad {importlib.metadata.version('tinygrad')} could not run the model for its reference "
                               f"result (its own error, with NOOPT=1 and with its default schedule: "
                               f"{type(e).__name__}: {e})") from e


# ---------------------------------------------------------------------------------------------
# numpy golden models

@dataclass(frozen=True)
class Arith:
    """How the float golden models round (integers are always exact, wrapping at 32 bits).

    round_products: an fp16/bf16 product is rounded to its format before it is accumulated in
        float32, as the kernel's `(a*b).cast(float)` says.
    fused_mac: acc + a*b is rounded once (computed in float64, then rounded to float32), as
        tinygrad's PYTHON device runs its MULACC op; otherwise product and sum round separately.
    emulated_casts: casts to fp16/bf16 behave like tinygrad's software float emulation: subnormals
        flush to (signed) zero on load and store, and magnitudes above the format's largest
        finite value become inf instead of rounding down to it.
    sum_tree: U > 1 sums a float reduction the way the hardware does with fp_sum="tree" and
        reduce_unroll=U (compiler/passes/parallelize.py): the innermost reduction loop
        (bound K) takes U products per step, adds them as a balanced tree, neighbours first,
        with the terms past K read as -0.0, and adds the tree to the accumulator. U is
        clamped to K as the compiler clamps it. Integer sums are the same in any order.
    """
    round_products: bool = True
    fused_mac: bool = False
    emulated_casts: bool = False
    sum_tree: int = 1


KERNEL = Arith()
"""The kernel's own semantics: every op rounds to its dtype (IEEE, round to nearest even)."""


def python_device_arith(dtype: str) -> Arith:
    """The rounding tinygrad 0.14's PYTHON device applies to `dtype` on this Python.

    fp32: the renderer fuses a*b+c into MULACC, run in float64 and rounded once to float32.
    fp16: below Python 3.12 the device lacks half, so tinygrad emulates it in float32: products
        are not rounded, MULACC fuses, casts flush subnormals and overflow to inf.
    bf16 (and fp16 from Python 3.12): native, each op rounds as the kernel says (= KERNEL).
    """
    if dtype == "fp32":
        return Arith(fused_mac=True)
    if dtype == "fp16" and sys.version_info < (3, 12):
        return Arith(round_products=False, fused_mac=True, emulated_casts=True)
    return KERNEL


def arith_for(dtype: str, fp_semantics: str) -> Arith:
    """How the hardware rounds `dtype` under the fp_semantics knob: "op", every op (KERNEL);
    "tinygrad", as tinygrad's PYTHON device does (python_device_arith), except fp32, whose
    multiply-adds the hardware does not fuse (compiler/passes/float_semantics.py)."""
    if fp_semantics == "op" or dtype == "fp32":
        return KERNEL
    return python_device_arith(dtype)


def tree_sum(acc: np.ndarray, n: int, term: Callable[[int], np.ndarray], u: int) -> np.ndarray:
    """acc + term(0) + ... + term(n - 1) in float32 as the hardware adds a float reduction:
    one term at a time (u <= 1), or with fp_sum="tree" and reduce_unroll=u (compiler/passes/
    parallelize.py, u clamped to n) u terms a step as a balanced tree, neighbours first, the
    terms past n read as -0.0, each tree then added to the accumulator."""
    u = min(u, n)
    if u <= 1:
        for k in range(n):
            acc = acc + term(k)
        return acc
    for k0 in range(0, n, u):
        terms = [term(k) if k < n else np.float32(-0.0) for k in range(k0, k0 + u)]
        while len(terms) > 1:                        # the compiler's tree: neighbours first
            terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
        acc = acc + terms[0]
    return acc


def round_float(x: np.ndarray, dtype: str, emulated: bool = False) -> np.ndarray:
    """Round float values to `dtype` (round to nearest even), returned in its storage dtype.
    fp8: as the fp8 units round (saturating; compiler.fp.reference), exact from float64."""
    x = np.asarray(x)
    if dtype == "fp32":
        return x.astype(np.float32)
    if dtype in hw_dtypes.FP8_NAMES:
        return hw_dtypes.from_words(hw_dtypes.to_words(x.astype(np.float64), DTYPES[dtype]), DTYPES[dtype]).reshape(x.shape)
    fmax, tiny = (65504.0, 2.0 ** -14) if dtype == "fp16" else (BF16_MAX, float(np.finfo(np.float32).tiny))
    if dtype == "fp16":
        with np.errstate(over="ignore"):
            out = x.astype(np.float16)
    else:
        u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        r = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
        out = np.where(np.isnan(x), np.float32(np.nan), r).astype(np.float32)
    if emulated:
        a = np.abs(x)
        out = np.where(a > fmax, np.copysign(np.inf, x), out).astype(out.dtype)
        out = np.where(a < tiny, np.copysign(0.0, x), out).astype(out.dtype)
    return out


def half_load(x: np.ndarray) -> np.ndarray:
    """fp16 values as tinygrad's emulated half loads them (python_device_arith("fp16")):
    float32, subnormals read as zeros of their sign."""
    x = np.asarray(x, np.float32)
    return np.where(np.abs(x) < 2.0 ** -14, np.copysign(np.float32(0), x), x).astype(np.float32)


def half_layer(acc: np.ndarray, b: np.ndarray, relu: bool) -> np.ndarray:
    """What tinygrad's emulated fp16 stores for a layer `relu(acc.cast(half) + b)` with a float32
    accumulator: the cast inside the kernel only clamps (beyond 65504: inf), the bias is added
    in float32, the ReLU is Python's max(0, y), and the store rounds once (round_float emulated).
    Returned as the next layer loads it (float32 holders of halves)."""
    acc = np.asarray(acc, np.float32)
    with np.errstate(invalid="ignore"):
        y = np.where(np.abs(acc) > 65504, np.copysign(np.float32(np.inf), acc), acc).astype(np.float32)
        y = (y + half_load(b)).astype(np.float32)
        if relu:
            y = np.where(0 < y, y, np.float32(0))
    return round_float(y, "fp16", emulated=True).astype(np.float32)


def _flush_subnormals(x: np.ndarray, dtype: str) -> np.ndarray:
    tiny = 2.0 ** -14 if dtype == "fp16" else float(np.finfo(np.float32).tiny)
    if dtype in hw_dtypes.FP8_NAMES:
        tiny = hw_dtypes.FLOAT_FORMATS[dtype].min_normal
    return np.where(np.abs(x) < tiny, np.zeros_like(x), x).astype(x.dtype)


class _Numeric:
    """Arithmetic of one dtype under one Arith: load, multiply-accumulate, store."""

    def __init__(self, dtype: str, arith: Arith):
        self.dtype, self.arith, self.is_float = dtype, arith, DTYPES[dtype].is_float

    def load(self, a: np.ndarray) -> np.ndarray:
        if not self.is_float:
            return np.asarray(a).astype(np.int64)
        a = np.asarray(a, np.float32)
        return _flush_subnormals(a, self.dtype) if self.arith.emulated_casts and self.dtype != "fp32" else a

    def zeros(self, shape) -> np.ndarray:
        return np.zeros(shape, np.float32 if self.is_float else np.int64)

    def mac(self, acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if not self.is_float:
            return _wrap32(acc + a * b)
        p = self._product(a, b)
        if self.arith.fused_mac:
            return (acc.astype(np.float64) + p).astype(np.float32)
        return acc + p.astype(np.float32)

    def _product(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        p = a.astype(np.float64) * b.astype(np.float64)          # exact for every float dtype here
        if self.arith.round_products and self.dtype != "fp32":
            p = round_float(p.astype(np.float32), self.dtype)   # exact -> float32, then one rounding
        return p

    def dot(self, acc: np.ndarray, n: int, operands: Callable[[int], tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        """acc + the sum over k = 0..n-1 of a_k * b_k, (a_k, b_k) = operands(k), in the order
        the hardware sums: sequentially, or in trees of `arith.sum_tree` terms."""
        if not self.is_float or min(self.arith.sum_tree, n) <= 1:
            for k in range(n):
                acc = self.mac(acc, *operands(k))
            return acc
        return tree_sum(acc, n, lambda k: self._product(*operands(k)).astype(np.float32), self.arith.sum_tree)

    def store(self, acc: np.ndarray) -> np.ndarray:
        if not self.is_float:
            return acc.astype(np.int32)
        return round_float(acc, self.dtype, self.arith.emulated_casts)


def _wrap32(v: np.ndarray) -> np.ndarray:
    return ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def _relu(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x, np.zeros_like(x))   # tinygrad's (x > 0).where(x, 0): relu(-0.0) = +0.0


def _matvec(num: _Numeric, W: np.ndarray, x: np.ndarray) -> np.ndarray:
    return num.dot(num.zeros(W.shape[0]), W.shape[1], lambda k: (W[:, k], x[k]))


def _gemv_ref(dtype: str, p: Mapping[str, int], a: Mapping[str, np.ndarray], arith: Arith) -> np.ndarray:
    num = _Numeric(dtype, arith)
    return num.store(_matvec(num, num.load(a["W"]), num.load(a["x"])))


def _matmul_ref(dtype: str, p: Mapping[str, int], a: Mapping[str, np.ndarray], arith: Arith) -> np.ndarray:
    num = _Numeric(dtype, arith)
    A, B = num.load(a["A"]), num.load(a["B"])
    return num.store(num.dot(num.zeros((p["M"], p["N"])), p["K"], lambda k: (A[:, k, None], B[None, k, :])))


def _elementwise_ref(dtype: str, p: Mapping[str, int], a: Mapping[str, np.ndarray], arith: Arith) -> np.ndarray:
    num = _Numeric(dtype, arith)
    # one fp16/bf16 add rounded via float32 equals the correctly rounded add (float32 has more than
    # 2p+2 bits), so rounding once at the store is exact for every dtype
    s = num.load(a["a"]) + num.load(a["b"])
    return num.store(_relu(_wrap32(s) if not num.is_float else s))


def _mlp_ref(dtype: str, p: Mapping[str, int], a: Mapping[str, np.ndarray], arith: Arith) -> np.ndarray:
    num = _Numeric(dtype, arith)
    h = _matvec(num, num.load(a["W1"]), num.load(a["x"]))
    if num.is_float:
        h = num.load(_relu(num.store(h)))
    else:
        h = np.clip(h >> p["SHIFT"], 0, int(DTYPES[activations_dtype(dtype)].highest))
    return num.store(_matvec(num, num.load(a["W2"]), h))


def _conv2d_ref(dtype: str, p: Mapping[str, int], a: Mapping[str, np.ndarray], arith: Arith) -> np.ndarray:
    num = _Numeric(dtype, arith)
    K, PAD = p["K"], p["PAD"]
    x = np.pad(num.load(a["x"]), ((0, 0), (PAD, PAD), (PAD, PAD)))
    w = num.load(a["w"])
    ho, wo = p["H"] + 2 * PAD - K + 1, p["W"] + 2 * PAD - K + 1
    acc = num.zeros((p["C_OUT"], ho, wo))
    for ci in range(p["C_IN"]):          # tinygrad's reduce order: input channel, kernel row, column
        for ky in range(K):              # reduce_unroll unrolls the innermost one, the column
            acc = num.dot(acc, K, lambda kx: (w[:, ci, ky, kx, None, None], x[None, ci, ky:ky + ho, kx:kx + wo]))
    return num.store(acc)


ZOO: dict[str, ZooModel] = {m.name: m for m in (
    ZooModel.of(gemv, _gemv_ref),
    ZooModel.of(matmul, _matmul_ref, data_inputs=("B",)),
    ZooModel.of(elementwise, _elementwise_ref, data_inputs=("a", "b")),      # no weights
    ZooModel.of(mlp, _mlp_ref, minimums={"SHIFT": 0}, maximums={"SHIFT": 31}),   # an int32 shift
    ZooModel.of(conv2d, _conv2d_ref, minimums={"PAD": 0}),
    ZooModel.of(mlp_softmax, None, floats_only=True),
    ZooModel.of(layernorm, None, floats_only=True),
    ZooModel.of(act_mlp, None, floats_only=True),
    ZooModel.of(attention, None, floats_only=True),
)}


def reference(model: str, dtype: str, params: Mapping[str, Any], arrays: Mapping[str, np.ndarray],
              arith: Arith = KERNEL) -> np.ndarray:
    """The numpy golden model of zoo model `model`: the same operations in the same order as
    tinygrad's lowered kernel (reductions run k = 0..K-1). Integers are exact (int32 wrap);
    floats round as `arith` says. Returns the output in its storage dtype."""
    zm = ZOO[model]
    if zm.reference is None:
        raise ValueError(f"builtin model {model!r} has no numpy golden model (it is checked against tinygrad)")
    return zm.reference(dtype, zm.resolve_params(params), arrays, arith)
