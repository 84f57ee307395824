"""Chains of convolutions, max-pools and dense layers (a small CNN from ONNX): the float model
and its post-training quantisation, by the same scheme as dense networks (dse.models.quantize).

    net = read_chain(Path("cnn.onnx"))                   # dse.models.chain: Conv, Relu, MaxPool, Flatten, Gemm, ...
    q = net.quantize(dtype="int8", calibration=x_train)
    built, arrays = q.built(), q.arrays()                # the integer model as a tinygrad model
    logits = q.reference(q.quantize_input(x))            # its numpy golden model, bit-exact

Float dtypes of such a graph do not come through here: they run the whole ONNX graph with
tinygrad's importer (dse.models.data.onnx_built). Here: the float64 model in numpy (the accuracy
baseline, and the calibration), and the integer model, whose numpy reference is exact whatever
order the hardware sums in (integer sums wrap the same way in any order).

The scheme (dse.models.quantize.SCHEME): zero points 0; inputs and activations per tensor;
weights signed symmetric, per output channel in hidden layers (conv and dense), per tensor in
the last one; int32 biases and accumulators; multiply-and-shift requantisation after every layer
but the last. A b-bit activation where a ReLU follows (a ReLU after a max-pool commutes with it
and is folded the same way) is unsigned, clipped to [0, 2**b - 1] and stored as uintb; the input,
and an activation where none does, is signed symmetric, [-qmax, qmax] with qmax = 2**(b-1) - 1
(dse.models.widths.Widths.act_range). Max-pools run on the requantised activations (the
requantisation is monotonic, so pooling commutes with it), so a max-pool after a ReLU keeps
the unsigned range.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from compiler.host_input import HostInput
from dse.models import zoo
from dse.models.quantize import SCHEME, cheap_multipliers, requantisation, requantisation_input
from dse.models.standardise import KINDS, InputMap, choose, fold_conv, fold_dense, make, relative_error

if TYPE_CHECKING:   # dse.models.qonnx reads files into these layers; imported for the names only
    from dse.models.qonnx import Quantiser, WeightGrid

@dataclass(frozen=True)
class Conv:
    W: np.ndarray                       # (out, in, kh, kw)
    b: np.ndarray                       # (out,)
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]     # top, left, bottom, right (ONNX order: begins, then ends)
    relu: bool = False
    grid: "WeightGrid | None" = None    # integer weights the file declares (W = their values)
    out_quant: "Quantiser | None" = None    # the file's quantiser of this layer's output (after its ReLU)
    name: str = ""                      # its weights' name in the file (format knobs name layers by it)
    clip: float | None = None           # its output bounded to [0, clip] ([-clip, clip] without a ReLU):
                                        # quantisation-aware fine-tuning's learned range (dse.models.qat)


@dataclass(frozen=True)
class Linear:
    W: np.ndarray                       # (out, in)
    b: np.ndarray                       # (out,)
    relu: bool = False
    grid: "WeightGrid | None" = None
    out_quant: "Quantiser | None" = None
    name: str = ""
    clip: float | None = None           # as Conv.clip


@dataclass(frozen=True)
class MaxPool:
    kernel: tuple[int, int]
    stride: tuple[int, int]


@dataclass(frozen=True)
class Flatten:
    pass


Layer = Conv | Linear | MaxPool | Flatten


# ---------------------------------------------------------------------------------------------
# the operations in numpy, on batches (n, C, H, W) / (n, features); float64 or int64

def conv(x: np.ndarray, W: np.ndarray, stride: tuple[int, int], pads: tuple[int, int, int, int]) -> np.ndarray:
    t, l, b, r = pads
    x = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)))
    kh, kw = W.shape[2:]
    oh, ow = (x.shape[2] - kh) // stride[0] + 1, (x.shape[3] - kw) // stride[1] + 1
    out = np.zeros((len(x), W.shape[0], oh, ow), np.result_type(x, W))
    for dy in range(kh):
        for dx in range(kw):
            patch = x[:, :, dy:dy + stride[0] * (oh - 1) + 1:stride[0], dx:dx + stride[1] * (ow - 1) + 1:stride[1]]
            out += np.einsum("oc,nchw->nohw", W[:, :, dy, dx], patch)
    return out


def max_pool(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int]) -> np.ndarray:
    oh, ow = (x.shape[2] - kernel[0]) // stride[0] + 1, (x.shape[3] - kernel[1]) // stride[1] + 1
    out = None
    for dy in range(kernel[0]):
        for dx in range(kernel[1]):
            patch = x[:, :, dy:dy + stride[0] * (oh - 1) + 1:stride[0], dx:dx + stride[1] * (ow - 1) + 1:stride[1]]
            out = patch if out is None else np.maximum(out, patch)
    return out


def _channel(v: np.ndarray, ndim: int) -> np.ndarray:
    """A per-channel vector shaped to broadcast over (n, C, H, W) or (n, C)."""
    return v.reshape((1, -1) + (1,) * (ndim - 2))


# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LayerNet:
    """The layers, and the quantisation a file declares (dse.models.qonnx: QONNX or QCDQ): a
    quantiser of the input (after `input_map`, the affine preprocessing before it, which the
    host applies), integer weights and output quantisers on the layers. Without a quantiser of
    the input, `input_map` is the tool's (dse.models.standardise, `standardised`)."""
    input_shape: tuple[int, ...]         # one sample, with the batch dimension 1: (1, C, H, W)
    layers: tuple[Layer, ...]
    input_quant: "Quantiser | None" = None
    input_map: InputMap | None = None    # the host's map of the input; the layers (or input_quant) read its output

    @property
    def inputs(self) -> int:
        return math.prod(self.input_shape)

    @property
    def declared(self) -> bool:
        """Whether the file declares quantisation (bits and scales) anywhere."""
        return self.input_quant is not None or any(
            getattr(layer, "grid", None) is not None or getattr(layer, "out_quant", None) is not None
            for layer in self.layers)

    @property
    def clipped(self) -> bool:
        """Whether a layer's output is bounded (a network fine-tuned for an integer format, which
        the float builds do not run: dse.models.floatnet, fp8net)."""
        return any(getattr(layer, "clip", None) is not None for layer in self.layers)

    def mapped_input(self, x: np.ndarray) -> np.ndarray:
        """Samples (n, ...) shaped (n, *input_shape[1:]), the input map applied."""
        h = np.asarray(x, np.float64).reshape((len(x), *self.input_shape[1:]))
        return h if self.input_map is None else self.input_map(h)

    host_input = mapped_input

    def standardised(self, x: np.ndarray, kind: str = "centred") -> "LayerNet":
        """This network behind the host's input map of `kind` (dse.models.standardise.KINDS)
        calibrated on samples `x`: per feature into a dense first layer, per channel into a conv
        (scaled only, where the conv pads with zeros). Itself where it has a map already, where
        its file declares the input's quantisation or the first layer's integer weights, or where
        something other than a Flatten comes before the first layer."""
        import dataclasses
        first = next(i for i, layer in enumerate(self.layers) if isinstance(layer, (Conv, Linear)))
        layer = self.layers[first]
        if self.input_map is not None or self.input_quant is not None or layer.grid is not None \
                or not all(isinstance(m, Flatten) for m in self.layers[:first]):
            return self
        h = self.mapped_input(x)
        conv_first = isinstance(layer, Conv)
        m = make(h, kind, channels=conv_first, shift_ok=not (conv_first and any(layer.pads)))
        W, b = (fold_conv if conv_first else fold_dense)(layer.W, layer.b, m)
        layers = list(self.layers)
        layers[first] = dataclasses.replace(layer, W=W, b=b)
        return dataclasses.replace(self, layers=tuple(layers), input_map=m)

    def float_logits(self, x: np.ndarray) -> np.ndarray:
        """The float model in float64 on samples (n, ...): (n, outputs); with the quantisers
        the file declares (its weights are their values already), as the file computes."""
        h = self.mapped_input(x)
        if self.input_quant is not None:
            h = self.input_quant(h)
        for layer in self.layers:
            h = _float_layer(layer, h)
            if getattr(layer, "out_quant", None) is not None:
                h = layer.out_quant(h)
        return h.reshape(len(h), -1)

    def quantize(self, *, dtype: str, calibration: np.ndarray, formats=None) -> "QuantLayerNet":
        return quantize_layers(net=self, dtype=dtype, calibration=calibration, formats=formats)


def weightless(layer: Layer, h: np.ndarray) -> np.ndarray | None:
    """Samples `h` (n, ...) through a MaxPool or a Flatten; None for a layer with weights (every
    numpy model of a chain walks its layers this way)."""
    if isinstance(layer, MaxPool):
        return max_pool(h, layer.kernel, layer.stride)
    if isinstance(layer, Flatten):
        return h.reshape(len(h), -1)
    return None


def _float_layer(layer: Layer, h: np.ndarray) -> np.ndarray:
    moved = weightless(layer, h)
    if moved is not None:
        return moved
    if isinstance(layer, Conv):
        h = conv(h, layer.W, layer.stride, layer.pads) + _channel(layer.b, 4)
    else:
        h = h @ layer.W.T + layer.b
    if layer.clip is not None:
        return np.clip(h, 0.0 if layer.relu else -layer.clip, layer.clip)
    return np.maximum(h, 0.0) if layer.relu else h


@dataclass(frozen=True)
class QuantStep:
    """One layer of the integer model: a conv or dense layer with its integer weights and
    requantisation (M None: the last one, whose int32 accumulators are the outputs), or a
    max-pool / flatten. A requantised output is clipped to [lo, hi] and rounded by `offset`
    (2**(S-1): to nearest, ties up; 0: down; 2**S - 1: up), or, with `even`, to nearest with
    ties to even (offset 2**(S-1) - 1 plus the result's lowest bit)."""
    layer: Layer                        # the float layer (shapes, strides, pads, relu)
    W: np.ndarray | None = None         # integers in the weights' container
    b: np.ndarray | None = None         # int32, on the accumulator's scale
    acc_scale: np.ndarray | None = None
    M: np.ndarray | None = None
    P: int = 0
    S: int = 0
    lo: int = 0
    hi: int = 0
    offset: int = 0
    out_scale: float = 0.0              # the real value of one unit of the requantised output
    even: bool = False
    w_range: tuple[int, int] = (0, 0)   # the weights' integer range (the file's, or the tool's symmetric one)


@dataclass(frozen=True)
class QuantLayerNet:
    dtype: str
    input_shape: tuple[int, ...]
    input_scale: float
    steps: tuple[QuantStep, ...]
    input_lo: int = 0                   # the input integers' range
    input_hi: int = 0
    input_map: InputMap | None = None
    input_quant: "Quantiser | None" = None      # the file's input quantiser (its rounding mode)
    scheme: str = ""                    # how it was quantised, in words (a row's `quantization`)

    def host_input(self) -> HostInput:
        """The host's step from a raw sample to the input integers: the input map and the input's
        quantiser (the file's, with its rounding mode; else the tool's grid, to nearest) in one
        affine per value, rounded and clipped."""
        n = math.prod(self.input_shape)
        a, c = self.input_map.per_feature() if self.input_map is not None else (np.ones(n), np.zeros(n))
        iq = self.input_quant
        scale, mode = (iq.scale, iq.mode) if iq is not None else (self.input_scale, "HALF_EVEN")
        how = (self.input_map.describe() if self.input_map is not None else "the raw input") + \
            (f", then the file's quantiser {iq.where}" if iq is not None else f", then {self.input_hi} steps to 1")
        return HostInput("x", a / scale, c / scale, mode, self.input_element, self.input_lo, self.input_hi, how)

    def quantize_input(self, x: np.ndarray) -> np.ndarray:
        """Samples (n, ...) as integer inputs (n, *input_shape) (`host_input`)."""
        q = self.host_input()(x)
        return q.reshape((len(q), *self.input_shape)).astype(zoo.storage(self.input_element))

    @property
    def input_element(self) -> str:
        """The input's element type: the narrowest holding its integers (a file's uint5, int8, ...)."""
        from dse.models.widths import int_element
        return int_element(self.input_lo, self.input_hi)

    def mean_bits(self) -> tuple[float, float]:
        """(mean weight bits, mean activation bits: the input and each requantised output)."""
        from dse.models.widths import mean_bits
        computes = [s for s in self.steps if s.W is not None]
        # each requantised output counts at its range: the tool's unsigned after a ReLU, signed
        # symmetric without one; a file's quantiser as it declares
        acts = [(s.lo, s.hi) for s in computes if s.M is not None]
        return mean_bits([s.w_range for s in computes], [(self.input_lo, self.input_hi)] + acts)

    def dequantize(self, logits: np.ndarray) -> np.ndarray:
        last = next(s for s in reversed(self.steps) if s.W is not None)
        scale = last.acc_scale if last.M is None else last.out_scale
        return np.asarray(logits, np.float64).reshape(len(logits), -1) * scale

    def reference(self, xq: np.ndarray) -> np.ndarray:
        """The integer model in numpy on samples (n, *input_shape): int32 outputs (n, outputs).
        Sums run in int64 and wrap to int32 after each layer, as int32 hardware sums wrap (the
        same value modulo 2**32 in any order); requantisation wraps like int32 too."""
        h = np.asarray(xq).astype(np.int64).reshape((len(xq), *self.input_shape[1:]))
        for step in self.steps:
            layer = step.layer
            moved = weightless(layer, h)
            if moved is not None:
                h = moved
                continue
            W = step.W.astype(np.int64)
            acc = (conv(h, W, layer.stride, layer.pads) if isinstance(layer, Conv) else h @ W.T)
            acc = _wrap32(acc + _channel(step.b.astype(np.int64), acc.ndim))
            if step.M is None:
                return acc.reshape(len(acc), -1).astype(np.int32)
            M = _channel(step.M.astype(np.int64), acc.ndim)
            v = _wrap32((acc >> step.P) * M)
            r = _wrap32(v + step.offset + ((v >> step.S) & 1 if step.even else 0)) >> step.S
            h = np.clip(r, step.lo, step.hi)
        return h.reshape(len(h), -1).astype(np.int32)     # the last layer requantised (its quantiser)

    def built(self) -> zoo.Built:
        """The integer model as a zoo.Built: inputs x, then W{i}, b{i}, M{i} (or E{i}:
        dse.models.quantize.requantisation_input) per conv/dense layer."""
        from compiler.dtypes import to_tinygrad
        from dse.models.widths import int_element
        tg = zoo.import_tinygrad()
        i32 = tg.dtypes.int32
        # each input declared at its width (int4 weights in an int8 Tensor), so the hardware is
        # sized to it; the requantised activations' range comes from their clip (after a ReLU
        # [0, 2**b - 1]: uintb)
        inputs = {"x": (self.input_shape, self.input_element)}
        narrow = {id(s): to_tinygrad(zoo.DTYPES[int_element(s.lo, s.hi)]) for s in self.steps if s.M is not None}
        shifted = set()             # id of each step whose scales are exponents
        for i, step in enumerate((s for s in self.steps if s.W is not None), 1):
            inputs[f"W{i}"] = (step.W.shape, int_element(*step.w_range))
            inputs[f"b{i}"] = (step.b.shape, int_element(*_span(step.b)))
            if step.M is not None:
                name, scale, shift = requantisation_input(i, step.M)
                inputs[name] = (scale.shape, int_element(*_span(scale)))
                if shift:
                    shifted.add(id(step))
        steps = self.steps

        def forward(x, *params):
            h, k = x.cast(i32), 0
            for step in steps:
                layer = step.layer
                if isinstance(layer, MaxPool):
                    h = h.max_pool2d(kernel_size=layer.kernel, stride=layer.stride)
                    continue
                if isinstance(layer, Flatten):
                    h = h.reshape(h.shape[0], -1)
                    continue
                W, b = params[k].cast(i32), params[k + 1].cast(i32)
                if isinstance(layer, Conv):
                    t, l, bo, r = layer.pads
                    acc = h.conv2d(W, b, stride=layer.stride, padding=(l, r, t, bo))
                else:
                    acc = h @ W.T + b
                if step.M is None:
                    return acc
                scale = params[k + 2].cast(i32).reshape((1, -1) + (1,) * (acc.ndim - 2))
                v = (acc >> step.P) << scale if id(step) in shifted else (acc >> step.P) * scale
                q = (v + step.offset + ((v >> step.S) & 1) if step.even else v + step.offset) >> step.S
                h = q.clip(step.lo, step.hi).cast(narrow[id(step)]).cast(i32)   # stored narrow
                k += 3
            return h.reshape(h.shape[0], -1)
        return zoo.Built(inputs, forward)

    def arrays(self) -> dict[str, np.ndarray]:
        from dse.models.widths import int_element
        out = {}
        for i, step in enumerate((s for s in self.steps if s.W is not None), 1):
            out[f"W{i}"] = step.W.astype(zoo.storage(int_element(*step.w_range)))
            out[f"b{i}"] = step.b.astype(zoo.storage(int_element(*_span(step.b))))
            if step.M is not None:
                name, scale, _ = requantisation_input(i, step.M)
                out[name] = scale.astype(zoo.storage(int_element(*_span(scale))))
        return out


def _span(a: np.ndarray) -> tuple[int, int]:
    """The integer range of constant arrays (biases, multipliers): what their inputs are declared
    as, so the adders and multipliers they reach are sized to it."""
    return min(int(a.min()), 0), max(int(a.max()), 1)


def _wrap32(v: np.ndarray) -> np.ndarray:
    return np.asarray(v, np.int64).astype(np.int32).astype(np.int64)


def _fits(lo: int, hi: int, dtype: str, what: str, side: str) -> None:
    """A file's integers (`side`: "weights" or "activations") must fit the point's format's type
    for that side (int8 for both in int8; int4 weights and int8 activations in w4a8). Activations
    with no negative value fit its bits unsigned (uint8 in int8), as the tool's own after a ReLU."""
    from dse.models import formats
    f = formats.parse(dtype)
    name = f.weights if side == "weights" else f.activations
    if side == "activations" and lo >= 0:
        name = "u" + name
    d = zoo.DTYPES[name]
    clo, chi = int(d.lowest), int(d.highest)
    if lo < clo or hi > chi:
        raise ValueError(f"{what} holds integers in [{lo}, {hi}], beyond {name} [{clo}, {chi}] ({dtype}'s {side}); "
                         "run it in a wider integer format")


def _rounding(q, lo: int, S: int, exact: bool) -> tuple[int, bool]:
    """(offset, even) of the requantisation for a file's quantiser `q` (None: the tool's own,
    to nearest). FLOOR and CEIL (and DOWN and UP on a range without negatives) as they say. The
    nearest modes: where M / 2**S is the file's scale ratio exactly (`exact`: power-of-two
    scales), ties are exact too and are broken as the mode says (to even; HALF_UP and HALF_DOWN
    as up and down, which they are on a range without negatives); elsewhere the multiplier
    approximates the ratio, no tie is exact, and ties go up."""
    mode = q.mode if q is not None else "ROUND"
    if lo >= 0:
        mode = {"DOWN": "FLOOR", "UP": "CEIL"}.get(mode, mode)
    if mode in ("ROUND", "HALF_EVEN") and exact and q is not None:
        return (1 << (S - 1)) - 1, True
    if mode == "HALF_DOWN" and exact:
        return (1 << (S - 1)) - 1, False
    if mode in ("ROUND", "HALF_EVEN", "HALF_UP", "HALF_DOWN"):
        return 1 << (S - 1), False
    if mode == "FLOOR":
        return 0, False
    if mode == "CEIL":
        return (1 << S) - 1, False
    raise ValueError(f"{q.where}: rounding_mode {mode} on signed values is not built (ROUND, FLOOR and CEIL are)")


def quantize_layers(*, net: LayerNet, dtype: str, calibration: np.ndarray, formats=None) -> QuantLayerNet:
    """The integer model of `net` in `dtype`, scales calibrated on `calibration` samples (n, ...)
    (the training split) where the file declares none, at the widths of `formats` (the format
    knobs, dse.models.widths; None: the dtype's); the module docstring gives the scheme.
    What the file declares (dse.models.qonnx: integer weights, quantisers of the input and of
    layer outputs) is taken as it is: its integers must fit the dtype (else ValueError). A
    network the host's input map applies to is quantised behind each map of
    dse.models.standardise, and `choose` keeps one by the error of its outputs on the
    calibration samples."""
    if net.standardised(calibration) is net:
        return _quantize_layers(net=net, dtype=dtype, calibration=calibration, formats=formats)
    want = net.float_logits(calibration)

    def attempt(kind: str):
        try:
            return _quantize_layers(net=net.standardised(calibration, kind), dtype=dtype, calibration=calibration,
                                    formats=formats)
        except ValueError as e:
            return e
    return choose([attempt(kind) for kind in KINDS],
                  lambda q: relative_error(q.dequantize(q.reference(q.quantize_input(calibration))), want))


def _quantize_layers(*, net: LayerNet, dtype: str, calibration: np.ndarray, formats=None) -> QuantLayerNet:
    from dse.models.widths import Widths, layer_names, widths
    computes = [layer for layer in net.layers if isinstance(layer, (Conv, Linear))]
    bits = widths(dtype, layer_names(computes), formats)
    _declared_formats(computes, formats, net.input_quant)
    in_qmax = Widths.qmax(bits.input)
    store = np.int16          # each layer's weights go to their width's container in arrays()
    x = net.mapped_input(calibration)
    iq = net.input_quant
    if iq is not None:
        _fits(iq.lo, iq.hi, dtype, f"the input quantiser {iq.where}", "activations")
        s_in, in_lo, in_hi = iq.scale, iq.lo, iq.hi
        h_float, h_int = iq(x), iq.integers(x).astype(np.int64)
    else:
        s_in, in_lo, in_hi = max(float(np.abs(x).max()), 1e-12) / in_qmax, -in_qmax, in_qmax
        h_float, h_int = x, np.clip(np.round(x / s_in), -in_qmax, in_qmax).astype(np.int64)
    input_scale = s_in
    compute = [i for i, layer in enumerate(net.layers) if isinstance(layer, (Conv, Linear))]
    steps = []
    for i, layer in enumerate(net.layers):
        h_float = _float_layer(layer, h_float)
        if isinstance(layer, MaxPool):
            h_int = max_pool(h_int, layer.kernel, layer.stride)
            steps.append(QuantStep(layer))
            continue
        if isinstance(layer, Flatten):
            h_int = h_int.reshape(len(h_int), -1)
            steps.append(QuantStep(layer))
            continue
        last = i == compute[-1]
        j = compute.index(i)
        qmax, (act_lo, act_hi) = Widths.qmax(bits.weights[j]), Widths.act_range(bits.outputs[j], layer.relu)
        where = f"{dtype}: layer {j + 1} ({type(layer).__name__.lower()})"
        oq = layer.out_quant
        if oq is not None:
            h_float = oq(h_float)
            s_out, lo, hi = oq.scale, max(oq.lo, 0) if layer.relu else oq.lo, oq.hi
        else:
            s_out, lo, hi = max(float(np.abs(h_float).max()), 1e-12) / act_hi, act_lo, act_hi
        # a layer whose outputs are all 0 on the calibration data (every ReLU off) passes its
        # accumulator on unscaled, as dse.models.quantize does: from 1e-12 it needed a
        # requantisation shift below 1 and the point failed
        dead = oq is None and not last and not np.abs(h_float).max() > 0
        total = None
        if layer.grid is not None:
            _fits(layer.grid.lo, layer.grid.hi, dtype, f"{where}: the weights of {layer.grid.where}", "weights")
            Wq, s_w, w_range = layer.grid.q.astype(store), layer.grid.scale, (layer.grid.lo, layer.grid.hi)
            s_out = float(np.max(s_in * s_w)) if dead else s_out
        else:
            rows = layer.W.reshape(len(layer.W), -1)
            s_w = (np.full(len(rows), max(float(np.abs(rows).max()), 1e-12) / qmax) if last
                   else np.maximum(np.abs(rows).max(axis=1), 1e-12) / qmax)
            s_out = float(np.max(s_in * s_w)) if dead else s_out
            if bits.scales[j] is not None and not (last and oq is None):
                total, stretch = cheap_multipliers(s_in * s_w / s_out, bits.scales[j])
                s_w = s_w * stretch
            Wq = np.clip(np.round(layer.W / s_w.reshape((-1,) + (1,) * (layer.W.ndim - 1))), -qmax, qmax).astype(store)
            w_range = (-qmax, qmax)
        acc_scale = s_in * s_w
        bq = np.round(layer.b / acc_scale).astype(np.int64)
        W64 = Wq.astype(np.int64)
        acc = (conv(h_int, W64, layer.stride, layer.pads) if isinstance(layer, Conv) else h_int @ W64.T)
        acc = acc + _channel(bq, acc.ndim)
        if np.abs(acc).max() >= 2 ** 31:
            raise ValueError(f"{where}: an accumulator exceeds int32 on the calibration data")
        if last and oq is None:
            steps.append(QuantStep(layer, Wq, bq.astype(np.int32), acc_scale, w_range=w_range))
            break
        if oq is not None:
            _fits(lo, hi, dtype, f"{where}: the quantiser {oq.where}", "activations")
        M, P, S = requantisation(acc_scale=acc_scale, out_scale=s_out, acc=acc, where=where, total=total)
        exact = P == 0 and np.array_equal(M.astype(np.float64), np.asarray(acc_scale / s_out) * 2.0 ** S)
        offset, even = _rounding(oq, lo, S, exact)
        steps.append(QuantStep(layer, Wq, bq.astype(np.int32), acc_scale, M, P, S, lo, hi, offset, s_out, even,
                               w_range))
        v = (acc >> P) * _channel(M, acc.ndim)
        h_int = np.clip((v + offset + ((v >> S) & 1 if even else 0)) >> S, lo, hi)
        s_in = s_out
        if last:
            break
    return QuantLayerNet(dtype, net.input_shape, input_scale, tuple(steps), in_lo, in_hi, net.input_map, iq,
                         _scheme(net, tuple(steps), dtype))


def _declared_formats(computes: list, formats, input_quant) -> None:
    """Format knobs set what the tool quantises: a width the file declares is the file's."""
    for key in (formats.as_dict() if formats else {}):
        knob, _, layer = key.partition("@")
        named = [i for i, c in enumerate(computes) if layer in (str(i), getattr(c, "name", ""))] if layer \
            else range(len(computes))
        for i in named:
            declared = computes[i].grid if knob in ("weight_bits", "scale_digits") else computes[i].out_quant
            if declared is not None:
                raise ValueError(f"{key}: layer {i} has the {'output' if knob == 'act_bits' else 'weights'} "
                                 f"quantisation its file declares ({declared.where})")
        if knob == "act_bits" and not layer and input_quant is not None:
            raise ValueError(f"{key}: the input has the quantisation its file declares ({input_quant.where})")


def _scheme(net: LayerNet, steps: tuple[QuantStep, ...], dtype: str) -> str:
    """The row's `quantization`: the tool's scheme, or what the file declares and the tool added."""
    if not net.declared:
        return (f"input {net.input_map.describe()} by the host; " if net.input_map is not None else "") + SCHEME
    parts = [f"input {net.input_quant.describe()}" if net.input_quant is not None else "input calibrated"]
    for i, step in enumerate((s for s in steps if s.W is not None), 1):
        layer = step.layer
        w = layer.grid.describe() if layer.grid is not None else f"{dtype} calibrated"
        out = (f", output {layer.out_quant.describe()}" if layer.out_quant is not None
               else ", output calibrated" if step.M is not None else "")
        parts.append(f"layer {i} weights {w}{out}")
    return ("declared by the file (QONNX/QCDQ): " + "; ".join(parts) + f"; in {dtype} containers, int32 accumulators, "
            "multiply-and-shift requantisation")


def float_sums(h: np.ndarray, W: np.ndarray, layer, product) -> np.ndarray:
    """A conv or dense layer's sums over samples `h` in float32, added one product at a time in
    tinygrad's reduce order (channel, kernel row, column), each product `product(w, x)` (a
    float32 array: rounded to the dtype, or exact): the golden models of the float chains
    (dse.models.floatnet, dse.models.fp8net)."""
    if not isinstance(layer, Conv):
        acc = np.zeros((len(h), W.shape[0]), np.float32)
        for k in range(W.shape[1]):
            acc = acc + product(W[None, :, k], h[:, k, None])
        return acc
    t, l, b, r = layer.pads
    x = np.pad(h, ((0, 0), (0, 0), (t, b), (l, r)))
    (sy, sx), (kh, kw) = layer.stride, W.shape[2:]
    oh, ow = (x.shape[2] - kh) // sy + 1, (x.shape[3] - kw) // sx + 1
    acc = np.zeros((len(h), W.shape[0], oh, ow), np.float32)
    for ci in range(W.shape[1]):
        for ky in range(kh):
            for kx in range(kw):
                patch = x[:, None, ci, ky:ky + sy * (oh - 1) + 1:sy, kx:kx + sx * (ow - 1) + 1:sx]
                acc = acc + product(W[None, :, ci, ky, kx, None, None], patch)
    return acc
