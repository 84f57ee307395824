"""Read-address registers of ECP5 LUT RAMs given a twin per few of the RAMs they address.

A memory in LUT RAM is a column of TRELLIS_DPR16X4 cells, 16 words of 4 bits each, that share
one read address: a ring bank of 128-bit words is 32 of them, and one flip-flop per address bit
drives all 32 RAD pins. The placer spreads those cells over the area of the datapath that reads
them, so the route from the address register to the farthest was the critical path of AD08 at
`target_mhz: 200` (2026-12-02, seed 1: kernel 1's `b4_raddr` -> a LUT RAM -> its read-data
register, 8.6 ns, 7.6 of it routing). This gives such a register a twin per GROUP of the cells
it addresses (dsp_registers.split_fanout: same input, clock and reset, a plain flip-flop only), as
a synthesis tool's max-fanout duplication would: each twin can sit by its cells, and the fan-out
moves to the twins' inputs, one register earlier, whose paths (an address counter) are short.

It runs on the synthesised netlist before nextpnr, with the other packers (timing.prepare); the
design, its simulation and its synthesis counts are unchanged, and compiler/pnr/gate_sim.py
simulates the netlist after it.
"""
from __future__ import annotations

from .dsp_registers import split_fanout

GROUP = 8
"""LUT RAM cells one read-address flip-flop drives at most (32 data bits of a ring bank)."""


def _read_address(cell_type: str, pin: str) -> bool:
    return cell_type == "TRELLIS_DPR16X4" and pin.startswith("RAD")


def split(module: dict, group: int = GROUP) -> int:
    """Twins for the read-address flip-flops of `module` (a Yosys JSON module, changed in place)
    that drive more than `group` LUT RAM cells. Returns the twins added."""
    return split_fanout(module, group, load=_read_address, tag="rad")
