"""What a simulation loads and returns, whichever back end runs it: the words of a design's
inputs, the outputs read back from its memories, and `SimResult`.

Back ends share one contract: memories are loaded by poking them (no port cycles, no data
compiled into the design), `start` is raised for one cycle, and `cycles` counts clock cycles
from that start cycle to the cycle in which `done` is high.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import dtypes as dt
from ..design import Design
from ..errors import CompileError


@dataclass(frozen=True)
class SimResult:
    outputs: list[np.ndarray]             # in the order the outputs were given to compile_model
    cycles: int
    backend: str
    seconds: float = 0.0                  # wall time of the run itself (no build)
    build_seconds: float = 0.0
    buffers: dict[int, np.ndarray] = field(default_factory=dict)   # every model buffer, flat
    # schedule=dataflow, streamed: cycles from the previous sample's outputs to this one's (the
    # steady-state interval from the second sample on); None for a run of its own
    interval: int | None = None


def input_words(design: Design, inputs: dict | None, only_given: bool = False) -> dict[int, np.ndarray]:
    """Graph buffer id -> words to load, from the inputs' numpy data and any overrides
    (`only_given`: the overrides alone)."""
    graph = design.graph
    given: dict[int, np.ndarray] = {}
    for key, array in (inputs or {}).items():
        buf = _buffer_of(design, key)
        b = graph.buffers[buf]
        if buf in design.constants:
            raise CompileError(f"input buffer {buf} ({b.dtype}[{b.size}]) is built into the design (weights='constant'): "
                               "compile the model again with the new data to change it")
        a = np.asarray(array)
        if a.size != b.size:
            raise CompileError(f"input for buffer {buf} has {a.size} elements, the model needs {b.size}")
        given[buf] = a
    words: dict[int, np.ndarray] = {}
    for buf in graph.inputs:
        b = graph.buffers[buf]
        if buf not in design.host_buffers:
            continue                              # an input no kernel reads
        if only_given and buf not in given:
            continue
        data = given.get(buf, b.data)
        if data is None:
            raise CompileError(f"input buffer {buf} ({b.dtype}[{b.size}]) has no data: pass it in `inputs`")
        if buf in design.input_bounds:
            check_bounds(data, buf, design.input_bounds[buf], b.dtype)
        words[buf] = dt.to_words(data, b.dtype)
    return words


def streamed_words(design: Design, inputs: dict | None, samples: list[dict]) -> tuple[dict, list[dict]]:
    """A dataflow run's words: every input's (input_words) and each sample's own, which may set
    only the streamed inputs (compile_model's `stream`): the others are loaded once."""
    words = input_words(design, inputs)
    own = [input_words(design, s, only_given=True) for s in samples]
    for o in own:
        extra = sorted(set(o) - design.flow.streamed)
        if extra:
            raise ValueError(f"input buffer(s) {extra} are not streamed (compile_model(stream=...)): "
                             "they cannot change from sample to sample")
    return words, own


def check_bounds(data, buf: int, bounds: tuple[int, int], dtype: dt.DType) -> None:
    """CompileError naming the first element of `data` outside the declared range of input
    buffer `buf`: the hardware stores and computes with that range's bits, so such a value
    would not be what the model computes (it is never wrapped)."""
    a = np.asarray(data).reshape(-1)
    if dtype.is_int and not np.issubdtype(a.dtype, np.integer):
        ints = a.astype(np.int64)
        if not np.array_equal(ints, a):
            raise CompileError(f"input buffer {buf} ({dtype.name}): element {int(np.argmax(ints != a))} is "
                               f"{a[int(np.argmax(ints != a))]!r}, not an integer")
        a = ints
    lo, hi = bounds
    bad = np.flatnonzero((a < lo) | (a > hi))
    if bad.size:
        raise CompileError(f"input buffer {buf} ({dtype.name}): element {int(bad[0])} is {int(a[bad[0]])}, outside "
                           f"its declared range [{lo}, {hi}] ({bad.size} element{'s' * (bad.size != 1)} outside)")


def _buffer_of(design: Design, key) -> int:
    if isinstance(key, int):
        return key
    try:
        buf = design.buffer_of(key)
    except KeyError:
        raise CompileError(f"{key!r} is not an input of this design") from None
    if buf not in design.graph.inputs:
        raise CompileError(f"buffer {buf} is computed by a kernel; only external inputs can be set")
    return buf


def outputs_from(design: Design, read_words, ids=None) -> tuple[list[np.ndarray], dict[int, np.ndarray]]:
    """`read_words(host_buffer) -> uint64 words`; returns the output arrays and the buffers
    read: all of them, or those with the given `ids` (which must include the outputs)."""
    buffers = {}
    for hb in design.host_buffers.values():
        if ids is not None and hb.id not in ids:
            continue
        buffers[hb.id] = dt.from_words(read_words(hb), design.graph.buffers[hb.id].dtype)
    outs = [buffers[o].reshape(shape) for o, shape in zip(design.graph.outputs, design.output_shapes)]
    return outs, buffers
