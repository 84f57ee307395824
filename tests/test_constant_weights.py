"""weights: constant: a model's weights built into the datapath (compiler/weights.py,
compiler/passes/constants.py, compiler/passes/chain.py), pruning (dse/models/prune.py), and the
errors around them. Every design is simulated and compared with numpy (or with the same model
compiled with its weights in memories) bit for bit, cycles against the cycle model."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from tinygrad import Tensor, dtypes

from compiler import CompileError, HardwareConfig, compile_model, ir, simulate
from compiler.ranges import analyze
from dse.cli import main
from dse.models.prune import check_sparsity, masks, prune
from dse.models.quantize import DenseNet
from helpers import write_spec


def _i8(rng, *shape):
    return rng.integers(-128, 128, shape).astype(np.int8)


def _mlp(rng, IN=12, HIDDEN=6, OUT=3, SHIFT=7, zeros=0.0):
    """An int8 two-layer MLP with requantisation between the layers (ReLU, shift, clip to 127):
    (x Tensor, output Tensor, numpy reference for a sample)."""
    W1, W2 = _i8(rng, HIDDEN, IN), _i8(rng, OUT, HIDDEN)
    W1[rng.random(W1.shape) < zeros] = 0
    b1 = rng.integers(-500, 500, HIDDEN).astype(np.int32)
    x = Tensor(_i8(rng, IN)).realize()
    h = (Tensor(W1).cast(dtypes.int32) @ x.cast(dtypes.int32) + Tensor(b1)).relu()
    h8 = (h >> SHIFT).minimum(127).cast(dtypes.int8)
    y = Tensor(W2).cast(dtypes.int32) @ h8.cast(dtypes.int32)

    def reference(xv):
        hv = np.minimum(np.maximum(W1.astype(np.int32) @ xv.astype(np.int32) + b1, 0) >> SHIFT, 127)
        return W2.astype(np.int32) @ hv.astype(np.int32)
    return x, y, reference


def _run(design, x, samples):
    outs = []
    for s in samples:
        r = simulate(design, {x: s})
        assert r.cycles == design.cycle_model().total
        outs.append(np.asarray(r.outputs[0]).reshape(-1))
    return outs


FULL = {"weights": "constant", "lanes": 64, "reduce_unroll": 64}


def test_fully_unrolled_constant_layers_become_one_step_bit_exact():
    rng = np.random.default_rng(0)
    x, y, ref = _mlp(rng)
    d = compile_model(y, config=HardwareConfig.from_dict(FULL), stream=[x])
    # both layers merged into one kernel of one step: start, the step, done
    assert len(d.kernels) == 1 and d.cycle_model().total == 2 and d.cycle_model().copies == 0
    assert not d.kernels[0].accs and len(d.constants) == 3          # W1, b1, W2
    # on the host bus: the input's banks (writable) and the output's (readable), no weight
    assert {(hp.buffer, hp.write) for hp in d.host_ports} == {(d.buffer_of(x), True), (d.graph.outputs[0], False)}
    samples = [_i8(rng, 12) for _ in range(3)]
    for got, s in zip(_run(d, x, samples), samples):
        assert np.array_equal(got, ref(s))


def test_products_by_zero_vanish_and_by_constants_are_shifts_and_adds():
    rng = np.random.default_rng(1)
    x, y, ref = _mlp(rng, zeros=0.75)
    d = compile_model(y, config=HardwareConfig.from_dict(FULL), stream=[x])
    k = d.kernels[0]
    ops = [v for v in ir.toposort([o for s, _ in k.stores() for o in ir.store_operands(s)]) if isinstance(v, ir.Op)]
    # no int8 weight needs a multiplier: every product is shifts and adds (the requantisation has none)
    assert not [v for v in ops if v.op is ir.OpKind.MUL]
    assert any(v.op is ir.OpKind.SHL for v in ops)
    dense_x, dense_y, _ = _mlp(np.random.default_rng(1))
    dense = compile_model(dense_y, config=HardwareConfig.from_dict(FULL), stream=[dense_x])
    adds = lambda kk: sum(isinstance(v, ir.Op) and v.op in (ir.OpKind.ADD, ir.OpKind.SUB)  # noqa: E731
                          for v in ir.toposort([o for s, _ in kk.stores() for o in ir.store_operands(s)]))
    assert adds(k) < 0.6 * adds(dense.kernels[0])          # 75% of the first layer's weights are zero
    s = _i8(rng, 12)
    assert np.array_equal(_run(d, x, [s])[0], ref(s))


@pytest.mark.parametrize("knobs", [{"weights": "constant"}, {"weights": "constant", "lanes": 2},
                                   {"weights": "constant", "lanes": 3, "reduce_unroll": 4, "fp_pipeline": 2}])
def test_folded_layers_read_their_weights_from_roms(knobs):
    """Partial folding: addresses still vary, the weights stay in read-only memories that the
    host bus never sees; results and cycles equal the memory design's."""
    rng = np.random.default_rng(2)
    x, y, ref = _mlp(rng)
    config = HardwareConfig.from_dict(knobs)
    d = compile_model(y, config=config, stream=[x])
    memory = compile_model(*_mlp(np.random.default_rng(2))[1:2],
                           config=HardwareConfig.from_dict({**knobs, "weights": "memory"}))
    assert d.cycle_model() == memory.cycle_model()
    assert any(b.rom is not None for k in d.kernels for b in k.buffers)
    assert all(hp.buffer not in d.constants for hp in d.host_ports)
    samples = [_i8(rng, 12) for _ in range(2)]
    for got, s in zip(_run(d, x, samples), samples):
        assert np.array_equal(got, ref(s))


def test_folded_integer_arithmetic_equals_the_hardware():
    """Shifts past the width, C division and remainder of negatives, casts that wrap, compares:
    computed on constant weights by the compiler (fold_constants) and by the datapath on the
    same weights in memory, for the same inputs."""
    rng = np.random.default_rng(3)
    w = rng.integers(-2**31, 2**31, 16, dtype=np.int64).astype(np.int32)
    w[:4] = [0, -1, -7, 2**31 - 1]
    xv = rng.integers(-1000, 1000, 16).astype(np.int32)

    def model(w_data):
        W, x = Tensor(w_data).realize(), Tensor(xv).realize()
        s = (W >> 5) + (W << 3) + W // 7 + W % -5 + (W < 0).cast(dtypes.int32) + W.cast(dtypes.int8).cast(dtypes.int32)
        return x, (s * x + W.maximum(3)).contiguous()
    x, y = model(w)
    const = compile_model(y, config=HardwareConfig.from_dict(FULL), stream=[x])
    mem = compile_model(model(w)[1], config=HardwareConfig(lanes=16))
    assert not any(isinstance(v, ir.Load) and v.buf in {b.slot for b in const.kernels[0].buffers if b.rom is not None}
                   for v in ir.toposort([o for s, _ in const.kernels[0].stores() for o in ir.store_operands(s)]))
    assert np.array_equal(simulate(const).outputs[0], simulate(mem).outputs[0])


def test_a_change_of_weights_is_a_change_of_hardware():
    def fingerprints(seed, weights="constant"):
        x, y, _ = _mlp(np.random.default_rng(seed))
        d = compile_model(y, config=HardwareConfig.from_dict({**FULL, "weights": weights}), stream=[x])
        return [ir.fingerprint(k) for k in d.kernels]
    assert fingerprints(0) == fingerprints(0)
    assert fingerprints(0) != fingerprints(1)
    rom = {**FULL, "lanes": 1, "reduce_unroll": 1}
    x, y, _ = _mlp(np.random.default_rng(0))
    a = [ir.fingerprint(k) for k in compile_model(y, config=HardwareConfig.from_dict(rom), stream=[x]).kernels]
    x, y, _ = _mlp(np.random.default_rng(1))
    b = [ir.fingerprint(k) for k in compile_model(y, config=HardwareConfig.from_dict(rom), stream=[x]).kernels]
    assert a != b                                       # ROM contents are in the fingerprint too
    assert fingerprints(0, "memory") == fingerprints(1, "memory")     # memories: the data is not hardware


def test_a_constant_input_cannot_be_set_at_run_time():
    rng = np.random.default_rng(4)
    x, y, _ = _mlp(rng)
    d = compile_model(y, config=HardwareConfig.from_dict(FULL), stream=[x])
    const = sorted(d.constants)[0]
    with pytest.raises(CompileError, match=rf"^input buffer {const} \(.*\) is built into the design \(weights='constant'\)"):
        simulate(d, {const: np.zeros(d.graph.buffers[const].size, np.int8)})


def test_constant_weights_for_run_time_inputs_only_is_one_clear_error():
    a, b = Tensor.empty(8, dtype=dtypes.int32), Tensor.empty(8, dtype=dtypes.int32)
    with pytest.raises(CompileError, match=r"^weights='constant' needs weights known at compile time, but every input "
                                           r"of this model is given at run time \(buffer \d+ \(int32\[8\]\), buffer \d+ \(int32\[8\]\)\): "
                                           r"compile it with its weights as data"):
        compile_model((a + b).relu(), config=HardwareConfig(weights="constant"))
    x, y, _ = _mlp(np.random.default_rng(5))
    with pytest.raises(CompileError, match=r"^lanes@0=7 does not fit layer 0 \(k0_r_6_12\): its output loop has 6 "
                                           r"iterations; use lanes@0 from 1 to 6"):
        compile_model(y, config=HardwareConfig.from_dict({"lanes@0": 7}), stream=[x])


def test_adder_levels_trade_stages_for_logic_depth_and_stay_exact():
    rng = np.random.default_rng(6)
    x, y, ref = _mlp(rng, IN=16, HIDDEN=8)
    cycles = []
    for levels in (1, 2, 4):
        xs, ys, _ = _mlp(np.random.default_rng(6), IN=16, HIDDEN=8)
        d = compile_model(ys, config=HardwareConfig.from_dict({**FULL, "fp_pipeline": 3, "adder_levels": levels}),
                          stream=[xs])
        cycles.append(d.cycle_model().total)
        if levels == 2:
            s = _i8(rng, 16)
            assert np.array_equal(_run(d, xs, [s])[0], ref(s))
    assert cycles[0] > cycles[1] > cycles[2] > 2


def test_a_value_many_adders_read_reaches_them_through_copies_and_stays_exact():
    """adder_levels > 1: an activation read by more than FANOUT_USES shifted terms of the next
    layer ends its stage with a register, and its readers take copies of it a stage later."""
    from compiler.hw.pipeline import FANOUT_USES, schedule
    rng = np.random.default_rng(9)
    xs, ys, ref = _mlp(rng, IN=12, HIDDEN=10, OUT=12)
    config = HardwareConfig.from_dict({**FULL, "fp_pipeline": 3, "adder_levels": 2})
    d = compile_model(ys, config=config, stream=[xs])
    k = d.kernels[0]
    sched = schedule(k, config)
    order = ir.toposort([o for s, _ in k.stores() for o in ir.store_operands(s)])
    readers = {id(v): sum(any(o is v for o in u.srcs) for u in order if isinstance(u, ir.Op)) for v in order}
    fanned = [v for v in order if id(v) in sched.fanout]
    assert fanned and all(readers[id(v)] > FANOUT_USES for v in fanned)
    # its readers start a stage after it is ready (they read copies), or in that stage when the
    # copies take the read data before its register (the input's loads and their casts)
    assert sched.early and all(isinstance(v, ir.Load) or isinstance(v.srcs[0], ir.Load)
                               for v in fanned if id(v) in sched.early)
    assert any(id(v) not in sched.early for v in fanned)
    for v in fanned:
        assert all(sched.ready[id(u)] - sched.latency.get(id(u), 0) >= sched.ready[id(v)] + (id(v) not in sched.early)
                   for u in order if isinstance(u, ir.Op) and any(o is v for o in u.srcs))
    for s in [_i8(rng, 12) for _ in range(3)]:
        assert np.array_equal(_run(d, xs, [s])[0], ref(s))
    one_level = HardwareConfig.from_dict({**FULL, "fp_pipeline": 3})      # a register per adder: no copies
    x1, y1, _ = _mlp(np.random.default_rng(9), IN=12, HIDDEN=10, OUT=12)
    assert not schedule(compile_model(y1, config=one_level, stream=[x1]).kernels[0], one_level).fanout


def test_scale_digits_make_every_requantisation_multiplier_cheap_and_exact(digits):
    """scale_digits: D: each hidden layer's multipliers have at most D canonical signed digits
    (1: powers of two), the weight scales stretched to match: the integer model is still the
    golden model of the hardware, and accuracy moves by little."""
    from compiler.passes.constants import csd
    from dse.models.data import read_weights
    from dse.models.widths import Formats
    net = DenseNet.from_arrays(read_weights(Path(__file__).parent.parent / "models" / "digits_mlp.npz"))
    cal = digits.x_train.reshape(len(digits.x_train), -1)
    x = digits.x_test.reshape(len(digits.x_test), -1)
    exact = net.quantize(dtype="int8", calibration=cal)
    assert max(len(csd(int(m))) for m in exact.layers[0].M) > 3
    for d in (1, 2):
        q = net.quantize(dtype="int8", calibration=cal, formats=Formats.of({"scale_digits": d}))
        assert all(len(csd(int(m))) <= d for layer in q.layers if layer.M is not None for m in layer.M)
        assert all(np.abs(layer.W).max() <= 127 for layer in q.layers)
        acc = (q.reference(q.quantize_input(x)).argmax(1) == digits.y_test).mean()
        assert acc >= (exact.reference(exact.quantize_input(x)).argmax(1) == digits.y_test).mean() - 0.01
    with pytest.raises(ValueError, match=r"^scale_digits@1: the last layer outputs int32 logits, not activations, "
                                         r"with no requantisation$"):
        net.quantize(dtype="int8", calibration=cal, formats=Formats.of({"scale_digits@1": 1}))
    with pytest.raises(ValueError, match=r"^scale_digits 9 for layer 0 \(W1\): 1 to 8 digits$"):
        net.quantize(dtype="int8", calibration=cal, formats=Formats.of({"scale_digits": 9}))


@pytest.mark.slow
def test_with_power_of_two_scales_a_constant_model_has_no_multiplier_and_is_bit_exact(digits):
    from dse.models.accuracy import run_samples
    from dse.models.data import read_weights
    from dse.models.widths import Formats
    net = DenseNet.from_arrays(read_weights(Path(__file__).parent.parent / "models" / "digits_mlp.npz"))
    config = HardwareConfig.from_dict({**FULL, "fp_pipeline": 3, "adder_levels": 3, "schedule": "dataflow"})
    r = run_samples(net=net, dtype="int8", data=digits, config=config, formats=Formats.of({"scale_digits": 1}))
    k = r.design.kernels[0]
    assert not [v for v in ir.toposort([o for s, _ in k.stores() for o in ir.store_operands(s)])
                if isinstance(v, ir.Op) and v.op is ir.OpKind.MUL]
    assert r.samples == len(digits.x_test) and r.accuracy > 0.96 and r.design.cycle_model().interval == 1


def _variable_shifts(design) -> list[ir.Op]:
    """The left shifts of `design`'s kernels by an amount not known at compile time."""
    return [v for k in design.kernels for v in ir.toposort([o for s, _ in k.stores() for o in ir.store_operands(s)])
            if isinstance(v, ir.Op) and v.op is ir.OpKind.SHL and not isinstance(v.srcs[1], ir.Const)]


def test_with_power_of_two_scales_a_folded_layer_shifts_by_its_stored_exponents(digits):
    """scale_digits: 1 with the weights in memories: each hidden layer's channel scales are stored
    as exponents (E{i} = log2 M{i}) and requantisation is a barrel shifter of a few levels instead
    of a multiplier by a 14-bit operand; the hardware bit-exact to the integer model."""
    from dse.models.accuracy import run_samples
    from dse.models.data import read_weights
    from dse.models.widths import Formats
    net = DenseNet.from_arrays(read_weights(Path(__file__).parent.parent / "models" / "digits_mlp.npz"))
    formats = Formats.of({"scale_digits": 1, "weight_bits": 4, "act_bits": 4})
    cal = digits.x_train.reshape(len(digits.x_train), -1)
    q = net.quantize(dtype="int8", calibration=cal, formats=formats)
    arrays = q.arrays()
    assert "M1" not in arrays and np.array_equal(1 << arrays["E1"].astype(np.int64), q.layers[0].M)
    assert "M1" in net.quantize(dtype="int8", calibration=cal).arrays()          # other multipliers stay products
    data = dataclasses.replace(digits, x_test=digits.x_test[:100], y_test=digits.y_test[:100])
    r = run_samples(net=net, dtype="int8", data=data, formats=formats, quantized=q, config=HardwareConfig(
        schedule="dataflow", fold="auto", target_interval=64, mul="lut"))
    shifts = _variable_shifts(r.design)
    assert shifts and r.samples == 100


def test_with_power_of_two_scales_a_folded_cnn_shifts_by_its_stored_exponents():
    """The same for the digits CNN (dse/models/convnet.py): its conv and dense layers' scales as
    exponents, streamed through a dataflow design at fp_pipeline 3, bit-exact on 40 samples."""
    from dse.models.accuracy import run_samples
    from dse.models.data import load_dataset
    from dse.models.widths import Formats
    from dse.spec import load_spec
    trained = load_spec(Path(__file__).parent.parent / "configs" / "digits_cnn.yaml").model("digits_cnn").trained
    data = load_dataset(dataclasses.replace(trained.data, samples=40))
    r = run_samples(net=trained.net(), dtype="int8", data=data, formats=Formats.of({"scale_digits": 1}),
                    config=HardwareConfig(schedule="dataflow", fold="auto", target_interval=512, fp_pipeline=3))
    shifts = _variable_shifts(r.design)
    assert shifts and r.samples == 40 and r.accuracy > 0.8


def test_a_rounding_term_after_a_power_of_two_multiplier_joins_the_bias():
    """((W @ x + b) * 2**k + 2**(S-1)) >> S, as quantize.py requantises with scale_digits: 1: the
    rounding constant moves inside the shift and joins the bias, so nothing is added after the
    layer's adder tree; bit-exact against numpy."""
    rng = np.random.default_rng(10)
    W1, W2 = _i8(rng, 6, 12), _i8(rng, 3, 6)
    b1 = rng.integers(-500, 500, 6).astype(np.int32)
    x = Tensor(_i8(rng, 12)).realize()
    acc = Tensor(W1).cast(dtypes.int32) @ x.cast(dtypes.int32) + Tensor(b1)
    h = ((acc * 8 + (1 << 11)) >> 12).clip(0, 127).cast(dtypes.int8)
    y = Tensor(W2).cast(dtypes.int32) @ h.cast(dtypes.int32)
    d = compile_model(y, config=HardwareConfig.from_dict(FULL), stream=[x])
    k = d.kernels[0]
    order = ir.toposort([o for s, _ in k.stores() for o in ir.store_operands(s)])
    shifted_sums = [v for v in order if isinstance(v, ir.Op) and v.op is ir.OpKind.ADD
                    and any(isinstance(o, ir.Op) and o.op is ir.OpKind.SHL and isinstance(o.srcs[1], ir.Const)
                            and o.srcs[1].value == 3 for o in v.srcs) and any(isinstance(o, ir.Const) for o in v.srcs)]
    assert not shifted_sums
    for s in [_i8(rng, 12) for _ in range(4)]:
        hv = np.clip((((W1.astype(np.int32) @ s.astype(np.int32) + b1) * 8 + (1 << 11)) >> 12), 0, 127)
        assert np.array_equal(_run(d, x, [s])[0], W2.astype(np.int32) @ hv)


def test_a_clip_after_a_relu_is_seven_bits_wide():
    """where(127 < v, 127, cast(v)) with v = max(., 0): the value is 0..127, not the int8 range."""
    rng = np.random.default_rng(7)
    W1, W2 = _i8(rng, 6, 12), _i8(rng, 3, 6)
    x = Tensor(_i8(rng, 12)).realize()
    h = ((Tensor(W1).cast(dtypes.int32) @ x.cast(dtypes.int32)) >> 7).clip(0, 127).cast(dtypes.int8)   # as quantize.py
    y = Tensor(W2).cast(dtypes.int32) @ h.cast(dtypes.int32)
    d = compile_model(y, config=HardwareConfig.from_dict(FULL), stream=[x])
    k = d.kernels[0]
    iv = analyze(k)
    clips = [v for v in ir.toposort([o for s, _ in k.stores() for o in ir.store_operands(s)])
             if isinstance(v, ir.Op) and v.op is ir.OpKind.WHERE and v.dtype.name == "int8"]
    assert clips and all((iv[id(v)].lo, iv[id(v)].hi) == (0, 127) for v in clips)


def test_pruning_zeroes_each_layer_to_its_sparsity_and_retrains_the_rest(digits):
    rng = np.random.default_rng(8)
    net = DenseNet.from_arrays({"W1": rng.normal(size=(16, 64)), "b1": rng.normal(size=16),
                                "W2": rng.normal(size=(10, 16)), "b2": rng.normal(size=10)})
    x = digits.x_train.reshape(len(digits.x_train), -1)[:300] / 16
    y = digits.y_train[:300]
    p = prune(net, sparsity=0.75, x=x, y=y)
    assert [int((layer.W == 0).sum()) for layer in p.layers] == [768, 120]
    assert all(np.array_equal(layer.W != 0, m) for layer, m in zip(p.layers, masks(p, 0.75)))
    assert np.array_equal(prune(net, sparsity=0.75, x=x, y=y).layers[0].W, p.layers[0].W)    # seeded
    before = (net.float_logits(x).argmax(1) == y).mean()
    assert (p.float_logits(x).argmax(1) == y).mean() > before       # trained on the split it is scored on here
    assert prune(net, sparsity=0, x=x, y=y) is net
    for bad in (1, 1.0, -0.1, 2, "0.5", True):
        with pytest.raises(ValueError, match=r"^expected a sparsity from 0 \(no pruning\) up to, not including, 1"):
            check_sparsity(bad)


def _validate(tmp_path, capsys, spec: dict) -> tuple[int, str, str]:
    rc = main(["validate", str(write_spec(tmp_path, spec))])
    out, err = capsys.readouterr()
    return rc, out, err


JET = {"name": "jet", "weights": "PATH/models/jet_mlp.npz"}


@pytest.mark.parametrize("models, knobs, message", [
    ([{"name": "add", "builtin": "elementwise", "params": {"N": 8}}], {"weights": ["memory", "constant"]},
     "error: knobs.weights: constant weights for model 'add' (int8), whose inputs are all given at run time (a, b): "
     "it has no weights known at compile time to build in; give them with 'weights:' beside the model, or use "
     "weights: [memory]"),
    ([{**JET, "prune": 1.0}], {"weights": ["constant"]},
     "error: models[0].prune: expected a sparsity from 0 (no pruning) up to, not including, 1 (the fraction of each "
     "layer's weights set to zero), got 1.0"),
    ([{**JET, "prune": -0.5}], {},
     "error: models[0].prune: expected a sparsity from 0 (no pruning) up to, not including, 1 (the fraction of each "
     "layer's weights set to zero), got -0.5"),
    ([JET], {"lanes@0": [64, 128]},
     "error: knobs.lanes@0[1]: lanes=128 does not fit layer k0_r_64_16 of model 'jet' (int8): its output loop has 64 "
     "iterations; use 1 to 64 (64: the whole layer in one step)"),
    ([JET], {"reduce_unroll@k1_r_32_64": [65]},
     "error: knobs.reduce_unroll@k1_r_32_64[0]: reduce_unroll=65 does not fit layer k1_r_32_64 of model 'jet' "
     "(int8): its reduction has 64 terms; use 1 to 64 (64: the whole layer in one step)"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, models, knobs, message):
    from pathlib import Path
    root = str(Path(__file__).resolve().parent.parent)
    models = [{k: (v.replace("PATH", root) if isinstance(v, str) else v) for k, v in m.items()} for m in models]
    spec = {"study": "t", "target": "ecp5", "models": models, "dtypes": ["int8"], "knobs": knobs,
            "objectives": ["cycles", "luts"], "search": {"sampler": "grid", "seed": 0},
            "data": {"file": f"{root}/models/jet_data.npz"}}
    rc, out, err = _validate(tmp_path, capsys, spec)
    assert (rc, out, err) == (2, "", message + "\n")


def test_dse_layers_lists_each_layers_largest_factors(tmp_path, capsys):
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    spec = {"study": "t", "target": "ecp5", "models": [{"name": "jet", "weights": str(root / "models/jet_mlp.npz")}],
            "data": {"file": str(root / "models/jet_data.npz")}, "dtypes": ["int8"],
            "objectives": ["cycles", "luts"], "search": {"sampler": "grid", "seed": 0}}
    assert main(["layers", str(write_spec(tmp_path, spec))]) == 0
    assert capsys.readouterr().out.startswith(
        "jet (int8): 4 layers\n  0  k0_r_64_16 = W1  (lanes up to 64, reduce_unroll up to 16)\n"
        "  1  k1_r_32_64 = W2  (lanes up to 32, reduce_unroll up to 64)\n"
        "  2  k2_r_32_32 = W3  (lanes up to 32, reduce_unroll up to 32)\n"
        "  3  k3_r_5_32 = W4  (lanes up to 5, reduce_unroll up to 32)\n")


@pytest.mark.slow
def test_a_trained_network_with_constant_weights_through_dse_eval(tmp_path, capsys):
    """A small trained network (iris, 4-6-3) fully unrolled with constant weights, 40% pruned:
    checked bit-exact on every test sample in CXXRTL by the accuracy stage, unchanged."""
    from sklearn.neural_network import MLPClassifier
    from dse.models.data import DataSpec, load_dataset
    data = load_dataset(DataSpec(dataset="sklearn:iris"))
    clf = MLPClassifier((6,), max_iter=2000, random_state=0).fit(data.x_train, data.y_train)
    np.savez(tmp_path / "iris.npz", W1=clf.coefs_[0].T, b1=clf.intercepts_[0], W2=clf.coefs_[1].T,
             b2=clf.intercepts_[1])
    spec = {"study": "t", "target": "ecp5",
            "models": [{"name": "m", "weights": str(tmp_path / "iris.npz"), "prune": 0.4}],
            "data": {"dataset": "sklearn:iris"}, "dtypes": ["int8"],
            "knobs": {"weights": ["constant"], "lanes": [8], "reduce_unroll": [8]},
            "objectives": ["accuracy", "cycles"], "search": {"sampler": "grid", "seed": 0}}
    path = write_spec(tmp_path, spec)
    assert main(["eval", str(path), "--model", "m", "--dtype", "int8", "--no-synth", "--json", "--sim", "cxxrtl"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["status"] == "OK" and row["correct"] and row["cycles"] == row["cycles_model"] == 2
    assert row["samples"] == 38 and row["accuracy"] > 0.8 and row["accuracy_float"] > 0.8
    assert row["knobs"]["weights"] == "constant"
    from compiler.passes.adder_graph import da4ml_available       # what adder_graph: auto built, said
    built = "shared" if da4ml_available() else "per_product"
    assert f"adder_graph auto: {built} (constant layers)" in row["notes"]


@pytest.mark.slow
def test_a_merged_constant_model_streams_a_sample_every_cycle():
    """schedule: dataflow on a model merged into one pipelined kernel: a beat of one cycle, so an
    initiation interval of one sample per cycle, and every sample's latency the pipeline's
    depth + 2, as measured in CXXRTL (samples back to back), outputs bit-exact."""
    from compiler import simulate_many
    rng = np.random.default_rng(10)
    x, y, ref = _mlp(rng)
    d = compile_model(y, config=HardwareConfig.from_dict({**FULL, "schedule": "dataflow", "fp_pipeline": 3,
                                                          "adder_levels": 2}), stream=x)
    cm = d.cycle_model()
    assert (cm.interval, d.flow.beat, len(d.kernels)) == (1, 1, 1)
    assert cm.total == d.schedules[0].commit + 2 > 2
    samples = [_i8(rng, 12) for _ in range(5)]
    runs = simulate_many(d, [{x: s} for s in samples], backend="cxxrtl")
    assert [r.interval for r in runs] == [1] * 5 and [r.cycles for r in runs] == [cm.total] * 5
    for r, s in zip(runs, samples):
        assert np.array_equal(np.asarray(r.outputs[0]).reshape(-1), ref(s))


@pytest.mark.parametrize("knobs", [{"lanes": 2, "reduce_unroll": 4}, {"lanes": 3, "fp_pipeline": 3}, FULL])
def test_constant_weights_in_a_declared_range_are_roms_at_its_width(knobs):
    """int4 weights in an int8 Tensor (input_ranges) built in: the ROM banks keep their bounds
    (4 bits, negative words masked to them), the products are 4 x 8 bits, bit-exact."""
    rng = np.random.default_rng(11)
    Wn, xn = rng.integers(-8, 8, (6, 24)).astype(np.int8), _i8(rng, 24)
    W, x = Tensor(Wn).realize(), Tensor(xn).realize()
    y = W.cast(dtypes.int32) @ x.cast(dtypes.int32)
    d = compile_model(y, config=HardwareConfig.from_dict({**knobs, "weights": "constant"}), stream=[x],
                      input_ranges={W: (-8, 7)})
    roms = [b for k in d.kernels for b in k.buffers if b.rom is not None]
    assert all(b.bounds == (-8, 7) and b.width == 4 for b in roms)
    assert roms or knobs is FULL
    s = _i8(rng, 24)
    got = _run(d, x, [s])[0]
    assert np.array_equal(got, Wn.astype(np.int64) @ s.astype(np.int64))
    assert np.array_equal(simulate(d, {x: s}, backend="cxxrtl").outputs[0].reshape(-1), got)


def test_a_constant_weight_outside_its_declared_range_is_refused_when_compiled():
    Wn = np.full((4, 8), 3, np.int8)
    Wn[2, 5] = 9
    W, x = Tensor(Wn).realize(), Tensor(np.ones(8, np.int8)).realize()
    y = W.cast(dtypes.int32) @ x.cast(dtypes.int32)
    with pytest.raises(CompileError, match=r"^input buffer \d+ \(int8\): element 21 is 9, outside its declared range \[-8, 7\]"):
        compile_model(y, config=HardwareConfig(weights="constant"), stream=[x], input_ranges={W: (-8, 7)})


@pytest.mark.slow
def test_an_input_bank_that_only_meets_zero_weights_is_left_unread_and_the_netlist_runs():
    """A lane whose weight is zero reads nothing: synthesis removes that bank of x, and the
    CXXRTL run (which pokes memories of the netlist by name) must neither poke nor read it."""
    xv = np.arange(-4, 4, dtype=np.int8)
    w = np.array([0, 1, -1, 64, 3, 5, 7, 9], dtype=np.int8)
    x = Tensor(xv).realize()
    y = (x.cast(dtypes.int32) * Tensor(w).cast(dtypes.int32)).contiguous()
    design = compile_model(y, config=HardwareConfig(weights="constant", lanes=8), stream=x)
    unread = [ref for ref in design.memories_of(design.host_buffers[design.buffer_of(x)].home)
              if not design.is_read(ref)]
    assert [ref.name for ref in unread] == ["mem_b1_l0"]
    r = simulate(design, backend="cxxrtl")
    np.testing.assert_array_equal(np.asarray(r.outputs[0]).reshape(-1), xv.astype(np.int32) * w)
    assert r.cycles == design.cycle_model().total


@pytest.mark.slow
def test_a_bank_only_another_kernel_reads_in_place_is_still_loaded():
    """share_buffers: kernel 1 reads kernel 0's banks of x in place, so a bank kernel 0 leaves
    unread (its weight is zero) is still read, poked and bit-exact."""
    xv = np.arange(-4, 4, dtype=np.int8)
    w1 = np.array([0, 1, -1, 64, 3, 5, 7, 9], dtype=np.int8)
    w2 = np.array([2, 1, -1, 64, 3, 5, 7, 9], dtype=np.int8)
    x = Tensor(xv).realize()
    y1 = (x.cast(dtypes.int32) * Tensor(w1).cast(dtypes.int32)).contiguous()
    y2 = (x.cast(dtypes.int32) * Tensor(w2).cast(dtypes.int32)).contiguous()
    design = compile_model(y1, y2, config=HardwareConfig(weights="constant", lanes=8, share_buffers=True), stream=x)
    assert design.shares
    assert all(design.is_read(ref) for ref in design.memories_of(design.host_buffers[design.buffer_of(x)].home))
    r = simulate(design, backend="cxxrtl")
    for out, w in zip(r.outputs, (w1, w2)):
        np.testing.assert_array_equal(np.asarray(out).reshape(-1), xv.astype(np.int32) * w)
