"""Banked memory layouts: where each element of a buffer lives when a step reads or writes
several elements of it at once (the lanes and reduce_unroll knobs).

A buffer's accesses index it with affine functions of loop counters, `sum(stride * counter)
+ offset`. When those strides nest (each divides the next larger one), they cut the element
index into mixed-radix *digits*: W[i*784 + k] has digit i (stride 784) and digit k (stride 1).
A digit whose loop is unrolled by a factor F is split in two: `digit div F` goes into the
memory *word* address, `digit mod F` selects one of F *lanes*. Lanes are banks: lane b of
every word lives in memory bank b, one element per word, so every lane has its own read and
write ports and a step can read or write all lanes in one cycle.

    word = sum_j (d_j div F_j) * word_stride_j      word_stride_j = prod_{i>j} ceil(extent_i / F_i)
    lane = sum_j (d_j mod F_j) * lane_stride_j      lane_stride_j = prod_{i>j} F_i

(dims listed most significant first). GEMV W[i*K + k] with P lanes on i and U on k: word =
(i div P) * ceil(K/U) + k div U, lane = (i mod P) * U + k mod U; x[k]: word = k div U, lane =
k mod U. When F does not divide a digit's extent the last word is padded.

A layout without any split digit is the plain one: element e is word e of a single bank.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from math import ceil, gcd, prod

import numpy as np

from .. import ir
from ..ranges import Interval, dtype_range

K = ir.OpKind


@dataclass(frozen=True)
class Dim:
    stride: int          # elements per step of this digit
    extent: int          # values the digit takes (the most significant one: enough for the buffer)
    factor: int = 1      # lanes it is split into

    @property
    def words(self) -> int:
        return ceil(self.extent / self.factor)


@dataclass(frozen=True)
class Layout:
    size: int                    # elements
    dims: tuple[Dim, ...]        # most significant first; mixed radix, the last stride is 1

    @staticmethod
    def plain(size: int) -> "Layout":
        return Layout(size, (Dim(1, size, 1),))

    @property
    def lanes(self) -> int:
        return prod(d.factor for d in self.dims)

    @property
    def words(self) -> int:
        return prod(d.words for d in self.dims)

    @property
    def is_plain(self) -> bool:
        return self.lanes == 1

    @cached_property
    def word_strides(self) -> tuple[int, ...]:
        return tuple(prod(d.words for d in self.dims[j + 1:]) for j in range(len(self.dims)))

    @cached_property
    def lane_strides(self) -> tuple[int, ...]:
        return tuple(prod(d.factor for d in self.dims[j + 1:]) for j in range(len(self.dims)))

    def digits(self, e):
        """The digit values of element index (or array of indices) `e`."""
        return [e // d.stride if j == 0 else (e // d.stride) % d.extent for j, d in enumerate(self.dims)]

    def place(self, e):
        """(word, lane) of element index (or array of indices) `e`."""
        word = lane = 0
        for d, ws, ls, dig in zip(self.dims, self.word_strides, self.lane_strides, self.digits(e)):
            word = word + (dig // d.factor) * ws
            lane = lane + (dig % d.factor) * ls
        return word, lane

    def scatter(self, values: np.ndarray) -> np.ndarray:
        """Element words (size,) -> bank contents (lanes, words); padding is 0."""
        values = np.asarray(values)
        if self.is_plain:
            return values.reshape(1, -1)
        out = np.zeros((self.lanes, self.words), dtype=values.dtype)
        word, lane = self.place(np.arange(self.size))
        out[lane, word] = values
        return out

    def gather(self, banks) -> np.ndarray:
        """Bank contents (lanes x words) -> element words (size,)."""
        banks = np.asarray(banks)
        if self.is_plain:
            return banks.reshape(-1)[:self.size]
        word, lane = self.place(np.arange(self.size))
        return banks[lane, word]

    def grouped(self, width: int) -> "Layout":
        """The layout of groups of `width` consecutive elements (`width` from group_width): group
        c is elements c*width .. c*width + width - 1, all in one word, the group's word; its
        elements sit in lanes width * lane(c) .. width * lane(c) + width - 1 (lane(c) in this
        layout). With width dividing the stride-1 digit's extent and lanes, every other digit is
        the same across a group and the last one is width * its group's + j."""
        if width == 1:
            return self
        *high, last = self.dims
        assert self.size % width == 0 and last.stride == 1 and last.extent % width == 0 \
            and last.factor % width == 0 and all(d.stride % width == 0 for d in high), (self, width)
        return Layout(self.size // width, tuple(Dim(d.stride // width, d.extent, d.factor) for d in high)
                      + (Dim(1, last.extent // width, last.factor // width),))

    def describe(self) -> str:
        return " + ".join(f"{d.stride}*d[{d.extent}]" + (f"/{d.factor}" if d.factor > 1 else "") for d in self.dims)


def group_width(layouts) -> int:
    """The most consecutive elements that sit in distinct lanes, in one word, in every one of
    `layouts` (of one buffer), group by group: what a copy between them moves in a cycle
    (hw/top.py Copy). The stride-1 digit's lanes hold runs of consecutive elements; a layout
    that does not split it (a plain one) allows 1."""
    width = layouts[0].size
    assert all(layout.size == width for layout in layouts), [layout.size for layout in layouts]
    for layout in layouts:
        last = layout.dims[-1]
        width = gcd(width, last.extent, last.factor, *(d.stride for d in layout.dims[:-1])) \
            if last.stride == 1 else 1
    return width


@dataclass(frozen=True)
class Banking:
    """How a kernel stores one of its parameter buffers: the layout, and the KernelIR buffer
    slot that holds each lane (one memory bank each). Plain layouts keep the parameter's slot."""
    slot: int                    # the kernel parameter slot
    layout: Layout
    banks: tuple[int, ...]       # KernelIR slot of lane 0, 1, ...
    note: str = ""               # why a buffer that unrolled loops index stays plain, if it does
    parts: bool = False          # the banks are parts of a deep memory (split_deep), not lanes

    @staticmethod
    def plain(slot: int, size: int, note: str = "") -> "Banking":
        return Banking(slot, Layout.plain(size), (slot,), note)


# ---------------------------------------------------------------------------------------------
# affine index expressions

@dataclass(frozen=True)
class Affine:
    terms: tuple[tuple[int, int], ...]       # (loop id, coefficient), sorted, coefficients != 0
    offset: int

    @property
    def coeffs(self) -> dict[int, int]:
        return dict(self.terms)


def affine(v: ir.Value, bounds: dict[int, int]) -> Affine | None:
    """`v` as sum(coefficient * counter) + offset, if it is one and no operation on the way
    wraps its dtype (the hardware would wrap where the arithmetic here does not)."""
    memo: dict[int, tuple[dict[int, int], int] | None] = {}

    def interval(form) -> Interval:
        terms, c = form
        lo = c + sum(min(0, a * (bounds[l] - 1)) for l, a in terms.items())
        hi = c + sum(max(0, a * (bounds[l] - 1)) for l, a in terms.items())
        return Interval(lo, hi)

    def go(x):
        if id(x) in memo:
            return memo[id(x)]
        out = None
        if isinstance(x, ir.Const) and not x.dtype.is_float and not x.dtype.is_bool:
            out = ({}, int(x.value))
        elif isinstance(x, ir.Counter):
            out = ({x.loop: 1}, 0)
        elif isinstance(x, ir.Op) and not x.dtype.is_float and not x.dtype.is_bool:
            s = [go(y) for y in x.srcs]
            if all(f is not None for f in s):
                out = _affine_op(x, s)
            if out is not None and not interval(out).within(dtype_range(x.dtype)):
                out = None
        memo[id(x)] = out
        return out

    form = go(v)
    if form is None:
        return None
    terms, c = form
    return Affine(tuple(sorted((l, a) for l, a in terms.items() if a)), c)


def _affine_op(x: ir.Op, s):
    def scale(f, k):
        return {l: a * k for l, a in f[0].items()}, f[1] * k

    def add(f, g, sign=1):
        terms = dict(f[0])
        for l, a in g[0].items():
            terms[l] = terms.get(l, 0) + sign * a
        return terms, f[1] + sign * g[1]
    if x.op is K.ADD:
        return add(s[0], s[1])
    if x.op is K.SUB:
        return add(s[0], s[1], -1)
    if x.op is K.NEG:
        return scale(s[0], -1)
    if x.op is K.MUL:
        if not s[1][0]:
            return scale(s[0], s[1][1])
        if not s[0][0]:
            return scale(s[1], s[0][1])
        return None
    if x.op is K.SHL and not s[1][0] and 0 <= s[1][1] < 63:
        return scale(s[0], 1 << s[1][1])
    if x.op is K.CAST and x.srcs[0].dtype.is_int and not x.srcs[0].dtype.is_bool:
        return s[0]
    return None


# ---------------------------------------------------------------------------------------------
# choosing a layout

class LayoutError(Exception):
    """The accesses of a buffer do not fit a banked layout (the message says why)."""


def derive_layout(size: int, accesses: list[tuple[Affine | None, frozenset[int]]], factors: dict[int, int],
                  bounds: dict[int, int]) -> Layout:
    """The banked layout that serves every access with a fixed lane per unrolled-loop lane.

    `accesses`: each index as an affine form (None if it is not one) with the loops its value
    depends on; `factors`: loop id -> how many lanes that loop is unrolled into (loops not
    listed: 1). Returns the plain layout when no access depends on an unrolled loop; raises
    LayoutError when the accesses do not fit a banked layout."""
    if not any(deps & factors.keys() for _, deps in accesses):
        return Layout.plain(size)
    if any(a is None for a, _ in accesses):
        raise LayoutError("an index is not an affine function of the loop counters")
    accesses = [a for a, _ in accesses]
    strides = {1}
    for a in accesses:
        if a.offset < 0:
            raise LayoutError(f"an index has a negative offset ({a.offset})")
        for loop, c in a.terms:
            if c < 0:
                raise LayoutError(f"loop i{loop} steps an index by {c}")
            strides.add(c)
    order = sorted(strides, reverse=True)
    for hi, lo in zip(order, order[1:]):
        if hi % lo:
            raise LayoutError(f"index strides {hi} and {lo} do not nest (neither divides the other)")
    extents = [max(1, ceil(size / order[0]))] + [hi // lo for hi, lo in zip(order, order[1:])]
    dim_of = {s: j for j, s in enumerate(order)}
    split: list[int | None] = [None] * len(order)
    split_by: list[int | None] = [None] * len(order)
    for a in accesses:
        digits = _digits(a.offset, order, extents)
        used: dict[int, int] = {}
        for loop, c in a.terms:
            j = dim_of[c]
            if j in used:
                raise LayoutError(f"loops i{used[j]} and i{loop} both step an index by {c}")
            used[j] = loop
            if digits[j] + bounds[loop] - 1 >= extents[j]:
                raise LayoutError(f"loop i{loop} (0..{bounds[loop] - 1}) plus offset {digits[j] * c} overflows "
                                  f"the index digit of stride {c} (0..{extents[j] - 1})")
            f = factors.get(loop, 1)
            if split[j] is not None and split[j] != f:
                what = lambda ff, ll: f"i{ll} unrolled by {ff}" if ff > 1 else f"i{ll}, which is not unrolled"  # noqa: E731
                raise LayoutError(f"the index digit of stride {c} is stepped by {what(split[j], split_by[j])} "
                                  f"and by {what(f, loop)}: no fixed lane serves both")
            split[j], split_by[j] = f, loop
        if digits[0] >= extents[0]:
            raise LayoutError(f"offset {a.offset} is beyond the buffer")
    dims = tuple(Dim(s, e, f or 1) for s, e, f in zip(order, extents, split))
    if all(d.factor == 1 for d in dims):
        return Layout.plain(size)
    return Layout(size, dims)


def _digits(value: int, order: list[int], extents: list[int]) -> list[int]:
    return [value // s if j == 0 else (value // s) % extents[j] for j, s in enumerate(order)]


@dataclass(frozen=True)
class Placed:
    """Where one access of a banked buffer goes, for one combination of lanes."""
    word_terms: tuple[tuple[int, int], ...]     # (loop id, coefficient on its (new) counter)
    word_offset: int
    lane: int


def place_access(layout: Layout, access: Affine, factors: dict[int, int], lane_of: dict[int, int]) -> Placed:
    """The word address (affine in the counters after unrolling) and the fixed lane of an
    access whose unrolled loops sit at lanes `lane_of` (loop id -> 0..F-1): an unrolled
    counter c becomes c' * F + lane."""
    order = [d.stride for d in layout.dims]
    extents = [d.extent for d in layout.dims]
    digits = _digits(access.offset, order, extents)
    on = {c: loop for loop, c in access.terms}
    terms: dict[int, int] = {}
    offset = lane = 0
    for j, d in enumerate(layout.dims):
        ws, ls = layout.word_strides[j], layout.lane_strides[j]
        loop = on.get(d.stride)
        if loop is not None and factors.get(loop, 1) > 1:
            assert factors[loop] == d.factor
            t = digits[j] + lane_of[loop]
            terms[loop] = terms.get(loop, 0) + ws
            offset += (t // d.factor) * ws
            lane += (t % d.factor) * ls
        else:
            if loop is not None:
                assert d.factor == 1
                terms[loop] = terms.get(loop, 0) + ws
            offset += (digits[j] // d.factor) * ws
            lane += (digits[j] % d.factor) * ls
    return Placed(tuple(sorted(terms.items())), offset, lane)
