"""Narrow products of one operand in one DSP block (compiler/hw/dsp_pack.py, the `dsp_pack`
knob): the fields come apart exactly at every operand value, the planner packs as many as the
DSP budget calls for, and packed designs simulate bit-exact with the cycles of unpacked ones."""
from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from amaranth.sim import Simulator

from compiler import HardwareConfig, compile_model, simulate
from compiler.hw import dsp_pack
from compiler.hw.datapath import PackedProduct
from compiler.hw.dsp_fields import field_bits, packed_range, product_range
from compiler.hw.dsp_pack import plan
from compiler.overflow import worst_case_inputs
from compiler.ranges import Interval
from compiler.pnr.timing import prepare
from compiler.synth.area import design_rtlil, synthesize
from compiler.synth.multipliers import mul_cells
from compiler.hw.pipeline import kernel_paths
from compiler.timing_model import DSP_SITE, delays, product_ns, product_registers
from dse.estimate import design_features
from helpers import narrow_gemv

INT8, INT4, INT3, UINT8 = Interval(-128, 127), Interval(-8, 7), Interval(-4, 3), Interval(0, 255)


@pytest.mark.parametrize("a, bs, field", [
    (INT8, [INT4] * 2, 12),             # w4a8: two a block, B of 17 bits
    (UINT8, [INT4] * 2, 12),
    (Interval(-32, 31), [INT4] * 2, 10),  # w4a6
    (INT3, [INT3] * 3, 6),              # w3a3: three, B of 16 bits
    (INT8, [INT4] * 3, None),           # B of 28 bits: more than the block's 18
    (INT8, [INT8] * 2, None),
    (INT3, [INT3] * 4, None),
])
def test_the_field_is_the_widest_product_when_the_packed_operand_fits(a, bs, field):
    assert field_bits(a, bs, 18) == field


def test_a_field_widens_when_a_partial_sum_below_it_would_not_fit():
    # products of [0, 1] x [-8, 7] fill 4 bits, but the first two fields' sum y0 + y1 * 2**4
    # spans [-136, 119], more than 8 bits hold: fields of 5 bits (y0 + y1 * 2**5: [-264, 231])
    assert field_bits(Interval(0, 1), [INT4] * 2, 18) == 4
    assert field_bits(Interval(0, 1), [INT4] * 3, 18) == 5
    # [-8, 7] x [-8, 7] is [-56, 64]: 8 bits (64), and y0 + y1 * 2**8 fits 16
    assert field_bits(INT4, [INT4] * 2, 18) == 8


def simulate_pack(a_range: Interval, b_ranges: list[Interval], registers: int) -> int:
    """Every (a, b_0, .., b_n) of the ranges through a PackedProduct: each y_i == a * b_i,
    `registers` cycles later. Returns the vectors checked."""
    k = field_bits(a_range, b_ranges, 18)
    shapes = [product_range(a_range, b).shape for b in b_ranges]
    dut = PackedProduct(a_range.shape, packed_range(b_ranges, k).shape, shapes, k, registers)
    vectors = list(itertools.product(range(a_range.lo, a_range.hi + 1),
                                     *[range(b.lo, b.hi + 1) for b in b_ranges]))
    sim = Simulator(dut)
    sim.add_clock(1e-6)

    async def bench(ctx):
        for n, (a, *bs) in enumerate(vectors + [vectors[0]] * registers):
            ctx.set(dut.a, a)
            ctx.set(dut.b, sum(b << k * i for i, b in enumerate(bs)))
            await ctx.tick()
            if n >= registers - 1 and n - registers + 1 < len(vectors):
                a0, *b0 = vectors[n - registers + 1]
                assert [ctx.get(y) for y in dut.ys] == [a0 * b for b in b0], (a0, b0)
    sim.add_testbench(bench)
    sim.run()
    return len(vectors)


@pytest.mark.parametrize("a, bs, registers", [
    (INT8, [INT4] * 2, 2), (UINT8, [INT4] * 2, 1), (INT3, [INT3] * 3, 3), (Interval(0, 1), [INT4] * 3, 2)])
def test_every_product_comes_apart_exactly_from_the_packed_one(a, bs, registers):
    assert simulate_pack(a, bs, registers) == (a.hi - a.lo + 1) * np.prod([b.hi - b.lo + 1 for b in bs])


def test_auto_packs_only_past_the_budget_and_only_as_many_as_bring_the_need_down():
    packs = [dsp_pack.ProductPack(None, (None, None), 12) for _ in range(6)]
    # 12 products in 6 pairs, budget 20: everything fits, nothing packed
    assert plan([packs], 12, 20, "auto") == [[]]
    # budget 10: 12 products need 12 blocks; two packs make it 10
    assert plan([packs], 12, 10, "auto") == [packs[:2]]
    # 8 products outside any pair take 8 of 10 blocks first: 2 packs, though 20 need more
    assert plan([packs[:3], packs[3:]], 20, 10, "auto") == [packs[:2], []]
    assert plan([packs], 12, 10, "all") == [packs] and plan([packs], 12, 10, "none") == [[]]


def _gemv(M=8, K=24):
    """An int4 x int8 GEMV (helpers.narrow_gemv): W, x, W @ x in int32, numpy's W @ x."""
    return narrow_gemv(4, M, K)[:4]


def _packs(design) -> list[tuple[int, int]]:
    return [(len(p.products), p.field) for s in design.schedules for p in s.product_packs]


@pytest.mark.parametrize("knobs", [{}, {"target_mhz": 200}])     # one register, and more
def test_a_w4a8_gemv_with_its_products_packed_two_a_block_is_bit_exact(knobs):
    W, x, y, _ = _gemv()
    # `auto` within the DSP budget forms no packs but schedules as a packed design does (with
    # target_mhz the fields' carry may take a product register), so the two compare cycle for cycle
    config = HardwareConfig(fp_pipeline=3, lanes=4, reduce_unroll=4, mul="dsp", dsp_pack="auto", **knobs)
    plain = compile_model(y, config=config, input_ranges={W: (-8, 7)})
    packed = compile_model(y, config=replace(config, dsp_pack="all"), input_ranges={W: (-8, 7)})
    assert _packs(plain) == [] and _packs(packed) == [(2, 12)] * 8        # 16 products, 8 blocks
    # one 8 x 17-bit multiplier per pack, where the plain design has 16 of 8 x 4
    assert sorted((c.a_width, c.b_width) for c in mul_cells(design_rtlil(packed))) == [(8, 17)] * 8
    assert sorted((c.a_width, c.b_width) for c in mul_cells(design_rtlil(plain))) == [(8, 4)] * 16
    # the ranges' ends mixed (every field's borrow, both signs), and the overflow check's worst case
    rng = np.random.default_rng(1)
    ends = {packed.buffer_of(W): rng.choice([-8, -1, 0, 7], W.shape[0] * W.shape[1]).astype(np.int8),
            packed.buffer_of(x): rng.choice([-128, -1, 0, 1, 127], x.shape[0]).astype(np.int8)}
    for inputs in (None, ends, worst_case_inputs(packed, {})):
        got, want = simulate(packed, inputs), simulate(plain, inputs)
        assert np.array_equal(got.outputs[0], want.outputs[0]) and got.cycles == want.cycles
    w = ends[packed.buffer_of(W)].astype(np.int64).reshape(W.shape)
    assert np.array_equal(simulate(packed, ends).outputs[0], w @ ends[packed.buffer_of(x)].astype(np.int64))
    assert packed.cycle_model().total == plain.cycle_model().total
    regs = {s.product_regs for s in packed.schedules}
    assert regs == {1} if not knobs else min(regs) >= 2
    # the delay model times a pack as one 8 x 17 DSP product with 12-bit fields taken apart
    d = delays(packed.config.timing_part())
    assert [p for p in kernel_paths(packed.kernels[0], packed.schedules[0], packed.config, d)[2] if p[3]] == \
        [(8, 17, False, 12)] * 8
    # on the block's output route with two registers; after the landing register with three
    assert product_ns(8, 17, 2, DSP_SITE, d, 12)[0] == pytest.approx(product_ns(8, 17, 2, DSP_SITE, d)[0] + d.carry_ns(12))
    assert product_ns(8, 17, 3, DSP_SITE, d, 12)[0] == pytest.approx(product_ns(8, 17, 3, DSP_SITE, d)[0])
    # so a period the landing route alone fits but not with the borrow's carry takes a third register
    period = product_ns(8, 17, 2, DSP_SITE, d)[0] + d.carry_ns(12) / 2
    assert product_registers([(8, 4)], period, (DSP_SITE,), d) == 2
    assert product_registers([(8, 4)], period, (DSP_SITE,), d, packs=[(8, 17, 12)]) == 3
    # and the area estimate as 8 products of 8 x 17 bits where the plain design has 16 of 8 x 4
    assert (design_features(packed, target="ecp5")["mul"], design_features(plain, target="ecp5")["mul"]) == (8, 16)


def test_auto_packs_when_the_products_outnumber_the_blocks(monkeypatch):
    W, x, y, want = _gemv()
    config = HardwareConfig(fp_pipeline=3, lanes=4, reduce_unroll=4, dsp_pack="auto")
    assert _packs(compile_model(y, config=config, input_ranges={W: (-8, 7)})) == []
    assert HardwareConfig().dsp_pack == "none"           # opt-in until its clock is measured
    monkeypatch.setattr(HardwareConfig, "dsp_blocks", lambda self, family: 4)     # a part of 4 blocks
    # 16 products, 4 blocks: four packs (8 products in blocks), the other 8 in LUTs
    design = compile_model(y, config=config, input_ranges={W: (-8, 7)})
    assert _packs(design) == [(2, 12)] * 4
    assert np.array_equal(simulate(design).outputs[0], want)
    for knobs in ({"dsp_pack": "none"}, {"mul": "lut"}, {"fp_pipeline": 2}):
        assert _packs(compile_model(y, config=replace(config, **knobs), input_ranges={W: (-8, 7)})) == []


def test_the_knob_takes_auto_all_or_none():
    with pytest.raises(ValueError, match=r"dsp_pack: expected 'none', 'auto' or 'all', got False \(YAML reads off and no as false: write none\)"):
        HardwareConfig(dsp_pack=False)          # YAML reads `off` as false


@pytest.mark.slow
def test_a_packs_multiplier_takes_its_operand_and_output_registers_inside(tmp_path):
    """Synthesised and prepared for nextpnr (compiler/pnr/dsp_registers.py): the packed operand's
    register is the block's B input register, the shared operand's copy its A, the product's
    first register its output register, as for a plain DSP product."""
    W, x, y, _ = _gemv(M=4, K=8)
    design = compile_model(y, config=HardwareConfig(fp_pipeline=3, lanes=2, reduce_unroll=4, mul="dsp",
                                                    dsp_pack="all", target_mhz=200), input_ranges={W: (-8, 7)})
    assert _packs(design) == [(2, 12)] * 4
    area = synthesize(design, "ecp5", tmp_path / "synth", netlist=True, use_cache=False)
    netlist = json.loads(Path(area.netlist_path).read_text())
    top, *_ = prepare(netlist, "ecp5")
    dsps = [c for c in netlist["modules"][top]["cells"].values() if c["type"] == "MULT18X18D"]
    assert len(dsps) == 4 and all(
        {d["parameters"][k] for k in ("REG_INPUTA_CLK", "REG_INPUTB_CLK", "REG_OUTPUT_CLK")} == {"CLK0"} for d in dsps)
