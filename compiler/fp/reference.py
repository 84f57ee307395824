"""numpy reference model of the float units, bit for bit, vectorised.

Every operation is computed in float64 and then rounded once to the target format by
`round_to_format`, which implements both rounding modes and both subnormal policies.

Why float64 is enough:
  * products of two values of these formats (p <= 24) are exact in float64 (2p <= 53 bits,
    and the exponents stay far inside float64's range);
  * a sum may be inexact in float64 (e.g. 2**127 + 2**-149), so `add` also computes the
    exact residual with TwoSum and passes it on: `round_to_format` then rounds the exact
    value x + err, not x. (For round-to-nearest this would not matter since 53 >= 2p + 2,
    but for round-toward-zero it does: 1 - 2**-149 must truncate to 1 - 2**-24, not 1.)
  * integers up to 32 bits and conversions between these formats are exact in float64.

Bit patterns travel as unsigned numpy integer arrays. bfloat16 has no numpy type: it is the
upper half of a float32, and its rounding is done by `round_to_format` like the others
(checked against the classic integer bit trick in `float32_to_bf16_bits`).
"""
from __future__ import annotations

import numpy as np

from .formats import BF16, FloatFormat, check_format, check_rounding, check_subnormals


# ---------------------------------------------------------------- bit patterns <-> float64

def _native(fmt: FloatFormat):
    """(numpy float dtype, unsigned dtype) for formats numpy has; None for bf16."""
    if (fmt.exp_bits, fmt.man_bits) == (8, 23):
        return np.float32, np.uint32
    if (fmt.exp_bits, fmt.man_bits) == (5, 10):
        return np.float16, np.uint16
    return None


def _is_bf16(fmt: FloatFormat) -> bool:
    return (fmt.exp_bits, fmt.man_bits) == (8, 7)


def _check_supported(fmt: FloatFormat) -> None:
    if _native(fmt) is None and not _is_bf16(fmt) and fmt.width > 8:
        raise ValueError(f"reference model supports fp32, fp16, bf16 and 8-bit formats, got {fmt!r}")


def bits_dtype(fmt: FloatFormat):
    return np.uint32 if fmt.width > 16 else np.uint16


def decode(bits, fmt: FloatFormat) -> np.ndarray:
    """Bit patterns -> float64 values (exact)."""
    _check_supported(fmt)
    bits = np.asarray(bits).astype(np.uint64) & ((1 << fmt.width) - 1)
    native = _native(fmt)
    if native is not None:
        ftype, utype = native
        with np.errstate(invalid="ignore"):       # signalling NaN patterns are fine here
            return bits.astype(utype).view(ftype).astype(np.float64)
    if _is_bf16(fmt):
        with np.errstate(invalid="ignore"):       # signalling NaN patterns are fine here
            return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
    return _decode_fields(bits, fmt)


def _decode_fields(bits: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """Bit patterns of a format numpy has no type for (the 8-bit ones) -> float64, from the
    fields, by the definition of the format (independent of ml_dtypes, which tests compare)."""
    exp = ((bits >> np.uint64(fmt.man_bits)) & np.uint64(fmt.exp_max_field)).astype(np.int64)
    man = (bits & np.uint64(fmt.man_mask)).astype(np.float64)
    value = np.where(exp == 0, np.ldexp(man, fmt.emin - fmt.man_bits),
                     np.ldexp(man + 2.0 ** fmt.man_bits, exp - fmt.bias - fmt.man_bits))
    top = exp == fmt.exp_max_field
    if fmt.has_inf:
        value = np.where(top, np.where(man == 0, np.inf, np.nan), value)
    else:
        value = np.where(top & (man == fmt.man_mask), np.nan, value)
    negative = (bits >> np.uint64(fmt.width - 1)) & np.uint64(1)
    return np.where(negative == 1, -value, value)


def _encode_fields(values: np.ndarray, fmt: FloatFormat) -> tuple[np.ndarray, np.ndarray]:
    """float64 values -> (bit patterns, exactly representable or infinite?) for a format numpy
    has no type for. inf in a format without inf encodes as its NaN."""
    mag = np.abs(values)
    ok = np.isfinite(mag)
    safe = np.where(ok & (mag > 0), mag, 1.0)
    exponent = np.maximum(np.frexp(safe)[1] - 1, fmt.emin)
    scaled = np.ldexp(safe, fmt.man_bits - exponent)        # an integer when representable
    normal = scaled >= 2.0 ** fmt.man_bits
    exp_field = np.where(normal, exponent + fmt.bias, 0)
    man = np.where(normal, scaled - 2.0 ** fmt.man_bits, scaled)
    exact = ok & (scaled == np.floor(scaled)) & (exp_field <= fmt.max_exp_field)
    if not fmt.has_inf:
        exact &= ~((exp_field == fmt.exp_max_field) & (man == fmt.man_mask))
    zero = ok & (mag == 0)
    exp_field, man = np.where(zero, 0, exp_field), np.where(zero | ~exact, 0, man)
    sign = np.signbit(values).astype(np.uint64) << np.uint64(fmt.width - 1)
    bits = (exp_field.astype(np.uint64) << np.uint64(fmt.man_bits)) | man.astype(np.uint64) | sign
    inf = np.isinf(values)
    bits = np.where(inf, (np.uint64(fmt.inf_bits) | sign) if fmt.has_inf else np.uint64(fmt.qnan_bits), bits)
    return bits, exact | zero | inf


def encode(values, fmt: FloatFormat) -> np.ndarray:
    """float64 values already representable in `fmt` (or inf/NaN) -> bit patterns.

    NaN becomes the canonical quiet NaN. Raises if a value would need rounding: rounding is
    `round_to_format`'s job, and a silent second rounding here would hide bugs.
    """
    _check_supported(fmt)
    values = np.asarray(values, dtype=np.float64)
    native = _native(fmt)
    if not _is_bf16(fmt) and native is None:
        bits, exact = _encode_fields(values, fmt)
        nan = np.isnan(values)
        inexact = ~nan & ~exact
        if inexact.any():
            raise AssertionError(f"encode: {values[inexact][:5]} not representable in {fmt.name}")
        return np.where(nan, fmt.qnan_bits, bits).astype(bits_dtype(fmt))
    if native is not None:
        ftype, utype = native
        with np.errstate(over="ignore", invalid="ignore"):
            narrow = values.astype(ftype)
        bits = narrow.view(utype).astype(bits_dtype(fmt))
    else:
        narrow = values.astype(np.float32)
        wide = narrow.view(np.uint32)
        bits = (wide >> np.uint32(16)).astype(np.uint16)
        narrow = (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)
    nan = np.isnan(values)
    inexact = ~nan & (narrow.astype(np.float64) != values)
    if inexact.any():
        raise AssertionError(f"encode: {values[inexact][:5]} not representable in {fmt.name}")
    return np.where(nan, fmt.qnan_bits, bits).astype(bits_dtype(fmt))


def flush_inputs(bits, fmt: FloatFormat, subnormals: str) -> np.ndarray:
    """With subnormals="flush", replace subnormal patterns by the zero of the same sign."""
    bits = np.asarray(bits).astype(np.uint64)
    if subnormals == "keep":
        return bits
    exp = (bits >> np.uint64(fmt.man_bits)) & np.uint64(fmt.exp_max_field)
    return np.where(exp == 0, bits & np.uint64(fmt.sign_mask), bits)


def read(bits, fmt: FloatFormat, subnormals: str) -> np.ndarray:
    """Bit patterns -> float64 values as a unit with this subnormal policy sees them."""
    return decode(flush_inputs(bits, fmt, subnormals), fmt)


# ---------------------------------------------------------------- the one rounding step

def round_to_format(x, fmt: FloatFormat, rounding: str = "rne", subnormals: str = "keep",
                    err=None) -> np.ndarray:
    """Round exact values to `fmt`; returns bit patterns.

    The exact value is x + err (err defaults to 0), where x is float64 and |err| is at most
    half an ulp of x (what TwoSum gives). rne: ties to even. rtz: toward zero; finite values
    beyond the largest finite number give it (with their sign), not inf. subnormals="keep":
    IEEE gradual underflow. "flush": round to full precision with an unbounded exponent
    range, then results below the smallest normal become zero of the same sign (IEEE
    "tininess after rounding"; the hardware's `round_pack` does the same). A saturating
    format (`fmt.saturate`) rounds finite overflow to its largest finite number in rne too;
    a format without inf overflows to NaN (rne, not saturating) and reads inf as NaN.
    """
    check_format(fmt)
    check_rounding(rounding)
    check_subnormals(subnormals)
    x = np.array(x, dtype=np.float64, ndmin=1)
    err = np.zeros_like(x) if err is None else np.broadcast_to(np.asarray(err, np.float64), x.shape)
    finite = np.isfinite(x) & (x != 0)
    err = np.where(finite, err, 0.0)

    # If x sits exactly on a rounding boundary (a representable value or a midpoint) and
    # err != 0, the exact value is off the boundary: step x one float64 ulp towards it. The
    # neighbour has 53 significant bits, so it is no boundary itself and rounds the same
    # way as the exact value (no boundary lies between them).
    on_boundary = _boundary(np.where(finite, x, 1.0), fmt, subnormals)
    nudge = finite & (err != 0) & on_boundary
    with np.errstate(invalid="ignore"):           # NaN lanes are not nudged (np.where computes them)
        x = np.where(nudge, np.nextafter(x, np.where(err > 0, np.inf, -np.inf)), x)

    mag = np.abs(np.where(finite, x, 1.0))
    scaled, quantum_exp = _scale(mag, fmt, subnormals)
    whole = np.floor(scaled)
    frac = scaled - whole
    if rounding == "rne":
        up = (frac > 0.5) | ((frac == 0.5) & (np.fmod(whole, 2) == 1))
        whole = whole + up
    rounded = np.ldexp(whole, quantum_exp)

    if rounding == "rne" and not fmt.saturate:
        rounded = np.where(rounded > fmt.max_finite, np.inf if fmt.has_inf else np.nan, rounded)
    else:
        rounded = np.minimum(rounded, fmt.max_finite)
    if subnormals == "flush":
        rounded = np.where(rounded < fmt.min_normal, 0.0, rounded)
    result = np.where(finite, np.copysign(rounded, x), x)   # zeros, inf, NaN pass through
    return encode(result, fmt)


def _scale(mag: np.ndarray, fmt: FloatFormat, subnormals: str):
    """mag / 2**q and q, where 2**q is the spacing of `fmt`'s values around mag."""
    _, e2 = np.frexp(mag)                 # mag = f * 2**e2 with 0.5 <= f < 1
    exponent = e2 - 1
    if subnormals == "keep":
        exponent = np.maximum(exponent, fmt.emin)
    quantum_exp = exponent - fmt.man_bits
    return np.ldexp(mag, -quantum_exp), quantum_exp


def _boundary(x: np.ndarray, fmt: FloatFormat, subnormals: str) -> np.ndarray:
    scaled, _ = _scale(np.abs(x), fmt, subnormals)
    frac = scaled - np.floor(scaled)
    return (frac == 0) | (frac == 0.5)


def round_info(x, fmt: FloatFormat, subnormals: str = "keep", err=None) -> dict[str, np.ndarray]:
    """Classify exact values x (+ err) for coverage checks: ties, inexact, tiny, overflow."""
    x = np.array(x, dtype=np.float64, ndmin=1)
    err = np.zeros_like(x) if err is None else np.asarray(err, np.float64)
    finite = np.isfinite(x) & (x != 0)
    mag = np.abs(np.where(finite, x, 1.0))
    scaled, _ = _scale(mag, fmt, subnormals)
    frac = scaled - np.floor(scaled)
    exact_err = np.where(finite, err, 0.0) == 0
    tie = finite & (frac == 0.5) & exact_err
    odd = np.fmod(np.floor(scaled), 2) == 1
    return {
        "tie": tie,
        "tie_to_up": tie & odd,          # ties to even that round away from zero
        "tie_to_down": tie & ~odd,       # ... and toward zero
        "inexact": finite & ((frac != 0) | ~exact_err),
        "tiny": finite & (mag < fmt.min_normal),
        "overflow": finite & (mag > fmt.max_finite),
    }


# ---------------------------------------------------------------- operations

def two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """s = fl(a + b) and err with s + err == a + b exactly (Knuth's TwoSum)."""
    with np.errstate(invalid="ignore", over="ignore"):
        s = a + b
        bb = s - a
        err = (a - (s - bb)) + (b - bb)
    return s, np.where(np.isfinite(s), err, 0.0)


def add(a_bits, b_bits, fmt: FloatFormat, rounding: str = "rne", subnormals: str = "keep",
        subtract: bool = False) -> np.ndarray:
    a = read(a_bits, fmt, subnormals)
    b = read(b_bits, fmt, subnormals)
    if subtract:
        b = -b
    s, err = two_sum(a, b)       # float64 gives IEEE signed zeros: x + -x = +0, -0 + -0 = -0
    return round_to_format(s, fmt, rounding, subnormals, err)


def add_info(a_bits, b_bits, fmt: FloatFormat, subnormals: str = "keep", subtract: bool = False):
    a, b = read(a_bits, fmt, subnormals), read(b_bits, fmt, subnormals)
    s, err = two_sum(a, -b if subtract else b)
    info = round_info(s, fmt, subnormals, err)
    with np.errstate(invalid="ignore"):
        info["cancel"] = np.isfinite(s) & (a != 0) & (np.abs(s) < 0.5 * np.maximum(np.abs(a), np.abs(b)))
    return info


def mul(a_bits, b_bits, fmt: FloatFormat, rounding: str = "rne", subnormals: str = "keep") -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        product = read(a_bits, fmt, subnormals) * read(b_bits, fmt, subnormals)   # exact
    return round_to_format(product, fmt, rounding, subnormals)


def mul_info(a_bits, b_bits, fmt: FloatFormat, subnormals: str = "keep"):
    with np.errstate(invalid="ignore", over="ignore"):
        return round_info(read(a_bits, fmt, subnormals) * read(b_bits, fmt, subnormals), fmt, subnormals)


def two_product(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """p = fl(a * b) and err with p + err == a * b exactly (Dekker's product with Veltkamp
    splitting: numpy has no fused multiply-add). Finite inputs far from overflow only."""
    def split(x):
        c = 134217729.0 * x                  # 2**27 + 1
        hi = c - (c - x)
        return hi, x - hi
    with np.errstate(invalid="ignore", over="ignore"):
        p = a * b
        a_hi, a_lo = split(a)
        b_hi, b_lo = split(b)
        err = ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo
    return p, np.where(np.isfinite(p), err, 0.0)


def div(a_bits, b_bits, fmt: FloatFormat, rounding: str = "rne", subnormals: str = "keep") -> np.ndarray:
    """a / b correctly rounded. float64's quotient q is rounded once already, so the sign of
    the exact remainder a - q*b (exact by TwoProduct; a - p is exact by Sterbenz) tells
    `round_to_format` on which side of q the true quotient lies (matters for rtz and flush)."""
    a, b = read(a_bits, fmt, subnormals), read(b_bits, fmt, subnormals)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        q = a / b
        finite = np.isfinite(q) & (q != 0)
        p, e = two_product(np.where(finite, q, 0.0), np.where(finite, b, 0.0))
        rem = (np.where(finite, a, 0.0) - p) - e
        err = np.where(finite, rem / np.where(finite, b, 1.0), 0.0)
    return round_to_format(q, fmt, rounding, subnormals, err)


def reciprocal(b_bits, fmt: FloatFormat, rounding: str = "rne", subnormals: str = "keep") -> np.ndarray:
    one = np.full(np.shape(b_bits), fmt.bias << fmt.man_bits, dtype=np.uint64)
    return div(one, b_bits, fmt, rounding, subnormals)


def sqrt(a_bits, fmt: FloatFormat, rounding: str = "rne", subnormals: str = "keep") -> np.ndarray:
    """sqrt(a) correctly rounded; the exact residual a - s*s gives the side of float64's s."""
    a = read(a_bits, fmt, subnormals)
    with np.errstate(invalid="ignore"):
        s = np.sqrt(a)
        finite = np.isfinite(s) & (s != 0)
        sf = np.where(finite, s, 0.0)
        p, e = two_product(sf, sf)
        rem = (np.where(finite, a, 0.0) - p) - e
        err = np.where(finite, rem / (2 * np.where(finite, s, 1.0)), 0.0)
    return round_to_format(s, fmt, rounding, subnormals, err)


def trunc(a_bits, fmt: FloatFormat, subnormals: str = "keep") -> np.ndarray:
    """numpy.trunc; exact in every format (it only clears fraction bits)."""
    with np.errstate(invalid="ignore"):
        return encode(np.trunc(read(a_bits, fmt, subnormals)), fmt)


def compare(a_bits, b_bits, fmt: FloatFormat, subnormals: str = "keep") -> tuple[np.ndarray, np.ndarray]:
    """(a < b, a == b) as uint8 arrays, IEEE semantics."""
    a, b = read(a_bits, fmt, subnormals), read(b_bits, fmt, subnormals)
    return (a < b).astype(np.uint8), (a == b).astype(np.uint8)


def fmax(a_bits, b_bits, fmt: FloatFormat, subnormals: str = "keep", zero_tie: str | None = None,
         python: bool = False) -> np.ndarray:
    """numpy.maximum on the format's own dtype (float32 for bf16), or with an explicit rule
    for equal operands: zero_tie="first" returns a, "second" returns b. python=True: Python's
    max(a, b), which is b if b > a else a (so a NaN or a zero tie gives a)."""
    a_bits = flush_inputs(a_bits, fmt, subnormals)
    b_bits = flush_inputs(b_bits, fmt, subnormals)
    if python:
        a, b = decode(a_bits, fmt), decode(b_bits, fmt)
        with np.errstate(invalid="ignore"):
            return np.where(a < b, b_bits, a_bits).astype(bits_dtype(fmt))
    native = _native(fmt)
    ftype = native[0] if native is not None else np.float32
    a, b = decode(a_bits, fmt).astype(ftype), decode(b_bits, fmt).astype(ftype)
    if zero_tie is None:
        result = np.maximum(a, b).astype(np.float64)
    else:
        take_a = (a > b) if zero_tie == "second" else (a >= b)
        result = np.where(np.isnan(a) | np.isnan(b), np.nan, np.where(take_a, a, b).astype(np.float64))
    return encode(result, fmt)


def fma(a_bits, b_bits, c_bits, src_fmt: FloatFormat, dst_fmt: FloatFormat | None = None, via: int | None = None,
        rounding: str = "rne", subnormals: str = "keep") -> np.ndarray:
    """a * b + c in dst_fmt (default src_fmt), the FMulAdd unit: the exact value rounded once,
    or with via=53 first to float64 (Python's `x * y + z`), then to dst_fmt. The product is
    exact in float64 (p <= 24) and TwoSum gives the sum's exact residual."""
    dst_fmt = dst_fmt or src_fmt
    if via not in (None, 53):
        raise ValueError(f"fma: the reference model rounds via float64 (53) or not at all, got via={via!r}")
    a, b, c = (read(x, src_fmt, subnormals) for x in (a_bits, b_bits, c_bits))
    with np.errstate(invalid="ignore", over="ignore"):
        s, err = two_sum(a * b, c)
    return round_to_format(s, dst_fmt, rounding, subnormals, None if via else err)


def int_to_float(values, fmt: FloatFormat, rounding: str = "rne", subnormals: str = "keep") -> np.ndarray:
    return round_to_format(np.asarray(values).astype(np.float64), fmt, rounding, subnormals)


def wrap_int(values, int_width: int, int_signed: bool) -> np.ndarray:
    """Integers -> the int_width-bit integers they wrap to (two's complement), as int64."""
    v = np.asarray(values).astype(np.int64) & np.int64((1 << int_width) - 1)
    if int_signed:
        v = np.where(v >= (1 << (int_width - 1)), v - (1 << int_width), v)
    return v


def float_to_int(bits, fmt: FloatFormat, int_width: int, int_signed: bool,
                 subnormals: str = "keep") -> np.ndarray:
    """trunc(x) mod 2**int_width as int64 (signed or unsigned reading); NaN/inf -> 0.
    int_width=1 unsigned is bool: x != 0, NaN -> 1."""
    x = read(bits, fmt, subnormals)
    if int_width == 1 and not int_signed:
        return ((x != 0) | np.isnan(x)).astype(np.int64)
    finite = np.isfinite(x)
    t = np.trunc(np.where(finite, x, 0.0))
    wrapped = np.fmod(t, float(2 ** int_width))          # exact; |wrapped| < 2**int_width
    return wrap_int(wrapped.astype(np.int64), int_width, int_signed)


def float_to_float(bits, src_fmt: FloatFormat, dst_fmt: FloatFormat, rounding: str = "rne",
                   subnormals: str = "keep") -> np.ndarray:
    return round_to_format(read(bits, src_fmt, subnormals), dst_fmt, rounding, subnormals)


# ---------------------------------------------------------------- bfloat16 helpers

def float32_to_bf16_bits(values, rounding: str = "rne") -> np.ndarray:
    """float32 -> bfloat16 with the integer bit trick used by TensorFlow and PyTorch:
    add 0x7fff plus the lowest kept bit, keep the top half (rne), or just truncate (rtz).
    Independent of `round_to_format`, so each checks the other. NaN -> canonical NaN;
    rtz saturates at the largest finite number like the units do."""
    check_rounding(rounding)
    u = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = np.isnan(np.asarray(values, dtype=np.float32))
    if rounding == "rne":
        u = u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))
        out = (u >> np.uint64(16)).astype(np.uint16)
    else:
        out = (u >> np.uint64(16)).astype(np.uint16)
    return np.where(nan, np.uint16(BF16.qnan_bits), out).astype(np.uint16)


def bf16_bits_to_float32(bits) -> np.ndarray:
    return (np.asarray(bits).astype(np.uint32) << np.uint32(16)).view(np.float32)


def numpy_native(op: str, a_bits, b_bits, fmt: FloatFormat) -> np.ndarray:
    """numpy's own float32/float16 arithmetic on bit patterns (for checking this model)."""
    ftype, utype = _native(fmt)
    a = np.asarray(a_bits).astype(utype).view(ftype)
    b = np.asarray(b_bits).astype(utype).view(ftype)
    with np.errstate(all="ignore"):
        y = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
             "sqrt": lambda x, _: np.sqrt(x), "trunc": lambda x, _: np.trunc(x)}[op](a, b)
    return np.where(np.isnan(y), fmt.qnan_bits, y.view(utype)).astype(bits_dtype(fmt))
