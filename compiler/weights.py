"""Which of a model's inputs weights="constant" builds into the hardware (HardwareConfig.weights).

An input is a *constant* when it holds data at compile time (a Tensor made from numpy: trained
weights, a model's own constants, seeded data) and is not one of the inputs given at run time
(compile_model's `stream`; by default the inputs without data). A kernel built with
weights="constant" has its constant inputs bound as ROMs (compiler/passes/constants.py); the
host bus never sees them, and a simulation cannot set them: the design is compiled for them.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from . import dtypes as dt
from . import ir
from .config import HardwareConfig
from .errors import CompileError
from .frontend import Graph
from .passes.constants import bind_constants
from .sim.memory_io import check_bounds


def runtime_buffers(graph: Graph, streamed: frozenset[int] | None) -> frozenset[int]:
    """The graph buffer ids of the run-time inputs: the streamed ones (compile_model's `stream`),
    or with none given every input without data at compile time."""
    if streamed is None:
        return frozenset(b for b in graph.inputs if graph.buffers[b].data is None)
    return frozenset(streamed)


def constant_words(graph: Graph, runtime: frozenset[int]) -> dict[int, np.ndarray]:
    """Graph buffer id -> unsigned element words of every input built in under weights="constant"."""
    return {b: dt.to_words(graph.buffers[b].data, graph.buffers[b].dtype) for b in graph.inputs
            if b not in runtime and graph.buffers[b].data is not None and graph.buffers[b].data.size}


def bind_weights(graph: Graph, sources: Sequence[ir.KernelIR], config: HardwareConfig,
                 streamed: frozenset[int] | None) -> list[ir.KernelIR]:
    """`sources` (the lowered kernels, in graph order) with the constant inputs of every kernel
    built with weights="constant" bound as ROMs. A CompileError when constants are asked for
    and the model (or a layer that asks for them by name) has none."""
    layers = [config.for_layer(i) for i in range(len(sources))]
    if all(c.weights == "memory" for c in layers):
        return list(sources)
    runtime = runtime_buffers(graph, streamed)
    words = constant_words(graph, runtime)
    explicit = {i for i, settings in config.layers for knob, _ in settings if knob == "weights"}
    out, bound = [], False
    for i, (k, c) in enumerate(zip(sources, layers)):
        if c.weights != "constant":
            out.append(k)
            continue
        slots = {b.slot: words[graph.kernels[i].buffers[b.slot]] for b in k.buffers
                 if graph.kernels[i].buffers[b.slot] in words and b.loaded and not b.stored}
        for b in k.buffers:                  # a ROM stores its declared range's bits: its words must fit
            if b.slot in slots and b.bounds is not None:
                buf = graph.kernels[i].buffers[b.slot]
                check_bounds(graph.buffers[buf].data, buf, b.bounds, graph.buffers[buf].dtype)
        if not slots and i in explicit:
            raise CompileError(f"weights@{i}: constant weights for layer {i} ({k.name}), but it reads no input known "
                               f"at compile time (its inputs are given at run time); use weights@{i}: memory")
        bound = bound or bool(slots)
        out.append(bind_constants(k, slots) if slots else k)
    if not bound:
        given = ", ".join(f"buffer {b} ({graph.buffers[b].dtype}[{graph.buffers[b].size}])" for b in sorted(runtime))
        raise CompileError("weights='constant' needs weights known at compile time, but every input of this model "
                           f"is given at run time ({given or 'no inputs'}): compile it with its weights as data "
                           "(Tensors made from arrays), or use weights='memory'")
    return out


def constant_buffers(graph: Graph, sources: Sequence[ir.KernelIR]) -> frozenset[int]:
    """Graph buffer ids that some kernel holds as a ROM (for simulators, exports and checks)."""
    return frozenset(graph.kernels[i].buffers[b.slot] for i, k in enumerate(sources) for b in k.buffers
                     if b.rom is not None)
