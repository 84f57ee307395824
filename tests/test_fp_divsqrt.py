"""FDiv (and its reciprocal form), FSqrt and FTrunc, bit for bit against the numpy reference
model and, in rne/keep mode, against numpy's own float32/float16 division, sqrt and trunc
(bf16: float32 results rounded to bf16, exact since 24 >= 2*8 + 2 bits makes the double
rounding of a quotient or root innocuous). One CXXRTL bank per format runs every unit in
every mode on >= 100k vectors: the add/mul vector set of test_fp_units (uniform patterns,
close exponents, short significands, every pair of special values, every 16-bit pattern of
the first operand) plus quotients aimed at overflow and underflow and exact squares.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import assert_same_floats, float_pairs, pack, special_values

import compiler.fp
from compiler.fp import BF16, FP16, FP32, FDiv, FloatFormat, FSqrt, FTrunc
from compiler.fp import reference as R
from compiler.fp.harness import Bank, NativeEvaluator, build_all, source_fingerprint

FORMATS = [FP32, FP16, BF16]
MODES = [(r, s) for r in ("rne", "rtz") for s in ("keep", "flush")]
SEED = 20261123


UNITS = ("div", "rcp", "sqrt", "trunc")


def bank_spec(fmt: FloatFormat, stages: int = 1, units: tuple[str, ...] = UNITS) -> list[tuple]:
    n = {"stages": stages} if stages > 1 else {}
    spec = []
    for r, s in MODES:
        spec.append((f"div_{r}_{s}", FDiv, (fmt, r, s), n, {"a": "a", "b": "b"}))
        spec.append((f"rcp_{r}_{s}", FDiv, (fmt, r, s), {"reciprocal": True, **n}, {"b": "b"}))
        spec.append((f"sqrt_{r}_{s}", FSqrt, (fmt, r, s), n, {"a": "a"}))
    for s in ("keep", "flush") if stages == 1 else ():      # FTrunc is combinational only
        spec.append((f"trunc_{s}", FTrunc, (fmt, s), {}, {"a": "a"}))
    return [row for row in spec if row[0].split("_")[0] in units]


def bank_evaluator(fmt: FloatFormat, stages: int = 1, units: tuple[str, ...] = UNITS) -> NativeEvaluator:
    spec = bank_spec(fmt, stages, units)
    bank = Bank({"a": fmt.width, "b": fmt.width},
                {name: (cls(*args, **kw), wires) for name, cls, args, kw, wires in spec})
    fingerprint = source_fingerprint(spec, sources=list(Path(compiler.fp.__file__).parent.glob("*.py")))
    return NativeEvaluator(bank, fingerprint=fingerprint, latency=stages - 1)


def divsqrt_vectors(fmt: FloatFormat, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    a, b = float_pairs(fmt, rng)
    p, man, top = fmt.precision, fmt.man_bits, fmt.exp_max_field
    n = 20_000
    # quotients around the largest exponent and around / below the smallest normal
    e_a = rng.integers(0, top, n)
    target = np.where(rng.integers(0, 2, n) == 1, rng.integers(top - 4, top + 2, n), rng.integers(-p - 2, 3, n))
    e_b = np.clip(e_a - target + fmt.bias, 0, top - 1)
    signs = lambda: rng.integers(0, 2, n)                                            # noqa: E731
    qa = pack(fmt, signs(), e_a, rng.integers(0, 1 << man, n, dtype=np.uint64))
    qb = pack(fmt, signs(), e_b, rng.integers(0, 1 << man, n, dtype=np.uint64))
    # exact squares (sqrt exact) and exact quotients: short significands
    short = rng.integers(1, 1 << ((p + 1) // 2), n).astype(np.float64)
    squares = R.round_to_format(short * short * 2.0 ** rng.integers(-40, 40, n), fmt, "rtz")
    divisor = R.round_to_format(short * 2.0 ** rng.integers(-8, 8, n), fmt, "rtz")
    sv = special_values(fmt)
    a = np.concatenate([a, qa, squares, np.tile(sv, 50)]).astype(np.uint64)
    b = np.concatenate([b, qb, divisor, np.repeat(sv, 50)[rng.permutation(50 * len(sv))]]).astype(np.uint64)
    return a, b


PIPELINED = [FP32, BF16]


@pytest.fixture(scope="module")
def banks() -> dict[tuple[str, int], NativeEvaluator]:
    """{(format, stages): evaluator}: every format's bank combinational, and those of PIPELINED
    at 8 stages, built by one build_all (a few bundled g++ runs instead of one run per bank)."""
    evaluators = {(fmt.name, 1): bank_evaluator(fmt) for fmt in FORMATS}
    evaluators |= {(fmt.name, 8): bank_evaluator(fmt, stages=8) for fmt in PIPELINED}
    build_all(list(evaluators.values()))
    return evaluators


@pytest.fixture(scope="module")
def runs(banks) -> dict[str, tuple[dict, dict]]:
    rng = np.random.default_rng(SEED)
    inputs = {fmt.name: dict(zip("ab", divsqrt_vectors(fmt, rng))) for fmt in FORMATS}
    return {fmt.name: (inputs[fmt.name], banks[fmt.name, 1].run(inputs[fmt.name])) for fmt in FORMATS}


def native(op: str, fmt: FloatFormat, a, b) -> np.ndarray:
    """numpy's own result in rne/keep: float32/float16 arithmetic, bf16 through float32."""
    if fmt is not BF16:
        return R.numpy_native(op, a, b, fmt)
    x, y = R.bf16_bits_to_float32(a), R.bf16_bits_to_float32(b)
    with np.errstate(all="ignore"):
        z = {"div": np.divide, "sqrt": lambda x, _: np.sqrt(x), "trunc": lambda x, _: np.trunc(x)}[op](x, y)
    return R.float32_to_bf16_bits(z)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS, ids=str)
def test_vector_count(runs, fmt):
    assert len(runs[fmt.name][0]["a"]) >= 100_000


@pytest.mark.slow
@pytest.mark.parametrize("rounding,subnormals", MODES)
@pytest.mark.parametrize("fmt", FORMATS, ids=str)
def test_div_and_reciprocal(runs, fmt, rounding, subnormals):
    ins, outs = runs[fmt.name]
    a, b = ins["a"], ins["b"]
    assert_same_floats(outs[f"div_{rounding}_{subnormals}_y"], R.div(a, b, fmt, rounding, subnormals), fmt,
                       f"{fmt} div {rounding} {subnormals}", a, b)
    assert_same_floats(outs[f"rcp_{rounding}_{subnormals}_y"], R.reciprocal(b, fmt, rounding, subnormals), fmt,
                       f"{fmt} reciprocal {rounding} {subnormals}", b)
    if (rounding, subnormals) == ("rne", "keep"):
        one = np.full_like(b, fmt.bias << fmt.man_bits)
        assert_same_floats(outs["div_rne_keep_y"], native("div", fmt, a, b), fmt, f"{fmt} div vs numpy", a, b)
        assert_same_floats(outs["rcp_rne_keep_y"], native("div", fmt, one, b), fmt, f"{fmt} 1/x vs numpy", b)


@pytest.mark.slow
@pytest.mark.parametrize("rounding,subnormals", MODES)
@pytest.mark.parametrize("fmt", FORMATS, ids=str)
def test_sqrt(runs, fmt, rounding, subnormals):
    ins, outs = runs[fmt.name]
    a = ins["a"]
    assert_same_floats(outs[f"sqrt_{rounding}_{subnormals}_y"], R.sqrt(a, fmt, rounding, subnormals), fmt,
                       f"{fmt} sqrt {rounding} {subnormals}", a)
    if (rounding, subnormals) == ("rne", "keep"):
        assert_same_floats(outs["sqrt_rne_keep_y"], native("sqrt", fmt, a, a), fmt, f"{fmt} sqrt vs numpy", a)


@pytest.mark.slow
@pytest.mark.parametrize("subnormals", ["keep", "flush"])
@pytest.mark.parametrize("fmt", FORMATS, ids=str)
def test_trunc(runs, fmt, subnormals):
    ins, outs = runs[fmt.name]
    a = ins["a"]
    assert_same_floats(outs[f"trunc_{subnormals}_y"], R.trunc(a, fmt, subnormals), fmt, f"{fmt} trunc", a)
    assert_same_floats(outs[f"trunc_{subnormals}_y"], native("trunc", fmt, a, a), fmt, f"{fmt} trunc vs numpy", a)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS, ids=str)
def test_vectors_cover_edge_cases(runs, fmt):
    """The vectors reach rounding ties-free inexact quotients, overflow, tiny results, exact
    results and every special class on both operands (so the checks above can fail)."""
    a, b = runs[fmt.name][0]["a"], runs[fmt.name][0]["b"]
    x, y = R.decode(a, fmt), R.decode(b, fmt)
    with np.errstate(all="ignore"):
        q = x / y
    info = R.round_info(q, fmt)
    assert info["overflow"].sum() > 100 and info["tiny"].sum() > 100 and info["inexact"].sum() > 10_000
    assert (np.isfinite(q) & ~info["inexact"] & (q != 0)).sum() > 1000
    for cls in (np.isnan, np.isinf, lambda v: v == 0, lambda v: np.abs(v) < fmt.min_normal):
        assert cls(x).sum() > 50 and cls(y).sum() > 50


@pytest.mark.slow
@pytest.mark.parametrize("fmt", PIPELINED, ids=str)
def test_pipelined_units_match_combinational(banks, runs, fmt):
    """Every unit cut into 8 stages (7 register boundaries) gives the same bits, 7 cycles later."""
    ins, outs = runs[fmt.name]
    k = 30_000
    sub = {name: v[:k] for name, v in ins.items()}
    piped = banks[fmt.name, 8].run(sub)
    for name, _, _, _, _ in bank_spec(fmt, stages=8):
        assert np.array_equal(piped[f"{name}_y"], outs[f"{name}_y"][:k]), name


@pytest.mark.slow
@pytest.mark.parametrize("fmt", [FP16, BF16], ids=str)
def test_units_at_a_target_clock_match_combinational(runs, fmt):
    """At a target clock a recurrence unit takes a boundary up to every segment, round_pack's three
    in its rounding and one in its operands' normalisation (CLOCK_CUTS; FDiv p + 8 stages, FSqrt
    p + 7): the same bits, that many cycles later."""
    ins, outs = runs[fmt.name]
    k = 30_000
    sub = {name: v[:k] for name, v in ins.items()}
    p = fmt.precision
    assert (FDiv.stage_limit(fmt, clock=True), FSqrt.stage_limit(fmt, clock=True)) == (p + 8, p + 7)
    evaluators = [(bank_spec(fmt, stages, units), bank_evaluator(fmt, stages, units))
                  for stages, units in ((p + 8, ("div", "rcp")), (p + 7, ("sqrt",)))]
    build_all([ev for _, ev in evaluators])
    for spec, ev in evaluators:
        piped = ev.run(sub)
        for name, *_ in spec:
            assert np.array_equal(piped[f"{name}_y"], outs[f"{name}_y"][:k]), name


@pytest.mark.parametrize("make,ins", [
    (lambda: FDiv(FP16, "rne", "keep", stages=4), {"a": 0x3C00, "b": 0x4200}),       # 1/3
    (lambda: FDiv(BF16, "rtz", "flush", reciprocal=True), {"b": 0x0041}),           # flushed: 1/0
    (lambda: FSqrt(FP16, "rne", "keep"), {"a": 0x0001}),                            # sqrt(min subnormal)
    (lambda: FSqrt(BF16, "rtz", "keep", stages=2), {"a": 0x4040}),                  # sqrt(3)
    (lambda: FTrunc(FP16), {"a": 0xC0A0}),                                          # trunc(-2.3125)
], ids=["fp16-div-4st", "bf16-rcp-flush", "fp16-sqrt-sub", "bf16-sqrt-rtz-2st", "fp16-trunc"])
def test_pysim_matches_reference(make, ins):
    """Amaranth's own simulator, on a few vectors (the CXXRTL bank covers the rest)."""
    from amaranth.sim import Simulator
    dut = make()
    fmt = dut.fmt
    rng = np.random.default_rng(7)
    vecs = {name: np.concatenate([[v], rng.integers(0, 1 << fmt.width, 199)]).astype(np.uint64)
            for name, v in ins.items()}
    got = []

    async def bench(ctx):
        for k in range(200):
            for name in vecs:
                ctx.set(getattr(dut, name), int(vecs[name][k]))
            for _ in range(dut.latency):
                await ctx.tick()
            got.append(ctx.get(dut.y))

    sim = Simulator(dut)
    if dut.latency:
        sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    if isinstance(dut, FTrunc):
        want = R.trunc(vecs["a"], fmt, dut.subnormals)
    elif isinstance(dut, FSqrt):
        want = R.sqrt(vecs["a"], fmt, dut.rounding, dut.subnormals)
    elif dut.reciprocal:
        want = R.reciprocal(vecs["b"], fmt, dut.rounding, dut.subnormals)
    else:
        want = R.div(vecs["a"], vecs["b"], fmt, dut.rounding, dut.subnormals)
    assert_same_floats(np.array(got), want, fmt, "pysim", *vecs.values())


def test_bad_parameters_are_rejected():
    with pytest.raises(ValueError, match=r"^reciprocal: expected True or False, got 1$"):
        FDiv(FP32, reciprocal=1)
    with pytest.raises(ValueError, match=r"^stages: expected an int from 1 to 31, got 32$"):
        FSqrt(FP32, stages=32)                # p + 7: its rows' boundaries, its rounding's and its operand's
    with pytest.raises(ValueError, match=r"^stages: expected an int from 1 to 1, got 2$"):
        FTrunc(FP16, stages=2)
