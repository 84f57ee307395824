"""fp_pipeline: memories deeper than a block RAM split into parts, read through a registered
multiplexer tree."""
from __future__ import annotations

import dataclasses

import numpy as np

from .. import ir
from ..dtypes import BOOL, INT32
from ..hw.bram import column_depth
from ..hw.layout import Banking, Dim, Layout
from .rewrite import const, op, substitute, substitute_store

K = ir.OpKind


def split_deep(kernel: ir.KernelIR, banking: dict[int, Banking], level: int,
               min_level: int = 2) -> tuple[ir.KernelIR, dict[int, Banking]]:
    """Split every plain buffer deeper than one block RAM into block-RAM-sized parts, so that
    the pipeline can register each part's read data next to its block RAM and select among
    the parts with a registered multiplexer tree (pipeline.py), instead of the wide
    multiplexer Yosys builds behind a deep memory (its long routes across the die limit the
    clock: 72 MHz for the int8 GEMV 128x784's 49 block RAMs).

    Element e of a buffer split into parts of depth 2**s lives in part e >> s, word e & (2**s - 1)
    (a banked Layout whose lane digit is the most significant one, so hosts and copies place
    elements as for any banked buffer). A load becomes a load of the same word from every part
    and a binary tree of `where(bit b of e >> s, upper, lower)`; a store becomes a store to
    every part, gated by `e >> s == part`. Applied from fp_pipeline `min_level` on; buffers
    already banked by lanes / reduce_unroll are left as they are.
    """
    deep = {b.slot: b for b in kernel.buffers
            if level >= min_level and b.slot in banking and banking[b.slot].layout.is_plain
            and b.size > column_depth(b.width)}
    if not deep:
        return kernel, banking
    next_slot = max(b.slot for b in kernel.buffers) + 1
    banking = dict(banking)
    parts: dict[int, tuple[int, list[int]]] = {}        # slot -> (shift, part slots)
    buffers = [b for b in kernel.buffers if b.slot not in deep]
    for slot, b in sorted(deep.items()):
        depth = column_depth(b.width)
        n = -(-b.size // depth)
        slots = list(range(next_slot, next_slot + n))
        next_slot += n
        parts[slot] = (depth.bit_length() - 1, slots)
        layout = Layout(b.size, (Dim(depth, n, n), Dim(1, depth, 1)))
        banking[slot] = Banking(slot, layout, tuple(slots), f"split into {n} parts of one block RAM's depth", parts=True)
        words = layout.scatter(np.asarray(b.rom, dtype=np.uint64)) if b.rom is not None else None
        buffers += [dataclasses.replace(b, slot=s, size=depth,
                                        rom=None if words is None else tuple(int(w) for w in words[part]))
                    for part, s in enumerate(slots)]

    memo: dict[int, ir.Value] = {}
    split: dict[tuple[int, int], tuple[ir.Value, ir.Value]] = {}

    def fields(index, shift):
        """(word, part) of an element index; shared, so equal indices share read ports."""
        key = (id(index), shift)
        if key not in split:
            split[key] = (op(K.AND, INT32, index, const((1 << shift) - 1)), op(K.SHR, INT32, index, const(shift)))
        return split[key]

    def replace(v):
        if not (isinstance(v, ir.Load) and v.buf in parts):
            return None
        shift, slots = parts[v.buf]
        index = substitute(v.index, replace, memo)
        lo, hi = fields(index, shift)
        items = [ir.Load(s, lo, v.dtype) for s in slots]
        bit = 0
        while len(items) > 1:
            sel = op(K.CMPNE, BOOL, op(K.AND, INT32, op(K.SHR, INT32, hi, const(bit)), const(1)), const(0))
            items = [op(K.WHERE, v.dtype, sel, items[i + 1], items[i]) if i + 1 < len(items) else items[i]
                     for i in range(0, len(items), 2)]
            bit += 1
        if v.gate is None:
            return items[0]
        return op(K.WHERE, v.dtype, substitute(v.gate, replace, memo), items[0], substitute(v.alt, replace, memo))

    def rewrite(stmts) -> tuple:
        out = []
        for s in stmts:
            if isinstance(s, ir.Loop):
                out.append(ir.Loop(s.id, s.axis, s.bound, rewrite(s.body)))
                continue
            s = substitute_store(s, replace, memo)
            if isinstance(s, ir.BufStore) and s.buf in parts:
                shift, slots = parts[s.buf]
                lo, hi = fields(s.index, shift)
                for j, slot in enumerate(slots):
                    mine = op(K.CMPEQ, BOOL, hi, const(j))
                    out.append(ir.BufStore(slot, lo, s.value, mine if s.gate is None else op(K.AND, BOOL, s.gate, mine)))
                continue
            out.append(s)
        return tuple(out)

    body = rewrite(kernel.body)
    return ir.make_kernel(kernel.name, sorted(buffers, key=lambda b: b.slot), kernel.accs, body), banking
