"""Float units, bit for bit against the numpy reference model, run as the synthesised logic.

One `Bank` per format holds every unit in every mode side by side; it is compiled once with
CXXRTL (cached on disk, see compiler/fp/harness.py) and run on ~160-230k input vectors:
uniform bit patterns plus shares aimed at close exponents (cancellation), short significands
and built halfway cases (ties), products near overflow and underflow, subnormal operands,
integers as floats, every pair of special values, and for the 16-bit formats every pattern
of the first operand (so one-operand conversions are exhaustive there). The reference model
itself is checked against numpy's own float32/float16 arithmetic and, for bfloat16, against
the independent integer rounding trick and known values.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import compiler.fp

from compiler.fp import BF16, FP16, FP32, FAdd, FCompare, FloatFormat, FloatToFloat, FloatToInt, FMax, FMul, IntToFloat
from compiler.fp import reference as R
from compiler.fp.harness import Bank, NativeEvaluator, build_all, source_fingerprint

FORMATS = [FP32, FP16, BF16]
MODES = [(r, s) for r in ("rne", "rtz") for s in ("keep", "flush")]
INTS = {"s8": (8, True), "s16": (16, True), "s32": (32, True),
        "u8": (8, False), "u16": (16, False), "u32": (32, False), "bool": (1, False)}
SEED = 20240611
FP_SOURCES = Path(compiler.fp.__file__).parent


# ------------------------------------------------------------------------- the unit bank

def bank_spec(fmt: FloatFormat) -> list[tuple]:
    """(unit name, class, args, input wiring) for every unit whose float input (if any) is
    `fmt`, in every mode. Top-level inputs: a, b (fmt) and i (32-bit integer)."""
    ab, a_only, i_only = {"a": "a", "b": "b"}, {"a": "a"}, {"a": "i"}
    spec = []
    for r, s in MODES:
        spec.append((f"add_{r}_{s}", FAdd, (fmt, r, s), ab))
        spec.append((f"sub_{r}_{s}", FAdd, (fmt, r, s, True), ab))
        spec.append((f"mul_{r}_{s}", FMul, (fmt, r, s), ab))
        for name, (width, signed) in INTS.items():
            spec.append((f"i2f_{name}_{r}_{s}", IntToFloat, (width, signed, fmt, r, s), i_only))
        for dst in FORMATS:
            if dst != fmt:
                spec.append((f"f2f_{dst.name}_{r}_{s}", FloatToFloat, (fmt, dst, r, s), a_only))
    for s in ("keep", "flush"):
        spec.append((f"cmp_{s}", FCompare, (fmt, s), ab))
        spec.append((f"max_{s}", FMax, (fmt, s), ab))
        spec.append((f"f2f_{fmt.name}_rne_{s}", FloatToFloat, (fmt, fmt, "rne", s), a_only))
        for name, (width, signed) in INTS.items():
            spec.append((f"f2i_{name}_{s}", FloatToInt, (fmt, width, signed, s), a_only))
    for tie in ("first", "second"):
        spec.append((f"max_{tie}", FMax, (fmt, "keep", tie), ab))
    return spec


def bank_evaluator(fmt: FloatFormat) -> NativeEvaluator:
    spec = bank_spec(fmt)
    bank = Bank({"a": fmt.width, "b": fmt.width, "i": 32},
                {name: (cls(*args), wires) for name, cls, args, wires in spec})
    # The bank is a pure function of these sources and the spec: lets a cached run skip
    # the RTLIL conversion (seconds per bank).
    fingerprint = source_fingerprint(spec, sources=list(FP_SOURCES.glob("*.py")))
    return NativeEvaluator(bank, fingerprint=fingerprint)


# ------------------------------------------------------------------------- input vectors

def pack(fmt: FloatFormat, sign, exp, man) -> np.ndarray:
    sign, exp, man = (np.asarray(v, dtype=np.uint64) for v in (sign, exp, man))
    return (sign << np.uint64(fmt.width - 1)) | (exp << np.uint64(fmt.man_bits)) | man


def special_values(fmt: FloatFormat) -> np.ndarray:
    """Edge-case magnitudes, with both signs."""
    one = fmt.bias << fmt.man_bits
    mags = [
        0, 1, 2, 3, fmt.man_mask - 1, fmt.man_mask,             # zero, subnormals (min .. max)
        fmt.min_normal_bits, fmt.min_normal_bits + 1,            # smallest normals
        fmt.max_finite_bits, fmt.max_finite_bits - 1,            # largest finite
        fmt.inf_bits, fmt.qnan_bits, fmt.inf_bits + 1,           # inf, quiet NaN, signalling NaN
        one, one + 1, one - 1, one + (1 << (fmt.man_bits - 1)),  # 1, 1+ulp, 1-ulp/2, 1.5
        one + (1 << fmt.man_bits), one - (1 << fmt.man_bits),    # 2, 0.5
        (fmt.exp_max_field - 2) << fmt.man_bits,                 # max exponent / 2
        ((fmt.bias + fmt.man_bits + 1) << fmt.man_bits),         # 2**p: ulp is 2
        ((fmt.bias - fmt.man_bits - 1) << fmt.man_bits),         # 2**-p: half an ulp of 1
        ((fmt.bias - fmt.man_bits - 2) << fmt.man_bits) | 1,     # a bit more than a quarter ulp
    ]
    mags = np.array(sorted(set(mags)), dtype=np.uint64)
    return np.concatenate([mags, mags | np.uint64(fmt.sign_mask)])


def float_pairs(fmt: FloatFormat, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    p, man, top = fmt.precision, fmt.man_bits, fmt.exp_max_field
    parts = []

    def rand(n, hi):
        return rng.integers(0, hi, n, dtype=np.uint64)

    def signs(n):
        return rand(n, 2)

    # Uniform over bit patterns.
    n = 40_000
    parts.append((rand(n, 1 << fmt.width), rand(n, 1 << fmt.width)))
    # Close exponents: additions cancel and round, subtraction of near-equal values.
    n = 30_000
    a = rand(n, 1 << fmt.width)
    a_exp = (a >> np.uint64(man)) & np.uint64(top)
    delta = rng.integers(-(p + 2), p + 3, n)
    b_exp = np.clip(a_exp.astype(np.int64) + delta, 0, top - 1)
    parts.append((a, pack(fmt, signs(n), b_exp, rand(n, 1 << man))))
    # Short significands: exact results and many exact ties in products and sums.
    n = 20_000
    keep_a, keep_b = rng.integers(0, man + 1, n), rng.integers(0, man + 1, n)
    mask_a = ((np.uint64(1) << keep_a.astype(np.uint64)) - np.uint64(1)) << (np.uint64(man) - keep_a.astype(np.uint64))
    mask_b = ((np.uint64(1) << keep_b.astype(np.uint64)) - np.uint64(1)) << (np.uint64(man) - keep_b.astype(np.uint64))
    e_a = rng.integers(fmt.bias - 8, fmt.bias + 8, n)
    e_b = np.clip(e_a + rng.integers(-p - 2, p + 3, n), 1, top - 1)
    parts.append((pack(fmt, signs(n), e_a, rand(n, 1 << man) & mask_a),
                  pack(fmt, signs(n), e_b, rand(n, 1 << man) & mask_b)))
    # Built sums with the shifted-out bits exactly 100..0: halfway cases, both parities.
    n = 15_000
    a = pack(fmt, signs(n), rng.integers(p + 3, top - 1, n), rand(n, 1 << man))
    a_exp = ((a >> np.uint64(man)) & np.uint64(top)).astype(np.int64)
    k = rng.integers(1, p + 1, n)
    b_man = (rand(n, 1 << man) >> k.astype(np.uint64) << k.astype(np.uint64)) | (np.uint64(1) << (k - 1).astype(np.uint64))
    parts.append((a, pack(fmt, signs(n), a_exp - k, b_man & np.uint64(fmt.man_mask))))
    # Products near overflow and underflow (results from max finite down to subnormal and zero).
    n = 20_000
    e_a = rng.integers(1, top - 1, n)
    target = np.where(rng.integers(0, 2, n) == 1,
                      rng.integers(top - 4, top + 2, n),             # around the largest exponent
                      rng.integers(-p - 2, 3, n))                    # around and below the smallest
    e_b = np.clip(target - e_a + fmt.bias, 0, top - 1)
    parts.append((pack(fmt, signs(n), e_a, rand(n, 1 << man)), pack(fmt, signs(n), e_b, rand(n, 1 << man))))
    # Products just below the smallest normal: some round up to it, some stay subnormal.
    n = 5_000
    a = pack(fmt, signs(n), rng.integers(fmt.bias - 4, fmt.bias + 4, n), rand(n, 1 << man))
    target = fmt.min_normal * (1 - rng.random(n) * 2.0 ** -fmt.man_bits)
    b = R.round_to_format(target / np.abs(R.decode(a, fmt)), fmt)
    parts.append((a, b | (signs(n) << np.uint64(fmt.width - 1))))
    # Subnormal operands against anything.
    n = 15_000
    sub = pack(fmt, signs(n), 0, rand(n, 1 << man))
    other = rand(n, 1 << fmt.width)
    swap = rng.integers(0, 2, n) == 1
    parts.append((np.where(swap, other, sub), np.where(swap, sub, other)))
    # Integers as floats, and just beside them: for float -> int.
    n = 20_000
    ints = np.floor(rng.random(n) * 2.0 ** rng.integers(0, 34, n)) * np.where(rng.integers(0, 2, n) == 1, -1, 1)
    ints = ints + rng.choice([0.0, 0.0, 0.25, 0.5, 0.75, -0.5], n)
    parts.append((R.round_to_format(ints, fmt, "rtz"), rand(n, 1 << fmt.width)))
    # Every pair of special values.
    sv = special_values(fmt)
    parts.append((np.repeat(sv, len(sv)), np.tile(sv, len(sv))))
    # The 16-bit formats: every first operand.
    if fmt.width <= 16:
        n = 1 << fmt.width
        parts.append((np.arange(n, dtype=np.uint64), rand(n, 1 << fmt.width)))
    a = np.concatenate([x for x, _ in parts]).astype(np.uint64)
    b = np.concatenate([y for _, y in parts]).astype(np.uint64)
    return a, b


def int_vectors(n: int, rng: np.random.Generator) -> np.ndarray:
    """32-bit integers (as int64): edges, every 16-bit pattern, spread bit lengths, uniform."""
    edges = {0, 1, 2, 3, 65504, 65505, 65519, 65520, 65521, 65535, 257, 259, 0x8080, 0x8180,
             2 ** 24 + 1, 2 ** 24 + 2, 2 ** 24 + 3, 2 ** 25 + 2, 2 ** 25 + 6, 2 ** 31 - 1, 2 ** 31 - 64,
             2 ** 31 - 128, 2 ** 31 - 65, 2 ** 32 - 1, 2 ** 32 - 128, 2 ** 32 - 129}
    edges |= {v for k in range(33) for v in (2 ** k - 1, 2 ** k, 2 ** k + 1) if v < 2 ** 32}
    edges = np.array(sorted(edges), dtype=np.int64)
    edges = np.concatenate([edges, -edges])
    lengths = rng.integers(0, 33, n // 4)
    spread = np.floor(rng.random(n // 4) * 2.0 ** lengths).astype(np.int64)
    spread = np.where(rng.integers(0, 2, n // 4) == 1, -spread, spread)
    every16 = np.arange(1 << 16, dtype=np.int64)
    uniform = rng.integers(0, 2 ** 32, n, dtype=np.int64)
    return np.concatenate([edges, every16, spread, uniform])[:n]


# ------------------------------------------------------------------------- one run per format

@pytest.fixture(scope="session")
def runs() -> dict[str, tuple[dict, dict]]:
    """{format name: (inputs, outputs)}: all three banks built (in parallel) and run once."""
    rng = np.random.default_rng(SEED)
    inputs = {}
    for fmt in FORMATS:
        a, b = float_pairs(fmt, rng)
        inputs[fmt.name] = {"a": a, "b": b, "i": int_vectors(len(a), rng)}
    evaluators = {fmt.name: bank_evaluator(fmt) for fmt in FORMATS}
    build_all(list(evaluators.values()))
    return {name: (inputs[name], ev.run(inputs[name])) for name, ev in evaluators.items()}


def assert_same_floats(got, want, fmt: FloatFormat, what: str, *operands) -> None:
    """Equal bit patterns, except that NaNs only need to be NaNs."""
    got, want = np.asarray(got).astype(np.uint64), np.asarray(want).astype(np.uint64)
    got_nan, want_nan = np.isnan(R.decode(got, fmt)), np.isnan(R.decode(want, fmt))
    bad = (got_nan != want_nan) | (~want_nan & (got != want))
    if bad.any():
        rows = []
        for k in np.nonzero(bad)[0][:8]:
            ins = ", ".join(f"{int(op[k]):#x}" for op in operands)
            rows.append(f"  ({ins}) -> hw {int(got[k]):#x} ({R.decode(got[k:k+1], fmt)[0]!r}), "
                        f"ref {int(want[k]):#x} ({R.decode(want[k:k+1], fmt)[0]!r})")
        pytest.fail(f"{what}: {int(bad.sum())} of {len(bad)} results differ\n" + "\n".join(rows))


def format_id(fmt: FloatFormat) -> str:
    return fmt.name


# ------------------------------------------------------------------------- arithmetic

@pytest.mark.parametrize("op", ["add", "sub"])
@pytest.mark.parametrize("rounding,subnormals", MODES)
@pytest.mark.parametrize("fmt", FORMATS, ids=format_id)
def test_add(runs, fmt, rounding, subnormals, op):
    ins, outs = runs[fmt.name]
    want = R.add(ins["a"], ins["b"], fmt, rounding, subnormals, subtract=op == "sub")
    assert_same_floats(outs[f"{op}_{rounding}_{subnormals}_y"], want, fmt,
                       f"{fmt.name} {op} {rounding} {subnormals}", ins["a"], ins["b"])


@pytest.mark.parametrize("rounding,subnormals", MODES)
@pytest.mark.parametrize("fmt", FORMATS, ids=format_id)
def test_mul(runs, fmt, rounding, subnormals):
    ins, outs = runs[fmt.name]
    want = R.mul(ins["a"], ins["b"], fmt, rounding, subnormals)
    assert_same_floats(outs[f"mul_{rounding}_{subnormals}_y"], want, fmt,
                       f"{fmt.name} mul {rounding} {subnormals}", ins["a"], ins["b"])


@pytest.mark.parametrize("subnormals", ["keep", "flush"])
@pytest.mark.parametrize("fmt", FORMATS, ids=format_id)
def test_compare(runs, fmt, subnormals):
    ins, outs = runs[fmt.name]
    lt, eq = R.compare(ins["a"], ins["b"], fmt, subnormals)
    for name, want in (("lt", lt), ("eq", eq)):
        got = outs[f"cmp_{subnormals}_{name}"]
        bad = np.nonzero(got != want)[0]
        assert len(bad) == 0, (f"{fmt.name} {name} {subnormals}: {len(bad)} differ, e.g. "
                               f"a={int(ins['a'][bad[0]]):#x} b={int(ins['b'][bad[0]]):#x} hw={got[bad[0]]}")


@pytest.mark.parametrize("subnormals", ["keep", "flush"])
@pytest.mark.parametrize("fmt", FORMATS, ids=format_id)
def test_max_matches_numpy_maximum(runs, fmt, subnormals):
    ins, outs = runs[fmt.name]
    want = R.fmax(ins["a"], ins["b"], fmt, subnormals)       # numpy.maximum itself
    assert_same_floats(outs[f"max_{subnormals}_y"], want, fmt, f"{fmt.name} max {subnormals}", ins["a"], ins["b"])


@pytest.mark.parametrize("zero_tie", ["first", "second"])
@pytest.mark.parametrize("fmt", FORMATS, ids=format_id)
def test_max_zero_tie(runs, fmt, zero_tie):
    ins, outs = runs[fmt.name]
    want = R.fmax(ins["a"], ins["b"], fmt, "keep", zero_tie)
    assert_same_floats(outs[f"max_{zero_tie}_y"], want, fmt, f"{fmt.name} max {zero_tie}", ins["a"], ins["b"])


def test_numpy_maximum_zero_choice_is_what_fmax_documents():
    """Pins the numpy behaviour FMax's default reproduces (see compare.numpy_zero_tie)."""
    for dtype, first in ((np.float16, True), (np.float32, False), (np.float64, False)):
        pz, nz = np.array([0.0], dtype), np.array([-0.0], dtype)
        assert np.signbit(np.maximum(pz, nz))[0] == (not first), dtype
        assert np.signbit(np.maximum(nz, pz))[0] == first, dtype


# ------------------------------------------------------------------------- conversions

@pytest.mark.parametrize("rounding,subnormals", MODES)
@pytest.mark.parametrize("int_name", list(INTS))
@pytest.mark.parametrize("fmt", FORMATS, ids=format_id)
def test_int_to_float(runs, fmt, int_name, rounding, subnormals):
    ins, outs = runs[fmt.name]
    width, signed = INTS[int_name]
    values = R.wrap_int(ins["i"], width, signed)
    want = R.int_to_float(values, fmt, rounding, subnormals)
    assert_same_floats(outs[f"i2f_{int_name}_{rounding}_{subnormals}_y"], want, fmt,
                       f"{int_name} -> {fmt.name} {rounding} {subnormals}", values)


@pytest.mark.parametrize("subnormals", ["keep", "flush"])
@pytest.mark.parametrize("int_name", list(INTS))
@pytest.mark.parametrize("fmt", FORMATS, ids=format_id)
def test_float_to_int(runs, fmt, int_name, subnormals):
    ins, outs = runs[fmt.name]
    width, signed = INTS[int_name]
    want = R.float_to_int(ins["a"], fmt, width, signed, subnormals) & ((1 << width) - 1)
    got = outs[f"f2i_{int_name}_{subnormals}_y"].astype(np.int64)
    bad = np.nonzero(got != want)[0]
    assert len(bad) == 0, (f"{fmt.name} -> {int_name} {subnormals}: {len(bad)} differ, e.g. "
                           + ", ".join(f"{int(ins['a'][k]):#x}: hw {got[k]:#x} ref {want[k]:#x}" for k in bad[:5]))


@pytest.mark.parametrize("rounding,subnormals", MODES)
@pytest.mark.parametrize("dst", FORMATS, ids=format_id)
@pytest.mark.parametrize("src", FORMATS, ids=format_id)
def test_float_to_float(runs, src, dst, rounding, subnormals):
    if src == dst and rounding == "rtz":
        pytest.skip("same-format conversion is built once (rounding cannot matter)")
    ins, outs = runs[src.name]
    want = R.float_to_float(ins["a"], src, dst, rounding, subnormals)
    assert_same_floats(outs[f"f2f_{dst.name}_{rounding}_{subnormals}_y"], want, dst,
                       f"{src.name} -> {dst.name} {rounding} {subnormals}", ins["a"])


# ------------------------------------------------------------------------- the vectors reach the edges

@pytest.mark.parametrize("fmt", FORMATS, ids=format_id)
def test_vectors_cover_edge_cases(runs, fmt):
    """The random vectors must really exercise ties (both ways), overflow, underflow to
    subnormals and to zero, and cancellation, or the bit-exact tests prove little."""
    ins, _ = runs[fmt.name]
    a, b = ins["a"], ins["b"]
    add_info = R.add_info(a, b, fmt)
    mul_info = R.mul_info(a, b, fmt)
    mul_rne = R.decode(R.mul(a, b, fmt), fmt)
    counts = {
        "add ties rounding up": add_info["tie_to_up"].sum(),
        "add ties rounding down": add_info["tie_to_down"].sum(),
        "add cancellations": add_info["cancel"].sum(),
        "add overflows": add_info["overflow"].sum(),
        "add subnormal results": add_info["tiny"].sum(),
        "mul ties rounding up": mul_info["tie_to_up"].sum(),
        "mul ties rounding down": mul_info["tie_to_down"].sum(),
        "mul overflows": mul_info["overflow"].sum(),
        "mul tiny results": mul_info["tiny"].sum(),
        "mul underflows to zero": (mul_info["tiny"] & (mul_rne == 0)).sum(),
        "mul rounds up to the smallest normal": (mul_info["tiny"] & (np.abs(mul_rne) == fmt.min_normal)).sum(),
    }
    ints = ins["i"]
    for width in (16, 32):
        if width <= fmt.precision:
            continue                                   # exact: no ties possible
        values = R.wrap_int(ints, width, True)
        info = R.round_info(values.astype(np.float64), fmt)
        counts[f"int{width} ties"] = info["tie"].sum()
    low = {k: int(v) for k, v in counts.items() if v < 50}
    assert not low, f"too few vectors hit: {low}"


# ------------------------------------------------------------------------- the reference model itself

def _random_pairs(fmt, n, rng):
    a = rng.integers(0, 1 << fmt.width, n, dtype=np.uint64)
    close = a ^ rng.integers(0, 1 << (fmt.man_bits + 3), n, dtype=np.uint64)
    b = np.where(rng.integers(0, 2, n) == 1, close ^ np.uint64(fmt.sign_mask), rng.integers(0, 1 << fmt.width, n, dtype=np.uint64))
    return a, b


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
@pytest.mark.parametrize("fmt", [FP32, FP16], ids=format_id)
def test_reference_agrees_with_numpy_arithmetic(fmt, op):
    a, b = _random_pairs(fmt, 300_000, np.random.default_rng(1))
    ours = R.mul(a, b, fmt) if op == "mul" else R.add(a, b, fmt, subtract=op == "sub")
    assert_same_floats(ours, R.numpy_native(op, a, b, fmt), fmt, f"reference {op} vs numpy", a, b)


def test_reference_agrees_with_numpy_conversions():
    rng = np.random.default_rng(2)
    x32 = rng.integers(0, 1 << 32, 300_000, dtype=np.uint64).astype(np.uint32)
    with np.errstate(all="ignore"):
        numpy16 = x32.view(np.float32).astype(np.float16).view(np.uint16)
    assert_same_floats(R.float_to_float(x32, FP32, FP16), numpy16, FP16, "fp32->fp16", x32)
    x16 = np.arange(1 << 16, dtype=np.uint16)
    with np.errstate(all="ignore"):
        numpy32 = x16.view(np.float16).astype(np.float32).view(np.uint32)
    assert_same_floats(R.float_to_float(x16, FP16, FP32), numpy32, FP32, "fp16->fp32", x16)
    ints = rng.integers(-2 ** 31, 2 ** 31, 300_000)
    for fmt, dtype in ((FP32, np.float32), (FP16, np.float16)):
        with np.errstate(all="ignore"):
            want = ints.astype(np.float64).astype(dtype).view(np.uint32 if fmt is FP32 else np.uint16)
        assert_same_floats(R.int_to_float(ints, fmt), want, fmt, f"int -> {fmt.name}", ints)
    in_range = x32.view(np.float32)
    in_range = in_range[np.abs(in_range) < 2.0 ** 31]
    bits = in_range.view(np.uint32)
    assert (R.float_to_int(bits, FP32, 32, True) == np.trunc(in_range).astype(np.int64)).all()


def test_reference_rtz_rounds_the_exact_sum():
    """1 - 2**-149 truncates to the float below 1, though float64 rounds it to 1."""
    one, tiny_neg = np.uint64(0x3F800000), np.uint64(0x80000001)
    assert R.add(one, tiny_neg, FP32, "rtz")[0] == 0x3F7FFFFF
    assert R.add(one, tiny_neg, FP32, "rne")[0] == 0x3F800000
    # The largest finite number plus a tiny amount stays finite in rtz, rne too.
    assert R.add(np.uint64(0x7F7FFFFF), np.uint64(1), FP32, "rtz")[0] == 0x7F7FFFFF
    # x + (-x) = +0 in both modes; -0 + -0 = -0.
    for rounding in ("rne", "rtz"):
        assert R.add(np.uint64(0x3C00), np.uint64(0xBC00), FP16, rounding)[0] == 0
        assert R.add(np.uint64(0x8000), np.uint64(0x8000), FP16, rounding)[0] == 0x8000


def test_reference_flush_rounds_before_flushing():
    """flush: round with unbounded exponent, then flush what is below the smallest normal."""
    # fp16: (1 - 2**-12) * 2**-14 rounds (11 bits) up to 2**-14, the smallest normal: kept.
    x = np.array([(1 - 2.0 ** -12) * 2.0 ** -14, (1 - 2.0 ** -11) * 2.0 ** -14, -(2.0 ** -20)])
    assert list(R.round_to_format(x, FP16, "rne", "flush")) == [0x0400, 0x0000, 0x8000]
    assert list(R.round_to_format(x, FP16, "rne", "keep")) == [0x0400, 0x0400, 0x8010]
    assert list(R.round_to_format(x, FP16, "rtz", "flush")) == [0x0000, 0x0000, 0x8000]


def test_bf16_reference_against_bit_trick_and_known_values():
    rng = np.random.default_rng(3)
    # Random float32 patterns, plus every exponent with the low 16 bits at every rounding edge.
    edges = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], dtype=np.uint32)
    highs = np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)
    structured = (highs[:, None] | edges[None, :]).ravel()
    x = np.concatenate([rng.integers(0, 1 << 32, 500_000, dtype=np.uint64).astype(np.uint32), structured])
    f = x.view(np.float32)
    for rounding in ("rne", "rtz"):
        want = R.float32_to_bf16_bits(f, rounding)
        assert_same_floats(R.float_to_float(x, FP32, BF16, rounding), want, BF16, f"fp32->bf16 {rounding}", x)
    known = {1.0: 0x3F80, -2.0: 0xC000, np.pi: 0x4049, 3.4028234663852886e38: 0x7F80,
             float(np.float32(2.0 ** -149)): 0x0000, 65504.0: 0x4780, 1.0 + 2.0 ** -8: 0x3F80,
             1.0 + 3 * 2.0 ** -8: 0x3F82, -(2.0 ** 100): 0xF180}
    got = R.round_to_format(np.array(list(known)), BF16)
    assert [int(g) for g in got] == list(known.values())
    # rtz saturates at the largest finite bf16 (0x7F7F = 3.3895e38).
    assert R.round_to_format(np.array([3.4e38]), BF16, "rtz")[0] == 0x7F7F
    assert R.decode(np.array([0x7F7F]), BF16)[0] == BF16.max_finite
    # Round trip: every bf16 pattern decodes and re-encodes to itself (NaNs to the canonical one).
    every = np.arange(1 << 16, dtype=np.uint64)
    again = R.round_to_format(R.decode(every, BF16), BF16)
    assert_same_floats(again, every, BF16, "bf16 round trip", every)


# ------------------------------------------------------------------------- bad parameters

@pytest.mark.parametrize("make,message", [
    (lambda: FAdd(FP32, rounding="rnd"), "rounding: expected one of 'rne', 'rtz', got 'rnd'"),
    (lambda: FMul(FP16, subnormals="ftz"), "subnormals: expected one of 'keep', 'flush', got 'ftz'"),
    (lambda: FAdd("fp32"), "fmt: expected a FloatFormat such as FP32, FP16 or BF16, got 'fp32'"),
    (lambda: FAdd(FP32, subtract="yes"), "subtract: expected True or False, got 'yes'"),
    (lambda: FCompare(FP32, subnormals=None), "subnormals: expected one of 'keep', 'flush', got None"),
    (lambda: FMax(FP32, zero_tie="left"), "zero_tie: expected None, 'first' or 'second', got 'left'"),
    (lambda: IntToFloat(0, True, FP32), "int_width: expected an int in 1..64, got 0"),
    (lambda: IntToFloat(8, 1, FP32), "int_signed: expected True or False, got 1"),
    (lambda: FloatToInt(FP32, 32, True, subnormals="zero"), "subnormals: expected one of 'keep', 'flush', got 'zero'"),
    (lambda: FloatToFloat(FP32, "bf16"), "dst_fmt: expected a FloatFormat such as FP32, FP16 or BF16, got 'bf16'"),
    (lambda: FloatToFloat(FP32, BF16, rounding="up"), "rounding: expected one of 'rne', 'rtz', got 'up'"),
    (lambda: FloatFormat("tiny", 1, 3), "FloatFormat 'tiny': exp_bits must be an int in 2..11, got 1"),
    (lambda: R.round_to_format([1.0], FP32, "rna"), "rounding: expected one of 'rne', 'rtz', got 'rna'"),
])
def test_bad_parameters_are_rejected(make, message):
    with pytest.raises(ValueError) as info:
        make()
    assert str(info.value) == message


# ------------------------------------------------------------------------- the harness

@pytest.mark.parametrize("fmt,unit,make", [
    (FP16, "mul_rne_keep", lambda: FMul(FP16, "rne", "keep")),
    (BF16, "sub_rtz_flush", lambda: FAdd(BF16, "rtz", "flush", subtract=True)),
    (FP32, "f2f_fp16_rne_keep", lambda: FloatToFloat(FP32, FP16)),
], ids=["fp16-mul", "bf16-sub-rtz-flush", "fp32-to-fp16"])
def test_pysim_agrees_with_cxxrtl(runs, fmt, unit, make):
    """Amaranth's own simulator reads the design the same way as Yosys/CXXRTL."""
    from amaranth.sim import Simulator
    ins, outs = runs[fmt.name]
    picks = np.random.default_rng(5).choice(len(ins["a"]), 300, replace=False)
    dut, got = make(), []

    async def testbench(ctx):
        for k in picks:
            ctx.set(dut.a, int(ins["a"][k]))
            if hasattr(dut, "b"):
                ctx.set(dut.b, int(ins["b"][k]))
            got.append(ctx.get(dut.y))

    sim = Simulator(dut)
    sim.add_testbench(testbench)
    sim.run()
    assert got == [int(v) for v in outs[f"{unit}_y"][picks]]


def test_harness_caches_and_checks_inputs(tmp_path):
    bank = lambda: Bank({"a": 16, "b": 16}, {"cmp": (FCompare(FP16), {"a": "a", "b": "b"})})  # noqa: E731
    first = NativeEvaluator(bank(), cache_dir=tmp_path)
    assert not first.build().cached
    second = NativeEvaluator(bank(), cache_dir=tmp_path)
    assert second.key == first.key and second.build().cached
    out = second.run({"a": np.array([0x3C00, 0x10000 | 0x3C00]), "b": np.array([0x4000, 0x3C00])})
    assert list(out["cmp_lt"]) == [1, 0] and list(out["cmp_eq"]) == [0, 1]   # inputs are masked
    with pytest.raises(ValueError, match=r"inputs: expected exactly \['a', 'b'\], got \['a'\]"):
        second.run({"a": np.array([1])})
