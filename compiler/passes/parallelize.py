"""lanes and reduce_unroll: unroll-and-jam of the innermost output loops, adder trees for the
innermost reductions, banked memory layouts (hw/layout.py). Also returns the banking that
split_deep and the builder read."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .. import ir
from ..dtypes import BOOL, INT32
from ..errors import CompileError
from ..hw.layout import Affine, Banking, LayoutError, Placed, affine, derive_layout, place_access
from .rewrite import all_of, const, inner_loops, op, reads_acc

K = ir.OpKind


@dataclass(frozen=True)
class Parallel:
    """A kernel after `parallelize`: its IR (banks are buffers of their own) and, for every
    parameter slot of the lowered kernel, how it is stored."""
    kernel: ir.KernelIR
    banking: dict[int, Banking]
    factors: dict[int, int]              # loop id -> lanes it was unrolled into


def parallelize(kernel: ir.KernelIR, lanes: int = 1, reduce_unroll: int = 1, *, fp_sum: str = "sequential") -> Parallel:
    """Unroll-and-jam the innermost output loops by `lanes` and unroll the innermost
    reductions by `reduce_unroll`, with banked memories so that every step reads and writes
    all its lanes in one cycle.

    lanes: each OUTPUT loop L (bound N) with no output loop inside becomes L' (bound
    ceil(N/P)) whose body holds the P lane replicas of L's body jammed statement by statement
    (nested loops are shared and their bodies jammed recursively): counter L reads L'*P + p,
    accumulators written in L get one register per lane, and buffer stores of lanes past N
    are gated off. Legal because the iterations of an output loop are independent (checked:
    accumulators are reset in every iteration, buffers written in L are not read).
    reduce_unroll: each REDUCE loop R (bound K) whose body is a single `acc = acc + f(k)` or
    `acc = max(acc, f(k))` becomes R' (bound ceil(K/U)) with `acc = acc + tree(f(k'U + u))`,
    a balanced tree of the U terms, those past K replaced by the identity. Integer addition
    and max are associative, so the result is bit-exact. Float sums are not: they are
    refused unless fp_sum is "tree" (the golden model then sums in this tree's order,
    dse/models/zoo.py); float max reductions are refused.
    Factors larger than a loop's bound are clamped to it (more lanes would only be gated off).

    Buffers get layouts (compiler/hw/layout.py): when the unrolled loops index a buffer, every
    lane of a step finds its element in its own bank at the same word. A buffer that is only
    read and does not fit keeps a single bank and gets a read port per distinct address; a
    written buffer that does not fit makes the factor illegal for this kernel.
    """
    factors: dict[int, int] = {}
    lane_loops: list[ir.Loop] = []
    if lanes > 1:
        for loop in kernel.loops.values():
            if loop.axis is ir.Axis.OUTPUT and not any(l.axis is ir.Axis.OUTPUT for l in inner_loops(loop)):
                if min(lanes, loop.bound) > 1:
                    factors[loop.id] = min(lanes, loop.bound)
                    lane_loops.append(loop)
    updates: dict[int, _Update] = {}
    if reduce_unroll > 1:
        for loop in kernel.loops.values():
            upd = _single_update(loop) if loop.axis is ir.Axis.REDUCE else None
            if upd is None:
                continue
            d = kernel.accs[upd.acc].dtype
            if d.is_float and not (upd.op is K.ADD and fp_sum == "tree"):
                why = ("a float max reduction is only built sequentially" if upd.op is not K.ADD else
                       "fp_sum='sequential' keeps tinygrad's sequential order; fp_sum='tree' sums it as a tree")
                raise CompileError(
                    f"reduce_unroll={reduce_unroll} is illegal for kernel {kernel.name!r}: its {d.name} "
                    f"{'sum' if upd.op is K.ADD else 'reduction'} over loop i{loop.id} (acc{upd.acc}) would be "
                    f"computed as a tree, in another order than the sequential one ({why}); use "
                    f"reduce_unroll=1 for this reduction")
            if min(reduce_unroll, loop.bound) > 1:
                factors[loop.id] = min(reduce_unroll, loop.bound)
                updates[loop.id] = upd
    if not factors:
        return Parallel(kernel, {b.slot: Banking.plain(b.slot, b.size) for b in kernel.buffers}, {})
    replicated = _check_lane_loops(kernel, lane_loops, lanes)
    banking = _choose_banking(kernel, factors, lanes, reduce_unroll)
    return Parallel(_Unroller(kernel, factors, lane_loops, updates, replicated, banking).run(), banking, factors)


def most_factors(kernel: ir.KernelIR) -> tuple[int, int]:
    """(lanes, reduce_unroll) that compute all of `kernel` a layer at a time: the most
    iterations of an output loop `lanes` unrolls, and of a reduction `reduce_unroll` unrolls
    (1 where it has none). More would only add gated-off lanes and identity terms."""
    lanes = [loop.bound for loop in kernel.loops.values() if loop.axis is ir.Axis.OUTPUT
             and not any(l.axis is ir.Axis.OUTPUT for l in inner_loops(loop))]
    reduce = [loop.bound for loop in kernel.loops.values()
              if loop.axis is ir.Axis.REDUCE and _single_update(loop) is not None]
    return max(lanes, default=1), max(reduce, default=1)


@dataclass(frozen=True)
class _Update:
    acc: int
    op: ir.OpKind            # ADD | MAX
    term: ir.Value           # f(k)
    acc_first: bool          # operand order of the update
    dtype: object


def _single_update(loop: ir.Loop) -> _Update | None:
    if len(loop.body) != 1 or not isinstance(loop.body[0], ir.AccStore):
        return None
    s = loop.body[0]
    v = s.value
    if not (isinstance(v, ir.Op) and v.op in (K.ADD, K.MAX) and len(v.srcs) == 2):
        return None
    own = [isinstance(x, ir.AccLoad) and x.acc == s.acc for x in v.srcs]
    if own.count(True) != 1:
        return None
    term = v.srcs[own.index(False)]
    if reads_acc(term, s.acc):
        return None
    return _Update(s.acc, v.op, term, own[0], v.dtype)


def _stores_in(body, enclosing=()):
    for s in body:
        if isinstance(s, ir.Loop):
            yield from _stores_in(s.body, enclosing + (s.id,))
        else:
            yield s, enclosing


def _check_lane_loops(kernel: ir.KernelIR, lane_loops: list[ir.Loop], lanes: int) -> dict[int, int]:
    """Accumulators replicated per lane: acc -> its lane loop. Raises CompileError when the
    iterations of a lane loop are not independent."""
    replicated: dict[int, int] = {}
    loaded = {v.buf for s, _ in kernel.stores() for v in ir.toposort(ir.store_operands(s)) if isinstance(v, ir.Load)}

    def illegal(loop, why):
        return CompileError(f"lanes={lanes} is illegal for kernel {kernel.name!r}: the iterations of output "
                            f"loop i{loop.id} are not independent: {why}")
    for loop in lane_loops:
        inside = list(_stores_in(loop.body))
        written = {s.acc for s, _ in inside if isinstance(s, ir.AccStore)}
        for s, _ in inside:
            if isinstance(s, ir.BufStore) and s.buf in loaded:
                raise illegal(loop, f"buffer {s.buf} is written in it and read by the kernel")
        inside_ids = {id(s) for s, _ in inside}
        for a in sorted(written):
            for s, _ in kernel.stores():
                if id(s) not in inside_ids and ((isinstance(s, ir.AccStore) and s.acc == a)
                                                or any(reads_acc(x, a) for x in ir.store_operands(s))):
                    raise illegal(loop, f"acc{a} is also used outside it")
            first = next(s for s, _ in inside if (isinstance(s, ir.AccStore) and s.acc == a)
                         or any(reads_acc(x, a) for x in ir.store_operands(s)))
            if not (isinstance(first, ir.AccStore) and first.acc == a and not reads_acc(first.value, a)):
                raise illegal(loop, f"acc{a} carries a value from one iteration to the next")
            replicated[a] = loop.id
    return replicated


def _loop_deps(v: ir.Value) -> frozenset[int]:
    return frozenset(x.loop for x in ir.toposort([v]) if isinstance(x, ir.Counter))


def _choose_banking(kernel: ir.KernelIR, factors: dict[int, int], lanes: int, reduce_unroll: int) -> dict[int, Banking]:
    bounds = {l.id: l.bound for l in kernel.loops.values()}
    accesses: dict[int, list[ir.Value]] = {b.slot: [] for b in kernel.buffers}
    stored_unrolled: set[int] = set()
    seen: set[int] = set()
    for s, loops in kernel.stores():
        if isinstance(s, ir.BufStore):
            accesses[s.buf].append(s.index)
            if any(l.id in factors for l in loops):
                stored_unrolled.add(s.buf)
        for v in ir.toposort(ir.store_operands(s)):
            if isinstance(v, ir.Load) and id(v) not in seen:
                seen.add(id(v))
                accesses[v.buf].append(v.index)
    out: dict[int, Banking] = {}
    next_slot = max((b.slot for b in kernel.buffers), default=-1) + 1
    for b in kernel.buffers:
        forms = [(affine(i, bounds), _loop_deps(i)) for i in accesses[b.slot]]
        try:
            layout = derive_layout(b.size, forms, factors, bounds)
        except LayoutError as exc:
            if b.slot in stored_unrolled:
                raise CompileError(
                    f"lanes={lanes}, reduce_unroll={reduce_unroll} is illegal for kernel {kernel.name!r}: buffer "
                    f"{b.slot} ({b.dtype}[{b.size}]) is written by several lanes per cycle, but its accesses do "
                    f"not fit a banked layout: {exc}") from None
            out[b.slot] = Banking.plain(b.slot, b.size, f"one bank with a read port per address: {exc}")
            continue
        if layout.is_plain:
            out[b.slot] = Banking.plain(b.slot, b.size)
        else:
            out[b.slot] = Banking(b.slot, layout, tuple(range(next_slot, next_slot + layout.lanes)))
            next_slot += layout.lanes
    return out


class _Unroller:
    def __init__(self, kernel, factors, lane_loops, updates, replicated, banking):
        self.k, self.factors, self.updates, self.banking = kernel, factors, updates, banking
        self.lane_loops = {l.id for l in lane_loops}
        self.bounds = {l.id: l.bound for l in kernel.loops.values()}
        self.acc_index: dict[tuple[int, int | None], int] = {}
        self.accs: list[ir.AccDecl] = []
        self.replicated = replicated                    # acc -> lane loop
        for a in kernel.accs:
            for lane in (range(factors[replicated[a.index]]) if a.index in replicated else (None,)):
                self.acc_index[a.index, lane] = len(self.accs)
                self.accs.append(replace(a, index=len(self.accs)))
        self.memo: dict[tuple, ir.Value] = {}
        self.nodes: dict[tuple, ir.Value] = {}          # shared new nodes (counters, word addresses)
        self.deps: dict[int, frozenset[int]] = {}
        self.affine: dict[int, Affine] = {}

    def run(self) -> ir.KernelIR:
        body = self.body(self.k.body, [{}])
        buffers = []
        for b in self.k.buffers:
            bk = self.banking[b.slot]
            if bk.layout.is_plain:
                buffers.append(b)
            else:
                words = bk.layout.scatter(np.asarray(b.rom, dtype=np.uint64)) if b.rom is not None else None
                buffers += [replace(b, slot=s, size=bk.layout.words,
                                    rom=None if words is None else tuple(int(w) for w in words[lane]))
                            for lane, s in enumerate(bk.banks)]
        return ir.make_kernel(self.k.name, sorted(buffers, key=lambda b: b.slot), self.accs, body)

    # ---------------------------------------------------------------- statements
    def body(self, stmts, ctxs: list[dict[int, int]]) -> tuple:
        out = []
        for s in stmts:
            if not isinstance(s, ir.Loop):
                out += [self.store(s, c) for c in ctxs]
            elif s.id in self.lane_loops:
                f = self.factors[s.id]
                inner = [{**c, s.id: p} for c in ctxs for p in range(f)]
                out.append(ir.Loop(s.id, s.axis, -(-s.bound // f), self.body(s.body, inner)))
            elif s.id in self.updates:
                f = self.factors[s.id]
                out.append(ir.Loop(s.id, s.axis, -(-s.bound // f), tuple(self.reduction(s, c) for c in ctxs)))
            else:
                out.append(ir.Loop(s.id, s.axis, s.bound, self.body(s.body, ctxs)))
        return tuple(out)

    def store(self, s: ir.Store, ctx) -> ir.Store:
        if isinstance(s, ir.AccStore):
            return ir.AccStore(self.acc(s.acc, ctx), self.value(s.value, ctx))
        gates = [self.value(s.gate, ctx)] if s.gate is not None else []
        for loop, lane in sorted(ctx.items()):
            n, f = self.bounds[loop], self.factors[loop]
            if loop in self.lane_loops and n % f and lane >= n % f:
                gates.append(self.node(("valid", loop), lambda: op(K.CMPLT, BOOL, self.counter(loop), const(n // f))))
        buf, index = self.address(s.buf, s.index, ctx)
        return ir.BufStore(buf, index, self.value(s.value, ctx), all_of(gates))

    def reduction(self, loop: ir.Loop, ctx) -> ir.AccStore:
        upd, f, n = self.updates[loop.id], self.factors[loop.id], loop.bound
        # -0.0 is IEEE addition's identity (x + -0.0 == x for every x, -0.0 included)
        identity = (const(-0.0 if upd.dtype.is_float else 0, upd.dtype) if upd.op is K.ADD
                    else const(upd.dtype.min, upd.dtype))
        terms = []
        for u in range(f):
            t = self.value(upd.term, {**ctx, loop.id: u})
            if n % f and u >= n % f:
                valid = self.node(("valid", loop.id), lambda: op(K.CMPLT, BOOL, self.counter(loop.id), const(n // f)))
                t = op(K.WHERE, upd.dtype, valid, t, identity)
            terms.append(t)
        while len(terms) > 1:                       # balanced tree, neighbours first
            terms = [op(upd.op, upd.dtype, terms[i], terms[i + 1]) if i + 1 < len(terms) else terms[i]
                     for i in range(0, len(terms), 2)]
        acc = self.acc(upd.acc, ctx)
        own = self.node(("accload", acc), lambda: ir.AccLoad(acc, self.k.accs[upd.acc].dtype))
        srcs = (own, terms[0]) if upd.acc_first else (terms[0], own)
        return ir.AccStore(acc, op(upd.op, upd.dtype, *srcs))

    # ---------------------------------------------------------------- values
    def acc(self, a: int, ctx) -> int:
        return self.acc_index[a, ctx[self.replicated[a]] if a in self.replicated else None]

    def node(self, key, make):
        if key not in self.nodes:
            self.nodes[key] = make()
        return self.nodes[key]

    def counter(self, loop: int) -> ir.Counter:
        return self.node(("counter", loop), lambda: ir.Counter(loop))

    def dep(self, v: ir.Value) -> frozenset[int]:
        """The unrolled loops whose lane changes how `v` is rewritten."""
        if id(v) not in self.deps:
            if isinstance(v, ir.Counter):
                d = frozenset({v.loop}) & self.factors.keys()
            elif isinstance(v, ir.AccLoad):
                d = frozenset({self.replicated[v.acc]}) if v.acc in self.replicated else frozenset()
            else:
                d = frozenset().union(*[self.dep(o) for o in ir.operands(v)]) if ir.operands(v) else frozenset()
            self.deps[id(v)] = d
        return self.deps[id(v)]

    def value(self, v: ir.Value, ctx) -> ir.Value:
        key = (id(v), tuple(sorted((l, ctx[l]) for l in self.dep(v))))
        if key in self.memo:
            return self.memo[key]
        if isinstance(v, ir.Const):
            out = v
        elif isinstance(v, ir.Counter):
            if v.loop in self.factors:
                f, lane = self.factors[v.loop], ctx[v.loop]
                out = self.node(("lane", v.loop, lane), lambda: self._lane_counter(v.loop, f, lane))
            else:
                out = v
        elif isinstance(v, ir.AccLoad):
            a = self.acc(v.acc, ctx)
            out = v if a == v.acc and v.acc not in self.replicated else \
                self.node(("accload", a), lambda: ir.AccLoad(a, v.dtype))
        elif isinstance(v, ir.Load):
            buf, index = self.address(v.buf, v.index, ctx)
            gate = None if v.gate is None else self.value(v.gate, ctx)
            alt = None if v.alt is None else self.value(v.alt, ctx)
            same = buf == v.buf and index is v.index and gate is v.gate and alt is v.alt
            out = v if same else ir.Load(buf, index, v.dtype, gate, alt)
        else:
            srcs = tuple(self.value(s, ctx) for s in v.srcs)
            out = v if all(a is b for a, b in zip(srcs, v.srcs)) else ir.Op(v.op, v.dtype, srcs)
        self.memo[key] = out
        return out

    def _lane_counter(self, loop: int, f: int, lane: int) -> ir.Value:
        scaled = op(K.MUL, INT32, self.counter(loop), const(f))
        return scaled if lane == 0 else op(K.ADD, INT32, scaled, const(lane))

    def address(self, buf: int, index: ir.Value, ctx) -> tuple[int, ir.Value]:
        """(KernelIR buffer slot, index) of an access: the bank and word for banked buffers."""
        bk = self.banking[buf]
        if bk.layout.is_plain:
            return buf, self.value(index, ctx)
        if id(index) not in self.affine:
            self.affine[id(index)] = affine(index, self.bounds)
        placed = place_access(bk.layout, self.affine[id(index)], self.factors, ctx)
        return bk.banks[placed.lane], self.node(("word", placed.word_terms, placed.word_offset),
                                                lambda: self._word(placed))

    def _word(self, placed: Placed) -> ir.Value:
        out = None
        for loop, c in placed.word_terms:
            t = self.counter(loop) if c == 1 else op(K.MUL, INT32, self.counter(loop), const(c))
            out = t if out is None else op(K.ADD, INT32, out, t)
        if placed.word_offset or out is None:
            out = const(placed.word_offset) if out is None else op(K.ADD, INT32, out, const(placed.word_offset))
        return out
