"""One kernel as an Amaranth component: its memories, datapath and controller.

Memories: one per buffer the kernel touches, holding raw bit patterns. Read port 0 of every
memory and its write port are shared with the outside (`b{slot}_raddr/rdata/waddr/wdata/we`)
while the kernel is idle, so a host or the top module can load inputs and read results.
A step that loads a buffer at several addresses at once gets more read ports.

Read timing: with mem_read="sync" (block RAM) a read port returns data one cycle after its
address. The controller computes the *next* step and counter values combinationally and
drives every read address from them, so the data is there when the step executes: no extra
cycles. A store followed by a load of the same buffer in the next step is handled by making
the read ports transparent to the kernel's own write port. With mem_read="comb" addresses
come from the current step and counters.

Timing: `start` is sampled while idle; steps execute in the following cycles, one per cycle;
`done` is high for one cycle right after the last step (`done_next` in the cycle before it, and
`done_next2` in the one before that where the pipeline holds `last` that long: commit >= 1). A
kernel run therefore takes `Program.cycles + 1` cycles from the start cycle to the done cycle.

Pipelined (fp_pipeline > 0, see pipeline.py): steps still issue one per cycle, but a step's
stores commit C = Schedule.commit cycles after it issues, driven by the step id and counters
delayed C cycles; accumulators are read and written in stage D = Schedule.depth. `done` rises
C cycles later, so a run takes `Program.cycles + 1 + C` cycles. The memories the kernel
stores into take outside writes only once the pipeline has drained (`busy` stays high until
then); the top never writes a running kernel's memories.

One module (~660 lines) because the controller, the datapath's wiring and the pipeline's
delayed control share one set of signals per kernel; split, each part would re-derive them.
"""
from __future__ import annotations

import collections
import functools
import operator

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from .. import ir
from .bram import BLOCK_STYLE, memory_tail
from ..config import HardwareConfig
from ..dtypes import DType
from ..ranges import Interval, acc_ranges, acc_width, analyze
from .datapath import DATA, Copies, Datapath, Env, from_bits, registered
from .pipeline import FANOUT_LEVEL, Schedule, affine_form, is_gather
from ..timing_model import word_read_registered
from .program import Program, Step, build_program
from .subword import WordMemory, host_alone, read_modify_write
from .tail import tailed_memory
from ..synth.rtlil_text import ROM_ATTRIBUTE

# A clocked read port that is not transparent to the write port reads the old word when both
# touch one address in one cycle (Amaranth's semantics). A block RAM does not promise that
# between its two ports, so Yosys's memory_libmap emulates it: registers on the write port's
# address, data and enable (which opt_merge then shares between all memories) and logic on the
# read data. On the 16x16 int8 GEMV that put one flip-flop on the write address of 64 block
# RAMs across the die, its critical path (15.4 ns of routing); on the 8x8 GEMV at fp_pipeline 2
# the emulation was 22% of the LUTs (2,843 -> 2,208). No result of the compiler's depends on
# it: the kernel's own stores go to transparent ports, everything else writes while the kernel
# is quiet (copies, and the host bus, whose read data after a write cycle is undefined:
# hw/top.py), and the one overlap (a copy's last write and the kernel's first read) is
# transparent too (written_outside), where there is one (KernelHW._reads_trail_start). So such
# memories say `no_rw_check` (a collision's read data is undefined): the exported Verilog
# carries the attribute to Yosys or another tool, and
# compiler/synth/area.py turns it into the read ports' collision masks for the explorer's synthesis.
# tests/test_cxxrtl.py simulates designs with every such port made transparent instead (the
# other answer): the outputs stay bit-exact.
NO_RW_CHECK = {"no_rw_check": 1}

STORE_GROUP = 4
"""Memories one registered store flag selects (KernelHW._stores with target_mhz)."""

ACC_GROUP = 4
"""Accumulators one registered update flag selects (KernelHW._accumulators, from FANOUT_LEVEL)."""

SELECT_GROUP = 8
"""Read-data bits of a ring's bank that one registered bank choice selects (from FANOUT_LEVEL,
KernelHW._ring_memory)."""

ADDRESS_GROUP = 8
"""Memories sharing one first-level read-address register when the address goes through two
levels (fp_pipeline 3, KernelHW._registered_addresses): a tree, 8 copies per register."""

ADDRESS_ROOT = ADDRESS_GROUP * ADDRESS_GROUP
"""Memories past which one read address's two levels are a root register per ADDRESS_ROOT
memories (per ADDRESS_ROOT / ADDRESS_GROUP copies) and a copy of it per ADDRESS_GROUP of one
outer lane, each driving its memories' ports, instead of a first-level register per
ADDRESS_GROUP and a copy per memory (KernelHW._registered_addresses)."""


def _acc_shape(d: DType, width: int):
    if d.is_float:
        return unsigned(d.bits)
    return signed(width) if d.signed else unsigned(width)


def _addr_shape(depth: int):
    return unsigned(max(1, (depth - 1).bit_length()))


def acc_shape(a: ir.AccDecl, config: HardwareConfig):
    """The shape of accumulator `a`'s register: `config.acc_width` bits when set (an integer
    reduction: it wraps there); else, for an integer accumulator with proven bounds
    (compiler/bounds.py), the narrowest shape holding them (a 784-long int8 dot product: 25
    bits, not int32's 32); else its dtype's."""
    if a.bounds is not None and config.acc_width is None and a.dtype.is_int and not a.dtype.is_bool:
        return Interval(*a.bounds).shape
    return _acc_shape(a.dtype, acc_width(a.dtype, config))


def port_names(slot: int) -> dict[str, str]:
    return {k: f"b{slot}_{k}" for k in ("raddr", "rdata", "waddr", "wdata", "we", "xaddr", "xdata")}


@ir.per_kernel
def read_ports(kernel: ir.KernelIR, program: Program) -> tuple[dict[tuple[int, int, int], int], dict[int, int]]:
    """Read ports each memory needs: ((step, buffer slot, id(index expression)) -> port number
    of that load's buffer, buffer slot -> number of ports). Loads of one buffer at the same
    index in a step share a port (index expressions may be shared between buffers too).
    Gathers (pipeline.is_gather) get ports of their own after every step's look-ahead ports:
    they are addressed in a later stage, while the next step's look-ahead reads go on.
    Remembered per kernel and program (ir.per_kernel): read, never change, what it returns."""
    out: dict[tuple[int, int, int], int] = {}
    ahead: dict[int, int] = {}                       # buffer -> look-ahead ports (any step)
    gathered: list[tuple[int, int, list[int]]] = []  # (step, buffer, gather index ids)
    for step in program.steps:
        used: dict[int, tuple[list[int], list[int]]] = {}
        for load in loads_of(step):
            indices = used.setdefault(load.buf, ([], []))[1 if is_gather(load) else 0]
            if id(load.index) not in indices:
                indices.append(id(load.index))
        for buf, (plain, gathers) in used.items():
            for p, index in enumerate(plain):
                out[(step.index, buf, index)] = p
            ahead[buf] = max(ahead.get(buf, 0), len(plain))
            if gathers:
                gathered.append((step.index, buf, gathers))
    count = {b.slot: max(1, ahead.get(b.slot, 0)) for b in kernel.buffers}
    for step, buf, gathers in gathered:
        for j, index in enumerate(gathers):
            out[(step, buf, index)] = ahead.get(buf, 0) + j
        count[buf] = max(count[buf], ahead.get(buf, 0) + len(gathers))
    return out, count


def run_cycles(program: Program, sched: Schedule) -> int:
    """Cycles of a kernel's run, from its start cycle to its done cycle: its steps, + 1 for
    done, + the stages a step's stores trail it by (Schedule.commit; 0 without fp_pipeline)."""
    return program.cycles + 1 + sched.commit


def is_pipelined(kernel: ir.KernelIR, program: Program) -> bool:
    """Whether `kernel` can take a new sample every cycle (KernelHW.pipelined)."""
    return len(program.steps) == 1 and not program.steps[0].loops and not kernel.accs


def loads_of(step: Step) -> list[ir.Load]:
    roots = [v for s in step.stores for v in ir.store_operands(s)]
    return [v for v in ir.toposort(roots) if isinstance(v, ir.Load)]


class _ExternalPort:
    """A read port of a memory outside this kernel (share_buffers): address out, data in."""

    def __init__(self, slot: int, width: int, depth: int):
        self.addr = Signal(_addr_shape(depth), name=f"x{slot}_addr")
        self.data = Signal(width, name=f"x{slot}_data")


class _RingWrite:
    """The kernel's write port of a ring memory: the bank it uses takes these."""

    def __init__(self, slot: int, width: int, depth: int):
        self.addr = Signal(_addr_shape(depth), name=f"b{slot}_own_waddr")
        self.data = Signal(width, name=f"b{slot}_own_wdata")
        self.en = Signal(name=f"b{slot}_own_we")


class _BankPort:
    """A bank's read port inside a packed memory (packing.py): the address of the group's
    first bank drives the shared port; every bank sees its own field of the word."""

    def __init__(self, slot: int, p: int, width: int, depth: int):
        self.addr = Signal(_addr_shape(depth), name=f"b{slot}_p{p}_addr")
        self.data = Signal(width, name=f"b{slot}_p{p}_data")
        # high while the kernel's own (registered) address is on the port: driven for port 0
        # of a memory written a word at a time, whose read-modify-write takes the port otherwise
        self.reading = Signal(name=f"b{slot}_p{p}_reading")


def ring_in_one_memory(config: HardwareConfig, schedule: Schedule, b: ir.BufferDecl,
                       read_outside: frozenset[int] | None) -> bool:
    """Whether ring slot `b` is one memory, its bank the high bits of every address
    (KernelHW.ring_strides): a ring the kernel only reads and nothing outside reads, from
    FANOUT_LEVEL with clocked reads. Built as a memory per bank, the kernel's read data came
    through a choice by bank, so no load register could be a block RAM's output register (the
    digits CNN in dataflow at target_mhz 200: a ring's block RAM -> the bank choice -> a load,
    7.3-7.5 ns, 5.8 of it the block's clock-to-out, its critical path at every seed of three).
    Not an output ring (the kernel writes, the outside reads): in one memory, the digits CNN's
    (LUT RAM) were read through their deeper multiplexers, 140.6 MHz (median of three seeds)
    against 155.4 as a memory per bank."""
    return config.mem_read == "sync" and schedule.level >= FANOUT_LEVEL and b.loaded and not b.stored \
        and read_outside is not None and b.slot not in read_outside


def ring_stride(size: int) -> int:
    """Words between the banks of a ring in one memory: the span of a bank's (`size` words)
    address bits."""
    return 1 << _addr_shape(size).width


class KernelHW(wiring.Component):
    """`names`: memory module names by buffer slot (default `mem_b{slot}`); `packs`: banks
    that share one memory, several elements per word (packing.Pack); `external`: slots
    whose memory lives in another kernel (one read port, reached through `b{slot}_xaddr`
    and `b{slot}_xdata`; the top module connects it); `written_outside`: slots the top module
    writes right before this kernel starts (copy destinations): with block RAM their read
    ports see that last write (the first step's look-ahead read happens in the same cycle);
    `read_outside`: slots whose port 0 the top module also addresses (host reads, copies from
    them, another kernel reading them in place; None: any slot may be); `rings`: slots whose
    memory is R banks in a ring (schedule=dataflow): the kernel uses bank `b{slot}_kbank`, the
    outside ports (host bus, copies, a reader in place) bank `b{slot}_obank` (hw/dataflow.py);
    `host_written`: slots the host bus writes (None: any may be); `write_groups`: packed
    memories (packing.Pack) written a word at a time that share one read-modify-write (subword.py
    share_groups: the host bus alone writes them, one bank a cycle, all from the same address
    and data copies);
    `schedule`: the kernel's pipeline schedule, made by Design.schedules (which the cycle model
    and the delay model read too), with the rings and the external memories read on time;
    `store_delay`: cycles its stores into a ring trail their steps where the stores spill into
    the next beat (stage_overlap): they take `kbank` that many cycles late, the bank of the
    beat their step issued in, while the next sample's reads take the new one."""

    def __init__(self, kernel: ir.KernelIR, config: HardwareConfig, names: dict[int, str] | None = None,
                 external: frozenset[int] = frozenset(), written_outside: frozenset[int] = frozenset(),
                 packs: tuple = (), read_outside: frozenset[int] | None = None,
                 rings: dict[int, int] | None = None, host_written: frozenset[int] | None = None, *,
                 schedule: Schedule, write_groups: tuple[tuple, ...] = (), block_reads: frozenset[int] = frozenset(),
                 one_memory_rings: frozenset[int] = frozenset(), store_delay: int = 0,
                 outer_lanes: dict[int, int] | None = None):
        self.kernel, self.config = kernel, config
        # bank slot -> its lane along its buffer's outermost unrolled dimension (Design._outer_lanes)
        self.outer_lanes = dict(outer_lanes or {})
        self.store_delay = store_delay
        # slots whose memory goes to block RAM where Yosys would build LUT RAM (Design.block_reads)
        self.block_reads = frozenset(block_reads)
        # ring slots built as one memory, bank k from address k * ring_strides[slot]
        # (ring_in_one_memory; Design.one_memory_rings)
        self.one_memory_rings = frozenset(one_memory_rings)
        # schedule=dataflow: slot -> R, memories that rotate through R banks (hw/dataflow.py)
        self.rings = dict(rings or {})
        self.program: Program = build_program(kernel)
        self.external = frozenset(external)
        self.schedule = schedule
        self.ranges: dict[int, Interval] = analyze(kernel, acc_ranges(kernel, config))
        self.decls = {b.slot: b for b in kernel.buffers}
        self.names = {b.slot: (names or {}).get(b.slot, f"mem_b{b.slot}") for b in kernel.buffers}
        self.written_outside = frozenset(written_outside)
        self.read_outside = None if read_outside is None else frozenset(read_outside)
        self.host_written = None if host_written is None else frozenset(host_written)
        self.packs = {s: p for p in packs for s in p.slots}
        self.write_groups = tuple(write_groups)
        self.write_group = {p.name: g for g, group in enumerate(write_groups) for p in group}
        # The contents live in MemoryData objects that outlast any one elaboration (simulators
        # poke them); each elaboration wraps them in a fresh Memory with its own ports. The
        # banks of a packed memory share one MemoryData.
        self.memories: dict[int, memory.MemoryData] = {}
        # mem_tail="lut": the words past the block-RAM rows, in a LUT-RAM memory (hw/tail.py)
        self.tails: dict[int, memory.MemoryData] = {}
        # ring slots: every bank's MemoryData, bank 0 first (bank 0 is also self.memories[slot]);
        # a ring in one memory (ring_in_one_memory): that one for every bank, bank k's words
        # from address k * ring_strides[slot]
        self.ring_memories: dict[int, tuple[memory.MemoryData, ...]] = {}
        self.ring_strides: dict[int, int] = {}
        sig = {"start": In(1), "done": Out(1), "done_next": Out(1), "busy": Out(1)}
        if self.schedule.commit >= 1:
            sig["done_next2"] = Out(1)
        for b in kernel.buffers:
            n = port_names(b.slot)
            if b.slot in self.external:
                if b.stored:
                    raise ValueError(f"{kernel.name}: buffer {b.slot} is written, it cannot live in another kernel")
                sig[n["xaddr"]] = Out(_addr_shape(b.size))
                sig[n["xdata"]] = In(b.width)
                continue
            pack = self.packs.get(b.slot)
            if b.slot in self.rings:
                if pack is not None:
                    raise ValueError(f"{kernel.name}: buffer {b.slot} rotates through banks, it cannot be packed")
                R = self.rings[b.slot]
                if b.slot in self.one_memory_rings:
                    stride = self.ring_strides[b.slot] = ring_stride(b.size)
                    banks = (memory.MemoryData(shape=unsigned(b.width), depth=stride * (R - 1) + b.size, init=[]),) * R
                else:
                    banks = tuple(memory.MemoryData(shape=unsigned(b.width), depth=b.size, init=[]) for _ in range(R))
                self.ring_memories[b.slot] = banks
                self.memories[b.slot] = banks[0]
                sig[f"b{b.slot}_kbank"] = In(range(self.rings[b.slot]))
                sig[f"b{b.slot}_obank"] = In(range(self.rings[b.slot]))
            elif b.slot not in self.memories:
                slots, width = (b.slot,), b.width
                if pack is not None:
                    slots, width = pack.slots, pack.width * len(pack.slots)
                # a ROM (weights="constant") is initialised with its words (at the width of its
                # bounds: compiler/bounds.py; the words fit, compiler/weights.py) and has no tail
                tail = 0 if b.rom is not None else memory_tail(config, b.size, width, b.stored)
                data = memory.MemoryData(shape=unsigned(width), depth=b.size - tail, init=[w & ((1 << width) - 1) for w in b.rom or ()])
                self.memories.update({s: data for s in slots})
                if tail:
                    data = memory.MemoryData(shape=unsigned(width), depth=tail, init=[])
                    self.tails.update({s: data for s in slots})
            sig[n["raddr"]] = In(_addr_shape(b.size))
            sig[n["rdata"]] = Out(b.width)
            sig[n["waddr"]] = In(_addr_shape(b.size))
            sig[n["wdata"]] = In(b.width)
            sig[n["we"]] = In(1)
        self.read_port_of, self.n_read_ports = read_ports(kernel, self.program)
        for slot in self.external:
            if self.n_read_ports[slot] > 1:
                raise ValueError(f"{kernel.name}: buffer {slot} needs {self.n_read_ports[slot]} read ports, "
                                 f"it cannot live in another kernel")
        super().__init__(sig)

    @property
    def cycles(self) -> int:
        """Cycles from the start cycle to the done cycle."""
        return run_cycles(self.program, self.schedule)

    def elaborate(self, platform):
        m = Module()
        k, prog, sched = self.kernel, self.program, self.schedule
        sync_reads = self.config.mem_read == "sync"
        idle = len(prog.steps)
        step = Signal(range(idle + 1), init=idle)
        nstep = Signal.like(step)
        ctr = {l.id: Signal(range(l.bound), name=f"i{l.id}") for l in k.loops.values()}
        nctr = {i: Signal.like(c, name=f"i{i}_next") for i, c in ctr.items()}
        last = Signal()
        accs = {a.index: Signal(acc_shape(a, self.config), name=f"acc{a.index}") for a in k.accs}
        # quiet: idle, and no store left in the pipeline. It gates the outside write enable of
        # every memory the kernel stores into (_memories), so it is a register, computed a
        # cycle ahead from what the stages' step ids become (step <= nstep, step_d1 <= step,
        # ...): the same value in every cycle, but no comparison of step ids on the way to the
        # block RAMs (on the int8 GEMV 26x17 that path, through the host bus's enable, was the
        # critical one: 16.9 ns). From FANOUT_LEVEL each such memory registers its own copy.
        quiet_next = Signal()
        quiet = Signal(init=1)
        m.d.sync += quiet.eq(quiet_next)

        def quiet_for(name: str) -> Signal:
            if sched.level < FANOUT_LEVEL:
                return quiet
            return registered(m, quiet_next, f"{name}_quiet", init=1, duplicate=True)

        write, reads = self._memories(m, quiet_for, sync_reads)
        dp = Datapath(k, self.ranges, self.config, accs, sched)
        # the scaled counters' registers are made on demand as addresses are built, some inside
        # a step's `with m.Case`: in the datapath's module, where no such block is open
        scaled = _Scaled(dp.m, ctr, prog, nstep, nctr) if self.config.target_mhz else None
        self._controller(m, step, nstep, ctr, nctr, last, idle, scaled)

        # ---- datapath, and the step ids, counters and `last` as each pipeline stage sees them
        m.submodules.datapath = dp.m
        delays = _Delays(dp)
        # done_next is high in the cycle before done (the top looks ahead with it: TopHW)
        m.d.comb += self.done_next.eq(delays.of(last, sched.commit, "last", control=True))
        if sched.commit >= 1:
            m.d.comb += self.done_next2.eq(delays.of(last, sched.commit - 1, "last", control=True))
        m.d.sync += self.done.eq(self.done_next)
        m.d.comb += quiet_next.eq(nstep == idle)
        for d in range(0, sched.commit):
            with m.If(delays.of(step, d, "step", control=True) != idle):
                m.d.comb += quiet_next.eq(0)
        m.d.comb += self.busy.eq(~quiet)
        counter_at = lambda i, stage: delays.of(ctr[i], stage, f"i{i}")            # noqa: E731

        if sync_reads and sched.lookahead:   # look-ahead: the next step's addresses
            addr_env, addr_step = Env("next", lambda i, stage: nctr[i], None, None, scaled=scaled and scaled.next,
                                      sums=scaled and scaled.sum_next), nstep
        else:
            addr_env, addr_step = Env("cur", counter_at, None, None, scaled=scaled and scaled.cur,
                                      sums=scaled and scaled.sum_cur), step
        if sched.address_levels:
            self._registered_addresses(m, dp, reads, addr_env, addr_step)
        else:
            self._addresses(m, dp, reads, addr_env, addr_step, None if sync_reads else 0)

        envs = {s.index: Env("cur", counter_at, s.index, self._load_data(s, reads, delays),
                             self._load_data(s, reads, delays, before=1) if sched.early else None,
                             scaled and scaled.cur)
                for s in prog.steps}
        self._gather_addresses(m, dp, reads, envs, delays, step)
        acc_before = [delays.of(step, sched.depth - n, "step", control=True) for n in (1, 2) if n <= sched.depth] \
            if sched.level >= FANOUT_LEVEL and sched.depth >= 1 else None
        self._accumulators(m, dp, envs, accs, delays.of(step, sched.depth, "step", control=True), acc_before)
        before = delays.of(step, sched.commit - 1, "step", control=True) \
            if self.config.target_mhz and sched.commit >= 1 else None
        self._stores(m, dp, envs, write, delays.of(step, sched.commit, "step", control=True), before)
        return m

    def _memories(self, m, quiet_for, sync_reads: bool):
        """One memory per buffer slot (or a read port of another kernel's, `external`).
        Returns (write ports, read ports). A memory the kernel stores into shares its write
        port between the kernel and the outside (host bus, copies), which writes only while the
        kernel is quiet (`quiet_for(memory name)`). From FANOUT_LEVEL one the kernel only reads
        takes the outside's writes as they come: the top writes a kernel's memories only while
        that kernel is not running (hw/top.py), and the gate is one more signal to every block
        RAM (below, it stays: the designs' areas are unchanged)."""
        def gate(b: ir.BufferDecl, name: str) -> Value:
            return quiet_for(name) if b.stored or self.schedule.level < FANOUT_LEVEL else Const(1, 1)

        write, reads = {}, {}
        # a plain memory's outside write (address, data, enable), which _stores may select by
        # its enable rather than by the kernel's store flag
        self.outside_writes: dict[int, tuple[Value, Value, Value]] = {}
        grouped: dict[int, list[WordMemory]] = {}       # write group -> its memories built so far
        for b in self.kernel.buffers:
            n = port_names(b.slot)
            if b.slot in self.external:
                port = _ExternalPort(b.slot, b.width, b.size)
                reads[b.slot] = [port]
                m.d.comb += [getattr(self, n["xaddr"]).eq(port.addr), port.data.eq(getattr(self, n["xdata"]))]
                continue
            if b.slot in self.rings:
                write[b.slot], reads[b.slot] = self._ring_memory(m, b, sync_reads)
                continue
            if b.slot in self.packs:
                if b.slot == self.packs[b.slot].slots[0]:
                    self._packed_memory(m, b, self.packs[b.slot], gate(b, self.packs[b.slot].name), sync_reads, reads,
                                        grouped)
                continue
            if b.rom is not None:            # read-only: no write port, nothing writes it
                _, reads[b.slot] = self._memory(m, self.names[b.slot], b.slot, None, sync_reads, False, writable=False)
                m.d.comb += getattr(self, n["rdata"]).eq(reads[b.slot][0].data)
                continue
            own_writes = b.stored or (b.slot in self.written_outside and not self._reads_trail_start)
            transparent = b.loaded and own_writes and sync_reads
            wp, reads[b.slot] = self._memory(m, self.names[b.slot], b.slot, None, sync_reads, transparent)
            write[b.slot] = wp
            we = getattr(self, n["we"])
            outside_en = we & gate(b, self.names[b.slot])
            m.d.comb += [getattr(self, n["rdata"]).eq(reads[b.slot][0].data),
                         wp.addr.eq(getattr(self, n["waddr"])), wp.data.eq(getattr(self, n["wdata"])),
                         wp.en.eq(outside_en)]
            self.outside_writes[b.slot] = (getattr(self, n["waddr"]), getattr(self, n["wdata"]), outside_en)
        for g, members in grouped.items():
            # one read-modify-write for the group, from its first memory's address and data
            # ports (the others' carry the same: copies of the host bus's registers)
            head = self.write_groups[g][0]
            ports = port_names(head.slots[0])
            read_modify_write(m, f"{head.name}_g", members, waddr=getattr(self, ports["waddr"]),
                              data=getattr(self, ports["wdata"]), width=head.width, registered_read=True)
        return write, reads

    def _one_memory_ring(self, m, b: ir.BufferDecl, domain: str, attrs: dict):
        """Ring slot `b` as one memory (ring_in_one_memory): the outside writes bank `obank`, the
        kernel reads bank `kbank`, each bank's index above the bank's address bits."""
        slot, ports = b.slot, port_names(b.slot)
        kbank, obank = getattr(self, f"b{slot}_kbank"), getattr(self, f"b{slot}_obank")
        if slot in self.block_reads:
            attrs = {**attrs, **BLOCK_STYLE}
        mem = memory.Memory(data=self.ring_memories[slot][0], attrs=attrs)
        m.submodules[self.names[slot]] = mem
        wp = mem.write_port()
        m.d.comb += [wp.addr.eq(Cat(getattr(self, ports["waddr"]), obank)), wp.data.eq(getattr(self, ports["wdata"])),
                     wp.en.eq(getattr(self, ports["we"]))]
        own_w = _RingWrite(slot, b.width, b.size)
        m.d.comb += [own_w.addr.eq(0), own_w.data.eq(0), own_w.en.eq(0)]
        own_r = [_BankPort(slot, p, b.width, b.size) for p in range(self.n_read_ports[slot])]
        for port in own_r:
            rp = mem.read_port(domain=domain)
            m.d.comb += [rp.addr.eq(Cat(port.addr, kbank)), port.data.eq(rp.data)]
        return own_w, own_r

    def _ring_memory(self, m, b: ir.BufferDecl, sync_reads: bool):
        """R memories of one buffer slot (`name`, `name_r1`, ...): the kernel's stores and
        loads go to bank `kbank`, the outside write port and read port 0 to bank `obank` (the
        top keeps them apart: never equal). Returns (write port, read ports) as the kernel
        sees them: signals the banks are driven from, the read data taken from bank kbank."""
        n, slot, name = self.n_read_ports[b.slot], b.slot, self.names[b.slot]
        ports = port_names(slot)
        kbank, obank = getattr(self, f"b{slot}_kbank"), getattr(self, f"b{slot}_obank")
        domain = "sync" if sync_reads else "comb"
        transparent = b.loaded and b.stored and sync_reads      # a step's load after its own store
        attrs = NO_RW_CHECK if sync_reads and not transparent else {}
        if slot in self.ring_strides:
            return self._one_memory_ring(m, b, domain, attrs)
        own_w = _RingWrite(slot, b.width, b.size)
        own_r = [_BankPort(slot, p, b.width, b.size) for p in range(n)]
        m.d.comb += [own_w.addr.eq(0), own_w.data.eq(0), own_w.en.eq(0)]
        # the read data comes from the bank the address went to: as old as the data
        spread = sync_reads and self.schedule.level >= FANOUT_LEVEL
        outside_writes_it = slot in self.written_outside or self.host_written is None or slot in self.host_written
        outside_reads_it = self.read_outside is None or slot in self.read_outside
        kb = registered(m, kbank, f"b{slot}_kbank_q") if sync_reads and not spread else kbank
        wbank = kbank                   # the bank the stores take: their step's (store_delay)
        for d in range(self.store_delay if b.stored else 0):
            wbank = registered(m, wbank, f"b{slot}_wbank_d{d + 1}")
        ob = registered(m, obank, f"b{slot}_obank_q") if sync_reads and not spread else obank

        def from_bank(bank: Value, bank_q: Value, i: int, data: Value, what: str) -> Value:
            """`data` if bank i is the one read (a cycle ago with clocked reads), else 0. From
            FANOUT_LEVEL the choice is a register per SELECT_GROUP bits of the data: one register
            choosing among the banks of a wide ring drove 333 loads across the die on the
            fine-tuned KWS network, 19.0 ns of routing from its output-bank register to the next
            kernel's memories (its critical path)."""
            if not spread:
                return Mux(bank_q == i, data, 0)
            return Cat(*(Mux(registered(m, bank == i, f"b{slot}_{what}{i}_sel{lo // SELECT_GROUP}", duplicate=True),
                             data[lo:lo + SELECT_GROUP], 0) for lo in range(0, len(data), SELECT_GROUP)))
        datas: list[list[Value]] = [[] for _ in range(n)]
        outside: list[Value] = []
        for i, data in enumerate(self.ring_memories[slot]):
            mem = memory.Memory(data=data, attrs=attrs)
            m.submodules[name if i == 0 else f"{name}_r{i}"] = mem
            wp = mem.write_port()
            rps = [mem.read_port(domain=domain, transparent_for=(wp,) if transparent else ()) for _ in range(n)]
            mine, theirs = kbank == i, obank == i
            mine_w = wbank == i
            if b.stored and not outside_writes_it:
                # nothing outside writes it (an output ring its reader takes in place or copies
                # from): the bank's data and address are the kernel's whatever the bank, only the
                # enable takes the bank choice, which then drives no data bit (AD08 at target_mhz
                # 200: a ring's bank register through a LUT to a LUT RAM's data, 8.3 ns of routing)
                m.d.comb += [wp.addr.eq(own_w.addr), wp.data.eq(own_w.data), wp.en.eq(mine_w & own_w.en)]
            elif b.stored:
                m.d.comb += [wp.addr.eq(Mux(mine_w, own_w.addr, getattr(self, ports["waddr"]))),
                             wp.data.eq(Mux(mine_w, own_w.data, getattr(self, ports["wdata"]))),
                             wp.en.eq(Mux(mine_w, own_w.en, getattr(self, ports["we"]) & theirs))]
            else:       # only read here: its one writer is outside (a registered host write may
                        # land in the cycle the kernel takes the bank, before it reads it)
                m.d.comb += [wp.addr.eq(getattr(self, ports["waddr"])), wp.data.eq(getattr(self, ports["wdata"])),
                             wp.en.eq(getattr(self, ports["we"]) & theirs)]
            outside_addr = getattr(self, ports["raddr"])
            for p, rp in enumerate(rps):
                if p > 0 or (b.loaded and not outside_reads_it):
                    # (port 0 where nothing outside reads the ring: the kernel's address in every
                    # bank, ungated; no one reads the words of the others. Chosen by the bank, the
                    # input ring of the digits CNN in dataflow at target_mhz 200 took `kbank`
                    # across the die into every LUT RAM's read address: 8.1 ns, 6.7 of it routing)
                    m.d.comb += rp.addr.eq(own_r[p].addr)
                elif b.loaded:          # port 0: the kernel's in its bank, the outside's in the others
                    m.d.comb += rp.addr.eq(Mux(mine, own_r[0].addr, outside_addr))
                else:
                    # the kernel never reads it (an output ring): port 0 is the outside's alone,
                    # its address ungated (in the bank the kernel writes, no one reads the word);
                    # the choice by bank was a LUT between the reader's address register and
                    # the LUT RAM (the digits CNN at target_mhz 200: its critical path, 8.2 ns)
                    m.d.comb += rp.addr.eq(outside_addr)
                datas[p].append(from_bank(kbank, kb, i, rp.data, "kbank"))
            outside.append(from_bank(obank, ob, i, rps[0].data, "obank"))

        def any_of(values):
            out = values[0]
            for v in values[1:]:
                out = out | v
            return out
        m.d.comb += [port.data.eq(any_of(d)) for port, d in zip(own_r, datas)]
        m.d.comb += getattr(self, ports["rdata"]).eq(any_of(outside))
        return own_w, own_r

    def _packed_memory(self, m, first: ir.BufferDecl, pack, gate: Value, sync_reads: bool, reads, grouped) -> None:
        """One memory for the banks of `pack`: the kernel only reads it (at one address for
        every bank, packing.py), so its write port serves the outside, one enable per bank
        (the host bus and copies write one bank, or all at one address). A memory of a write
        group joins `grouped` (its read-modify-write built with the group's, _memories)."""
        w = pack.width
        transparent = first.loaded and first.slot in self.written_outside and sync_reads and not self._reads_trail_start
        wp, shared = self._memory(m, pack.name, first.slot, None if pack.word_writes else w, sync_reads, transparent)
        waddr = getattr(self, port_names(first.slot)["waddr"])
        fields = []
        for i, slot in enumerate(pack.slots):
            n = port_names(slot)
            reads[slot] = [_BankPort(slot, p, w, pack.depth) for p in range(len(shared))]
            fields.append((getattr(self, n["wdata"]), getattr(self, n["we"]) & gate))
            m.d.comb += getattr(self, n["rdata"]).eq(reads[slot][0].data)
            m.d.comb += [bank.data.eq(port.data[i * w:(i + 1) * w]) for bank, port in zip(reads[slot], shared)]
        own = reads[pack.slots[0]]
        if pack.word_writes:          # one enable: a bank's write reads the word first (subword.py)
            flagged = self._reading_flag(first.slot)
            mem = WordMemory(pack.name, wp, shared[0], own[0].addr, tuple(en for _, en in fields),
                             own[0].reading if flagged else None)
            m.d.comb += [port.addr.eq(bank.addr) for bank, port in zip(own[1:], shared[1:])]
            if pack.name in self.write_group:
                grouped.setdefault(self.write_group[pack.name], []).append(mem)
                return
            # the host bus alone writes it: every bank's data is the bus's (one held copy)
            host_only = self.host_written is not None and host_alone(pack.slots, self.host_written,
                                                                     self.written_outside)
            read_modify_write(m, pack.name, [mem], waddr=waddr,
                              data=fields[0][0] if host_only else [d for d, _ in fields], width=w,
                              registered_read=flagged and word_read_registered(len(pack.slots), w, pack.depth,
                                                                               self.config))
            return
        m.d.comb += wp.addr.eq(waddr)
        for i, (data, en) in enumerate(fields):
            m.d.comb += [wp.data[i * w:(i + 1) * w].eq(data), wp.en[i].eq(en)]
        m.d.comb += [port.addr.eq(bank.addr) for bank, port in zip(own, shared)]

    def _memory(self, m, name: str, slot: int, granularity: int | None, sync_reads: bool, transparent: bool,
                writable: bool = True):
        """The memory of buffer slot `slot` (a packed group's first slot) as module `name`:
        (write port, read ports), its read ports transparent to its write port if asked. With
        a LUT-RAM tail, two memories behind ports that look like one's (hw/tail.py). Not
        `writable`: a ROM, (None, read ports)."""
        domain, n = ("sync" if sync_reads else "comb"), self.n_read_ports[slot]
        if not writable:
            mem = memory.Memory(data=self.memories[slot], attrs={ROM_ATTRIBUTE: 1})
            m.submodules[name] = mem
            return None, [mem.read_port(domain=domain) for _ in range(n)]
        attrs = NO_RW_CHECK if sync_reads and not transparent else {}
        if slot in self.tails:
            return tailed_memory(m, name, self.memories[slot], self.tails[slot], granularity=granularity,
                                 reads=n, domain=domain, transparent=transparent, attrs=attrs)
        if slot in self.block_reads:
            attrs = {**attrs, **BLOCK_STYLE}
        mem = memory.Memory(data=self.memories[slot], attrs=attrs)
        m.submodules[name] = mem
        wp = mem.write_port(granularity=granularity)
        return wp, [mem.read_port(domain=domain, transparent_for=(wp,) if transparent else ()) for _ in range(n)]

    def _controller(self, m, step, nstep, ctr, nctr, last, idle, scaled: "_Scaled | None") -> None:
        """Next step and counters: an odometer over the loop tree (`scaled`: flags of each
        counter's increment and clear, for the registers that follow it)."""
        prog = self.program
        m.d.comb += [nstep.eq(step)] + [nctr[i].eq(c) for i, c in ctr.items()]
        with m.Switch(step):
            with m.Case(idle):
                with m.If(self.start):
                    if prog.first is None:
                        m.d.comb += last.eq(1)
                    else:
                        m.d.comb += nstep.eq(prog.first)
            for s, tr in zip(prog.steps, prog.transitions):
                with m.Case(s.index):
                    self._transition(m, tr.advances, tr.fallthrough, ctr, nctr, nstep, last, idle, scaled)
                    if self.pipelined:          # start again at once: a new sample every cycle
                        with m.If(self.start):
                            m.d.comb += nstep.eq(prog.first)
        m.d.sync += [step.eq(nstep)] + [ctr[i].eq(n) for i, n in nctr.items()]

    @property
    def _reads_trail_start(self) -> bool:
        """Whether the kernel's first read of a memory comes two cycles or more after the cycle
        of its `start`: from FANOUT_LEVEL its read addresses come from the step's own counters
        and pass registers (Schedule.lookahead False), so a copy's last write, which lands at the
        end of that cycle, is in the memory before any read, and the memories copies write need
        not be transparent to them (the module's comment on NO_RW_CHECK). Yosys's bypass for a
        transparent block RAM put a multiplexer between the block and the kernel's read-data
        register, which then could not be the block's output register (the sequential digits
        CNN at target_mhz 200: 5.8 ns of clock-to-out, its critical path at 136 MHz)."""
        return self.schedule.sync_reads and not self.schedule.lookahead

    @property
    def pipelined(self) -> bool:
        """One step, no loop, no accumulator (a merged constant-weight model: passes/chain.py):
        `start` in the step's cycle issues the step again in the next, so the kernel takes a
        sample every cycle while `start` stays high, its pipeline (fp_pipeline) carrying each
        one to its stores. The sequential top raises `start` only while the kernel is idle."""
        return is_pipelined(self.kernel, self.program)

    def _addresses(self, m, dp: Datapath, reads, addr_env: Env, addr_step, addr_stage) -> None:
        """For each read port, the address of the load it serves in the (next) step; the
        outside address on port 0 otherwise."""
        for b in self.kernel.buffers:
            for p, port in enumerate(reads[b.slot]):
                outside = p == 0 and b.slot not in self.external and b.slot not in self.rings
                m.d.comb += port.addr.eq(getattr(self, port_names(b.slot)["raddr"]) if outside else 0)
            with m.Switch(addr_step):
                for s in self.program.steps:
                    loads = [l for l in loads_of(s) if l.buf == b.slot and id(l) not in self.schedule.gather_issue]
                    if not loads:
                        continue
                    with m.Case(s.index):
                        for l in loads:
                            port = reads[b.slot][self.read_port_of[(s.index, l.buf, id(l.index))]]
                            m.d.comb += port.addr.eq(self._in_range(dp, l.index, addr_env, b.size, addr_stage))

    def _gather_addresses(self, m, dp: Datapath, reads, envs, delays: "_Delays", step) -> None:
        """Each gather's address, computed from the data of its step's earlier loads in the stage
        it issues in (Schedule.gather_issue), on its own read port (read_ports)."""
        sizes = {b.slot: b.size for b in self.kernel.buffers}
        for s in self.program.steps:
            for load in (l for l in loads_of(s) if id(l) in self.schedule.gather_issue):
                issue = self.schedule.gather_issue[id(load)]
                port = reads[load.buf][self.read_port_of[(s.index, load.buf, id(load.index))]]
                with m.If(delays.of(step, issue, "step", control=True) == s.index):
                    m.d.comb += port.addr.eq(self._in_range(dp, load.index, envs[s.index], sizes[load.buf], issue))

    def _accumulators(self, m, dp: Datapath, envs, accs, step_d, before: list | None = None) -> None:
        """Accumulators are read and written in stage D (`step_d`: the step id there). An
        interleaved one (ways > 1) is a ring: its new value, computed by its one step, goes
        through registers back to the register read in stage D, `ways` cycles in all.

        With `before` (the step ids one and two stages before D; from FANOUT_LEVEL) each step's
        updates are selected by registered flags instead of by `step_d` decoded in stage D: a
        flag per step from the step id two stages before, and copies of it a stage later, one
        per ACC_GROUP accumulators, so every net on the way is a register's driving a handful
        of loads. One step id decoded for every accumulator was the critical path of AD08 at
        target interval 76 (14.4 ns of routing from k4's step_d12) and of the fine-tuned KWS
        network (12.9 ns)."""
        sched = self.schedule
        rings = {a.index: a.ways for a in self.kernel.accs if a.ways > 1}
        for s in self.program.steps:
            for st in s.stores:
                if isinstance(st, ir.AccStore) and st.acc in rings:
                    w = sched.acc_write[st.acc]
                    value = dp.emit(st.value, envs[s.index], w)
                    for j in range(rings[st.acc] + sched.depth - w - 1):
                        value = dp.register(value, f"acc{st.acc}_ring{j}")
                    m.d.sync += accs[st.acc].eq(value)
        if before is not None:
            flags = _StepFlags(dp.m, ACC_GROUP, before, "acc")
            for s in self.program.steps:
                for st in s.stores:
                    if isinstance(st, ir.AccStore) and st.acc not in rings:
                        with m.If(flags(s.index)):
                            m.d.sync += accs[st.acc].eq(dp.emit(st.value, envs[s.index], sched.depth))
            return
        with m.Switch(step_d):
            for s in self.program.steps:
                with m.Case(s.index):
                    for st in s.stores:
                        if isinstance(st, ir.AccStore) and st.acc not in rings:
                            m.d.sync += accs[st.acc].eq(dp.emit(st.value, envs[s.index], sched.depth))

    def _stores(self, m, dp: Datapath, envs, write, step_c, step_before=None) -> None:
        """Buffer stores, each in its step's commit stage C (`step_c`: the step id there). With
        `step_before` (the step id a stage earlier; target_mhz), each store is selected by a
        registered flag of its own computed from it, a copy per STORE_GROUP memories, instead of
        by `step_c` decoded in the commit stage and fanned out to every memory's write
        multiplexer (the digits MLP at 150 MHz: 3.9 ns of routing from that decode)."""
        sizes = {b.slot: b.size for b in self.kernel.buffers}

        def store(st: ir.BufStore, env) -> None:
            wp = write[st.buf]
            addr, data, en = self._store_port(dp, st, env, sizes[st.buf])
            m.d.comb += [wp.addr.eq(addr), wp.data.eq(data), wp.en.eq(en)]
        stores = [(s, st) for s in self.program.steps for st in s.stores if not isinstance(st, ir.AccStore)]
        writers = collections.Counter(id(write[st.buf]) for _, st in stores)
        if step_before is not None:
            flags = _StepFlags(dp.m, STORE_GROUP, [step_before], "store")
            for s, st in stores:
                if writers[id(write[st.buf])] == 1:
                    self._only_store(m, dp, st, envs[s.index], write[st.buf], flags(s.index), sizes[st.buf])
                else:
                    with m.If(flags(s.index)):
                        store(st, envs[s.index])
            return
        # a memory's one store drives its address and data whatever the step (_only_store):
        # the step decode gates its enable alone, not every bit of its data
        for s, st in stores:
            if writers[id(write[st.buf])] == 1:
                self._only_store(m, dp, st, envs[s.index], write[st.buf], step_c == s.index, sizes[st.buf])
        with m.Switch(step_c):
            for s in self.program.steps:
                env = envs[s.index]
                with m.Case(s.index):
                    for st in s.stores:
                        if not isinstance(st, ir.AccStore) and writers[id(write[st.buf])] > 1:
                            store(st, env)

    def _only_store(self, m, dp: Datapath, st: ir.BufStore, env: Env, wp, flag: Value, size: int) -> None:
        """The one store into a write port: its address and data drive the port whatever the
        step, only the enable takes the store's flag (`flag`: its step decoded, or with
        target_mhz a registered flag), so the data's path into the memory has no gate (a LUT
        level and a route on the GEMVs' critical path into their output memories, and a LUT a
        bit: the int8 GEMV 128x784 at 4 lanes 1,073 -> 969 LUTs). A plain memory takes the
        outside's address and data while the outside writes (its enable: constant 0, so no
        multiplexer at all, where the top never writes it); a ring's kernel port is the
        kernel's alone."""
        addr, data, en = self._store_port(dp, st, env, size)
        if st.buf in self.outside_writes:
            waddr, wdata, outside_en = self.outside_writes[st.buf]
            addr, data = Mux(outside_en, waddr, addr), Mux(outside_en, wdata, data)
        m.d.comb += [wp.addr.eq(addr), wp.data.eq(data)]
        with m.If(flag):
            m.d.comb += wp.en.eq(en)

    def _store_port(self, dp: Datapath, st: ir.BufStore, env: Env, size: int) -> tuple[Value, Value, Value]:
        """A store's address (0 where out of range), data and enable in its commit stage."""
        c = self.schedule.commit
        idx = dp.local(st.index, env, c)
        ok = self._index_ok(dp, st.index, idx, size)
        gate = dp.local(st.gate, env, c) if st.gate is not None else Const(1, 1)
        return Mux(ok, idx, 0), dp.local(st.value, env, c), gate & ok

    def _registered_addresses(self, m, dp: Datapath, reads, addr_env: Env, addr_step) -> None:
        """Read addresses through registers (Schedule.address_levels): the look-ahead address
        of the kernel's own loads is registered before it fans out to the memories (its read
        data arrives a cycle later, in stage 1), and at fp_pipeline 3 registered again in each
        memory's own copy (data in stage 2). The outside port-0 address (host
        reads, copies, readers of a shared memory) bypasses the register, so the host bus and
        copies keep their timing; the kernel's registered flag `own` picks between them. A
        memory nobody outside reads has no such multiplexer: its register alone drives its
        address (the register holds 0 when the kernel loads nothing, as the outside address
        would), so each memory's copy of the address costs flip-flops and no LUTs."""
        k, prog = self.kernel, self.program
        # first-level registers, per equal address: of the address (data) and of the flag `own`,
        # which must be low from a reset on (the outside's reads are served on the next cycle)
        first_addr = Copies(dp.m, ADDRESS_GROUP, reset_less=True)
        first_own = Copies(dp.m, ADDRESS_GROUP, reset_less=False)
        # a root's uses are the first-level copies it feeds
        root_addr = Copies(dp.m, ADDRESS_ROOT // ADDRESS_GROUP, reset_less=True)
        root_own = Copies(dp.m, ADDRESS_ROOT // ADDRESS_GROUP, reset_less=False)

        def cases_of(b: ir.BufferDecl, p: int) -> list[tuple[int, ir.Value]]:
            cases = []
            for s in prog.steps:
                loads = [l for l in loads_of(s) if l.buf == b.slot and id(l) not in self.schedule.gather_issue
                         and self.read_port_of[(s.index, l.buf, id(l.index))] == p]
                if loads:
                    cases.append((s.index, loads[0].index))
            return cases

        # A packed group's later banks drive no port: their copies would be dead flip-flops
        # Yosys must keep.
        driving = {b.slot for b in k.buffers if b.slot not in self.packs or self.packs[b.slot].slots[0] == b.slot}
        cases = {(b.slot, p): cases_of(b, p) for b in k.buffers for p in range(len(reads[b.slot]))}
        # equal keys, equal addresses (banks read in lockstep)
        keys = {(b.slot, p): (tuple(cases[b.slot, p]), b.size, len(port.addr), p == 0 and self._outside_reads(b.slot))
                for b in k.buffers for p, port in enumerate(reads[b.slot])}
        sharing = collections.Counter(key for (slot, _), key in keys.items() if slot in driving)
        for b in k.buffers:
            drives = b.slot in driving
            for p, port in enumerate(reads[b.slot]):
                own_addr = Signal.like(port.addr, name=f"b{b.slot}_p{p}_addr")
                own = Signal(name=f"b{b.slot}_p{p}_own")
                m.d.comb += [own_addr.eq(0), own.eq(0)]
                with m.Switch(addr_step):
                    for step, index in cases[b.slot, p]:
                        with m.Case(step):
                            m.d.comb += [own_addr.eq(self._in_range(dp, index, addr_env, b.size, None)), own.eq(1)]
                outside = p == 0 and self._outside_reads(b.slot)
                flagged = outside or (p == 0 and drives and self._reading_flag(b.slot))
                levels = self.schedule.address_levels + self.schedule.late.get(b.slot, 0)
                key = keys[b.slot, p]
                if levels > 1 and drives and sharing[key] > ADDRESS_ROOT:
                    # So many memories that their first-level registers span the die, where the
                    # route into them from the counters' logic was the int8 GEMV 8x56's critical
                    # path (7.6 ns, 6.0 of it routing): a root register per ADDRESS_ROOT / ADDRESS_GROUP
                    # copies takes the logic, beside the counters; a copy of it per ADDRESS_GROUP
                    # memories of one outer lane (a GEMV's output row: 8 in build order straddled
                    # two rows the placer puts apart) drives their ports, a route from a register.
                    near = key + (self.outer_lanes.get(b.slot),)
                    own_addr = first_addr(near, functools.partial(root_addr, key, own_addr, f"b{b.slot}_p{p}_addr_r"),
                                          f"b{b.slot}_p{p}_addr_t")
                    if flagged:
                        own = first_own(near, functools.partial(root_own, key, own, f"b{b.slot}_p{p}_own_r"),
                                        f"b{b.slot}_p{p}_own_t")
                    levels -= 2
                elif levels > 1 and drives:
                    # A tree: banks read in lockstep have equal addresses; each ADDRESS_GROUP of
                    # memories (in build order, so neighbouring lanes) shares a first-level
                    # register, and every memory registers its own copy of it, placed near its
                    # block RAMs (on the 26x17 GEMV one first-level register drove 111 copies
                    # across the die: 18.5 ns). Kept apart in synthesis (DUPLICATE_ATTRIBUTE).
                    own_addr = first_addr(key, own_addr, f"b{b.slot}_p{p}_addr_t")
                    own = first_own(key, own, f"b{b.slot}_p{p}_own_t") if flagged else own
                    levels -= 1
                elif levels:                   # one level: the banks' registers are one after opt_merge
                    own_addr = dp.register(own_addr, f"b{b.slot}_p{p}_addr_q")
                    own = registered(dp.m, own, f"b{b.slot}_p{p}_own_q") if flagged else own
                    levels -= 1
                for level in range(1, levels + 1):
                    own_addr = dp.register(own_addr, f"b{b.slot}_p{p}_addr_q{level}", duplicate=drives)
                    if flagged:
                        own = registered(dp.m, own, f"b{b.slot}_p{p}_own_q{level}", duplicate=drives)
                if outside:
                    m.d.comb += port.addr.eq(Mux(own, own_addr, getattr(self, port_names(b.slot)["raddr"])))
                else:
                    m.d.comb += port.addr.eq(own_addr)
                if flagged and not outside:
                    m.d.comb += port.reading.eq(own)

    def _outside_reads(self, slot: int) -> bool:
        """Whether the top module also addresses port 0 of slot `slot` (read_outside)."""
        return slot not in self.external and slot not in self.rings and \
            (self.read_outside is None or slot in self.read_outside)

    def _reading_flag(self, slot: int) -> bool:
        """Whether port 0 of slot `slot` (a packed group's first) tells its read-modify-write
        when the kernel reads it (_BankPort.reading): a memory written a word at a time that
        only the kernel reads, with registered addresses (their flag is a register)."""
        pack = self.packs.get(slot)
        return pack is not None and pack.word_writes and bool(self.schedule.address_levels) \
            and not self._outside_reads(slot)

    def _transition(self, m, advances, fallthrough, ctr, nctr, nstep, last, idle, scaled):
        def up(adv) -> None:
            m.d.comb += [nctr[adv.loop.id].eq(ctr[adv.loop.id] + 1), nstep.eq(adv.target)]
            if scaled:
                m.d.comb += scaled.inc[adv.loop.id].eq(1)

        def wrap(adv) -> None:
            m.d.comb += nctr[adv.loop.id].eq(0)
            if scaled:
                m.d.comb += scaled.clear[adv.loop.id].eq(1)

        def end() -> None:
            if fallthrough is None:
                m.d.comb += [nstep.eq(idle), last.eq(1)]
            else:
                m.d.comb += nstep.eq(fallthrough)
        odometer(m, advances, ctr, up, wrap, end)

    def _load_data(self, step: Step, reads, delays: "_Delays", before: int = 0):
        """The read data of a step's loads in stage Schedule.data_stage (registered when the
        schedule says so: one register per read port, shared by every step), or `before` stages
        earlier (the copies of Schedule.early take it before the register)."""
        def data(load: ir.Load) -> Value:
            port = reads[load.buf][self.read_port_of[(step.index, load.buf, id(load.index))]]
            sched = self.schedule
            raw = delays.of(port.data, sched.data_stage(load) - sched.port_stage(load) - before, f"b{load.buf}_rdata")
            return from_bits(raw, load.dtype, self.decls[load.buf])
        return data

    def _index_ok(self, dp: Datapath, node: ir.Value, idx: Value, size: int) -> Value:
        if dp.interval(node).within(Interval(0, size - 1)):
            return Const(1, 1)
        return (idx >= 0) & (idx < size)

    def _in_range(self, dp: Datapath, node: ir.Value, env: Env, size: int, stage: int | None) -> Value:
        """An address that is always inside the memory (out-of-range only happens when the
        load's gate is false, or on steps that ignore the data; CXXRTL aborts on it): a sum
        register (env.sums) where the schedule says so (Schedule.sums), else the index's tree."""
        form = affine_form(node) if env.sums is not None and not stage and id(node) in self.schedule.sums else None
        idx = env.sums(*form, dp.shape(node)) if form is not None else dp.emit(node, env, stage)
        ok = self._index_ok(dp, node, idx, size)
        return idx if isinstance(ok, Const) else Mux(ok, idx, 0)


def odometer(m: Module, advances, ctr: dict[int, Value], up, wrap, end) -> None:
    """A transition's test of its counters, innermost first: up(advance) where the advance's
    counter is below its bound - 1 (it counts up), else wrap(advance) and the next advance's
    test; end() when every one wraps (the controller's _transition, _Scaled's look-ahead flags)."""
    if not advances:
        end()
        return
    adv = advances[0]
    with m.If(ctr[adv.loop.id] != adv.loop.bound - 1):
        up(adv)
    with m.Else():
        wrap(adv)
        odometer(m, advances[1:], ctr, up, wrap, end)


class _Scaled:
    """Counters times constants (`i0 * 196` in a row-major address) as registers of their own,
    which step with their counter: + c where it counts up, 0 where it clears (the flags the
    controller raises beside its counters). The address is then one addition of registers,
    where it was a counter's constant product (two or three carry chains on the GEMVs'
    critical path at target_mhz 200, 2.9 ns of logic) and the addition; with look-ahead the
    next value is a multiplexer of R + c, 0 and R, its sum computed beside the controller's
    decision. Built with target_mhz (a register per (loop, constant) pair, a dozen bits)."""

    def __init__(self, m: Module, ctr: dict[int, Signal], program: Program, nstep: Signal,
                 nctr: dict[int, Signal]):
        self.m = m          # the datapath's module: _pair runs while the kernel's has blocks open
        self.program, self.nstep, self.nctr = program, nstep, nctr
        self.inc = {i: Signal(name=f"i{i}_inc") for i in ctr}
        self.clear = {i: Signal(name=f"i{i}_clear") for i in ctr}
        self.regs: dict[tuple[int, int], tuple[Signal, Signal]] = {}
        self.sums: dict[tuple, tuple[Signal, Signal]] = {}
        self.ahead: dict[tuple[int | None, tuple[int, ...]], Signal] | None = None    # _events_ahead

    def _events_ahead(self) -> dict[tuple[int | None, tuple[int, ...]], Signal]:
        """What a cycle can do to the counters, (the loop that counts up or None, the loops that
        wrap): the controller's transitions (Kernel._transition) count one counter up and wrap
        the ones inside it (tried before it), or wrap all of them. Each with its flag for the
        transition out of the next step and counters (the same odometer on nstep and nctr; none
        while idle, as there), which the sums register: in each cycle then the flag of the
        transition taken in it, with no decode of `step` on the way. Built for the first sum."""
        if self.ahead is None:
            self.ahead = {}
            m = self.m

            def flag(key) -> Signal:
                if key not in self.ahead:
                    up = "none" if key[0] is None else f"i{key[0]}"
                    self.ahead[key] = Signal(name=f"{up}_up_{'_'.join(f'i{l}' for l in key[1]) or 'none'}_wrap_ahead")
                return self.ahead[key]

            def events(loops: list[int]):
                def up(adv) -> None:
                    m.d.comb += flag((adv.loop.id, tuple(loops[:loops.index(adv.loop.id)]))).eq(1)

                def end() -> None:
                    if loops:
                        m.d.comb += flag((None, tuple(loops))).eq(1)
                return up, end
            with m.Switch(self.nstep):
                for s, tr in zip(self.program.steps, self.program.transitions):
                    with m.Case(s.index):
                        up, end = events([a.loop.id for a in tr.advances])
                        odometer(m, tr.advances, self.nctr, up, lambda adv: None, end)
        return self.ahead

    @property
    def _bounds(self) -> dict[int, int]:
        return {a.loop.id: a.loop.bound for tr in self.program.transitions for a in tr.advances}

    def _pair(self, loop: int, c: int, shape) -> tuple[Signal, Signal]:
        if (loop, c) not in self.regs:
            name = f"i{loop}_x{c}".replace("-", "m")
            reg, nxt = Signal(shape, name=name), Signal(shape, name=f"{name}_next")
            self.m.d.comb += nxt.eq(Mux(self.inc[loop], reg + c, Mux(self.clear[loop], 0, reg)))
            self.m.d.sync += reg.eq(nxt)
            self.regs[(loop, c)] = reg, nxt
        return self.regs[(loop, c)]

    def cur(self, loop: int, c: int, shape) -> Signal:
        return self._pair(loop, c, shape)[0]

    def next(self, loop: int, c: int, shape) -> Signal:
        return self._pair(loop, c, shape)[1]

    def _sum(self, terms: tuple[tuple[int, int], ...], const: int, shape) -> tuple[Signal, Signal]:
        """A register holding sum(c * counter) + const for the current counters
        (pipeline.affine_form): a memory index of several counters is then a register, not a tree
        of adders after them (a padded convolution's input index: four carry chains and their
        routes, 12.8 ns, at target_mhz 150). It steps with the counters, for each thing a cycle
        can do to them (_events_ahead) by the constant that changes the sum, +c where a counter
        counts up, -c * (bound - 1) where one wraps. Per constant, a flag of its own registered
        from the events that step by it (one-hot: one event a cycle), so the step is an OR of a few
        flags' constants, a LUT a bit, and one adder adds it. (An adder per event, each beside the
        controller's decision, took the sequential digits CNN 1,417 -> 1,671 LUTs, and the
        decision's fan-out from `step` became its critical path; the counters' flags registered
        and decoded per sum, a flag -> the decode -> the adder, 7.3-7.7 ns with 5.0-5.4 of routes,
        held the convolution at 129-137 MHz against 150.)"""
        key = (terms, const, shape)
        if key not in self.sums:
            name = "s_" + "_".join(f"i{l}x{c}" for l, c in terms).replace("-", "m")
            reg = Signal(shape, name=name, init=const)
            nxt = Signal(shape, name=f"{name}_next")
            coeff, bounds = dict(terms), self._bounds
            by_delta: dict[int, list[Signal]] = {}
            for (up, wrapped), ahead in self._events_ahead().items():
                delta = coeff.get(up, 0) - sum(coeff.get(l, 0) * (bounds[l] - 1) for l in wrapped)
                if delta:
                    by_delta.setdefault(delta, []).append(ahead)
            picks = []
            for n, (delta, events) in enumerate(by_delta.items()):
                flag = Signal(name=f"{name}_by{n}")
                self.m.d.sync += flag.eq(functools.reduce(operator.or_, events))
                picks.append(Mux(flag, delta, 0))
            step = Signal(range(min(0, *by_delta), max(0, *by_delta) + 1), name=f"{name}_step")
            self.m.d.comb += step.eq(functools.reduce(operator.or_, picks, Const(0, 1)))
            self.m.d.comb += nxt.eq(reg + step)
            self.m.d.sync += reg.eq(nxt)
            self.sums[key] = reg, nxt
        return self.sums[key]

    def sum_cur(self, terms, const: int, shape) -> Signal:
        return self._sum(terms, const, shape)[0]

    def sum_next(self, terms, const: int, shape) -> Signal:
        return self._sum(terms, const, shape)[1]


class _StepFlags:
    """Registered flags "the step id is s" as a later stage sees it, a copy per `group` uses
    (Copies), from `before`, the step ids one stage before it (the copies compare it) or one
    and two stages before (a flag per step registered from the earlier, and copies of that)."""

    def __init__(self, m: Module, group: int, before: list, name: str):
        self.m, self.before, self.name = m, before, name
        self.copies = Copies(m, group, reset_less=False)
        self.firsts: dict[int, Value] = {}

    def __call__(self, s: int) -> Signal:
        if s not in self.firsts:
            first = self.before[-1] == s
            self.firsts[s] = registered(self.m, first, f"{self.name}_s{s}") if len(self.before) > 1 else first
        return self.copies(s, self.firsts[s], f"{self.name}_s{s}_")


class _Delays:
    """Signals as later pipeline stages see them: delay lines of free-running registers,
    built on demand in the datapath's module (so never inside a controller `with` block) and
    shared by every user. A `control` signal's delays reset to its reset value (the step id:
    idle in every stage from a reset on, so no stage acts on the data registers, which are
    reset-less: Datapath.register); counters' and read data's are data."""

    def __init__(self, dp: Datapath):
        self.m = dp.m
        self.chains: dict[int, list[Signal]] = {}

    def of(self, sig: Signal, n: int, name: str, *, control: bool = False) -> Signal:
        chain = self.chains.setdefault(id(sig), [sig])
        while len(chain) <= n:
            reg = Signal.like(chain[-1], name=f"{name}_d{len(chain)}", reset_less=not control,
                              attrs={} if control else DATA)
            self.m.d.sync += reg.eq(chain[-1])
            chain.append(reg)
        return chain[n]
