"""Real data for a model: datasets, trained weights, ONNX files.

    data = load_dataset(DataSpec(dataset="sklearn:digits"))     # Dataset: x_train, y_train, x_test, y_test
    weights = load_weights(Path("mlp.npz"), {"W1": ((32, 64), "fp32"), ...})

Datasets are those scikit-learn ships offline (`sklearn:digits`, `iris`, `wine`,
`breast_cancer`), split into train and test with a fixed seed (stratified, TEST_FRACTION), or an
`.npz` file with `x` (samples, first axis) and optionally `y` (labels), the test data, and
optionally `x_train` (and `y_train`), the training split (calibration, pruning, fine-tuning);
without it calibration uses the test samples, or `split: F` takes the fraction F of them as the
training split (stratified, seeded) and leaves the rest to test on. Weights come from an
`.npz` or `.safetensors` file, matched to a model's inputs by name with shapes checked.
Every problem raises DataError with one line naming the file, key or dataset.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

SKLEARN_DATASETS = ("digits", "iris", "wine", "breast_cancer")
TEST_FRACTION = 0.25
SPLIT_SEED = 0


class DataError(ValueError):
    """A dataset, weights file or ONNX file that cannot be used; the message says which and why."""


class NotDenseChain(DataError):
    """An ONNX graph that is not a chain of dense layers: tinygrad's importer runs it as it is
    (float dtypes, `onnx_built`), but the tool's post-training quantisation does not apply."""


@dataclass(frozen=True)
class DataSpec:
    """Where a model's samples come from: `dataset` ("sklearn:NAME") or `file` (.npz)."""
    dataset: str | None = None
    file: Path | None = None
    samples: int | None = None       # the first N test samples (default: all)
    input: str | None = None         # the model input the samples fill (default: the one not in the weights)
    split: float | None = None       # a file without x_train: this fraction of its samples is the training split

    def __post_init__(self) -> None:
        if (self.dataset is None) == (self.file is None):
            raise DataError("data: give exactly one of 'dataset: sklearn:NAME' or 'file: PATH.npz'")
        if self.samples is not None and (type(self.samples) is not int or self.samples < 1):
            raise DataError(f"data.samples: expected a positive integer, got {self.samples!r}")
        if self.split is not None and (isinstance(self.split, bool) or not isinstance(self.split, (int, float))
                                       or not 0 < self.split < 1):
            raise DataError(f"data.split: expected the fraction of the samples to train on, between 0 and 1 "
                            f"(exclusive), got {self.split!r}")


@dataclass(frozen=True)
class Dataset:
    name: str
    x_train: np.ndarray              # float64, (n, *sample_shape)
    y_train: np.ndarray | None
    x_test: np.ndarray
    y_test: np.ndarray | None        # None: no labels (accuracy is agreement with the float model)
    train_is_test: bool = False      # a file without a training split: calibration runs on the test samples

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return tuple(self.x_test.shape[1:])


def load_dataset(spec: DataSpec) -> Dataset:
    if spec.dataset is not None:
        data = _sklearn(spec.dataset)
    else:
        data = _npz_dataset(Path(spec.file))
    if spec.split is not None:
        data = _split(data, spec.split)
    if spec.samples is not None:
        if spec.samples > len(data.x_test):
            raise DataError(f"data.samples: {spec.samples} asked, {data.name} has {len(data.x_test)} test samples")
        data = dataclasses.replace(data, x_test=data.x_test[:spec.samples],
                                   y_test=None if data.y_test is None else data.y_test[:spec.samples])
    return data


def _split(data: Dataset, fraction: float) -> Dataset:
    """A file's samples split into a training split of `fraction` and the test samples (stratified
    by the labels where there are labels, seed SPLIT_SEED, as the scikit-learn datasets are)."""
    if not data.train_is_test:
        raise DataError(f"data.split: {data.name} has its own training split (x_train); leave 'split' out")
    from sklearn.model_selection import train_test_split
    n = len(data.x_test)
    train = int(round(fraction * n))
    if not 1 <= train < n:
        raise DataError(f"data.split: {fraction:g} of {data.name}'s {n} samples leaves "
                        f"{'no training' if train < 1 else 'no test'} sample")
    idx = np.arange(n)
    y = data.y_test
    counts = np.unique(y, return_counts=True)[1] if y is not None else None
    stratify = y if counts is not None and counts.min() >= 2 and min(train, n - train) >= len(counts) else None
    tr, te = train_test_split(idx, train_size=train, random_state=SPLIT_SEED, stratify=stratify)
    return Dataset(data.name, data.x_test[tr], None if y is None else y[tr], data.x_test[te],
                   None if y is None else y[te])


def _sklearn(name: str) -> Dataset:
    source, _, short = name.partition(":")
    if source != "sklearn" or short not in SKLEARN_DATASETS:
        raise DataError(f"unknown dataset {name!r}; known: {', '.join('sklearn:' + n for n in SKLEARN_DATASETS)}")
    from sklearn import datasets
    from sklearn.model_selection import train_test_split
    bunch = getattr(datasets, f"load_{short}")()
    x, y = np.asarray(bunch.data, np.float64), np.asarray(bunch.target, np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=y)
    return Dataset(name, xtr, ytr, xte, yte)


def _npz_dataset(path: Path) -> Dataset:
    arrays = _read_npz(path)
    if "x" not in arrays:
        raise DataError(f"{path}: no array 'x' (the samples); arrays there: {', '.join(arrays) or 'none'}")
    unknown = set(arrays) - {"x", "y", "x_train", "y_train"}
    if unknown:
        raise DataError(f"{path}: unknown array(s) {', '.join(sorted(unknown))}; expected 'x' and optionally 'y', "
                        "'x_train', 'y_train'")
    x, y = _samples(path, arrays, "x", "y")
    if "x_train" not in arrays:
        if "y_train" in arrays:
            raise DataError(f"{path}: 'y_train' without 'x_train'")
        return Dataset(str(path), x, y, x, y, train_is_test=True)
    xtr, ytr = _samples(path, arrays, "x_train", "y_train")
    if xtr.shape[1:] != x.shape[1:]:
        raise DataError(f"{path}: 'x_train' samples have shape {xtr.shape[1:]}, 'x' samples {x.shape[1:]}")
    return Dataset(str(path), xtr, ytr, x, y)


def _samples(path: Path, arrays: Mapping[str, np.ndarray], xk: str, yk: str) -> tuple[np.ndarray, np.ndarray | None]:
    a, y = arrays[xk], arrays.get(yk)
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise DataError(f"{path}: '{xk}' holds {a.dtype}, not numbers")
    x = np.asarray(a, np.float64)
    if x.ndim < 2:
        raise DataError(f"{path}: '{xk}' must have one sample per row, got shape {x.shape}")
    if not len(x) or not x[0].size:
        what = "samples" if not len(x) else "values in a sample"
        raise DataError(f"{path}: '{xk}' has shape {x.shape}: no {what}")
    bad = first_non_finite(x)
    if bad is not None:
        sample, feature = bad[0], int(np.ravel_multi_index(bad[1:], x.shape[1:]))
        where = f" (position {bad[1:]} of shape {x.shape[1:]})" if x.ndim > 2 else ""
        raise DataError(f"{path}: '{xk}' sample {sample}, feature {feature}{where} is {x[bad]}: every value must be "
                        "a finite number")
    if y is not None and (y.shape != (len(x),) or not np.issubdtype(y.dtype, np.integer)):
        raise DataError(f"{path}: '{yk}' must hold one integer label per sample ({len(x)}), got {y.dtype} {y.shape}")
    if y is not None and y.min() < 0:
        i = int(np.argmax(y < 0))
        raise DataError(f"{path}: '{yk}' holds the label {int(y[i])} (sample {i}); a label is a class index, from 0")
    return x, y


def first_non_finite(a: np.ndarray) -> tuple[int, ...] | None:
    """The index of the first NaN or infinity of `a` (None: every value is finite)."""
    bad = ~np.isfinite(a)
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), a.shape)) if bad.any() else None


def check_finite(path: Path, name: str, a: np.ndarray) -> None:
    """Raise DataError naming the file, the array and the index of its first NaN or infinity:
    arithmetic on them (quantisation, the float reference) fails far from their cause."""
    if not np.issubdtype(np.asarray(a).dtype, np.floating):
        return
    bad = first_non_finite(np.asarray(a))
    if bad is not None:
        at = f" at index {bad}" if bad else ""
        raise DataError(f"{path}: array {name!r} holds {np.asarray(a)[bad]}{at}: weights must be finite numbers")


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    if not Path(path).is_file():
        raise DataError(f"file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    except Exception as e:   # zip, pickle or format errors: all mean "not a usable .npz"
        raise DataError(f"{path}: cannot read as .npz ({type(e).__name__}: {e})") from None


def read_weights(path: Path) -> dict[str, np.ndarray]:
    """Every array of an `.npz` or `.safetensors` file, by name (float arrays as float32)."""
    path = Path(path)
    if path.suffix == ".npz":
        arrays = _read_npz(path)
    elif path.suffix == ".safetensors":
        if not path.is_file():
            raise DataError(f"file not found: {path}")
        from dse.models.zoo import import_tinygrad
        tg = import_tinygrad()
        from tinygrad.nn.state import safe_load
        try:
            arrays = {k: t.cast(tg.dtypes.float32).numpy() if t.dtype in (tg.dtypes.half, tg.dtypes.bfloat16)
                      else t.numpy() for k, t in safe_load(str(path)).items()}
        except Exception as e:
            raise DataError(f"{path}: cannot read as .safetensors ({type(e).__name__}: {e})") from None
    elif path.suffix == ".onnx":
        arrays = onnx_initialisers(path)
    else:
        raise DataError(f"{path}: weights must be a .npz or .safetensors file")
    if path.suffix != ".onnx":      # a graph run whole may hold infinities on purpose (a mask, a pad value)
        for name, a in arrays.items():
            check_finite(path, name, a)
    return arrays


def match_weights(path: Path, arrays: Mapping[str, np.ndarray],
                  inputs: Mapping[str, tuple[tuple[int, ...], str]]) -> dict[str, np.ndarray]:
    """The arrays of a weights file for a model's `inputs` (name -> (shape, dtype)): every array
    must be an input of that shape; inputs the file does not hold are left to the data."""
    out = {}
    for name, a in arrays.items():
        if name not in inputs:
            raise DataError(f"{path}: array {name!r} is not an input of the model; its inputs: {', '.join(inputs)}")
        shape = inputs[name][0]
        if tuple(a.shape) != tuple(shape):
            raise DataError(f"{path}: array {name!r} has shape {tuple(a.shape)}, the model's input needs {tuple(shape)}")
        if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
            raise DataError(f"{path}: array {name!r} holds {a.dtype}, not numbers")
        out[name] = a
    return out


def data_input(inputs: Mapping[str, tuple[tuple[int, ...], str]], given: Mapping[str, np.ndarray],
               data: Dataset, named: str | None = None) -> str:
    """The model input the samples fill: `named`, else the one input the weights do not give;
    its shape must be the dataset's sample shape."""
    if named is not None:
        if named not in inputs:
            raise DataError(f"data.input: {named!r} is not an input of the model; its inputs: {', '.join(inputs)}")
        name = named
    else:
        free = [n for n in inputs if n not in given]
        if len(free) != 1:
            raise DataError(f"data: the weights leave {len(free)} inputs ({', '.join(free) or 'none'}) for the "
                            f"samples; name one with data.input")
        name = free[0]
    shape = tuple(inputs[name][0])
    if int(np.prod(shape)) != int(np.prod(data.sample_shape)):
        raise DataError(f"data: {data.name} samples have shape {data.sample_shape}, model input {name!r} needs {shape}")
    return name


def in_dtype(a: np.ndarray, dtype: str, what: str) -> np.ndarray:
    """`a` (weights or samples) as data of a model input of `dtype`, in its storage type. Floats
    are rounded to the format (round to nearest even); an integer input takes whole numbers in
    its range only: the tool does not guess a scale for a model it cannot see into (a dense
    network given as `weights:` alone or `onnx:` is quantised by dse.models.quantize instead)."""
    from dse.models import zoo
    a = np.asarray(a)
    d = zoo.DTYPES[dtype]
    if d.is_float:
        return zoo.round_float(a.astype(np.float64), dtype)
    v = a.astype(np.float64)
    if not np.isfinite(v).all() or not (v == np.round(v)).all():
        raise DataError(f"{what} holds values that are not whole numbers, but the model's input is {dtype}: "
                        f"give integer (quantised) values, or the network alone as 'weights:'/'onnx:' "
                        f"for the tool's post-training quantisation")
    if v.size and (v.min() < d.lowest or v.max() > d.highest):
        first = np.unravel_index(int(np.flatnonzero((v < d.lowest) | (v > d.highest))[0]), v.shape)
        where = f" at index {tuple(int(i) for i in first)}" if v.ndim else ""
        raise DataError(f"{what} holds {v[first]:g}{where}, outside the {dtype} range [{int(d.lowest)}, "
                        f"{int(d.highest)}] (its values span [{v.min():g}, {v.max():g}]; never wrapped)")
    return v.astype(zoo.storage(dtype))


@dataclass(frozen=True)
class RealInputs:
    """A model's inputs from files, in one dtype: trained `weights` (by input name) and the test
    `samples` (one per run) for the input named `data_input` (None without data)."""
    weights: dict[str, np.ndarray]
    data_input: str | None
    samples: np.ndarray | None           # (n, *input shape), the input's storage type
    labels: np.ndarray | None


def real_inputs(*, inputs: Mapping[str, tuple[tuple[int, ...], str]], weights_path: Path | None,
                data: Dataset | None, named: str | None = None) -> RealInputs:
    """The arrays of `weights_path` matched to `inputs` (name -> (shape, dtype)) and converted to
    each input's dtype, and `data`'s test samples for the input they fill (data_input)."""
    given: dict[str, np.ndarray] = {}
    if weights_path is not None:
        matched = match_weights(weights_path, read_weights(weights_path), inputs)
        given = {k: in_dtype(a, inputs[k][1], f"{weights_path}: array {k!r}") for k, a in matched.items()}
    if data is None:
        return RealInputs(given, None, None, None)
    if named is not None and named in given:
        raise DataError(f"data.input: {named!r} is filled by the weights file {weights_path} already")
    name = data_input(inputs, given, data, named)
    unfilled = [n for n in inputs if n != name and n not in given]
    if unfilled:
        raise DataError(f"data: model input(s) {', '.join(map(repr, unfilled))} are filled by neither the weights "
                        f"nor the samples (which fill {name!r})")
    shape, dtype = inputs[name]
    xs = in_dtype(data.x_test.reshape((len(data.x_test), *shape)), dtype, f"{data.name} samples for input {name!r}")
    return RealInputs(given, name, xs, data.y_test)


# ---------------------------------------------------------------------------------------------
# ONNX

_RUNNERS: dict[tuple[Path, int], object] = {}


def onnx_runner(path: Path):
    """tinygrad's OnnxRunner of `path` (one per file version and process)."""
    path = Path(path).resolve()
    if not path.is_file():
        raise DataError(f"file not found: {path}")
    key = (path, path.stat().st_mtime_ns)
    if key not in _RUNNERS:
        from dse.models.zoo import import_tinygrad
        import_tinygrad()
        from tinygrad.nn.onnx import OnnxRunner
        try:
            _RUNNERS[key] = OnnxRunner(path)
        except ValueError as e:
            if "is not a valid Domain" in str(e):   # QONNX's Quant: the graph runs in integer dtypes only
                raise DataError(f"{path}: has nodes of the custom domain {str(e).split(' is not')[0]}, which "
                                "tinygrad's ONNX importer cannot run: such a graph runs in the integer formats "
                                "its quantisers declare") from None
            raise DataError(f"{path}: cannot read as ONNX ({type(e).__name__}: {e})") from None
        except Exception as e:
            raise DataError(f"{path}: cannot read as ONNX ({type(e).__name__}: {e})") from None
    return _RUNNERS[key]


@dataclass(frozen=True)
class OnnxGraph:
    """An ONNX graph as a model: its one input and its float initialisers become model inputs,
    named as identifiers (`names`: model input name -> ONNX name)."""
    input: str                                  # the model's input name for the graph input
    input_shape: tuple[int, ...]                # symbolic dimensions (a batch) taken as 1
    weights: dict[str, tuple[int, ...]]         # model input name -> shape, in the file's order
    names: dict[str, str]


def onnx_graph(path: Path) -> OnnxGraph:
    runner = onnx_runner(path)
    if len(runner.graph_inputs) != 1 or len(runner.graph_outputs) != 1:
        raise DataError(f"{path}: expected one input and one output, got inputs {list(runner.graph_inputs)} "
                        f"and outputs {list(runner.graph_outputs)}")
    for index, node in enumerate(runner.graph_nodes):
        if node.op not in runner.onnx_ops:
            raise DataError(f"{path}: node #{index} {node.op} (output {node.outputs[0]!r}): tinygrad's ONNX importer "
                            f"has no op {node.op}")
    (onnx_input, spec), = runner.graph_inputs.items()
    from dse.models.zoo import import_tinygrad
    tg = import_tinygrad()
    names: dict[str, str] = {}

    def ident(name: str) -> str:
        base = re.sub(r"\W", "_", name)
        base = base if base and not base[0].isdigit() else f"t_{base}"
        out, i = base, 1
        while out in names:
            i += 1
            out = f"{base}_{i}"
        names[out] = name
        return out
    x = ident(onnx_input)
    weights = {ident(k): tuple(int(d) for d in v.shape) for k, v in runner.graph_values.items()
               if k and isinstance(v, tg.Tensor) and tg.dtypes.is_float(v.dtype)}
    shape = tuple(d if isinstance(d, int) else 1 for d in spec.shape)
    return OnnxGraph(x, shape, weights, names)


def onnx_initialisers(path: Path) -> dict[str, np.ndarray]:
    """The float initialisers of an ONNX file, by their model input names (float32)."""
    runner, graph = onnx_runner(path), onnx_graph(path)
    return {k: tensor_array(runner.graph_values[graph.names[k]]).astype(np.float32) for k in graph.weights}


def tensor_array(t) -> np.ndarray:
    """A tinygrad Tensor read by the ONNX parser as numpy. The parser makes a scalar initialiser
    a constant on no device, which tinygrad would realise on its CPU device (a C compiler): its
    value is taken from the constant instead."""
    if t.device is None and not t.uop.src:
        from dse.models.zoo import import_tinygrad
        is_float = import_tinygrad().dtypes.is_float(t.dtype)
        from tinygrad.dtype import _to_np_dtype
        return np.asarray(float(t.uop.arg) if is_float else int(t.uop.arg), dtype=_to_np_dtype(t.dtype) or np.float32)
    return t.numpy()


def check_graph_runs(path: Path) -> None:
    """Build the whole graph's computation once on a zero input, lazily (tinygrad checks shapes
    as it builds; nothing is computed, and shapes do not depend on the dtype): a graph whose
    shapes do not fit raises DataError naming the node where they stop fitting, before any
    point is built."""
    runner, graph = onnx_runner(path), onnx_graph(path)
    from dse.models.zoo import import_tinygrad
    tg = import_tinygrad()
    pristine = dict(runner.graph_values)       # the runner is shared: leave it as read
    try:
        runner({graph.names[graph.input]: tg.Tensor.zeros(*graph.input_shape)})
    except Exception as e:                      # noqa: BLE001 - any failure is the graph's; said with its node
        done = runner.graph_values
        index, node = next(((i, n) for i, n in enumerate(runner.graph_nodes)
                            if not all(o in done for o in n.outputs if o)), (None, None))
        where = f"node #{index} {node.op} (output {node.outputs[0]!r})" if node is not None else "the graph"
        raise DataError(f"{path}: {where}: tinygrad cannot run it ({type(e).__name__}: {e})") from None
    finally:
        runner.graph_values = pristine


def onnx_built(path: Path, dtype: str):
    """The whole ONNX graph as a model in a float `dtype` (a zoo.Built): inputs the graph input
    and every float initialiser, forward runs tinygrad's ONNX importer on them. The initialisers'
    values come as model inputs (the weights), so every dtype rounds them like any weights."""
    from dse.models import zoo
    runner, graph = onnx_runner(path), onnx_graph(path)
    if not zoo.DTYPES[dtype].is_float:
        raise DataError(f"{path}: {dtype} needs the tool's post-training quantisation, which covers chains of "
                        f"convolutions, max-pools and dense layers; this graph runs in float dtypes")
    inputs = {graph.input: (graph.input_shape, dtype), **{k: (shape, dtype) for k, shape in graph.weights.items()}}
    onnx_in, onnx_out = graph.names[graph.input], runner.graph_outputs[0]
    weight_names = [graph.names[k] for k in graph.weights]

    def forward(x, *weights):
        import warnings
        pristine = dict(runner.graph_values)   # the runner is shared: leave its initialisers as read
        try:
            for name, t in zip(weight_names, weights):
                runner.graph_values[name] = t
            with warnings.catch_warnings():     # the graph declares float32; fp16/bf16 inputs are meant
                warnings.simplefilter("ignore")
                return runner({onnx_in: x})[onnx_out]
        finally:
            runner.graph_values = pristine
    return zoo.Built(inputs, forward)
