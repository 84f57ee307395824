"""The top module: several kernels run as a dependency DAG, with copies between them.

Kernels run one at a time in a topological order of their producer -> consumer edges. After
a kernel finishes, each of its output buffers that later kernels read is copied in one pass
that broadcasts every word to all consumers at once (fan-out costs no extra cycles).

Host bus: `host_sel` names a buffer of the model (its index in the graph), `host_addr`
an element; `host_we` writes `host_wdata` to every memory that holds that buffer, and
`host_rdata` returns the word one cycle later (block RAM) from the memory that holds the
buffer's final value. The bus only acts while the top is idle. Keeping every memory
readable from the top is also what keeps Yosys from optimising the datapath away.

Timing (start cycle to done cycle):
    cycles = sum over kernels of (steps + 1) + sum over copies of the buffer's length
"""
from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..errors import CompileError
from .kernel import KernelHW, port_names


@dataclass(frozen=True)
class Run:
    kernel: int                                  # position in Top.kernels


@dataclass(frozen=True)
class Copy:
    src: tuple[int, int]                         # (kernel position, slot)
    dsts: tuple[tuple[int, int], ...]
    length: int


@dataclass(frozen=True)
class HostBuffer:
    """Where a model buffer lives in hardware."""
    id: int
    holders: tuple[tuple[int, int], ...]         # every (kernel position, slot) holding it
    home: tuple[int, int]                        # where its final value is read from
    width: int
    size: int


def toposort_kernels(n: int, edges: set[tuple[int, int]], names: list[str] | None = None) -> list[int]:
    """Kahn's algorithm; ties keep tinygrad's order. A cycle is a clear CompileError."""
    indeg = [0] * n
    succ: dict[int, list[int]] = {i: [] for i in range(n)}
    for a, b in sorted(edges):
        if a != b:
            succ[a].append(b)
            indeg[b] += 1
    ready = sorted(i for i in range(n) if indeg[i] == 0)
    order: list[int] = []
    while ready:
        k = ready.pop(0)
        order.append(k)
        for s in succ[k]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
                ready.sort()
    if len(order) != n:
        stuck = [names[i] if names else str(i) for i in range(n) if i not in order]
        raise CompileError(f"kernel dependency graph has a cycle through: {', '.join(stuck)}")
    return order


class TopHW(wiring.Component):
    def __init__(self, kernels: list[KernelHW], phases: list[Run | Copy], buffers: list[HostBuffer]):
        self.kernels, self.phases, self.buffers = kernels, phases, buffers
        addr_bits = max(1, max((b.size - 1).bit_length() for b in buffers))
        data_bits = max(b.width for b in buffers)
        super().__init__({
            "start": In(1), "done": Out(1), "busy": Out(1),
            "host_sel": In(range(max(2, max(b.id for b in buffers) + 1))), "host_addr": In(addr_bits),
            "host_wdata": In(data_bits), "host_we": In(1), "host_rdata": Out(data_bits),
        })

    def elaborate(self, platform):
        m = Module()
        for i, k in enumerate(self.kernels):
            m.submodules[f"k{i}"] = k
        n = len(self.phases)
        idle = n
        phase = Signal(range(n + 1), init=idle)
        nphase = Signal.like(phase)
        longest = max([p.length for p in self.phases if isinstance(p, Copy)], default=1)
        cctr = Signal(range(longest))
        ncctr = Signal.like(cctr)
        sync_reads = self.kernels[0].config.mem_read == "sync"

        def port(kslot, name):
            k, slot = kslot
            return getattr(self.kernels[k], port_names(slot)[name])

        # ---- sequencing
        m.d.comb += [nphase.eq(phase), ncctr.eq(cctr)]
        with m.Switch(phase):
            with m.Case(idle):
                with m.If(self.start):
                    m.d.comb += nphase.eq(0)
            for p, ph in enumerate(self.phases):
                following = p + 1 if p + 1 < n else idle
                with m.Case(p):
                    if isinstance(ph, Run):
                        with m.If(self.kernels[ph.kernel].done):
                            m.d.comb += nphase.eq(following)
                            if following == idle:
                                m.d.comb += self.done.eq(1)
                    else:
                        with m.If(cctr == ph.length - 1):
                            m.d.comb += [nphase.eq(following), ncctr.eq(0)]
                        with m.Else():
                            m.d.comb += ncctr.eq(cctr + 1)
        m.d.sync += [phase.eq(nphase), cctr.eq(ncctr)]
        m.d.comb += self.busy.eq(phase != idle)
        for p, ph in enumerate(self.phases):
            if isinstance(ph, Run):
                m.d.comb += self.kernels[ph.kernel].start.eq((nphase == p) & (phase != p))

        # ---- host bus (while idle)
        host_idle = (phase == idle) & (nphase == idle)
        for b in self.buffers:
            selected = self.host_sel == b.id
            in_range = self.host_addr < b.size
            for h in b.holders:
                m.d.comb += [port(h, "waddr").eq(Mux(in_range, self.host_addr, 0)),
                             port(h, "wdata").eq(self.host_wdata),
                             port(h, "we").eq(self.host_we & selected & in_range & host_idle)]
            m.d.comb += port(b.home, "raddr").eq(Mux(selected & in_range, self.host_addr, 0))
        rsel = Signal.like(self.host_sel)
        m.d.sync += rsel.eq(self.host_sel)       # block RAM data arrives a cycle after its address
        read_sel = rsel if sync_reads else self.host_sel
        with m.Switch(read_sel):
            for b in self.buffers:
                with m.Case(b.id):
                    m.d.comb += self.host_rdata.eq(port(b.home, "rdata"))

        # ---- copies: the source is addressed one cycle ahead with block RAM
        for p, ph in enumerate(self.phases):
            if not isinstance(ph, Copy):
                continue
            with m.If((nphase if sync_reads else phase) == p):
                m.d.comb += port(ph.src, "raddr").eq(ncctr if sync_reads else cctr)
            with m.If(phase == p):
                for d in ph.dsts:
                    m.d.comb += [port(d, "waddr").eq(cctr), port(d, "wdata").eq(port(ph.src, "rdata")),
                                 port(d, "we").eq(1)]
        return m


def plan(kernel_buffers: list[list[tuple[int, int, bool, bool]]], sizes: dict[int, int],
         widths: dict[int, int], names: list[str]):
    """From each kernel's (slot, buffer id, loaded, stored) list: the run order (positions in
    the input), the phases, and where each buffer lives."""
    writers: dict[int, list[tuple[int, int]]] = {}
    readers: dict[int, list[tuple[int, int]]] = {}
    for k, slots in enumerate(kernel_buffers):
        for slot, buf, loaded, stored in slots:
            if stored:
                writers.setdefault(buf, []).append((k, slot))
            elif loaded:
                readers.setdefault(buf, []).append((k, slot))
    for buf, ws in writers.items():
        if len(ws) > 1:
            raise CompileError(f"buffer {buf} is written by several kernels "
                               f"({', '.join(names[k] for k, _ in ws)}): not supported")
    edges = {(writers[b][0][0], r[0]) for b in readers if b in writers for r in readers[b]}
    order = toposort_kernels(len(kernel_buffers), edges, names)
    pos = {k: i for i, k in enumerate(order)}
    phases: list[Run | Copy] = []
    for k in order:
        phases.append(Run(pos[k]))
        for slot, buf, _, stored in kernel_buffers[k]:
            if stored and buf in readers:
                dsts = tuple((pos[r], s) for r, s in readers[buf])
                phases.append(Copy((pos[k], slot), dsts, sizes[buf]))
    host: list[HostBuffer] = []
    for buf in sorted(set(writers) | set(readers)):
        holders = [(pos[k], s) for k, s in writers.get(buf, []) + readers.get(buf, [])]
        home = holders[0]
        host.append(HostBuffer(buf, tuple(holders), home, widths[buf], sizes[buf]))
    return order, phases, host
