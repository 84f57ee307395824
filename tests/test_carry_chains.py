"""compiler/pnr/carry_chains.py: a carry chain's unread carry-out disconnected and its carry-in
generated inside it before nextpnr, checked by what they change, by a formal equivalence proof of
the netlists before and after, and by nextpnr-ecp5's packing of both."""
from __future__ import annotations

import json

from compiler.pnr.carry_chains import absorb_carry_ins, absorb_operand_luts, disconnect_unread
from compiler.pnr.timing import packed_sites
from compiler.tools import yosys
from helpers import CELL_MODELS, LUT4_MODEL, cells_of, equivalent

# a carry half-cell as the ECP5 has it: LUT4 (INIT over A, B, C, D) the propagate, the LUT2 of
# INIT's low four bits (over A, B) the generate; the rewrite never sets INJECT1
CARRY_MODELS = CELL_MODELS + """
module CCU2C(input CIN, input A0, input B0, input C0, input D0, input A1, input B1, input C1,
             input D1, output S0, output S1, output COUT);
    parameter [15:0] INIT0 = 0; parameter [15:0] INIT1 = 0;
    parameter INJECT1_0 = "NO"; parameter INJECT1_1 = "NO";
    wire p0 = INIT0[{D0, C0, B0, A0}], p1 = INIT1[{D1, C1, B1, A1}];
    wire middle = p0 ? CIN : INIT0[{B0, A0}];
    assign S0 = p0 ^ CIN;
    assign S1 = p1 ^ middle;
    assign COUT = p1 ? middle : INIT1[{B1, A1}];
endmodule
""" + LUT4_MODEL

# two registered 6-bit adders and a subtractor: three carry chains, no carry-out read
ADDERS = """
module top(input clk, input [5:0] a, input [5:0] b, input [5:0] c,
           output reg [5:0] s, output reg [5:0] t, output reg [5:0] d);
    always @(posedge clk) begin s <= a + b; t <= b + c; d <= a - c; end
endmodule
"""

# sums and differences of even and odd widths (carry-in 0 and 1), a signed compare and a sum
# whose carry-in is an input
MIXED = """
module top(input clk, input [5:0] a, input [5:0] b, input [5:0] c, input [6:0] e, input [6:0] f,
           input [4:0] p, input [4:0] q, input ci,
           output reg [5:0] s, output reg [5:0] d, output reg [6:0] w, output reg lt, output reg [4:0] u,
           output reg [4:0] k);
    always @(posedge clk) begin
        s <= a + b; d <= a - c; w <= e + f; lt <= $signed(e) < $signed(f); u <= p - q; k <= p + q + ci;
    end
endmodule
"""


def _synthesise(tmp_path, source: str = ADDERS) -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "top.v").write_text(source)
    yosys("read_verilog top.v\nsynth_ecp5 -top top\nwrite_json netlist.json\n", cwd=tmp_path)
    return json.loads((tmp_path / "netlist.json").read_text())


def _chain_ends(netlist: dict) -> list[dict]:
    """The CCU2Cs whose COUT no other CCU2C's CIN reads."""
    ccu = [c for c in cells_of(netlist).values() if c["type"] == "CCU2C"]
    cins = {c["connections"]["CIN"][0] for c in ccu}
    return [c for c in ccu if c["connections"]["COUT"][0] not in cins]


def test_unread_carry_outs_are_disconnected_and_chains_kept(tmp_path):
    netlist = _synthesise(tmp_path)
    ends = _chain_ends(netlist)
    assert len(ends) == 3 and all(not isinstance(c["connections"]["COUT"][0], str) for c in ends)
    links = sum(1 for c in cells_of(netlist).values() if c["type"] == "CCU2C") - len(ends)
    assert disconnect_unread(netlist["modules"]["top"]) == 3
    assert all(c["connections"]["COUT"] == ["x"] for c in ends)
    # the links inside each chain (a COUT read by the next cell's CIN) are left as they were
    assert sum(1 for c in cells_of(netlist).values()
               if c["type"] == "CCU2C" and c["connections"]["COUT"] != ["x"]) == links
    assert disconnect_unread(netlist["modules"]["top"]) == 0


def test_a_carry_out_read_by_an_output_stays(tmp_path):
    netlist = _synthesise(tmp_path)
    module = netlist["modules"]["top"]
    bit = _chain_ends(netlist)[0]["connections"]["COUT"][0]
    module["ports"]["carry"] = {"direction": "output", "bits": [bit]}
    assert disconnect_unread(module) == 2
    assert _chain_ends(netlist)[0]["connections"]["COUT"] == [bit]


def _packed_sites(netlist: dict, tmp_path) -> int:
    return packed_sites(netlist, tmp_path, part=("--25k", "--package", "CABGA256"))


def test_nextpnr_packs_two_sites_fewer_a_chain(tmp_path):
    gold = _synthesise(tmp_path)
    gate = json.loads(json.dumps(gold))
    assert disconnect_unread(gate["modules"]["top"]) == 3
    assert _packed_sites(gold, tmp_path / "gold") - _packed_sites(gate, tmp_path / "gate") == 2 * 3


def _first_cins(netlist: dict) -> list:
    ccu = [c for c in cells_of(netlist).values() if c["type"] == "CCU2C"]
    couts = {c["connections"]["COUT"][0] for c in ccu} - {"x"}
    return [c["connections"]["CIN"][0] for c in ccu if c["connections"]["CIN"][0] not in couts]


def _provable(netlist: dict) -> dict:
    """A copy of `netlist` whose unconnected cell outputs ("x", which Yosys's flatten refuses)
    drive wires of their own that nothing reads."""
    netlist = json.loads(json.dumps(netlist))
    fresh = 10 ** 6
    for cell in cells_of(netlist).values():
        for pin, bits in cell["connections"].items():
            if cell["port_directions"][pin] == "output" and bits == ["x"]:
                cell["connections"][pin] = [fresh]
                fresh += 1
    return netlist


def test_carry_ins_are_generated_inside_the_chains(tmp_path):
    gold = _synthesise(tmp_path, MIXED)
    ci = gold["modules"]["top"]["ports"]["ci"]["bits"][0]
    assert sorted(_first_cins(gold), key=str) == ["0", "0", "1", "1", "1", ci]
    gate = json.loads(json.dumps(gold))
    module = gate["modules"]["top"]
    disconnect_unread(module)
    assert absorb_carry_ins(module) == 6
    assert _first_cins(gate) == ["x"] * 6
    assert equivalent(_provable(gold), _provable(gate), tmp_path / "proof", models=CARRY_MODELS)
    assert absorb_carry_ins(module) == 0
    # the proof fails when the generated carry-in is wrong
    first = next(c for c in cells_of(gate).values() if c["type"] == "CCU2C" and c["connections"]["CIN"] == ["x"])
    first["parameters"]["INIT0"] = format(int(first["parameters"]["INIT0"], 2) ^ 0b1111, "016b")
    assert not equivalent(_provable(gold), _provable(gate), tmp_path / "wrong", models=CARRY_MODELS)


def test_nextpnr_packs_no_feed_in_cells(tmp_path):
    gold = _synthesise(tmp_path, MIXED)
    module = gold["modules"]["top"]
    disconnect_unread(module)
    gate = json.loads(json.dumps(gold))
    absorb_carry_ins(gate["modules"]["top"])
    luts = sum(1 for c in cells_of(gate).values() if c["type"] == "LUT4") - \
        sum(1 for c in cells_of(gold).values() if c["type"] == "LUT4")
    # a feed-in is a CCU2C (two sites); a chain of an even number of bits sums its lowest in a LUT4
    assert _packed_sites(gold, tmp_path / "gold") - _packed_sites(gate, tmp_path / "gate") == 2 * 6 - luts


# an accumulator with a reset select, a masked operand, a difference of a function and an
# operand selected by a flag: each a LUT4 of one or two nets in front of a carry chain
GATED = """
module top(input clk, input first, input m, input [7:0] x, input [5:0] a, input [5:0] b, input [5:0] c,
           input [5:0] e, input [5:0] f, output reg [11:0] acc, output reg [5:0] s, output reg [5:0] d,
           output reg [5:0] w);
    always @(posedge clk) begin
        acc <= (first ? 12'd0 : acc) + {{4{x[7]}}, x};
        s <= (a & {6{~m}}) + b;
        d <= c - (e ^ f);
        w <= ~a + (m ? b : 6'd0);
    end
endmodule
"""


def test_operand_luts_move_into_the_carry_chains(tmp_path):
    gold = _synthesise(tmp_path, GATED)
    disconnect_unread(gold["modules"]["top"])
    gate = json.loads(json.dumps(gold))
    luts = lambda n: sum(1 for c in cells_of(n).values() if c["type"] == "LUT4")     # noqa: E731
    absorbed = absorb_operand_luts(gate["modules"]["top"])
    # most bits of the four sums have a LUT of one or two nets in front (the 12-bit accumulator's
    # select, the mask, the xor, the inversion and the select of `w`); each absorbed LUT goes
    assert absorbed >= 24 and luts(gold) - luts(gate) == absorbed
    assert equivalent(_provable(gold), _provable(gate), tmp_path / "proof", models=CARRY_MODELS)
    assert absorb_operand_luts(gate["modules"]["top"]) == 0
    # then the carry-ins, as prepare() does: still the same function
    absorb_carry_ins(gate["modules"]["top"])
    assert equivalent(_provable(gold), _provable(gate), tmp_path / "proof2", models=CARRY_MODELS)
    # an absorbed half reads its gate on C with D tied to 1, its generate the other operand
    half = next(c for c in cells_of(gate).values() if c["type"] == "CCU2C"
                and not isinstance(c["connections"]["C0"][0], str))
    assert half["connections"]["D0"] == ["1"]
    # the proof fails when an absorbed function is wrong
    half["parameters"]["INIT0"] = format(int(half["parameters"]["INIT0"], 2) ^ (1 << 9), "016b")
    assert not equivalent(_provable(gold), _provable(gate), tmp_path / "wrong", models=CARRY_MODELS)


def test_nextpnr_packs_the_absorbed_luts_into_the_chains(tmp_path):
    gold = _synthesise(tmp_path, GATED)
    disconnect_unread(gold["modules"]["top"])
    gate = json.loads(json.dumps(gold))
    absorbed = absorb_operand_luts(gate["modules"]["top"])
    assert _packed_sites(gold, tmp_path / "gold") - _packed_sites(gate, tmp_path / "gate") == absorbed
