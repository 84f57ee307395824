"""Loads of equivalent flip-flops dealt among them by where a first placement put the loads.

The compiler copies a register that drives consumers across the die (operand copies, one per
OPERAND_GROUP products; address copies; hw/datapath.Copies), and dsp_registers gives a flip-flop
a twin per few multipliers. Which consumers share a copy is decided before anything is placed:
lane by lane, or by cell name. The placer then puts the consumers where the rest of their logic
pulls them, and a copy's few consumers can land on both sides of the die: AD08 at fold 76,
`target_mhz: 200` (2026-12-03, seeds 1 and 3): an operand copy into a multiplier's input
register 8.2-8.4 ns of one route, from x=76 to x=8, its critical path. The copies of one value
hold the same bit in every cycle, so any of its consumers may read any of them.

`families` finds such flip-flops in a synthesised netlist (same cell type, parameters and every
connection but Q: the copies Yosys keeps apart, DUPLICATE_ATTRIBUTE), and LUTs alike (the twins
lutram_fanout gives a LUT RAM's read-address multiplexer); `regroup` deals each
family's consumers among its flip-flops by position, as many to each as it had, by recursive
bisection along the wider side of their bounding box, so each copy serves a compact group and
can sit in its middle. timing.place_and_route runs it between a placement-only nextpnr run and
the real one (`regroup`), which finds the positions, and `pin`s the multipliers and block RAMs
of the real one to the sites they had (else the placer, seeing the new groups, puts them
elsewhere and the deal no longer fits). The design, its simulation and its synthesis counts
are unchanged (the netlist computes the same function: the test proves it on a small one).
"""
from __future__ import annotations

import re
from typing import Any, Mapping

from .dsp_registers import Netlist

Point = tuple[int, int]


OUTPUT = {"TRELLIS_FF": "Q", "LUT4": "Z"}
"""Cells a family may be made of, and the pin each drives its loads through: flip-flops, and
LUTs (lutram_fanout gives a LUT driving many LUT RAM cells twins)."""


def output(cell: dict) -> str:
    return OUTPUT[cell["type"]]


def families(module: dict) -> list[list[str]]:
    """Groups of at least two TRELLIS_FF (or LUT4) cells of `module` (a Yosys JSON module) that
    hold the same value: the same type, parameters and nets on every pin but the output, each
    output read by something. In name order, each group and the groups by their first member."""
    groups: dict[tuple, list[str]] = {}
    for name, cell in module["cells"].items():
        out = OUTPUT.get(cell["type"])
        conn = cell["connections"]
        if out is None or out not in conn:
            continue
        key = (cell["type"], tuple(sorted((k, str(v)) for k, v in cell.get("parameters", {}).items())),
               tuple((pin, tuple(map(str, bits))) for pin, bits in sorted(conn.items()) if pin != out))
        groups.setdefault(key, []).append(name)
    return sorted(sorted(g) for g in groups.values() if len(g) > 1)


def deal(points: list[tuple[Point, Any]], sizes: list[int]) -> list[list[Any]]:
    """`points` ((x, y), item) split into groups of `sizes` (summing to len(points)) by recursive
    bisection: the first half of the sizes takes the items lowest along the wider side."""
    if len(sizes) == 1:
        return [[item for _, item in points]]
    half = len(sizes) // 2
    first = sum(sizes[:half])
    ordered = _along_wider(points)
    return deal(ordered[:first], sizes[:half]) + deal(ordered[first:], sizes[half:])


def _along_wider(points: list[tuple[Point, Any]]) -> list[tuple[Point, Any]]:
    """`points` ((x, y), item) in order along the wider side of their bounding box (deal, _split)."""
    xs, ys = [p[0] for p, _ in points], [p[1] for p, _ in points]
    axis = 0 if max(xs) - min(xs) >= max(ys) - min(ys) else 1
    return sorted(points, key=lambda pi: (pi[0][axis], pi[0][1 - axis]))


def regroup(module: dict, where: Mapping[str, Point]) -> int:
    """Deal each family's loads among its flip-flops by the loads' positions `where` (cell name ->
    (x, y)), each flip-flop keeping as many loading cells as it had; every pin of a cell that
    reads the family goes to the flip-flop its cell was dealt to. A family whose loads are not
    all placed cells (a module port, a cell `where` lacks) is left as it is. Returns the loading
    cells that changed flip-flop."""
    net = Netlist(module)
    cells = module["cells"]
    moved = 0
    for family in families(module):
        q = {ff: cells[ff]["connections"][output(cells[ff])][0] for ff in family}
        others = set(q.values())
        users: dict[str, str] = {}                  # loading cell -> the member it reads now
        for ff in family:
            for cell, _pin in net.loads_of(q[ff]):
                users.setdefault(cell, ff)
        if not users or any(not cell or cell not in where for cell in users) or \
                len({ff for ff in users.values()}) < 2:
            continue
        sizes = [sum(1 for c in users if users[c] == ff) for ff in family]
        members = [ff for ff, n in zip(family, sizes) if n]
        groups = deal(sorted((where[c], c) for c in users), [n for n in sizes if n])
        # each group to the member that already serves most of it (fewest pins rewired)
        taken: set[str] = set()
        for group in sorted(groups, key=len, reverse=True):
            ff = max((m for m in members if m not in taken), key=lambda m: sum(users[c] == m for c in group))
            taken.add(ff)
            for cell in group:
                moved += users[cell] != ff
                for pin, bits in list(cells[cell]["connections"].items()):
                    for old in {b for b in bits if b in others and b != q[ff]}:
                        net.replace_bit(cell, pin, old, q[ff])
    return moved


REACH = 32
"""The widest a copy's loads may lie apart (the half-perimeter of their bounding box, in tiles)
before `spread` twins it: from its middle about 16 tiles, ~2 ns of route at the 0.13 ns a tile
of AD08's 10.3 ns route from an operand copy to a multiplier ~80 tiles away."""


def _span(points: list[Point]) -> int:
    """The half-perimeter of the points' bounding box, in tiles."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return max(xs) - min(xs) + max(ys) - min(ys)


def _split(points: list[tuple[Point, Any]], reach: int) -> list[list[Any]]:
    """`points` ((x, y), item) in groups each within `reach` (_span), by bisection along the
    wider side."""
    if len(points) == 1 or _span([p for p, _ in points]) <= reach:
        return [[item for _, item in points]]
    ordered = _along_wider(points)
    half = len(ordered) // 2
    return _split(ordered[:half], reach) + _split(ordered[half:], reach)


def spreadable(module: dict, net: Netlist | None = None) -> list[str]:
    """The flip-flops `spread` may twin: the compiler's copies (`keep`, DUPLICATE_ATTRIBUTE) whose
    D is another flip-flop's Q, in name order."""
    net = net or Netlist(module)
    cells, out = module["cells"], []
    for ff in sorted(cells):
        cell = cells[ff]
        if cell["type"] != "TRELLIS_FF" or "keep" not in cell.get("attributes", {}):
            continue
        d = cell["connections"].get("DI", ["0"])[0]
        src = None if isinstance(d, str) else net.driver.get(d)
        if src is not None and src[1] == "Q" and cells[src[0]]["type"] == "TRELLIS_FF":
            out.append(ff)
    return out


def spread(module: dict, where: Mapping[str, Point], reach: int = REACH) -> int:
    """Give each copy the compiler made (a `keep` flip-flop: DUPLICATE_ATTRIBUTE) whose D is a
    flip-flop's Q and whose loads `where` put more than `reach` tiles apart a twin per further
    group of loads within `reach` (_split), each group read from its own. The register before
    it then drives the twins, which the placer puts between it and their groups: one route
    across the die becomes two of half its length, in the same cycles (the twins hold the
    value the copy did). AD08 at fold 56: an operand copy shared by four multipliers, one
    per lane, ~150 tiles apart (the lanes' adder trees pull them to both sides of the die), one
    route of 10.3 ns, the critical path at seed 2 (seed 1: 91.9 -> 106.4 MHz with twins, before
    the rule below).

    Only a copy fed by a register (one fed by logic would carry the long route into the logic's
    path) whose own loads all lie within `reach` (else it is already a node of a tree across the die,
    and its twins' routes from it would be as long as its copy's to the far loads: AD08 seed 2
    with twins of the ring beats' copies, `beat_last_ahead2` -> a twin, 10.6 ns of routing).
    Every copy's groups are found on the netlist as it comes (one placement), then the twins
    made. Returns the twins added."""
    net = Netlist(module)
    cells = module["cells"]
    placed = lambda users: all(c and c in where for c in users)  # noqa: E731 - a module port is not
    plan = []
    for ff in spreadable(module, net):
        q, d = cells[ff]["connections"]["Q"][0], cells[ff]["connections"]["DI"][0]
        users = {c for c, _pin in net.loads_of(q)}
        feeds = {c for c, _pin in net.loads_of(d)}
        if len(users) < 2 or not placed(users) or not placed(feeds) or _span([where[c] for c in feeds]) > reach:
            continue
        groups = _split(sorted((where[c], c) for c in users), reach)
        if len(groups) > 1:
            plan.append((ff, q, groups[1:]))
    added = 0
    for ff, q, groups in plan:
        for k, group in enumerate(groups, 1):
            twin = net.twin(ff, "Q", f"{ff}$spread{k}")
            for c in group:
                for pin, bits in list(cells[c]["connections"].items()):
                    if q in bits:
                        net.replace_bit(c, pin, q, twin)
            added += 1
    return added


HARD = ("MULT18X18D", "DP16KD")
"""Cells whose sites a regrouped netlist keeps from the first placement (`pin`): the copies
were dealt by where those are, and the placer would otherwise put them elsewhere."""


def pin(module: dict, placed: Mapping[str, Any], types: tuple[str, ...] = HARD) -> int:
    """Give each cell of `module` of one of `types` the site nextpnr placed it at in `placed` (a
    `--write` netlist's top module) as its BEL attribute, which nextpnr keeps. Returns the cells
    pinned."""
    n = 0
    for name, cell in module["cells"].items():
        bel = placed["cells"].get(name, {}).get("attributes", {}).get("NEXTPNR_BEL") if cell["type"] in types else None
        if bel:
            cell.setdefault("attributes", {})["BEL"] = bel
            n += 1
    return n


_BEL = re.compile(r"X(\d+)/Y(\d+)/")
_PACKED = re.compile(r"\$(CCU2_COMB\d|DPRAM_COMB\d)$")
"""Suffixes of the cells nextpnr-ecp5 packs one of Yosys's into (a CCU2C's two halves, a LUT
RAM's four): the first such cell placed gives the position of the cell it came from."""


def positions(placed: Mapping[str, Any]) -> dict[str, Point]:
    """Cell name -> (x, y) of a nextpnr `--write` netlist's top module, from each placed cell's
    NEXTPNR_BEL, under the name the cell had in Yosys's netlist (_PACKED)."""
    out: dict[str, Point] = {}
    for name, cell in placed["cells"].items():
        m = _BEL.match(str(cell.get("attributes", {}).get("NEXTPNR_BEL", "")))
        if m:
            out.setdefault(_PACKED.sub("", name), (int(m.group(1)), int(m.group(2))))
    return out
