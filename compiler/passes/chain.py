"""Straight-line kernels merged into one: a model of fully unrolled constant-weight layers as one
expression from its inputs to its outputs.

With weights="constant" and lanes / reduce_unroll at a layer's sizes, fold_constants leaves a
layer as one store per output element of an expression of its input elements (no loop, no
accumulator). Run as kernels, each such layer costs a step, a `done` cycle and a copy of its
outputs into the next layer's memories (hw/top.py): 5 cycles for the digits MLP's two layers,
where one step computes both. `merge_chains` substitutes a producer's stored expressions for the
consumer's loads of them, so the intermediate activations are wires (registers where fp_pipeline
puts them), the merged kernel is one step, and the design's cycles are 1 + 1 (done) + its
pipeline's depth.

A producer P is merged into its consumer Q when both are straight-line kernels with constant
addresses everywhere and no accumulator, P writes exactly one buffer, Q alone reads it, and it is
not a model output. The merged kernel's buffers are renumbered (Q's parameters, then P's, then
their banks); its *source* (what the cycle-free analyses read: the overflow proof, the top's
plan) is the same expression with every bank access written back as an access of the parameter
buffer's element.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .. import ir
from ..frontend import Graph, KernelCall
from ..hw.layout import Banking
from .rewrite import substitute, substitute_store


@dataclass(frozen=True)
class Stage:
    """One kernel as compile_model carries it between passes."""
    call: KernelCall                     # graph kernel: parameter slot -> model buffer id
    source: ir.KernelIR                  # as lowered (parameter slots, element indices)
    kernel: ir.KernelIR                  # after the hardware transforms (bank slots, word indices)
    banking: dict[int, Banking]          # parameter slot -> its layout and bank slots
    factors: dict[int, int]


def straight(k: ir.KernelIR) -> bool:
    """No loop, no accumulator, every address a constant."""
    if k.accs or any(isinstance(s, ir.Loop) for s in k.body):
        return False
    if any(isinstance(s, ir.BufStore) and not (isinstance(s.index, ir.Const) and s.gate is None) for s in k.body):
        return False
    return all(isinstance(v.index, ir.Const) and v.gate is None
               for v in ir.toposort([x for s in k.body for x in ir.store_operands(s)]) if isinstance(v, ir.Load))


def merge_chains(graph: Graph, stages: list[Stage], mergeable: list[bool]) -> tuple[Graph, list[Stage]]:
    """Merge every producer into its consumer where the module docstring allows, repeatedly
    (a chain of layers becomes one kernel). `mergeable[i]`: stage i may take part (its layer
    has constant weights)."""
    stages, ok = list(stages), list(mergeable)
    outputs = set(graph.outputs)
    while True:
        pair = _find_pair(stages, ok, outputs)
        if pair is None:
            break
        p, q, buf = pair
        merged = _merge(stages[p], stages[q], buf)
        stages[q], ok[q] = merged, True
        del stages[p], ok[p]
    calls = tuple(replace(s.call, index=i) for i, s in enumerate(stages))
    return replace(graph, kernels=calls), [replace(s, call=c) for s, c in zip(stages, calls)]


def _params(stage: Stage, written: bool) -> dict[int, int]:
    """Parameter slot -> model buffer id of what the stage writes (or reads)."""
    return {b.slot: stage.call.buffers[b.slot] for b in stage.source.buffers
            if (b.stored if written else b.loaded and not b.stored)}


def _find_pair(stages: list[Stage], ok: list[bool], outputs: set[int]) -> tuple[int, int, int] | None:
    for p, sp in enumerate(stages):
        if not ok[p] or not straight(sp.kernel):
            continue
        written = _params(sp, True)
        if len(written) != 1:
            continue
        (buf,) = written.values()
        if buf in outputs:
            continue
        readers = [q for q, sq in enumerate(stages) if q != p and buf in sq.call.buffers]
        if len(readers) != 1:
            continue
        q = readers[0]
        if not ok[q] or not straight(stages[q].kernel) or list(stages[q].call.buffers).count(buf) != 1:
            continue
        return p, q, buf
    return None


def _element(banking: Banking, bank: int, word: int, cache: dict) -> int:
    """The element index of word `word` of bank slot `bank`."""
    key = id(banking)
    if key not in cache:
        import numpy as np
        layout = banking.layout
        words, lanes = layout.place(np.arange(layout.size))
        cache[key] = (banking, {(int(l), int(w)): e for e, (w, l) in enumerate(zip(words, lanes))})
    return cache[key][1][(banking.banks.index(bank), word)]


def _merge(sp: Stage, sq: Stage, buf: int) -> Stage:
    slot_p = next(s for s, b in _params(sp, True).items() if b == buf)
    slot_q = sq.call.buffers.index(buf)
    # new parameter slots: Q's, then P's (each without the merged buffer), then every bank
    params = [("q", b.slot) for b in sq.source.buffers if b.slot != slot_q] + \
             [("p", b.slot) for b in sp.source.buffers if b.slot != slot_p]
    new_param = {key: i for i, key in enumerate(params)}
    new_slot: dict[tuple[str, int], int] = {}
    banking: dict[int, Banking] = {}
    nxt = len(params)
    for (side, slot), i in new_param.items():
        bk = (sq if side == "q" else sp).banking[slot]
        if bk.layout.is_plain and bk.banks == (slot,):
            banks = (i,)
        else:
            banks = tuple(range(nxt, nxt + len(bk.banks)))
            nxt += len(bk.banks)
        new_slot.update({(side, b): n for b, n in zip(bk.banks, banks)})
        banking[i] = replace(bk, slot=i, banks=banks)

    # P's stored expression of every element of the merged buffer, relabelled
    cache: dict = {}
    value_of: dict[int, ir.Value] = {}
    relabel_p = _relabel({b: n for (side, b), n in new_slot.items() if side == "p"})
    for s, _ in sp.kernel.stores():
        e = _element(sp.banking[slot_p], s.buf, int(s.index.value), cache)
        value_of[e] = relabel_p(s.value)
    relabel_q = _relabel({b: n for (side, b), n in new_slot.items() if side == "q"})
    q_banks = set(sq.banking[slot_q].banks)
    memo: dict[int, ir.Value] = {}

    def inline(v: ir.Value) -> ir.Value | None:
        if isinstance(v, ir.Load) and v.buf in q_banks:
            return value_of[_element(sq.banking[slot_q], v.buf, int(v.index.value), cache)]
        if isinstance(v, ir.Load):
            return relabel_q(v)
        return None
    body = [substitute_store(s, inline, memo) for s, _ in sq.kernel.stores()]
    body = [replace(s, buf=new_slot[("q", s.buf)]) for s in body]
    # every memory stays (a bank no load reads any more is still on the host bus); the merged
    # buffer's banks go
    decls = {("q", b.slot): b for b in sq.kernel.buffers} | {("p", b.slot): b for b in sp.kernel.buffers}
    buffers = sorted((replace(d, slot=new_slot[key]) for key, d in decls.items() if key in new_slot),
                     key=lambda b: b.slot)
    name = f"{sp.kernel.name}__{sq.kernel.name}"
    kernel = ir.make_kernel(name, buffers, (), tuple(body))
    source = _source(name, kernel, banking, sp, sq, new_param, cache)
    call = KernelCall(sq.call.index, name, sq.call.uops,
                      tuple((sq if side == "q" else sp).call.buffers[slot] for side, slot in params))
    return Stage(call, source, kernel, banking, {})


def _relabel(slots: dict[int, int]):
    memo: dict[int, ir.Value] = {}

    def one(v: ir.Value) -> ir.Value | None:
        if isinstance(v, ir.Load):
            inner = [None if x is None else substitute(x, one, memo) for x in (v.index, v.gate, v.alt)]
            return ir.Load(slots[v.buf], inner[0], v.dtype, inner[1], inner[2])
        return None
    return lambda v: substitute(v, one, memo)


def _source(name: str, kernel: ir.KernelIR, banking: dict[int, Banking], sp: Stage, sq: Stage,
            new_param: dict[tuple[str, int], int], cache: dict) -> ir.KernelIR:
    """`kernel` with bank accesses as accesses of their parameter buffers' elements."""
    owner = {b: (p, bk) for p, bk in banking.items() for b in bk.banks}
    memo: dict[int, ir.Value] = {}

    def element(slot: int, word: int) -> tuple[int, int]:
        p, bk = owner[slot]
        return p, _element(bk, slot, word, cache)

    def one(v: ir.Value) -> ir.Value | None:
        if isinstance(v, ir.Load):
            p, e = element(v.buf, int(v.index.value))
            return ir.Load(p, ir.Const(e, v.index.dtype), v.dtype)
        return None
    body = []
    for s, _ in kernel.stores():
        s = substitute_store(s, one, memo)
        p, e = element(s.buf, int(s.index.value))
        body.append(ir.BufStore(p, ir.Const(e, s.index.dtype), s.value, None))
    decls = {("q", b.slot): b for b in sq.source.buffers} | {("p", b.slot): b for b in sp.source.buffers}
    buffers = [replace(decls[key], slot=i) for key, i in sorted(new_param.items(), key=lambda kv: kv[1])]
    return ir.make_kernel(name, buffers, (), tuple(body))
