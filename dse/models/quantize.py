"""Dense (fully connected) networks: the float model, and its post-training quantisation.

    net = DenseNet.from_arrays(weights)                  # W1, b1, W2, b2, ... (W: (out, in))
    q = quantize(net=net, dtype="int8", calibration=x_train)
    built, arrays = q.built(), q.arrays()                # the integer model as a tinygrad model
    logits = q.reference(q.quantize_input(x))            # its numpy golden model, bit-exact

The scheme (what `quantize` computes; `SCHEME` says it in one line):
  * zero point 0 everywhere, so a product needs no correction terms;
  * the input: one scale, max |value| over the calibration samples (the training split) / qmax,
    symmetric signed, qmax = 2**(b-1) - 1 for b bits (int8: 127; int4: 7; int16: 13 bits,
    4095, so that int32 accumulators hold a layer's sum of int16 x int16 products;
    dse.models.widths: the dtype's widths, or the format knobs' per layer);
  * hidden activations (after a ReLU): unsigned, one scale per tensor, max value / hi with
    hi = 2**b - 1 for b bits (int8: 255; int4: 15; int2: 3; int16: 13 bits, 8191), stored as
    uintb between layers: a ReLU output has no sign, so all b bits hold its levels (Brevitas's
    QuantReLU, QKeras's quantized_relu and FINN's networks quantise it so);
  * weights: qmax = 2**(b-1) - 1 for b-bit weights (int8 127, int16 32767, w4a8 7);
  * weights: one scale per output channel (max |row| / qmax) in hidden layers; one scale for the
    whole last layer, so its integer outputs are logits on one scale and argmax needs no rescaling;
  * biases: int32 on the accumulator's scale (input scale x weight scale);
  * accumulators: int32 (wrapping, as the hardware and numpy int32 do);
  * requantisation between layers by multiply-and-shift, rounding half up:
    h = clip(((acc >> P) * M[c] + 2**(S-1)) >> S, 0, hi), the clip being the ReLU; M[c] has
    at most MULTIPLIER_BITS bits, and the pre-shift P keeps (acc >> P) * M within int32 for
    twice the largest accumulator seen in calibration;
  * with the format knob `scale_digits: D` (dse.models.widths) a hidden layer's M[c] has at most
    D non-zero canonical signed digits (1: a power of two, so requantisation is shifts alone, as
    hls4ml's fixed-point casts are), and the layer's weight scales are stretched per channel to
    match it exactly (`cheap_multipliers`): a product by such an M is D - 1 adders in the
    hardware instead of a multiplier, and the weights lose at most a fraction of a bit;
  * the last layer's int32 accumulators are the outputs (logits).
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from compiler.host_input import HostInput
from dse.models import zoo
from dse.models.standardise import KINDS, InputMap, choose, fold_dense, make, relative_error

SCHEME = ("zero points 0; input signed symmetric, activations after a ReLU unsigned (b bits: 0 to 2**b - 1), "
          "per tensor; weights signed symmetric per output channel (last layer per tensor); "
          "int32 accumulators; multiply-and-shift requantisation with clipping")
MULTIPLIER_BITS = 14
FP8_SCHEME = ("fp8 weights, biases and activations (rounded to nearest even, saturating); products exact "
              "and summed in float32 with the bias; each layer's output (after its ReLU) rounded to fp8")


def is_fp8(dtype: str) -> bool:
    return dtype in ("fp8e4m3", "fp8e5m2")


@dataclass(frozen=True)
class Dense:
    W: np.ndarray            # (out, in), float
    b: np.ndarray            # (out,), float
    relu: bool               # ReLU after this layer (every layer but the last)
    name: str = ""           # its weights' name in the file (format knobs name layers by it)
    clip: float | None = None    # the ReLU bounded at this value (quantisation-aware fine-tuning's
                                 # learned range, dse.models.qat): the quantiser's calibration sees it


@dataclass(frozen=True)
class DenseNet:
    layers: tuple[Dense, ...]
    input_map: InputMap | None = None    # the host's map of the input (dse.models.standardise); the layers read its output

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> "DenseNet":
        """W1, b1, W2, b2, ...: layer i is W{i} @ h + b{i}, with a ReLU between layers."""
        n = 0
        while f"W{n + 1}" in arrays:
            n += 1
        if n == 0 or set(arrays) != {f"{p}{i}" for i in range(1, n + 1) for p in "Wb"}:
            raise ValueError(f"expected arrays W1, b1, ..., Wn, bn; got {', '.join(sorted(arrays))}")
        layers = []
        for i in range(1, n + 1):
            W, b = np.asarray(arrays[f"W{i}"], np.float64), np.asarray(arrays[f"b{i}"], np.float64)
            if W.ndim != 2 or b.shape != (W.shape[0],) or (layers and layers[-1].W.shape[0] != W.shape[1]):
                raise ValueError(f"layer {i}: W{i} {W.shape} and b{i} {b.shape} do not chain")
            layers.append(Dense(W, b, relu=i < n, name=f"W{i}"))
        return cls(tuple(layers))

    @property
    def inputs(self) -> int:
        return self.layers[0].W.shape[1]

    def standardised(self, x: np.ndarray, kind: str = "centred") -> "DenseNet":
        """This network behind the host's input map of `kind` (dse.models.standardise.KINDS)
        calibrated on samples `x` (n, in), the inverse folded into the first layer: the same
        function of the raw input. Itself if it has its map already."""
        if self.input_map is not None:
            return self
        x = np.asarray(x, np.float64).reshape(len(x), -1)
        m = make(x, kind, channels=False)
        first = self.layers[0]
        W, b = fold_dense(first.W, first.b, m)
        return DenseNet((dataclasses.replace(first, W=W, b=b), *self.layers[1:]), m)

    def host_input(self, x: np.ndarray) -> np.ndarray:
        """Samples (n, in) as the hardware's input takes them (before rounding or quantising):
        the input map applied."""
        x = np.asarray(x, np.float64).reshape(len(x), -1)
        return x if self.input_map is None else self.input_map(x)

    def float_logits(self, x: np.ndarray) -> np.ndarray:
        """The float model in float64 on raw samples (n, in): the accuracy baseline."""
        h = self.host_input(x)
        for layer in self.layers:
            h = h @ layer.W.T + layer.b
            if layer.relu:
                h = np.maximum(h, 0.0) if layer.clip is None else np.clip(h, 0.0, layer.clip)
        return h

    @property
    def clipped(self) -> bool:
        """Whether a layer's ReLU is bounded (a network fine-tuned for an integer format)."""
        return any(layer.clip is not None for layer in self.layers)

    def _float_only(self) -> None:
        if self.clipped:
            raise ValueError("a network fine-tuned quantisation-aware (bounded ReLUs) runs in the integer format "
                             "it was fine-tuned for; float dtypes run the trained network")

    def reference(self, dtype: str, x: np.ndarray, fp_semantics: str = "tinygrad",
                  trees: Sequence[int] | None = None) -> np.ndarray:
        """The float model in `dtype` as the hardware computes it under `fp_semantics`, on
        samples (n, in): fp8: `FP8_SCHEME` (in float32 the fp8 products are exact: only the sums
        round). fp16 with fp_semantics="tinygrad" (tinygrad emulates half in float32): products
        exact, summed in float32, then `zoo.half_layer`. The other float dtypes:
        each product rounded to the dtype and summed in float32 in order k = 0..K-1, the sum
        rounded to the dtype, the bias added in the dtype, then the ReLU (the numpy golden
        model of `built(dtype)`, bit-exact with the hardware in IEEE round-to-nearest-even).
        `trees`: per layer, the products its sum adds as one tree a step (fp_sum="tree" with that
        layer's reduce_unroll: zoo.tree_sum); None or 1: in order."""
        self._float_only()
        arrays = self.arrays(dtype)
        h = zoo.round_float(self.host_input(x), dtype).astype(np.float32)
        trees = list(trees or [1] * len(self.layers))
        if is_fp8(dtype):
            return self._fp8_reference(dtype, arrays, h, trees)
        if zoo.arith_for(dtype, fp_semantics).emulated_casts:
            return self._half_reference(arrays, h, trees)
        for i, (layer, u) in enumerate(zip(self.layers, trees), 1):
            W, b = arrays[f"W{i}"].astype(np.float32), arrays[f"b{i}"].astype(np.float32)
            acc = zoo.tree_sum(np.zeros((len(h), W.shape[0]), np.float32), W.shape[1], lambda k: zoo.round_float(
                (W[None, :, k].astype(np.float64) * h[:, k, None]).astype(np.float32), dtype).astype(np.float32), u)
            h = zoo.round_float(zoo.round_float(acc, dtype).astype(np.float32) + b, dtype).astype(np.float32)
            if layer.relu:
                h = np.where(h > 0, h, np.float32(0))     # tinygrad's relu: relu(-0.0) = +0.0
        return h

    def _half_reference(self, arrays: Mapping[str, np.ndarray], h: np.ndarray, trees: list[int]) -> np.ndarray:
        h = zoo.half_load(h)
        for i, (layer, u) in enumerate(zip(self.layers, trees), 1):
            W = zoo.half_load(arrays[f"W{i}"])
            # a product of halves is exact in float32
            acc = zoo.tree_sum(np.zeros((len(h), W.shape[0]), np.float32), W.shape[1],
                               lambda k: W[None, :, k] * h[:, k, None], u)
            h = zoo.half_layer(acc, arrays[f"b{i}"], layer.relu)
        return h

    def _fp8_reference(self, dtype: str, arrays: Mapping[str, np.ndarray], h: np.ndarray,
                       trees: list[int]) -> np.ndarray:
        for i, (layer, u) in enumerate(zip(self.layers, trees), 1):
            W, b = arrays[f"W{i}"].astype(np.float32), arrays[f"b{i}"].astype(np.float32)
            # an fp8 x fp8 product is exact in float32
            acc = zoo.tree_sum(np.zeros((len(h), W.shape[0]), np.float32), W.shape[1],
                               lambda k: W[None, :, k] * h[:, k, None], u)
            acc = acc + b
            if layer.relu:
                acc = np.where(acc > 0, acc, np.float32(0))
            h = zoo.round_float(acc, dtype).astype(np.float32)
        return h

    def built(self, dtype: str) -> zoo.Built:
        """The float model for a float dtype, as a zoo.Built (inputs x, W1, b1, ...). fp8:
        `FP8_SCHEME`: tinygrad would round each fp8 product to fp8, so the operands are cast
        to float32 first, and each layer's result is cast back to fp8."""
        self._float_only()
        inputs = {"x": ((self.inputs,), dtype)}
        for i, layer in enumerate(self.layers, 1):
            inputs[f"W{i}"] = (layer.W.shape, dtype)
            inputs[f"b{i}"] = (layer.b.shape, dtype)
        relus = [layer.relu for layer in self.layers]
        fp8 = is_fp8(dtype)

        def forward(x, *params):
            h = x
            for j, relu in enumerate(relus):
                W, b = params[2 * j], params[2 * j + 1]
                if fp8:
                    f32 = zoo.import_tinygrad().dtypes.float32
                    W, b, h = W.cast(f32), b.cast(f32), h.cast(f32)
                h = W @ h + b
                if relu:
                    h = h.relu()
                if fp8:
                    h = h.cast(params[2 * j].dtype)
                if j < len(relus) - 1:
                    # each layer its own kernel, its output stored (rounded to the dtype) as
                    # `reference` computes it: tinygrad fuses a layer into the next when that
                    # one has a single output (a binary classifier's last), and a half layer
                    # fused so is never rounded (a 30-8-1 network in fp16: 1 ULP apart on 66
                    # of 143 samples, the point failed)
                    h = h.contiguous()
            return h
        return zoo.Built(inputs, forward)

    def quantize(self, *, dtype: str, calibration: np.ndarray, formats=None) -> "QuantNet":
        return quantize(net=self, dtype=dtype, calibration=calibration, formats=formats)

    def arrays(self, dtype: str) -> dict[str, np.ndarray]:
        """The weights rounded to `dtype` (in its storage type)."""
        out = {}
        for i, layer in enumerate(self.layers, 1):
            out[f"W{i}"] = zoo.round_float(layer.W, dtype)
            out[f"b{i}"] = zoo.round_float(layer.b, dtype)
        return out


@dataclass(frozen=True)
class QuantLayer:
    W: np.ndarray            # (out, in) int8/int16
    b: np.ndarray            # (out,) int32, on the accumulator's scale
    acc_scale: np.ndarray    # (out,) float: real value of one accumulator unit
    M: np.ndarray | None     # (out,) int32 multipliers (None: last layer, no requantisation)
    P: int                   # pre-shift
    S: int                   # shift
    hi: int = 0              # the requantised output's largest value (clipped to [0, hi], hi = 2**b - 1)


@dataclass(frozen=True)
class QuantNet:
    dtype: str
    input_scale: float       # of the mapped input: one input unit is this much of input_map(x)
    layers: tuple[QuantLayer, ...]
    input_qmax: int = 0      # the input integers lie in [-input_qmax, input_qmax]
    widths: object = None    # dse.models.widths.Widths
    input_map: InputMap | None = None

    @property
    def scheme(self) -> str:
        """How it was quantised, in words (a row's `quantization`)."""
        return (f"input {self.input_map.describe()} by the host; " if self.input_map is not None else "") + SCHEME

    @property
    def qmax(self) -> int:
        return self.input_qmax

    def host_input(self) -> HostInput:
        """The host's step from a raw sample to the input integers: the input map and the input's
        grid in one affine per feature, rounded to nearest (ties to even) and clipped."""
        n = self.layers[0].W.shape[1]
        a, c = self.input_map.per_feature() if self.input_map is not None else (np.ones(n), np.zeros(n))
        how = (self.input_map.describe() if self.input_map is not None else "one scale") + \
            f", then {self.qmax} steps to 1"
        return HostInput("x", a / self.input_scale, c / self.input_scale, "HALF_EVEN",
                         _element(-self.qmax, self.qmax), -self.qmax, self.qmax, how)

    def quantize_input(self, x: np.ndarray) -> np.ndarray:
        """Raw samples (n, in) as the hardware's integer inputs (`host_input`)."""
        return self.host_input()(x).astype(zoo.storage(_element(-self.qmax, self.qmax)))

    def mean_bits(self) -> tuple[float, float]:
        """(mean weight bits, mean activation bits: the input and each requantised output)."""
        from dse.models.widths import mean_bits
        w = [(-int(np.abs(layer.W).max()), int(np.abs(layer.W).max())) for layer in self.layers]
        # the input is signed; each hidden activation, after its ReLU, unsigned [0, hi]: b bits
        acts = [(-self.input_qmax, self.input_qmax)] + [(0, layer.hi) for layer in self.layers if layer.M is not None]
        if self.widths is not None:
            w = [(-(2 ** (b - 1) - 1), 2 ** (b - 1) - 1) for b in self.widths.weights]
        return mean_bits(w, acts)

    def dequantize(self, logits: np.ndarray) -> np.ndarray:
        """The float value of integer logits."""
        return np.asarray(logits, np.float64) * self.layers[-1].acc_scale

    def reference(self, xq: np.ndarray) -> np.ndarray:
        """The integer model in numpy int32 (wrapping like the hardware), on one sample (in,) or
        many (n, in): int32 logits."""
        h = np.asarray(xq).astype(np.int32)
        for layer in self.layers:
            acc = h @ layer.W.astype(np.int32).T + layer.b
            if layer.M is None:
                return acc.astype(np.int32)
            r = (((acc >> layer.P) * layer.M) + np.int32(1 << (layer.S - 1))) >> layer.S
            h = np.clip(r, 0, layer.hi).astype(np.int32)
        raise AssertionError("unreachable: the last layer has no multiplier")

    def built(self) -> zoo.Built:
        """The integer model as a zoo.Built: inputs x, W1, b1, M1 (or E1: `requantisation_input`), ..., Wn, bn
        (tinygrad)."""
        from compiler.dtypes import to_tinygrad
        tg = zoo.import_tinygrad()
        i32 = tg.dtypes.int32
        # each input declared at its width (int4 weights in an int8 Tensor), so the hardware is
        # sized to it; the requantised activations' range comes from their clip ([0, hi]: uintb)
        inputs = {"x": ((self.layers[0].W.shape[1],), _element(-self.qmax, self.qmax))}
        shifts = []
        for i, layer in enumerate(self.layers, 1):
            inputs[f"W{i}"] = (layer.W.shape, _element(*self.weight_range(i - 1)))
            inputs[f"b{i}"] = (layer.b.shape, _element(*_span(layer.b)))
            shifted = False
            if layer.M is not None:
                name, scale, shifted = requantisation_input(i, layer.M)
                inputs[name] = (scale.shape, _element(*_span(scale)))
            shifts.append((layer.P, layer.S, layer.M is not None, layer.hi,
                           to_tinygrad(zoo.DTYPES[_element(0, layer.hi)]), shifted))

        def forward(x, *params):
            h, k = x.cast(i32), 0
            for P, S, requant, hi, narrow, shifted in shifts:
                acc = params[k].cast(i32) @ h + params[k + 1].cast(i32)
                if not requant:
                    return acc
                scale = params[k + 2].cast(i32)
                r = (((acc >> P) << scale if shifted else (acc >> P) * scale) + (1 << (S - 1))) >> S
                # stored narrow between layers, each layer its own kernel (DenseNet.built says
                # why; in integers the values are the same either way, but a fused layer has no
                # kernel of its own for `lanes@W1` to name, nor a stage of its own in a dataflow)
                h = r.clip(0, hi).cast(narrow).contiguous().cast(i32)
                k += 3
            raise AssertionError("unreachable: the last layer has no multiplier")
        return zoo.Built(inputs, forward)

    def weight_range(self, i: int) -> tuple[int, int]:
        """Layer i's weight range: the symmetric one of its width."""
        qmax = 2 ** (self.widths.weights[i] - 1) - 1 if self.widths is not None else int(np.abs(self.layers[i].W).max())
        return -qmax, qmax

    def arrays(self) -> dict[str, np.ndarray]:
        out = {}
        for i, layer in enumerate(self.layers, 1):
            out[f"W{i}"] = layer.W.astype(zoo.storage(_element(*self.weight_range(i - 1))))
            out[f"b{i}"] = layer.b.astype(zoo.storage(_element(*_span(layer.b))))
            if layer.M is not None:
                name, scale, _ = requantisation_input(i, layer.M)
                out[name] = scale.astype(zoo.storage(_element(*_span(scale))))
        return out


def exponents(M: np.ndarray) -> np.ndarray | None:
    """log2 of every multiplier of a layer when each is a power of two (scale_digits: 1), else
    None. Such a layer requantises by a left shift by its stored exponent instead of a product by
    its stored multiplier: the same int32 values (x * 2**e is x << e, both wrapping), but where a
    folded layer reads its channels' scales from a memory the hardware is a barrel shifter of a
    few multiplexer levels, not a 14-bit multiplier (with constant weights both become wires)."""
    M = np.asarray(M, np.int64)
    if (M <= 0).any() or (M & (M - 1)).any():
        return None
    return np.array([int(m).bit_length() - 1 for m in M.ravel()], np.int64).reshape(M.shape)


def requantisation_input(i: int, M: np.ndarray) -> tuple[str, np.ndarray, bool]:
    """(name, values, shifted) of the integer model's input that scales layer i's accumulators:
    E{i}, the exponents, shifted by, when every multiplier is a power of two (`exponents`), else
    M{i}, the multipliers, multiplied by."""
    e = exponents(M)
    return (f"M{i}", M, False) if e is None else (f"E{i}", e, True)


def _element(lo: int, hi: int) -> str:
    from dse.models.widths import int_element
    return int_element(lo, hi)


def _span(a: np.ndarray) -> tuple[int, int]:
    """The integer range of constant arrays (biases, multipliers): what their inputs are declared
    as, so the adders and multipliers they reach are sized to it."""
    return min(int(a.min()), 0), max(int(a.max()), 1)


def quantize(*, net: DenseNet, dtype: str, calibration: np.ndarray, formats=None) -> QuantNet:
    """Post-training quantisation of `net` to `dtype` (int8 or int16), scales calibrated on
    `calibration` samples (n, in) (the training split), at the widths of `formats` (the format
    knobs, dse.models.widths; None: the dtype's). See the module docstring. A network without
    an input map is quantised behind each map of dse.models.standardise, and `choose` keeps
    one by the error of its outputs on the calibration samples."""
    if net.input_map is not None:
        return _quantize(net=net, dtype=dtype, calibration=calibration, formats=formats)
    x = np.asarray(calibration, np.float64).reshape(len(calibration), -1)
    want = net.float_logits(x)

    def attempt(kind: str):
        try:
            return _quantize(net=net.standardised(x, kind), dtype=dtype, calibration=x, formats=formats)
        except ValueError as e:
            return e
    return choose([attempt(kind) for kind in KINDS],
                  lambda q: relative_error(q.dequantize(q.reference(q.quantize_input(x))), want))


def _quantize(*, net: DenseNet, dtype: str, calibration: np.ndarray, formats=None) -> QuantNet:
    from dse.models.widths import Widths, layer_names, widths
    bits = widths(dtype, layer_names(net.layers), formats)
    store = np.int16          # each layer's weights go to their width's container in arrays()
    x = net.host_input(calibration)
    in_qmax = Widths.qmax(bits.input)
    s_in = input_scale = max(float(np.abs(x).max()), 1e-12) / in_qmax
    qnet_layers: list[QuantLayer] = []
    h_float = x
    h_int = np.clip(np.round(x / s_in), -in_qmax, in_qmax).astype(np.int64)
    for i, layer in enumerate(net.layers):
        last = not layer.relu
        qmax, (_, act_hi) = Widths.qmax(bits.weights[i]), Widths.act_range(bits.outputs[i], relu=True)
        widest = max(float(np.abs(layer.W).max()), 1e-12)
        h_float = h_float @ layer.W.T + layer.b
        total = None
        if last:
            s_w = np.full(layer.W.shape[0], widest / qmax)
        else:
            h_float = np.maximum(h_float, 0.0) if layer.clip is None else np.clip(h_float, 0.0, layer.clip)
            # a row of zeros (pruned away: its output is its bias) takes the layer's scale, not
            # one so small that its bias would leave int32 on the accumulator's scale
            rows = np.abs(layer.W).max(axis=1)
            s_w = np.where(rows > 0, rows, widest) / qmax
            # a layer whose every ReLU stays off on the calibration data (its outputs all 0)
            # passes its accumulator on unscaled (a multiplier of at most 1); from a scale of
            # 1e-12 its requantisation needed a shift below 1 and the point failed
            s_out = (max(float(h_float.max()), 1e-12) / act_hi if h_float.max() > 0 else
                     float((s_in * s_w).max()))
            if bits.scales[i] is not None:
                total, stretch = cheap_multipliers(s_in * s_w / s_out, bits.scales[i])
                s_w = s_w * stretch
        Wq = np.clip(np.round(layer.W / s_w[:, None]), -qmax, qmax).astype(store)
        acc_scale = s_in * s_w
        bq = np.round(layer.b / acc_scale).astype(np.int64)
        acc = h_int @ Wq.astype(np.int64).T + bq
        if np.abs(acc).max() >= 2 ** 31:
            raise ValueError(f"{dtype}: an accumulator of layer {len(qnet_layers) + 1} exceeds int32 on the "
                             "calibration data")
        if last:
            qnet_layers.append(QuantLayer(Wq, bq.astype(np.int32), acc_scale, None, 0, 0))
            break
        M, P, S = requantisation(acc_scale=acc_scale, out_scale=s_out, acc=acc, total=total,
                                 where=f"{dtype}: layer {len(qnet_layers) + 1}")
        ql = QuantLayer(Wq, bq.astype(np.int32), acc_scale, M, P, S, act_hi)
        qnet_layers.append(ql)
        h_int = np.clip(requantise(acc, M, P, S), 0, act_hi)
        s_in = s_out
    return QuantNet(dtype, input_scale, tuple(qnet_layers), Widths.qmax(bits.input), bits, net.input_map)


def requantisation(*, acc_scale: np.ndarray, out_scale: float, acc: np.ndarray, where: str,
                   total: int | None = None) -> tuple[np.ndarray, int, int]:
    """(M, P, S) with (acc >> P) * M >> S ~ acc * acc_scale / out_scale per channel: M below
    2**MULTIPLIER_BITS, the pre-shift P keeping (acc >> P) * M inside int32 for twice the
    largest |acc| seen in calibration. `total` (P + S): cheap_multipliers' (None: the most that
    keeps M below 2**MULTIPLIER_BITS). Raises ValueError (naming `where`) if no shift fits."""
    m = np.asarray(acc_scale, np.float64) / out_scale          # real multiplier per channel
    acc_bits = int(2 * np.abs(acc).max()).bit_length()
    P = max(0, acc_bits - (31 - MULTIPLIER_BITS))
    if total is None:
        total = int(math.floor(math.log2((2 ** MULTIPLIER_BITS - 1) / m.max())))
    if not 1 <= total - P <= 30:
        raise ValueError(f"{where} needs a requantisation shift of {total - P}")
    return np.round(m * 2.0 ** total).astype(np.int32), P, total - P


def cheap_multipliers(m: np.ndarray, digits: int) -> tuple[int, np.ndarray]:
    """(total, stretch) for real per-channel multipliers `m` (accumulator unit / output unit):
    with the weight scales multiplied by `stretch` (>= 1, per channel), round(m' * 2**total) is
    an integer of at most `digits` non-zero canonical signed digits, the least such integer at
    or above m * 2**total, so no weight grows past its range. `total` leaves M one bit of room
    below 2**MULTIPLIER_BITS for the rounding up."""
    m = np.asarray(m, np.float64)
    total = int(math.floor(math.log2(2 ** (MULTIPLIER_BITS - 1) / m.max())))
    ideal = m * 2.0 ** total
    table = _cheap_integers(digits)
    chosen = table[np.searchsorted(table, np.ceil(ideal - 1e-9))]
    return total, chosen / ideal


@functools.lru_cache(maxsize=None)
def _cheap_integers(digits: int) -> np.ndarray:
    """The positive integers below 2**MULTIPLIER_BITS + 1 with at most `digits` non-zero canonical
    signed digits, ascending (read-only; once per process: 16,384 digit expansions take 0.5 s)."""
    from compiler.passes.constants import csd
    table = np.array([c for c in range(1, 2 ** MULTIPLIER_BITS + 1) if len(csd(c)) <= digits], np.float64)
    table.setflags(write=False)
    return table


def requantise(acc: np.ndarray, M: np.ndarray, P: int, S: int) -> np.ndarray:
    """(acc >> P) * M + 2**(S-1) >> S in int64 (calibration: no wrap can happen there)."""
    return (((np.asarray(acc, np.int64) >> P) * np.asarray(M, np.int64)) + (1 << (S - 1))) >> S
