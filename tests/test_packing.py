"""mem_pack: banks of one buffer side by side in one memory (compiler/hw/packing.py)."""
from __future__ import annotations

import numpy as np
import pytest

import designs
from compiler import HardwareConfig, compile_model, simulate
from compiler.hw.bram import block_rams
from compiler.hw.packing import auto_pack


def _packs(design):
    return [(pos, p.name, len(p.slots), p.depth) for pos, ps in enumerate(design.packs) for p in ps]


def _check(case, config, backends=("pysim", "cxxrtl")):
    design = compile_model(*case.outputs, config=config)
    for backend in backends:
        result = simulate(design, backend=backend)
        for got, want in zip(result.outputs, case.reference):
            np.testing.assert_array_equal(got, want)
        assert result.cycles == design.cycles_formula
    return design


def test_block_ram_counts_of_the_18kbit_modes():
    assert block_rams(392, 1, 8) == (1, 1)            # 2048 x 9: one block, 4% used
    assert block_rams(392, 4, 8) == (1, 1)            # 512 x 36: four int8 elements per word
    assert block_rams(392, 5, 8) == (2, 1)            # an element never straddles two blocks
    assert block_rams(6272, 1, 8) == (4, 1)           # 8192 x 2, four side by side
    assert block_rams(6272, 4, 8) == (13, 13)         # 512 x 36: fewer blocks, a deeper stack
    assert block_rams(6272, 4, 8, max_rows=1) == (16, 1)
    assert block_rams(100, 1, 32) == (1, 1) and block_rams(100, 2, 32) == (2, 1)
    assert block_rams(100, 1, 64) == (2, 1)           # wider than any port: side by side


@pytest.mark.parametrize("banks, depth, width, want", [
    (256, 392, 8, 4),        # the int8 GEMV 128x784 at 16 x 16: 64 blocks instead of 256
    (16, 6272, 8, 1),        # at 4 x 4: packing would only stack deeper
    (16, 49, 8, 4),
    (64, 392, 16, 2),
    (32, 392, 32, 1),        # a 32-bit bank already fills a block's width
    (1, 10, 8, 1),
])
def test_auto_pack(banks, depth, width, want):
    assert auto_pack(banks, depth, width) == want


@pytest.mark.slow
@pytest.mark.parametrize("lanes, reduce_unroll, mem_pack", [(3, 5, "auto"), (4, 4, 2), (4, 4, 16), (1, 8, 3), (16, 16, "auto")])
def test_packed_gemv_is_bit_exact_in_both_simulators(lanes, reduce_unroll, mem_pack):
    design = _check(designs.gemv_int8(16, 64), HardwareConfig(lanes=lanes, reduce_unroll=reduce_unroll, mem_pack=mem_pack))
    packs = _packs(design)
    assert packs and all(g > 1 for _, _, g, _ in packs)
    if isinstance(mem_pack, int):
        assert max(g for _, _, g, _ in packs) == min(mem_pack, lanes * reduce_unroll)


@pytest.mark.slow
@pytest.mark.parametrize("fp_pipeline", [1, 2])
def test_packed_reads_through_the_pipeline(fp_pipeline):
    """fp_pipeline 2 registers read addresses before they fan out: the group's first bank's
    registered address drives the shared port."""
    design = _check(designs.gemv_int8(12, 40), HardwareConfig(lanes=4, reduce_unroll=4, fp_pipeline=fp_pipeline))
    assert _packs(design)


@pytest.mark.slow
def test_packed_fp16_tree_sum_is_bit_exact_against_its_golden_model():
    import dataclasses
    from dse.models import zoo
    tg = zoo.import_tinygrad()
    built = zoo.gemv("fp16", 12, 40)
    arrays = zoo.make_inputs(built, 0)
    tensors = [tg.Tensor(np.asarray(arrays[n])).realize() for n in built.inputs]
    design = compile_model(built.forward(*tensors),
                           config=HardwareConfig(lanes=2, reduce_unroll=4, fp_sum="tree", fp_pipeline=1))
    assert [len(p.slots) for p in design.packs[0]] == [2] * 6     # two 16-bit elements per 36-bit word
    want = zoo.reference("gemv", "fp16", {"M": 12, "K": 40}, arrays, dataclasses.replace(zoo.arith_for("fp16", "tinygrad"), sum_tree=4))
    for backend in ("pysim", "cxxrtl"):
        result = simulate(design, backend=backend)
        np.testing.assert_array_equal(result.outputs[0], want)
        assert result.cycles == design.cycles_formula


def test_mem_pack_1_and_comb_reads_keep_one_memory_per_bank():
    case = designs.gemv_int8(16, 64)
    for config in (HardwareConfig(lanes=4, reduce_unroll=4, mem_pack=1),
                   HardwareConfig(lanes=4, reduce_unroll=4, mem_read="comb")):
        assert _packs(_check(case, config, ("pysim",))) == []
    # comb reads with an explicit packing still pack (LUT RAM or flip-flops)
    assert _packs(_check(case, HardwareConfig(lanes=4, reduce_unroll=4, mem_read="comb", mem_pack=4), ("pysim",)))


@pytest.mark.slow
def test_written_buffers_are_never_packed_and_copies_fill_packed_memories():
    """The second layer of an MLP reads the first's output through a copy into a packed
    memory (per-element write enables); the outputs the kernels write stay one bank each."""
    case = designs.SMALL["mlp_int8_small"]()
    design = _check(case, HardwareConfig(lanes=2, reduce_unroll=4), ("pysim", "cxxrtl"))
    second = {p.name for p in design.packs[1]}
    assert "mem_b1_w0" in second                       # the copied hidden activations
    for pos, kernel in enumerate(design.kernels):
        stored = {b.slot for b in kernel.buffers if b.stored}
        assert not stored & {s for p in design.packs[pos] for s in p.slots}


def test_host_bus_writes_one_bank_of_a_packed_memory():
    case = designs.gemv_int8(8, 16)
    design = compile_model(*case.outputs, config=HardwareConfig(lanes=2, reduce_unroll=4, mem_pack=8))
    assert _packs(design)
    words = designs.run_on_host_bus(design)
    np.testing.assert_array_equal(np.asarray(words, np.uint64).astype(np.uint32).view(np.int32), case.reference[0])


def test_shared_buffers_are_not_packed():
    case = designs.SMALL["residual_mlp"]()
    design = _check(case, HardwareConfig(lanes=2, reduce_unroll=4, share_buffers=True), ("pysim",))
    for sh in design.shares:
        for place in (sh.reader, sh.owner):
            banks = set(design.banking_of(*place).banks)
            assert not banks & {s for p in design.packs_of(place[0]) for s in p.slots}


def test_mem_pack_is_validated():
    with pytest.raises(ValueError, match="mem_pack: expected 'auto' or an integer"):
        HardwareConfig(mem_pack=0)
    with pytest.raises(ValueError, match="mem_pack"):
        HardwareConfig(mem_pack="widest")


@pytest.mark.slow
def test_packing_saves_block_rams_in_synthesis():
    """16 int8 banks of 392 words: 16 blocks alone, 4 packed four to a 36-bit word."""
    from compiler.synth.area import synthesize
    case = designs.gemv_int8(16, 392)
    counts = {}
    for pack in (1, "auto"):
        design = compile_model(*case.outputs, config=HardwareConfig(reduce_unroll=16, mem_pack=pack))
        counts[pack] = synthesize(design, "ecp5").bram
    assert counts[1] >= 16 and counts["auto"] <= counts[1] - 12, counts
