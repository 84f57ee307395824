"""Compiler core: bit-exact results, documented cycle counts, clear errors (Python simulator)."""
from __future__ import annotations

import numpy as np
import pytest
from tinygrad import Tensor, dtypes

import designs
from helpers import assert_exact
from compiler import CompileError, HardwareConfig, UnsupportedError, compile_model, simulate
from compiler.hw.top import Copy, Run, toposort_kernels

MODES = ["sync", "comb"]


# The documented cycle formulas (docs/compiler.md "Cycle counts"): each kernel takes the number of
# steps it executes plus one cycle for done; each copy between kernels one cycle per word.
# Without loop fusion (the seed design) a GEMV row takes an initialisation step, K MAC steps
# and a store step.
def gemv_cycles(M, K):
    return M * (K + 2) + 1


# With loop fusion (the default) the initialisation and the store share the first and last
# MAC steps: M * K + 1.
def fused_gemv_cycles(M, K):
    return M * K + 1


FORMULAS = {
    "gemv_int8_16x8": gemv_cycles(16, 8),
    "matmul_int32": 4 * 5 * (6 + 2) + 1,
    "add_relu": 16 + 1,
    "mlp_int8_small": gemv_cycles(16, 32) + 16 + gemv_cycles(4, 16),      # kernel, copy of h, kernel
    "residual_mlp": gemv_cycles(8, 8) + 8 + gemv_cycles(8, 8),
    "fan_out": gemv_cycles(8, 8) + 8 + 2 * gemv_cycles(4, 8),                # one broadcast copy
    "conv2d_padded": 2 * 5 * 5 * (3 * 3 + 2) + 1,
    "sibling_loops": 1 + 10 + 10 + 1,                                        # acc=-inf; max loop; sub loop
    "divmod_signed": 16 + 1,
    "bitwise_uint8": 3 * (12 + 1),                                           # three outputs, three kernels
    "mixed_int16": 3 * (10 + 1) + 10,                                        # y is copied to its cast
}

FUSED_FORMULAS = {
    **FORMULAS,
    "gemv_int8_16x8": fused_gemv_cycles(16, 8),
    "matmul_int32": 4 * 5 * 6 + 1,
    "mlp_int8_small": fused_gemv_cycles(16, 32) + 16 + fused_gemv_cycles(4, 16),
    # the second kernel's epilogue loads h (the skip connection): it stays a step of its own
    "residual_mlp": fused_gemv_cycles(8, 8) + 8 + (8 * (8 + 1) + 1),
    "fan_out": fused_gemv_cycles(8, 8) + 8 + 2 * fused_gemv_cycles(4, 8),
    "conv2d_padded": 2 * 5 * 5 * 3 * 3 + 1,
    "sibling_loops": 10 + 10 + 1,                                            # acc=-inf folded into the max loop
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(designs.SMALL))
def test_small_designs_bit_exact_with_documented_cycles(name, mode):
    case = designs.SMALL[name]()
    design = compile_model(*case.outputs, config=HardwareConfig(mem_read=mode, loop_fusion=False))
    result = simulate(design)
    assert_exact(result.outputs, case.reference)
    assert result.cycles == design.cycles_formula == FORMULAS[name]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(designs.SMALL))
def test_small_designs_with_loop_fusion_bit_exact_with_documented_cycles(name, mode):
    case = designs.SMALL[name]()
    design = compile_model(*case.outputs, config=HardwareConfig(mem_read=mode))
    assert design.config.loop_fusion                                          # the default
    result = simulate(design)
    assert_exact(result.outputs, case.reference)
    assert result.cycles == design.cycles_formula == FUSED_FORMULAS[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(designs.LARGE))
def test_large_designs_bit_exact_pysim(name):
    case = designs.LARGE[name]()
    design = compile_model(*case.outputs)
    result = simulate(design)
    assert_exact(result.outputs, case.reference)
    expected = {"gemv_int8_128x784": fused_gemv_cycles(128, 784),
                "mlp_int8_784_128_10": fused_gemv_cycles(128, 784) + 128 + fused_gemv_cycles(10, 128)}[name]
    assert result.cycles == design.cycles_formula == expected


def test_inputs_can_be_overridden_and_keep_their_data_otherwise():
    rng = np.random.default_rng(11)
    W, x = rng.integers(-128, 128, (4, 6)).astype(np.int8), rng.integers(-128, 128, 6).astype(np.int8)
    tw, tx = Tensor(W), Tensor(x)
    design = compile_model(tw.cast(dtypes.int32) @ tx.cast(dtypes.int32))
    x2 = rng.integers(-128, 128, 6).astype(np.int8)
    first = simulate(design)
    second = simulate(design, {tx: x2})
    np.testing.assert_array_equal(first.outputs[0], W.astype(np.int32) @ x.astype(np.int32))
    np.testing.assert_array_equal(second.outputs[0], W.astype(np.int32) @ x2.astype(np.int32))
    with pytest.raises(CompileError, match="has 5 elements, the model needs 6"):
        simulate(design, {tx: x2[:5]})


def test_fan_out_broadcasts_in_one_copy_pass():
    design = compile_model(*designs.fan_out().outputs)
    copies = [p for p in design.phases if isinstance(p, Copy)]
    assert len(copies) == 1 and len(copies[0].dsts) == 2
    assert [type(p) for p in design.phases] == [Run, Copy, Run, Run]


def test_skip_connection_is_copied_to_the_consumer():
    design = compile_model(*designs.residual_mlp().outputs)
    copies = [p for p in design.phases if isinstance(p, Copy)]
    assert len(design.kernels) == 2 and len(copies) == 1


def test_value_toposort_is_the_post_order_of_a_depth_first_walk_taking_operands_last_first():
    """ir.toposort's order is what passes and generated names follow: on random DAGs (shared
    operands, repeated operands, overlapping roots) it must equal the recursive definition."""
    import random
    from compiler import ir

    def reference(roots, operands_of):
        seen, order = set(), []

        def visit(v):
            seen.add(id(v))
            for o in reversed(tuple(operands_of(v))):
                if id(o) not in seen:
                    visit(o)
            order.append(v)
        for r in roots:
            if id(r) not in seen:
                visit(r)
        return order

    rng = random.Random(3)
    for _ in range(200):
        nodes: list[list] = []
        for i in range(rng.randint(1, 40)):
            nodes.append([nodes[rng.randrange(i)] for _ in range(rng.randint(0, 3))] if i else [])
        roots = [rng.choice(nodes) for _ in range(rng.randint(1, 4))]
        got = ir.toposort(roots, lambda v: v)
        assert [id(v) for v in got] == [id(v) for v in reference(roots, lambda v: v)]
        position = {id(v): n for n, v in enumerate(got)}
        assert all(position[id(o)] < position[id(v)] for v in got for o in v)


def test_per_kernel_remembers_by_the_kernels_identity_and_the_other_arguments():
    from compiler import ir
    calls = []

    @ir.per_kernel
    def derived(kernel, config, keep=frozenset()):
        calls.append((kernel, config, keep))
        return (id(kernel), config, keep)

    a, b = object(), object()
    assert derived(a, 1) is derived(a, 1) and len(calls) == 1
    assert derived(b, 1) != derived(a, 1) and derived(a, 2)[1] == 2 and len(calls) == 3
    assert derived(a, 1, keep=frozenset({3}))[2] == {3} and len(calls) == 4
    assert derived(a, [1]) == (id(a), [1], frozenset()) and derived(a, [1]) and len(calls) == 6  # two lists, two keys
    held = [2]                              # an argument that cannot be hashed: remembered by its identity
    assert derived(a, held) is derived(a, held) and len(calls) == 7


def test_held_memo_hits_only_for_the_same_objects_and_forgets_the_oldest():
    from compiler.memo import HeldMemo
    memo, calls = HeldMemo(2), []

    def make(v):
        return lambda: calls.append(v) or v
    a, b, c = [1], [1], [2]                 # a and b equal, not the same object
    assert memo.get((a,), "k", make("a")) == "a" and memo.get((a,), "k", make("x")) == "a"
    assert memo.get((b,), "k", make("b")) == "b" and memo.get((a,), "j", make("j")) == "j"
    assert calls == ["a", "b", "j"] and len(memo) == 2
    assert memo.get((c,), "k", make("c")) == "c" and len(memo) == 2     # a's first entry went
    assert memo.get((a,), "k", make("a2")) == "a2" and calls[-1] == "a2"


def test_a_layer_built_alike_in_two_designs_is_derived_once():
    """compile_traced hands a layer built with the same knobs the same kernel object, so its
    schedule, step checks and delay paths are derived once for every design of a sweep that
    differs only in another layer's knobs; and the designs are the same as compiled alone."""
    from compiler import compile_traced, ir, trace_model
    from compiler.hw import pipeline
    m = designs.mlp_int8(IN=32, HIDDEN=16, OUT=4)
    traced = trace_model(*m.outputs)
    a = compile_traced(traced, HardwareConfig(layers=((0, (("lanes", 4),)), (1, (("lanes", 1),)))))
    b = compile_traced(traced, HardwareConfig(layers=((0, (("lanes", 4),)), (1, (("lanes", 2),)))))
    assert a.kernels[0] is b.kernels[0] and a.kernels[1] is not b.kernels[1]
    assert a.schedules[0] is b.schedules[0]
    assert pipeline.schedule(a.kernels[0], a.config) is pipeline.schedule(b.kernels[0], b.config)
    alone = compile_model(*designs.mlp_int8(IN=32, HIDDEN=16, OUT=4).outputs,
                          config=HardwareConfig(layers=((0, (("lanes", 4),)), (1, (("lanes", 2),)))))
    assert ir.pretty(alone.kernels[0]) == ir.pretty(b.kernels[0]) and ir.pretty(alone.kernels[1]) == ir.pretty(b.kernels[1])
    assert alone.cycle_model() == b.cycle_model() and alone.timing_estimate() == b.timing_estimate()


def test_toposort_orders_producers_first_and_rejects_cycles():
    assert toposort_kernels(3, {(2, 0), (0, 1)}) == [2, 0, 1]
    with pytest.raises(CompileError, match="cycle through: a, b, c"):
        toposort_kernels(3, {(0, 1), (1, 2), (2, 0)}, ["a", "b", "c"])


def test_external_inputs_are_exposed_on_the_host_bus():
    design = compile_model(*designs.mlp_int8(IN=32, HIDDEN=16, OUT=4).outputs)
    ports = {name for name, _ in design.top.signature.members.items()}
    assert {"start", "done", "host_sel", "host_addr", "host_wdata", "host_we", "host_rdata"} <= ports
    assert set(design.graph.inputs) <= set(design.host_buffers)


def test_unsupported_float_op_names_op_dtype_and_kernel():
    """Every float op tinygrad emits for the Tensor API now has a unit (EXP2, LOG2 and SIN are
    decomposed by tinygrad since the renderer does not claim them): the check itself is hit
    with an EXP2 op built by hand, as a renderer that claimed EXP2 would produce."""
    from compiler import dtypes as dt, ir
    from compiler.hw import floatops
    exp2 = ir.Op(ir.OpKind.EXP2, dt.FP32, (ir.Const(1.0, dt.FP32),))
    with pytest.raises(UnsupportedError) as err:
        floatops.check("k0_E_10", exp2, None)
    assert str(err.value) == ("kernel 'k0_E_10': op EXP2 on dtype fp32 is not supported by "
                              "the hardware: no float unit for it yet")
    assert (err.value.kernel, err.value.op, err.value.dtype) == ("k0_E_10", "EXP2", "fp32")


def test_softmax_divides_with_one_fdiv():
    """softmax compiles (it was the RECIPROCAL error): its normalisation is an FDIV op."""
    from compiler import ir
    x = Tensor(np.linspace(-1, 1, 10).astype(np.float32))
    kinds = {v.op for k in compile_model(x.softmax()).kernels for s, _ in k.stores()
             for v in ir.toposort(list(ir.store_operands(s))) if isinstance(v, ir.Op)}
    assert ir.OpKind.FDIV in kinds and ir.OpKind.RECIPROCAL not in kinds


def test_unsupported_dtype_is_rejected_at_compile_time():
    a = Tensor(np.arange(4, dtype=np.float64))
    with pytest.raises(UnsupportedError, match="op COPY on dtype double is not supported by the hardware: "
                                               "no hardware element type \\(supported: bool, int8"):
        compile_model(a + 1)


def test_config_rejects_unknown_and_invalid_knobs():
    with pytest.raises(ValueError, match="mem_read: expected 'sync' or 'comb', got 'async'"):
        HardwareConfig(mem_read="async")
    with pytest.raises(ValueError, match="unknown hardware knob\\(s\\) 'lanez'"):
        HardwareConfig.from_dict({"lanez": 2})
    with pytest.raises(TypeError, match="config must be a HardwareConfig"):
        compile_model(*designs.add_relu().outputs, config={"mem_read": "sync"})


def test_the_ir_after_every_pass_can_be_dumped(monkeypatch, capsys):
    """TINYHW_DUMP_IR=1 lists each kernel after each pass (compiler._dump), for finding the pass
    that broke a kernel; without it the compiler prints nothing."""
    compile_model(*designs.add_relu(N=8).outputs)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("TINYHW_DUMP_IR", "1")
    compile_model(*designs.add_relu(N=8).outputs, config=HardwareConfig(lanes=2))
    err = capsys.readouterr().err
    passes = [line.split()[-1] for line in err.splitlines() if line.startswith("--- after ")]
    assert list(dict.fromkeys(passes)) == ["lower", "float_semantics", "bound", "parallelize", "fold_constants", "fuse_loops",
                                           "interleave", "split_deep", "move_max_resets",
                                           "balance_indices", "merge_chains"]
    assert "for i0 in range(4):  # output" in err        # 8 elements in 2 lanes after parallelize


def _datapath_compares(design) -> int:
    """Compare cells ($lt, $gt, $ge, $le) the kernels' datapaths build (the host's are apart)."""
    import re
    from amaranth.back import rtlil
    text = rtlil.convert(design.top, name="top")
    return len(re.findall(r'attribute \\src "[^"]*datapath\.py:\d+"\n\s*cell \$(lt|gt|ge|le) ', text))


@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32])
def test_a_relu_and_a_clamps_bounds_are_decided_by_the_operands_high_bits_with_no_compare(dtype):
    """x < t, t < x and max(x, c) against thresholds of 0, 2**k and -2**k (ir.bit_test: a ReLU, a
    clamp's bounds, min(x, 127) as ~max(~x, -128), clip(x, 0, 7) as compares and wheres) are
    decided by x's sign and its bits from k up, a LUT tree, where a compare is a carry chain and
    its route; max(x, 5) and max(x, -5) still compare. Bit-exact at each end of the dtype's
    range, around zero and around each bound."""
    info = np.iinfo(dtype.fmt)
    bounds = [0, -1, 1, 7, -8, 127, -128, 32767, -32768]
    near = {b + d for b in bounds + [5, -5, info.min, info.max] for d in (-2, -1, 0, 1, 2)}
    vals = np.array(sorted(v for v in near if info.min <= v <= info.max), dtype=dtype.fmt)
    w = vals.astype(np.int64)
    fits = [b for b in bounds if info.min <= b <= info.max]
    signed = info.min < 0

    x = Tensor(vals, dtype=dtype)
    # min(x, 127) is ~max(~x, -128) where x is signed (unsigned: max(~x, 128), which compares)
    outs = [x.maximum(b) for b in fits] + ([x.minimum(127), x.clip(-8, 7)] if signed else []) + \
        [(x < 8).where(x, 8), (x > 7).where(7, x), x.clip(0, 7)] + ([(x < -8).where(-8, x), (x > -1).where(x, 0)] if signed else [])
    wants = [np.maximum(w, b) for b in fits] + ([np.minimum(w, 127), np.clip(w, -8, 7)] if signed else []) + \
        [np.where(w < 8, w, 8), np.where(w > 7, 7, w), np.clip(w, 0, 7)] + ([np.where(w < -8, -8, w), np.maximum(w, 0)] if signed else [])
    bounded = compile_model(*outs, config=HardwareConfig())
    for out, want in zip(simulate(bounded).outputs, wants, strict=True):
        assert np.asarray(out).astype(np.int64).tolist() == want.tolist()
    assert _datapath_compares(bounded) == 0

    x = Tensor(vals, dtype=dtype)               # a model's inputs are its own
    others = [5, -5] if signed else [5]
    compared = compile_model(*[x.maximum(c) for c in others], config=HardwareConfig())
    for out, want in zip(simulate(compared).outputs, [np.maximum(w, c) for c in others], strict=True):
        assert np.asarray(out).astype(np.int64).tolist() == want.tolist()
    assert _datapath_compares(compared) == len(others)
