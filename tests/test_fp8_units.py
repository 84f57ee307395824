"""OCP FP8 (E4M3, E5M2) float units, bit for bit, exhaustively where the inputs allow, run as
the synthesised logic (CXXRTL, compiler/fp/harness.py).

The by-the-book reference is ml_dtypes (float8_e4m3fn, float8_e5m2): every unit in round to
nearest even with gradual underflow is compared with it directly. Its arithmetic on fp8
arrays computes in float32 and rounds once to fp8, which is correctly rounded here: float32
has more than 2p + 2 bits for p = 4 (the double-rounding theorem for +, -, *, /, sqrt). The
units come in two overflow modes (compiler/fp/formats.py): non-saturating is ml_dtypes' own
(E4M3 overflow -> NaN, E5M2 -> inf); saturating (what tinygrad computes, the compiler's
FP8E4M3/FP8E5M2) is ml_dtypes' rounding with OCP saturation applied to a finite result that
overflowed, checked also against tinygrad's own fp8 conversion (`tinygrad.dtype.float_to_fp8`).
The other modes (rtz, flush) are checked against compiler/fp/reference.py, itself compared
with ml_dtypes here over every input.

Inputs: every pair of fp8 operands (256 x 256 = 65,536) for two-operand units, so add, sub,
mul, div, compare and max are exhaustive; every fp16 and every bf16 pattern for conversions
into fp8; every 16-bit integer pattern and random 32-bit ones for int -> fp8; float32 values
at and beside every fp8 rounding boundary plus random ones for fp32 -> fp8.
"""
from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import compiler.fp
from compiler.fp import (BF16, FP8E4M3, FP8E5M2, FP16, FP32, FAdd, FCompare, FDiv, FloatFormat, FloatToFloat,
                         FloatToInt, FMax, FMul, FSqrt, FTrunc, IntToFloat, nonsaturating)
from compiler.fp import reference as R
from compiler.fp.harness import Bank, NativeEvaluator, build_all, source_fingerprint
from compiler.fp.widemul import FWideMul, exact_in

FP8 = [FP8E4M3, FP8E5M2]
_ML = {(4, 3): ml_dtypes.float8_e4m3fn, (5, 2): ml_dtypes.float8_e5m2}


def ml_type(fmt: FloatFormat):
    """The ml_dtypes type of an fp8 layout (either overflow mode)."""
    return _ML[(fmt.exp_bits, fmt.man_bits)]

OTHER = {"fp8e4m3": FP8E5M2, "fp8e5m2": FP8E4M3}
WIDE = {"fp32": (FP32, np.float32, np.uint32, "f32"), "fp16": (FP16, np.float16, np.uint16, "h16"),
        "bf16": (BF16, ml_dtypes.bfloat16, np.uint16, "b16")}
INTS = {"s8": (8, True), "s16": (16, True), "s32": (32, True),
        "u8": (8, False), "u16": (16, False), "u32": (32, False), "bool": (1, False)}
OTHER_MODES = [("rtz", "keep"), ("rne", "flush"), ("rtz", "flush")]
N = 1 << 17
SEED = 20261128
FP_SOURCES = Path(compiler.fp.__file__).parent


def fmt_id(fmt: FloatFormat) -> str:
    return fmt.name


# ------------------------------------------------------------------------- the unit bank

def bank_spec(fmt: FloatFormat) -> list[tuple]:
    """(unit name, class, args, input wiring) for `fmt` (saturating) and its non-saturating
    twin. Top-level inputs: a, b (fp8), i (32-bit integer), f32, h16, b16 (wider floats)."""
    ab, a_only, i_only = {"a": "a", "b": "b"}, {"a": "a"}, {"a": "i"}
    spec = []
    for tag, f in (("sat", fmt), ("nonsat", nonsaturating(fmt))):
        modes = [("rne", "keep")] + (OTHER_MODES if tag == "sat" else [])
        for r, s in modes:
            m = f"{tag}_{r}_{s}"
            spec += [(f"add_{m}", FAdd, (f, r, s), ab), (f"sub_{m}", FAdd, (f, r, s, True), ab),
                     (f"mul_{m}", FMul, (f, r, s), ab), (f"div_{m}", FDiv, (f, r, s), ab),
                     (f"rcp_{m}", FDiv, (f, r, s, True), {"b": "b"}), (f"sqrt_{m}", FSqrt, (f, r, s), a_only)]
            for name, (width, signed) in INTS.items():
                spec.append((f"i2f_{name}_{m}", IntToFloat, (width, signed, f, r, s), i_only))
            for wide, (wf, _, _, port) in WIDE.items():
                spec.append((f"f2f_{wide}_{m}", FloatToFloat, (wf, f, r, s), {"a": port}))
            spec.append((f"f2f_other_{m}", FloatToFloat, (OTHER[fmt.name], f, r, s), a_only))
    for s in ("keep", "flush"):
        spec += [(f"cmp_{s}", FCompare, (fmt, s), ab), (f"max_{s}", FMax, (fmt, s), ab),
                 (f"trunc_{s}", FTrunc, (fmt, s), a_only), (f"same_{s}", FloatToFloat, (fmt, fmt, "rne", s), a_only)]
        for name, (width, signed) in INTS.items():
            spec.append((f"f2i_{name}_{s}", FloatToInt, (fmt, width, signed, s), a_only))
        for wide, (wf, *_) in WIDE.items():
            spec.append((f"widen_{wide}_{s}", FloatToFloat, (fmt, wf, "rne", s), a_only))
    for tie in ("first", "second"):
        spec.append((f"max_{tie}", FMax, (fmt, "keep", tie), ab))
    for s in ("keep", "flush"):
        spec.append((f"wmul_{s}", FWideMul, (fmt, FP32, s), ab))
    return spec


def bank_evaluator(fmt: FloatFormat) -> NativeEvaluator:
    spec = bank_spec(fmt)
    bank = Bank({"a": 8, "b": 8, "i": 32, "f32": 32, "h16": 16, "b16": 16},
                {name: (cls(*args), wires) for name, cls, args, wires in spec})
    return NativeEvaluator(bank, fingerprint=source_fingerprint(spec, sources=list(FP_SOURCES.glob("*.py"))))


# ------------------------------------------------------------------------- input vectors

def float32_vectors(fmt: FloatFormat, n: int, rng: np.random.Generator) -> np.ndarray:
    """float32 bit patterns: every fp8 value and every midpoint between neighbours (the ties),
    one float32 ulp either side of each, the overflow thresholds, specials, then random
    values spread over the fp8 range and beyond, then uniform patterns."""
    values = R.decode(np.arange(1 << fmt.width), fmt)
    finite = np.unique(np.abs(values[np.isfinite(values)]))
    above = np.append(finite[1:], 2 * finite[-1])        # the next value up, past the largest a power of 2
    points = np.concatenate([finite, (finite + above) / 2]).astype(np.float32)
    near = np.concatenate([points, np.nextafter(points, np.float32(np.inf)), np.nextafter(points, np.float32(0))])
    specials = np.array([np.inf, np.nan, 3.4e38, 1e9, 65504, 2 * fmt.max_finite, fmt.max_finite * 1.0625], np.float32)
    structured = np.concatenate([near, specials])
    structured = np.concatenate([structured, -structured]).view(np.uint32)
    k = (n - len(structured)) // 2
    spread = (rng.standard_normal(k) * 2.0 ** rng.integers(fmt.emin - fmt.man_bits - 3, fmt.emax + 3, k)).astype(np.float32)
    uniform = rng.integers(0, 1 << 32, n - len(structured) - k, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([structured, spread.view(np.uint32), uniform]).astype(np.uint64)


def int_vectors(n: int, rng: np.random.Generator) -> np.ndarray:
    """Every 16-bit pattern (so int8/uint8/int16/uint16 -> fp8 are exhaustive), then 32-bit
    integers of every bit length, then uniform ones."""
    every16 = np.arange(1 << 16, dtype=np.int64)
    lengths = rng.integers(0, 33, (n - len(every16)) // 2)
    spread = np.floor(rng.random(len(lengths)) * 2.0 ** lengths).astype(np.int64) * rng.choice([-1, 1], len(lengths))
    uniform = rng.integers(0, 1 << 32, n - len(every16) - len(spread), dtype=np.int64)
    return np.concatenate([every16, spread, uniform])


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[dict, dict]]:
    """{format name: (inputs, outputs)}: both banks built (in parallel) and run once."""
    rng = np.random.default_rng(SEED)
    pairs = np.arange(1 << 16, dtype=np.uint64)
    inputs = {}
    for fmt in FP8:
        a = np.tile(pairs & np.uint64(0xFF), N >> 16)
        b = np.tile(pairs >> np.uint64(8), N >> 16)
        every16 = np.tile(pairs, N >> 16)
        inputs[fmt.name] = {"a": a, "b": b, "i": int_vectors(N, rng), "f32": float32_vectors(fmt, N, rng),
                            "h16": every16, "b16": every16}
    evaluators = {fmt.name: bank_evaluator(fmt) for fmt in FP8}
    build_all(list(evaluators.values()))
    return {name: (inputs[name], ev.run(inputs[name])) for name, ev in evaluators.items()}


# ------------------------------------------------------------------------- the references

def ml(bits, fmt: FloatFormat) -> np.ndarray:
    """fp8 bit patterns as an ml_dtypes array."""
    return np.asarray(bits).astype(np.uint8).view(ml_type(fmt))


def ml_bits(values, fmt: FloatFormat) -> np.ndarray:
    return np.asarray(values).astype(ml_type(fmt)).view(np.uint8).astype(np.uint64)


def ocp_round(x32: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """float32 values -> `fmt` bit patterns: ml_dtypes' cast (round to nearest even, overflow
    to NaN/inf), then, for a saturating `fmt`, OCP saturation: a finite value whose result is
    not finite becomes the largest finite number of its sign."""
    x32 = np.asarray(x32, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        out = x32.astype(ml_type(fmt))
    if fmt.saturate:
        overflow = np.isfinite(x32) & ~np.isfinite(out.astype(np.float32))
        out = np.where(overflow, np.copysign(np.float32(fmt.max_finite), x32).astype(ml_type(fmt)), out)
    return out.view(np.uint8).astype(np.uint64)


def f32_op(op: str, a_bits, b_bits, fmt: FloatFormat) -> np.ndarray:
    """The operation on the fp8 operands in float32 (exact for +, -, *; rounded once for /, sqrt)."""
    a, b = ml(a_bits, fmt).astype(np.float32), ml(b_bits, fmt).astype(np.float32)
    with np.errstate(all="ignore"):
        return {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
                "rcp": lambda _, y: np.float32(1) / y, "sqrt": lambda x, _: np.sqrt(x)}[op](a, b)


def assert_same(got, want, fmt: FloatFormat, what: str, *operands) -> int:
    """Equal bit patterns, except that NaNs only need to be NaNs. Returns the case count."""
    got, want = np.asarray(got).astype(np.uint64), np.asarray(want).astype(np.uint64)
    got_nan, want_nan = np.isnan(R.decode(got, fmt)), np.isnan(R.decode(want, fmt))
    bad = (got_nan != want_nan) | (~want_nan & (got != want))
    if bad.any():
        rows = [f"  ({', '.join(f'{int(op[k]):#x}' for op in operands)}) -> hw {int(got[k]):#x} "
                f"({R.decode(got[k:k+1], fmt)[0]!r}), ref {int(want[k]):#x} ({R.decode(want[k:k+1], fmt)[0]!r})"
                for k in np.nonzero(bad)[0][:8]]
        pytest.fail(f"{what}: {int(bad.sum())} of {len(bad)} results differ\n" + "\n".join(rows))
    return len(got)


# ------------------------------------------------------------------------- arithmetic against ml_dtypes

OPS = ["add", "sub", "mul", "div", "rcp", "sqrt"]


@pytest.mark.slow                  # one CXXRTL build per format (cached on disk)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("tag", ["nonsat", "sat"])
@pytest.mark.parametrize("fmt", FP8, ids=fmt_id)
def test_arithmetic_matches_ml_dtypes(runs, fmt, tag, op):
    """Every pair of operands (every operand for rcp, sqrt), round to nearest even."""
    ins, outs = runs[fmt.name]
    f = fmt if tag == "sat" else nonsaturating(fmt)
    one = slice(0, 1 << 16)
    a, b = ins["a"][one], ins["b"][one]
    want = ocp_round(f32_op(op, a, b, fmt), f)
    if tag == "nonsat" and op in ("add", "sub", "mul", "div"):
        # ml_dtypes' own ufuncs on fp8 arrays give the same bits
        with np.errstate(all="ignore"):
            native = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}[op](ml(a, fmt), ml(b, fmt))
        assert_same(native.view(np.uint8), want, f, f"ml_dtypes {op} vs float32 then cast", a, b)
    assert_same(outs[f"{op}_{tag}_rne_keep_y"][one], want, f, f"{f.name} {op}", a, b)


@pytest.mark.slow                  # one CXXRTL build per format (cached on disk)
@pytest.mark.parametrize("fmt", FP8, ids=fmt_id)
def test_exhaustive_pairs_reach_every_case(runs, fmt):
    """The 65,536 pairs hold overflows (saturated, or NaN / inf), ties rounding both ways,
    subnormal results and exact cancellations: the exhaustive checks cover every path."""
    ins, _ = runs[fmt.name]
    a, b = ins["a"][:1 << 16], ins["b"][:1 << 16]
    add_info, mul_info = R.add_info(a, b, fmt), R.mul_info(a, b, fmt)
    counts = {k: int(v.sum()) for k, v in {
        "add overflow": add_info["overflow"], "mul overflow": mul_info["overflow"],
        "add ties up": add_info["tie_to_up"], "add ties down": add_info["tie_to_down"],
        "mul ties up": mul_info["tie_to_up"], "mul ties down": mul_info["tie_to_down"],
        "add subnormal": add_info["tiny"], "mul tiny": mul_info["tiny"], "cancellations": add_info["cancel"]}.items()}
    assert min(counts.values()) >= 20, counts


# ------------------------------------------------------------------------- conversions against ml_dtypes

@pytest.mark.slow                  # one CXXRTL build per format (cached on disk)
@pytest.mark.parametrize("src", list(WIDE))
@pytest.mark.parametrize("tag", ["nonsat", "sat"])
@pytest.mark.parametrize("fmt", FP8, ids=fmt_id)
def test_narrowing_matches_ml_dtypes(runs, fmt, tag, src):
    """fp32 / fp16 / bf16 -> fp8: every fp16 and bf16 pattern; fp32 at every rounding boundary."""
    ins, outs = runs[fmt.name]
    f = fmt if tag == "sat" else nonsaturating(fmt)
    _, ftype, utype, port = WIDE[src]
    x = ins[port].astype(utype).view(ftype)
    want = ocp_round(x.astype(np.float32), f)       # widening to float32 is exact
    if tag == "nonsat":
        with np.errstate(all="ignore"):
            assert_same(ml_bits(x, f), want, f, f"ml_dtypes {src} cast vs float32 then cast", ins[port])
    assert_same(outs[f"f2f_{src}_{tag}_rne_keep_y"], want, f, f"{src} -> {f.name}", ins[port])


@pytest.mark.slow                  # one CXXRTL build per format (cached on disk)
@pytest.mark.parametrize("tag", ["nonsat", "sat"])
@pytest.mark.parametrize("fmt", FP8, ids=fmt_id)
def test_fp8_to_fp8_matches_ml_dtypes(runs, fmt, tag):
    ins, outs = runs[fmt.name]
    f, src = (fmt if tag == "sat" else nonsaturating(fmt)), OTHER[fmt.name]
    a = ins["a"][:256]
    want = ocp_round(ml(a, src).astype(np.float32), f)
    if tag == "nonsat":
        assert_same(ml_bits(ml(a, src), f), want, f, "ml_dtypes fp8 -> fp8", a)
    assert_same(outs[f"f2f_other_{tag}_rne_keep_y"][:256], want, f, f"{src.name} -> {f.name}", a)


@pytest.mark.slow                  # one CXXRTL build per format (cached on disk)
@pytest.mark.parametrize("int_name", list(INTS))
@pytest.mark.parametrize("tag", ["nonsat", "sat"])
@pytest.mark.parametrize("fmt", FP8, ids=fmt_id)
def test_int_to_fp8_matches_ml_dtypes(runs, fmt, tag, int_name):
    ins, outs = runs[fmt.name]
    f = fmt if tag == "sat" else nonsaturating(fmt)
    width, signed = INTS[int_name]
    values = R.wrap_int(ins["i"], width, signed)
    # the reference rounds from float64 (exact for 32-bit integers); ml_dtypes is compared below 2**24
    want = R.round_to_format(values.astype(np.float64), f)
    exact32 = np.abs(values) < (1 << 24)
    assert_same(ocp_round(values[exact32].astype(np.float32), f), want[exact32], f, "reference vs ml_dtypes", values[exact32])
    assert_same(outs[f"i2f_{int_name}_{tag}_rne_keep_y"], want, f, f"{int_name} -> {f.name}", values)


@pytest.mark.slow                  # one CXXRTL build per format (cached on disk)
@pytest.mark.parametrize("fmt", FP8, ids=fmt_id)
def test_saturating_conversion_matches_tinygrad(runs, fmt):
    """tinygrad's own float -> fp8 conversion (what its kernels compute) equals the saturating
    units on every fp16 and bf16 pattern and on the fp32 vectors (an independent implementation
    of the rounding: cudart's algorithm in integer arithmetic)."""
    from tinygrad import dtypes
    from tinygrad.dtype import float_to_fp8
    tg = {"fp8e4m3": dtypes.fp8e4m3, "fp8e5m2": dtypes.fp8e5m2}[fmt.name]
    ins, outs = runs[fmt.name]
    for src in WIDE:
        _, ftype, utype, port = WIDE[src]
        x = ins[port].astype(utype).view(ftype).astype(np.float64)
        want = np.array([float_to_fp8(float(v), tg) for v in x], np.uint64)
        assert_same(outs[f"f2f_{src}_sat_rne_keep_y"], want, fmt, f"{src} -> {fmt.name} vs tinygrad", ins[port])


# ------------------------------------------------------------------------- fp8 in, no rounding

@pytest.mark.slow                  # one CXXRTL build per format (cached on disk)
@pytest.mark.parametrize("subnormals", ["keep", "flush"])
@pytest.mark.parametrize("fmt", FP8, ids=fmt_id)
def test_compare_max_trunc_widen_match_ml_dtypes(runs, fmt, subnormals):
    ins, outs = runs[fmt.name]
    one = slice(0, 1 << 16)
    a_bits, b_bits = ins["a"][one], ins["b"][one]
    if subnormals == "flush":         # the units read a subnormal as a zero of its sign
        a_bits, b_bits = R.flush_inputs(a_bits, fmt, "flush"), R.flush_inputs(b_bits, fmt, "flush")
    a, b = ml(a_bits, fmt), ml(b_bits, fmt)
    assert (outs[f"cmp_{subnormals}_lt"][one] == (a < b)).all()
    assert (outs[f"cmp_{subnormals}_eq"][one] == (a == b)).all()
    assert_same(outs[f"max_{subnormals}_y"][one], np.maximum(a, b).view(np.uint8), fmt, "max", a_bits, b_bits)
    assert_same(outs[f"trunc_{subnormals}_y"][one], np.trunc(a).view(np.uint8), fmt, "trunc", a_bits)
    assert_same(outs[f"same_{subnormals}_y"][one], a_bits, fmt, "fp8 -> same fp8", a_bits)
    for wide, (wf, ftype, utype, _) in WIDE.items():
        assert_same(outs[f"widen_{wide}_{subnormals}_y"][one], a.astype(ftype).view(utype), wf, f"{fmt.name} -> {wide}", a_bits)


@pytest.mark.slow                  # one CXXRTL build per format (cached on disk)
@pytest.mark.parametrize("zero_tie", ["first", "second"])
@pytest.mark.parametrize("fmt", FP8, ids=fmt_id)
def test_max_zero_tie(runs, fmt, zero_tie):
    ins, outs = runs[fmt.name]
    want = R.fmax(ins["a"], ins["b"], fmt, "keep", zero_tie)
    assert_same(outs[f"max_{zero_tie}_y"], want, fmt, f"max {zero_tie}", ins["a"], ins["b"])


@pytest.mark.slow                  # one CXXRTL build per format (cached on disk)
@pytest.mark.parametrize("subnormals", ["keep", "flush"])
@pytest.mark.parametrize("int_name", list(INTS))
@pytest.mark.parametrize("fmt", FP8, ids=fmt_id)
def test_fp8_to_int(runs, fmt, int_name, subnormals):
    """Truncation toward zero, wrapping, NaN and inf -> 0 (the project's FloatToInt rule,
    tinygrad's PYTHON device); equal to ml_dtypes' cast wherever that is defined (finite, in range)."""
    ins, outs = runs[fmt.name]
    width, signed = INTS[int_name]
    a = ins["a"][:256]
    want = R.float_to_int(a, fmt, width, signed, subnormals)
    got = outs[f"f2i_{int_name}_{subnormals}_y"][:256].astype(np.int64)
    assert (got == (want & ((1 << width) - 1))).all(), (fmt.name, int_name, subnormals)
    x = R.read(a, fmt, subnormals)
    lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed else (0, (1 << width) - 1)
    defined = np.isfinite(x) & (np.trunc(np.nan_to_num(x)) >= lo) & (np.trunc(np.nan_to_num(x)) <= hi)
    if width > 1:
        assert (want[defined] == ml(a, fmt)[defined].astype(np.int64)).all()


@pytest.mark.slow                  # one CXXRTL build per format (cached on disk)
@pytest.mark.parametrize("subnormals", ["keep", "flush"])
@pytest.mark.parametrize("fmt", FP8, ids=fmt_id)
def test_wide_product_equals_casts_and_a_float32_multiply(runs, fmt, subnormals):
    """FWideMul(fp8, fp32) on every pair: the two FloatToFloat units and the FMul(fp32) it
    replaces, bit for bit (and, in rne/keep, ml_dtypes' operands multiplied in float32)."""
    ins, outs = runs[fmt.name]
    one = slice(0, 1 << 16)
    a, b = ins["a"][one], ins["b"][one]
    wide = [R.float_to_float(x, fmt, FP32, "rne", subnormals) for x in (a, b)]
    for rounding in ("rne", "rtz"):
        assert_same(outs[f"wmul_{subnormals}_y"][one], R.mul(*wide, FP32, rounding, subnormals), FP32,
                    f"{fmt.name} x {fmt.name} -> fp32 {rounding} {subnormals}", a, b)
    if subnormals == "keep":
        product = f32_op("mul", a, b, fmt).view(np.uint32)
        assert_same(outs["wmul_keep_y"][one], product, FP32, "vs ml_dtypes in float32", a, b)


def test_wide_product_is_built_only_where_exact():
    assert exact_in(FP8E4M3, FP32) and exact_in(FP8E5M2, FP32) and exact_in(FP16, FP32)
    assert not exact_in(FP8E4M3, FP16) and not exact_in(BF16, FP32)      # exponents beyond the target's
    with pytest.raises(ValueError, match="FWideMul: products of fp8e4m3 values are not all exact in fp16"):
        FWideMul(FP8E4M3, FP16)


# ------------------------------------------------------------------------- the other modes, against the reference model

@pytest.mark.slow                  # one CXXRTL build per format (cached on disk)
@pytest.mark.parametrize("rounding,subnormals", OTHER_MODES)
@pytest.mark.parametrize("fmt", FP8, ids=fmt_id)
def test_other_modes_match_the_reference(runs, fmt, rounding, subnormals):
    ins, outs = runs[fmt.name]
    m = f"sat_{rounding}_{subnormals}"
    a, b = ins["a"], ins["b"]
    ref = {"add": R.add(a, b, fmt, rounding, subnormals), "sub": R.add(a, b, fmt, rounding, subnormals, subtract=True),
           "mul": R.mul(a, b, fmt, rounding, subnormals), "div": R.div(a, b, fmt, rounding, subnormals),
           "rcp": R.reciprocal(b, fmt, rounding, subnormals), "sqrt": R.sqrt(a, fmt, rounding, subnormals)}
    for op, want in ref.items():
        assert_same(outs[f"{op}_{m}_y"], want, fmt, f"{op} {m}", a, b)
    for name, (width, signed) in INTS.items():
        values = R.wrap_int(ins["i"], width, signed)
        assert_same(outs[f"i2f_{name}_{m}_y"], R.int_to_float(values, fmt, rounding, subnormals), fmt, f"{name} {m}", values)
    for wide, (wf, _, _, port) in WIDE.items():
        assert_same(outs[f"f2f_{wide}_{m}_y"], R.float_to_float(ins[port], wf, fmt, rounding, subnormals), fmt,
                    f"{wide} -> fp8 {m}", ins[port])
    assert_same(outs[f"f2f_other_{m}_y"], R.float_to_float(a, OTHER[fmt.name], fmt, rounding, subnormals), fmt,
                f"fp8 -> fp8 {m}", a)


@pytest.mark.parametrize("tag", ["nonsat", "sat"])
@pytest.mark.parametrize("fmt", FP8, ids=fmt_id)
def test_reference_model_matches_ml_dtypes(fmt, tag):
    """compiler/fp/reference.py (what the rtz/flush checks trust) against ml_dtypes in rne/keep:
    every operand pair, every fp16/bf16 pattern, and a million float32 values."""
    f = fmt if tag == "sat" else nonsaturating(fmt)
    pairs = np.arange(1 << 16, dtype=np.uint64)
    a, b = pairs & np.uint64(0xFF), pairs >> np.uint64(8)
    for op, ours in (("add", R.add(a, b, f)), ("sub", R.add(a, b, f, subtract=True)), ("mul", R.mul(a, b, f)),
                     ("div", R.div(a, b, f)), ("sqrt", R.sqrt(a, f))):
        assert_same(ours, ocp_round(f32_op(op, a, b, fmt), f), f, f"reference {op}", a, b)
    for src in ("fp16", "bf16"):
        wf, ftype, utype, _ = WIDE[src]
        assert_same(R.float_to_float(pairs, wf, f), ocp_round(pairs.astype(utype).view(ftype).astype(np.float32), f),
                    f, f"reference {src} -> fp8", pairs)
    x = np.random.default_rng(3).integers(0, 1 << 32, 1 << 20, dtype=np.uint64)
    assert_same(R.float_to_float(x, FP32, f), ocp_round(x.astype(np.uint32).view(np.float32), f), f,
                "reference fp32 -> fp8", x)
    every = np.arange(256, dtype=np.uint64)
    decoded = R.decode(every, fmt)
    want = ml(every, fmt).astype(np.float64)
    assert np.array_equal(np.isnan(decoded), np.isnan(want))
    assert np.array_equal(decoded[~np.isnan(want)], want[~np.isnan(want)])


# ------------------------------------------------------------------------- the formats themselves

def test_fp8_format_constants_are_ocp():
    """OCP OFP8: E4M3 bias 7, max 448 (S.1111.110), NaN S.1111.111, no inf, min normal 2**-6,
    min subnormal 2**-9; E5M2 bias 15, max 57344, inf S.11111.00, min subnormal 2**-16. The
    same constants as ml_dtypes' finfo."""
    for fmt in FP8:
        info = ml_dtypes.finfo(ml_type(fmt))
        assert (fmt.max_finite, fmt.min_normal, fmt.min_subnormal) == (float(info.max), float(info.smallest_normal),
                                                                       float(info.smallest_subnormal))
    assert (FP8E4M3.bias, FP8E4M3.max_finite_bits, FP8E4M3.qnan_bits, FP8E4M3.has_inf) == (7, 0x7E, 0x7F, False)
    assert (FP8E5M2.bias, FP8E5M2.max_finite_bits, FP8E5M2.inf_bits, FP8E5M2.has_inf) == (15, 0x7B, 0x7C, True)
    assert FP8E4M3.overflow_bits == 0x7E and nonsaturating(FP8E4M3).overflow_bits == 0x7F
    assert FP8E5M2.overflow_bits == 0x7B and nonsaturating(FP8E5M2).overflow_bits == 0x7C
    with pytest.raises(ValueError, match="FloatFormat 'fp8e4m3' has no infinity"):
        FP8E4M3.inf_bits


def test_ml_dtypes_overflow_behaviour_is_what_the_docs_say():
    """Pins what docs/fp8.md states about ml_dtypes 0.6 (the non-saturating mode) and
    tinygrad 0.14 (saturating)."""
    from tinygrad import dtypes
    from tinygrad.dtype import float_to_fp8
    x = np.array([448, 464, 465, 480, 1e6, np.inf, -500], np.float32)
    assert list(x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)) == [0x7E, 0x7E, 0x7F, 0x7F, 0x7F, 0x7F, 0xFF]
    assert [float_to_fp8(float(v), dtypes.fp8e4m3) for v in x] == [0x7E, 0x7E, 0x7E, 0x7E, 0x7E, 0x7F, 0xFE]
    y = np.array([57344, 61439, 61440, 1e9, np.inf, -1e9], np.float32)
    assert list(y.astype(ml_dtypes.float8_e5m2).view(np.uint8)) == [0x7B, 0x7B, 0x7C, 0x7C, 0x7C, 0xFC]
    assert [float_to_fp8(float(v), dtypes.fp8e5m2) for v in y] == [0x7B, 0x7B, 0x7B, 0x7B, 0x7C, 0xFB]


@pytest.mark.parametrize("make,message", [
    (lambda: FloatFormat("e3m1", 3, 1, has_inf=False),
     "FloatFormat 'e3m1': a format without inf needs man_bits >= 2 (its top exponent must hold a finite number besides NaN)"),
    (lambda: FloatFormat("x", 4, 3, saturate=1), "FloatFormat 'x': saturate must be True or False, got 1"),
    (lambda: FloatFormat("x", 4, 3, has_inf="no"), "FloatFormat 'x': has_inf must be True or False, got 'no'"),
])
def test_bad_formats_are_rejected(make, message):
    with pytest.raises(ValueError) as info:
        make()
    assert str(info.value) == message
