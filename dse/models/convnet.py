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

The scheme (dse.models.quantize.SCHEME): symmetric; inputs and activations per tensor; weights per
output channel in hidden layers (conv and dense), per tensor in the last one; int32 biases and
accumulators; multiply-and-shift requantisation after every layer but the last, clipped to
[0, qmax] where a ReLU follows (a ReLU after a max-pool commutes with it and is folded the same
way) and to [-qmax, qmax] where none does. Max-pools run on the requantised activations (the
requantisation is monotonic, so pooling commutes with it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dse.models import zoo
from dse.models.quantize import ACT_QMAX, QMAX, requantisation, requantise

@dataclass(frozen=True)
class Conv:
    W: np.ndarray                       # (out, in, kh, kw)
    b: np.ndarray                       # (out,)
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]     # top, left, bottom, right (ONNX order: begins, then ends)
    relu: bool = False


@dataclass(frozen=True)
class Linear:
    W: np.ndarray                       # (out, in)
    b: np.ndarray                       # (out,)
    relu: bool = False


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
    input_shape: tuple[int, ...]         # one sample, with the batch dimension 1: (1, C, H, W)
    layers: tuple[Layer, ...]

    @property
    def inputs(self) -> int:
        return math.prod(self.input_shape)

    def float_logits(self, x: np.ndarray) -> np.ndarray:
        """The float model in float64 on samples (n, ...): (n, outputs)."""
        h = np.asarray(x, np.float64).reshape((len(x), *self.input_shape[1:]))
        for layer in self.layers:
            h = _float_layer(layer, h)
        return h.reshape(len(h), -1)

    def quantize(self, *, dtype: str, calibration: np.ndarray) -> "QuantLayerNet":
        return quantize_layers(net=self, dtype=dtype, calibration=calibration)


def _float_layer(layer: Layer, h: np.ndarray) -> np.ndarray:
    if isinstance(layer, Conv):
        h = conv(h, layer.W, layer.stride, layer.pads) + _channel(layer.b, 4)
    elif isinstance(layer, Linear):
        h = h @ layer.W.T + layer.b
    elif isinstance(layer, MaxPool):
        return max_pool(h, layer.kernel, layer.stride)
    else:
        return h.reshape(len(h), -1)
    return np.maximum(h, 0.0) if layer.relu else h


@dataclass(frozen=True)
class QuantStep:
    """One layer of the integer model: a conv or dense layer with its integer weights and
    requantisation (M None: the last one, whose int32 accumulators are the outputs), or a
    max-pool / flatten."""
    layer: Layer                        # the float layer (shapes, strides, pads, relu)
    W: np.ndarray | None = None         # int8/int16
    b: np.ndarray | None = None         # int32, on the accumulator's scale
    acc_scale: np.ndarray | None = None
    M: np.ndarray | None = None
    P: int = 0
    S: int = 0


@dataclass(frozen=True)
class QuantLayerNet:
    dtype: str
    input_shape: tuple[int, ...]
    input_scale: float
    steps: tuple[QuantStep, ...]

    @property
    def qmax(self) -> int:
        return ACT_QMAX[self.dtype]

    def quantize_input(self, x: np.ndarray) -> np.ndarray:
        """Samples (n, ...) as integer inputs (n, *input_shape)."""
        q = np.clip(np.round(np.asarray(x, np.float64) / self.input_scale), -self.qmax, self.qmax)
        return q.reshape((len(q), *self.input_shape)).astype(zoo.storage(self.dtype))

    def dequantize(self, logits: np.ndarray) -> np.ndarray:
        last = next(s for s in reversed(self.steps) if s.W is not None)
        return np.asarray(logits, np.float64).reshape(len(logits), -1) * last.acc_scale

    def reference(self, xq: np.ndarray) -> np.ndarray:
        """The integer model in numpy on samples (n, *input_shape): int32 outputs (n, outputs).
        Sums run in int64 and wrap to int32 after each layer, as int32 hardware sums wrap (the
        same value modulo 2**32 in any order); requantisation wraps like int32 too."""
        h = np.asarray(xq).astype(np.int64).reshape((len(xq), *self.input_shape[1:]))
        for step in self.steps:
            layer = step.layer
            if isinstance(layer, MaxPool):
                h = max_pool(h, layer.kernel, layer.stride)
                continue
            if isinstance(layer, Flatten):
                h = h.reshape(len(h), -1)
                continue
            W = step.W.astype(np.int64)
            acc = (conv(h, W, layer.stride, layer.pads) if isinstance(layer, Conv) else h @ W.T)
            acc = _wrap32(acc + _channel(step.b.astype(np.int64), acc.ndim))
            if step.M is None:
                return acc.reshape(len(acc), -1).astype(np.int32)
            M = _channel(step.M.astype(np.int64), acc.ndim)
            r = _wrap32(_wrap32((acc >> step.P) * M) + (1 << (step.S - 1))) >> step.S
            h = np.clip(r, 0 if layer.relu else -self.qmax, self.qmax)
        raise AssertionError("unreachable: the last conv/dense layer has no multiplier")

    def built(self) -> zoo.Built:
        """The integer model as a zoo.Built: inputs x, then W{i}, b{i}, M{i} per conv/dense layer."""
        tg = zoo.import_tinygrad()
        i32, narrow = tg.dtypes.int32, tg.dtypes.int8 if self.dtype == "int8" else tg.dtypes.int16
        inputs = {"x": (self.input_shape, self.dtype)}
        for i, step in enumerate((s for s in self.steps if s.W is not None), 1):
            inputs[f"W{i}"] = (step.W.shape, self.dtype)
            inputs[f"b{i}"] = (step.b.shape, "int32")
            if step.M is not None:
                inputs[f"M{i}"] = (step.M.shape, "int32")
        steps, qmax = self.steps, self.qmax

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
                W, b = params[k].cast(i32), params[k + 1]
                if isinstance(layer, Conv):
                    t, l, bo, r = layer.pads
                    acc = h.conv2d(W, b, stride=layer.stride, padding=(l, r, t, bo))
                else:
                    acc = h @ W.T + b
                if step.M is None:
                    return acc
                M = params[k + 2].reshape((1, -1) + (1,) * (acc.ndim - 2))
                q = (((acc >> step.P) * M) + (1 << (step.S - 1))) >> step.S
                h = q.clip(0 if layer.relu else -qmax, qmax).cast(narrow).cast(i32)   # stored narrow
                k += 3
            raise AssertionError("unreachable: the last conv/dense layer has no multiplier")
        return zoo.Built(inputs, forward)

    def arrays(self) -> dict[str, np.ndarray]:
        out = {}
        for i, step in enumerate((s for s in self.steps if s.W is not None), 1):
            out[f"W{i}"], out[f"b{i}"] = step.W, step.b
            if step.M is not None:
                out[f"M{i}"] = step.M
        return out


def _wrap32(v: np.ndarray) -> np.ndarray:
    return np.asarray(v, np.int64).astype(np.int32).astype(np.int64)


def quantize_layers(*, net: LayerNet, dtype: str, calibration: np.ndarray) -> QuantLayerNet:
    """Post-training quantisation of `net` to int8/int16, scales calibrated on `calibration`
    samples (n, ...) (the training split); the module docstring gives the scheme."""
    if dtype not in QMAX:
        raise ValueError(f"quantisation to {dtype!r} is not supported; supported: {', '.join(QMAX)}")
    qmax, act_qmax = QMAX[dtype], ACT_QMAX[dtype]
    store = zoo.storage(dtype)
    x = np.asarray(calibration, np.float64).reshape((len(calibration), *net.input_shape[1:]))
    s_in = input_scale = max(float(np.abs(x).max()), 1e-12) / act_qmax
    h_float, h_int = x, np.clip(np.round(x / s_in), -act_qmax, act_qmax).astype(np.int64)
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
        rows = layer.W.reshape(len(layer.W), -1)
        s_w = (np.full(len(rows), max(float(np.abs(rows).max()), 1e-12) / qmax) if last
               else np.maximum(np.abs(rows).max(axis=1), 1e-12) / qmax)
        Wq = np.clip(np.round(layer.W / s_w.reshape((-1,) + (1,) * (layer.W.ndim - 1))), -qmax, qmax).astype(store)
        acc_scale = s_in * s_w
        bq = np.round(layer.b / acc_scale).astype(np.int64)
        W64 = Wq.astype(np.int64)
        acc = (conv(h_int, W64, layer.stride, layer.pads) if isinstance(layer, Conv) else h_int @ W64.T)
        acc = acc + _channel(bq, acc.ndim)
        where = f"{dtype}: layer {compute.index(i) + 1} ({type(layer).__name__.lower()})"
        if np.abs(acc).max() >= 2 ** 31:
            raise ValueError(f"{where}: an accumulator exceeds int32 on the calibration data")
        if last:
            steps.append(QuantStep(layer, Wq, bq.astype(np.int32), acc_scale))
            break
        s_out = max(float(np.abs(h_float).max()), 1e-12) / act_qmax
        M, P, S = requantisation(acc_scale=acc_scale, out_scale=s_out, acc=acc, where=where)
        steps.append(QuantStep(layer, Wq, bq.astype(np.int32), acc_scale, M, P, S))
        h_int = np.clip(requantise(acc, _channel(M, acc.ndim), P, S), 0 if layer.relu else -act_qmax, act_qmax)
        s_in = s_out
    return QuantLayerNet(dtype, net.input_shape, input_scale, tuple(steps))
