"""The bit widths the tool's quantiser gives a network, per layer: the format knobs.

    weight_bits: [4, 8]            # every conv/dense layer's weights
    act_bits: [6, 8]               # the input and every layer's output activations
    weight_bits@0: [2, 3, 4]       # one layer's own (index of its conv/dense layers, or its name)
    act_bits@fc1: [4, 8]           # the activations a layer outputs (not the last one: its logits are int32)
    scale_digits: [1, 2]           # non-zero signed digits of each requantisation multiplier (below)

They are knobs of a point like the hardware ones (the spec's `<knob>@<layer>` syntax), but they
change the model, not the hardware configuration: HardwareConfig never sees them. They apply
to the integer points of a trained network the tool quantises (`weights:` / `onnx:`), for the
layers whose file declares no quantisation of its own; on any other point they change nothing
(dse.spec leaves those duplicates out). Each width lies between 2 and the dtype's bits.

A dtype says the widths where no knob does (`dtype_bits`): int8 8-bit weights and activations,
int4 4-bit, w4a8 4-bit weights and 8-bit activations (dse.models.formats: intN and wNaM, N from
2 to 16); activations wider than 13 bits take 13 (int16: int32 sums of int16 x 13-bit products,
as before). The tool quantises to the signed formats: its weights, the network's input and an
activation with no ReLU before it are symmetric signed ranges ([-qmax, qmax], qmax = 2**(b-1) - 1);
an activation after a ReLU is unsigned, [0, 2**b - 1] (all b bits hold its levels, stored as
uintb between layers; Brevitas's QuantReLU, QKeras's quantized_relu, FINN's networks: `act_range`).
A file's own quantisers may be unsigned or signed as it declares (dse.models.qonnx).

`scale_digits: D` (1 to MAX_SCALE_DIGITS; also per layer) bounds the canonical signed digits of
each hidden layer's requantisation multipliers (dse.models.quantize.cheap_multipliers): 1 makes
every scale between layers a power of two, so requantisation is shifts alone (hls4ml's
fixed-point casts), 2 or 3 a shift-and-add of as many terms; without it the multipliers are
exact to MULTIPLIER_BITS bits (up to 8 digits: a DSP block or a LUT multiplier each). It
matters most with `weights: constant`, where those multipliers are the only products left.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from dse.models import formats as number_formats
from dse.models.zoo import DTYPES

FORMAT_KNOBS = ("weight_bits", "act_bits", "scale_digits")
MIN_BITS, MAX_BITS = 2, 16
MAX_SCALE_DIGITS = 8      # a 14-bit multiplier has at most 8 canonical signed digits: exact
MAX_ACT_BITS = 13


def quantisable(dtype: str) -> bool:
    """Whether the tool's quantiser runs a trained network in `dtype`: weights and activations
    both signed integers of 2 to 16 bits (intN, wNaM)."""
    try:
        f = number_formats.parse(dtype)
    except number_formats.FormatError:
        return False
    return all(t.startswith("int") and MIN_BITS <= DTYPES[t].bits <= MAX_BITS for t in (f.weights, f.activations))


def dtype_bits(dtype: str) -> tuple[int, int]:
    """(weight bits, activation bits) a quantisable `dtype` holds: the most a format knob may set."""
    f = number_formats.parse(dtype)
    return DTYPES[f.weights].bits, DTYPES[f.activations].bits


def default_bits(dtype: str) -> tuple[int, int]:
    """(weight bits, activation bits) of `dtype` where no format knob says otherwise."""
    w, a = dtype_bits(dtype)
    return w, min(a, MAX_ACT_BITS)


def int_element(lo: int, hi: int) -> str:
    """The narrowest element type holding [lo, hi] (int2 .. int16, uint2 .. uint16, else int32):
    what a model input of those integers is declared as, so the hardware is sized to it."""
    bits = range_bits(lo, hi)
    if lo < 0:
        return f"int{max(bits, MIN_BITS)}" if bits <= MAX_BITS else "int32"
    return f"uint{max(bits, MIN_BITS)}" if bits <= MAX_BITS else "int32"


def is_format_knob(name: str) -> bool:
    return str(name).partition("@")[0] in FORMAT_KNOBS


def format_range(name: str) -> tuple[int, int, str]:
    """(least, most, what a value counts) of format knob `name` (with or without its @layer)."""
    if str(name).partition("@")[0] == "scale_digits":
        return 1, MAX_SCALE_DIGITS, "non-zero signed digits of a requantisation multiplier"
    return MIN_BITS, MAX_BITS, "bits of a quantised weight or activation"


@dataclass(frozen=True)
class Formats:
    """The format knobs of a point: name ("weight_bits", "act_bits@2", ...) -> bits, sorted."""
    settings: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, knobs: Mapping[str, Any]) -> "Formats":
        return cls(tuple(sorted((k, int(v)) for k, v in knobs.items() if is_format_knob(k))))

    def __bool__(self) -> bool:
        return bool(self.settings)

    def as_dict(self) -> dict[str, int]:
        return dict(self.settings)

    def layers(self) -> set[str]:
        """The layers the settings name (after the `@`)."""
        return {k.partition("@")[2] for k, _ in self.settings if "@" in k}


@dataclass(frozen=True)
class Widths:
    """The bits a quantisation uses: the input's, and each conv/dense layer's weights and output."""
    input: int
    weights: tuple[int, ...]
    outputs: tuple[int, ...]
    scales: tuple[int | None, ...] = ()     # per layer: digits of its requantisation multipliers

    @staticmethod
    def qmax(bits: int) -> int:
        """The largest value of a symmetric signed range of `bits` bits: [-qmax, qmax]."""
        return 2 ** (bits - 1) - 1

    @staticmethod
    def act_range(bits: int, relu: bool) -> tuple[int, int]:
        """The integer range of a `bits`-bit activation: unsigned [0, 2**bits - 1] after a ReLU
        (its values have no sign, so every bit holds levels), else symmetric signed."""
        return (0, 2 ** bits - 1) if relu else (-Widths.qmax(bits), Widths.qmax(bits))


def widths(dtype: str, names: list[str], knobs: Formats | None) -> Widths:
    """The widths of a network whose conv/dense layers are `names` (in order) in `dtype` with
    the format knobs `knobs`; raises ValueError for a layer it does not have or a width the
    dtype cannot hold."""
    if not quantisable(dtype):
        raise ValueError(f"the tool quantises to signed integers of {MIN_BITS} to {MAX_BITS} bits (int8, int4, "
                         f"w4a8, ...), not {dtype}")
    w_default, a_default = default_bits(dtype)
    w_top, a_top = dtype_bits(dtype)
    given = knobs.as_dict() if knobs else {}
    for layer in (knobs.layers() if knobs else set()):
        if not (layer.isdigit() and int(layer) < len(names)) and layer not in names:
            listing = ", ".join(f"{i} ({n})" for i, n in enumerate(names))
            raise ValueError(f"no layer {layer!r} to quantise; the conv/dense layers: {listing}")
    last = len(names) - 1
    for key in given:
        knob, _, layer = key.partition("@")
        if knob in ("act_bits", "scale_digits") and layer and (layer == names[last] or layer == str(last)):
            raise ValueError(f"{key}: the last layer outputs int32 logits, not activations"
                             + (", with no requantisation" if knob == "scale_digits" else ""))

    def bits(knob: str, i: int, default: int | None, top: int) -> int | None:
        v = next((given[k] for k in (f"{knob}@{i}", f"{knob}@{names[i]}") if k in given), given.get(knob, default))
        if knob == "scale_digits":
            if v is not None and not 1 <= v <= MAX_SCALE_DIGITS:
                raise ValueError(f"scale_digits {v} for layer {i} ({names[i]}): 1 to {MAX_SCALE_DIGITS} digits")
        elif not MIN_BITS <= v <= top:
            raise ValueError(f"{knob} {v} for layer {i} ({names[i]}): a {dtype} point holds {MIN_BITS} to {top} bits")
        return v
    a_in = given.get("act_bits", a_default)
    if not MIN_BITS <= a_in <= a_top:
        raise ValueError(f"act_bits {a_in}: a {dtype} point holds {MIN_BITS} to {a_top} bits")
    return Widths(a_in, tuple(bits("weight_bits", i, w_default, w_top) for i in range(len(names))),
                  tuple(bits("act_bits", i, a_default, a_top) for i in range(len(names))),
                  tuple(bits("scale_digits", i, None, MAX_SCALE_DIGITS) for i in range(len(names))))


def layer_names(layers) -> list[str]:
    """Names of a network's conv/dense layers: each one's own (its weights' name in the file),
    else `layer<i>`."""
    return [getattr(layer, "name", "") or f"layer{i}" for i, layer in enumerate(layers)]


def range_bits(lo: int, hi: int) -> int:
    """Bits of an integer range: two's complement where it holds negatives, else unsigned."""
    if lo < 0:
        return max(int(hi).bit_length(), int(-lo - 1).bit_length()) + 1
    return max(int(hi).bit_length(), 1)


def mean_bits(weights: list[tuple[int, int]], acts: list[tuple[int, int]]) -> tuple[float, float]:
    """(mean weight bits, mean activation bits) of ranges: a row's `mean_weight_bits`, `mean_act_bits`."""
    return (sum(range_bits(*r) for r in weights) / len(weights), sum(range_bits(*r) for r in acts) / len(acts))
