"""What the passes share: value substitution that keeps shared nodes shared, constructors
of IR nodes, and the shapes of loop nests they recognise."""
from __future__ import annotations

from typing import Callable

from .. import ir
from ..dtypes import BOOL, INT32

K = ir.OpKind


def substitute(v: ir.Value, replace: Callable[[ir.Value], ir.Value | None], memo: dict[int, ir.Value]) -> ir.Value:
    """`v` with every node for which `replace` returns a value swapped for it; nodes whose
    operands are unchanged stay the same object (sharing, and the read ports that depend on
    it, survive)."""
    if id(v) in memo:
        return memo[id(v)]
    out = replace(v)
    if out is None:
        if isinstance(v, ir.Op):
            srcs = tuple(substitute(s, replace, memo) for s in v.srcs)
            out = v if all(a is b for a, b in zip(srcs, v.srcs)) else ir.Op(v.op, v.dtype, srcs)
        elif isinstance(v, ir.Load):
            parts = [None if x is None else substitute(x, replace, memo) for x in (v.index, v.gate, v.alt)]
            same = all(a is b for a, b in zip(parts, (v.index, v.gate, v.alt)))
            out = v if same else ir.Load(v.buf, parts[0], v.dtype, parts[1], parts[2])
        else:
            out = v
    memo[id(v)] = out
    return out


def substitute_store(s: ir.Store, replace, memo) -> ir.Store:
    sub = lambda x: None if x is None else substitute(x, replace, memo)   # noqa: E731
    if isinstance(s, ir.AccStore):
        return ir.AccStore(s.acc, sub(s.value))
    return ir.BufStore(s.buf, sub(s.index), sub(s.value), sub(s.gate))


def map_stores(stmts: tuple, f: Callable[[ir.Store], ir.Store]) -> tuple:
    """The loop tree `stmts` with every store replaced by f(store), loops kept as they are."""
    return tuple(ir.Loop(s.id, s.axis, s.bound, map_stores(s.body, f)) if isinstance(s, ir.Loop) else f(s)
                 for s in stmts)


def const(value: int, dtype=INT32) -> ir.Const:
    return ir.Const(value, dtype)


def op(kind: ir.OpKind, dtype, *srcs: ir.Value) -> ir.Op:
    return ir.Op(kind, dtype, tuple(srcs))


def all_of(conds: list[ir.Value]) -> ir.Value | None:
    """AND of boolean values (None for none)."""
    out = None
    for c in conds:
        out = c if out is None else op(K.AND, BOOL, out, c)
    return out


def store_values(store: ir.Store) -> list[ir.Value]:
    return ir.toposort(ir.store_operands(store))


def loop_chain(loop: ir.Loop) -> list[ir.Loop]:
    chain = [loop]
    while len(chain[-1].body) == 1 and isinstance(chain[-1].body[0], ir.Loop):
        chain.append(chain[-1].body[0])
    return chain


def rebuild_chain(chain: list[ir.Loop], body: tuple) -> ir.Loop:
    for loop in reversed(chain):
        body = (ir.Loop(loop.id, loop.axis, loop.bound, tuple(body)),)
    return body[0]


def stores_in(stmts):
    """The stores of the statements `stmts`, inside their loops too, in program order."""
    for s in stmts:
        if isinstance(s, ir.Loop):
            yield from stores_in(s.body)
        else:
            yield s


def float_sum_op(s: ir.Stmt) -> ir.OpKind | None:
    """The op of an accumulator store of a float add, subtract or fused multiply-add (a float
    sum's update, what an interleaved ring pipelines), else None."""
    if isinstance(s, ir.AccStore) and isinstance(s.value, ir.Op) and s.value.dtype.is_float \
            and s.value.op in (K.ADD, K.SUB, K.MULACC):
        return s.value.op
    return None


def reads_acc(v: ir.Value, acc: int) -> bool:
    return any(isinstance(x, ir.AccLoad) and x.acc == acc for x in ir.toposort([v]))


def inner_loops(loop: ir.Loop):
    for s in loop.body:
        if isinstance(s, ir.Loop):
            yield s
            yield from inner_loops(s)
