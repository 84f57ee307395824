"""Memory indices summed as balanced trees: `((a + b) + c) + d` becomes `(a + b) + (c + d)`.

tinygrad writes a multi-dimensional index as a chain of additions, one term per dimension
(`c2*6 + c0*12 + (c1 << 1) + c3` for a 2x2 max pool's input), and each addition is a carry
chain with a route before it: the index's path from the counters' registers into the read
address's first register grows by one adder a term. The sequential digits CNN at target_mhz
200 had that path as its critical one (three adders, 7.0 ns). Integer addition wraps, so it is
associative in any order: the tree computes the same index with ceil(log2(terms)) adders on
the way. Only indices (loads' and stores'): the datapath's sums are the scheduler's and the
adder-graph pass's. Run after the passes that read index shapes (parallelize, split_deep).
"""
from __future__ import annotations

from .. import ir
from .rewrite import map_stores, op, substitute

K = ir.OpKind


def _terms(v: ir.Value, dtype) -> list[ir.Value]:
    if isinstance(v, ir.Op) and v.op is K.ADD and v.dtype == dtype:
        return _terms(v.srcs[0], dtype) + _terms(v.srcs[1], dtype)
    return [v]


def balance_indices(kernel: ir.KernelIR) -> ir.KernelIR:
    """`kernel` with every load's and store's integer index of more than two added terms summed
    as a balanced tree (neighbours first); the kernel itself where there is none. An index shared
    by several loads stays shared (read ports are per index expression: hw/kernel.read_ports)."""
    balanced: dict[int, ir.Value] = {}          # id(index) -> its sum as a tree (or itself)
    indices: list[ir.Value] = []                # those indices, in the same order: kept alive

    def balance(index: ir.Value) -> ir.Value:
        if id(index) not in balanced:
            indices.append(index)
            out = index
            if isinstance(index, ir.Op) and index.op is K.ADD and not index.dtype.is_float:
                terms = _terms(index, index.dtype)
                if len(terms) > 2:
                    while len(terms) > 1:
                        terms = [op(K.ADD, index.dtype, terms[i], terms[i + 1]) if i + 1 < len(terms) else terms[i]
                                 for i in range(0, len(terms), 2)]
                    out = terms[0]
            balanced[id(index)] = out
        return balanced[id(index)]

    memo: dict[int, ir.Value] = {}

    def replace(v: ir.Value) -> ir.Value | None:
        if isinstance(v, ir.Load):
            index = balance(v.index)
            gate = None if v.gate is None else substitute(v.gate, replace, memo)
            alt = None if v.alt is None else substitute(v.alt, replace, memo)
            same = index is v.index and gate is v.gate and alt is v.alt
            return v if same else ir.Load(v.buf, index, v.dtype, gate, alt)
        return None

    def store(s: ir.Store) -> ir.Store:
        if isinstance(s, ir.AccStore):
            return ir.AccStore(s.acc, substitute(s.value, replace, memo))
        return ir.BufStore(s.buf, balance(s.index), substitute(s.value, replace, memo),
                           None if s.gate is None else substitute(s.gate, replace, memo))

    body = map_stores(kernel.body, store)
    if all(out is index for index, out in zip(indices, balanced.values())):
        return kernel
    return ir.make_kernel(kernel.name, kernel.buffers, kernel.accs, body)
