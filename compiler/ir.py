"""KernelIR: the typed intermediate representation one kernel is lowered to.

Values form a DAG of frozen records. Nodes compare by identity (`eq=False`): the lowering
creates exactly one node per tinygrad UOp, and tinygrad's UOps are hash-consed, so equal
sub-expressions are already the same node. (Structural hashing of a deep DAG with shared
sub-trees would be exponential.) `fingerprint()` gives a stable content hash.

A kernel body is a sequence of statements: stores and loops. A loop's body is again such a
sequence, so a level may hold several sibling loops (softmax: a REDUCE loop, then an
output loop) as well as stores before, between and after them.
"""
from __future__ import annotations

import enum
import functools
import hashlib
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Union

from .dtypes import DType, INT32
from .memo import HeldMemo


class OpKind(enum.Enum):
    ADD = "add"; SUB = "sub"; MUL = "mul"; NEG = "neg"; MAX = "max"
    CMPLT = "cmplt"; CMPNE = "cmpne"; CMPEQ = "cmpeq"; WHERE = "where"
    AND = "and"; OR = "or"; XOR = "xor"; SHL = "shl"; SHR = "shr"
    CDIV = "cdiv"; CMOD = "cmod"; CAST = "cast"; BITCAST = "bitcast"; MULACC = "mulacc"
    # float-only operations tinygrad may emit; the hardware may not implement all of them
    RECIPROCAL = "reciprocal"; EXP2 = "exp2"; LOG2 = "log2"; SQRT = "sqrt"; SIN = "sin"
    TRUNC = "trunc"; FDIV = "fdiv"; POW = "pow"
    # tinygrad's software float conversion (how its PYTHON device loads and stores half below
    # Python 3.12: compiler/passes/float_semantics.py), never in a lowered kernel
    EMU_CAST = "emu_cast"

    def __repr__(self) -> str:
        return self.name


class Axis(enum.Enum):
    OUTPUT = "output"    # independent iterations, one output element each
    REDUCE = "reduce"    # iterations carry an accumulator

    def __repr__(self) -> str:
        return self.name


# ---------------------------------------------------------------- values

@dataclass(frozen=True, eq=False)
class Const:
    value: int | float
    dtype: DType


@dataclass(frozen=True, eq=False)
class Counter:
    """The induction variable of loop `loop` (0 .. bound-1)."""
    loop: int
    dtype: DType = INT32


@dataclass(frozen=True, eq=False)
class Load:
    """`gate ? buffers[buf][index] : alt` (ungated when gate is None)."""
    buf: int
    index: "Value"
    dtype: DType
    gate: "Value | None" = None
    alt: "Value | None" = None


@dataclass(frozen=True, eq=False)
class AccLoad:
    acc: int
    dtype: DType


@dataclass(frozen=True, eq=False)
class Op:
    op: OpKind
    dtype: DType
    srcs: tuple["Value", ...]


Value = Union[Const, Counter, Load, AccLoad, Op]


# ---------------------------------------------------------------- statements

@dataclass(frozen=True, eq=False)
class AccStore:
    acc: int
    value: Value


@dataclass(frozen=True, eq=False)
class BufStore:
    buf: int
    index: Value
    value: Value
    gate: Value | None = None


@dataclass(frozen=True, eq=False)
class Loop:
    id: int
    axis: Axis
    bound: int
    body: tuple["Stmt", ...]


Store = Union[AccStore, BufStore]
Stmt = Union[AccStore, BufStore, Loop]


# ---------------------------------------------------------------- kernel

@dataclass(frozen=True)
class BufferDecl:
    slot: int             # position in the kernel's parameter list
    dtype: DType
    size: int             # elements
    loaded: bool
    stored: bool
    # weights="constant": the contents (unsigned bit patterns, one per element), fixed when the
    # design is compiled: a read-only memory initialised with them, never on the host bus
    rom: tuple[int, ...] | None = None
    # Integer buffers: every value the buffer holds lies in [lo, hi] (declared for an input,
    # derived for a buffer a kernel writes: compiler/bounds.py), so its memory stores `width`
    # bits, not the dtype's (an int4 weight in tinygrad's int8 holds 4). None: the dtype's range.
    bounds: tuple[int, int] | None = None

    @property
    def signed(self) -> bool:
        """Whether an element is stored in two's complement (else unsigned)."""
        if self.bounds is not None:
            return self.bounds[0] < 0
        return self.dtype.signed and self.dtype.is_int and not self.dtype.is_bool

    @property
    def width(self) -> int:
        """Bits of one stored element: the narrowest that holds `bounds`, else the dtype's."""
        if self.bounds is None:
            return self.dtype.bits
        return bits_of(*self.bounds)


@dataclass(frozen=True)
class AccDecl:
    """An accumulator register. `ways` > 1: it holds that many independent values, one per
    output row interleaved through its loop nest (transform.interleave): a step reads the
    value written `ways` steps earlier (the steps of that nest run back to back). `bounds`
    (integers): every value the register ever holds, as the overflow analysis proves it for
    the bounds of the kernel's buffers (compiler/bounds.py); the register is sized to it."""
    index: int
    dtype: DType
    ways: int = 1
    bounds: tuple[int, int] | None = None


def bits_of(lo: int, hi: int) -> int:
    """Bits of the narrowest two's complement (lo < 0) or unsigned number holding [lo, hi]."""
    if lo >= 0:
        return max(1, hi.bit_length())
    return max((-lo - 1).bit_length(), hi.bit_length()) + 1


def bit_test(v: Value) -> tuple[Value, int] | None:
    """(x, t) when integer op `v` decides by x < t for a threshold t of 0, 2**k or -2**k: x < c
    or c < x (x < c + 1 negated) for such a c or c + 1; max(x, c) for c = t - 1 >= 0 or c = t < 0
    (a clamp's bounds: c -128, min(x, 127) as ~max(~x, -128)), and a ReLU's max(x, 0) or max(x, -1)
    with t = 0 (where x equals c either pick is right). x's sign and its bits from k up decide, a
    LUT tree (for t = 0 the sign alone), and no compare on a carry chain (hw/datapath.less_than);
    else None."""
    if not isinstance(v, Op) or v.op not in (OpKind.MAX, OpKind.CMPLT) or v.dtype.is_float \
            or v.srcs[0].dtype.is_float:
        return None
    for i, (c, x) in enumerate(((v.srcs[0], v.srcs[1]), (v.srcs[1], v.srcs[0]))):
        if isinstance(c, Const) and not isinstance(x, Const):
            n = int(c.value)
            if v.op is OpKind.MAX and n in (0, -1):
                return x, 0     # a ReLU: its operand's sign selects
            t = n + 1 if (v.op is OpKind.MAX and n >= 0) or (v.op is OpKind.CMPLT and i == 0) else n
            m = abs(t)
            return (x, t) if m & (m - 1) == 0 else None        # 0 or a power of two
    return None


@dataclass(frozen=True, eq=False)
class KernelIR:
    name: str
    buffers: tuple[BufferDecl, ...]
    accs: tuple[AccDecl, ...]
    body: tuple[Stmt, ...]
    loops: dict[int, Loop] = field(default_factory=dict)   # id -> loop, filled by make_kernel

    def stores(self) -> Iterator[tuple[Store, tuple[Loop, ...]]]:
        """Every store with its enclosing loops (outermost first), in program order."""
        def walk(body, enclosing):
            for s in body:
                if isinstance(s, Loop):
                    yield from walk(s.body, enclosing + (s,))
                else:
                    yield s, enclosing
        yield from walk(self.body, ())


def loaded_slots(k: KernelIR) -> frozenset[int]:
    """The buffer slots some Load of `k` reads (a slot no store's operands load has a memory
    nothing reads: synthesis removes it)."""
    return frozenset(v.buf for s, _ in k.stores() for v in toposort(store_operands(s)) if isinstance(v, Load))


def make_kernel(name, buffers, accs, body) -> KernelIR:
    loops: dict[int, Loop] = {}

    def collect(stmts):
        for s in stmts:
            if isinstance(s, Loop):
                loops[s.id] = s
                collect(s.body)
    collect(body)
    k = KernelIR(name, tuple(buffers), tuple(accs), tuple(body), loops)
    verify(k)
    return k


# ---------------------------------------------------------------- traversal and checks

def operands(v: Value) -> tuple[Value, ...]:
    if isinstance(v, Op):
        return v.srcs
    if isinstance(v, Load):
        return tuple(x for x in (v.index, v.gate, v.alt) if x is not None)
    return ()


def store_operands(s: Store) -> tuple[Value, ...]:
    if isinstance(s, AccStore):
        return (s.value,)
    return tuple(x for x in (s.index, s.value, s.gate) if x is not None)


def toposort(roots, operands_of: Callable[[Value], Iterable[Value]] | None = None) -> list[Value]:
    """All values reachable from `roots`, operands before users: depth-first post-order, each
    value's operands taken last first (the order every pass and the generated hardware's names
    follow). `operands_of` (default: `operands`) chooses which edges to follow.

    The hottest loop of compilation (a sweep's cheap pass compiles ten thousand points): one
    iterator per open value, each value pushed once."""
    operands_of = operands_of or operands
    seen: set[int] = set()
    mark = seen.add
    order: list[Value] = []
    emit = order.append
    for root in roots:
        if id(root) in seen:
            continue
        mark(id(root))
        stack = [(root, reversed(tuple(operands_of(root))))]
        while stack:
            v, rest = stack[-1]
            for o in rest:
                if id(o) not in seen:
                    mark(id(o))
                    stack.append((o, reversed(tuple(operands_of(o)))))
                    break
            else:
                stack.pop()
                emit(v)
    return order


def after_accumulators(order: list[Value], operands_of: Callable[[Value], Iterable[Value]] | None = None) -> set[int]:
    """id() of the values of `order` (operands before users: toposort's) computed from an
    accumulator's value: each AccLoad, and every value with such an operand (`operands_of`,
    default `operands`)."""
    operands_of = operands_of or operands
    out: set[int] = set()
    for v in order:
        if isinstance(v, AccLoad) or any(id(o) in out for o in operands_of(v)):
            out.add(id(v))
    return out


def per_kernel(fn):
    """Memoise `fn(kernel, ...)` on the kernel's identity and the other arguments: by value when
    they can be hashed, else by identity (a Schedule of dicts: the entry holds it, so its id()
    is not reused while remembered). A KernelIR is immutable, so what is derived from one object
    stays right for it; compiling a design derives a kernel's step program and schedule in
    several places (the hazard check, the dataflow plan, memory packing, the hardware, the cycle
    and delay models), and a sweep compiles thousands of designs whose layers repeat
    (compile_traced hands a layer built the same way the same kernel object). The entry holds
    the kernel, so its id() is not reused while remembered either; the oldest of MEMO_SIZE
    entries goes first. What `fn` returns is shared, so it must never be changed by a caller
    (the records it is used for are frozen)."""
    memo = HeldMemo(MEMO_SIZE)

    @functools.wraps(fn)
    def wrapper(kernel, *args, **kwargs):
        names = tuple(sorted(kwargs))
        values = args + tuple(kwargs[k] for k in names)
        loose: tuple = ()
        if not _hashable(values):       # an argument that cannot be hashed: by its identity
            loose = tuple(v for v in values if not _hashable(v))
            values = tuple(v if _hashable(v) else _HELD for v in values)
        return memo.get((kernel, *loose), (names, values), lambda: fn(kernel, *args, **kwargs))
    return wrapper


_HELD = object()
"""Stands in a per_kernel key for an argument remembered by identity (it is in the entry's held objects)."""


def _hashable(value) -> bool:
    try:
        hash(value)
        return True
    except TypeError:
        return False


MEMO_SIZE = 64
"""Kernels per_kernel remembers, per function: a compile touches a design's few kernels again and
again within itself, and a kernel of a large constant-weight design holds megabytes of IR."""


class IRError(AssertionError):
    """The IR broke an invariant: a compiler bug, reported where it happened."""


def verify(k: KernelIR) -> None:
    """Cheap structural invariants, checked after lowering so a broken IR fails here."""
    slots = {b.slot for b in k.buffers}
    for b in k.buffers:
        if b.rom is not None and (b.stored or len(b.rom) != b.size):
            raise IRError(f"{k.name}: ROM buffer {b.slot} is stored or holds {len(b.rom)} of {b.size} words")
    accs = {a.index for a in k.accs}
    loop_ids = [s.id for s in k.loops.values()]
    if len(set(loop_ids)) != len(loop_ids):
        raise IRError(f"{k.name}: duplicate loop ids")
    # stores under the same loops are checked together: one walk of their shared values
    groups: dict[tuple[int, ...], list] = {}
    for store, enclosing in k.stores():
        if isinstance(store, AccStore) and store.acc not in accs:
            raise IRError(f"{k.name}: store to undeclared accumulator {store.acc}")
        if isinstance(store, BufStore) and store.buf not in slots:
            raise IRError(f"{k.name}: store to undeclared buffer {store.buf}")
        groups.setdefault(tuple(l.id for l in enclosing), []).extend(store_operands(store))
    for enclosing, roots in groups.items():
        open_loops = set(enclosing)
        for v in toposort(roots):
            if isinstance(v, Counter) and v.loop not in open_loops:
                raise IRError(f"{k.name}: counter of loop {v.loop} used outside that loop")
            if isinstance(v, Load) and v.buf not in slots:
                raise IRError(f"{k.name}: load from undeclared buffer {v.buf}")
            if isinstance(v, AccLoad) and v.acc not in accs:
                raise IRError(f"{k.name}: load of undeclared accumulator {v.acc}")
    for loop in k.loops.values():
        if loop.bound < 1 or not loop.body:
            raise IRError(f"{k.name}: loop {loop.id} has bound {loop.bound} and {len(loop.body)} statements")


def fingerprint(k: KernelIR) -> str:
    """A stable content hash of the kernel (structure, types, constants), for caches."""
    h = hashlib.sha256()
    ids: dict[int, int] = {}

    def val(v: Value) -> int:
        if id(v) in ids:
            return ids[id(v)]
        ops = [val(o) for o in operands(v)]
        if isinstance(v, Const):
            desc = f"C {v.dtype} {v.value!r}"
        elif isinstance(v, Counter):
            desc = f"N {v.loop}"
        elif isinstance(v, Load):
            desc = f"L {v.buf} {v.dtype} {v.gate is not None} {ops}"
        elif isinstance(v, AccLoad):
            desc = f"A {v.acc} {v.dtype}"
        else:
            desc = f"O {v.op.value} {v.dtype} {ops}"
        ids[id(v)] = len(ids)
        h.update(f"{ids[id(v)]}={desc};".encode())
        return ids[id(v)]

    def stmts(body, depth):
        for s in body:
            if isinstance(s, Loop):
                h.update(f"loop {s.id} {s.axis.value} {s.bound} {{".encode())
                stmts(s.body, depth + 1)
                h.update(b"}")
            elif isinstance(s, AccStore):
                h.update(f"acc{s.acc}<-{val(s.value)};".encode())
            else:
                g = val(s.gate) if s.gate is not None else -1
                h.update(f"buf{s.buf}[{val(s.index)}]<-{val(s.value)} if {g};".encode())

    h.update(repr([(b.slot, b.dtype.name, b.size, b.loaded, b.stored) + ((b.bounds,) if b.bounds else ())
                   for b in k.buffers]).encode())
    for b in k.buffers:                  # a ROM's contents are part of the hardware
        if b.rom is not None:
            h.update(f"rom{b.slot}:{hashlib.sha256(repr(b.rom).encode()).hexdigest()};".encode())
    h.update(repr([(a.index, a.dtype.name) + ((a.ways,) if a.ways > 1 else ()) + ((a.bounds,) if a.bounds else ())
                   for a in k.accs]).encode())
    stmts(k.body, 0)
    return h.hexdigest()


def pretty(k: KernelIR) -> str:
    """A readable listing of the kernel, for debugging and error messages."""
    names: dict[int, str] = {}
    lines = [f"kernel {k.name}"]
    for b in k.buffers:
        role = ("in" if b.loaded else "") + ("out" if b.stored else "") + (" rom" if b.rom is not None else "")
        held = f" in [{b.bounds[0]}, {b.bounds[1]}]: {b.width} bits" if b.bounds else ""
        lines.append(f"  buf{b.slot}: {b.dtype}[{b.size}] {role}{held}")
    for a in k.accs:
        lines.append(f"  acc{a.index}: {a.dtype}" + (f" x{a.ways} (interleaved)" if a.ways > 1 else "")
                     + (f" in [{a.bounds[0]}, {a.bounds[1]}]" if a.bounds else ""))

    def name(v: Value, out: list[str], ind: str) -> str:
        if id(v) in names:
            return names[id(v)]
        if isinstance(v, Const):
            return f"{v.value!r}:{v.dtype}"
        if isinstance(v, Counter):
            return f"i{v.loop}"
        if isinstance(v, AccLoad):
            return f"acc{v.acc}"
        ops = [name(o, out, ind) for o in operands(v)]
        n = f"v{len(names)}"
        names[id(v)] = n
        if isinstance(v, Load):
            expr = f"buf{v.buf}[{ops[0]}]" + (f" if {ops[1]} else {ops[2]}" if v.gate is not None else "")
        else:
            expr = f"{v.op.value}({', '.join(ops)})"
        out.append(f"{ind}{n}: {v.dtype} = {expr}")
        return n

    def body(stmts, ind):
        for s in stmts:
            if isinstance(s, Loop):
                lines.append(f"{ind}for i{s.id} in range({s.bound}):  # {s.axis.value}")
                body(s.body, ind + "  ")
                continue
            out: list[str] = []
            if isinstance(s, AccStore):
                rhs = name(s.value, out, ind)
                lines.extend(out)
                lines.append(f"{ind}acc{s.acc} = {rhs}")
            else:
                idx, rhs = name(s.index, out, ind), name(s.value, out, ind)
                g = f" if {name(s.gate, out, ind)}" if s.gate is not None else ""
                lines.extend(out)
                lines.append(f"{ind}buf{s.buf}[{idx}] = {rhs}{g}")
    body(k.body, "  ")
    return "\n".join(lines)
