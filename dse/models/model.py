"""A model of a study, built for a number format: the spec's record of it (`ModelSpec`), its
trained weights and data (`ModelFiles`, `TrainedModel`), and the networks read, quantised and
loaded once per process.

    model = spec.model("digits_mlp")
    built = model.build("int8")             # dse.models.zoo.Built: inputs and the tinygrad forward
    real = model.real_inputs("int8")        # dse.models.data.RealInputs: weights and test samples
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from dse.frozen import FrozenMap
from dse.models import zoo
from dse.models.user_model import load_function
from dse.models.zoo import InputRange


@dataclass(frozen=True)
class ModelSpec:
    """One model of the study: a zoo model (`builtin`) or a user's function (`source`)."""
    name: str
    builtin: str | None             # zoo model name
    source: Path | None             # absolute path of the user's file
    function: str | None            # function in that file
    params: FrozenMap[str, Any]     # complete: defaults filled in
    input_ranges: FrozenMap[str, InputRange]   # dtype -> range given in the spec (model's own or top-level)
    trained: "TrainedModel | None" = None      # a network the tool quantises (`weights:` or `onnx:`) and its data
    files: "ModelFiles | None" = None          # weights and/or data for a builtin or source model
    onnx: Path | None = None                   # an ONNX graph run whole by tinygrad's importer (float dtypes)
    dtypes: tuple[str, ...] = ()               # the dtypes it runs (its own `dtypes:`, else the spec's)

    def build(self, dtype: str) -> zoo.Built:
        """`(inputs, forward)` for `dtype` (the contract is checked)."""
        if self.runs_trained(dtype):
            return zoo.check_built(self.trained.built(dtype))
        if self.builtin is not None:
            return zoo.check_built(zoo.ZOO[self.builtin].build(dtype, **self.params))
        if self.onnx is not None:
            from dse.models.data import onnx_built
            return zoo.check_built(onnx_built(self.onnx, dtype))
        assert self.source is not None and self.function is not None
        return zoo.check_built(load_function(self.source, self.function)(dtype, **self.params))

    @property
    def golden(self) -> bool:
        """A zoo model with a numpy golden model (others are checked against tinygrad)."""
        return self.builtin is not None and zoo.ZOO[self.builtin].reference is not None

    def with_formats(self, formats) -> "ModelSpec":
        """This model with a point's format knobs (dse.models.widths.Formats) for the tool's
        quantiser; a model it does not quantise stays as it is."""
        if not formats or self.trained is None:
            return self
        return dataclasses.replace(self, trained=dataclasses.replace(self.trained, formats=formats))

    def runs_trained(self, dtype: str) -> bool:
        """Whether `dtype` runs the trained network's own build (a dense network in every dtype,
        a quantised CNN in integer ones; dse.models.accuracy.run_samples), rather than the model with
        its `files` (run_model_samples). A network the tool reads as a chain runs its own build in
        every dtype: quantised in integer ones, TrainedModel.float_net in float ones (a CNN chain
        in fp8 through dse.models.fp8net, in fp16/bf16/fp32 through dse.models.floatnet), each
        with a bit-exact golden model; an ONNX graph that is no chain has no `trained`."""
        return self.trained is not None

    def real_inputs(self, dtype: str, inputs: dict | None = None):
        """The dse.models.data.RealInputs that fill this model's inputs in `dtype`: trained weights and
        test samples (None: the model has neither, its inputs are random data). `inputs`: the
        inputs of its build for `dtype` where the caller has built it (a user's code is not
        run again for them)."""
        if self.runs_trained(dtype):
            return self.trained.inputs(dtype)
        if self.files is None:
            return None
        return self.files.inputs(self.build(dtype).inputs if inputs is None else inputs, dtype)

    def runtime_inputs(self, dtype: str, inputs: dict | None = None) -> tuple[str, ...]:
        """The inputs given at run time, the data: the one the data's samples fill, the zoo's data
        inputs of a builtin (its others are weights), a user's function's input `x` (else every
        input the weights file does not fill). They stream through a dataflow design; the other
        inputs are weights, and weights="constant" builds them in with the model's own
        constants (Tensors its forward makes from arrays). `inputs`: as real_inputs'."""
        inputs = self.build(dtype).inputs if inputs is None else inputs
        real = self.real_inputs(dtype, inputs)
        if real is not None and real.data_input is not None:
            return (real.data_input,)
        filled = set(real.weights) if real is not None else set()
        free = [n for n in inputs if n not in filled]
        if self.builtin is not None:
            return tuple(n for n in free if n in zoo.ZOO[self.builtin].data_inputs)
        return ("x",) if "x" in free else tuple(free)      # a user's function: its `x`, as the zoo's

    def input_range(self, dtype: str) -> InputRange | None:
        """The spec's range for `dtype`; None: each input's dtype default (zoo.default_input_range)."""
        return self.input_ranges.get(dtype)

    def describe(self) -> str:
        if self.trained is not None:
            pruned = f", {self.trained.prune:.0%} pruned" if self.trained.prune else ""
            qat = f", fine-tuned at each integer format ({self.trained.qat.describe()})" if self.trained.qat else ""
            return f"{self.trained.kind}: {self.trained.path.name}{pruned}{qat}"
        if self.onnx is not None:
            return f"onnx: {self.onnx.name} (the whole graph)"
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        what = self.builtin if self.builtin is not None else f"{self.source.name}:{self.function}"  # type: ignore[union-attr]
        files = self.files
        extra = "" if files is None else "".join(
            [f", weights: {files.weights.name}" if files.weights is not None else "",
             f", data: {files.data.dataset or files.data.file.name}" if files.data is not None else ""])
        return f"{what}({args}){extra}"


@dataclass(frozen=True)
class ModelFiles:
    """Trained weights (`weights:` beside `source:` or `builtin:`: arrays matched to the model's
    inputs by name, shapes checked) and/or the data its accuracy is measured on (`data:`, filling
    the one input the weights leave, or `data.input`). Each dtype gets the arrays in its own
    format (dse.models.data.in_dtype: floats rounded; integers must be whole numbers in range)."""
    weights: Path | None
    data: Any                       # dse.models.data.DataSpec or None

    def dataset(self):
        from dse.models.data import load_dataset
        return None if self.data is None else remembered(("data", self.data), lambda: load_dataset(self.data))

    def inputs(self, inputs: Mapping[str, tuple[tuple[int, ...], str]], dtype: str, with_data: bool = True):
        """The dse.models.data.RealInputs for a model with these `inputs` in `dtype` (once per process)."""
        from dse.models.data import real_inputs
        stamp = self.weights.stat().st_mtime_ns if self.weights is not None else None
        key = ("inputs", self, stamp, tuple(inputs.items()), dtype, with_data)
        return remembered(key, lambda: real_inputs(inputs=inputs, weights_path=self.weights,
                                                   data=self.dataset() if with_data else None,
                                                   named=self.data.input if self.data is not None else None))


@dataclass(frozen=True)
class TrainedModel:
    """A trained network the tool can quantise, and the data its accuracy is measured on:
    `weights:` (a dense chain, arrays W1, b1, W2, b2, ... in a .npz or .safetensors file) or
    `onnx:` (a Gemm/MatMul/Add/Relu chain, dse.models.quantize.DenseNet; or a chain with Conv and
    MaxPool too, dse.models.convnet.LayerNet), read by tinygrad's importer. int8/int16 run its
    post-training quantisation, calibrated on the data's training split; float dtypes run a
    dense network with its weights rounded to the dtype (a CNN's float dtypes run the whole
    ONNX graph instead: ModelSpec.onnx). `prune` > 0: the network magnitude-pruned to that
    sparsity and retrained on the data's training split first (dse.models.prune), so every
    dtype builds the pruned network. `qat`: each integer point fine-tunes that network at its
    own format before quantising it (dse.models.qat; `fine_tuned`), float points run it as it is."""
    kind: str                       # "weights" or "onnx"
    path: Path                      # absolute
    data: Any                       # dse.models.data.DataSpec
    prune: float = 0.0              # the fraction of each layer's weights pruned to zero
    formats: Any = None             # dse.models.widths.Formats: a point's widths (None: the dtype's)
    qat: Any = None                 # dse.models.qat.QatOptions: fine-tuned at each integer point's format

    def net(self):
        """The dse.models.quantize.DenseNet, pruned if asked (read and pruned once per process)."""
        net = _load_net(self.kind, self.path)
        if not self.prune:
            return net

        def make():
            from dse.models.prune import prune
            data = self.dataset()
            return prune(net, sparsity=self.prune, x=data.x_train.reshape(len(data.x_train), -1), y=data.y_train)
        return remembered(("pruned", self.kind, self.path, self.path.stat().st_mtime_ns, self.data, self.prune), make)

    def dataset(self):
        """The dse.models.data.Dataset (loaded once per process)."""
        from dse.models.data import load_dataset
        return remembered(("data", self.data), lambda: load_dataset(self.data))

    def quantized(self, dtype: str):
        """The integer model for an integer `dtype` (once per process): the network (fine-tuned at
        the point's format with `qat`) quantised, calibrated on the training split."""
        from dse.models.widths import quantisable
        if not quantisable(dtype):
            raise ValueError(f"a trained float network runs in a signed integer format (int8, int4, w4a8, ...: "
                             f"quantised) or a float dtype, "
                             f"not {dtype}")
        data = self.dataset()
        formats = self.kernel_formats(dtype)
        tuned = self.fine_tuned(dtype)
        net = self.net() if tuned is None else tuned.net
        return remembered(("quant", self.kind, self.path, self.data, self.prune, self.qat, dtype, formats),
                          lambda: net.quantize(dtype=dtype, calibration=data.x_train.reshape(len(data.x_train), -1),
                                               formats=formats))

    def fine_tuned(self, dtype: str):
        """The dse.models.qat.FineTuned network of an integer `dtype` at the point's format knobs
        (None: no `qat`, or a float dtype): trained once per content ($TINYHW_CACHE/qat) and kept
        in memory; a line on stderr every 10 s while it trains."""
        from dse.models.widths import quantisable
        if self.qat is None or not quantisable(dtype):
            return None
        formats = self.kernel_formats(dtype)

        def make():
            import sys
            from dse.models.qat import cached_fine_tune
            data = self.dataset()
            what = f"{self.path.name} {dtype}" + "".join(f" {k}={v}" for k, v in (formats.settings if formats else ()))
            return cached_fine_tune(self.net(), dtype=dtype, formats=formats, x=data.x_train, y=data.y_train,
                                    options=self.qat, pruned=self.prune > 0,
                                    progress=lambda line: print(f"qat {what}: {line}", file=sys.stderr, flush=True))
        return remembered(("qat", self.kind, self.path, self.path.stat().st_mtime_ns, self.data, self.prune, self.qat,
                           dtype, formats), make)

    def untuned(self) -> "TrainedModel":
        """This model without fine-tuning: the same layers, kernels and inputs (what the spec's
        checks and layer listings read), without training a network for each dtype."""
        return dataclasses.replace(self, qat=None) if self.qat is not None else self

    def kernel_formats(self, dtype: str):
        """The point's format knobs with a layer named by its kernel (`weight_bits@k0_r_32_64`, as
        lanes@ names it) named as the conv/dense layer that kernel computes (`weight_bits@W1`)."""
        from dse.models.widths import Formats, layer_names, quantisable
        if not self.formats or not quantisable(dtype):
            return self.formats
        names = layer_names([layer for layer in getattr(self.net(), "layers", ()) if hasattr(layer, "W")])
        if all(layer.isdigit() or layer in names for layer in self.formats.layers()):
            return self.formats
        plain = ModelSpec("", None, None, None, FrozenMap(), FrozenMap(), dataclasses.replace(self, formats=None))
        kernels = [name for name, _, _ in model_layer_limits(plain, dtype)]
        by_kernel = {kernels[k]: layer for layer, k in layer_kernels(plain, dtype).items()}
        out: dict[str, int] = {}
        for key, value in self.formats.settings:
            knob, at, layer = key.partition("@")
            key = f"{knob}@{by_kernel[layer]}" if at and layer in by_kernel else key
            if key in out:
                raise ValueError(f"{knob}@{layer}: layer {layer} computes {by_kernel[layer]}, given {knob} twice "
                                 "(by two names)")
            out[key] = value
        return Formats.of(out)

    def float_net(self, dtype: str):
        """The network as a float model in `dtype` (built, arrays, reference): a dense one as it
        is; a CNN chain through dse.models.fp8net in fp8, dse.models.floatnet otherwise."""
        data = self.dataset()
        return remembered(("float", self.kind, self.path, self.path.stat().st_mtime_ns, self.data, self.prune, dtype),
                          lambda: float_model(self.net(), dtype, data.x_train.reshape(len(data.x_train), -1)))

    def built(self, dtype: str) -> zoo.Built:
        if zoo.DTYPES[dtype].is_float:
            return self.float_net(dtype).built(dtype)
        return self.quantized(dtype).built()

    def host_input(self, dtype: str):
        """The host's step from a raw sample to the hardware's input `x` in `dtype`
        (compiler.host_input.HostInput): the quantiser's, or for a float dtype the input map
        before the rounding to the dtype."""
        if not zoo.DTYPES[dtype].is_float:
            return self.quantized(dtype).host_input()
        from compiler.host_input import HostInput
        net = self.float_net(dtype)
        m = getattr(net, "input_map", None) or getattr(getattr(net, "net", None), "input_map", None)
        n = math.prod(getattr(net, "input_shape", (net.inputs,)))
        import numpy as np
        a, c = m.per_feature() if m is not None else (np.ones(n), np.zeros(n))
        return HostInput("x", a, c, "", dtype, how=m.describe() if m is not None else "the raw input")

    def inputs(self, dtype: str):
        """The dse.models.data.RealInputs of `dtype`: the network's weights (rounded to a float dtype,
        or quantised) and the test samples (rounded, or quantised) for its input `x`."""
        from dse.models.data import RealInputs
        data = self.dataset()
        x = data.x_test.reshape(len(data.x_test), -1)
        if zoo.DTYPES[dtype].is_float:
            net = self.float_net(dtype)
            xs = zoo.round_float(net.host_input(x), dtype).reshape((len(x), *getattr(net, "input_shape", (net.inputs,))))
            return RealInputs(net.arrays(dtype), "x", xs, data.y_test)
        q = self.quantized(dtype)
        return RealInputs(q.arrays(), "x", q.quantize_input(x), data.y_test)


def float_model(net, dtype: str, calibration):
    """`net` (a DenseNet or LayerNet) as a float model in `dtype` (built, arrays, reference: a
    dense network as it is, a chain through dse.models.fp8net in fp8 or dse.models.floatnet),
    behind the host's input map chosen as the quantiser chooses (dse.models.standardise.choose:
    no map, "scaled" or "centred", by its golden model's error on at most 1,000 calibration
    samples)."""
    from dse.models.quantize import is_fp8
    from dse.models.standardise import choose, relative_error

    def wrap(n):
        if hasattr(n, "built"):
            return n
        if is_fp8(dtype):
            from dse.models.fp8net import Fp8Net
            return Fp8Net(n)
        from dse.models.floatnet import FloatNet
        return FloatNet(n)
    x = calibration[:1000]
    candidates = [net]
    for kind in ("scaled", "centred"):
        mapped = net.standardised(x, kind)
        if all(mapped is not c for c in candidates):
            candidates.append(mapped)
    if len(candidates) == 1:
        return wrap(net)
    want = net.float_logits(x)
    return wrap(choose(candidates, lambda n: relative_error(wrap(n).reference(dtype, x), want)))


_CACHE: dict[Any, Any] = {}


def remembered(key: Any, make):
    """make(), once per key in this process: networks, data and the values derived from them are
    read or computed once however many sweep points use them (the key names everything they
    depend on, file modification times included)."""
    if key not in _CACHE:
        _CACHE[key] = make()
    return _CACHE[key]


def _load_net(kind: str, path: Path):
    from dse.models.data import read_weights
    from dse.models.quantize import DenseNet

    def make():
        if kind == "onnx":     # a dense network, or a CNN chain (NotDenseChain: anything else runs whole)
            from dse.models.chain import read_net
            return read_net(path)
        arrays = read_weights(path)       # a DataError names the file already
        try:
            return DenseNet.from_arrays(arrays)
        except ValueError as e:
            from dse.models.data import DataError
            raise DataError(f"{path}: {e}") from None
    return remembered(("net", kind, path, path.stat().st_mtime_ns), make)


def quantised_layers(model: ModelSpec) -> list[str]:
    """The conv/dense layers of a network the tool quantises, by name (what format knobs set)."""
    from dse.models.widths import layer_names
    net = model.trained.net()
    layers = getattr(net, "layers", ())
    return layer_names([layer for layer in layers if hasattr(layer, "W")])


def model_layers(model: ModelSpec, dtype: str) -> list[str]:
    """The layers of `model` in `dtype` (its kernels, compiler.layer_names), once per process."""
    return [name for name, _, _ in model_layer_limits(model, dtype)]


def model_layer_limits(model: ModelSpec, dtype: str) -> list[tuple[str, int, int]]:
    """(name, most lanes, most reduce_unroll) of each layer of `model` in `dtype`
    (compiler.layer_limits), once per process."""
    return list(_layer_trace(model, dtype)[0])


def layer_kernels(model: ModelSpec, dtype: str) -> dict[str, int]:
    """Each conv/dense layer of a network the tool quantises by its name (what the format knobs
    take: `weight_bits@W1`) -> the index of the layer (kernel) that computes it in `dtype` (what
    lanes@ takes): the kernel reading its weights. {} for a model the tool does not quantise.
    One naming for a layer across both kinds of knob (`lanes@W1` is the kernel of W1)."""
    return dict(_layer_trace(model, dtype)[1])


def untuned(model: ModelSpec) -> ModelSpec:
    """`model` as its layers and inputs go (TrainedModel.untuned): fine-tuning changes values only."""
    if model.trained is None or model.trained.qat is None:
        return model
    return dataclasses.replace(model, trained=model.trained.untuned())


def _layer_trace(model: ModelSpec, dtype: str):
    """(layer limits, ((conv/dense layer name, kernel index), ...)) of `model` in `dtype`, from
    one trace, once per process (without fine-tuning: its layers are the same)."""
    model = untuned(model)

    def make():
        from compiler import layer_inputs, layer_limits
        built = model.build(dtype)
        tensors = zoo.input_tensors(built, zoo.make_inputs(built, 0, model.input_range(dtype)))
        output = built.forward(*tensors)
        limits = tuple(layer_limits(output))
        if model.trained is None:
            return limits, ()
        names = list(built.inputs)
        reads = [{names[i] for i in r} for r in layer_inputs(output, inputs=tensors)]
        kernels = []
        for j, layer in enumerate(quantised_layers(model)):
            # every build of a network the tool reads names layer j's weights W<j + 1> (quantize,
            # convnet, floatnet, fp8net)
            k = next((k for k, r in enumerate(reads) if f"W{j + 1}" in r), None)
            if k is not None:
                kernels.append((layer, k))
        return limits, tuple(kernels)
    return remembered(("layers", model, dtype), make)


def kernel_config(model: ModelSpec, dtype: str, config):
    """`config` (a compiler HardwareConfig) with every per-layer setting that names a conv/dense
    layer (`lanes@W1`, as the format knobs name it) given by the name of the kernel computing it,
    which compile_model resolves (and refuses a layer given twice, by index and by name)."""
    named = [layer for layer, _ in config.layers if isinstance(layer, str)]
    aliases = layer_kernels(model, dtype) if named and model.trained is not None else {}
    if not any(layer in aliases for layer in named):
        return config
    kernels = [name for name, _, _ in model_layer_limits(model, dtype)]
    out: dict[str, Any] = {}
    for key, value in config.as_dict().items():
        knob, at, layer = key.partition("@")
        key = f"{knob}@{kernels[aliases[layer]]}" if at and layer in aliases else key
        if key in out:
            raise ValueError(f"{knob}@{layer}: layer {layer} is layer {aliases[layer]} ({kernels[aliases[layer]]}), "
                             f"given {knob} twice (by two names)")
        out[key] = value
    return type(config).from_dict(out)


def model_constants(model: ModelSpec, dtype: str) -> int:
    """How many of `model`'s inputs weights="constant" builds in (compiler.constant_inputs):
    0 for a model whose weights are all given at run time. Once per process (without
    fine-tuning: which inputs hold data does not depend on their values)."""
    model = untuned(model)

    def make():
        from compiler import constant_inputs
        built = model.build(dtype)
        arrays = zoo.make_inputs(built, 0, model.input_range(dtype))
        real = model.real_inputs(dtype, built.inputs)
        if real is not None:
            arrays.update(real.weights)
        tensors = zoo.input_tensors(built, arrays)
        runtime = set(model.runtime_inputs(dtype, built.inputs))
        return constant_inputs(built.forward(*tensors),
                               stream=[t for n, t in zip(built.inputs, tensors) if n in runtime] or None)
    return remembered(("constants", model, dtype), make)
