"""tinygrad models -> bit-exact Amaranth hardware.

    design = compile_model(y, config=HardwareConfig(mem_read="sync"))
    result = simulate(design)            # result.outputs, result.cycles

The pipeline (compile_model) is a straight list of passes:
    trace       tinygrad output Tensors -> ordered kernels with buffer identities (frontend.py)
    lower       each kernel's flat UOp list -> typed KernelIR                     (lower.py)
    semantics   fp_semantics="tinygrad": floats round where tinygrad's PYTHON device rounds
                (fused multiply-adds; fp16 in float32, rounded at its stores)
                                                                  (passes/float_semantics.py)
    bound       the declared input ranges carried through the model: every integer buffer and
                accumulator gets the bounds of what it can hold, which size its memory, the
                values computed from it and its register                          (bounds.py)
    bind        weights="constant": inputs with data at compile time become ROMs (weights.py)
    parallelize lanes / reduce_unroll: unroll-and-jam of the innermost output loops, adder
                trees for the innermost reductions, memories banked by layout     (transform.py)
    fold        weights="constant": ROM loads at constant addresses become constants, integer
                arithmetic on them is evaluated, bound-1 loops and accumulators dissolve
                                                                                  (passes/constants.py)
    fuse_loops  loop_fusion: initialisation and result stores folded into the first and last
                iterations of the loop nest next to them                         (transform.py)
    interleave  fp_pipeline: a fused float sum visits several output rows in turn, so its
                pipelined adder's accumulators form a ring                       (transform.py)
    split_deep  fp_pipeline: memories deeper than a block RAM split into parts, read through
                a registered multiplexer tree                                    (transform.py)
    merge       weights="constant": straight-line layers merged into one kernel, their
                intermediate activations wires                                   (passes/chain.py)
    legalize    every op and dtype checked against what the hardware can build, and the
                pipeline schedule (fp_pipeline) checked for hazards      (hw/datapath.py, hw/pipeline.py)
    build       KernelIR -> memories + datapath + controller per kernel, and a top
                module that runs them as a DAG with copies between them          (hw/)
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from . import ir
from .bounds import bound_values, declared_bounds
from .config import HardwareConfig
from .design import Design, build_design
from .errors import CompileError, UnsupportedError
from .export import ExportedDesign, export_design
from .frontend import trace
from .hw.datapath import check_supported
from .hw.pipeline import schedule
from .lower import lower
from .memo import HeldMemo
from .sim.memory_io import SimResult
from .timing_model import target_period
from .passes.float_semantics import as_tinygrad_computes
from .passes.fuse import fuse_loops
from .passes.indices import balance_indices
from .passes.interleave import interleave, interleave_ways
from .passes.max_reset import move_max_resets
from .passes.parallelize import most_factors, parallelize
from .passes.split_deep import split_deep
from .passes.split_sums import split_at_sums
from .passes.adder_graph import Options as GraphOptions
from .passes.constants import fold_constants, rom_slots
from .passes.chain import Stage, merge_chains
from .weights import bind_weights, constant_words, runtime_buffers

__all__ = ["HardwareConfig", "compile_model", "trace_model", "compile_traced", "Traced", "layer_names", "layer_limits", "layer_inputs", "constant_inputs", "simulate", "simulate_many", "export_design", "Design", "SimResult",
           "ExportedDesign", "CompileError", "UnsupportedError"]


def compile_model(*outputs, config: HardwareConfig | None = None, stream=None, input_ranges=None) -> Design:
    """Compile the computation of `outputs` (tinygrad Tensors) into hardware. `stream`: the input
    Tensor(s) that change from sample to sample, the data; the other inputs are weights. With
    schedule=dataflow the data's memories rotate through banks and the weights are loaded once
    (None: every input streams); with weights="constant" the weights holding data at compile
    time are built into the logic (compiler/weights.py; None: the inputs without data stream).

    `input_ranges`: {input Tensor (or model buffer id): (lo, hi)}, the values an integer input
    may hold, when fewer than its dtype's (4-bit weights in an int8 Tensor: (-8, 7)). The
    hardware is sized to them (compiler/bounds.py), and simulating or exporting with an input
    outside its range is refused (a weight built in with weights="constant": when compiled).

    The same as compile_traced(trace_model(*outputs, stream=..., input_ranges=...), config)."""
    return compile_traced(trace_model(*outputs, stream=stream, input_ranges=input_ranges), config)


@dataclass(frozen=True)
class Traced:
    """A model traced and lowered (tinygrad's schedule -> KernelIR), before any hardware knob
    applies: what every `compile_traced` of it, one per HardwareConfig, starts from. Tracing
    is most of compiling a model whose hardware the knobs only fold (a 16-64-32-32-5 MLP: 1.2 s
    of 1.3 s); a sweep compiles one trace for all its knob settings (dse.evaluate)."""
    graph: object                            # compiler.frontend.Graph
    lowered: tuple                           # the kernels as lowered, in the graph's order
    shapes: tuple[tuple[int, ...], ...]      # the outputs'
    bounds: object                           # declared_bounds of the input ranges
    streamed: frozenset[int] | None


def trace_model(*outputs, stream=None, input_ranges=None) -> Traced:
    """Trace and lower `outputs` (compile_model's arguments) once, for compile_traced."""
    shapes = tuple(tuple(int(d) for d in t.shape) for t in outputs)
    graph = trace(*outputs)
    lowered = tuple(_dump("lower", [lower(k) for k in graph.kernels]))
    return Traced(graph, lowered, shapes, declared_bounds(graph, input_ranges), _streamed(graph, stream))


def compile_traced(traced: Traced, config: HardwareConfig | None = None) -> Design:
    """The hardware of a traced model for `config` (compile_model's passes after tracing)."""
    config = config or HardwareConfig()
    if not isinstance(config, HardwareConfig):
        raise TypeError(f"config must be a HardwareConfig, got {type(config).__name__}")
    graph, shapes = traced.graph, traced.shapes
    sources = _bounded(traced, config.fp_semantics)
    if config.fold == "auto" and config.layers:
        given = ", ".join(f"{k}@{i}" for i, st in config.layers for k, _ in st)
        raise CompileError(f"fold=auto chooses every layer's lanes and reduce_unroll; drop the per-layer settings ({given})")
    try:
        config = config.resolve_layers([k.name for k in sources])
    except ValueError as e:
        raise CompileError(str(e)) from None
    check_layer_factors(config, sources)
    if config.fold == "auto":
        from .fold import fold_auto
        from .hw.dataflow import weight_slots
        buffers = [[(b.slot, graph.kernels[i].buffers[b.slot], b.loaded, b.stored) for b in k.buffers]
                   for i, k in enumerate(sources)]
        weights = frozenset() if traced.streamed is None else frozenset(graph.inputs) - traced.streamed
        fixed = [weight_slots(bs, weights) for bs in buffers]
        config = fold_auto(sources, config, buffers, frozenset(graph.outputs), fixed).config
    layer = [config.for_layer(i) for i in range(len(sources))]
    streamed = traced.streamed
    sources = _bound_weights(traced, sources, config, layer)
    if config.target_mhz is not None and interleave_ways(config.fp_pipeline) > 1:
        graph, sources, layer = split_at_sums(graph, sources, layer)     # float sums a later loop reads
    adders = GraphOptions(config.adder_graph, config.adder_depth)
    passes = [(_layer_passes.__wrapped__ if _dumping() else _layer_passes)(
        k, c.lanes, c.reduce_unroll, c.fp_sum, adders, config.loop_fusion, config.fp_pipeline,
        target_period(config)) for k, c in zip(sources, layer)]
    stages = [Stage(c, s, p.kernel, p.banking, p.factors) for c, s, p in zip(graph.kernels, sources, passes)]
    graph, stages = merge_chains(graph, stages, [c.weights == "constant" and bool(rom_slots(s))
                                                 for c, s in zip(layer, sources)])
    kernels = _dump("merge_chains", [s.kernel for s in stages])
    for k in kernels:
        check_supported(k, config)
        schedule(k, config)                  # raises on a pipeline hazard
    return build_design(graph, sources=[s.source for s in stages], kernels=kernels, config=config,
                        output_shapes=shapes, banking=[s.banking for s in stages], factors=[s.factors for s in stages],
                        streamed=streamed)


@dataclass(frozen=True)
class _LayerPasses:
    kernel: ir.KernelIR              # after split_deep
    banking: dict                    # slot -> Banking (parallelize's, split_deep's parts)
    factors: dict                    # loop id -> lanes it was unrolled into (parallelize's)


@ir.per_kernel
def _layer_passes(kernel: ir.KernelIR, lanes: int, reduce_unroll: int, fp_sum: str, adders: GraphOptions,
                  loop_fusion: bool, fp_pipeline: int, target: tuple | None = None) -> _LayerPasses:
    """One layer's passes from parallelize to balance_indices: a function of its kernel and these
    knobs alone, remembered (ir.per_kernel), so a sweep builds a layer once for all the points
    that build it alike (a 16-64-32-32-5 MLP's 72 knob settings of one format hold 6 variants
    of its first layer)."""
    p = parallelize(kernel, lanes, reduce_unroll, fp_sum=fp_sum)
    k = _dump1("parallelize", p.kernel)
    k = _dump1("fold_constants", fold_constants(k, adders) if rom_slots(k) else k)
    k = _dump1("fuse_loops", fuse_loops(k) if loop_fusion else k)
    k = _dump1("interleave", interleave(k, fp_pipeline, target=target))
    k, banking = split_deep(k, p.banking, fp_pipeline)
    k = _dump1("move_max_resets", move_max_resets(_dump1("split_deep", k)))
    k = _dump1("balance_indices", balance_indices(k))
    return _LayerPasses(k, banking, p.factors)     # not p.kernel: megabytes when constant


_TRACE_MEMO = HeldMemo(16)


def _per_trace(kind: str, traced: Traced, key: tuple, make):
    """`make()` remembered for `traced` (by identity) and `key`: the kernels every compile of a
    trace starts from, the same objects each time, so that what is derived from them is
    remembered (ir.per_kernel). A few traces at a time: a sweep takes its points one model build
    at a time (dse.study.order)."""
    if _dumping():
        return make()
    return _TRACE_MEMO.get((traced,), (kind, key), make)


def _bounded(traced: Traced, fp_semantics: str) -> list[ir.KernelIR]:
    """The traced kernels with tinygrad's float semantics (if asked) and their bounds."""
    def make():
        sources = list(traced.lowered)
        if fp_semantics == "tinygrad":
            sources = _dump("float_semantics", [as_tinygrad_computes(k) for k in sources])
        return tuple(_dump("bound", bound_values(traced.graph, sources, traced.bounds)))
    return list(_per_trace("bound", traced, (fp_semantics,), make))


def _bound_weights(traced: Traced, sources: list[ir.KernelIR], config: HardwareConfig,
                   layer: list[HardwareConfig]) -> list[ir.KernelIR]:
    """`sources` with each constant-weight layer's weights bound as ROMs (weights.py)."""
    explicit = tuple(i for i, settings in config.layers for knob, _ in settings if knob == "weights")
    return list(_per_trace("weights", traced, (config.fp_semantics, tuple(c.weights for c in layer), explicit),
                           lambda: tuple(bind_weights(traced.graph, sources, config, traced.streamed))))


def check_layer_factors(config: HardwareConfig, kernels: list) -> None:
    """A layer's own lanes or reduce_unroll (`lanes@1: 64`) larger than the layer: a CompileError
    saying how much it takes (a model-wide value is clamped to each layer instead)."""
    for index, settings in config.layers:
        most = dict(zip(("lanes", "reduce_unroll"), most_factors(kernels[index])))
        for knob, value in settings:
            if knob in most and value > most[knob]:
                what = (f"its output loop has {most[knob]} iteration{'s' * (most[knob] != 1)}" if knob == "lanes" else
                        f"its reduction has {most[knob]} term{'s' * (most[knob] != 1)}")
                raise CompileError(f"{knob}@{index}={value} does not fit layer {index} ({kernels[index].name}): {what}; "
                                   f"use {knob}@{index} from 1 to {most[knob]} ({most[knob]}: the whole layer in one step)")


def layer_limits(*outputs) -> list[tuple[str, int, int]]:
    """(name, most lanes, most reduce_unroll) of each layer compile_model would build for
    `outputs` (parallelize.most_factors). Traces the model (see layer_names)."""
    return [(k.name, *most_factors(lower(k))) for k in trace(*outputs).kernels]


def constant_inputs(*outputs, stream=None) -> int:
    """How many inputs of the model weights="constant" would build in for `outputs` with
    `stream` (compile_model's): those holding data at compile time, not streamed, and read by a
    kernel. Traces the model (see layer_names)."""
    graph = trace(*outputs)
    read = {b for k in graph.kernels for b in k.buffers}
    return len(set(constant_words(graph, runtime_buffers(graph, _streamed(graph, stream)))) & read)


def _streamed(graph, stream) -> frozenset[int] | None:
    if stream is None:
        return None
    tensors = stream if isinstance(stream, (list, tuple)) else [stream]
    out = set()
    for t in tensors:
        uop = getattr(getattr(t, "uop", None), "buf_uop", None)
        buf = graph.buffer_id(uop) if uop is not None else None
        if buf is None or buf not in graph.inputs:
            raise CompileError(f"stream: {t!r} is not an input of this model")
        out.add(buf)
    return frozenset(out)


def layer_inputs(*outputs, inputs) -> list[tuple[int, ...]]:
    """For each layer (kernel) compile_model would build for `outputs`, the positions in
    `inputs` (the model's input Tensors) of those it reads: which layer holds which weights.
    Traces the model (see layer_names)."""
    graph = trace(*outputs)
    ids = [graph.buffer_id(getattr(getattr(t, "uop", None), "buf_uop", None)) for t in inputs]
    return [tuple(i for i, b in enumerate(ids) if b is not None and b in k.buffers) for k in graph.kernels]


def layer_names(*outputs) -> list[str]:
    """The names of the layers (kernels) compile_model would build for `outputs`, in order; the
    names per-layer knobs accept (`lanes@k1_r_10_32`). Traces the model without compiling it
    (tinygrad's schedule mutates the Tensors it is given: compile fresh ones afterwards)."""
    return [k.name for k in trace(*outputs).kernels]


def _dumping() -> bool:
    return bool(os.environ.get("TINYHW_DUMP_IR"))


def _dump1(after: str, kernel: ir.KernelIR) -> ir.KernelIR:
    _dump(after, [kernel])
    return kernel


def _dump(after: str, kernels: list):
    """With TINYHW_DUMP_IR=1, print every kernel's IR after a pass to stderr (ir.pretty): where a
    pass broke a kernel shows in the listing before the next one."""
    if os.environ.get("TINYHW_DUMP_IR"):
        for k in kernels:
            print(f"--- after {after}\n{ir.pretty(k)}", file=sys.stderr)
    return kernels


def simulate(design: Design, inputs: dict | None = None, backend: str = "pysim") -> SimResult:
    """Run `design` once: load inputs (numpy data captured at compile time unless overridden
    by `inputs`, a dict of input Tensor -> array), start, wait for done, read outputs."""
    if backend == "pysim":
        from .sim.pysim import run_pysim
        return run_pysim(design, inputs)
    if backend == "cxxrtl":                   # C++ via Yosys write_cxxrtl + g++, cached per design
        from .sim.cxxrtl import run_cxxrtl
        return run_cxxrtl(design, inputs)
    raise ValueError(f"unknown simulation backend {backend!r}; available: 'pysim', 'cxxrtl'")


def simulate_many(design: Design, samples, inputs: dict | None = None, backend: str = "cxxrtl") -> list[SimResult]:
    """Run `design` once per sample (a dict like `inputs`, loaded over `inputs`), each run from
    a fresh start. With CXXRTL one process of the design's one binary runs them all; results
    hold the outputs (not the intermediate buffers)."""
    samples = list(samples)
    if backend == "cxxrtl":
        from .sim.cxxrtl import run_cxxrtl_many
        return run_cxxrtl_many(design, samples, inputs)
    if backend == "pysim":
        from .sim.pysim import run_pysim, run_pysim_stream
        if design.flow is not None:           # streamed back to back, as with CXXRTL
            return run_pysim_stream(design, samples, inputs)
        return [run_pysim(design, {**(inputs or {}), **s}) for s in samples]
    raise ValueError(f"unknown simulation backend {backend!r}; available: 'pysim', 'cxxrtl'")
