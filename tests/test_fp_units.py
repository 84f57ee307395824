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
from helpers import assert_same_floats, float_pairs, int_vectors

TOOL_FIXTURES = {'runs'}     # they run Yosys or a C++ build: their users are slow (conftest.py)

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


@pytest.mark.slow
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
