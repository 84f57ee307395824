"""Multiplier style (`HardwareConfig.mul`): which multipliers Yosys maps to DSP blocks and which
it builds from LUTs.

Yosys decides DSP mapping per family in its synth script: `synth_ecp5` / `synth_ice40 -dsp` /
`synth_xilinx` run `techmap -map +/mul2dsp.v` on every `$mul` cell, which cuts a product into
DSP-sized pieces (ECP5 MULT18X18D: 18x18; iCE40 SB_MAC16: 16x16, products under 11 bits stay
in logic) and leaves pieces narrower than 2 bits in LUTs. The only switch is all or nothing
(`-nodsp`; synth_ice40 without `-dsp`). So the multipliers that must be LUTs are taken out of
mul2dsp's reach *before* the family script runs: their `$mul` cells get the attribute
`tinyhw_mul "lut"` in the RTLIL, and the script first runs `proc`, then `techmap` with the
multipliers of compiler/synth/lut_multiplier.py (4:1 multiplexers of precomputed multiples added on
carry chains; the map file is written next to the design, one module per product shape of it),
then Yosys's own `booth` pass (a radix-4 Booth multiplier in gates, what synth_lattice uses for
the DSP-less MachXO3) for any marked product the map does not take. ECP5, 8x8 signed: 122 LUTs
against Booth's 186 and `-nodsp`'s `$macc` mapping's ~310 (Yosys 0.70); 24x24 unsigned (an fp32
mantissa): 906 against 1,697.

    mul="dsp"   every product goes to mul2dsp (the family script unchanged).
    mul="lut"   every `$mul` is marked (the family script stays as it is: nothing is left for
                mul2dsp).
    mul="auto"  products go to DSPs while the part has DSPs left for them: the part the config
                names (`device`: LFE5U-25F 28 MULT18X18D), else the family's largest
                (`DSP_BUDGET`, from compiler.devices.DEVICES: LFE5U-85F 156 MULT18X18D, iCE40UP5K 8
                SB_MAC16), those saving the most LUTs per DSP first; the rest are marked.
                With no device list (Xilinx), auto is dsp. A design within the budget gets
                exactly the "dsp" script, so its synthesis (and cache entry) is unchanged.

DSP pieces per product (`dsp_cost`) follow mul2dsp's cuts from the cell's operand widths before
`wreduce`, so the count can only be high: auto never plans past the budget.
"""
from __future__ import annotations

import collections
import re
from dataclasses import dataclass

from . import lut_multiplier
from ..devices import DEVICES, dsp_blocks
from .units import split_modules

STYLES = ("auto", "dsp", "lut")

PRODUCT_PREFIX = "product"
"""hw/datapath.py names its Product submodules `product<N>` (pipeline_products finds them by it)."""
LUT_ATTRIBUTE = "tinyhw_mul"


@dataclass(frozen=True)
class DspShape:
    """mul2dsp's parameters in a family's synth script."""
    max_a: int
    max_b: int
    min_a: int
    min_b: int
    min_y: int


DSP_SHAPES = {
    "ecp5": DspShape(max_a=18, max_b=18, min_a=2, min_b=2, min_y=0),
    "ice40": DspShape(max_a=16, max_b=16, min_a=2, min_b=2, min_y=11),
}

DSP_BUDGET = {family: dsp_blocks(family) for family in DEVICES}
"""DSP blocks on the family's largest device, the most `auto` plans for when no part is named
(HardwareConfig.dsp_blocks gives a named part's)."""


@dataclass(frozen=True)
class MulCell:
    """A `$mul` cell of the RTLIL: where it is and its operand widths."""
    module: str
    name: str
    a_width: int
    b_width: int
    y_width: int
    signed: bool = False
    lut: bool = False           # marked `tinyhw_mul "lut"`
    a_signal: str = ""          # what drives A and B, as the RTLIL writes it
    b_signal: str = ""

    @property
    def shape(self) -> lut_multiplier.Shape:
        return lut_multiplier.Shape(self.a_width, self.b_width, self.y_width, self.signed)


def _pieces(width: int, most: int, least: int) -> list[int]:
    """The widths mul2dsp cuts an operand into: `most` bits each, a remainder under `least`
    bits stays in logic."""
    pieces = [most] * (width // most)
    if width % most >= least:
        pieces.append(width % most)
    return pieces


def dsp_cost(cell: MulCell, target: str) -> int:
    """DSP blocks mul2dsp spends on `cell` for `target` (0: it stays in logic anyway)."""
    shape = DSP_SHAPES[target]
    a, b = max(cell.a_width, cell.b_width), min(cell.a_width, cell.b_width)  # mul2dsp puts the wider on A
    return sum(1 for pa in _pieces(a, shape.max_a, shape.min_a) for pb in _pieces(b, shape.max_b, shape.min_b)
               if pa + pb >= shape.min_y)


_MODULE = re.compile(r"^module (\S+)$")
_MUL = re.compile(r"^(\s*)cell \$mul (\S+)$")
_PARAM = re.compile(r"^\s*parameter \\([AB]_WIDTH|Y_WIDTH|[AB]_SIGNED) (\d+)$")
_LUT_MARK = f'attribute \\{LUT_ATTRIBUTE} "lut"'
_CONNECT = re.compile(r"^\s*connect \\([AB]) (.+)$")


def mul_cells(rtlil_text: str) -> list[MulCell]:
    """Every `$mul` cell of the RTLIL text, in the order it appears."""
    cells, module, current, params, marked, lut = [], "", None, {}, False, False
    for line in rtlil_text.splitlines():
        if m := _MODULE.match(line):
            module = m.group(1)
        elif m := _MUL.match(line):
            current, params, lut = m.group(2), {}, marked
        elif current is not None and (m := _PARAM.match(line)):
            params[m.group(1)] = int(m.group(2))
        elif current is not None and (m := _CONNECT.match(line)):
            params[m.group(1)] = m.group(2)
        elif current is not None and line.strip() == "end":
            signed = bool(params.get("A_SIGNED", 0) and params.get("B_SIGNED", 0))
            cells.append(MulCell(module, current, params["A_WIDTH"], params["B_WIDTH"], params["Y_WIDTH"],
                                 signed, lut, params.get("A", ""), params.get("B", "")))
            current = None
        marked = line.strip() == _LUT_MARK
    return cells


def lut_cells(cells: list[MulCell], target: str, style: str, budget: int | None = None) -> set[tuple[str, str]]:
    """(module, cell) of the products to build in LUTs for multiplier `style` on `target`, whose
    `auto` fills `budget` DSP blocks (default: the family's largest part's, DSP_BUDGET)."""
    if style not in STYLES:
        raise ValueError(f"multiplier style: expected one of {', '.join(STYLES)}, got {style!r}")
    if style == "lut":
        return {(c.module, c.name) for c in cells}
    if style == "dsp" or target not in DSP_BUDGET:
        return set()
    # A Booth product costs LUTs in proportion to a_width * b_width: the DSPs go where they
    # save the most LUTs each. sorted() is stable, so ties keep the RTLIL's order.
    costs = [dsp_cost(c, target) for c in cells]
    ranked = sorted(range(len(cells)), key=lambda i: -cells[i].a_width * cells[i].b_width / max(costs[i], 1))
    left, luts = DSP_BUDGET[target] if budget is None else budget, set()
    for i in ranked:
        if costs[i] <= left:
            left -= costs[i]
        else:
            luts.add((cells[i].module, cells[i].name))
    return luts


def mark_lut_cells(rtlil_text: str, marked: set[tuple[str, str]]) -> str:
    """The RTLIL text with `attribute \\tinyhw_mul "lut"` on the marked `$mul` cells. A marked
    product whose B operand feeds more marked products than its A, or as many and is wider,
    gets its operands swapped (a product is commutative): the LUT multiplier precomputes
    multiples of A, which Yosys then shares between the products of a broadcast operand (one x
    for every lane of a GEMV), and has a row per two bits of B."""
    if not marked:
        return rtlil_text
    cells = [c for c in mul_cells(rtlil_text) if (c.module, c.name) in marked]
    fanout = collections.Counter((c.module, sig) for c in cells for sig in (c.a_signal, c.b_signal))
    # A Product module's operands are ordered already (Datapath.product): its fan-out is its parent's.
    swap = {(c.module, c.name) for c in cells if not _PRODUCT.search(c.module)
            and (fanout[c.module, c.b_signal], c.b_width) > (fanout[c.module, c.a_signal], c.a_width)}
    out, module, swapping = [], "", False
    for line in rtlil_text.splitlines(keepends=True):
        if m := _MODULE.match(line.rstrip("\n")):
            module = m.group(1)
        elif (m := _MUL.match(line.rstrip("\n"))) and (module, m.group(2)) in marked:
            out.append(f"{m.group(1)}{_LUT_MARK}\n")
            swapping = (module, m.group(2)) in swap
        elif swapping and (_PARAM.match(line) or _CONNECT.match(line)):
            line = re.sub(r"\\([AB])(_| )", lambda g: f"\\{'B' if g.group(1) == 'A' else 'A'}{g.group(2)}", line, count=1)
        elif swapping and line.strip() == "end":
            swapping = False
        out.append(line)
    return "".join(out)


_PRODUCT = re.compile(rf"\.{PRODUCT_PREFIX}\d+$")


def pipeline_products(rtlil_text: str, marked: set[tuple[str, str]]) -> str:
    """The RTLIL text with each marked product of a Product module (compiler.hw.datapath: `y <=
    a * b` through one or two registers) rebuilt as the LUT multiplier with its registers inside
    (lut_multiplier.module with `registers`): same ports, same function cycle for cycle, the
    registers between parts of the multiplier instead of after it. A shape the map does not take
    keeps its `$mul`."""
    head, modules = split_modules(rtlil_text)
    out = [head]
    for mod in modules:
        every = mul_cells("".join(mod.lines))
        cells = [c for c in every if (mod.name, c.name) in marked]
        # one product alone in its module: a product in pieces (a wide one split for DSP blocks,
        # hw/datapath.py) has a register per piece and its landings, and only some pieces may be
        # marked (the digits MLP folded to interval 32 at target_mhz 200: 5 registers counted)
        cell = cells[0] if len(cells) == 1 and len(every) == 1 and _PRODUCT.search(mod.name) else None
        if cell is None or not lut_multiplier.takes(cell.shape) or not _pure_signedness(mod.lines):
            out += mod.lines
            continue
        # the Product's registers (its `$dff` cells), which the rebuilt multiplier holds inside
        registers = sum(1 for line in mod.lines if line.split()[:2] == ["cell", "$dff"])
        ports = mod.ports
        y_width = int(re.search(r"width (\d+)", ports["\\y"].group(1)).group(1))
        declarations = {decl.string for decl in ports.values()}
        # the module's attributes, its header and its ports (without their attribute lines:
        # `init` on y would be false on a wire no flip-flop drives); the body is the cell below
        body = [line for line in mod.lines
                if line.startswith(("attribute", "module")) or line.rstrip("\n") in declarations]
        full = "$tinyhw_product_y"
        if y_width <= cell.y_width:
            y = f"{full} [{y_width - 1}:0]"
        else:
            fill = f"{full} [{cell.y_width - 1}]" if cell.signed else "1'0"
            y = "{ " + " ".join([fill] * (y_width - cell.y_width)) + f" {full} }}"
        body += [f"  wire width {cell.y_width} {full}\n",
                 f"  cell \\{cell.shape.registered_name(registers)} $tinyhw_product\n",
                 f"    connect \\A {cell.a_signal}\n", f"    connect \\B {cell.b_signal}\n",
                 "    connect \\CLK \\clk\n",
                 f"    connect \\Y {full}\n", "  end\n", f"  connect \\y {y}\n", "end\n"]
        out += body
    return "".join(out)


def _pure_signedness(lines) -> bool:
    """A $mul whose A and B are both signed or both unsigned (the map's condition)."""
    text = "".join(lines)
    return ("A_SIGNED 1" in text) == ("B_SIGNED 1" in text)


def plan(rtlil_text: str, target: str, style: str, budget: int | None = None) -> tuple[str, str, int]:
    """(RTLIL text with the LUT products marked, Yosys commands to run before the family
    script, how many products go to LUTs) for multiplier `style` on `target` (`budget`: lut_cells')."""
    marked = lut_cells(mul_cells(rtlil_text), target, style, budget)
    if not marked:
        return rtlil_text, "", 0
    text = pipeline_products(mark_lut_cells(rtlil_text, marked), marked)
    return text, lut_script(text), len(marked)


LUT_SCRIPT = (f"proc\ntechmap -map {lut_multiplier.MAP_FILE} a:{LUT_ATTRIBUTE}=lut\n"
              f"booth a:{LUT_ATTRIBUTE}=lut\n")
"""What runs before the family script when products are marked: the map, then Booth for the
shapes the map leaves (techmap drops the attribute with the cell it replaces)."""


def lut_script(rtlil_text: str) -> str:
    """LUT_SCRIPT, after reading the registered products' modules if the text has any."""
    registered = bool(lut_multiplier.REGISTERED.search(rtlil_text))
    return (f"read_verilog {lut_multiplier.REGISTERED_FILE}\n" if registered else "") + LUT_SCRIPT


def uses_luts(rtlil_text: str) -> bool:
    """Whether the RTLIL text has marked products or registered LUT products (needs lut_script)."""
    return f"attribute \\{LUT_ATTRIBUTE} " in rtlil_text or bool(lut_multiplier.REGISTERED.search(rtlil_text))


def map_files(rtlil_text: str, target: str = "") -> dict[str, str]:
    """The files lut_script reads, for the products marked in this RTLIL text ({} if none), built
    for `target` (lut_multiplier.module: ECP5's carry chains take partial products)."""
    shapes = {c.shape for c in mul_cells(rtlil_text) if c.lut}
    registered = {lut_multiplier.registered_of(m) for m in lut_multiplier.REGISTERED.finditer(rtlil_text)}
    if not shapes and not registered:
        return {}
    files = {lut_multiplier.MAP_FILE: lut_multiplier.map_file(shapes, target)}
    if registered:
        files[lut_multiplier.REGISTERED_FILE] = lut_multiplier.registered_file(registered, target)
    return files
