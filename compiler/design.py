"""Design: the compiled hardware of a model, with everything needed to drive and check it."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from . import ir
from .config import HardwareConfig
from .frontend import Graph
from .hw.kernel import KernelHW
from .hw.program import Program, build_program
from .hw.top import Copy, HostBuffer, Run, TopHW, plan


@dataclass(frozen=True)
class CycleModel:
    """Analytic cycle count from the step programs and the phase list (no simulation)."""
    total: int
    kernels: tuple[tuple[str, int], ...]     # (kernel name, cycles including its done cycle)
    copies: int                              # cycles spent copying buffers between kernels


@dataclass(eq=False)
class Design:
    """A compiled model. The Amaranth top module is built on first use of `top`, so analyses
    (cycle model, overflow) need no hardware objects."""
    graph: Graph
    kernels: tuple[ir.KernelIR, ...]         # in execution order
    config: HardwareConfig
    phases: tuple[Run | Copy, ...]           # kernel runs and copies, in order
    host: tuple[HostBuffer, ...]             # where each model buffer lives
    output_shapes: tuple[tuple[int, ...], ...]
    # the kernels as lowered, before the hardware transforms (same order and slots): what
    # analyses of the computation itself (the overflow proof) read
    source_kernels: tuple[ir.KernelIR, ...] = ()

    @cached_property
    def top(self) -> TopHW:
        return TopHW([KernelHW(k, self.config) for k in self.kernels], list(self.phases), list(self.host))

    @property
    def host_buffers(self) -> dict[int, HostBuffer]:
        return {b.id: b for b in self.host}

    @property
    def cycles_formula(self) -> int:
        """Cycles from start to done predicted from the step programs (see hw/top.py)."""
        return self.cycle_model().total

    @cached_property
    def programs(self) -> tuple[Program, ...]:
        return tuple(build_program(k) for k in self.kernels)

    def cycle_model(self) -> CycleModel:
        kernels = tuple((self.kernels[p.kernel].name, self.programs[p.kernel].cycles + 1)   # + done
                        for p in self.phases if isinstance(p, Run))
        copies = sum(p.length for p in self.phases if isinstance(p, Copy))
        return CycleModel(sum(c for _, c in kernels) + copies, kernels, copies)

    def buffer_of(self, tensor) -> int:
        """The model buffer id of an input or output Tensor of this design."""
        uop = getattr(getattr(tensor, "uop", None), "buf_uop", None)
        buf = self.graph.buffer_id(uop) if uop is not None else None
        if buf is None:
            raise KeyError(f"{tensor!r} is not a buffer of this design")
        return buf

    def memory(self, kernel_pos: int, slot: int):
        """The MemoryData (contents) of a kernel's buffer, for simulators to poke and peek."""
        return self.top.kernels[kernel_pos].memories[slot]

    def name(self) -> str:
        return "+".join(k.name for k in self.kernels)


def build_design(graph: Graph, sources: list[ir.KernelIR], kernels: list[ir.KernelIR], config: HardwareConfig,
                 output_shapes: tuple[tuple[int, ...], ...]) -> Design:
    """`sources`: the lowered kernels; `kernels`: the same after the hardware transforms."""
    kernel_buffers = [[(b.slot, graph.kernels[i].buffers[b.slot], b.loaded, b.stored) for b in k.buffers]
                      for i, k in enumerate(kernels)]
    sizes = {b.id: b.size for b in graph.buffers}
    widths = {b.id: b.dtype.bits for b in graph.buffers}
    order, phases, host = plan(kernel_buffers, sizes, widths, [k.name for k in kernels])
    return Design(graph, tuple(kernels[i] for i in order), config, tuple(phases), tuple(host), output_shapes,
                  tuple(sources[i] for i in order))
