"""Lowering: one kernel's flat tinygrad UOp list -> typed KernelIR.

The list is in program order. RANGE opens a loop nested in the innermost open one, END
closes it; a STORE belongs to the innermost open loop at its position. Values are pure and
may sit anywhere in the list, except loads, whose result depends on when they run: the
hardware evaluates a load in the step of the store that uses it, so `check_load_timing`
proves that nothing writes the loaded location in between.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tinygrad.dtype import AddrSpace
from tinygrad.uop.ops import AxisType, Ops, UOp

from . import dtypes as dt
from . import ir
from .errors import UnsupportedError
from .frontend import KernelCall
from .max_identity import finite_max_identities

_ALU = {
    Ops.ADD: ir.OpKind.ADD, Ops.SUB: ir.OpKind.SUB, Ops.MUL: ir.OpKind.MUL, Ops.NEG: ir.OpKind.NEG,
    Ops.MAX: ir.OpKind.MAX, Ops.CMPLT: ir.OpKind.CMPLT, Ops.CMPNE: ir.OpKind.CMPNE,
    Ops.CMPEQ: ir.OpKind.CMPEQ, Ops.WHERE: ir.OpKind.WHERE, Ops.AND: ir.OpKind.AND,
    Ops.OR: ir.OpKind.OR, Ops.XOR: ir.OpKind.XOR, Ops.SHL: ir.OpKind.SHL, Ops.SHR: ir.OpKind.SHR,
    Ops.CDIV: ir.OpKind.CDIV, Ops.CMOD: ir.OpKind.CMOD, Ops.CAST: ir.OpKind.CAST,
    Ops.BITCAST: ir.OpKind.BITCAST, Ops.MULACC: ir.OpKind.MULACC,
    Ops.RECIPROCAL: ir.OpKind.RECIPROCAL, Ops.EXP2: ir.OpKind.EXP2, Ops.LOG2: ir.OpKind.LOG2,
    Ops.SQRT: ir.OpKind.SQRT, Ops.SIN: ir.OpKind.SIN, Ops.TRUNC: ir.OpKind.TRUNC,
    Ops.FDIV: ir.OpKind.FDIV, Ops.POW: ir.OpKind.POW,
}
_OUTPUT_AXES = {AxisType.WEAK, AxisType.LOOP, AxisType.GLOBAL}
_IGNORED = {Ops.SINK, Ops.NOOP, Ops.GROUP}


@dataclass
class _OpenLoop:
    id: int
    axis: ir.Axis
    bound: int
    body: list = field(default_factory=list)
    start: int = 0                       # list position of the RANGE


@dataclass(frozen=True)
class _Ref:
    """What an INDEX points at: a global buffer slot or an accumulator register."""
    kind: str                            # "buf" | "acc"
    target: int
    index: ir.Value | None
    gate: ir.Value | None


class _Lowering:
    def __init__(self, call: KernelCall, name: str):
        self.call, self.name = call, name
        self.values: dict[UOp, object] = {}
        self.params: dict[int, tuple[dt.DType, int]] = {}
        self.accs: dict[UOp, ir.AccDecl] = {}
        self.loaded: set[int] = set()
        self.stored: set[int] = set()
        self.root: list = []
        self.stack: list[_OpenLoop] = []
        self.closed: dict[int, tuple[int, int]] = {}    # loop id -> (start, end) list positions
        self.load_pos: dict[int, int] = {}              # id(ir load) -> list position
        self.store_pos: list[tuple[ir.Store, int, tuple[int, ...]]] = []

    def unsupported(self, u: UOp, why: str = "") -> UnsupportedError:
        return UnsupportedError(self.name, u.op.name, getattr(getattr(u.dtype, "base", u.dtype), "name", "-"), why)

    def dtype(self, u: UOp) -> dt.DType:
        d = dt.from_tinygrad(u.dtype)
        if d is None:
            raise self.unsupported(u, f"no hardware type for {u.dtype}")
        return d

    def run(self) -> ir.KernelIR:
        for pos, u in enumerate(self.call.uops):
            self.visit(u, pos)
        if self.stack:
            raise ir.IRError(f"{self.name}: loop {self.stack[-1].id} never closed")
        buffers = [ir.BufferDecl(slot, d, size, slot in self.loaded, slot in self.stored)
                   for slot, (d, size) in sorted(self.params.items())]
        kernel = ir.make_kernel(self.name, buffers, sorted(self.accs.values(), key=lambda a: a.index), self.root)
        self.check_load_timing()
        return kernel

    # ------------------------------------------------------------ one UOp
    def visit(self, u: UOp, pos: int) -> None:
        op = u.op
        if op in _IGNORED:
            return
        if op is Ops.PARAM:
            slot = u.arg.slot
            self.params[slot] = (self.dtype(u), int(u.src[0].arg if u.src[0].op is Ops.CONST else self.const_of(u.src[0])))
            self.values[u] = ("param", slot)
        elif op is Ops.BUFFER:
            if getattr(u.arg, "addrspace", None) is not AddrSpace.REG:
                raise self.unsupported(u, "only register accumulators may be defined inside a kernel")
            if self.const_of(u.src[0]) != 1:
                raise self.unsupported(u, "register arrays (more than one accumulator element)")
            self.accs[u] = ir.AccDecl(len(self.accs), self.dtype(u))
            self.values[u] = ("acc", self.accs[u].index)
        elif op is Ops.AFTER:
            self.values[u] = self.values[u.src[0]]
        elif op is Ops.CONST:
            self.values[u] = ("const", u.arg, u.dtype)
        elif op is Ops.RANGE:
            bound = self.const_of(u.src[0])
            axis = ir.Axis.REDUCE if u.arg[-1] is AxisType.REDUCE else ir.Axis.OUTPUT
            if u.arg[-1] not in _OUTPUT_AXES and u.arg[-1] is not AxisType.REDUCE:
                raise self.unsupported(u, f"loop axis {u.arg[-1]}")
            loop = _OpenLoop(len(self.closed) + len(self.stack), axis, bound, start=pos)
            self.stack.append(loop)
            self.values[u] = ir.Counter(loop.id)
        elif op is Ops.END:
            for r in u.src[1:]:
                if not self.stack or self.values[r].loop != self.stack[-1].id:
                    raise ir.IRError(f"{self.name}: END closes a loop that is not the innermost open one")
                self.close_loop(pos)
        elif op is Ops.INDEX:
            self.values[u] = self.index(u)
        elif op is Ops.LOAD:
            self.values[u] = self.load(u, pos)
        elif op is Ops.STORE:
            self.store(u, pos)
        elif op in _ALU:
            self.values[u] = self.alu(u)
        else:
            raise self.unsupported(u)

    def const_of(self, u: UOp) -> int:
        v = self.value(u)
        if not isinstance(v, ir.Const):
            raise self.unsupported(u, "a loop bound or buffer size that is not a constant")
        return int(v.value)

    def value(self, u: UOp) -> ir.Value:
        v = self.values[u]
        if isinstance(v, tuple) and v[0] == "const":        # an untyped literal used directly
            d = dt.from_tinygrad(v[2]) or _literal_dtype(v[1])
            if d is None:
                raise self.unsupported(u, f"the integer literal {v[1]} needs more than 64 bits")
            v = self.values[u] = ir.Const(_convert(v[1], d), d)
        if isinstance(v, tuple):
            raise ir.IRError(f"{self.name}: {u.op} used as a value")
        return v

    def close_loop(self, pos: int) -> None:
        loop = self.stack.pop()
        node = ir.Loop(loop.id, loop.axis, loop.bound, tuple(loop.body))
        self.closed[loop.id] = (loop.start, pos)
        (self.stack[-1].body if self.stack else self.root).append(node)

    def index(self, u: UOp) -> _Ref:
        base = self.values[u.src[0]]
        gate = self.value(u.src[2]) if len(u.src) > 2 else None
        if base[0] == "acc":
            idx = self.value(u.src[1])
            if not isinstance(idx, ir.Const) or idx.value != 0:
                raise self.unsupported(u, "accumulator indexed by a non-zero index")
            return _Ref("acc", base[1], None, gate)
        return _Ref("buf", base[1], self.value(u.src[1]), gate)

    def load(self, u: UOp, pos: int) -> ir.Value:
        ref: _Ref = self.values[u.src[0]]
        d = self.dtype(u)
        gate, alt = ref.gate, None
        if len(u.src) == 3:
            alt, gate = self.value(u.src[1]), self.value(u.src[2])
        elif len(u.src) != 1:
            raise self.unsupported(u, f"LOAD with {len(u.src)} sources")
        if ref.kind == "acc":
            if gate is not None:
                raise self.unsupported(u, "gated accumulator load")
            node: ir.Value = ir.AccLoad(ref.target, d)
        else:
            if gate is not None and alt is None:
                alt = ir.Const(0, d)
            self.loaded.add(ref.target)
            node = ir.Load(ref.target, ref.index, d, gate, alt)
        self.load_pos[id(node)] = pos
        return node

    def store(self, u: UOp, pos: int) -> None:
        ref: _Ref = self.values[u.src[0]]
        val = self.value(u.src[1])
        if len(u.src) > 2:
            raise self.unsupported(u, f"STORE with {len(u.src)} sources")
        want = (next(a for a in self.accs.values() if a.index == ref.target).dtype if ref.kind == "acc"
                else self.params[ref.target][0])
        if val.dtype != want:
            # tinygrad 0.14 stores some values of another type as they are (an int32 `pow` stores
            # its float result into the int32 buffer); its C backends convert on assignment, so
            # do the same: a CAST, never the raw bits
            val = ir.Op(ir.OpKind.CAST, want, (val,))
        if ref.kind == "acc":
            node: ir.Store = ir.AccStore(ref.target, val)
        else:
            self.stored.add(ref.target)
            node = ir.BufStore(ref.target, ref.index, val, ref.gate)
        (self.stack[-1].body if self.stack else self.root).append(node)
        self.store_pos.append((node, pos, tuple(l.id for l in self.stack)))

    def alu(self, u: UOp) -> ir.Value:
        kind = _ALU[u.op]
        d = self.dtype(u)
        raw = self.values.get(u.src[0])
        if kind is ir.OpKind.CAST and isinstance(raw, tuple) and raw[0] == "const":
            # CAST(dtype, CONST(weakint)) is how tinygrad types every literal: fold the literal's
            # own value, never a copy already wrapped to a default width (2**40 as int64)
            return ir.Const(_convert(raw[1], d), d)
        srcs = tuple(self.value(s) for s in u.src)
        if kind is ir.OpKind.CAST and isinstance(srcs[0], ir.Const):
            return ir.Const(_convert(srcs[0].value, d), d)      # fold typed literals
        return ir.Op(kind, d, srcs)

    # ------------------------------------------------------------ load timing
    def check_load_timing(self) -> None:
        """Every load a store uses must see the same data at the store as at the load.

        Loads are evaluated when the store that uses them executes. That equals tinygrad's
        program order unless something writes the loaded location between the two: a
        store with a list position between them, or anywhere in a loop that encloses the
        store but not the load (it runs between iterations).
        """
        writes = [(pos, ("acc", s.acc) if isinstance(s, ir.AccStore) else ("buf", s.buf))
                  for s, pos, _ in self.store_pos]
        for store, spos, loops in self.store_pos:
            for v in ir.toposort(ir.store_operands(store)):
                if not isinstance(v, (ir.Load, ir.AccLoad)):
                    continue
                lpos = self.load_pos[id(v)]
                end = spos
                for lid in loops:
                    start, stop = self.closed[lid]
                    if start > lpos:
                        end = max(end, stop)
                target = ("acc", v.acc) if isinstance(v, ir.AccLoad) else ("buf", v.buf)
                for wpos, wtarget in writes:
                    if wtarget == target and lpos < wpos <= end and wpos != spos:
                        raise UnsupportedError(self.name, "LOAD", str(v.dtype),
                                               f"{target[0]} {target[1]} is written between a load and its use")


def _literal_dtype(value) -> dt.DType | None:
    """The type of an untyped (weak) literal used without a CAST: float32 for floats, else the
    narrowest of int32, int64, uint64 that holds it (never a wrapped value); None if none does."""
    if isinstance(value, float):
        return dt.FP32
    if isinstance(value, bool):
        return dt.BOOL
    return next((d for d in (dt.INT32, dt.INT64, dt.UINT64) if d.min <= value <= d.max), None)


def _convert(value, d: dt.DType):
    if d.is_bool:
        return bool(value)
    if d.is_float:
        return float(value)
    return d.wrap(int(value))


def lower(call: KernelCall) -> ir.KernelIR:
    """tinygrad's lowered UOp list of one kernel -> KernelIR."""
    return finite_max_identities(_Lowering(call, call.name).run())
