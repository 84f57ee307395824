"""target_mhz: a float sum that a later loop of its kernel reads ends its kernel.

At a target clock a float sum's adder is pipelined and its accumulator becomes a ring of
interleaved rows (passes/interleave.py), which needs the accumulator to be the nest's alone:
a ring keeps turning after its nest, so a later loop cannot read it. tinygrad fuses a
softmax's denominator with the division that uses it into one kernel in float32 (in fp16 and
bf16 it ends the kernel at the sum's store), so that sum kept a combinational float32 adder on
a one-cycle loop: the whole design at about 30 MHz whatever the target.

    split_at_sums(graph, sources, layers)   the graph and kernels with each such kernel cut
                                            in two after the nest: A computes the sums and
                                            stores each into a one-element buffer of its own,
                                            B (the rest) loads them where it read the
                                            accumulators

A and B take the layer's knobs (a layer's index in `lanes@1` and the like names the kernel as
tinygrad made it). The top module runs B after A as it runs any consumer after its producer;
the sums' one-word buffers are copied or shared like any buffer between kernels. Exact: B
reads each sum's final value, as it read the accumulator after the nest.

Cut only where it is safe to run the halves one after the other: the accumulators A writes
and B reads are not written by B, no buffer one half writes is touched by the other, and B
reads no accumulator A leaves half-written (every accumulator is written by one half only).
"""
from __future__ import annotations

from dataclasses import replace

from .. import ir
from ..dtypes import INT32
from ..frontend import GraphBuffer, KernelCall
from .rewrite import float_sum_op, map_stores, reads_acc, store_values, stores_in, substitute, substitute_store

K = ir.OpKind


def split_at_sums(graph, sources: list[ir.KernelIR], layers: list) -> tuple[object, list[ir.KernelIR], list]:
    """(graph, sources, layers) with every kernel whose float sum a later statement reads cut
    after that sum's nest (module docstring), repeatedly (a kernel of two such sums: three
    kernels). `layers[i]`: kernel i's config, given to both halves."""
    buffers = list(graph.buffers)
    calls: list[KernelCall] = []
    out_sources, out_layers = [], []
    work = list(zip(graph.kernels, sources, layers))
    while work:
        call, k, config = work.pop(0)
        cut = _cut(k)
        if cut is None:
            calls.append(call)
            out_sources.append(k)
            out_layers.append(config)
            continue
        (a_call, a), (b_call, b), new = _split(call, k, *cut, max((b.id for b in buffers), default=-1) + 1)
        buffers += new
        calls.append(a_call)                 # the first cut: nothing before it is cut again
        out_sources.append(a)
        out_layers.append(config)
        work.insert(0, (b_call, b, config))
    calls = [replace(c, index=i) for i, c in enumerate(calls)]
    return replace(graph, kernels=tuple(calls), buffers=tuple(buffers)), out_sources, out_layers


def _writes(stmts) -> tuple[set[int], set[int]]:
    """(accumulators, buffers) the statements store into."""
    accs, bufs = set(), set()
    for s in stores_in(stmts):
        if isinstance(s, ir.AccStore):
            accs.add(s.acc)
        else:
            bufs.add(s.buf)
    return accs, bufs


def _reads(stmts) -> tuple[set[int], set[int]]:
    """(accumulators, buffers) the statements load from."""
    accs, bufs = set(), set()
    for s in stores_in(stmts):
        for v in store_values(s):
            if isinstance(v, ir.AccLoad):
                accs.add(v.acc)
            elif isinstance(v, ir.Load):
                bufs.add(v.buf)
    return accs, bufs


def _float_sums(loop: ir.Loop) -> set[int]:
    """Accumulators a loop nest updates with a float sum (acc = acc + x, acc - x, mulacc)."""
    return {s.acc for s in stores_in(loop.body) if float_sum_op(s) is not None and reads_acc(s.value, s.acc)}


def _cut(k: ir.KernelIR) -> tuple[int, list[int]] | None:
    """The index of the first top-level loop after which the kernel may be cut (module
    docstring) and the accumulators the second half reads from the first, or None."""
    for j, s in enumerate(k.body[:-1]):
        if not isinstance(s, ir.Loop):
            continue
        (acc_ra, buf_ra), (acc_wa, buf_wa) = _reads(k.body[:j + 1]), _writes(k.body[:j + 1])
        (acc_rb, buf_rb), (acc_wb, buf_wb) = _reads(k.body[j + 1:]), _writes(k.body[j + 1:])
        crossing = acc_rb & acc_wa
        if not _float_sums(s) & crossing:
            continue
        if acc_wa & acc_wb or buf_wa & (buf_rb | buf_wb) or buf_wb & (buf_ra | buf_wa) or acc_ra & acc_wb:
            continue
        return j, sorted(crossing)
    return None


def _split(call: KernelCall, k: ir.KernelIR, j: int, crossing: list[int], next_id: int):
    """The halves of kernel `k` cut after top-level statement j, each (call, kernel), and the
    graph buffers of the sums (`crossing`, accumulators) handed from the first to the second."""
    head, rest = k.body[:j + 1], k.body[j + 1:]
    dtype = {a.index: a.dtype for a in k.accs}
    new = [GraphBuffer(next_id + n, dtype[acc], 1, None, None) for n, acc in enumerate(crossing)]
    decls = {b.slot: b for b in k.buffers}

    def half(stmts, name: str, first: bool):
        """The kernel of `stmts` over the slots they use, then one slot per handed sum
        (stored by the first half after its nest, loaded by the second where it read the
        accumulator)."""
        (acc_read, read), (acc_written, written) = _reads(stmts), _writes(stmts)
        used = sorted(read | written)
        slot = {old: n for n, old in enumerate(used)}
        hand = {acc: len(used) + n for n, acc in enumerate(crossing)}
        memo: dict[int, ir.Value] = {}

        def relabel(v: ir.Value) -> ir.Value | None:
            if isinstance(v, ir.Load):
                parts = [None if x is None else substitute(x, relabel, memo) for x in (v.index, v.gate, v.alt)]
                return ir.Load(slot[v.buf], parts[0], v.dtype, parts[1], parts[2])
            if isinstance(v, ir.AccLoad) and v.acc in hand and not first:
                return ir.Load(hand[v.acc], ir.Const(0, INT32), v.dtype)
            return None

        def rebuild(t: ir.Store) -> ir.Store:
            t = substitute_store(t, relabel, memo)
            return replace(t, buf=slot[t.buf]) if isinstance(t, ir.BufStore) else t
        body = map_stores(stmts, rebuild)
        if first:
            body += tuple(ir.BufStore(hand[acc], ir.Const(0, INT32), ir.AccLoad(acc, dtype[acc])) for acc in crossing)
        buffers = [replace(decls[old], slot=slot[old], loaded=old in read, stored=old in written) for old in used]
        buffers += [ir.BufferDecl(hand[acc], dtype[acc], 1, loaded=not first, stored=first) for acc in crossing]
        accs = (acc_read | acc_written) - (set() if first else set(crossing))
        kernel = ir.make_kernel(name, buffers, [a for a in k.accs if a.index in accs], body)
        ids = tuple(call.buffers[old] for old in used) + tuple(b.id for b in new)
        return replace(call, name=name, buffers=ids), kernel
    a = half(head, f"{k.name}_sum", True)
    b = half(rest, f"{k.name}_rest", False)
    return a, b, new
