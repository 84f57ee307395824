"""Quantisation-aware fine-tuning: a trained float network fine-tuned at a point's integer
format, so that the tool's quantiser (dse.models.quantize, dse.models.convnet) then finds a
network that keeps its accuracy at 2 to 4 bits (a model's `qat:` in the spec).

    tuned = fine_tune(net, dtype="int3", formats=None, x=x_train, y=y_train, options=QatOptions())
    q = tuned.net.quantize(dtype="int3", calibration=x_train)      # quantised exactly as any network

What it trains: the network as the integer model will compute it. The forward pass is the
quantiser's scheme in floating point (`_forward`): the input behind the host's per-feature
centred map (`MAP`, dse.models.standardise; the quantiser keeps it), on its grid; each
conv/dense layer's weights on their grid (one scale per output channel, the last layer one per
tensor; widened per channel as `scale_digits` asks, dse.models.quantize.cheap_multipliers), its
bias on the accumulator's grid, its output through the ReLU onto the activations' grid (rounded
half up, clipped to [0, 2**b - 1]: b-bit activations after a ReLU are unsigned, as the
quantiser's are; a conv without a ReLU, like the input, signed [-qmax, qmax]); a pruned network
keeps its zeros. Gradients pass the rounding straight through (the straight-through estimator)
inside a grid's range and stop outside it. The scales are learned too, LSQ's way (Esser et al.
2019, arXiv 1902.08153): each weight scale per output channel (the last layer's one) and each
activation range, started where they least distort the float network (the mean squared rounding
error over candidates from 20% to 100% of the largest value; `_calibrated`).

What it gives back (`FineTuned.net`): a float network the quantiser takes as it is. Each weight
is clipped to its learned range (so the quantiser's scale, max |row| / qmax, is the learned one),
and each hidden layer's ReLU is bounded at its learned range (`Dense.clip`, `Conv.clip`: the
quantiser calibrates its activation scale on the bounded float outputs, so it finds that range
again wherever the training samples reach it; each epoch starts by lowering a range no training
sample reaches to the largest value they do, so training and quantiser agree).

Adam (the trainer of dse.models.prune: numpy, so it runs wherever the tool runs; tinygrad's
autograd needs a C compiler for its CPU device, and its PYTHON device took 64 s for two Adam
steps of a 64-32-10 MLP: docs/qat.md), mini-batches in a seeded order, a cosine-decayed rate,
softmax cross-entropy on the training split's labels (without labels, the float network's own
answers): the same network, data, format and options give the same network. `epochs` bounds the
work; `time_limit` stops a run that would take longer (an error, never a network cut short).
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from dse.models.classes import cross_entropy, predicted
from dse.models.convnet import Conv, LayerNet, MaxPool, conv, max_pool
from dse.models.quantize import DenseNet, cheap_multipliers

CANDIDATES = np.linspace(0.2, 1.0, 17)      # a range's calibration: fractions of the largest value
WIDE = 64                                   # inputs of a layer beyond which its learning rate is scaled down
# an activation's rounding half up, as the integer requantisation rounds (acc * M + 2**(S-1)) >> S:
# a tie computed in float can land a hair below its half, so it is lifted by TIE first. The
# integer model's values that are not ties lie at least 2**-S >= 2**-30 from one; with
# scale_digits 1 (power-of-two multipliers) ties are common: 2% of the hidden values of the digits
# MLP at 4 bits, rounded down without it
TIE = 2.0 ** -34
# the host's input map the network trains behind (dse.models.standardise): per feature (a conv's
# per channel, scaled only where it pads), centred. The fine-tuned network keeps it (`input_map`
# set), so the quantiser quantises it behind this map, never trying another: its weights and
# ranges were learned for this map's input grid
MAP = "centred"


@dataclass(frozen=True)
class QatOptions:
    """The settings of `qat:` (the spec's mapping; `qat: true` is these defaults)."""
    epochs: int = 30
    batch: int = 64
    learning_rate: float = 1e-2         # weights and biases (Adam; a layer of more than WIDE inputs: scaled
                                        # by WIDE / inputs), decayed to 0 along a cosine
    scale_learning_rate: float = 1e-2   # the log of each learned scale
    seed: int = 0
    validation: float = 0.0             # of the training split held out to keep the best epoch by (0: the last)
    time_limit: float = 1800.0          # seconds; a run that would take longer is an error

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        return (f"{self.epochs} epochs, batch {self.batch}, Adam {self.learning_rate:g} "
                f"(scales {self.scale_learning_rate:g}), seed {self.seed}"
                + (f", best of the epochs on {self.validation:.0%} held out" if self.validation else ""))


OPTION_KEYS = tuple(f.name for f in dataclasses.fields(QatOptions))


def parse_options(value: Any) -> QatOptions | None:
    """`qat:` as the spec gives it: true (the defaults), false (None) or a mapping of
    OPTION_KEYS. Raises QatOptionError naming the key (None: the value itself) and why."""
    if isinstance(value, bool):
        return QatOptions() if value else None
    if not isinstance(value, Mapping):
        raise QatOptionError(None, f"expected true, false or a mapping of {', '.join(OPTION_KEYS)}, "
                                   f"got {type(value).__name__} {value!r}")
    unknown = [k for k in value if k not in OPTION_KEYS]
    if unknown:
        raise QatOptionError(str(unknown[0]), f"unknown key; expected {', '.join(OPTION_KEYS)}")
    checks = {"epochs": (int, 1, 100_000), "batch": (int, 1, 1_000_000), "seed": (int, 0, 2 ** 32 - 1),
              "learning_rate": (float, 1e-9, 1.0), "scale_learning_rate": (float, 0.0, 1.0),
              "validation": (float, 0.0, 0.9),
              "time_limit": (float, 1e-3, 7 * 86400.0)}
    out: dict[str, Any] = {}
    for key, v in value.items():
        kind, lo, hi = checks[key]
        ok = (isinstance(v, int) if kind is int else isinstance(v, (int, float))) and not isinstance(v, bool)
        if not ok or not lo <= v <= hi:
            what = "an integer" if kind is int else "a number"
            raise QatOptionError(key, f"expected {what} from {lo:g} to {hi:g}, got {v!r}")
        out[key] = kind(v)
    return QatOptions(**out)


class QatOptionError(ValueError):
    def __init__(self, key: str | None, message: str):
        super().__init__(message)
        self.key, self.message = key, message


class QatTimeLimit(RuntimeError):
    """Fine-tuning would take longer than its `time_limit`."""


@dataclass(frozen=True)
class FineTuned:
    net: "DenseNet | LayerNet"      # with the input map, weights clipped to their ranges, bounded ReLUs
    seconds: float                  # training time (wall)
    epochs: int
    loss: float                     # the last epoch's mean training loss
    train_accuracy: float           # the fake-quantised network on the training split, after the last epoch
    kept_epoch: int = 0             # the epoch whose network was kept (0: the calibrated start)
    held_out_accuracy: float = float("nan")     # its accuracy on the held-out training samples
    cached: bool = False            # served from $TINYHW_CACHE/qat (`seconds`: the time it took then)


def check_trainable(net: "DenseNet | LayerNet") -> None:
    """ValueError unless fine-tuning can train `net`: the tool's dense networks and chains of
    convolutions, max-pools and dense layers, with no quantisation of their own (a QONNX/QCDQ
    file was trained with its quantisers already)."""
    if isinstance(net, LayerNet) and net.declared:
        raise ValueError("the file declares its own quantisation (QONNX/QCDQ): it was trained with its quantisers, "
                         "and the tool keeps them as they are")


# ---------------------------------------------------------------------------------------------
# the network in training: mutable state of one conv/dense layer, or a pool / flatten

@dataclass
class _Layer:
    layer: Any                      # the float layer (Dense, Conv, Linear, MaxPool, Flatten)
    W: np.ndarray | None = None
    b: np.ndarray | None = None
    relu: bool = False
    last: bool = False
    wq: int = 0                     # the weights' qmax
    aq: int = 0                     # the output activations' largest integer (0: the last layer, logits):
                                    # 2**b - 1 after a ReLU (unsigned), else 2**(b-1) - 1 (signed, [-aq, aq])
    digits: int | None = None       # scale_digits
    mask: np.ndarray | None = None  # pruned: True where a weight may be non-zero
    log_alpha: np.ndarray | None = None   # log of the weight range per output channel ((1,): the last layer)
    log_clip: np.ndarray | None = None    # log of the activation range, (1,)

    @property
    def computes(self) -> bool:
        return self.W is not None

    @property
    def is_conv(self) -> bool:
        return isinstance(self.layer, Conv)

    def rows(self) -> np.ndarray:
        return self.W.reshape(len(self.W), -1)

    def row_max(self) -> np.ndarray:
        """The largest |weight| per output channel ((1,) for the last layer), what caps its range;
        a row of zeros (pruned away) takes the layer's, as the quantiser gives it."""
        a = np.abs(self.rows())
        if self.last:
            return np.array([max(float(a.max()), 1e-12)])
        rows = a.max(axis=1)
        return np.where(rows > 0, rows, max(float(a.max()), 1e-12))


def _layers(net, widths) -> list[_Layer]:
    from dse.models.widths import Widths
    computes = [layer for layer in net.layers if hasattr(layer, "W")]
    out, j = [], 0
    for layer in net.layers:
        if not hasattr(layer, "W"):
            out.append(_Layer(layer))
            continue
        last = j == len(computes) - 1
        # the activations' grid is the quantiser's (Widths.act_range): unsigned after a ReLU
        aq = 0 if last else Widths.act_range(widths.outputs[j], layer.relu)[1]
        out.append(_Layer(layer, np.array(layer.W, np.float64), np.array(layer.b, np.float64), layer.relu, last,
                          Widths.qmax(widths.weights[j]), aq, None if last else widths.scales[j]))
        j += 1
    return out


def _weight_grid(L: _Layer, s_in: float, s_out: float | None) -> np.ndarray:
    """The weight scale per output channel, widened as scale_digits asks (quantize's rule)."""
    s_w = np.broadcast_to(np.exp(L.log_alpha) / L.wq, (len(L.W),)).copy()
    if L.digits is not None and s_out is not None:
        _, stretch = cheap_multipliers(s_in * s_w / s_out, L.digits)
        s_w = s_w * stretch
    return s_w


def _shape(v: np.ndarray, ndim: int) -> np.ndarray:
    return v.reshape((-1,) + (1,) * (ndim - 1))


def _im2col(h: np.ndarray, kh: int, kw: int, stride, pads) -> tuple[np.ndarray, tuple]:
    t, l, b, r = pads
    x = np.pad(h, ((0, 0), (0, 0), (t, b), (l, r)))
    sy, sx = stride
    oh, ow = (x.shape[2] - kh) // sy + 1, (x.shape[3] - kw) // sx + 1
    cols = np.empty((len(h), oh, ow, h.shape[1], kh, kw))
    for dy in range(kh):
        for dx in range(kw):
            cols[:, :, :, :, dy, dx] = x[:, :, dy:dy + sy * (oh - 1) + 1:sy, dx:dx + sx * (ow - 1) + 1:sx] \
                .transpose(0, 2, 3, 1)
    return cols.reshape(len(h) * oh * ow, -1), (x.shape, oh, ow)


def _col2im(g_cols: np.ndarray, shape: tuple, kh: int, kw: int, stride, pads, n: int, channels: int) -> np.ndarray:
    padded, oh, ow = shape
    sy, sx = stride
    g = g_cols.reshape(n, oh, ow, channels, kh, kw)
    x = np.zeros(padded)
    for dy in range(kh):
        for dx in range(kw):
            x[:, :, dy:dy + sy * (oh - 1) + 1:sy, dx:dx + sx * (ow - 1) + 1:sx] += g[:, :, :, :, dy, dx].transpose(0, 3, 1, 2)
    t, l, b, r = pads
    return x[:, :, t:padded[2] - b, l:padded[3] - r]


def _pool_forward(h: np.ndarray, kernel, stride) -> tuple[np.ndarray, np.ndarray]:
    """Max-pool and the index (in the window) of each output's first maximum."""
    (kh, kw), (sy, sx) = kernel, stride
    oh, ow = (h.shape[2] - kh) // sy + 1, (h.shape[3] - kw) // sx + 1
    patches = np.stack([h[:, :, dy:dy + sy * (oh - 1) + 1:sy, dx:dx + sx * (ow - 1) + 1:sx]
                        for dy in range(kh) for dx in range(kw)])
    which = patches.argmax(axis=0)
    return np.take_along_axis(patches, which[None], 0)[0], which


def _pool_backward(g: np.ndarray, which: np.ndarray, shape: tuple, kernel, stride) -> np.ndarray:
    (kh, kw), (sy, sx) = kernel, stride
    oh, ow = g.shape[2], g.shape[3]
    out = np.zeros(shape)
    for k in range(kh * kw):
        dy, dx = divmod(k, kw)
        out[:, :, dy:dy + sy * (oh - 1) + 1:sy, dx:dx + sx * (ow - 1) + 1:sx] += g * (which == k)
    return out


# ---------------------------------------------------------------------------------------------
# forward and backward of the fake-quantised network

@dataclass
class _Input:
    """The input's grid: the largest mapped value over the training split / q (the quantiser's)."""
    q: int
    top: float = 1.0

    @property
    def scale(self) -> float:
        return self.top / self.q


def _forward(layers: list[_Layer], x: np.ndarray, inp: _Input, tape: list | None):
    """Logits of the network as the integer model computes them (in real units), on mapped
    samples `x`; `tape` collects what the backward pass needs."""
    h = np.clip(np.round(x / inp.scale), -inp.q, inp.q) * inp.scale
    s_in = inp.scale
    for L in layers:
        if not L.computes:
            if isinstance(L.layer, MaxPool):
                out, which = _pool_forward(h, L.layer.kernel, L.layer.stride)
                if tape is not None:
                    tape.append((h.shape, which))
                h = out
            else:
                if tape is not None:
                    tape.append(h.shape)
                h = h.reshape(len(h), -1)
            continue
        s_out = None if L.last else float(np.exp(L.log_clip[0])) / L.aq
        s_w = _weight_grid(L, s_in, s_out)
        alpha = _shape(np.broadcast_to(np.exp(L.log_alpha), (len(L.W),)), L.W.ndim)
        inside = np.abs(L.W) <= alpha              # a weight beyond its range is clipped to it, as _finished does
        v = np.clip(L.W, -alpha, alpha) / _shape(s_w, L.W.ndim)
        r = np.round(v)                             # within the grid: alpha <= qmax x its (widened) scale
        Wq = r * _shape(s_w, L.W.ndim)
        acc = s_in * s_w
        bq = np.round(L.b / acc) * acc
        if L.is_conv:
            kh, kw = L.W.shape[2:]
            cols, geometry = _im2col(h, kh, kw, L.layer.stride, L.layer.pads)
            _, oh, ow = geometry
            z = (cols @ Wq.reshape(len(Wq), -1).T + bq).reshape(len(h), oh, ow, -1).transpose(0, 3, 1, 2)
            saved = (cols, geometry, h.shape)
        else:
            z = h @ Wq.T + bq
            saved = h
        if L.last:
            out, act = z, None
        else:
            u = z / s_out
            lo = 0 if L.relu else -L.aq
            ra = np.clip(np.floor(u + 0.5 + TIE), lo, L.aq)
            out = ra * s_out
            act = (u, ra, (u >= lo) & (u <= L.aq), s_out)
        if tape is not None:
            tape.append((saved, s_w, v, r, inside, Wq, act))
        h = out
        s_in = s_out if s_out is not None else s_in
    return h


def _backward(layers: list[_Layer], tape: list, g: np.ndarray) -> dict[int, tuple]:
    """Gradients per conv/dense layer index: (dW, db, d log_alpha, d log_clip or None)."""
    grads: dict[int, tuple] = {}
    first = next(i for i, L in enumerate(layers) if L.computes)
    for i in range(len(layers) - 1, first - 1, -1):     # nothing before the first layer learns
        L, t = layers[i], tape[i]
        if not L.computes:
            if isinstance(L.layer, MaxPool):
                shape, which = t
                g = _pool_backward(g, which, shape, L.layer.kernel, L.layer.stride)
            else:
                g = g.reshape(t)
            continue
        saved, s_w, v, r, inside, Wq, act = t
        d_clip = None
        if act is not None:
            u, ra, within, s_out = act
            d_s_out = float((g * (ra - u * within)).sum())
            d_clip = np.array([d_s_out * s_out])          # d/d log(clip): s_out = clip / aq
            g = g * within
        if L.is_conv:
            cols, geometry, in_shape = saved
            gz = g.transpose(0, 2, 3, 1).reshape(-1, g.shape[1])
            dWq = (gz.T @ cols).reshape(Wq.shape)
            db = gz.sum(0)
            if i > first:
                kh, kw = L.W.shape[2:]
                g = _col2im(gz @ Wq.reshape(len(Wq), -1), geometry, kh, kw, L.layer.stride, L.layer.pads,
                            in_shape[0], in_shape[1])
        else:
            h = saved
            dWq = g.T @ h
            db = g.sum(0)
            if i > first:
                g = g @ Wq
        dW = dWq * inside
        if L.mask is not None:
            dW = dW * L.mask
        # d Wq / d log(alpha): a clipped weight moves with its range (sign x alpha); the grid with its
        # scale, LSQ's (round(v) - v) x scale (the widened scale moves with alpha between its steps)
        alpha = _shape(np.broadcast_to(np.exp(L.log_alpha), (len(L.W),)), L.W.ndim)
        d_alpha = np.where(inside, (r - v) * _shape(s_w, L.W.ndim), np.sign(L.W) * alpha)
        d_s = (dWq * d_alpha).reshape(len(dWq), -1).sum(1)
        grads[i] = (dW, db, d_s.sum(keepdims=True) if L.last else d_s, d_clip)
    return grads


# ---------------------------------------------------------------------------------------------
# calibrated starting ranges

def _rounding_error(values: np.ndarray, top: np.ndarray, q: int, lo: int, half_up: bool) -> np.ndarray:
    """Squared rounding error of `values` (rows, k) on the grid top / q, per row and candidate
    top (rows, c): (rows, c)."""
    s = top[:, :, None] / q
    u = values[:, None, :] / s
    r = np.clip(np.floor(u + 0.5) if half_up else np.round(u), lo, q)
    return ((r * s - values[:, None, :]) ** 2).sum(-1)


def _best_range(values: np.ndarray, q: int, lo: int, half_up: bool) -> np.ndarray:
    """Per row of `values` (rows, k): the range among CANDIDATES x max |row| with the least
    squared rounding error."""
    top = np.maximum(np.abs(values).max(axis=1), 1e-12)
    tops = top[:, None] * CANDIDATES[None, :]
    return tops[np.arange(len(values)), _rounding_error(values, tops, q, lo, half_up).argmin(1)]


def _calibrated(layers: list[_Layer], x: np.ndarray) -> None:
    """Starting weight and activation ranges: the least rounding error on the float network."""
    h = x
    for L in layers:
        if not L.computes:
            h = max_pool(h, L.layer.kernel, L.layer.stride) if isinstance(L.layer, MaxPool) else h.reshape(len(h), -1)
            continue
        rows = L.rows().reshape(1, -1) if L.last else L.rows()
        alpha = _best_range(rows, L.wq, -L.wq, half_up=False)
        if not L.last:
            alpha = np.where(np.abs(L.rows()).max(axis=1) > 0, alpha, L.row_max())
        L.log_alpha = np.log(alpha)
        z = conv(h, L.W, L.layer.stride, L.layer.pads) + L.b.reshape(1, -1, 1, 1) if L.is_conv else h @ L.W.T + L.b
        h = np.maximum(z, 0) if L.relu else z
        if not L.last:
            sample = h.reshape(1, -1)[:, :: max(1, h.size // 200_000)]
            clip = float(_best_range(sample, L.aq, 0 if L.relu else -L.aq, half_up=True)[0])
            L.log_clip = np.array([math.log(max(clip, 1e-12))])
            h = np.clip(h, 0 if L.relu else -clip, clip)


def _float_maxima(layers: list[_Layer], inp: _Input, x: np.ndarray) -> None:
    """The input's grid from the largest mapped value over the training split; and each
    activation range no training sample reaches lowered to the largest value they do: the
    quantiser's calibration (max over the bounded float outputs) finds the same scales."""
    h = x
    inp.top = max(float(np.abs(h).max()), 1e-12)
    for L in layers:
        if not L.computes:
            h = max_pool(h, L.layer.kernel, L.layer.stride) if isinstance(L.layer, MaxPool) else h.reshape(len(h), -1)
            continue
        alpha = _shape(np.broadcast_to(np.exp(L.log_alpha), (len(L.W),)), L.W.ndim)
        W = np.clip(L.W, -alpha, alpha)
        z = conv(h, W, L.layer.stride, L.layer.pads) + L.b.reshape(1, -1, 1, 1) if L.is_conv else h @ W.T + L.b
        if L.last:
            return
        clip = float(np.exp(L.log_clip[0]))
        h = np.clip(z, 0 if L.relu else -clip, clip)
        top = float(h.max()) if L.relu else float(np.abs(h).max())
        if 0 < top < clip:
            L.log_clip[0] = math.log(top)          # in place: the optimiser holds this array


# ---------------------------------------------------------------------------------------------
# training

class _Adam:
    def __init__(self, params: list[np.ndarray], beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8):
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]
        self.t, self.beta1, self.beta2, self.eps = 0, beta1, beta2, eps

    def step(self, params: list[np.ndarray], grads: list[np.ndarray], rates: list[float]) -> None:
        self.t += 1
        c1, c2 = 1 - self.beta1 ** self.t, 1 - self.beta2 ** self.t
        for p, g, m, v, lr in zip(params, grads, self.m, self.v, rates):
            m *= self.beta1
            m += (1 - self.beta1) * g
            v *= self.beta2
            v += (1 - self.beta2) * g * g
            p -= lr * (m / c1) / (np.sqrt(v / c2) + self.eps)


def fine_tune(net: "DenseNet | LayerNet", *, dtype: str, formats, x: np.ndarray, y: np.ndarray | None,
              options: QatOptions, pruned: bool = False,
              progress: Callable[[str], None] | None = None) -> FineTuned:
    """`net` fine-tuned at `dtype` with the format knobs `formats` (dse.models.widths.Formats,
    each layer named as the quantiser names it) on the training samples `x` (n, ...) and labels
    `y` (None: the float network's answers); `pruned`: keep its zero weights zero. `progress`
    receives a line now and then (at most every 10 s). Raises QatTimeLimit (module docstring)."""
    from dse.models.widths import Widths, layer_names, widths
    check_trainable(net)
    t0 = time.perf_counter()
    x = np.asarray(x, np.float64).reshape(len(x), -1)
    y = predicted(net.float_logits(x)) if y is None else np.asarray(y, np.int64)
    mapped = net.standardised(x, MAP)            # the host's input map, kept (MAP)
    computes = [layer for layer in mapped.layers if hasattr(layer, "W")]
    bits = widths(dtype, layer_names(computes), formats)
    layers = _layers(mapped, bits)
    for L in layers:
        if pruned and L.computes:
            L.mask = L.W != 0
    xs = _mapped(mapped, x)
    inp = _Input(Widths.qmax(bits.input))
    _calibrated(layers, xs)
    train, held = _held_out(y, options.validation, options.seed)
    computing = [L for L in layers if L.computes]
    params = [p for L in computing for p in (L.W, L.b)]
    scales = [L.log_alpha for L in computing] + [L.log_clip for L in computing if not L.last]
    adam = _Adam(params + scales)
    # Adam moves every weight about the same step, so a unit's sum moves with its number of
    # inputs: a layer of more than WIDE inputs takes a step WIDE / inputs as large (as muP scales
    # Adam's rate for hidden layers, Yang et al. 2022, arXiv 2203.03466)
    fan_in = [L.rows().shape[1] for L in computing]
    rates = [options.learning_rate * min(1.0, WIDE / n) for n in fan_in for _ in range(2)] + \
        [options.scale_learning_rate] * len(scales)
    rng = np.random.default_rng(options.seed)
    total, step, said = options.epochs * math.ceil(len(train) / options.batch), 0, time.perf_counter()
    loss = acc = float("nan")
    _float_maxima(layers, inp, xs)
    best = (_score(layers, inp, xs[held], y[held]), 0, [p.copy() for p in params + scales]) if len(held) else None
    for epoch in range(options.epochs):
        order = train[rng.permutation(len(train))]
        losses = right = 0.0
        for start in range(0, len(order), options.batch):
            batch = order[start:start + options.batch]
            tape: list = []
            batch_loss, g, batch_acc = cross_entropy(_forward(layers, xs[batch], inp, tape), y[batch])
            losses += batch_loss * len(batch)
            right += batch_acc * len(batch)
            grads = _backward(layers, tape, g)
            decay = 0.5 * (1 + math.cos(math.pi * step / total))
            adam.step(params + scales,
                      [d for i in sorted(grads) for d in grads[i][:2]] + [grads[i][2] for i in sorted(grads)]
                      + [grads[i][3] for i in sorted(grads) if grads[i][3] is not None],
                      [r * decay for r in rates])
            step += 1
            for L in computing:
                if L.mask is not None:
                    L.W *= L.mask
                np.minimum(L.log_alpha, np.log(L.row_max()), out=L.log_alpha)
        loss, acc = losses / len(train), right / len(train)
        _float_maxima(layers, inp, xs)
        if best is not None:
            score = _score(layers, inp, xs[held], y[held])
            if score >= best[0]:            # the later of equals: more trained
                best = (score, epoch + 1, [p.copy() for p in params + scales])
        elapsed = time.perf_counter() - t0
        projected = elapsed / (epoch + 1) * options.epochs
        if elapsed > options.time_limit or projected > options.time_limit * 1.05:
            raise QatTimeLimit(f"{options.epochs} epochs take about {projected:.0f} s here "
                               f"({elapsed / (epoch + 1):.1f} s each), beyond qat.time_limit "
                               f"{options.time_limit:g} s: lower qat.epochs or raise qat.time_limit")
        if progress is not None and time.perf_counter() - said >= 10:
            progress(f"epoch {epoch + 1}/{options.epochs}, loss {loss:.4f}, training accuracy {acc:.2%}"
                     + (f", held-out accuracy {score[0]:.2%}" if best is not None else "") + f", {elapsed:.0f} s")
            said = time.perf_counter()
    kept, held_acc = options.epochs, float("nan")
    if best is not None:
        (held_acc, _), kept, values = best
        for p, v in zip(params + scales, values):
            p[...] = v
        _float_maxima(layers, inp, xs)
    return FineTuned(_finished(mapped, layers), time.perf_counter() - t0, options.epochs, loss, acc, kept, held_acc)


def _held_out(y: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training indices, held-out indices): `fraction` of the samples held out to choose the
    epoch by, stratified by label where every label has two samples or more, seeded."""
    n = len(y)
    held = int(round(fraction * n))
    if held < 1 or held >= n:
        return np.arange(n), np.arange(0)
    from sklearn.model_selection import train_test_split
    counts = np.unique(y, return_counts=True)[1]
    stratify = y if counts.min() >= 2 and min(held, n - held) >= len(counts) else None
    train, out = train_test_split(np.arange(n), test_size=held, random_state=seed, stratify=stratify)
    return np.sort(train), np.sort(out)


def _score(layers: list[_Layer], inp: _Input, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(accuracy, -loss) of the network as it trains on held-out samples: the larger the better."""
    loss, _, acc = cross_entropy(_forward(layers, x, inp, None), y)
    return acc, -loss


def _mapped(net, x: np.ndarray) -> np.ndarray:
    """Raw samples as the network's layers read them: the input map applied, in the input's shape."""
    shape = getattr(net, "input_shape", (1, net.inputs))
    x = np.asarray(x, np.float64).reshape(len(x), -1)
    return net.host_input(x).reshape((len(x), *shape[1:]))


def _finished(mapped, layers: list[_Layer]):
    """The network the quantiser takes: weights clipped to their learned ranges, ReLUs bounded."""
    out = []
    for L in layers:
        if not L.computes:
            out.append(L.layer)
            continue
        alpha = _shape(np.broadcast_to(np.exp(L.log_alpha), (len(L.W),)), L.W.ndim)
        W = np.clip(L.W, -alpha, alpha)
        if L.mask is not None:
            W = W * L.mask
        clip = None if L.last else float(np.exp(L.log_clip[0]))
        out.append(dataclasses.replace(L.layer, W=W, b=L.b.copy(), clip=clip))
    return dataclasses.replace(mapped, layers=tuple(out))


def fake_quant_logits(tuned: FineTuned, dtype: str, formats, x: np.ndarray, calibration: np.ndarray) -> np.ndarray:
    """The fine-tuned network's logits as training computes them, on raw samples `x` (the
    input's grid from the `calibration` samples, as the quantiser's): what the integer model's
    agree with (tests)."""
    from dse.models.widths import Widths, layer_names, widths
    net = tuned.net
    bits = widths(dtype, layer_names([layer for layer in net.layers if hasattr(layer, "W")]), formats)
    layers = _layers(net, bits)
    for L in layers:
        if L.computes:
            L.log_alpha = np.log(L.row_max())
            if not L.last:
                L.log_clip = np.array([math.log(L.layer.clip)])
    inp = _Input(Widths.qmax(bits.input))
    _float_maxima(layers, inp, _mapped(net, calibration))
    return _forward(layers, _mapped(net, x), inp, None)


# ---------------------------------------------------------------------------------------------
# the cache: a fine-tuned network is computed once per content (compiler.cache.QAT)

def cached_fine_tune(net: "DenseNet | LayerNet", *, dtype: str, formats, x: np.ndarray, y: np.ndarray | None,
                     options: QatOptions, pruned: bool = False,
                     progress: Callable[[str], None] | None = None) -> FineTuned:
    """`fine_tune`, served from $TINYHW_CACHE/qat when the same network (by content), training
    samples, widths and options were fine-tuned before (`FineTuned.cached`); one process
    computes a missing entry while others wait for it."""
    from compiler.cache import QAT
    from dse.models.widths import layer_names, widths
    x = np.asarray(x, np.float64).reshape(len(x), -1)
    bits = widths(dtype, layer_names([layer for layer in net.layers if hasattr(layer, "W")]), formats)
    material = {"net": _digest(net), "x": _digest(x), "y": None if y is None else _digest(np.asarray(y, np.int64)),
                "dtype": dtype, "widths": dataclasses.asdict(bits), "options": options.as_dict(), "pruned": pruned}
    key = QAT.key(material)
    tuned = _read_entry(QAT, key, net, x)
    if tuned is not None:
        return tuned
    with QAT.lock(key):
        tuned = _read_entry(QAT, key, net, x)
        if tuned is not None:
            return tuned
        tuned = fine_tune(net, dtype=dtype, formats=formats, x=x, y=y, options=options, pruned=pruned,
                          progress=progress)
        import tempfile
        from pathlib import Path
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "net.npz"
            np.savez(path, **_arrays(tuned.net))
            QAT.write(key, {"seconds": tuned.seconds, "epochs": tuned.epochs, "loss": tuned.loss,
                            "train_accuracy": tuned.train_accuracy, "kept_epoch": tuned.kept_epoch,
                            "held_out_accuracy": tuned.held_out_accuracy}, files={"net.npz": path}, material=material)
    return tuned


def _digest(value: Any) -> str:
    """SHA-256 of a network (its layers' types, settings and arrays, its input map) or an array."""
    import hashlib
    h = hashlib.sha256()

    def add(v: Any) -> None:
        if isinstance(v, np.ndarray):
            a = np.ascontiguousarray(v)
            h.update(f"array {a.dtype.str} {a.shape}".encode())
            h.update(a.tobytes())
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            h.update(type(v).__name__.encode())
            for f in dataclasses.fields(v):
                h.update(f.name.encode())
                add(getattr(v, f.name))
        elif isinstance(v, (tuple, list)):
            h.update(f"seq {len(v)}".encode())
            for item in v:
                add(item)
        else:
            h.update(repr(v).encode())
        h.update(b"\0")
    add(value)
    return h.hexdigest()


def _arrays(net) -> dict[str, np.ndarray]:
    """What a fine-tuned network adds to the one it started from: each conv/dense layer's W, b
    and ReLU bound, and the input map."""
    out: dict[str, np.ndarray] = {"map_scale": net.input_map.scale, "map_shift": net.input_map.shift}
    for i, layer in enumerate((layer for layer in net.layers if hasattr(layer, "W")), 1):
        out[f"W{i}"], out[f"b{i}"] = layer.W, layer.b
        out[f"clip{i}"] = np.array(np.nan if layer.clip is None else layer.clip)
    return out


def _read_entry(cache, key: str, net, x: np.ndarray) -> FineTuned | None:
    """The entry under `key` as a FineTuned (its arrays on `net` behind its input map), or None."""
    entry = cache.read(key)
    if entry is None:
        return None
    try:
        with np.load(cache.path(key, "net.npz"), allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except (OSError, ValueError):
        return None
    mapped = net.standardised(x, MAP)
    layers, i = [], 0
    for layer in mapped.layers:
        if hasattr(layer, "W"):
            i += 1
            clip = float(arrays[f"clip{i}"])
            layer = dataclasses.replace(layer, W=arrays[f"W{i}"], b=arrays[f"b{i}"],
                                        clip=None if math.isnan(clip) else clip)
        layers.append(layer)
    m = dataclasses.replace(mapped.input_map, scale=arrays["map_scale"], shift=arrays["map_shift"])
    return FineTuned(dataclasses.replace(mapped, layers=tuple(layers), input_map=m), float(entry["seconds"]),
                     int(entry["epochs"]), float(entry["loss"]), float(entry["train_accuracy"]),
                     int(entry["kept_epoch"]), float(entry["held_out_accuracy"]), cached=True)
