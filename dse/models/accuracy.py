"""A trained dense model on real samples, through the hardware: accuracy and its checks.

    result = run_samples(net=net, dtype="int8", data=load_dataset(DataSpec(dataset="sklearn:digits")),
                         config=HardwareConfig(lanes=4))
    result.accuracy, result.accuracy_float, result.agreement, result.cycles   # checked bit-exact

The pipeline: the model for the dtype (a float dtype: the float model with weights rounded to
it; int8/int16: dse.models.quantize's post-training quantisation calibrated on the training split),
compiled once with the first sample, then every test sample run through one simulator process
(compiler.simulate_many). Checks, on every sample (a failure raises SampleCheckError): the cycle count equals the
analytic model; the outputs are bit-exact against the numpy golden model (integers: the
quantised reference, dse.models.quantize.QuantNet.reference; floats: DenseNet.reference, the kernels'
own rounding). Metrics: `accuracy` (top-1
against the labels; without labels, agreement of the argmax with the float model),
`accuracy_float` (the float64 model on the same samples), `agreement` (argmax equal to the float
model's), and the mean and max |error| of the (dequantised) logits against the float model.

Any other model (a zoo model or a user's function with `weights:` and `data:`) runs its samples
through the design the evaluation already compiled, by `run_model_samples`: each sample checked
against the point's own reference and rule (dse.evaluate's checker: bit-exact for integers and
for zoo models, tinygrad's result within the stated tolerance for a user's float model), the
float model being the same model in fp32 with the file's weights as they are (`float_outputs`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Protocol

import numpy as np

from compiler import HardwareConfig, compile_model, simulate_many
from compiler.cache import REFERENCES
from compiler.tools import package_version
from dse.models import zoo
from dse.models.classes import predicted
from dse.models.data import Dataset
from dse.models.model import ModelSpec, float_model, remembered
from dse.models.quantize import FP8_SCHEME, SCHEME, DenseNet, is_fp8
from dse.models.widths import quantisable
from dse.models.zoo import input_tensors

if TYPE_CHECKING:
    from dse.models.convnet import LayerNet


@dataclass(frozen=True)
class SampleRun:
    dtype: str
    samples: int
    accuracy: float
    accuracy_float: float
    agreement: float            # fraction of samples whose argmax equals the float model's
    mean_abs_err: float         # logits (dequantised for integers) against the float model
    max_abs_err: float
    cycles: int                 # simulated, equal on every sample (checked)
    cycles_model: int
    quantization: str | None    # the scheme, for integer dtypes
    logits: np.ndarray          # (samples, classes) as the hardware computed them
    design: object              # the compiled Design (for synthesis)
    mean_bits: tuple[float, float] | None = None    # the quantiser's (weights, activations) widths, mean over layers


class SampleCheckError(AssertionError):
    """The hardware disagreed with its reference or its cycle model on some sample."""


def check_cycles(runs, design) -> int:
    """Every sample's cycles equal the cycle model's latency, and every sample after the first
    came one interval after the one before (streamed, dataflow); the latency."""
    model = design.cycle_model()
    late = [i for i, r in enumerate(runs) if i and r.interval is not None and r.interval != model.interval]
    if late:
        raise SampleCheckError(f"sample {late[0]}: came {runs[late[0]].interval} cycles after the one before, "
                               f"the model says {model.interval}")
    bad = [i for i, r in enumerate(runs) if r.cycles != model.total]
    if bad:
        raise SampleCheckError(f"sample {bad[0]}: {runs[bad[0]].cycles} cycles simulated, the model says {model.total}")
    return model.total

def run_samples(*, net: "DenseNet | LayerNet", dtype: str, data: Dataset, config: HardwareConfig | None = None,
                backend: str = "cxxrtl", formats=None, quantized=None) -> SampleRun:
    """`formats`: the widths of the tool's quantiser (dse.models.widths.Formats; None: the dtype's).
    `quantized`: the integer model to run in an integer dtype (a network fine-tuned at the format,
    quantised: TrainedModel.quantized), in place of `net`'s post-training quantisation; `net` is
    then the float model it is compared with."""
    x = data.x_test.reshape(len(data.x_test), -1)
    if x.shape[1] != net.inputs:
        raise ValueError(f"{data.name} samples have {x.shape[1]} values, the model takes {net.inputs}")
    float_logits = net.float_logits(x)
    if quantisable(dtype):
        q = quantized if quantized is not None else \
            net.quantize(dtype=dtype, calibration=data.x_train.reshape(len(data.x_train), -1), formats=formats)
        built, arrays, xs = q.built(), q.arrays(), q.quantize_input(x)
        reference, to_float = q.reference(xs), q.dequantize
    elif zoo.DTYPES[dtype].is_float:
        # the host's input map chosen, and a CNN chain through dse/models/fp8net.py, floatnet.py
        net = float_model(net, dtype, data.x_train.reshape(len(data.x_train), -1))
        xs = zoo.round_float(net.host_input(x), dtype).reshape((len(x), *getattr(net, "input_shape", (net.inputs,))))
        built, arrays = net.built(dtype), net.arrays(dtype)
        semantics = (config or HardwareConfig()).fp_semantics   # its reference after the compile: below
        to_float = lambda v: np.asarray(v, np.float64)     # noqa: E731
    else:
        raise ValueError(f"dtype {dtype!r}: a float model runs in a signed integer format (quantised) or a float dtype")
    tensors = input_tensors(built, {**arrays, "x": xs[0]})
    x_tensor = tensors[list(built.inputs).index("x")]
    # x streams (through a dataflow design); the rest are weights (loaded once, or built in);
    # the ranges the evaluation's design is built with (every input comes from the quantiser here)
    design = compile_model(built.forward(*tensors), config=config, stream=x_tensor,
                           input_ranges=zoo.declared_ranges(built, tensors, None, frozenset(built.inputs)))
    if not quantisable(dtype):      # a float reference sums in the order the design was built with
        trees = _sum_trees(design, net)
        kw = {"trees": trees} if trees else {}
        reference = net.reference(dtype, x, **kw) if is_fp8(dtype) else net.reference(dtype, x, semantics, **kw)
    runs = simulate_many(design, [{x_tensor: s} for s in xs], backend=backend)   # a dataflow design streams them
    logits = np.stack([np.asarray(r.outputs[0]).reshape(-1) for r in runs])
    model_cycles = check_cycles(runs, design)
    # bit-exact: equal values with equal signs (-0.0 != +0.0); any NaN equals any NaN
    same = (logits == reference) & (np.signbit(logits) == np.signbit(reference)) | (np.isnan(logits) & np.isnan(reference)) \
        if zoo.DTYPES[dtype].is_float else logits == reference
    diff = np.flatnonzero(~same.all(axis=1))
    if len(diff):
        raise SampleCheckError(f"sample {diff[0]}: hardware {logits[diff[0]].tolist()} != reference "
                               f"{reference[diff[0]].tolist()} ({len(diff)} of {len(xs)} samples differ)")
    run = _scored(dtype=dtype, logits=logits, float_logits=float_logits, labels=data.y_test, to_float=to_float,
                  cycles=model_cycles, design=design,
                  quantization=getattr(q, "scheme", "") or SCHEME if quantisable(dtype)
                  else FP8_SCHEME if is_fp8(dtype) else None)
    return dataclasses.replace(run, mean_bits=q.mean_bits()) if quantisable(dtype) else run


def _sum_trees(design, net) -> list[int] | None:
    """Per layer of a float network, the products its sum adds as one tree a step: with
    fp_sum="tree", the layer's reduce_unroll as the design was built (a fold's choice included);
    None when every sum is sequential. A dense network's layers are the design's kernels, in order;
    a conv chain's are not one to one, and its golden model sums in order only: refused."""
    config = design.config
    if config.fp_sum != "tree":
        return None
    trees = [config.for_layer(i).reduce_unroll for i in range(len(design.kernels))]
    if all(u <= 1 for u in trees):
        return None
    layers = getattr(net, "layers", ())
    if getattr(net, "input_shape", None) is not None or len(trees) != len(layers):
        raise ValueError(f"fp_sum=tree with reduce_unroll > 1 (per kernel {trees}) in a float network whose layers are "
                         "not its kernels one to one (a conv chain): its golden model sums in order only, so its "
                         "outputs could not be checked; use fp_sum: sequential")
    return trees


_FLOAT_LOGITS: dict[tuple, np.ndarray] = {}


def golden_samples(*, trained, dtype: str) -> SampleRun:
    """The accuracy metrics of a trained network the tool builds (`trained`: the ModelSpec's
    TrainedModel) from its golden model alone, with no hardware: the integer model of the
    quantiser (dse.models.quantize.QuantNet.reference) for an integer dtype. What run_samples
    reports for the same point is these numbers, since it fails the point unless the hardware
    equals this golden model on every sample; so the cheap fidelity of a multi-fidelity search
    (dse.fidelity) takes accuracy from here, and every point it synthesises is then simulated
    on every sample and checked. `cycles` 0 and `design` None: nothing was compiled."""
    if not quantisable(dtype):
        raise ValueError(f"golden accuracy without hardware: integer dtypes only, not {dtype}")
    # the same for every hardware knob (a sweep's cheap pass asks per point): kept with the
    # network's quantised model, in the process cache of what is derived from a trained network
    return remembered(("golden", trained, dtype), lambda: _golden(trained, dtype))


def _golden(trained, dtype: str) -> SampleRun:
    data = trained.dataset()
    x = data.x_test.reshape(len(data.x_test), -1)
    q = trained.quantized(dtype)
    logits = q.reference(q.quantize_input(x))
    key = (trained.kind, trained.path, trained.data, trained.prune)      # the float model: every format's
    if key not in _FLOAT_LOGITS:
        _FLOAT_LOGITS[key] = trained.net().float_logits(x)
    run = _scored(dtype=dtype, logits=logits, float_logits=_FLOAT_LOGITS[key], labels=data.y_test,
                  to_float=q.dequantize, cycles=0, design=None, quantization=getattr(q, "scheme", "") or SCHEME)
    return dataclasses.replace(run, mean_bits=q.mean_bits())


def _scored(*, dtype: str, logits: np.ndarray, float_logits: np.ndarray, labels: np.ndarray | None,
            to_float: Callable[[np.ndarray], np.ndarray] | None, cycles: int, quantization: str | None,
            design) -> SampleRun:
    """The metrics of checked outputs (samples, classes) against the float model's; without
    `to_float` (an integer model whose scale the tool does not know) no logit error is given."""
    # the classes' scores in real units: a declared last layer may have one scale per class
    pred = predicted(to_float(logits) if to_float is not None else logits)
    pred_float = predicted(float_logits)
    truth = labels if labels is not None else pred_float
    if to_float is None:
        mean_err = max_err = float("nan")
    else:
        err = np.abs(to_float(logits) - float_logits)
        mean_err, max_err = float(err.mean()), float(err.max())
    return SampleRun(dtype, len(logits), float((pred == truth).mean()), float((pred_float == truth).mean()),
                     float((pred == pred_float).mean()), mean_err, max_err, cycles, cycles, quantization,
                     logits, design)


class Checker(Protocol):
    """The point's reference and rule (dse.evaluate's checker)."""
    def reference(self, arrays: Mapping[str, np.ndarray]) -> np.ndarray: ...
    def finish(self, raw: np.ndarray) -> np.ndarray: ...
    def compare(self, got: np.ndarray, want: np.ndarray) -> tuple[bool, float]: ...


def run_model_samples(*, model: ModelSpec, dtype: str, design, tensors: list, checker: Checker,
                      backend: str = "cxxrtl") -> SampleRun:
    """Every test sample of `model.files` through `design` (compiled from `tensors`, the model's
    inputs in order, with the weights in their memories), in one simulator process. Each sample's
    outputs are checked by the point's `checker` and its cycles against the cycle model (a
    failure raises SampleCheckError)."""
    built = model.build(dtype)
    real = model.files.inputs(built.inputs, dtype)
    x_tensor = tensors[list(built.inputs).index(real.data_input)]
    runs = simulate_many(design, [{x_tensor: s} for s in real.samples], backend=backend)
    model_cycles = check_cycles(runs, design)
    outputs = np.stack([np.asarray(r.outputs[0]).reshape(-1) for r in runs])
    raw = tinygrad_outputs(model, dtype) if not model.golden else None
    for i, sample in enumerate(real.samples):
        want = (checker.reference({**real.weights, real.data_input: sample}) if raw is None
                else checker.finish(raw[i]))
        same, err = checker.compare(outputs[i], want)
        if not same:
            raise SampleCheckError(f"sample {i}: hardware {outputs[i].tolist()} != reference "
                                   f"{np.asarray(want).reshape(-1).tolist()} (max abs error {err:g})")
    is_float = zoo.DTYPES[dtype].is_float
    return _scored(dtype=dtype, logits=outputs, float_logits=float_outputs(model), labels=real.labels,
                   to_float=(lambda v: np.asarray(v, np.float64)) if is_float else None,
                   cycles=model_cycles, quantization=None, design=design)


def float_outputs(model: ModelSpec) -> np.ndarray:
    """(samples, outputs) in float64: the model in fp32, weights and samples as the files hold
    them (the zoo's numpy golden model for a builtin, tinygrad's result for a user's function)."""
    if not model.golden:
        return tinygrad_outputs(model, "fp32").astype(np.float64)
    real = model.files.inputs(model.build("fp32").inputs, "fp32")
    return np.stack([np.asarray(zoo.reference(model.builtin, "fp32", model.params,
                                              {**real.weights, real.data_input: s}), np.float64).reshape(-1)
                     for s in real.samples])


def tinygrad_outputs(model: ModelSpec, dtype: str) -> np.ndarray:
    """(samples, outputs): tinygrad's own result for each test sample of a user's model in
    `dtype`. tinygrad's PYTHON device takes 0.1-0.6 s a sample (the only device without a C
    compiler), and the result depends on the model and its files only, not on the knobs: so it
    is computed once per model, dtype and content of its files, kept in memory and in
    $TINYHW_CACHE/references (a file changed in place is a new key, also within one process)."""
    return tinygrad_outputs_for(REFERENCES.key(_reference_material(model, dtype)), model, dtype)


@functools.lru_cache(maxsize=16)
def tinygrad_outputs_for(key: str, model: ModelSpec, dtype: str) -> np.ndarray:
    """tinygrad_outputs under its cache key (the content of the model's files)."""
    built = model.build(dtype)
    real = model.files.inputs(built.inputs, dtype)
    with contextlib.suppress(OSError, ValueError):
        cached = np.load(REFERENCES.path(key, "outputs.npy"), allow_pickle=False)
        if len(cached) == len(real.samples):
            return cached
    out = np.stack([np.asarray(zoo.tinygrad_result(built, {**real.weights, real.data_input: s})).reshape(-1)
                    for s in real.samples])
    with contextlib.suppress(OSError), tempfile.TemporaryDirectory() as tmp:
        np.save(Path(tmp) / "outputs.npy", out)
        REFERENCES.publish(key, "outputs.npy", Path(tmp) / "outputs.npy")
    return out


def _reference_material(model: ModelSpec, dtype: str) -> dict[str, str]:
    """What tinygrad's result on the samples depends on: the model's code, parameters and files
    (by content, also the files the model read when imported), the dtype and tinygrad itself
    (the project's own code joins the key in compiler.cache.REFERENCES)."""
    from dse.models.user_model import import_reads
    files = model.files
    data = files.data
    reads = sorted(import_reads(model.source)) if model.source is not None else []

    def content(f) -> str:
        return hashlib.sha256(Path(f).read_bytes()).hexdigest() if f is not None and Path(f).is_file() else "-"
    return {"function": str(model.function), "params": repr(sorted(model.params.items())), "dtype": dtype,
            "tinygrad": package_version("tinygrad"), "data": repr((data.dataset, data.samples, data.input)),
            "files": [content(f) for f in (model.source, files.weights, data.file, *reads)]}
