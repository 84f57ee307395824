"""loop_fusion: accumulator initialisations before a loop nest move into its first iteration,
result stores after it into its last one (no extra steps)."""
from __future__ import annotations

from .. import ir
from ..dtypes import BOOL
from ..hw.program import split_into_steps
from .rewrite import all_of, const, loop_chain, op, rebuild_chain, store_values, stores_in, substitute_store

K = ir.OpKind


def fuse_loops(kernel: ir.KernelIR) -> ir.KernelIR:
    """Remove the steps around loop nests that only initialise accumulators or store results.

    A loop nest qualifies when it is a chain (each loop's body is the next loop) ending in a
    body that runs as a single step. Then:
    - prologue: the AccStores right before the nest whose values read no memory and no
      accumulator, of accumulators the body writes, are dropped; the body reads
      `where(all nest counters == 0, init, acc)` instead of `acc`.
    - epilogue: the BufStores right after the nest that read no memory and only accumulators
      the body writes (plus counters and constants) move into the body, gated by `all nest
      counters at their last value`, reading the body's *new* accumulator values (the
      update expressions), so they are written in the same cycle. They go first in the body:
      the update expressions read the registers before the step writes them. Where the body
      writes a float accumulator they may also read memory (_epilogue_loads: a layer's bias,
      a softmax's denominator), so the nest is one step and its sum can interleave rows.
    Anything else stays as it is.
    """
    return ir.make_kernel(kernel.name, kernel.buffers, kernel.accs, _fuse_body(kernel.body))


def _fuse_body(stmts) -> tuple:
    out = [ir.Loop(s.id, s.axis, s.bound, _fuse_body(s.body)) if isinstance(s, ir.Loop) else s for s in stmts]
    i = 0
    while i < len(out):
        if isinstance(out[i], ir.Loop):
            out, i = _fuse_nest(out, i)
        i += 1
    return tuple(out)


def _fuse_nest(stmts: list, i: int) -> tuple[list, int]:
    chain = loop_chain(stmts[i])
    body = chain[-1].body
    if any(isinstance(s, ir.Loop) for s in body) or len(split_into_steps(list(body))) != 1:
        return stmts, i
    written = {s.acc for s in body if isinstance(s, ir.AccStore)}

    start = i                                   # prologue: stmts[start:i]
    inits: dict[int, ir.Value] = {}
    while start > 0:
        s = stmts[start - 1]
        if not (isinstance(s, ir.AccStore) and s.acc in written and s.acc not in inits
                and not any(isinstance(v, (ir.Load, ir.AccLoad)) for v in store_values(s))):
            break
        inits[s.acc] = s.value
        start -= 1
    end = i + 1                                 # epilogue: stmts[i + 1:end]
    readable = _epilogue_loads(stmts, i, body, written)
    while end < len(stmts):
        s = stmts[end]
        if not (isinstance(s, ir.BufStore) and all(
                (not isinstance(v, ir.Load) or v.buf in readable) and (not isinstance(v, ir.AccLoad) or v.acc in written)
                for v in store_values(s))):
            break
        end += 1
    if start == i and end == i + 1:
        return stmts, i

    counters = [ir.Counter(l.id) for l in chain]
    if inits:
        first = all_of([op(K.CMPEQ, BOOL, c, const(0)) for c in counters])

        def initial(v):
            if isinstance(v, ir.AccLoad) and v.acc in inits:
                return op(K.WHERE, v.dtype, first, inits[v.acc], v)
            return None
        memo: dict[int, ir.Value] = {}
        body = tuple(substitute_store(s, initial, memo) for s in body)
    fused_epilogue = False
    if end > i + 1:
        last = all_of([op(K.CMPEQ, BOOL, c, const(l.bound - 1)) for c, l in zip(counters, chain)])
        new_value = {s.acc: s.value for s in body if isinstance(s, ir.AccStore)}

        def final(v):
            return new_value[v.acc] if isinstance(v, ir.AccLoad) else None
        memo = {}
        epilogue = []
        for s in stmts[i + 1:end]:
            t = substitute_store(s, final, memo)
            epilogue.append(ir.BufStore(t.buf, t.index, t.value, last if t.gate is None else op(K.AND, BOOL, last, t.gate)))
        candidate = tuple(epilogue) + body
        if len(split_into_steps(list(candidate))) == 1:
            body, fused_epilogue = candidate, True
    fused_prologue = bool(inits)
    if not fused_prologue and not fused_epilogue:
        return stmts, i
    lo = start if fused_prologue else i
    hi = end if fused_epilogue else i + 1
    new = stmts[:lo] + [rebuild_chain(chain, body)] + stmts[hi:]
    return new, lo


def _epilogue_loads(stmts: list, i: int, body, written: set[int]) -> frozenset[int]:
    """Buffers an epilogue after nest stmts[i] may load from: none unless the body writes a
    float accumulator. Then an unfused epilogue (`acc + b[o]`, the bias of every float linear
    layer) would leave the sum outside interleave's reach, its adder combinational on a
    one-cycle loop (a float32 adder: ~25 MHz at any target clock); fused, the load is issued
    every step and used at the last. Only buffers nothing in the nest or after it writes: a
    load moved ahead of the nest's other iterations reads what it read before."""
    floats = any(isinstance(s, ir.AccStore) and s.acc in written and s.value.dtype.is_float for s in body)
    if not floats:
        return frozenset()
    stored = {st.buf for st in stores_in(stmts[i:]) if isinstance(st, ir.BufStore)}
    loaded = {v.buf for st in stores_in(stmts) if isinstance(st, ir.BufStore)
              for v in store_values(st) if isinstance(v, ir.Load)}
    return frozenset(loaded - stored)
