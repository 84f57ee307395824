"""mem_tail="lut": a memory's nearly empty last block-RAM row in LUT RAM (compiler/hw/tail.py)."""
from __future__ import annotations

import numpy as np
import pytest
from tinygrad import Tensor

import designs
from compiler import HardwareConfig, compile_model, simulate
from compiler.hw.bram import block_rams, lut_tail


def _tails(design) -> dict[int, int]:
    return {slot: data.depth for k in design.top.kernels for slot, data in k.tails.items()}


def _fp32_gemv(M: int, K: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    W, x = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal(K).astype(np.float32)
    acc = np.zeros(M, np.float32)
    for k in range(K):                                    # tinygrad's sequential order
        acc = acc + W[:, k] * x[k]
    return Tensor(W) @ Tensor(x), acc


@pytest.mark.parametrize("depth, width, tail", [
    (3136, 32, 64),          # the fp32 GEMV 128x784 at 32 products a cycle: 7 blocks -> 6
    (1568, 32, 32),          # 64 products: 4 blocks (2048 x 9, four side by side) -> 3
    (2100, 32, 52),
    (3584, 32, 0),           # 7 full rows of 512
    (100352, 8, 0),          # 49 full rows of 2048 x 9
    (12544, 32, 0),          # not 256 words (8 Kbit) for one block: over 1/8 of its bits
    (392, 8, 0),             # less than one row
])
def test_the_tail_is_the_last_row_when_it_is_nearly_empty(depth, width, tail):
    assert lut_tail(depth, width) == tail
    if tail:
        assert block_rams(depth - tail, 1, width)[0] < block_rams(depth, 1, width)[0]


@pytest.mark.slow
@pytest.mark.parametrize("lanes, K, fp_pipeline, tail", [
    (1, 130, 0, 8),          # W banks of 520 words: 512 + a tail of 8
    (2, 130, 1, 8),
    (2, 130, 3, 8),
    (1, 393, 0, 36),         # 1,572 words: parts of 1,536 and 36, neither a power of two
    (2, 393, 1, 36),
])
def test_fp32_gemv_with_tails_is_bit_exact_in_both_simulators(lanes, K, fp_pipeline, tail):
    y, want = _fp32_gemv(4 * lanes, K)
    design = compile_model(y, config=HardwareConfig(lanes=lanes, fp_pipeline=fp_pipeline, mem_tail="lut"))
    assert sorted(_tails(design).values()) == [tail] * lanes
    for backend in ("pysim", "cxxrtl"):
        result = simulate(design, backend=backend)
        np.testing.assert_array_equal(result.outputs[0].view(np.uint32), want.view(np.uint32))
        assert result.cycles == design.cycles_formula
    plain = compile_model(y, config=HardwareConfig(lanes=lanes, fp_pipeline=fp_pipeline))
    assert _tails(plain) == {} and plain.cycles_formula == design.cycles_formula


@pytest.mark.slow
def test_a_packed_memory_keeps_its_tail_and_the_host_bus_writes_both_parts():
    case = designs.gemv_int8(16, 130)                    # 4 lanes: banks of 520 words, 4 to a word
    design = compile_model(*case.outputs, config=HardwareConfig(lanes=4, mem_pack=4, mem_tail="lut"))
    assert [len(p.slots) for p in design.packs[0]] == [4] and sorted(set(_tails(design).values())) == [8]
    for backend in ("pysim", "cxxrtl"):
        result = simulate(design, backend=backend)
        np.testing.assert_array_equal(result.outputs[0], case.reference[0])
        assert result.cycles == design.cycles_formula
    words = designs.run_on_host_bus(design)
    np.testing.assert_array_equal(np.asarray(words, np.uint64).astype(np.uint32).view(np.int32), case.reference[0])


def test_no_tail_for_written_memories_comb_reads_or_the_default():
    y, _ = _fp32_gemv(4, 130)
    assert _tails(compile_model(y)) == {}
    assert _tails(compile_model(y, config=HardwareConfig(mem_tail="lut", mem_read="comb"))) == {}
    design = compile_model(y, config=HardwareConfig(mem_tail="lut"))
    stored = {b.slot for k in design.kernels for b in k.buffers if b.stored}
    assert _tails(design) and not stored & set(_tails(design))


def test_mem_tail_is_validated():
    with pytest.raises(ValueError, match="mem_tail: expected 'block' or 'lut'"):
        HardwareConfig(mem_tail="distributed")


@pytest.mark.slow
def test_the_tail_saves_a_block_ram_on_ecp5_and_synthesises_everywhere():
    from compiler.synth.area import synthesize
    # an int32 GEMV: W's banks are shaped as the fp32 one's (520 words of 32 bits), with no
    # float units to synthesise five times
    rng = np.random.default_rng(0)
    y = Tensor(rng.integers(-99, 99, (4, 130), dtype=np.int32)) @ Tensor(rng.integers(-99, 99, 130, dtype=np.int32))
    block = compile_model(y)
    lut = compile_model(y, config=HardwareConfig(mem_tail="lut"))
    a, b = synthesize(block, "ecp5"), synthesize(lut, "ecp5")
    assert b.bram == a.bram - 1 and b.lutram == a.lutram + 8      # 8 x 32 bits: eight 16x4 LUT RAMs
    assert synthesize(lut, "xilinx").bram < synthesize(block, "xilinx").bram
    assert synthesize(lut, "ice40").bram >= 1                      # no LUT RAM there: still synthesises
