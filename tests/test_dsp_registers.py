"""compiler/pnr/dsp_registers.py: flip-flops around ECP5 multipliers moved into their registers,
checked by what it moves and by a formal equivalence proof of the netlists before and after."""
from __future__ import annotations

import json

import pytest

from compiler.pnr.dsp_registers import Packed, absorb, split_fanout
from compiler.tools import yosys

# two int8 products sharing an operand register, with their operands and products registered
# (synchronous reset on rst, as Amaranth's sync domain has): `ra` feeds both multipliers and
# nothing else, so it goes; `rc` is also an output, so its flip-flops stay
PRODUCT = """
module top(input clk, input rst, input signed [7:0] a, input signed [7:0] b, input signed [7:0] c,
           output reg signed [15:0] p, output reg signed [15:0] q, output [7:0] c_seen);
    reg signed [7:0] ra, rb, rc;
    assign c_seen = rc;
    always @(posedge clk)
        if (rst) begin ra <= 0; rb <= 0; rc <= 0; p <= 0; q <= 0; end
        else begin ra <= a; rb <= b; rc <= c; p <= ra * rb; q <= ra * rc; end
endmodule
"""

# behavioural models of what the netlists use: TRELLIS_FF (clock enable 1, synchronous reset
# to 0 on LSR) and MULT18X18D with its input and output registers (Yosys's own simulation model
# refuses registered modes)
_PORTS = ([f"A{i}" for i in range(18)] + [f"B{i}" for i in range(18)] + [f"C{i}" for i in range(18)]
          + ["SIGNEDA", "SIGNEDB", "SOURCEA", "SOURCEB", "CLK0", "CE0", "RST0", "RST1", "RST2", "RST3"])
MODELS = """
module TRELLIS_FF(input CLK, input DI, input LSR, output reg Q);
    parameter GSR = "ENABLED"; parameter CEMUX = "1"; parameter CLKMUX = "CLK"; parameter LSRMUX = "LSR";
    parameter SRMODE = "LSR_OVER_CE"; parameter REGSET = "RESET";
    always @(posedge CLK) Q <= LSR ? 1'b0 : DI;
endmodule
module MULT18X18D(%s, %s);
    parameter REG_INPUTA_CLK = "NONE"; parameter REG_INPUTB_CLK = "NONE"; parameter REG_OUTPUT_CLK = "NONE";
    parameter REG_INPUTA_RST = "RST0"; parameter REG_INPUTB_RST = "RST0"; parameter REG_OUTPUT_RST = "RST0";
    parameter REG_INPUTA_CE = "CE0"; parameter REG_INPUTB_CE = "CE0"; parameter REG_OUTPUT_CE = "CE0";
    parameter GSR = "ENABLED"; parameter RESETMODE = "SYNC";
    input %s;
    output %s;
    wire [17:0] a = {%s}, b = {%s};
    wire [3:0] rst = {RST3, RST2, RST1, RST0};
    function integer line(input [8*4-1:0] name); line = name[7:0] - "0"; endfunction
    reg [17:0] ra = 0, rb = 0; reg [35:0] rp = 0;
    wire [17:0] xa = REG_INPUTA_CLK == "NONE" ? a : ra, xb = REG_INPUTB_CLK == "NONE" ? b : rb;
    wire [35:0] prod = $signed({SIGNEDA & xa[17], xa}) * $signed({SIGNEDB & xb[17], xb});
    always @(posedge CLK0) begin
        ra <= rst[line(REG_INPUTA_RST)] ? 18'd0 : a;
        rb <= rst[line(REG_INPUTB_RST)] ? 18'd0 : b;
        rp <= rst[line(REG_OUTPUT_RST)] ? 36'd0 : prod;
    end
    wire [35:0] p = REG_OUTPUT_CLK == "NONE" ? prod : rp;
    assign {%s} = p;
endmodule
""" % (", ".join(_PORTS), ", ".join(f"P{i}" for i in range(36)), ", ".join(_PORTS),
       ", ".join(f"P{i}" for i in range(36)), ", ".join(f"A{i}" for i in reversed(range(18))),
       ", ".join(f"B{i}" for i in reversed(range(18))), ", ".join(f"P{i}" for i in reversed(range(36))))


def _synthesise(tmp_path) -> dict:
    (tmp_path / "top.v").write_text(PRODUCT)
    yosys("read_verilog top.v\nsynth_ecp5 -top top\nwrite_json netlist.json\n", cwd=tmp_path)
    return json.loads((tmp_path / "netlist.json").read_text())


def _cells(netlist: dict) -> dict:
    return netlist["modules"]["top"]["cells"]


@pytest.fixture
def netlists(tmp_path):
    gold = _synthesise(tmp_path)
    gate = json.loads(json.dumps(gold))
    packed = absorb(gate["modules"]["top"])
    return gold, gate, packed


def test_operand_and_product_registers_move_into_the_multiplier(netlists):
    gold, gate, packed = netlists
    kinds = lambda n: sorted(c["type"] for c in _cells(n).values())      # noqa: E731
    assert kinds(gold).count("MULT18X18D") == 2 and kinds(gold).count("TRELLIS_FF") == 3 * 8 + 2 * 16
    for dsp in (c for c in _cells(gate).values() if c["type"] == "MULT18X18D"):
        assert {k: dsp["parameters"][k] for k in ("REG_INPUTA_CLK", "REG_INPUTB_CLK", "REG_OUTPUT_CLK")} == \
            dict.fromkeys(("REG_INPUTA_CLK", "REG_INPUTB_CLK", "REG_OUTPUT_CLK"), "CLK0")
    # ra, rb, p and q are gone; rc stays for c_seen, its multiplier holds its own copy
    assert packed == Packed(dsps=2, removed=2 * 8 + 2 * 16, kept=8)
    assert kinds(gate).count("TRELLIS_FF") == 8


def _wrapper(module: dict) -> str:
    """A top instantiating `gold` and `gate` (both of `module`'s ports) side by side."""
    ports = module["ports"]
    decl = [f"input [{len(p['bits']) - 1}:0] {n}" for n, p in ports.items() if p["direction"] == "input"]
    decl += [f"output [{len(p['bits']) - 1}:0] {n}_{side}" for n, p in ports.items()
             if p["direction"] == "output" for side in ("gold", "gate")]
    conns = lambda side: ", ".join(f".{n}({n}_{side})" if p["direction"] == "output" else f".{n}({n})"  # noqa: E731
                                   for n, p in ports.items())
    return f"module both({', '.join(decl)});\n    gold g({conns('gold')});\n    gate t({conns('gate')});\nendmodule\n"


def _equal(gold: dict, gate: dict, tmp_path) -> bool:
    """Yosys's proof that two netlists of one module give the same outputs in every cycle
    (temporal induction over their miter, every register starting at 0, rst a free input). A
    wrapper instantiates both, so `hierarchy` gives each MULT18X18D its parameters."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "models.v").write_text(MODELS)
    (tmp_path / "both.v").write_text(_wrapper(gold["modules"]["top"]))
    for name, netlist in (("gold", gold), ("gate", gate)):
        only = {"modules": {name: netlist["modules"]["top"]}}      # the cell library comes from MODELS
        (tmp_path / f"{name}.json").write_text(json.dumps(only))
    yosys("read_verilog models.v\nread_json gold.json\nread_json gate.json\nread_verilog both.v\n"
          "hierarchy -top both\nproc\nflatten gold gate\nmiter -equiv -flatten -make_assert gold gate miter\n"
          "hierarchy -top miter\nflatten\nopt_clean\n"
          "tee -o proof.txt sat -tempinduct -prove-asserts -set-init-zero -seq 1 -maxsteps 8 miter\n",
          cwd=tmp_path, log_name="equiv.log")
    return "Induction step proven: SUCCESS!" in (tmp_path / "proof.txt").read_text()


def test_the_moved_registers_compute_what_the_flip_flops_did(netlists, tmp_path):
    gold, gate, _ = netlists
    assert _equal(gold, gate, tmp_path / "packed")
    # and the proof can fail: the product register moved without its operands' is a cycle early
    early = json.loads(json.dumps(gold))
    dsp = next(c for c in _cells(early).values() if c["type"] == "MULT18X18D")
    dsp["parameters"].update(REG_OUTPUT_CLK="CLK0", REG_OUTPUT_RST="RST0")
    dsp["connections"].update(CLK0=[next(c for c in _cells(early).values() if c["type"] == "TRELLIS_FF")
                                    ["connections"]["CLK"][0]], RST0=["0"], CE0=["1"])
    assert not _equal(gold, early, tmp_path / "early")


def test_a_register_with_a_clock_enable_stays_where_it_is(netlists):
    gold, _, _ = netlists
    cells = _cells(gold)
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
module top(input clk, input rst, input signed [7:0] x, input signed [23:0] w, output reg signed [47:0] p);
    reg signed [7:0] rx, ox; reg signed [23:0] ow;
    integer i;
    always @(posedge clk)
        if (rst) begin rx <= 0; ox <= 0; ow <= 0; p <= 0; end
        else begin
            rx <= x; ox <= rx; ow <= w;
            for (i = 0; i < 3; i = i + 1) p[16 * i +: 16] <= ox * ow[8 * i +: 8];
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
    assert split_fanout(module, group=2) == 8              # rx's 8 bits: 2 + 1 multipliers
    assert ffs() == before + 8
    # every flip-flop now drives at most two multipliers, and each bit of rx still reaches all three
    drivers = {c["connections"]["Q"][0]: n for n, c in module["cells"].items() if c["type"] == "TRELLIS_FF"}
    fed: dict[str, set[str]] = {}
    for name, cell in module["cells"].items():
        if cell["type"] == "MULT18X18D":
            for pin, bits in cell["connections"].items():
                if pin[0] in "AB" and bits[0] in drivers:
                    fed.setdefault(drivers[bits[0]], set()).add(name)
    assert max(len(d) for d in fed.values()) == 2
    assert sum(len(d) for d in fed.values()) == 3 * 8                # w comes from ports, not flip-flops
    assert split_fanout(module, group=2) == 0                          # nothing left to split


@pytest.mark.slow
def test_the_twins_compute_what_the_one_flip_flop_did(broadcast, tmp_path):
    gold, gate = broadcast
    assert split_fanout(gate["modules"]["top"], group=2) == 8
    assert _equal(gold, gate, tmp_path / "proof")
