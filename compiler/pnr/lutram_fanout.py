"""The inputs of ECP5 LUT RAMs (addresses, write enable, write data) given a driver per few cells.

A memory in LUT RAM is a column of TRELLIS_DPR16X4 cells, 16 words of 4 bits each, that share
one read address, one write address and one write enable: a ring bank of 128-bit words is 32 of
them, and one flip-flop per address bit drives all 32 RAD pins. The placer spreads those cells
over the area of the datapath that reads them, so the route from the address register to the
farthest was the critical path of AD08 at `target_mhz: 200` (2026-12-02, seed 1: kernel 1's
`b4_raddr` -> a LUT RAM -> its read-data register, 8.6 ns, 7.6 of it routing). This gives such a
register a twin per GROUP of the cells it drives (dsp_registers.split_fanout: same input, clock
and reset, a plain flip-flop only), as a synthesis tool's max-fanout duplication would: each twin
can sit by its cells, and the fan-out moves to the twins' inputs, one register earlier, whose
paths (an address counter) are short.

The write side is the same: the write is taken at the clock edge, so its address (WAD), enable
(WRE) and data (DI: a word broadcast to several memories) are register-to-cell paths of one
route. The KWS shape at w4a6 (`target_mhz: 92`) has write-address and write-enable registers of
112 cells each; with the read addresses split (2026-12-03), seed 1's critical path was a write
address -> a LUT RAM, 11.2 ns, 10.2 of it routing.

A read address that is a LUT's output gets the same: a memory written a word at a time reads
the word a partial write needs through its kernel's read port, whose address is then a
multiplexer between the kernel's address register and the write's (hw/subword.py), one LUT4 a
bit driving every cell of the word. The KWS shape at w4a6 (`target_mhz: 92`), a 448-bit word in
112 cells: the write address -> that LUT -> the farthest cell, 3.7 + 6.2 ns of routing, its
critical path at all three nextpnr seeds. Each LUT gets a twin per GROUP of its cells (same
inputs and truth table), so the wide net becomes narrow ones from twins by their cells, and
replicas.regroup deals the cells among the twins by where they were placed.

It runs on the synthesised netlist before nextpnr, with the other packers (timing.prepare); the
design, its simulation and its synthesis counts are unchanged, and compiler/pnr/gate_sim.py
simulates the netlist after it.
"""
from __future__ import annotations

from .dsp_registers import plain_output, split_fanout

GROUP = 8
"""LUT RAM cells one flip-flop or LUT drives at most (32 data bits of a ring bank)."""

PINS = ("RAD", "WAD", "WRE", "DI")
"""The TRELLIS_DPR16X4 inputs split: read address, write address, write enable, write data (the
write clock WCK is the clock network's)."""


def _lutram_input(cell_type: str, pin: str) -> bool:
    return cell_type == "TRELLIS_DPR16X4" and pin.startswith(PINS)


def _register_or_lut(cell: dict) -> str | None:
    return "Z" if cell["type"] == "LUT4" else plain_output(cell)


def split(module: dict, group: int = GROUP) -> int:
    """Twins for the flip-flops and LUTs of `module` (a Yosys JSON module, changed in place) that
    drive the PINS of more than `group` LUT RAM cells. Returns the twins added."""
    return split_fanout(module, group, load=_lutram_input, tag="ram", source=_register_or_lut)
