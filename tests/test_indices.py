"""compiler/passes/indices.py: memory indices summed as balanced trees."""
from __future__ import annotations

import numpy as np
from tinygrad import Tensor, dtypes

from compiler import HardwareConfig, compile_model, ir, simulate
from compiler.dtypes import INT32
from compiler.passes.indices import balance_indices
from compiler.passes.rewrite import const, op

K = ir.OpKind


def _depth(v: ir.Value) -> int:
    return 1 + max(_depth(s) for s in v.srcs) if isinstance(v, ir.Op) and v.op is K.ADD else 0


def _terms(v: ir.Value) -> int:
    return sum(_terms(s) for s in v.srcs) if isinstance(v, ir.Op) and v.op is K.ADD else 1


def _kernel(indices: list[ir.Value]) -> ir.KernelIR:
    """Buffer 0 = the sum of buffer 1 read at each of `indices`, in a loop nest of four counters."""
    loads = [ir.Load(1, i, INT32) for i in indices]
    value = loads[0]
    for x in loads[1:]:
        value = op(K.ADD, INT32, value, x)
    store = ir.BufStore(0, ir.Counter(3), value)
    body: tuple = (store,)
    for loop in reversed(range(4)):
        body = (ir.Loop(loop, ir.Axis.OUTPUT, 2, body),)
    buffers = (ir.BufferDecl(0, INT32, 2, False, True), ir.BufferDecl(1, INT32, 64, True, False))
    return ir.make_kernel("k", buffers, (), body)


def _chain(*terms: ir.Value) -> ir.Value:
    out = terms[0]
    for t in terms[1:]:
        out = op(K.ADD, INT32, out, t)
    return out


def _loads(kernel: ir.KernelIR) -> list[ir.Load]:
    (s, _), = kernel.stores()
    return [v for v in ir.toposort([s.value]) if isinstance(v, ir.Load)]


def test_an_index_of_four_terms_takes_two_adders_and_a_shared_index_stays_shared():
    c = [ir.Counter(i) for i in range(4)]
    index = _chain(op(K.MUL, INT32, c[0], const(12)), op(K.MUL, INT32, c[1], const(6)),
                   op(K.SHL, INT32, c[2], const(1)), c[3])
    pair = _chain(c[0], c[1])
    kernel = _kernel([index, index, pair])
    loads = _loads(balance_indices(kernel))
    deep = [ld for ld in loads if _depth(ld.index) > 1]
    assert len(deep) == 2 and deep[0].index is deep[1].index      # one index, one read port
    assert _depth(index) == 3 and _depth(deep[0].index) == 2 and _terms(deep[0].index) == 4
    assert [ld.index for ld in loads if _depth(ld.index) == 1] == [pair]     # two terms: as it was


def test_a_kernel_without_long_indices_is_returned_as_it_is():
    kernel = _kernel([_chain(ir.Counter(0), ir.Counter(1)), ir.Counter(2)])
    assert balance_indices(kernel) is kernel


def test_a_padded_convolution_and_pool_are_bit_exact_with_balanced_indices():
    """A 3x3 convolution with padding over 2 channels (indices of four and more terms, and
    gated loads) then a 2x2 max pool, simulated against numpy, at two settings."""
    rng = np.random.default_rng(8)
    x = rng.integers(-8, 8, (1, 2, 6, 6)).astype(np.int32)
    w = rng.integers(-8, 8, (3, 2, 3, 3)).astype(np.int32)
    t = Tensor(x)
    y = t.conv2d(Tensor(w), padding=1).max_pool2d(kernel_size=(2, 2))
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = np.zeros((1, 3, 6, 6), np.int64)
    for o in range(3):
        for i in range(6):
            for j in range(6):
                conv[0, o, i, j] = (xp[0, :, i:i + 3, j:j + 3] * w[o]).sum()
    ref = conv.reshape(1, 3, 3, 2, 3, 2).max(axis=(3, 5)).astype(np.int32)
    for config in (HardwareConfig(), HardwareConfig(fp_pipeline=3, target_mhz=200, lanes=2)):
        design = compile_model(y.cast(dtypes.int32), config=config)
        indices = [v.index for k in design.kernels for s, _ in k.stores()
                   for v in ir.toposort(ir.store_operands(s)) if isinstance(v, ir.Load)]
        assert max(_terms(i) for i in indices) >= 4
        assert all(_depth(i) == (_terms(i) - 1).bit_length() for i in indices)
        r = simulate(design, {t: x})
        np.testing.assert_array_equal(np.asarray(r.outputs[0]).reshape(ref.shape), ref)
        assert r.cycles == design.cycle_model().total
