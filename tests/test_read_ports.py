"""compiler/synth/read_ports.py: a memory read at many ports reaches Yosys as copies of a few
ports each (Yosys 0.70's memory_libmap stops on one of 13 or more)."""
from __future__ import annotations

import re

import pytest
from amaranth.hdl import Module
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from compiler.synth import read_ports, rtlil_text
from compiler.synth.area import synthesize_rtlil
from compiler.synth.read_ports import READ_PORTS_PER_COPY, split_read_ports


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
