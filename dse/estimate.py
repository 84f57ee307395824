"""Area (and Fmax) estimates without synthesis: features a compiled design shows for free, and
a model fitted on the points the explorer has already synthesised.

    features = design_features(design, target="ecp5")         # in evaluate's compile stage
    model = fit_estimator(samples)                              # samples: [(features, row), ...]
    model.predict(features)        # {"luts": Estimate(value, low, high), ...}
    model.errors                   # metric -> measured cross-validation error (relative, log scale)

Why these features: Yosys' area is close to a sum over the hardware the compiler builds, and
each part is visible in the transformed KernelIR (lanes and reduce_unroll replicate the
datapath there) and in the memory banking, before any Amaranth object exists. Counting them
takes milliseconds; synthesis takes seconds to minutes.

Why two model forms per metric: a sum of parts (`additive`, least squares on the raw counts
weighted by 1/y so every point counts by its relative error) fits designs that grow by adding
units; a power law (`loglog`, least squares on log(1 + x)) fits metrics that scale with the
parallelism as a whole. Both are fitted, each is scored by cross-validation on the synthesised
points, and the one with the smaller error is kept: the choice is measured, not assumed.

The error is measured, never assumed, on each side: over the held-out points of a k-fold
cross-validation (leave-one-out up to 20 points), `over` is the largest log((1 + estimate) /
(1 + measured)) (how far an estimate was too high) and `under` the largest the other way.
The optimistic bound of a minimised metric, `low` = (1 + estimate) * exp(-over) - 1, is what the
gating rule (dse.fidelity) compares with the front: a point is skipped only when even its
optimistic bound is dominated. Only overestimates can hide a front point, so only they widen
that margin; `high` (with `under`) serves maximised metrics (fmax_mhz). `errors[m]` is the
larger of the two.
"""
from __future__ import annotations

import collections
import functools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from compiler import ir
from compiler.hw.bram import LUTRAM_BITS, LUTRAM_WORDS, MemoryPlace, ecp5_memory
from compiler.hw.kernel import ring_stride
from compiler.hw.pipeline import FANOUT_LEVEL

FEATURES_VERSION = 21
"""Bumped when `design_features` changes meaning: samples of another version are not used."""

AREA_METRICS = ("luts", "ffs", "bram", "lutram", "dsp")
ESTIMATED_METRICS = AREA_METRICS + ("fmax_mhz",)
"""What the estimator predicts; `latency_us` follows from cycles / fmax_mhz."""

# Block RAM shapes (depth x width) a memory bank can be cut into, per target family: the
# analytic block count is one feature, so the fit only calibrates it.
_BRAM_SHAPES = {
    "ecp5": ((16384, 1), (8192, 2), (4096, 4), (2048, 9), (1024, 18), (512, 36)),     # DP16KD
    "xilinx": ((16384, 1), (8192, 2), (4096, 4), (2048, 9), (1024, 18), (512, 36)),   # RAMB18
    "ice40": ((2048, 2), (1024, 4), (512, 8), (256, 16)),                              # SB_RAM40_4K
}
MIN_SAMPLES = 8
"""Synthesised points needed before the estimator is trusted at all."""
_RIDGE = 1e-6


def _blocks(depth: int, width: int, target: str) -> int:
    shapes = _BRAM_SHAPES.get(target, _BRAM_SHAPES["ecp5"])
    return min(math.ceil(depth / d) * math.ceil(width / w) for d, w in shapes)


def _rows(depth: int, width: int, target: str) -> int:
    """Blocks stacked in depth (their read data multiplexed) in _blocks' cheapest shape."""
    shapes = _BRAM_SHAPES.get(target, _BRAM_SHAPES["ecp5"])
    d, w = min(shapes, key=lambda s: (math.ceil(depth / s[0]) * math.ceil(width / s[1]), math.ceil(depth / s[0])))
    return math.ceil(depth / d)


def _lutram_prims(depth: int, width: int, ports: int) -> int:
    """LUT RAM primitives of a memory read at `ports` ports, as Yosys builds it: a primitive
    has one read port, so the memory is built once per read port, each copy cut into 16-word,
    4-bit pieces. By their bits alone (64 a primitive) the 32x128 GEMV at 16 lanes, whose 16
    output banks are 2 words of 23 bits (6 primitives each), had 27.5 primitives; it was built
    with 112, this count's figure. The conv2d at 2 lanes and reduce_unroll 3, one of whose
    memories is read at 6 ports: 25 by bits, 108 by this count, 92 built."""
    return math.ceil(depth / LUTRAM_WORDS) * math.ceil(width / LUTRAM_BITS) * ports


def _memory_place(depth: int, width: int, ports: int, enables: int, target: str, block: bool = False) -> MemoryPlace:
    """Block RAM or LUT RAM, and how many, for a writable memory with clocked reads: on ECP5
    Yosys's own prices with their counts (compiler/hw/bram.ecp5_memory), or its block RAMs
    where the design asks for them (`block`: Design.block_reads); elsewhere the delay model's
    split (timing_model.in_block_ram) and the analytic counts above."""
    from compiler.timing_model import in_block_ram
    if target == "ecp5":
        return ecp5_memory(depth, width, ports, enables, block=block)
    if in_block_ram(depth, width, target, ports, enables):
        return MemoryPlace("bram", _blocks(depth, width, target), _rows(depth, width, target))
    return MemoryPlace("lutram", _lutram_prims(depth, width, ports), math.ceil(depth / LUTRAM_WORDS))


def _lutram_mux_bits(depth: int, width: int) -> int:
    """The read multiplexer of a memory in LUT RAM: each of its `width` bits selects among the
    ceil(depth / 16) primitives it is cut into, so its LUTs grow with the primitives beyond the
    first (a 16-deep memory has none; a comb-read 2048-deep one 127 a bit). Its bits alone
    (small_mem_bits, comb_mem_bits) cost as much a bit in a 32-deep memory as in a 2048-deep one.
    Counted once, not once per read port as the primitives are: per port, the LUTs' held-out
    error measured worse (6.6% median against 5.3%; few corpus memories have several ports)."""
    return (math.ceil(depth / LUTRAM_WORDS) - 1) * width


def _shift_add_digits(v) -> int:
    """Nonzero signed digits of the constant of a product the datapath builds as shifts and adds
    (compiler/passes/signed_digits.py shift_add_digits, as datapath.mul_const decides), else 0."""
    from compiler import ir
    from compiler.passes.signed_digits import shift_add_digits
    for s in v.srcs:
        if isinstance(s, ir.Const) and not s.dtype.is_float and int(s.value) != 0:
            return len(shift_add_digits(int(s.value)))
    return 0


def _low_zeros(v, zeros: Mapping[int, int]) -> int:
    """Low bits of an integer value known to be 0: a constant's trailing zeros, a shift by a
    constant adds its amount, a product adds its operands', a sum keeps the fewest."""
    from compiler import ir
    K = ir.OpKind
    if isinstance(v, ir.Const):
        n = int(v.value) if not v.dtype.is_float else 1
        return 0 if n == 0 else (n & -n).bit_length() - 1
    if not isinstance(v, ir.Op) or v.dtype.is_float:
        return 0
    z = [zeros.get(id(s), 0) for s in v.srcs]
    if v.op is K.SHL and isinstance(v.srcs[1], ir.Const):
        return z[0] + int(v.srcs[1].value)
    if v.op is K.MUL:
        return sum(z)
    if v.op in (K.ADD, K.SUB, K.NEG, K.CAST):
        return min(z[:2]) if v.op in (K.ADD, K.SUB) else z[0]
    return 0


def _stage_registers(order, sched, bits) -> tuple[int, int]:
    """Pipeline register bits of a kernel (fp_pipeline, hw/pipeline.py's schedule): (each value
    held from the stage it is ready in to the last stage an operation reads it in, and each
    integer operation's own output registers; the registers inside the float units). Apart
    because a float unit's stages hold its unpacked operands, not its output's width: counted as
    latency x format width they fit 0.7-0.9 flip-flops a bit, integer ones 1.0. In one count,
    the pipelined fp16 matmul joining the corpus (for fp_path_bits) took the constant-weight
    MLPs' (integer, fp_pipeline 3) held-out flip-flops from 5.5% to 21% median error; apart, 16%."""
    from compiler import ir
    from compiler.hw import floatops
    held: dict[int, int] = {}
    plain = in_units = 0
    for v in order:
        if not isinstance(v, ir.Op):
            continue
        lat = sched.latency.get(id(v), 0)
        ready = sched.ready.get(id(v))
        width = v.dtype.bits if v.dtype.is_float else bits(v)
        if lat and (v.dtype.is_float or any(s.dtype.is_float for s in v.srcs)) and floatops.unit_of(v) is not None:
            in_units += lat * width
        else:
            plain += lat * width
        if ready is None:
            continue
        start = ready - lat
        for s in v.srcs:
            r = sched.ready.get(id(s))
            if r is not None and start > r:
                held[id(s)] = max(held.get(id(s), 0), (start - r) * (s.dtype.bits if s.dtype.is_float else bits(s)))
    return plain + sum(held.values()), in_units


@ir.per_kernel
def _kernel_features(k, sched, prog, config) -> tuple[tuple[tuple[str, float], ...], tuple[tuple[str, int, int], ...]]:
    """One kernel's part of design_features: its counts as (name, value) in the order counted,
    and its products (feature, operand width a, b). A function of the kernel, its schedule and
    step program and the model-wide knobs alone, so remembered per kernel (ir.per_kernel): a
    sweep's points share most of their layers."""
    from compiler import ranges
    from compiler.hw import dsp_fields, floatops
    from compiler.hw.kernel import acc_ranges, acc_shape
    K = ir.OpKind
    counts: list[tuple[str, float]] = []
    products: list[tuple[str, int, int]] = []

    def add(name: str, v: float) -> None:
        counts.append((name, v))

    roots = [v for s, _ in k.stores() for v in ir.store_operands(s)]
    intervals = ranges.analyze(k, acc_ranges(k, config))
    zeros: dict[int, int] = {}          # id(value) -> its low bits known to be 0

    def bits(v) -> int:
        """The width the datapath gives an integer value: its interval's (an int8 load cast
        to int32 stays 8 bits wide in the RTL), so int8 and int16 products differ."""
        return intervals[id(v)].shape.width if id(v) in intervals else v.dtype.bits
    order = ir.toposort(roots)
    # products packed into one DSP block (compiler/hw/dsp_pack.py): one product of the packed
    # operand, the adder that packs it and one per field above the first (its borrow)
    packed = {id(v) for p in sched.product_packs for v in p.products}
    for p in sched.product_packs:
        width = dsp_fields.packed_range([intervals[id(p.other(v))] for v in p.products], p.field).shape.width
        add("mul", 1)
        products.append(("mul_bits", bits(p.shared), width))
        add("add_bits", width + p.field * (len(p.products) - 1))
    for v in order:                     # each node once: one node, one unit of hardware
        zeros[id(v)] = _low_zeros(v, zeros)
        if isinstance(v, ir.Load):
            add("read_ports", 1)
            add("read_bits", bits(v))          # a narrow buffer's loads: its stored bits
        if not isinstance(v, ir.Op):
            continue
        w = v.dtype.bits
        src_w = max((s.dtype.bits for s in v.srcs), default=w)
        if (v.dtype.is_float or any(s.dtype.is_float for s in v.srcs)) and floatops.unit_of(v) is not None:
            # a float unit's logic between two registers: the whole unit (and the units
            # chained after it) at fp_pipeline 0, 1 / its stages (the schedule's) when pipelined.
            # abc9 maps a long combinational path for delay, duplicating logic to cut its
            # depth, so the same units cost more LUTs unpipelined (fp32 GEMV 16x64: 2,383
            # at fp_pipeline 0, 1,992 at 2; fp16 matmul 8x8: 1,686, 1,632 at 1, 1,453 at 2):
            # the float features alone count them alike, and a cost cannot be negative
            add("fp_path_bits", max(w, src_w) * (2 if v.op is K.MULACC else 1)
                / sched.unit_stages.get(id(v), 1))
        if v.op in (K.MUL, K.MULACC):
            if v.dtype.is_float:
                add("fmul", 1)
                # fp8 operands cast to fp32 multiply in an FWideMul: its significands' width
                narrow = floatops.wide_product_sources(v)
                p = (narrow[0].dtype if narrow else v.dtype).man_bits + 1
                products.append(("fmul_bits", p, p))
                if v.op is K.MULACC:     # a fused multiply-add: its adder spans ~3 significands
                    add("fadd", 1)
                    add("fadd_bits", 3 * p)
            elif v.op is K.MUL and (n := _shift_add_digits(v)):
                # a product by a constant of few digits (index arithmetic: a counter times a
                # stride) is shifts and adds in the datapath (mul_const), no DSP: an adder a
                # digit beyond the first. As DSP products the GEMVs and MLPs of the corpus
                # planned one DSP more than they were built with, the jet MLP four, the CNN
                # 10 for 3; a product by 43 (a bank of 3 lanes) or 6,186 (a constant
                # requantisation) is a DSP, as planned
                add("add_bits", (n - 1) * bits(v))
            elif id(v) not in packed:
                add("mul", 1)
                products.append(("mul_bits", bits(v.srcs[0]), bits(v.srcs[-1])))
        elif v.op in (K.ADD, K.SUB, K.NEG, K.MAX, K.CMPLT, K.CMPNE, K.CMPEQ):
            if any(s.dtype.is_float for s in v.srcs) or v.dtype.is_float:
                add("fadd", 1)
                add("fadd_bits", src_w)
            else:
                # at the widths the datapath gives them: a constant-weight layer's thousands
                # of shift-and-add adders are 10 to 20 bits wide, not their int32's 32; and
                # without the low bits every operand has at 0 (a shifted term's), which
                # Yosys passes through without carry logic
                width = max(bits(s) for s in v.srcs)
                add("add_bits", max(1, width - min(zeros.get(id(s), 0) for s in v.srcs)))
        elif v.op in (K.SHL, K.SHR) and isinstance(v.srcs[1], ir.Const):
            pass                         # a shift by a constant is wiring
        elif v.op in (K.SHL, K.SHR) and not v.dtype.is_float:
            # a shift by a value (scale_digits 1's requantisation: each output channel's
            # power-of-two multiplier is a shift amount loaded from memory) is a barrel
            # shifter, a 2:1 multiplexer per output bit and amount bit (one 18-bit value by
            # a 4-bit amount to 32 bits and rounded, synthesised alone: 121 LUT4s). In logic_bits (its
            # output bits at 0.008 LUTs a bit) the jet MLP's points at scale_digits 1 were 17%
            # to 40% too low (4, 4, 1 lanes: 9 such shifts, 1,908 LUTs estimated, 2,901
            # built); at scale_digits 2 the requantisation is a product, in a DSP
            add("shift_bits", bits(v) * max(1, bits(v.srcs[1])))
        elif v.op in (K.CAST, K.EMU_CAST) and (v.dtype.is_float or any(s.dtype.is_float for s in v.srcs)):
            add("fconv", 1)
            add("fconv_bits", max(w, src_w))
        elif v.op is K.CAST:
            pass                         # an integer cast is wiring (a sign extension)
        elif v.dtype.is_float:           # division, square root, exp2 ...: a unit of its own
            add("fother_bits", w)
        else:
            add("logic_bits", bits(v))
    plain, in_units = _stage_registers(order, sched, bits)
    add("stage_reg_bits", plain)
    add("fstage_reg_bits", in_units)
    for a in k.accs:                    # the register as built: sized to its bounds (hw/kernel.py)
        add("acc_bits", acc_shape(a, config).width * a.ways)
    add("steps_log2", math.log2(1 + sum(lp.bound for lp in k.loops.values())))
    add("counter_bits", sum(int(lp.bound).bit_length() for lp in k.loops.values()))   # loop counters
    add("kernels", 1)
    # a memory written by more than one store takes each one's address and data through a
    # multiplexer on the step; a memory's one store drives them ungated (KernelHW._stores)
    stores = collections.Counter(s.buf for s, _ in k.stores() if isinstance(s, ir.BufStore))
    sizes = {b.slot: b.size for b in k.buffers}
    for s, _ in k.stores():
        if isinstance(s, ir.BufStore) and stores[s.buf] > 1:
            add("store_mux_bits", bits(s.value) + max(1, math.ceil(math.log2(max(sizes[s.buf], 2)))))
    # the controller (hw/kernel.py _controller): a case of the step register per step, and in
    # it each advance of a loop a compare of its counter with its last value, an increment and
    # the next-counter multiplexer, built once per step that advances the loop (a loop's
    # counter once, counter_bits, is its flip-flops: the LUTs' table no longer uses it). The
    # fitted cost a bit is more than the counters' own LUTs (2 to 2.5 a counter flip-flop in
    # the flat netlists): the memories' address logic grows with the same widths
    # (docs/estimator.md, "The LUTs' control terms")
    add("steps", len(prog.steps))
    add("advance_bits", sum(max(1, int(a.loop.bound - 1).bit_length()) for tr in prog.transitions
                            for a in tr.advances))
    return tuple(counts), tuple(products)


def design_features(design, *, target: str) -> dict[str, float]:
    """Counts of what the compiled `design` (compiler.design.Design) will build, by kind and
    width. Cheap: it walks the KernelIR and the banking, and builds no hardware."""
    from compiler.hw.bram import memory_tail
    from compiler.hw.kernel import read_ports
    from compiler.synth import multipliers
    f: dict[str, float] = {"version": FEATURES_VERSION}

    def add(name: str, v: float) -> None:
        f[name] = f.get(name, 0.0) + v

    products: list[tuple[str, int, int]] = []     # (feature, operand width a, b) of every multiplier
    for k, sched, prog in zip(design.kernels, design.schedules, design.programs):
        counts, found = _kernel_features(k, sched, prog, design.config.model_wide)
        for name, v in counts:          # in the order counted: the same float sums as counted in place
            add(name, v)
        products += found

    # the products the `mul` knob builds in LUTs (compiler.synth.multipliers' rule) are their own
    # feature, at the operand widths the datapath gives them (their value intervals), so the
    # DSP / LUT split under `auto` is the rule's on the real products. (Counted at the IR's
    # widths, an int8 product cast to int32 was 32 x 32 bits: int8 and int16 designs looked
    # alike and the int16 16 x 16 GEMV, 88.8k LUTs, was estimated at 25k.)
    cells = [multipliers.MulCell("ir", str(i), a, b, a + b) for i, (_, a, b) in enumerate(products)]
    in_luts = multipliers.lut_cells(cells, target, design.config.mul, design.config.dsp_blocks(target))
    for (name, a, b), cell in zip(products, cells):
        lut = (cell.module, cell.name) in in_luts
        add(("lut_" + name) if lut else name, a * b)
        if not lut and target in multipliers.DSP_SHAPES:     # mul2dsp's pieces: the DSP count, as planned
            add("dsp_blocks", multipliers.dsp_cost(cell, target))

    external = {(sh.reader[0], b) for sh in design.shares for b in design.banking_of(*sh.reader).banks}
    written = design.host_written_banks | design.copied_banks      # banks written from outside a kernel
    comb = design.config.mem_read == "comb"
    # weights="constant": a ROM read at addresses the unrolled loops fix is folded into the
    # datapath (its products are the adders counted above); one that survives is a table in logic
    roms = {pos for pos, k in enumerate(design.kernels) if any(b.rom is not None for b in k.buffers)}
    blocks = dict(enumerate(design.block_reads))        # memories moved to block RAM for the clock
    for pos, k in enumerate(design.source_kernels or design.kernels):
        packed = {s: p for p in design.packs_of(pos) for s in p.slots}     # mem_pack: one memory per group
        # schedule=dataflow: a ring bank is R memories of its own (KernelHW._ring_memory), each
        # built as a bank alone is; counted once, the dataflow MLPs' LUT RAMs were 29% to 48% low
        # (the 64-72-8 MLP at fp_pipeline 3: 34 primitives counted, 68 built)
        # (a ring the kernel alone reads is one memory of every bank's words, its bank the high
        # address bits: no selects; design.one_memory_rings)
        rings = {r.place[1]: r.banks for r in design.flow.rings if r.place[0] == pos} if design.flow else {}
        one_memory = design.one_memory_rings[pos] if pos < len(design.kernels) else frozenset()
        # read ports of each bank (hw/kernel.py's read_ports: loads of a step at distinct
        # addresses); a packed memory is read at its slots' ports
        n_ports = read_ports(design.kernels[pos], design.programs[pos])[1] if pos < len(design.kernels) else {}
        for b in k.buffers:
            if b.rom is not None:
                if pos in roms:
                    add("rom_bits", b.size * b.width)
                continue
            bk = design.banking_of(pos, b.slot)
            for bank in bk.banks:
                if (pos, bank) in external or (bank in packed and packed[bank].slots[0] != bank):
                    continue
                depth, width = bk.layout.words, b.width * (len(packed[bank].slots) if bank in packed else 1)
                addr = max(1, math.ceil(math.log2(max(depth, 2))))
                copies = rings.get(bank, 1)
                if bank in one_memory:
                    depth, copies = ring_stride(depth) * (copies - 1) + depth, 1

                def mem(name: str, v: float, copies=copies) -> None:     # once per memory built
                    add(name, v * copies)
                mem("banks", 1)
                ports = max(n_ports.get(s, 1) for s in (packed[bank].slots if bank in packed else (bank,)))
                # a packed memory's banks are written each with its enable, unless word by word
                enables = len(packed[bank].slots) if bank in packed and not packed[bank].word_writes else 1
                if copies > 1:
                    # the ring's selects: each read port's data (and the outside's, port 0) is an
                    # AND-OR over the R memories' words, chosen by the bank flags; the kernel's
                    # and the outside's read addresses (if the kernel reads it too: an output
                    # ring's port 0 is the outside's alone) and write addresses and data (if both
                    # write it: an output ring nothing outside writes takes the kernel's) are
                    # multiplexed into each memory's ports (KernelHW._ring_memory)
                    mem("ring_sel_bits", (ports + 1) * width)
                    both = b.stored and (pos, bank) in written
                    mem("ring_port_bits", (addr if b.loaded else 0) + ((addr + width) if both else 0))
                tail = memory_tail(design.config, depth, width, b.stored)
                if tail:                                 # mem_tail: the last words in LUT RAM
                    mem("tail_bits", tail * width)
                    mem("tail_banks", 1)
                    depth -= tail
                if depth == 1:
                    # a memory of one word is a register: Yosys maps it to flip-flops, not LUT
                    # RAM (the constant-weight designs at 64 lanes: every bank one word, no LUT
                    # RAM, and the 8x16 GEMV's 288 such bits among its 566 flip-flops)
                    mem("reg_mem_bits", width)
                elif comb:
                    mem("comb_mem_bits", depth * width)
                    mem("lutram_mux_bits", _lutram_mux_bits(depth, width))
                    mem("lutram_prims", _lutram_prims(depth, width, ports))
                elif (place := _memory_place(depth, width, ports, enables, target,
                                             block=bank in blocks.get(pos, ()))).kind == "bram":
                    mem("bram_blocks", place.cells)
                    mem("bram_banks", 1)
                    mem("bram_mux_bits", (place.rows - 1) * width)   # cascaded blocks' read mux
                else:
                    mem("small_mem_bits", depth * width)
                    mem("small_banks", 1)
                    mem("lutram_mux_bits", _lutram_mux_bits(depth, width))
                    mem("lutram_prims", place.cells)
                    # a LUT RAM reads combinationally: a clocked read port is its word in
                    # flip-flops after the multiplexer, one register a port (a block RAM holds its
                    # own). Without it the FFs' held-out error was 6.8% median, 64.9% largest (the
                    # elementwise model, 35 FFs of which 16 these registers, 65% too high)
                    mem("lutram_read_bits", width * ports)
                mem("addr_bits", addr)
                # a lane count that is not a power of two: bank and address by division, tails gated
                if any(d.factor & (d.factor - 1) for d in bk.layout.dims):
                    mem("np2_addr_bits", addr)

    # the host bus's read-back (hw/top.py): host_rdata is a multiplexer over every bank the host
    # reads, so its LUTs grow with those banks' bits beyond the widest one (a single output
    # bank's word is a wire). The banks' own bits were the feature before (bank_bits) and were
    # fitted no cost at all: the host's write data is one shared wire, so a bank the host writes
    # costs nothing there. On the 32x128 GEMV the top module (module_breakdown) is 261 LUTs at 4
    # lanes (4 output banks of 23 bits) and 531 at 8, with the same 16 weight banks. From
    # FANOUT_LEVEL it is another structure, registered, an OR of words each gated by its own
    # flag, with its own cost a bit (`host_or_bits`): one feature for both priced the pipelined
    # int16 conv2d 24% too high held out, and the corpus's LUTs were 5.2% off at the median
    # against 3.5% apart.
    read_widths = [hp.width for hp in design.host_ports if hp.read]
    if read_widths:
        gated = design.config.fp_pipeline >= FANOUT_LEVEL
        add("host_or_bits" if gated else "host_mux_bits", sum(read_widths) - max(read_widths))
    p = design.config.fp_pipeline
    add("pipeline_bits", p * (f.get("fmul_bits", 0.0) ** 0.5 + f.get("fadd_bits", 0.0)
                              + f.get("mul_bits", 0.0) ** 0.5 + f.get("read_bits", 0.0)))
    add("fp_pipeline", p)
    return f


# ---------------------------------------------------------------------------------------------
# too large for every device

LUT_FLOOR_PER_ADD_BIT = 0.5
"""The fewest LUT4s an adder bit of the design (`add_bits`) has cost in synthesis, with margin:
constant-weight MLPs fully unrolled measured 0.66 (the jet-shaped MLP 90% pruned: 12,248 LUTs
for 16,815 bits of adders; Yosys drops the constant low bits of shifted terms), so half is a
floor no design here went under."""

LOGIC_SITES = {"ecp5": "TRELLIS_COMB", "ice40": "ICESTORM_LC"}


def too_large(features: Mapping[str, float], target: str) -> str:
    """Why no device of `target` can hold a design with these features ("" when one might):
    its adders alone need more LUTs than the family's largest part has (LUT_FLOOR_PER_ADD_BIT),
    so synthesis and place-and-route, hours for such a design, are not run."""
    from compiler.devices import DEVICES
    if target not in LOGIC_SITES or target not in DEVICES:
        return ""
    floor = LUT_FLOOR_PER_ADD_BIT * features.get("add_bits", 0.0)
    largest = max(DEVICES[target], key=lambda d: d.capacity[LOGIC_SITES[target]])
    have = largest.capacity[LOGIC_SITES[target]]
    if floor <= have:
        return ""
    return (f"too large for every {target} device: its {features['add_bits']:,.0f} bits of adders need at least "
            f"{floor:,.0f} LUTs, the largest part ({largest.name}) has {have:,}; not synthesised")


# ---------------------------------------------------------------------------------------------
# the model

@dataclass(frozen=True)
class Estimate:
    value: float            # the model's estimate
    low: float              # (1 + value) * exp(-error) - 1, at least 0: the optimistic bound for a minimised metric
    high: float             # (1 + value) * exp(+error) - 1


@dataclass(frozen=True)
class _Fit:
    form: str                       # "additive" or "loglog" (fitted on the samples), "prior" (the shipped table)
    names: tuple[str, ...]
    coef: np.ndarray
    over: float                     # cross-validated max of log((1 + est) / (1 + y)), at least 0: how far too high
    under: float                    # ... of log((1 + y) / (1 + est)): how far too low
    shift: float = 0.0              # "prior": log(1 + estimate) moved by this (the study's own correction)


@dataclass(frozen=True)
class Estimator:
    """Per-metric fits on `samples` synthesised points; `errors` their measured error."""
    fits: Mapping[str, _Fit]
    samples: int
    cv_folds: int
    errors: Mapping[str, float] = field(default_factory=dict)
    median_errors: Mapping[str, float] = field(default_factory=dict)

    prior: "Prior | None" = None    # the shipped calibration the "prior" fits start from
    corrected_by: int = 0           # synthesised points of the study that corrected it

    def predict(self, features: Mapping[str, float]) -> dict[str, Estimate]:
        out = {}
        for metric, fit in self.fits.items():
            v = max(0.0, float(_predict(fit.form, fit.names, fit.coef, [features], fit.shift)[0]))
            out[metric] = Estimate(v, max(0.0, (1 + v) * math.exp(-fit.over) - 1), (1 + v) * math.exp(fit.under) - 1)
        return out

    def bounds(self, metric: str) -> dict[str, float]:
        """The measured relative error bounds of `metric`: how far an estimate was too high / too low."""
        fit = self.fits[metric]
        return {"over": round(math.expm1(fit.over), 4), "under": round(math.expm1(fit.under), 4)}

    def describe(self) -> str:
        """One line: the measured error of every metric (what `dse sweep` prints)."""
        parts = [f"{m} {_pct(self.median_errors[m])} median, at most {_pct(self.fits[m].over)} too high / "
                 f"{_pct(self.fits[m].under)} too low ({self.fits[m].form})" for m in self.errors]
        if all(f.form != "prior" for f in self.fits.values()):
            return (f"area estimate from {self.samples} synthesised points, {self.cv_folds}-fold cross-validated "
                    f"error: " + ", ".join(parts))
        return (f"area estimate from the shipped calibration ({self.prior.describe()}), corrected by "
                f"{self.corrected_by} synthesised point{'s' * (self.corrected_by != 1)} of this study; error "
                f"(held out, or this study's own once it has {MIN_SAMPLES} points): " + ", ".join(parts))


def _pct(log_err: float) -> str:
    return f"{(math.exp(log_err) - 1) * 100:.0f}%"


def _names(samples: Sequence[Mapping[str, float]]) -> tuple[str, ...]:
    names = sorted({n for s in samples for n in s if n != "version"})
    return tuple(n for n in names if any(s.get(n, 0.0) for s in samples))


def _matrix(form: str, names: Sequence[str], feats: Iterable[Mapping[str, float]]) -> np.ndarray:
    X = np.array([[float(f.get(n, 0.0)) for n in names] for f in feats], dtype=float).reshape(-1, len(names))
    if form == "loglog":
        X = np.log1p(np.maximum(X, 0.0))
    return np.hstack([np.ones((X.shape[0], 1)), X])


def _predict(form: str, names, coef: np.ndarray, feats, shift: float = 0.0) -> np.ndarray:
    y = _matrix(form, names, feats) @ coef
    if form == "prior":
        return np.expm1(np.log1p(np.maximum(y, 0.0)) + shift)
    return np.expm1(np.clip(y, -50, 50)) if form == "loglog" else y


def _solve(form: str, names, feats, y: np.ndarray) -> np.ndarray:
    X = _matrix(form, names, feats)
    if form == "loglog":
        target, weight = np.log1p(np.maximum(y, 0.0)), np.ones_like(y)
    else:
        target, weight = y, 1.0 / np.maximum(y, 1.0)     # relative error: small designs count as much
    Xw, tw = X * weight[:, None], target * weight
    scale = np.maximum(np.abs(Xw).max(axis=0), 1e-12)  # ridge on comparable columns
    A = Xw / scale
    coef = np.linalg.solve(A.T @ A + _RIDGE * len(y) * np.eye(A.shape[1]), A.T @ tw)
    return coef / scale


def _folds(n: int) -> list[np.ndarray]:
    k = n if n <= 20 else 10
    return [np.arange(n)[i::k] for i in range(k)]


PRIOR_WEIGHT = 2.0
"""A study's correction of the shipped table (the mean of its points' log(1 + measured) -
log(1 + table)) is shrunk toward 0 as if this many points had agreed with the table exactly: its
first point moves the estimate a third of the way to what it measured."""


def _local_fits(pts: Sequence[tuple[Mapping[str, float], float]]) -> list[tuple[float, _Fit, float]]:
    """(mean held-out error, fit on every point, median held-out error) of each model form fitted
    on the study's own points (k-fold cross-validation)."""
    feats = [f for f, _ in pts]
    y = np.array([v for _, v in pts])
    names = _names(feats)
    out = []
    for form in ("additive", "loglog"):
        signed = np.zeros(len(y))            # log((1 + est) / (1 + y)) of each held-out point
        for held in _folds(len(y)):
            train = np.setdiff1d(np.arange(len(y)), held)
            coef = _solve(form, names, [feats[i] for i in train], y[train])
            est = np.maximum(_predict(form, names, coef, [feats[i] for i in held]), 0.0)
            signed[held] = np.log1p(est) - np.log1p(y[held])
        fit = _Fit(form, names, _solve(form, names, feats, y), max(0.0, float(signed.max())),
                   max(0.0, float(-signed.min())))
        out.append((float(np.abs(signed).mean()), fit, float(np.median(np.abs(signed)))))
    return out


def _prior_fit(mp: "MetricPrior", pts: Sequence[tuple[Mapping[str, float], float]]) -> tuple[float, _Fit, float]:
    """The shipped table's fit for one metric, corrected by the study's points (PRIOR_WEIGHT), with
    its error: the table's held-out error until the study has MIN_SAMPLES points (or the study's
    own leave-one-out error of the corrected table, where that is larger), then the study's own."""
    coef = np.asarray(mp.coef, dtype=float)
    base = np.maximum(_predict("additive", mp.names, coef, [f for f, _ in pts]), 0.0) if pts else np.zeros(0)
    r = np.log1p(np.array([v for _, v in pts], dtype=float)) - np.log1p(base)   # how far the table was low
    n = len(r)
    shift = float(r.sum() / (n + PRIOR_WEIGHT)) if n else 0.0
    signed = (r.sum() - r) / (n - 1 + PRIOR_WEIGHT) - r if n else np.zeros(0)    # leave-one-out
    if n >= MIN_SAMPLES:
        over, under = max(0.0, float(signed.max())), max(0.0, float(-signed.min()))
        median = float(np.median(np.abs(signed)))
    else:
        over = max([mp.over, *signed.tolist()])
        under = max([mp.under, *(-signed).tolist()])
        median = mp.median
    mean = float(np.abs(signed).mean()) if n else math.inf
    return mean, _Fit("prior", tuple(mp.names), coef, over, under, shift), median


def fit_estimator(samples: Sequence[tuple[Mapping[str, float], Mapping[str, Any]]], *,
                  metrics: Sequence[str] = AREA_METRICS, prior: "Prior | None" = None) -> Estimator | None:
    """Fit every metric of `metrics` on `samples` ((features, measured row) pairs of synthesised
    points). With the shipped calibration of the target (`prior`, load_prior) a metric it covers
    is estimated from the first point (the table, corrected by the samples); once MIN_SAMPLES
    points are synthesised, fits on the samples alone compete with it and the one with the
    smaller cross-validated error is kept. None when nothing can be estimated yet."""
    samples = [(f, r) for f, r in samples if f.get("version") == FEATURES_VERSION]
    if prior is not None and prior.features_version != FEATURES_VERSION:
        prior = None
    fits, errors, medians = {}, {}, {}
    folds = 0
    for metric in metrics:
        pts = [(f, float(r[metric])) for f, r in samples if r.get(metric) is not None]
        candidates = []
        if prior is not None and metric in prior.metrics:
            candidates.append(_prior_fit(prior.metrics[metric], pts))
        if len(pts) >= MIN_SAMPLES:
            candidates += _local_fits(pts)
            folds = len(_folds(len(pts)))
        if not candidates:
            continue
        _, fits[metric], medians[metric] = min(candidates, key=lambda c: c[0])
        errors[metric] = max(fits[metric].over, fits[metric].under)
    if not fits:
        return None
    used = prior if any(f.form == "prior" for f in fits.values()) else None
    return Estimator(fits, len(samples), folds, errors, medians, prior=used, corrected_by=len(samples))


# ---------------------------------------------------------------------------------------------
# the shipped calibration (bench/calibrate_estimator.py writes it)

PRIOR_FILE = Path(__file__).with_name("estimator.json")
"""Package data: per target family, each metric's coefficients and their held-out error."""

METRIC_FEATURES: Mapping[str, tuple[str, ...] | None] = {
    "luts": None,                                       # every feature
    "ffs": None,
    "bram": ("bram_blocks", "bram_banks"),
    "lutram": ("small_mem_bits", "small_banks", "tail_bits", "tail_banks", "comb_mem_bits", "lutram_prims"),
    "dsp": ("dsp_blocks", "fmul_bits"),
}
"""The features each metric's table may use: a block RAM count is not made of adder bits."""

METRIC_EXCLUDED: Mapping[str, tuple[str, ...]] = {
    "luts": ("lutram_prims", "lutram_read_bits", "small_mem_bits", "comb_mem_bits", "tail_bits",
             "counter_bits", "bram_banks", "small_banks"),
    "ffs": ("bram_mux_bits", "lutram_mux_bits", "host_mux_bits", "host_or_bits", "lutram_prims", "fp_path_bits",
            "advance_bits", "steps", "ring_sel_bits", "ring_port_bits", "bram_banks", "small_banks",
            "small_mem_bits", "comb_mem_bits", "tail_bits", "shift_bits"),
}
"""Features a metric's table may not use: a read multiplexer is logic, it holds no register a
bit (held out, the 128x784 GEMV's flip-flops were estimated 3x too high when the mux bits of
the 784-input MLPs, whose flip-flops are elsewhere, were allowed a flip-flop cost); a LUT RAM
primitive is neither a LUT4 (Yosys counts TRELLIS_DPR16X4 apart) nor a flip-flop. The bits of a
memory in LUT RAM (`small_mem_bits`, `comb_mem_bits`, `tail_bits`) are such primitives too: the
LUTs around the memory are its read multiplexer (`lutram_mux_bits`). Allowed a LUT cost, the
comb-read memories' bits took their multiplexers' (held out, LUTs 5.9% median and 29.5% largest,
against 5.6% and 27.6%). The float logic between two registers (`fp_path_bits`) is the LUTs'
delay-driven mapping, no register; a LUT RAM's read register (`lutram_read_bits`) is flip-flops
after the multiplexer `lutram_mux_bits` already prices (allowed a LUT cost, the LUTs' held-out
median was 6.4% against 5.9%).

A memory bank's count (`bram_banks`, `small_banks`) is no LUTs of its own: the 32x128 GEMV at 4
lanes measures 704 LUTs with its weights in 16 block-RAM banks and 700 packed in 4; the LUTs
around a memory are its multiplexers and addresses (`*_mux_bits`, `addr_bits`), its flip-flops
its read and address registers (`lutram_read_bits`, `addr_bits`). Allowed a cost, the bank
counts took one with gemv_int held out (that GEMV 24% too high in LUTs; in flip-flops the comb-read
GEMV 31% too high, 20% without them). The bits of a memory in LUT RAM are no flip-flops either.
The counters' widths (`counter_bits`) are flip-flops; the controller's LUTs are `advance_bits`
and `steps`, logic, as are the ring selects (`ring_sel_bits`, `ring_port_bits`) and a barrel
shifter's multiplexers (`shift_bits`)."""


@dataclass(frozen=True)
class MetricPrior:
    names: tuple[str, ...]
    coef: tuple[float, ...]         # the intercept, then one per name: estimate = coef . (1, features)
    over: float                     # held out (every family in turn): largest log((1 + est) / (1 + y))
    under: float                    # ... largest log((1 + y) / (1 + est))
    median: float                   # ... median |log((1 + est) / (1 + y))|

    def predict(self, features: Mapping[str, float]) -> float:
        return max(0.0, float(_predict("additive", self.names, np.asarray(self.coef), [features])[0]))


@dataclass(frozen=True)
class Prior:
    """The shipped calibration of one target family: fitted on `designs` designs of `families`."""
    target: str
    features_version: int
    designs: int
    families: tuple[str, ...]
    metrics: Mapping[str, MetricPrior]
    yosys_version: str = ""

    def describe(self) -> str:
        version = " ".join(str(self.yosys_version).split()[:2])        # "Yosys 0.70" of Yosys's banner
        return f"{self.target}, {self.designs} designs of {len(self.families)} families, {version}"

    def predict(self, features: Mapping[str, float]) -> dict[str, Estimate]:
        """metric -> the table's estimate with its held-out error bounds (no study correction)."""
        out = {}
        for m, mp in self.metrics.items():
            v = mp.predict(features)
            out[m] = Estimate(v, max(0.0, (1 + v) * math.exp(-mp.over) - 1), (1 + v) * math.exp(mp.under) - 1)
        return out


def load_prior(target: str, path: Path = PRIOR_FILE) -> Prior | None:
    """The shipped calibration of `target` (None: none for it, or of another features version)."""
    return _load_prior(target, str(path))


@functools.lru_cache(maxsize=8)
def _load_prior(target: str, path: str) -> Prior | None:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    t = (data.get("targets") or {}).get(target)
    if not t or t.get("features_version") != FEATURES_VERSION:
        return None
    metrics = {m: MetricPrior(tuple(d["names"]), tuple(d["coef"]), d["over"], d["under"], d["median"])
               for m, d in t["metrics"].items()}
    return Prior(target, t["features_version"], t["designs"], tuple(t["families"]), metrics, t.get("yosys_version", ""))


def fmax_estimate(design, features: Mapping[str, float], target: str):
    """A row's Fmax estimate (compiler.timing_model.Estimate): the delay model's slowest path,
    bounded by what placement allows a design of the LUT4s the shipped calibration predicts
    from `features` (Design.timing_estimate); the modelled path alone where the target has no
    calibration or is not the family the design is timed for."""
    prior = load_prior(target)
    luts = None
    if prior is not None and "luts" in prior.metrics and design.config.timing_part().family == target:
        luts = prior.metrics["luts"].predict(features)
    return design.timing_estimate(luts)


def _fit_table(samples: Sequence[Mapping[str, Any]], metric: str) -> tuple[tuple[str, ...], np.ndarray]:
    """Non-negative least squares of `metric` on the features METRIC_FEATURES allows, each design
    weighted by 1 / max(y, 10) so every design counts by its relative error (a 500-LUT design as
    much as a 50,000-LUT one; below 10 by its absolute error, so a zero is not infinitely tight)."""
    from scipy.optimize import nnls
    feats = [s["features"] for s in samples]
    allowed, excluded = METRIC_FEATURES.get(metric), METRIC_EXCLUDED.get(metric, ())
    names = tuple(n for n in _names(feats) if (allowed is None or n in allowed) and n not in excluded)
    y = np.array([float(s[metric]) for s in samples])
    X = _matrix("additive", names, feats)
    w = 1.0 / np.maximum(y, 10.0)
    scale = np.maximum(np.abs(X * w[:, None]).max(axis=0), 1e-12)
    coef, _ = nnls((X * w[:, None]) / scale, y * w)
    return names, coef / scale


@dataclass(frozen=True)
class HeldOut:
    """Every design predicted by the table fitted without its family: (family, name, metric,
    estimate, measured) rows, and their summary per metric."""
    rows: tuple[tuple[str, str, str, float, float], ...]

    def stats(self, metric: str, family: str | None = None) -> dict[str, float]:
        """median and largest relative error |est - y| / y (designs with y > 0), Spearman's rank
        correlation, and the log bounds the gate uses (over, under, median)."""
        from scipy.stats import spearmanr
        rows = [r for r in self.rows if r[2] == metric and (family is None or r[0] == family)]
        est = np.array([r[3] for r in rows])
        y = np.array([r[4] for r in rows])
        signed = np.log1p(est) - np.log1p(y)
        pos = y > 0
        rel = np.abs(est[pos] - y[pos]) / y[pos]
        rho = float(spearmanr(est, y).statistic) if len(y) > 2 and np.ptp(y) > 0 and np.ptp(est) > 0 else float("nan")
        return {"n": len(rows), "median_rel": float(np.median(rel)) if rel.size else float("nan"),
                "max_rel": float(rel.max()) if rel.size else float("nan"), "spearman": rho,
                "over": max(0.0, float(signed.max())) if rows else 0.0,
                "under": max(0.0, float(-signed.min())) if rows else 0.0,
                "median": float(np.median(np.abs(signed))) if rows else 0.0}

    def markdown(self) -> str:
        metrics = sorted({r[2] for r in self.rows}, key=AREA_METRICS.index)
        lines = ["| metric | designs | median error | largest error | Spearman |", "|---|---|---|---|---|"]
        for m in metrics:
            st = self.stats(m)
            lines.append(f"| {m} | {st['n']} | {st['median_rel']:.1%} | {st['max_rel']:.1%} | {st['spearman']:.3f} |")
        families = sorted({r[0] for r in self.rows})
        lines += ["", "| family held out | designs | LUTs median error | LUTs largest error | FFs median | FFs largest |",
                  "|---|---|---|---|---|---|"]
        for fam in families:
            a, b = self.stats("luts", fam), self.stats("ffs", fam)
            lines.append(f"| {fam} | {a['n']} | {a['median_rel']:.1%} | {a['max_rel']:.1%} | {b['median_rel']:.1%} "
                         f"| {b['max_rel']:.1%} |")
        return "\n".join(lines)


def held_out(samples: Sequence[Mapping[str, Any]], *, metrics: Sequence[str] = AREA_METRICS) -> HeldOut:
    """Leave one family out: each family's designs predicted by the table fitted on the others."""
    rows = []
    families = sorted({s["family"] for s in samples})
    for fam in families:
        train = [s for s in samples if s["family"] != fam]
        test = [s for s in samples if s["family"] == fam]
        for metric in metrics:
            names, coef = _fit_table(train, metric)
            est = np.maximum(_predict("additive", names, coef, [s["features"] for s in test]), 0.0)
            rows += [(fam, s["name"], metric, float(e), float(s[metric])) for s, e in zip(test, est)]
    return HeldOut(tuple(rows))


def fit_prior(samples: Sequence[Mapping[str, Any]], *, metrics: Sequence[str] = AREA_METRICS, target: str,
              held: HeldOut) -> dict[str, Any]:
    """The table of `target` (fitted on every design) with each metric's held-out error."""
    out = {}
    for metric in metrics:
        names, coef = _fit_table(samples, metric)
        st = held.stats(metric)
        out[metric] = {"names": list(names), "coef": [float(c) for c in coef], "over": st["over"],
                       "under": st["under"], "median": st["median"], "median_rel": st["median_rel"],
                       "max_rel": st["max_rel"], "spearman": st["spearman"]}
    versions = sorted({s.get("yosys_version", "") for s in samples})
    return {"target": target, "features_version": FEATURES_VERSION, "designs": len(samples),
            "families": sorted({s["family"] for s in samples}), "yosys_version": ", ".join(versions),
            "metrics": out}


def write_prior(table: Mapping[str, Any], path: Path = PRIOR_FILE) -> Path:
    """Put `table` (fit_prior) into the shipped file under its target, keeping the others."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data.setdefault("targets", {})[table["target"]] = table
    data["written_by"] = "bench/calibrate_estimator.py fit"
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    _load_prior.cache_clear()
    return path
