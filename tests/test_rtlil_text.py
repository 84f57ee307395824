"""compiler.synth.rtlil_text: memories that start at zero reach Yosys as a one-word init, and nothing
else changes (the simulator's netlist is the same text, synthesis the same resources)."""
from __future__ import annotations

import re

import pytest
from amaranth import Module
from amaranth.back import rtlil
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

import designs
from compiler import HardwareConfig, compile_model
from compiler.sim import cxxrtl
from compiler.synth import rtlil_text
from compiler.synth.area import synthesize_rtlil

_INIT = re.compile(r"cell \$meminit_v2 \S+\n(?:    .*\n)*?  end\n")


class _TwoMemories(wiring.Component):
    def __init__(self):
        super().__init__({"addr": In(10), "data": Out(8)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.zeros = zeros = Memory(shape=8, depth=1024, init=[])
        m.submodules.table = table = Memory(shape=8, depth=1024, init=[5, 6, 7])
        for mem in (zeros, table):
            write = mem.write_port()
            m.d.comb += [write.addr.eq(self.addr), write.data.eq(self.addr[:8]), write.en.eq(1)]
        read_zeros, read_table = zeros.read_port(), table.read_port()
        m.d.comb += [read_zeros.addr.eq(self.addr), read_table.addr.eq(self.addr),
                     self.data.eq(read_zeros.data ^ read_table.data)]
        return m


def _inits(text: str) -> dict[str, tuple[int, str]]:
    out = {}
    for cell in _INIT.findall(text):
        memid = re.search(r'MEMID "\\\\(\S+)"', cell).group(1)
        words = int(re.search(r"WORDS (\d+)", cell).group(1))
        out[memid] = (words, re.search(r"connect \\DATA (\S+)", cell).group(1))
    return out


def test_zero_memories_become_one_word_and_others_keep_their_contents():
    short = _inits(rtlil_text.convert(_TwoMemories()))
    full = _inits(rtlil.convert(_TwoMemories(), name="top"))     # plain Amaranth is untouched
    zeros = next(k for k in short if k.endswith("zeros"))
    table = next(k for k in short if k.endswith("table"))
    assert short[zeros] == (1, "8'00000000")
    assert full[zeros] == (1024, "8192'" + "0" * 8192)
    assert short[table] == full[table]
    assert short[table][0] == 1024 and short[table][1].endswith("00000111" "00000110" "00000101")


def test_the_simulators_netlist_is_unchanged():
    """CXXRTL drops all-zero init cells either way: the same text, so the same cached binary."""
    design = compile_model(*designs.gemv_int8(16, 64).outputs)
    assert cxxrtl.design_rtlil(design) == cxxrtl.prepare_rtlil(rtlil.convert(design.top, name="top"))


@pytest.mark.slow
@pytest.mark.parametrize("target, mem_read", [("ecp5", "sync"), ("ecp5", "comb"), ("ice40", "sync")])
def test_synthesis_counts_the_same_resources(tmp_path, target, mem_read):
    """The weight memory in block RAM, and in LUT RAM (mem_read=comb), through real Yosys."""
    design = compile_model(*designs.gemv_int8(16, 64).outputs, config=HardwareConfig(mem_read=mem_read))
    full, short = (synthesize_rtlil(text, target, tmp_path / form, use_cache=False)
                   for form, text in (("full", rtlil.convert(design.top, name="top")),
                                      ("short", rtlil_text.convert(design.top))))
    assert (full.luts, full.ffs, full.bram, full.lutram, full.dsp, full.cells) == \
           (short.luts, short.ffs, short.bram, short.lutram, short.dsp, short.cells)
    assert (full.bram > 0) == (mem_read == "sync")          # the memory really is block RAM / not
