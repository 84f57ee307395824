"""target_mhz and the delay model (compiler/timing_model.py): registers placed for a clock on a
part, every design still bit-exact with its cycles equal to the cycle model, and the model's Fmax
estimate (Design.timing_estimate)."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest
from tinygrad import Tensor, dtypes

import designs
from compiler import HardwareConfig, compile_model, ir, simulate, simulate_many
from compiler.devices import find_device
from compiler.timing_model import (DELAYS, DSP_SITE, FAR_DSP_SITE, LUT_SITE, PLACED_PERIOD_NS, delays, logic_ns,
                                   placed_period_ns, product_ns, product_registers, product_sites, product_tail_ns,
                                   word_read_registered, word_write_ns, write_hit_ns)
from dse.models import zoo
from helpers import assert_exact, int8_mlp, run_zoo, same_bits

TARGETS = [100, 150, 250]


# ------------------------------------------------------------------ the knobs

@pytest.mark.parametrize("knobs, message", [
    (dict(target_mhz=150), r"^HardwareConfig: target_mhz=150 places registers on top of fp_pipeline 3's; set "
                           r"fp_pipeline to 3 or 4 \(got 0\)$"),
    (dict(fp_pipeline=3, target_mhz=0), r"^HardwareConfig.target_mhz: expected a clock in MHz above 0 and at most "
                                        r"1000, or None \(off\), got 0$"),
    (dict(fp_pipeline=3, target_mhz="150"), r"got '150'$"),
    (dict(fp_pipeline=3, target_mhz=True), r"got True$"),
    (dict(fp_pipeline=3, target_mhz=150, adder_levels=2), r"^HardwareConfig: target_mhz=150 decides how many adder "
                                                          r"levels a stage holds; drop adder_levels \(got 2\)$"),
    (dict(device="LFE5U-99F"), r"^HardwareConfig.device: unknown part 'LFE5U-99F'; known: LFE5U-25F, LFE5U-45F, "
                               r"LFE5U-85F, iCE40HX1K, iCE40HX8K, iCE40UP5K \(an ECP5 part may end in its speed "
                               r"grade, 6 by default: LFE5U-85F-8\)$"),
    (dict(device="LFE5U-85F-9"), r"^HardwareConfig.device: unknown speed grade -9 for LFE5U-85F in 'LFE5U-85F-9'; "
                                 r"known: -6, -7, -8$"),
    (dict(device=8), r"^HardwareConfig.device: expected a part name such as 'LFE5U-85F-8', got 8$")])
def test_target_mhz_and_device_are_checked(knobs, message):
    with pytest.raises(ValueError, match=message):
        HardwareConfig(**knobs)


def test_target_mhz_and_device_are_knobs_off_by_default():
    assert {"target_mhz", "device"} <= set(HardwareConfig.knob_names())
    config = HardwareConfig()
    assert config.target_mhz is None and config.device is None
    assert config.timing_part().name == "LFE5U-85F" and config.timing_part().speed == 6
    assert HardwareConfig(device="LFE5U-85F-8").timing_part().speed == 8
    assert HardwareConfig.from_dict({"fp_pipeline": 3, "target_mhz": 150.5}).as_dict()["target_mhz"] == 150.5


# ------------------------------------------------------------------ the delays

def test_the_faster_grades_are_faster_and_a_carry_chain_grows_with_its_width():
    d6, d8 = (delays(find_device("ecp5", name)) for name in ("LFE5U-85F", "LFE5U-85F-8"))
    assert d6 is DELAYS[("ecp5", 6)] and d8 is DELAYS[("ecp5", 8)]
    assert d8.lut < d6.lut and d8.route < d6.route and d8.carry_ns(16) < d6.carry_ns(16)
    assert d6.carry_ns(8) < d6.carry_ns(16) < d6.carry_ns(32)
    add = ir.Op(ir.OpKind.ADD, zoo.DTYPES["int32"], (ir.Const(1, zoo.DTYPES["int32"]), ir.Const(2, zoo.DTYPES["int32"])))
    cast = ir.Op(ir.OpKind.CAST, zoo.DTYPES["int8"], (add,))
    assert logic_ns(add, 16, d6) == d6.carry_ns(16) and logic_ns(cast, 8, d6) == 0.0


def test_a_relu_is_one_lut_a_sign_test_a_wire_a_bound_a_lut_tree():
    """ir.bit_test's depths as timing_model.logic_ns counts them: max(x, 0) and max(x, -1) select
    by x's sign (one LUT, the select), x < 0 is the sign bit itself (no logic), x < 8 a LUT tree
    on x's bits from 3 up, and max(x, 5) a compare on a carry chain and its select."""
    from compiler.dtypes import BOOL
    d6 = DELAYS[("ecp5", 6)]
    i32 = zoo.DTYPES["int32"]
    x = ir.Op(ir.OpKind.ADD, i32, (ir.Const(1, i32), ir.Const(2, i32)))
    op = lambda kind, *srcs: ir.Op(kind, BOOL if kind is ir.OpKind.CMPLT else i32, srcs)
    for c in (0, -1):
        relu = op(ir.OpKind.MAX, x, ir.Const(c, i32))
        assert ir.bit_test(relu) == (x, 0) and logic_ns(relu, 18, d6) == d6.lut
    assert logic_ns(op(ir.OpKind.CMPLT, x, ir.Const(0, i32)), 18, d6) == 0.0
    assert logic_ns(op(ir.OpKind.CMPLT, x, ir.Const(8, i32)), 18, d6) == 2 * d6.lut     # 15 bits: 2 levels
    assert logic_ns(op(ir.OpKind.MAX, x, ir.Const(5, i32)), 18, d6) == d6.carry_ns(18) + d6.lut


def test_a_lut_product_takes_more_registers_for_a_faster_clock():
    d = DELAYS[("ecp5", 6)]
    # an 8x8 chain product's tree has 3 levels: one register after 2 of them, two add Y's (its
    # slowest stage, the first two levels, stays), three cut every level
    slow = [product_ns(8, 8, r, LUT_SITE, d)[0] for r in (1, 2, 3)]
    assert slow[0] >= slow[1] > slow[2]
    assert product_ns(3, 3, 1, LUT_SITE, d)[0] > product_ns(3, 3, 2, LUT_SITE, d)[0]
    regs = [product_registers([(8, 8)], 1000 / mhz, (LUT_SITE,), d) for mhz in (60, 120, 150, 200, 300)]
    assert regs == sorted(regs) and regs[0] == 1 and regs[-1] == 3
    # a DSP product's stages are shorter than a LUT product's
    assert product_registers([(8, 8)], 1000 / 150, (DSP_SITE,), d) <= \
        product_registers([(8, 8)], 1000 / 150, (LUT_SITE,), d)


def test_products_past_the_dsp_blocks_are_timed_at_both_sites():
    """mul: auto past the part's DSP blocks builds some products in each: a kernel's registers and
    its products' tails are those of the slower site, the DSP blocks' outputs routed across the
    die to the adder tree the LUT products share (product_sites)."""
    d = DELAYS[("ecp5", 6)]
    assert product_sites("auto", 10, 156) == (DSP_SITE,)
    assert product_sites("auto", 10, 156, kernel=True) == (LUT_SITE,)
    assert product_sites("auto", 400, 156) == (LUT_SITE, FAR_DSP_SITE)
    assert product_sites("auto", 40, 28) == (LUT_SITE, FAR_DSP_SITE)           # the LFE5U-25F's blocks
    assert product_sites("auto", 400, None) == (DSP_SITE,)                     # no device list: auto is dsp
    assert product_sites("lut", 400, 156) == (LUT_SITE,) and product_sites("dsp", 400, 156) == (DSP_SITE,)
    far = product_tail_ns(4, 6, 1, FAR_DSP_SITE, d)
    assert far - product_tail_ns(4, 6, 1, DSP_SITE, d) == pytest.approx(d.dsp_route_far - d.dsp_route)
    assert far > product_tail_ns(4, 6, 1, LUT_SITE, d)
    # a DSP product's output landed in the fabric from two registers: the far route is its stage
    assert product_ns(8, 8, 2, FAR_DSP_SITE, d)[0] == pytest.approx(d.dsp_clk_q + d.dsp_route_far + d.setup)
    assert product_registers([(8, 8)], 1000 / 120, (LUT_SITE, FAR_DSP_SITE), d) >= \
        product_registers([(8, 8)], 1000 / 120, (LUT_SITE,), d)


def test_mul_auto_past_the_dsp_blocks_says_what_the_lut_products_registers_cost():
    """64 int8 products on the LFE5U-25F's 28 DSP blocks at 120 MHz: the DSP products' routes to
    the adder tree the LUT products share need 3 registers, the LUT products alone 1, and every
    product takes 3. The design says so (Design.mul_note, a row's notes) with the flip-flops the
    36 LUT products' two extra registers hold (lut_multiplier.register_bits: 80 - 24 each);
    `mul: lut` builds every product with 1. Both bit-exact. On the 85F the products fit the
    blocks, and at 6 lanes (48 products: 20 in LUTs, fewer than the DSP ones) nothing is said."""
    case = designs.SMALL["gemv_int8_16x8"]
    knobs = dict(fp_pipeline=3, lanes=8, reduce_unroll=8, target_mhz=120, device="LFE5U-25F")
    auto, lut = _check(case(), **knobs), _check(case(), **knobs, mul="lut")
    assert (auto.schedules[0].product_regs, auto.schedules[0].lut_product_regs) == (3, 1)
    assert "36 of 64 products in LUTs past the 28 DSP blocks" in auto.mul_note
    assert "3 registers where LUT products alone need 1: about 2,000 flip-flops" in auto.mul_note
    assert (lut.schedules[0].product_regs, lut.schedules[0].lut_product_regs, lut.mul_note) == (1, None, "")
    fits = compile_model(*case().outputs, config=HardwareConfig(**{**knobs, "device": "LFE5U-85F"}))
    assert fits.schedules[0].lut_product_regs is None and fits.mul_note == ""
    few = compile_model(*case().outputs, config=HardwareConfig(**{**knobs, "lanes": 6}))
    assert few.schedules[0].lut_product_regs == 1 and few.mul_note == ""


# ------------------------------------------------------------------ bit-exact at a target clock

def _check(case, **knobs):
    design = compile_model(*case.outputs, config=HardwareConfig(**knobs))
    result = simulate(design)
    assert_exact(result.outputs, case.reference)
    assert result.cycles == design.cycles_formula
    return design


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["gemv_int8_16x8", "mlp_int8_small", "conv2d_padded", "residual_mlp"])
def test_integer_designs_at_a_target_clock_are_bit_exact_and_cycle_exact(name, target):
    _check(designs.SMALL[name](), fp_pipeline=3, lanes=3, reduce_unroll=4, target_mhz=target)


@pytest.mark.parametrize("knobs", [dict(), dict(lanes=3, reduce_unroll=4)])
def test_a_scaled_counter_steps_in_every_step_of_its_loop(knobs):
    """A GEMV with a bias: the loop over outputs has two steps (the REDUCE loop, then the bias
    and the store), and the weights' address i0 * 12 is a scaled counter (kernel._Scaled). Its
    register must step in the bias step, where its counter steps, though the address is built
    inside the REDUCE step's case: every row but the first read row 0's weights when it did not."""
    from amaranth.back import rtlil
    design = _check(designs.gemv_bias_int8(), fp_pipeline=3, target_mhz=150, **knobs)
    assert "i0_x" in rtlil.convert(design.top, name="top")


@pytest.mark.parametrize("name", ["mlp_int8_small", "residual_mlp", "fan_out"])
def test_a_copy_between_kernels_reads_from_registered_addresses(name):
    """With target_mhz a copy's read address and its `reading` flag are registers computed a cycle
    ahead (TopHW._copy_read_ahead), not `done` through the phase logic; same cycles, same words."""
    from amaranth.back import rtlil
    design = _check(designs.SMALL[name](), fp_pipeline=3, target_mhz=150)
    text = rtlil.convert(design.top, name="top")
    assert "copy" in text and "_raddr" in text and "_reading" in text


@pytest.mark.parametrize("name", ["mlp_int8_small", "residual_mlp", "fan_out"])
@pytest.mark.parametrize("lanes", [2, 3, 4])
def test_a_copy_from_banks_over_lanes_reads_an_odometer_a_cycle_ahead(name, lanes):
    """A copy whose source is in groups over lanes reads at the registered word of an odometer
    one cycle ahead of the copy's own (TopHW._copy_read_ahead), not the copy's next word through
    the phase logic; bit-exact, the same cycles (_check)."""
    from amaranth.back import rtlil
    design = _check(designs.SMALL[name](), fp_pipeline=3, target_mhz=150, lanes=lanes)
    text = rtlil.convert(design.top, name="top")
    assert "_lead_q0" in text and "_raddr" in text


@pytest.mark.parametrize("sizes, length", [([4, 2, 3], 2), ([4, 3, 2], 3), ([6, 4, 4, 2], 4)])
def test_short_copies_from_banks_over_lanes_read_the_words_they_did(sizes, length):
    """Copies of 2 to 4 elements from two banks read through the look-ahead odometer the words
    they read before: bit-exact, the same cycles. (Its restart, a register as its advance is,
    mirrors the copy's own odometer's: a copy spans its whole layout, so both also wrap there.)"""
    from amaranth.back import rtlil
    x, y, ref = int8_mlp(sizes)
    design = compile_model(y, config=HardwareConfig(fp_pipeline=3, target_mhz=150, lanes=2))
    assert {p.length for p in design.phases if hasattr(p, "length")} == {length}
    assert "_lead_q0" in rtlil.convert(design.top, name="top")
    rng = np.random.default_rng(length)
    for _ in range(2):
        s = rng.integers(-128, 128, sizes[0]).astype(np.int8)
        r = simulate(design, {x: s})
        np.testing.assert_array_equal(np.asarray(r.outputs[0]).reshape(-1), ref(s))
        assert r.cycles == design.cycle_model().total


@pytest.mark.parametrize("lanes", [2, 8, 16])
def test_a_copy_from_several_banks_takes_a_registered_enable_and_word_per_bank(lanes):
    """A copy's read enable and word are duplicate registers, one per COPY_BANKS (1) source
    banks (TopHW._copy_read_ahead): bit-exact, the same cycles."""
    from amaranth.back import rtlil
    x, y, ref = int8_mlp([12, 16, 5])
    design = compile_model(y, config=HardwareConfig(fp_pipeline=3, target_mhz=150, lanes=lanes))
    text = rtlil.convert(design.top, name="top")
    assert "_reading_g1" in text and "_raddr_g1" in text
    rng = np.random.default_rng(lanes)
    for _ in range(2):
        s = rng.integers(-128, 128, 12).astype(np.int8)
        r = simulate(design, {x: s})
        np.testing.assert_array_equal(np.asarray(r.outputs[0]).reshape(-1), ref(s))
        assert r.cycles == design.cycle_model().total


@pytest.mark.parametrize("knobs", [dict(lanes=1, reduce_unroll=1), dict(lanes=3, reduce_unroll=4),
                                   dict(lanes=2, reduce_unroll=2, mem_read="comb")])
def test_a_counter_times_a_constant_in_an_address_is_a_register_of_its_own(knobs):
    """With target_mhz the row offset `i0 * 20` of a 12x20 GEMV's weight address is a register
    stepping with its counter (kernel._Scaled), not a product of the counter: same words,
    same cycles; without the knob the design is as before."""
    from amaranth.back import rtlil
    case = designs.gemv_int8(M=12, K=20)
    design = _check(case, fp_pipeline=3, target_mhz=150, **knobs)
    text = rtlil.convert(design.top, name="top")
    assert "i0_x" in text and "i0_inc" in text
    plain = compile_model(*case.outputs, config=HardwareConfig(fp_pipeline=3, **knobs))
    assert "i0_x" not in rtlil.convert(plain.top, name="top")


@pytest.mark.parametrize("knobs", [dict(lanes=1, reduce_unroll=1), dict(lanes=4, reduce_unroll=4),
                                   dict(lanes=2, reduce_unroll=3, mem_read="comb")])
def test_an_index_of_several_counters_is_one_register_stepping_with_them(knobs):
    """With target_mhz a padded convolution's input index (four counters' multiples and a
    constant; three adders and the range check: pipeline.SUM_REGISTER_CHAINS) is a register of
    its own, which steps by a constant for each thing the controller does to the counters
    (kernel._Scaled._sum): no adder between the counters and the read address. Same words, same
    cycles; off without the knob."""
    from amaranth.back import rtlil
    case = designs.SMALL["conv2d_padded"]()
    design = _check(case, fp_pipeline=3, target_mhz=150, **knobs)
    assert re.search(r"wire [^\n]*\\s(_i\d+xm?\d+){4,}\n", rtlil.convert(design.top, name="top"))
    plain = compile_model(*case.outputs, config=HardwareConfig(fp_pipeline=3, **knobs))
    assert not re.search(r"\\s_i\d+x", rtlil.convert(plain.top, name="top"))


@pytest.mark.parametrize("knobs", [dict(lanes=1, reduce_unroll=1), dict(lanes=3, reduce_unroll=4)])
def test_a_padded_convolutions_load_gate_is_made_from_registered_compares(knobs):
    """With target_mhz a condition of counters' compares (a padded convolution's load gate, the
    ANDed range tests of y + ky - p and x + kx - p) is made a stage after its compares, from a
    register of each (Datapath.cut_condition), where the counters' adders, the compares and the
    AND tree ran in one stage into the gate's copies (6.4-7.5 ns at 150 MHz), where the delay
    model times it past the period (pipeline.cut_conditions): at 150 MHz, not at 100. Same
    words, same cycles; off without the knob."""
    from amaranth.back import rtlil
    case = designs.SMALL["conv2d_padded"]()
    design = _check(case, fp_pipeline=3, target_mhz=150, **knobs)
    assert design.schedules[0].cuts
    assert re.search(r"v\d+_cmplt_t1_c\d+", rtlil.convert(design.top, name="top"))
    for plain in (compile_model(*case.outputs, config=HardwareConfig(fp_pipeline=3, **knobs)),
                  _check(case, fp_pipeline=3, target_mhz=100, **knobs)):
        assert not plain.schedules[0].cuts
        assert not re.search(r"v\d+_cmplt_t1_c\d+", rtlil.convert(plain.top, name="top"))


def test_a_store_in_its_computing_stage_is_timed_to_its_memorys_write_port():
    """relu(a + b) over 300 elements at two lanes: each lane's 150-word output is LUT RAM of 10
    rows, and the store took read data -> add -> ReLU straight into its write port (7.3-7.4 ns
    at 150 MHz, the model's 6.2 ending at a register beside the ReLU). With the route to the
    memory's rows timed (timing_model.store_routes) the ReLU is registered at 150 MHz and the
    stores commit a stage later, a cycle a run; at 100 MHz nothing moves. The estimate times
    the route where the store takes the value unregistered. Only for values of read data alone:
    after an accumulator (an MLP's clip) the model already times the path long."""
    from compiler.hw.pipeline import kernel_paths
    from compiler.timing_model import delays, store_routes
    case = designs.add_relu(N=300)
    slow = _check(case, fp_pipeline=3, lanes=2, target_mhz=100)
    fast = _check(case, fp_pipeline=3, lanes=2, target_mhz=150)
    assert not slow.schedules[0].latency and fast.schedules[0].commit == slow.schedules[0].commit + 1
    assert sorted(fast.schedules[0].latency.values()) == [1, 1]         # a ReLU a lane
    assert fast.cycles_formula == slow.cycles_formula + 1
    d = delays(slow.config.timing_part())
    ns, what = kernel_paths(slow.kernels[0], slow.schedules[0], slow.config, d)[:2]
    assert re.fullmatch(r"load -> add \d+b -> max \d+b -> a memory's write data", what)
    assert ns > 1000 / 150 - d.setup
    assert kernel_paths(fast.kernels[0], fast.schedules[0], fast.config, d)[0] < 1000 / 150
    bits = lambda v: v.dtype.bits                      # noqa: E731
    assert store_routes(fast.kernels[0], bits, d)
    mlp = compile_model(*designs.SMALL["mlp_int8_small"]().outputs,
                        config=HardwareConfig(fp_pipeline=3, lanes=2, target_mhz=150))
    assert not any(store_routes(k, bits, d) for k in mlp.kernels)


def test_an_index_the_model_times_past_the_period_is_a_sum_register():
    """An unpadded convolution's input index (five counters' multiples, three adders, no range check)
    is below sum_register's rule, but the delay model times its tree past a 150 or 200 MHz
    period: there it is a sum register (pipeline.sum_registers; a conv 3 -> 6 on 10 x 10 at 150
    closed at 128.6 MHz as a tree, its path that index, and at 183.5 so), at 100 MHz a tree.
    Same words, same cycles both ways."""
    from amaranth.back import rtlil
    case = designs.conv2d_padded(C_IN=2, C_OUT=2, H=6, W=6, PAD=0)
    slow = _check(case, fp_pipeline=3, lanes=2, reduce_unroll=4, target_mhz=100)
    fast = _check(case, fp_pipeline=3, lanes=2, reduce_unroll=4, target_mhz=200)
    assert not slow.schedules[0].sums and fast.schedules[0].sums
    assert not re.search(r"\\s(_i\d+xm?\d+){5}", rtlil.convert(slow.top, name="top"))
    assert re.search(r"\\s(_i\d+xm?\d+){5}", rtlil.convert(fast.top, name="top"))


def test_the_affine_form_of_an_index():
    """pipeline.affine_form reads sums, differences, negations and products or shifts by
    constants of counters; a product of two counters, or one counter's multiple, is not one."""
    from compiler.hw.pipeline import affine_form
    i, j, k = (ir.Counter(n) for n in range(3))
    c = lambda v: ir.Const(v, ir.INT32)                      # noqa: E731
    o = lambda kind, *srcs: ir.Op(kind, ir.INT32, srcs)      # noqa: E731
    K = ir.OpKind
    index = o(K.SUB, o(K.ADD, o(K.MUL, i, c(12)), o(K.SHL, j, c(2))), o(K.ADD, k, c(13)))
    assert affine_form(index) == (((0, 12), (1, 4), (2, -1)), -13)
    assert affine_form(o(K.ADD, o(K.NEG, i), o(K.MUL, c(3), i))) is None      # 2i: one counter
    assert affine_form(o(K.ADD, o(K.MUL, i, j), k)) is None                   # i * j
    assert affine_form(o(K.ADD, i, j)) == (((0, 1), (1, 1)), 0)


def test_an_index_is_a_sum_register_from_five_terms_and_four_carry_chains():
    """pipeline.sum_register, the one rule the kernel builds by and the delay model times by:
    five terms or more whose adder tree, with the range check where the index can leave the
    memory, is four carry chains or more."""
    from compiler.hw.pipeline import sum_register
    ctrs = [ir.Counter(n) for n in range(9)]
    o = lambda kind, *srcs: ir.Op(kind, ir.INT32, srcs)      # noqa: E731

    def index(terms: int, const: int = 0):
        v = o(ir.OpKind.MUL, ctrs[0], ir.Const(3, ir.INT32))
        for c in ctrs[1:terms - bool(const)]:
            v = o(ir.OpKind.ADD, v, c)
        return o(ir.OpKind.ADD, v, ir.Const(const, ir.INT32)) if const else v
    assert sum_register(index(5), inside=True) is None            # three adders, no check
    assert sum_register(index(5), inside=False) is not None       # three adders and the check
    assert sum_register(index(5, const=-13), inside=False) == (((0, 3), (1, 1), (2, 1), (3, 1)), -13)
    assert sum_register(index(4), inside=False) is None           # two adders and the check
    assert sum_register(index(9), inside=True) is not None        # four adders


def test_the_one_store_into_a_memory_writes_its_sum_without_a_gate(tmp_path):
    """With target_mhz a memory's only store drives the write data whatever the step (only
    the enable takes the store's flag): a GEMV's output memory (LUT RAM) takes each bit
    straight from a register of the accumulator's sum (the store of a value on the
    accumulator's loop trails it a stage: pipeline._schedule), where it was ANDed with the flag
    in a LUT4."""
    from compiler.synth.area import synthesize
    design = _check(designs.gemv_int8(16, 64), fp_pipeline=3, lanes=8, reduce_unroll=8, target_mhz=200)
    area = synthesize(design, "ecp5", tmp_path, netlist=True)
    module = next(m for m in json.loads(Path(area.netlist_path).read_text())["modules"].values()
                  if m.get("attributes", {}).get("top"))
    driver = {b: c["type"] for c in module["cells"].values() for pin, bits in c["connections"].items()
              if c["port_directions"][pin] == "output" for b in bits}
    data_in = [driver[c["connections"][pin][0]] for name, c in module["cells"].items()
               if c["type"] == "TRELLIS_DPR16X4" and "mem_b0" in name for pin in c["connections"] if pin.startswith("DI")]
    assert len(data_in) == 48 and set(data_in) == {"TRELLIS_FF"}


def test_a_product_wider_than_a_dsp_block_is_summed_from_registered_pieces():
    """int32 x int32 products (matmul_int32): with target_mhz each operand wider than 18 bits is
    cut into pieces a MULT18X18D takes, each piece's product registered (Product.split)."""
    from amaranth.back import rtlil
    design = _check(designs.SMALL["matmul_int32"](), fp_pipeline=3, lanes=2, reduce_unroll=2, target_mhz=150)
    assert design.schedules[0].product_regs >= 2
    text = rtlil.convert(design.top, name="top")
    assert "piece1" in text and "piece0" in text


def test_an_int8_gemv_with_lut_products_at_target_clocks():
    """mul: lut, so a product takes the registers its LUT multiplier needs at the clock
    (Schedule.product_regs), more for a faster one."""
    regs = []
    for target in TARGETS:
        design = _check(designs.SMALL["gemv_int8_16x8"](), fp_pipeline=3, lanes=4, reduce_unroll=4, mul="lut",
                        target_mhz=target)
        regs.append(max(s.product_regs for s in design.schedules))
    assert regs == sorted(regs) and regs[-1] == 3


def test_read_data_passes_a_fabric_copy_before_a_dsp_block_when_the_route_does_not_fit():
    """A block RAM's output register straight into a DSP block's input register is only the
    route between their columns (timing_model.memory_to_dsp_ns, 9.1 ns on grade 6): above
    ~110 MHz the weights a GEMV's DSP products take pass a copy level in the fabric (as the
    broadcast x does), so no buffer is read late; below it, and with LUT products, they do not.
    The estimate names that path where it is left and slowest."""
    from compiler.timing_model import memory_to_dsp_ns
    d = delays(find_device("ecp5", "LFE5U-85F"))
    assert 100 < 1000 / memory_to_dsp_ns(d) < 150
    case = designs.SMALL["gemv_int8_16x8"]
    copied = {}
    for target, mul in ((100, "auto"), (150, "auto"), (150, "lut")):
        design = _check(case(), fp_pipeline=3, lanes=4, reduce_unroll=4, target_mhz=target, mul=mul)
        sched = design.schedules[0]
        copied[(target, mul)] = (len(sched.broadcast), bool(sched.late))
    # 4 lanes x 4 unrolled: 16 weights and 4 x elements, each shared by 4 products (OPERAND_GROUP,
    # no broadcast level of their own)
    assert copied == {(100, "auto"): (0, False), (150, "auto"): (20, False), (150, "lut"): (0, False)}
    direct = compile_model(*case().outputs, config=HardwareConfig(fp_pipeline=3, lanes=4, reduce_unroll=4))
    assert direct.timing_estimate().period_ns >= memory_to_dsp_ns(d)


@pytest.mark.parametrize("target", TARGETS)
def test_an_fp16_gemv_at_a_target_clock_is_bit_exact(target):
    params = {"M": 6, "K": 20}
    config = HardwareConfig(fp_pipeline=3, lanes=2, target_mhz=target)
    design, result, arrays = run_zoo("gemv", "fp16", params, config)
    assert same_bits(result.outputs[0], zoo.reference("gemv", "fp16", params, arrays, zoo.arith_for("fp16", "tinygrad")))
    assert result.cycles == design.cycles_formula


def _i8(rng, *shape):
    return rng.integers(-128, 128, shape).astype(np.int8)


def _constant_mlp(seed=3, IN=16, HIDDEN=12, OUT=4, SHIFT=7):
    """An int8 MLP with its weights built in, one sample a cycle: (x, y, numpy reference)."""
    rng = np.random.default_rng(seed)
    W1, W2 = _i8(rng, HIDDEN, IN), _i8(rng, OUT, HIDDEN)
    W1[rng.random(W1.shape) < 0.5] = 0
    b1 = rng.integers(-500, 500, HIDDEN).astype(np.int32)
    x = Tensor(_i8(rng, IN)).realize()
    h = ((Tensor(W1).cast(dtypes.int32) @ x.cast(dtypes.int32) + Tensor(b1)).relu() >> SHIFT).minimum(127)
    y = Tensor(W2).cast(dtypes.int32) @ h.cast(dtypes.int8).cast(dtypes.int32)

    def reference(xv):
        hv = np.minimum(np.maximum(W1.astype(np.int32) @ xv.astype(np.int32) + b1, 0) >> SHIFT, 127)
        return W2.astype(np.int32) @ hv.astype(np.int32)
    return x, y, reference


CONSTANT = {"weights": "constant", "lanes": 64, "reduce_unroll": 64, "fp_pipeline": 3, "schedule": "dataflow"}


@pytest.mark.parametrize("graph", ["per_product", "shared"])
def test_a_constant_weight_mlp_at_target_clocks_is_bit_exact_and_takes_more_stages_for_a_faster_clock(graph):
    if graph == "shared":
        pytest.importorskip("da4ml.cmvm", reason="shared adder graphs need da4ml (pip install -e '.[cmvm]')")
    rng = np.random.default_rng(4)
    samples = [_i8(rng, 16) for _ in range(5)]
    cycles = []
    for target in (60, *TARGETS):
        x, y, ref = _constant_mlp()
        config = HardwareConfig.from_dict({**CONSTANT, "target_mhz": target, "adder_graph": graph})
        design = compile_model(y, config=config, stream=x)
        cm = design.cycle_model()
        assert cm.interval == 1                   # one sample a cycle still
        runs = simulate_many(design, [{x: s} for s in samples], backend="pysim")
        for s, r in zip(samples, runs):
            assert np.array_equal(np.asarray(r.outputs[0]).reshape(-1), ref(s))
            assert r.cycles == cm.total
        cycles.append(cm.total)
        # the model's own estimate of the design it scheduled reaches the target, where one op and
        # its route fit the period (at 250 MHz a 16-bit subtract from a register does not)
        assert design.timing_estimate().fmax_mhz >= target * 0.999 or target == 250
    assert cycles == sorted(cycles) and cycles[0] < cycles[-1]


def test_a_fan_out_value_is_copied_from_before_its_register():
    """With target_mhz a layer's activation, read by more than FANOUT_USES terms of the next layer,
    reaches them through copies that are its register, duplicated (Schedule.early holds the op,
    or a cast of it: pipeline.early_op): its readers start in the stage it is ready, not a stage
    later."""
    x, y, _ = _constant_mlp(IN=12, HIDDEN=10, OUT=12)
    design = compile_model(y, config=HardwareConfig.from_dict({**CONSTANT, "target_mhz": 150}), stream=x)
    sched, k = design.schedules[0], design.kernels[0]
    order = ir.toposort([o for s, _ in k.stores() for o in ir.store_operands(s)])
    ops = [v for v in order if id(v) in sched.early and not isinstance(v, ir.Load)
           and not isinstance(v.srcs[0], ir.Load)]
    assert ops
    for v in ops:
        starts = [sched.ready[id(u)] - sched.latency.get(id(u), 0)
                  for u in order if isinstance(u, ir.Op) and any(o is v for o in u.srcs)]
        assert min(starts) == sched.ready[id(v)]


@pytest.mark.parametrize("target", [100, 200])
def test_a_dataflow_design_with_memories_at_a_target_clock_streams_bit_exact(target):
    rng = np.random.default_rng(5)
    W1, W2 = _i8(rng, 12, 16), _i8(rng, 6, 12)
    x = Tensor(_i8(rng, 16)).realize()
    h = ((Tensor(W1).cast(dtypes.int32) @ x.cast(dtypes.int32)).relu() >> 7).minimum(127).cast(dtypes.int8)
    y = Tensor(W2).cast(dtypes.int32) @ h.cast(dtypes.int32)
    config = HardwareConfig.from_dict({"schedule": "dataflow", "fp_pipeline": 3, "lanes": 2, "reduce_unroll": 4,
                                       "target_mhz": target})
    design = compile_model(y, config=config, stream=x)
    cm = design.cycle_model()
    samples = [_i8(rng, 16) for _ in range(3)]
    runs = simulate_many(design, [{x: s} for s in samples], backend="pysim")
    for s, r in zip(samples, runs):
        hv = np.minimum(np.maximum(W1.astype(np.int32) @ s.astype(np.int32), 0) >> 7, 127)
        assert np.array_equal(np.asarray(r.outputs[0]).reshape(-1), W2.astype(np.int32) @ hv)
        assert r.cycles == cm.total
    assert all(r.interval == cm.interval for r in runs[1:])


# ------------------------------------------------------------------ the estimate

def test_the_estimate_is_faster_on_a_faster_grade_and_for_more_registers():
    case = designs.SMALL["mlp_int8_small"]
    est = {}
    for knobs in (dict(fp_pipeline=1), dict(fp_pipeline=3), dict(fp_pipeline=3, device="LFE5U-85F-8")):
        design = compile_model(*case().outputs, config=HardwareConfig(lanes=2, reduce_unroll=4, **knobs))
        est[tuple(knobs.items())] = design.timing_estimate()
    p1, p3, p3_8 = (e.fmax_mhz for e in est.values())
    assert p1 < p3 < p3_8
    assert all(e.where for e in est.values())


def test_placement_bounds_the_estimate_by_the_designs_size():
    """A placed design's slowest path is mostly one long route, longer the larger the design
    (timing_model.PLACED_PERIOD_NS, calibrated on nextpnr runs): the estimate with the design's
    LUT4s is the slower of that and the modelled path, on every grade scaled as the cells."""
    g6, g8 = (delays(find_device("ecp5", name)) for name in ("LFE5U-85F", "LFE5U-85F-8"))
    sizes = [100, 600, 1_000, 3_000, 10_000, 30_000, 60_000, 200_000]
    periods = [placed_period_ns(n, g6) for n in sizes]
    assert periods == sorted(periods) and periods[0] == PLACED_PERIOD_NS["ecp5"][0][1]
    assert periods[-1] == PLACED_PERIOD_NS["ecp5"][-1][1]
    assert all(placed_period_ns(n, g8) == pytest.approx(p * 0.76) for n, p in zip(sizes, periods))
    assert placed_period_ns(5_000, DELAYS[("ice40", None)]) is None         # no calibration: no bound
    for n, period in PLACED_PERIOD_NS["ecp5"]:                                # through its points
        assert placed_period_ns(n, g6) == pytest.approx(period)

    case = designs.SMALL["mlp_int8_small"]
    design = compile_model(*case().outputs, config=HardwareConfig(lanes=2, reduce_unroll=4, fp_pipeline=3,
                                                                  target_mhz=200))
    alone = design.timing_estimate()
    assert "placement" not in alone.where
    small, large = design.timing_estimate(luts=600), design.timing_estimate(luts=51_000)
    assert small.period_ns == max(alone.period_ns, placed_period_ns(600, g6))
    assert large.period_ns == placed_period_ns(51_000, g6) > alone.period_ns
    assert large.where.startswith("placement: the longest routes of a placed design of ~51,000 LUT4s")
    assert large.placement and not alone.placement
    assert small.placement == (placed_period_ns(600, g6) > alone.period_ns)
    assert alone.where in large.where                   # the modelled path is named beside it
    unpipelined = compile_model(*case().outputs, config=HardwareConfig(lanes=2, reduce_unroll=4))
    slow = unpipelined.timing_estimate()
    assert slow.period_ns > placed_period_ns(600, g6)   # a long modelled path is the estimate itself
    assert unpipelined.timing_estimate(luts=600) == slow


def test_a_rows_estimate_is_bounded_by_its_estimated_luts():
    """dse.estimate.fmax_estimate: the LUT4s come from the shipped area calibration, for the
    family the design is timed for; with no calibration the modelled path alone."""
    from dse.estimate import design_features, fmax_estimate, load_prior
    case = designs.SMALL["mlp_int8_small"]
    design = compile_model(*case().outputs, config=HardwareConfig(lanes=2, reduce_unroll=4, fp_pipeline=3))
    features = design_features(design, target="ecp5")
    luts = load_prior("ecp5").metrics["luts"].predict(features)
    assert luts > 0
    assert fmax_estimate(design, features, "ecp5") == design.timing_estimate(luts)
    assert fmax_estimate(design, design_features(design, target="ice40"), "ice40") == design.timing_estimate()


@pytest.mark.parametrize("M, K, memory", [(16, 64, "LUT RAM"), (32, 128, "block RAM")])
def test_the_estimate_times_the_read_modify_write_of_packed_4_bit_weights(M, K, memory):
    """4-bit weights packed a word to a memory are written a word at a time (hw/subword.py):
    the read-modify-write is a path no register placement shortens, timed on its own
    (timing_model.word_write_ns). Built from registers (the kernel's `reading` flag selecting the
    read address; in block RAM at this target the word read registered: word_read_registered)
    it fits 150 MHz and is within the estimate at target_mhz 200 on LUT RAM and on block RAM."""
    built = zoo.ZOO["gemv"].build("w4a8", M=M, K=K)
    tensors = zoo.input_tensors(built, zoo.make_inputs(built, 0))
    design = compile_model(built.forward(*tensors), input_ranges=zoo.declared_ranges(built, tensors),
                           config=HardwareConfig(lanes=4, reduce_unroll=8, fp_pipeline=3, target_mhz=200))
    words = [p for packs in design.packs for p in packs if p.word_writes]      # the weights' (x: int8 bytes)
    assert words
    est = design.timing_estimate()
    d = delays(design.config.timing_part())
    registered = [word_read_registered(len(p.slots), p.width, p.depth, design.config) for p in words]
    assert all(registered) == (memory == "block RAM")           # at 200 MHz the block RAM's word read is
    ns, what = max(word_write_ns(len(p.slots), p.width, p.depth, d, registered=r) for p, r in zip(words, registered))
    assert f"a packed {memory}'s read-modify-write" in what
    assert ns < 1000 / 150 and ns <= est.period_ns
    if memory == "block RAM":      # unregistered (no target_mhz: nothing asks for the clock) it is ~100 MHz:
        shape = len(words[0].slots), words[0].width, words[0].depth     # the read data and the hit flag
        assert word_write_ns(*shape, d)[0] == write_hit_ns(*shape, d)[0] > 1000 / 120
    assert not word_read_registered(len(words[0].slots), words[0].width, words[0].depth,
                                    dataclasses.replace(design.config, target_mhz=None))



def test_the_write_hit_flag_registers_the_kws_shapes_packed_block_rams_at_100_mhz():
    """The KWS shape at 3 bits (12 x 3-bit words in block RAMs of 512 and 256 words),
    `target_mhz: 100`: its critical path was the unregistered write-hit flag (nextpnr 12.7 ns;
    the model, with one load on its first route, said 9.9, under the period); timed from the
    host's shared address copy it misses 10 ns, so the word read is registered (96.5 MHz
    measured). At 80 MHz it fits unregistered; in LUT RAM (16 words) it is never registered."""
    config = HardwareConfig(fp_pipeline=3, target_mhz=100)
    d = delays(config.timing_part())
    for depth in (512, 256):
        assert 10.0 < write_hit_ns(12, 3, depth, d)[0] == word_write_ns(12, 3, depth, d)[0] < 12.5
        assert word_read_registered(12, 3, depth, config)
        assert not word_read_registered(12, 3, depth, dataclasses.replace(config, target_mhz=80))
    assert not word_read_registered(12, 3, 16, dataclasses.replace(config, target_mhz=400))


# ------------------------------------------------------------------ the same in CXXRTL

@pytest.mark.slow
@pytest.mark.parametrize("case", ["constant", "memories", "gemv_lut", "split"])
def test_target_clock_designs_are_bit_exact_and_cycle_exact_in_cxxrtl(case):
    """The compiled C++ simulator (Yosys write_cxxrtl), not pysim, on the target_mhz designs of each
    kind above at 200 MHz: outputs equal to the reference, cycles to the cycle model."""
    rng = np.random.default_rng(6)
    if case in ("constant", "memories"):
        if case == "constant":
            x, y, ref = _constant_mlp()
            knobs = {**CONSTANT, "target_mhz": 200}
        else:
            W1, W2 = _i8(rng, 12, 16), _i8(rng, 6, 12)
            x = Tensor(_i8(rng, 16)).realize()
            h = ((Tensor(W1).cast(dtypes.int32) @ x.cast(dtypes.int32)).relu() >> 7).minimum(127).cast(dtypes.int8)
            y = Tensor(W2).cast(dtypes.int32) @ h.cast(dtypes.int32)

            def ref(xv):
                hv = np.minimum(np.maximum(W1.astype(np.int32) @ xv.astype(np.int32), 0) >> 7, 127)
                return W2.astype(np.int32) @ hv
            knobs = {"schedule": "dataflow", "fp_pipeline": 3, "lanes": 2, "reduce_unroll": 4, "target_mhz": 200}
        design = compile_model(y, config=HardwareConfig.from_dict(knobs), stream=x)
        cm = design.cycle_model()
        samples = [_i8(rng, 16) for _ in range(4)]
        runs = simulate_many(design, [{x: s} for s in samples], backend="cxxrtl")
        for s, r in zip(samples, runs):
            assert np.array_equal(np.asarray(r.outputs[0]).reshape(-1), ref(s))
            assert r.cycles == cm.total
        assert all(r.interval == cm.interval for r in runs[1:])
        return
    name, knobs = {"gemv_lut": ("gemv_int8_16x8", dict(lanes=4, reduce_unroll=4, mul="lut")),
                   "split": ("matmul_int32", dict(lanes=2, reduce_unroll=2))}[case]
    c = designs.SMALL[name]()
    design = compile_model(*c.outputs, config=HardwareConfig(fp_pipeline=3, target_mhz=200, **knobs))
    result = simulate(design, backend="cxxrtl")
    assert_exact(result.outputs, c.reference)
    assert result.cycles == design.cycles_formula


def test_a_store_on_an_accumulators_loop_trails_it_a_stage_at_a_target_clock():
    """A max pool stores its running maximum in the last step of each window, the value on the
    accumulator's one-cycle loop (no register can go inside it): with target_mhz the store
    commits a stage after the accumulator's write, from a register, and the loop takes its read
    data a stage after it arrives (pipeline._loop_late_from_read), a cycle more a run each;
    bit-exact, the cycles the cycle model's."""
    rng = np.random.default_rng(4)
    x = rng.integers(-128, 128, (1, 2, 6, 6)).astype(np.int8)
    ref = x.astype(np.int32).reshape(1, 2, 3, 2, 3, 2).max(axis=(3, 5))
    runs = {}
    for target in (None, 200):
        t = Tensor(x)
        design = compile_model(t.cast(dtypes.int32).max_pool2d(kernel_size=(2, 2)),
                               config=HardwareConfig(fp_pipeline=3, target_mhz=target))
        (sched,) = design.schedules
        (acc_stage,) = sched.acc_write.values()
        assert sched.commit == acc_stage + (target is not None)
        # and the window's read data, straight into the loop's max at 200 MHz (past the period
        # from the memory's output register), reaches it from a register in the fabric a stage on
        loads = [v for s, _ in design.kernels[0].stores() for v in ir.toposort(ir.store_operands(s))
                 if isinstance(v, ir.Load)]
        assert loads and all(sched.ready[id(v)] == acc_stage - (target is not None) for v in loads)
        r = simulate(design, {t: x})
        np.testing.assert_array_equal(np.asarray(r.outputs[0]).reshape(ref.shape), ref)
        assert r.cycles == design.cycle_model().total
        runs[target] = r.cycles
    assert runs[200] >= runs[None] + 2


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.int8])
def test_a_carry_chains_sums_into_another_chain_take_the_longer_route(dtype):
    """timing_model.ROUTE_CHAIN: (x + y) - z in one stage is the sum's net into the subtract's
    chain, timed at route_chain (placed: 2.1-2.4 ns) where the chain spans more than two tiles
    (CHAIN_LONG_BITS: 32 bits here, not 8); read data into the add, and the subtract into a
    ReLU's select (a LUT a bit, ir.bit_test), are ordinary nets."""
    from compiler.timing_model import CHAIN_LONG_BITS, Paths
    x, y, z = (Tensor(np.arange(8, dtype=np.int8) * k, dtype=dtype) for k in (1, 3, -1))
    config = HardwareConfig()
    kernel = compile_model(((x + y) - z).relu(), config=config).kernels[0]
    order = ir.toposort([st.value for st, _ in kernel.stores()])
    d = delays(config.timing_part())
    paths = Paths(kernel, d, order, ir.operands, config)
    add, sub, relu = (v for v in order if isinstance(v, ir.Op))
    assert (add.op, sub.op, relu.op) == (ir.OpKind.ADD, ir.OpKind.SUB, ir.OpKind.MAX)
    assert d.route_chain > d.route_ns(1)
    wide = paths.width(sub) > CHAIN_LONG_BITS
    assert wide == (dtype == dtypes.int32)
    assert paths._route(add, sub, 1) == (d.route_chain if wide else d.route_ns(1))
    assert paths._route(add.srcs[0], add, 1) == d.route_ns(1)
    assert paths._route(sub, relu, 1) == d.route_ns(1)
