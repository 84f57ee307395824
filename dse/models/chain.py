"""An ONNX chain read into the quantiser's layers (dse.models.convnet: Conv, Linear, MaxPool,
Flatten), with the affine element-wise operations and batch norms of exported graphs folded
into the adjacent conv or dense layer.

    net = read_chain(Path("net.onnx"))      # a dse.models.convnet.LayerNet, folded

The graph is a chain on its one input: every node reads the previous node's output and
constants (initialisers, Constant nodes). What folds (the standard folding, exact in real
arithmetic; the float64 model of the folded layers is the graph's, up to float64 rounding):
  * `Add`, `Sub`, `Mul` or `Div` by a constant, or a `BatchNormalization` (inference:
    y = scale (x - mean) / sqrt(var + epsilon) + B per channel), right after a conv or dense
    layer, before its ReLU: into that layer, W' = a W and b' = a b + c per output channel;
  * the same anywhere else (the input standardisation `(x - mean) * inv_std` that
    scikit-learn pipelines and PyTorch exports start with; a batch norm after a ReLU): composed
    into one map v -> a v + c, carried through `Flatten` (and a `MaxPool` where a >= 0, which
    commutes with it), and folded into the next layer's input side: W' = W a, b' = b + W c;
  * `Gemm`'s alpha and beta into its weights and bias; `Identity` and `Dropout` (inference)
    are nothing;
  * an average pool (`GlobalAveragePool`, `AveragePool`, `ReduceMean` over H and W) into the
    dense layer after it, which then reads the value before the pool (ChainReader.average);
  * a `Reshape` by a constant shape (or one computed from the value's `Shape`, evaluated for
    one sample: chain_nodes) is the input's shape before the first layer, else a `Flatten`.
What cannot fold is refused naming the node (dse.models.data.NotDenseChain: the graph still
runs whole in float dtypes): a constant that varies across the image where a conv shares its
weights, a shift into a conv with zero padding (the padding would need the shift too), an affine
map followed by a ReLU before any layer, a negative scale through a max-pool, a constant divided
by the value, and a map with no layer after it.

Quantisers are read as the file declares them (dse.models.qonnx): a weight's QONNX `Quant` or
QCDQ pair gives its layer the file's integers (`grid`); a quantiser of the value is the input's
(`LayerNet.input_quant`, after the preprocessing before it: `input_map`) or the last layer's
output quantiser (`out_quant`). Nothing affine may follow a quantiser before the next layer.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from dse.models.convnet import Conv, Flatten, Layer, LayerNet, Linear, MaxPool
from dse.models.data import DataError, NotDenseChain, first_non_finite
from dse.models.onnx_file import Node, OnnxFile, read_onnx
from dse.models.qonnx import (QONNX_DOMAINS, QUANT_OPS, Quantiser, fold_constants, linear_params, quant_params,
                               weight_grid)
from dse.models.quantize import Dense, DenseNet
from dse.models.standardise import InputMap

LAYER_OPS = ("Conv", "Gemm", "MatMul", "Relu", "MaxPool", "Flatten", "Reshape", "AveragePool", "GlobalAveragePool",
             "ReduceMean")
# A classifier's last node may turn its scores into probabilities; neither changes which class
# is highest (a sigmoid of one output: which side of 0.5, the logit's sign), so the chain ends
# at the logits before it: the hardware's outputs are those, and the host applies the function
# if it wants probabilities (docs/real-models.md)
OUTPUT_OPS = ("Softmax", "LogSoftmax", "Sigmoid")
FOLDED_OPS = ("Add", "Sub", "Mul", "Div", "BatchNormalization", "Identity", "Dropout")
CHAIN_OPS = LAYER_OPS + FOLDED_OPS + OUTPUT_OPS + QUANT_OPS
# what may come between an average pool and the dense layer it folds into (ChainReader.average)
AFTER_AVERAGE = ("Flatten", "Reshape", "Gemm", "MatMul", "Relu", "Identity", "Dropout", "Add", "Sub", "Mul", "Div",
                 "BatchNormalization")


@dataclass(frozen=True)
class Affine:
    """v -> scale * v + shift, both arrays of the value's shape (batch 1); `where`: the first
    node composed in (what an error names)."""
    scale: np.ndarray
    shift: np.ndarray
    where: str

    def then(self, scale: np.ndarray, shift: np.ndarray) -> "Affine":
        """This map followed by v -> scale * v + shift."""
        return Affine(self.scale * scale, self.shift * scale + shift, self.where)


BROKEN = "the graph's shapes do not fit (no dtype can run it: fix the file)"


def read_chain(path: Path) -> LayerNet:
    """The chain of `path` as a LayerNet with everything affine folded (module docstring);
    raises NotDenseChain naming the first node that does not fit."""
    f = read_onnx(Path(path))
    reader = ChainReader(f)
    for node, position, consts in chain_nodes(f, reader.nodes, reader.consts, lambda: reader.shape):
        reader.node(node, position, consts)
    return reader.finish()


def output_function(path: Path) -> str | None:
    """The Softmax, LogSoftmax or Sigmoid the chain of `path` ends at and leaves to the host
    (OUTPUT_OPS), if it does."""
    ops = [n.op for n in read_onnx(Path(path)).nodes if n.op not in ("Identity", "Flatten")]
    return ops[-1] if ops and ops[-1] in OUTPUT_OPS else None


def load_onnx(path: Path):
    """An ONNX file of dense layers (Gemm, or MatMul + Add; Relu between them; affine maps and
    batch norms folded) as a dse.models.quantize.DenseNet, read by tinygrad's own importer (no
    onnx package needed). Anything else raises NotDenseChain naming the node."""
    net = read_net(path)
    if not isinstance(net, DenseNet):
        other = next(layer for layer in net.layers if not isinstance(layer, (Linear, Flatten)))
        raise NotDenseChain(f"{path}: not a chain of dense layers (it has a {type(other).__name__})")
    return net


def read_net(path: Path) -> "DenseNet | LayerNet":
    """The chain of `path`, folded: a DenseNet when it is dense layers with a ReLU between them
    (the dense quantiser, dse.models.quantize), else the LayerNet."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"file not found: {path}")
    net = read_chain(path)
    layers = [layer for layer in net.layers if not isinstance(layer, Flatten)]
    if not net.declared and all(isinstance(layer, Linear) for layer in layers) and not layers[-1].relu \
            and all(layer.relu for layer in layers[:-1]):
        return DenseNet(tuple(Dense(layer.W, layer.b, layer.relu, layer.name) for layer in layers))
    return net


def chain_nodes(f: OnnxFile, nodes: tuple[Node, ...], consts: dict[str, np.ndarray],
                shape: Callable[[], tuple[int, ...]]):
    """(node, position of the chain value among its inputs, its constant inputs by position)
    for every node of `nodes` (f's, its constants evaluated: `consts`), checked to be a chain
    on the graph's input. `shape`: the chain value's shape (batch 1) as the reader has it when
    the node comes; with it the computation of a Reshape's shape from the value's `Shape`, as
    PyTorch exports `x.view(x.size(0), -1)` with a dynamic batch, is evaluated into `consts`
    (SHAPE_OPS) instead of being read as the chain: the batch is one sample."""
    current = f.input
    for node in nodes:
        if node.op == "Shape" and not node.domain and node.inputs[0] == current:
            dims = np.array(shape(), np.int64)
            start, end = node.attrs.get("start", 0), node.attrs.get("end")
            consts[node.outputs[0]] = dims[start:end]
            continue
        if node.op in SHAPE_OPS and not node.domain and current not in node.inputs \
                and all(i in consts and np.asarray(consts[i]).dtype.kind in "iu" for i in node.inputs if i):
            consts[node.outputs[0]] = SHAPE_OPS[node.op](node, [np.asarray(consts[i]) if i else None
                                                                for i in node.inputs])
            continue
        if current not in node.inputs:
            raise NotDenseChain(f"{node.where}: not a chain (it does not read {current!r})")
        others = {i: name for i, name in enumerate(node.inputs) if name and name != current}
        missing = [name for name in others.values() if name not in consts]
        if missing:
            raise NotDenseChain(f"{node.where}: reads {', '.join(missing)}, which is not an initialiser")
        for name in others.values():
            a = np.asarray(consts[name])
            bad = first_non_finite(a) if np.issubdtype(a.dtype, np.floating) else None
            if bad is not None:
                raise DataError(f"{node.where}: its constant {name!r} holds {a[bad]}"
                                f"{f' at index {bad}' if bad else ''}: weights must be finite numbers")
        yield node, node.inputs.index(current), {i: np.asarray(consts[n]) for i, n in others.items()}
        current = node.outputs[0]
    if current != f.output:
        raise NotDenseChain(f"{f.path}: the chain ends at {current!r}, not at the graph's output {f.output!r}")


class ChainReader:
    """Builds the layers node by node. `shape`: the chain value's shape (batch 1); `pending`:
    an affine map applied to the value since the last layer, to fold into the next one;
    `open`: the value is the last conv/dense layer's raw output (an affine map folds into it);
    `quantised`: the quantiser applied since the last layer (nothing affine may follow it: the
    next layer reads its integers); `qdq`: a QuantizeLinear on the value awaiting its
    DequantizeLinear (scale, lo, hi, node)."""

    def __init__(self, f: OnnxFile):
        self.file = f
        folded = fold_constants(f)
        self.nodes, self.consts, self.grids = folded.nodes, folded.consts, folded.grids
        self.shape: tuple[int, ...] = tuple(f.input_shape)
        self.input_shape = self.shape        # a sample's shape as the first layer reads it (op_Reshape)
        self.layers: list[Layer] = []
        self.pending: Affine | None = None
        self.open = False
        self.quantised: str | None = None
        self.qdq: tuple[float, int, int, str] | None = None
        self.input_quant: Quantiser | None = None
        self.input_map: Affine | None = None
        self.ended: str | None = None        # the output function (OUTPUT_OPS) the chain ended at
        # an average pool since the last layer, as the matrix that maps the flattened value before
        # it to the flattened pooled value: folded into the dense layer that must come next
        self.averaged: np.ndarray | None = None

    def node(self, node: Node, position: int, consts: dict[int, np.ndarray]) -> None:
        if self.ended is not None and node.op not in ("Identity", "Flatten"):
            raise NotDenseChain(f"{node.where}: follows the output's {self.ended}; a Softmax, LogSoftmax or "
                                "Sigmoid is taken as the classifier's last node only")
        if self.qdq is not None and node.op not in ("Clip", "DequantizeLinear"):
            raise NotDenseChain(f"{self.qdq[3]}: a QuantizeLinear of the value must be followed by its "
                                f"DequantizeLinear (an optional Clip between), not by {node.where}")
        if node.domain in QONNX_DOMAINS and node.op in ("FloatQuant", "Trunc"):
            raise NotDenseChain(f"{node.where}: the QONNX quantiser {node.op} is not built (Quant/IntQuant and "
                                "BipolarQuant on weights are)")
        if self.averaged is not None and node.op not in AFTER_AVERAGE:
            raise NotDenseChain(f"{node.where}: a {node.op} after an average pool; the pool is read only where a dense "
                                "layer follows it (a Flatten, a Reshape or affine maps between), and folds into it")
        handler = getattr(self, f"op_{node.op}", None) if node.domain in ("", *QONNX_DOMAINS) else None
        if handler is None or (node.domain and node.op not in QUANT_OPS) or (not node.domain and node.op in
                                                                             ("Quant", "IntQuant", "BipolarQuant")):
            raise NotDenseChain(f"{node.where}: op {node.op}{f' of domain {node.domain}' if node.domain else ''} is "
                                f"not supported here (the quantiser takes: {', '.join(CHAIN_OPS)})")
        handler(node, position, consts)

    def finish(self) -> LayerNet:
        if self.qdq is not None:
            raise NotDenseChain(f"{self.qdq[3]}: a QuantizeLinear of the value without its DequantizeLinear")
        if self.pending is not None:
            raise NotDenseChain(f"{self.pending.where}: cannot be folded: no conv or dense layer follows it")
        if not any(isinstance(layer, (Conv, Linear)) for layer in self.layers):
            raise NotDenseChain(f"{self.file.path}: no Conv or dense layer to quantise")
        imap = None if self.input_map is None else InputMap(self.input_map.scale.reshape(self.input_shape),
                                                            self.input_map.shift.reshape(self.input_shape))
        return LayerNet(tuple(self.input_shape), tuple(self.layers), self.input_quant, imap)

    # -- layers

    def weights(self, node: Node, W: np.ndarray, transposed: bool):
        """The layer's weights (out, ...) and the file's integers for them (or None)."""
        grid = self.grids.get(node.inputs[1])
        if grid is None:
            return W, None
        wg = weight_grid(grid.transposed() if transposed else grid, node.where)
        return wg.values, wg

    def add_layer(self, node: Node, layer: Conv | Linear) -> None:
        if self.pending is not None:
            layer = fold_input(layer, self.pending, node.where)
            self.pending = None
        self.layers.append(layer)
        self.open, self.quantised = True, None

    def op_Conv(self, node: Node, position: int, consts: dict[int, np.ndarray]) -> None:
        where, opts = node.where, node.attrs
        if position != 0 or 1 not in consts or len(self.shape) != 4:
            raise NotDenseChain(f"{where}: expected a 2-D convolution of the chain value (N, C, H, W) by constant weights")
        W = consts[1].astype(np.float64)
        b = consts[2].astype(np.float64).reshape(-1) if 2 in consts else np.zeros(len(W))
        if opts.get("group", 1) != 1 or any(d != 1 for d in opts.get("dilations", (1, 1))) or W.ndim != 4:
            raise NotDenseChain(f"{where}: only 2-D convolutions without groups or dilation are quantised")
        if opts.get("auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET"):
            raise NotDenseChain(f"{where}: auto_pad is not supported; give explicit pads")
        pads = tuple(int(p) for p in opts.get("pads", (0, 0, 0, 0)))
        stride = tuple(int(s) for s in opts.get("strides", (1, 1)))
        if W.shape[1] != self.shape[1]:     # the graph itself is wrong: no dtype runs it
            raise DataError(f"{where}: weights for {W.shape[1]} input channels, the value has {self.shape[1]}: "
                            f"{BROKEN}")
        W, grid = self.weights(node, W, False)
        self.add_layer(node, Conv(W, b, stride, pads, grid=grid, name=_ident(node.inputs[1])))
        (kh, kw), (t, l, bo, r) = W.shape[2:], pads
        self.shape = (1, len(W), (self.shape[2] + t + bo - kh) // stride[0] + 1,
                      (self.shape[3] + l + r - kw) // stride[1] + 1)

    def op_Gemm(self, node: Node, position: int, consts: dict[int, np.ndarray]) -> None:
        opts = node.attrs
        if position != 0 or 1 not in consts or opts.get("transA", 0):
            raise NotDenseChain(f"{node.where}: expected the chain value times constant weights (transA 0)")
        W, grid = self.weights(node, consts[1].astype(np.float64).T if not opts.get("transB", 0)
                               else consts[1].astype(np.float64), not opts.get("transB", 0))
        alpha = float(opts.get("alpha", 1.0))
        if grid is not None and alpha != 1.0:
            if alpha <= 0:
                raise NotDenseChain(f"{node.where}: alpha {alpha} on quantised weights (a scale must be positive)")
            grid = grid.scaled(np.full(len(grid.scale), alpha))
        W = W * alpha
        b = (np.broadcast_to(consts[2].astype(np.float64).reshape(-1), (len(W),)) * float(opts.get("beta", 1.0))
             if 2 in consts else np.zeros(len(W)))
        self.dense(node, W, b, grid)

    def op_MatMul(self, node: Node, position: int, consts: dict[int, np.ndarray]) -> None:
        if position != 0 or 1 not in consts or consts[1].ndim != 2:
            raise NotDenseChain(f"{node.where}: expected the chain value times a constant 2-D matrix")
        W, grid = self.weights(node, consts[1].astype(np.float64).T, True)
        self.dense(node, W, np.zeros(consts[1].shape[1]), grid)

    def dense(self, node: Node, W: np.ndarray, b: np.ndarray, grid=None) -> None:
        if len(self.shape) == 2 and W.shape[1] != self.shape[1]:   # the graph itself is wrong: no dtype runs it
            raise DataError(f"{node.where}: a dense layer of {W.shape[1]} inputs on a value of shape {self.shape}: "
                            f"{BROKEN}")
        if len(self.shape) != 2:
            raise NotDenseChain(f"{node.where}: a dense layer of {W.shape[1]} inputs on a value of shape {self.shape} "
                                "(a Flatten before it?)")
        layer = Linear(np.ascontiguousarray(W), np.asarray(b, np.float64).copy(), grid=grid, name=_ident(node.inputs[1]))
        if self.averaged is not None:
            # the average pool before it folds in (exact in real arithmetic): the layer reads the
            # value before the pool, flattened, each weight spread over the elements it averaged
            if grid is not None:
                raise NotDenseChain(f"{node.where}: quantised weights after an average pool (the pool would change "
                                    "the file's integers)")
            if self.pending is not None:
                layer = fold_input(layer, self.pending, node.where)
                self.pending = None
            layer = _replace(layer, W=np.ascontiguousarray(layer.W @ self.averaged))
            self.layers.append(Flatten())       # of the value before the pool (flatten() added none)
            self.averaged = None
        self.add_layer(node, layer)
        self.shape = (1, len(W))

    def last_compute(self) -> int | None:
        return next((j for j in range(len(self.layers) - 1, -1, -1) if isinstance(self.layers[j], (Conv, Linear))), None)

    def op_Relu(self, node: Node, position: int, consts: dict[int, np.ndarray]) -> None:
        if self.averaged is not None and self.pending is None:
            k = self.last_compute()
            if k is not None and self.layers[k].relu:
                return           # an average of values a ReLU made non-negative is non-negative
            raise NotDenseChain(f"{node.where}: a Relu after an average pool of values no ReLU bounded (it would not "
                                "fold into the dense layer after it)")
        if self.pending is not None:
            raise NotDenseChain(f"{self.pending.where}: cannot be folded: a Relu ({node.where}) follows it before "
                                "any conv or dense layer")
        k = self.last_compute()
        if k is None or self.layers[k].relu or any(isinstance(m, Flatten) for m in self.layers[k + 1:]):
            raise NotDenseChain(f"{node.where}: a Relu must follow a Conv or dense layer (a max-pool between is fine)")
        self.layers[k] = _replace(self.layers[k], relu=True)
        self.open = False

    def op_MaxPool(self, node: Node, position: int, consts: dict[int, np.ndarray]) -> None:
        opts = node.attrs
        kernel = tuple(int(v) for v in opts["kernel_shape"])
        if any(int(p) for p in opts.get("pads", ())) or opts.get("ceil_mode", 0) or len(kernel) != 2 \
                or len(self.shape) != 4 or len(node.outputs) > 1 and node.outputs[1]:
            raise NotDenseChain(f"{node.where}: only 2-D max-pools without padding or ceil_mode are quantised")
        stride = tuple(int(v) for v in opts.get("strides", kernel))
        shape = (*self.shape[:2], (self.shape[2] - kernel[0]) // stride[0] + 1, (self.shape[3] - kernel[1]) // stride[1] + 1)
        self.pool_pending(node, shape, "max-pool", nonnegative=True)
        self.layers.append(MaxPool(kernel, stride))
        self.shape, self.open = shape, False

    def op_Flatten(self, node: Node, position: int, consts: dict[int, np.ndarray]) -> None:
        if node.attrs.get("axis", 1) != 1:
            raise NotDenseChain(f"{node.where}: only Flatten(axis=1) is supported")
        self.flatten()

    def flatten(self) -> None:
        shape = (1, math.prod(self.shape[1:]))
        self.reshape_pending(shape)
        if shape != self.shape:
            if self.averaged is None:       # else the dense layer flattens the value before the pool
                self.layers.append(Flatten())
            self.shape, self.open = shape, False

    # -- average pools, folded into the dense layer after them

    def op_GlobalAveragePool(self, node: Node, position: int, consts: dict[int, np.ndarray]) -> None:
        if len(self.shape) != 4:
            raise NotDenseChain(f"{node.where}: a global average pool of a (N, C, H, W) value is read, not of {self.shape}")
        self.average(node, self.shape[2:], (1, 1), (*self.shape[:2], 1, 1))

    def op_AveragePool(self, node: Node, position: int, consts: dict[int, np.ndarray]) -> None:
        opts = node.attrs
        kernel = tuple(int(v) for v in opts["kernel_shape"])
        if any(int(p) for p in opts.get("pads", ())) or opts.get("ceil_mode", 0) or len(kernel) != 2 \
                or len(self.shape) != 4 or opts.get("auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET") \
                or any(d != 1 for d in opts.get("dilations", (1, 1))):
            raise NotDenseChain(f"{node.where}: only 2-D average pools without padding, dilation or ceil_mode are read")
        stride = tuple(int(v) for v in opts.get("strides", kernel))
        self.average(node, kernel, stride, (*self.shape[:2], (self.shape[2] - kernel[0]) // stride[0] + 1,
                                            (self.shape[3] - kernel[1]) // stride[1] + 1))

    def op_ReduceMean(self, node: Node, position: int, consts: dict[int, np.ndarray]) -> None:
        """The mean over a (N, C, H, W) value's H and W (`x.mean((2, 3))`): a global average pool,
        flattened unless `keepdims`."""
        axes = consts[1] if 1 in consts else node.attrs.get("axes")
        axes = sorted(int(a) % len(self.shape) for a in np.asarray(axes).reshape(-1)) if axes is not None else None
        if position != 0 or len(self.shape) != 4 or axes != [2, 3]:
            raise NotDenseChain(f"{node.where}: a ReduceMean is read over the H and W axes of a (N, C, H, W) value only")
        self.average(node, self.shape[2:], (1, 1), (*self.shape[:2], 1, 1))
        if not node.attrs.get("keepdims", 1):
            self.flatten()

    def average(self, node: Node, kernel: tuple[int, ...], stride: tuple[int, ...], shape: tuple[int, ...]) -> None:
        """An average pool of `kernel` at `stride` to `shape` (a global one: the whole image):
        the matrix it is, from the value flattened to the pooled value flattened (self.averaged)."""
        if self.averaged is not None or self.quantised is not None:
            raise NotDenseChain(f"{node.where}: an average pool after another, or after a quantiser of the value")
        _, C, H, W = self.shape
        _, _, Ho, Wo = shape
        M = np.zeros((C * Ho * Wo, C * H * W))
        for c, i, j in np.ndindex(C, Ho, Wo):
            for u, v in np.ndindex(*kernel):
                M[(c * Ho + i) * Wo + j, (c * H + i * stride[0] + u) * W + j * stride[1] + v] = 1.0 / math.prod(kernel)
        self.pool_pending(node, shape, "average pool", nonnegative=False)
        self.averaged, self.shape, self.open = M, shape, False

    def pool_pending(self, node: Node, shape: tuple[int, ...], what: str, nonnegative: bool) -> None:
        """The pending map carried through a pool to its output `shape`: a per-channel map commutes
        with an average, and with a max where its scale is >= 0 (`nonnegative`)."""
        if self.pending is None:
            return
        a, c = per_channel(self.pending.scale), per_channel(self.pending.shift)
        if a is None or c is None or (nonnegative and (a < 0).any()):
            raise NotDenseChain(f"{self.pending.where}: cannot be folded through the {what} {node.where}: it needs one "
                                f"scale{' >= 0' if nonnegative else ''} and one shift per channel")
        self.pending = Affine(np.broadcast_to(a.reshape(1, -1, 1, 1), shape),
                              np.broadcast_to(c.reshape(1, -1, 1, 1), shape), self.pending.where)

    def reshape_pending(self, shape: tuple[int, ...]) -> None:
        if self.pending is not None:
            self.pending = Affine(self.pending.scale.reshape(shape), self.pending.shift.reshape(shape), self.pending.where)

    def op_Reshape(self, node: Node, position: int, consts: dict[int, np.ndarray]) -> None:
        """A Reshape by a constant shape, the batch axis kept first. Before any layer it is the shape
        the first layer reads a sample in (a view: the sample's elements keep their order), as
        `x.view(-1, 1, 8, 8)` at the top of a PyTorch CNN exports; after one it must be a
        Flatten (`x.view(-1, C * H * W)` before a dense layer)."""
        if position != 0 or 1 not in consts:
            raise NotDenseChain(f"{node.where}: expected the chain value reshaped by a constant shape")
        shape = reshaped(self.shape, consts[1], bool(node.attrs.get("allowzero", 0)), node.where)
        if not self.layers and self.averaged is None:
            self.reshape_pending(shape)
            self.shape = self.input_shape = shape
        elif len(shape) == 2:
            self.flatten()
        elif shape != self.shape:
            raise NotDenseChain(f"{node.where}: a Reshape of the value {self.shape} to {shape} after a layer; only one "
                                "to (batch, features), a Flatten, is read there")

    def op_Identity(self, node: Node, position: int, consts: dict[int, np.ndarray]) -> None:
        pass

    def op_Softmax(self, node: Node, position: int, consts: dict[int, np.ndarray]) -> None:
        self.last_node(node)

    op_LogSoftmax = op_Sigmoid = op_Softmax

    def last_node(self, node: Node) -> None:
        """A classifier's Softmax, LogSoftmax or Sigmoid over its scores: left out (OUTPUT_OPS)."""
        if not self.layers or not isinstance(self.layers[-1], (Conv, Linear)) or self.layers[-1].relu:
            raise NotDenseChain(f"{node.where}: a {node.op} only as the classifier's last node, on the scores of "
                                "its last layer")
        axis = node.attrs.get("axis", -1)
        if node.op != "Sigmoid" and axis not in (-1, len(self.shape) - 1) or len(self.shape) != 2:
            raise NotDenseChain(f"{node.where}: a {node.op} over the classes of a (batch, classes) output only")
        if self.pending is not None:        # an affine map between: its scale could reorder the scores
            raise NotDenseChain(f"{self.pending.where}: cannot be folded: the output's {node.op} follows it")
        self.ended = node.op

    def op_Dropout(self, node: Node, position: int, consts: dict[int, np.ndarray]) -> None:
        if position != 0 or (2 in consts and bool(consts[2])):
            raise NotDenseChain(f"{node.where}: a Dropout in training mode")

    # -- affine maps

    def op_Add(self, node: Node, position: int, consts: dict[int, np.ndarray]) -> None:
        k = self.constant(node, consts)
        self.affine(node, np.ones(self.shape), k)

    def op_Sub(self, node: Node, position: int, consts: dict[int, np.ndarray]) -> None:
        k = self.constant(node, consts)
        if position == 0:
            self.affine(node, np.ones(self.shape), -k)
        else:
            self.affine(node, -np.ones(self.shape), k)

    def op_Mul(self, node: Node, position: int, consts: dict[int, np.ndarray]) -> None:
        self.affine(node, self.constant(node, consts), np.zeros(self.shape))

    def op_Div(self, node: Node, position: int, consts: dict[int, np.ndarray]) -> None:
        k = self.constant(node, consts)
        if position != 0:
            raise NotDenseChain(f"{node.where}: divides a constant by the value, which is not affine")
        if (k == 0).any():
            raise NotDenseChain(f"{node.where}: divides by zero")
        self.affine(node, 1.0 / k, np.zeros(self.shape))

    def op_BatchNormalization(self, node: Node, position: int, consts: dict[int, np.ndarray]) -> None:
        if position != 0 or sorted(consts) != [1, 2, 3, 4] or node.attrs.get("training_mode", 0):
            raise NotDenseChain(f"{node.where}: expected an inference batch norm of the chain value with constant "
                                "scale, B, mean and var")
        if len(self.shape) < 2:
            raise NotDenseChain(f"{node.where}: a batch norm needs a channel axis")
        scale, B, mean, var = (consts[i].astype(np.float64).reshape(-1) for i in (1, 2, 3, 4))
        eps = float(node.attrs.get("epsilon", 1e-5))
        if not all(len(v) == self.shape[1] for v in (scale, B, mean, var)) or (var + eps <= 0).any():
            raise NotDenseChain(f"{node.where}: its parameters need one value per channel ({self.shape[1]}) and "
                                "var + epsilon > 0")
        a = scale / np.sqrt(var + eps)
        channel = (1, -1) + (1,) * (len(self.shape) - 2)
        self.affine(node, np.broadcast_to(a.reshape(channel), self.shape),
                    np.broadcast_to((B - mean * a).reshape(channel), self.shape))

    def constant(self, node: Node, consts: dict[int, np.ndarray]) -> np.ndarray:
        """The one constant operand of an element-wise node, broadcast to the value's shape."""
        if len(consts) != 1:
            raise NotDenseChain(f"{node.where}: expected the chain value and one constant")
        k = next(iter(consts.values())).astype(np.float64)
        try:
            full = np.broadcast_shapes(self.shape, k.shape)
        except ValueError:
            full = None
        if full != self.shape:
            raise NotDenseChain(f"{node.where}: its constant of shape {k.shape} does not broadcast to the value's "
                                f"shape {self.shape}")
        return np.broadcast_to(k, self.shape)

    def affine(self, node: Node, a: np.ndarray, c: np.ndarray) -> None:
        """v -> a v + c: into the open layer's output, else into the pending map."""
        if self.quantised is not None:
            raise NotDenseChain(f"{node.where}: cannot be folded: it follows the quantiser {self.quantised}, and the "
                                "layer after it reads that quantiser's integers")
        if self.open and self.pending is None:
            self.layers[-1] = fold_output(self.layers[-1], a, c, node.where)
        elif self.pending is None:
            self.pending = Affine(np.asarray(a, np.float64), np.asarray(c, np.float64), node.where)
        else:
            self.pending = self.pending.then(a, c)


    # -- quantisers of the chain value (dse.models.qonnx)

    def op_Quant(self, node: Node, position: int, consts: dict[int, np.ndarray]) -> None:
        if position != 0:
            raise NotDenseChain(f"{node.where}: expected the chain value as its first input")
        scale, lo, hi, mode = quant_params(node, consts)
        self.activation(Quantiser(_one(scale, node), lo, hi, mode, node.where))

    op_IntQuant = op_Quant

    def op_BipolarQuant(self, node: Node, position: int, consts: dict[int, np.ndarray]) -> None:
        raise NotDenseChain(f"{node.where}: binarised activations (BipolarQuant of the value) are not built; "
                            "BipolarQuant of weights is read")

    def op_QuantizeLinear(self, node: Node, position: int, consts: dict[int, np.ndarray]) -> None:
        if position != 0:
            raise NotDenseChain(f"{node.where}: expected the chain value as its first input")
        scale, lo, hi = linear_params(node, consts, len(self.shape))
        self.qdq = (_one(scale, node), lo, hi, node.where)

    def op_Clip(self, node: Node, position: int, consts: dict[int, np.ndarray]) -> None:
        if self.qdq is None or position != 0:
            raise NotDenseChain(f"{node.where}: a Clip is read between a QuantizeLinear and its DequantizeLinear only")
        scale, lo, hi, where = self.qdq
        clo = float(consts[1]) if 1 in consts else float(node.attrs.get("min", -np.inf))
        chi = float(consts[2]) if 2 in consts else float(node.attrs.get("max", np.inf))
        self.qdq = (scale, max(lo, int(np.ceil(clo))), min(hi, int(np.floor(chi))), where)

    def op_DequantizeLinear(self, node: Node, position: int, consts: dict[int, np.ndarray]) -> None:
        if self.qdq is None or position != 0:
            raise NotDenseChain(f"{node.where}: dequantises the value without a QuantizeLinear before it")
        scale, lo, hi, where = self.qdq
        if _one(linear_params(node, consts, len(self.shape))[0], node) != scale:
            raise NotDenseChain(f"{node.where}: dequantises with another scale than its QuantizeLinear {where}")
        self.qdq = None
        self.activation(Quantiser(scale, lo, hi, "HALF_EVEN", where))

    def activation(self, q: Quantiser) -> None:
        """A quantiser of the value: the input's before any layer (after the preprocessing, which
        the host then applies), else the output quantiser of the last layer."""
        k = self.last_compute()
        if self.quantised is not None:     # the same quantiser again (after a max-pool, say) changes nothing
            if not _same(self.input_quant if k is None else self.layers[k].out_quant, q):
                raise NotDenseChain(f"{q.where}: a second quantiser after {self.quantised} before the next layer")
            return
        if k is None:
            self.input_quant, self.input_map, self.pending = q, self.pending, None
        else:
            if self.pending is not None:
                raise NotDenseChain(f"{self.pending.where}: cannot be folded: the quantiser {q.where} follows it before "
                                    "any layer (it would quantise the map's output)")
            self.layers[k] = _replace(self.layers[k], out_quant=q)
        self.quantised, self.open = q.where, False


def _axes(node: Node, args: list) -> list[int]:
    """A node's `axes`: its second input (opset 13 on) or its attribute."""
    axes = args[1] if len(args) > 1 and args[1] is not None else node.attrs.get("axes", [])
    return [int(a) for a in np.asarray(axes).reshape(-1)]


def _unsqueeze(node: Node, args: list) -> np.ndarray:
    out = args[0]
    ndim = out.ndim + len(_axes(node, args))
    for a in sorted(a % ndim for a in _axes(node, args)):
        out = np.expand_dims(out, a)
    return out


def _slice(node: Node, args: list) -> np.ndarray:
    x = args[0]
    starts, ends = (np.asarray(a).reshape(-1) for a in args[1:3])
    axes = np.asarray(args[3]).reshape(-1) if len(args) > 3 and args[3] is not None else np.arange(len(starts))
    steps = np.asarray(args[4]).reshape(-1) if len(args) > 4 and args[4] is not None else np.ones(len(starts), int)
    index = [slice(None)] * x.ndim
    for a, b, e, st in zip(axes, starts, ends, steps):
        index[int(a)] = slice(*slice(int(b), int(e), int(st)).indices(x.shape[int(a)]))
    return x[tuple(index)]


# What the shape of a Reshape is computed with from the value's Shape (chain_nodes): numpy on
# small integer vectors (only integer constants: a float one is a weight, folded elsewhere)
SHAPE_OPS = {
    "Gather": lambda node, a: np.take(a[0], a[1], axis=int(node.attrs.get("axis", 0))),
    "Unsqueeze": _unsqueeze,
    "Squeeze": lambda node, a: np.squeeze(a[0], axis=tuple(_axes(node, a)) or None),
    "Concat": lambda node, a: np.concatenate([np.atleast_1d(v) for v in a if v is not None],
                                             axis=int(node.attrs["axis"])),
    "Slice": _slice,
    "Cast": lambda node, a: a[0],
    "Mul": lambda node, a: a[0] * a[1],
    "Div": lambda node, a: a[0] // a[1] if a[0].dtype.kind in "iu" else a[0] / a[1],
}


def reshaped(shape: tuple[int, ...], target: np.ndarray, allowzero: bool, where: str) -> tuple[int, ...]:
    """ONNX Reshape's output shape for a value of `shape` (batch 1): a 0 copies the input's
    dimension (unless `allowzero`), one -1 takes what is left. Refused unless the batch axis
    stays first (a batch of one sample gives one sample)."""
    dims = [int(v) for v in np.asarray(target).reshape(-1)]
    out = [shape[i] if v == 0 and not allowzero and i < len(shape) else v for i, v in enumerate(dims)]
    size, known = math.prod(shape), math.prod(v for v in out if v != -1)
    if out.count(-1) > 1 or any(v < -1 for v in out) or (-1 in out and (known == 0 or size % known)) \
            or (-1 not in out and known != size):
        raise DataError(f"{where}: a Reshape of a value of shape {shape} to {tuple(dims)}: {BROKEN}")
    if -1 in out:
        out[out.index(-1)] = size // known
    if len(out) < 2 or out[0] != 1:
        raise NotDenseChain(f"{where}: a Reshape to {tuple(dims)} does not keep the batch axis first (a sample of "
                            f"shape {shape[1:]} must stay one sample: (-1, ...) or (N, ...))")
    return tuple(out)


def _ident(name: str) -> str:
    """A layer's name from its weights' name: letters, digits and '_' (`fc.weight` -> `fc_weight`)."""
    return re.sub(r"\W", "_", name)


def _one(scale: np.ndarray, node: Node) -> float:
    scale = np.asarray(scale, np.float64)
    if scale.size != 1:
        raise NotDenseChain(f"{node.where}: one scale per channel is read for weights only; an activation takes one "
                            "per tensor")
    return float(scale.reshape(-1)[0])


def _same(a: Quantiser | None, b: Quantiser) -> bool:
    return a is not None and (a.scale, a.lo, a.hi, a.mode) == (b.scale, b.lo, b.hi, b.mode)


def per_channel(v: np.ndarray) -> np.ndarray | None:
    """The vector of a (1, C, ...) array that is constant along every axis after the channel
    one (None if it is not); a (1, F) array is its own vector."""
    flat = v.reshape(v.shape[1], -1) if v.ndim > 2 else v.reshape(-1, 1)
    return flat[:, 0].copy() if (flat == flat[:, :1]).all() else None


def fold_output(layer: Conv | Linear, a: np.ndarray, c: np.ndarray, where: str) -> Conv | Linear:
    """`layer` followed by v -> a v + c, per output channel: W' = a W, b' = a b + c."""
    av, cv = per_channel(a), per_channel(c)
    if av is None or cv is None:
        raise NotDenseChain(f"{where}: cannot be folded into the conv before it: its constant varies across the "
                            "image, and a conv's weights are shared across it")
    if layer.grid is not None:          # the file's integers stay: the map scales their scales
        if (av <= 0).any():
            raise NotDenseChain(f"{where}: cannot be folded into quantised weights: a scale that is not positive")
        grid = layer.grid.scaled(av)
        return _replace(layer, W=grid.values, b=layer.b * av + cv, grid=grid)
    W = layer.W * av.reshape((-1,) + (1,) * (layer.W.ndim - 1))
    return _replace(layer, W=W, b=layer.b * av + cv)


def fold_input(layer: Conv | Linear, pending: Affine, where: str) -> Conv | Linear:
    """v -> a v + c followed by `layer`: W' = W a, b' = b + W c."""
    a, c = pending.scale, pending.shift
    if layer.grid is not None:          # the file's integers stay: one positive scale may fold into theirs
        a0 = float(a.reshape(-1)[0])
        if not (a == a0).all() or a0 <= 0:
            raise NotDenseChain(f"{pending.where}: cannot be folded into the quantised weights of {where}: it needs "
                                "one positive scale for the whole value")
        if isinstance(layer, Conv) and any(layer.pads) and (c != 0).any():
            raise NotDenseChain(f"{pending.where}: cannot be folded into the conv {where}: it shifts the value, and "
                                "the conv's zero padding would need the shift too")
        shift = (layer.W.reshape(len(layer.W), -1) @ c.reshape(-1) if isinstance(layer, Linear)
                 else (layer.W * per_channel(c).reshape(1, -1, 1, 1)).sum(axis=(1, 2, 3)) if per_channel(c) is not None
                 else None)
        if shift is None:
            raise NotDenseChain(f"{pending.where}: cannot be folded into the conv {where}: its shift varies across the "
                                "image")
        grid = layer.grid.scaled(np.full(len(layer.grid.scale), a0))
        return _replace(layer, W=grid.values, b=layer.b + shift, grid=grid)
    if isinstance(layer, Linear):
        a, c = a.reshape(-1), c.reshape(-1)
        return _replace(layer, W=layer.W * a[None, :], b=layer.b + layer.W @ c)
    av, cv = per_channel(a), per_channel(c)
    if av is None or cv is None:
        raise NotDenseChain(f"{pending.where}: cannot be folded into the conv {where}: its constant varies across "
                            "the image, and a conv's weights are shared across it")
    if any(layer.pads) and (cv != 0).any():
        raise NotDenseChain(f"{pending.where}: cannot be folded into the conv {where}: it shifts the value, and the "
                            "conv's zero padding would need the shift too (fold it before exporting, or pad without it)")
    W = layer.W * av.reshape(1, -1, 1, 1)
    return _replace(layer, W=W, b=layer.b + (layer.W * cv.reshape(1, -1, 1, 1)).sum(axis=(1, 2, 3)))


def _replace(layer, **changes):
    import dataclasses
    return dataclasses.replace(layer, **changes)
