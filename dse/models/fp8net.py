"""A chain of convolutions, max-pools and dense layers (dse.models.convnet.LayerNet) in FP8.

The scheme is dse.models.quantize.FP8_SCHEME, the one dense networks use: weights, biases and the
input rounded to fp8 (nearest even, saturating); every conv and dense layer casts its operands
to float32, so the fp8 x fp8 products are exact and summed in float32 (the compiler multiplies
them in FWideMul units), adds its bias in float32, applies its ReLU and rounds its output to
fp8 and stored in fp8; a max-pool computes on those values in float32 (the same maximum) and
stores its result in fp8. The numpy golden model sums in the order of
tinygrad's kernels: a convolution over input channel, kernel row, kernel column; a dense layer
over its inputs in order; each step one float32 addition.
"""
from __future__ import annotations

import numpy as np

from dse.models import zoo
from dse.models.convnet import Conv, Flatten, LayerNet, Linear, MaxPool, float_sums, weightless


def _compute(net: LayerNet) -> list[Conv | Linear]:
    return [layer for layer in net.layers if isinstance(layer, (Conv, Linear))]


def arrays(net: LayerNet, dtype: str) -> dict[str, np.ndarray]:
    """W1, b1, W2, b2, ... (conv and dense layers in order) rounded to `dtype`."""
    out = {}
    for i, layer in enumerate(_compute(net), 1):
        out[f"W{i}"], out[f"b{i}"] = zoo.round_float(layer.W, dtype), zoo.round_float(layer.b, dtype)
    return out


def samples(net: LayerNet, x: np.ndarray, dtype: str) -> np.ndarray:
    """Samples (n, ...) as the model's input x: the input map applied (by the host), rounded to
    `dtype`, shaped (n, *input_shape)."""
    return zoo.round_float(net.mapped_input(x), dtype).reshape((len(x), *net.input_shape))


def built(net: LayerNet, dtype: str) -> zoo.Built:
    """The network in `dtype` as a zoo.Built: inputs x (input_shape), then W{i}, b{i}."""
    inputs = {"x": (net.input_shape, dtype)}
    for i, layer in enumerate(_compute(net), 1):
        inputs[f"W{i}"], inputs[f"b{i}"] = (layer.W.shape, dtype), (layer.b.shape, dtype)
    layers = net.layers

    def forward(x, *params):
        f32 = zoo.import_tinygrad().dtypes.float32
        fp8 = x.dtype
        h, k = x, 0
        for layer in layers:
            if isinstance(layer, MaxPool):
                # on float32 values, the same maximum (they are fp8 values): tinygrad starts a
                # max-reduction in E4M3 at NaN (docs/fp8.md)
                h = h.cast(f32).max_pool2d(kernel_size=layer.kernel, stride=layer.stride).cast(fp8).contiguous()
                continue
            if isinstance(layer, Flatten):
                h = h.reshape(h.shape[0], -1)
                continue
            W, b = params[k].cast(f32), params[k + 1].cast(f32)
            k += 2
            if isinstance(layer, Conv):
                t, l, bo, r = layer.pads
                h = h.cast(f32).conv2d(W, b, stride=layer.stride, padding=(l, r, t, bo))
            else:
                h = h.cast(f32) @ W.T + b
            if layer.relu:
                h = h.relu()
            # stored in fp8 (contiguous): else tinygrad may store the float32 value and round it
            # where it is read, and the next layer's products would need a float32 multiplier
            h = h.cast(fp8).contiguous()
        return h
    return zoo.Built(inputs, forward)


def reference(net: LayerNet, dtype: str, x: np.ndarray) -> np.ndarray:
    """The golden model of `built(net, dtype)` on samples (n, ...): outputs (n, classes) in
    float32 holders of fp8 values, bit-exact with the hardware."""
    params = arrays(net, dtype)
    h = samples(net, x, dtype).astype(np.float32).reshape((len(x), *net.input_shape[1:]))
    k = 0
    for layer in net.layers:
        moved = weightless(layer, h)
        if moved is not None:
            h = moved
            continue
        k += 1
        W, b = params[f"W{k}"].astype(np.float32), params[f"b{k}"].astype(np.float32)
        acc = float_sums(h, W, layer, np.multiply)          # an fp8 x fp8 product is exact in float32
        acc = acc + b.reshape((1, -1) + (1,) * (acc.ndim - 2))
        if layer.relu:
            acc = np.where(acc > 0, acc, np.float32(0))
        h = zoo.round_float(acc, dtype).astype(np.float32)
    return h.reshape(len(h), -1)


class Fp8Net:
    """A LayerNet seen as a float network in an fp8 dtype (the interface of
    dse.models.quantize.DenseNet that dse.models.accuracy.run_samples and dse.spec.TrainedModel use)."""

    def __init__(self, net: LayerNet):
        if net.clipped:
            raise ValueError("a network fine-tuned quantisation-aware (bounded outputs) runs in the integer format "
                             "it was fine-tuned for; float dtypes run the trained network")
        self.net = net
        self.input_shape = net.input_shape
        self.inputs = net.inputs

    def float_logits(self, x: np.ndarray) -> np.ndarray:
        return self.net.float_logits(x)

    def host_input(self, x: np.ndarray) -> np.ndarray:
        return self.net.mapped_input(x)

    def built(self, dtype: str) -> zoo.Built:
        return built(self.net, dtype)

    def arrays(self, dtype: str) -> dict[str, np.ndarray]:
        return arrays(self.net, dtype)

    def reference(self, dtype: str, x: np.ndarray) -> np.ndarray:
        return reference(self.net, dtype, x)
