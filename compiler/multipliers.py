"""Multiplier style (`HardwareConfig.mul`): which multipliers Yosys maps to DSP blocks and which
it builds from LUTs.

Yosys decides DSP mapping per family in its synth script: `synth_ecp5` / `synth_ice40 -dsp` /
`synth_xilinx` run `techmap -map +/mul2dsp.v` on every `$mul` cell, which cuts a product into
DSP-sized pieces (ECP5 MULT18X18D: 18x18; iCE40 SB_MAC16: 16x16, products under 11 bits stay
in logic) and leaves pieces narrower than 2 bits in LUTs. The only switch is all or nothing
(`-nodsp`; synth_ice40 without `-dsp`). So the multipliers that must be LUTs are taken out of
mul2dsp's reach *before* the family script runs, with Yosys's own `booth` pass (a radix-4 Booth
multiplier in gates, what synth_lattice uses for the DSP-less MachXO3): their `$mul` cells get
the attribute `tinyhw_mul "lut"` in the RTLIL, and the script runs `proc; booth
a:tinyhw_mul=lut` first (`proc` because booth skips modules that still hold processes). On an
int8 GEMV 8x16 with 4 products, a Booth 8x8 product cost ~190 LUT4s, `-nodsp`'s `$macc` mapping
~310 (Yosys 0.70, ECP5).

    mul="dsp"   every product goes to mul2dsp (the script as it always was).
    mul="lut"   every `$mul` is marked (the family script stays as it is: nothing is left for
                mul2dsp).
    mul="auto"  products go to DSPs while the family's largest device has DSPs left for them
                (`DSP_BUDGET`, from compiler.pnr.DEVICES: LFE5U-85F 156 MULT18X18D, iCE40UP5K 8
                SB_MAC16), those saving the most LUTs per DSP first; the rest are marked.
                With no device list (Xilinx), auto is dsp. A design within the budget gets
                exactly the "dsp" script, so its synthesis (and cache entry) is unchanged.

DSP pieces per product (`dsp_cost`) follow mul2dsp's cuts from the cell's operand widths before
`wreduce`, so the count can only be high: auto never plans past the budget.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .pnr import DEVICES

STYLES = ("auto", "dsp", "lut")
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

DSP_BUDGET = {
    "ecp5": max(d.capacity["MULT18X18D"] for d in DEVICES["ecp5"]),
    "ice40": max(d.capacity["ICESTORM_DSP"] for d in DEVICES["ice40"]),
}
"""DSP blocks on the family's largest device, the most `auto` plans for."""


@dataclass(frozen=True)
class MulCell:
    """A `$mul` cell of the RTLIL: where it is and its operand widths."""
    module: str
    name: str
    a_width: int
    b_width: int
    y_width: int


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
_PARAM = re.compile(r"^\s*parameter \\([AB]_WIDTH|Y_WIDTH) (\d+)$")


def mul_cells(rtlil_text: str) -> list[MulCell]:
    """Every `$mul` cell of the RTLIL text, in the order it appears."""
    cells, module, current, params = [], "", None, {}
    for line in rtlil_text.splitlines():
        if m := _MODULE.match(line):
            module = m.group(1)
        elif m := _MUL.match(line):
            current, params = m.group(2), {}
        elif current is not None and (m := _PARAM.match(line)):
            params[m.group(1)] = int(m.group(2))
        elif current is not None and line.strip() == "end":
            cells.append(MulCell(module, current, params["A_WIDTH"], params["B_WIDTH"], params["Y_WIDTH"]))
            current = None
    return cells


def lut_cells(cells: list[MulCell], target: str, style: str) -> set[tuple[str, str]]:
    """(module, cell) of the products to build in LUTs for multiplier `style` on `target`."""
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
    left, luts = DSP_BUDGET[target], set()
    for i in ranked:
        if costs[i] <= left:
            left -= costs[i]
        else:
            luts.add((cells[i].module, cells[i].name))
    return luts


def mark_lut_cells(rtlil_text: str, marked: set[tuple[str, str]]) -> str:
    """The RTLIL text with `attribute \\tinyhw_mul "lut"` on the marked `$mul` cells."""
    if not marked:
        return rtlil_text
    out, module = [], ""
    for line in rtlil_text.splitlines(keepends=True):
        if m := _MODULE.match(line.rstrip("\n")):
            module = m.group(1)
        elif (m := _MUL.match(line.rstrip("\n"))) and (module, m.group(2)) in marked:
            out.append(f'{m.group(1)}attribute \\{LUT_ATTRIBUTE} "lut"\n')
        out.append(line)
    return "".join(out)


def plan(rtlil_text: str, target: str, style: str) -> tuple[str, str, int]:
    """(RTLIL text with the LUT products marked, Yosys commands to run before the family
    script, how many products go to LUTs) for multiplier `style` on `target`."""
    marked = lut_cells(mul_cells(rtlil_text), target, style)
    if not marked:
        return rtlil_text, "", 0
    return mark_lut_cells(rtlil_text, marked), f"proc\nbooth a:{LUT_ATTRIBUTE}=lut\n", len(marked)
