"""Four-bit adders on ECP5 carry chains.

Yosys's ECP5 map builds an adder (`$alu`) on CCU2C carry cells from 5 result bits on; up to 4
it leaves the adder to generic gates, which the LUT mapper packs into LUT4s. On a LUT4-only
fabric (the flow's `-nowidelut`) that is the cheaper build up to 3 bits and the dearer one at
4: a 4-bit sum in LUT4s takes five of them (bits 0 and 1 one each, the carry into bit 2 one,
bits 2 and 3 one each), on carry cells two CCU2C, four LUT sites, and one carry chain's delay
(about 1 ns on grade 6) where the LUTs take two levels and a route between them. da4ml's
netlists show it adder by adder: its 4-bit `shift_adder` modules map to 5 LUT4s, its 3-bit
ones to 3. Narrow formats are made of such adders: a 32x32 constant layer at w2a2 has 33 of
4 bits among its 143 (docs/area.md).

`MAP` is a techmap for `$alu` cells of exactly 4 result bits whose operands are both signals.
A sum with a constant operand stays LUT logic: a negation (0 - x, an empty or constant A) is 3
LUT4s there (its low bit is x's), and a counter's increment folds into the counter's own
multiplexers. `COMMANDS` runs it between synth_ecp5's coarse
steps and its gate map, where the adders are `$alu` cells already sized by `wreduce`.

Each cell half computes one bit: A = a, C = b, D = BI, B tied high, so the half's LUT4 is the
propagate a ^ b ^ BI and its LUT2 (the LUT4's INIT with C = D = 0) the generate, a: where the
propagate is 0, a equals the (inverted, for a subtraction) b, and the carry out is a.
"""
from __future__ import annotations

from .lut_multiplier import _lut_init

WIDTH = 4
"""The result width mapped here; narrower adders stay LUT logic (3 LUT4s at 3 bits against 2
CCU2C), wider ones go to Yosys's own carry map."""

FILE = "tinyhw_alu4.v"

_PROPAGATE = _lut_init(lambda a, b, c, d: a ^ c ^ d)


def _half(i: int) -> str:
    return f".A{i % 2}(a[{i}]), .B{i % 2}(1'b1), .C{i % 2}(b[{i}]), .D{i % 2}(BI)"


MAP = f"""(* techmap_celltype = "$alu" *)
module _tinyhw_alu{WIDTH}_ccu2c (A, B, CI, BI, X, Y, CO);
  parameter A_SIGNED = 0; parameter B_SIGNED = 0;
  parameter A_WIDTH = 1; parameter B_WIDTH = 1; parameter Y_WIDTH = 1;
  parameter [A_WIDTH-1:0] _TECHMAP_CONSTMSK_A_ = 0;
  parameter [B_WIDTH-1:0] _TECHMAP_CONSTMSK_B_ = 0;
  input [A_WIDTH-1:0] A; input [B_WIDTH-1:0] B; input CI, BI;
  output [Y_WIDTH-1:0] X, Y, CO;
  wire _TECHMAP_FAIL_ = Y_WIDTH != {WIDTH} || A_WIDTH == 0 || B_WIDTH == 0 || &_TECHMAP_CONSTMSK_A_
                        || &_TECHMAP_CONSTMSK_B_;
  wire [{WIDTH - 1}:0] a, b;
  genvar i;
  generate for (i = 0; i < {WIDTH}; i = i + 1) begin : extend
    if (i < A_WIDTH) assign a[i] = A[i]; else assign a[i] = A_SIGNED ? A[A_WIDTH-1] : 1'b0;
    if (i < B_WIDTH) assign b[i] = B[i]; else assign b[i] = B_SIGNED ? B[B_WIDTH-1] : 1'b0;
  end endgenerate
  wire [{WIDTH // 2}:0] c;
  assign c[0] = CI;
""" + "".join(
    f"""  CCU2C #(.INIT0(16'h{_PROPAGATE:04x}), .INIT1(16'h{_PROPAGATE:04x}), .INJECT1_0("NO"), .INJECT1_1("NO"))
    cell{k} (.CIN(c[{k}]), {_half(2 * k)}, {_half(2 * k + 1)}, .S0(Y[{2 * k}]), .S1(Y[{2 * k + 1}]), .COUT(c[{k + 1}]));
""" for k in range(WIDTH // 2)) + f"""  // X and the carries out of the even bits, which the cells do not bring out, as gates:
  // nothing reads them in a sum (opt_clean drops them); a compare reads the top carry, a cell's
  wire [{WIDTH - 1}:0] bb = b ^ {{{WIDTH}{{BI}}}};
  assign X = a ^ bb;
""" + "".join(
    f"  assign CO[{i}] = " + (f"c[{i // 2 + 1}];\n" if i % 2 else
                             f"(a[{i}] & bb[{i}]) | ((a[{i}] ^ bb[{i}]) & c[{i // 2}]);\n")
    for i in range(WIDTH)) + "endmodule\n"

COMMANDS = f"techmap -map {FILE} t:$alu r:Y_WIDTH={WIDTH} %i\n"
"""Yosys commands between synth_ecp5's `-run :map_gates` and `-run map_gates:`."""
