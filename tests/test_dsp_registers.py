"""compiler/pnr/dsp_registers.py: flip-flops around ECP5 multipliers moved into their registers,
checked by what it moves and by a formal equivalence proof of the netlists before and after."""
from __future__ import annotations

import json

import pytest

from compiler.pnr.dsp_registers import Packed, absorb, split_fanout
from compiler.tools import yosys
from helpers import cells_of, equivalent

TOOL_FIXTURES = {'netlists', 'broadcast'}     # they run Yosys or a C++ build: their users are slow (conftest.py)

# two int4 products sharing an operand register, with their operands and products registered
# (synchronous reset on rst, as Amaranth's sync domain has): `ra` feeds both multipliers and
# nothing else, so it goes; `rc` is also an output, so its flip-flops stay. 4-bit operands:
# synth_ecp5 still maps them to MULT18X18Ds, and the equivalence proofs below take seconds
# where 8-bit ones took a minute or more.
PRODUCT = """
module top(input clk, input rst, input signed [3:0] a, input signed [3:0] b, input signed [3:0] c,
           output reg signed [7:0] p, output reg signed [7:0] q, output [3:0] c_seen);
    reg signed [3:0] ra, rb, rc;
    assign c_seen = rc;
    always @(posedge clk)
        if (rst) begin ra <= 0; rb <= 0; rc <= 0; p <= 0; q <= 0; end
        else begin ra <= a; rb <= b; rc <= c; p <= ra * rb; q <= ra * rc; end
endmodule
"""


def _synthesise(tmp_path) -> dict:
    (tmp_path / "top.v").write_text(PRODUCT)
    yosys("read_verilog top.v\nsynth_ecp5 -top top\nwrite_json netlist.json\n", cwd=tmp_path)
    return json.loads((tmp_path / "netlist.json").read_text())


@pytest.fixture
def netlists(tmp_path):
    gold = _synthesise(tmp_path)
    gate = json.loads(json.dumps(gold))
    packed = absorb(gate["modules"]["top"])
    return gold, gate, packed


def test_operand_and_product_registers_move_into_the_multiplier(netlists):
    gold, gate, packed = netlists
    kinds = lambda n: sorted(c["type"] for c in cells_of(n).values())      # noqa: E731
    assert kinds(gold).count("MULT18X18D") == 2 and kinds(gold).count("TRELLIS_FF") == 3 * 4 + 2 * 8
    for dsp in (c for c in cells_of(gate).values() if c["type"] == "MULT18X18D"):
        assert {k: dsp["parameters"][k] for k in ("REG_INPUTA_CLK", "REG_INPUTB_CLK", "REG_OUTPUT_CLK")} == \
            dict.fromkeys(("REG_INPUTA_CLK", "REG_INPUTB_CLK", "REG_OUTPUT_CLK"), "CLK0")
    # ra, rb, p and q are gone; rc stays for c_seen, its multiplier holds its own copy
    assert packed == Packed(dsps=2, removed=2 * 4 + 2 * 8, kept=4)
    assert kinds(gate).count("TRELLIS_FF") == 4


def test_the_moved_registers_compute_what_the_flip_flops_did(netlists, tmp_path):
    gold, gate, _ = netlists
    assert equivalent(gold, gate, tmp_path / "packed")
    # and the proof can fail: the product register moved without its operands' is a cycle early
    early = json.loads(json.dumps(gold))
    dsp = next(c for c in cells_of(early).values() if c["type"] == "MULT18X18D")
    dsp["parameters"].update(REG_OUTPUT_CLK="CLK0", REG_OUTPUT_RST="RST0")
    dsp["connections"].update(CLK0=[next(c for c in cells_of(early).values() if c["type"] == "TRELLIS_FF")
                                    ["connections"]["CLK"][0]], RST0=["0"], CE0=["1"])
    assert not equivalent(gold, early, tmp_path / "early")


def test_a_register_with_a_clock_enable_stays_where_it_is(netlists):
    gold, _, _ = netlists
    cells = cells_of(gold)
    products = {b: n for n, c in cells.items() if c["type"] == "MULT18X18D"
                for pin, bits in c["connections"].items() if pin.startswith("P") for b in bits}
    ff = next(c for c in cells.values() if c["type"] == "TRELLIS_FF" and c["connections"]["DI"][0] in products)
    ff["connections"]["CE"] = [ff["connections"]["LSR"][0]]            # not free-running any more
    held = products[ff["connections"]["DI"][0]]
    assert absorb(gold["modules"]["top"]).dsps == 2
    # that multiplier keeps its product register in the fabric; the other takes its own
    outputs = {n: c["parameters"].get("REG_OUTPUT_CLK") for n, c in cells.items() if c["type"] == "MULT18X18D"}
    assert outputs.pop(held) is None and list(outputs.values()) == ["CLK0"]


# one loaded value broadcast to three products, each through its own operand register (Yosys
# merges the three into one); once they move into the multipliers, `rx` drives all three DSPs
BROADCAST = """
module top(input clk, input rst, input signed [3:0] x, input signed [11:0] w, output reg signed [23:0] p);
    reg signed [3:0] rx, ox; reg signed [11:0] ow;
    integer i;
    always @(posedge clk)
        if (rst) begin rx <= 0; ox <= 0; ow <= 0; p <= 0; end
        else begin
            rx <= x; ox <= rx; ow <= w;
            for (i = 0; i < 3; i = i + 1) p[8 * i +: 8] <= ox * ow[4 * i +: 4];
        end
endmodule
"""


@pytest.fixture
def broadcast(tmp_path):
    (tmp_path / "top.v").write_text(BROADCAST)
    yosys("read_verilog top.v\nsynth_ecp5 -top top\nwrite_json netlist.json\n", cwd=tmp_path)
    gold = json.loads((tmp_path / "netlist.json").read_text())
    gate = json.loads(json.dumps(gold))
    assert absorb(gate["modules"]["top"]).dsps == 3
    return gold, gate


def test_a_register_driving_many_multipliers_gets_a_twin_per_pair(broadcast):
    _, gate = broadcast
    module = gate["modules"]["top"]
    ffs = lambda: sum(c["type"] == "TRELLIS_FF" for c in module["cells"].values())   # noqa: E731
    before = ffs()
    assert split_fanout(module, group=2) == 4              # rx's 4 bits: 2 + 1 multipliers
    assert ffs() == before + 4
    # every flip-flop now drives at most two multipliers, and each bit of rx still reaches all three
    drivers = {c["connections"]["Q"][0]: n for n, c in module["cells"].items() if c["type"] == "TRELLIS_FF"}
    fed: dict[str, set[str]] = {}
    for name, cell in module["cells"].items():
        if cell["type"] == "MULT18X18D":
            for pin, bits in cell["connections"].items():
                if pin[0] in "AB" and bits[0] in drivers:
                    fed.setdefault(drivers[bits[0]], set()).add(name)
    assert max(len(d) for d in fed.values()) == 2
    assert sum(len(d) for d in fed.values()) == 3 * 4                # w comes from ports, not flip-flops
    assert split_fanout(module, group=2) == 0                          # nothing left to split


@pytest.mark.slow
def test_the_twins_compute_what_the_one_flip_flop_did(broadcast, tmp_path):
    gold, gate = broadcast
    assert split_fanout(gate["modules"]["top"], group=2) == 4
    assert equivalent(gold, gate, tmp_path / "proof")
