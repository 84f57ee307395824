"""Accumulator overflow proof: a static value-range analysis over the kernels of a design.

Given the range of every input, each kernel's loop tree is interpreted over intervals:
an accumulator updated as `acc = acc + x` inside loops that run n times in all can reach
`init + k * x` for any k <= n, so it needs the bits of [init + min(0, n*x.lo), init + max(0, n*x.hi)];
one updated as `acc = max(acc, x)` stays within hull(init, x). Values a kernel stores become
the input ranges of the kernels that read them, so multi-kernel models are analysed whole.

For integer accumulators the report gives the bits required against the accumulator register's
width, which is `HardwareConfig.acc_width` when set, else the dtype's (a 784-long int8 dot
product reaches 784 * (-128)^2 = 12,845,056: 25 bits, not the 24 that the usual 127^2 bound
suggests). A register narrower than its need wraps: values read from it then span its whole
range, which is what later statements and kernels are analysed with. For floats it gives the largest reachable magnitude against
the format's largest finite value, for accumulators and for values stored in a narrower
format (an fp16 GEMV accumulates in fp32 and overflows when it stores the fp16 result). In a
saturating format (fp8, as tinygrad computes it) a value beyond it saturates: the bound says
so (`saturates`), and it is not an overflow.
Bounds use exact real arithmetic on the operations (rounding is not modelled).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from . import ir
from .design import Design
from amaranth.hdl import Shape

from .hw.kernel import acc_shape
from .dtypes import DType, from_words
from .fp.formats import FORMATS
from .ranges import Interval, dtype_range, exact_interval, load_range, rom_ranges

K = ir.OpKind


@dataclass(frozen=True)
class AccBound:
    kernel: str
    acc: int | None              # accumulator index, None for a stored value
    target: str                  # "acc0", or "buf2" for values stored to a buffer
    dtype: str
    lo: float
    hi: float
    bits_required: int | None    # integers only
    width: int                   # bits of the register (int) / of the format (float)
    safe: bool | None            # None: a float value the analysis cannot bound (exp, division by a
                                 # range holding 0, bit manipulation): not proven either way
    saturates: bool = False      # a saturating float format (fp8) whose bound passes its largest
                                 # finite value: those values saturate, as tinygrad's do (safe)


@dataclass(frozen=True)
class OverflowReport:
    accumulators: tuple[AccBound, ...]
    safe: bool | None                  # False if any bound is unsafe, else None if any is unbounded
    acc_bits_required: int | None      # the widest integer accumulator's need
    max_magnitude: float | None        # the largest float accumulator or stored magnitude
    may_saturate: bool = False         # some fp8 value may pass its format's largest finite value


@dataclass(frozen=True)
class _R:
    """An interval of ints (exact) or floats (reals)."""
    lo: float
    hi: float

    def __or__(self, o: "_R") -> "_R":
        return _R(min(self.lo, o.lo), max(self.hi, o.hi))


def _full(d: DType) -> _R:
    if d.is_float:
        return _R(-math.inf, math.inf)
    return _R(d.min, d.max)


def _float_op(op: ir.OpKind, s: list[_R]) -> _R:
    def prods(a, b):
        vals = [x * y for x in (a.lo, a.hi) for y in (b.lo, b.hi) if not (math.isinf(x) and y == 0 or math.isinf(y) and x == 0)]
        return _R(min(vals), max(vals)) if vals else _R(-math.inf, math.inf)
    if op is K.ADD: return _R(s[0].lo + s[1].lo, s[0].hi + s[1].hi)
    if op is K.SUB: return _R(s[0].lo - s[1].hi, s[0].hi - s[1].lo)
    if op is K.MUL: return prods(s[0], s[1])
    if op is K.NEG: return _R(-s[0].hi, -s[0].lo)
    if op is K.MAX: return _R(max(s[0].lo, s[1].lo), max(s[0].hi, s[1].hi))
    if op is K.WHERE: return s[1] | s[2]
    if op in (K.CAST, K.EMU_CAST): return s[0]
    if op is K.MULACC:
        p = prods(s[0], s[1])
        return _R(p.lo + s[2].lo, p.hi + s[2].hi)
    return _R(-math.inf, math.inf)


def _inf_clamp(v: ir.Op, s: list[_R]) -> _R | None:
    """where(x < c, -inf, y) or where(c < x, inf, y), c a finite constant: tinygrad's emulated
    cast to half inside a kernel (compiler/passes/float_semantics.py), which makes a value past
    65504 infinite. Bounded as its other branch: a value past the format's largest finite one is
    the overflow the analysis reports, not an unbounded value."""
    cond = v.srcs[0]
    if not (isinstance(cond, ir.Op) and cond.op is K.CMPLT
            and any(isinstance(x, ir.Const) and math.isfinite(float(x.value)) for x in cond.srcs)):
        return None
    for i in (1, 2):
        c = v.srcs[i]
        if isinstance(c, ir.Const) and math.isinf(float(c.value)):
            return s[3 - i]
    return None


class _KernelAnalysis:
    def __init__(self, kernel: ir.KernelIR, load_ranges: dict[int, _R],
                 registers: dict[int, tuple[int, int]] | None = None):
        self.k, self.loads = kernel, load_ranges
        self.registers = registers or {}             # acc -> what its register holds, where narrower than the dtype
        self.hull: dict[int, _R] = {}                # acc -> every value it ever holds
        self.stored: dict[int, _R] = {}              # slot -> every value stored to it
        self.unproven: set[int] = set()

    # ---------------------------------------------------------------- values
    def value(self, v: ir.Value, acc: dict[int, _R], memo: dict[int, _R]) -> _R:
        if id(v) in memo:
            return memo[id(v)]
        if isinstance(v, ir.Const):
            r = _R(v.value, v.value) if not v.dtype.is_bool else _R(int(v.value), int(v.value))
        elif isinstance(v, ir.Counter):
            r = _R(0, self.k.loops[v.loop].bound - 1)
        elif isinstance(v, ir.AccLoad):
            r = acc.get(v.acc, _full(v.dtype))
        elif isinstance(v, ir.Load):
            r = self.loads.get(v.buf) or (_full(v.dtype) if v.dtype.is_float else _R(*_pair(load_range(self.k, v))))
            if v.gate is not None and v.alt is not None:
                r = r | self.value(v.alt, acc, memo)
        else:
            s = [self.value(x, acc, memo) for x in v.srcs]
            r = self.op(v, s)
            if v.op is K.WHERE and not v.dtype.is_float:
                r = self.clamp(v, s, acc, memo) or r
            elif v.op is K.WHERE:
                r = _inf_clamp(v, s) or r
        memo[id(v)] = r
        return r

    def clamp(self, v: ir.Op, s: list[_R], acc: dict[int, _R], memo: dict[int, _R]) -> _R | None:
        """where(p < q, q, p) is max(p, q) and where(p < q, p, q) is min(p, q) (how tinygrad
        writes clip): their interval is far tighter than the union of both branches. A branch
        may be its compared value through casts that keep the values it is taken for: tinygrad
        moves a clip's cast into the select, where(c < x, c', cast(x)), and x is cast only where
        x <= c (a requantised activation clipped to [0, 3] is 0..3 in its uint8, though x before
        the clip may be 256)."""
        cond = v.srcs[0]
        if not (isinstance(cond, ir.Op) and cond.op is K.CMPLT):
            return None
        p, q = (self._uncast(x, acc, memo) for x in cond.srcs)
        rp, rq = self.value(p, acc, memo), self.value(q, acc, memo)
        t, f = v.srcs[1:]
        # (true branch, its values where p < q), (false branch, its values where q <= p)
        shapes = (((q, _R(max(rq.lo, rp.lo), rq.hi)), (p, _R(max(rp.lo, rq.lo), rp.hi))),     # max
                  ((p, _R(rp.lo, min(rp.hi, rq.hi))), (q, _R(rq.lo, min(rq.hi, rp.hi)))))     # min
        for (tv, tr), (fv, fr) in shapes:
            if _is_on(t, tv, tr) and _is_on(f, fv, fr):
                return tr | fr
        return None

    def _uncast(self, v: ir.Value, acc: dict[int, _R], memo: dict[int, _R]) -> ir.Value:
        """`v` without integer casts that keep its value (its range fits the cast's type)."""
        while (isinstance(v, ir.Op) and v.op is K.CAST and not v.dtype.is_float and not v.srcs[0].dtype.is_float
               and not v.dtype.is_bool and self.value(v.srcs[0], acc, memo).lo >= v.dtype.min
               and self.value(v.srcs[0], acc, memo).hi <= v.dtype.max):
            v = v.srcs[0]
        return v

    def op(self, v: ir.Op, s: list[_R]) -> _R:
        d = v.dtype
        if v.op in (K.CMPLT, K.CMPNE, K.CMPEQ) or d.is_bool:
            return _R(0, 1)
        if d.is_float or any(x.dtype.is_float for x in v.srcs):
            if v.op is K.BITCAST:
                return _full(d)
            r = _float_op(v.op, s)
            if not d.is_float:                        # float -> int conversion truncates
                lo, hi = math.trunc(r.lo) if math.isfinite(r.lo) else d.min, math.trunc(r.hi) if math.isfinite(r.hi) else d.max
                r = _R(lo, hi)
                return r if d.min <= r.lo and r.hi <= d.max else _full(d)
            return r
        if any(math.isinf(x.lo) or math.isinf(x.hi) for x in s):
            return _full(d)
        consts = [x.value if isinstance(x, ir.Const) else None for x in v.srcs]
        exact = exact_interval(v.op, [Interval(int(x.lo), int(x.hi)) for x in s], consts)
        if exact is None or not exact.within(dtype_range(d)):
            return _full(d)                            # wraps, like the hardware and tinygrad
        return _R(exact.lo, exact.hi)

    def wrap(self, a: int, r: _R) -> _R:
        """What register `a` holds after being assigned a value in `r`: `r` if it fits the
        register, else anything the register can hold."""
        reg = self.registers.get(a)
        if reg is None:
            return r
        return r if reg[0] <= r.lo and r.hi <= reg[1] else _R(*reg)

    # ---------------------------------------------------------------- statements
    def run(self, body, acc: dict[int, _R], record: bool, wrap: bool = True) -> dict[int, _R]:
        """Interpret `body` over intervals. `wrap=False` gives the exact sums (for the
        per-iteration deltas of the closed forms below, which wrap as a whole)."""
        acc = dict(acc)
        for s in body:
            if isinstance(s, ir.Loop):
                acc = self.loop(s, acc, record)
                continue
            r = self.value(s.value, acc, {})
            if isinstance(s, ir.AccStore):
                acc[s.acc] = self.wrap(s.acc, r) if wrap else r
                # an infinite literal (-inf, the identity a float max starts from) is a value the
                # program writes on purpose, not one an overflow computes
                identity = isinstance(s.value, ir.Const) and math.isinf(float(s.value.value))
                if record and not identity:
                    self.hull[s.acc] = self.hull[s.acc] | r if s.acc in self.hull else r
            elif record:
                self.stored[s.buf] = self.stored[s.buf] | r if s.buf in self.stored else r
        return acc

    def loop(self, loop: ir.Loop, entry: dict[int, _R], record: bool) -> dict[int, _R]:
        written = {s.acc for s, _ in _stores(loop.body) if isinstance(s, ir.AccStore)}
        after = dict(entry)
        hull = dict(entry)
        carried = set()                  # accs whose hull the analysis below gives in closed form
        for a in sorted(written):
            kind = _update_kind(loop.body, a)
            carried |= {a} if kind != "reset" else set()
            start = entry.get(a, _full(self.k.accs[a].dtype))
            if kind == "reset":
                one = self.run(loop.body, entry, False)
                after[a] = hull[a] = one[a]
            elif kind == "add":
                trips = loop.bound      # delta is one body iteration, nested loops included
                delta = self.run(loop.body, {**entry, a: _R(0, 0)}, False, wrap=False)[a]
                after[a] = _R(start.lo + trips * delta.lo, start.hi + trips * delta.hi)
                hull[a] = _R(start.lo + min(0, trips * delta.lo), start.hi + max(0, trips * delta.hi))
            elif kind == "max":
                # x: the body's values (entered with the identity, -inf or the lowest integer); the register holds
                # max(start, values so far), so the identity itself (-inf for a float max-pool)
                # is never a value it computes, and no overflow
                lowest = -math.inf if self.k.accs[a].dtype.is_float else self.k.accs[a].dtype.min
                x = self.run(loop.body, {**entry, a: _R(lowest, lowest)}, False, wrap=False)[a]
                after[a] = hull[a] = _R(max(start.lo, x.lo), max(start.hi, x.hi)) if loop.bound >= 1 else start
            else:
                self.unproven.add(a)
                after[a] = hull[a] = _full(self.k.accs[a].dtype)
            after[a] = self.wrap(a, after[a])
        if record:
            # One pass over the body from every reachable entry state records buffer stores,
            # nested loops and accs reset inside. It would add one more update on top of the
            # carried accs' hulls, so those keep their closed form.
            before = {a: self.hull.get(a) for a in carried}
            self.run(loop.body, {a: self.wrap(a, r) for a, r in hull.items()}, True)
            for a in carried:
                self.hull[a] = before[a] | hull[a] if before[a] is not None else hull[a]
        return after


def _is_on(branch: ir.Value, target: ir.Value, taken: _R) -> bool:
    """Whether `branch` is `target` wherever target lies in `taken`: the same value (`_same`),
    or it through integer casts each of which holds every value of `taken` (so none wraps)."""
    while not _same(branch, target) and isinstance(branch, ir.Op) and branch.op is K.CAST \
            and not branch.dtype.is_float and not branch.dtype.is_bool and not branch.srcs[0].dtype.is_float \
            and branch.dtype.min <= taken.lo and taken.hi <= branch.dtype.max:
        branch = branch.srcs[0]
    return _same(branch, target)


def _same(a: ir.Value, b: ir.Value) -> bool:
    """The same value: one node, or integer constants of one value (clip's bound appears as an
    int32 constant in the compare and an int8 one in the select)."""
    return a is b or (isinstance(a, ir.Const) and isinstance(b, ir.Const) and not a.dtype.is_float
                      and not b.dtype.is_float and a.value == b.value)


def _stores(body):
    for s in body:
        if isinstance(s, ir.Loop):
            yield from _stores(s.body)
        else:
            yield s, None


def _running(v: ir.Value, a: int, op: K) -> bool:
    """`v` is accumulator `a`'s running value: AccLoad(a), or (loop fusion folds the reset into
    the first iteration) where(first, identity, AccLoad(a)) with the update's identity (0 for a
    sum, the type's lowest value or -inf for a max)."""
    if isinstance(v, ir.AccLoad):
        return v.acc == a
    if not (isinstance(v, ir.Op) and v.op is K.WHERE and not _reads_acc(v.srcs[0], a)):
        return False
    consts = [x for x in v.srcs[1:] if isinstance(x, ir.Const)]
    loads = [x for x in v.srcs[1:] if isinstance(x, ir.AccLoad) and x.acc == a]
    if len(consts) != 1 or len(loads) != 1:
        return False
    value, d = float(consts[0].value), consts[0].dtype
    return value == 0 if op is K.ADD else value == (-math.inf if d.is_float else d.min)


def _reads_acc(v: ir.Value, a: int) -> bool:
    return any(isinstance(x, ir.AccLoad) and x.acc == a for x in ir.toposort([v]))


def _update_kind(body, a: int) -> str:
    """How a loop body updates accumulator `a`: "reset" (written before it is read, so
    nothing carries between iterations), "add" (every write is a + x), "max" (every write is
    max(a, x)), or "other"."""
    first = next(iter(_accesses(body, a)), None)
    if first is not None and first[0] == "write" and not _reads_acc(first[1].value, a):
        return "reset"
    kinds = set()
    for s, _ in _stores(body):
        if isinstance(s, ir.AccStore) and s.acc == a:
            v = s.value
            if isinstance(v, ir.Op) and v.op in (K.ADD, K.MAX) and len(v.srcs) == 2:
                own = [x for x in v.srcs if _running(x, a, v.op)]
                other = [x for x in v.srcs if not _running(x, a, v.op)]
                if len(own) == 1 and len(other) == 1 and not _reads_acc(other[0], a):
                    kinds.add("add" if v.op is K.ADD else "max")
                    continue
            kinds.add("other")
        elif not isinstance(s, ir.AccStore) and any(_reads_acc(x, a) for x in ir.store_operands(s)):
            continue              # a buffer store may read the running value: covered by the hull
    return kinds.pop() if len(kinds) == 1 else "other"


def _accesses(body, a: int):
    for s in body:
        if isinstance(s, ir.Loop):
            yield from _accesses(s.body, a)
            continue
        if any(_reads_acc(x, a) for x in ir.store_operands(s)):
            yield ("read", s)
        if isinstance(s, ir.AccStore) and s.acc == a:
            yield ("write", s)


def analyze_overflow(design: Design, input_ranges: dict[int, tuple[float, float]] | None = None) -> OverflowReport:
    """Bound every accumulator (and every float value stored) of `design` for inputs in
    `input_ranges` (model buffer id -> (lo, hi); inputs not listed span their dtype)."""
    ranges: dict[int, _R] = {b: _R(lo, hi) for b, (lo, hi) in (input_ranges or {}).items()}
    slot_to_buffer = _slot_buffers(design)
    bounds: list[AccBound] = []
    for pos, k in enumerate(design.source_kernels or design.kernels):
        loads = {slot: ranges[buf] for slot, buf in slot_to_buffer[pos].items() if buf in ranges}
        an, shapes = _analysed(k, tuple(sorted(loads.items())), design.config.model_wide)
        for a in k.accs:
            r = an.hull.get(a.index)
            if r is None:
                continue
            bounds.append(_bound(k.name, a.index, f"acc{a.index}", a.dtype, r, a.index in an.unproven,
                                 shapes[a.index]))
        for slot, r in an.stored.items():
            buf = slot_to_buffer[pos][slot]
            ranges[buf] = ranges[buf] | r if buf in ranges else r
            d = next(b.dtype for b in k.buffers if b.slot == slot)
            if d.is_float:
                bounds.append(_bound(k.name, None, f"buf{slot}", d, r, False))
    ints = [b.bits_required for b in bounds if b.bits_required is not None and b.acc is not None]
    floats = [max(abs(b.lo), abs(b.hi)) for b in bounds if b.bits_required is None]
    safe = False if any(b.safe is False for b in bounds) else None if any(b.safe is None for b in bounds) else True
    return OverflowReport(tuple(bounds), safe, max(ints) if ints else None, max(floats) if floats else None,
                          any(b.saturates for b in bounds))


@ir.per_kernel
def _analysed(k: ir.KernelIR, loads: tuple[tuple[int, _R], ...], config) -> tuple["_KernelAnalysis", dict[int, Shape]]:
    """The interval analysis of kernel `k` whose slots load within `loads` (and its ROMs within
    their words), with its accumulators' registers: remembered per kernel, loads and model-wide
    knobs, as a sweep's points share their layers. Read, never change, what it returns."""
    shapes = {a.index: acc_shape(a, config) for a in k.accs}
    an = _KernelAnalysis(k, {**dict(loads), **_rom_loads(k)}, _narrow_registers(k, shapes))   # a ROM's words: within any bound
    an.run(k.body, {}, True)
    return an, shapes


def _rom_loads(k: ir.KernelIR) -> dict[int, _R]:
    """Slot -> the range of the values a ROM of `k` holds (weights="constant": its weights)."""
    out = {slot: _R(r.lo, r.hi) for slot, r in rom_ranges(k).items()}
    for b in k.buffers:
        if b.rom is not None and b.rom and b.dtype.is_float:
            values = from_words(np.array(b.rom, dtype=np.uint64), b.dtype).astype(np.float64)
            out[b.slot] = _R(float(np.nanmin(values)), float(np.nanmax(values)))
    return out


def _bound(kernel: str, acc: int | None, target: str, d: DType, r: _R, unproven: bool,
           register: Shape | None = None) -> AccBound:
    if d.is_float:
        mag = max(abs(r.lo), abs(r.hi))
        # finite inputs reach an infinite bound only through what intervals cannot follow (the
        # exp2 polynomial's exponent bits, a division by a range holding 0): no proof either way
        safe = None if math.isinf(mag) or math.isnan(mag) else mag <= d.highest and not unproven
        # fp8 saturates beyond its largest finite value (tinygrad's defined behaviour, which the
        # hardware computes too): a value that passes it is not an overflow
        saturates = bool(safe is False and not unproven and FORMATS[d.name].saturate)
        return AccBound(kernel, acc, target, d.name, r.lo, r.hi, None, d.bits, True if saturates else safe, saturates)
    bits = Interval(int(r.lo), int(r.hi)).shape.width
    register = register or d.shape
    # the operations still wrap at the dtype when the register is wider
    fits = _shape_range(register)[0] <= r.lo and r.hi <= _shape_range(register)[1] and d.min <= r.lo and r.hi <= d.max
    return AccBound(kernel, acc, target, d.name, r.lo, r.hi, bits, register.width, fits and not unproven)


def _shape_range(shape: Shape) -> tuple[int, int]:
    w = shape.width
    return (-(1 << (w - 1)), (1 << (w - 1)) - 1) if shape.signed else (0, (1 << w) - 1)


def _pair(i: Interval) -> tuple[int, int]:
    return i.lo, i.hi


def _narrow_registers(k: ir.KernelIR, shapes: dict[int, Shape]) -> dict[int, tuple[int, int]]:
    """acc -> the values its register can hold, for the integer registers that cannot hold every
    value of their dtype (acc_width, or sized to their bounds): a value past them wraps there."""
    out = {}
    for a in k.accs:
        if a.dtype.is_float or a.dtype.is_bool:
            continue
        lo, hi = _shape_range(shapes[a.index])
        if lo > a.dtype.min or hi < a.dtype.max:
            out[a.index] = (lo, hi)
    return out


@dataclass(frozen=True)
class KernelBounds:
    """What one kernel's values can be, for the bounds of what it loads (compiler/bounds.py):
    every accumulator the analysis bounds in closed form (`accs`; the others are left out) and
    every buffer slot it stores to (`stored`), as (lo, hi) of reals; integers exact."""
    accs: dict[int, tuple[float, float]]
    stored: dict[int, tuple[float, float]]


def kernel_bounds(kernel: ir.KernelIR, load_ranges: dict[int, tuple[float, float]]) -> KernelBounds:
    """Interpret one kernel over intervals (the analysis of analyze_overflow) with its loads of
    slot s in `load_ranges[s]` (slots not listed: their buffer's bounds, else their dtype)."""
    an = _KernelAnalysis(kernel, {s: _R(lo, hi) for s, (lo, hi) in load_ranges.items()})
    an.run(kernel.body, {}, True)
    return KernelBounds({a: (r.lo, r.hi) for a, r in an.hull.items() if a not in an.unproven},
                        {s: (r.lo, r.hi) for s, r in an.stored.items()})


def _slot_buffers(design: Design) -> list[dict[int, int]]:
    """For each kernel (execution order): slot -> model buffer id."""
    out: list[dict[int, int]] = [{} for _ in design.kernels]
    for hb in design.host_buffers.values():
        for pos, slot in hb.holders:
            out[pos][slot] = hb.id
    return out


def worst_case_inputs(design: Design, input_ranges: dict[int, tuple[float, float]]) -> dict[int, np.ndarray]:
    """Constant inputs, each at the low or high end of its range, that drive the accumulators
    to their largest magnitude (tried exhaustively over up to 6 inputs, by the analysis)."""
    inputs = [b for b in design.graph.inputs if b in design.host_buffers]
    choices = [(input_ranges.get(b, _default(design, b))) for b in inputs]
    best, best_mag = None, -1.0
    combos = itertools.product(*[(lo, hi) for lo, hi in choices]) if len(inputs) <= 6 else \
        [tuple(hi for _, hi in choices), tuple(lo for lo, _ in choices)]
    for combo in combos:
        report = analyze_overflow(design, {b: (v, v) for b, v in zip(inputs, combo)})
        mag = max((max(abs(x.lo), abs(x.hi)) for x in report.accumulators if x.acc is not None), default=0)
        if mag > best_mag:
            best, best_mag = combo, mag
    out = {}
    for b, v in zip(inputs, best or ()):
        gb = design.graph.buffers[b]
        out[b] = np.full(gb.size, v, dtype=np.float32 if gb.dtype.held_as_bits else gb.dtype.numpy)
    return out


def _default(design: Design, buf: int) -> tuple[float, float]:
    if buf in design.input_bounds:               # declared at compile time: the hardware holds no more
        return design.input_bounds[buf]
    d = design.graph.buffers[buf].dtype
    if d.is_float:
        return (d.lowest, d.highest)
    return (d.min, d.max)
