"""Carry chains' unread carry-outs disconnected before nextpnr-ecp5.

Yosys's synth_ecp5 maps an adder onto a chain of CCU2C cells and connects the last cell's
COUT to a wire whether anything reads it or not. nextpnr-ecp5's packer ends a chain whose last
COUT is connected with a CCU2C of its own that brings the carry out into the fabric (a feed-out,
`split_carry_chain` in its ecp5/pack.cc): two LUT sites (TRELLIS_COMB) that compute nothing
when no cell reads that carry. A design of many short adders pays it on every one: the jet-shaped
MLP at w3a4 with constant weights (docs/area.md) has 848 chains, none of whose carry-outs is
read, 1,696 of its 10,485 sites.

This runs on the JSON netlist before nextpnr (compiler/pnr/timing.py), as dsp_registers and
bram_registers do: a CCU2C's COUT that no cell and no module output reads becomes unconnected
("x"). Nothing it drove is lost (nothing read it), so the design, its simulation and its
synthesis counts are unchanged. A carry-out read by the next cell of its chain (CIN) or by
the fabric stays as it is.
"""
from __future__ import annotations

from .dsp_registers import Netlist


def disconnect_unread(module: dict) -> int:
    """Set every CCU2C COUT of `module` (a Yosys JSON module, changed in place) that nothing
    reads to "x". Returns how many were disconnected."""
    net = Netlist(module)
    done = 0
    for cell in module["cells"].values():
        if cell["type"] != "CCU2C":
            continue
        bit = cell["connections"].get("COUT", ["x"])[0]
        if not isinstance(bit, str) and not net.loads.get(bit):
            cell["connections"]["COUT"] = ["x"]
            done += 1
    return done
