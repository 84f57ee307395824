"""Value-range analysis over KernelIR: a sound integer interval for every integer value.

Two uses: the datapath sizes each signal to its interval (a loop counter bounded by 784 needs
10 bits, not the 32 of tinygrad's index dtype), and an operation whose exact interval leaves
its dtype's range is known to possibly wrap. When the interval fits, computing in the narrow
width is exact, so it equals tinygrad's wrapped 32-bit result bit-for-bit.

`acc_ranges` lets a caller bound accumulator registers tighter than their dtype (the overflow
proof); without it an accumulator may hold any value of its dtype. A load reads its buffer's
`bounds` (ir.BufferDecl: an int4 weight in an int8 container, a declared input range), so
every value computed from it is sized to what it can really be.
"""
from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Shape, signed, unsigned

from . import ir
from .config import HardwareConfig
from .dtypes import DType

K = ir.OpKind


@dataclass(frozen=True)
class Interval:
    lo: int
    hi: int

    @property
    def shape(self) -> Shape:
        """The narrowest Amaranth shape that holds every value of the interval."""
        if self.lo >= 0:
            return unsigned(max(1, self.hi.bit_length()))
        bits = max((-self.lo - 1).bit_length(), self.hi.bit_length()) + 1
        return signed(bits)

    def within(self, other: "Interval") -> bool:
        return other.lo <= self.lo and self.hi <= other.hi


def dtype_range(d: DType) -> Interval:
    return Interval(d.min, d.max)


def _hull(values) -> Interval:
    values = list(values)
    return Interval(min(values), max(values))


def signed_bits(i: Interval) -> int:
    """Bits of a two's complement number that holds the whole interval."""
    return max((-i.lo - 1).bit_length() if i.lo < 0 else 0, i.hi.bit_length()) + 1


def _cdiv(a: int, b: int) -> int:
    return abs(a) // abs(b) * (1 if (a >= 0) == (b > 0) else -1) if b else 0


def exact_interval(op: ir.OpKind, srcs: list[Interval], consts: list[int | None]) -> Interval | None:
    """The interval of the mathematically exact result, or None if unknown (treat as wrap)."""
    a = srcs[0] if srcs else None
    b = srcs[1] if len(srcs) > 1 else None
    if op is K.ADD:
        return Interval(a.lo + b.lo, a.hi + b.hi)
    if op is K.SUB:
        return Interval(a.lo - b.hi, a.hi - b.lo)
    if op is K.NEG:
        return Interval(-a.hi, -a.lo)
    if op is K.MUL:
        return _hull(x * y for x in (a.lo, a.hi) for y in (b.lo, b.hi))
    if op is K.MULACC:
        m = _hull(x * y for x in (a.lo, a.hi) for y in (b.lo, b.hi))
        c = srcs[2]
        return Interval(m.lo + c.lo, m.hi + c.hi)
    if op is K.MAX:
        return Interval(max(a.lo, b.lo), max(a.hi, b.hi))
    if op in (K.CMPLT, K.CMPNE, K.CMPEQ):
        return Interval(0, 1)
    if op is K.WHERE:
        return Interval(min(srcs[1].lo, srcs[2].lo), max(srcs[1].hi, srcs[2].hi))
    if op in (K.AND, K.OR, K.XOR):
        if consts[1] == -1 and op is K.XOR:                      # bitwise not
            return Interval(-a.hi - 1, -a.lo - 1)
        if a.lo >= 0 and b.lo >= 0:
            if op is K.AND:
                return Interval(0, min(a.hi, b.hi))
            return Interval(0, (1 << max(a.hi, b.hi).bit_length()) - 1)
        if op is K.AND and (a.lo >= 0 or b.lo >= 0):             # masking with a non-negative value
            return Interval(0, a.hi if a.lo >= 0 else b.hi)
        n = max(signed_bits(a), signed_bits(b))
        return Interval(-(1 << (n - 1)), (1 << (n - 1)) - 1)
    if op is K.SHL and consts[1] is not None and 0 <= consts[1] < 64:
        return Interval(a.lo << consts[1], a.hi << consts[1])
    if op is K.SHR and consts[1] is not None and consts[1] >= 0:
        return Interval(a.lo >> consts[1], a.hi >> consts[1])
    if op in (K.SHL, K.SHR) and consts[1] is None and 0 <= b.lo and b.hi < 64:
        # by an amount in a known range (a requantisation's stored exponent): the extremes are
        # at the range's ends
        shift = (lambda x, k: x << k) if op is K.SHL else (lambda x, k: x >> k)
        return _hull(shift(x, k) for x in (a.lo, a.hi) for k in (b.lo, b.hi))
    if op is K.CDIV and consts[1] is not None and consts[1] != 0:
        return _hull((_cdiv(a.lo, consts[1]), _cdiv(a.hi, consts[1])))
    if op is K.CMOD and consts[1] is not None and consts[1] != 0:
        c = abs(consts[1])
        lo = 0 if a.lo >= 0 else max(a.lo, -(c - 1))
        hi = 0 if a.hi <= 0 else min(a.hi, c - 1)
        return Interval(lo, hi)
    if op is K.CAST:
        return a
    return None


def load_range(kernel: ir.KernelIR, load: ir.Load) -> Interval:
    """What a load can read: its buffer's bounds (declared or derived: compiler/bounds.py) when
    it has them, else anything its dtype holds."""
    decl = next((b for b in kernel.buffers if b.slot == load.buf), None)
    if decl is not None and decl.bounds is not None and not load.dtype.is_float:
        return Interval(*decl.bounds)
    return dtype_range(load.dtype)


def analyze(kernel: ir.KernelIR, acc_ranges: dict[int, Interval] | None = None) -> dict[int, Interval]:
    """id(value) -> interval, for every integer/bool value reachable from the kernel's stores.

    A sum, difference, negation or product by a constant of values is first written as a linear
    form over the values it is built from (`_linear_form`), and its interval is that form's
    exact range: interval arithmetic on the operands counts an input twice where it cancels (a
    shared adder graph's `(x1 + x2) - (x2 << 1)` spans x1 - x2's range, not x1 + x2's plus
    2 x2's), and every adder of a constant-weight layer is as wide as its interval (the
    64x32 int6 layer of docs/area.md: 7,102 carry-chain bits by interval arithmetic, 6,929 by
    forms, da4ml's graph 6,909). Sound: each term is a value at its own interval, which holds
    whatever the others hold. A value whose exact range leaves its dtype wraps there: it is
    a term of its own, at its dtype's range, for what is built from it."""
    acc_ranges = acc_ranges or {}
    out: dict[int, Interval] = {}
    forms: dict[int, _Form] = {}
    roots = [v for s, _ in kernel.stores() for v in ir.store_operands(s)]
    roms = rom_ranges(kernel)
    for v in ir.toposort(roots):
        if v.dtype.is_float:
            continue
        interval = value_interval(v, kernel, out, acc_ranges, roms)
        form = _linear_form(v, forms)
        if form is not None:
            exact = form.interval(out)
            if exact.within(dtype_range(v.dtype)):
                interval = exact            # within interval arithmetic's: never looser
            else:
                form = None                 # it wraps: a term of its own
        out[id(v)] = interval
        forms[id(v)] = form if form is not None else _Form({id(v): 1}, 0)
    return out


MAX_FORM_TERMS = 256
"""Most terms a linear form keeps: a larger sum (a 784-input dot product's last adder levels)
is a term of its own at its interval-arithmetic range, which is sound and, for sums of distinct
inputs, as tight."""


@dataclass(frozen=True)
class _Form:
    """A value as sum(coefficient x term) + constant, over terms (id(value)) taken at their
    own intervals."""
    terms: dict[int, int]
    constant: int

    def interval(self, known: dict[int, Interval]) -> Interval:
        lo = hi = self.constant
        for t, c in self.terms.items():
            r = known[t]
            a, b = c * r.lo, c * r.hi
            lo, hi = lo + min(a, b), hi + max(a, b)
        return Interval(lo, hi)

    def scaled(self, c: int) -> "_Form":
        return _Form({t: c * k for t, k in self.terms.items()}, c * self.constant)


def _linear_form(v: ir.Value, forms: dict[int, _Form]) -> _Form | None:
    """`v` as a linear form of its operands' forms, when it is a sum, difference, negation,
    shift left or product by a constant of integer values, or an integer cast of one (None:
    otherwise, or more than MAX_FORM_TERMS terms)."""
    if isinstance(v, ir.Const):
        return _Form({}, int(v.value)) if not v.dtype.is_float else None
    if not isinstance(v, ir.Op) or v.dtype.is_bool or any(s.dtype.is_float or s.dtype.is_bool for s in v.srcs):
        return None
    const = [int(s.value) if isinstance(s, ir.Const) else None for s in v.srcs]
    if v.op in (K.ADD, K.SUB):
        a, b = forms.get(id(v.srcs[0])), forms.get(id(v.srcs[1]))
        if a is None or b is None:
            return None
        sign = -1 if v.op is K.SUB else 1
        terms = dict(a.terms)
        for t, c in b.terms.items():
            n = terms.get(t, 0) + sign * c
            if n:
                terms[t] = n
            else:
                terms.pop(t, None)
        if len(terms) > MAX_FORM_TERMS:
            return None
        return _Form(terms, a.constant + sign * b.constant)
    if v.op is K.NEG and id(v.srcs[0]) in forms:
        return forms[id(v.srcs[0])].scaled(-1)
    if v.op is K.CAST and id(v.srcs[0]) in forms:
        return forms[id(v.srcs[0])]           # the same value while it fits (analyze checks)
    if v.op is K.SHL and const[1] is not None and 0 <= const[1] < 64 and id(v.srcs[0]) in forms:
        return forms[id(v.srcs[0])].scaled(1 << const[1])
    if v.op is K.MUL and len(v.srcs) == 2:
        for i in (0, 1):
            if const[i] is not None and id(v.srcs[1 - i]) in forms:
                return forms[id(v.srcs[1 - i])].scaled(const[i])
    return None


def rom_ranges(kernel: ir.KernelIR) -> dict[int, Interval]:
    """Slot -> the hull of the values an integer ROM (weights="constant") holds."""
    out = {}
    for b in kernel.buffers:
        if b.rom is not None and b.rom and not b.dtype.is_float:
            values = [b.dtype.wrap(w) if not b.dtype.is_bool else w & 1 for w in b.rom]
            out[b.slot] = Interval(min(values), max(values))
    return out


def value_interval(v: ir.Value, kernel: ir.KernelIR, known: dict[int, Interval],
                   acc_ranges: dict[int, Interval], roms: dict[int, Interval] | None = None) -> Interval:
    full = dtype_range(v.dtype)
    if isinstance(v, ir.Const):
        return Interval(int(v.value), int(v.value))
    if isinstance(v, ir.Counter):
        return Interval(0, kernel.loops[v.loop].bound - 1)
    if isinstance(v, ir.AccLoad):
        return acc_ranges.get(v.acc, full)
    if isinstance(v, ir.Load):
        # a ROM's words are known (the tightest: within any declared bound); else its bounds
        full = roms[v.buf] if roms and v.buf in roms else load_range(kernel, v)
        if v.gate is not None and v.alt is not None and id(v.alt) in known:
            alt = known[id(v.alt)]
            return Interval(min(full.lo, alt.lo), max(full.hi, alt.hi))
        return full
    srcs = [known.get(id(s)) for s in v.srcs]
    if any(s is None for s in srcs):          # float operands (casts, bitcasts, compares)
        if v.op in (K.CMPLT, K.CMPNE, K.CMPEQ) or v.dtype.is_bool:
            return Interval(0, 1)
        return full
    if v.op is K.CAST and v.dtype.is_bool:
        return Interval(0, 1)
    if v.op is K.WHERE and (clip := _clipped(v, known)) is not None:
        return clip
    if v.op is K.BITCAST:
        return srcs[0] if srcs[0].within(full) else full
    consts = [s.value if isinstance(s, ir.Const) and not s.dtype.is_float else None for s in v.srcs]
    exact = exact_interval(v.op, srcs, consts)
    if exact is None or not exact.within(full):
        return full           # may wrap: the datapath computes at the dtype's full width
    return exact


def _clipped(v: ir.Op, known: dict[int, Interval]) -> Interval | None:
    """The interval of a clip `where(c < x, c', cast(x))` (or `where(x < c, c', cast(x))`): its
    last operand is taken only where the compare is false, so where x <= c (x >= c), and then
    x fits the cast unwrapped when that range lies in the dtype (a requantised activation
    clipped to 127 is 0..127, not the int8 it is cast to). None: not this shape."""
    cond, then, other = v.srcs
    if not (isinstance(cond, ir.Op) and cond.op is K.CMPLT and id(then) in known):
        return None
    x = other.srcs[0] if isinstance(other, ir.Op) and other.op is K.CAST else other
    a, b = cond.srcs
    floor = None           # x = max(b, m) compared as b (constants.py rewrites c < max(b, m) so)
    if isinstance(x, ir.Op) and x.op is K.MAX and x is not b and isinstance(a, ir.Const):
        for y, m in ((x.srcs[0], x.srcs[1]), (x.srcs[1], x.srcs[0])):
            if y is b and isinstance(m, ir.Const) and int(m.value) <= int(a.value):
                floor = int(m.value)
    if floor is not None and id(b) in known:                          # b <= c, x = max(b, m)
        r = known[id(b)]
        taken = Interval(max(r.lo, floor), max(min(r.hi, int(a.value)), floor))
    elif x is b and isinstance(a, ir.Const) and id(x) in known:      # c < x false: x <= c
        r = known[id(x)]
        taken = Interval(r.lo, min(r.hi, int(a.value)))
    elif x is a and isinstance(b, ir.Const) and id(x) in known:      # x < c false: x >= c
        r = known[id(x)]
        taken = Interval(max(r.lo, int(b.value)), r.hi)
    else:
        return None
    if taken.lo > taken.hi or not taken.within(dtype_range(v.dtype)) or \
            (x is not other and not taken.within(dtype_range(other.dtype))):
        return None
    t = known[id(then)]
    return Interval(min(t.lo, taken.lo), max(t.hi, taken.hi))


def acc_width(d: DType, config: HardwareConfig) -> int:
    """Bits of an accumulator register of dtype `d` without bounds: `config.acc_width` for
    integer (non-bool) reductions, else the dtype's width."""
    if config.acc_width is None or d.is_float or d.is_bool:
        return d.bits
    return config.acc_width


def acc_ranges(kernel: ir.KernelIR, config: HardwareConfig) -> dict[int, Interval]:
    """The values an accumulator register can hold when it cannot hold every value of its
    dtype (it wraps at `acc_width`, or holds its proven bounds), for the range analysis that
    sizes the datapath."""
    out = {}
    for a in kernel.accs:
        if a.dtype.is_float or a.dtype.is_bool:
            continue
        if a.bounds is not None and config.acc_width is None:
            out[a.index] = Interval(*a.bounds)
            continue
        w = acc_width(a.dtype, config)
        if w < a.dtype.bits:
            out[a.index] = Interval(-(1 << (w - 1)), (1 << (w - 1)) - 1) if a.dtype.signed else Interval(0, (1 << w) - 1)
    return out
