"""Amaranth's Python simulator as a back end: poke a design's inputs into its memories, run it
from start to done, read its outputs back (the contract: compiler/sim/memory_io.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from amaranth.hdl import ClockDomain, Module, Signal
from amaranth.sim import Simulator

from ..design import Design
from .memory_io import SimResult, input_words, outputs_from


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
    if design.flow is not None:
        from ..errors import CompileError
        raise CompileError(f"{design.name()} is a schedule=dataflow design: it streams samples through "
                           "beats, which the CXXRTL back end drives (backend='cxxrtl'); pysim runs "
                           "sequential designs only")
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
