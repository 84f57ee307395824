"""compiler/pnr/lutram_fanout.py: a register or LUT driving the addresses or write enable of
many TRELLIS_DPR16X4 gets a twin per few of them; the netlist after it computes what it did
before, cycle by cycle on random stimulus in Icarus with the cell models of
compiler/pnr/gate_sim.py."""
from __future__ import annotations

import json

import pytest

from compiler.pnr import lutram_fanout
from compiler.pnr.gate_sim import icarus
from compiler.tools import yosys
from helpers import needs_iverilog, synthesised_twice

pytestmark = [pytest.mark.slow, needs_iverilog]

# a 16 x 64 memory in LUT RAM (16 TRELLIS_DPR16X4), its read address and write port registered
MEMORY = """
module top(input clk, input we, input [3:0] wa, input [63:0] wd, input [3:0] ra, output reg [63:0] rd);
    reg [63:0] mem [0:15];
    reg [3:0] ra_q, wa_r;
    reg we_r;
    reg [63:0] wd_r;
    always @(posedge clk) begin
        we_r <= we; wa_r <= wa; wd_r <= wd;
        if (we_r) mem[wa_r] <= wd_r;
        ra_q <= ra;
        rd <= mem[ra_q];
    end
endmodule
"""


# the same memory read at a multiplexed address, as a word-written memory's read port is
# (hw/subword.py: the kernel's address register or the write's): a LUT4 a bit drives the RAMs
MUXED = MEMORY.replace("input [3:0] ra,", "input [3:0] ra, input sel,") \
              .replace("reg we_r;", "reg we_r, sel_q;") \
              .replace("ra_q <= ra;", "ra_q <= ra; sel_q <= sel;") \
              .replace("mem[ra_q]", "mem[sel_q ? ra_q : wa_r]")


@pytest.mark.parametrize("verilog, driver", [(MEMORY, "TRELLIS_FF"), (MUXED, "LUT4")], ids=["register", "lut"])
def test_addresses_and_write_enable_get_a_twin_per_group_and_the_memory_reads_the_same(tmp_path, verilog,
                                                                                       driver):
    gold, gate = synthesised_twice(verilog, tmp_path)
    module = gate["modules"]["top"]
    rams = [n for n, c in module["cells"].items() if c["type"] == "TRELLIS_DPR16X4"]
    assert len(rams) == 16

    def drivers() -> dict[tuple[str, object], set[str]]:
        """(RAM input, net) -> the RAMs it drives, for the read and write address and enable."""
        drives: dict[tuple[str, object], set[str]] = {}
        for name in rams:
            for pin, bits in module["cells"][name]["connections"].items():
                if pin.startswith(("RAD", "WAD", "WRE")):
                    for b in bits:
                        drives.setdefault((pin.rstrip("0123456789"), b), set()).add(name)
        return drives

    def kinds(input_: str) -> set[str]:
        """The cell types that drive the RAMs' `input_` pins."""
        nets = {b for (pin, b) in drives if pin == input_}
        return {c["type"] for c in module["cells"].values()
                if any(b in nets for pin, bits in c["connections"].items()
                       if c["port_directions"].get(pin) == "output" for b in bits)}
    before = drivers()
    assert sorted((pin, len(r)) for (pin, _), r in before.items()) == \
        [("RAD", 16)] * 4 + [("WAD", 16)] * 4 + [("WRE", 16)]
    assert lutram_fanout.split(module, group=4) == 9 * 3          # 4 + 4 + 1 nets, 3 twins each
    assert lutram_fanout.split(module, group=4) == 0              # nothing left to split
    drives = drivers()
    assert len(drives) == 4 * len(before) and all(len(r) == 4 for r in drives.values())
    assert kinds("RAD") == {driver} and kinds("WAD") == kinds("WRE") == {"TRELLIS_FF"}
    # the two netlists side by side on the same random writes and reads
    for name, netlist in (("gold", gold), ("gate", gate)):
        (tmp_path / f"{name}.json").write_text(json.dumps({"modules": {name: netlist["modules"]["top"]}}))
        yosys(f"read_json {name}.json\nwrite_verilog -noattr {name}.v\n", cwd=tmp_path, log_name=f"{name}.log")
    (tmp_path / "tb.v").write_text(("""
module tb;
  reg clk = 0; always #5 clk = ~clk;
  reg we, sel; reg [3:0] wa, ra; reg [63:0] wd; wire [63:0] a, b; integer i, errors = 0;
  gold g(.clk(clk), .we(we), .wa(wa), .wd(wd), .ra(ra), .rd(a)SEL);
  gate h(.clk(clk), .we(we), .wa(wa), .wd(wd), .ra(ra), .rd(b)SEL);
  initial begin
    for (i = 0; i < 400; i = i + 1) begin
      // every word written first (a LUT RAM starts undefined), then random writes and reads
      we = i < 16 || $random % 4 == 0; wa = i < 16 ? i : $random; ra = $random; sel = $random; wd = {$random, $random};
      @(negedge clk);
      if (i > 20 && a !== b) errors = errors + 1;
      if (i > 20 && ^a === 1'bx) errors = errors + 1;
    end
    $display("errors %0d", errors); $finish;
  end
endmodule
""").replace("SEL", ", .sel(sel)" if verilog is MUXED else ""))
    _, out = icarus(tmp_path, ["tb.v", "gold.v", "gate.v"], timeout=120)
    assert "errors 0" in out, out
