"""A chain of convolutions, max-pools and dense layers (dse.models.convnet.LayerNet) in fp16, bf16
or fp32, as tinygrad's kernels compute it, with its numpy golden model (bit-exact).

    net = FloatNet(read_chain(path))
    built = net.built("fp16"); arrays = net.arrays("fp16"); want = net.reference("fp16", x)

The semantics are the lowered kernels' (the dense networks' rule, dse.models.quantize.DenseNet):
each product rounded to the dtype, the products summed in float32 in tinygrad's reduce order (a
convolution over input channel, kernel row, kernel column; a dense layer over its inputs in
order), the sum rounded to the dtype, the bias added in the dtype, then the ReLU; a max-pool is
exact. Weights, biases and input samples are rounded to the dtype (nearest even). An fp8 point
runs dse.models.fp8net instead (products exact in float32), and a graph that is no such chain
runs whole in tinygrad's importer (dse.models.data.onnx_built), checked within a tolerance.
"""
from __future__ import annotations

import numpy as np

from dse.models import zoo
from dse.models.convnet import Conv, Flatten, LayerNet, Linear, MaxPool, float_sums, weightless


def _compute(net: LayerNet) -> list[Conv | Linear]:
    return [layer for layer in net.layers if isinstance(layer, (Conv, Linear))]


class FloatNet:
    """A LayerNet seen as a float network (the interface of dse.models.quantize.DenseNet that
    dse.models.accuracy.run_samples and dse.models.model.TrainedModel use)."""

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
        """Samples (n, ...) as the hardware's input takes them, before rounding: the input map
        (the file's preprocessing, or dse.models.standardise's) applied by the host."""
        return self.net.mapped_input(x)

    def arrays(self, dtype: str) -> dict[str, np.ndarray]:
        """W1, b1, W2, b2, ... (conv and dense layers in order) rounded to `dtype`."""
        out = {}
        for i, layer in enumerate(_compute(self.net), 1):
            out[f"W{i}"], out[f"b{i}"] = zoo.round_float(layer.W, dtype), zoo.round_float(layer.b, dtype)
        return out

    def built(self, dtype: str) -> zoo.Built:
        """The network in `dtype` as a zoo.Built: inputs x (input_shape), then W{i}, b{i}."""
        inputs = {"x": (self.input_shape, dtype)}
        for i, layer in enumerate(_compute(self.net), 1):
            inputs[f"W{i}"], inputs[f"b{i}"] = (layer.W.shape, dtype), (layer.b.shape, dtype)
        layers = self.net.layers

        def forward(x, *params):
            h, k = x, 0
            for layer in layers:
                if isinstance(layer, MaxPool):
                    h = h.max_pool2d(kernel_size=layer.kernel, stride=layer.stride)
                    continue
                if isinstance(layer, Flatten):
                    h = h.reshape(h.shape[0], -1)
                    continue
                W, b = params[k], params[k + 1]
                k += 2
                if isinstance(layer, Conv):
                    t, l, bo, r = layer.pads
                    h = h.conv2d(W, b, stride=layer.stride, padding=(l, r, t, bo))
                else:
                    h = h @ W.T + b
                if layer.relu:
                    h = h.relu()
                h = h.contiguous()      # each layer's output stored: one kernel per layer, as the golden model
            return h
        return zoo.Built(inputs, forward)

    def reference(self, dtype: str, x: np.ndarray, fp_semantics: str = "tinygrad") -> np.ndarray:
        """The golden model of `built(dtype)` on samples (n, ...) as the hardware computes it
        under `fp_semantics`: (n, outputs) in float32 holders of `dtype` values. fp16 with
        "tinygrad" (emulated by tinygrad in float32): products exact, sums in float32, then
        `zoo.half_layer` (dse.models.quantize.DenseNet.reference says the same)."""
        params = self.arrays(dtype)
        h = zoo.round_float(self.host_input(x), dtype).astype(np.float32)
        emulated = zoo.arith_for(dtype, fp_semantics).emulated_casts
        if emulated:
            h = zoo.half_load(h)
        k = 0
        for layer in self.net.layers:
            moved = weightless(layer, h)
            if moved is not None:
                h = moved
                continue
            k += 1
            W, b = params[f"W{k}"].astype(np.float32), params[f"b{k}"].astype(np.float32)
            if emulated:
                acc = float_sums(h, zoo.half_load(W), layer, lambda w, v: (w * v).astype(np.float32))
                h = zoo.half_layer(acc, b.reshape((1, -1) + (1,) * (acc.ndim - 2)), layer.relu)
                continue
            acc = float_sums(h, W, layer, lambda w, v: _product(w, v, dtype))
            acc = zoo.round_float(acc, dtype).astype(np.float32)
            h = zoo.round_float(acc + b.reshape((1, -1) + (1,) * (acc.ndim - 2)), dtype).astype(np.float32)
            if layer.relu:
                h = np.where(h > 0, h, np.float32(0))     # tinygrad's relu: relu(-0.0) = +0.0
        return h.reshape(len(h), -1)


def _product(w: np.ndarray, x: np.ndarray, dtype: str) -> np.ndarray:
    """w * x rounded once to `dtype` (exact in float64, then one rounding), as float32."""
    return zoo.round_float(w.astype(np.float64) * x.astype(np.float64), dtype).astype(np.float32)
