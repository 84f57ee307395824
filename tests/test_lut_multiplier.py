"""The LUT multipliers of compiler/synth/lut_multiplier.py are `A * B`: proved with Yosys's SAT solver
for narrow shapes (every input), checked on chosen and random operands for wide ones (a SAT
proof of a 12x12 multiplier against another multiplier structure does not finish)."""
from __future__ import annotations

import json
import random
import re
import subprocess

import pytest

from compiler.tools import ToolError, yosys
from compiler.synth.lut_multiplier import Shape, map_file, module, takes
from compiler.synth.area import TARGETS
from helpers import needs_iverilog


def _sources(tmp_path, shape: Shape) -> None:
    sign = "signed " if shape.signed else ""

    def top(name):
        return (f"module {name}(input {sign}[{shape.a_width - 1}:0] a, input {sign}[{shape.b_width - 1}:0] b, "
                f"output [{shape.y_width - 1}:0] y); assign y = a * b; endmodule\n")
    (tmp_path / "gold.v").write_text(top("gold"))
    (tmp_path / "gate.v").write_text(top("gate"))
    (tmp_path / "map.v").write_text(map_file({shape}))


_MITER = ("read_verilog gold.v gate.v\nproc\ntechmap -map map.v gate\n"
          "select -assert-none gate/t:$mul\n"          # the map took the product
          "miter -equiv -flatten -make_assert gold gate miter\n")


@pytest.mark.slow
@pytest.mark.parametrize("shape", [
    Shape(7, 5, 12, True), Shape(5, 7, 12, True), Shape(6, 3, 9, False), Shape(3, 2, 5, True),
    Shape(2, 2, 4, True), Shape(6, 6, 8, True), Shape(5, 5, 7, False),
    Shape(5, 4, 16, True)],     # 5x4 to 16: sign-extended
    ids=lambda s: s.name)
def test_narrow_products_are_proved_equal(tmp_path, shape):
    _sources(tmp_path, shape)
    yosys(_MITER + "sat -verify -prove-asserts miter\n", cwd=tmp_path, timeout=300)


# 8x8 products are checked on all 65,536 operand pairs in Icarus Verilog instead of proved: as
# complete for a combinational module (every input, outputs compared with !==, so an x or z
# fails too), in about a second where each SAT proof took 20-45 s.
_MAP_GATE = ("read_verilog gate.v\nproc\ntechmap -map map.v gate\nselect -assert-none gate/t:$mul\n"
             "write_verilog -noattr mapped.v\n")
_EXHAUSTIVE_TB = """module tb;
  reg {sign}[{aw1}:0] a; reg {sign}[{bw1}:0] b;
  wire [{yw1}:0] want, got;
  gold g(.a(a), .b(b), .y(want));
  gate m(.a(a), .b(b), .y(got));
  integer i, bad;
  initial begin
    bad = 0;
    for (i = 0; i < {pairs}; i = i + 1) begin
      {{a, b}} = i; #1;
      if (got !== want) bad = bad + 1;
    end
    $display("pairs %0d differ %0d", i, bad);
  end
endmodule
"""


def _differ_exhaustively(tmp_path, shape: Shape, prepare: str = _MAP_GATE) -> int:
    """How many of the operand pairs the mapped `gate` multiplies differently from `gold`
    (`prepare`: the Yosys script that maps gate.v and writes mapped.v)."""
    yosys(prepare, cwd=tmp_path, timeout=300)
    pairs = 1 << (shape.a_width + shape.b_width)
    (tmp_path / "tb.v").write_text(_EXHAUSTIVE_TB.format(
        sign="signed " if shape.signed else "", aw1=shape.a_width - 1, bw1=shape.b_width - 1,
        yw1=shape.y_width - 1, pairs=pairs))
    subprocess.run(["iverilog", "-o", "tb.vvp", "tb.v", "gold.v", "mapped.v"], cwd=tmp_path, check=True,
                   capture_output=True, timeout=120)
    out = subprocess.run(["vvp", "-n", "tb.vvp"], cwd=tmp_path, check=True, capture_output=True, text=True,
                         timeout=300).stdout
    checked, differ = map(int, re.search(r"pairs (\d+) differ (\d+)", out).groups())
    assert checked == pairs
    return differ


@pytest.mark.slow
@needs_iverilog
@pytest.mark.parametrize("shape", [Shape(8, 8, 16, True), Shape(8, 8, 16, False), Shape(8, 8, 10, True)],
                         ids=lambda s: s.name)
def test_8x8_products_equal_on_every_operand_pair(tmp_path, shape):
    _sources(tmp_path, shape)
    assert _differ_exhaustively(tmp_path, shape) == 0


@pytest.mark.slow
@needs_iverilog
def test_the_exhaustive_check_can_fail(tmp_path):
    """The same check on a map with one wrong multiple counts the pairs it gets wrong."""
    shape = Shape(8, 8, 16, True)
    _sources(tmp_path, shape)
    text = (tmp_path / "map.v").read_text()
    assert "? n1q : n2" in text
    (tmp_path / "map.v").write_text(text.replace("? n1q : n2", "? n1q : m2"))
    assert _differ_exhaustively(tmp_path, shape) > 0


@pytest.mark.slow
def test_the_proof_can_fail(tmp_path):
    """The same proof on a map with one wrong multiple is refused."""
    shape = Shape(6, 6, 12, True)
    _sources(tmp_path, shape)
    text = (tmp_path / "map.v").read_text()
    assert "? n1q : n2" in text
    (tmp_path / "map.v").write_text(text.replace("? n1q : n2", "? n1q : m2"))
    with pytest.raises(ToolError):
        yosys(_MITER + "sat -verify -prove-asserts miter\n", cwd=tmp_path, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("shape", [Shape(8, 8, 16, True), Shape(8, 8, 16, False), Shape(24, 24, 48, False),
                                   Shape(11, 13, 24, True), Shape(16, 16, 32, True), Shape(18, 9, 20, True)],
                         ids=lambda s: s.name)
def test_wide_products_on_chosen_operands(tmp_path, shape):
    _sources(tmp_path, shape)
    rng = random.Random(shape.a_width * 100 + shape.b_width)

    def values(width):
        lo, hi = (-(1 << width - 1), (1 << width - 1) - 1) if shape.signed else (0, (1 << width) - 1)
        return [lo, hi, 0, 1, -1 if shape.signed else 2] + [rng.randint(lo, hi) for _ in range(10)]

    def lit(v, width):
        return f"{width}'d{v % (1 << width)}"
    checks = "".join(f"sat -verify -prove-asserts -set in_a {lit(a, shape.a_width)} -set in_b {lit(b, shape.b_width)} "
                     f"miter\n" for a, b in zip(values(shape.a_width), values(shape.b_width)[::-1]))
    yosys(_MITER + checks, cwd=tmp_path, timeout=300)


def test_shapes_the_map_leaves_to_booth():
    assert not takes(Shape(1, 8, 9, True)) and not takes(Shape(8, 1, 8, False)) and takes(Shape(2, 2, 4, True))
    assert map_file({Shape(1, 8, 9, True)}).count("module") == 0
    # one module per shape, each refusing every other shape
    text = map_file({Shape(8, 8, 16, True), Shape(24, 24, 48, False)})
    assert text.count("\nmodule ") == 2 and text.count("_TECHMAP_FAIL_") == 2


@pytest.mark.slow
def test_fewer_luts_than_booth_on_ecp5(tmp_path):
    """ECP5, 8x8 signed (the int8 GEMV's product), the compiler's flow (-nowidelut): 124 LUTs
    against Booth's 132 (Yosys 0.70; LUTs as synth.py counts them, a CCU2C as two). With wide
    LUTs Booth took 186 and the map 122: the margin was wider when Booth's LUT5s counted double."""
    shape = Shape(8, 8, 16, True)
    (tmp_path / "t.v").write_text(
        "module top(input clk, input signed [7:0] a, input signed [7:0] b, output reg [15:0] y);\n"
        "  wire [15:0] p = a * b; always @(posedge clk) y <= p;\nendmodule\n")
    (tmp_path / "map.v").write_text(module(shape))
    luts = {}
    for how, pre in (("booth", "booth t:$mul"), ("map", "techmap -map map.v t:$mul")):
        yosys(f"read_verilog t.v\nproc\n{pre}\n{TARGETS['ecp5']}\ntee -q -o {how}.json stat -json\n",
              cwd=tmp_path, log_name=f"{how}.log", timeout=300)
        cells = json.loads((tmp_path / f"{how}.json").read_text())["design"]["num_cells_by_type"]
        assert "MULT18X18D" not in cells
        luts[how] = cells["LUT4"] + 2 * cells.get("CCU2C", 0)
    assert luts["map"] < 0.97 * luts["booth"], luts


def _product_rtlil(a_shape, b_shape, y_shape, registers=1) -> str:
    """A design whose one submodule is a datapath Product (`y <= a * b` through `registers`), as
    Amaranth writes it."""
    from amaranth.back import rtlil
    from amaranth.hdl import Module
    from compiler.hw.datapath import PRODUCT_PREFIX, Product
    m = Module()
    m.submodules[f"{PRODUCT_PREFIX}0"] = p = Product(a_shape, b_shape, y_shape, registers)
    return rtlil.convert(m, name="top", ports=[p.a, p.b, p.y])


def test_a_product_in_pieces_with_one_piece_in_luts_keeps_its_registers_where_they_are():
    """A Product split for DSP blocks (target_mhz: a piece per DSP width, each registered and
    landed) whose pieces `mul: auto` puts one in a DSP block and one in LUTs: the module holds two
    products and five registers, so it is not rebuilt as one registered LUT product (it was, and
    synthesis stopped on "a LUT product takes 0 to 3 registers, not 5": the digits MLP folded to
    interval 32 at target_mhz 200); the marked piece keeps its `$mul` for the map."""
    from amaranth.back import rtlil
    from amaranth.hdl import Module, signed
    from compiler.hw.datapath import PRODUCT_PREFIX, Product
    from compiler.synth.multipliers import mark_lut_cells, mul_cells, pipeline_products
    m = Module()
    m.submodules[f"{PRODUCT_PREFIX}0"] = p = Product(signed(21), signed(15), signed(36), registers=3, split=True)
    text = rtlil.convert(m, name="top", ports=[p.a, p.b, p.y])
    cells = mul_cells(text)
    assert len(cells) == 2 and text.count("cell $dff") == 5
    marked = {(c.module, c.name) for c in cells if c.a_width < 18 or c.b_width < 15}
    assert len(marked) == 1
    gate = pipeline_products(mark_lut_cells(text, marked), marked)
    assert gate.count("cell $mul") == 2 and gate.count("cell $dff") == 5 and "tinyhw_lut_mulreg" not in gate


def _registered_equal(tmp_path, gold: str, mutate=lambda text: text) -> bool:
    """Yosys's proof (temporal induction, every register starting at 0) that the Product with its
    LUT multiplier rebuilt around its register is the Product."""
    from compiler.synth.multipliers import mark_lut_cells, map_files, mul_cells, pipeline_products
    marked = {(c.module, c.name) for c in mul_cells(gold)}
    gate = pipeline_products(mark_lut_cells(gold, marked), marked)
    assert "$mul" not in gate and "tinyhw_lut_mulreg" in gate        # rebuilt, not left to the map
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name, content in map_files(gate).items():
        (tmp_path / name).write_text(mutate(content))
    (tmp_path / "gold.il").write_text(gold.replace("\\top", "\\gold"))
    (tmp_path / "gate.il").write_text(gate.replace("\\top", "\\gate"))
    yosys("read_rtlil gold.il\nread_rtlil gate.il\nread_verilog tinyhw_lut_mulreg.v\nhierarchy\nproc\n"
          "flatten\nmiter -equiv -flatten -make_assert gold gate miter\nhierarchy -top miter\nopt_clean\n"
          "tee -o proof.txt sat -tempinduct -prove-asserts -set-init-zero -seq 2 -maxsteps 8 miter\n",
          cwd=tmp_path, timeout=600)
    return "Induction step proven: SUCCESS!" in (tmp_path / "proof.txt").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("shapes", [
    ("signed(5)", "signed(4)", "signed(9)"), ("unsigned(6)", "unsigned(3)", "unsigned(9)"),
    ("signed(4)", "signed(4)", "signed(12)"),          # y wider than the product: sign-extended
    ("signed(6)", "signed(6)", "signed(8)"),           # narrower (an interval that fits): truncated
    ("unsigned(3)", "unsigned(2)", "unsigned(5)"),     # one row, no adder tree: the rows registered
    # four rows, two levels, the register after the first: the int8 GEMV's 8x8 has this structure
    # (its own proof takes 140 s)
    ("signed(7)", "signed(7)", "signed(14)")],
    ids=lambda s: "_".join(s))
def test_registered_lut_products_are_the_product_register(tmp_path, shapes):
    from amaranth.hdl import signed, unsigned
    a, b, y = (eval(s, {"signed": signed, "unsigned": unsigned}) for s in shapes)
    assert _registered_equal(tmp_path, _product_rtlil(a, b, y))


@pytest.mark.slow
@pytest.mark.parametrize("shapes", [
    ("signed(5)", "signed(4)", "signed(9)"), ("unsigned(6)", "unsigned(3)", "unsigned(9)"),
    ("signed(4)", "signed(4)", "signed(12)"), ("unsigned(3)", "unsigned(2)", "unsigned(5)")],
    ids=lambda s: "_".join(s))
def test_lut_products_with_two_registers_are_the_product_registers(tmp_path, shapes):
    """fp_pipeline 4's Product (pipeline.product_registers): the multiples registered, then the
    middle of the adder tree."""
    from amaranth.hdl import signed, unsigned
    a, b, y = (eval(s, {"signed": signed, "unsigned": unsigned}) for s in shapes)
    gold = _product_rtlil(a, b, y, registers=2)
    assert _registered_equal(tmp_path, gold)
    # one register short (the multiples combinational) is refused
    assert not _registered_equal(tmp_path / "short", gold, lambda text: re.sub(
        r"reg (signed )?(\[\d+:0\]) (m1|bq|m3q|n1q) = 0;\n  always @\(posedge CLK\) \w+ <= (\w+);",
        r"wire \1\2 \3 = \4;", text))


@pytest.mark.slow
@pytest.mark.parametrize("shapes", [
    ("signed(5)", "signed(4)", "signed(9)"), ("unsigned(3)", "unsigned(2)", "unsigned(5)")],
    ids=lambda s: "_".join(s))
def test_lut_products_with_three_registers_are_the_product_registers(tmp_path, shapes):
    """target_mhz's Product (pipeline.Schedule.product_registers): the multiples, the middle of the
    tree and Y registered; the product with Y combinational (a register short) is refused."""
    from amaranth.hdl import signed, unsigned
    a, b, y = (eval(s, {"signed": signed, "unsigned": unsigned}) for s in shapes)
    gold = _product_rtlil(a, b, y, registers=3)
    assert _registered_equal(tmp_path, gold)
    assert not _registered_equal(tmp_path / "short", gold, lambda text: re.sub(
        r"  always @\(posedge CLK\) y_q <= (.*);\n  assign Y = y_q;", r"  assign Y = \1;", text))


@pytest.mark.slow
def test_the_registered_proof_can_fail(tmp_path):
    """A rebuilt product one of whose registered terms is inverted is refused."""
    from amaranth.hdl import signed
    assert not _registered_equal(tmp_path, _product_rtlil(signed(5), signed(4), signed(9)),
                                 lambda text: re.sub(r"_q <= (\w+);", r"_q <= ~\1;", text, count=1))


# ---------------------------------------------------------------------------------------------
# ECP5: partial products on carry chains (lut_multiplier.chain_module)

_CCU2C_MODEL = "tests/data/ecp5_ccu2c.v"     # the carry cell's function, as the proofs need it


def _chain_sources(tmp_path, shape: Shape) -> None:
    import shutil
    from pathlib import Path
    _sources(tmp_path, shape)
    (tmp_path / "map.v").write_text(map_file({shape}, "ecp5"))
    shutil.copy(Path(__file__).resolve().parent.parent / _CCU2C_MODEL, tmp_path / "ccu2c.v")


_CHAIN_MITER = ("read_verilog ccu2c.v gold.v gate.v\nproc\ntechmap -map map.v gate\n"
                "select -assert-none gate/t:$mul\nhierarchy\nflatten\n"
                "miter -equiv -flatten -make_assert gold gate miter\nhierarchy -top miter\nflatten\nopt -fast\n")


@pytest.mark.slow
@pytest.mark.parametrize("shape", [
    Shape(6, 4, 10, True), Shape(4, 6, 10, True), Shape(5, 3, 8, False), Shape(3, 3, 6, True),
    Shape(2, 2, 4, True), Shape(2, 3, 5, False), Shape(7, 5, 12, True), Shape(6, 6, 8, True),
    Shape(5, 5, 7, False)],
    ids=lambda s: s.name)
def test_ecp5_chain_products_are_proved_equal(tmp_path, shape):
    _chain_sources(tmp_path, shape)
    yosys(_CHAIN_MITER + "sat -verify -prove-asserts miter\n", cwd=tmp_path, timeout=300)


# as _MAP_GATE, the carry cells' model flattened in (8x8: every operand pair, as above; the
# proofs took 6-60 s each)
_MAP_CHAIN_GATE = ("read_verilog ccu2c.v gate.v\nproc\ntechmap -map map.v gate\nselect -assert-none gate/t:$mul\n"
                   "hierarchy -top gate\nflatten\nwrite_verilog -noattr mapped.v\n")


@pytest.mark.slow
@needs_iverilog
@pytest.mark.parametrize("shape", [Shape(8, 8, 16, True), Shape(8, 8, 16, False), Shape(8, 8, 10, True)],
                         ids=lambda s: s.name)
def test_ecp5_8x8_chain_products_equal_on_every_operand_pair(tmp_path, shape):
    _chain_sources(tmp_path, shape)
    assert _differ_exhaustively(tmp_path, shape, _MAP_CHAIN_GATE) == 0


@pytest.mark.slow
@needs_iverilog
def test_the_exhaustive_chain_check_can_fail(tmp_path):
    """The same check with one carry cell's function wrong (as test_the_chain_proof_can_fail)."""
    shape = Shape(8, 8, 16, True)
    _chain_sources(tmp_path, shape)
    text = (tmp_path / "map.v").read_text()
    assert "16'h8777" in text
    (tmp_path / "map.v").write_text(text.replace("16'h8777", "16'h7888", 1))
    assert _differ_exhaustively(tmp_path, shape, _MAP_CHAIN_GATE) > 0


@pytest.mark.slow
def test_the_chain_proof_can_fail(tmp_path):
    """The same proof with one carry cell's function wrong (an AND row added, not subtracted) is refused."""
    shape = Shape(6, 4, 10, True)
    _chain_sources(tmp_path, shape)
    text = (tmp_path / "map.v").read_text()
    assert "16'h8777" in text
    (tmp_path / "map.v").write_text(text.replace("16'h8777", "16'h7888", 1))
    with pytest.raises(ToolError):
        yosys(_CHAIN_MITER + "sat -verify -prove-asserts miter\n", cwd=tmp_path, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("shape, chain, radix4", [(Shape(8, 8, 16, True), 72, 124), (Shape(6, 4, 10, True), 24, 54),
                                                   (Shape(4, 4, 8, True), 18, 38)], ids=lambda s: getattr(s, "name", s))
def test_chain_products_cost_fewer_luts_on_ecp5(tmp_path, shape, chain, radix4):
    """LUT4 + 2 x CCU2C of one product alone (Yosys 0.70, the compiler's flow: -nowidelut): the
    chains against the radix-4 rows."""
    sign = "signed " if shape.signed else ""
    (tmp_path / "t.v").write_text(
        f"module top(input {sign}[{shape.a_width - 1}:0] a, input {sign}[{shape.b_width - 1}:0] b, "
        f"output [{shape.y_width - 1}:0] y); assign y = a * b; endmodule\n")
    luts = {}
    for how, target in (("chain", "ecp5"), ("radix4", "")):
        (tmp_path / f"{how}.v").write_text(map_file({shape}, target))
        yosys(f"read_verilog t.v\nproc\ntechmap -map {how}.v t:$mul\n{TARGETS['ecp5']}\n"
              f"tee -q -o {how}.json stat -json\n", cwd=tmp_path, log_name=f"{how}.log", timeout=300)
        cells = json.loads((tmp_path / f"{how}.json").read_text())["design"]["num_cells_by_type"]
        luts[how] = cells.get("LUT4", 0) + 2 * cells.get("CCU2C", 0)
    assert luts == {"chain": chain, "radix4": radix4}


def _registered_chain_equal(tmp_path, gold: str, mutate=lambda text: text) -> bool:
    """_registered_equal for the ECP5 map (carry cells read from their model)."""
    import shutil
    from pathlib import Path
    from compiler.synth.multipliers import mark_lut_cells, map_files, mul_cells, pipeline_products
    marked = {(c.module, c.name) for c in mul_cells(gold)}
    gate = pipeline_products(mark_lut_cells(gold, marked), marked)
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name, content in map_files(gate, "ecp5").items():
        (tmp_path / name).write_text(mutate(content))
    shutil.copy(Path(__file__).resolve().parent.parent / _CCU2C_MODEL, tmp_path / "ccu2c.v")
    (tmp_path / "gold.il").write_text(gold.replace("\\top", "\\gold"))
    (tmp_path / "gate.il").write_text(gate.replace("\\top", "\\gate"))
    yosys("read_verilog ccu2c.v\nread_rtlil gold.il\nread_rtlil gate.il\nread_verilog tinyhw_lut_mulreg.v\nhierarchy\n"
          "proc\nflatten\nmiter -equiv -flatten -make_assert gold gate miter\nhierarchy -top miter\nopt_clean\n"
          "tee -o proof.txt sat -tempinduct -prove-asserts -set-init-zero -seq 2 -maxsteps 8 miter\n",
          cwd=tmp_path, timeout=600)
    return "Induction step proven: SUCCESS!" in (tmp_path / "proof.txt").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("shapes, registers", [
    (("signed(5)", "signed(4)", "signed(9)"), 1), (("unsigned(6)", "unsigned(3)", "unsigned(9)"), 1),
    (("signed(6)", "signed(6)", "signed(8)"), 1), (("unsigned(3)", "unsigned(2)", "unsigned(5)"), 1),
    (("signed(5)", "signed(4)", "signed(9)"), 2), (("signed(4)", "signed(4)", "signed(12)"), 2),
    # three (target_mhz's products at 200 MHz): built as one until 2026-12-02, the proof refused it
    (("signed(5)", "signed(4)", "signed(9)"), 3), (("unsigned(3)", "unsigned(2)", "unsigned(5)"), 3),
    (("signed(6)", "signed(5)", "signed(11)"), 3)],
    ids=lambda s: "_".join(s) if isinstance(s, tuple) else str(s))
def test_registered_chain_products_are_the_product_registers(tmp_path, shapes, registers):
    from amaranth.hdl import signed, unsigned
    a, b, y = (eval(s, {"signed": signed, "unsigned": unsigned}) for s in shapes)
    gold = _product_rtlil(a, b, y, registers)
    assert _registered_chain_equal(tmp_path, gold)
    assert not _registered_chain_equal(tmp_path / "bad", gold,
                                       lambda text: re.sub(r"_q <= (\w+);", r"_q <= ~\1;", text, count=1))
