"""Number formats: the names a spec's `dtypes:` list takes, and what each gives a model's inputs.

    int8 int16 int32 uint8          tinygrad's integers
    fp16 bf16 fp32 fp8e4m3 fp8e5m2  floats (docs/fp8.md for the 8-bit ones)
    int2 .. int16, uint2 .. uint16  narrow integers: N-bit values (two's complement, or unsigned),
                                    carried in tinygrad's int8/int16 (uint8/uint16), which has no
                                    int4; the hardware stores, multiplies and sums them at N bits
    wNaM                            mixed: N-bit weights, M-bit activations (signed, 2 <= N, M <= 16),
                                    e.g. w4a8; `weights_dtype` / `activations_dtype` say which
                                    element type a model gives each of its inputs

A narrow integer is an element type like any other (`dse.models.zoo.DTYPES`): its inputs are
drawn in its range, data files are checked against it, and the compiler is told the range
(`declared_ranges`, compile_model's `input_ranges`). A mixed format is not an element type: a
model built for `w4a8` declares its weights `int4` and its activations `int8` (zoo.DTYPES["w4a8"]
stands for its activations: what flows between layers, and whether it is a float format).

A name that is none of these is refused with the closest one (`parse`): `int4b`, `i4` and `s4`
mean int4, `u4` uint4, `w4-a8`, `W4A8` and `a8w4` mean w4a8.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from compiler import dtypes as hw_dtypes
from compiler.dtypes import DType

INT_BITS = range(2, 17)
"""Widths of the narrow integers and of each side of a mixed format."""

STANDARD = ("int8", "int16", "int32", "uint8", "fp16", "bf16", "fp32", *hw_dtypes.FP8_NAMES)

_MIXED = re.compile(r"w(\d+)a(\d+)")


class FormatError(ValueError):
    """An unknown format name; the message suggests the closest known one."""


@dataclass(frozen=True)
class Format:
    """A spec dtype: the element type of a model's weights and of its activations (the same
    one unless mixed)."""
    name: str
    weights: str
    activations: str

    @property
    def mixed(self) -> bool:
        return self.weights != self.activations


def element_types() -> dict[str, DType]:
    """Every element type a model input may have, by name: the standard ones, then int2 .. int16
    and uint2 .. uint16."""
    out = {name: hw_dtypes.BY_NAME[name] for name in STANDARD}
    for signed in (True, False):
        for bits in INT_BITS:
            out.setdefault(f"{'' if signed else 'u'}int{bits}", hw_dtypes.int_type(bits, signed))
    return out


ELEMENTS = element_types()

DESCRIPTION = (f"{', '.join(STANDARD)}; narrow integers int2 .. int16 and uint2 .. uint16; mixed wNaM "
               f"(N-bit weights, M-bit activations, e.g. w4a8)")
"""The known names, for messages."""


def mixed_type(name: str) -> DType | None:
    """The DType a mixed format's name stands for (its activations', under the format's name), or
    None when `name` is no mixed format."""
    m = _MIXED.fullmatch(name) if isinstance(name, str) else None
    if not m or not all(int(b) in INT_BITS for b in m.groups()):
        return None
    return DType(name, int(m.group(2)), True)


def parse(name) -> Format:
    """The format `name` names; FormatError (one line, with the closest known name) if none."""
    if isinstance(name, str):
        if name in ELEMENTS:
            return Format(name, name, name)
        m = _MIXED.fullmatch(name)
        if m and all(int(b) in INT_BITS for b in m.groups()):
            return Format(name, f"int{m.group(1)}", f"int{m.group(2)}")
    raise FormatError(f"unknown dtype {name!r}{suggest(name)}")


def weights_dtype(name: str) -> str:
    """The element type of a model's weights in format `name` (int4 for w4a8, else `name`)."""
    return parse(name).weights


def activations_dtype(name: str) -> str:
    """The element type of a model's activations and data in format `name` (int8 for w4a8)."""
    return parse(name).activations


_SEPARATORS = re.compile(r"[\s_\-/.:]+")
_SIGNED = re.compile(r"(?:q|s|si|i|int|sint|signed|qint)(\d+)(?:b|bit|bits|t)?")
_UNSIGNED = re.compile(r"(?:u|ui|uint|unsigned|quint)(\d+)(?:b|bit|bits|t)?")
_MIXED_LOOSE = re.compile(r"w(?:int)?(\d+)(?:b|bit|bits)?a(?:int)?(\d+)(?:b|bit|bits)?")
_MIXED_SWAPPED = re.compile(r"a(?:int)?(\d+)(?:b|bit|bits)?w(?:int)?(\d+)(?:b|bit|bits)?")
_ALIASES = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16", "float32": "fp32", "float": "fp32",
            "char": "int8", "short": "int16", "int": "int32", "uchar": "uint8", "byte": "uint8",
            "e4m3": "fp8e4m3", "e4m3fn": "fp8e4m3", "float8e4m3": "fp8e4m3", "float8e4m3fn": "fp8e4m3",
            "fp8e4m3fn": "fp8e4m3", "e5m2": "fp8e5m2", "float8e5m2": "fp8e5m2"}


def suggest(name) -> str:
    """'; did you mean ...?' for a near miss, or why the name cannot be one, else the known names."""
    if not isinstance(name, str):
        return f"; known: {DESCRIPTION}"
    word = _SEPARATORS.sub("", name.strip().lower())
    if word in ("fp8", "float8"):
        return "; did you mean 'fp8e4m3' or 'fp8e5m2'?"
    guess = _ALIASES.get(word) or _guess(word)
    if guess is not None and guess.startswith(";"):
        return guess
    if guess is not None and guess != name:
        return f"; did you mean {guess!r}?"
    close = difflib.get_close_matches(word, list(ELEMENTS) + ["w4a8", "w8a8", "w2a8", "w4a4"], n=1, cutoff=0.75)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; known: {DESCRIPTION}"


def _guess(word: str) -> str | None:
    """The format a loosely written name means (a known name, or '; why not' for a width out of
    range), or None."""
    for pattern, swapped in ((_MIXED_LOOSE, False), (_MIXED_SWAPPED, True)):
        if m := pattern.fullmatch(word):
            w, a = (int(m.group(2)), int(m.group(1))) if swapped else (int(m.group(1)), int(m.group(2)))
            if w not in INT_BITS or a not in INT_BITS:
                return f"; a mixed format's weights and activations take {INT_BITS[0]} to {INT_BITS[-1]} bits each"
            return f"w{w}a{a}"
    for pattern, prefix in ((_UNSIGNED, "uint"), (_SIGNED, "int")):
        if m := pattern.fullmatch(word):
            bits = int(m.group(1))
            if f"{prefix}{bits}" in ELEMENTS:
                return f"{prefix}{bits}"
            return (f"; {prefix}{bits}: integers take {INT_BITS[0]} to {INT_BITS[-1]} bits ({prefix}{INT_BITS[0]} .. "
                    f"{prefix}{INT_BITS[-1]})" + (", or int32" if prefix == "int" else ""))
    if re.fullmatch(r"(\d+)(?:b|bit|bits)", word):
        bits = int(re.match(r"\d+", word).group())
        return f"int{bits}" if bits in INT_BITS else None
    return None
