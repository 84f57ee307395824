"""Binary floating-point formats and the option values the float units accept."""
from __future__ import annotations

from dataclasses import dataclass

ROUNDINGS = ("rne", "rtz")
SUBNORMALS = ("keep", "flush")


@dataclass(frozen=True)
class FloatFormat:
    """An IEEE-754-style binary format: 1 sign bit, `exp_bits` exponent bits, `man_bits`
    stored mantissa bits (the leading 1 of normal numbers is implicit).

    Bit layout (MSB first): sign | exponent | mantissa. Exponent field 0 holds zeros and
    subnormals, all-ones holds inf (mantissa 0) and NaN (mantissa != 0).
    """
    name: str
    exp_bits: int
    man_bits: int

    def __post_init__(self) -> None:
        if not (isinstance(self.exp_bits, int) and 2 <= self.exp_bits <= 11):
            raise ValueError(f"FloatFormat {self.name!r}: exp_bits must be an int in 2..11, got {self.exp_bits!r}")
        if not (isinstance(self.man_bits, int) and 1 <= self.man_bits <= 52):
            raise ValueError(f"FloatFormat {self.name!r}: man_bits must be an int in 1..52, got {self.man_bits!r}")

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
        """The all-ones exponent field (inf/NaN)."""
        return (1 << self.exp_bits) - 1

    @property
    def emin(self) -> int:
        """Unbiased exponent of the smallest normal number."""
        return 1 - self.bias

    @property
    def emax(self) -> int:
        """Unbiased exponent of the largest finite number."""
        return self.exp_max_field - 1 - self.bias

    @property
    def sign_mask(self) -> int:
        return 1 << (self.width - 1)

    @property
    def man_mask(self) -> int:
        return (1 << self.man_bits) - 1

    @property
    def inf_bits(self) -> int:
        return self.exp_max_field << self.man_bits

    @property
    def max_finite_bits(self) -> int:
        return self.inf_bits - 1

    @property
    def min_normal_bits(self) -> int:
        return 1 << self.man_bits

    @property
    def qnan_bits(self) -> int:
        """The canonical quiet NaN every unit produces: sign 0, top mantissa bit set."""
        return self.inf_bits | (1 << (self.man_bits - 1))

    @property
    def max_finite(self) -> float:
        return (2.0 - 2.0 ** -self.man_bits) * 2.0 ** self.emax

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
FORMATS = {f.name: f for f in (FP32, FP16, BF16)}


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
