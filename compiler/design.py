"""Design: the compiled hardware of a model, with everything needed to drive and check it."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from . import ir
from .config import HardwareConfig
from .errors import CompileError
from .frontend import Graph
from .hw.kernel import KernelHW, is_pipelined, read_ports, ring_in_one_memory, ring_stride, run_cycles
from .hw.pipeline import Schedule, kernel_paths, schedule
from .float_timing import slowest_unit
from .timing_model import (DSP_SITE, Estimate, block_ram_copy_ns, delays, in_block_ram, lutram_read_ns, memory_to_dsp_ns,
                           pack_sites, placed, product_ns, product_sites, word_read_registered, word_write_ns)
from .hw.program import Program, build_program
from .hw.dataflow import (Dataflow, DataflowTopHW, beat_cycles, copy_lag, plan_dataflow, slot_banks, spill_beats,
                          stage_hold, weight_slots)
from .hw.top import Copy, HostBuffer, HostPort, Place, Run, Share, TopHW, copy_cycles, plan, registers_copy_data
from .hw.layout import Banking
from .hw.packing import Pack, plan_packs
from .hw.dsp_pack import product_packs
from .hw.bram import HOST_GROUP, MemoryPlace, ecp5_memory, memory_tail
from .hw.subword import host_alone, share_groups


@dataclass(frozen=True)
class CycleModel:
    """Analytic cycle count from the step programs and the phase list (no simulation)."""
    total: int
    kernels: tuple[tuple[str, int], ...]     # (kernel name, cycles including its done cycle and
                                             # its pipeline's drain, fp_pipeline)
    copies: int                              # cycles spent copying buffers between kernels
    # cycles between successive samples in steady state: `total` for a sequential design; for a
    # dataflow one the beat, and `total` the latency (beats x beat: hw/dataflow.py)
    interval: int = 0
    schedule: str = "sequential"


@dataclass(frozen=True)
class MemoryRef:
    """One memory bank of the design, for simulators to poke and peek: the bank's words are
    bits [offset, offset + width) of the words of memory `name` (offset 0 and the memory's
    whole word unless the bank is packed with others, mem_pack)."""
    kernel: int                              # position of its kernel (module `k{kernel}` of the top)
    slot: int                                # buffer slot in that kernel's hardware
    depth: int                               # words
    name: str                                # module name inside the kernel: mem_b1, mem_b1_l3, mem_b1_w0...
    width: int = 0                           # bits of the bank's element words
    offset: int = 0                          # where they sit in the memory's word
    first: int = 0                           # the memory's address of the bank's first word (a
                                             # ring in one memory: KernelHW.ring_strides)

    @property
    def path(self) -> tuple[str, str]:
        return (f"k{self.kernel}", self.name)


@dataclass(frozen=True)
class MemoryUse:
    """A memory a kernel builds (Design.memory_places): kernel position and buffer slot (a
    packed group's first), its words and bits a word (after a LUT-RAM tail), its clocked read
    ports, how many are built (a ring's banks), whether it is the slot's own (not packed, no
    tail, not a ring of a memory per bank: what Design.block_reads may move) and where Yosys puts it."""
    kernel: int
    slot: int
    depth: int
    width: int
    ports: int
    copies: int
    plain: bool
    place: MemoryPlace
    slots: tuple[int, ...] = ()             # every bank it holds (a packed group's), else (slot,)


@dataclass(eq=False)
class Design:
    """A compiled model. The Amaranth top module is built on first use of `top`, so analyses
    (cycle model, overflow) need no hardware objects."""
    graph: Graph
    kernels: tuple[ir.KernelIR, ...]         # in execution order, after the hardware transforms
    config: HardwareConfig
    phases: tuple[Run | Copy, ...]           # kernel runs and copies, in order
    host: tuple[HostBuffer, ...]             # where each model buffer lives
    output_shapes: tuple[tuple[int, ...], ...]
    # the kernels as lowered, before the hardware transforms (same order and slots): what
    # analyses of the computation itself (the overflow proof) read
    source_kernels: tuple[ir.KernelIR, ...] = ()
    # per kernel position: parameter slot -> layout and bank slots (plain when not given)
    banking: tuple[dict[int, Banking], ...] = ()
    shares: tuple[Share, ...] = ()           # readers that use another kernel's memory
    factors: tuple[dict[int, int], ...] = field(default=())   # per kernel: loop id -> lanes
    packs: tuple[tuple[Pack, ...], ...] = ()  # per kernel: banks sharing one memory (mem_pack)
    flow: Dataflow | None = None             # schedule=dataflow: beats, levels, rings (hw/dataflow.py)
    schedule_note: str = ""                  # why a design asked to be dataflow is sequential
    # model buffers built into the hardware (weights="constant"): no memory the host writes
    # holds them, so a simulation cannot set them
    constants: frozenset[int] = frozenset()

    @cached_property
    def copied_banks(self) -> frozenset[Place]:
        """(kernel position, bank slot) of every bank a copy writes (the top, between kernels)."""
        return frozenset((d[0], b) for p in self.phases if isinstance(p, Copy) for d in p.dsts
                         for b in self.banking_of(*d).banks)

    @cached_property
    def host_written_banks(self) -> frozenset[Place]:
        """(kernel position, bank slot) of every bank the host bus writes."""
        return frozenset((hp.kernel, hp.slot) for hp in self.host_ports if hp.write)

    @cached_property
    def top(self) -> TopHW:
        def of(banks: frozenset, pos: int) -> frozenset[int]:
            return frozenset(b for kp, b in banks if kp == pos)
        hw = [KernelHW(k, self.config, self._memory_names(pos), self._external(pos),
                       of(self.copied_banks, pos), self.packs_of(pos), self._read_outside(pos),
                       self._rings(pos), of(self.host_written_banks, pos), schedule=self.schedules[pos],
                       write_groups=self.write_groups[pos], block_reads=self.block_reads[pos],
                       one_memory_rings=self.one_memory_rings[pos],
                       store_delay=self._store_delay(pos), outer_lanes=self._outer_lanes(pos))
              for pos, k in enumerate(self.kernels)]
        placed = {(pos, slot): self.banking_of(pos, slot) for pos, k in enumerate(self.source_kernels or self.kernels)
                  for slot in (b.slot for b in k.buffers)}
        if self.flow is not None:
            return DataflowTopHW(hw, list(self.phases), list(self.host), placed, list(self.shares),
                                 list(self.host_ports), flow=self.flow)
        return TopHW(hw, list(self.phases), list(self.host), placed, list(self.shares), list(self.host_ports))

    def _store_delay(self, pos: int) -> int:
        """Cycles kernel `pos`'s ring stores trail the steps they belong to, where its stores
        spill into later beats (stage_overlap): each store takes the bank of its step's beat."""
        spills = self.flow.spills if self.flow is not None else ()
        return self.schedules[pos].commit if spills and spills[pos] else 0

    @property
    def schedule(self) -> str:
        return "dataflow" if self.flow is not None else "sequential"

    @cached_property
    def write_groups(self) -> tuple[tuple[tuple[Pack, ...], ...], ...]:
        """Per kernel: its packed block RAMs written a word at a time that share one
        read-modify-write (hw/subword.py share_groups): the host bus alone writes them, and the
        kernel alone reads them, through registered addresses (KernelHW._reading_flag). Each
        group's word read is registered (the block's own output register)."""
        d = delays(self.config.timing_part())
        family = d.family

        def members(banks: int, width: int, depth: int) -> int:
            most = max(1, HOST_GROUP // ecp5_memory(depth, banks * width).cells)
            while self.config.target_mhz and most > 1 and word_write_ns(
                    banks, width, depth, d, registered=True, members=most)[0] > 1000.0 / self.config.target_mhz:
                most //= 2
            return most
        groups = []
        for pos, sched in enumerate(self.schedules):
            host, copied, outside = self.host_written_banks, self.copied_banks, self._read_outside(pos)
            alone = [p for p in self.packs_of(pos) if p.word_writes and sched.address_levels
                     and p.slots[0] not in outside and in_block_ram(p.depth, len(p.slots) * p.width, family)
                     and host_alone([(pos, s) for s in p.slots], host, copied)]
            groups.append(tuple(share_groups(alone, members)))
        return tuple(groups)

    @cached_property
    def memory_places(self) -> tuple[MemoryUse, ...]:
        """Every memory the kernels build (a packed group once, a ring bank R times; not the
        memories other kernels read in place, nor constant weights), and where Yosys puts it on
        ECP5 by its own prices (hw/bram.ecp5_memory): what block_reads budgets and the delay
        model times."""
        uses = []
        for pos, (k, prog) in enumerate(zip(self.kernels, self.programs)):
            ports, external, rings = read_ports(k, prog)[1], self._external(pos), self._rings(pos)
            packed = {s: p for p in self.packs_of(pos) for s in p.slots}
            for b in k.buffers:
                if b.slot in external or b.rom is not None or (b.slot in packed and packed[b.slot].slots[0] != b.slot):
                    continue
                pack = packed.get(b.slot)
                width = b.width * (len(pack.slots) if pack else 1)
                enables = len(pack.slots) if pack and not pack.word_writes else 1
                depth = b.size - memory_tail(self.config, b.size, width, b.stored)
                n = max(ports.get(s, 1) for s in (pack.slots if pack else (b.slot,)))
                plain = pack is None and b.slot not in rings and depth == b.size
                copies = rings.get(b.slot, 1)
                if b.slot in self.one_memory_rings[pos]:
                    depth, copies, plain = ring_stride(b.size) * (copies - 1) + b.size, 1, True    # the kernel's own
                uses.append(MemoryUse(pos, b.slot, depth, width, n, copies, plain,
                                      ecp5_memory(depth, width, n, enables), pack.slots if pack else (b.slot,)))
        return tuple(uses)

    @cached_property
    def block_reads(self) -> tuple[frozenset[int], ...]:
        """Per kernel: the slots of memories built in block RAM (hw/bram.BLOCK_STYLE) where Yosys
        would build LUT RAM, because `target_mhz` asks for a clock the LUT RAM's read does not
        reach (timing_model.lutram_read_ns: a deep one's multiplexer of LUT levels) and a block
        RAM's output register does (fp_pipeline's registered read data, LOAD_LEVEL). The slowest
        first, while the part's block RAMs last (the named `device`'s, else the family's
        largest). Memories the kernel only builds of its own (not packed, no tail, not a ring of
        a memory per bank) and reads alone or through a sequential copy that registers its data
        (a read of the top's that does not, the host's, took the block's data unregistered: the sequential digits CNN
        at target_mhz 200, its activations moved before copies registered their data: 5.8 ns of
        clock-to-out into the next kernel's memory, 117 and 92 MHz at 1 and 4 lanes).
        The wine MLP 13-11-7-3 at target_mhz 200 read its 143 x 8 weights through four LUT
        levels (148.5 MHz). A block RAM costs fewer LUTs than the LUT RAM and its multiplexer it
        replaces (143 x 8: 15 LUT4s against 68 and 18 LUT-RAM cells)."""
        none = tuple(frozenset() for _ in self.kernels)
        part = self.config.timing_part()
        if not self.config.target_mhz or self.config.mem_read != "sync" or part.family != "ecp5":
            return none
        d, period = delays(part), 1000.0 / self.config.target_mhz
        used = sum(u.place.cells * u.copies for u in self.memory_places if u.place.kind == "bram")
        outside = [self._read_outside(pos, registered_copies=False) for pos in range(len(self.kernels))]
        slow = sorted(((lutram_read_ns(u.depth, u.width, u.ports, d)[0], u) for u in self.memory_places
                       if u.plain and u.place.kind == "lutram" and u.depth > 1
                       and self.schedules[u.kernel].register_loads and u.slot not in outside[u.kernel]),
                      key=lambda t: (-t[0], t[1].kernel, t[1].slot))
        left, chosen = part.capacity.get("DP16KD", 0) - used, [set() for _ in self.kernels]
        for ns, u in slow:
            blocks = ecp5_memory(u.depth, u.width, u.ports, block=True).cells
            if ns > period and blocks <= left:
                left -= blocks
                chosen[u.kernel].add(u.slot)
        return tuple(frozenset(c) for c in chosen)

    @cached_property
    def one_memory_rings(self) -> tuple[frozenset[int], ...]:
        """Per kernel: the ring slots built as one memory (hw/kernel.ring_in_one_memory), bank k
        from address k * ring_stride, no choice by bank between the memory and the kernel: what
        KernelHW builds, memory_places places and the estimator counts."""
        out = []
        for pos, k in enumerate(self.kernels):
            rings = self._rings(pos)
            outside = self._read_outside(pos) if rings else frozenset()
            out.append(frozenset(b.slot for b in k.buffers if b.slot in rings
                                 and ring_in_one_memory(self.config, self.schedules[pos], b, outside)))
        return tuple(out)

    def _rings(self, pos: int) -> dict[int, int]:
        return {} if self.flow is None else {r.place[1]: r.banks for r in self.flow.rings if r.place[0] == pos}

    def ring_bank(self, ref: "MemoryRef", bank: int) -> "MemoryRef":
        """Bank `bank` of a ring memory (schedule=dataflow): module `<name>_r<bank>` (0: `ref`),
        or in a ring built as one memory, the words from address `bank` * its stride."""
        stride = self.top.kernels[ref.kernel].ring_strides.get(ref.slot)
        if stride is not None:
            return replace(ref, first=bank * stride)
        return ref if bank == 0 else replace(ref, name=f"{ref.name}_r{bank}")

    def banking_of(self, pos: int, slot: int) -> Banking:
        if pos < len(self.banking) and slot in self.banking[pos]:
            return self.banking[pos][slot]
        b = next(b for b in (self.source_kernels or self.kernels)[pos].buffers if b.slot == slot)
        return Banking.plain(slot, b.size)

    def packs_of(self, pos: int) -> tuple[Pack, ...]:
        return self.packs[pos] if pos < len(self.packs) else ()

    def _outer_lanes(self, pos: int) -> dict[int, int]:
        """Bank slot -> its lane along the outermost of two or more unrolled dimensions of its
        buffer (a GEMV's weights: the output row of its lanes x reduce_unroll banks), for the
        banks of such buffers: which banks lie together once placed (KernelHW's address copies)."""
        out = {}
        for bk in (self.banking[pos] if pos < len(self.banking) else {}).values():
            split = [j for j, d in enumerate(bk.layout.dims) if d.factor > 1]
            if len(split) >= 2 and not bk.parts:
                stride = bk.layout.lane_strides[split[0]]
                out.update({slot: lane // stride for lane, slot in enumerate(bk.banks)})
        return out

    def _memory_names(self, pos: int) -> dict[int, str]:
        names = {}
        for slot, bk in (self.banking[pos] if pos < len(self.banking) else {}).items():
            if len(bk.banks) > 1:
                names.update({b: f"mem_b{slot}_l{lane}" for lane, b in enumerate(bk.banks)})
        names.update({s: p.name for p in self.packs_of(pos) for s in p.slots})
        return names

    def _read_outside(self, pos: int, *, registered_copies: bool = True) -> frozenset[int]:
        """Bank slots of kernel `pos` whose read port 0 the top module addresses: host reads
        (outputs), copy sources, memories another kernel reads in place (hw/top.py). Without
        `registered_copies`, not the sources of sequential copies that register their read data
        (hw/top.registers_copy_data): a block RAM's output register holds it, as for the kernel's
        own registered loads."""
        slots = {hp.slot for hp in self.host_ports if hp.read and hp.kernel == pos}
        slots |= {b for sh in self.shares if sh.owner[0] == pos for b in self.banking_of(*sh.owner).banks}
        if registered_copies or self.flow is not None or not registers_copy_data(self.config):
            slots |= {b for ph in self.phases if isinstance(ph, Copy) and ph.src[0] == pos
                      for b in self.banking_of(*ph.src).banks}
        return frozenset(slots)

    def _external(self, pos: int) -> frozenset[int]:
        return frozenset(b for sh in self.shares if sh.reader[0] == pos
                         for b in self.banking_of(*sh.reader).banks)

    @property
    def host_buffers(self) -> dict[int, HostBuffer]:
        return {b.id: b for b in self.host}

    @cached_property
    def host_ports(self) -> tuple[HostPort, ...]:
        """The memory banks on the host bus: `host_sel` is the position in this list."""
        ports = []
        outputs = set(self.graph.outputs)
        for hb in self.host:
            writable = hb.id in self.graph.inputs
            places = hb.holders if writable else ((hb.home,) if hb.id in outputs else ())
            for place in places:
                for ref in self.memories_of(place):
                    ports.append(HostPort(hb.id, ref.kernel, ref.slot, ref.depth, hb.width, writable, not writable,
                                          hb.id in self.narrow_buffers and self.narrow_buffers[hb.id][1]))
        return tuple(ports)

    @property
    def cycles_formula(self) -> int:
        """Cycles from start to done predicted from the step programs (see hw/top.py)."""
        return self.cycle_model().total

    @cached_property
    def programs(self) -> tuple[Program, ...]:
        return tuple(build_program(k) for k in self.kernels)

    @cached_property
    def schedules(self) -> tuple[Schedule, ...]:
        """Per kernel: the pipeline stage of every value (fp_pipeline; hw/pipeline.py), as the
        hardware (KernelHW), the cycle model and the delay model all take it. A ring's banks and
        another kernel's memory are read when the step issues (`keep`: not moved by later_reads)."""
        scheds = [schedule(k, self.config, keep=frozenset(self._rings(pos)) | self._external(pos))
                  for pos, k in enumerate(self.kernels)]
        return tuple(replace(s, product_packs=tuple(p)) if p else s
                     for s, p in zip(scheds, product_packs(self.kernels, scheds, self.config)))

    def timing_estimate(self, luts: float | None = None) -> Estimate:
        """The delay model's slowest path (compiler/timing_model.py) on the part the config
        names (`device`, else LFE5U-85F grade 6): each kernel's integer datapath as scheduled and
        its products' stages (in LUTs where `mul` puts them there: lut, or auto past the part's
        DSPs), the packed memories' read-modify-writes and the LUT RAMs' reads. An estimate of
        what place-and-route will sign off, available before synthesis: a row's
        `fmax_estimate_mhz`, given the design's LUT4s (`luts`, as estimated:
        dse.estimate.fmax_estimate), which bound it by placement (timing_model.placed)."""
        d = delays(self.config.timing_part())
        return placed(self._modelled_path(d), luts, d)

    @cached_property
    def mul_note(self) -> str:
        """With target_mhz and `mul: auto` past the part's DSP blocks, where the DSP products'
        routes make every product of a kernel take more registers than its LUT products alone
        need (Schedule.lut_product_regs), and the LUT products outnumber the DSP ones: what that
        costs the LUT products in flip-flops (lut_multiplier.register_bits), and what `mul: lut`
        would build. "" elsewhere. The w4a8 GEMV 128x784 at 16 x 56, target_mhz 120: every
        product 3 registers, 69,860 FFs, did not route; with `mul: lut` 1, 50,422 FFs, 104.1 MHz
        at the median of three seeds (docs/timing.md, "Every product in LUTs at a target clock")."""
        from .synth.lut_multiplier import Shape, register_bits
        d = delays(self.config.timing_part())
        blocks = self.config.dsp_blocks(d.family)
        target = "ecp5" if d.family == "ecp5" else ""
        count, packs, packed, extra, regs = 0, 0, 0, 0, set()
        for k, sched in zip(self.kernels, self.schedules):
            entries = kernel_paths(k, sched, self.config, d)[2]
            prods = [(a, b) for a, b, _direct, unpack in entries if not unpack]
            count += len(prods)
            packs += len(entries) - len(prods)          # a pack of products (dsp_pack): a block each
            packed += sum(len(p.products) for p in sched.product_packs)
            if sched.lut_product_regs is not None:
                regs.add((sched.product_regs, sched.lut_product_regs))
                for a, b in prods:
                    shape = Shape(max(a, b), min(a, b), a + b, True)
                    extra += register_bits(shape, sched.product_regs, target) - \
                        register_bits(shape, sched.lut_product_regs, target)
        if not regs or blocks is None:
            return ""
        # the products past the blocks the packs leave are built in LUTs (multipliers.lut_cells);
        # said only where they outnumber the DSP ones: a few past the blocks cost little, and
        # moving the blocks' products into LUTs would cost more
        in_luts = count - max(0, min(count, blocks - packs))
        if in_luts <= count + packed - in_luts:
            return ""
        said = ", ".join(f"{r} registers where LUT products alone need {a}" for r, a in sorted(regs))
        return (f"mul auto at target_mhz {self.config.target_mhz:g}: {in_luts} of {count + packed} products in "
                f"LUTs past the {blocks} DSP blocks, and the DSP products' routes make each product take "
                f"{said}: about {round(extra * in_luts / count, -2):,.0f} flip-flops more in the LUT products "
                f"than mul: lut, which builds every product in LUTs (docs/timing.md)")

    def _modelled_path(self, d) -> Estimate:
        """The slowest path of the delay model alone, on the part of delays `d`."""
        worst = Estimate(d.overhead, "no integer path")
        products = []
        for pos, (k, sched) in enumerate(zip(self.kernels, self.schedules)):
            ns, what, prods = kernel_paths(k, sched, self.config, d)
            products += [(a, b, sched.product_regs, direct, unpack) for a, b, direct, unpack in prods]
            if ns > worst.period_ns:
                worst = Estimate(ns, f"{k.name}: {what}")
            ns, what = slowest_unit(k, sched.unit_stages, d, self.config.target_mhz is not None, sched.unit_lead)
            if ns > worst.period_ns:
                worst = Estimate(ns, f"{k.name}: {what}")
        sites = product_sites(self.config.mul, len(products), self.config.dsp_blocks(d.family))
        for a, b, registers, direct, unpack in set(products):
            ns, what = max(product_ns(min(a, b), max(a, b), registers, s, d, unpack)
                           for s in (pack_sites(sites) if unpack else sites))
            if direct and DSP_SITE in sites and memory_to_dsp_ns(d) > ns:
                ns, what = memory_to_dsp_ns(d), f"read data into a {a}x{b} DSP product's input register"
            if ns > worst.period_ns:
                worst = Estimate(ns, what)
        for k, packs, groups in zip(self.kernels, self.packs, self.write_groups):
            shared = {p.name: len(g) for g in groups for p in g}
            for p in (p for p in packs if p.word_writes):
                ns, what = word_write_ns(len(p.slots), p.width, p.depth, d, members=shared.get(p.name, 1),
                                         registered=p.name in shared or word_read_registered(
                                             len(p.slots), p.width, p.depth, self.config))
                if ns > worst.period_ns:
                    worst = Estimate(ns, f"{k.name}: {what}")
        if d.family == "ecp5" and self.config.mem_read == "sync":
            for u in self.memory_places:            # clocked reads of LUT RAM, where they stay
                if u.place.kind == "lutram" and u.depth > 1 and u.slot not in self.block_reads[u.kernel]:
                    ns, what = lutram_read_ns(u.depth, u.width, u.ports, d)
                    if ns > worst.period_ns:
                        worst = Estimate(ns, f"{self.kernels[u.kernel].name}: {what}")
            # the sequential top's copies from block RAM: Yosys's choice, or block_reads' (which
            # moves a source only where the copy registers its data)
            held = {(u.kernel, s): "bram" if u.slot in self.block_reads[u.kernel] else u.place.kind
                    for u in self.memory_places for s in u.slots}
            for ph in self.phases if self.flow is None else ():
                if not isinstance(ph, Copy):
                    continue
                banks = self.banking_of(*ph.src).banks
                if all(held.get((ph.src[0], b)) == "bram" for b in banks):
                    ns, what = block_ram_copy_ns(1 if ph.by_words else len(banks) // ph.width, len(ph.dsts), d,
                                                 registered=registers_copy_data(self.config))
                    if ns > worst.period_ns:
                        worst = Estimate(ns, what)
        return worst

    def cycle_model(self) -> CycleModel:
        if self.flow is not None:
            kernels = tuple((self.kernels[p.kernel].name, run_cycles(self.programs[p.kernel], self.schedules[p.kernel]))
                            for p in self.phases if isinstance(p, Run))
            copies = sum(p.length for p in self.phases if isinstance(p, Copy))
            return CycleModel(self.flow.latency, kernels, copies, self.flow.beat, "dataflow")
        kernels = tuple((self.kernels[p.kernel].name, run_cycles(self.programs[p.kernel], self.schedules[p.kernel]))
                        for p in self.phases if isinstance(p, Run))
        copies = sum(copy_cycles(p, self.config) for p in self.phases if isinstance(p, Copy))
        total = sum(c for _, c in kernels) + copies
        return CycleModel(total, kernels, copies, total)

    def buffer_of(self, tensor) -> int:
        """The model buffer id of an input or output Tensor of this design."""
        uop = getattr(getattr(tensor, "uop", None), "buf_uop", None)
        buf = self.graph.buffer_id(uop) if uop is not None else None
        if buf is None:
            raise KeyError(f"{tensor!r} is not a buffer of this design")
        return buf

    # ---------------------------------------------------------------- memory contents
    def memory_parts(self, ref: MemoryRef) -> list[tuple[str, int, object]]:
        """The memories that hold bank `ref`, as (module name, first word, MemoryData): the
        bank's own memory, and its LUT-RAM tail after it when it has one (mem_tail="lut",
        hw/tail.py). What simulators poke and peek, part by part."""
        hw = self.top.kernels[ref.kernel]
        main = hw.memories[ref.slot]
        parts = [(ref.name, 0, main)]
        if ref.slot in hw.tails:
            parts.append((f"{ref.name}_tail", main.depth, hw.tails[ref.slot]))
        return parts

    def memories_of(self, place: tuple[int, int]) -> list[MemoryRef]:
        """The memory banks of a (kernel position, parameter slot) that holds a buffer."""
        bk = self.banking_of(*place)
        names = self._memory_names(place[0])
        packed = {s: p for p in self.packs_of(place[0]) for s in p.slots}
        width = {d.slot: d.width for d in self.kernels[place[0]].buffers}
        return [MemoryRef(place[0], b, bk.layout.words, names.get(b, f"mem_b{b}"), width[b],
                          packed[b].offset(b) if b in packed else 0) for b in bk.banks]

    def is_read(self, ref: MemoryRef) -> bool:
        """Whether the design reads bank `ref` (weights="constant" can leave an input's bank
        unread: a lane whose products are all by zero). Synthesis removes such a memory, so a
        simulator of the netlist must not poke it; the host's writes to it are dropped."""
        return ref.slot in self._loaded_slots[ref.kernel]

    @cached_property
    def _loaded_slots(self) -> list[frozenset[int]]:
        """Per kernel: the bank slots some Load reads, its own or, through a Share, another
        kernel's reading this kernel's memory in place."""
        read = [set(ir.loaded_slots(k)) for k in self.kernels]
        for sh in self.shares:
            for rb, ob in zip(self.banking_of(*sh.reader).banks, self.banking_of(*sh.owner).banks):
                if rb in read[sh.reader[0]]:
                    read[sh.owner[0]].add(ob)
        return [frozenset(r) for r in read]

    @cached_property
    def narrow_buffers(self) -> dict[int, tuple[int, bool]]:
        """Model buffer id -> (bits, signed) of its stored elements, for the buffers whose
        memories hold fewer bits than their dtype (ir.BufferDecl.bounds: an int4 weight in an
        int8 Tensor is 4 bits, two's complement; a GEMV's int32 sums as many as they need)."""
        out = {}
        kernels = self.source_kernels or self.kernels
        for hb in self.host:
            for pos, slot in hb.holders:
                b = next(b for b in kernels[pos].buffers if b.slot == slot)
                if b.width < b.dtype.bits:
                    out[hb.id] = (b.width, b.signed)
        return out

    @cached_property
    def input_bounds(self) -> dict[int, tuple[int, int]]:
        """Model buffer id -> (lo, hi) of the inputs declared narrower than their dtype
        (compile_model's `input_ranges`): the hardware is sized to them, so a value outside is
        refused when the input is loaded (compiler/sim/memory_io.py `input_words`)."""
        out = {}
        kernels = self.source_kernels or self.kernels
        for hb in self.host:
            if hb.id in self.graph.inputs:
                for pos, slot in hb.holders:
                    b = next(b for b in kernels[pos].buffers if b.slot == slot)
                    if b.bounds is not None:
                        out[hb.id] = b.bounds
        return out

    def memory_words(self, buffer: int, words: np.ndarray) -> list[tuple[MemoryRef, np.ndarray]]:
        """A model buffer's element words -> the words of every memory bank that holds it,
        each in its holder's layout (what a simulator pokes to load the buffer). A narrow
        buffer's words keep their low `bits` (narrow_buffers)."""
        out = []
        words = np.asarray(words, dtype=np.uint64)
        if buffer in self.narrow_buffers:
            words = words & np.uint64((1 << self.narrow_buffers[buffer][0]) - 1)
        for place in self.host_buffers[buffer].holders:
            banks = self.banking_of(*place).layout.scatter(words)
            out += list(zip(self.memories_of(place), banks))
        return out

    def home_memories(self, buffer: int) -> list[MemoryRef]:
        """The memory banks that hold a buffer's final value, in lane order."""
        return self.memories_of(self.host_buffers[buffer].home)

    def buffer_words(self, buffer: int, banks: list[np.ndarray]) -> np.ndarray:
        """The inverse of `memory_words` for the home banks: their words (in the order of
        `home_memories`) -> the buffer's element words."""
        layout = self.banking_of(*self.host_buffers[buffer].home).layout
        words = layout.gather(np.stack([np.asarray(b, dtype=np.uint64) for b in banks]))
        if buffer in self.narrow_buffers:
            words = widen_words(words, *self.narrow_buffers[buffer], self.graph.buffers[buffer].dtype.bits)
        return words

    def name(self) -> str:
        return "+".join(k.name for k in self.kernels)


def widen_words(words: np.ndarray, bits: int, signed: bool, container: int) -> np.ndarray:
    """Words of `bits` bits (two's complement when `signed`) -> the same values as words of
    `container` bits (the dtype's bit patterns)."""
    words = np.asarray(words, dtype=np.uint64) & np.uint64((1 << bits) - 1)
    if not signed or bits >= container:
        return words
    fill = np.uint64(((1 << container) - 1) ^ ((1 << bits) - 1))
    return np.where(words >> np.uint64(bits - 1) & np.uint64(1), words | fill, words)


def build_design(graph: Graph, *, sources: list[ir.KernelIR], kernels: list[ir.KernelIR], config: HardwareConfig,
                 output_shapes: tuple[tuple[int, ...], ...], banking: list[dict[int, Banking]] | None = None,
                 factors: list[dict[int, int]] | None = None, streamed: frozenset[int] | None = None) -> Design:
    """`sources`: the lowered kernels; `kernels`: the same after the hardware transforms, with
    `banking` saying how each stores its parameter buffers (plain when not given)."""
    banking = banking or [{b.slot: Banking.plain(b.slot, b.size) for b in k.buffers} for k in sources]
    factors = factors or [{} for _ in sources]
    # a ROM (weights="constant") is part of its kernel: not on the host bus, never copied
    kernel_buffers = [[(b.slot, graph.kernels[i].buffers[b.slot], b.loaded, b.stored) for b in k.buffers
                       if b.rom is None] for i, k in enumerate(sources)]
    sizes = {b.id: b.size for b in graph.buffers}
    # a buffer's element width: its bounds' (compiler/bounds.py) where it has them, else its dtype's
    widths = {b.id: b.dtype.bits for b in graph.buffers}
    for i, k in enumerate(sources):
        widths.update({graph.kernels[i].buffers[b.slot]: b.width for b in k.buffers})
    ports = [read_ports(k, build_program(k))[1] for k in kernels] if config.share_buffers \
        else [{} for _ in kernels]
    flow, note = None, ""
    if config.schedule == "dataflow":
        # dataflow reads in place wherever it can (share_buffers or not): it saves a memory and a beat
        ports = [read_ports(k, build_program(k))[1] for k in kernels]
        streamed = frozenset(graph.inputs) if streamed is None else frozenset(streamed)
        args = dict(sizes=sizes, widths=widths, names=[k.name for k in kernels], banking=banking, read_ports=ports,
                    outputs=set(graph.outputs), streamed=set(streamed))
        # every kernel pipelined (one step, no loop, no accumulator: a merged constant-weight
        # model, passes/chain.py): a beat of one cycle, each kernel's stores landing 1 + its
        # pipeline's depth beats after it starts; unless a hand-over needs a copy
        pipelined = all(is_pipelined(k, build_program(k)) for k in kernels)
        dp = plan_dataflow(kernel_buffers, **args, lags=[1 + schedule(k, config).commit for k in kernels]) \
            if pipelined else None
        if dp is None or isinstance(dp, str) or any(isinstance(p, Copy) for p in dp.phases):
            pipelined, dp = False, plan_dataflow(kernel_buffers, **args)
        if isinstance(dp, str):
            note = f"schedule=dataflow not possible, built sequential: {dp}"
            ports = [read_ports(k, build_program(k))[1] for k in kernels] if config.share_buffers \
                else [{} for _ in kernels]
        else:
            runs = [1 if pipelined else run_cycles(build_program(k), schedule(k, config)) for k in kernels]
            weights = frozenset(graph.inputs) - streamed
            holds = [1 if pipelined else stage_hold(k, build_program(k), schedule(k, config), config.stage_overlap,
                                                    slot_banks(weight_slots(kernel_buffers[i], weights), banking[i]))
                     for i, k in enumerate(kernels)]
            copies = [p for p in dp.phases if isinstance(p, Copy)]
            lag = copy_lag(config.mem_read == "sync", config.fp_pipeline)
            beat = beat_cycles([holds[i] for i in dp.order], copies, lag)
            # stage_overlap: a stage whose run is longer than the beat drains into the next beats
            # (the copies and banks are the same; the levels, and so the rings, take the spills)
            spills = [0 if pipelined else spill_beats(run, beat) for run in runs]
            if any(spills):
                dp = plan_dataflow(kernel_buffers, **args, spills=spills)
            order, phases, host, shares = dp.order, dp.phases, dp.host, dp.shares
            copies = [p for p in phases if isinstance(p, Copy)]
            stage_cycles = tuple((kernels[i].name, runs[i]) for i in order) + \
                tuple((f"copy {kernels[order[c.src[0]]].name}->{','.join(kernels[order[d[0]]].name for d in c.dsts)}",
                       c.length + lag) for c in copies)
            lags = tuple(1 + schedule(kernels[i], config).commit if pipelined else 0 for i in order)
            flow = Dataflow(beat, dp.depth, tuple(dp.levels), tuple(dp.rings), streamed & frozenset(graph.inputs),
                            stage_cycles, lags, tuple(spills[i] for i in order) if any(spills) else ())
    if flow is None:
        order, phases, host, shares = plan(kernel_buffers, sizes=sizes, widths=widths, names=[k.name for k in kernels],
                                           banking=banking, read_ports=ports, share=config.share_buffers)
    # banks read in place by another kernel keep a memory each (the reader's addresses differ per bank)
    in_place = {p: frozenset() for p in range(len(order))}
    for r in (flow.rings if flow is not None else ()):          # ring banks are memories of their own
        in_place[r.place[0]] |= frozenset({r.place[1]})
    for sh in shares:
        for place in (sh.reader, sh.owner):
            in_place[place[0]] |= frozenset(banking[order[place[0]]][place[1]].banks)
    packs = tuple(plan_packs(kernels[i], build_program(kernels[i]), banking[i], config, in_place[pos])
                  for pos, i in enumerate(order))
    constants = frozenset(graph.kernels[i].buffers[b.slot] for i, k in enumerate(sources) for b in k.buffers
                          if b.rom is not None)
    design = Design(graph, tuple(kernels[i] for i in order), config, tuple(phases), tuple(host), output_shapes,
                    tuple(sources[i] for i in order), tuple(banking[i] for i in order), tuple(shares),
                    tuple(factors[i] for i in order), packs, flow, note, constants)
    if flow is not None:
        _check_runs(design)
    return design


def _check_runs(design: Design) -> None:
    """The dataflow plan took each kernel's run (and so its spills and lags) from its schedule
    before the rings were known; the hardware takes the schedule that keeps ring and external
    reads in their issue stage (Design.schedules). Moving a read does not change a pipeline's
    depth, so the two runs agree; if they ever did not, the beat, the spills and the store delay
    would disagree with the hardware, and that is said here rather than built."""
    flow = design.flow
    for pos, (k, program, sched) in enumerate(zip(design.kernels, design.programs, design.schedules)):
        planned = flow.lags[pos] - 1 if flow.lags and flow.lags[pos] else None
        if planned is not None and planned != sched.commit:
            raise CompileError(f"internal: kernel {k.name}'s pipeline is {sched.commit} stages deep as built, "
                               f"{planned} as the dataflow plan took it (compiler/design.py _check_runs)")
        if planned is None and flow.stage_cycles[pos][1] != run_cycles(program, sched):
            raise CompileError(f"internal: kernel {k.name} runs {run_cycles(program, sched)} cycles as built, "
                               f"{flow.stage_cycles[pos][1]} as the dataflow plan took it (compiler/design.py _check_runs)")
