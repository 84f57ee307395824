"""Where Yosys puts a memory on ECP5 (compiler/hw/bram.ecp5_memory), against Yosys itself: the
memories are built as the kernels build them (Amaranth memories, clocked read ports that say
`no_rw_check`, a write enable per packed bank), synthesised by the explorer's flow, and the
block RAMs and LUT-RAM primitives it reports must be the model's."""
from __future__ import annotations

import pytest
from amaranth.back import rtlil
from amaranth.hdl import Module, Signal
from amaranth.lib import memory

from compiler.hw.bram import MemoryPlace, ecp5_memory
from compiler.hw.kernel import NO_RW_CHECK
from compiler.synth.area import synthesize_rtlil
from compiler.timing_model import BRAM_MIN_BITS


def _memory_rtlil(depth: int, width: int, ports: int, enables: int) -> str:
    m = Module()
    mem = memory.Memory(shape=width, depth=depth, init=[], attrs=NO_RW_CHECK)
    m.submodules.mem = mem
    wp = mem.write_port(granularity=width // enables) if enables > 1 else mem.write_port()
    waddr, wdata, we = Signal(range(depth)), Signal(width), Signal(enables)
    m.d.comb += [wp.addr.eq(waddr), wp.data.eq(wdata), wp.en.eq(we)]
    io = [waddr, wdata, we]
    for i in range(ports):
        rp = mem.read_port()
        addr, data = Signal(range(depth), name=f"ra{i}"), Signal(width, name=f"rd{i}")
        m.d.comb += [rp.addr.eq(addr), data.eq(rp.data)]
        io += [addr, data]
    return rtlil.convert(m, name="top", ports=io)


# (depth, width, read ports, write-enable fields): shapes on both sides of Yosys's choice that a
# threshold of bits gets wrong (36 x 32 and 40 x 36 are block RAMs below 1,536 bits, 32 x 64 is
# LUT RAM above it), and port copies and packed banks' enables
SHAPES = [(36, 32, 1, 1), (32, 32, 1, 1), (36, 32, 1, 4), (40, 36, 1, 1), (32, 64, 1, 1), (256, 6, 1, 1),
          (96, 12, 1, 1), (24, 48, 2, 1), (72, 32, 2, 4)]


def test_the_model_prices_the_shapes_as_memory_libmap_does():
    """Worked by hand from Yosys's prices (block 128, primitive 4, multiplexer and decoder bits
    0.5): 36 x 32 in LUT RAM is 24 primitives, a 3-row multiplexer of 32 bits and the write
    enable decoded to 3 rows, 96 + 32 + 1.5 > 128; 32 x 32 is 16 primitives, 64 + 16 + 1 < 128;
    32 x 64 is 32 primitives and 2 rows, 128 + 32 + 1 against 2 blocks (256)."""
    assert ecp5_memory(36, 32) == MemoryPlace("bram", 1, 1)
    assert ecp5_memory(32, 32) == MemoryPlace("lutram", 16, 2)
    assert 36 * 32 < BRAM_MIN_BITS and 32 * 64 >= BRAM_MIN_BITS     # where bits alone say otherwise
    assert ecp5_memory(32, 64) == MemoryPlace("lutram", 32, 2)
    assert ecp5_memory(36, 32, ports=2) == MemoryPlace("bram", 2, 1)        # a copy per read port


@pytest.mark.slow
@pytest.mark.parametrize("depth,width,ports,enables", SHAPES, ids=[f"{d}x{w}_p{p}_e{e}" for d, w, p, e in SHAPES])
def test_yosys_builds_each_memory_where_the_model_says(tmp_path, depth, width, ports, enables):
    place = ecp5_memory(depth, width, ports, enables)
    report = synthesize_rtlil(_memory_rtlil(depth, width, ports, enables), "ecp5", tmp_path)
    built = (report.bram, report.lutram)
    assert built == ((place.cells, 0) if place.kind == "bram" else (0, place.cells)), (place, report.cells)
