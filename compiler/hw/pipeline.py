"""Pipelining (the `fp_pipeline` knob): in which stage each value of a kernel is computed.

The controller issues one step per cycle, as without pipelining. A step issued in cycle t is
in *stage* s in cycle t + s. Every value of the step gets the first stage in which it is
available (`Schedule.ready`); register levels (free-running flip-flops, no enables) carry
values from one stage to the next:

  * memory read data: with P = fp_pipeline >= 1 the data of every read port is registered
    (it arrives in stage 0: read addresses are issued a cycle ahead), so loads are ready in
    stage 1: this cuts the block RAM's clock-to-out (5.8 ns on an ECP5) from the arithmetic;
  * integer products of two non-constant values: registered with P >= 2 (+1 stage); with
    P >= 4 registered twice (product_registers, +1 stage: a DSP product's second register
    lands it in the fabric, a LUT product holds both inside); with P >= 3 their operands also
    pass through registered copies first (+1 stage), one per
    datapath.OPERAND_GROUP products: the copies of a value broadcast to many lanes (the GEMV's
    x element) are kept apart in synthesis (datapath.DUPLICATE_ATTRIBUTE), so the placer puts
    each near its multipliers instead of routing one register across the die. A product one
    of whose operands more than OPERAND_GROUP products share (the GEMV's x element broadcast
    to every lane) takes more levels (`fan_levels`, +1 stage each): that operand first passes
    a registered copy per OPERAND_GROUP products, and, shared by more than OPERAND_GROUP**2,
    a copy per OPERAND_GROUP**2 before those, so the read-data register (inside the block
    RAM, compiler/pnr/bram_registers.py) and every copy drive at most OPERAND_GROUP copies, and
    the last level the OPERAND_GROUP products' own copies of it (one per product, not per
    group: a LUT multiplier loads each operand bit ~10 times; Datapath.own_copies).
    The other operand is taken as many stages later: a buffer whose loads are only ever such
    operands (the GEMV's weights) is read that many stages late (`Schedule.late`: more
    registers on each of its memories' read addresses), anything else passes plain registers;
  * integer adds and subtracts of data values: registered with P >= 3 (+1 stage each), so an
    unrolled reduction's adder tree has a register level per tree level; with `adder_levels`
    N > 1 a register every N levels instead (`_budget`), and a value more than FANOUT_USES ops
    read (a layer's activation, with its weights built in) reaches them through registered
    copies a stage after it is ready (`fanout_values`; +1 stage), or, for an input load, copies
    of the read data before its register (`early_copies`; no stage);
  * float units: cut into min(2**P, the unit's maximum) stages (compiler/fp: FAdd up to 6,
    FMul, FDiv and FSqrt up to 8, conversions up to 2) and their result registered: + stages;
  * read addresses: with P >= 2 (and block RAM reads) the look-ahead address is registered
    before it fans out to the memories, so read data arrives in stage 1 (+1 stage); with
    P >= 3 each memory registers its own copy of it (kept apart in synthesis like the operand
    copies), so no one flip-flop drives the addresses of block RAMs across the die (+1 stage),
    and the address is computed from the step's own counters instead of the next step's
    (`Schedule.lookahead` False): the counters' next-value logic (end compares, wrap
    multiplexers) leaves the path into the address register, which was the critical path of
    the all-DSP GEMVs (8x8, 12x13) once their datapath was pipelined; read data arrives in
    stage 3 (+1 stage);
  * memories deeper than one block RAM: from P >= 2 split into block-RAM-sized parts
    (transform.split_deep), each part's read data registered (the rule above), and every
    level of the binary multiplexer tree that selects the part registered (+1 per level);
  * values of counters and constants only (indices, loop conditions, multiplexer selects)
    are computed in stage 0 and carried to the stages that use them by registers; with P >= 3
    each consumer (an op, a load's gate, a store) reads its own copy of the last of those
    registers (Datapath.local), so no one flip-flop drives every lane's accumulator select.

Values that depend on an accumulator (the *post* cone) start in stage D = `depth`, the latest
stage any other value of the kernel is ready in; a plain accumulator is read in stage D and
written at the end of stage D, so `acc = acc + x` keeps its one-cycle loop and the logic on
that loop is never registered. Buffer stores commit in stage C = `commit` >= D, with their
address, data and gate delayed to it (post-cone values that feed no accumulator may be
pipelined further). A kernel run therefore takes C more cycles: `done` rises C cycles after
the last step's, which the cycle model adds once per run.

Interleaved accumulators (transform.interleave): an accumulator with `ways` = L > 1 holds L
independent partial values (one per output row in flight), read in stage D and written back
L cycles later, so the adder that updates it (the *ring adder*) may take L - 1 register
levels. It is a ring of L registers: the ring adder's pipeline (its stages at this level, at
most L) plus a delay line. L may exceed the adder's stages when that computes fewer padding
rows (transform.interleave_ways).

Gathers: a load whose address depends on loaded data (indexing by a tensor, an embedding
lookup) cannot be addressed a step ahead. It is *issued* in the stage its address is ready
(`Schedule.gather_issue`), on a read port of its own, and its data arrives a cycle later with
block RAM (in the same stage with comb reads), then through the read-data register when
P >= 1. Everything that uses it is scheduled after it, so a kernel with a gather commits its
stores one or more stages later (even at P = 0): it costs cycles once per run, not per step.

Hazards: a kernel that reads a buffer it also writes could read a location before an earlier
step's delayed store reaches it; such kernels are refused when C > 0 (none of the zoo's
kernels does this: tinygrad kernels read their inputs and write their outputs).
"""
from __future__ import annotations

import collections
from dataclasses import dataclass, field

from .. import float_timing, ir, timing_model
from ..config import HardwareConfig
from ..errors import CompileError
from ..ranges import Interval, acc_ranges, analyze
from .dsp_fields import field_bits, input_width, packed_range, shared_operand
from . import floatops

K = ir.OpKind

LOAD_LEVEL = 1        # fp_pipeline from which read data is registered
PRODUCT_LEVEL = 2     # fp_pipeline from which integer products are registered
MEMORY_LEVEL = 2      # fp_pipeline from which deep memories are split (transform.split_deep)
                      # and every level of their read multiplexer is registered
FANOUT_LEVEL = 3      # fp_pipeline from which integer products read registered copies of their
                      # operands (duplicates kept from Yosys's opt_merge), integer sums of data
                      # values are registered (adder trees), and every memory gets its own copy
                      # of its registered read address (a second register level)
LANDING_LEVEL = 4     # fp_pipeline from which integer products take a second register
                      # (product_registers)
OPERAND_GROUP = 4
"""Products sharing one registered copy of an operand from FANOUT_LEVEL (Datapath.operand_copy);
an operand of more products is `broadcast` (more register levels: fan_levels, module docstring)."""


def product_registers(level: int) -> int:
    """Register levels of an integer product from FANOUT_LEVEL (datapath.Product), after its
    operand copies: one; from LANDING_LEVEL two, a DSP product's first moving into the
    MULT18X18D and the second landing it in the fabric (on the 26x17 GEMV a DSP product's route
    to its adder crossed 76 columns: 16.6 ns), a LUT product holding both inside the multiplier
    (compiler/synth/lut_multiplier.py). A level of its own, not part of 3: on the 26x17 it costs a
    cycle a run and 12,500 flip-flops, and congests the route (docs/pipeline.md)."""
    return 2 if level >= LANDING_LEVEL else 1


@dataclass(frozen=True)
class Schedule:
    level: int                               # the fp_pipeline knob
    depth: int                               # D: accumulators are read, post-cone logic starts
    commit: int                              # C: buffer stores commit; extra cycles per kernel run
    ready: dict[int, int | None]             # id(value) -> first stage it is available (None: any)
    latency: dict[int, int]                  # id(op) -> register levels in or after it (absent: 0)
    unit_stages: dict[int, int]              # id(float op) -> stages of its unit (absent: 1); an op
                                             # whose latency equals its stages has an output register
    acc_write: dict[int, int]                # acc -> stage in which its new value is written
    register_loads: bool                     # read-port data registered
    address_levels: int                      # registers on the read addresses (raw data in that stage)
    gather_issue: dict[int, int] = field(default_factory=dict)   # id(gather load) -> the stage its
                                             # address is driven in (module docstring)
    sync_reads: bool = True                  # block RAM: read data a cycle after its address
    lookahead: bool = True                   # read addresses from the next step's counters (below
                                             # FANOUT_LEVEL), else from the step's own, a stage later
    broadcast: dict[int, int] = field(default_factory=dict)  # id(value) -> fan_levels, of the
                                             # operands of more than OPERAND_GROUP products, which
                                             # fan out through levels of copies first
    late: dict[int, int] = field(default_factory=dict)  # buffer slot -> stages it is read later:
                                             # more registers on its read addresses (late_buffers)
    fanout: dict[int, int] = field(default_factory=dict)  # id(value) -> readers per copy of it
                                             # (fanout_values; adder_levels > 1)
    early: frozenset[int] = frozenset()      # fan-out loads (and their casts) copied from the read
                                             # data before its register (early_copies); with
                                             # target_mhz, fan-out ops copied from their value
                                             # before their output register
    product_regs: int = 1                    # registers of each integer product after its operand
                                             # copies (product_registers; with target_mhz the delay
                                             # model's: timing_model.product_registers)
    product_packs: tuple = ()                # dsp_pack.ProductPack: products of one multiplier
                                             # (planned for the whole design: Design.schedules)
    lut_product_regs: int | None = None      # with target_mhz, products both in DSP blocks and in
                                             # LUTs (mul auto past the blocks): the registers the
                                             # LUT products alone would need, when fewer than
                                             # product_regs (Design.mul_note)
    unit_lead: dict[int, int] = field(default_factory=dict)  # id(ring op) -> cycles before its
                                             # accumulator its other operands enter its unit (with
                                             # target_mhz a ring's fused multiply-add: ring_lead)
    operand_registers: frozenset[int] = frozenset()  # id(float op) whose operands are registered
                                             # before its unit, a stage of its latency (with
                                             # target_mhz a unit with fewer stages than its
                                             # boundaries: _op_timing)
    sums: frozenset[int] = frozenset()       # id(read address) built as a register stepping
                                             # with the counters (with target_mhz: sum_registers)
    cuts: frozenset[int] = frozenset()       # id(condition of counters' compares) made a stage
                                             # after its compares (with target_mhz: cut_conditions)

    @property
    def load_stage(self) -> int:
        """The stage in which read ports deliver the data of a step's loads."""
        return load_stage(self.address_levels, self.lookahead, self.sync_reads)

    @property
    def load_ready(self) -> int:
        """The stage in which loads are ready (after the read-data register)."""
        return self.load_stage + (1 if self.register_loads else 0)

    def port_stage(self, load: ir.Load) -> int:
        """The stage in which the read port delivers this load's data."""
        issue = self.gather_issue.get(id(load))
        if issue is None:
            return self.load_stage + self.late.get(load.buf, 0)
        return issue + (1 if self.sync_reads else 0)

    def data_stage(self, load: ir.Load) -> int:
        """The stage in which this load's data is ready (after the read-data register)."""
        return self.port_stage(load) + (1 if self.register_loads else 0)


def float_stages(v: ir.Op, level: int, clock: bool = False, period: tuple[float, timing_model.Delays] | None = None) -> int:
    """Stages of the float unit computing `v` at fp_pipeline `level`: 2**level, at most as
    many as the unit has boundaries for (FAdd 6, FMul, FDiv, FSqrt 8, conversions 2). At a
    target clock (`clock`, from TARGET_LEVEL), as many as its boundaries allow, its CLOCK_CUTS
    too (FAdd 10, FMul 10, FWideMul 10, FMulAdd 17, FloatToFloat 4, IntToFloat 5, FloatToInt 3,
    FDiv p + 8, FSqrt p + 7): placed alone, fp32 adders closed at 85 MHz and conversions at
    59-64 with fewer (docs/timing.md, "Float units at a target clock"); given the `period` (ns,
    and the part's delays), the fewest that meet it (float_timing.fewest_stages): every stage is
    a cycle of latency and a register across the unit's width, which a slower clock need not pay."""
    if clock:
        most = floatops.max_stages(v, clock=True)
        fewest = most if period is None else float_timing.fewest_stages(v, most, *period)
        # with fewer than its most its operands take a register (operand_registers): one short
        # of it would take as many cycles
        return most if fewest + 1 >= most else fewest
    return min(2 ** level, floatops.max_stages(v)) if level > 0 else 1


def operand_registers(v: ir.Op, stages: int, period: tuple[float, timing_model.Delays] | None) -> int:
    """1 where float op `v`'s unit, at a target clock (`period`), has fewer stages than its
    boundaries: its operands pass a register of the datapath before it. A unit was timed placed
    alone between registers, and with all its boundaries FAdd, FMul and FWideMul take their
    operands into their own copies ("inputs"); with fewer they lose them, and what reaches them
    comes across the design: the gemv 48x80 bf16 at target_mhz 100, its FMul at 4 stages,
    closed at 80.7 MHz on a block RAM's read data routed into the multiplier's exponent logic
    (12.4 ns, 8.8 of it routing), where with every boundary it closed at 117.3. 0 elsewhere."""
    return int(period is not None and stages < floatops.max_stages(v, clock=True))


def ring_lead(v: ir.Op, post: set[int], clock: bool) -> int:
    """Cycles before the accumulator that ring op `v`'s other operands enter its unit: at a target
    clock a fused multiply-add's product is computed before its addend, the accumulator, is
    taken (FMulAdd ring=True), so the ring's stages hold only the addition and its roundings.
    layernorm fp16 at target_mhz 150 closed at 56.6 MHz with the product inside its ring's 8
    stages (docs/timing.md). 0 for any other op."""
    if not (clock and v.op is K.MULACC and id(v.srcs[2]) in post and not any(id(s) in post for s in v.srcs[:2])):
        return 0
    from ..fp.muladd import FMulAdd
    return FMulAdd.LEAD


def operand_lead(lead: dict[int, int], v: ir.Value, i: int) -> int:
    """Stages before op `v`'s inputs that it takes its operand i (`lead`: Schedule.unit_lead): a
    ring's fused multiply-add takes its product's operands, a and b, that many early."""
    return lead.get(id(v), 0) if i < 2 else 0


def data_operands(v: ir.Value, gathers: frozenset[int] = frozenset()) -> tuple[ir.Value, ...]:
    """Operands whose *values* flow into `v` (a load's index is an address, issued ahead,
    except a gather's, which must be ready before the gather issues)."""
    if isinstance(v, ir.Load):
        return tuple(x for x in (v.gate, v.alt, v.index if id(v) in gathers else None) if x is not None)
    return ir.operands(v)


def is_gather(load: ir.Load) -> bool:
    """A load whose address depends on loaded data (or on an accumulator)."""
    return any(isinstance(a, (ir.Load, ir.AccLoad)) for a in ir.toposort([load.index]))


@ir.per_kernel
def gathers_of(kernel: ir.KernelIR) -> frozenset[int]:
    """id() of every gather load of the kernel."""
    roots = [x for s, _ in kernel.stores() for x in ir.store_operands(s)]
    return frozenset(id(v) for v in ir.toposort(roots) if isinstance(v, ir.Load) and is_gather(v))


def _data_order(kernel: ir.KernelIR, gathers: frozenset[int]) -> list[ir.Value]:
    return ir.toposort([x for s, _ in kernel.stores() for x in ir.store_operands(s)],
                       lambda v: data_operands(v, gathers))


def counter_times_constant(v: ir.Value) -> tuple[int, int] | None:
    """(loop, c) when `v` is an integer counter times a constant that is not a power of two (a
    power of two is wiring, cheaper than a register), else None."""
    if not (isinstance(v, ir.Op) and v.op is K.MUL and not v.dtype.is_float and len(v.srcs) == 2):
        return None
    a, b = v.srcs
    if isinstance(b, ir.Counter):
        a, b = b, a
    if not (isinstance(a, ir.Counter) and isinstance(b, ir.Const)):
        return None
    c = int(b.value)
    return None if abs(c) & (abs(c) - 1) == 0 else (a.loop, c)


SUM_REGISTER_TERMS = 5
"""Terms (counters' multiples and the constant) from which a read address of several counters
can be a register of its own (kernel._Scaled._sum) rather than a balanced tree of adders
(passes/indices): from 5 terms the tree is three adders deep."""
SUM_REGISTER_CHAINS = 4
"""Carry chains (the tree's adder levels, and the range check where the index can leave the
memory: kernel._in_range) from which such an address is a sum register. Each is a route of
1.4-2.0 ns: a padded convolution's input index at target_mhz 150 (six terms and the check, four
chains) took 12.8 ns, 78 MHz, and as a register 127.8. Fewer fit: with every index of two
counters or more a register, the sequential digits CNN at target_mhz 200 closed at 138.9 MHz
against 161.9 as trees, its three-counter conv index (`s_i0x9_i3x3_i4x1`) then its critical path."""


def scaled_counter(v: ir.Value) -> bool:
    """Whether `v` is a register of its own at a target clock (kernel._Scaled): counter_times_constant."""
    return counter_times_constant(v) is not None


def sum_register(v: ir.Value, inside: bool) -> tuple[tuple[tuple[int, int], ...], int] | None:
    """affine_form(v) when read address `v` is a register of its own with target_mhz
    (kernel._Scaled._sum): a sum of SUM_REGISTER_TERMS terms or more whose adder tree, with the
    range check where its interval can leave the memory (not `inside`), would be
    SUM_REGISTER_CHAINS carry chains or more; else None. The kernel builds it by this rule and
    the delay model (_kernel_paths) times it by the same one."""
    form = affine_form(v)
    if form is None:
        return None
    terms = len(form[0]) + bool(form[1])
    chains = (terms - 1).bit_length() + (not inside)
    return form if terms >= SUM_REGISTER_TERMS and chains >= SUM_REGISTER_CHAINS else None


def sum_registers(kernel: ir.KernelIR, order: list[ir.Value], gathers: frozenset[int],
                  clock: "timing_model.Paths | None", period_ns: float | None) -> frozenset[int]:
    """id() of the read addresses (the index of a load that is not a gather) built as a register
    of their own stepping with the counters (kernel._Scaled._sum) at a target clock: those
    sum_register's rule takes, and those of SUM_REGISTER_TERMS counters' multiples or more whose
    tree of adders and range check the delay model times past `period_ns`
    (timing_model.read_index_ns) where the register's own step would be faster
    (timing_model.sum_register_ns). Without the second rule an index of five counters and no
    check stayed a tree of three adders the model said was late: an unpadded convolution 3 -> 6
    on 10 x 10 at target_mhz 150 closed at 128.6 MHz (median of seeds 1-3), its critical path
    that index (7.3-8.2 ns, 4.1-5.0 routing; timing_model said 7.4), and with it 183.5. Fewer
    counters stay trees even so: the digits CNN in dataflow at target_mhz 200, whose indices of
    two to four counters (and a constant) the model times at 5.4-7.1 ns, went 154.4 -> 149.5 MHz
    (median of seeds 1-3) with its four counters and a constant as registers, and 155.7 -> 149.6
    (seeds 1-6) with every such index a register (seed 4's path the step id -> a sum's flag, 7.2
    ns, 5.5 routing). Empty without a target clock."""
    if clock is None:
        return frozenset()
    sizes = {b.slot: b.size for b in kernel.buffers}
    out: set[int] = set()
    for v in order:
        if not isinstance(v, ir.Load) or id(v) in gathers or id(v.index) in out:
            continue
        inside = clock.ranges[id(v.index)].within(Interval(0, sizes[v.buf] - 1))
        if sum_register(v.index, inside) is not None:
            out.add(id(v.index))
        elif (form := affine_form(v.index)) is not None and len(form[0]) >= SUM_REGISTER_TERMS:
            width = clock.width(v.index)
            tree = timing_model.read_index_ns(v.index, inside, clock.width, clock.d, scaled_counter)
            if tree > period_ns and timing_model.sum_register_ns(width, inside, clock.d) < tree:
                out.add(id(v.index))
    return frozenset(out)


CONDITION_OPS = (K.AND, K.OR)
COMPARE_OPS = (K.CMPLT, K.CMPNE, K.CMPEQ)


def is_condition(v: ir.Value) -> bool:
    """Whether `v` is an AND or OR with a compare, or such a condition, among its operands (a
    padded convolution's load gate: the range tests of y + ky - p and x + kx - p, ANDed)."""
    return isinstance(v, ir.Op) and v.op in CONDITION_OPS and any(
        isinstance(x, ir.Op) and (x.op in COMPARE_OPS or is_condition(x)) for x in v.srcs)


def cut_conditions(order: list[ir.Value], ready: dict[int, int | None], clock: "timing_model.Paths | None",
                   period_ns: float | None) -> frozenset[int]:
    """id() of the conditions of counters and constants (is_condition; a load's, a store's or an
    op's operand, in no stage of `ready`: computed from the issuing step's counters and carried
    along) made a stage after
    their compares, from a register of each (Datapath.local), at a target clock where the delay
    model times the condition in one stage past `period_ns` (timing_model.index_ns: its adders,
    compares and AND tree from the counters). A padded convolution 1 -> 8 on 16 x 16 at
    target_mhz 150 had its load gate so as its critical path on every seed (a counter -> the
    gate's copy, 6.4-7.5 ns, 3.6-4.7 of it routing; 148.5 MHz at the median of seeds 1-3, 160.9
    with the cut). The conditions inside a cut one are cut with it. Empty without a target clock."""
    if clock is None:
        return frozenset()
    out: set[int] = set()

    def width(v: ir.Value) -> int:               # a compare's carry chain is its operands' width
        if isinstance(v, ir.Op) and v.op in COMPARE_OPS:
            return max(clock.width(x) for x in v.srcs)
        return clock.width(v)

    def cut(v: ir.Value) -> None:
        out.add(id(v))
        for x in v.srcs:
            if is_condition(x) and ready.get(id(x)) is None:
                cut(x)
    for v in reversed(order):                    # users first: a cut condition cuts those inside it
        if id(v) not in out and ready.get(id(v)) is None and is_condition(v) and counters_only(v) \
                and timing_model.index_ns(v, width, clock.d, scaled_counter) > period_ns:
            cut(v)
    return frozenset(out)


def counters_only(v: ir.Value) -> bool:
    """Whether `v` is computed from counters and constants alone (no load, no accumulator)."""
    return not any(isinstance(x, (ir.Load, ir.AccLoad)) for x in ir.toposort([v]))


def affine_form(v: ir.Value) -> tuple[tuple[tuple[int, int], ...], int] | None:
    """((loop, coefficient) ..., constant) when integer `v` is a sum of two or more counters'
    multiples and a constant (`i4*12 + i1*12 + i5*3 + i2*4 + i3*144 - 13`, a padded
    convolution's input index) built of additions, subtractions, negations and products or
    left shifts by constants, else None (one counter's multiple is counter_times_constant's)."""
    if not isinstance(v, ir.Op) or v.dtype.is_float or v.op not in (K.ADD, K.SUB):
        return None
    memo: dict[int, tuple[dict[int, int], int] | None] = {}

    def form(x: ir.Value) -> tuple[dict[int, int], int] | None:
        if id(x) in memo:
            return memo[id(x)]
        out = None
        if isinstance(x, ir.Counter):
            out = {x.loop: 1}, 0
        elif isinstance(x, ir.Const) and not x.dtype.is_float:
            out = {}, int(x.value)
        elif isinstance(x, ir.Op) and not x.dtype.is_float and x.op in (K.ADD, K.SUB, K.NEG, K.MUL, K.SHL):
            parts = [form(a) for a in x.srcs]
            if all(p is not None for p in parts):
                if x.op is K.NEG:
                    out = _scaled_form(parts[0], -1)
                elif x.op in (K.ADD, K.SUB):
                    (ta, ca), (tb, cb) = parts
                    sign = -1 if x.op is K.SUB else 1
                    terms = dict(ta)
                    for loop, c in tb.items():
                        terms[loop] = terms.get(loop, 0) + sign * c
                    out = {l: c for l, c in terms.items() if c}, ca + sign * cb
                elif x.op is K.MUL and (not parts[0][0] or not parts[1][0]):
                    (ta, ca), (tb, cb) = parts
                    out = _scaled_form((ta, ca), cb) if not tb else _scaled_form((tb, cb), ca)
                elif x.op is K.SHL and not parts[1][0] and 0 <= parts[1][1] < 32:
                    out = _scaled_form(parts[0], 1 << parts[1][1])
        memo[id(x)] = out
        return out
    got = form(v)
    if got is None or len(got[0]) < 2:
        return None
    return tuple(sorted(got[0].items())), got[1]


def _scaled_form(f: tuple[dict[int, int], int], k: int) -> tuple[dict[int, int], int]:
    terms, c = f
    return {l: k * t for l, t in terms.items() if k * t}, k * c


def load_stage(address_levels: int, lookahead: bool, sync_reads: bool) -> int:
    """The stage in which read ports deliver a step's loads: after the address registers, and a
    stage later when the address comes from the step's own counters into a block RAM."""
    return address_levels + (0 if lookahead or not sync_reads else 1)


def fan_levels(uses: int) -> int:
    """Levels of copies a value shared by `uses` products passes before each product's own
    copy: one per power of OPERAND_GROUP below `uses` (4 products: none, they share an
    operand copy; up to 16: a copy per 4; up to 64: a copy per 16, then per 4), so no
    register drives more than OPERAND_GROUP copies (module docstring)."""
    levels = 0
    while uses > OPERAND_GROUP ** (levels + 1):
        levels += 1
    return levels


def is_product_of_data(v: ir.Value) -> bool:
    """An integer product of two non-constant values (a Product from FANOUT_LEVEL)."""
    return isinstance(v, ir.Op) and v.op is K.MUL and not v.dtype.is_float \
        and not any(isinstance(s, ir.Const) for s in v.srcs[:2])


def is_read_data(v: ir.Value) -> bool:
    """A load, or a cast of one (the same net)."""
    while isinstance(v, ir.Op) and v.op in (K.CAST, K.BITCAST):
        v = v.srcs[0]
    return isinstance(v, ir.Load)


def broadcast_operands(order: list[ir.Value], level: int) -> dict[int, int]:
    """id() -> fan_levels of the values that more than OPERAND_GROUP integer products of two
    non-constant values use as an operand (from FANOUT_LEVEL; module docstring)."""
    if level < FANOUT_LEVEL:
        return {}
    uses: dict[int, int] = {}
    for v in order:
        if is_product_of_data(v):
            for s in v.srcs[:2]:
                uses[id(s)] = uses.get(id(s), 0) + 1
    return {i: fan_levels(n) for i, n in uses.items() if n > OPERAND_GROUP}


def operand_offsets(v: ir.Op, broadcast: dict[int, int]) -> list[int]:
    """How many stages after a broadcast product's inputs each of its operands is taken: a
    broadcast operand passes its fan_levels of copies first, so an operand with fewer levels
    (the GEMV's weight: none) is taken as many stages later (Datapath.product)."""
    levels = [broadcast.get(id(s), 0) for s in v.srcs]
    return [max(levels) - n for n in levels]


def late_buffers(order: list[ir.Value], broadcast: dict[int, int], gathers: frozenset[int]) -> dict[int, int]:
    """Slot -> stages, for the buffers whose every load is only ever taken stages after a
    broadcast product's inputs (operand_offsets: the GEMV's weights, the other operand of a
    product with the x element): such a buffer is read that many stages later, through more
    address registers per memory (a few flip-flops per block RAM) instead of registers on
    every data bit (2,048 per stage on the int8 GEMV 16x16)."""
    if not broadcast:
        return {}
    uses: dict[int, list[ir.Op]] = {}
    for v in order:
        for o in data_operands(v, gathers):
            uses.setdefault(id(o), []).append(v)

    def taken_after(v: ir.Value, u: ir.Value) -> int:    # stages after its ready use `u` takes v
        if isinstance(u, ir.Op) and u.op in (K.CAST, K.BITCAST):
            return slack(u)                    # a cast adds no register
        if isinstance(u, ir.Op) and u.op is K.MUL and any(id(s) in broadcast for s in u.srcs[:2]):
            return min(off for s, off in zip(u.srcs, operand_offsets(u, broadcast)) if s is v)
        return 0

    def slack(v: ir.Value) -> int:             # the fewest stages after its ready any use takes it
        return min((taken_after(v, u) for u in uses.get(id(v), [])), default=0)

    late: dict[int, int] = {}
    for v in order:
        if isinstance(v, ir.Load):
            late[v.buf] = min(late.get(v.buf, 1 << 30), 0 if id(v) in gathers else slack(v))
    return {b: n for b, n in late.items() if n > 0}


def later_reads(kernel: ir.KernelIR, order: list[ir.Value], operands, ready: dict, latency: dict[int, int],
                unit_stages: dict[int, int], broadcast: dict[int, int], fanout: dict[int, int], early: set[int],
                muxes: set[int], gathers: frozenset[int], commit: int, acc_write: dict[int, int],
                late: dict[int, int], keep: frozenset[int], lead: dict[int, int]) -> dict[int, int]:
    """Slot -> stages, for the buffers read ahead of every use of their data (a layer's bias and
    requantisation scale, loaded when a step issues and added after its adder tree and
    accumulator, 7-8 stages on): each such memory is read that many stages later, through
    registers on its read address (as `late`), instead of registers on every data bit. Moves
    `ready` of those loads (and of casts of them, which add no register) in place; no use
    takes its operand in another stage, so depth and commit stay. Only where the address (and
    the port's `own` flag) is narrower than the data: on the KWS shape at w4a6 the 14-bit
    scales' delay chains were 8,400 of its 82,462 flip-flops. Not for gathers, loads read
    through copies or multiplexers, buffers already late or in `keep`. `lead`: Schedule.unit_lead
    (a ring's product operands are taken that many stages before its accumulator)."""
    uses: dict[int, list[tuple[int, ir.Value | None]]] = {}       # id(value) -> (stage taken, user)
    for u in order:
        if not isinstance(u, (ir.Op, ir.Load)):
            continue
        if isinstance(u, ir.Op) and unit_stages.get(id(u), 1) > 2 and u.op is K.MUL:
            for o, off in zip(u.srcs, operand_offsets(u, broadcast)):     # Datapath.product
                uses.setdefault(id(o), []).append((ready[id(u)] - latency[id(u)] + off, u))
            continue
        for i, o in enumerate(operands(u)):
            taken = None if isinstance(u, ir.Load) or id(u) in muxes or ready[id(u)] is None \
                else ready[id(u)] - latency.get(id(u), 0) - operand_lead(lead, u, i)
            uses.setdefault(id(o), []).append((taken, u))
    for s, _ in kernel.stores():
        stage = acc_write[s.acc] if isinstance(s, ir.AccStore) else commit
        for o in ir.store_operands(s):
            uses.setdefault(id(o), []).append((stage, None))

    def moves_with(u: ir.Value | None, v: ir.Value) -> bool:     # a cast of v adding no register
        return isinstance(u, ir.Op) and u.op in (K.CAST, K.BITCAST) and not latency.get(id(u)) \
            and ready[id(u)] == ready[id(v)]

    def slack(v: ir.Value) -> int:                 # the fewest stages after ready any use takes v
        if id(v) in fanout or id(v) in early or id(v) in broadcast:
            return 0
        out = 1 << 30
        for taken, u in uses.get(id(v), []):
            if taken is None:
                return 0
            out = min(out, slack(u) if moves_with(u, v) else taken - ready[id(v)])   # a cast's uses count
        return 0 if out == 1 << 30 else out

    decls = {b.slot: b for b in kernel.buffers}
    loads: dict[int, list[ir.Load]] = {}
    for v in order:
        if isinstance(v, ir.Load):
            loads.setdefault(v.buf, []).append(v)
    later: dict[int, int] = {}
    for buf, ls in loads.items():
        if buf in late or buf in keep or any(id(v) in gathers for v in ls):
            continue
        n = min(slack(v) for v in ls)
        address = max(1, (decls[buf].size - 1).bit_length())
        if n > 0 and address + 1 < decls[buf].width:
            later[buf] = n

    def shift(v: ir.Value, n: int) -> None:        # v and the casts of it that move with it
        for _, u in uses.get(id(v), []):
            if moves_with(u, v):
                shift(u, n)
        ready[id(v)] += n
    for buf, n in later.items():
        for v in loads[buf]:
            shift(v, n)
    return later


def _pack_shapes(kernel: ir.KernelIR, products: list[ir.Op], config: HardwareConfig) -> list[tuple[int, int, int]]:
    """(A width, packed B width, field width) of the packs of two the kernel's `products` could
    form (hw/dsp_pack.py: an operand two or more share, the other read by one alone), for
    product_registers: whether the design will pack is decided for all its kernels once they are
    scheduled (Design.schedules), so the registers allow for it wherever it may."""
    width = input_width(config.timing_part().family)
    if config.dsp_pack == "none" or config.mul == "lut" or width is None:
        return []
    uses = collections.Counter(id(s) for v in products for s in v.srcs[:2])
    ranges = analyze(kernel, acc_ranges(kernel, config))
    out = set()
    for v in products:
        if (pair := shared_operand(v, uses)) is None:
            continue
        a, b = (ranges[id(s)] for s in pair)
        if k := field_bits(a, [b] * 2, width):
            out.add((a.shape.width, packed_range([b] * 2, k).shape.width, k))
    return sorted(out)


def _op_timing(v: ir.Op, level: int, muxes: set[int], broadcast: dict[int, int], registers: int,
               period: tuple[float, timing_model.Delays] | None) -> tuple[int, int]:
    """(unit stages, latency) of an op of data values outside the accumulator loops (`period`:
    at a target clock, its period in ns and the part's delays)."""
    if id(v) in muxes:
        return 1, 1
    if floatops.is_float_op(v) and floatops.unit_of(v) is not None and level > 0:
        stages = float_stages(v, level, period is not None, period)
        # its internal boundaries and an output register, and a unit with fewer stages than its
        # boundaries a register on its operands (operand_registers)
        return stages, stages + operand_registers(v, stages, period)
    if v.op in (K.MUL, K.MULACC) and level >= PRODUCT_LEVEL and \
            not any(isinstance(s, ir.Const) for s in v.srcs[:2]):
        # from FANOUT_LEVEL: its operands' own registers, then the product's (datapath.py), after
        # the levels of copies of a broadcast operand's fan-out
        if level < FANOUT_LEVEL:
            return 1, 1
        if v.op is K.MULACC:
            return 2, 2
        stages = 1 + registers + max(broadcast.get(id(s), 0) for s in v.srcs[:2])
        return stages, stages
    if v.op in (K.ADD, K.SUB) and level >= FANOUT_LEVEL and not v.dtype.is_float:
        return 1, 1                            # each level of an unrolled reduction's adder tree
    return 1, 0


CARRY_OPS = frozenset({K.ADD, K.SUB, K.NEG, K.MAX, K.CMPLT, K.CMPNE, K.CMPEQ})


def on_carry_chain(v: ir.Op) -> bool:
    """Whether integer op `v` is built on a carry chain, one adder level (HardwareConfig.adder_levels,
    passes/constants.carry_levels): CARRY_OPS, but not a compare or max its operand's high bits
    decide (ir.bit_test)."""
    return v.op in CARRY_OPS and ir.bit_test(v) is None

CONST_PRODUCT_LEVELS = 2
"""Adder levels a product by a constant counts (a DSP block's multiply, ~2 carry chains' delay)."""


def _budget(v: ir.Op, r: int, budget: int, ready: dict, operands, carried: dict[int, int],
            latency: dict[int, int], fanout: dict[int, int]) -> None:
    """adder_levels > 1: whether integer op `v`, whose operands are ready in stage `r`, ends its
    stage with a register. Levels count along the operands ready in that stage (one ready
    earlier comes through a register); a carry op adds one, a product by a constant
    CONST_PRODUCT_LEVELS, other logic (shifts, multiplexers, casts) none, a registered unit (a
    float unit, a product of two data values) ends its own stage. The op whose levels reach
    the budget is registered and its users start again from 0; so is a fan-out value."""
    floats = v.dtype.is_float or any(s.dtype.is_float for s in v.srcs)
    const_product = v.op is K.MUL and any(isinstance(x, ir.Const) for x in v.srcs[:2])
    own = 0 if floats else CONST_PRODUCT_LEVELS if const_product else \
        1 if on_carry_chain(v) else 0
    before = max((carried.get(id(o), 0) for o in operands(v) if ready.get(id(o)) == r), default=0)
    if floats or (not own and latency.get(id(v), 0) > 0):    # float logic, a registered unit
        carried[id(v)] = 0
        return
    levels = own + before
    # a fan-out value's copies are its readers' registers: levels before them stay in its stage
    # only when they are wires (casts, shifts) of registers
    if levels >= budget or (id(v) in fanout and levels > 0):
        latency[id(v)] = 1
        carried[id(v)] = 0
    else:
        latency.pop(id(v), None)
        carried[id(v)] = levels


FANOUT_USES = 8
"""adder_levels > 1: a data value more ops than this read is a *fan-out* value (`fanout_values`)."""


def fanout_values(order: list[ir.Value], operands, unit_stages: dict[int, int], skip: set[int]) -> dict[int, int]:
    """id(value) -> readers per copy, of the data values (not in `skip`: counters, constants, the post cone)
    that more than FANOUT_USES single-stage integer ops read: a layer's activation in a model
    with its weights built in, read by a shifted term of every product of the next layer's. Such
    a value ends its stage with a register, and its readers take registered copies of it a stage
    later, each copy serving its share of them (Datapath.op): one register driving every reader
    across the die was the critical path of the jet-shaped MLP (8.5 ns of routing from one
    activation's clip into the next layer's adders). ~sqrt(readers) readers per copy, so the
    register and each copy drive about as many loads."""
    uses: dict[int, int] = {}
    for v in order:
        if isinstance(v, ir.Op) and id(v) not in skip and unit_stages.get(id(v), 1) == 1 \
                and not v.dtype.is_float and not any(s.dtype.is_float for s in v.srcs):
            for o in operands(v):
                uses[id(o)] = uses.get(id(o), 0) + 1
    return {i: max(2, round(n ** 0.5)) for i, n in uses.items() if n > FANOUT_USES and i not in skip}


def early_copies(order: list[ir.Value], fanout: dict[int, int], register_loads: bool,
                 gathers: frozenset[int]) -> frozenset[int]:
    """The fan-out values whose copies take the read data before its register instead of after:
    a load (ungated, not a gather) or a cast of one, the input of a model with its weights built
    in, read by the first layer's every product. Their copies replace the read-data register, so
    their readers take them in the stage the load is ready, not a stage later (Datapath.fanned)."""
    if not register_loads:
        return frozenset()

    def plain(v: ir.Value) -> bool:
        return isinstance(v, ir.Load) and v.gate is None and id(v) not in gathers

    return frozenset(id(v) for v in order if id(v) in fanout and (
        plain(v) or (isinstance(v, ir.Op) and v.op in (K.CAST, K.BITCAST) and not v.dtype.is_float
                     and not v.srcs[0].dtype.is_float and plain(v.srcs[0]))))


def early_op(v: ir.Value, ready: dict, latency: dict[int, int], unit_stages: dict[int, int]) -> bool:
    """With target_mhz: whether fan-out value `v` is an op registered in its stage (or a cast of
    one ready in the same stage) whose copies can take its value before that register and be it,
    duplicated (Datapath.fanned), so its readers start in the stage it is ready, not a stage later."""
    while isinstance(v, ir.Op) and not latency.get(id(v)) and v.op in (K.CAST, K.BITCAST) \
            and not v.dtype.is_float and ready.get(id(v.srcs[0])) == ready.get(id(v)):
        v = v.srcs[0]
    return isinstance(v, ir.Op) and latency.get(id(v)) == 1 and unit_stages.get(id(v), 1) == 1 \
        and not v.dtype.is_float and not any(s.dtype.is_float for s in v.srcs)


def ring_adders(kernel: ir.KernelIR) -> dict[int, int]:
    """id(op) -> ways, for the op that directly updates each interleaved accumulator."""
    ways = {a.index: a.ways for a in kernel.accs if a.ways > 1}
    return {id(s.value): ways[s.acc] for s, _ in kernel.stores()
            if isinstance(s, ir.AccStore) and s.acc in ways and isinstance(s.value, ir.Op)}


def schedule(kernel: ir.KernelIR, config: HardwareConfig, keep: frozenset[int] = frozenset()) -> Schedule:
    """The pipeline stage of every value of `kernel` (module docstring). `keep`: buffer slots
    read in the stage their loads issue in, never later (later_reads): those that rotate
    through banks or live in another kernel (KernelHW). Remembered per kernel and model-wide
    knobs (HardwareConfig.model_wide)."""
    return _schedule(kernel, config.model_wide, keep)


@ir.per_kernel
def _schedule(kernel: ir.KernelIR, config: HardwareConfig, keep: frozenset[int]) -> Schedule:
    level = config.fp_pipeline
    gathers = gathers_of(kernel)
    operands = lambda v: data_operands(v, gathers)  # noqa: E731
    order = _data_order(kernel, gathers)
    post = ir.after_accumulators(order, operands)
    for v in order:
        if id(v) in gathers and id(v) in post:
            raise CompileError(f"{kernel.name}: the address of a load of buffer {v.buf} depends on an "
                               "accumulator (a running sum or max): such a gather is not supported")
    feeds_acc: set[int] = set()                 # values on the way into an accumulator
    for s, _ in kernel.stores():
        if isinstance(s, ir.AccStore):
            stack = [s.value]
            while stack:
                v = stack.pop()
                if id(v) not in feeds_acc:
                    feeds_acc.add(id(v))
                    stack.extend(operands(v))
    rings = ring_adders(kernel)
    broadcast = broadcast_operands(order, level)
    # read multiplexers: where(c, a, b) with c of counters only and a, b loads or such muxes
    floating: set[int] = set()
    muxes: set[int] = set()
    for v in order:
        if isinstance(v, (ir.Const, ir.Counter)) or \
                (isinstance(v, ir.Op) and all(id(o) in floating for o in operands(v))):
            floating.add(id(v))
        if level >= MEMORY_LEVEL and isinstance(v, ir.Op) and v.op is K.WHERE and id(v.srcs[0]) in floating \
                and all(isinstance(x, ir.Load) or id(x) in muxes for x in v.srcs[1:]):
            muxes.add(id(v))

    d = timing_model.delays(config.timing_part())
    # read data leaves its memory (or its output register) as kernel_paths times it, so the
    # registers placed here give the estimate's path, not a faster one
    clock = timing_model.Paths(kernel, d, order, operands, config, set(muxes), limit_mhz=config.target_mhz,
                               load_clk_q=load_clk_q(d, level >= LOAD_LEVEL, config.mem_read == "sync")) \
        if level >= FANOUT_LEVEL and config.target_mhz is not None else None
    product_regs = product_registers(level)
    lut_product_regs = None
    if clock:                                  # as many as the products' stages need where they
        products = [v for v in order if is_product_of_data(v)]           # are built (product_sites)
        shapes = [(clock.width(v.srcs[0]), clock.width(v.srcs[1])) for v in products]
        sites = timing_model.product_sites(config.mul, len(products), config.dsp_blocks(d.family), kernel=True)
        least, period = product_regs, 1000.0 / config.target_mhz
        product_regs = timing_model.product_registers(shapes, period, sites, clock.d, least=least,
                                                      packs=_pack_shapes(kernel, products, config))
        if timing_model.LUT_SITE in sites and len(sites) > 1:
            alone = timing_model.product_registers(shapes, period, (timing_model.LUT_SITE,), clock.d, least=least)
            lut_product_regs = alone if alone < product_regs else None
        clock.product_tails(products, product_regs, sites)
        if config.mul != "lut" and level >= LOAD_LEVEL and \
                timing_model.memory_to_dsp_ns(clock.d) > 1000.0 / config.target_mhz:
            # read data a DSP product takes passes a level of copies in the fabric first, as a
            # broadcast operand does: a register between the block RAM's and the DSP block's
            for v in order:
                if is_product_of_data(v):
                    for s in v.srcs[:2]:
                        if is_read_data(s):
                            broadcast[id(s)] = max(broadcast.get(id(s), 0), 1)
    latency: dict[int, int] = {}
    unit_stages: dict[int, int] = {}
    unit_lead: dict[int, int] = {}
    registered: set[int] = set()               # Schedule.operand_registers
    target = timing_model.target_period(config) if clock else None    # _op_timing's period
    for v in order:
        if not isinstance(v, ir.Op):
            continue
        stages = 1
        if id(v) in rings:
            # its last register is the accumulator's; ways beyond the unit's stages are a
            # delay line of plain registers (KernelHW._accumulators)
            if lead := ring_lead(v, post, clock is not None):
                unit_lead[id(v)] = lead
            stages = min(rings[id(v)], floatops.max_stages(v, True, ring=True) if lead
                         else float_stages(v, level, clock is not None)) if floatops.is_float_op(v) \
                else rings[id(v)]
            lat = stages - 1
        elif id(v) in post and id(v) in feeds_acc:
            lat = 0                            # the accumulator's one-cycle loop
        elif id(v) in floating:
            lat = 0                            # counters and constants only: computed in stage 0
        else:
            stages, lat = _op_timing(v, level, muxes, broadcast, product_regs, target)
            if floatops.is_float_op(v) and lat > stages:       # a register before its unit
                registered.add(id(v))
        if lat:
            latency[id(v)] = lat
        if stages > 1:
            unit_stages[id(v)] = stages

    register_loads = level >= LOAD_LEVEL
    # every address a constant (a fully unrolled layer): nothing to register on the way
    const_addresses = all(isinstance(v.index, ir.Const) for v in order if isinstance(v, ir.Load))
    address_levels = 0 if level < MEMORY_LEVEL or config.mem_read != "sync" or const_addresses \
        else 2 if level >= FANOUT_LEVEL else 1
    lookahead = not (level >= FANOUT_LEVEL and address_levels)
    load_ready = load_stage(address_levels, lookahead, config.mem_read == "sync") + (1 if register_loads else 0)
    late = late_buffers(order, broadcast, gathers) if address_levels else {}
    ready: dict[int, int | None] = {}
    gather_issue: dict[int, int] = {}
    budget = config.adder_levels if level >= FANOUT_LEVEL and config.adder_levels > 1 else 0
    carried: dict[int, int] = {}               # adder levels since the last register (_budget)
    fanout = fanout_values(order, operands, unit_stages, post | floating | set(muxes)) if budget or clock else {}
    early = set(early_copies(order, fanout, register_loads, gathers))

    def combine(v, base):
        # a fan-out value reaches its readers through copies, a stage after it is ready (in
        # that stage when they copy the read data: early_copies)
        stages = [ready[id(o)] + (id(o) in fanout and id(o) not in early) for o in operands(v)
                  if ready[id(o)] is not None]
        if base is not None:
            stages.append(base)
        return max(stages) if stages else None

    for v in order:                            # everything before the accumulators
        if id(v) in post:
            continue
        if isinstance(v, (ir.Const, ir.Counter)):
            ready[id(v)] = None
        elif id(v) in gathers:                 # issued once its address is ready (module docstring)
            issue = ready[id(v.index)] or 0
            gather_issue[id(v)] = issue
            sync = config.mem_read == "sync"
            ready[id(v)] = combine(v, issue + (1 if sync else 0) + (1 if register_loads else 0))
        elif isinstance(v, ir.Load):
            ready[id(v)] = combine(v, load_ready + late.get(v.buf, 0))
        elif unit_stages.get(id(v), 1) > 2 and v.op is K.MUL:
            # a product from FANOUT_LEVEL: an operand with fewer levels of fan-out copies than
            # the other (a broadcast operand's) is taken as many stages later (Datapath.product)
            r = max((ready[id(o)] - off for o, off in zip(v.srcs, operand_offsets(v, broadcast))
                     if ready[id(o)] is not None), default=None)
            ready[id(v)] = None if r is None else max(r, 0) + latency[id(v)]
        else:
            r = combine(v, None)
            if budget and r is not None and isinstance(v, ir.Op) and id(v) not in post:
                _budget(v, r, budget, ready, operands, carried, latency, fanout)
            elif clock and r is not None and isinstance(v, ir.Op) and id(v) not in post:
                clock.decide(v, r, ready, operands, latency, fanout)
            ready[id(v)] = None if r is None else r + latency.get(id(v), 0)
            if clock and id(v) in fanout and early_op(v, ready, latency, unit_stages):
                early.add(id(v))               # its copies are its register (Datapath.fanned)
    depth = max((r for r in ready.values() if r is not None), default=0)
    for v in order:                            # a ring's product operands enter lead stages before D
        if id(v) in unit_lead:
            depth = max([depth] + [ready[id(s)] + (id(s) in fanout and id(s) not in early) + n
                                   for i, s in enumerate(v.srcs) if (n := operand_lead(unit_lead, v, i))
                                   and ready[id(s)] is not None])

    def post_cone(depth: int) -> None:
        for v in order:                        # the post cone, from stage D
            if id(v) not in post:
                continue
            if isinstance(v, ir.AccLoad):
                ready[id(v)] = depth
            else:
                r = combine(v, None)
                if clock and isinstance(v, ir.Op):     # after the accumulator: requantisation, clips
                    clock.decide(v, r, ready, operands, latency, fanout, free=id(v) not in feeds_acc)
                ready[id(v)] = r + latency.get(id(v), 0)
    post_cone(depth)
    if clock and _loop_late_from_read(kernel, clock, ready, depth):
        # read data an accumulator's loop takes in the stage it arrives (a max pool's window)
        # came from the memory's output register across the die into the loop's logic, which
        # cannot take a register (the sequential digits CNN at target_mhz 200: a block RAM's
        # output register -> max -> the accumulator, 6.1-7.4 ns, 3.6-4.9 of it routing): the
        # loop runs a stage later, the data carried there by a register in the fabric
        depth += 1
        post_cone(depth)

    def at(v):
        r = ready[id(v)]
        return depth if r is None else max(r, depth)

    acc_write: dict[int, int] = {}
    commit = depth
    ways = {a.index: a.ways for a in kernel.accs}
    for s, _ in kernel.stores():
        if isinstance(s, ir.AccStore):
            w = at(s.value)
            if w > depth + ways[s.acc] - 1:
                raise CompileError(f"{kernel.name}: acc{s.acc} would be written in stage {w}, "
                                   f"after its {ways[s.acc]}-cycle loop (a compiler bug)")
            if acc_write.setdefault(s.acc, w) != w:
                raise CompileError(f"{kernel.name}: acc{s.acc} written in stages {acc_write[s.acc]} and {w}")
            commit = max(commit, w)
        else:
            commit = max([commit] + [at(x) for x in (s.index, s.value, s.gate) if x is not None])
            if clock and isinstance(s.value, ir.Op) and id(s.value) in post and id(s.value) in feeds_acc:
                # a value on an accumulator's one-cycle loop (its logic cannot take a register:
                # `decide`, not free) is stored a stage later, from a register beside it: the
                # route to the memory is a path of its own (the sequential digits CNN's max pool
                # at target_mhz 200: read data -> max -> where -> the output block RAM's write
                # data, 6.9 ns, 4.3 of it routing, its critical path at 145 MHz)
                commit = max(commit, at(s.value) + 1)
    if address_levels:
        for buf, n in later_reads(kernel, order, operands, ready, latency, unit_stages, broadcast, fanout, early,
                                  muxes, gathers, commit, acc_write, late, keep, unit_lead).items():
            late[buf] = n
    sched = Schedule(level, depth, commit, ready, latency, unit_stages, acc_write, register_loads,
                     address_levels, gather_issue, config.mem_read == "sync", lookahead, broadcast, late, fanout,
                     frozenset(early), product_regs, lut_product_regs=lut_product_regs, unit_lead=unit_lead,
                     operand_registers=frozenset(registered),
                     sums=sum_registers(kernel, order, gathers, clock, config.target_mhz and 1000.0 / config.target_mhz),
                     cuts=cut_conditions(order, ready, clock, config.target_mhz and 1000.0 / config.target_mhz))
    check_hazards(kernel, sched)
    return sched


def _loop_late_from_read(kernel: ir.KernelIR, clock: "timing_model.Paths", ready: dict, depth: int) -> bool:
    """Whether an accumulator's new value, as `clock` timed it, ends past the period on a path
    from a load whose data arrives in the loop's own stage `depth`."""
    for s, _ in kernel.stores():
        if isinstance(s, ir.AccStore) and clock.arrival.get(id(s.value), 0.0) > clock.limit:
            v = s.value
            while id(v) in clock.via:
                v = clock.via[id(v)]
            if isinstance(v, ir.Load) and ready.get(id(v)) == depth:
                return True
    return False


def check_hazards(kernel: ir.KernelIR, sched: Schedule) -> None:
    """Refuse a pipelined kernel that reads a buffer it also writes."""
    if sched.commit == 0:
        return
    loaded = {v.buf for s, _ in kernel.stores() for v in ir.toposort(ir.store_operands(s)) if isinstance(v, ir.Load)}
    stored = sorted({s.buf for s, _ in kernel.stores() if isinstance(s, ir.BufStore)} & loaded)
    if stored:
        raise CompileError(
            f"fp_pipeline={sched.level} is illegal for kernel {kernel.name!r}: it reads buffer {stored[0]}, which it "
            f"also writes, and its stores commit {sched.commit} cycles after their step issues, so a later step "
            f"could read a location before an earlier store reaches it; use fp_pipeline=0 for this model")


def load_clk_q(d: timing_model.Delays, register_loads: bool, sync_reads: bool) -> float:
    """When read data is out after the clock edge: from a block RAM's output register, from the
    block RAM itself (a synchronous read), or from a flip-flop."""
    return d.bram_clk_q_reg if register_loads else d.bram_clk_q if sync_reads else d.clk_q


def kernel_paths(kernel: ir.KernelIR, sched: Schedule, config: HardwareConfig,
                 d: timing_model.Delays) -> tuple[float, str, tuple[tuple[int, int, bool, int], ...]]:
    """(ns, what, products) of a scheduled kernel for the delay model (Design.timing_estimate):
    its slowest path through integer ops (timing_model.Paths.measure: read data from a block
    RAM's output register, or its clock-to-out below LOAD_LEVEL), and the operand widths of
    each product with registers of its own (is_product), whose stages timing_model.product_ns
    times, with whether an operand is registered read data with no copy level before the
    product's own (timing_model.memory_to_dsp_ns in a DSP block), and its fields' width when it
    is a pack of products (hw/dsp_pack.py; 0 for one). Remembered per kernel, schedule and
    model-wide knobs."""
    return _kernel_paths(kernel, sched, config.model_wide, d)


@ir.per_kernel
def _kernel_paths(kernel: ir.KernelIR, sched: Schedule, config: HardwareConfig,
                  d: timing_model.Delays) -> tuple[float, str, tuple[tuple[int, int, bool, int], ...]]:
    gathers = gathers_of(kernel)
    operands = lambda v: data_operands(v, gathers)  # noqa: E731
    order = _data_order(kernel, gathers)
    floating = {id(v) for v in order if sched.ready.get(id(v)) is None}
    paths = timing_model.Paths(kernel, d, order, operands, config,
                               load_clk_q=load_clk_q(d, sched.register_loads, sched.sync_reads))
    of_data = [v for v in order if is_product_of_data(v)]
    paths.product_tails([v for v in of_data if sched.unit_stages.get(id(v), 1) >= 2], sched.product_regs,
                        timing_model.product_sites(config.mul, len(of_data), config.dsp_blocks(d.family),
                                                   kernel=True))
    # stored values their stores take in the stage they are computed (not through delay registers)
    stored = {id(s.value) for s, _ in kernel.stores() if isinstance(s, ir.BufStore)
              and sched.ready.get(id(s.value)) is not None and max(sched.ready[id(s.value)], sched.depth) >= sched.commit}
    ns, what = paths.measure(order, sched.ready, sched.latency, sched.fanout, operands, floating, stored)
    if sched.address_levels:                    # indices into their first registers
        # with target_mhz a counter's multiple is a register (kernel._Scaled), and so is a read
        # address in sched.sums (timed as the register's own step); a store's index is built
        # from the counters as a tree
        scaled = scaled_counter if config.target_mhz else (lambda v: False)
        sizes = {b.slot: b.size for b in kernel.buffers}
        reads = {id(v.index): (v.index, sizes[v.buf]) for v in order if isinstance(v, ir.Load) and id(v) not in gathers}
        for key, (index, size) in reads.items():    # shared ones once
            inside = paths.ranges[id(index)].within(Interval(0, size - 1))
            # (a tree's range check is not timed here: the index's own path, as the rows' errors
            # were measured)
            t, path = (timing_model.sum_register_ns(paths.width(index), inside, d), "a sum register's step") \
                if key in sched.sums else (timing_model.index_ns(index, paths.width, d, scaled),
                                           "a memory index from the counters -> its register")
            if t > ns:
                ns, what = t, path
        stores = {id(s.index): s.index for s, _ in kernel.stores() if isinstance(s, ir.BufStore)}
        for index in stores.values():
            t = timing_model.index_ns(index, paths.width, d, scaled)
            if t > ns:
                ns, what = t, "a memory index from the counters -> its register"
    packed = {id(v) for p in sched.product_packs for v in p.products}
    products = tuple((paths.width(v.srcs[0]), paths.width(v.srcs[1]),
                      sched.register_loads and any(is_read_data(s) and not sched.broadcast.get(id(s)) for s in v.srcs[:2]), 0)
                     for v in order if isinstance(v, ir.Op) and v.op is K.MUL and not v.dtype.is_float
                     and sched.unit_stages.get(id(v), 1) >= 2 and id(v) not in packed)
    # a pack (hw/dsp_pack.py): one product of its packed operand, a register after its adder
    products += tuple((paths.width(p.shared), packed_range([paths.ranges[id(p.other(v))] for v in p.products], p.field).shape.width,
                       False, p.field) for p in sched.product_packs)
    return ns, what, products
