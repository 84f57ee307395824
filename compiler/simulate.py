"""Simulation: load a design's inputs, run it from start to done, read its outputs back.

Back ends share one contract: memories are loaded by poking them (no port cycles, no data
compiled into the design), `start` is raised for one cycle, and `cycles` counts clock cycles
from that start cycle to the cycle in which `done` is high.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from amaranth.hdl import ClockDomain, Module, Signal
from amaranth.sim import Simulator

from . import dtypes as dt
from .design import Design
from .errors import CompileError


@dataclass(frozen=True)
class SimResult:
    outputs: list[np.ndarray]             # in the order the outputs were given to compile_model
    cycles: int
    backend: str
    seconds: float = 0.0                  # wall time of the run itself (no build)
    build_seconds: float = 0.0
    buffers: dict[int, np.ndarray] = field(default_factory=dict)   # every model buffer, flat


def input_words(design: Design, inputs: dict | None, only_given: bool = False) -> dict[int, np.ndarray]:
    """Graph buffer id -> words to load, from the inputs' numpy data and any overrides
    (`only_given`: the overrides alone)."""
    graph = design.graph
    given: dict[int, np.ndarray] = {}
    for key, array in (inputs or {}).items():
        buf = _buffer_of(design, key)
        b = graph.buffers[buf]
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
        words[buf] = dt.to_words(data, b.dtype)
    return words


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


def poke_inputs(ctx, design: Design, words: dict[int, np.ndarray]) -> None:
    """Load buffers' words (input_words) into every memory bank holding them, in its layout
    (an Amaranth simulator testbench's `ctx`)."""
    for buf, w in words.items():
        for ref, bank in design.memory_words(buf, w):
            for _, start, mem in design.memory_parts(ref):
                part = bank[start:start + mem.depth].tolist()
                if mem.shape.width == ref.width:
                    for i, v in enumerate(part):
                        ctx.set(mem[i], v)
                    continue
                keep = ~(((1 << ref.width) - 1) << ref.offset)     # a bank packed with others
                for i, v in enumerate(part):
                    ctx.set(mem[i], (ctx.get(mem[i]) & keep) | (v << ref.offset))


def peek_buffers(ctx, design: Design) -> tuple[list[np.ndarray], dict[int, np.ndarray]]:
    """(outputs, every host buffer) as the memories hold them now (outputs_from)."""
    def read(hb):
        banks = [[(ctx.get(mem[i]) >> ref.offset) & ((1 << ref.width) - 1)
                  for _, _, mem in design.memory_parts(ref) for i in range(mem.depth)]
                 for ref in design.home_memories(hb.id)]
        return design.buffer_words(hb.id, banks)
    return outputs_from(design, read)


@dataclass(frozen=True)
class Harness:
    """A design under a simulation-only module: a free-running cycle counter beside it, and
    its `sync` domain made explicit so that a testbench can drive the reset (`domain.rst`)."""
    design: Design
    module: Module
    count: Signal
    domain: ClockDomain

    @classmethod
    def of(cls, design: Design) -> "Harness":
        m = Module()
        m.domains.sync = domain = ClockDomain()
        m.submodules.top = design.top
        count = Signal(64)
        m.d.sync += count.eq(count + 1)
        return cls(design, m, count, domain)

    async def run(self, ctx) -> int:
        """Raise `start` for one cycle and wait for `done`: the cycles from start to done."""
        top = self.design.top
        ctx.set(top.start, 1)
        start = ctx.get(self.count)
        await ctx.tick()
        ctx.set(top.start, 0)
        (done,) = await ctx.tick().sample(self.count).until(top.done)
        return done - start

    def simulate(self, testbench) -> None:
        """Run an async `testbench(ctx)` against the design, clocked, to its end."""
        sim = Simulator(self.module)
        sim.add_clock(1e-8)
        sim.add_testbench(testbench)
        sim.run()


def run_pysim(design: Design, inputs: dict | None = None) -> SimResult:
    import time
    words = input_words(design, inputs)
    harness = Harness.of(design)
    result: dict = {}

    async def bench(ctx):
        poke_inputs(ctx, design, words)
        t0 = time.perf_counter()
        result["cycles"] = await harness.run(ctx)
        result["seconds"] = time.perf_counter() - t0
        result["outputs"], result["buffers"] = peek_buffers(ctx, design)

    harness.simulate(bench)
    return SimResult(result["outputs"], result["cycles"], "pysim", result["seconds"], 0.0, result["buffers"])
