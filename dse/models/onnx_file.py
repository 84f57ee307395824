"""An ONNX file as plain records: its nodes, its constants as numpy arrays, its one input and output.

    f = read_onnx(Path("net.onnx"))
    f.input, f.input_shape, f.output        # names; the input's shape with symbolic dimensions as 1
    f.consts["fc.weight"]                   # initialisers and the values of Constant nodes
    for node in f.nodes: node.op, node.domain, node.inputs, node.attrs, node.where

tinygrad's own parser reads the file when it can (no onnx package needed). It cannot parse
nodes of a custom domain (QONNX's `Quant` lives in `qonnx.custom_op.general`, Brevitas' older
exports in `onnx.brevitas`), so such a file is read with the `onnx` package instead; both give
the same records. Every problem raises dse.models.data.DataError naming the file.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dse.models.data import DataError, onnx_runner, tensor_array


@dataclass(frozen=True)
class Node:
    index: int                          # position in the file's node list (Constant nodes counted)
    op: str
    domain: str                         # "" for the standard operators
    inputs: tuple[str, ...]             # "" for an optional input left out
    outputs: tuple[str, ...]
    attrs: dict[str, Any] = field(default_factory=dict)     # numbers, strings, tuples, numpy arrays
    file: str = ""

    @property
    def where(self) -> str:
        """How an error names the node: file, index, op and first output (files seldom name nodes)."""
        return f"{self.file}: node #{self.index} {self.op} (output {self.outputs[0]!r})"


@dataclass(frozen=True)
class OnnxFile:
    path: Path
    input: str
    input_shape: tuple[int, ...]        # symbolic dimensions (a batch) taken as 1
    output: str
    consts: dict[str, np.ndarray]       # initialisers and Constant nodes' values, by name
    nodes: tuple[Node, ...]             # every node but the Constant ones, in file order


_FILES: dict[tuple[Path, int], OnnxFile] = {}


def read_onnx(path: Path) -> OnnxFile:
    """The records of `path` (read once per file version and process)."""
    path = Path(path).resolve()
    if not path.is_file():
        raise DataError(f"file not found: {path}")
    key = (path, path.stat().st_mtime_ns)
    if key not in _FILES:
        try:
            runner = onnx_runner(path)
        except DataError as e:
            if "custom domain" not in str(e):
                raise
            _FILES[key] = _with_onnx_package(path)
        else:
            _FILES[key] = _from_runner(path, runner)
    return _FILES[key]


def _plain(value: Any) -> Any:
    """An attribute value as numbers, strings, tuples or numpy arrays."""
    from dse.models.zoo import import_tinygrad
    tg = import_tinygrad()
    if isinstance(value, tg.Tensor):
        return tensor_array(value)
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    return value


def _from_runner(path: Path, runner) -> OnnxFile:
    if len(runner.graph_inputs) != 1 or len(runner.graph_outputs) != 1:
        raise DataError(f"{path}: expected one input and one output, got inputs {list(runner.graph_inputs)} "
                        f"and outputs {list(runner.graph_outputs)}")
    consts = {k: tensor_array(v) for k, v in runner.graph_values.items() if k}
    (name, spec), = runner.graph_inputs.items()
    nodes = []
    for index, n in enumerate(runner.graph_nodes):
        domain = n.opset_id.domain.value
        node = Node(index, n.op, "" if domain == "ai.onnx" else domain, tuple(n.inputs), tuple(n.outputs),
                    {k: _plain(v) for k, v in n.opts.items()}, str(path))
        if not _constant(node, consts):
            nodes.append(node)
    shape = tuple(d if isinstance(d, int) else 1 for d in spec.shape)
    return OnnxFile(path, name, shape, runner.graph_outputs[0], consts, tuple(nodes))


def _with_onnx_package(path: Path) -> OnnxFile:
    try:
        import onnx
        from onnx import helper, numpy_helper
    except ImportError:
        raise DataError(f"{path}: has nodes of a custom domain (QONNX), which tinygrad's ONNX parser cannot read; "
                        "reading them needs the onnx package (pip install onnx)") from None
    try:
        model = onnx.load(str(path))
    except Exception as e:      # protobuf errors: not a usable file
        raise DataError(f"{path}: cannot read as ONNX ({type(e).__name__}: {e})") from None
    g = model.graph
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    inputs = [i for i in g.input if i.name not in consts]
    if len(inputs) != 1 or len(g.output) != 1:
        raise DataError(f"{path}: expected one input and one output, got inputs {[i.name for i in inputs]} "
                        f"and outputs {[o.name for o in g.output]}")

    def attr(a) -> Any:
        v = helper.get_attribute_value(a)
        if isinstance(v, onnx.TensorProto):
            return numpy_helper.to_array(v)
        return _plain(v)
    nodes = []
    for index, n in enumerate(g.node):
        node = Node(index, n.op_type, "" if n.domain == "ai.onnx" else n.domain, tuple(n.input), tuple(n.output),
                    {a.name: attr(a) for a in n.attribute}, str(path))
        if not _constant(node, consts):
            nodes.append(node)
    dims = inputs[0].type.tensor_type.shape.dim
    shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in dims)
    return OnnxFile(path, inputs[0].name, shape, g.output[0].name, consts, tuple(nodes))


def _constant(node: Node, consts: dict[str, np.ndarray]) -> bool:
    """A Constant node's value joins `consts` (True); any other node is kept (False)."""
    if node.op != "Constant" or node.domain:
        return False
    a = node.attrs
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in a:
            consts[node.outputs[0]] = np.asarray(a[key])
            return True
    raise DataError(f"{node.where}: a Constant without a numeric value")


def declares_quantisation(path: Path) -> bool:
    """Whether the file has QONNX quantisers (nodes of a custom domain): tinygrad's importer
    cannot run it, so only the integer formats its quantisers declare can."""
    try:
        return any(node.domain for node in read_onnx(path).nodes)
    except DataError:
        return False
