"""The plain-Verilog self-checking testbench of a design exported behind a bus (compiler.bus.wrapper),
for users without Python: the same test as the native testbench (compiler.export), driven
through AXI4-Lite or Wishbone as a processor would.

It writes every input bank through the bus (elements packed into 32-bit bus words as the map
places them), enables the interrupt, writes CTRL.START, waits for `irq`, reads CYCLES and
compares it with the cycle model, reads every output word through the bus and compares each
element with expected*.hex, clears the interrupt and checks `irq` falls. It prints PASS, or
FAIL and ends with `$fatal`.
"""
from __future__ import annotations

from typing import Any, Sequence

from .wrapper import ID_VALUE, IRQ_DONE, REG, BusMap

AXI_TASKS = """\
  reg [ADDR_BITS-1:0] awaddr = 0, araddr = 0;
  reg awvalid = 0, wvalid = 0, bready = 0, arvalid = 0, rready = 0;
  reg [31:0] wdata = 0;
  reg [3:0] wstrb = 0;
  wire awready, wready, bvalid, arready, rvalid;
  wire [1:0] bresp, rresp;
  wire [31:0] rdata;
  {top} dut(.clk(clk), .rst(rst), .irq(irq),
    .s_axi_awaddr(awaddr), .s_axi_awprot(3'b000), .s_axi_awvalid(awvalid), .s_axi_awready(awready),
    .s_axi_wdata(wdata), .s_axi_wstrb(wstrb), .s_axi_wvalid(wvalid), .s_axi_wready(wready),
    .s_axi_bresp(bresp), .s_axi_bvalid(bvalid), .s_axi_bready(bready),
    .s_axi_araddr(araddr), .s_axi_arprot(3'b000), .s_axi_arvalid(arvalid), .s_axi_arready(arready),
    .s_axi_rdata(rdata), .s_axi_rresp(rresp), .s_axi_rvalid(rvalid), .s_axi_rready(rready));

  // Every signal changes at a falling edge; a handshake seen at a falling edge is taken at
  // the next rising edge.
  reg aw_hs, w_hs, ar_hs;
  task bus_write(input [ADDR_BITS-1:0] a, input [31:0] d, output bad);
    begin
      @(negedge clk); awaddr = a; awvalid = 1; wdata = d; wstrb = 4'hf; wvalid = 1;
      while (awvalid || wvalid) begin
        aw_hs = awvalid & awready; w_hs = wvalid & wready;
        @(negedge clk);
        if (aw_hs) awvalid = 0;
        if (w_hs) wvalid = 0;
      end
      bready = 1;
      while (!bvalid) @(negedge clk);
      bad = bresp != 2'b00;
      @(negedge clk); bready = 0;
    end
  endtask
  task bus_read(input [ADDR_BITS-1:0] a, output [31:0] d, output bad);
    begin
      @(negedge clk); araddr = a; arvalid = 1;
      while (arvalid) begin
        ar_hs = arready;
        @(negedge clk);
        if (ar_hs) arvalid = 0;
      end
      rready = 1;
      while (!rvalid) @(negedge clk);
      d = rdata; bad = rresp != 2'b00;
      @(negedge clk); rready = 0;
    end
  endtask
"""

WISHBONE_TASKS = """\
  reg cyc = 0, stb = 0, we = 0;
  reg [ADDR_BITS-3:0] adr = 0;
  reg [31:0] dat_w = 0;
  reg [3:0] sel = 0;
  wire ack, err, stall;
  wire [31:0] dat_r;
  {top} dut(.clk(clk), .rst(rst), .irq(irq), .wb_cyc(cyc), .wb_stb(stb), .wb_we(we), .wb_adr(adr),
    .wb_dat_w(dat_w), .wb_sel(sel), .wb_dat_r(dat_r), .wb_ack(ack), .wb_err(err), .wb_stall(stall));

  // Classic cycles; every signal changes at a falling edge, ACK seen there ends the cycle at
  // the next rising edge.
  task bus_cycle(input write, input [ADDR_BITS-1:0] a, input [31:0] d, output [31:0] q, output bad);
    begin
      @(negedge clk); cyc = 1; stb = 1; we = write; adr = a >> 2; dat_w = d; sel = 4'hf;
      while (!(ack || err)) @(negedge clk);
      q = dat_r; bad = err;
      @(negedge clk); cyc = 0; stb = 0; we = 0;
    end
  endtask
  reg [31:0] unused;
  task bus_write(input [ADDR_BITS-1:0] a, input [31:0] d, output bad);
    bus_cycle(1, a, d, unused, bad);
  endtask
  task bus_read(input [ADDR_BITS-1:0] a, output [31:0] d, output bad);
    bus_cycle(0, a, 0, d, bad);
  endtask
"""


def load_lines(bmap: BusMap, p: Any, arr: str) -> str:
    """Verilog writing input bank `p` (an export.PortFile) from array `arr` through the bus
    (the `bus_write` task; `i`, `k`, `data`, `bad`, `errors` declared)."""
    b = bmap.bank(p.sel)
    c = b.container_bits
    where = f"// bank {p.sel}: buffer {p.buffer} ({b.dtype}), kernel {p.kernel} {p.memory}"
    if c == 64:
        return (f"    {where}\n    for (i = 0; i < {p.depth}; i = i + 1) begin\n"
                f"      bus_write({b.offset} + 8 * i, {arr}[i][31:0], bad); errors = errors + bad;\n"
                f"      bus_write({b.offset} + 8 * i + 4, {arr}[i][63:32], bad); errors = errors + bad;\n"
                f"    end")
    per = 32 // c
    return (f"    {where}\n    for (i = 0; i < {-(-p.depth // per)}; i = i + 1) begin\n"
            f"      data = 0;\n"
            f"      for (k = 0; k < {per}; k = k + 1)\n"
            f"        if (i * {per} + k < {p.depth}) data[k * {c} +: {c}] = {arr}[i * {per} + k];\n"
            f"      bus_write({b.offset} + 4 * i, data, bad); errors = errors + bad;\n"
            f"    end")


def bus_testbench_verilog(bmap: BusMap, ports: Sequence[Any], *, bus: str, top: str, cycles: int,
                          name: str) -> str:
    """tb.v for `<top>.v` wrapped by `bus`; run from the export folder. `ports`: the
    compiler.export.PortFile of every bank (which imports this module: not named here)."""
    limit = 2 * cycles + 1000
    arrays, loads, checks = [], [], []
    for p in ports:
        b = bmap.bank(p.sel)
        arr = f"{'in' if p.role == 'input' else 'exp'}{p.sel}"
        arrays.append(f"  reg [{p.width - 1}:0] {arr} [0:{p.depth - 1}];\n"
                      f"  initial $readmemh(\"{p.file}\", {arr});")
        c = b.container_bits
        where = f"// bank {p.sel}: buffer {p.buffer} ({b.dtype}), kernel {p.kernel} {p.memory}"

        def want(i: str) -> str:
            """Expected element `i` as the bus returns it: a narrow signed one sign-extended."""
            if b.sign_extend and p.width < c:
                return f"{{{{{c - p.width}{{{arr}[{i}][{p.width - 1}]}}}}, {arr}[{i}]}}"
            return f"{arr}[{i}]"
        if p.role == "input":
            loads.append(load_lines(bmap, p, arr))
        elif c == 64:
            checks.append(f"    {where}\n    for (i = 0; i < {p.depth}; i = i + 1) begin\n"
                          f"      bus_read({b.offset} + 8 * i, data, bad); errors = errors + bad; wide[31:0] = data;\n"
                          f"      bus_read({b.offset} + 8 * i + 4, data, bad); errors = errors + bad; wide[63:32] = data;\n"
                          f"      if ((^{arr}[i]) !== 1'bx) begin\n"
                          f"        words = words + 1;\n"
                          f"        if (wide !== {want('i')}) begin\n"
                          f"          errors = errors + 1;\n"
                          f"          if (errors <= 10) $display(\"MISMATCH bank %0d element %0d: got %h, expected %h\", "
                          f"{p.sel}, i, wide, {want('i')});\n"
                          f"        end\n      end\n    end")
        else:
            per = 32 // c
            checks.append(f"    {where}\n    for (i = 0; i < {-(-p.depth // per)}; i = i + 1) begin\n"
                          f"      bus_read({b.offset} + 4 * i, data, bad); errors = errors + bad;\n"
                          f"      for (k = 0; k < {per}; k = k + 1)\n"
                          f"        if (i * {per} + k < {p.depth} && (^{arr}[i * {per} + k]) !== 1'bx) begin\n"
                          f"          words = words + 1;\n"
                          f"          if (data[k * {c} +: {c}] !== {want(f'i * {per} + k')}) begin\n"
                          f"            errors = errors + 1;\n"
                          f"            if (errors <= 10) $display(\"MISMATCH bank %0d element %0d: got %h, expected %h\", "
                          f"{p.sel}, i * {per} + k, data[k * {c} +: {c}], {want(f'i * {per} + k')});\n"
                          f"          end\n        end\n    end")
    tasks = (AXI_TASKS if bus == "axi-lite" else WISHBONE_TASKS).format(top=top)
    nl = "\n"
    return f"""// Self-checking testbench for {top}, {name} behind {bus} (generated by tinyhw).
// Run from this folder:  iverilog -g2012 -o tb.vvp {top}.v tb.v && vvp tb.vvp
// Inputs are written through the bus, CTRL.START is written with the interrupt enabled, the
// testbench waits for irq, checks CYCLES against the cycle model, reads every output element
// through the bus and compares it with the simulation's (mem/expected*.hex; x: padding).
`timescale 1ns/1ps
module tb;
  localparam ADDR_BITS = {bmap.addr_bits};
  localparam CYCLES_MODEL = {cycles};
  localparam TIMEOUT = {limit};
  reg clk = 0;
  always #5 clk = ~clk;
  reg rst = 1;
  wire irq;
{tasks}
{nl.join(arrays)}

  integer i, k, waited, errors, words;
  reg bad;
  reg [31:0] data, measured;
  reg [63:0] wide;
  initial begin
    errors = 0; words = 0;
    @(negedge clk); @(negedge clk); rst = 0;
    bus_read({REG['ID']}, data, bad);
    if (bad || data !== 32'h{ID_VALUE:08x}) begin
      $display("FAIL: ID reads %h (error %0d), expected {ID_VALUE:08x}", data, bad);
      $fatal(1);
    end
{nl.join(loads)}
    if (errors != 0) begin
      $display("FAIL: %0d bus errors while writing the inputs", errors);
      $fatal(1);
    end
    bus_write({REG['IRQ_ENABLE']}, {IRQ_DONE}, bad); errors = errors + bad;
    bus_write({REG['CTRL']}, 1, bad); errors = errors + bad;
    waited = 0;
    while (irq !== 1'b1) begin
      if (waited >= TIMEOUT) begin
        $display("FAIL: no irq after %0d cycles (the cycle model says %0d)", waited, CYCLES_MODEL);
        $fatal(1);
      end
      @(negedge clk); waited = waited + 1;
    end
    bus_read({REG['CYCLES']}, measured, bad); errors = errors + bad;
    if (measured != CYCLES_MODEL) begin
      $display("FAIL: CYCLES reads %0d, the cycle model says %0d", measured, CYCLES_MODEL);
      errors = errors + 1;
    end
{nl.join(checks)}
    bus_write({REG['IRQ_STATUS']}, {IRQ_DONE}, bad); errors = errors + bad;
    @(negedge clk);
    if (irq !== 1'b0) begin
      $display("FAIL: irq still high after IRQ_STATUS was cleared");
      errors = errors + 1;
    end
    if (errors == 0) begin
      $display("PASS: %0d output words match, %0d cycles (= the cycle model), over {bus}", words, measured);
      $finish;
    end
    $display("FAIL: %0d mismatches or bus errors (%0d output words checked)", errors, words);
    $fatal(1);
  end
endmodule
"""
