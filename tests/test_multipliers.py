"""The multiplier-style knob (`mul: auto | dsp | lut`, compiler/synth/multipliers.py): which products
Yosys maps to DSP blocks and which it builds as Booth multipliers in LUTs."""
from __future__ import annotations

import json

import numpy as np
import pytest

import designs
from compiler import HardwareConfig, compile_model, simulate
from compiler.synth.multipliers import (DSP_BUDGET, MulCell, dsp_cost, lut_cells, map_files, mark_lut_cells, mul_cells,
                                  plan)
from compiler.synth.area import design_rtlil, synthesize
from compiler.tools import yosys


def _gemv(lanes, unroll, mul="auto", m=8, k=16):
    return compile_model(*designs.gemv_int8(m, k).outputs,
                         config=HardwareConfig(lanes=lanes, reduce_unroll=unroll, mul=mul))


def test_mul_knob_is_validated():
    assert HardwareConfig().mul == "auto"
    with pytest.raises(ValueError, match="HardwareConfig.mul: expected 'auto', 'dsp' or 'lut', got 'booth'"):
        HardwareConfig(mul="booth")
    with pytest.raises(ValueError, match="multiplier style: expected one of auto, dsp, lut, got 'x'"):
        lut_cells([], "ecp5", "x")


def test_budgets_are_the_largest_devices_dsps():
    assert DSP_BUDGET == {"ecp5": 156, "ice40": 8}         # LFE5U-85F MULT18X18D, iCE40UP5K SB_MAC16


@pytest.mark.parametrize("target, widths, blocks", [
    # as Yosys 0.70's synth_ecp5 / synth_ice40 -dsp map a lone a*b (measured, and re-measured
    # by test_dsp_cost_is_what_yosys_spends for two of them)
    ("ecp5", (8, 8), 1), ("ecp5", (18, 18), 1), ("ecp5", (19, 19), 1), ("ecp5", (24, 24), 4),
    ("ecp5", (36, 36), 4), ("ecp5", (11, 11), 1),
    ("ice40", (8, 8), 1), ("ice40", (18, 18), 3), ("ice40", (24, 24), 4), ("ice40", (35, 35), 8),
    ("ice40", (2, 2), 0)])
def test_dsp_cost_follows_mul2dsp(target, widths, blocks):
    a, b = widths
    assert dsp_cost(MulCell("m", "$1", a, b, a + b), target) == blocks


def test_rtlil_multipliers_are_found_and_marked():
    design = _gemv(2, 2)
    text = design_rtlil(design)
    cells = mul_cells(text)
    assert len(cells) == 4 and all((c.a_width, c.b_width, c.y_width) == (8, 8, 16) for c in cells)
    assert plan(text, "ecp5", "dsp") == (text, "", 0)
    assert plan(text, "ecp5", "auto") == (text, "", 0)             # 4 <= 156: exactly the dsp script
    marked, before, n = plan(text, "ecp5", "lut")
    assert n == 4 and before == "proc\ntechmap -map tinyhw_lut_mul.v a:tinyhw_mul=lut\nbooth a:tinyhw_mul=lut\n"
    assert marked.count('attribute \\tinyhw_mul "lut"') == 4
    after = mul_cells(marked)
    # nothing else changed but each product's orientation: the operand broadcast to both lanes
    # goes on A, where the LUT multiplier's multiples are computed (and shared)
    assert [(c.name, {c.a_signal, c.b_signal}) for c in after] == [(c.name, {c.a_signal, c.b_signal}) for c in cells]
    shared = [sig for sig in {c.a_signal for c in cells} | {c.b_signal for c in cells}
              if sum(sig in (c.a_signal, c.b_signal) for c in cells) == 2]
    assert len(shared) == 2 and all(c.a_signal in shared and c.b_signal not in shared for c in after)
    assert [c.lut for c in mul_cells(marked)] == [True] * 4 and not any(c.lut for c in cells)
    assert all(c.signed for c in cells)                                   # int8 x int8
    files = map_files(marked)
    assert list(files) == ["tinyhw_lut_mul.v"] and files["tinyhw_lut_mul.v"].count("\nmodule ") == 1
    assert map_files(text) == {}


def test_a_named_part_is_the_budget():
    """`device` names the part the design is for: `mul: auto` fills its DSP blocks, not the
    family's largest part's (a design for the LFE5U-25F past its 28 blocks would not fit it)."""
    assert HardwareConfig().dsp_blocks("ecp5") == 156 == HardwareConfig(device="LFE5U-85F-8").dsp_blocks("ecp5")
    small = HardwareConfig(device="LFE5U-25F", lanes=8, reduce_unroll=8)
    assert small.dsp_blocks("ecp5") == 28 and HardwareConfig(device="LFE5U-45F").dsp_blocks("ecp5") == 72
    assert small.dsp_blocks("ice40") == 8             # a part of another family: that family's largest
    assert HardwareConfig(device="iCE40HX8K").dsp_blocks("ice40") == 0
    assert small.dsp_blocks("xilinx") is None         # no device list: auto is dsp
    text = design_rtlil(_gemv(8, 8))
    assert plan(text, "ecp5", "auto")[2] == 0                            # 64 products within 156
    assert plan(text, "ecp5", "auto", small.dsp_blocks("ecp5"))[2] == 64 - 28
    assert plan(text, "ecp5", "auto", 0)[2] == 64


def test_auto_spends_the_budget_on_the_widest_products_first():
    cells = [MulCell("m", f"$n{i}", 8, 8, 16) for i in range(6)] + [MulCell("m", "$wide", 16, 16, 32)]
    assert lut_cells(cells, "ice40", "auto") == set()              # 7 DSPs of the budget of 8
    cells += [MulCell("m", f"$x{i}", 8, 8, 16) for i in range(4)]
    luts = lut_cells(cells, "ice40", "auto")
    assert ("m", "$wide") not in luts and len(luts) == 3           # 11 products, 8 DSPs
    assert luts == {("m", "$x1"), ("m", "$x2"), ("m", "$x3")}      # ties keep the RTLIL's order
    assert lut_cells(cells, "xilinx", "auto") == set()             # no device list: auto is dsp


def test_the_knob_changes_only_synthesis():
    """Same RTL for every style, so simulation (bit-exact, cycle model) is the same design."""
    texts = {mul: design_rtlil(_gemv(4, 4, mul)) for mul in ("auto", "dsp", "lut")}
    assert len(set(texts.values())) == 1
    design = _gemv(4, 4, "lut")
    result = simulate(design, backend="pysim")
    case = designs.gemv_int8(8, 16)
    assert np.array_equal(result.outputs[0], case.reference[0])
    assert result.cycles == design.cycle_model().total


@pytest.mark.slow
def test_styles_map_as_asked(tmp_path):
    """iCE40 (8 DSPs on the largest part): 16 int8 products go 16/0/8 to DSPs for dsp/lut/auto,
    and the LUT-built ones cost LUTs."""
    area = {mul: synthesize(_gemv(4, 4, mul), "ice40", workdir=tmp_path / mul) for mul in ("dsp", "lut", "auto")}
    assert (area["dsp"].dsp, area["lut"].dsp, area["auto"].dsp) == (16, 0, 8)
    assert area["dsp"].luts < area["auto"].luts < area["lut"].luts
    assert "techmap -map tinyhw_lut_mul.v a:tinyhw_mul=lut" in area["auto"].script
    assert "techmap" not in area["dsp"].script
    ecp5 = synthesize(_gemv(2, 2, "lut"), "ecp5", workdir=tmp_path / "ecp5")
    assert ecp5.dsp == 0 and "MULT18X18D" not in ecp5.cells


@pytest.mark.slow
@pytest.mark.parametrize("target, a, b", [("ecp5", 24, 24), ("ice40", 18, 18)])
def test_dsp_cost_is_what_yosys_spends(tmp_path, target, a, b):
    (tmp_path / "m.v").write_text(f"module top(input [{a - 1}:0] a, input [{b - 1}:0] b, "
                                  f"output [{a + b - 1}:0] y); assign y = a * b; endmodule\n")
    script = {"ecp5": "synth_ecp5 -top top", "ice40": "synth_ice40 -dsp -top top"}[target]
    yosys(f"read_verilog m.v\n{script}\ntee -q -o stat.json stat -json\n", cwd=tmp_path, log_name="y.log")
    cells = json.loads((tmp_path / "stat.json").read_text())["design"]["num_cells_by_type"]
    used = int(cells.get({"ecp5": "MULT18X18D", "ice40": "SB_MAC16"}[target], 0))
    assert used == dsp_cost(MulCell("top", "$mul", a, b, a + b), target)


def test_a_spec_sweeps_the_style_under_device_budgets():
    """What a spec needs to find the fastest design that fits an LFE5U-85F: `mul` among the
    knobs and the device's counts as constraints (docs/multipliers.md); a bad value names where."""
    from dse.spec import SpecError, parse_spec
    d = {"study": "fit", "target": "ecp5", "models": [{"name": "g", "builtin": "gemv", "params": {"M": 8, "K": 16}}],
         "dtypes": ["int8"], "knobs": {"lanes": [1, 16], "mul": ["auto", "lut"]}, "objectives": ["cycles"],
         "constraints": {"dsp_max": 156, "bram_max": 208, "luts_max": 83640}, "search": {"sampler": "grid", "seed": 0}}
    spec = parse_spec(d)
    assert dict((k.name, k.values) for k in spec.knobs)["mul"] == ("auto", "lut")
    assert {(b.metric, b.limit) for b in spec.constraints} == {("dsp", 156), ("bram", 208), ("luts", 83640)}
    d["knobs"]["mul"] = ["booth"]
    with pytest.raises(SpecError, match=r"knobs.mul\[0\]: HardwareConfig.mul: expected 'auto', 'dsp' or 'lut', got 'booth'"):
        parse_spec(d)


def _mul_text(cells):
    """RTLIL of one module with `$mul` cells given as (name, a signal, a width, b signal, b width)."""
    body = "".join(f"  cell $mul {name}\n    parameter \\A_SIGNED 1\n    parameter \\A_WIDTH {aw}\n"
                   f"    parameter \\B_SIGNED 1\n    parameter \\B_WIDTH {bw}\n    parameter \\Y_WIDTH {aw + bw}\n"
                   f"    connect \\A {a}\n    connect \\B {b}\n    connect \\Y {name}_y\n  end\n"
                   for name, a, aw, b, bw in cells)
    return f"module \\top\n{body}end\n"


def test_lut_products_are_oriented_for_the_map():
    """A on the operand shared by more marked products (its multiples are computed once); with
    no sharing, the narrower operand on B (a row per two of its bits). Unmarked cells stay."""
    text = _mul_text([("$1", "\\w1", 8, "\\x", 6), ("$2", "\\w2", 8, "\\x", 6),
                      ("$3", "\\p", 4, "\\q", 12), ("$4", "\\r", 12, "\\s", 4), ("$5", "\\w3", 8, "\\x", 6)])
    marked = mark_lut_cells(text, {("\\top", n) for n in ("$1", "$2", "$3", "$4")})
    cells = {c.name: c for c in mul_cells(marked)}
    assert [(cells[n].a_signal, cells[n].a_width, cells[n].b_signal, cells[n].b_width) for n in ("$1", "$2", "$3", "$4")] \
        == [("\\x", 6, "\\w1", 8), ("\\x", 6, "\\w2", 8), ("\\q", 12, "\\p", 4), ("\\r", 12, "\\s", 4)]
    assert (cells["$5"].a_signal, cells["$5"].lut) == ("\\w3", False)
    assert all(cells[n].lut and cells[n].y_width == 14 for n in ("$1", "$2"))


@pytest.mark.slow
@pytest.mark.parametrize("level, module, more_ffs", [(3, "tinyhw_lut_mulreg_8x8_16s", 8 * 8),
                                                     (4, "tinyhw_lut_mulreg2_8x8_16s", 8 * 8)])
def test_lut_products_from_fanout_level_get_their_register_inside(tmp_path, level, module, more_ffs):
    """From fp_pipeline 3 each product is a Product module (with two registers from 4); `lut`
    rebuilds every one with the LUT multiplier around its registers (no `$mul` left), `dsp` and
    an `auto` within the budget leave the text as it is."""
    def gemv(mul):
        return compile_model(*designs.gemv_int8(8, 8).outputs, config=HardwareConfig(
            lanes=2, reduce_unroll=4, mul=mul, mem_read="sync", fp_pipeline=level))
    text = design_rtlil(gemv("lut"))
    cells = mul_cells(text)
    assert len(cells) == 8 and all(".product" in c.module for c in cells)
    assert plan(text, "ecp5", "dsp")[0] == plan(text, "ecp5", "auto")[0] == text
    rebuilt, script, n = plan(text, "ecp5", "lut")
    assert n == 8 and not mul_cells(rebuilt) and rebuilt.count(f"cell \\{module} ") == 8
    assert script.startswith("read_verilog tinyhw_lut_mulreg.v\n")
    assert set(map_files(rebuilt)) == {"tinyhw_lut_mul.v", "tinyhw_lut_mulreg.v"}
    lut, dsp = (synthesize(gemv(mul), "ecp5", workdir=tmp_path / mul) for mul in ("lut", "dsp"))
    assert lut.dsp == 0 and dsp.dsp == 8
    # ECP5's chain products (lut_multiplier.chain_module): level 3, a LUT product's register
    # after two of its tree's three levels holds two half sums of four rows (12 bits each) for a
    # DSP product's 16; level 4, those and its 16-bit result against a DSP product's two 16-bit
    # registers: 8 flip-flops more a product either way
    assert lut.cells["TRELLIS_FF"] == dsp.cells["TRELLIS_FF"] + more_ffs


@pytest.mark.slow
def test_a_design_for_a_named_part_fits_its_dsp_blocks(tmp_path):
    """64 int8 products for the LFE5U-25F: 28 in its DSP blocks, 36 in LUTs; the estimate
    counts the same split, and the delay model times the kernel past the blocks."""
    from dse.estimate import design_features
    from compiler.timing_model import FAR_DSP_SITE, LUT_SITE, product_sites
    design = compile_model(*designs.gemv_int8(8, 16).outputs,
                           config=HardwareConfig(lanes=8, reduce_unroll=8, device="LFE5U-25F"))
    area = synthesize(design, "ecp5", workdir=tmp_path / "25f")
    assert area.dsp == 28
    assert design_features(design, target="ecp5")["dsp_blocks"] == 28
    assert product_sites("auto", 64, design.config.dsp_blocks("ecp5")) == (LUT_SITE, FAR_DSP_SITE)
    wide = synthesize(compile_model(*designs.gemv_int8(8, 16).outputs, config=HardwareConfig(lanes=8, reduce_unroll=8)),
                      "ecp5", workdir=tmp_path / "85f")
    assert wide.dsp == 64 and wide.luts < area.luts
