"""Amaranth's Python simulator as a back end: poke a design's inputs into its memories, run it
from start to done, read its outputs back (the contract: compiler/sim/memory_io.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from amaranth.hdl import ClockDomain, Module, Signal
from amaranth.sim import Simulator

from ..design import Design
from .memory_io import SimResult, input_words, outputs_from, streamed_words


def poke_inputs(ctx, design: Design, words: dict[int, np.ndarray]) -> None:
    """Load buffers' words (input_words) into every memory bank holding them, in its layout
    (an Amaranth simulator testbench's `ctx`)."""
    for buf, w in words.items():
        for ref, bank in design.memory_words(buf, w):
            poke_bank(ctx, design, ref, bank)


def poke_bank(ctx, design: Design, ref, bank: np.ndarray) -> None:
    """Load one bank's words (a `design.memory_words` pair) into the memories that hold it."""
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
        return run_pysim_stream(design, [{}], inputs)[0]
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


def _bank_memories(design: Design, ref, bank: int):
    """(MemoryData, first word, its address, words) of the memories holding ring bank `bank`
    of `ref` (a plain memory's own parts when `ref` is no ring)."""
    hw = design.top.kernels[ref.kernel]
    if ref.slot in hw.ring_memories:
        ring = design.ring_bank(ref, bank)
        return [(hw.ring_memories[ref.slot][bank], 0, ring.first, ref.depth)]
    return [(mem, start, 0, mem.depth) for _, start, mem in design.memory_parts(ref)]


def run_pysim_stream(design: Design, samples: list[dict], inputs: dict | None = None) -> list[SimResult]:
    """A dataflow design (hw/dataflow.py) fed `samples` back to back, as the CXXRTL back end's
    run_cxxrtl_stream (same results): the weights poked once, each sample's streamed inputs into
    its ring banks a beat before its first beat, beats run with `start` held high, each sample's
    outputs read from their banks as the beat that completes them is done."""
    import time
    flow = design.flow
    assert flow is not None
    words, own = streamed_words(design, inputs, samples)
    outputs = [hb for hb in design.host_buffers.values() if hb.id in set(design.graph.outputs)]
    beats = len(samples) + flow.depth - 1
    harness = Harness.of(design)
    top = design.top
    got: list[tuple[list, dict, int]] = []
    done_at: list[int] = []

    def poke_sample(ctx, n: int) -> None:
        for buf in flow.streamed:
            if buf not in design.host_buffers:
                continue
            for ref, bank in design.memory_words(buf, own[n].get(buf, words.get(buf))):
                for mem, start, first, count in _bank_memories(design, ref, flow.bank_for_sample((ref.kernel, ref.slot), n, output=False)):
                    for i, v in enumerate(bank[start:start + count].tolist()):
                        ctx.set(mem[first + i], v)

    def read_sample(ctx, n: int):
        def read(hb):
            banks = []
            for ref in design.home_memories(hb.id):
                b = flow.bank_for_sample((ref.kernel, ref.slot), n, output=True)
                banks.append([ctx.get(mem[first + i]) for mem, _, first, count in _bank_memories(design, ref, b)
                              for i in range(count)])
            return design.buffer_words(hb.id, banks)
        return outputs_from(design, read, [hb.id for hb in outputs])

    async def bench(ctx):
        poke_inputs(ctx, design, {b: w for b, w in words.items() if b not in flow.streamed})
        # a sample goes into its banks a beat ahead: poked in the cycle a beat starts in, a word
        # the kernel reads in that cycle would be read as it was (pysim settles the read first)
        for n in range(min(2, len(samples))):
            poke_sample(ctx, n)
        ctx.set(top.start, 1)
        first = ctx.get(harness.count)
        t0 = time.perf_counter()
        for t in range(beats):
            (now,) = await ctx.tick().sample(harness.count).until(top.done)
            done_at.append(now - first)
            n = t - flow.depth + 1
            if n >= 0:
                got.append((*read_sample(ctx, n), n))
            if t + 2 < len(samples):
                poke_sample(ctx, t + 2)
            if t + 1 == beats:
                ctx.set(top.start, 0)
        got.append(time.perf_counter() - t0)

    harness.simulate(bench)
    seconds = got.pop()
    results = []
    for outs, buffers, n in got:
        t = n + flow.depth - 1
        start = done_at[n - 1] if n > 0 else 0
        interval = done_at[t] - (done_at[t - 1] if t > 0 else 0)
        results.append(SimResult(outs, int(done_at[t] - start), "pysim", seconds / max(1, len(samples)), 0.0,
                                 buffers, interval=int(interval)))
    return results
