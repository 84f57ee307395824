"""Quantisers of the ONNX ecosystem, in numpy: QONNX's `Quant` (alias `IntQuant`) and
`BipolarQuant`, and the standard `QuantizeLinear` / `DequantizeLinear` pairs (QCDQ, with an
optional `Clip` between them for fewer than 8 bits), as Brevitas and QKeras (through QONNX)
export a network trained quantisation-aware.

    q = Quantiser(scale=0.05, lo=0, hi=15, mode="ROUND", where="...")   # a 4-bit unsigned activation
    q.integers(x)          # clip(round(x / scale), lo, hi): the integers the hardware holds
    q(x)                   # scale * q.integers(x): what the graph computes in float

    consts, grids, nodes = fold_constants(f)                           # f: dse.models.onnx_file.OnnxFile

The semantics (QONNX's operator docs; ONNX's for QuantizeLinear):
  * Quant(x, scale, zeropt, bitwidth; signed, narrow, rounding_mode):
    y = (clip(round(x / scale + zeropt), lo, hi) - zeropt) * scale, with lo, hi = -2**(b-1)
    (+1 if narrow), 2**(b-1) - 1 when signed, else 0, 2**b - 1 (- 1 if narrow); rounding_mode
    ROUND (= HALF_EVEN), CEIL, FLOOR, UP (away from zero), DOWN (toward zero), HALF_UP,
    HALF_DOWN (ties away from / toward zero);
  * BipolarQuant(x, scale): y = scale where x >= 0, else -scale;
  * QuantizeLinear(x, y_scale, y_zero_point): saturate(round_half_even(x / y_scale) + zp) in the
    zero point's type (uint8 when none is given); DequantizeLinear(q, scale, zp) = (q - zp) * scale;
    per-axis scales along `axis` (default 1).
Only symmetric quantisers are read (zero point 0, as Brevitas' defaults): an asymmetric one is
refused naming its node, as is a per-channel activation scale, FloatQuant and Trunc.

A quantiser on constants (a layer's weights) is evaluated here, and what it produced is kept as
a `Grid`: the integers and their scale, so that the layer takes the file's integer weights as
they are. A quantiser on the chain value is an activation quantiser (dse.models.chain reads it).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compiler.host_input import ROUNDING_MODES, round_mode
from dse.models.data import NotDenseChain
from dse.models.onnx_file import Node, OnnxFile

QONNX_DOMAINS = ("qonnx.custom_op.general", "finn.custom_op.general", "onnx.brevitas")
QUANT_OPS = ("Quant", "IntQuant", "BipolarQuant", "QuantizeLinear", "DequantizeLinear", "Clip")
# the integer range of a QuantizeLinear's output type (its zero point's, uint8 by default)
LINEAR_TYPES = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255),
                np.dtype(np.int16): (-32768, 32767), np.dtype(np.uint16): (0, 65535)}


def int_range(bits: int, signed: bool, narrow: bool) -> tuple[int, int]:
    """QONNX's integer range of a quantiser."""
    if signed:
        return -(2 ** (bits - 1)) + int(narrow), 2 ** (bits - 1) - 1
    return 0, 2 ** bits - 1 - int(narrow)


@dataclass(frozen=True)
class Quantiser:
    """x -> scale * clip(round(x / scale), lo, hi), one scale per tensor (an activation's)."""
    scale: float
    lo: int
    hi: int
    mode: str               # a ROUNDING_MODES name
    where: str              # the node (messages)

    def integers(self, x: np.ndarray) -> np.ndarray:
        return np.clip(round_mode(np.asarray(x, np.float64) / self.scale, self.mode), self.lo, self.hi)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.integers(x) * self.scale

    @property
    def bits(self) -> int:
        """Bits of the range as QONNX counts them (a sign bit included where lo < 0)."""
        return max(int(self.hi).bit_length(), int(-self.lo - 1).bit_length()) + (self.lo < 0)

    def describe(self) -> str:
        return f"{self.bits}-bit {'signed' if self.lo < 0 else 'unsigned'} [{self.lo}, {self.hi}]"


@dataclass(frozen=True)
class Grid:
    """A constant quantised by the file: value = q * scale, q integers in [lo, hi]; `scale`
    broadcast to q's shape."""
    q: np.ndarray
    scale: np.ndarray
    lo: int
    hi: int
    where: str

    def transposed(self) -> "Grid":
        return Grid(self.q.T, self.scale.T, self.lo, self.hi, self.where)


@dataclass(frozen=True)
class WeightGrid:
    """A layer's integer weights as the file declares them: W = q * scale[out channel]."""
    q: np.ndarray           # the layer's W shape (out, ...), integers
    scale: np.ndarray       # (out,)
    lo: int
    hi: int
    where: str

    def scaled(self, factor: np.ndarray) -> "WeightGrid":
        return WeightGrid(self.q, self.scale * factor, self.lo, self.hi, self.where)

    @property
    def values(self) -> np.ndarray:
        return self.q * self.scale.reshape((-1,) + (1,) * (self.q.ndim - 1))

    def describe(self) -> str:
        return Quantiser(1.0, self.lo, self.hi, "ROUND", self.where).describe()


def weight_grid(grid: Grid, where: str) -> WeightGrid:
    """A Grid in a layer's layout (out, ...) as per-output-channel weights; its scale must not
    vary along the other axes (a layer multiplies integers by one scale per output)."""
    s = np.broadcast_to(grid.scale, grid.q.shape).reshape(len(grid.q), -1)
    if not (s == s[:, :1]).all():
        raise NotDenseChain(f"{grid.where}: its scale varies along the inputs of {where}; a layer's weights take one "
                            "scale per output channel (or one per tensor)")
    if (s[:, 0] <= 0).any():
        raise NotDenseChain(f"{grid.where}: a scale that is not positive")
    return WeightGrid(grid.q.astype(np.float64), s[:, 0].astype(np.float64), grid.lo, grid.hi, grid.where)


# ---------------------------------------------------------------------------------------------
# reading a node's quantiser

def _scalar(v: np.ndarray, node: Node, what: str) -> float:
    v = np.asarray(v, np.float64)
    if v.size != 1:
        raise NotDenseChain(f"{node.where}: a {what} per channel is not supported on activations (one per tensor)")
    return float(v.reshape(-1)[0])


def quant_params(node: Node, consts: dict[int, np.ndarray]) -> tuple[np.ndarray, int, int, str]:
    """(scale, lo, hi, rounding mode) of a QONNX Quant node with constant scale, zero point and
    bit width; refuses an asymmetric one or a bad bit width naming the node."""
    if sorted(consts) != [1, 2, 3]:
        raise NotDenseChain(f"{node.where}: expected constant scale, zero point and bit width")
    scale, zp, bits = (np.asarray(consts[i], np.float64) for i in (1, 2, 3))
    if (zp != 0).any():
        raise NotDenseChain(f"{node.where}: a zero point other than 0 (asymmetric quantisation) is not supported")
    if bits.size != 1 or bits.reshape(-1)[0] != round(float(bits.reshape(-1)[0])) or not 1 <= bits.reshape(-1)[0] <= 32:
        raise NotDenseChain(f"{node.where}: expected one whole bit width from 1 to 32, got {bits.reshape(-1).tolist()}")
    mode = str(node.attrs.get("rounding_mode", "ROUND")).upper()
    if mode not in ROUNDING_MODES:
        raise NotDenseChain(f"{node.where}: rounding_mode {mode!r} is not one of {', '.join(ROUNDING_MODES)}")
    lo, hi = int_range(int(bits.reshape(-1)[0]), bool(node.attrs.get("signed", 1)), bool(node.attrs.get("narrow", 0)))
    if hi <= lo:
        raise NotDenseChain(f"{node.where}: the range [{lo}, {hi}] holds one value")
    if (scale <= 0).any():
        raise NotDenseChain(f"{node.where}: a scale that is not positive")
    return scale, lo, hi, mode


def linear_params(node: Node, consts: dict[int, np.ndarray], rank: int) -> tuple[np.ndarray, int, int]:
    """(scale broadcastable to a value of `rank` dimensions, lo, hi) of a QuantizeLinear or
    DequantizeLinear node; zero points must be 0."""
    if 1 not in consts or any(i not in consts for i in range(2, len(node.inputs)) if node.inputs[i]):
        raise NotDenseChain(f"{node.where}: expected a constant scale and zero point")
    scale = np.asarray(consts[1], np.float64)
    zp = consts.get(2)
    if zp is not None and (np.asarray(zp) != 0).any():
        raise NotDenseChain(f"{node.where}: a zero point other than 0 (asymmetric quantisation) is not supported")
    if node.attrs.get("block_size", 0):
        raise NotDenseChain(f"{node.where}: blocked quantisation is not supported")
    kind = np.dtype(np.uint8) if zp is None else np.asarray(zp).dtype
    if node.op == "QuantizeLinear" and zp is None and node.attrs.get("output_dtype", 0) not in (0, 2):
        kind = {3: np.dtype(np.int8), 4: np.dtype(np.uint16), 5: np.dtype(np.int16)}.get(node.attrs["output_dtype"])
    if kind not in LINEAR_TYPES:
        raise NotDenseChain(f"{node.where}: quantises to {kind}; int8, uint8, int16 and uint16 are read")
    if scale.ndim == 1 and scale.size > 1:
        axis = int(node.attrs.get("axis", 1)) % rank
        scale = scale.reshape((1,) * axis + (-1,) + (1,) * (rank - axis - 1))
    if (scale <= 0).any():
        raise NotDenseChain(f"{node.where}: a scale that is not positive")
    return scale, *LINEAR_TYPES[kind]


# ---------------------------------------------------------------------------------------------
# constants: weights through their quantisers

@dataclass(frozen=True)
class Folded:
    consts: dict[str, np.ndarray]           # initialisers, Constant nodes and every constant node's outputs
    grids: dict[str, Grid]                  # the constants a quantiser produced, as integers and scales
    nodes: tuple[Node, ...]                 # what is left: the nodes that read the graph's input


def fold_constants(f: OnnxFile) -> Folded:
    """Evaluate every node whose inputs are all constants (a weight's Quant, a QCDQ weight's
    DequantizeLinear, a Transpose or Reshape of a weight), keeping the quantisers' integers."""
    consts, grids = dict(f.consts), {}
    pending: dict[str, tuple] = {}           # QuantizeLinear outputs: (integers, scale, lo, hi, where)
    left = []
    for node in f.nodes:
        names = [i for i in node.inputs if i]
        if not names or not all(i in consts for i in names) or node.op not in _CONSTANT_OPS:
            left.append(node)
            continue
        args = {i: np.asarray(consts[n]) for i, n in enumerate(node.inputs) if n}
        out = _CONSTANT_OPS[node.op](node, args, grids, pending)
        consts[node.outputs[0]] = out
    return Folded(consts, grids, tuple(left))


def _grid_input(node: Node, grids: dict[str, Grid], pending: dict) -> Grid | None:
    return grids.get(node.inputs[0])


def _no_grid(node: Node, grids: dict[str, Grid], pending: dict) -> None:
    """Quantised constants go through Identity and Transpose only: anything else would leave the
    integers the file declared."""
    for name in node.inputs:
        if name in grids or name in pending:
            raise NotDenseChain(f"{node.where}: reads the quantised constant {name!r}; only Identity and Transpose "
                                "may follow a weight's quantiser")


def _c_quant(node, args, grids, pending):
    scale, lo, hi, mode = quant_params(node, {i: a for i, a in args.items() if i})
    _no_grid(node, grids, pending)
    x = args[0].astype(np.float64)
    scale = np.broadcast_to(scale, x.shape)
    q = np.clip(round_mode(x / scale, mode), lo, hi)
    grids[node.outputs[0]] = Grid(q, scale, lo, hi, node.where)
    return q * scale


def _c_bipolar(node, args, grids, pending):
    _no_grid(node, grids, pending)
    if 1 not in args:
        raise NotDenseChain(f"{node.where}: expected a constant scale")
    x = args[0].astype(np.float64)
    scale = np.broadcast_to(np.asarray(args[1], np.float64), x.shape)
    if (scale <= 0).any():
        raise NotDenseChain(f"{node.where}: a scale that is not positive")
    q = np.where(x >= 0, 1.0, -1.0)
    grids[node.outputs[0]] = Grid(q, scale, -1, 1, node.where)
    return q * scale


def _c_quantize_linear(node, args, grids, pending):
    _no_grid(node, grids, pending)
    x = args[0].astype(np.float64)
    scale, lo, hi = linear_params(node, args, x.ndim)
    q = np.clip(np.round(x / scale), lo, hi)          # ONNX rounds half to even
    pending[node.outputs[0]] = (q, np.broadcast_to(scale, x.shape), lo, hi, node.where)
    return q


def _c_clip(node, args, grids, pending):
    if node.inputs[0] not in pending:
        _no_grid(node, grids, pending)
        lo, hi = _clip_bounds(node, args)
        return np.clip(args[0], lo, hi)
    q, scale, lo, hi, where = pending[node.inputs[0]]
    clo, chi = _clip_bounds(node, args)
    lo, hi = max(lo, int(np.ceil(clo))), min(hi, int(np.floor(chi)))
    q = np.clip(q, lo, hi)
    pending[node.outputs[0]] = (q, scale, lo, hi, where)
    return q


def _clip_bounds(node: Node, args: dict[int, np.ndarray]) -> tuple[float, float]:
    lo = float(args[1]) if 1 in args else float(node.attrs.get("min", -np.inf))
    hi = float(args[2]) if 2 in args else float(node.attrs.get("max", np.inf))
    return lo, hi


def _c_dequantize_linear(node, args, grids, pending):
    q = args[0].astype(np.float64)
    scale, lo, hi = linear_params(node, args, q.ndim)
    if node.inputs[0] in pending:
        q, qscale, lo, hi, _ = pending[node.inputs[0]]
        if not np.array_equal(np.broadcast_to(scale, q.shape), qscale):
            raise NotDenseChain(f"{node.where}: dequantises with another scale than its QuantizeLinear")
    else:
        _no_grid(node, grids, pending)
        lo, hi = int(q.min()), int(q.max())     # stored integers: their own range
        if hi <= lo:
            lo, hi = min(lo, -1), max(hi, 1)
    scale = np.broadcast_to(scale, q.shape)
    grids[node.outputs[0]] = Grid(q, scale, lo, hi, node.where)
    return q * scale


def _c_identity(node, args, grids, pending):
    if node.inputs[0] in grids:
        grids[node.outputs[0]] = grids[node.inputs[0]]
    elif node.inputs[0] in pending:
        pending[node.outputs[0]] = pending[node.inputs[0]]
    return args[0]


def _c_transpose(node, args, grids, pending):
    perm = node.attrs.get("perm")
    if node.inputs[0] in pending:
        _no_grid(node, grids, pending)
    g = grids.get(node.inputs[0])
    if g is not None:
        if args[0].ndim != 2 or (perm is not None and tuple(perm) != (1, 0)):
            raise NotDenseChain(f"{node.where}: only a 2-D transpose may follow a weight's quantiser")
        grids[node.outputs[0]] = g.transposed()
    return np.transpose(args[0], perm)


def _c_reshape(node, args, grids, pending):
    _no_grid(node, grids, pending)
    shape = [int(d) for d in np.asarray(args[1]).reshape(-1)]
    shape = [args[0].shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return args[0].reshape(shape)


def _c_cast(node, args, grids, pending):
    _no_grid(node, grids, pending)
    return args[0].astype(np.float64) if args[0].dtype.kind == "f" else args[0]


_CONSTANT_OPS = {"Quant": _c_quant, "IntQuant": _c_quant, "BipolarQuant": _c_bipolar,
                 "QuantizeLinear": _c_quantize_linear, "DequantizeLinear": _c_dequantize_linear, "Clip": _c_clip,
                 "Identity": _c_identity, "Transpose": _c_transpose, "Reshape": _c_reshape, "Cast": _c_cast}
