"""Float semantics: the hardware rounds where tinygrad's PYTHON device rounds (fp_semantics:
tinygrad, the default) or at every op (fp_semantics: op), bit for bit against each reference.

1. What tinygrad 0.14's PYTHON device computes (pinned here, so the docs can say it): a*b+c is
   one MULACC, rounded once (bf16, fp8; fp16 and fp32 too), every other op rounds to its dtype,
   except fp16, which it emulates in float32 below Python 3.12 (rounded at the store, subnormals
   flushed); MAX is Python's max (relu(-0.0) = +0.0, relu(NaN) = 0).
2. The units that compute it, in CXXRTL against compiler/fp/reference.py (itself checked
   against tinygrad's own ops): FMulAdd (fp8: every one of the 2**24 operand triples), the
   emulated half conversions, FWideMul of emulated halves, Python's max.
3. Compiled models against tinygrad bit for bit (default) and against a per-op numpy/ml_dtypes
   model (fp_semantics: op): elementwise chains and reductions in fp16, bf16, fp8e4m3, fp8e5m2,
   with -0.0, NaN, inf, subnormals and saturating values.
"""
from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from tinygrad import Tensor, dtypes
from tinygrad.dtype import truncate
from tinygrad.helpers import Context
from tinygrad.uop.ops import Ops, exec_alu

import compiler.fp
from compiler import HardwareConfig, compile_model, simulate
from compiler.fp import BF16, FP8E4M3, FP8E5M2, FP16, FP32, FloatFormat, FloatToFloat, FMax
from compiler.fp import reference as R
from compiler.fp.harness import Bank, NativeEvaluator, build_all, source_fingerprint
from compiler.fp.muladd import FMulAdd
from compiler.fp.widemul import FWideMul
from compiler.passes.float_semantics import HALF_EMULATED
from compiler.sim import cxxrtl

FP_SOURCES = Path(compiler.fp.__file__).parent
SEED = 20261130
TG = {"fp32": dtypes.float32, "fp16": dtypes.half, "bf16": dtypes.bfloat16,
      "fp8e4m3": dtypes.fp8e4m3, "fp8e5m2": dtypes.fp8e5m2}
FMT = {"fp32": FP32, "fp16": FP16, "bf16": BF16, "fp8e4m3": FP8E4M3, "fp8e5m2": FP8E5M2}

pytestmark = pytest.mark.skipif(not HALF_EMULATED, reason="fp16 expectations are those of Python < 3.12")
TOOL_FIXTURES = {"units", "hardware"}     # they run a C++ build: their users are slow (conftest.py)


def decode(bits, fmt: FloatFormat) -> np.ndarray:
    return R.decode(np.asarray(bits).astype(np.uint64), fmt)


def assert_same(got, want, fmt: FloatFormat, what: str, *operands) -> None:
    """Equal bit patterns (NaNs only need to be NaNs)."""
    got, want = np.asarray(got).astype(np.uint64), np.asarray(want).astype(np.uint64)
    gn, wn = np.isnan(decode(got, fmt)), np.isnan(decode(want, fmt))
    bad = (gn != wn) | (~wn & (got != want))
    if bad.any():
        rows = [f"  ({', '.join(f'{int(op[k]):#x}' for op in operands)}) -> hw {int(got[k]):#x} "
                f"({decode(got[k:k + 1], fmt)[0]!r}), ref {int(want[k]):#x} ({decode(want[k:k + 1], fmt)[0]!r})"
                for k in np.nonzero(bad)[0][:8]]
        pytest.fail(f"{what}: {int(bad.sum())} of {len(bad)} results differ\n" + "\n".join(rows))


# ------------------------------------------------------------------------- 1. tinygrad's own rounding

def _tg(values: np.ndarray, dtype: str) -> Tensor:
    """A realized Tensor holding `values` (already values of `dtype`). fp16 from host data: a
    cast kernel on the PYTHON device would store it as tinygrad's emulation does (subnormals
    flushed), and the subnormal inputs would be lost."""
    if dtype == "fp16":
        return Tensor(np.asarray(values, np.float16)).realize()
    return Tensor(np.asarray(values, np.float32)).cast(TG[dtype]).contiguous().realize()


def _rounder(dtype: str):
    return np.vectorize(lambda x: truncate[TG[dtype]](float(x)), otypes=[np.float64])


@pytest.mark.parametrize("dtype", ["bf16", "fp8e4m3", "fp8e5m2", "fp16"])
def test_tinygrad_fuses_multiply_adds_and_rounds_every_other_op(dtype):
    """bf16 and fp8 round each op to the dtype, but a*b+c (a MULACC) once; fp16 (emulated in
    float32) rounds once at the store whatever the chain."""
    tr = _rounder(dtype)
    store = (lambda x: tinygrad_half_store(x).astype(np.float64)) if dtype == "fp16" else tr   # noqa: E731
    rng = np.random.default_rng(1)
    a, b, c = (tr(rng.standard_normal(600)) for _ in range(3))
    f32 = lambda x: np.asarray(x, np.float32)         # noqa: E731
    once = {"a*b+c": store(f32(a * b) + f32(c)), "a+b+c": store(f32(f32(a + b) + c)),
            "(a+b)*c": store(f32(f32(a + b) * c))}
    per_op = {"a*b+c": tr(tr(a * b) + c), "a+b+c": tr(tr(a + b) + c), "(a+b)*c": tr(tr(a + b) * c)}
    for expr in once:
        got = eval(expr, {"a": _tg(a, dtype), "b": _tg(b, dtype), "c": _tg(c, dtype)}).numpy().astype(np.float64)
        fused_everywhere = dtype == "fp16" or expr == "a*b+c"
        want = once[expr] if fused_everywhere else per_op[expr]
        other = per_op[expr] if fused_everywhere else once[expr]
        assert np.array_equal(got, want, equal_nan=True), expr
        assert not np.array_equal(got, other, equal_nan=True), expr


def test_tinygrad_saturating_chains_are_the_issues_examples():
    """E4M3 448*a + 448 and E5M2 big*a + big with a = -2: one rounding gives -448 and -57,344
    (per-op rounding saturates the product first and gives 0)."""
    for dtype, big in (("fp8e4m3", 448.0), ("fp8e5m2", 57344.0)):
        a = _tg(np.array([-2.0, 1.0]), dtype)
        assert (a * big + big).numpy().tolist() == [-big, big]


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16", "fp8e4m3", "fp8e5m2"])
def test_tinygrad_max_is_pythons_max(dtype):
    """relu(x) is MAX(0, x) and Python's max(a, b) is b if b > a else a: relu(-0.0) = +0.0,
    relu(NaN) = 0; x.maximum(0) is MAX(x, 0): -0.0 and NaN stay."""
    x = np.array([-0.0, np.nan, -1.0, 2.0], np.float32)
    relu = _tg(x, dtype).relu().numpy().astype(np.float32)
    assert relu.tolist() == [0.0, 0.0, 0.0, 2.0] and not np.signbit(relu).any()
    kept = _tg(x, dtype).maximum(0).numpy().astype(np.float32)
    assert np.signbit(kept[0]) and np.isnan(kept[1])


# ------------------------------------------------------------------------- 2. the units

def fp32_triples(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float32 bit patterns (a, b, c) for FMulAdd: every triple of special values, then random
    ones of every relation (c independent, far above or below a*b, cancelling it exactly or
    nearly, near a float32 midpoint of the sum), then the float64 double-rounding cases where
    Python's a*b + c lands on a float32 midpoint the exact sum is not on (scaled, both signs)."""
    tiny = np.float32(np.finfo(np.float32).tiny)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 3.0, np.finfo(np.float32).max,
                        -np.finfo(np.float32).max, tiny, -tiny, 1.5 * tiny, tiny * 2.0 ** -23, -tiny * 2.0 ** -23,
                        tiny * (1 - 2.0 ** -23), 2.0 ** 64, 2.0 ** -64], np.float32)
    grid = np.array(np.meshgrid(special, special, special)).reshape(3, -1)

    def rand(k, lo, hi):
        m = rng.uniform(1, 2, k) * rng.choice([-1.0, 1.0], k)
        return (m * 2.0 ** rng.integers(lo, hi, k)).astype(np.float32)
    k = (n - grid.shape[1]) // 6
    a, b = rand(5 * k, -40, 40), rand(5 * k, -40, 40)
    p = a.astype(np.float64) * b.astype(np.float64)
    c_ind = rand(k, -90, 90)
    c_cancel = (-p[k:2 * k]).astype(np.float32)
    c_near = (-p[2 * k:3 * k] * (1 + rng.uniform(-2.0 ** -20, 2.0 ** -20, k))).astype(np.float32)
    mid = p[3 * k:4 * k].astype(np.float32).astype(np.float64)
    ulp = np.spacing(np.abs(mid).astype(np.float32)).astype(np.float64)
    c_mid = (mid + ulp / 2 - p[3 * k:4 * k] + rand(k, -60, -30).astype(np.float64) * ulp).astype(np.float32)
    c_mid = np.where(np.isfinite(c_mid), c_mid, np.float32(0))
    c_far = rand(k, -150, 127)
    c = np.concatenate([c_ind, c_cancel, c_near, c_mid, c_far])
    # the double-rounding family: a*b = 2**-14 - 2**-60, c = 2**10 + 2**-13 (odd): the exact sum is
    # just under c's upper midpoint, float64 rounds onto it, and ties-to-even then rounds up
    m = n - grid.shape[1] - 5 * k
    scale = 2.0 ** rng.integers(-60, 60, m)
    sign = rng.choice([-1.0, 1.0], m)
    da = (sign * scale * 2.0 ** -14 * (1 + 2.0 ** -23)).astype(np.float32)
    db = np.full(m, 1 - 2.0 ** -23, np.float32)
    dc = (sign * scale * (2.0 ** 10 + 2.0 ** -13)).astype(np.float32)
    out = [np.concatenate([grid[i].astype(np.float32), x, y]) for i, (x, y) in enumerate(((a, da), (b, db), (c, dc)))]
    return tuple(o.view(np.uint32).astype(np.uint64) for o in out)


def fp16_triples(fmt: FloatFormat, n: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """16-bit patterns: half of them uniform over all patterns (specials, subnormals, huge), half
    with exponents near each other so sums and products interact."""
    uniform = [rng.integers(0, 1 << 16, n // 2, dtype=np.uint64) for _ in range(3)]
    sign = lambda: rng.integers(0, 2, n - n // 2, dtype=np.uint64) << np.uint64(15)   # noqa: E731
    mid = fmt.bias << fmt.man_bits
    near = [sign() | (mid + rng.integers(-(12 << fmt.man_bits), 12 << fmt.man_bits, n - n // 2)).astype(np.uint64)
            for _ in range(3)]
    return tuple(np.concatenate([u, v]) for u, v in zip(uniform, near))


UNITS = {   # bank: (input ports, [(unit, class, args, wiring)])
    "f32": ({"a": 32, "b": 32, "c": 32}, [
        ("fma_via", FMulAdd, (FP32, FP32, 53), {"a": "a", "b": "b", "c": "c"}),
        ("fma_exact", FMulAdd, (FP32, FP32), {"a": "a", "b": "b", "c": "c"}),
        ("fma_rtz", FMulAdd, (FP32, FP32, None, "rtz"), {"a": "a", "b": "b", "c": "c"}),
        ("fma_flush", FMulAdd, (FP32, FP32, None, "rne", "flush"), {"a": "a", "b": "b", "c": "c"}),
        ("narrow", FloatToFloat, (FP32, FP16, "rne", "keep", 1, True), {"a": "a"}),
        ("max", FMax, (FP32, "keep", None, 1, True), {"a": "a", "b": "b"})]),
    "f16": ({"h": 16, "k": 16, "l": 16, "x": 16, "y": 16, "z": 16}, [
        ("fma_half", FMulAdd, (FP16, FP16, 53), {"a": "h", "b": "k", "c": "l"}),
        ("fma_bf16", FMulAdd, (BF16, FP32, 53), {"a": "x", "b": "y", "c": "z"}),
        ("wmul", FWideMul, (FP16, FP32, "flush"), {"a": "h", "b": "k"}),
        ("widen", FloatToFloat, (FP16, FP32, "rne", "keep", 1, True), {"a": "h"}),
        ("max_half", FMax, (FP16, "keep", None, 1, True), {"a": "h", "b": "k"}),
        ("max_bf16", FMax, (BF16, "keep", None, 1, True), {"a": "x", "b": "y"})]),
    "f8": ({"a": 8, "b": 8, "c": 8}, [
        *((f"fma_{f.name}", FMulAdd, (f, f), {"a": "a", "b": "b", "c": "c"}) for f in (FP8E4M3, FP8E5M2)),
        *((f"max_{f.name}", FMax, (f, "keep", None, 1, True), {"a": "a", "b": "b"}) for f in (FP8E4M3, FP8E5M2))]),
}


@pytest.fixture(scope="module")
def units() -> dict[str, tuple[dict, dict]]:
    """{bank: (inputs, outputs)}: the three banks of UNITS built in parallel and run once."""
    rng = np.random.default_rng(SEED)
    a, b, c = fp32_triples(1 << 18, rng)
    ha, hb, hc = fp16_triples(FP16, 1 << 18, rng)
    ba, bb, bc = fp16_triples(BF16, 1 << 18, rng)
    ha[:1 << 16] = np.arange(1 << 16, dtype=np.uint64)          # every half pattern, widened
    every = np.arange(1 << 24, dtype=np.uint64)                  # every fp8 triple
    inputs = {"f32": {"a": a, "b": b, "c": c}, "f16": {"h": ha, "k": hb, "l": hc, "x": ba, "y": bb, "z": bc},
              "f8": {"a": every & np.uint64(0xFF), "b": (every >> np.uint64(8)) & np.uint64(0xFF),
                     "c": every >> np.uint64(16)}}
    evaluators = {}
    for name, (ports, spec) in UNITS.items():
        bank = Bank(ports, {unit: (cls(*args), wires) for unit, cls, args, wires in spec})
        evaluators[name] = NativeEvaluator(bank, fingerprint=source_fingerprint(name, spec, sources=list(
            FP_SOURCES.glob("*.py"))))
    build_all(list(evaluators.values()))
    return {name: (inputs[name], ev.run(inputs[name])) for name, ev in evaluators.items()}


def test_fma_reference_is_tinygrads_mulacc():
    """compiler/fp/reference.fma (via float64 for fp32, fp16 and bf16; exact for fp8) equals
    tinygrad's own MULACC (exec_alu: Python's x*y + z, then its dtype's truncation)."""
    rng = np.random.default_rng(2)
    for fmt, dst, via, tg in ((FP32, FP32, 53, dtypes.float32), (FP16, FP16, 53, dtypes.half),
                              (BF16, FP32, 53, dtypes.bfloat16), (FP8E4M3, FP8E4M3, None, dtypes.fp8e4m3),
                              (FP8E5M2, FP8E5M2, None, dtypes.fp8e5m2)):
        if fmt == FP32:
            a, b, c = (x[:20000] for x in fp32_triples(20000 + 5832, rng))
        elif fmt.width == 16:
            a, b, c = fp16_triples(fmt, 20000, rng)
        else:
            a, b, c = (rng.integers(0, 256, 20000, dtype=np.uint64) for _ in range(3))
        ref = R.fma(a, b, c, fmt, dst, via)
        if fmt == BF16:                      # tinygrad rounds bf16 through ctypes' float32
            ref = R.float_to_float(ref, FP32, BF16)
        want = [truncate[tg](exec_alu(Ops.MULACC, tg, [float(x), float(y), float(z)])) for x, y, z in
                zip(decode(a, fmt), decode(b, fmt), decode(c, fmt))]
        with np.errstate(over="ignore"):
            want_bits = R.round_to_format(np.array(want, np.float64), fmt if fmt != FP32 else FP32)
        assert_same(ref, want_bits, fmt, f"{fmt.name} fma reference vs tinygrad", a, b, c)


@pytest.mark.slow                  # three CXXRTL builds (cached on disk)
def test_fp32_fused_multiply_add_rounds_as_python_does(units):
    """FMulAdd(fp32, via=53) on 262,144 triples equals Python's x*y + z rounded to float32; the
    double-rounding cases are there (via float64 and the exact sum rounded once differ on
    them), and the exact-rounding unit equals the exact reference in every mode."""
    ins, outs = units["f32"]
    a, b, c = ins["a"], ins["b"], ins["c"]
    via, exact = R.fma(a, b, c, FP32, via=53), R.fma(a, b, c, FP32)
    assert_same(outs["fma_via_y"], via, FP32, "fp32 fma via float64", a, b, c)
    assert_same(outs["fma_exact_y"], exact, FP32, "fp32 fma", a, b, c)
    assert int(np.count_nonzero(via != exact)) >= 1000
    assert_same(outs["fma_rtz_y"], R.fma(a, b, c, FP32, rounding="rtz"), FP32, "fp32 fma rtz", a, b, c)
    assert_same(outs["fma_flush_y"], R.fma(a, b, c, FP32, subnormals="flush"), FP32, "fp32 fma flush", a, b, c)


@pytest.mark.slow
def test_narrow_formats_fused_multiply_add(units):
    """FMulAdd in fp16 (via float64), bf16 -> fp32 (via float64) on 262,144 triples each, and
    fp8 on every one of the 16,777,216 operand triples of both formats."""
    ins, outs = units["f16"]
    h, k, l = ins["h"], ins["k"], ins["l"]
    assert_same(outs["fma_half_y"], R.fma(h, k, l, FP16, via=53), FP16, "fp16 fma", h, k, l)
    x, y, z = ins["x"], ins["y"], ins["z"]
    assert_same(outs["fma_bf16_y"], R.fma(x, y, z, BF16, FP32, via=53), FP32, "bf16 fma", x, y, z)
    ins, outs = units["f8"]
    for fmt in (FP8E4M3, FP8E5M2):
        for part in range(4):             # in four parts: the reference's float64 arrays are large
            s = slice(part << 22, (part + 1) << 22)
            a, b, c = ins["a"][s], ins["b"][s], ins["c"][s]
            assert_same(outs[f"fma_{fmt.name}_y"][s], R.fma(a, b, c, fmt), fmt, f"{fmt.name} fma", a, b, c)


def tinygrad_half_store(x: np.ndarray) -> np.ndarray:
    """tinygrad's emulated half store (codegen/decomp/dtype.py f2f after f2f_clamp), as float16."""
    x = np.asarray(x, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        out = x.astype(np.float16)
        out = np.where(np.abs(x) > 65504, np.copysign(np.float16(np.inf), x), out)
        out = np.where(np.abs(x) < 2.0 ** -14, np.copysign(np.float16(0), x), out)
    return out.astype(np.float16)


@pytest.mark.slow
def test_emulated_half_conversions_are_tinygrads(units):
    """FloatToFloat(emulated): fp32 -> fp16 as tinygrad's PYTHON device stores a half (beyond
    65504 inf, below 2**-14 zero, decided before rounding), checked against tinygrad itself at
    the thresholds; fp16 -> fp32 as it loads one (subnormals read as zero), every pattern."""
    ins, outs = units["f32"]
    x = ins["a"].astype(np.uint32).view(np.float32)
    want = tinygrad_half_store(x).view(np.uint16)
    assert_same(outs["narrow_y"], want, FP16, "fp32 -> fp16 (emulated)", ins["a"])
    edges = np.array([65504, 65505, 65519.99, 65520, 2.0 ** -14, 2.0 ** -14 * (1 - 2.0 ** -12),
                      2.0 ** -14 * (1 - 2.0 ** -11), 2.0 ** -24, 1 + 2.0 ** -11, 0.0, -0.0, np.inf], np.float32)
    edges = np.concatenate([edges, -edges])
    stored = Tensor(edges).cast(dtypes.half).numpy()
    np.testing.assert_array_equal(stored.view(np.uint16), tinygrad_half_store(edges).view(np.uint16))
    assert stored[1] == np.inf and stored[5] == 0            # IEEE rounding would give 65504 and 2**-14
    ins, outs = units["f16"]
    h = ins["h"][:1 << 16]
    flushed = R.flush_inputs(h, FP16, "flush")
    assert_same(outs["widen_y"][:1 << 16], R.float_to_float(flushed, FP16, FP32), FP32, "fp16 -> fp32 (emulated)", h)


@pytest.mark.slow
def test_wide_product_of_emulated_halves(units):
    """FWideMul(fp16 -> fp32, flush): the float32 product tinygrad's emulation computes (both
    halves loaded with subnormals read as zero, multiplied exactly)."""
    ins, outs = units["f16"]
    h, k = ins["h"], ins["k"]
    wh, wk = (R.float_to_float(R.flush_inputs(v, FP16, "flush"), FP16, FP32) for v in (h, k))
    assert_same(outs["wmul_y"], R.mul(wh, wk, FP32), FP32, "fp16 x fp16 -> fp32 (emulated loads)", h, k)


@pytest.mark.slow
def test_pythons_max(units):
    """FMax(python=True) = b if b > a else a, in every format (fp8: every pair)."""
    checks = [("f32", "max", FP32, "a", "b"), ("f16", "max_half", FP16, "h", "k"), ("f16", "max_bf16", BF16, "x", "y"),
              ("f8", "max_fp8e4m3", FP8E4M3, "a", "b"), ("f8", "max_fp8e5m2", FP8E5M2, "a", "b")]
    for bank, unit, fmt, p, q in checks:
        ins, outs = units[bank]
        a, b = ins[p][:1 << 18], ins[q][:1 << 18]
        assert_same(outs[f"{unit}_y"][:1 << 18], R.fmax(a, b, fmt, python=True), fmt, unit, a, b)


# ------------------------------------------------------------------------- 3. compiled models

def special_values(dtype: str) -> np.ndarray:
    """Signed zeros, NaN, infinities (where the format has them), the largest finite values,
    subnormals, 1, and values that saturate fp8 when multiplied."""
    fmt = FMT[dtype]
    v = [0.0, -0.0, np.nan, 1.0, -1.0, fmt.max_finite, -fmt.max_finite, fmt.min_normal, fmt.min_subnormal,
         -fmt.min_subnormal, 2.0, -2.0, fmt.max_finite / 2, 0.5]
    if fmt.has_inf:
        v += [np.inf, -np.inf]
    return np.array(v, np.float64)


def inputs(dtype: str, n: int, count: int, seed: int) -> list[np.ndarray]:
    """`count` arrays of n values of `dtype` (as float32 holders): every pair of special values
    across the first two (the rest special too), then random ones, some large enough to saturate."""
    rng = np.random.default_rng(seed)
    tr = _rounder(dtype)
    sp = special_values(dtype)
    pairs = np.array(np.meshgrid(sp, sp)).reshape(2, -1)
    out = []
    for i in range(count):
        head = pairs[i % 2] if i < 2 else rng.choice(sp, pairs.shape[1])
        scale = np.sqrt(FMT[dtype].max_finite) if dtype.startswith("fp8") else 4.0
        tail = rng.standard_normal(n - len(head)) * rng.choice([1.0, scale], n - len(head))
        out.append(tr(np.concatenate([head, tail])).astype(np.float32))
    return out


def compile_hardware(forward, arrays, dtype: str, semantics: str):
    return compile_model(forward(*[_tg(a, dtype) for a in arrays]), config=HardwareConfig(fp_semantics=semantics))


def run_hardware(design) -> np.ndarray:
    return simulate(design, backend="cxxrtl").outputs[0].astype(np.float32)


def run_tinygrad(forward, arrays, dtype: str, noopt: bool = True) -> np.ndarray:
    with Context(NOOPT=int(noopt)):
        return forward(*[_tg(a, dtype) for a in arrays]).numpy().astype(np.float32)


def same(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Per element: equal values with equal signs, or both NaN."""
    return (np.isnan(got) & np.isnan(want)) | ((got == want) & (np.signbit(got) == np.signbit(want)))


class PerOp:
    """The per-op model (fp_semantics: op): every op on values of `dtype`, rounded to it: numpy
    float16, ml_dtypes bfloat16, ml_dtypes fp8 with tinygrad's saturation; MAX is Python's."""

    def __init__(self, v, dtype: str):
        self.v, self.dtype = np.asarray(v, np.float64), dtype

    @staticmethod
    def round(x: np.ndarray, dtype: str) -> np.ndarray:
        x = np.asarray(x, np.float64)
        if dtype == "fp16":
            with np.errstate(over="ignore"):
                return x.astype(np.float16).astype(np.float64)
        if dtype == "bf16":
            return x.astype(ml_dtypes.bfloat16).astype(np.float64)
        fmt = FMT[dtype]
        with np.errstate(invalid="ignore"):
            x = np.where(np.isfinite(x) & (np.abs(x) > fmt.max_finite), np.copysign(fmt.max_finite, x), x)
        ml = ml_dtypes.float8_e4m3fn if dtype == "fp8e4m3" else ml_dtypes.float8_e5m2
        return x.astype(np.float32).astype(ml).astype(np.float64)

    def _op(self, other, f):
        o = other.v if isinstance(other, PerOp) else np.float64(other)
        with np.errstate(all="ignore"):
            return PerOp(self.round(f(self.v, self.round(o, self.dtype)), self.dtype), self.dtype)

    def __add__(self, o): return self._op(o, np.add)
    def __sub__(self, o): return self._op(o, np.subtract)
    def __mul__(self, o): return self._op(o, np.multiply)
    def __neg__(self): return PerOp(-self.v, self.dtype)

    def maximum(self, o):                            # MAX(self, o): Python's max
        o = o.v if isinstance(o, PerOp) else self.round(o, self.dtype)
        with np.errstate(invalid="ignore"):
            return PerOp(np.where(self.v < o, o, self.v), self.dtype)

    def relu(self):                                  # MAX(0, self)
        with np.errstate(invalid="ignore"):
            return PerOp(np.where(0 < self.v, self.v, 0.0), self.dtype)


CHAINS = {
    "a*b+c": lambda a, b, c, d: a * b + c,
    "relu((a*b+c)*d-a)*b+d": lambda a, b, c, d: ((a * b + c) * d - a).relu() * b + d,
    "max(a*b,c)+d*a": lambda a, b, c, d: (a * b).maximum(c) + d * a,
}
DTYPES = ["fp16", "bf16", "fp8e4m3", "fp8e5m2"]


def chain_inputs(dtype: str, chain: str) -> list[np.ndarray]:
    return inputs(dtype, 400, 4, seed=len(chain))


def reduction_rows(dtype: str) -> np.ndarray:
    """24 x 24 values with special ones among them; the last row saturates an fp8 sum. The
    fp16 and E4M3 maxima run on data without NaN (test_reductions_... says why)."""
    rows = inputs(dtype, 24 * 24, 1, seed=7)[0].reshape(24, 24)
    rows[-1] = FMT[dtype].max_finite / 2
    return rows


def max_on_default_schedule(dtype: str, reduce: str) -> bool:
    return reduce == "max" and dtype in ("fp16", "fp8e4m3")


REDUCTIONS = {"sum": lambda t: t.sum(axis=1), "max": lambda t: t.max(axis=1)}
PIPELINED_DTYPES = ["fp16", "bf16", "fp8e5m2"]


def pipelined_design(dtype: str):
    arrays = inputs(dtype, 300, 4, seed=3)
    forward = CHAINS["relu((a*b+c)*d-a)*b+d"]
    design = compile_model(forward(*[_tg(a, dtype) for a in arrays]), config=HardwareConfig(fp_pipeline=2, lanes=2))
    return design, forward, arrays


@pytest.fixture(scope="module")
def hardware() -> dict[tuple, object]:
    """Every design of the chain, reduction and pipelined tests below, compiled here and built in
    CXXRTL bundles (cxxrtl.build_many: a few g++ runs for all 43 designs, each parsing the CXXRTL
    runtime once, instead of one run per design), keyed by what the test names. All at g++ -O0,
    as cxxrtl builds designs past LARGE_RTLIL: these are 0.25-2.4 M characters of RTLIL and run
    a few hundred cycles, so the optimiser's time would never be paid back."""
    built: dict[tuple, object] = {}
    for dtype in DTYPES:
        for chain, forward in CHAINS.items():
            for semantics in ("tinygrad", "op"):
                built["chain", dtype, chain, semantics] = compile_hardware(forward, chain_inputs(dtype, chain), dtype,
                                                                           semantics)
        for reduce, forward in REDUCTIONS.items():
            rows = reduction_rows(dtype)
            x = np.where(np.isnan(rows), np.float32(1.0), rows) if max_on_default_schedule(dtype, reduce) else rows
            for semantics in ("tinygrad", "op"):
                built["reduce", dtype, reduce, semantics] = compile_hardware(forward, [x], dtype, semantics)
    for dtype in PIPELINED_DTYPES:
        built["pipelined", dtype] = pipelined_design(dtype)[0]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cxxrtl, "LARGE_RTLIL", 0)
        cxxrtl.build_many(built.values())
    return built


@pytest.mark.slow                  # 24 designs through CXXRTL
@pytest.mark.parametrize("chain", sorted(CHAINS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_chains_bit_exact_against_tinygrad_and_the_per_op_model(hardware, dtype, chain):
    """Every pair of special values and random ones (saturating in fp8): the default design
    equals tinygrad's PYTHON device bit for bit, the fp_semantics=op design the per-op model."""
    forward = CHAINS[chain]
    arrays = chain_inputs(dtype, chain)
    got = run_hardware(hardware["chain", dtype, chain, "tinygrad"])
    want = run_tinygrad(forward, arrays, dtype)
    bad = ~same(got, want)
    assert not bad.any(), (f"{int(bad.sum())} differ from tinygrad, e.g. inputs "
                           f"{[float(a[np.argmax(bad)]) for a in arrays]}: {got[bad][:4]} vs {want[bad][:4]}")
    got_op = run_hardware(hardware["chain", dtype, chain, "op"])
    model = forward(*[PerOp(a, dtype) for a in arrays]).v.astype(np.float32)
    bad = ~same(got_op, model)
    assert not bad.any(), (f"{int(bad.sum())} differ from the per-op model, e.g. inputs "
                           f"{[float(a[np.argmax(bad)]) for a in arrays]}: {got_op[bad][:4]} vs {model[bad][:4]}")
    assert not same(got, got_op).all()             # the two settings round differently here


def _sum_model(x: np.ndarray, dtype: str) -> np.ndarray:
    acc = np.zeros(x.shape[0], np.float32)
    for k in range(x.shape[1]):
        with np.errstate(over="ignore", invalid="ignore"):
            acc = acc + x[:, k].astype(np.float32)
    return PerOp.round(acc, dtype).astype(np.float32)


def _max_model(x: np.ndarray, dtype: str) -> np.ndarray:
    fmt = FMT[dtype]
    acc = np.full(x.shape[0], -np.inf if fmt.has_inf else -fmt.max_finite)   # E4M3: compiler/max_identity.py
    for k in range(x.shape[1]):
        with np.errstate(invalid="ignore"):
            acc = np.where(acc < x[:, k], x[:, k], acc)
    return acc.astype(np.float32)


@pytest.mark.slow                  # 16 designs through CXXRTL
@pytest.mark.parametrize("reduce", ["sum", "max"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_reductions_bit_exact_against_tinygrad_and_the_per_op_model(hardware, dtype, reduce):
    """Row sums (a float32 accumulator, one rounding at the store) and row maxima of 24 x 24
    values with special ones among them; in fp8 the last row's sum saturates. The fp16 and E4M3
    maxima are compared with tinygrad's default schedule, on data without NaN (whether Python's
    max keeps a NaN depends on the operand order, which that schedule changes): under NOOPT=1
    tinygrad fails to verify its own fp16 max kernel, and E4M3's starts at NaN (docs/fp8.md)."""
    rows = reduction_rows(dtype)
    default_schedule = max_on_default_schedule(dtype, reduce)
    x = np.where(np.isnan(rows), np.float32(1.0), rows) if default_schedule else rows
    forward = REDUCTIONS[reduce]
    got = run_hardware(hardware["reduce", dtype, reduce, "tinygrad"])
    want = run_tinygrad(forward, [x], dtype, noopt=not default_schedule)
    assert same(got, want).all(), (got, want)
    got_op = run_hardware(hardware["reduce", dtype, reduce, "op"])
    model = (_sum_model if reduce == "sum" else _max_model)(x.astype(np.float64), dtype)
    assert same(got_op, model).all(), (got_op, model)
    if dtype.startswith("fp8") and reduce == "sum":
        assert got[-1] == FMT[dtype].max_finite                  # 12 x max saturates


@pytest.mark.parametrize("dtype", ["fp8e4m3", "fp8e5m2"])
def test_saturating_multiply_add_equals_tinygrad_in_both_settings(dtype):
    """The issue's example: big*a + big. Default: one rounding, -big as tinygrad; op: the
    product saturates first, -big + big = 0, as the per-op model says."""
    big = FMT[dtype].max_finite
    a = np.array([-2.0, 1.0, 0.5, -0.0], np.float32)

    def forward(t):
        return t * big + big
    for semantics, want in (("tinygrad", [-big, big, big, big]), ("op", [0.0, big, big, big])):
        design = compile_model(forward(_tg(a, dtype)), config=HardwareConfig(fp_semantics=semantics))
        assert simulate(design).outputs[0].astype(np.float32).tolist() == want
    assert run_tinygrad(forward, [a], dtype).tolist() == [-big, big, big, big]


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_relu_of_negative_zero_and_nan_is_tinygrads(dtype):
    """relu(-0.0) = +0.0 and relu(NaN) = 0, as tinygrad computes them (Python's max), in both
    settings; maximum(x, 0) keeps -0.0 and NaN as tinygrad does."""
    x = np.array([-0.0, 0.0, np.nan, -1.0, 1.5, -np.inf, np.inf], np.float32)
    for forward in (lambda t: t.relu(), lambda t: t.maximum(0)):
        want = run_tinygrad(forward, [x], dtype)
        for semantics in ("tinygrad", "op"):
            design = compile_model(forward(_tg(x, dtype)), config=HardwareConfig(fp_semantics=semantics))
            got = simulate(design).outputs[0].astype(np.float32)
            assert same(got, want).all(), (semantics, got, want)


@pytest.mark.slow                  # 3 designs through CXXRTL
@pytest.mark.parametrize("dtype", PIPELINED_DTYPES)
def test_fused_units_pipelined_and_in_lanes_equal_tinygrad(hardware, dtype):
    """fp_pipeline cuts the FMulAdd units and the emulated conversions into stages, and lanes
    copies them: the same bits as tinygrad, in the cycles the cycle model says."""
    _, forward, arrays = pipelined_design(dtype)
    want = run_tinygrad(forward, arrays, dtype)
    design = hardware["pipelined", dtype]
    result = simulate(design, backend="cxxrtl")
    assert result.cycles == design.cycle_model().total
    assert same(result.outputs[0].astype(np.float32), want).all()
