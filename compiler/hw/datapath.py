"""Datapath: KernelIR values -> combinational Amaranth logic.

Each integer value becomes a signal of the narrowest shape that holds its interval (see
ranges.py). The expression on the right is Amaranth's exact, width-growing arithmetic; the
assignment to the narrow signal is then exact when the interval fits, and when it does not
(the op may overflow its dtype) the signal has exactly the dtype's shape and the assignment
wraps like tinygrad's two's complement arithmetic. Floats travel as IEEE bit patterns and
their ops go to the float units (compiler/fp).

A value is emitted once per *environment*: which counter signals it reads (the current ones
for the datapath, the next ones for look-ahead read addresses) and, for values that depend
on a memory load, which step's read-port assignment supplies the data; and once per pipeline
*stage* (fp_pipeline, see pipeline.py): a value is computed in the stage its schedule says it
is ready in, and delayed by registers to later stages that use it. Values of counters and
constants only are computed in stage 0 (the issuing step's counters) and delayed likewise.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Callable

from amaranth.hdl import Const, Elaboratable, Module, Mux, Signal, Value, signed, unsigned

from .. import ir
from ..config import HardwareConfig
from ..dtypes import DType
from ..errors import UnsupportedError
from ..ranges import Interval
from ..passes.signed_digits import shift_add_digits
from ..synth.multipliers import PRODUCT_PREFIX
from ..synth.rtlil_text import DATA_ATTRIBUTE, DUPLICATE_ATTRIBUTE  # noqa: F401 (DUPLICATE_ATTRIBUTE: its users import it from here)
from . import dsp_fields, dsp_pack, floatops
from .dsp_pack import ProductPack
from .pipeline import FANOUT_LEVEL, OPERAND_GROUP, Schedule, counter_times_constant, operand_lead, operand_offsets, schedule

K = ir.OpKind


DATA = {DATA_ATTRIBUTE: 1}
"""The attributes of a reset-less register's signal (synth.rtlil_text.DATA_ATTRIBUTE)."""

LOCAL_FAN = 4
"""Copies each register of Datapath.local's tree drives: a chain register's value reaches its
consumers through up to LOCAL_LEVELS levels of copies, one per LOCAL_FAN**k consumers at level
k, so no net of the tree has more than a few loads to spread over the die. With 16 at one
level (the 26x17 GEMV's 442 consumers: 28 copies of 16) one copy still drove 16 consumers'
copies across the die on the w4a8 GEMV at 16 x 56: 14.2 ns of routing to one of them."""

LOCAL_LEVELS = 3
"""Levels of Datapath.local's tree as the stages before the consumer allow (64 consumers a
root copy; the 26x17 GEMV's 442: 7, 28, 111 copies)."""

INT_OPS = {K.ADD, K.SUB, K.MUL, K.NEG, K.MAX, K.CMPLT, K.CMPNE, K.CMPEQ, K.WHERE, K.AND, K.OR,
           K.XOR, K.SHL, K.SHR, K.CDIV, K.CMOD, K.CAST, K.BITCAST, K.MULACC}


@dataclass(frozen=True)
class Env:
    counters: str                                   # "cur" | "next"
    counter: Callable[[int, int], Value]            # (loop id, stage) -> that stage's counter
    step: int | None                                # whose read-port assignment feeds loads
    load: Callable[[ir.Load], Value] | None         # data in stage Schedule.data_stage; None: no loads here
    raw: Callable[[ir.Load], Value] | None = None   # the data a stage earlier, before the read-data
                                                    # register (Schedule.early)
    scaled: Callable[[int, int, object], Value] | None = None
    """(loop id, constant c, shape) -> c times this env's counter in stage 0, kept by a register
    of its own (kernel._Scaled, with target_mhz): no multiplier on the address path."""
    sums: Callable[[tuple[tuple[int, int], ...], int, object], Value] | None = None
    """(terms, constant, shape) -> a sum of counters' multiples (pipeline.affine_form) in stage 0,
    kept by a register of its own (kernel._Scaled, with target_mhz): no adders on the path. Read
    addresses only (kernel._in_range, by pipeline.sum_register's rule)."""


def less_than(x: Value, t: int) -> Value:
    """x < t for t = 0, 2**k or -2**k (ir.bit_test) without a compare: x < 0 is its sign; x < 2**k
    when it is negative or no bit from k up is set; x < -2**k when it is negative and not every
    bit from k up is set (the sign apart; x's own width and signedness)."""
    signed = x.shape().signed
    sign = x[-1] if signed else Const(0, 1)
    if t == 0:
        return sign
    k, stop = abs(t).bit_length() - 1, len(x) - signed
    if k >= stop:           # x's magnitude stays under 2**k: below 2**k always, below -2**k never
        return Const(int(t > 0), 1)
    high = x[k:stop]
    return sign | ~high.any() if t > 0 else sign & ~high.all()


def check_supported(kernel: ir.KernelIR, config: HardwareConfig) -> None:
    """Raise UnsupportedError for the first op/dtype the datapath cannot build (a kernel that
    passed is remembered with the model-wide knobs, HardwareConfig.model_wide)."""
    _check_supported(kernel, config.model_wide)


@ir.per_kernel
def _check_supported(kernel: ir.KernelIR, config: HardwareConfig) -> None:
    roots = [v for s, _ in kernel.stores() for v in ir.store_operands(s)]
    for v in ir.toposort(roots):
        if isinstance(v, ir.Load):
            check_address(kernel.name, v)
        if not isinstance(v, ir.Op):
            continue
        src_float = any(s.dtype.is_float for s in v.srcs)
        if v.dtype.is_float or src_float:
            floatops.check(kernel.name, v, config)
        elif v.op not in INT_OPS:
            raise UnsupportedError(kernel.name, v.op.name, v.dtype.name)


def check_address(kernel: str, load: ir.Load) -> None:
    """A read address may depend on loaded data (a gather: indexing by a tensor, an embedding
    lookup; pipeline.py issues it when its address is ready), not on an accumulator."""
    if any(isinstance(a, ir.AccLoad) for a in ir.toposort([load.index])):
        raise UnsupportedError(kernel, "LOAD", load.dtype.name,
                               f"the address into buffer {load.buf} depends on an accumulator (a running "
                               "sum or max); only addresses computed from loop counters and loaded data "
                               "are supported")


def from_bits(bits: Value, d: DType, decl: ir.BufferDecl | None = None) -> Value:
    """Memory word -> the element value: signed ints reinterpreted, and a buffer stored in fewer
    bits than its dtype (ir.BufferDecl.bounds) as its storage says (two's complement or not)."""
    if decl is not None and decl.bounds is not None and d.is_int:
        return bits.as_signed() if decl.signed else bits
    return bits.as_signed() if d.is_int and d.signed and not d.is_bool else bits


def _name(v: Value) -> str:
    return v.name if isinstance(v, Signal) else "c"


def mul_const(x: Value, c: int) -> Value:
    """x * c. Index math multiplies loop counters by strides (784, 25, ...); as a few shifts
    and adds that costs a handful of LUTs, where Yosys would spend a DSP block on it."""
    digits = shift_add_digits(c)
    if not digits:
        return x * c
    sign = -1 if c < 0 else 1
    out = None
    # the digits of |c| lowest first, each with c's sign folded in (x * -3 is x - (x << 2), no
    # negation); lowest first, for the low bits it leaves out of the adders (a positive digit
    # first instead: the int8 GEMV at 2 x 8 567 -> 576 LUTs)
    for shift, d in digits:
        term = x << shift if shift else x
        out = (term if d * sign > 0 else negated(term)) if out is None else \
            (out + term if d * sign > 0 else out - term)
    return out


def negated(x: Value) -> Value:
    """-x as a subtraction from zero: Yosys maps a unary minus as a one-operand $macc, an inverter
    LUT4 a bit beside the carry chain (a 4-bit value: 4 LUT4 + 3 CCU2C, 10 by LUT4 + 2 x CCU2C),
    a $sub as the carry chain alone (3 CCU2C, 6)."""
    return Const(0, signed(1)) - x


def _magnitude(x: Value) -> Value:
    return Mux(x < 0, -x, x).as_unsigned()



def registered(m: Module, value: Value, name: str, *, init: int = 0, duplicate: bool = False,
               reset_less: bool = False) -> Signal:
    """`value` one cycle later, a free-running register in module `m`. A `duplicate` register
    is a copy of another on purpose (pipeline.FANOUT_LEVEL): the synthesis script keeps it from
    being merged with its twins (DUPLICATE_ATTRIBUTE). A `reset_less` register is data: see
    Datapath.register."""
    reg = Signal(Value.cast(value).shape(), name=name, init=init, reset_less=reset_less,
                 attrs=({DUPLICATE_ATTRIBUTE: 1} if duplicate else {}) | (DATA if reset_less else {}))
    m.d.sync += reg.eq(value)
    return reg

class Copies:
    """Registered copies of values, one per `group` uses of each (pipeline.FANOUT_LEVEL): a
    register driving consumers across the die is a slow net, one copy per consumer costs a
    flip-flop each and puts the fan-out back on the register before the copies. Uses take a
    copy in the order they ask (lane by lane, so a copy serves neighbouring consumers). Each
    copy is a `duplicate` register (DUPLICATE_ATTRIBUTE), so Yosys keeps the copies apart.
    Copies of data are `reset_less` (Datapath.register); of a flag or an enable, not."""

    def __init__(self, m: Module, group: int, *, reset_less: bool):
        self.m, self.group, self.reset_less = m, group, reset_less
        self.uses: dict[object, tuple[int, int, Signal | None]] = {}

    def __call__(self, key: object, value: Value | Callable[[], Value], name: str, *, init: int = 0,
                 weight: int = 1) -> Signal:
        """A copy of `value` (which `key` names: equal keys, equal values) for one more use,
        which counts as `weight` uses (a memory as its block RAMs: TopHW's host bus). A callable
        `value` is called for each new copy (each copy's input logic of its own)."""
        load, copies, copy = self.uses.get(key, (0, 0, None))
        if copy is None or load + weight > self.group:
            copy = registered(self.m, value() if callable(value) else value, f"{name}{copies}", init=init,
                              duplicate=True, reset_less=self.reset_less)
            load, copies = 0, copies + 1
        self.uses[key] = (load + weight, copies, copy)
        return copy


DSP_WIDTH = 18
"""The widest operand an ECP5 MULT18X18D (and an iCE40 SB_MAC16's 16) takes whole: Product.split."""



class Product(Elaboratable):
    """y = a * b, `registers` cycles later: an integer product from FANOUT_LEVEL, whose operands
    are already registered copies (Datapath.operand_copy). A submodule of its own so that
    synthesis can rebuild a product it builds in LUTs with the registers moved inside the
    multiplier, where they cut the logic between registers (compiler.synth.multipliers.pipeline_products),
    and leave the DSP products as they are: the RTL, and so every simulation, is this one. With
    two registers (pipeline.product_registers, from fp_pipeline 4) the second is a DSP product's
    *landing* register: the first moves into the MULT18X18D (compiler/pnr/dsp_registers.py), the
    second stays in the fabric, where the placer puts it between the DSP row and the lane's adder."""

    def __init__(self, a_shape, b_shape, y_shape, registers: int = 1, split: bool = False):
        self.a, self.b = Signal(a_shape, name="a"), Signal(b_shape, name="b")
        self.y = Signal(y_shape, name="y", reset_less=True, attrs=DATA)       # data (Datapath.register)
        self.registers = registers
        self.split = split and registers >= 2 and max(len(self.a), len(self.b)) > DSP_WIDTH

    def elaborate(self, platform) -> Module:
        m = Module()
        value = self._pieces(m) if self.split else self.a * self.b
        for i in range(self.registers - 1 - (self.split and 1 + (self.registers >= 3))):
            value = registered(m, value, f"p{i}", reset_less=True)
        m.d.sync += self.y.eq(value)
        return m

    def _pieces(self, m: Module) -> Value:
        """`split` (target_mhz): an operand wider than a DSP block's DSP_WIDTH bits cut into
        pieces that are, each piece's product registered (the register a MULT18X18D takes as its
        output register, compiler/pnr/dsp_registers.py) and, with three registers, again in the
        fabric (a DSP's output routed to the fabric took 6.4 ns on the digits MLP), their sum
        shifted into place the next cycle: without it Yosys's mul2dsp sums the pieces' outputs in the fabric before any
        register (the digits MLP's 14x21-bit requantisation: a DSP's output routed 52 columns to
        that sum, 11.3 ns). Exact: a = sum of its pieces << their offsets."""
        wide, other = (self.a, self.b) if len(self.a) >= len(self.b) else (self.b, self.a)
        step = DSP_WIDTH - 1 if other.shape().signed else DSP_WIDTH   # a low piece is unsigned
        total, lo, i = None, 0, 0
        while lo < len(wide):
            hi = min(len(wide), lo + step)
            piece = wide[lo:hi]
            if hi == len(wide) and wide.shape().signed:
                piece = piece.as_signed()
            term = registered(m, piece * other, f"piece{i}", reset_less=True)
            if self.registers >= 3:          # a landing register in the fabric, by the DSP block
                term = registered(m, term, f"piece{i}_land", reset_less=True)
            term = term << lo
            total = term if total is None else total + term
            lo, i = hi, i + 1
        return total


class PackedProduct(Elaboratable):
    """ys[i] = a * b's i-th product (b packed at `field` bits, dsp_fields.packed), `registers` cycles
    later, from one multiplier (hw/dsp_pack.py): the Product of the packed operand, with the
    fields taken apart before the last register. Named `pack<N>` in its parent, not
    `product<N>`: synthesis rebuilds a Product it builds in LUTs with its registers inside
    (compiler/synth/multipliers.py), and a pack is planned to be a DSP block."""

    def __init__(self, a_shape, b_shape, y_shapes, field: int, registers: int = 1):
        self.a, self.b = Signal(a_shape, name="a"), Signal(b_shape, name="b")
        self.ys = [Signal(s, name=f"y{i}", reset_less=True, attrs=DATA) for i, s in enumerate(y_shapes)]
        self.field, self.registers = field, registers

    def elaborate(self, platform) -> Module:
        m = Module()
        value = Signal((self.a * self.b).shape(), name="p")       # one multiplier, read per field
        m.d.comb += value.eq(self.a * self.b)
        for i in range(self.registers - 1):
            value = registered(m, value, f"p{i}", reset_less=True)
        for i, y in enumerate(self.ys):
            field = Signal(signed(self.field), name=f"field{i}")
            m.d.comb += field.eq(dsp_fields.unpack(value, self.field, i))
            m.d.sync += y.eq(field)
        return m


class Datapath:
    """Emits values into its own module `self.m`, so every assignment is unconditional even
    when the caller asks for a value from inside a `with m.Case(...)` of the controller."""

    def __init__(self, kernel: ir.KernelIR, ranges: dict[int, Interval],
                 config: HardwareConfig, accs: dict[int, Signal], sched: Schedule | None = None):
        self.m = m = Module()
        self.kernel, self.ranges, self.config, self.accs = kernel, ranges, config, accs
        self.sched = sched or schedule(kernel, config)
        self.memo: dict[tuple, Value] = {}
        self.chains: dict[tuple, list[Value]] = {}
        self.operand_copies = Copies(m, OPERAND_GROUP, reset_less=True)
        # of broadcast operands: a level of copies per OPERAND_GROUP**level products
        # (pipeline.fan_levels), then one per product
        self.fanout_copies: dict[int, Copies] = {}
        self.own_copies = Copies(m, 1, reset_less=True)
        self.fan_groups: dict[int, Copies] = {}      # id(fan-out value) -> its readers' copies (fanned)
        self.local_levels = [Copies(m, LOCAL_FAN ** k, reset_less=True) for k in range(1, LOCAL_LEVELS + 1)]
        self.packs = {id(v): p for p in self.sched.product_packs for v in p.products}     # dsp_pack
        self.mul_uses: collections.Counter = collections.Counter()    # id(value) -> products using it
        self.count = 0
        self.load_dependent: set[int] = set()
        roots = [v for s, _ in kernel.stores() for v in ir.store_operands(s)]
        for v in ir.toposort(roots):
            if isinstance(v, ir.Load) or any(id(o) in self.load_dependent for o in ir.operands(v)):
                self.load_dependent.add(id(v))
            if isinstance(v, ir.Op) and v.op in (K.MUL, K.MULACC):
                self.mul_uses.update(id(s) for s in v.srcs[:2])
        self.floats = floatops.FloatOps(m, config, kernel.name)

    def interval(self, v: ir.Value) -> Interval:
        return self.ranges[id(v)]

    def shape(self, v: ir.Value):
        return unsigned(v.dtype.bits) if v.dtype.is_float else self.interval(v).shape

    def emit(self, v: ir.Value, env: Env, stage: int | None = None) -> Value:
        """`v` as seen by pipeline stage `stage` of the step `env` describes. `stage` None:
        combinational from `env`'s counters, without pipeline registers (read addresses)."""
        if stage is None:
            return self._at(v, env, None)
        ready = self.sched.ready.get(id(v))
        if isinstance(v, ir.Const) or (ready is None and stage == 0):
            return self._at(v, env, stage)
        if ready is None:
            # counters and constants only: computed once from the issuing step's counters and
            # carried along, so no stage recomputes (say) an address from delayed counters; a
            # condition of compares (cut_conditions) a stage later, from its compares' registers
            ready = 1 if self.cut_condition(v) else 0
        if stage < ready:
            raise ir.IRError(f"{self.kernel.name}: a value ready in stage {ready} is needed in stage {stage}")
        key = (id(v), env.counters, env.step if id(v) in self.load_dependent else None)
        chain = self.chains.get(key)
        if chain is None:
            chain = self.chains[key] = [self._at(v, env, ready)]
        while len(chain) <= stage - ready:
            chain.append(self.register(chain[-1], f"{_name(chain[0])}_d{len(chain)}"))
        return chain[stage - ready]

    def local(self, v: ir.Value, env: Env, stage: int) -> Value:
        """`v` in `stage` for one consumer (an op, a load's gate, a store). From FANOUT_LEVEL a
        value of counters and constants carried by registers (an accumulator's reset select, a
        load's gate, a store's gate and index) reaches each consumer through its own copy of
        the chain's value: the chain is one, shared by every lane, and its last register would
        otherwise drive every lane's adder or write enable across the die in one net. Between
        them, as many levels of copies as the stages before allow (at most LOCAL_LEVELS), at no
        cycle cost: a copy per LOCAL_FAN**k consumers at level k, fed from the level above
        (on the 26x17 GEMV the last chain register of a load gate drove hundreds of copies:
        14.4 ns of routing). Consumers take copies in the order they ask (lane by lane), and
        the groups nest, so a consumer's copy at each level feeds the next one's."""
        if self.sched.level < FANOUT_LEVEL or stage < 1 or isinstance(v, ir.Const) \
                or self.sched.ready.get(id(v)) is not None:
            return self.emit(v, env, stage)
        first = 1 if self.cut_condition(v) else 0            # the stage its value is made in
        if stage == first:
            return self.emit(v, env, stage)
        levels = min(stage - 1 - first, LOCAL_LEVELS)
        prev = self.emit(v, env, stage - 1 - levels)
        base, key = _name(prev), (id(v), env.counters, stage)
        for k in range(levels, 0, -1):
            prev = self.local_levels[k - 1](key, prev, f"{base}_t{stage}l{k}_")
        self.count += 1
        return self.register(prev, f"{base}_t{stage}_c{self.count}", duplicate=True)

    def cut_condition(self, v: ir.Value) -> bool:
        """Whether `v`, a condition of counters and constants (a padded convolution's load gate),
        is made a stage after its compares, from their registers (Schedule.cuts, only with
        target_mhz, so from FANOUT_LEVEL): each compare's register is a copy per condition that
        reads it (Datapath.local), and the condition one LUT level or two after them."""
        return id(v) in self.sched.cuts

    def fanned(self, v: ir.Value, env: Env, stage: int) -> Value:
        """Fan-out value `v` (pipeline.fanout_values) in `stage` for one reader: a registered copy
        of it as it was a stage before, one per Schedule.fanout[v] readers in the order they ask
        (output by output, so a copy serves neighbouring adders). The value's own register then
        drives the copies, not every reader. An early value (Schedule.early) is copied in the stage
        it is ready: a load or its cast from the read data before its register, an op from its
        value before its output register (the copies are that register, duplicated)."""
        ready = self.sched.ready.get(id(v))
        key = (id(v), env.counters, env.step if id(v) in self.load_dependent else None, stage)
        if ready is not None and stage == ready and id(v) in self.sched.early and not self._is_load(v):
            prev = self._before_register(v, env, stage)
        elif ready is not None and stage == ready and id(v) in self.sched.early and env.raw is not None:
            prev = self.memo.get(("raw",) + key)
            if prev is None:                 # the load (or its cast) from the unregistered read data
                load = v if isinstance(v, ir.Load) else v.srcs[0]
                raw = env.raw(load)
                if v is not load:
                    cast = Signal(self.shape(v), name=f"v{self.count}_raw")
                    self.count += 1
                    self.m.d.comb += cast.eq(self.int_op(v, [raw]))
                    raw = cast
                prev = self.memo[("raw",) + key] = raw
        elif ready is None or stage <= ready:
            return self.local(v, env, stage)
        else:
            prev = self.emit(v, env, stage - 1)
        group = self.fan_groups.setdefault(id(v), Copies(self.m, self.sched.fanout[id(v)], reset_less=True))
        return group(key, prev, f"{_name(prev)}_f")

    @staticmethod
    def _is_load(v: ir.Value) -> bool:
        return isinstance(v, ir.Load) or (isinstance(v, ir.Op) and v.op in (K.CAST, K.BITCAST)
                                          and isinstance(v.srcs[0], ir.Load))

    def _before_register(self, v: ir.Value, env: Env, stage: int) -> Value:
        """An early op's value (pipeline.early_ops) in the stage before its output register: the op's
        expression (_at keeps it), or a cast of one, so that its copies are that register."""
        if self.sched.latency.get(id(v)):
            self.emit(v, env, stage)
            return self.memo[("pre", id(v), env.counters, env.step if id(v) in self.load_dependent else None, stage)]
        inner = self._before_register(v.srcs[0], env, stage)
        out = Signal(self.shape(v), name=f"v{self.count}_pre")
        self.count += 1
        self.m.d.comb += out.eq(self.int_op(v, [inner]))
        return out

    def operand_copy(self, x: Value) -> Signal:
        """A registered copy of product operand `x` (pipeline.FANOUT_LEVEL): a loaded value
        broadcast to many lanes' products reaches them through copies the placer can put next
        to them, not across the die. Products take a copy per OPERAND_GROUP in the order they
        are built (lane by lane, so a copy serves neighbouring lanes): a LUT multiplier
        computes its shared operand's multiples (3x) once per copy (compiler/synth/multipliers.py),
        so a copy per product cost each LUT product those adders again (the int8 GEMV 16x16:
        +2,500 LUTs over fp_pipeline 2)."""
        # keyed by identity: every operand is a signal the module holds, so its id stays its own
        return self.operand_copies(id(x), x, f"{_name(x)}_dup")

    def register(self, value: Value, name: str, *, duplicate: bool = False) -> Signal:
        """`value` one cycle later (a free-running register in the datapath module). A
        `duplicate` register is a copy of another on purpose (pipeline.FANOUT_LEVEL): the
        synthesis script keeps it from being merged with its twins (DUPLICATE_ATTRIBUTE).

        Reset-less: data in flight. After a reset the step ids of every stage (kernel._Delays)
        say idle, so nothing reads what a data register holds until the kernel has run data
        through it: its reset has no function, and was one more sink of the `rst` net for every
        flip-flop (26,786 of the 26x17 GEMV's 28,127, one net in general routing to nearly every
        slice, and a control set the placer must keep apart from the reset-less ones)."""
        return registered(self.m, value, name, duplicate=duplicate, reset_less=True)

    def _at(self, v: ir.Value, env: Env, stage: int | None) -> Value:
        """`v` computed in `stage` (its ready stage, or any stage for counters and constants)."""
        key = (id(v), env.counters, env.step if id(v) in self.load_dependent else None, stage)
        if key in self.memo:
            return self.memo[key]
        if isinstance(v, ir.Const):
            out: Value = Const(v.dtype.to_bits(v.value), unsigned(v.dtype.bits)) if v.dtype.is_float \
                else Const(int(v.value), self.interval(v).shape)
        elif isinstance(v, ir.Counter):
            out = env.counter(v.loop, stage or 0)
        elif isinstance(v, ir.AccLoad):
            out = self.accs[v.acc]
        elif env.scaled is not None and not stage and (pair := counter_times_constant(v)) is not None:
            out = env.scaled(*pair, self.shape(v))
        else:
            latency = 0 if stage is None else self.sched.latency.get(id(v), 0)
            inputs = None if stage is None else stage - latency
            output_register = stage is not None and latency and \
                latency == self.sched.unit_stages.get(id(v), 1) + (id(v) in self.sched.operand_registers)
            if output_register and self.is_product(v):
                expr, output_register = self.product(v, env, inputs), False     # its register is inside
            elif isinstance(v, ir.Load):
                expr = self.load(v, env, inputs)
            else:
                expr = self.op(v, env, inputs, latency)
            # Integer products and sums stay wires of their own: otherwise Yosys' alumacc merges
            # an adder tree of products into one $macc, which it builds from LUT full adders
            # instead of carry chains (2.3x the LUTs of the 8x8-unrolled GEMV's trees).
            keep = {"keep": 1} if isinstance(v, ir.Op) and v.op in (K.MUL, K.ADD, K.SUB) and not v.dtype.is_float else {}
            out = Signal(self.shape(v), name=f"v{self.count}_{getattr(v, 'op', None) and v.op.value or 'load'}",
                         attrs=keep | (DATA if output_register else {}), reset_less=bool(output_register))  # data
            self.count += 1
            if output_register:
                self.m.d.sync += out.eq(expr)          # an output register (pipeline._op_timing)
                self.memo[("pre",) + key] = expr       # what copies of it may take instead (fanned)
            else:
                self.m.d.comb += out.eq(expr)
        self.memo[key] = out
        return out

    def load(self, v: ir.Load, env: Env, stage: int | None) -> Value:
        if env.load is None:                 # read addresses are computed from counters only
            raise UnsupportedError(self.kernel.name, "LOAD", v.dtype.name,
                                   "a look-ahead read address depends on loaded data (a compiler bug: "
                                   "gathers are addressed in their own stage)")
        data = env.load(v)
        for i in range(0 if stage is None else stage - self.sched.data_stage(v)):   # a gate ready later
            data = self.register(data, f"{_name(data)}_g{i + 1}")
        if v.gate is None:
            return data
        if stage is None:
            return Mux(self.emit(v.gate, env, None), data, self.emit(v.alt, env, None))
        return Mux(self.local(v.gate, env, stage), data, self.local(v.alt, env, stage))

    def op(self, v: ir.Op, env: Env, stage: int | None, latency: int) -> Value:
        narrow = floatops.wide_product_sources(v)          # fp8 x fp8 in fp32: the casts' sources
        def src(i: int, s: ir.Value) -> Value:
            if stage is None:
                return self.emit(s, env, None)
            at = stage - operand_lead(self.sched.unit_lead, v, i)       # a ring's product operands early
            return self.fanned(s, env, at) if id(s) in self.sched.fanout else self.local(s, env, at)
        srcs = [src(i, s) for i, s in enumerate(narrow or v.srcs)]
        stages = 1 if stage is None else self.sched.unit_stages.get(id(v), 1)
        if stage is not None and id(v) in self.sched.operand_registers:     # its operands' own copies
            srcs = [x if isinstance(x, Const) else self.register(x, f"{_name(x)}_in{self.count}", duplicate=True)
                    for x in srcs]
        if narrow is not None:
            return self.floats.wide_mul(v, narrow[0].dtype, srcs, stages)
        if floatops.is_float_op(v):
            return self.floats.emit(v, srcs, stages, ring=stage is not None and id(v) in self.sched.unit_lead)
        if stages == 2:                     # an integer product with operand registers of its own
            srcs = [self.operand_copy(x) for x in srcs]
        return self.int_op(v, srcs)

    def is_product(self, v: ir.Value) -> bool:
        """An integer product of two data values with operand copies (FANOUT_LEVEL): built as a
        Product submodule, which synthesis may rebuild with its register inside (Product)."""
        return isinstance(v, ir.Op) and v.op is K.MUL and not v.dtype.is_float \
            and self.sched.unit_stages.get(id(v), 1) >= 2

    def product(self, v: ir.Op, env: Env, stage: int) -> Value:
        """`v` (is_product) product_registers cycles after its operands' copies, from operands in `stage`: a
        Product whose A is the operand more products share (the broadcast x of a GEMV: a LUT
        multiplier's multiples of A are then built once per copy), the wider on a tie. With a
        broadcast operand (Schedule.broadcast) there are levels before the operand copies
        (pipeline.fan_levels): that operand's copy per OPERAND_GROUP**level products, and the
        other operand as many stages later (read later when it is a load of a `late` buffer,
        else its chain): the register before the copies is the block RAM's output register
        (compiler/pnr/bram_registers.py), which then drives a few copies, not every multiplier (on
        the 26x17 GEMV it drove 7 across the die, the critical path at 95.8 MHz, until a
        second level). The last level drives OPERAND_GROUP products'
        own copies: a copy shared by four LUT multipliers fanned each bit out to ~40 LUT inputs
        (its multiples, the rows) and the paths inside them were the critical ones; with a
        copy each, the int8 GEMV 16x16 went from 84.3 to 107.6 MHz (+1,768 LUTs, the multiples
        built per product, +1,536 FFs; ECP5 85F, router2, seed 1: docs/pipeline.md)."""
        if id(v) in self.packs:
            return self.packed_product(self.packs[id(v)], v, env, stage)
        srcs = [self._operand(s, env, stage + offset) for s, offset in zip(v.srcs, operand_offsets(v, self.sched.broadcast))]
        a, b = sorted(zip(v.srcs, srcs), key=lambda p: (self.mul_uses[id(p[0])], len(p[1])), reverse=True)
        unit = Product(a[1].shape(), b[1].shape(), self.shape(v), self.sched.product_regs,
                       split=self.config.target_mhz is not None)
        self.m.submodules[f"{PRODUCT_PREFIX}{self.count}"] = unit
        self.count += 1
        self.m.d.comb += [unit.a.eq(a[1]), unit.b.eq(b[1])]
        return unit.y

    def _operand(self, s: ir.Value, env: Env, stage: int) -> Signal:
        """Product operand `s` from `stage` through its copies (product): a copy per
        OPERAND_GROUP products, or, broadcast, its levels of copies and one of its own."""
        x = self.local(s, env, stage)
        levels = self.sched.broadcast.get(id(s), 0)
        if not levels:
            return self.operand_copy(x)
        for level in range(levels, 0, -1):       # a copy per OPERAND_GROUP**level products
            if level not in self.fanout_copies:
                self.fanout_copies[level] = Copies(self.m, OPERAND_GROUP ** level, reset_less=True)
            x = self.fanout_copies[level](id(x), x, f"{_name(x)}_fan" + (f"{level}_" if level > 1 else ""))
        return self.own_copies(id(x), x, f"{_name(x)}_dup")

    def packed_product(self, pack: ProductPack, v: ir.Op, env: Env, stage: int) -> Value:
        """`v`, one of the products of `pack` (dsp_pack): all of them are built at once, by one
        PackedProduct, whose shared operand comes through its copies as a product's does and
        whose packed operand is formed from the others' values where a product would take its
        copy, in a register of its own (the DSP block's input register)."""
        key = ("pack", id(pack), env.counters, env.step if id(v) in self.load_dependent else None, stage)
        ys = self.memo.get(key)
        if ys is None:
            offsets = dict(zip(map(id, v.srcs), operand_offsets(v, self.sched.broadcast)))
            a = self._operand(pack.shared, env, stage + offsets[id(pack.shared)])
            # the others' copies (a level of them before a DSP block, pipeline.py) become one register
            later = offsets[id(pack.other(v))] + self.sched.broadcast.get(id(pack.other(v)), 0)
            others = [self.local(pack.other(p), env, stage + later) for p in pack.products]
            b = self.register(dsp_fields.packed(others, pack.field, [self.interval(pack.other(p)) for p in pack.products]),
                              f"pack{self.count}_b")
            unit = PackedProduct(a.shape(), b.shape(), [self.shape(p) for p in pack.products], pack.field,
                                 self.sched.product_regs)
            self.m.submodules[f"{dsp_pack.PREFIX}{self.count}"] = unit
            self.count += 1
            self.m.d.comb += [unit.a.eq(a), unit.b.eq(b)]
            ys = self.memo[key] = {id(p): y for p, y in zip(pack.products, unit.ys)}
        return ys[id(v)]

    def int_op(self, v: ir.Op, s: list[Value]) -> Value:
        op, d = v.op, v.dtype
        consts = [x.value if isinstance(x, ir.Const) else None for x in v.srcs]
        if op is K.ADD: return s[0] + s[1]
        if op is K.SUB: return s[0] - s[1]
        if op is K.MUL:
            if consts[1] is not None:
                return mul_const(s[0], consts[1])
            if consts[0] is not None:
                return mul_const(s[1], consts[0])
            return s[0] * s[1]
        if op is K.MULACC: return s[0] * s[1] + s[2]
        if op is K.NEG: return negated(s[0])
        if (test := ir.bit_test(v)) is not None:       # a ReLU, a clamp: no compare chain
            at = v.srcs.index(test[0])
            x = s[at]
            if op is K.CMPLT:
                return less_than(x, test[1]) if at == 0 else ~less_than(x, test[1])
            return Mux(less_than(x, test[1]), int(consts[1 - at]), x)
        if op is K.MAX: return Mux(s[0] > s[1], s[0], s[1])
        if op is K.CMPLT: return s[0] < s[1]
        if op is K.CMPNE: return s[0] != s[1]
        if op is K.CMPEQ: return s[0] == s[1]
        if op is K.WHERE: return Mux(s[0], s[1], s[2])
        if op is K.AND: return s[0] & s[1]
        if op is K.OR: return s[0] | s[1]
        if op is K.XOR: return s[0] ^ s[1]
        if op is K.CAST:
            return s[0] != 0 if d.is_bool else s[0]     # the assignment wraps to the target
        if op is K.BITCAST:
            return s[0]
        if op in (K.SHL, K.SHR):
            return self.shift(op, d, s[0], s[1], consts[1], self.interval(v.srcs[1]))
        if op in (K.CDIV, K.CMOD):
            return self.divide(op, v, s[0], s[1], consts[1])
        raise UnsupportedError(self.kernel.name, op.name, d.name)

    @staticmethod
    def shift(op, d: DType, a: Value, b: Value, amount: int | None, b_range: Interval) -> Value:
        if amount is not None:
            if amount >= d.bits or amount < 0:     # tinygrad: shifted out entirely
                return Const(0, 1) if op is K.SHL or not d.signed else Mux(a < 0, -1, 0)
            return a << amount if op is K.SHL else a >> amount
        # variable amount: only the bits below the dtype width can matter
        width_bits = (d.bits - 1).bit_length()
        amt = b[:width_bits].as_unsigned() if len(b) > width_bits else b.as_unsigned()
        shifted = a << amt if op is K.SHL else a >> amt
        if b_range.lo >= 0 and b_range.hi < d.bits:
            return shifted
        overflow = Const(0, 1) if op is K.SHL or not d.signed else Mux(a < 0, -1, 0)
        return Mux((b < 0) | (b >= d.bits), overflow, shifted)

    def divide(self, op, v: ir.Op, a: Value, b: Value, c: int | None) -> Value:
        """tinygrad's C semantics: truncate toward zero; x / 0 = 0 and x % 0 = x."""
        ra, rb = self.interval(v.srcs[0]), self.interval(v.srcs[1])
        if ra.lo >= 0 and rb.lo > 0:                   # non-negative: floor == truncation
            return a // b if op is K.CDIV else a % b
        ma, mb = _magnitude(a), _magnitude(b)
        q = Mux((a < 0) ^ (b < 0), -(ma // mb), ma // mb)
        if op is K.CDIV:
            return q if (c is not None and c != 0) else Mux(b == 0, 0, q)
        r = Mux(a < 0, -(ma % mb), ma % mb)             # the remainder takes the dividend's sign
        return r if (c is not None and c != 0) else Mux(b == 0, a, r)
