"""The top module: several kernels run as a dependency DAG, with copies between them.

Kernels run one at a time in a topological order of their producer -> consumer edges. After
a kernel finishes, each of its output buffers that later kernels read is copied in one pass
that broadcasts to all consumers at once (fan-out costs no extra cycles). A buffer lives in
each kernel in that kernel's layout (compiler/hw/layout.py: one memory bank per lane). When the
producer and every consumer use the same layout, the copy moves one word of every bank per
cycle; otherwise it moves a group of W consecutive elements per cycle, as many as sit in
distinct lanes of one word in every layout (layout.group_width: a 12-lane producer into a
3-way reduction moves 3; 1 where a side is plain), walking each layout's digits of the groups
with odometers (no division in hardware). With share_buffers, a consumer that uses the producer's
layout and needs one read port per bank reads the producer's memory instead (no copy); for
an external input, later readers may read the first reader's memory the same way.

Host bus: `host_sel` picks a *host port*, one memory bank (Design.host_ports): every bank
of every memory that holds an external input (writable) and every bank that holds a model
output's final value (readable). `host_addr` is a word of that bank, `host_we` writes
`host_wdata`, and `host_rdata` returns the word one cycle later (block RAM); after a cycle
that writes, it is undefined (synthesis lets a block RAM answer a read of the word being
written either way: kernel.NO_RW_CHECK). From fp_pipeline 3 (FANOUT_LEVEL) the bus is
registered at both ends: a write lands a cycle later and a read takes 4 cycles
(`TopHW.host_read_latency`). Software places elements with
the layout (Design.memory_words). The bus only acts while the top is idle. Reading the
outputs from the top is what keeps Yosys from optimising the datapath away.

Timing (start cycle to done cycle):
    cycles = sum over kernels of (steps + 1) + sum over copies of their length
    (the buffer's elements / W, or its words per bank when every layout agrees), + 1 a copy
    with target_mhz (its read data registered: registers_copy_data)
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import reduce

from amaranth.hdl import Array, Const, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..errors import CompileError
from .layout import Banking, Layout, group_width
from .bram import HOST_GROUP, ecp5_memory
from .datapath import DUPLICATE_ATTRIBUTE, Copies, mul_const, registered
from .kernel import KernelHW, port_names
from .pipeline import FANOUT_LEVEL

COPY_BANKS = 1
"""Source banks a sequential copy's registered read enable and word serve (TopHW._copy_read_ahead)."""


def registers_copy_data(config) -> bool:
    """Whether a sequential copy registers each source bank's read data before it writes it
    (TopHW._copy): with target_mhz and clocked reads. Such a copy phase lasts a cycle more than
    its length (`copy_cycles`)."""
    return bool(config.target_mhz) and config.mem_read == "sync"


def copy_cycles(ph: "Copy", config) -> int:
    """Cycles a copy phase of the sequential top lasts: its length, and one more where it
    registers its read data (registers_copy_data)."""
    return ph.length + int(registers_copy_data(config))


Place = tuple[int, int]                          # (kernel position, parameter slot)


@dataclass(frozen=True)
class Run:
    kernel: int                                  # position in Top.kernels


@dataclass(frozen=True)
class Copy:
    src: Place
    dsts: tuple[Place, ...]
    length: int                                  # cycles
    by_words: bool = True                        # every side has the same layout: all banks at once
    width: int = 1                               # else: consecutive elements a cycle (group_width)

    @staticmethod
    def between(src: Place, dsts: tuple[Place, ...], layouts: list[Layout]) -> "Copy":
        """The copy of a buffer from `src` to `dsts`, `layouts` the source's then each
        destination's: word by word where they all agree, else a group of consecutive elements
        a cycle, as many as sit in distinct lanes of every side (layout.group_width; one where a
        side is plain: a copy from a 12-lane layer into a 3-way reduction moves 3)."""
        if all(lay == layouts[0] for lay in layouts):
            return Copy(src, dsts, layouts[0].words)
        width = group_width(layouts)
        return Copy(src, dsts, layouts[0].size // width, False, width)


@dataclass(frozen=True)
class Share:
    """`reader` reads the memory of `owner` (same layout) instead of holding its own."""
    reader: Place
    owner: Place


@dataclass(frozen=True)
class HostBuffer:
    """Where a model buffer lives in hardware."""
    id: int
    holders: tuple[Place, ...]                   # every (kernel position, slot) with a memory holding it
    home: Place                                  # where its final value is read from
    width: int
    size: int


@dataclass(frozen=True)
class HostPort:
    """One memory bank on the host bus (`host_sel` = its position in the list)."""
    buffer: int
    kernel: int
    slot: int                                    # the bank's buffer slot in the kernel hardware
    depth: int
    width: int                                   # bits of its elements (a narrow buffer's: Design.narrow_buffers)
    write: bool
    read: bool
    sign_extend: bool = False                    # elements narrower than their dtype in two's complement:
                                                 # a reader sign-extends them (else zero-extends)

    @property
    def block_rams(self) -> int:
        """The ECP5 block RAMs its bank takes (1 for LUT RAM): the bus's address and data copies
        each serve HOST_GROUP of them (a copy for 8 banks of 4 block RAMs drove 32 across the
        die: the int8 GEMV 128x784 4x4's critical path at target_mhz 200, 5.8 ns of routing)."""
        place = ecp5_memory(self.depth, self.width)
        return place.cells if place.kind == "bram" else 1


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


class Odometer:
    """The digits of one layout for an element index that counts up by one per cycle: each
    digit as (word part, lane part), so word and lane need no division."""

    def __init__(self, m: Module, layout: Layout, name: str, advance, restart,
                 preset: tuple[Value, int] | None = None, init: int = 0):
        """Digits at 0 after `restart` (None: never), else at element `preset[1]`'s after
        `preset[0]`, else one element on after `advance`; at element `init`'s after a reset."""
        self.layout = layout
        dims = layout.dims

        def split(e: int) -> list[tuple[int, int]]:     # element e's digits as (word part, lane part)
            return [(v // d.factor, v % d.factor) for v, d in zip(layout.digits(e), dims)]
        start = split(init)
        self.q = [Signal(range(d.words), name=f"{name}_q{j}", init=start[j][0]) for j, d in enumerate(dims)]
        self.r = [Signal(range(d.factor), name=f"{name}_r{j}", init=start[j][1]) if d.factor > 1 else None
                  for j, d in enumerate(dims)]
        self.nq = [Signal.like(s, name=f"{s.name}_next") for s in self.q]
        self.nr = [None if s is None else Signal.like(s, name=f"{s.name}_next") for s in self.r]
        regs = [(a, b) for a, b in zip(self.q + self.r, self.nq + self.nr) if a is not None]
        m.d.comb += [n.eq(c) for c, n in regs]
        with m.If(Const(0, 1) if restart is None else restart):
            m.d.comb += [n.eq(0) for _, n in regs]
        if preset is not None:
            with m.Elif(preset[0]):
                for (q, r), nq, nr in zip(split(preset[1]), self.nq, self.nr):
                    m.d.comb += nq.eq(q)
                    if nr is not None:
                        m.d.comb += nr.eq(r)
        with m.Elif(advance):
            carry = Const(1, 1)                  # every less significant digit is at its last value
            for j in reversed(range(len(dims))):
                d = dims[j]
                q, r, nq, nr = self.q[j], self.r[j], self.nq[j], self.nr[j]
                top_q, top_r = (d.extent - 1) // d.factor, (d.extent - 1) % d.factor
                at_end = (q == top_q) if r is None else ((q == top_q) & (r == top_r))
                with m.If(carry):
                    with m.If(at_end):
                        m.d.comb += nq.eq(0)
                        if r is not None:
                            m.d.comb += nr.eq(0)
                    with m.Else():
                        if r is None:
                            m.d.comb += nq.eq(q + 1)
                        else:
                            with m.If(r == d.factor - 1):
                                m.d.comb += [nq.eq(q + 1), nr.eq(0)]
                            with m.Else():
                                m.d.comb += nr.eq(r + 1)
                carry = carry & at_end
        m.d.sync += [c.eq(n) for c, n in regs]

    def word(self, nxt: bool):
        qs = self.nq if nxt else self.q
        terms = [q if s == 1 else mul_const(q, s) for q, s in zip(qs, self.layout.word_strides) if s]
        out = terms[0]
        for t in terms[1:]:
            out = out + t
        return out

    def lane(self):
        terms = [r if s == 1 else mul_const(r, s)
                 for r, s in zip(self.r, self.layout.lane_strides) if r is not None]
        if not terms:
            return Const(0, 1)
        out = terms[0]
        for t in terms[1:]:
            out = out + t
        return out


class TopHW(wiring.Component):
    def __init__(self, kernels: list[KernelHW], phases: list[Run | Copy], buffers: list[HostBuffer],
                 banking: dict[Place, Banking], shares: list[Share], host_ports: list[HostPort]):
        self.kernels, self.phases, self.buffers = kernels, phases, buffers
        self.banking, self.shares, self.host_ports = banking, shares, host_ports
        super().__init__(self.members(host_ports))

    @staticmethod
    def members(host_ports: list[HostPort]) -> dict:
        """The top's ports (its signature's members)."""
        ports = host_ports or [HostPort(-1, 0, 0, 1, 1, False, False)]
        addr_bits = max(1, max((p.depth - 1).bit_length() for p in ports))
        data_bits = max(p.width for p in ports)
        return {
            "start": In(1), "done": Out(1), "busy": Out(1),
            "host_sel": In(range(max(2, len(ports)))), "host_addr": In(addr_bits),
            "host_wdata": In(data_bits), "host_we": In(1), "host_rdata": Out(data_bits),
        }

    @property
    def host_read_latency(self) -> int:
        """Cycles from a host read address to its word on host_rdata: 1 (block RAM, or a
        combinational read), 4 from FANOUT_LEVEL (address, data and the OR of the banks'
        data registered: see elaborate; 3 there with combinational reads), 5 with block RAMs
        at a target clock (`_host_data_registered`)."""
        config = self.kernels[0].config
        return max(1, 3 * (config.fp_pipeline >= FANOUT_LEVEL) + (config.mem_read == "sync")
                   + self._host_data_registered)

    @property
    def _host_data_registered(self) -> bool:
        """Whether each memory's read data for the host passes a register of its own before the
        selection (from FANOUT_LEVEL, block RAM reads, target_mhz): that register is the block
        RAM's output register, whose clock-to-out is 1.0 ns where the block's own is 5.6 (a
        padded convolution at target_mhz 150 had the block -> the selection's register as its
        critical path, 8.5 ns of which 5.8 clock-to-out). A cycle more on every host read, so
        only where a bank the host reads is a block RAM: a LUT RAM's read needs no such
        register, which would only add flip-flops to place."""
        config = self.kernels[0].config
        return config.fp_pipeline >= FANOUT_LEVEL and config.mem_read == "sync" and bool(config.target_mhz) \
            and any(hp.read and ecp5_memory(hp.depth, hp.width).kind == "bram" for hp in self.host_ports)

    def port(self, kernel: int, slot: int, name: str):
        return getattr(self.kernels[kernel], port_names(slot)[name])

    def copy_port(self, kernel: int, slot: int, name: str):
        """What a copy's write drives for port `name` (waddr, wdata, we) of a destination bank:
        the port itself here; the dataflow top lands them a cycle later (DataflowTopHW)."""
        return self.port(kernel, slot, name)

    def _ends(self, p: int, ahead: int, cctr: Signal) -> Value | None:
        """Whether phase p, the phase now, has its last cycle `ahead` cycles from now: a kernel
        run's `done`, `done_next` or `done_next2` (None where the kernel has no such signal), a
        copy's counter."""
        ph = self.phases[p]
        if isinstance(ph, Run):
            names = ("done", "done_next", "done_next2")
            k = self.kernels[ph.kernel]
            return getattr(k, names[ahead]) if ahead < len(names) and hasattr(k, names[ahead]) else None
        at = copy_cycles(ph, self.kernels[0].config) - 1 - ahead   # its counter now, if it ends `ahead` cycles on
        return cctr == at if at >= 0 else Const(0)

    def _idle_in(self, phase: Signal, cctr: Signal, idle: int, ahead: int) -> Value | None:
        """Whether the phase is idle `ahead` (>= 2) cycles from now, if `start` stays low from
        next cycle on (with 2: what `nphase == idle` will say next cycle); None where a kernel
        cannot tell its end that far ahead. Phase p, the phase now, must end within
        `ahead - 1` cycles less the lengths of the phases after it (a run lasts its kernel's
        cycles, from the cycle after its start to its done; the sequence is fixed)."""
        n = len(self.phases)
        config = self.kernels[0].config
        lengths = [self.kernels[ph.kernel].cycles if isinstance(ph, Run) else copy_cycles(ph, config)
                   for ph in self.phases]
        soon: Value = (phase == idle) & ~self.start
        if sum(lengths) <= ahead - 1:                # started now, over by then
            soon = soon | ((phase == idle) & self.start)
        for p in range(n):
            within = ahead - 1 - sum(lengths[p + 1:])
            if within < 0:
                continue
            ends = [self._ends(p, j, cctr) for j in range(within + 1)]
            if any(e is None for e in ends):
                return None
            soon = soon | ((phase == p) & reduce(operator.or_, ends))
        return soon

    def elaborate(self, platform):
        m = Module()
        for i, k in enumerate(self.kernels):
            m.submodules[f"k{i}"] = k
        n = len(self.phases)
        idle = n
        phase = Signal(range(n + 1), init=idle)
        nphase = Signal.like(phase)
        config = self.kernels[0].config
        longest = max([copy_cycles(p, config) for p in self.phases if isinstance(p, Copy)], default=1)
        cctr = Signal(range(longest))
        ncctr = Signal.like(cctr)
        sync_reads = self.kernels[0].config.mem_read == "sync"
        reading = nphase if sync_reads else phase          # the phase read addresses are for

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
                        with m.If(cctr == copy_cycles(ph, config) - 1):
                            m.d.comb += [nphase.eq(following), ncctr.eq(0)]
                        with m.Else():
                            m.d.comb += ncctr.eq(cctr + 1)
        m.d.sync += [phase.eq(nphase), cctr.eq(ncctr)]
        m.d.comb += self.busy.eq(phase != idle)
        # a run starts as the phase before it ends (the sequence is fixed), not from `nphase`,
        # which every phase's end feeds (the sequential digits CNN at 4 lanes and target_mhz 200:
        # a copy's counter through `nphase` to the first kernel's step, 7.9 ns, 5.9 routing)
        for p, ph in enumerate(self.phases):
            if isinstance(ph, Run):
                begins = (phase == idle) & self.start if p == 0 else (phase == p - 1) & self._ends(p - 1, 0, cctr)
                m.d.comb += self.kernels[ph.kernel].start.eq(begins)

        # ---- host bus (while idle); later assignments (copies, shared reads) take precedence
        # Idle: no phase, and not starting one. From FANOUT_LEVEL `phase == idle` is a register
        # computed a cycle ahead (`stopped`), so no comparison of the phase lies on the way to
        # the write enables (on the int8 GEMV 16x16 at fp_pipeline 3 that path, 10.6 ns of
        # routing to 68 block RAMs, was the critical one before the bus was registered).
        fanout = self.kernels[0].config.fp_pipeline >= FANOUT_LEVEL

        # From FANOUT_LEVEL the bus is registered at both ends (host_read_latency), so no path
        # runs from the top's pins to a block RAM or back (on the 26x17 GEMV such a path was
        # 39 ns: a user's design driving the bus from its own registers would have had to clock
        # at 25 MHz). Each HOST_GROUP ports of one width share registered copies of the address,
        # the write data and the idle flag (a copy per port cost the 8x8 GEMV 1,400 flip-flops);
        # each port registers its own write enable and read address, and host_rdata is a
        # register. A write lands a cycle late; a kernel started in that cycle reads its memories
        # three cycles later at the earliest (at this level its read addresses come from the
        # step's own counters, then pass two registers), so it sees the word. Below, the bus is
        # combinational.
        # The address and data copies are data (reset-less, Datapath.register); the idle flag and
        # the write enables reset, so no write lands in the cycle after a reset.
        data_copies = Copies(m, HOST_GROUP, reset_less=True)
        flag_copies = Copies(m, HOST_GROUP, reset_less=False)
        # The idle flag's copies sit beside the block RAMs, all over the die: one hop from the
        # middle (the kernel's `done` through `nphase == idle`) was the 26x17 GEMV's critical
        # path (11.5 ns of routing). So the flag passes a tree of copies, HOST_GROUP wide at
        # each level, and is computed as many cycles earlier to make up for it (_idle_in); the
        # start pin, which that look-ahead cannot know, gates every level but the first. Three
        # levels where the kernels tell their end three cycles ahead: with two, the look-ahead's
        # logic drove the middle level's copies across the die (the w4a8 GEMV 12x56's critical
        # path, 9.4 ns: 7.8 of it one route).
        root_copies = Copies(m, HOST_GROUP ** 3, reset_less=False)
        soon_copies = Copies(m, HOST_GROUP ** 2, reset_less=False)
        idle_in_three = self._idle_in(phase, cctr, idle, 3) if fanout else None
        idle_in_two = self._idle_in(phase, cctr, idle, 2) if fanout and idle_in_three is None else None

        def shared(kind: str, value: Value, width: int, init: int = 0, data: bool = True, weight: int = 1) -> Value:
            copies = data_copies if data else flag_copies
            return copies((kind, width), value, f"host_{kind}{width}_", init=init, weight=weight)

        read_ports = []
        for i, hp in enumerate(self.host_ports):
            selected = self.host_sel == i
            in_range = self.host_addr < hp.depth
            if hp.write:
                waddr, wdata = self.port(hp.kernel, hp.slot, "waddr"), self.port(hp.kernel, hp.slot, "wdata")
                if fanout:          # out of range, the write enable is low: the address needs no 0
                    if idle_in_three is not None:
                        root = root_copies("root", idle_in_three, "host_idle_root", init=1)
                        soon = soon_copies("soon", root & ~self.start, "host_idle_soon", init=1)
                    else:
                        soon = soon_copies("soon", idle_in_two, "host_idle_soon", init=1)
                    stopped = shared("stopped", soon & ~self.start, 1, init=1, data=False)
                    rams = hp.block_rams
                    m.d.comb += [
                        waddr.eq(shared("addr", self.host_addr[:len(waddr)], len(waddr), weight=rams)),
                        wdata.eq(shared("wdata", self.host_wdata[:len(wdata)], len(wdata), weight=rams)),
                        self.port(hp.kernel, hp.slot, "we").eq(registered(
                            m, self.host_we & selected & in_range & stopped & ~self.start, f"host{i}_we",
                            duplicate=True))]
                else:
                    m.d.comb += [waddr.eq(Mux(in_range, self.host_addr, 0)), wdata.eq(self.host_wdata),
                                 self.port(hp.kernel, hp.slot, "we").eq(
                                     self.host_we & selected & in_range & ((phase == idle) & (nphase == idle)))]
            if hp.read:
                raddr = Mux(selected & in_range, self.host_addr, 0)
                m.d.comb += self.port(hp.kernel, hp.slot, "raddr").eq(
                    registered(m, raddr, f"host{i}_raddr", duplicate=True, reset_less=True) if fanout else raddr)
                read_ports.append((i, hp))
        if fanout:
            # each port's data gated by its own flag, as old as the data (the registered address
            # and the block RAM's cycle), then OR-ed: a multiplexer on a shared selection fanned
            # that selection out to every output bank (on the 12x13 GEMV it was the critical
            # path: 9.3 ns of routing). The OR is registered per HOST_GROUP ports, then again
            # in host_rdata: one OR over the 26x17 GEMV's 26 output banks, all over the die,
            # was its critical path (10.4 ns of routing)
            self._registered_read(m, read_ports, self.host_sel, sync_reads)
        else:
            # the selection as old as the read data: block RAM data arrives a cycle after its address
            rsel: Value = registered(m, self.host_sel, "rsel") if sync_reads else self.host_sel
            with m.Switch(rsel):
                for i, hp in read_ports:
                    with m.Case(i):
                        m.d.comb += self.host_rdata.eq(self.port(hp.kernel, hp.slot, "rdata"))

        # ---- shared buffers: the reader's addresses go to the owner's port 0 while it runs
        run_phase = {ph.kernel: p for p, ph in enumerate(self.phases) if isinstance(ph, Run)}
        for sh in self.shares:
            rk, ok = sh.reader[0], sh.owner[0]
            for rb, ob in zip(self.banking[sh.reader].banks, self.banking[sh.owner].banks):
                m.d.comb += self.port(rk, rb, "xdata").eq(self.port(ok, ob, "rdata"))
                with m.If(reading == run_phase[rk]):
                    m.d.comb += self.port(ok, ob, "raddr").eq(self.port(rk, rb, "xaddr"))

        # ---- copies: the source is addressed one cycle ahead with block RAM
        for p, ph in enumerate(self.phases):
            if isinstance(ph, Copy):
                ahead = self._copy_read_ahead(m, p, ph, phase, cctr) if sync_reads else None
                self._copy(m, p, ph, phase, reading, cctr, ncctr, sync_reads, ahead,
                           registered_data=registers_copy_data(config))
        return m

    def _registered_read(self, m: Module, read_ports: list, sel: Value, sync_reads: bool) -> None:
        """host_rdata from `read_ports` ((host_sel value, HostPort)), selected by `sel`: each
        port's data gated by its own registered flag, OR-ed per HOST_GROUP ports into a
        register, then into host_rdata (fanout: the comment where it is chosen)."""
        rdata = Const(0, len(self.host_rdata))
        outreg = self._host_data_registered
        for g in range(0, len(read_ports), HOST_GROUP):
            part = Const(0, len(self.host_rdata))
            for i, hp in read_ports[g:g + HOST_GROUP]:
                flag: Value = (sel == i)
                for d in range(1 + int(sync_reads) + outreg):
                    flag = registered(m, flag, f"host{i}_rsel{d}", duplicate=True, reset_less=True)
                data = self.port(hp.kernel, hp.slot, "rdata")
                if outreg:
                    data = registered(m, data, f"host{i}_rdata_q", reset_less=True)
                part = part | Mux(flag, data, 0)
            rdata = rdata | registered(m, part, f"host_rdata_part{g // HOST_GROUP}", reset_less=True)
        m.d.sync += self.host_rdata.eq(rdata)

    def _groups(self, ph: Copy, place: Place) -> Layout:
        """Copy `ph`'s side at `place` as a layout of its groups of ph.width elements."""
        return self.banking[place].layout.grouped(ph.width)

    def _copy_read_ahead(self, m, p: int, ph: Copy, phase, cctr):
        """With target_mhz: (whether copy phase p reads next cycle, the word it reads), registers
        (a copy of each per COPY_BANKS source banks: one list entry a bank), computed a cycle
        ahead from the phase and counter (not from `nphase`, which a kernel's `done` drives):
        the copy's read address then comes from a register, not from
        `done` through the phase logic and a multiplexer to every source memory (the sequential
        digits MLP's critical path: 10.0 ns, 8.5 of it routing). The same cycles: at t this
        computes what `nphase == p` and `ncctr` say at t + 1. None where it cannot look ahead
        (the first phase: the start pin; a phase before that ends in the cycle it begins).
        A source in groups over lanes (an odometer's word, not the counter) is read at the word of
        an odometer one cycle ahead of the copy's own, registered (the sequential wine MLP at 4
        lanes and target_mhz 200: the counter through the phase logic and the odometer's next
        word to a LUT RAM's read address, 8.5 ns, 6.8 of it routing, its critical path)."""
        if not self.kernels[0].config.target_mhz or p == 0:
            return None
        prev = self.phases[p - 1]
        if isinstance(prev, Copy) and copy_cycles(prev, self.kernels[0].config) == 1:
            return None

        length = ph.length
        enter_next = (phase == p - 1) & self._ends(p - 1, 1, cctr)      # phase p begins the cycle after next
        enter_now = (phase == p - 1) & self._ends(p - 1, 0, cctr)       # phase p begins next cycle
        stay = (phase == p) & (cctr < length - 2) if length > 2 else Const(0)
        reads_next = enter_next | (enter_now & (length > 1)) | stay
        reads = registered(m, reads_next, f"copy{p}_reading")
        # a copy of the enable and of the word per COPY_BANKS source banks (each bank's address
        # multiplexer beside its memory): one register driving every bank's was the sequential
        # digits CNN's path at 4 lanes and target_mhz 200 (`copy1_reading` -> a LUT RAM's read,
        # 8.0 ns, 6.5 of it routing)
        groups = range(-(-len(self.banking[ph.src].banks) // COPY_BANKS))
        regs: list[Signal] = []
        layout = self._groups(ph, ph.src)
        if not (ph.by_words or layout.is_plain):
            # The copy's odometer advances while phase p runs and restarts at its last cycle;
            # the word read follows an odometer that does each a cycle earlier (`reads` says
            # phase p runs next cycle; `last`, a register too, that it is then at its last
            # cycle), so its next word is the copy's in two cycles. Both from registers: from
            # `phase` itself the odometer's digits were the sequential wine MLP's critical path at
            # 2 lanes (6.4 ns, 4.9 routing). Nor is that odometer built as such: its next word,
            # the sum of its next digits, was 4-5 levels from its digits to the word's registers
            # (the sequential digits CNN at 4 lanes, target_mhz 200, seed 3: `copy1_lead_q2` ->
            # `copy1_raddr_g1`, 6.7 ns). `succ` holds its successor's digits (element 1 at a
            # reset and after `last`), so the next word is 0 after `last`, else the word of
            # `succ`'s own digits (a sum of registers) if it advances, else the same.
            ends = {1: enter_next, 2: enter_now}
            last = registered(m, ends.get(length, (phase == p) & (cctr == length - 3)), f"copy{p}_last")
            succ = Odometer(m, layout, f"copy{p}_lead", advance=reads, restart=None, preset=(last, 1), init=1)
            word = succ.word(False)
            regs = [Signal(Value.cast(word).shape(), name=f"copy{p}_raddr" + (f"_g{g}" if g else ""),
                           attrs={DUPLICATE_ATTRIBUTE: 1} if g else {}) for g in groups]
            for reg in regs:
                m.d.sync += reg.eq(Mux(last, 0, Mux(reads, word, reg)))
        else:
            nxt = Mux((phase == p) & (cctr < length - 2), cctr + 2, 0) if length > 2 else Const(0)
            word = Mux(enter_now, 1 if length > 1 else 0, nxt)[:len(cctr)]
        enables = [reads] + [registered(m, reads_next, f"copy{p}_reading_g{g}", duplicate=True) for g in groups[1:]]
        words = regs or [registered(m, word, f"copy{p}_raddr" + (f"_g{g}" if g else ""), reset_less=True,
                                    duplicate=g > 0) for g in groups]
        banks = range(len(self.banking[ph.src].banks))
        return [enables[b // COPY_BANKS] for b in banks], [words[b // COPY_BANKS] for b in banks]

    def _copy(self, m, p: int, ph: Copy, phase, reading, cctr, ncctr, sync_reads: bool,
              ahead: tuple[Value | None, Value | list[Value]] | None = None, *,
              registered_data: bool = False) -> None:
        """Copy phase p: the source read while `reading` is p at counter `ncctr` (block RAM: the
        next cycle's) or `cctr`, the destinations written while `phase` is p. `ahead`, where given,
        is (the read's enable or one per source bank, its source word or one per source bank), registers
        (_copy_read_ahead, DataflowTopHW._read_ahead); an enable of None: nothing else drives the
        source's read address, which is the word alone. With `registered_data` (registers_copy_data,
        which needs `ahead`) each source bank's read data passes a register first and every write
        trails by a cycle: the phase's cycles 1 .. length write its elements 0 .. length - 1."""
        src = self.banking[ph.src]
        reading_p, address = ahead if ahead is not None else (reading == p, None)
        assert ahead is not None or not registered_data, "registered copy data reads through `ahead`"

        def read(word: Value | list[Value]) -> None:       # one word, or one per source bank
            words = word if isinstance(word, list) else [word] * len(src.banks)
            enables = reading_p if isinstance(reading_p, list) else [reading_p] * len(src.banks)
            for b, w, en in zip(src.banks, words, enables):
                drive = self.port(ph.src[0], b, "raddr").eq(w)
                if en is None:
                    m.d.comb += drive
                else:
                    with m.If(en):
                        m.d.comb += drive
        datas = [self.port(ph.src[0], b, "rdata") for b in src.banks]
        writing: Value = phase == p
        wctr: Value = cctr                        # the element written now
        if registered_data:
            # A plain register after each source bank (reset-less, no enable): a block RAM's own
            # output register takes it (compiler/pnr/bram_registers.py), so the copy's write path
            # starts 1.0 ns after the clock, not 5.8 (the sequential digits CNN at target_mhz 200:
            # a copy from a block RAM, 8.4 ns, its critical path). The writes, their addresses and
            # the odometers below follow a cycle later, from a copy of the counter.
            # Its write enable is a register too: it writes in cycles 1 .. length of the phase, the
            # cycles after one with the phase on and its counter short of length (as a compare of
            # the counter, `(phase == p) & (cctr != 0)`, it was the sequential wine MLP's critical
            # path at 4 lanes: `cctr` -> a LUT RAM's write, 6.3 ns, 5.0 of it routing)
            datas = [registered(m, d, f"copy{p}_data_b{b}", reset_less=True) for b, d in zip(src.banks, datas)]
            writing = registered(m, (phase == p) & (cctr != ph.length), f"copy{p}_writing")
            wctr = Signal.like(cctr, name=f"copy{p}_wctr")
            m.d.sync += wctr.eq(cctr)
        if ph.by_words:
            read(address if address is not None else ncctr if sync_reads else cctr)
            with m.If(writing):
                for d in ph.dsts:
                    for data, db in zip(datas, self.banking[d].banks):
                        m.d.comb += [self.copy_port(d[0], db, "waddr").eq(wctr),
                                     self.copy_port(d[0], db, "wdata").eq(data),
                                     self.copy_port(d[0], db, "we").eq(1)]
            return
        # a group of W consecutive elements a cycle (W = 1: element by element), counted in
        # each side's layout of groups (Layout.grouped): one odometer per distinct one (a plain
        # one is the counter); element j of a group is in lane W * (its group's lane) + j
        W = ph.width
        last = ph.length - 1 + int(registered_data)     # the phase's last cycle
        groups = {place: self._groups(ph, place) for place in (ph.src,) + ph.dsts}
        odometers: dict[Layout, Odometer | None] = {}
        for layout in groups.values():
            if layout not in odometers:
                odometers[layout] = None if layout.is_plain else Odometer(
                    m, layout, f"copy{p}_{len(odometers)}", advance=writing,
                    restart=(phase == p) & (cctr == last))

        def word(layout, nxt):
            od = odometers[layout]
            return (ncctr if nxt else wctr) if od is None else od.word(nxt)

        def lane(layout):
            od = odometers[layout]
            return Const(0, 1) if od is None else od.lane()
        read(address if address is not None else word(groups[ph.src], sync_reads))
        src_lane = lane(groups[ph.src])
        elements = [datas[j] if len(datas) == W else Array(datas[j::W])[src_lane] for j in range(W)]
        with m.If(writing):
            for d in ph.dsts:
                bk, layout = self.banking[d], groups[d]
                dst_lane = lane(layout)
                for i, db in enumerate(bk.banks):
                    m.d.comb += [self.copy_port(d[0], db, "waddr").eq(word(layout, False)),
                                 self.copy_port(d[0], db, "wdata").eq(elements[i % W]),
                                 self.copy_port(d[0], db, "we").eq(dst_lane == i // W if len(bk.banks) > W else 1)]


def buffer_users(kernel_buffers: list[list[tuple[int, int, bool, bool]]], names: list[str]
                 ) -> tuple[dict[int, list[tuple[int, int]]], dict[int, list[tuple[int, int]]]]:
    """Each buffer's writer and readers as (kernel, slot) lists, from each kernel's (slot, buffer
    id, loaded, stored) list; a buffer written by two kernels is refused."""
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
    return writers, readers


def plan(kernel_buffers: list[list[tuple[int, int, bool, bool]]], *, sizes: dict[int, int],
         widths: dict[int, int], names: list[str], banking: list[dict[int, Banking]],
         read_ports: list[dict[int, int]], share: bool = False):
    """From each kernel's (slot, buffer id, loaded, stored) list, how each kernel stores its
    slots and how many read ports each bank needs: the run order (positions in the input),
    the phases, where each buffer lives and which readers share another kernel's memory."""
    writers, readers = buffer_users(kernel_buffers, names)
    edges = {(writers[b][0][0], r[0]) for b in readers if b in writers for r in readers[b]}
    order = toposort_kernels(len(kernel_buffers), edges, names)
    pos = {k: i for i, k in enumerate(order)}
    layout = lambda place: banking[place[0]][place[1]].layout  # noqa: E731

    shared: dict[tuple[int, int], tuple[int, int]] = {}
    for buf in sorted(set(writers) | set(readers)):
        if not share:
            break
        rs = sorted(readers.get(buf, []), key=lambda r: pos[r[0]])
        owner = writers[buf][0] if buf in writers else (rs[0] if rs else None)
        for r in rs:
            if r != owner and layout(r) == layout(owner) and \
                    all(read_ports[r[0]].get(b, 1) <= 1 for b in banking[r[0]][r[1]].banks):
                shared[r] = owner

    phases: list[Run | Copy] = []
    for k in order:
        phases.append(Run(pos[k]))
        for slot, buf, _, stored in kernel_buffers[k]:
            dsts = [r for r in readers.get(buf, []) if r not in shared]
            if stored and dsts:
                phases.append(Copy.between((pos[k], slot), tuple((pos[r], s) for r, s in dsts),
                                           [layout(p) for p in [(k, slot)] + dsts]))
    host: list[HostBuffer] = []
    for buf in sorted(set(writers) | set(readers)):
        holders = [(pos[k], s) for k, s in writers.get(buf, []) + readers.get(buf, []) if (k, s) not in shared]
        host.append(HostBuffer(buf, tuple(holders), holders[0], widths[buf], sizes[buf]))
    shares = [Share((pos[r[0]], r[1]), (pos[o[0]], o[1])) for r, o in shared.items()]
    return order, phases, host, shares
