"""Canonical signed digits of an integer constant: how many shifts and adds a product by it takes
(compiler/passes/constants.py builds them; adder_graph.py and the quantiser count them)."""
from __future__ import annotations


def csd(c: int) -> list[tuple[int, int]]:
    """Canonical signed digits of c != 0: [(shift, +1 | -1)], the fewest non-zero digits."""
    digits, shift, sign = [], 0, -1 if c < 0 else 1
    c = abs(c)
    while c:
        if c & 1:
            d = 2 - (c & 3)          # +1 if c = ...01, -1 if c = ...11
            digits.append((shift, d * sign))
            c -= d
        c >>= 1
        shift += 1
    return digits


MUL_CONST_DIGITS = 3
"""A product by a constant of at most this many nonzero signed digits is built as shifts and
adds (compiler/hw/datapath.py mul_const)."""


def shift_add_digits(c: int) -> list[tuple[int, int]]:
    """The signed digits (shift, +-1) of |c| that datapath.mul_const builds x * c from, or [] where it
    builds a product (c is 0 or has more than MUL_CONST_DIGITS digits): also what dse.estimate
    and hw/dsp_pack.py price, so they cannot disagree."""
    digits = csd(abs(c))
    return digits if c != 0 and len(digits) <= MUL_CONST_DIGITS else []
