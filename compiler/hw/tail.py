"""A memory whose last words live in LUT RAM (the mem_tail="lut" knob, bram.lut_tail).

Two Amaranth memories stand for one: `<name>` holds words [0, split) and maps to block RAM,
`<name>_tail` holds words [split, depth) and carries `ram_style = "distributed"`, which
Yosys's memory_libmap reads as "LUT RAM". The ports look like one memory's (`addr`, `data`,
`en`), so the kernel drives them as it drives any memory:

  * a write goes to the part its address falls in (each part's enable is gated by it);
  * a read addresses both parts; which part answers is decided by the address, registered
    with the data for a synchronous port, so the data arrives in the cycle it would from one
    memory. Transparency (a read seeing the same cycle's write) holds part by part.

Simulators poke each part by name (Design.memory_parts).
"""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import memory

from .datapath import DATA

TAIL_ATTRS = {"ram_style": "distributed"}


def _addr_shape(depth: int):
    return unsigned(max(1, (depth - 1).bit_length()))


class _Port:
    """The port of the pair, as the kernel sees it: the whole memory's address and data
    (and, for the write port, its enables)."""

    def __init__(self, depth: int, width: int, name: str, enables: int = 0):
        self.addr = Signal(_addr_shape(depth), name=f"{name}_addr")
        self.data = Signal(width, name=f"{name}_data")
        if enables:
            self.en = Signal(enables, name=f"{name}_en")


def tailed_memory(m: Module, name: str, main: memory.MemoryData, tail: memory.MemoryData, *,
                  granularity: int | None, reads: int, domain: str, transparent: bool, attrs: dict):
    """Add the two parts of memory `name` to `m`; return (write port, [read ports]), each an
    object with `addr`, `data` (and `en` for the write port) as one memory's ports have.
    `attrs` go on both parts (kernel.NO_RW_CHECK)."""
    split, depth, width = main.depth, main.depth + tail.depth, main.shape.width
    lo, hi = memory.Memory(data=main, attrs=attrs), memory.Memory(data=tail, attrs={**attrs, **TAIL_ATTRS})
    m.submodules[name] = lo
    m.submodules[f"{name}_tail"] = hi
    enables = 1 if granularity is None else width // granularity
    wp = _Port(depth, width, f"{name}_w", enables)
    lo_w, hi_w = lo.write_port(granularity=granularity), hi.write_port(granularity=granularity)
    in_tail = wp.addr >= split
    m.d.comb += [lo_w.data.eq(wp.data), lo_w.en.eq(Mux(in_tail, 0, wp.en)),
                 hi_w.data.eq(wp.data), hi_w.en.eq(Mux(in_tail, wp.en, 0))]
    _split_address(m, wp.addr, in_tail, split, lo_w, hi_w)
    ports = []
    for p in range(reads):
        rp = _Port(depth, width, f"{name}_r{p}")
        lo_r = lo.read_port(domain=domain, transparent_for=(lo_w,) if transparent else ())
        hi_r = hi.read_port(domain=domain, transparent_for=(hi_w,) if transparent else ())
        in_tail = rp.addr >= split
        _split_address(m, rp.addr, in_tail, split, lo_r, hi_r)
        if domain == "comb":
            m.d.comb += rp.data.eq(Mux(in_tail, hi_r.data, lo_r.data))
        else:
            from_tail = Signal(name=f"{name}_r{p}_tail", reset_less=True, attrs=DATA)      # selects data
            m.d.sync += from_tail.eq(in_tail)
            m.d.comb += rp.data.eq(Mux(from_tail, hi_r.data, lo_r.data))
        ports.append(rp)
    return wp, ports


def _split_address(m: Module, addr, in_tail, split: int, lo, hi) -> None:
    """Each part's address, 0 while the other part is addressed: a part whose depth is not a
    power of two would otherwise see addresses past its end (CXXRTL stops on such a read;
    in hardware its data is not selected anyway, and the gate is one AND per address bit)."""
    m.d.comb += [lo.addr.eq(Mux(in_tail, 0, addr)), hi.addr.eq(Mux(in_tail, addr - split, 0))]
