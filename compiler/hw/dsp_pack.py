"""Narrow products of one operand in one DSP block (the `dsp_pack` knob).

A GEMV at w4a8 has far more products than an ECP5 has multipliers (the 128x784 GEMV at 12 x 56:
672 a cycle, 156 MULT18X18D), and `mul: auto` builds the rest in LUTs. The products of one x
element (one per output row) share their 8-bit operand, and a 4-bit weight uses 4 of a block's
18 input bits. With B = b0 + b1 * 2**k, A * B = A*b0 + A*b1 * 2**k: when every A*b_i fits k
bits as a two's complement number, each product is a field of the one result, plus the borrow a
negative field below leaves (y_i = sext_k(P[k*i : k*(i+1)] + P[k*i - 1]), dsp_fields.unpack;
exact when every partial sum of the fields below fits their bits too, which
dsp_fields.field_bits checks on the operands' intervals). Xilinx packs two int8 products of a
shared operand into one DSP48E2 the same way; here it is planned on the IR, so any widths that
fit are packed: w4a8 two per block (fields of 12 bits, B of 17), w3a3 three (fields of 6, B of 16).

Where: the products `Datapath.product` builds as Product units (fp_pipeline >= FANOUT_LEVEL),
of one shared operand, in the same pipeline stage, whose other operands no other product reads
(a GEMV's weights). The packed B is formed from the other operands' values as they are before
their last operand copy and *is* that copy's register (so it can become the block's B input
register, compiler/pnr/dsp_registers.py): one register between the adder and the block where
the operand had its copies (with `target_mhz` read data passes a level of them before a DSP
block, pipeline.py; the pack takes its values that much later instead); the fields are taken
apart before the unit's last register (the landing register in the fabric). Same registers,
same cycles as the Products it replaces; with `target_mhz` the schedule gives a kernel whose
products may pack the product register the fields' carry needs (pipeline._pack_shapes), and the
cycle model counts it.

How many (`plan`): with `auto`, only when the design's products need more DSP blocks than the
part has (the named `device`'s, else the family's largest part's: the budget `mul: auto` fills,
HardwareConfig.dsp_blocks, compiler/synth/multipliers.py), and
only as many packs as bring the need down to it: each pack is one block where its products
would be one each, and it outranks any of them in `auto`'s order (LUTs saved per block), so the
packs are the products that get blocks. The products that cannot pack are counted as taking
their blocks first, so a planned pack never lands in LUTs. `all` packs every group it can
(fewer blocks for a `mul: dsp` design, or a smaller part); `none` none (not `off`, which YAML
reads as false).
"""
from __future__ import annotations

import collections
from dataclasses import dataclass

from .. import ir
from ..passes.signed_digits import shift_add_digits
from ..ranges import Interval, acc_ranges, analyze, signed_bits
from ..synth.multipliers import DSP_SHAPES, MulCell, dsp_cost
from .dsp_fields import field_bits, input_width, shared_operand
from .pipeline import FANOUT_LEVEL, is_product_of_data, operand_offsets

K = ir.OpKind

PREFIX = "pack"
"""A pack's unit (hw/datapath.PackedProduct) is named `pack<N>` in its parent."""


@dataclass(frozen=True)
class ProductPack:
    """Products of one operand `shared` built by one multiplier: `shared` times the other
    operands of `products`, packed at `field` bits each (product i at bit field * i)."""
    shared: ir.Value
    products: tuple[ir.Op, ...]
    field: int

    def other(self, v: ir.Op) -> ir.Value:
        """`v`'s operand that is not the shared one."""
        return _other(v, self.shared)


def _other(v: ir.Op, shared: ir.Value) -> ir.Value:
    a, b = v.srcs[:2]
    return b if a is shared else a


def groups(kernel: ir.KernelIR, sched, ranges: dict[int, Interval], width: int) -> list[ProductPack]:
    """The packs `kernel`'s products could form (Schedule `sched`, value intervals `ranges`,
    the DSP block's signed input `width`): Product units (unit_stages >= 2) of one operand that
    more than one of them reads, in one stage, whose other operands no other product reads (a
    GEMV's weights; their packed register takes the place of their copies), in the IR's order,
    as many to a pack as field_bits allows (a pack of one is none)."""
    roots = [v for s, _ in kernel.stores() for v in ir.store_operands(s)]
    products = [v for v in ir.toposort(roots) if is_product_of_data(v) and sched.unit_stages.get(id(v), 1) >= 2]
    uses = collections.Counter(id(s) for v in products for s in v.srcs[:2])
    by_key: dict[tuple, list[tuple[ir.Value, ir.Op]]] = {}
    for v in products:
        if (pair := shared_operand(v, uses)) is None:
            continue
        shared, other = pair
        offsets = dict(zip((id(s) for s in v.srcs), operand_offsets(v, sched.broadcast)))
        key = (id(shared), sched.ready.get(id(v)), sched.unit_stages[id(v)], offsets[id(shared)],
               offsets[id(other)] + sched.broadcast.get(id(other), 0))
        by_key.setdefault(key, []).append((shared, v))
    out = []
    for members in by_key.values():
        shared = members[0][0]
        a = ranges[id(shared)]
        i = 0
        while i < len(members):
            n, k = 1, None
            while i + n < len(members):
                bs = [ranges[id(_other(v, shared))] for _, v in members[i:i + n + 1]]
                step = field_bits(a, bs, width)
                if step is None:
                    break
                n, k = n + 1, step
            if k is not None:
                out.append(ProductPack(shared, tuple(v for _, v in members[i:i + n]), k))
            i += n
    return out


def dsp_products(kernel: ir.KernelIR, ranges: dict[int, Interval], family: str) -> int:
    """The DSP blocks `kernel`'s multipliers take when each is one (mul2dsp's cut of the operand
    widths, compiler/synth/multipliers.py dsp_cost): integer products of data and by a
    constant mul_const leaves a product, float products by their significands."""
    if family not in DSP_SHAPES:
        return 0
    roots = [v for s, _ in kernel.stores() for v in ir.store_operands(s)]
    total = 0
    for v in ir.toposort(roots):
        if not (isinstance(v, ir.Op) and v.op in (K.MUL, K.MULACC)):
            continue
        if v.dtype.is_float:
            a = b = v.dtype.man_bits + 1
        else:
            consts = [int(s.value) for s in v.srcs[:2] if isinstance(s, ir.Const)]
            if consts and (consts[0] == 0 or shift_add_digits(consts[0])):
                continue
            a, b = (signed_bits(Interval(int(s.value), int(s.value)) if isinstance(s, ir.Const) else ranges[id(s)])
                    for s in v.srcs[:2])
        total += dsp_cost(MulCell("", "", a, b, a + b), family)
    return total


def plan(candidates: list[list[ProductPack]], products: int, budget: int, mode: str) -> list[list[ProductPack]]:
    """Per kernel, the packs to build, of its `candidates` (`groups`), for a design of `products`
    DSP products (each a block) on a family of `budget` blocks, in `mode` (module docstring):
    `auto` packs the kernels' groups in order while the design needs more blocks than the budget
    and the packs have blocks left after the products outside any group."""
    if mode == "none":
        return [[] for _ in candidates]
    if mode == "all":
        return [list(c) for c in candidates]
    outside = products - sum(len(p.products) for c in candidates for p in c)
    need, free = products, budget - outside
    chosen: list[list[ProductPack]] = []
    for c in candidates:
        take = []
        for p in c:
            if need <= budget or free <= 0:
                break
            take.append(p)
            need -= len(p.products) - 1
            free -= 1
        chosen.append(take)
    return chosen


def product_packs(kernels, schedules, config) -> list[list[ProductPack]]:
    """Per kernel, the packs its Datapath builds (`plan` on the `groups` of each kernel as
    scheduled), for HardwareConfig `config` (dsp_pack, mul, the family of its timing part)."""
    family = config.timing_part().family
    width = input_width(family)
    if config.dsp_pack == "none" or config.mul == "lut" or width is None or config.fp_pipeline < FANOUT_LEVEL:
        return [[] for _ in kernels]
    ranges = [analyze(k, acc_ranges(k, config)) for k in kernels]
    candidates = [groups(k, s, r, width) for k, s, r in zip(kernels, schedules, ranges)]
    if not any(candidates):
        return [[] for _ in kernels]
    products = sum(dsp_products(k, r, family) for k, r in zip(kernels, ranges))
    return plan(candidates, products, config.dsp_blocks(family), config.dsp_pack)
