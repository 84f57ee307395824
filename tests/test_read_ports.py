"""compiler/synth/read_ports.py: a memory read at many ports reaches Yosys as copies of a few
ports each (Yosys 0.70's memory_libmap stops on one of 13 or more)."""
from __future__ import annotations

import json
import re
import subprocess

import pytest
from amaranth.hdl import Module
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from compiler.export import write_verilog
from compiler.synth import read_ports, rtlil_text
from compiler.synth.area import synthesize_rtlil
from compiler.synth.read_ports import READ_PORTS_PER_COPY, split_read_ports
from compiler.tools import yosys
from helpers import needs_iverilog


class _ManyReads(wiring.Component):
    """An 8 x 16 memory written at one port and read at `ports`, each at its own address."""

    def __init__(self, ports: int):
        self.ports = ports
        super().__init__({"waddr": In(4), "wdata": In(8), "we": In(1),
                          **{f"raddr{i}": In(4) for i in range(ports)}, **{f"rdata{i}": Out(8) for i in range(ports)}})

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = memory.Memory(shape=8, depth=16, init=[])
        wp = mem.write_port()
        m.d.comb += [wp.addr.eq(self.waddr), wp.data.eq(self.wdata), wp.en.eq(self.we)]
        for i in range(self.ports):
            rp = mem.read_port()
            m.d.comb += [rp.addr.eq(getattr(self, f"raddr{i}")), getattr(self, f"rdata{i}").eq(rp.data)]
        return m


def _rtlil(ports: int) -> str:
    return rtlil_text.convert(_ManyReads(ports), name="top")


def _reads(text: str) -> dict[str, int]:
    """memory name -> the read ports ($memrd_v2 cells) it has."""
    names = re.findall(r"^\s*memory .* (\\\S+)$", text, re.M)
    memids = re.findall(r'cell \$memrd_v2 \S+\n(?:\s+parameter (?!\\MEMID)[^\n]*\n)*\s+parameter \\MEMID "\\(\S+)"',
                        text)
    return {n: memids.count(n) for n in names}


def test_a_memory_of_18_read_ports_becomes_three_copies_each_with_the_write_port():
    split = split_read_ports(_rtlil(18))
    assert sorted(_reads(split).values()) == [2, 8, 8]
    writes = re.findall(r"cell \$memwr_v2 \S+\n(.*?)\n\s*end\n", split, re.S)
    assert len(writes) == 3                                            # one per copy
    assert len({re.sub(r'MEMID "[^"]*"', "", w) for w in writes}) == 1  # all alike but the memory
    few = _rtlil(READ_PORTS_PER_COPY)
    assert split_read_ports(few) == few                                # few ports: as it was


@pytest.mark.slow                   # Yosys
def test_yosys_maps_18_read_ports_and_the_copies_cost_what_the_ports_did(tmp_path, monkeypatch):
    many = synthesize_rtlil(_rtlil(18), "ecp5", tmp_path / "18", use_cache=False)
    assert many.lutram == 18 * 2        # a copy of the 16 x 8 bits per read port: 2 cells of 16 x 4
    # 9 ports, split 8 + 1, cost what they do whole (11, the most Yosys maps, takes it 50 s)
    split = synthesize_rtlil(_rtlil(9), "ecp5", tmp_path / "split", use_cache=False)
    monkeypatch.setattr(read_ports, "READ_PORTS_PER_COPY", 9)
    whole = synthesize_rtlil(_rtlil(9), "ecp5", tmp_path / "whole", use_cache=False)
    assert (split.lutram, split.luts, split.ffs) == (whole.lutram, whole.luts, whole.ffs) and split.lutram == 9 * 2


_BENCH = """`timescale 1ns/1ps
module bench;
  reg clk = 0, rst = 0, we = 0;
  reg [3:0] waddr = 0; reg [7:0] wdata = 0;
{regs}
  top dut(.clk(clk), .rst(rst), .waddr(waddr), .wdata(wdata), .we(we), {ports});
  always #5 clk = ~clk;
  integer i, bad = 0;
  initial begin
    for (i = 0; i < 16; i = i + 1) begin
      @(negedge clk) we = 1; waddr = i; wdata = 7 * i + 3;
    end
    @(negedge clk) we = 0;
    @(negedge clk); @(negedge clk);
{checks}
    if (bad == 0) $display("PASS"); else $display("FAIL %0d", bad);
    $finish;
  end
endmodule
"""


@pytest.mark.slow                   # Yosys, Icarus
@needs_iverilog
def test_the_exported_verilog_of_18_read_ports_synthesises_and_every_copy_is_written(tmp_path):
    """The export (compiler/export.py write_verilog) writes the copies too: a user's Yosys 0.70
    stopped in synth_ecp5 on the Verilog of this memory whole ("thrown Wasm exception"); split,
    it maps (a 16 x 4 LUT-RAM pair per port) and each port, in Icarus, reads what the one write
    port wrote."""
    ports = 18
    verilog = write_verilog(None, tmp_path, top="top", module=_ManyReads(ports))
    text = verilog.read_text()
    assert len(re.findall(r"reg \[7:0\] \S+ +\[15:0\];", text)) == 3
    yosys("read_verilog top.v\nsynth_ecp5 -top top -json top.json\n", cwd=tmp_path, log_name="synth.log")
    cells = json.loads((tmp_path / "top.json").read_text())["modules"]["top"]["cells"].values()
    assert sum(c["type"] == "TRELLIS_DPR16X4" for c in cells) == 2 * ports
    regs = "\n".join(f"  reg [3:0] raddr{j} = {(5 * j) % 16}; wire [7:0] rdata{j};" for j in range(ports))
    wires = ", ".join(f".raddr{j}(raddr{j}), .rdata{j}(rdata{j})" for j in range(ports))
    checks = "\n".join(f"    if (rdata{j} !== 8'd{(7 * ((5 * j) % 16) + 3) % 256}) bad = bad + 1;" for j in range(ports))
    (tmp_path / "bench.v").write_text(_BENCH.format(regs=regs, ports=wires, checks=checks))
    subprocess.run(["iverilog", "-g2012", "-o", "sim", "bench.v", "top.v"], cwd=tmp_path, check=True)
    out = subprocess.run(["vvp", "-n", "sim"], cwd=tmp_path, check=True, capture_output=True, text=True).stdout
    assert "PASS" in out, out
