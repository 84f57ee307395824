"""Flip-flops after ECP5 block RAMs moved into the block RAMs' own output registers.

A DP16KD has an output register per port (REGMODE_A / REGMODE_B = "OUTREG"). Yosys's
synth_ecp5 maps every memory read port to the unregistered mode and keeps the register that
follows it in the fabric; without its output register a DP16KD's read data appears 5.8 ns after
the clock edge (nextpnr's timing for speed grade 6), so a fabric register a few tiles away
leaves no time for anything else: on the int8 GEMV 16x16 at fp_pipeline 3 (reset-less data
registers) the critical path was exactly that, 5.8 ns clock-to-out and 6.8 ns of routing to
the read-data register.

This runs on the synthesised JSON netlist before nextpnr (compiler/pnr/timing.py), as a packer would,
next to compiler/pnr/dsp_registers.py: the design, its simulation and its synthesis counts are
unchanged. A read port's output register is one group (one REGMODE, one clock, clock enable
and reset line), so a port moves only when every used data-out bit drives exactly one load,
the DI of a plain flip-flop (dsp_registers.is_plain) with no reset, clocked by the port's
clock, and the port's reset input is constant 0. A data bit that also drives anything else
(a twin of its register, a multiplexer) keeps the whole port as it is. In the 36-bit
pseudo-dual-port mode (DATA_WIDTH_A 36) both DOA and DOB belong to the read port B, whose
register REGMODE_A and REGMODE_B both set (as nextpnr's own PDPW16KD packing does).
"""
from __future__ import annotations

from .dsp_registers import Netlist, is_plain


def _width(value) -> int:
    s = str(value)
    return int(s, 2) if s and set(s) <= {"0", "1"} and len(s) > 8 else int(s)


def _read_ports(params: dict) -> list[tuple[str, list[str], list[str]]]:
    """(clock side, data-out pin prefixes, REGMODE parameters) of each port that can read."""
    if _width(params.get("DATA_WIDTH_A", 18)) == 36:
        return [("B", ["DOA", "DOB"], ["REGMODE_A", "REGMODE_B"])]
    return [("A", ["DOA"], ["REGMODE_A"]), ("B", ["DOB"], ["REGMODE_B"])]


def absorb_outputs(module: dict) -> int:
    """Move plain flip-flops into the output registers of every DP16KD of `module` (a Yosys
    JSON module, changed in place) where the rules of the module docstring allow. Returns the
    flip-flops removed."""
    net = Netlist(module)
    cells = net.cells
    removed = 0
    for name in sorted(n for n, c in cells.items() if c["type"] == "DP16KD"):
        ram = cells[name]
        params, conn, dirs = ram["parameters"], ram["connections"], ram["port_directions"]
        for side, prefixes, regmodes in _read_ports(params):
            if any(params.get(r, "NOREG") != "NOREG" for r in regmodes) or conn.get(f"RST{side}", ["0"]) != ["0"]:
                continue
            moves = []
            for pin in (f"{p}{i}" for p in prefixes for i in range(18)):
                bit = conn.get(pin, ["x"])[0]
                loads = net.loads_of(bit)
                if not loads:
                    continue
                (ff, port), = loads if len(loads) == 1 else ((None, None),)
                if port != "DI" or not is_plain(cells[ff]) or net.ff(ff, "LSR") != "0" \
                        or net.ff(ff, "CLK") != conn[f"CLK{side}"][0]:
                    moves = None
                    break
                moves.append((pin, ff))
            if not moves:
                continue
            for pin, ff in moves:
                q = net.ff(ff, "Q")
                net.rewire_input(ff, "DI", "0")
                del cells[ff]
                conn[pin] = [q]
                net.driver[q] = (name, pin)
            params.update({r: "OUTREG" for r in regmodes})
            conn[f"OCE{side}"], dirs[f"OCE{side}"] = ["1"], "input"
            removed += len(moves)
    return removed
