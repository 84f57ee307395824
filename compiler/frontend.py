"""Front end: tinygrad output Tensors -> an ordered graph of kernels, without running anything.

tinygrad 0.14's `linear_with_vars` gives a LINEAR of CALLs. A CALL whose first source is a
kernel AST (`SINK`) is a kernel; one whose first source is a `COPY` moves host (numpy) data
onto the device, which makes its destination an *external input*. BUFFER UOps are
hash-consed, so the same object in two CALLs is the same buffer: that is how producer ->
consumer edges are found. Each kernel is then lowered by tinygrad's own codegen to a flat,
loop-only UOp list (every loop a RANGE; no threads, vectors or local memory).
"""
from __future__ import annotations

import os

os.environ.setdefault("DEV", "PYTHON")   # the only tinygrad device that needs no compiler here

from dataclasses import dataclass, replace

import numpy as np
from tinygrad import Tensor
from tinygrad.codegen import full_rewrite_to_sink, line_rewrite, pm_linearize_cleanups
from tinygrad.codegen.late.linearizer import linearize
from tinygrad.device import Device
from tinygrad.dtype import dtypes, strong_dtype
from tinygrad.helpers import Context, DEV, Target
from tinygrad.renderer import Renderer
from tinygrad.uop.ops import GroupOp, Ops, UOp

from . import dtypes as dt
from .errors import CompileError, UnsupportedError

if not DEV.device:          # tinygrad was imported before us with no DEV set
    DEV.value = "PYTHON"


class HardwareRenderer(Renderer):
    """Makes tinygrad keep every loop a RANGE: no SPECIAL/gidx, no vectors, no locals.

    `code_for_op` is the set of ops our datapath implements natively; for ops outside it
    tinygrad substitutes its own decompositions (exp2 -> polynomial, ...). Renderer output is
    never used: we read the linearized UOp list.
    """
    has_local = has_shared = has_threads = supports_float4 = False
    global_max = local_max = global_prod_max = None
    tensor_cores = []
    code_for_op = {op: (lambda *args: "") for op in (
        Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.WHERE,
        Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.CDIV, Ops.CMOD,
        # float units (compiler/fp): with FDIV claimed, tinygrad turns x.reciprocal() into
        # 1 / x and a * (1 / b) into a / b, one correctly rounded division as on its CPU
        # back ends. EXP2, LOG2 and SIN stay unclaimed: tinygrad's polynomials (docs/float-units.md).
        Ops.FDIV, Ops.SQRT, Ops.TRUNC)}


# tinygrad's compile cache keys on the renderer type and its Target, not on code_for_op: the
# op set goes into the Target, so a cache entry lowered for another op set is never reused.
RENDERER = HardwareRenderer(Target("HW", arch="ops-" + "-".join(sorted(o.name.lower() for o in HardwareRenderer.code_for_op))))


@dataclass(frozen=True)
class GraphBuffer:
    id: int
    dtype: dt.DType
    size: int
    uop: UOp                       # the tinygrad BUFFER (hash-consed identity)
    data: np.ndarray | None        # host data for external inputs that came from numpy


@dataclass(frozen=True)
class KernelCall:
    index: int
    name: str
    uops: tuple[UOp, ...]          # the flat, loop-only lowered list
    buffers: tuple[int, ...]       # graph buffer id of each parameter slot


@dataclass(frozen=True)
class Graph:
    kernels: tuple[KernelCall, ...]
    buffers: tuple[GraphBuffer, ...]
    inputs: tuple[int, ...]        # external buffers (no kernel writes them)
    outputs: tuple[int, ...]       # in the order the output tensors were given

    def buffer_id(self, uop: UOp) -> int | None:
        for b in self.buffers:
            if b.uop is uop:
                return b.id
        return None


def lower_kernel(ast: UOp) -> tuple[str, list[UOp]]:
    """A kernel AST -> its name and tinygrad's linearized, loop-only UOp list (no optimisation)."""
    ast = ast.replace(arg=replace(ast.arg, opts_to_apply=()))
    sink = full_rewrite_to_sink(ast, RENDERER, optimize=True)
    return sink.arg.function_name, line_rewrite(linearize(sink), pm_linearize_cleanups)


_NO_TYPE = "no hardware element type (supported: " + ", ".join(d.name for d in dt.ALL) + ")"


def _tg_name(tg_dtype) -> str:
    return getattr(getattr(tg_dtype, "base", tg_dtype), "name", str(tg_dtype))


def _host_data(buf: UOp, dtype: dt.DType) -> np.ndarray | None:
    b = buf.buffer
    if not b.is_allocated():
        return None
    raw = np.frombuffer(bytes(b.as_memoryview()), dtype=dtype.numpy if dtype.name != "bf16" else np.uint16)
    return raw.copy()


# Scheduling rewrites the output Tensors in place (their uops become the output BUFFERs), so
# a second compile of the same Tensors (another HardwareConfig, say) would find nothing left
# to compute. Remember each traced graph by its output Tensors' uops, before and after.
_traced: dict[tuple[UOp, ...], "Graph"] = {}


def trace(*outputs: Tensor) -> Graph:
    """Schedule the computation of `outputs` into kernels and lower each one."""
    if not outputs:
        raise CompileError("compile_model needs at least one output Tensor")
    for i, t in enumerate(outputs):
        if not isinstance(t, Tensor):
            raise CompileError(f"output {i}: expected a tinygrad Tensor, got {type(t).__name__}")
    before = tuple(t.uop for t in outputs)
    if before in _traced:
        return _traced[before]
    graph = _trace(tuple(stored_output(t) for t in outputs))
    # scheduling rewrote the Tensors (a computed output's uop is now its buffer): both name it
    _traced[before] = _traced[tuple(t.uop for t in outputs)] = graph
    return graph


def stored_output(t: Tensor) -> Tensor:
    """`t` as the Tensor to schedule, so that its buffer holds it in row-major element order.

    tinygrad realizes a view of a computation (`(x + 1).T`, a flip, a slice, cat) as the
    buffer it is a view of and keeps the view in the Tensor: that buffer's storage order is
    not the output's element order. `contiguous()` on such a view makes tinygrad store
    through the view, fused into the producing kernel. Only views get it: on a computed
    output it would stop tinygrad from sharing that output's buffer with other outputs that
    use it (they would recompute it). An output that computes nothing (an input, or a view of
    one) gets a copy kernel; constants only (`arange`) get a device and a kernel, else
    tinygrad folds them away. Weak dtypes (`one_hot`, a float clamp of ints) are stored as
    tinygrad's `numpy()` stores them: as the default int or float. Should scheduling still
    leave an output as a view, `_trace` fails saying so.
    """
    if t.device is None:                    # constants only: no device to store them on
        d = strong_dtype(t.dtype)
        t = t.cast(d) + Tensor.zeros(t.shape, dtype=d, device=Device.DEFAULT)
    if t.dtype in dtypes.weaks:
        t = t.cast(strong_dtype(t.dtype))
    if _is_data(t.uop):
        # contiguous() of an input unchanged is the input; a trailing unit axis is a movement
        # tinygrad copies, and a reshape of the copy is free
        return t.reshape(*t.shape, 1).contiguous().reshape(t.shape)
    if t.uop.op in GroupOp.Movement or not any(u.op in (Ops.BUFFER, Ops.COPY) for u in t.uop.toposort()):
        t = t.contiguous()
    return t


def _is_data(u: UOp) -> bool:
    """Whether `u` computes nothing: data (a buffer, a host copy), seen through views."""
    while u.op in GroupOp.Movement or u.op in (Ops.CONTIGUOUS, Ops.AFTER):
        u = u.src[0]
    return u.op in (Ops.BUFFER, Ops.COPY)


def _contiguous_buffer(u: UOp) -> UOp | None:
    """The buffer a scheduled output Tensor's uop reads in storage order (reshapes only), or None."""
    while u.op is Ops.RESHAPE:
        u = u.src[0]
    while u.op is Ops.AFTER:
        u = u.src[0]
    return u if u.op is Ops.BUFFER else None


def _schedule(outputs: list[Tensor]) -> list[UOp]:
    """The CALLs that compute `outputs`, in order."""
    # NO_MEMORY_PLANNER keeps every intermediate its own BUFFER (else they become views of one
    # arena and producer/consumer identity is lost).
    with Context(NO_MEMORY_PLANNER=1):
        linear, var_vals = outputs[0].linear_with_vars(*outputs[1:])
    if var_vals:
        raise CompileError(f"symbolic shapes are not supported (variables {sorted(map(str, var_vals))})")
    return list(linear.src)


def _trace(outputs: tuple[Tensor, ...]) -> Graph:
    for i, t in enumerate(outputs):
        if t.numel() == 0:
            raise CompileError(f"output {i} has shape {t.shape}: no elements, nothing for the hardware to compute")
    ids: dict[UOp, int] = {}
    buffers: list[GraphBuffer] = []
    written: set[int] = set()
    copied: dict[int, np.ndarray | None] = {}

    def buffer(u: UOp, data: np.ndarray | None = None) -> int:
        if u.op is not Ops.BUFFER:
            raise CompileError(f"expected a BUFFER among a kernel's arguments, got {u.op}")
        if u not in ids:
            d = dt.from_tinygrad(u.dtype)
            if d is None:
                raise UnsupportedError("kernel arguments", "BUFFER", _tg_name(u.dtype), _NO_TYPE)
            ids[u] = len(buffers)
            buffers.append(GraphBuffer(len(buffers), d, int(u.buffer.size), u, data))
        return ids[u]

    kernels: list[KernelCall] = []
    for call in _schedule(outputs):
        body = call.src[0]
        if body.op is Ops.COPY:
            dst, src = call.src[1], call.src[2]
            if src.op is Ops.BUFFER and src in ids:
                raise UnsupportedError("host input copy", "COPY", _tg_name(dst.dtype),
                                       "device-to-device copies between kernels")
            d = dt.from_tinygrad(dst.dtype)
            if d is None:
                raise UnsupportedError("host input copy", "COPY", _tg_name(dst.dtype), _NO_TYPE)
            copied[buffer(dst, _host_data(src, d))] = None
            continue
        if body.op is not Ops.SINK:
            raise UnsupportedError("schedule", str(body.op), "-", "only kernels and host copies can be scheduled")
        name, uops = lower_kernel(body)
        name = f"k{len(kernels)}_{name}"      # tinygrad names repeat for kernels of one shape
        slots = tuple(buffer(b) for b in call.src[1:])
        for u in uops:
            if u.op is Ops.STORE:
                root = u.src[0]
                while root.op not in (Ops.PARAM, Ops.BUFFER) and root.src:
                    root = root.src[0]
                if root.op is Ops.PARAM:
                    written.add(slots[root.arg.slot])
        kernels.append(KernelCall(len(kernels), name, tuple(uops), slots))

    # buffers never written by a kernel are external inputs; those that had no COPY may
    # still carry data (a realized Tensor)
    for b in list(buffers):
        if b.id not in written and b.data is None and b.id not in copied:
            buffers[b.id] = replace(b, data=_host_data(b.uop, b.dtype))
    inputs = tuple(b.id for b in buffers if b.id not in written)
    out_ids = []
    for i, t in enumerate(outputs):
        u = _contiguous_buffer(t.uop)
        if u not in ids or ids[u] not in written:
            raise CompileError(f"output {i} (shape {t.shape}, {_tg_name(t.dtype)}) is not stored contiguously by "
                               f"any kernel (tinygrad left it as {t.uop.op}); nothing for the hardware to compute")
        out_ids.append(ids[u])
    return Graph(tuple(kernels), tuple(buffers), inputs, tuple(out_ids))
