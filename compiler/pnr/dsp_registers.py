"""Flip-flops around ECP5 multipliers moved into the multipliers' own registers.

A MULT18X18D has registers on its A and B inputs and on its P output (REG_INPUTA_CLK,
REG_INPUTB_CLK, REG_OUTPUT_CLK). Yosys's synth_ecp5 never uses them (its DSP register folding
is for other Lattice families), so from fp_pipeline 2 a product's register, and from 3 its
operand copies, are fabric flip-flops: the placer puts them near the lane's logic, and the
routes from them into the DSP column and back cost what the multiplier costs. On the int8 GEMV
128x784 at 16x16 (fp_pipeline 3) that was the critical path: operand copy, 6.1 ns of routing,
the multiplier (3.9 ns), 5.5 ns of routing, product register: 16.1 ns. Inside the DSP those two
routes are gone and the paths into and out of it end and start at registers.

This runs on the synthesised JSON netlist before nextpnr (compiler/pnr/timing.py), as a packer would:
the design, its simulation and its synthesis counts are unchanged; nextpnr's utilisation shows
the fabric flip-flops that moved. A register group (all of A, all of B, all of P: one parameter
clocks each) moves only when every flip-flop in it is *plain*: one clock, no clock enable, a
synchronous reset to 0 or none (a DSP register's RSTn line takes the reset net), and
  * A and B: every bit not a constant comes from such a flip-flop's Q; both move or neither
    (nextpnr's DSP timing modes are no registers, both inputs, the output, or all);
  * P: every used bit drives exactly one load, such a flip-flop's DI.
An input flip-flop whose Q feeds anything else stays for those loads (the DSP holds a second
copy of it); the others, and every output flip-flop, are removed.

Moving an operand copy into the DSP takes the copy's fan-out tree down a level: the register
before it (the loaded GEMV x element, one per unrolled product) now drives the input register
of every lane's DSP, spread over the die's DSP rows. On the int8 GEMV 16x16 (fp_pipeline 3)
one such flip-flop drove 10 DSPs and its route to the farthest was the critical path (13.6 ns
of routing). `split_fanout` then gives such a flip-flop a twin per DSP_GROUP of the DSPs it
drives (same input, clock and reset), as a synthesis tool's max-fanout duplication would: the
placer puts each twin by its DSPs, and the path from the register before (block RAM data)
fans out to the twins instead.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

DSP_GROUP = 4
"""Multiplier input registers one flip-flop drives at most after split_fanout. On the int8 GEMV
16x16 (fp_pipeline 3, router2, seed 1): 4 gave 72.5 MHz against 70.2 without twins (failing
endpoints at 100 MHz 260 against 465; the critical path left the DSPs for a LUT multiplier);
2 (a twin per DSP slice) packed the DSP rows so tightly that router2 diverged (2,400
overused wires after 97 iterations)."""

_PLAIN = {"CLKMUX": "CLK", "REGSET": "RESET", "LSRMUX": "LSR"}
_RST_LINES = ("RST0", "RST1", "RST2", "RST3")


@dataclass(frozen=True)
class Packed:
    dsps: int               # multipliers that took registers
    removed: int            # fabric flip-flops removed
    kept: int               # input flip-flops kept for their other loads


def is_plain(cell: dict) -> bool:
    """A free-running flip-flop: clock enable constant 1, synchronous reset to 0 (or none)."""
    p, conn = cell["parameters"], cell["connections"]
    if cell["type"] != "TRELLIS_FF" or any(p.get(k, v) != v for k, v in _PLAIN.items()):
        return False
    if p.get("SRMODE", "LSR_OVER_CE") != "LSR_OVER_CE" or p.get("CEMUX", "1").strip() != "1":
        return False
    return conn.get("CE", ["1"]) == ["1"] and "M" not in conn


class Netlist:
    """Drivers and loads of a JSON module's nets, kept current as pins are rewired."""

    def __init__(self, module: dict):
        self.module, self.cells = module, module["cells"]
        self._fresh: int | None = None              # the next net number `twin` gives
        self.driver: dict[int, tuple[str, str]] = {}
        self.loads: dict[int, set[tuple[str, str]]] = {}
        for name, port in (module.get("ports") or {}).items():      # the module's outputs read nets too
            for b in port["bits"] if port["direction"] != "input" else ():
                if not isinstance(b, str):
                    self.loads.setdefault(b, set()).add(("", name))
        for name, cell in self.cells.items():
            for pin, bits in cell.get("connections", {}).items():
                for b in bits:
                    if isinstance(b, str):
                        continue
                    if cell.get("port_directions", {}).get(pin) == "output":
                        self.driver[b] = (name, pin)
                    else:
                        self.loads.setdefault(b, set()).add((name, pin))

    def loads_of(self, bit: Any) -> set[tuple[str, str]]:
        """(cell, pin) of everything that reads `bit`; none for a constant."""
        return set() if isinstance(bit, str) else self.loads.get(bit, set())

    def plain_ff(self, bit: Any) -> str | None:
        """The plain flip-flop whose Q drives `bit`, if one does."""
        src = None if isinstance(bit, str) else self.driver.get(bit)
        return src[0] if src and src[1] == "Q" and is_plain(self.cells[src[0]]) else None

    def rewire_input(self, cell: str, pin: str, bit: Any) -> None:
        """A one-bit input pin connected to `bit` instead of what drove it."""
        (old,) = self.cells[cell]["connections"][pin]
        self.replace_bit(cell, pin, old, bit)

    def replace_bit(self, cell: str, pin: str, old: Any, new: Any) -> None:
        """Every `old` bit of a (possibly multi-bit) input pin connected to `new` instead."""
        conn = self.cells[cell]["connections"]
        conn[pin] = [new if b == old else b for b in conn[pin]]
        if not isinstance(old, str):
            self.loads[old].discard((cell, pin))
        if not isinstance(new, str):
            self.loads.setdefault(new, set()).add((cell, pin))

    def twin(self, cell: str, out: str, name: str) -> int:
        """A copy of `cell` named `name` (the same inputs and parameters, so the same value in
        every cycle) whose output pin `out` drives a new net of its own, which it returns (no
        loads yet)."""
        if self._fresh is None:
            self._fresh = max([b for b in self.driver] + [b for b in self.loads] + [1]) + 1
        bit, self._fresh = self._fresh, self._fresh + 1
        self.cells[name] = copy.deepcopy(self.cells[cell])
        self.cells[name]["connections"][out] = [bit]
        for pin, bits in self.cells[name]["connections"].items():
            if pin != out and not isinstance(bits[0], str):
                self.loads.setdefault(bits[0], set()).add((name, pin))
        self.driver[bit] = (name, out)
        self.module.setdefault("netnames", {})[f"{name}.{out}"] = {"hide_name": 0, "bits": [bit], "attributes": {}}
        return bit

    def ff(self, name: str, pin: str) -> Any:
        return self.cells[name]["connections"].get(pin, ["0"])[0]


def _inputs(net: Netlist, dsp: str, group: str) -> list[tuple[str, str]] | None:
    """(pin, flip-flop) for every non-constant bit of input `group`, or None if one is not
    driven by a plain flip-flop (or none is)."""
    conn = net.cells[dsp]["connections"]
    pins = [f"{group}{i}" for i in range(18) if not isinstance(conn.get(f"{group}{i}", ["0"])[0], str)]
    ffs = [(p, net.plain_ff(conn[p][0])) for p in pins]
    return ffs if ffs and all(f for _, f in ffs) else None


def _outputs(net: Netlist, dsp: str) -> list[tuple[str, str]] | None:
    """(pin, flip-flop) for every used P bit, or None unless each drives one plain DI alone."""
    conn, out = net.cells[dsp]["connections"], []
    for i in range(36):
        bit = conn.get(f"P{i}", ["0"])[0]
        there = net.loads_of(bit)
        if not there:
            continue
        (ff, pin), = there if len(there) == 1 else ((None, None),)
        if pin != "DI" or not is_plain(net.cells[ff]):
            return None
        out.append((f"P{i}", ff))
    return out or None


def absorb(module: dict, *, operands: bool = True) -> Packed:
    """Move plain flip-flops into the registers of every MULT18X18D of `module` (a Yosys JSON
    module, changed in place) where the rules of the module docstring allow; the product
    registers only with `operands` False."""
    net = Netlist(module)
    cells = net.cells
    dsps = removed = 0
    sources: set[str] = set()           # input flip-flops some DSP now holds a copy of
    outputs_gone: set[str] = set()
    for name in sorted(n for n, c in cells.items() if c["type"] == "MULT18X18D"):
        dsp = cells[name]
        params, conn, dirs = dsp["parameters"], dsp["connections"], dsp["port_directions"]
        if any(params.get(f"REG_{r}_CLK", "NONE") != "NONE" for r in ("INPUTA", "INPUTB", "PIPELINE", "OUTPUT")):
            continue
        groups: dict[str, list[tuple[str, str]]] = {}
        a, b = _inputs(net, name, "A"), _inputs(net, name, "B")
        if operands and a and b and not any(f in outputs_gone for _, f in a + b):
            groups.update(INPUTA=a, INPUTB=b)
        p = _outputs(net, name)
        if p and not any(f in sources for _, f in p):
            groups["OUTPUT"] = p
        # one reset net per register group (its RST line), one clock for the DSP
        groups = {g: ffs for g, ffs in groups.items() if len({net.ff(f, "LSR") for _, f in ffs}) == 1}
        if ("INPUTA" in groups) != ("INPUTB" in groups):
            groups.pop("INPUTA", None), groups.pop("INPUTB", None)
        clocks = {net.ff(f, "CLK") for ffs in groups.values() for _, f in ffs}
        if not groups or len(clocks) != 1:
            continue
        lines = {}
        for g, ffs in groups.items():
            reset = net.ff(ffs[0][1], "LSR")
            if reset not in lines:
                lines[reset] = _RST_LINES[len(lines)]
                conn[lines[reset]], dirs[lines[reset]] = [reset], "input"
            params.update({f"REG_{g}_CLK": "CLK0", f"REG_{g}_CE": "CE0", f"REG_{g}_RST": lines[reset]})
        conn["CLK0"], conn["CE0"] = [clocks.pop()], ["1"]
        dirs.update(CLK0="input", CE0="input")
        params.update(GSR="DISABLED", RESETMODE="SYNC")
        for g in ("INPUTA", "INPUTB"):
            for pin, ff in groups.get(g, ()):
                net.rewire_input(name, pin, net.ff(ff, "DI"))
                sources.add(ff)
        for pin, ff in groups.get("OUTPUT", ()):
            q = net.ff(ff, "Q")
            del cells[ff]
            conn[pin] = [q]
            net.driver[q] = (name, pin)
            outputs_gone.add(ff)
            removed += 1
        dsps += 1
    kept = 0
    for ff in sources:                  # an operand register nothing else reads is gone
        if net.loads.get(net.ff(ff, "Q")):
            kept += 1
        else:
            net.rewire_input(ff, "DI", "0")
            del cells[ff]
            removed += 1
    return Packed(dsps, removed, kept)


def _dsp_input(cell_type: str, pin: str) -> bool:
    return cell_type == "MULT18X18D" and pin[0] in "AB"


def plain_output(cell: dict) -> str | None:
    """The output pin of a plain flip-flop (`Q`), None for any other cell: what split_fanout
    twins by default."""
    return "Q" if is_plain(cell) else None


def split_fanout(module: dict, group: int = DSP_GROUP, *, load=_dsp_input, tag: str = "fan",
                 source=plain_output) -> int:
    """Give every cell of `module` (a Yosys JSON module, changed in place) whose output pin
    `source(cell)` (by default a plain flip-flop's Q; None: not such a cell) drives more than
    `group` cells through pins `load(cell type, pin)` accepts (by default the inputs of
    MULT18X18D) a twin per further `group` of those cells, taken in name order (twin names:
    `<cell>$<tag><n>`; same inputs and parameters); its other loads stay on it. Returns the
    twins added."""
    net = Netlist(module)
    cells = net.cells
    added = 0
    for ff, out in sorted((n, o) for n, c in cells.items() if (o := source(c))):
        q = net.ff(ff, out)
        takers: dict[str, list[str]] = {}
        for cell, pin in net.loads.get(q, ()):
            if cell and load(cells[cell]["type"], pin):
                takers.setdefault(cell, []).append(pin)
        order = sorted(takers)
        for k in range(group, len(order), group):
            fresh = net.twin(ff, out, f"{ff}${tag}{k // group}")
            for cell in order[k:k + group]:
                for pin in takers[cell]:
                    net.replace_bit(cell, pin, q, fresh)
            added += 1
    return added
