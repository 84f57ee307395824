"""Value bounds known at compile time, written into the kernels before any hardware is planned.

tinygrad has no int4: a 4-bit weight travels in an int8 Tensor. What the hardware should
store, multiply and sum is the 4 bits, not the container. So compile_model takes *declared
ranges* for its inputs (`input_ranges`: an int4 weight holds [-8, 7]; the explorer declares each
input's dtype range and the spec's `input_range`), and this pass carries them through the
model in execution order with the overflow proof's interval analysis
(compiler/overflow.py `kernel_bounds`):

  * a buffer a kernel loads gets the bounds of what it holds (`ir.BufferDecl.bounds`): declared
    for an input, derived for a buffer another kernel wrote (the hull of every value stored to
    it, and 0, what a memory holds before it is written);
  * a buffer a kernel stores gets the hull of the values it stores (an int32 GEMV of 4-bit
    weights and 8-bit x: 784 * 8 * 128 = 802,816, 21 bits, not 32);
  * an integer accumulator the analysis bounds in closed form gets those bounds
    (`ir.AccDecl.bounds`), when they fit its dtype (else it wraps there, as tinygrad does).

Everything downstream reads them: a memory stores `BufferDecl.width` bits per element (and
mem_pack packs at that width), a load's value has the buffer's interval (compiler/ranges.py),
so every product and sum computed from it is sized to its true range (a 4x8 product, not 8x8),
and an accumulator register has the width of its bounds (hw/kernel.py `acc_shape`). Nothing
changes the values: every bound is sound for inputs within their declared ranges, and values
outside them are refused where inputs are loaded (compiler/sim/memory_io.py `input_words`).

Constants need nothing here: the datapath sizes them to their value already.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Mapping

from . import ir
from .errors import CompileError
from .frontend import Graph
from .hw.top import toposort_kernels
from .overflow import kernel_bounds


def declared_bounds(graph: Graph, input_ranges: Mapping[Any, tuple[int, int]] | None) -> dict[int, tuple[int, int]]:
    """Graph buffer id -> (lo, hi) of `input_ranges` (input Tensor or buffer id -> its range),
    checked: an integer input of the model, integer bounds within its dtype, lo <= hi. A Tensor
    the model never reads has no memory to size, and is left out."""
    out: dict[int, tuple[int, int]] = {}
    for key, bounds in (input_ranges or {}).items():
        buf = key if isinstance(key, int) else _buffer_id(graph, key)
        if buf is None:
            continue
        what = f"input_ranges: buffer {buf}"
        if not 0 <= buf < len(graph.buffers) or buf not in graph.inputs:
            raise CompileError(f"{what} is not an input of the model (a kernel computes it)")
        d = graph.buffers[buf].dtype
        if d.is_float or d.is_bool:
            raise CompileError(f"{what} holds {d.name}: declared ranges size integer inputs only")
        try:
            lo, hi = bounds
        except (TypeError, ValueError):
            raise CompileError(f"{what}: expected (lo, hi), got {bounds!r}") from None
        if not all(isinstance(v, int) or (isinstance(v, float) and v.is_integer()) for v in (lo, hi)):
            raise CompileError(f"{what}: expected integer bounds, got ({lo!r}, {hi!r})")
        lo, hi = int(lo), int(hi)
        if lo > hi or lo < d.min or hi > d.max:
            raise CompileError(f"{what} ({d.name}): [{lo}, {hi}] is not a range within [{d.min}, {d.max}]")
        if (lo, hi) != (d.min, d.max):           # the dtype's own range says nothing more
            out[buf] = (lo, hi)
    return out


def _buffer_id(graph: Graph, tensor) -> int | None:
    uop = getattr(getattr(tensor, "uop", None), "buf_uop", None)
    if uop is None:
        raise CompileError(f"input_ranges: {tensor!r} is not a tinygrad Tensor or a buffer id")
    return graph.buffer_id(uop)


def bound_values(graph: Graph, kernels: list[ir.KernelIR], declared: dict[int, tuple[int, int]]) -> list[ir.KernelIR]:
    """`kernels` (lowered, in the graph's order) with the bounds of their buffers and
    accumulators set (module docstring), for inputs within `declared` (graph buffer id ->
    (lo, hi); other inputs span their dtype)."""
    slots = [dict(enumerate(call.buffers)) for call in graph.kernels]      # slot -> buffer id
    writers = {buf: i for i, k in enumerate(kernels) for b in k.buffers if b.stored
               for buf in (slots[i][b.slot],)}
    edges = {(writers[slots[i][b.slot]], i) for i, k in enumerate(kernels) for b in k.buffers
             if b.loaded and slots[i][b.slot] in writers}
    known: dict[int, tuple[int, int]] = dict(declared)
    out = list(kernels)
    for i in toposort_kernels(len(kernels), edges, [k.name for k in kernels]):
        k = kernels[i]
        # a buffer the kernel both loads and stores reads back its own results: left unbounded
        loaded = {b.slot: known[slots[i][b.slot]] for b in k.buffers
                  if b.loaded and not b.stored and slots[i][b.slot] in known}
        k = _with(k, loaded, {})
        found = kernel_bounds(k, {})
        stored = {}
        for b in k.buffers:
            if b.stored and not b.loaded and b.slot in found.stored:
                r = _integer(found.stored[b.slot], b.dtype, with_zero=True)
                if r is not None:
                    stored[b.slot] = known[slots[i][b.slot]] = r
        accs = {a.index: r for a in k.accs if a.index in found.accs
                for r in (_integer(found.accs[a.index], a.dtype),) if r is not None}
        out[i] = _with(k, stored, accs)
    return out


def _integer(r: tuple[float, float], d, with_zero: bool = False) -> tuple[int, int] | None:
    """`r` as integer bounds for values of dtype `d`, when they say more than the dtype does
    (None: a float, an unbounded or wrapping value, or the dtype's whole range)."""
    if d.is_float or d.is_bool or not all(math.isfinite(v) for v in r):
        return None
    lo, hi = int(r[0]), int(r[1])
    if with_zero:
        lo, hi = min(lo, 0), max(hi, 0)
    if lo < d.min or hi > d.max or (lo, hi) == (d.min, d.max):
        return None
    return lo, hi


def _with(k: ir.KernelIR, buffers: dict[int, tuple[int, int]], accs: dict[int, tuple[int, int]]) -> ir.KernelIR:
    if not buffers and not accs:
        return k
    return ir.make_kernel(k.name, [replace(b, bounds=buffers.get(b.slot, b.bounds)) for b in k.buffers],
                          [replace(a, bounds=accs.get(a.index, a.bounds)) for a in k.accs], k.body)
