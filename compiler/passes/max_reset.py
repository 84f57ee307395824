"""A running maximum's reset moved after its compare: `max(where(c, MIN, a), b)` becomes
`where(c, b, max(a, b))`, MIN the least value of the integer dtype (max(MIN, b) is b).

tinygrad's max reduction starts each output with the dtype's least value: its update is
`max(where(first, MIN, acc), x)`. Built as written, the reset select is as wide as MIN (32
bits for int32, whatever the ranges of acc and x), and the compare behind it is a 32-bit carry
chain on the accumulator's one-cycle loop (the sequential digits CNN's 2x2 max pool: a 32-bit
select, a 32-bit compare and its select, the delay model's slowest path at target_mhz 200).
Rewritten, the compare is between acc and x at their own widths and the reset is one more
select after it, which a LUT of the compare's select absorbs (its four inputs: the compare,
`c`, and the two bits).

Run last among the layer passes (compiler._layer_passes): the passes before it recognise a
reduction's update by the guarded read of its accumulator (parallelize, interleave, fuse).
Integer dtypes only: for floats, max(-inf, NaN) need not be NaN in the hardware's unit.
"""
from __future__ import annotations

import dataclasses

from .. import ir
from ..ranges import Interval, analyze
from .rewrite import map_stores, op, substitute, substitute_store

K = ir.OpKind


def _reset_arm(v: ir.Value, d) -> tuple[ir.Value, ir.Value] | None:
    """(c, a) where `v` is where(c, MIN of `d`, a), else None."""
    if isinstance(v, ir.Op) and v.op is K.WHERE and v.dtype == d:
        c, k, a = v.srcs
        if isinstance(k, ir.Const) and not isinstance(k.value, bool) and k.value == d.min:
            return c, a
    return None


def move_max_resets(kernel: ir.KernelIR) -> ir.KernelIR:
    """`kernel` with every integer max(where(c, MIN, a), b) (either operand) rewritten as
    where(c, b, max(a, b)); the kernel itself where there is none. An accumulator every store of
    which is such a rewritten update of itself holds only values of its `b`s (each write is a
    `b`, or the accumulator's value, which was one): its bounds narrow to theirs, which
    compiler/bounds.py took wider (they held the reset value MIN, a store of its own before
    compiler.passes.fuse folded it into the loop)."""
    memo: dict[int, ir.Value] = {}
    updates: dict[int, tuple[int, ir.Value]] = {}     # id(rewritten value) -> (its accumulator, b)
    changed = [False]

    def replace(v: ir.Value) -> ir.Value | None:
        if not (isinstance(v, ir.Op) and v.op is K.MAX and not v.dtype.is_float and not v.dtype.is_bool):
            return None
        for i in (0, 1):
            reset = _reset_arm(v.srcs[i], v.dtype)
            if reset is not None:
                c, a = (substitute(x, replace, memo) for x in reset)
                b = substitute(v.srcs[1 - i], replace, memo)
                out = op(K.WHERE, v.dtype, c, b, op(K.MAX, v.dtype, a, b) if i == 0 else op(K.MAX, v.dtype, b, a))
                changed[0] = True
                if isinstance(a, ir.AccLoad):
                    updates[id(out)] = (a.acc, b)
                return out
        return None

    body = map_stores(kernel.body, lambda s: substitute_store(s, replace, memo))
    if not changed[0]:
        return kernel
    return _narrow_accumulators(ir.make_kernel(kernel.name, kernel.buffers, kernel.accs, body), updates)


def _narrow_accumulators(kernel: ir.KernelIR, updates: dict[int, tuple[int, ir.Value]]) -> ir.KernelIR:
    stores: dict[int, list[ir.Value]] = {}
    for s, _ in kernel.stores():
        if isinstance(s, ir.AccStore):
            stores.setdefault(s.acc, []).append(s.value)
    own = {a.index: [updates[id(v)][1] for v in values] for a, values in
           ((a, stores.get(a.index, [])) for a in kernel.accs)
           if a.bounds is not None and values and all(updates.get(id(v), (None,))[0] == a.index for v in values)}
    if not own:
        return kernel
    ranges = analyze(kernel, {a.index: Interval(*a.bounds) for a in kernel.accs if a.bounds is not None})
    accs = []
    for a in kernel.accs:
        if a.index in own:
            lo = min(ranges[id(b)].lo for b in own[a.index])
            hi = max(ranges[id(b)].hi for b in own[a.index])
            a = dataclasses.replace(a, bounds=(max(lo, a.bounds[0]), min(hi, a.bounds[1])))
        accs.append(a)
    return ir.make_kernel(kernel.name, kernel.buffers, tuple(accs), kernel.body)
