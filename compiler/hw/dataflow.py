"""schedule=dataflow: every kernel is a stage, all stages run at once on successive samples.

Time is cut into *beats* of B cycles. In every beat every kernel runs once (all start in the
beat's first cycle), kernel k on the sample that entered `level(k)` beats earlier. A buffer
handed from one stage to another rotates through R memory banks (a *ring*, KernelHW.rings): in
beat t a kernel uses bank t mod R of each of its rings, and the outside ports (the host bus, a
copy, a consumer reading in place) reach another bank, so a producer writes sample n+1 while
its consumer reads sample n. Two ways to hand a buffer on, measured on the digits MLP and the
AD08 autoencoder (docs/dataflow.md):

  in place  the one consumer reads the producer's ring through the outside port (same banked
            layout, one read port per bank, as share_buffers): no copy, no second memory, the
            consumer one beat behind.
  copy      otherwise (several consumers, another layout, several read ports): in the beat after
            the producer's, a copy moves its words from the producer's outside bank into every
            consumer's outside bank (one word of every bank a cycle when layouts agree, else
            a group of consecutive elements a cycle, as hw/top.py), beside the running stages;
            consumers two or more beats behind.

A FIFO in place of a ring would let a consumer start on the first words before the producer
is done, but only where both walk the buffer in one order; a GEMV producer writes its rows in
the order its lanes fill them and the next layer reads the whole vector once per output row,
so every hand-over here would need the whole buffer anyway (docs/dataflow.md).

Ring sizes follow from the levels (a stage's level: the most of its producers' level + 1 in
place, + 2 by copy; a skip connection just makes the later consumer's ring longer):
  written from outside, read by the kernel in beat t + d (copy destination: d = its level - the
        copy's beat; a streamed input of a level-l kernel: d = l + 1): R = d + 1, the outside
        bank is (t - 1) mod R
  written by the kernel, read from outside e beats later (by copy: e = 1; in place: e = the
        reader's level - the writer's; a model output: e = D - level, D = the outputs' level
        + 1): R = e + 1, the outside bank is (t + 1) mod R
The host writes sample n's streamed inputs before beat n starts (while beat n-1 runs, or while
idle), into the bank ((t + 1 if a beat runs else t) + l) mod R, and reads sample n's outputs
after beat n + D - 1 is done and before beat n + D + 1 starts. Inputs that are not streamed
(weights) are plain memories, written while no beat runs.

Top signals: as hw/top.py. `start` while no beat runs starts one (held high, beats follow back
to back); `done` is high in the cycle after a beat's last; `busy` while a beat runs.
Cycles: interval = B = max(each kernel's run, each copy's length + copy_lag: 1 with block RAM,
2 from FANOUT_LEVEL);
latency (start of a sample's beat to the done of the beat its outputs are complete in) = D x B.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib.wiring import In

from .. import ir
from .layout import Banking
from .datapath import DUPLICATE_ATTRIBUTE, Copies, registered
from .pipeline import FANOUT_LEVEL, Schedule
from .program import Program
from .kernel import ADDRESS_GROUP, loads_of, run_cycles
from .top import HOST_GROUP, Copy, HostBuffer, Odometer, Place, Run, Share, TopHW, buffer_users, toposort_kernels

RING_GROUP = 4
"""Rings whose beat counters share one first-level copy of the beat's end (DataflowTopHW)."""


@dataclass(frozen=True)
class Ring:
    """A memory bank that rotates through `banks` memories."""
    place: Place                 # (kernel position, bank slot)
    banks: int
    outside: str                 # "in": written from outside (copies, host), "out": read from outside
    shift: int = 0               # a streamed input's kernel level (the host writes ahead by it)


@dataclass(frozen=True)
class Dataflow:
    beat: int                    # cycles per beat (the interval)
    depth: int                   # beats from a sample's first beat to the done of its outputs' beat
    levels: tuple[int, ...]      # per kernel position: the beat offset it works on a sample in
    rings: tuple[Ring, ...]
    streamed: frozenset[int]     # model input buffers that change per sample
    stage_cycles: tuple[tuple[str, int], ...]   # per kernel: its run; then per copy: its cycles
    lags: tuple[int, ...] = ()   # per kernel position: beats its stores trail its start (pipelined
                                 # kernels with a beat of one cycle: 1 + its pipeline's depth)
    spills: tuple[int, ...] = ()  # per kernel position (stage_overlap): beats past its own its
                                  # stores go on into, each into its issuing beat's bank

    @property
    def latency(self) -> int:
        return self.depth * self.beat

    def ring(self, place: Place) -> Ring | None:
        return next((r for r in self.rings if r.place == place), None)

    def bank_for_sample(self, place: Place, sample: int, *, output: bool) -> int:
        """The ring bank of `place` that holds sample `sample` (a streamed input's, or an
        output's home), 0 for a plain memory: what a simulator pokes and peeks."""
        r = self.ring(place)
        if r is None:
            return 0
        lag = self.lags[place[0]] if output and self.lags else 0
        return (sample + self.levels[place[0]] + lag) % r.banks


@dataclass(frozen=True)
class DataflowPlan:
    order: list[int]
    phases: list[Run | Copy]
    host: list[HostBuffer]
    shares: list[Share]
    levels: list[int]                        # by position
    rings: list[Ring]
    depth: int


def plan_dataflow(kernel_buffers: list[list[tuple[int, int, bool, bool]]], *, sizes: dict[int, int],
                  widths: dict[int, int], names: list[str], banking: list[dict[int, Banking]],
                  read_ports: list[dict[int, int]], outputs: set[int], streamed: set[int],
                  lags: list[int] | None = None, spills: list[int] | None = None) -> DataflowPlan | str:
    """As hw/top.plan for schedule=dataflow; a str says why the graph cannot be pipelined.
    `lags` (by kernel, in the input's order): beats a kernel's stores trail its start, 0 for
    kernels whose run fits the beat (with a beat of one cycle, a pipelined kernel's stores land
    1 + its pipeline's depth beats later: its outputs count from that level; the bank a store
    takes is the beat's it lands in). `spills` (stage_overlap): beats past its own that a
    kernel's stores go on into, each store into the bank of the beat its step issued in
    (KernelHW's store_delay), so its readers wait as many beats more, and a copy from it reads
    a bank that many beats older."""
    lags = lags or [0] * len(kernel_buffers)
    spills = spills or [0] * len(kernel_buffers)
    trail = [lag + spill for lag, spill in zip(lags, spills)]
    writers, readers = buffer_users(kernel_buffers, names)
    for buf in writers:
        if buf in outputs and readers.get(buf):
            return (f"buffer {buf} is a model output that later kernels also read "
                    f"({', '.join(names[k] for k, _ in readers[buf])}): its memory's outside port "
                    "cannot serve the host and them at once")
    edges = {(writers[b][0][0], r[0]) for b in readers if b in writers for r in readers[b]}
    order = toposort_kernels(len(kernel_buffers), edges, names)
    pos = {k: i for i, k in enumerate(order)}
    layout = lambda place: banking[place[0]][place[1]].layout  # noqa: E731

    in_place: dict[int, tuple[int, int]] = {}            # buffer -> its one reader, reading in place
    for buf, ws in writers.items():
        rs = readers.get(buf, [])
        if len(rs) == 1 and layout(rs[0]) == layout(ws[0]) and \
                all(read_ports[rs[0][0]].get(b, 1) <= 1 for b in banking[rs[0][0]][rs[0][1]].banks):
            in_place[buf] = rs[0]
    level = {k: 0 for k in order}
    for k in order:
        for slot, buf, loaded, stored in kernel_buffers[k]:
            if loaded and not stored and buf in writers:
                w = writers[buf][0][0]
                level[k] = max(level[k], level[w] + trail[w] + (1 if buf in in_place else 2))
    out_level = max((level[writers[b][0][0]] + trail[writers[b][0][0]] for b in outputs if b in writers), default=0)
    depth = out_level + 1

    rings: list[Ring] = []

    def ring(place, n: int, outside: str, shift: int = 0):
        k, slot = place
        for b in banking[k][slot].banks:
            rings.append(Ring((pos[k], b), n, outside, shift))

    phases: list[Run | Copy] = [Run(pos[k]) for k in order]
    for k in order:
        for slot, buf, loaded, stored in kernel_buffers[k]:
            if stored and buf in in_place:
                r = in_place[buf]
                ring((k, slot), level[r[0]] - level[k] - lags[k] + 1, "out")
            elif stored and readers.get(buf):
                # the copy, in every beat, reads the bank of the sample the kernel issued
                # 1 + spill beats before (the outside bank of an "out" ring is R - 1 beats old)
                ring((k, slot), 2 + spills[k], "out")
                dsts = readers[buf]
                phases.append(Copy.between((pos[k], slot), tuple((pos[r], s) for r, s in dsts),
                                           [layout(p) for p in [(k, slot)] + dsts]))
                for d in dsts:
                    ring(d, level[d[0]] - level[k] - spills[k], "in")
            elif stored and buf in outputs:
                ring((k, slot), depth - level[k] - lags[k] + 1, "out")
            elif loaded and not stored and buf in streamed:
                ring((k, slot), level[k] + 2, "in", shift=level[k])
    host: list[HostBuffer] = []
    shared = set(in_place.values())
    for buf in sorted(set(writers) | set(readers)):
        holders = [(pos[k], s) for k, s in writers.get(buf, []) + readers.get(buf, []) if (k, s) not in shared]
        host.append(HostBuffer(buf, tuple(holders), holders[0], widths[buf], sizes[buf]))
    shares = [Share((pos[r[0]], r[1]), (pos[writers[b][0][0]], writers[b][0][1])) for b, r in in_place.items()]
    return DataflowPlan(order, phases, host, shares, [level[k] for k in order], rings, depth)


def can_overlap(kernel: ir.KernelIR, sched: Schedule) -> bool:
    """Whether a stage may take its next sample while its pipeline drains (stage_overlap): not
    where it loads a buffer it stores (its next sample's reads would meet its last one's stores)
    nor where a gather reads late in the pipeline (from the bank of the beat it reads in)."""
    return not sched.gather_issue and not any(b.loaded and b.stored for b in kernel.buffers)


def stage_hold(kernel: ir.KernelIR, program: Program, sched: Schedule, overlap: bool,
               fixed: frozenset[int] = frozenset()) -> int:
    """Cycles a kernel holds its dataflow stage for a sample, the least beat it fits: its run,
    start to done; with `overlap` (stage_overlap, where can_overlap) until it can start again:
    its steps, and its last step's reads of the sample's data, which choose a ring's bank by
    the beat they are in (with block RAM a read's address goes out a cycle before its data:
    Schedule.port_stage). Reads of `fixed` slots (weights: the same in every beat) and of ROMs
    may come later (a GEMV reads its weights stages after the x element it broadcasts)."""
    run = run_cycles(program, sched)
    if not overlap or not can_overlap(kernel, sched):
        return run
    constant = fixed | {b.slot for b in kernel.buffers if b.rom is not None}
    reads = max((sched.port_stage(load) for step in program.steps for load in loads_of(step)
                 if load.buf not in constant), default=0)
    return min(run, program.cycles + max(1, reads + (0 if sched.sync_reads else 1)))


def weight_slots(buffers: list[tuple[int, int, bool, bool]], weights: frozenset[int]) -> frozenset[int]:
    """The parameter slots of a kernel (its `buffers`: (slot, model buffer, loaded, stored))
    that hold one of the model buffers `weights` (the inputs that do not stream)."""
    return frozenset(slot for slot, buf, _, _ in buffers if buf in weights)


def slot_banks(slots: frozenset[int], banking: dict[int, Banking]) -> frozenset[int]:
    """The bank slots that parameter `slots` are stored in (`banking`): what stage_hold's
    `fixed` takes, of weight_slots."""
    return frozenset(bank for slot in slots for bank in banking[slot].banks)


def spill_beats(run: int, beat: int) -> int:
    """Beats past its own that a run of `run` cycles goes on into, at a beat of `beat` cycles."""
    return -(-run // beat) - 1


def copy_lag(sync_reads: bool, fp_pipeline: int) -> int:
    """Cycles a copy's writes trail its reads: one with block RAM (the read data a cycle later),
    and from FANOUT_LEVEL one more, the writes landing from registers (DataflowTopHW.copy_port)."""
    return int(sync_reads) + int(sync_reads and fp_pipeline >= FANOUT_LEVEL)


def beat_cycles(kernel_cycles: list[int], copies: list[Copy], lag: int) -> int:
    """The beat: the longest kernel run, or copy (its writes trailing its reads by `lag`: copy_lag)."""
    return max(kernel_cycles + [c.length + lag for c in copies])


class DataflowTopHW(TopHW):
    """The top of a dataflow design (module docstring); the host bus as below FANOUT_LEVEL in
    hw/top.py (combinational, a read's data a cycle later with block RAM), usable while beats
    run for the streamed inputs' and the outputs' banks."""

    def __init__(self, kernels, phases, buffers, banking, shares, host_ports, *, flow: Dataflow):
        super().__init__(kernels, phases, buffers, banking, shares, host_ports)
        self.flow = flow
        self.landing: dict[tuple[int, int, str], Signal] = {}
        # the beat's `running` and `last` registers, each with the registers that copy it for
        # consumers across the die, and each copy's reading flag from the beat counter with the
        # same flag from the copy's own count (made in elaborate; tests/test_dataflow.py checks
        # that every copy holds its original's value in every cycle)
        self.beat_copies: dict[str, tuple[Value, list[Value]]] = {}

    def copy_port(self, kernel: int, slot: int, name: str):
        """From FANOUT_LEVEL with block RAM a copy's write lands a cycle late, from registers
        (`landing`, made in elaborate): the read data of the source's banks, chosen and routed
        to another kernel's memories, was one path with the write; on the fine-tuned KWS network
        (LUT-RAM reads through a 16-way multiplexer, then 6.7 ns of routing to the next kernel)
        its critical one. copy_lag counts the cycle."""
        land = self.landing.get((kernel, slot, name))
        return self.port(kernel, slot, name) if land is None else land

    @staticmethod
    def members(host_ports) -> dict:
        """As TopHW's, and a read address of its own (`host_rsel`, `host_raddr`): a sample's
        inputs go in through host_sel/host_addr while an earlier sample's outputs come out."""
        sig = TopHW.members(host_ports)
        return {**sig, "host_rsel": In(sig["host_sel"].shape), "host_raddr": In(sig["host_addr"].shape)}

    @property
    def fanout(self) -> bool:
        return self.kernels[0].config.fp_pipeline >= FANOUT_LEVEL

    @property
    def host_delay(self) -> int:
        """Cycles from the pins to a memory's port: a write lands, a read address reaches the
        block RAM this many cycles after it is on the pins (1 from FANOUT_LEVEL: registered)."""
        return int(self.fanout)

    def elaborate(self, platform):
        m = Module()
        for i, k in enumerate(self.kernels):
            m.submodules[f"k{i}"] = k
        flow, B = self.flow, self.flow.beat
        sync_reads = self.kernels[0].config.mem_read == "sync"
        # `running` kept apart from its copies (the host's `host_runs_`, each copy's own): Yosys
        # merged it into one of them, and that copy, drawn to its own group's block RAMs, drove the
        # beat's logic from there (the KWS shape at w4a6: `host_runs_13` -> `host_stops_12`, a net
        # of 13.2 ns)
        running = Signal(attrs={DUPLICATE_ATTRIBUTE: 1} if self.fanout else {})
        bctr = Signal(range(B + 1))

        def running_after(run: Value, last_: Value) -> Value:
            """`running` in the next cycle, from `running` and `last` now (or copies of them)."""
            return Mux(self.start & ~run, 1, Mux(last_, 0, run))
        # the next cycle's `running`: its register's input, which the flags set a cycle ahead
        # below (the kernels' ring banks, the host bus's) are computed from
        if B == 1:                  # pipelined kernels: every cycle with `start` is a beat of its own
            begin = last = self.start
            running_next = begin                         # a beat runs next cycle iff one begins now
            going_on_next = Const(0, 1)                  # ... and never goes on past it
            running_d = Const(0, 1)                      # no `running` register: start always begins one
        else:
            begin = self.start & ~running
            # the beat's last cycle from a register set a cycle ahead (the counter runs a fixed
            # course once begun): the counter's compare is off the paths `last` starts, to the
            # rings' beat indices, `done` and the host's write enables (issue 52: AD08's slowest)
            last = Signal(name="beat_last")
            ahead = (bctr == B - 2) if B > 2 else Const(0, 1)
            last_next = Mux(begin, int(B == 2), running & ~last & ahead)
            m.d.sync += last.eq(last_next)
            running_next = running_after(running, last)
            going_on_next = running_next & ~last_next    # a beat runs next cycle, not its last
            running_d = running_next                     # the `running` register's next value
            bctr_next = Mux(begin, 1, Mux(last, 0, Mux(running, bctr + 1, bctr)))
            m.d.sync += [running.eq(running_next), bctr.eq(bctr_next)]
        m.d.sync += self.done.eq(last)
        self.beat_copies = {"running": (running, []), "last": (last, [])}

        def beat_copy(original: str, next_value: Value, name: str) -> Signal:
            """A register copy of the beat's `original`, loaded from its next value, recorded."""
            reg = registered(m, next_value, name, duplicate=True)
            self.beat_copies[original][1].append(reg)
            return reg
        # From FANOUT_LEVEL each ring's beat counter advances on a copy of `last` of its own,
        # registered from `last` a cycle ahead: with B >= 4 no beat starts in the two cycles
        # before one ends, so that is the counter's compare a cycle earlier, and every net on
        # the way is a register's driving a handful of loads. One `last` for every ring was the
        # critical path of AD08 (8.3 to 11.1 ns of routing to a far ring's counter).
        last_ahead = None
        if self.fanout and B >= 4:
            last_ahead = Signal(name="beat_last_ahead")
            last_ahead_next = running & ~last & (bctr == B - 3)
            m.d.sync += last_ahead.eq(last_ahead_next)
            self.beat_copies["last_ahead"] = (last_ahead, [])
            # while a beat runs and it is not its last cycle, `last_ahead` is the counter's
            # compare `ahead` (bctr == B - 2, reached only from B - 3 a cycle before): so
            # "a beat goes on next cycle" is one LUT of four registers and the start pin, not
            # the counter's compare, whose net to the host's stop flags across the die was
            # the KWS 3-bit shape's critical path at one seed of three (`bctr` -> a
            # `host_stops` root copy, 12.3 ns)
            going_on_next = begin | (running & ~last & ~last_ahead)
        # With B >= 5 the rings' copies are a tree, their source a cycle earlier still: one
        # register drove every ring's copy across the die (AD08 at target_mhz 200, seeds 1 and 2:
        # `beat_last_ahead` -> a far ring's `beat_last`, 10.4-10.9 ns of routing, the critical path).
        ring_last = None
        if last_ahead is not None and B >= 5:
            last_ahead2 = Signal(name="beat_last_ahead2")
            m.d.sync += last_ahead2.eq(running & ~last & (bctr == B - 4))
            ring_groups = Copies(m, RING_GROUP, reset_less=False)
            ring_last = lambda name: registered(m, ring_groups("last", last_ahead2, "beat_last_ahead_t"),  # noqa: E731
                                                name, duplicate=True)
        busy = begin | running
        m.d.comb += self.busy.eq(begin if B == 1 else running)
        for k in self.kernels:
            m.d.comb += k.start.eq(begin)
        cycle = Mux(running, bctr, 0)              # the cycle of the beat (0 in its first)

        # ---- rings: a beat counter mod R, advanced as a beat ends; one per ring length, or from
        # FANOUT_LEVEL one per ring: it chooses every port of the ring's banks, and one counter
        # for all rings was a net across the die (AD08 at target_mhz 200: 11.6 ns of routing)
        index: dict[object, Signal] = {}
        index_next: dict[object, Value] = {}       # its value in the next cycle
        advances: dict[object, Value] = {}         # the `last` it advances on

        def mod(v: Value, n: int) -> Value:        # v in [0, 2n)
            return Mux(v >= n, v - n, v)
        for r in flow.rings:
            k = self.kernels[r.place[0]]
            n = r.banks
            key = r.place if self.fanout else n
            if key not in index:
                index[key] = Signal(range(n), name=f"k{r.place[0]}_b{r.place[1]}_ring_beat" if self.fanout
                                    else f"ring{n}_beat", attrs={DUPLICATE_ATTRIBUTE: 1} if self.fanout else {})
                name = f"k{r.place[0]}_b{r.place[1]}_beat_last"
                advance = last if last_ahead is None else \
                    ring_last(name) if ring_last is not None else registered(m, last_ahead, name, duplicate=True)
                stepped = Mux(index[key] == n - 1, 0, index[key] + 1)
                with m.If(advance):
                    m.d.sync += index[key].eq(stepped)
                index_next[key] = Mux(advance, stepped, index[key])
                advances[key] = advance
                if last_ahead is not None:
                    self.beat_copies["last"][1].append(advance)
            idx = index[key]
            kb = idx
            if r.outside == "out":
                ob = mod(idx + 1, n)
            elif self._host_written(r.place):       # the bank of the next beat's sample: + its level
                ring_busy, ring_running_next = busy, running_next
                if last_ahead is not None:
                    # from a `running` of the ring's own (its `last` is its own already): one
                    # `running` for every ring's bank choices was a net across the die (AD08 at
                    # target 56, target_mhz 200, regrouped, seed 1: `running` -> a ring's kernel
                    # bank, 9.5 ns, 8.3 of it routing). busy = begin | running = start | running
                    own = beat_copy("running", running_d, f"k{r.place[0]}_b{r.place[1]}_running")
                    ring_busy = self.start | own
                    ring_running_next = running_after(own, advances[key])
                nxt = Mux(ring_busy, mod(idx + 1, n), idx)
                ob = mod(nxt + r.shift, n)
                if r.shift % n == 0 and last_ahead is not None:
                    # while no beat runs the host writes the next beat's bank, which is the
                    # kernel's: the kernel (idle) points elsewhere, or it would keep the port.
                    # A register, from the next cycle's `running` and beat index: a kernel here
                    # reads three cycles after its start at the earliest, so in a beat's first
                    # cycle it may point elsewhere still. From `busy` it was a net of `running`
                    # to every bank choice of the kernel's (the digits MLP and CNN at
                    # target_mhz 200: 7.1 and 7.4 ns of routing, their critical paths).
                    kb = registered(m, Mux(ring_running_next, index_next[key], mod(index_next[key] + 1, n))[:len(idx)],
                                    f"k{r.place[0]}_b{r.place[1]}_kbank", duplicate=True)
                elif r.shift % n == 0:
                    kb = Mux(busy, idx, mod(idx + 1, n))
                if self.fanout:     # the bank as the write's address and data: a cycle late
                    ob = registered(m, ob, f"k{r.place[0]}_b{r.place[1]}_hbank")
            else:
                ob = mod(idx + n - 1, n)
            m.d.comb += [getattr(k, f"b{r.place[1]}_kbank").eq(kb), getattr(k, f"b{r.place[1]}_obank").eq(ob)]

        # ---- host bus: streamed inputs and outputs any time, other memories while no beat runs
        ring_places = {r.place for r in flow.rings}
        if self.fanout:
            def host_flags() -> Value:
                """(no beat goes on next cycle, a beat runs next cycle): the input of a copy of the
                host bus's flags for weight writes (_registered_bus)."""
                if last_ahead is None:
                    return Cat(~going_on_next, running_d)
                # From the beat's registers' copies of this copy's own, registered from their
                # originals' next values, the flags' logic beside the copy: from the originals
                # it was a route across the die to a far copy (AD08 at target 56, target_mhz
                # 200, regrouped, seed 1: `running` -> a `host_runs` copy, 10.5 ns, 9.5 routing)
                n = len(self.beat_copies["last_ahead"][1])
                run, lst, ahead_ = (beat_copy(name, nxt, f"host_flags{n}_{name}") for name, nxt in
                                    (("running", running_d), ("last", last_next), ("last_ahead", last_ahead_next)))
                goes_on = (self.start & ~run) | (run & ~lst & ~ahead_)
                return Cat(~goes_on, running_after(run, lst))
            self._registered_bus(m, ring_places, host_flags, sync_reads)
        else:
            self._bus(m, ring_places, busy, sync_reads)

        # ---- readers in place: their own outside port, for them alone
        for sh in self.shares:
            rk, ok = sh.reader[0], sh.owner[0]
            for rb, ob in zip(self.banking[sh.reader].banks, self.banking[sh.owner].banks):
                m.d.comb += [self.port(rk, rb, "xdata").eq(self.port(ok, ob, "rdata")),
                             self.port(ok, ob, "raddr").eq(self.port(rk, rb, "xaddr"))]

        # ---- copies, all at once from the beat's first cycle: reads in cycles 0..L-1 (block RAM:
        # its data a cycle later, written in cycles 1..L, or from landing registers in 2..L+1),
        # as hw/top.py's copy phases
        copies = [ph for ph in self.phases if isinstance(ph, Copy)]
        none = len(copies)
        if copy_lag(sync_reads, self.kernels[0].config.fp_pipeline) > int(sync_reads):
            for ph in copies:
                for d in ph.dsts:
                    for b in self.banking[d].banks:
                        for name in ("waddr", "wdata", "we"):
                            port = self.port(d[0], b, name)
                            land = Signal.like(port, name=f"k{d[0]}_b{b}_copy_{name}")
                            # a write address per bank, kept apart (`duplicate`): the banks'
                            # addresses are one value, and Yosys merged their registers into one
                            # that drove every LUT-RAM cell of a ring (the KWS 3-bit shape, seed
                            # 1: 128 cells, 11.0 ns of which 10.4 routing)
                            m.d.comb += port.eq(registered(m, land, f"k{d[0]}_b{b}_land_{name}",
                                                           reset_less=name != "we",
                                                           duplicate=name == "waddr"))
                            self.landing[(d[0], b, name)] = land
        for c, ph in enumerate(copies):
            L = ph.length
            reads = busy & (cycle < L)             # copy c reads in this cycle of the beat
            counted = on = None
            if last_ahead is not None:
                # the same, from a register set a cycle ahead (and the `begin` of a beat's first
                # cycle): the compare of the beat counter was on the way to every source bank's
                # read address (the digits CNN at target_mhz 200: `bctr` -> a copy's address,
                # 9.0 ns, 3.1 of it logic)
                # Each copy makes its first cycle's `begin` from a `running` of its own, and keeps
                # its flag apart (Yosys had merged the flags of copies of one length): one
                # `begin` and one flag for every copy were a route across the die to a far
                # copy's count (AD08 at target 76, seed 1: `running` -> copy 0's count, 8.7 ns,
                # 4.0 of it one route)
                own = beat_copy("running", running_d, f"copy{c}_running")
                # Reading on from the copy's own count of the elements it has read, not the beat
                # counter: it reads in cycles 0 .. L-1 of a beat (L <= B: beat_cycles), so it reads
                # next cycle iff it reads now and this is not its element L-1. The beat counter's
                # next value shared a LUT with this flag by the counter, and `beat_last` -> that
                # LUT -> a far copy's flag was the KWS shape at w4a6's critical path at seed 1
                # (12.3 ns, 11.0 of it routing)
                on = Signal(name=f"copy{c}_on", attrs={DUPLICATE_ATTRIBUTE: 1})
                from_beat, reads = reads, (self.start & ~own) | on
                self.beat_copies[f"copy{c}_reads"] = (from_beat, [reads])
                counted = self._element_count(m, c, L, reads, duplicate=True)
                m.d.sync += on.eq(counted[1])
            reading = Mux(reads, c, none)
            if sync_reads:
                active = Signal(name=f"copy{c}_active")
                m.d.sync += active.eq(reads)
                phase = Mux(active, c, none)
                nctr = Mux(reads, cycle, 0)
                ctr = Signal(range(max(L, 2)), name=f"copy{c}_ctr")
                m.d.sync += ctr.eq(nctr)
            else:
                phase = reading
                ctr = nctr = cycle
            ahead = self._read_ahead(m, c, ph, reads, counted, on) if sync_reads and self.fanout else None
            self._copy(m, c, ph, phase, reading, ctr, nctr, sync_reads, ahead)
        return m

    @staticmethod
    def _element_count(m: Module, c: int, L: int, reads: Value, *, duplicate: bool = False
                       ) -> tuple[Signal, Value, Value]:
        """Copy c's count of the elements it has read in this beat (0 while it does not read),
        whether it goes on reading next cycle (it reads now, and not its element L-1) and whether
        the count is at L-1. That last is a register set a cycle ahead, not a compare of the
        count: the compare, the AND with `reads` and the increment were four levels from the count
        to the read word's registers (the digits CNN in dataflow at target_mhz 200, heap placer,
        seed 1: `copy0_count` -> a ring's read address, 8.2 ns, 5.5 of it routing)."""
        attrs = {DUPLICATE_ATTRIBUTE: 1} if duplicate else {}
        count = Signal(range(max(L, 2)), name=f"copy{c}_count", attrs=attrs)
        if L == 1:
            return count, Const(0, 1), Const(1, 1)
        at_last = Signal(name=f"copy{c}_at_last", attrs=attrs)
        more = reads & ~at_last
        m.d.sync += [count.eq(Mux(more, count + 1, 0)), at_last.eq(more & (count == L - 2))]
        return count, more, at_last

    def _read_ahead(self, m: Module, c: int, ph: Copy, reads: Value, counted: tuple[Signal, Value, Value] | None,
                    on: Signal | None = None):
        """From FANOUT_LEVEL with block RAM: copy c's source word from registers, computed a cycle
        ahead (TopHW._copy's `ahead`). It reads element t in cycle t of the beat (`reads`): its
        own count of the elements read (the word it reads now: 0 at a beat's first cycle, as
        it is whenever the copy did not read the cycle before, since it never reads in a beat's
        last cycle) and its own odometer over the source's layout (a counter for a plain one),
        at 0 while idle and advanced as it reads, and the word of its next digits registered, one
        copy per ADDRESS_GROUP source banks (from the `on` flag's registers: the word of a lead
        odometer's own digits, below). The word had come through the copy's flag, the
        odometer's carries and strides and the read enable's multiplexer to every source bank's
        LUT-RAM address: on the fine-tuned KWS network the critical path of two placements in
        three (14.8-15.3 ns of routing). Unless the host reads the source too, no enable: the
        word is 0 when no copy reads, and nothing else addresses that port."""
        src = self.banking[ph.src]
        L = ph.length
        count, more, at_last = counted or self._element_count(m, c, L, reads)   # the one its `on` flag counts with, if any
        layout = self._groups(ph, ph.src)
        if ph.by_words or layout.is_plain:
            nxt = Mux(more, count + 1, 0)[:max(1, (L - 1).bit_length())]
        elif on is not None and L > 1:
            # The word as the sum of an odometer's digits a cycle ahead (`lead`), not of its
            # next digits: the next digits' carries and the sum were 4-5 levels from the
            # odometer to the read word's registers (the digits CNN in dataflow at target_mhz
            # 200, heap placer, seeds 1-2: `copy0_read_*` -> a ring's read address, 7.8-8.2 ns,
            # 5.5-6.7 of it routing). While the copy reads on (`on`), `lead` holds the digits
            # of its next element, so the next word is the word of `lead`'s digits; otherwise
            # the copy is idle (at element 0), and it reads element 1 next cycle if it starts now.
            # `lead` steps while `on`, is at element 2 the cycle after a copy's first (if it
            # reads on), and at 0 after the copy's element L-2 (its next is then element 0).
            lead = Odometer(m, layout, f"copy{c}_lead", advance=on, restart=on & (count == L - 2),
                            preset=(~on, 2 if L > 2 else 0))
            first = layout.place(1)[0]
            nxt = Mux(on, lead.word(False), Mux(reads, first, 0))
        else:
            odometer = Odometer(m, layout, f"copy{c}_read", advance=reads, restart=reads & at_last)
            nxt = odometer.word(True)
        copies = Copies(m, ADDRESS_GROUP, reset_less=False)
        words = [copies("word", nxt, f"copy{c}_raddr") for _ in src.banks]
        host_read = any(hp.read and (hp.kernel, hp.slot) == ph.src for hp in self.host_ports)
        return (reads if host_read else None), words

    def _bus(self, m: Module, ring_places, busy: Value, sync_reads: bool) -> None:
        """The host bus below FANOUT_LEVEL: combinational, a read's data a cycle later."""
        read_ports = []
        for i, hp in enumerate(self.host_ports):
            selected = self.host_sel == i
            in_range = self.host_addr < hp.depth
            if hp.write:
                free = Const(1, 1) if (hp.kernel, hp.slot) in ring_places else ~busy
                m.d.comb += [self.port(hp.kernel, hp.slot, "waddr").eq(Mux(in_range, self.host_addr, 0)),
                             self.port(hp.kernel, hp.slot, "wdata").eq(self.host_wdata),
                             self.port(hp.kernel, hp.slot, "we").eq(self.host_we & selected & in_range & free)]
            if hp.read:
                rd = (self.host_rsel == i) & (self.host_raddr < hp.depth)
                m.d.comb += self.port(hp.kernel, hp.slot, "raddr").eq(Mux(rd, self.host_raddr, 0))
                read_ports.append((i, hp))
        rsel = Signal.like(self.host_rsel, name="rsel")
        m.d.sync += rsel.eq(self.host_rsel)
        with m.Switch(rsel if sync_reads else self.host_rsel):
            for i, hp in read_ports:
                with m.Case(i):
                    m.d.comb += self.host_rdata.eq(self.port(hp.kernel, hp.slot, "rdata"))

    def _registered_bus(self, m: Module, ring_places, host_flags: Callable[[], Value], sync_reads: bool) -> None:
        """The host bus from FANOUT_LEVEL, registered at both ends as hw/top.py's (its reasons:
        no path from the pins to a block RAM or back; HOST_GROUP ports share copies of the
        address and data): a write lands a cycle after it is on the pins, into the bank chosen
        then (the ring's registered host bank); a weight's only if no beat runs in that cycle
        (one may start in it: a kernel at this level reads its memories three cycles after its
        start at the earliest). A read's address reaches the block RAM a cycle late, its word
        is on host_rdata host_read_latency (4) cycles after the pins."""
        data_copies = Copies(m, HOST_GROUP, reset_less=True)
        flag_copies = Copies(m, HOST_GROUP, reset_less=False)
        # "No beat runs next cycle" (~running_next) is the beat's last cycle and the start pin
        # through two LUTs, and its copies sit by the block RAMs all over the die: from the middle
        # that was AD08's critical path on two seeds of three (`beat_last` -> a `host_free` copy,
        # 10.4-11.9 ns, 9.4-10.9 of it routing). So the copies are a tree of two levels: the
        # first a cycle ahead holds what the beat's state alone says (a beat runs and goes on;
        # a beat runs), the second ANDs in the start pin, which no look-ahead can know:
        # free(t+1) = ~going_on(t) & (running(t) | ~start(t)), and start while a beat runs
        # begins nothing. The first level's copies hold both bits (`host_flags`: stops, runs),
        # each made by `host_flags` from registers of its own (a third level, elaborate).
        root_copies = Copies(m, HOST_GROUP ** 2, reset_less=False)
        roots: dict[str, Signal] = {}
        read_ports = []
        for i, hp in enumerate(self.host_ports):
            if hp.write:
                waddr, wdata = self.port(hp.kernel, hp.slot, "waddr"), self.port(hp.kernel, hp.slot, "wdata")
                we: Value = registered(m, self.host_we & (self.host_sel == i) & (self.host_addr < hp.depth),
                                       f"host{i}_we", duplicate=True)
                rams = hp.block_rams
                if (hp.kernel, hp.slot) not in ring_places:       # a weight: not while a beat runs
                    flags = root_copies("flags", host_flags, "host_flags_", init=1)
                    roots[flags.name] = flags
                    stops, runs = flags[0], flags[1]
                    we = we & flag_copies("free", stops & (runs | ~self.start), "host_free_", init=1)
                m.d.comb += [
                    waddr.eq(data_copies(("addr", len(waddr)), self.host_addr[:len(waddr)], f"host_addr{len(waddr)}_",
                                         weight=rams)),
                    wdata.eq(data_copies(("wdata", len(wdata)), self.host_wdata[:len(wdata)], f"host_wdata{len(wdata)}_",
                                         weight=rams)),
                    self.port(hp.kernel, hp.slot, "we").eq(we)]
            if hp.read:
                raddr = Mux((self.host_rsel == i) & (self.host_raddr < hp.depth), self.host_raddr, 0)
                m.d.comb += self.port(hp.kernel, hp.slot, "raddr").eq(
                    registered(m, raddr, f"host{i}_raddr", duplicate=True, reset_less=True))
                read_ports.append((i, hp))
        self.beat_copies["running"][1].extend(flags[1] for flags in roots.values())
        self._registered_read(m, read_ports, self.host_rsel, sync_reads)

    def _host_written(self, place: Place) -> bool:
        return any(hp.write and (hp.kernel, hp.slot) == place for hp in self.host_ports)
