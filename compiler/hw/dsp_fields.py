"""The arithmetic of products that share one DSP block (hw/dsp_pack.py plans which do): the
field width at which they come apart, the packed operand and each product taken from the one
result. A module of its own, imported by the pipeline's delay model and the datapath alike."""
from __future__ import annotations

from typing import Mapping

from amaranth.hdl import Value

from .. import ir
from ..ranges import Interval, exact_interval, signed_bits
from ..synth.multipliers import DSP_SHAPES

K = ir.OpKind


def product_range(a: Interval, b: Interval) -> Interval:
    """The values of a * b."""
    return exact_interval(K.MUL, [a, b], [None, None])


def _fits(i: Interval, bits: int) -> bool:
    return -(1 << (bits - 1)) <= i.lo and i.hi < 1 << (bits - 1)


def field_bits(a: Interval, bs: list[Interval], width: int) -> int | None:
    """The field width k at which the products of `a` with each of `bs` come apart from one
    product a * sum(b_i << k*i) (hw/dsp_pack.py's docstring), or None when `a` or the packed operand
    needs more than `width` bits (the DSP block's signed inputs). Each product fits k bits, and
    so does every partial sum of the fields below a field (its borrow is then the sign of
    those bits)."""
    ys = [product_range(a, b) for b in bs]
    k = max(signed_bits(y) for y in ys)
    while True:
        lo = hi = 0
        for i, y in enumerate(ys[:-1]):
            lo, hi = lo + (y.lo << k * i), hi + (y.hi << k * i)
            if not _fits(Interval(lo, hi), k * (i + 1)):
                k += 1
                break
        else:
            break
    return k if signed_bits(a) <= width and signed_bits(packed_range(bs, k)) <= width else None


def packed_range(ranges: list[Interval], field: int) -> Interval:
    """The values of sum(b_i << field * i) for b_i in `ranges`."""
    return Interval(sum(r.lo << field * i for i, r in enumerate(ranges)), sum(r.hi << field * i for i, r in enumerate(ranges)))


def packed(values: list[Value], field: int, ranges: list[Interval]) -> Value:
    """The packed operand sum(values[i] << field * i), exact (Amaranth's arithmetic grows), at
    the width its values' `ranges` need (the signals may be wider than their values)."""
    out = values[0]
    for i, v in enumerate(values[1:], 1):
        out = out + (v << field * i)
    shape = packed_range(ranges, field).shape
    return out[:shape.width].as_signed() if shape.signed else out[:shape.width]


def unpack(p: Value, field: int, i: int) -> Value:
    """Product i of the packed result `p`, to be taken as a signed number of `field` bits (an
    assignment to such a signal: its low bits, or `p`'s sign beyond them): its field plus the
    borrow of the fields below (the bit under it)."""
    return p if i == 0 else (p >> field * i) + p[field * i - 1]


def shared_operand(v: ir.Op, uses: Mapping[int, int]) -> tuple[ir.Value, ir.Value] | None:
    """(shared, other) operands of product `v` when it may pack with others: one operand more
    than one product reads (`uses`: id(operand) -> products reading it), the other read by `v`
    alone (a GEMV's x element and its weight); None otherwise."""
    a, b = v.srcs[:2]
    shared, other = (a, b) if uses[id(a)] >= uses[id(b)] else (b, a)
    return (shared, other) if uses[id(shared)] >= 2 and uses[id(other)] == 1 else None


def input_width(family: str) -> int | None:
    """The signed operand width of the family's DSP block (mul2dsp's cut), None without one."""
    return DSP_SHAPES[family].max_a if family in DSP_SHAPES else None
