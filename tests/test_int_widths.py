"""Integers narrower than their container: declared input ranges (compile_model's
`input_ranges`) carried through the model (compiler/bounds.py) size memories, products,
accumulators and stored results; sub-byte banks packed with whole-word writes
(compiler/hw/subword.py); values outside a declared range refused when loaded."""
from __future__ import annotations

import numpy as np
import pytest
from tinygrad import Tensor, dtypes

import designs
from helpers import narrow_gemv
from compiler import CompileError, HardwareConfig, compile_model, simulate
from compiler import dtypes as cdt
from compiler.hw.bram import block_rams
from compiler.overflow import analyze_overflow, worst_case_inputs
from compiler.sim.memory_io import input_words
from compiler.synth.area import design_rtlil
from compiler.synth.multipliers import mul_cells
from compiler.timing_model import BRAM_MIN_BITS


def test_a_4_bit_weight_is_stored_multiplied_and_summed_at_its_width():
    W, x, y, want, rng = narrow_gemv(4)
    design = compile_model(y, config=HardwareConfig(lanes=2, reduce_unroll=4), input_ranges={W: rng})
    (k,) = design.kernels
    w_banks = [b for b in k.buffers if b.dtype.name == "int8" and b.bounds == (-8, 7)]
    assert len(w_banks) == 8 and all(b.width == 4 for b in w_banks)
    x_banks = [b for b in k.buffers if b.dtype.name == "int8" and b.bounds is None]
    assert x_banks and all(b.width == 8 for b in x_banks)
    # 32 products of [-8, 7] x [-128, 127]: 32 * 1024 = 32,768 at most, 17 bits, not int32's 32
    assert {a.bounds for a in k.accs} == {(-32 * 8 * 127, 32 * 1024)}
    assert {(c.a_width, c.b_width) for c in mul_cells(design_rtlil(design))} == {(4, 8)}
    assert design.narrow_buffers[design.graph.outputs[0]] == (17, True)
    report = analyze_overflow(design)
    assert report.safe and report.acc_bits_required == 17 and report.accumulators[0].width == 17
    worst = worst_case_inputs(design, {})              # the declared range, not int8's
    assert {int(v) for v in worst[design.buffer_of(W)]} <= {-8, 7}
    assert np.array_equal(simulate(design, worst).outputs[0], Wn_x(worst, design, W, x))
    for backend in ("pysim", "cxxrtl"):
        result = simulate(design, backend=backend)
        assert np.array_equal(result.outputs[0], want) and result.cycles == design.cycle_model().total


def test_declared_ranges_flow_through_kernels_into_the_next_layer():
    """relu(W1 @ x) requantised to [0, 7] is stored in 3 unsigned bits; the second layer's
    products and sums are sized by that, bit-exact."""
    rng = np.random.default_rng(1)
    xn, w1, w2 = (rng.integers(-8, 8, s).astype(np.int8) for s in ((16,), (8, 16), (4, 8)))
    x, W1, W2 = Tensor(xn), Tensor(w1), Tensor(w2)
    h = (W1.cast(dtypes.int32) @ x.cast(dtypes.int32) >> 4).clip(0, 7).cast(dtypes.int8)
    y = W2.cast(dtypes.int32) @ h.cast(dtypes.int32)
    design = compile_model(y, input_ranges={x: (-8, 7), W1: (-8, 7), W2: (-8, 7)})
    hidden = [b for b in design.graph.buffers if b.id not in design.graph.inputs and b.id not in design.graph.outputs]
    assert [design.narrow_buffers[b.id] for b in hidden] == [(3, False)]
    ref = w2.astype(np.int64) @ np.clip((w1.astype(np.int64) @ xn) >> 4, 0, 7)
    assert np.array_equal(simulate(design, backend="cxxrtl").outputs[0], ref)


@pytest.mark.parametrize("narrow, hi, bits", [(dtypes.uint8, 3, 2), (dtypes.uint8, 255, 8), (dtypes.int8, 7, 3)])
def test_a_clip_is_stored_at_its_width_when_the_value_before_it_overflows_the_container(narrow, hi, bits):
    """tinygrad moves the cast of clip(v, 0, hi).cast(narrow) into the select, where(hi < v,
    hi, cast(v)): v (here up to 20,000) is cast only where v <= hi, so the stored activation is
    [0, hi] (a uint2 for hi 3: the quantiser's unsigned 2-bit activations), and the next
    layer's products are sized by that: signed weights times the unsigned activations."""
    rng = np.random.default_rng(1)
    xn, w1, w2 = (rng.integers(-8, 8, s).astype(np.int8) for s in ((16,), (8, 16), (4, 8)))
    x, W1, W2 = Tensor(xn), Tensor(w1), Tensor(w2)
    h = ((W1.cast(dtypes.int32) @ x.cast(dtypes.int32) * 5000 + 8192) >> 4).clip(0, hi).cast(narrow)
    y = W2.cast(dtypes.int32) @ h.cast(dtypes.int32)
    design = compile_model(y, input_ranges={x: (-8, 7), W1: (-8, 7), W2: (-8, 7)})
    hidden = [b for b in design.graph.buffers if b.id not in design.graph.inputs and b.id not in design.graph.outputs]
    # stored in `bits` unsigned bits (uint8's whole 8 are no narrower than its container)
    assert [design.narrow_buffers.get(b.id) for b in hidden] == [(bits, False) if bits < 8 else None]
    # the second layer's products: a 4-bit signed weight by the activation, unsigned, one bit wider signed
    assert {(c.a_width, c.b_width) for c in mul_cells(design_rtlil(design))} >= {(4, bits + 1)}
    pre = (w1.astype(np.int64) @ xn * 5000 + 8192) >> 4
    assert pre.max() > hi and pre.max() > 255          # the case: the value before the clip overflows narrow
    ref = w2.astype(np.int64) @ np.clip(pre, 0, hi)
    assert np.array_equal(simulate(design, backend="cxxrtl").outputs[0], ref)


def test_an_input_outside_its_declared_range_is_refused_when_loaded():
    W, x, y, _, rng = narrow_gemv(4)
    design = compile_model(y, input_ranges={W: rng})
    bad = np.asarray(W.numpy()).copy()
    bad[1, 2] = 9
    with pytest.raises(CompileError, match=r"input buffer \d+ \(int8\): element 34 is 9, outside its declared "
                                           r"range \[-8, 7\] \(1 element outside\)"):
        simulate(design, {W: bad})
    assert input_words(design, {x: np.full(32, 127, np.int8)})      # x keeps int8's range


@pytest.mark.parametrize("ranges, message", [
    (lambda W, x, y: {W: (-8, 200)}, r"\[-8, 200\] is not a range within \[-128, 127\]"),
    (lambda W, x, y: {W: (7, -8)}, r"\[7, -8\] is not a range"),
    (lambda W, x, y: {W: (-8.5, 7)}, r"expected integer bounds"),
    (lambda W, x, y: {W: 4}, r"expected \(lo, hi\), got 4"),
])
def test_bad_declared_ranges_are_refused_naming_the_input(ranges, message):
    W, x, y, _, _ = narrow_gemv(4)
    with pytest.raises(CompileError, match=message):
        compile_model(y, input_ranges=ranges(W, x, y))


def test_a_float_input_cannot_be_declared_narrower():
    a = Tensor(np.ones(4, np.float32))
    with pytest.raises(CompileError, match="holds fp32: declared ranges size integer inputs only"):
        compile_model(a + 1, input_ranges={a: (0, 1)})


def test_the_accumulator_register_is_sized_to_the_proof_without_declared_ranges():
    """Full-range int8: the 784-long dot product needs 25 bits, its register has 25, and the
    stored int32 results 25 too; an explicit acc_width still wins (and may wrap)."""
    design = compile_model(*designs.gemv_int8(4, 784).outputs)
    assert design.kernels[0].accs[0].bounds == (784 * -128 * 127, 784 * 128 * 128)
    assert design.top.kernels[0].elaborate(None) is not None
    narrow = compile_model(*designs.gemv_int8(4, 784).outputs, config=HardwareConfig(acc_width=20))
    assert analyze_overflow(narrow).accumulators[0].width == 20


def test_sub_byte_banks_pack_nine_to_a_block_ram_word_from_fp_pipeline_3():
    """Per-element write enables cover whole 9-bit bytes: four int4 elements per 36-bit word.
    Written whole words at a time (read-modify-write), nine."""
    assert block_rams(512, 9, 4) == (3, 1) and block_rams(512, 9, 4, word_writes=True) == (1, 1)
    W, x, y, want, rng = narrow_gemv(4, M=4, K=36)
    packs = compile_model(y, config=HardwareConfig(lanes=2, reduce_unroll=9, fp_pipeline=3),
                          input_ranges={W: rng}).packs[0]
    assert [(len(p.slots), p.width, p.word_writes) for p in packs if p.width == 4] == [(9, 4, True)] * 2
    assert all(not p.word_writes for p in packs if p.width == 8)        # int8 x keeps its enables
    W, x, y, want, rng = narrow_gemv(4, M=4, K=36)
    low = compile_model(y, config=HardwareConfig(lanes=2, reduce_unroll=9, fp_pipeline=2), input_ranges={W: rng})
    assert not any(p.word_writes for p in low.packs[0])


@pytest.mark.parametrize("order", ["bank", "word", "pairs", "again"])
@pytest.mark.parametrize("M, K, lanes, memory, target_mhz, shared", [
    (4, 36, 2, "LUT RAM", None, False), (16, 144, 1, "block RAM", None, False), (16, 144, 1, "block RAM", 200, False),
    (16, 144, 2, "block RAM", None, True), (16, 144, 2, "block RAM", 200, True)])
def test_whole_word_writes_through_the_host_bus_are_bit_exact(M, K, lanes, memory, target_mhz, shared, order):
    """The host writes one bank a cycle: bank by bank, word by word (each write reading the word
    the previous cycle wrote), in pairs of addresses (the word written two cycles before), or
    bank by bank and then the even banks again word by word (a write forwards only the fields the
    earlier writes set), then starts at once; outputs (17-bit signed memories) read back through
    the host bus and sign-extended. In block RAM at target_mhz 200 the word read is registered and a write lands
    two cycles after it arrives (hw/subword.py), so both earlier writes are forwarded. At two
    lanes the weights are two block RAMs of one geometry, which share one read-modify-write
    (registered, at any clock): word by word, a write to one follows writes to the other at
    the same address, which it must not take fields from."""
    W, x, y, want, rng = narrow_gemv(4, M=M, K=K)
    design = compile_model(y, config=HardwareConfig(lanes=lanes, reduce_unroll=9, fp_pipeline=3, target_mhz=target_mhz),
                           input_ranges={W: rng})
    words = [p for p in design.packs[0] if p.word_writes]
    assert words and all((p.depth * len(p.slots) * p.width >= BRAM_MIN_BITS) == (memory == "block RAM") for p in words)
    assert [len(g) for g in design.write_groups[0]] == ([2] if shared else [])
    rtlil = design_rtlil(design)
    assert (f"{words[0].name}_wr_read" in rtlil) == (target_mhz is not None or shared)
    # shared, each member selects its fields with a copy of the group's `use` of its own
    assert all(f"\\{p.name}_wr_use\n" in rtlil for p in words)
    assert all((f"\\{p.name}_g_wr_use\n" in rtlil) == shared for p in words[:1])
    # shared, the member compare starts from a register per member (its term), not its stage flags
    assert all((f"\\{p.name}_wr_hit_same\n" in rtlil) == shared for p in words)
    got = cdt.from_words(designs.run_on_host_bus(design, order=order), cdt.INT32)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("target_mhz, sizes", [(None, [8]), (200, [8]), (220, [4, 4])])
def test_block_rams_the_host_alone_writes_share_read_modify_writes_as_the_clock_allows(target_mhz, sizes):
    """Eight packed weight block RAMs of one geometry share one read-modify-write (HOST_GROUP
    block RAMs a group), in halves at target_mhz 220, where the delay model's shared select
    (the group's registers into 8 members' `use` logic and its own, 4.81 ns) misses the 4.55 ns
    period and into 4 members' (4.50 ns) does not."""
    W, x, y, want, rng = narrow_gemv(4, M=32, K=144)
    design = compile_model(y, config=HardwareConfig(lanes=8, reduce_unroll=9, fp_pipeline=3, target_mhz=target_mhz),
                           input_ranges={W: rng})
    words = [p for p in design.packs[0] if p.word_writes]
    assert len(words) == 8 and {(len(p.slots), p.width, p.depth) for p in words} == {(9, 4, 64)}
    assert [len(g) for g in design.write_groups[0]] == sizes
    assert sorted(p.name for g in design.write_groups[0] for p in g) == sorted(p.name for p in words)


def Wn_x(arrays: dict, design, W, x) -> np.ndarray:
    """W @ x in int64 for the arrays of `arrays` (buffer id -> flat data)."""
    w = np.asarray(arrays[design.buffer_of(W)], np.int64).reshape(W.shape)
    return w @ np.asarray(arrays[design.buffer_of(x)], np.int64)


# ---------------------------------------------------------------------------------------------
# the explorer: int2 .. int16, uint2 .. uint16 and wNaM as spec dtypes

from dse.cli import main  # noqa: E402
from dse.models import formats, zoo  # noqa: E402
from helpers import model_spec, spec_dict, write_spec  # noqa: E402


@pytest.mark.parametrize("name, weights, activations", [
    ("int4", "int4", "int4"), ("uint3", "uint3", "uint3"), ("int16", "int16", "int16"), ("w4a8", "int4", "int8"),
    ("w2a16", "int2", "int16"), ("fp8e4m3", "fp8e4m3", "fp8e4m3")])
def test_formats_name_the_element_types_of_weights_and_activations(name, weights, activations):
    f = formats.parse(name)
    assert (f.weights, f.activations, f.mixed) == (weights, activations, weights != activations)


@pytest.mark.parametrize("name, message", [
    ("int4b", "unknown dtype 'int4b'; did you mean 'int4'?"),
    ("i4", "unknown dtype 'i4'; did you mean 'int4'?"),
    ("s4", "unknown dtype 's4'; did you mean 'int4'?"),
    ("INT4", "unknown dtype 'INT4'; did you mean 'int4'?"),
    ("int4_t", "unknown dtype 'int4_t'; did you mean 'int4'?"),
    ("4bit", "unknown dtype '4bit'; did you mean 'int4'?"),
    ("u4", "unknown dtype 'u4'; did you mean 'uint4'?"),
    ("w4-a8", "unknown dtype 'w4-a8'; did you mean 'w4a8'?"),
    ("W4A8", "unknown dtype 'W4A8'; did you mean 'w4a8'?"),
    ("a8w4", "unknown dtype 'a8w4'; did you mean 'w4a8'?"),
    ("w4_a8", "unknown dtype 'w4_a8'; did you mean 'w4a8'?"),
    ("int1", "unknown dtype 'int1'; int1: integers take 2 to 16 bits (int2 .. int16), or int32"),
    ("int24", "unknown dtype 'int24'; int24: integers take 2 to 16 bits (int2 .. int16), or int32"),
    ("w4a32", "unknown dtype 'w4a32'; a mixed format's weights and activations take 2 to 16 bits each"),
    ("fp8", "unknown dtype 'fp8'; did you mean 'fp8e4m3' or 'fp8e5m2'?"),
    ("posit8", "unknown dtype 'posit8'; known: int8, int16, int32, uint8, fp16, bf16, fp32, fp8e4m3, fp8e5m2; "
               "narrow integers int2 .. int16 and uint2 .. uint16; mixed wNaM (N-bit weights, M-bit "
               "activations, e.g. w4a8)"),
])
def test_an_unknown_format_is_one_line_with_the_closest_name(tmp_path, capsys, name, message):
    with pytest.raises(formats.FormatError) as e:
        formats.parse(name)
    assert str(e.value) == message
    spec = write_spec(tmp_path, spec_dict(dtypes=["int8", name]))
    assert main(["validate", str(spec)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: dtypes[1]: {message}\n" and captured.out == ""


def test_narrow_inputs_are_drawn_in_their_range_and_declared_to_the_compiler():
    built = zoo.ZOO["gemv"].build("w4a8", M=64, K=64)
    assert built.inputs == {"W": ((64, 64), "int4"), "x": ((64,), "int8")}
    arrays = zoo.make_inputs(built, 0)
    assert (arrays["W"].dtype, arrays["W"].min(), arrays["W"].max()) == (np.int8, -8, 7)
    assert arrays["x"].dtype == np.int8 and arrays["x"].min() < -8 and arrays["x"].max() > 7
    tensors = zoo.input_tensors(built, arrays)
    assert list(zoo.declared_ranges(built, tensors).values()) == [(-8, 7)]           # x: all of int8
    assert list(zoo.declared_ranges(built, tensors, zoo.InputRange(-4, 3)).values()) == [(-4, 3), (-4, 3)]
    assert list(zoo.declared_ranges(built, tensors, zoo.InputRange(-4, 3), {"W", "x"}).values()) == [(-8, 7)]
    u = zoo.make_inputs(zoo.ZOO["elementwise"].build("uint12", N=4096), 0)["a"]
    assert (u.dtype, u.min(), u.max()) == (np.uint16, 0, 4095)
    mlp = zoo.ZOO["mlp"].build("int4", IN=8, HIDDEN=4, OUT=2, SHIFT=2)
    assert {dt for _, dt in mlp.inputs.values()} == {"int4"}


@pytest.mark.parametrize("dtype", ["int4", "w4a8", "uint3", "int12"])
def test_zoo_points_in_narrow_formats_are_bit_exact_with_narrow_hardware(tmp_path, dtype):
    """gemv and mlp (requantised to the activations' range between layers) through evaluate:
    bit-exact against the numpy golden model, overflow proven and confirmed, the weights' memories
    at their width."""
    from dse.evaluate import EvalContext, evaluate
    from dse.frozen import FrozenMap
    from dse.spec import DesignPoint, load_spec
    models = [{"name": "g", "builtin": "gemv", "params": {"M": 4, "K": 24}},
              {"name": "m", "builtin": "mlp", "params": {"IN": 16, "HIDDEN": 8, "OUT": 4, "SHIFT": 3}}]
    spec = load_spec(write_spec(tmp_path, spec_dict(models=models, dtypes=[dtype])))
    ctx = EvalContext.from_spec(spec, sim_backend="pysim", synthesize=False)
    for model in ("g", "m"):
        row = evaluate(ctx, DesignPoint(model, dtype, FrozenMap({"mem_read": "sync"})), tmp_path / model)
        assert row.ok and row.correct and row.overflow_safe and row.overflow_confirmed, row.error
        assert row.cycles == row.cycles_model


def test_weights_out_of_their_narrow_range_are_one_line_naming_the_input(tmp_path, capsys):
    np.savez(tmp_path / "w.npz", W1=np.full((4, 8), 3, np.int8), W2=np.array([[1, 2, 9, -8]], np.int8))
    spec = model_spec(tmp_path, ["int4"], builtin="mlp", params={"IN": 8, "HIDDEN": 4, "OUT": 1, "SHIFT": 2},
                      weights="w.npz")
    assert main(["validate", str(spec)]) == 2
    assert capsys.readouterr().err == (f"error: models[0].weights: dtype int4: {tmp_path}/w.npz: array 'W2' holds 9 "
                                       f"at index (0, 2), outside the int4 range [-8, 7] (its values span [-8, 9]; "
                                       f"never wrapped)\n")


# ---------------------------------------------------------------------------------------------
# linear forms: a sum's range where its terms cancel

def _linear_kernel(seed: int):
    """A random straight-line kernel of sums, differences, negations and shifts by constants of
    three int8 loads with small declared bounds, every value stored: (kernel, the loads' bounds,
    the values in order, loads first)."""
    import random
    from compiler import ir
    rng = random.Random(seed)
    K = ir.OpKind
    bounds = [(rng.randint(-6, 0), rng.randint(0, 6)) for _ in range(3)]
    bufs = tuple(ir.BufferDecl(slot=i, dtype=cdt.INT8, size=1, loaded=True, stored=False, bounds=b)
                 for i, b in enumerate(bounds)) + (ir.BufferDecl(slot=3, dtype=cdt.INT8, size=64, loaded=False, stored=True),)
    values = [ir.Load(i, ir.Const(0, cdt.INT32), cdt.INT8) for i in range(3)]
    for _ in range(12):
        a, b = rng.choice(values), rng.choice(values)
        kind = rng.choice(["add", "sub", "neg", "shl", "mulc"])
        if kind == "neg":
            v = ir.Op(K.NEG, cdt.INT8, (a,))
        elif kind == "shl":
            v = ir.Op(K.SHL, cdt.INT8, (a, ir.Const(rng.randint(0, 3), cdt.INT8)))
        elif kind == "mulc":
            v = ir.Op(K.MUL, cdt.INT8, (ir.Const(rng.randint(-3, 3), cdt.INT8), a))
        else:
            v = ir.Op(K.ADD if kind == "add" else K.SUB, cdt.INT8, (a, b))
        values.append(v)
    body = tuple(ir.BufStore(3, ir.Const(i, cdt.INT32), v) for i, v in enumerate(values))
    return ir.make_kernel("lin", bufs, (), body), bounds, values


def _evaluate(v, x, memo):
    """The value as the datapath computes it: exact, wrapped to int8 at every op."""
    from compiler import ir
    K = ir.OpKind
    if id(v) in memo:
        return memo[id(v)]
    if isinstance(v, ir.Const):
        r = int(v.value)
    elif isinstance(v, ir.Load):
        r = x[v.buf]
    else:
        s = [_evaluate(o, x, memo) for o in v.srcs]
        r = {K.ADD: lambda: s[0] + s[1], K.SUB: lambda: s[0] - s[1], K.NEG: lambda: -s[0],
             K.SHL: lambda: s[0] << s[1], K.MUL: lambda: s[0] * s[1]}[v.op]()
        r = cdt.INT8.wrap(r)
    memo[id(v)] = r
    return r


@pytest.mark.parametrize("seed", range(40))
def test_a_sums_interval_is_its_linear_forms_range_and_holds_every_value(seed):
    """Every value's interval holds what it computes for every input in the bounds (sound), and
    a sum that never wraps gets exactly the hull of what it computes when its loads are
    independent: what interval arithmetic, counting a cancelling input twice, did not."""
    import itertools
    from compiler import ranges
    kernel, bounds, values = _linear_kernel(seed)
    got = ranges.analyze(kernel)
    seen: dict[int, set[int]] = {id(v): set() for v in values}
    for x in itertools.product(*(range(lo, hi + 1) for lo, hi in bounds)):
        memo: dict[int, int] = {}
        for v in values:
            seen[id(v)].add(_evaluate(v, x, memo))
    for v in values:
        r = got[id(v)]
        assert r.lo <= min(seen[id(v)]) and max(seen[id(v)]) <= r.hi, (v, r)       # sound
        if r != ranges.dtype_range(cdt.INT8):                                       # no wrap on the way:
            assert (r.lo, r.hi) == (min(seen[id(v)]), max(seen[id(v)]))            # the exact hull


def test_a_difference_of_sums_sharing_an_input_is_as_wide_as_what_it_can_hold():
    from compiler import ir, ranges
    K = ir.OpKind
    bufs = (ir.BufferDecl(0, cdt.INT8, 1, True, False, bounds=(-128, 127)),
            ir.BufferDecl(1, cdt.INT8, 1, True, False, bounds=(-128, 127)),
            ir.BufferDecl(2, cdt.INT32, 1, False, True))
    x1, x2 = (ir.Load(i, ir.Const(0, cdt.INT32), cdt.INT8) for i in (0, 1))
    w = lambda v: ir.Op(K.CAST, cdt.INT32, (v,))  # noqa: E731
    s = ir.Op(K.ADD, cdt.INT32, (w(x1), w(x2)))
    d = ir.Op(K.SUB, cdt.INT32, (s, ir.Op(K.SHL, cdt.INT32, (w(x2), ir.Const(1, cdt.INT32)))))    # x1 - x2
    k = ir.make_kernel("diff", bufs, (), (ir.BufStore(2, ir.Const(0, cdt.INT32), d),))
    r = ranges.analyze(k)[id(d)]
    assert (r.lo, r.hi) == (-255, 255) and r.shape.width == 9       # interval arithmetic: -510..510, 10 bits
