"""compiler/pnr/replicas.py: the loads of flip-flops that hold one value dealt among them by
where a first placement put the loads."""
from __future__ import annotations

import json

import pytest

from compiler.pnr.replicas import deal, families, pin, positions, regroup, spread, spreadable


def _ff(d: int, q: int, **params) -> dict:
    return {"type": "TRELLIS_FF", "parameters": {"GSR": "DISABLED", **params},
            "port_directions": {"CLK": "input", "DI": "input", "Q": "output"},
            "connections": {"CLK": [2], "DI": [d], "Q": [q]}}


def _lut(a: int, z: int, b: int | str = "0", init: str = "") -> dict:
    """A LUT4 reading nets a and b, driving z; its truth table its own unless `init` is given
    (two LUTs alike would be a family)."""
    return {"type": "LUT4", "parameters": {"INIT": init or f"{z:016b}"},
            "port_directions": {"A": "input", "B": "input", "Z": "output"},
            "connections": {"A": [a], "B": [b], "Z": [z]}}


def _module() -> dict:
    """Two copies of net 10 (flip-flops c0, c1), each read by two LUTs, c0's at x 0 and 90, c1's
    at x 5 and 95 (each copy serves both sides of the die); a third flip-flop with another
    input; a LUT that reads both copies."""
    cells = {"c0": _ff(10, 20), "c1": _ff(10, 21), "other": _ff(11, 22),
             "l0": _lut(20, 30), "l90": _lut(20, 31), "l5": _lut(21, 32), "l95": _lut(21, 33),
             "both": _lut(20, 34, b=21), "o": _lut(22, 35)}
    return {"ports": {}, "cells": cells}


WHERE = {"l0": (0, 10), "l90": (90, 10), "l5": (5, 11), "l95": (95, 11), "both": (50, 40), "o": (1, 1),
         "c0": (45, 10), "c1": (50, 11)}


def test_flip_flops_with_the_same_input_and_parameters_are_a_family():
    module = _module()
    assert families(module) == [["c0", "c1"]]
    module["cells"]["c1"]["parameters"]["REGSET"] = "SET"       # resets to 1: not the same value
    assert families(module) == []


def test_luts_with_the_same_inputs_and_truth_table_are_a_family_and_their_loads_are_dealt():
    # lutram_fanout' twins of a LUT driving read addresses: x0 and x1 read net 20 (c0's)
    module = _module()
    module["cells"] |= {"x0": _lut(20, 40, b=22, init="0110"), "x1": _lut(20, 41, b=22, init="0110"),
                        "y": _lut(20, 42, b=21, init="0110"),
                        "r0": _lut(40, 50), "r90": _lut(40, 51), "r5": _lut(41, 52), "r95": _lut(41, 53)}
    assert families(module) == [["c0", "c1"], ["x0", "x1"]]     # y reads another net on B
    where = WHERE | {"r0": (0, 20), "r90": (90, 20), "r5": (5, 21), "r95": (95, 21)}
    regroup(module, where)
    cells = module["cells"]
    source = {r: cells[r]["connections"]["A"][0] for r in ("r0", "r5", "r90", "r95")}
    assert source["r0"] == source["r5"] != source["r90"] == source["r95"]


def test_deal_splits_by_the_wider_side_into_the_sizes_asked():
    points = [((x, 0), f"p{x}") for x in (0, 90, 5, 95, 50)]
    assert deal(points, [2, 3]) == [["p0", "p5"], ["p50", "p90", "p95"]]
    tall = [((0, y), y) for y in (7, 1, 3, 9)]
    assert deal(tall, [1, 1, 2]) == [[1], [3], [7, 9]]


def test_regroup_gives_each_copy_the_loads_on_one_side():
    module = _module()
    moved = regroup(module, WHERE)
    cells = module["cells"]
    reads = lambda lut: {b for pin in ("A", "B") for b in cells[lut]["connections"][pin] if b != "0"}  # noqa: E731
    # 5 loading cells, c0 had 3 (l0, l90, both) and c1 2: the left and the middle go to one copy
    left, right = reads("l0") | reads("l5"), reads("l90") | reads("l95")
    assert len(left) == 1 and len(right) == 1 and left != right
    assert reads("both") == left or reads("both") == right
    assert len(reads("both")) == 1                              # both its pins now read one copy
    assert reads("o") == {22}                                   # not a family's: untouched
    assert moved == 2
    assert regroup(module, WHERE) == 0                         # dealt already: nothing moves


def test_a_family_with_an_unplaced_load_stays_as_it_is():
    module = _module()
    before = json.dumps(module, sort_keys=True)
    assert regroup(module, {k: v for k, v in WHERE.items() if k != "l95"}) == 0
    module["ports"] = {"y": {"direction": "output", "bits": [20]}}
    assert regroup(module, WHERE) == 0
    module["ports"] = {}
    assert json.dumps(module, sort_keys=True) == before


def test_positions_read_nextpnr_bels():
    placed = {"cells": {"a": {"attributes": {"NEXTPNR_BEL": "X12/Y34/SLICEA"}},
                        "m": {"attributes": {"NEXTPNR_BEL": "X3/Y9/MULT18_0"}},
                        "u": {"attributes": {}},
                        "s$CCU2_COMB1": {"attributes": {"NEXTPNR_BEL": "X5/Y6/SLICEA.K1"}},
                        "s$CCU2_COMB0": {"attributes": {"NEXTPNR_BEL": "X5/Y6/SLICEA.K0"}}}}
    # a carry cell nextpnr split in two halves is where its halves are
    assert positions(placed) == {"a": (12, 34), "m": (3, 9), "s": (5, 6)}


@pytest.mark.parametrize("bad", ["", "somewhere"])
def test_positions_skip_cells_without_a_bel(bad):
    assert positions({"cells": {"a": {"attributes": {"NEXTPNR_BEL": bad}}}}) == {}


# a register each of whose bits four LUTs read, then given a twin per bit that takes half of
# its loads, then regrouped by made-up positions
def _spread_module() -> dict:
    """A register `r` and the copies of it the compiler made (`keep`): `c`, read by LUTs at x 0,
    2, 90 and 92; `near`, read at x 80 and 92; `logic`, fed by a LUT, read at x 0 and 90; and a
    register without `keep` read at x 0 and 90."""
    kept = lambda d, q: {**_ff(d, q), "attributes": {"keep": "1"}}  # noqa: E731
    cells = {"r": _ff(10, 11), "c": kept(11, 20), "near": kept(11, 21), "f": _lut(11, 12),
             "logic": kept(12, 22), "plain": _ff(11, 23),
             "a0": _lut(20, 30), "a2": _lut(20, 31), "a90": _lut(20, 32), "a92": _lut(20, 33, b=21),
             "n20": _lut(21, 34), "g0": _lut(22, 35), "g90": _lut(22, 36), "p0": _lut(23, 37), "p90": _lut(23, 38)}
    return {"ports": {}, "cells": cells}


def test_spread_twins_a_copy_fed_by_a_register_whose_loads_lie_far_apart():
    module = _spread_module()
    cells = module["cells"]
    assert spreadable(module) == ["c", "near"]
    where = {"a0": (0, 5), "a2": (2, 5), "a90": (90, 5), "a92": (92, 6), "n20": (80, 0), "g0": (0, 0),
             "g90": (90, 0), "p0": (0, 1), "p90": (90, 1), "c": (45, 5), "near": (50, 5), "f": (46, 6),
             "plain": (47, 4)}
    # `r`'s own loads far apart: it reaches across the die already, its copies are left as they are
    assert spread(_spread_module(), {**where, "plain": (90, 4)}, reach=32) == 0
    assert spread(module, where, reach=32) == 1
    twin = cells["c$spread1"]
    q = twin["connections"]["Q"][0]
    assert twin["connections"]["DI"] == [11] and twin["attributes"] == {"keep": "1"} and q not in (20, 21)
    assert [cells[n]["connections"]["A"] for n in ("a0", "a2", "a90", "a92")] == [[20], [20], [q], [q]]
    # `near` (a92 and n20 within reach) and the others keep their loads
    assert cells["a92"]["connections"]["B"] == [21] and cells["g90"]["connections"]["A"] == [22]
    assert cells["p90"]["connections"]["A"] == [23] and len(cells) == len(_spread_module()["cells"]) + 1
    # a load the placement does not know: left as it is
    module = _spread_module()
    assert spread(module, {k: v for k, v in where.items() if k != "a2"}, reach=32) == 0


COPIED = """
module top(input clk, input [3:0] a, input [15:0] x, output reg [15:0] y);
    reg [3:0] r, c;
    always @(posedge clk) begin
        r <= a;
        c <= r;
        y <= {4{c}} ^ x;
    end
endmodule
"""
"""A register `c` (fed by another, `r`) whose every bit four LUTs read."""


@pytest.mark.slow
def test_regrouped_copies_compute_what_the_one_register_did(tmp_path):
    from compiler.pnr.dsp_registers import split_fanout
    from helpers import CELL_MODELS, LUT4_MODEL, equivalent, synthesised_twice
    gold, gate = synthesised_twice(COPIED, tmp_path)
    module = gate["modules"]["top"]
    cells = module["cells"]
    # a twin per two LUTs, taken in name order (as dsp_registers gives multipliers theirs)
    twins = split_fanout(module, group=2, load=lambda kind, pin: kind == "LUT4", tag="twin")
    assert twins == 4 and len(families(module)) == 4
    # the cells strewn along a line (not in name order, which the twins took): the deal moves some
    where = {n: (i * 37 % 101, 0) for i, n in enumerate(sorted(cells))}
    assert regroup(module, where) > 0
    assert equivalent(gold, gate, tmp_path / "proof", models=CELL_MODELS + LUT4_MODEL)
    # and the proof can fail: one load moved to a flip-flop of another bit
    wrong = json.loads(json.dumps(gate))
    a, b = (wrong["modules"]["top"]["cells"][f]["connections"]["Q"][0] for f in ("c_TRELLIS_FF_Q", "c_TRELLIS_FF_Q_1"))
    victim = next(c for c in wrong["modules"]["top"]["cells"].values()
                  if c["type"] == "LUT4" and any(bits == [a] for bits in c["connections"].values()))
    port = next(p for p, bits in victim["connections"].items() if bits == [a])
    victim["connections"][port] = [b]
    assert not equivalent(gold, wrong, tmp_path / "wrong", models=CELL_MODELS + LUT4_MODEL)


@pytest.mark.slow
def test_spread_copies_compute_what_the_one_register_did(tmp_path):
    from helpers import CELL_MODELS, LUT4_MODEL, equivalent, synthesised_twice
    gold, gate = synthesised_twice(COPIED, tmp_path)
    module = gate["modules"]["top"]
    cells = module["cells"]
    copies = [n for n in cells if n.startswith("c_TRELLIS_FF")]
    for n in copies:                      # what the synthesis script marks on the compiler's copies
        cells[n].setdefault("attributes", {})["keep"] = "1"
    assert sorted(spreadable(module)) == sorted(copies) and len(copies) == 4
    # the cells strewn along a line: each copy's four loads far apart, one twin or more each
    where = {n: (i * 37 % 101, 0) for i, n in enumerate(sorted(cells))}
    assert spread(module, where, reach=20) >= 4
    assert equivalent(gold, gate, tmp_path / "proof", models=CELL_MODELS + LUT4_MODEL)


def test_pin_keeps_the_hard_blocks_where_the_first_placement_put_them():
    module = {"cells": {"m": {"type": "MULT18X18D", "connections": {}}, "r": {"type": "DP16KD", "connections": {}},
                        "l": {"type": "LUT4", "connections": {}}, "gone": {"type": "MULT18X18D", "connections": {}}}}
    placed = {"cells": {"m": {"attributes": {"NEXTPNR_BEL": "X5/Y10/MULT18_0"}},
                        "r": {"attributes": {"NEXTPNR_BEL": "X35/Y22/EBR2"}},
                        "l": {"attributes": {"NEXTPNR_BEL": "X1/Y1/SLICEA"}}}}
    assert pin(module, placed) == 2
    assert {n: c.get("attributes", {}).get("BEL") for n, c in module["cells"].items()} == \
        {"m": "X5/Y10/MULT18_0", "r": "X35/Y22/EBR2", "l": None, "gone": None}
