"""The host's input map: the input moved and scaled onto [-1, 1] on the calibration samples
before it enters the hardware, the inverse folded into the first layer.

    net = net.standardised(x_train)      # a DenseNet or LayerNet with `input_map` set, first layer folded
    v = net.input_map(x)                 # what the hardware's input receives (then quantised or rounded)
    q = choose([quantise(a), quantise(b)], error=...)    # the quantiser tries both maps, keeps the better

Why: tabular data has features on very different scales (wine's span 0.1 to 1,680). A network
that takes raw features (its scaler folded into its first layer by its author, or by the ONNX
reader from a `Sub`/`Div` or `BatchNormalization` before it) leaves them all to the input's one
quantisation scale, and the small ones vanish: the wine MLP 13-11-7-3 scored 60% in int8 and
33% in int4 against 97.8% in float. With each feature on [-1, 1] it keeps float accuracy down
to int4 (bench/bench_standardised.py).

Three maps (v = a x + c element-wise), cheapest first (`KINDS`):
  * "tensor": one scale, no shift (the input's largest magnitude to 1): the tool's quantisation
    before these maps existed;
  * "scaled": one scale per feature (a conv first layer, whose weights are shared across the
    image: per channel), no shift: each feature's largest magnitude to 1;
  * "centred": per feature (per channel), each feature's calibration range [lo, hi] centred and
    its half-width scaled to 1; into a conv with zero padding scaled only (the padding would
    need the shift too). The shift folds into the first layer's biases, which grow by 4 to 6
    bits (wider sums): worth it where features sit far from zero (wine's) or formats are narrow.
A feature constant on the calibration samples takes the widest feature's scale.

Which map a point gets is measured, not assumed (`choose`): the quantiser builds the network
behind each map and keeps the cheapest whose outputs are not clearly farther from the float
model's on the calibration samples (relative squared error, which needs no labels: a costlier
map must cut the error by a tenth and by more than 0.001 to be kept). On the measurements of
bench/bench_standardised.py this keeps per tensor where it is as good (the digits in int8, and
2-bit first-layer weights, where scaling the columns by their features' ranges would decide which
weights survive the coarse grid: KWS 86% against 47%), "scaled" for the jet- and KWS-shaped
networks in narrow formats (KWS int4 83.1% against 71.6%), "centred" for wine (int4 100% against
33%). A float point chooses the same way among no map, "scaled" and "centred", its error that of
its golden model in the dtype (fp8's range is the reason: raw features past 448 saturate E4M3).

The first layer takes the inverse (exact in real arithmetic): W' = W / a per input column or
channel, b' = b - W' c. Not mapped at all: a network whose file declares its input's
quantisation or its first layer's integer weights (QONNX/QCDQ: the file's grids stay as they
are). The host applies the map (it quantises or rounds the input anyway): the exported interface,
its C driver and its testbench say it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class InputMap:
    """v = scale * x + shift, element-wise on one sample; both arrays of the sample's shape with
    a batch dimension of 1 ((1, features) or (1, C, H, W)). `kind`: how it was calibrated
    ("feature", "channel", "tensor"; "file": a file's preprocessing), what rows and interfaces say."""
    scale: np.ndarray
    shift: np.ndarray
    kind: str = "file"

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Samples (n, ...) mapped, shaped (n, *sample shape)."""
        h = np.asarray(x, np.float64).reshape((len(x), *self.scale.shape[1:]))
        return h * self.scale + self.shift

    def then(self, other: "InputMap") -> "InputMap":
        """This map followed by `other`."""
        return InputMap(self.scale * other.scale, self.shift * other.scale + other.shift, other.kind)

    def describe(self) -> str:
        return {"centred": "per feature (a conv's: per channel) centred onto [-1, 1]",
                "scaled": "per feature (a conv's: per channel) scaled into [-1, 1]",
                "tensor": "per tensor scaled into [-1, 1]"}.get(self.kind, "the file's preprocessing")

    def per_feature(self) -> tuple[np.ndarray, np.ndarray]:
        """(scale, shift) as flat vectors over the flattened sample (what the exported interface lists)."""
        return self.scale.reshape(-1).copy(), self.shift.reshape(-1).copy()


KINDS = ("tensor", "scaled", "centred")        # cheapest first
MARGIN = 0.9                                    # a costlier map is kept if it cuts the error to this fraction
FLOOR = 1e-3                                    # ... and by more than this (tiny errors: all maps are as good)


def calibrate(x: np.ndarray, *, channels: bool, shift: bool = True) -> InputMap:
    """The map taking each feature (channels=False: every value of a sample; True: each channel
    of (n, C, H, W) samples) of the calibration samples `x` onto [-1, 1]; shift=False: scale
    only (onto [-1, 1] by the largest magnitude)."""
    x = np.asarray(x, np.float64)
    axes = (0, *range(2, x.ndim)) if channels else (0,)
    lo, hi = x.min(axis=axes, keepdims=True), x.max(axis=axes, keepdims=True)
    if shift:
        centre, half = (lo + hi) / 2, (hi - lo) / 2
    else:
        centre, half = np.zeros_like(lo), np.maximum(np.abs(lo), np.abs(hi))
    widest = float(half.max())
    half = np.where(half > 0, half, widest if widest > 0 else 1.0)
    shape = (1, *x.shape[1:])
    scale = np.broadcast_to(1.0 / half, shape).copy() if channels else (1.0 / half).reshape(shape)
    return InputMap(scale, np.broadcast_to(-centre / half, shape).copy(), "centred" if shift else "scaled")


def per_tensor(x: np.ndarray) -> InputMap:
    """One scale for every value of the samples `x` (n, ...), no shift: their largest magnitude to 1."""
    x = np.asarray(x, np.float64)
    widest = float(np.abs(x).max()) if x.size else 0.0
    scale = np.full((1, *x.shape[1:]), 1.0 / widest if widest > 0 else 1.0)
    return InputMap(scale, np.zeros_like(scale), "tensor")


def make(x: np.ndarray, kind: str, *, channels: bool, shift_ok: bool = True) -> InputMap:
    """The map of `kind` (KINDS) calibrated on samples `x`; `channels`: per channel of (n, C, H, W);
    `shift_ok` False: "centred" is scaled only (a conv with zero padding)."""
    if kind == "tensor":
        return per_tensor(x)
    if kind not in KINDS:
        raise ValueError(f"unknown input map {kind!r}; expected one of {', '.join(KINDS)}")
    return calibrate(x, channels=channels, shift=kind == "centred" and shift_ok)


def choose(candidates, error):
    """Of `candidates` (cheapest first: networks, or the ValueError building one raised), the
    cheapest whose `error` no costlier one cuts to MARGIN of it by more than FLOOR; if every one
    raised, the first error."""
    best, best_err = None, float("inf")
    for c in candidates:
        if isinstance(c, Exception):
            continue
        e = error(c)
        if best is None or (e < MARGIN * best_err and best_err - e > FLOOR):
            best, best_err = c, e
    if best is None:
        raise candidates[0]
    return best


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """Mean squared error of outputs `got` against `want`, relative to want's mean square."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(((got - want) ** 2).mean() / max(float((want ** 2).mean()), 1e-300))


def fold_dense(W: np.ndarray, b: np.ndarray, m: InputMap) -> tuple[np.ndarray, np.ndarray]:
    """A dense layer (out, in) reading v = m(x) instead of x: W' = W / a, b' = b - W' c."""
    a, c = m.per_feature()
    W2 = W / a[None, :]
    return W2, b - W2 @ c


def fold_conv(W: np.ndarray, b: np.ndarray, m: InputMap) -> tuple[np.ndarray, np.ndarray]:
    """A conv (out, in, kh, kw) reading v = m(x) per channel: W' = W / a_c, b' = b - sum W' c_c."""
    a, c = m.scale[0, :, 0, 0], m.shift[0, :, 0, 0]
    W2 = W / a.reshape(1, -1, 1, 1)
    return W2, b - (W2 * c.reshape(1, -1, 1, 1)).sum(axis=(1, 2, 3))
