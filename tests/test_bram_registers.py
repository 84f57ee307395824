"""compiler/pnr/bram_registers.py: flip-flops after ECP5 block RAMs moved into the block RAMs'
output registers, checked by what it moves and by a formal equivalence proof of the netlists
before and after."""
from __future__ import annotations

import json

import pytest

from compiler.pnr.bram_registers import absorb_outputs
from compiler.tools import yosys
from test_dsp_registers import MODELS as FF_AND_DSP_MODELS, _cells, _equal

# a 36-bit memory (one DP16KD in its pseudo-dual-port mode) read into `d` and registered again
# into `q` (free-running, no reset: the datapath's read-data register); `tap` sees one of d's
# bits directly when `TAP` is set, which must keep the register where it is
MEMORY = """
module top(input clk, input we, input [8:0] wa, input [35:0] wd, input [8:0] ra, output reg [35:0] q
           `ifdef TAP , output tap `endif);
    (* no_rw_check *) reg [35:0] mem [0:511];
    reg [35:0] d;
    `ifdef TAP assign tap = d[3] ^ ra[0]; `endif
    always @(posedge clk) begin if (we) mem[wa] <= wd; d <= mem[ra]; q <= d; end
endmodule
"""

# A DP16KD whose memory is a fixed function of the read address: what is proved is where the
# data-out bits go and in which cycle, not what a memory holds (a real array would keep the
# induction from closing). Read latch on CLKB when CEB; the output register on OCEB, reset by
# RSTB; in the 36-bit mode DOB holds the word's low half and DOA its high half.
_IN = ([f"DI{p}{i}" for p in "AB" for i in range(18)] + [f"AD{p}{i}" for p in "AB" for i in range(14)]
       + [f"{s}{p}" for p in "AB" for s in ("CE", "OCE", "CLK", "WE", "RST", "CS0", "CS1", "CS2")])
_OUT = [f"DO{p}{i}" for p in "AB" for i in range(18)]
BRAM_MODEL = """
module DP16KD(%s, %s);
    parameter REGMODE_A = "NOREG"; parameter REGMODE_B = "NOREG";
    PARAMETERS
    input %s;
    output %s;
    wire [13:0] adb = {%s};
    wire [35:0] word = {adb[13:5] ^ 9'h15a, adb[13:5], ~adb[13:5], adb[12:5], adb[13]};
    reg [35:0] latch = 0, out = 0;
    always @(posedge CLKB) begin
        if (CEB) latch <= word;
        if (OCEB) out <= RSTB ? 36'd0 : latch;
    end
    wire [35:0] data = REGMODE_B == "OUTREG" ? out : latch;
    assign {%s} = data[35:18];
    assign {%s} = data[17:0];
endmodule
""" % (", ".join(_IN), ", ".join(_OUT), ", ".join(_IN), ", ".join(_OUT),
       ", ".join(f"ADB{i}" for i in reversed(range(14))),
       ", ".join(f"DOA{i}" for i in reversed(range(18))), ", ".join(f"DOB{i}" for i in reversed(range(18))))


def _synthesise(tmp_path, defines: str = "") -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "top.v").write_text(MEMORY)
    yosys(f"read_verilog {defines} top.v\nsynth_ecp5 -top top\nwrite_json netlist.json\n", cwd=tmp_path)
    return json.loads((tmp_path / "netlist.json").read_text())


def _kinds(netlist: dict) -> list[str]:
    return sorted(c["type"] for c in _cells(netlist).values())


@pytest.fixture
def equal(monkeypatch):
    """test_dsp_registers._equal with this DP16KD in its cell library, declaring every other
    parameter the netlist's DP16KD carries (their values do not matter to the model)."""
    import test_dsp_registers

    def proof(gold: dict, gate: dict, path) -> bool:
        names = {k for c in _cells(gold).values() if c["type"] == "DP16KD" for k in c["parameters"]}
        names -= {"REGMODE_A", "REGMODE_B"}
        declared = " ".join(f"parameter {k} = 0;" for k in sorted(names))
        monkeypatch.setattr(test_dsp_registers, "MODELS",
                            FF_AND_DSP_MODELS + BRAM_MODEL.replace("PARAMETERS", declared))
        return _equal(gold, gate, path)
    return proof


def test_the_read_data_register_moves_into_the_block_ram(tmp_path, equal):
    gold = _synthesise(tmp_path)
    gate = json.loads(json.dumps(gold))
    assert _kinds(gold).count("DP16KD") == 1 and _kinds(gold).count("TRELLIS_FF") == 36
    assert absorb_outputs(gate["modules"]["top"]) == 36
    assert "TRELLIS_FF" not in _kinds(gate)
    ram = next(c for c in _cells(gate).values() if c["type"] == "DP16KD")
    assert (ram["parameters"]["REGMODE_A"], ram["parameters"]["REGMODE_B"]) == ("OUTREG", "OUTREG")
    assert ram["connections"]["OCEB"] == ["1"]
    assert equal(gold, gate, tmp_path / "proof")
    assert absorb_outputs(gate["modules"]["top"]) == 0             # nothing left to move


def test_the_proof_can_fail(tmp_path, equal):
    """The output register switched on with the fabric register still after it: a cycle late."""
    gold = _synthesise(tmp_path)
    late = json.loads(json.dumps(gold))
    ram = next(c for c in _cells(late).values() if c["type"] == "DP16KD")
    ram["parameters"].update(REGMODE_A="OUTREG", REGMODE_B="OUTREG")
    assert not equal(gold, late, tmp_path / "late")


def test_a_data_bit_read_elsewhere_keeps_the_port_as_it_is(tmp_path):
    gold = _synthesise(tmp_path, "-DTAP")
    assert absorb_outputs(gold["modules"]["top"]) == 0
    assert _kinds(gold).count("TRELLIS_FF") == 36


def test_a_register_with_a_reset_stays(tmp_path):
    gold = _synthesise(tmp_path)
    cells = _cells(gold)
    ff = next(c for c in cells.values() if c["type"] == "TRELLIS_FF")
    ff["connections"]["LSR"] = [ff["connections"]["CLK"][0]]      # any net: a reset the port would drop
    assert absorb_outputs(gold["modules"]["top"]) == 0
