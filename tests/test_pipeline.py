"""fp_pipeline: pipelined float units, registered loads and products, interleaved float sums,
split deep memories. Every point bit-exact against the references, with simulated cycles
equal to the cycle model (pysim, and CXXRTL where marked)."""
from __future__ import annotations

import re

import numpy as np
import pytest
from tinygrad import Tensor

import designs
from compiler import CompileError, HardwareConfig, compile_model, ir, simulate, timing_model
from compiler.dtypes import BOOL, FP32, INT32
from compiler.fp import BF16, FP16, FP32 as F32, FAdd, FloatToFloat, FloatToInt, FMul, FWideMul, IntToFloat
from compiler.fp import reference as R
from compiler.fp.muladd import FMulAdd
from compiler.fp.harness import Bank, NativeEvaluator, build_all
from compiler.float_timing import IN_DESIGN, float_units, measured, ring_period_ns, unit_period_ns
from compiler.hw.floatops import max_stages
from compiler.hw.pipeline import ring_adders, schedule
from compiler.overflow import analyze_overflow
from compiler.hw.bram import column_depth as bram_depth
from compiler.passes.interleave import interleave_ways
from compiler.sim import cxxrtl
from dse.models import zoo
from helpers import assert_exact, assert_same_floats, compile_zoo, float_pairs, int_vectors, run_zoo, same_bits

LEVELS = [0, 1, 2, 3]
INT_LEVELS = [1, 2, 3, 4]          # 4 differs from 3 only in integer products (a second register)


def check(case, **knobs):
    design = compile_model(*case.outputs, config=HardwareConfig(**knobs))
    result = simulate(design)
    assert_exact(result.outputs, case.reference)
    assert result.cycles == design.cycles_formula
    return design, result


# ------------------------------------------------------------------ the knob

@pytest.mark.parametrize("value", [-1, "2", True, 1.5, None, 5, 10**30])
def test_fp_pipeline_is_validated(value):
    with pytest.raises(ValueError) as err:
        HardwareConfig(fp_pipeline=value)
    assert str(err.value) == ("HardwareConfig.fp_pipeline: expected an integer from 0 to 4 (pipeline register "
                              f"levels; at 4 every unit is fully pipelined), got {value!r}")


def test_fp_pipeline_is_a_knob_with_default_0():
    assert "fp_pipeline" in HardwareConfig.knob_names()
    assert HardwareConfig().fp_pipeline == 0
    assert HardwareConfig.from_dict({"fp_pipeline": 3}).fp_pipeline == 3       # 3: every unit at its maximum


# ------------------------------------------------------------------ pipelined float units

ADD_STAGES, MUL_STAGES = len(FAdd.CUTS) + 1, len(FMul.CUTS) + 1


def _unit_bank(fmt, latency: int, modes) -> tuple[Bank, dict]:
    units = {}
    for r, s in modes:
        if latency < ADD_STAGES:
            units[f"add_{r}_{s}"] = (FAdd(fmt, r, s, stages=latency + 1), {"a": "a", "b": "b"})
            units[f"sub_{r}_{s}"] = (FAdd(fmt, r, s, subtract=True, stages=latency + 1), {"a": "a", "b": "b"})
        if latency < ADD_STAGES - 2:        # at a target clock: other boundaries (FAdd.CLOCK_ORDER)
            units[f"cadd_{r}_{s}"] = (FAdd(fmt, r, s, stages=latency + 1, clock=True), {"a": "a", "b": "b"})
        units[f"mul_{r}_{s}"] = (FMul(fmt, r, s, stages=latency + 1), {"a": "a", "b": "b"})
        if fmt is FP16 and latency < len(FWideMul.CUTS) + 1:    # the exact product of halves in float32
            units[f"wmul_{s}"] = (FWideMul(fmt, F32, s, stages=latency + 1), {"a": "a", "b": "b"})
        other = F32 if fmt is not F32 else FP16     # conversions: 2 stages, more at a target clock
        if latency < len(IntToFloat.CUTS) + 1:
            units[f"i2f_{r}_{s}"] = (IntToFloat(32, True, fmt, r, s, stages=latency + 1), {"a": "i"})
        if latency < len(FloatToFloat.CUTS) + 1:
            units[f"f2f_{r}_{s}"] = (FloatToFloat(fmt, other, r, s, stages=latency + 1), {"a": "a"})
        if latency in (1, 2):                       # 3 stages: with its CLOCK_CUTS
            units[f"f2i_{s}"] = (FloatToInt(fmt, 16, True, s, stages=latency + 1), {"a": "a"})
    return Bank({"a": fmt.width, "b": fmt.width, "i": 32}, units), units


def _check_units(fmts, modes, every: int):
    rng = np.random.default_rng(11)
    jobs = []
    for fmt in fmts:
        a, b = float_pairs(fmt, rng)
        ins = {"a": a[::every], "b": b[::every]}
        ins["i"] = int_vectors(len(ins["a"]), rng)
        for latency in range(1, MUL_STAGES):
            bank, _ = _unit_bank(fmt, latency, modes)
            jobs.append((fmt, latency, ins, NativeEvaluator(bank, latency=latency)))
    build_all([ev for *_, ev in jobs])
    for fmt, latency, ins, ev in jobs:
        out = ev.run(ins)
        for r, s in modes:
            what = f"{fmt.name} latency {latency} {r} {s}"
            if latency < ADD_STAGES:
                assert_same_floats(out[f"add_{r}_{s}_y"], R.add(ins["a"], ins["b"], fmt, r, s), fmt, f"add {what}",
                                   ins["a"], ins["b"])
                assert_same_floats(out[f"sub_{r}_{s}_y"], R.add(ins["a"], ins["b"], fmt, r, s, subtract=True), fmt,
                                   f"sub {what}", ins["a"], ins["b"])
            if f"cadd_{r}_{s}_y" in out:
                assert_same_floats(out[f"cadd_{r}_{s}_y"], R.add(ins["a"], ins["b"], fmt, r, s), fmt,
                                   f"add at a clock {what}", ins["a"], ins["b"])
            assert_same_floats(out[f"mul_{r}_{s}_y"], R.mul(ins["a"], ins["b"], fmt, r, s), fmt, f"mul {what}",
                               ins["a"], ins["b"])
            if f"wmul_{s}_y" in out:
                wide = [R.float_to_float(R.flush_inputs(x, fmt, s), fmt, F32) for x in (ins["a"], ins["b"])]
                assert_same_floats(out[f"wmul_{s}_y"], R.mul(*wide, F32), F32, f"wmul {what}", ins["a"], ins["b"])
            other = F32 if fmt is not F32 else FP16
            if f"i2f_{r}_{s}_y" in out:
                ints = R.wrap_int(ins["i"], 32, True)
                assert_same_floats(out[f"i2f_{r}_{s}_y"], R.int_to_float(ints, fmt, r, s), fmt, f"i2f {what}", ints)
            if f"f2f_{r}_{s}_y" in out:
                assert_same_floats(out[f"f2f_{r}_{s}_y"], R.float_to_float(ins["a"], fmt, other, r, s), other,
                                   f"f2f {what}", ins["a"])
            if latency in (1, 2):
                want = R.float_to_int(ins["a"], fmt, 16, True, s) & 0xFFFF
                assert (out[f"f2i_{s}_y"].astype(np.int64) == want).all(), f"f2i {what}"


@pytest.mark.slow
def test_pipelined_float_units_are_bit_exact_in_every_format_and_mode():
    """FAdd at 2..10 stages (and 2..8 in its order at a target clock), FMul at 2..10, FWideMul
    (fp16 -> fp32) at 2..10, IntToFloat at 2..5, FloatToFloat at 2..4, FloatToInt at 2..3, fed one
    vector per cycle, against the numpy reference in fp32, fp16 and bf16, each rounding and each
    subnormal mode once (rne with subnormals kept, rtz with them flushed): a third of
    test_fp_units' vectors (those check every vector and every pair of modes through the
    combinational units; here it is the pipelining that is checked, which every vector and mode
    crosses the same way)."""
    _check_units([F32, FP16, BF16], [("rne", "keep"), ("rtz", "flush")], every=3)


def _fma_vectors(seed: int):
    """(makers, inputs, port widths) for FMulAdd as tinygrad's MULACC builds it in each format
    (name -> (src, dst)), triples a, b, c of every kind of value (float_pairs)."""
    rng = np.random.default_rng(seed)
    makers = {"fp32": (F32, F32), "fp16": (FP16, FP16), "bf16": (BF16, F32)}
    ins = {}
    for name, (src, _) in makers.items():
        a, b = float_pairs(src, rng)
        ins.update({f"{name}_a": a[::5], f"{name}_b": b[::5], f"{name}_c": np.roll(b[::5], 7)})
    n = min(len(v) for v in ins.values())
    ins = {k: v[:n] for k, v in ins.items()}
    return makers, ins, {k: makers[k.split("_")[0]][0].width for k in ins}


@pytest.mark.slow
def test_fused_multiply_adds_at_a_target_clock_are_bit_exact():
    """FMulAdd as fp_semantics=tinygrad builds MULACC (fp32 and fp16 via float64, bf16 into fp32
    via float64) with the first of its CLOCK_CUTS (9 stages) and with all of them (16: the
    operands' register before the multiplier, the alignment's amount, the signed sum, the
    leading-zero count, the first rounding, the half-width products and their sums, the
    operands' counts: a value that did not cross one of them would arrive a cycle early), and
    in a ring's order (FMulAdd.CLOCK_ORDER) at 6 and 8, fed one triple a cycle, against the
    reference. Up to 8 stages in CUTS order, fp_pipeline's netlists are unchanged."""
    makers, ins, ports = _fma_vectors(12)
    jobs = []
    # a ring's fewer stages in CLOCK_ORDER: 6 and 8, the ways fp_pipeline 3 interleaves at least
    for stages, clock in ((9, False), (len(FMulAdd.CUTS) + 1, False), (6, True), (8, True)):
        units = {name: (FMulAdd(src, dst, 53, stages=stages, clock=clock), {x: f"{name}_{x}" for x in "abc"})
                 for name, (src, dst) in makers.items()}
        jobs.append((stages, NativeEvaluator(Bank(ports, units), latency=stages - 1)))
    build_all([ev for _, ev in jobs])
    for stages, ev in jobs:
        out = ev.run(ins)
        for name, (src, dst) in makers.items():
            a, b, c = (ins[f"{name}_{x}"] for x in "abc")
            assert_same_floats(out[f"{name}_y"], R.fma(a, b, c, src, dst, 53), dst, f"fma {name} at {stages} stages",
                               a, b)


@pytest.mark.slow
def test_a_rings_fused_multiply_add_takes_its_addend_after_the_product():
    """FMulAdd(ring=True), a ring's unit: a and b go through the product's LEAD boundaries, c
    (the accumulator) is taken when the product is ready and goes through the unit's own stages
    (1, 2, 6, 8 and all 12 of RING_ORDER). Fed c LEAD cycles after its a and b, one triple a
    cycle, it equals the reference in each format tinygrad's MULACC takes; a c taken with a
    and b (a cycle off) would not."""
    makers, ins, ports = _fma_vectors(13)
    lead, n = FMulAdd.LEAD, len(ins["fp32_a"])
    fed = {k: (np.concatenate([v[-lead:], v[:-lead]]) if k.endswith("_c") else v) for k, v in ins.items()}
    jobs = []
    for stages in (1, 2, 6, 8, len(FMulAdd.RING_ORDER) + 1):
        units = {name: (FMulAdd(src, dst, 53, stages=stages, clock=True, ring=True), {x: f"{name}_{x}" for x in "abc"})
                 for name, (src, dst) in makers.items()}
        assert all(u.latency == lead + stages - 1 for u, _ in units.values())
        jobs.append((stages, NativeEvaluator(Bank(ports, units), latency=lead + stages - 1)))
    build_all([ev for _, ev in jobs])
    keep = slice(0, n - lead)
    for stages, ev in jobs:
        out = ev.run(fed)
        for name, (src, dst) in makers.items():
            a, b, c = (ins[f"{name}_{x}"][keep] for x in "abc")
            assert_same_floats(out[f"{name}_y"][keep], R.fma(a, b, c, src, dst, 53), dst,
                               f"ring fma {name} at {stages} stages", a, b)
    # the same unit fed c with a and b computes with another c
    out = jobs[0][1].run(ins)
    a, b, c = (ins[f"fp32_{x}"][keep] for x in "abc")
    with pytest.raises(pytest.fail.Exception, match="results differ"):
        assert_same_floats(out["fp32_y"][keep], R.fma(a, b, c, F32, F32, 53), F32, "c with a and b", a, b)


@pytest.mark.parametrize("make, message", [
    (lambda: FAdd(F32, stages=11), "stages: expected an int from 1 to 10, got 11"),
    (lambda: FMul(F32, stages=0), "stages: expected an int from 1 to 10, got 0"),
    (lambda: FloatToFloat(F32, FP16, stages=5), "stages: expected an int from 1 to 4, got 5"),
])
def test_unit_stages_are_validated(make, message):
    with pytest.raises(ValueError) as err:
        make()
    assert str(err.value) == message


# ------------------------------------------------------------------ integer designs

GRID_DESIGNS = ["gemv_int8_16x8", "mlp_int8_small", "add_relu", "matmul_int32", "conv2d_padded",
                "residual_mlp", "fan_out", "sibling_loops", "divmod_signed", "bitwise_uint8", "mixed_int16"]
QUICK = [(1, 1), (3, 5), (4, 4), (6, 2)]        # 6 lanes: broadcast operands (Schedule.broadcast)


@pytest.mark.parametrize("lanes, reduce_unroll", QUICK)
@pytest.mark.parametrize("level", INT_LEVELS)
@pytest.mark.parametrize("name", GRID_DESIGNS)
def test_integer_designs_bit_exact_and_cycle_model_exact(name, level, lanes, reduce_unroll):
    check(designs.SMALL[name](), fp_pipeline=level, lanes=lanes, reduce_unroll=reduce_unroll)


@pytest.mark.slow
@pytest.mark.parametrize("knobs", [dict(mem_read="comb"), dict(loop_fusion=False), dict(share_buffers=True),
                                   dict(lanes=2, reduce_unroll=3, share_buffers=True), dict(acc_width=25)])
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", GRID_DESIGNS)
def test_integer_designs_in_other_modes(name, level, knobs):
    case = designs.SMALL[name]()
    if "acc_width" in knobs:
        design = compile_model(*case.outputs, config=HardwareConfig(fp_pipeline=level, **knobs))
        data = {b.id: (int(b.data.min()), int(b.data.max())) for b in design.graph.buffers
                if b.id in design.graph.inputs and b.data is not None}
        if not analyze_overflow(design, data).safe:
            # e.g. matmul_int32's full-range products: a 25-bit accumulator wraps (the proof says
            # so); the result then differs from the reference by design, the cycles still match
            assert simulate(design).cycles == design.cycles_formula
            return
    check(case, fp_pipeline=level, **knobs)


def test_gemv_cycles_add_the_pipeline_depth_once_per_run():
    M, K = 16, 8
    # 2: + the registered address and product; 3: + the product's own operand registers, each
    # memory's own copy of the read address, and the address from the step's own counters;
    # 4: + the product's second register
    for level, commit in ((0, 0), (1, 1), (2, 3), (3, 6), (4, 7)):
        design, _ = check(designs.gemv_int8(M, K), fp_pipeline=level)
        (sched,) = design.schedules
        assert sched.commit == commit
        assert design.cycles_formula == M * K + 1 + commit
        assert design.cycle_model().kernels == (("k0_r_16_8", M * K + 1 + commit),)
    # two kernels: each run drains its own pipeline
    design, _ = check(designs.mlp_int8(IN=32, HIDDEN=16, OUT=4, SHIFT=6), fp_pipeline=1)
    assert [c for _, c in design.cycle_model().kernels] == [16 * 32 + 2, 4 * 16 + 2]


@pytest.mark.parametrize("fp_pipeline", [2, 3])
def test_accumulator_updates_are_selected_by_registered_flags_from_fanout_level(fp_pipeline):
    """From FANOUT_LEVEL a step's accumulator updates are selected by a registered flag per step
    (from the step id two stages ahead) and a copy of it per ACC_GROUP accumulators, not by the
    step id decoded at every accumulator; below it, no such registers. Bit-exact either way."""
    from amaranth.back import rtlil
    from compiler.hw.kernel import ACC_GROUP
    lanes = 10
    design, _ = check(designs.gemv_int8(32, 20), fp_pipeline=fp_pipeline, lanes=lanes, reduce_unroll=2)
    wires = {line.split()[-1] for line in rtlil.convert(design.top).splitlines() if line.lstrip().startswith("wire")}
    firsts = {w for w in wires if re.search(r"\\acc_s\d+$", w)}
    copies = {w for w in wires if re.search(r"\\acc_s\d+_\d+$", w)}
    steps = len(firsts)
    assert (steps > 0, len(copies)) == ((True, steps * -(-lanes // ACC_GROUP)) if fp_pipeline >= 3 else (False, 0))


@pytest.mark.parametrize("lanes, reduce_unroll", [(4, 2), (5, 3), (8, 2), (16, 4), (17, 2), (26, 1)])
def test_a_broadcast_operand_fans_out_through_levels_of_copies_for_a_cycle_each_per_run(lanes, reduce_unroll):
    """At fp_pipeline 3 an x element multiplied by more than OPERAND_GROUP lanes passes a copy
    per OPERAND_GROUP products before a copy per product, and by more than OPERAND_GROUP**2 a
    copy per OPERAND_GROUP**2 products before those: one stage more per level, once per run."""
    from amaranth.back import rtlil
    from compiler.hw.pipeline import OPERAND_GROUP
    case = designs.gemv_int8(32, 16)
    design, _ = check(case, fp_pipeline=3, lanes=lanes, reduce_unroll=reduce_unroll)
    (sched,) = design.schedules
    levels = (lanes > OPERAND_GROUP) + (lanes > OPERAND_GROUP ** 2)
    products = [u for i, u in sched.unit_stages.items() if u >= 2]
    assert len(products) == lanes * reduce_unroll and set(products) == {2 + levels}
    assert sched.broadcast == ({} if not levels else {i: levels for i in sched.broadcast})
    assert len(sched.broadcast) == (reduce_unroll if levels else 0)     # the x elements
    # the weights are only ever the other operand: read `levels` stages late, not registered again
    assert sched.late == {b: levels for b in sched.late} and len(sched.late) == (lanes * reduce_unroll if levels else 0)
    wires = {line.split()[-1] for line in rtlil.convert(design.top).splitlines() if line.lstrip().startswith("wire")}
    far = {w for w in wires if re.search(r"_fan2_\d+$", w)}
    assert len(far) == (reduce_unroll * -(-lanes // OPERAND_GROUP ** 2) if levels > 1 else 0)
    fans = {w for w in wires if re.search(r"_fan\d+$", w)}
    assert len(fans) == (reduce_unroll * -(-lanes // OPERAND_GROUP) if levels else 0)
    # past the fan-out levels, each product has its own copy of the broadcast operand
    dups = {w for w in wires if re.search(r"_fan\d+_dup\d+$", w)}
    assert len(dups) == (lanes * reduce_unroll if levels else 0)
    plain, _ = check(case, fp_pipeline=2, lanes=lanes, reduce_unroll=reduce_unroll)
    (sched2,) = plain.schedules
    # level 3 adds the operand copies, the address copies and the own-counter address (3, as
    # for the GEMV above), an adder-tree level per reduce_unroll level, and the fan-out levels
    tree = (reduce_unroll - 1).bit_length()
    assert sched.commit == sched2.commit + 3 + tree + levels
    landed, _ = check(case, fp_pipeline=4, lanes=lanes, reduce_unroll=reduce_unroll)
    (sched4,) = landed.schedules           # the products' second register: one stage more
    assert set(u for u in sched4.unit_stages.values() if u >= 2) == {3 + levels}
    assert sched4.commit == sched.commit + 1 and sorted(sched4.broadcast.values()) == sorted(sched.broadcast.values())


def test_level_0_builds_the_single_cycle_design():
    design = compile_model(*designs.gemv_int8(16, 8).outputs, config=HardwareConfig(fp_pipeline=0))
    (sched,) = design.schedules
    assert (sched.depth, sched.commit, sched.latency, sched.register_loads) == (0, 0, {}, False)
    assert [a.ways for a in design.kernels[0].accs] == [1]


# ------------------------------------------------------------------ deep memories

@pytest.mark.slow
def test_a_deep_memory_is_split_into_block_ram_parts_read_through_a_registered_tree():
    case = designs.gemv_int8(9, 700)                   # W: 6300 int8 words, 2048 per block RAM
    for level in (1, 2):
        design, result = check(case, fp_pipeline=level)
        w = design.banking[0][1]
        if level == 1:
            assert w.layout.is_plain
            continue
        assert bram_depth(8) == 2048 and len(w.banks) == 4 and w.layout.words == 2048
        names = [ref.name for ref in design.memories_of((0, 1))]
        assert names == [f"mem_b1_l{i}" for i in range(4)]
        # read data registered (stage 2 after the registered address), two mux levels, the product
        (sched,) = design.schedules
        assert sched.address_levels == 1 and sched.load_ready == 2 and sched.depth == 5
        cxx = simulate(design, backend="cxxrtl")
        assert cxx.cycles == result.cycles
        assert_exact(cxx.outputs, case.reference)


@pytest.mark.parametrize("level", [2, 3])
def test_split_memories_between_kernels_and_on_the_host_bus(level):
    """A split input (W1), a copy of h between the kernels, and the host bus writing every part
    (at fp_pipeline 3 a registered bus: writes land a cycle late, reads take 4 cycles, and
    start follows the last write at once)."""
    case = designs.mlp_int8(IN=300, HIDDEN=16, OUT=4, SHIFT=6)
    design, _ = check(case, fp_pipeline=level)
    assert len(design.banking[0][1].banks) == 3
    assert design.top.host_read_latency == (4 if level == 3 else 1)
    y = designs.run_on_host_bus(design).astype(np.uint32).view(np.int32)
    np.testing.assert_array_equal(y, case.reference[0])


# ------------------------------------------------------------------ float designs

FLOAT_MODELS = {"gemv": {"M": 6, "K": 20}, "mlp": {"IN": 16, "HIDDEN": 8, "OUT": 4}, "elementwise": {"N": 12},
                "matmul": {"M": 3, "K": 5, "N": 4}, "conv2d": {"C_IN": 1, "C_OUT": 2, "H": 4, "W": 4, "K": 3, "PAD": 1}}


@pytest.mark.parametrize("level", LEVELS[1:])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("model", sorted(FLOAT_MODELS))
def test_float_models_bit_exact_and_cycle_model_exact(model, dtype, level):
    design, result, arrays = run_zoo(model, dtype, FLOAT_MODELS[model], HardwareConfig(fp_pipeline=level))
    want = zoo.reference(model, dtype, FLOAT_MODELS[model], arrays, zoo.arith_for(dtype, "tinygrad"))
    assert same_bits(result.outputs[0], want)
    assert result.cycles == design.cycles_formula


def test_level_4_pipelines_floats_as_level_3():
    """Level 4 only adds a register to integer products: a float design's schedule is level 3's."""
    params = FLOAT_MODELS["gemv"]
    runs = {level: run_zoo("gemv", "fp32", params, HardwareConfig(fp_pipeline=level)) for level in (3, 4)}
    (s3,), (s4,) = (runs[level][0].schedules for level in (3, 4))
    assert (s4.commit, s4.depth, sorted(s4.unit_stages.values())) == (s3.commit, s3.depth, sorted(s3.unit_stages.values()))
    assert runs[4][1].cycles == runs[3][1].cycles == runs[4][0].cycles_formula
    assert same_bits(runs[4][1].outputs[0], zoo.reference("gemv", "fp32", params, runs[4][2]))


@pytest.mark.parametrize("lanes", [2, 3])
@pytest.mark.parametrize("level", [1, 3])
def test_float_lanes_and_interleaving_together(level, lanes):
    params = {"M": 7, "K": 9}
    design, result, arrays = run_zoo("gemv", "fp32", params, HardwareConfig(fp_pipeline=level, lanes=lanes))
    assert same_bits(result.outputs[0], zoo.reference("gemv", "fp32", params, arrays))
    assert result.cycles == design.cycles_formula
    assert [a.ways for a in design.kernels[0].accs] == [interleave_ways(level, -(-7 // lanes))] * lanes


def _fp32_gemv(M, K, seed=0):
    rng = np.random.default_rng(seed)
    W, x = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal(K).astype(np.float32)
    return Tensor(W) @ Tensor(x), W, x


@pytest.mark.parametrize("level, M, ways", [(1, 6, 2), (2, 8, 4), (3, 6, 6),
                                            (2, 6, 6),     # 6 ways, 6 slots, not 4 ways and 8 slots
                                            (3, 7, 7),     # 7 slots, not 12
                                            (3, 32, 8)])   # 32 slots, not 36
def test_a_float_sum_interleaves_rows_and_keeps_the_reference_order(level, M, ways):
    K = 20
    y, W, x = _fp32_gemv(M, K)
    design = compile_model(y, config=HardwareConfig(fp_pipeline=level))
    k = design.kernels[0]
    assert [a.ways for a in k.accs] == [ways]
    outer, red = k.body[0], k.body[0].body[0]
    inner = red.body[0]
    assert (outer.bound, red.bound, inner.bound) == (-(-M // ways), K, ways)
    assert (outer.axis, red.axis, inner.axis) == (ir.Axis.OUTPUT, ir.Axis.REDUCE, ir.Axis.OUTPUT)
    result = simulate(design)
    acc = np.zeros(M, np.float32)
    for kk in range(K):                                   # the sequential sum of every row
        acc = acc + W[:, kk] * x[kk]
    np.testing.assert_array_equal(result.outputs[0].view(np.uint32), acc.view(np.uint32))
    sched = design.schedules[0]
    assert design.cycles_formula == result.cycles == -(-M // ways) * ways * K + 1 + sched.commit


def test_float_sums_that_cannot_interleave_keep_a_single_cycle_adder():
    rng = np.random.default_rng(1)
    a = rng.standard_normal(40).astype(np.float32)
    y, W, x = _fp32_gemv(5, 12)
    for out, knobs in (((Tensor(a).sum(),), {}),                              # no output loop around it
                       ((y,), {"loop_fusion": False})):                       # not a fused nest
        design = compile_model(*out, config=HardwareConfig(fp_pipeline=3, **knobs))
        assert all(acc.ways == 1 for k in design.kernels for acc in k.accs)
        seed = simulate(compile_model(*out))
        result = simulate(design)
        assert result.cycles == design.cycles_formula
        np.testing.assert_array_equal(result.outputs[0].view(np.uint32), seed.outputs[0].view(np.uint32))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_a_single_row_float_sum_takes_padding_rows_at_a_target_clock(dtype):
    """A sum with no output loop around it (softmax's denominator) has no rows to interleave;
    at a target clock it takes ways - 1 padding rows (their stores gated off), so its adder is
    pipelined like a ring's instead of one combinational adder on a one-cycle loop (which held
    a softmax MLP at ~30 MHz), still summed in the reference's order."""
    a = np.random.default_rng(2).standard_normal(40).astype(dtype)
    y = Tensor(a).sum()
    config = HardwareConfig(fp_pipeline=3, target_mhz=150)
    design = compile_model(y, config=config)
    (acc,) = [acc for k in design.kernels for acc in k.accs]
    ways = interleave_ways(3, 1, clock=True, adder_ns=lambda s: ring_period_ns(
        frozenset({("FAdd", "fp32")}), s, *timing_model.target_period(config)))
    assert acc.ways == ways > 1
    result = simulate(design)
    assert result.cycles == design.cycles_formula
    assert result.cycles >= ways * len(a)                    # the padding rows' cost, counted
    acc32 = np.float32(0)
    for v in a.astype(np.float32):                           # the sequential sum, in float32
        acc32 = np.float32(acc32 + v)
    np.testing.assert_array_equal(result.outputs[0], np.array([acc32]).astype(dtype))


@pytest.mark.parametrize("target, ways", [(150, 8), (75, 6)])
def test_an_adders_ring_takes_the_ways_whose_slots_take_the_least_time(target, ways):
    """A gemv of 4 rows in float32 at a target clock: its adder's ring takes the ways whose slots
    times the period its adder's stages allow is least (the adder alone IN_DESIGN slower, never
    below the target's), not the fewest slots (6: FAdd fp32 at 6 stages, 106.6 MHz alone, would
    bound a design at 150 MHz). At 150: 8 slots of 6.2 ns x 1.4 against 6 of 9.4 x 1.4; at 75 the
    6-stage adder meets the target and 6 slots are fewest. Bit-exact, cycles as modelled."""
    params = {"M": 4, "K": 9}
    design, result, arrays = run_zoo("gemv", "fp32", params, HardwareConfig(fp_pipeline=3, target_mhz=target))
    assert [a.ways for a in design.kernels[0].accs] == [ways]
    period, d = timing_model.target_period(design.config)

    def time(w):                          # the criterion, restated: slots x the ring's period
        ns = unit_period_ns(("FAdd", "fp32"), min(w, 10), d, clock=True) * IN_DESIGN
        return -(-4 // w) * w * max(period, ns)
    assert time(ways) == min(time(w) for w in range(6, 13))
    assert result.cycles == design.cycles_formula
    assert same_bits(result.outputs[0], zoo.reference("gemv", "fp32", params, arrays))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_a_float_layer_with_bias_interleaves_its_sum(dtype):
    """relu(W @ x + b): the bias is loaded after the sum, in the nest's last iteration (loop
    fusion's epilogue may load memory when it stores a float sum), so the sum interleaves rows
    instead of keeping its adder combinational on a one-cycle loop; bit-exact with the unpiped
    design, whose sum runs in tinygrad's order."""
    rng = np.random.default_rng(3)
    W, b, x = (rng.standard_normal(s).astype(dtype) for s in ((7, 10), (7,), (10,)))
    y = (Tensor(W) @ Tensor(x) + Tensor(b)).relu()
    plain = compile_model(y)
    want = simulate(plain).outputs[0]
    acc = np.zeros(7, np.float32)
    for k in range(10):                                    # float32 sums, rounded once at the end
        acc = acc + W[:, k].astype(np.float32) * x[k].astype(np.float32)
    np.testing.assert_array_equal(want, np.maximum(acc + b.astype(np.float32), 0).astype(dtype))
    for knobs in ({"fp_pipeline": 3}, {"fp_pipeline": 3, "target_mhz": 150, "lanes": 2}):
        design = compile_model(y, config=HardwareConfig(**knobs))
        assert all(acc.ways > 1 for k in design.kernels for acc in k.accs), knobs
        result = simulate(design)
        assert result.cycles == design.cycles_formula
        np.testing.assert_array_equal(result.outputs[0].view(np.uint8), want.view(np.uint8))


def test_a_fused_multiply_add_sum_interleaves_at_a_target_clock():
    """layernorm in fp16 sums (x - mean)**2 as tinygrad's MULACC: its FMulAdd is the ring's unit
    (was: combinational on a one-cycle loop), its product computed before the ring and the ring
    12 ways at least (all the unit's stages from the accumulator on: interleave_ways), with the
    same bits as the unpiped design."""
    params = {"ROWS": 4, "N": 16}
    plain, want, _ = run_zoo("layernorm", "fp16", params)
    design, result, _ = run_zoo("layernorm", "fp16", params, HardwareConfig(fp_pipeline=3, target_mhz=150))
    rings = [(s.value, acc.ways, sched) for k, sched in zip(design.kernels, design.schedules) for s, _ in k.stores()
             if isinstance(s, ir.AccStore) for acc in k.accs if acc.index == s.acc and s.value.op is ir.OpKind.MULACC]
    assert rings and all(ways >= 12 for _, ways, _ in rings)
    # its product is computed before the ring (FMulAdd ring=True): the ring's stages are the addition's
    assert all(sched.unit_lead == {id(v): FMulAdd.LEAD} for v, _, sched in rings)
    assert result.cycles == design.cycles_formula
    assert same_bits(result.outputs[0], want.outputs[0])


def test_a_slower_target_clock_gives_float_units_the_fewest_stages_that_meet_it():
    """At a target below a float unit's best, the unit outside a ring takes the fewest stages
    whose figure placed alone is IN_DESIGN above the target (float_timing.fewest_stages), not
    every boundary it has: fewer cycles and registers, the same bits."""
    params = {"ROWS": 4, "N": 16}
    plain, want, _ = run_zoo("layernorm", "bf16", params)
    fast, _ = compile_zoo("layernorm", "bf16", params, HardwareConfig(fp_pipeline=3, target_mhz=150))
    design, result, _ = run_zoo("layernorm", "bf16", params, HardwareConfig(fp_pipeline=3, target_mhz=100))
    period, d = 10.0, timing_model.delays(design.config.timing_part())
    fewer = 0
    for k, sched in zip(design.kernels, design.schedules):
        rings = ring_adders(k)
        for v, key, n in float_units(k, sched.unit_stages):
            most = max_stages(v, clock=True)
            if id(v) in rings or unit_period_ns(key, most, d, clock=True) is None:
                continue
            fewer += n < most
            # with fewer stages than its boundaries, its operands are registered before it
            assert (id(v) in sched.operand_registers) == (n < most), (key, n)
            # the fewest measured to meet the target with the margin; all its stages where none
            # did, or where that is one short of them (its operand register would make it up)
            fewest = min((s for s, _ in measured(key, clock=True)
                          if s < most and unit_period_ns(key, s, d, clock=True) * IN_DESIGN <= period), default=most)
            assert n == (most if fewest + 1 >= most else fewest), (key, n)
    assert fewer >= 4                     # the adders, multipliers, divider and square root
    assert result.cycles == design.cycles_formula < fast.cycles_formula
    assert same_bits(result.outputs[0], want.outputs[0])


@pytest.mark.slow
def test_deep_float_memory_and_interleaving_agree_in_pysim_and_cxxrtl():
    params = {"M": 7, "K": 300}                          # W: 2100 fp32 words, 1024 per part
    runs = [run_zoo("gemv", "fp32", params, HardwareConfig(fp_pipeline=level)) for level in (2, 3)]
    cxxrtl.build_many((design for design, _, _ in runs), jobs=1)     # one g++ run for both
    for design, result, arrays in runs:
        assert len(design.banking[0][1].banks) == 3
        cxx = simulate(design, backend="cxxrtl")
        assert cxx.cycles == result.cycles == design.cycles_formula
        want = zoo.reference("gemv", "fp32", params, arrays)
        assert same_bits(result.outputs[0], want) and same_bits(cxx.outputs[0], want)


GEMV_128x784 = {"M": 128, "K": 784}


@pytest.fixture(scope="module")
def gemvs_128x784() -> dict[tuple[str, int], tuple]:
    """{(dtype, level): (design, inputs)}: the six GEMVs compiled, and built by one
    cxxrtl.build_many (two g++ runs, each parsing the CXXRTL runtime once, instead of six)."""
    out = {}
    for dtype in ("int8", "fp32"):
        built = zoo.check_built(zoo.ZOO["gemv"].build(dtype, **GEMV_128x784))
        arrays = zoo.make_inputs(built, 0)
        for level in LEVELS[1:]:
            out[dtype, level] = (compile_model(built.forward(*[Tensor(arrays[n]) for n in built.inputs]),
                                               config=HardwareConfig(fp_pipeline=level)), arrays)
    cxxrtl.build_many(design for design, _ in out.values())
    return out


@pytest.mark.slow
@pytest.mark.parametrize("level", LEVELS[1:])
@pytest.mark.parametrize("dtype", ["int8", "fp32"])
def test_gemv_128x784_bit_exact_in_cxxrtl(gemvs_128x784, dtype, level):
    params = GEMV_128x784
    design, arrays = gemvs_128x784[dtype, level]
    result = simulate(design, backend="cxxrtl")
    assert result.cycles == design.cycles_formula
    want = zoo.reference("gemv", dtype, params, arrays)
    if dtype == "fp32":
        assert same_bits(result.outputs[0], want)
    else:
        np.testing.assert_array_equal(result.outputs[0], want)


# ------------------------------------------------------------------ hazards

def _read_modify_write_kernel():
    """y[i] = x[i] + y[i - 1] for i >= 1: reads the buffer it writes (a prefix sum)."""
    i = ir.Counter(0)
    prev = ir.Op(ir.OpKind.SUB, INT32, (i, ir.Const(1, INT32)))
    first = ir.Op(ir.OpKind.CMPLT, BOOL, (ir.Const(0, INT32), i))
    value = ir.Op(ir.OpKind.ADD, INT32, (ir.Load(1, i, INT32), ir.Load(0, prev, INT32, first, ir.Const(0, INT32))))
    return ir.make_kernel("k_scan", [ir.BufferDecl(0, INT32, 8, True, True), ir.BufferDecl(1, INT32, 8, True, False)],
                          [], (ir.Loop(0, ir.Axis.OUTPUT, 8, (ir.BufStore(0, i, value),)),))


def test_a_kernel_that_reads_what_it_writes_is_refused_when_pipelined():
    k = _read_modify_write_kernel()
    assert schedule(k, HardwareConfig()).commit == 0                 # fine without pipelining
    with pytest.raises(CompileError) as err:
        schedule(k, HardwareConfig(fp_pipeline=1))
    assert str(err.value) == (
        "fp_pipeline=1 is illegal for kernel 'k_scan': it reads buffer 0, which it also writes, and its stores "
        "commit 1 cycles after their step issues, so a later step could read a location before an earlier store "
        "reaches it; use fp_pipeline=0 for this model")


def test_schedule_keeps_the_accumulator_loop_in_one_cycle():
    y, _, _ = _fp32_gemv(4, 6)
    design = compile_model(y, config=HardwareConfig(fp_pipeline=2, loop_fusion=False))
    k, sched = design.kernels[0], design.schedules[0]
    (update,) = [s for s, _ in k.stores() if isinstance(s, ir.AccStore) and isinstance(s.value, ir.Op)]
    assert update.value.dtype == FP32 and id(update.value) not in sched.latency          # a one-cycle adder
    assert sched.acc_write == {0: sched.depth}


def test_level_3_registers_adder_trees_and_each_products_operands():
    """fp_pipeline 3: every integer product takes two register levels (its own copy of each
    operand, then the product), 4 three (product_registers), every add of its unrolled
    reduction's tree one; the add into
    the accumulator stays in the one-cycle loop and index math stays in stage 0. Read data
    comes two stages later too (each memory's own read-address register, and the address
    computed from the step's own counters instead of the next step's)."""
    case = designs.gemv_int8(16, 8)
    levels = {}
    for level in (2, 3, 4):
        design, _ = check(case, fp_pipeline=level, lanes=2, reduce_unroll=4)
        k, sched = design.kernels[0], design.schedules[0]
        roots = [x for s, _ in k.stores() for x in ir.store_operands(s)]
        values = ir.toposort(roots)
        data = {id(v) for v in values if sched.ready.get(id(v)) is not None}
        products = [v for v in values if isinstance(v, ir.Op) and v.op is ir.OpKind.MUL and id(v) in data]
        adds = [v for v in values if isinstance(v, ir.Op) and v.op is ir.OpKind.ADD]
        updates = {id(s.value) for s, _ in k.stores() if isinstance(s, ir.AccStore)}
        tree = [v for v in adds if id(v) in data and id(v) not in updates and
                not any(isinstance(x, ir.AccLoad) for x in ir.toposort([v]))]
        index = [v for v in adds if id(v) not in data]
        assert len(products) == 2 * 4 and len(tree) == 2 * 3           # 2 lanes x (4 products, 3 adds)
        assert index and all(id(v) not in sched.latency for v in index)
        assert all(id(v) not in sched.latency for v in adds if id(v) in updates)
        levels[level] = ({sched.latency[id(v)] for v in products}, {sched.unit_stages.get(id(v), 1) for v in products},
                         {sched.latency.get(id(v), 0) for v in tree}, sched.commit)
    assert levels[2][:3] == ({1}, {1}, {0})
    assert levels[3][:3] == ({2}, {2}, {1})
    # each memory's copy of the read address, no look-ahead, the operand copies, two tree levels
    assert levels[3][3] == levels[2][3] + 1 + 1 + 1 + 2
    assert levels[4] == ({3}, {3}, {1}, levels[3][3] + 1)        # the product's second register


# ------------------------------------------------------------------ reset

def _run_with_reset(design, reset_after: int, idle: int = 24) -> tuple[object, list, int]:
    """Start `design`, reset it `reset_after` cycles later, watch it idle for `idle` cycles,
    then run it again. Returns (the buffers right after the reset, the buffers after the idle
    cycles, and (outputs, cycles) of the second run); asserts `done` stays low while idle."""
    from compiler.sim.memory_io import input_words
    from compiler.sim.pysim import Harness, peek_buffers, poke_inputs
    harness, top = Harness.of(design), design.top
    got: dict = {}

    async def bench(ctx):
        poke_inputs(ctx, design, input_words(design, None))
        ctx.set(top.start, 1)
        await ctx.tick()
        ctx.set(top.start, 0)
        await ctx.tick().repeat(reset_after)
        ctx.set(harness.domain.rst, 1)
        await ctx.tick()
        ctx.set(harness.domain.rst, 0)
        got["after_reset"] = peek_buffers(ctx, design)[1]
        for _ in range(idle):
            await ctx.tick()
            assert not ctx.get(top.done) and not ctx.get(top.busy), "the design acts after a reset"
        got["idle"] = peek_buffers(ctx, design)[1]
        cycles = await harness.run(ctx)
        got["run"] = (peek_buffers(ctx, design)[0], cycles)

    harness.simulate(bench)
    return got["after_reset"], got["idle"], got["run"]


@pytest.mark.parametrize("level", [2, 3])
@pytest.mark.parametrize("name, knobs", [
    ("gemv_int8_16x8", dict(lanes=4, reduce_unroll=4)),          # operand copies, LUT products, trees
    ("conv2d_padded", dict(lanes=2, reduce_unroll=3)),           # gated loads and stores
    ("mlp_int8_small", dict(lanes=2, reduce_unroll=2))])         # kernels in sequence, copies between
def test_a_reset_mid_run_stops_everything_and_a_new_run_is_exact(name, knobs, level):
    """The data registers have no reset (Datapath.register): a reset in the middle of a run
    must still leave nothing in flight that writes a memory or raises `done`, and the next run
    must be bit-exact in the cycles of the cycle model."""
    case = designs.SMALL[name]()
    design = compile_model(*case.outputs, config=HardwareConfig(fp_pipeline=level, **knobs))
    for fraction in (0.3, 0.9):
        after_reset, idle, (outputs, cycles) = _run_with_reset(design, int(design.cycles_formula * fraction))
        for buf, words in after_reset.items():
            assert np.array_equal(idle[buf], words), f"buffer {buf} written after the reset"
        assert_exact(outputs, case.reference)
        assert cycles == design.cycles_formula


def _write_in_every_cycle_around_a_run(design, before: int = 4, after: int = 3) -> tuple[dict, list, int]:
    """Start a run and, through the host bus, write a word of its own (never the word held) in
    each of the first `before` cycles from the start cycle and in each cycle from `before`
    cycles before `done` to `after` cycles after it. Returns the run's outputs, one (cycle,
    whether the top was idle then: `busy` and `start` low, whether the write landed) per
    write, and the number of writable ports. Writes go to the first and last writable banks
    first (apart in the idle flag's copy tree), then the others."""
    from compiler.sim.memory_io import input_words
    from compiler.sim.pysim import Harness, peek_buffers, poke_inputs
    harness, top = Harness.of(design), design.top
    words = input_words(design, None)
    writable = [i for i, hp in enumerate(design.host_ports) if hp.write]
    ports = [writable[0], writable[-1]] + writable[1:-1]
    done_at = design.cycles_formula
    cycles = [c for c in range(done_at + after + 1) if c < before or c >= done_at - before]
    targets = [(i, a) for a in range(max(design.host_ports[i].depth for i in ports)) for i in ports
               if a < design.host_ports[i].depth][:len(cycles)]
    assert len(targets) == len(cycles), "too few words to write one a cycle"
    got: dict = {"writes": []}
    peek = designs.host_port_peek(design, words)

    async def bench(ctx):
        poke_inputs(ctx, design, words)
        loaded = {t: peek(ctx, *t) for t in targets}
        ctx.set(top.start, 1)
        pending = list(zip(cycles, targets))
        for c in range(done_at + after + 1):
            if pending and pending[0][0] == c:
                (i, addr) = pending.pop(0)[1]
                ctx.set(top.host_sel, i)
                ctx.set(top.host_addr, addr)
                ctx.set(top.host_wdata, ~loaded[i, addr] & ((1 << design.host_ports[i].width) - 1))
                ctx.set(top.host_we, 1)
                got["writes"].append([c, not (ctx.get(top.busy) or ctx.get(top.start)), (i, addr)])
            assert ctx.get(top.done) == (c == done_at), f"done {'high' if c != done_at else 'low'} in cycle {c}"
            await ctx.tick()
            ctx.set(top.start, 0)
            ctx.set(top.host_we, 0)
        await ctx.tick().repeat(4)               # the bus's registers
        for w in got["writes"]:
            w[2] = peek(ctx, *w[2]) != loaded[w[2]]
        got["outputs"] = peek_buffers(ctx, design)[0]

    harness.simulate(bench)
    return got["outputs"], [tuple(w) for w in got["writes"]], len(writable)


@pytest.mark.parametrize("level", [2, 3])
@pytest.mark.parametrize("name, knobs", [
    ("gemv_int8_16x8", dict(lanes=4, reduce_unroll=4)),
    ("mlp_int8_small", dict(lanes=2, reduce_unroll=2)),          # runs and copies: the last phase a run
    ("mixed_int16", dict(lanes=2)),                              # a short last run after a copy
    ("gemv_int8_16x64", dict(lanes=16, reduce_unroll=8)),        # > HOST_GROUP**2 write ports
    ("gemv_int8_16x64", dict(lanes=16, reduce_unroll=32))])      # > 8 * HOST_GROUP**2: 9 copies at level 2
def test_host_writes_land_whenever_the_top_is_not_busy_and_never_while_it_runs(name, knobs, level):
    """The bus writes only while idle: from FANOUT_LEVEL its idle flag reaches the banks through
    a tree of copies, computed as many cycles ahead (TopHW._idle_in); a write in any cycle after
    `done` must land, and one in the start cycle or while busy must not."""
    case = designs.gemv_int8(16, 64) if name == "gemv_int8_16x64" else designs.SMALL[name]()
    design = compile_model(*case.outputs, config=HardwareConfig(fp_pipeline=level, **knobs))
    outputs, writes, n = _write_in_every_cycle_around_a_run(design)
    assert_exact(outputs, case.reference)
    assert [idle for _, idle, _ in writes].count(True) == 3          # the cycles after done
    for cycle, idle, landed in writes:
        assert landed == idle, f"cycle {cycle} of the run: a write {'dropped' if idle else 'landed while busy'}"
    if knobs["lanes"] == 16:
        from compiler.hw.top import HOST_GROUP
        assert n > (8 if knobs["reduce_unroll"] == 32 else 1) * HOST_GROUP * HOST_GROUP


@pytest.mark.parametrize("lanes", [12, 16])
def test_host_reads_of_many_output_banks_pass_an_or_registered_per_group(lanes):
    """From FANOUT_LEVEL each HOST_GROUP output banks' data is OR-ed into a register before
    host_rdata (reads take 4 cycles): 12 and 16 banks are two groups, one of them partial."""
    from compiler.hw.top import HOST_GROUP
    case = designs.gemv_int8(16, 64)
    design = compile_model(*case.outputs, config=HardwareConfig(fp_pipeline=3, lanes=lanes))
    readable = [hp for hp in design.top.host_ports if hp.read]
    assert len(readable) == lanes > HOST_GROUP and design.top.host_read_latency == 4
    y = designs.run_on_host_bus(design).astype(np.uint32).view(np.int32)
    np.testing.assert_array_equal(y, case.reference[0])


def test_the_host_buses_address_copies_each_serve_a_few_block_rams():
    """From FANOUT_LEVEL each registered copy of the host's write address and data serves
    HOST_GROUP block RAMs, not HOST_GROUP banks: the 128x784 int8 weights in 16 banks of 4
    block RAMs take 8 copies of the address (2 when a copy served 8 banks); writes land (the
    first and last words of every block RAM through the bus, the rest loaded directly)."""
    from amaranth.back import rtlil
    from compiler.hw.top import HOST_GROUP
    case = designs.gemv_int8(128, 784)
    design = compile_model(*case.outputs, config=HardwareConfig(fp_pipeline=3, lanes=4, reduce_unroll=4))
    written = [hp for hp in design.top.host_ports if hp.write and hp.depth > 1000]
    assert len(written) == 16 and {hp.block_rams for hp in written} == {4}
    text = rtlil.convert(design.top, name="top")
    copies = set(re.findall(r"wire width \d+ \\host_addr(\d+)_(\d+)\b", text))
    bits = {w for w, _ in copies if int(w) == max(int(w) for w, _ in copies)}.pop()
    assert len({i for w, i in copies if w == bits}) == 16 // (HOST_GROUP // 4) == 8
    y = designs.run_on_host_bus(design, sample=2).astype(np.uint32).view(np.int32)
    np.testing.assert_array_equal(y, case.reference[0])


@pytest.mark.parametrize("flow", ["sequential", "dataflow"])
def test_a_layers_bias_and_scale_are_read_late_instead_of_delayed_bit_by_bit(flow):
    """pipeline.later_reads: the digits MLP's per-output bias and requantisation scale are read
    when a step issues and used after the accumulator, stages later: their memories are read
    that many stages later (registers on a 1-3 bit address, not on 14-32 data bits). Bit-exact
    on 20 samples; a dataflow ring, which rotates banks by the beat, is read on time."""
    from pathlib import Path
    from dse.models.accuracy import run_samples
    from dse.models.data import DataSpec, load_dataset, read_weights
    from dse.models.quantize import DenseNet
    net = DenseNet.from_arrays(read_weights(Path(__file__).resolve().parent.parent / "models" / "digits_mlp.npz"))
    data = load_dataset(DataSpec(dataset="sklearn:digits", samples=20))
    knobs = dict(schedule="dataflow", fold="auto", target_interval=64) if flow == "dataflow" else dict(lanes=4)
    run = run_samples(net=net, dtype="int8", data=data, config=HardwareConfig(fp_pipeline=3, **knobs))
    design = run.design                                  # run_samples raised unless every sample is exact
    rings = {r.place for r in design.flow.rings} if design.flow else set()
    for pos, k in enumerate(design.top.kernels):
        decls = {b.slot: b for b in k.kernel.buffers}
        # a layer's biases and scales: a word per output of the lane, read two or more stages late
        assert any(decls[s].size <= 16 and n >= 2 for s, n in k.schedule.late.items()), f"kernel {pos}"
        assert not any((pos, s) in rings for s in k.schedule.late)
