"""Memories moved to block RAM for the clock (Design.block_reads): a deep LUT RAM's read is a
multiplexer of LUT levels that a target clock may not leave room for; a block RAM's read data
comes from its output register."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from compiler import HardwareConfig, compile_model, simulate, simulate_many
from compiler.config import part
from compiler.hw.bram import ecp5_memory
from compiler.synth.area import design_rtlil, synthesize
from compiler.timing_model import DELAYS, block_ram_copy_ns, lutram_read_ns
from dse.estimate import design_features

from helpers import int8_mlp

BLOCK = 'attribute \\ram_style "block"'


def _flow(target_mhz=None, **knobs):
    # 16-8-4: the first layer's weights are one memory of 128 x 8 bits (8 rows of LUT RAM,
    # three multiplexer levels), the second's 32 x 8 (2 rows, one level)
    x, y, ref = int8_mlp([16, 8, 4])
    return x, compile_model(y, config=HardwareConfig(schedule="dataflow", fp_pipeline=3, target_mhz=target_mhz, **knobs),
                            stream=x), ref


def _deep(design):
    return {u.slot for u in design.memory_places if u.kernel == 0 and u.depth == 128 and u.plain}


def test_the_lutram_read_is_timed_by_its_rows():
    d = DELAYS[("ecp5", 6)]
    deep, shallow = lutram_read_ns(128, 8, 1, d)[0], lutram_read_ns(32, 8, 1, d)[0]
    assert ecp5_memory(128, 8).rows == 8 and ecp5_memory(32, 8).rows == 2
    assert deep - shallow == pytest.approx(2 * (d.route_local + d.lut) + d.route_ns(16) - d.route_ns(4))
    assert shallow < 5.0 < deep < 10.0      # at 200 MHz the deep one misses, at 100 neither


def test_a_deep_lutram_read_goes_to_block_ram_at_a_clock_it_misses():
    x, fast, ref = _flow(200)
    deep = _deep(fast)
    assert len(deep) == 1 and fast.block_reads[0] == frozenset(deep) and not any(fast.block_reads[1:])
    assert design_rtlil(fast).count(BLOCK) == 1
    for target in (None, 100):              # no clock asked, or one its read makes
        _, slow, _ = _flow(target)
        assert not any(slow.block_reads) and BLOCK not in design_rtlil(slow)
    _, plain, _ = _flow(100)
    # the estimator counts it a block RAM, the delay model no longer times its read
    assert design_features(fast, target="ecp5")["bram_blocks"] == design_features(plain, target="ecp5").get("bram_blocks", 0) + 1
    assert "LUT RAM's read (128 x 8" not in fast.timing_estimate().where
    rng = np.random.default_rng(3)
    xs = [rng.integers(-128, 128, 16).astype(np.int8) for _ in range(3)]
    for s, r in zip(xs, simulate_many(fast, [{x: s} for s in xs])):
        np.testing.assert_array_equal(np.asarray(r.outputs[0]).reshape(-1), ref(s))
        assert r.cycles == fast.cycle_model().total


def test_only_while_the_parts_block_rams_last(monkeypatch):
    full = part("LFE5U-85F")
    _, d, _ = _flow(200)
    used = sum(u.place.cells * u.copies for u in d.memory_places if u.place.kind == "bram")
    monkeypatch.setattr(HardwareConfig, "timing_part",
                        lambda self: dataclasses.replace(full, capacity={**full.capacity, "DP16KD": used}))
    _, none_left, _ = _flow(200)
    assert not any(none_left.block_reads)
    # the estimate then says the read is the design's slowest path
    assert "LUT RAM's read (128 x 8" in none_left.timing_estimate().where


@pytest.mark.slow
def test_synthesis_builds_the_moved_memory_in_block_ram(tmp_path):
    _, fast, _ = _flow(200)
    _, plain, _ = _flow(100)
    a, b = synthesize(fast, "ecp5", tmp_path / "fast"), synthesize(plain, "ecp5", tmp_path / "plain")
    assert a.bram == b.bram + 1 and a.lutram < b.lutram
    for design, area in ((fast, a), (plain, b)):
        assert design_features(design, target="ecp5").get("bram_blocks", 0) == area.bram


def test_a_copy_source_moves_where_the_copy_registers_its_data_and_a_host_read_stays():
    """A sequential copy to the next kernel registers its read data at target_mhz (a block
    RAM's output register holds it: hw/top.registers_copy_data), so the 128-word hidden layer
    of a 16-128-4 MLP, read through four LUT levels in LUT RAM, moves to block RAM; bit-exact.
    The host reads an output's data unregistered (5.6 ns of clock-to-out): an output never
    moves."""
    x, y, ref = int8_mlp([16, 128, 4])
    design = compile_model(y, config=HardwareConfig(fp_pipeline=3, target_mhz=200))
    sources = {(ph.src[0], b) for ph in design.phases if hasattr(ph, "dsts") for b in design.banking_of(*ph.src).banks}
    moved = {(k, b) for k, slots in enumerate(design.block_reads) for b in slots}
    assert sources and sources <= moved
    s = np.random.default_rng(2).integers(-128, 128, 16).astype(np.int8)
    r = simulate(design, {x: s})
    np.testing.assert_array_equal(np.asarray(r.outputs[0]).reshape(-1), ref(s))
    assert r.cycles == design.cycle_model().total

    outputs = {(hp.kernel, hp.slot) for hp in design.host_ports if hp.read}
    assert outputs and all(b in design._read_outside(k, registered_copies=False) for k, b in outputs)


def test_a_copy_from_block_ram_is_timed_from_the_register_it_reads_through():
    """The sequential top's copy from a block RAM (a 512-word hidden layer): unregistered, its
    read data leaves the block 5.6 ns after the clock, the delay model's slowest path at 200 MHz
    (timing_model.block_ram_copy_ns); with target_mhz the copy registers it (a register the block
    takes as its output register: hw/top.registers_copy_data), a cycle more a copy, and the
    path is no longer the slowest. Both bit-exact, their cycles the cycle model's."""
    from amaranth.back import rtlil
    x, y, ref = int8_mlp([16, 512, 4])
    d = DELAYS[("ecp5", 6)]
    s = np.random.default_rng(5).integers(-128, 128, 16).astype(np.int8)
    cycles = {}
    for target in (None, 200):
        design = compile_model(y, config=HardwareConfig(fp_pipeline=3, target_mhz=target))
        r = simulate(design, {x: s})
        np.testing.assert_array_equal(np.asarray(r.outputs[0]).reshape(-1), ref(s))
        assert r.cycles == design.cycle_model().total
        cycles[target] = r.cycles
        copies = [ph for ph in design.phases if hasattr(ph, "dsts")]
        assert len(copies) == 1
        registered = "copy1_data_b0" in rtlil.convert(design.top, name="top")
        assert registered == (target is not None)
        ns, what = block_ram_copy_ns(1, 1, d, registered=registered)
        assert ns == pytest.approx((d.bram_clk_q_reg if registered else d.bram_clk_q) + d.route_ns(1) + d.setup)
        est = design.timing_estimate()
        assert est.period_ns >= ns
        if registered:
            assert what not in est.where
    assert cycles[200] - cycles[None] >= 1                  # the copy's cycle (and the target's stages)
