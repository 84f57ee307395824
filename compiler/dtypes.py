"""The element types the hardware knows: integer, bool, IEEE float formats and OCP FP8.

Values travel through the hardware as bit patterns of `bits` width; signed integers as
two's complement, floats as IEEE-754 bit patterns (fp8e4m3 / fp8e5m2: OCP 8-bit floats,
saturating as tinygrad computes them; docs/fp8.md).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
from amaranth.hdl import Shape, signed, unsigned

from .fp import reference as fp_reference
from .fp.formats import FORMATS as FLOAT_FORMATS


@dataclass(frozen=True)
class DType:
    name: str
    bits: int
    signed: bool
    is_float: bool = False
    exp_bits: int = 0        # floats only
    man_bits: int = 0        # floats only

    def __repr__(self) -> str:
        return self.name

    @property
    def is_int(self) -> bool:
        return not self.is_float

    @property
    def is_bool(self) -> bool:
        return self.name == "bool"

    @property
    def shape(self) -> Shape:
        """The Amaranth shape that holds one element (floats: the raw bit pattern)."""
        if self.is_float:
            return unsigned(self.bits)
        return signed(self.bits) if self.signed else unsigned(self.bits)

    @property
    def lowest(self) -> int | float:
        """The smallest finite value (integers: `min`; floats: minus the largest finite)."""
        return -self.highest if self.is_float else self.min

    @property
    def highest(self) -> int | float:
        """The largest finite value (integers: `max`; floats: the format's, 448 for fp8e4m3)."""
        if self.is_float:
            return FLOAT_FORMATS[self.name].max_finite
        return self.max

    @property
    def min(self) -> int:
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def max(self) -> int:
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1

    def wrap(self, value: int) -> int:
        """Wrap a Python int into this integer type's range (two's complement)."""
        value &= (1 << self.bits) - 1
        if self.signed and value >> (self.bits - 1):
            value -= 1 << self.bits
        return value

    def to_bits(self, value: int | float) -> int:
        """The unsigned bit pattern that represents `value` (floats rounded to nearest even)."""
        if self.is_float:
            return float_to_bits(float(value), self)
        return int(value) & ((1 << self.bits) - 1)

    @property
    def container(self) -> "DType":
        """The type tinygrad and numpy hold this one's values in: itself, except for an integer
        narrower than theirs (`int_type`: int4 in int8, uint12 in uint16)."""
        if self.is_float or self.name in _NUMPY:
            return self
        bits = next(b for b in (8, 16, 32, 64) if self.bits <= b)
        return BY_NAME[f"{'' if self.signed else 'u'}int{bits}"]

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype that holds elements; bf16 and fp8 are held as their bit patterns
        (uint16, uint8), a narrow integer in its container."""
        return np.dtype(_NUMPY[self.container.name])

    @property
    def held_as_bits(self) -> bool:
        """A float format numpy has no type for: its arrays hold bit patterns (`numpy`), and
        its values travel in float32 arrays (exact)."""
        return self.is_float and self.name in ("bf16", *FP8_NAMES)


def float_to_bits(value: float, dt: DType) -> int:
    if dt.name == "fp32":
        return struct.unpack("<I", struct.pack("<f", value))[0]
    if dt.name == "fp16":
        return int(np.array(value, np.float16).view(np.uint16))
    if dt.name == "bf16":
        f32 = struct.unpack("<I", struct.pack("<f", value))[0]
        if (f32 & 0x7F800000) == 0x7F800000 and f32 & 0x7FFFFF:
            return 0x7FC0
        return ((f32 + 0x7FFF + ((f32 >> 16) & 1)) >> 16) & 0xFFFF   # round to nearest even
    if dt.name in FP8_NAMES:
        return int(fp_reference.round_to_format(value, FLOAT_FORMATS[dt.name])[0])
    raise ValueError(f"no float format {dt.name!r}")


BOOL = DType("bool", 1, False)
INT8, INT16, INT32, INT64 = (DType(f"int{b}", b, True) for b in (8, 16, 32, 64))
UINT8, UINT16, UINT32, UINT64 = (DType(f"uint{b}", b, False) for b in (8, 16, 32, 64))
FP16 = DType("fp16", 16, True, True, 5, 10)
BF16 = DType("bf16", 16, True, True, 8, 7)
FP32 = DType("fp32", 32, True, True, 8, 23)
FP8E4M3 = DType("fp8e4m3", 8, True, True, 4, 3)     # OCP E4M3 ("FN": no inf, max 448)
FP8E5M2 = DType("fp8e5m2", 8, True, True, 5, 2)     # OCP E5M2 (IEEE-like)
FP8_NAMES = ("fp8e4m3", "fp8e5m2")

ALL = (BOOL, INT8, INT16, INT32, INT64, UINT8, UINT16, UINT32, UINT64, FP16, BF16, FP32, FP8E4M3, FP8E5M2)
BY_NAME = {d.name: d for d in ALL}


def int_type(bits: int, signed: bool = True) -> DType:
    """The integer type of `bits` bits (int4: [-8, 7]; uint4: [0, 15]), a standard one where it
    is one. tinygrad has no int4: a narrow type's values travel in its `container` (int8), and
    the compiler is told their range (compile_model's `input_ranges`), not their type."""
    name = f"{'' if signed else 'u'}int{bits}"
    if name in BY_NAME:
        return BY_NAME[name]
    if not 1 <= bits <= 64:
        raise ValueError(f"an integer type of {bits} bits: expected 1 to 64")
    return DType(name, bits, signed)

_NUMPY = {"bool": "bool", "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
          "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
          "fp16": "float16", "bf16": "uint16", "fp32": "float32", "fp8e4m3": "uint8", "fp8e5m2": "uint8"}

# tinygrad's dtype names (DType.name) -> ours
_TINYGRAD = {"bool": BOOL, "signed char": INT8, "short": INT16, "int": INT32, "long": INT64,
             "unsigned char": UINT8, "unsigned short": UINT16, "unsigned int": UINT32, "unsigned long": UINT64,
             "half": FP16, "__bf16": BF16, "bfloat16": BF16, "float": FP32,
             "float8_e4m3": FP8E4M3, "float8_e5m2": FP8E5M2}


def from_tinygrad(tg_dtype) -> DType | None:
    """Our DType for a tinygrad scalar dtype, or None when the hardware has no such type."""
    base = getattr(tg_dtype, "base", tg_dtype)          # pointer types carry their element type
    return _TINYGRAD.get(getattr(base, "name", None))


def to_tinygrad(dt: DType):
    from tinygrad import dtypes
    return {"bool": dtypes.bool, "int8": dtypes.int8, "int16": dtypes.int16, "int32": dtypes.int32,
            "int64": dtypes.int64, "uint8": dtypes.uint8, "uint16": dtypes.uint16, "uint32": dtypes.uint32,
            "uint64": dtypes.uint64, "fp16": dtypes.float16, "bf16": dtypes.bfloat16,
            "fp32": dtypes.float32, "fp8e4m3": dtypes.fp8e4m3, "fp8e5m2": dtypes.fp8e5m2}[dt.container.name]


def to_words(array: np.ndarray, dt: DType) -> np.ndarray:
    """Element values -> unsigned bit patterns (uint64) as the memories hold them. bf16 takes
    uint16 bit patterns, or any float array (rounded to nearest even); fp8 takes uint8 bit
    patterns, ml_dtypes float8 arrays, or any float array (rounded as the fp8 units round)."""
    a = np.ascontiguousarray(array).reshape(-1)
    if dt.name in FP8_NAMES:
        if a.dtype.itemsize == 1 and a.dtype.kind in "uV" or a.dtype.name.startswith("float8"):
            return a.view(np.uint8).astype(np.uint64)
        return fp_reference.round_to_format(a.astype(np.float64), FLOAT_FORMATS[dt.name]).astype(np.uint64)
    if dt.name == "bf16" and a.dtype != np.uint16:
        a = np.array([float_to_bits(float(v), dt) for v in a.astype(np.float32)], np.uint16)
    elif a.dtype != dt.numpy:
        a = a.astype(dt.numpy)
    view = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    return a.view(view).astype(np.uint64)


def from_words(words: np.ndarray, dt: DType) -> np.ndarray:
    """Unsigned bit patterns -> numpy array of the element type. numpy has no bfloat16 or fp8:
    they come back as float32 holding the exact values."""
    w = np.asarray(words, dtype=np.uint64)
    if dt.is_bool:
        return (w & 1).astype(bool)
    if dt.name == "bf16":
        return (w.astype(np.uint32) << 16).view(np.float32)
    if dt.name in FP8_NAMES:
        return fp_reference.decode(w, FLOAT_FORMATS[dt.name]).astype(np.float32)
    view = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[dt.container.bits]
    return w.astype(view).view(dt.numpy)
