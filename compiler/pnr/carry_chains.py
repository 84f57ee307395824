"""Carry chains rewritten before nextpnr-ecp5 so its packer adds no cells of its own to them.

Yosys's synth_ecp5 maps an adder onto a chain of CCU2C cells, two bits a cell. nextpnr-ecp5's
packer (`split_carry_chain`, its ecp5/pack.cc) adds a CCU2C of its own, two LUT sites
(TRELLIS_COMB) that compute nothing of the sum, at either end of a chain:

* a feed-out after a chain whose last COUT is connected, to bring that carry into the fabric.
  Yosys connects every chain's last COUT to a wire whether anything reads it or not;
  `disconnect_unread` sets the unread ones to "x".
* a feed-in before a chain whose first CIN is connected, even to a constant (nextpnr makes a
  net of it), to generate that carry. Yosys ties every chain's carry-in to a constant (0 for a
  sum, 1 for a difference). `absorb_carry_ins` generates it in the chain itself: a half-cell
  whose LUT4 is 0 passes its LUT2 (a function of A and B) as its carry-out whatever its CIN,
  so a first half holding the constant (or, for a chain of an even number of bits, the carry
  out of the lowest bit, which is then summed by a LUT4 of its own) starts the chain, and its
  CIN is left unconnected. Every later bit moves up by half a cell.

A design of many short adders pays both on every chain: the jet-shaped MLP at w3a4 with
constant weights (docs/area.md) has 848 chains, 1,696 of its 10,485 sites in feed-outs and as
many in feed-ins. On the fine-tuned KWS network 1,298 of 2,247 chains hold an odd number of
bits, so the constant fills the unused top half and the chain is a whole cell shorter.

A third rewrite is for timing: Yosys puts the small functions an operand passes through (an
accumulator's reset select `first ? 0 : acc`, a mask, an inversion) in LUT4s of their own in
front of the chain, one LUT level and one route more on every such path (on the int8 GEMV
128x784 at target_mhz 200, 1.2 ns of a 7.5 ns critical path). The chain's own LUT4s have two
inputs to spare; `absorb_operand_luts` computes a gate of one or two nets in them.

This runs on the JSON netlist before nextpnr (compiler/pnr/timing.py), as dsp_registers and
bram_registers do. Both rewrites keep every net the fabric reads driven by the same function of
the same inputs (proved equivalent with Yosys's SAT on small designs,
tests/test_carry_chains.py), so the design, its simulation and its synthesis counts are
unchanged. A chain is left as it is when a carry inside it is read by the fabric, a half-cell
injects (INJECT1 "YES"), or the rewrite would not take fewer sites.

A half-cell: its LUT4 (INIT over A, B, C, D) is the propagate P, the LUT2 of INIT's low four
bits (over A, B) the generate G; S = P ^ CIN and COUT = CIN if P else G.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .dsp_registers import Netlist

_HALF_PINS = ("A", "B", "C", "D")
_ONES = ("1", "1", "1", "1")


def disconnect_unread(module: dict) -> int:
    """Set every CCU2C COUT of `module` (a Yosys JSON module, changed in place) that nothing
    reads to "x". Returns how many were disconnected."""
    net = Netlist(module)
    done = 0
    for cell in module["cells"].values():
        if cell["type"] != "CCU2C":
            continue
        bit = cell["connections"].get("COUT", ["x"])[0]
        if not isinstance(bit, str) and not net.loads_of(bit):
            cell["connections"]["COUT"] = ["x"]
            done += 1
    return done


@dataclass(frozen=True)
class _Half:
    inputs: tuple           # A, B, C, D: net ids or constants "0" / "1"
    init: int               # the LUT4's truth table, index A + 2B + 4C + 8D
    s: Any                  # the sum bit's net, "x" when nothing reads it

    def propagate(self, a: int, b: int) -> int | None:
        """P at inputs A = a, B = b, or None when C or D is not a constant."""
        c, d = self.inputs[2:]
        if c not in ("0", "1") or d not in ("0", "1"):
            return None
        return self.init >> (a + 2 * b + 4 * int(c) + 8 * int(d)) & 1


def _generating(carry: Any) -> _Half:
    """A half whose carry-out is `carry` (a constant or a net) whatever its carry-in: P = 0 at
    C = D = 1, G = A (a net) or the constant."""
    if carry in ("0", "1"):
        return _Half(_ONES, int(carry) << 3, "x")      # G at A = B = 1: INIT bit 3
    return _Half((carry, "1", "1", "1"), 0b1010, "x")   # G = A


_PASS = _Half(_ONES, 1 << 15, "x")
"""A half whose carry-out is its carry-in (P = 1 at A = B = C = D = 1): pads a chain to whole
cells, and ends one whose last carry the fabric reads at a cell's COUT."""


def _halves(cell: dict) -> list[_Half] | None:
    p, conn = cell["parameters"], cell["connections"]
    if p.get("INJECT1_0", "NO").strip() != "NO" or p.get("INJECT1_1", "NO").strip() != "NO":
        return None
    return [_Half(tuple(conn.get(f"{pin}{i}", ["1"])[0] for pin in _HALF_PINS), int(p[f"INIT{i}"], 2),
                  conn.get(f"S{i}", ["x"])[0]) for i in (0, 1)]


def _chains(module: dict, net: Netlist) -> list[list[str]]:
    """The carry chains whose first CIN is not a CCU2C's COUT and whose carries between cells
    only the next cell reads, each its cells in carry order."""
    cells = module["cells"]
    chains = []
    for name, cell in cells.items():
        if cell["type"] != "CCU2C":
            continue
        cin = cell["connections"].get("CIN", ["x"])[0]
        driver = None if isinstance(cin, str) else net.driver.get(cin)
        if (isinstance(cin, str) and cin not in ("0", "1")) or \
                (driver and driver[1] == "COUT" and cells[driver[0]]["type"] == "CCU2C"):
            continue                    # generates its own carry-in already ("x"), or not a chain's first
        chain = [name]
        while True:
            loads = net.loads_of(cells[chain[-1]]["connections"].get("COUT", ["x"])[0])
            following = [c for c, pin in loads if pin == "CIN" and cells[c]["type"] == "CCU2C"]
            if not following:
                break
            if len(loads) > 1:                  # a carry the fabric reads too
                chain = []
                break
            chain.append(following[0])
        if chain:
            chains.append(chain)
    return chains


def _absorbed(halves: list[_Half], carry_in: Any, cout_read: bool, read) -> tuple[list[_Half], _Half | None]:
    """The chain's halves with its carry-in generated inside it, and the LUT4 half (its S the
    lowest bit's sum) that goes beside it, if one does."""
    needed = len(halves) if cout_read else max((i + 1 for i, h in enumerate(halves) if read(h.s)), default=0)
    used = halves[:needed]
    first = used[0] if used else None
    if carry_in in ("0", "1") and first and len(used) % 2 == 0:
        p = {(a, b): first.propagate(a, b) for a in (0, 1) for b in (0, 1)}
        if None not in p.values():
            # the lowest bit's carry-out, a function of A and B: its CIN is the constant
            g = {(a, b): int(carry_in) if p[a, b] else first.init >> (a + 2 * b) & 1 for a, b in p}
            gen = _Half((*first.inputs[:2], "1", "1"), sum(g[k] << (k[0] + 2 * k[1]) for k in g), "x")
            s0 = None
            if read(first.s):
                s0 = _Half((*first.inputs[:2], "0", "0"),
                           sum((p[k] ^ int(carry_in)) << (k[0] + 2 * k[1]) for k in p), first.s)
            return [gen, *used[1:]], s0
    new = [_generating(carry_in), *used]
    if len(new) % 2:
        new.append(_PASS)
    return new, None


def absorb_carry_ins(module: dict) -> int:
    """Generate each carry chain's carry-in inside it (module, a Yosys JSON module, changed in
    place), so nextpnr adds no feed-in cell. Returns how many chains were rewritten."""
    net = Netlist(module)
    cells = module["cells"]
    read = lambda bit: bool(net.loads_of(bit))  # noqa: E731
    done = 0
    for chain in _chains(module, net):
        halves = []
        for name in chain:
            pair = _halves(cells[name])
            if pair is None:
                break
            halves += pair
        else:
            first = cells[chain[0]]["connections"]
            last_cout = cells[chain[-1]]["connections"].get("COUT", ["x"])[0]
            new, s0 = _absorbed(halves, first["CIN"][0], read(last_cout), read)
            if len(new) + (s0 is not None) >= len(halves) + 2:      # a feed-in is two sites
                continue
            _rewrite(cells, chain, new, last_cout if read(last_cout) else "x")
            if s0 is not None:
                cells[f"{chain[0]}$carry_in_sum"] = _lut4(s0)
            done += 1
    return done


def _rewrite(cells: dict, chain: list[str], halves: list[_Half], last_cout: Any) -> None:
    """`chain`'s cells hold `halves` two a cell, in order; cells left over are removed. Cell k's
    COUT still drives the net cell k + 1's CIN reads."""
    keep = len(halves) // 2
    for k, name in enumerate(chain[:keep]):
        cell = cells[name]
        conn, params = cell["connections"], cell["parameters"]
        for i, half in enumerate(halves[2 * k:2 * k + 2]):
            for pin, bit in zip(_HALF_PINS, half.inputs):
                conn[f"{pin}{i}"] = [bit]
            conn[f"S{i}"] = [half.s]
            params[f"INIT{i}"] = format(half.init, "016b")
        if k == 0:
            conn["CIN"] = ["x"]
        if k == keep - 1:
            conn["COUT"] = [last_cout]
    for name in chain[keep:]:
        del cells[name]


def _lut4(half: _Half) -> dict:
    return {"hide_name": 1, "type": "LUT4", "parameters": {"INIT": format(half.init, "016b")},
            "attributes": {},
            "port_directions": {"A": "input", "B": "input", "C": "input", "D": "input", "Z": "output"},
            "connections": {**{pin: [bit] for pin, bit in zip(_HALF_PINS, half.inputs)}, "Z": [half.s]}}


def _lut_function(cell: dict) -> tuple[list, Any] | None:
    """(its distinct input nets, f(values of those nets) -> 0/1) of a LUT4 cell, or None when a
    pin is undriven ("x") or the cell is not a LUT4."""
    if cell["type"] != "LUT4":
        return None
    pins = [cell["connections"].get(pin, ["0"])[0] for pin in _HALF_PINS]
    if "x" in pins or "z" in pins:
        return None
    nets = list(dict.fromkeys(b for b in pins if not isinstance(b, str)))
    init = int(cell["parameters"]["INIT"], 2)

    def f(*values: int) -> int:
        at = dict(zip(nets, values))
        return init >> sum((int(b) if isinstance(b, str) else at[b]) << k for k, b in enumerate(pins)) & 1
    return nets, f


def _gated_half(half: _Half, operand: int, nets: list, g) -> _Half | None:
    """`half` (P and G of its two operand pins, C and D constants) with the operand on pin
    `operand` (0: A, 1: B) replaced by g(nets) (one or two nets): the first net on that pin, the
    second on C, D tied to 1, so P = P(g, other) sits in INIT's upper half while G, the LUT2 of
    its lowest four bits, keeps the carry the operands generate when P = 0 (a function of the
    other operand alone on an adder's half: None where it is not)."""
    c, d = half.inputs[2:]
    if c not in ("0", "1") or d not in ("0", "1") or len(nets) not in (1, 2):
        return None
    p = lambda a, b: half.init >> (a + 2 * b + 4 * int(c) + 8 * int(d)) & 1     # noqa: E731
    gen = lambda a, b: half.init >> (a + 2 * b) & 1                             # noqa: E731
    op = (lambda x, y: (x, y)) if operand == 0 else (lambda x, y: (y, x))      # noqa: E731
    init = 0
    for y in (0, 1):                                                           # the other operand
        carries = {gen(*op(x, y)) for x in (0, 1) if not p(*op(x, y))}
        if len(carries) > 1:
            return None
        g_y = carries.pop() if carries else 0
        for x in (0, 1):
            init |= g_y << sum(v << k for k, v in enumerate(op(x, y)))          # G at C = D = 0
            for z in (0, 1):
                value = g(x, z) if len(nets) == 2 else g(x)
                init |= p(*op(value, y)) << (sum(v << k for k, v in enumerate(op(x, y))) + 4 * z + 8)
    pins = list(half.inputs)
    pins[operand], pins[2], pins[3] = nets[0], nets[1] if len(nets) == 2 else "0", "1"
    return _Half(tuple(pins), init, half.s)


def absorb_operand_luts(module: dict) -> int:
    """Compute in a carry chain's own LUT4s the small functions its operands pass through: a
    LUT4 of one or two nets (`acc & ~first`, an accumulator's reset select; an inversion)
    that drives an operand pin of a CCU2C half whose C and D are constants moves into that
    half (its C pin takes the second net), one LUT level and one route fewer on the path into
    the chain; the LUT4 goes when nothing else reads it. An ECP5 adder half's P reads A, B, C
    and D while its generate reads A and B only, so it can: where P = 0 the two operands are
    equal and the carry is the other operand's bit. Halves whose generate would depend on the
    replaced operand, INJECT1 cells and LUTs reading the other operand are left as they are.
    Returns how many operand pins were absorbed."""
    net = Netlist(module)
    cells = module["cells"]
    done = 0
    for name in list(cells):
        cell = cells.get(name)
        if cell is None or cell["type"] != "CCU2C":
            continue
        halves = _halves(cell)
        if halves is None:
            continue
        for i, half in enumerate(halves):
            for operand in (0, 1):
                bit = half.inputs[operand]
                src = None if isinstance(bit, str) else net.driver.get(bit)
                lut = src and _lut_function(cells[src[0]])
                if not lut or half.inputs[1 - operand] in lut[0]:
                    continue
                new = _gated_half(half, operand, *lut)
                if new is None:
                    continue
                for pin, value in zip(_HALF_PINS, new.inputs):
                    net.rewire_input(name, f"{pin}{i}", value)
                cell["parameters"][f"INIT{i}"] = format(new.init, "016b")
                half = new
                done += 1
                if not net.loads_of(bit):
                    for pin in _HALF_PINS:
                        if pin in cells[src[0]]["connections"]:
                            net.rewire_input(src[0], pin, "0")
                    del cells[src[0]]
                # the other operand too while C is free (a gate of one net leaves it constant)
    return done
