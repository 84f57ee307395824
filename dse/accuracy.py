"""A trained dense model on real samples, through the hardware: accuracy and its checks.

    result = run_samples(net=net, dtype="int8", data=load_dataset(DataSpec(dataset="sklearn:digits")),
                         config=HardwareConfig(lanes=4))
    result.accuracy, result.accuracy_float, result.agreement, result.cycles   # checked bit-exact

The pipeline: the model for the dtype (a float dtype: the float model with weights rounded to
it; int8/int16: dse.quantize's post-training quantisation calibrated on the training split),
compiled once with the first sample, then every test sample run through one simulator process
(compiler.simulate_many). Checks, on every sample (a failure raises SampleCheckError): the cycle count equals the
analytic model; the outputs are bit-exact against the numpy golden model (integers: the
quantised reference, dse.quantize.QuantNet.reference; floats: DenseNet.reference, the kernels'
own rounding). Metrics: `accuracy` (top-1
against the labels; without labels, agreement of the argmax with the float model),
`accuracy_float` (the float64 model on the same samples), `agreement` (argmax equal to the float
model's), and the mean and max |error| of the (dequantised) logits against the float model.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compiler import HardwareConfig, compile_model, simulate_many
from dse import zoo
from dse.data import Dataset
from dse.zoo import input_tensors
from dse.quantize import QMAX, SCHEME, DenseNet, quantize


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


class SampleCheckError(AssertionError):
    """The hardware disagreed with its reference or its cycle model on some sample."""


def run_samples(*, net: DenseNet, dtype: str, data: Dataset, config: HardwareConfig | None = None,
                backend: str = "cxxrtl") -> SampleRun:
    x = data.x_test.reshape(len(data.x_test), -1)
    if x.shape[1] != net.inputs:
        raise ValueError(f"{data.name} samples have {x.shape[1]} values, the model takes {net.inputs}")
    float_logits = net.float_logits(x)
    if dtype in QMAX:
        q = quantize(net=net, dtype=dtype, calibration=data.x_train.reshape(len(data.x_train), -1))
        built, arrays, xs = q.built(), q.arrays(), q.quantize_input(x)
        reference, to_float = q.reference(xs), q.dequantize
    elif zoo.DTYPES[dtype].is_float:
        built, arrays, xs = net.built(dtype), net.arrays(dtype), zoo.round_float(x, dtype)
        reference, to_float = net.reference(dtype, x), lambda v: np.asarray(v, np.float64)
    else:
        raise ValueError(f"dtype {dtype!r}: a float model runs in {', '.join(QMAX)} (quantised) or a float dtype")
    tensors = input_tensors(built, {**arrays, "x": xs[0]})
    design = compile_model(built.forward(*tensors), config=config)
    runs = simulate_many(design, [{tensors[0]: s} for s in xs], backend=backend)
    logits = np.stack([r.outputs[0] for r in runs])
    model_cycles = design.cycle_model().total
    bad = [i for i, r in enumerate(runs) if r.cycles != model_cycles]
    if bad:
        raise SampleCheckError(f"sample {bad[0]}: {runs[bad[0]].cycles} cycles simulated, the model says {model_cycles}")
    # bit-exact: equal values with equal signs (-0.0 != +0.0); any NaN equals any NaN
    same = (logits == reference) & (np.signbit(logits) == np.signbit(reference)) | (np.isnan(logits) & np.isnan(reference)) \
        if zoo.DTYPES[dtype].is_float else logits == reference
    diff = np.flatnonzero(~same.all(axis=1))
    if len(diff):
        raise SampleCheckError(f"sample {diff[0]}: hardware {logits[diff[0]].tolist()} != reference "
                               f"{reference[diff[0]].tolist()} ({len(diff)} of {len(xs)} samples differ)")
    pred, pred_float = logits.argmax(1), float_logits.argmax(1)
    truth = data.y_test if data.y_test is not None else pred_float
    err = np.abs(to_float(logits) - float_logits)
    return SampleRun(dtype, len(xs), float((pred == truth).mean()), float((pred_float == truth).mean()),
                     float((pred == pred_float).mean()), float(err.mean()), float(err.max()),
                     model_cycles, model_cycles, SCHEME if dtype in QMAX else None, logits, design)
