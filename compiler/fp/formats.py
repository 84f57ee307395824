"""Binary floating-point formats and the option values the float units accept."""
from __future__ import annotations

from dataclasses import dataclass, replace

ROUNDINGS = ("rne", "rtz")
SUBNORMALS = ("keep", "flush")


@dataclass(frozen=True)
class FloatFormat:
    """A binary float format: 1 sign bit, `exp_bits` exponent bits, `man_bits` stored
    mantissa bits (the leading 1 of normal numbers is implicit).

    Bit layout (MSB first): sign | exponent | mantissa. Exponent field 0 holds zeros and
    subnormals. With `has_inf` (IEEE 754, OCP E5M2) the all-ones exponent holds inf
    (mantissa 0) and NaN (mantissa != 0). Without it (the OCP "FN" layout of E4M3: finite
    and NaN only) the all-ones exponent holds normal numbers and only an all-ones mantissa
    there is NaN (S.1111.111 in E4M3), so the largest finite mantissa is all ones but one.

    `saturate` says where a finite result too large for the format goes when rounding to
    nearest: False, to inf, or to NaN in a format without inf (IEEE; OCP's non-saturating
    mode; ml_dtypes); True, to the largest finite number of its sign (OCP's saturating mode;
    tinygrad's fp8 conversion). Round toward zero gives the largest finite number either way.
    Infinite and NaN inputs are not finite results: inf stays inf, or is NaN without inf.
    """
    name: str
    exp_bits: int
    man_bits: int
    has_inf: bool = True
    saturate: bool = False

    def __post_init__(self) -> None:
        if not (isinstance(self.exp_bits, int) and 2 <= self.exp_bits <= 11):
            raise ValueError(f"FloatFormat {self.name!r}: exp_bits must be an int in 2..11, got {self.exp_bits!r}")
        if not (isinstance(self.man_bits, int) and 1 <= self.man_bits <= 52):
            raise ValueError(f"FloatFormat {self.name!r}: man_bits must be an int in 1..52, got {self.man_bits!r}")
        for flag in ("has_inf", "saturate"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"FloatFormat {self.name!r}: {flag} must be True or False, got {getattr(self, flag)!r}")
        if not self.has_inf and self.man_bits < 2:
            raise ValueError(f"FloatFormat {self.name!r}: a format without inf needs man_bits >= 2 "
                             f"(its top exponent must hold a finite number besides NaN)")

    @property
    def width(self) -> int:
        return 1 + self.exp_bits + self.man_bits

    @property
    def precision(self) -> int:
        """Significand bits including the implicit leading one (p in IEEE terms)."""
        return self.man_bits + 1

    @property
    def bias(self) -> int:
        return (1 << (self.exp_bits - 1)) - 1

    @property
    def exp_max_field(self) -> int:
        """The all-ones exponent field (inf/NaN; with no inf, also normal numbers)."""
        return (1 << self.exp_bits) - 1

    @property
    def max_exp_field(self) -> int:
        """The biased exponent of the largest finite number."""
        return self.exp_max_field - 1 if self.has_inf else self.exp_max_field

    @property
    def emin(self) -> int:
        """Unbiased exponent of the smallest normal number."""
        return 1 - self.bias

    @property
    def emax(self) -> int:
        """Unbiased exponent of the largest finite number."""
        return self.max_exp_field - self.bias

    @property
    def sign_mask(self) -> int:
        return 1 << (self.width - 1)

    @property
    def man_mask(self) -> int:
        return (1 << self.man_bits) - 1

    @property
    def inf_bits(self) -> int:
        if not self.has_inf:
            raise ValueError(f"FloatFormat {self.name!r} has no infinity")
        return self.exp_max_field << self.man_bits

    @property
    def max_finite_bits(self) -> int:
        return (self.max_exp_field << self.man_bits) | (self.man_mask if self.has_inf else self.man_mask - 1)

    @property
    def overflow_bits(self) -> int:
        """What a finite result beyond the largest finite number rounds to (to nearest),
        without its sign: the largest finite (saturate), else inf, else NaN."""
        if self.saturate:
            return self.max_finite_bits
        return self.inf_bits if self.has_inf else self.qnan_bits

    @property
    def min_normal_bits(self) -> int:
        return 1 << self.man_bits

    @property
    def qnan_bits(self) -> int:
        """The canonical quiet NaN every unit produces: sign 0, top mantissa bit set (with
        no inf: the one NaN, every mantissa bit set)."""
        if not self.has_inf:
            return (self.exp_max_field << self.man_bits) | self.man_mask
        return self.inf_bits | (1 << (self.man_bits - 1))

    @property
    def max_finite(self) -> float:
        top_man = self.man_mask if self.has_inf else self.man_mask - 1
        return (1.0 + top_man * 2.0 ** -self.man_bits) * 2.0 ** self.emax

    @property
    def min_normal(self) -> float:
        return 2.0 ** self.emin

    @property
    def min_subnormal(self) -> float:
        return 2.0 ** (self.emin - self.man_bits)

    def __str__(self) -> str:
        return self.name


FP32 = FloatFormat("fp32", 8, 23)
FP16 = FloatFormat("fp16", 5, 10)
BF16 = FloatFormat("bf16", 8, 7)
# OCP 8-bit floats (OFP8, 2023), as tinygrad computes them: saturating (docs/fp8.md).
# `nonsaturating(fmt)` gives the same layout with ml_dtypes' overflow to inf / NaN.
FP8E4M3 = FloatFormat("fp8e4m3", 4, 3, has_inf=False, saturate=True)
FP8E5M2 = FloatFormat("fp8e5m2", 5, 2, saturate=True)
FORMATS = {f.name: f for f in (FP32, FP16, BF16, FP8E4M3, FP8E5M2)}


def nonsaturating(fmt: FloatFormat) -> FloatFormat:
    """`fmt` with overflow to inf (NaN without inf): OCP's non-saturating mode, ml_dtypes'."""
    return replace(fmt, name=fmt.name + "_nonsat" if fmt.saturate else fmt.name, saturate=False)


def check_format(fmt, what: str = "fmt") -> FloatFormat:
    if not isinstance(fmt, FloatFormat):
        raise ValueError(f"{what}: expected a FloatFormat such as FP32, FP16 or BF16, got {fmt!r}")
    return fmt


def check_rounding(rounding) -> str:
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding: expected one of {', '.join(map(repr, ROUNDINGS))}, got {rounding!r}")
    return rounding


def check_subnormals(subnormals) -> str:
    if subnormals not in SUBNORMALS:
        raise ValueError(f"subnormals: expected one of {', '.join(map(repr, SUBNORMALS))}, got {subnormals!r}")
    return subnormals
