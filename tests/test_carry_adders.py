"""compiler.synth.carry_adders: 4-bit adders on ECP5 carry chains. The mapped netlist computes
what its Verilog says on every input (Yosys's ECP5 cell models in Icarus), each 4-bit sum of
two signals takes two CCU2C and no LUT4, a sum with a constant stays LUT logic, and a compiled
narrow constant layer's netlist passes its own testbench."""
from __future__ import annotations

import json

import numpy as np
import pytest

from compiler import HardwareConfig, compile_model
from compiler.pnr.gate_sim import check_netlist, icarus
from compiler.synth import carry_adders
from compiler.synth.area import TARGETS, family_flow, synthesize
from compiler.tools import yosys
from helpers import needs_iverilog

# every output a 4-bit result: sums and differences of signals at 3 and 4 bits, signed and
# unsigned, two compares (which read the chain's carry out), and an increment (a constant operand)
OPS = """
  assign y0 = $signed(c) + $signed(d);
  assign y1 = a + b;
  assign y2 = a - b;
  assign y3 = {1'b0, c} + {1'b0, d};
  assign y4 = $signed(a) - $signed(c);
  assign lt_s = $signed(a) < $signed(b);
  assign lt_u = a < b;
  assign inc = a + 4'd1;
"""
PORTS = ("input [3:0] a, input [3:0] b, input [2:0] c, input [2:0] d, output [3:0] y0, output [3:0] y1, "
         "output [3:0] y2, output [3:0] y3, output [3:0] y4, output lt_s, output lt_u, output [3:0] inc")
OUTS = ("y0", "y1", "y2", "y3", "y4", "lt_s", "lt_u", "inc")


def _mapped(tmp_path, body: str) -> dict[str, int]:
    """The module `top` (ports PORTS, `body`) through the ECP5 flow: its cells by type; the
    netlist written as netlist.v (module `top`)."""
    (tmp_path / "top.v").write_text(f"module top({PORTS});\n{body}endmodule\n")
    (tmp_path / carry_adders.FILE).write_text(carry_adders.MAP)
    flow = family_flow("ecp5", "", TARGETS["ecp5"] + "\n")
    yosys(f"read_verilog top.v\n{flow}tee -q -o stat.json stat -json\nwrite_verilog -noattr netlist.v\n",
          cwd=tmp_path, log_name="yosys.log", timeout=300)
    return {k: int(v) for k, v in json.loads((tmp_path / "stat.json").read_text())["design"]["num_cells_by_type"].items()}


def test_the_flow_maps_four_bit_sums_where_synth_ecp5_reaches_its_gate_map():
    flow = family_flow("ecp5", "", TARGETS["ecp5"] + "\n")
    assert "-run map_ffram:map_gates\n" + carry_adders.COMMANDS + "synth_ecp5 -top top -nowidelut -run map_gates:" in flow
    assert family_flow("ice40", "", TARGETS["ice40"] + "\n") == TARGETS["ice40"] + "\n"


@pytest.mark.slow
@needs_iverilog
def test_four_bit_sums_on_two_carry_cells_compute_what_the_verilog_says(tmp_path):
    cells = _mapped(tmp_path, OPS.replace("  assign lt_s", "  // ").replace("  assign lt_u", "  // ")
                    .replace("  assign inc", "  // ") + "  assign lt_s = 0; assign lt_u = 0; assign inc = 0;\n")
    assert cells.get("CCU2C") == 10 and "LUT4" not in cells       # five sums, two cells each, nothing else
    cells = _mapped(tmp_path, OPS)
    assert cells.get("CCU2C", 0) >= 10
    # the reference: the same Verilog, renamed; every input (2**14) through both
    (tmp_path / "golden.v").write_text(f"module golden({PORTS});\n{OPS}endmodule\n")
    wires = "".join(f"  wire [3:0] r_{o}, n_{o};\n" for o in OUTS)
    conn = lambda p: ", ".join(f".{o}({p}_{o})" for o in OUTS)   # noqa: E731
    checks = " || ".join(f"r_{o} !== n_{o}" for o in OUTS)
    (tmp_path / "tb.v").write_text(
        "`timescale 1ns/1ps\nmodule tb;\n  reg [3:0] a, b; reg [2:0] c, d; integer i, bad = 0;\n" + wires +
        f"  golden r(.a(a), .b(b), .c(c), .d(d), {conn('r')});\n  top n(.a(a), .b(b), .c(c), .d(d), {conn('n')});\n"
        "  initial begin\n    for (i = 0; i < 16384; i = i + 1) begin\n"
        "      {a, b, c, d} = i; #1;\n"
        f"      if ({checks}) bad = bad + 1;\n    end\n"
        '    $display("MISMATCHES %0d", bad); $finish;\n  end\nendmodule\n')
    ok, out = icarus(tmp_path, ["tb.v", "golden.v", "netlist.v"], top="tb", timeout=300)
    assert ok and "MISMATCHES 0" in out, out


@pytest.mark.slow
@needs_iverilog
def test_a_narrow_constant_layer_netlist_passes_its_testbench(tmp_path):
    """A 16x16 layer of 2-bit weights on 2-bit inputs (adders of 3 to 6 bits, a third of them 4)
    synthesised with its netlist and simulated cell by cell with its exported testbench."""
    from tinygrad import Tensor, dtypes
    rng = np.random.default_rng(5)
    W = rng.integers(-2, 2, (16, 16))
    x = Tensor(np.zeros(16, np.int8)).realize()
    w = Tensor(W.astype(np.int8)).realize()
    y = w.cast(dtypes.int32) @ x.cast(dtypes.int32)
    config = HardwareConfig(weights="constant", lanes=16, reduce_unroll=16, fp_pipeline=0)
    design = compile_model(y, config=config, stream=x, input_ranges={x: (-2, 1), w: (-2, 1)})
    area = synthesize(design, "ecp5", tmp_path / "synth", netlist=True, use_cache=False)
    assert area.cells.get("CCU2C", 0) > 0
    check = check_netlist(design, area.netlist_path, tmp_path / "gate", timeout=600)
    assert check.passed, check
