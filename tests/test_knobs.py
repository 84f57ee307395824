"""Hardware knobs that trade cycles for area: validation, bit-exactness, exact cycle model."""
from __future__ import annotations

import numpy as np
import pytest

import designs
from helpers import assert_exact
from compiler import CompileError, HardwareConfig, compile_model, simulate
from compiler.hw.layout import Dim, Layout
from compiler.overflow import analyze_overflow, worst_case_inputs


# ------------------------------------------------------------------ validation

@pytest.mark.parametrize("knob, value, message", [
    ("acc_width", 0, "HardwareConfig.acc_width: expected None (the accumulator's dtype) or an integer from 1 to 64, got 0"),
    ("acc_width", 65, "got 65"),
    ("acc_width", "32", "got '32'"),
    ("acc_width", True, "got True"),
    ("loop_fusion", "yes", "HardwareConfig.loop_fusion: expected True or False, got 'yes'"),
    ("share_buffers", 1, "HardwareConfig.share_buffers: expected True or False, got 1"),
])
def test_bad_knob_values_name_the_knob_and_the_value(knob, value, message):
    with pytest.raises(ValueError) as err:
        HardwareConfig(**{knob: value})
    assert message in str(err.value) and f"HardwareConfig.{knob}" in str(err.value)


# ------------------------------------------------------------------ acc_width

def test_acc_width_at_the_proven_need_is_exact_and_narrower_wraps():
    case = designs.gemv_int8(4, 784)
    need = analyze_overflow(compile_model(*case.outputs)).acc_bits_required
    assert need == 25
    for width, safe in ((need, True), (need - 1, False), (40, True)):
        design = compile_model(*case.outputs, config=HardwareConfig(acc_width=width))
        report = analyze_overflow(design)
        (acc,) = report.accumulators
        assert acc.width == width and acc.bits_required == need and acc.safe is safe
        worst = simulate(design, worst_case_inputs(design, {})).outputs[0]
        exact = 784 * 128 * 128
        assert (worst == (exact if safe else exact - (1 << width))).all()
        assert_exact(simulate(design).outputs, case.reference)   # random data fits 24 bits


def test_a_wrapping_accumulator_spans_its_register_for_the_next_kernel():
    case = designs.residual_mlp(N=8)
    first, second = analyze_overflow(compile_model(*case.outputs, config=HardwareConfig(acc_width=12))).accumulators
    assert first.bits_required == 19 and first.width == 12 and not first.safe
    # h = relu(acc) of a 12-bit register is 0..2047, not the 0..8*128*128 of the exact sum
    assert (second.lo, second.hi) == (8 * -128 * 2047, 8 * 127 * 2047)


@pytest.mark.slow
def test_acc_width_at_the_need_saves_flip_flops_and_luts(tmp_path):
    from compiler.synth.area import synthesize
    case = designs.gemv_int8(16, 784)
    wide = synthesize(compile_model(*case.outputs, config=HardwareConfig(acc_width=32)), "ecp5",
                      workdir=tmp_path / "w32")
    narrow = synthesize(compile_model(*case.outputs, config=HardwareConfig(acc_width=25)), "ecp5",
                        workdir=tmp_path / "w25")
    assert narrow.ffs < wide.ffs and narrow.luts < wide.luts
    # without acc_width the register is sized to the proven bounds (compiler/bounds.py): the need
    auto = synthesize(compile_model(*case.outputs), "ecp5", workdir=tmp_path / "auto")
    assert (auto.ffs, auto.luts) == (narrow.ffs, narrow.luts)


# ------------------------------------------------------------------ lanes and reduce_unroll

GRID_DESIGNS = ["gemv_int8_16x8", "mlp_int8_small", "add_relu", "matmul_int32", "conv2d_padded",
                "residual_mlp", "fan_out"]
FACTORS = [1, 2, 3, 4, 5, 8]
# a cheap cross-section of the grid for every run: identity, each knob alone, factors that
# divide no bound (3, 5), both at once, and factors at or above the bounds (8)
QUICK = [(1, 1), (2, 1), (1, 2), (3, 5), (5, 3), (4, 4), (8, 8)]


def check_point(name: str, lanes: int = 1, reduce_unroll: int = 1, **knobs):
    case = designs.SMALL[name]()
    design = compile_model(*case.outputs, config=HardwareConfig(lanes=lanes, reduce_unroll=reduce_unroll, **knobs))
    result = simulate(design)
    assert_exact(result.outputs, case.reference)
    assert result.cycles == design.cycles_formula
    return design, result


@pytest.mark.parametrize("lanes, reduce_unroll", QUICK)
@pytest.mark.parametrize("name", GRID_DESIGNS)
def test_lanes_and_reduce_unroll_bit_exact_and_cycle_model_exact(name, lanes, reduce_unroll):
    check_point(name, lanes, reduce_unroll)


# the full grid but for the QUICK points, which the test above runs with the same checks
REST = [(lanes, unroll) for lanes in FACTORS for unroll in FACTORS if (lanes, unroll) not in QUICK]


@pytest.mark.slow
@pytest.mark.parametrize("lanes, reduce_unroll", REST)
@pytest.mark.parametrize("name", GRID_DESIGNS)
def test_full_grid_bit_exact_and_cycle_model_exact(name, lanes, reduce_unroll):
    check_point(name, lanes, reduce_unroll)


@pytest.mark.parametrize("mem_read, loop_fusion", [("comb", True), ("sync", False), ("comb", False)])
@pytest.mark.parametrize("name", GRID_DESIGNS)
def test_lanes_3_unroll_5_in_every_mode(name, mem_read, loop_fusion):
    check_point(name, 3, 5, mem_read=mem_read, loop_fusion=loop_fusion)


def ceil(a, b):
    return -(-a // b)


@pytest.mark.parametrize("lanes, reduce_unroll", [(1, 1), (3, 5), (4, 2), (16, 8), (7, 3)])
def test_gemv_cycles_are_rows_per_lane_times_products_per_tree(lanes, reduce_unroll):
    M, K = 16, 8
    design, _ = check_point("gemv_int8_16x8", lanes, reduce_unroll)
    assert design.cycles_formula == ceil(M, lanes) * ceil(K, reduce_unroll) + 1
    unfused = compile_model(*designs.gemv_int8(M, K).outputs,
                            config=HardwareConfig(lanes=lanes, reduce_unroll=reduce_unroll, loop_fusion=False))
    assert unfused.cycles_formula == ceil(M, lanes) * (ceil(K, reduce_unroll) + 2) + 1


def test_gemv_128x784_cycle_model_reaches_the_mac_bound():
    case = designs.gemv_int8(128, 784)
    for lanes in (1, 2, 4, 8):
        for u in (1, 2, 4, 8):
            design = compile_model(*case.outputs, config=HardwareConfig(lanes=lanes, reduce_unroll=u))
            assert design.cycles_formula == 128 * 784 // (lanes * u) + 1


def test_elementwise_lanes_and_copies_between_layouts():
    design, _ = check_point("add_relu", 3, 1)
    assert design.cycles_formula == ceil(16, 3) + 1
    # the first kernel stores h in 3 banks (lanes), the second reads it in 5 (unroll): the copy
    # translates element by element (3 and 5 lanes share no group); with equal factors it moves
    # whole words
    mixed, _ = check_point("mlp_int8_small", 3, 5)
    (copy,) = [p for p in mixed.phases if type(p).__name__ == "Copy"]
    assert not copy.by_words and copy.length == 16
    same, _ = check_point("mlp_int8_small", 4, 4)
    (copy,) = [p for p in same.phases if type(p).__name__ == "Copy"]
    assert copy.by_words and copy.length == 16 // 4


def test_copies_move_as_many_consecutive_elements_a_cycle_as_both_layouts_bank_apart():
    # h (16 elements) stored in 4 lanes, read in 2: two consecutive elements sit in distinct
    # banks on both sides, so the copy moves two a cycle (8 cycles, not 16)
    design, _ = check_point("mlp_int8_small", 4, 2)
    (copy,) = [p for p in design.phases if type(p).__name__ == "Copy"]
    assert (copy.by_words, copy.width, copy.length) == (False, 2, 8)
    assert design.cycle_model().copies == 8
    design, _ = check_point("mlp_int8_small", 8, 4)
    (copy,) = [p for p in design.phases if type(p).__name__ == "Copy"]
    assert (copy.width, copy.length) == (4, 4)


@pytest.mark.parametrize("layout, widths", [
    (Layout(72, (Dim(1, 72, 36),)), {36: 36, 24: 12, 3: 3, 5: 1}),
    (Layout(72, (Dim(1, 72, 12),)), {3: 3, 8: 4, 5: 1}),
    # a 4 x 12 buffer, rows in 2 lanes and columns in 6: a group stays inside one row
    (Layout(48, (Dim(12, 4, 2), Dim(1, 12, 6))), {12: 6, 4: 2, 9: 3}),
    (Layout(40, (Dim(10, 4, 1), Dim(1, 10, 4))), {4: 2, 2: 2}),   # 10 columns in 4 lanes: padded words
])
def test_a_group_of_a_copy_sits_where_the_layout_puts_its_elements(layout, widths):
    """Layout.grouped(W): group c's word is each of its elements' word, and element c*W + j is
    in lane W * (the group's lane) + j; group_width is the largest W for which that holds on
    both sides of a copy (here against a one-digit layout in F lanes)."""
    from compiler.hw.layout import group_width
    for lanes, width in widths.items():
        other = Layout(layout.size, (Dim(1, layout.size, lanes),))
        assert group_width([layout, other]) == width, lanes
        for w in {width, 1}:
            grouped = layout.grouped(w)
            e = np.arange(layout.size)
            word, lane = layout.place(e)
            gword, glane = grouped.place(e // w)
            np.testing.assert_array_equal(word, gword)
            np.testing.assert_array_equal(lane, w * glane + e % w)
    assert group_width([Layout(72, (Dim(1, 72, 36),)), Layout.plain(72)]) == 1


def test_banked_layout_of_the_gemv_weights():
    design = compile_model(*designs.gemv_int8(16, 8).outputs, config=HardwareConfig(lanes=3, reduce_unroll=5))
    w_slot = 1                                     # the weights W[i*8 + k]
    bk = design.banking[0][w_slot]
    assert bk.layout.lanes == 15 and bk.layout.words == ceil(16, 3) * ceil(8, 5)
    i, k = np.meshgrid(np.arange(16), np.arange(8), indexing="ij")
    word, lane = bk.layout.place((i * 8 + k).ravel())
    np.testing.assert_array_equal(word, ((i // 3) * ceil(8, 5) + k // 5).ravel())
    np.testing.assert_array_equal(lane, ((i % 3) * 5 + k % 5).ravel())
    values = np.arange(128, dtype=np.uint64)
    np.testing.assert_array_equal(bk.layout.gather(bk.layout.scatter(values)), values)
    # mem_pack=auto: 12-word int8 banks, four to a 32-bit word fill one 36-bit block RAM
    refs = design.memories_of((0, w_slot))
    assert [(r.name, r.offset, r.width) for r in refs] == \
        [(f"mem_b1_w{lane // 4}", 8 * (lane % 4), 8) for lane in range(15)]
    unpacked = compile_model(*designs.gemv_int8(16, 8).outputs,
                             config=HardwareConfig(lanes=3, reduce_unroll=5, mem_pack=1))
    assert [r.name for r in unpacked.memories_of((0, w_slot))] == [f"mem_b1_l{lane}" for lane in range(15)]


def test_a_convolution_window_keeps_one_bank_with_a_read_port_per_tap():
    design, _ = check_point("conv2d_padded", 1, 3)
    image = design.banking[0][1]                   # x[5*(i3 + i1) + i4 + i2 - 6]: two counters per digit
    assert image.layout.is_plain and "read port per address" in image.note
    hw = design.top.kernels[0]
    assert hw.n_read_ports[1] == 3


def test_float_sums_refuse_reduce_unroll_unless_fp_sum_is_tree():
    from tinygrad import Tensor
    from compiler import CompileError
    rng = np.random.default_rng(0)
    W, x = rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    y = Tensor(W) @ Tensor(x)
    with pytest.raises(CompileError) as err:
        compile_model(y, config=HardwareConfig(reduce_unroll=2))
    msg = str(err.value)
    assert msg.startswith("reduce_unroll=2 is illegal for kernel 'k0_r_4_6': its fp32 sum over loop i1 (acc0)")
    assert "fp_sum='tree' sums it as a tree" in msg and "use reduce_unroll=1 for this reduction" in msg
    compile_model(y, config=HardwareConfig(lanes=2))          # lanes do not reorder anything
    design = compile_model(y, config=HardwareConfig(reduce_unroll=4, fp_sum="tree"))
    assert design.cycles_formula == 4 * 2 + 1                 # ceil(6 / 4) steps per row
    with pytest.raises(ValueError, match="HardwareConfig.fp_sum: expected 'sequential' or 'tree', got 'pairwise'"):
        HardwareConfig(fp_sum="pairwise")


@pytest.mark.parametrize("lanes", [2, 3, 8])
def test_float_lanes_and_loop_fusion_change_no_bit(lanes):
    """Lanes and fusion never reorder float operations: the outputs equal the seed design's
    bit for bit (fp32 GEMV through the float units, and an elementwise kernel)."""
    from tinygrad import Tensor
    rng = np.random.default_rng(0)
    W, x = rng.standard_normal((7, 9)).astype(np.float32), rng.standard_normal(9).astype(np.float32)
    a = rng.standard_normal(10).astype(np.float32)
    for make, cycles in ((lambda: (Tensor(W) @ Tensor(x),), ceil(7, lanes) * 9 + 1),
                         (lambda: ((Tensor(a) * 3).relu(),), ceil(10, lanes) + 1)):
        seed = simulate(compile_model(*make(), config=HardwareConfig(loop_fusion=False)))
        design = compile_model(*make(), config=HardwareConfig(lanes=lanes))
        result = simulate(design)
        assert result.cycles == design.cycles_formula == cycles
        for got, want in zip(result.outputs, seed.outputs):
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def _kernel(body, buffers, accs=()):
    from compiler import ir
    return ir.make_kernel("k_test", buffers, accs, body)


def test_a_written_buffer_without_a_banked_layout_makes_lanes_illegal():
    from compiler import CompileError, ir
    from compiler.dtypes import INT32
    from compiler.passes.parallelize import parallelize
    i = ir.Counter(0)
    flipped = ir.Op(ir.OpKind.SUB, INT32, (ir.Const(7, INT32), i))      # y[7 - i] = x[i]
    k = _kernel((ir.Loop(0, ir.Axis.OUTPUT, 8, (ir.BufStore(0, flipped, ir.Load(1, i, INT32)),)),),
                [ir.BufferDecl(0, INT32, 8, False, True), ir.BufferDecl(1, INT32, 8, True, False)])
    with pytest.raises(CompileError, match=r"lanes=2, reduce_unroll=1 is illegal for kernel 'k_test': buffer 0 "
                                           r"\(int32\[8\]\) is written by several lanes per cycle, but its accesses "
                                           r"do not fit a banked layout: loop i0 steps an index by -1"):
        parallelize(k, lanes=2)


def test_lanes_refuse_an_output_loop_that_carries_an_accumulator():
    from compiler import CompileError, ir
    from compiler.dtypes import INT32
    from compiler.passes.parallelize import parallelize
    i = ir.Counter(0)
    acc = ir.AccLoad(0, INT32)
    running = ir.Op(ir.OpKind.ADD, INT32, (acc, ir.Load(1, i, INT32)))   # a prefix sum on an output axis
    k = _kernel((ir.AccStore(0, ir.Const(0, INT32)),
                 ir.Loop(0, ir.Axis.OUTPUT, 8, (ir.AccStore(0, running), ir.BufStore(0, i, acc)))),
                [ir.BufferDecl(0, INT32, 8, False, True), ir.BufferDecl(1, INT32, 8, True, False)],
                [ir.AccDecl(0, INT32)])
    with pytest.raises(CompileError, match="lanes=4 is illegal for kernel 'k_test': the iterations of output loop "
                                           "i0 are not independent: acc0 is also used outside it"):
        parallelize(k, lanes=4)


@pytest.mark.parametrize("knob, value", [("lanes", 0), ("reduce_unroll", -1), ("lanes", 2.0), ("reduce_unroll", True),
                                         ("lanes", 5000)])
def test_parallel_knobs_are_validated(knob, value):
    with pytest.raises(ValueError, match=f"HardwareConfig.{knob}: expected an integer from 1 to 4096, got {value!r}"):
        HardwareConfig(**{knob: value})
    with pytest.raises(ValueError, match="lanes=64 with reduce_unroll=128 is an illegal combination"):
        HardwareConfig(lanes=64, reduce_unroll=128)


def test_host_bus_loads_inputs_and_reads_outputs_through_the_layouts():
    """Drive the top's host bus like a CPU would: every input bank word by word, start, wait
    for done, then every output bank: the same result as the poked simulation."""
    case = designs.gemv_int8(16, 8)
    design = compile_model(*case.outputs, config=HardwareConfig(lanes=3, reduce_unroll=5))
    y = designs.run_on_host_bus(design).astype(np.uint32).view(np.int32)
    np.testing.assert_array_equal(y, case.reference[0])


# ------------------------------------------------------------------ share_buffers

def _memories(design) -> int:
    top = design.top
    top._MustUse__silence = True                 # built only to count its memories
    for k in top.kernels:
        k._MustUse__silence = True
    return sum(len(k.memories) for k in top.kernels)


@pytest.mark.parametrize("mem_read", ["sync", "comb"])
@pytest.mark.parametrize("lanes, reduce_unroll", [(1, 1), (4, 4), (3, 5)])
@pytest.mark.parametrize("name", ["fan_out", "residual_mlp", "mlp_int8_small", "bitwise_uint8", "mixed_int16"])
def test_shared_buffers_are_bit_exact_and_save_the_copies(name, lanes, reduce_unroll, mem_read):
    case = designs.SMALL[name]()
    knobs = dict(lanes=lanes, reduce_unroll=reduce_unroll, mem_read=mem_read)
    copied = compile_model(*case.outputs, config=HardwareConfig(**knobs))
    shared, result = check_point(name, share_buffers=True, **knobs)
    saved_copies = copied.cycle_model().copies - shared.cycle_model().copies
    assert shared.cycles_formula == copied.cycles_formula - saved_copies
    assert _memories(shared) == _memories(copied) - sum(len(shared.banking_of(*s.reader).banks) for s in shared.shares)


def test_fan_out_consumers_read_the_producer_memory():
    case = designs.fan_out()
    copied = compile_model(*case.outputs)
    shared = compile_model(*case.outputs, config=HardwareConfig(share_buffers=True))
    assert len(shared.shares) == 2 and {s.owner for s in shared.shares} == {(0, 0)}
    assert [type(p).__name__ for p in shared.phases] == ["Run", "Run", "Run"]
    assert shared.cycles_formula == copied.cycles_formula - 8                # the 8-word copy is gone


def test_sharing_falls_back_to_a_copy_when_the_layouts_differ():
    # h is written in 3 banks (lanes) and read in 5 (reduce_unroll): a translating copy stays
    design = compile_model(*designs.mlp_int8(IN=32, HIDDEN=16, OUT=4, SHIFT=6).outputs,
                           config=HardwareConfig(lanes=3, reduce_unroll=5, share_buffers=True))
    assert not design.shares and any(type(p).__name__ == "Copy" for p in design.phases)


# ------------------------------------------------------------------ per-layer knobs

def test_per_layer_knobs_round_trip_and_refuse_what_cannot_be_set_per_layer():
    c = HardwareConfig.from_dict({"lanes": 2, "lanes@1": 4, "reduce_unroll@0": 8, "lanes@k2_r_4_8": 3})
    assert c.layers == ((0, (("reduce_unroll", 8),)), (1, (("lanes", 4),)), ("k2_r_4_8", (("lanes", 3),)))
    assert (c.for_layer(0).lanes, c.for_layer(0).reduce_unroll, c.for_layer(1).lanes, c.for_layer(5).lanes) == (2, 8, 4, 2)
    assert HardwareConfig.from_dict(c.as_dict()) == c and c.as_dict()["lanes@1"] == 4
    with pytest.raises(ValueError, match=r"^fp_pipeline@1: 'fp_pipeline' cannot be set per layer; per-layer knobs: "
                                         r"lanes, reduce_unroll, weights$"):
        HardwareConfig.from_dict({"fp_pipeline@1": 2})
    with pytest.raises(ValueError, match=r"^layer 1: HardwareConfig.lanes: expected an integer from 1 to 4096, got 0$"):
        HardwareConfig.from_dict({"lanes@1": 0})
    with pytest.raises(ValueError, match=r"weights@<layer>\)$"):
        HardwareConfig.from_dict({"lanez": 1})


def test_each_layer_gets_its_own_parallelism_bit_exact_with_cycles_equal_to_the_model():
    """A 24-12-5 MLP: the first layer's lanes and reduce_unroll and the second's lanes set apart;
    each layer's cycles are its own work over its own parallelism, outputs bit-exact."""
    plain = compile_model(*designs.mlp_int8(IN=24, HIDDEN=12, OUT=5).outputs)
    case = designs.mlp_int8(IN=24, HIDDEN=12, OUT=5)
    config = HardwareConfig.from_dict({"lanes@k0_r_12_24": 4, "reduce_unroll@0": 2, "lanes@1": 5})
    design = compile_model(*case.outputs, config=config)
    assert design.config.layers == ((0, (("lanes", 4), ("reduce_unroll", 2))), (1, (("lanes", 5),)))  # names resolved
    result = simulate(design)
    assert_exact(result.outputs, case.reference)
    model = design.cycle_model()
    assert result.cycles == model.total
    before = dict(plain.cycle_model().kernels)
    after = dict(model.kernels)
    assert after["k0_r_12_24"] == 12 * 24 // (4 * 2) + 1 and before["k0_r_12_24"] == 12 * 24 + 1
    assert after["k1_r_5_12"] == 12 + 1 and before["k1_r_5_12"] == 5 * 12 + 1


@pytest.mark.parametrize("knobs, message", [
    ({"lanes@fc9": 2}, "lanes@fc9: the model has no layer 'fc9'; its 2 layers: 0 (k0_r_12_24), 1 (k1_r_5_12)"),
    ({"lanes@3": 2}, "lanes@3: the model has no layer 3; its 2 layers: 0 (k0_r_12_24), 1 (k1_r_5_12)"),
    ({"lanes@0": 2, "lanes@k0_r_12_24": 3},
     "lanes@k0_r_12_24: layer 0 (k0_r_12_24) is given lanes twice (by index and by name)"),
])
def test_a_layer_the_model_does_not_have_is_refused_listing_its_layers(knobs, message):
    with pytest.raises(CompileError) as info:
        compile_model(*designs.mlp_int8(IN=24, HIDDEN=12, OUT=5).outputs, config=HardwareConfig.from_dict(knobs))
    assert str(info.value) == message


def test_per_layer_float_tree_sums_of_different_widths_do_not_apply():
    c = HardwareConfig.from_dict({"fp_sum": "tree", "reduce_unroll@0": 4})
    assert "golden model sums every layer in trees of one width" in c.not_applicable(float_sums=True)
    assert c.not_applicable(float_sums=False) == ""
    assert "fp_sum=sequential" in HardwareConfig.from_dict({"reduce_unroll@1": 2}).not_applicable(float_sums=True)
