"""Hardware transforms of KernelIR, between lowering and building.

Long, and one family: four passes over KernelIR's loop tree sharing its substitution helpers
(`substitute`, `op`, `const`); parallelize also returns the banking that split_deep and the
builder read.

    parallelize  lanes and reduce_unroll: unroll-and-jam of the innermost output loops, adder
                 trees for the innermost reductions, banked memory layouts (layout.py)
    fuse_loops   loop_fusion: accumulator initialisations before a loop nest move into its
                 first iteration, result stores after it into its last one (no extra steps)

Each pass returns a new KernelIR with the same buffers that computes the same values, and
is checked by `ir.verify` like a freshly lowered kernel.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import ir
from .dtypes import BOOL, INT32
from .errors import CompileError
from .hw.program import split_into_steps
from .layout import Affine, Banking, Dim, Layout, LayoutError, Placed, affine, derive_layout, place_access

K = ir.OpKind


# ---------------------------------------------------------------------------------------------
# value rewriting

def substitute(v: ir.Value, replace: Callable[[ir.Value], ir.Value | None], memo: dict[int, ir.Value]) -> ir.Value:
    """`v` with every node for which `replace` returns a value swapped for it; nodes whose
    operands are unchanged stay the same object (sharing, and the read ports that depend on
    it, survive)."""
    if id(v) in memo:
        return memo[id(v)]
    out = replace(v)
    if out is None:
        if isinstance(v, ir.Op):
            srcs = tuple(substitute(s, replace, memo) for s in v.srcs)
            out = v if all(a is b for a, b in zip(srcs, v.srcs)) else ir.Op(v.op, v.dtype, srcs)
        elif isinstance(v, ir.Load):
            parts = [None if x is None else substitute(x, replace, memo) for x in (v.index, v.gate, v.alt)]
            same = all(a is b for a, b in zip(parts, (v.index, v.gate, v.alt)))
            out = v if same else ir.Load(v.buf, parts[0], v.dtype, parts[1], parts[2])
        else:
            out = v
    memo[id(v)] = out
    return out


def substitute_store(s: ir.Store, replace, memo) -> ir.Store:
    sub = lambda x: None if x is None else substitute(x, replace, memo)   # noqa: E731
    if isinstance(s, ir.AccStore):
        return ir.AccStore(s.acc, sub(s.value))
    return ir.BufStore(s.buf, sub(s.index), sub(s.value), sub(s.gate))


def const(value: int, dtype=INT32) -> ir.Const:
    return ir.Const(value, dtype)


def op(kind: ir.OpKind, dtype, *srcs: ir.Value) -> ir.Op:
    return ir.Op(kind, dtype, tuple(srcs))


def all_of(conds: list[ir.Value]) -> ir.Value | None:
    """AND of boolean values (None for none)."""
    out = None
    for c in conds:
        out = c if out is None else op(K.AND, BOOL, out, c)
    return out


def _values(store: ir.Store) -> list[ir.Value]:
    return ir.toposort(ir.store_operands(store))


# ---------------------------------------------------------------------------------------------
# loop fusion

def fuse_loops(kernel: ir.KernelIR) -> ir.KernelIR:
    """Remove the steps around loop nests that only initialise accumulators or store results.

    A loop nest qualifies when it is a chain (each loop's body is the next loop) ending in a
    body that runs as a single step. Then:
    - prologue: the AccStores right before the nest whose values read no memory and no
      accumulator, of accumulators the body writes, are dropped; the body reads
      `where(all nest counters == 0, init, acc)` instead of `acc`.
    - epilogue: the BufStores right after the nest that read no memory and only accumulators
      the body writes (plus counters and constants) move into the body, gated by `all nest
      counters at their last value`, reading the body's *new* accumulator values (the
      update expressions), so they are written in the same cycle. They go first in the body:
      the update expressions read the registers before the step writes them.
    Anything else stays as it is.
    """
    return ir.make_kernel(kernel.name, kernel.buffers, kernel.accs, _fuse_body(kernel.body))


def _fuse_body(stmts) -> tuple:
    out = [ir.Loop(s.id, s.axis, s.bound, _fuse_body(s.body)) if isinstance(s, ir.Loop) else s for s in stmts]
    i = 0
    while i < len(out):
        if isinstance(out[i], ir.Loop):
            out, i = _fuse_nest(out, i)
        i += 1
    return tuple(out)


def _chain(loop: ir.Loop) -> list[ir.Loop]:
    chain = [loop]
    while len(chain[-1].body) == 1 and isinstance(chain[-1].body[0], ir.Loop):
        chain.append(chain[-1].body[0])
    return chain


def _rebuild_chain(chain: list[ir.Loop], body: tuple) -> ir.Loop:
    for loop in reversed(chain):
        body = (ir.Loop(loop.id, loop.axis, loop.bound, tuple(body)),)
    return body[0]


def _fuse_nest(stmts: list, i: int) -> tuple[list, int]:
    chain = _chain(stmts[i])
    body = chain[-1].body
    if any(isinstance(s, ir.Loop) for s in body) or len(split_into_steps(list(body))) != 1:
        return stmts, i
    written = {s.acc for s in body if isinstance(s, ir.AccStore)}

    start = i                                   # prologue: stmts[start:i]
    inits: dict[int, ir.Value] = {}
    while start > 0:
        s = stmts[start - 1]
        if not (isinstance(s, ir.AccStore) and s.acc in written and s.acc not in inits
                and not any(isinstance(v, (ir.Load, ir.AccLoad)) for v in _values(s))):
            break
        inits[s.acc] = s.value
        start -= 1
    end = i + 1                                 # epilogue: stmts[i + 1:end]
    while end < len(stmts):
        s = stmts[end]
        if not (isinstance(s, ir.BufStore) and all(
                not isinstance(v, ir.Load) and (not isinstance(v, ir.AccLoad) or v.acc in written)
                for v in _values(s))):
            break
        end += 1
    if start == i and end == i + 1:
        return stmts, i

    counters = [ir.Counter(l.id) for l in chain]
    if inits:
        first = all_of([op(K.CMPEQ, BOOL, c, const(0)) for c in counters])

        def initial(v):
            if isinstance(v, ir.AccLoad) and v.acc in inits:
                return op(K.WHERE, v.dtype, first, inits[v.acc], v)
            return None
        memo: dict[int, ir.Value] = {}
        body = tuple(substitute_store(s, initial, memo) for s in body)
    fused_epilogue = False
    if end > i + 1:
        last = all_of([op(K.CMPEQ, BOOL, c, const(l.bound - 1)) for c, l in zip(counters, chain)])
        new_value = {s.acc: s.value for s in body if isinstance(s, ir.AccStore)}

        def final(v):
            return new_value[v.acc] if isinstance(v, ir.AccLoad) else None
        memo = {}
        epilogue = []
        for s in stmts[i + 1:end]:
            t = substitute_store(s, final, memo)
            epilogue.append(ir.BufStore(t.buf, t.index, t.value, last if t.gate is None else op(K.AND, BOOL, last, t.gate)))
        candidate = tuple(epilogue) + body
        if len(split_into_steps(list(candidate))) == 1:
            body, fused_epilogue = candidate, True
    fused_prologue = bool(inits)
    if not fused_prologue and not fused_epilogue:
        return stmts, i
    lo = start if fused_prologue else i
    hi = end if fused_epilogue else i + 1
    new = stmts[:lo] + [_rebuild_chain(chain, body)] + stmts[hi:]
    return new, lo


# ---------------------------------------------------------------------------------------------
# lanes and reduce_unroll

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
    dse/zoo.py); float max reductions are refused.
    Factors larger than a loop's bound are clamped to it (more lanes would only be gated off).

    Buffers get layouts (compiler/layout.py): when the unrolled loops index a buffer, every
    lane of a step finds its element in its own bank at the same word. A buffer that is only
    read and does not fit keeps a single bank and gets a read port per distinct address; a
    written buffer that does not fit makes the factor illegal for this kernel.
    """
    factors: dict[int, int] = {}
    lane_loops: list[ir.Loop] = []
    if lanes > 1:
        for loop in kernel.loops.values():
            if loop.axis is ir.Axis.OUTPUT and not any(l.axis is ir.Axis.OUTPUT for l in _inner_loops(loop)):
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


@dataclass(frozen=True)
class _Update:
    acc: int
    op: ir.OpKind            # ADD | MAX
    term: ir.Value           # f(k)
    acc_first: bool          # operand order of the update
    dtype: object


def _inner_loops(loop: ir.Loop):
    for s in loop.body:
        if isinstance(s, ir.Loop):
            yield s
            yield from _inner_loops(s)


def _reads_acc(v: ir.Value, acc: int) -> bool:
    return any(isinstance(x, ir.AccLoad) and x.acc == acc for x in ir.toposort([v]))


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
    if _reads_acc(term, s.acc):
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
                                                or any(_reads_acc(x, a) for x in ir.store_operands(s))):
                    raise illegal(loop, f"acc{a} is also used outside it")
            first = next(s for s, _ in inside if (isinstance(s, ir.AccStore) and s.acc == a)
                         or any(_reads_acc(x, a) for x in ir.store_operands(s)))
            if not (isinstance(first, ir.AccStore) and first.acc == a and not _reads_acc(first.value, a)):
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
                self.accs.append(ir.AccDecl(len(self.accs), a.dtype))
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
                buffers += [ir.BufferDecl(s, b.dtype, bk.layout.words, b.loaded, b.stored) for s in bk.banks]
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


# ---------------------------------------------------------------------------------------------
# interleaving (fp_pipeline)

def interleave_ways(level: int, rows: int | None = None) -> int:
    """Rows interleaved through a float sum at fp_pipeline `level`.

    At least L = min(2**level, 6), the stages of its adder (pipeline.float_stages). Given the
    nest's `rows`, the L' in [L, 2L] that computes the fewest row slots ceil(rows / L') * L'
    (the smallest such): rows past the end cost a full pass of the reduction each, while a
    way beyond the adder's stages costs one register of delay line. The GEMV's 32 rows a
    lane at L = 6: 36 slots; at L' = 8: 32, 11% fewer cycles for 2 more ring registers."""
    from .fp import FAdd
    least = min(2 ** level, len(FAdd.CUTS) + 1) if level > 0 else 1
    if least == 1 or rows is None:
        return least
    return min(range(least, 2 * least + 1), key=lambda w: (-(-rows // w) * w, w))


def interleave(kernel: ir.KernelIR, level: int) -> ir.KernelIR:
    """Hide a pipelined float adder's latency behind independent output rows.

    A fused reduction nest (a chain of loops whose innermost body is one step; loop_fusion
    makes GEMV, matmul, convolution and MLP layers this shape) whose step updates a float
    accumulator `acc = f(acc) + term` gets its innermost output loop O (bound N, with only
    reduction loops inside it) strip-mined by L = interleave_ways(level, N): O' (bound ceil(N/L))
    stays where O was and a new output loop of bound L goes innermost, under the reductions.
    Counter O reads O' * L + l; buffer stores of rows past N are gated off. The step now
    visits L rows in turn for every reduction index, so each accumulator it writes holds L
    values (AccDecl.ways = L, a ring of registers): the adder may take L - 1 register levels
    and every row is still summed in the same order as before, so results stay bit-exact.

    Legal when the rows are independent (checked, else the nest is left as it is): each
    accumulator of the step is used nowhere else and is reset at the start of every row (all
    its reads are the `where(first, init, acc)` loop_fusion builds, `first` being the inner
    reduction counters all at 0), and no buffer written in the nest is read by the kernel.
    """
    if interleave_ways(level) == 1:
        return kernel
    state = {"next_id": max(kernel.loops, default=-1) + 1, "accs": {}}
    body = _interleave_body(kernel, kernel.body, level, state)
    if not state["accs"]:
        return kernel
    accs = [ir.AccDecl(a.index, a.dtype, state["accs"].get(a.index, a.ways)) for a in kernel.accs]
    return ir.make_kernel(kernel.name, kernel.buffers, accs, body)


def _interleave_body(kernel, stmts, level, state) -> tuple:
    out = []
    for s in stmts:
        if isinstance(s, ir.Loop):
            nest = _interleaved_nest(kernel, s, level, state)
            out.append(nest if nest is not None else
                       ir.Loop(s.id, s.axis, s.bound, _interleave_body(kernel, s.body, level, state)))
        else:
            out.append(s)
    return tuple(out)


def _first_loops(cond: ir.Value) -> frozenset[int] | None:
    """The loops of `cond` if it is an AND of `counter == 0` tests, else None."""
    if isinstance(cond, ir.Op) and cond.op is K.AND:
        a, b = (_first_loops(x) for x in cond.srcs)
        return None if a is None or b is None else a | b
    if isinstance(cond, ir.Op) and cond.op is K.CMPEQ and isinstance(cond.srcs[0], ir.Counter) \
            and isinstance(cond.srcs[1], ir.Const) and cond.srcs[1].value == 0:
        return frozenset({cond.srcs[0].loop})
    return None


def _interleaved_nest(kernel, loop: ir.Loop, level: int, state) -> ir.Loop | None:
    chain = _chain(loop)
    body = list(chain[-1].body)
    if any(isinstance(s, ir.Loop) for s in body) or len(split_into_steps(body)) != 1:
        return None
    outer = [j for j, l in enumerate(chain) if l.axis is ir.Axis.OUTPUT]
    if not outer or outer[-1] == len(chain) - 1 or any(l.axis is not ir.Axis.REDUCE for l in chain[outer[-1] + 1:]):
        return None
    j = outer[-1]
    rows, inner = chain[j], frozenset(l.id for l in chain[j + 1:])
    written = {s.acc for s in body if isinstance(s, ir.AccStore)}
    float_sum = any(isinstance(s, ir.AccStore) and isinstance(s.value, ir.Op) and s.value.op in (K.ADD, K.SUB)
                    and s.value.dtype.is_float for s in body)
    if not float_sum:
        return None
    # the accumulators are this step's alone ...
    inside = {id(s) for s in body}
    for s, _ in kernel.stores():
        if id(s) not in inside and ((isinstance(s, ir.AccStore) and s.acc in written)
                                    or any(_reads_acc(x, a) for x in ir.store_operands(s) for a in written)):
            return None
    # ... and every read of one is `where(first of the row, init, acc)`
    values = ir.toposort([x for s in body for x in ir.store_operands(s)])
    guards, guarded = set(), set()
    for v in values:
        if isinstance(v, ir.Op) and v.op is K.WHERE and isinstance(v.srcs[2], ir.AccLoad) \
                and v.srcs[2].acc in written and _first_loops(v.srcs[0]) == inner:
            guards.add(id(v))
            guarded.add(id(v.srcs[2]))
    for v in values:
        if isinstance(v, ir.AccLoad) and v.acc in written and id(v) not in guarded:
            return None
        if id(v) not in guards and any(id(x) in guarded for x in ir.operands(v)):
            return None                      # a guarded read is also used unguarded
    if any(id(x) in guarded for s in body for x in ir.store_operands(s)):
        return None
    # no buffer this nest writes is read by the kernel
    loaded = {v.buf for s, _ in kernel.stores() for v in ir.toposort(ir.store_operands(s)) if isinstance(v, ir.Load)}
    if any(isinstance(s, ir.BufStore) and s.buf in loaded for s in body):
        return None

    ways = interleave_ways(level, rows.bound)
    lane_id = state["next_id"]
    state["next_id"] += 1
    row = op(K.ADD, INT32, op(K.MUL, INT32, ir.Counter(rows.id), const(ways)), ir.Counter(lane_id))
    memo: dict[int, ir.Value] = {}
    stores = [substitute_store(s, lambda v: row if isinstance(v, ir.Counter) and v.loop == rows.id else None, memo)
              for s in body]
    if rows.bound % ways:
        valid = op(K.CMPLT, BOOL, row, const(rows.bound))
        stores = [ir.BufStore(s.buf, s.index, s.value, valid if s.gate is None else op(K.AND, BOOL, s.gate, valid))
                  if isinstance(s, ir.BufStore) else s for s in stores]
    for a in written:
        state["accs"][a] = ways
    new_chain = chain[:j] + [ir.Loop(rows.id, rows.axis, -(-rows.bound // ways), ())] + chain[j + 1:]
    return _rebuild_chain(new_chain, (ir.Loop(lane_id, ir.Axis.OUTPUT, ways, tuple(stores)),))


# ---------------------------------------------------------------------------------------------
# deep memories (fp_pipeline)

def bram_depth(bits: int) -> int:
    """Words of `bits` one ECP5 block RAM (DP16KD, 16 Kbit + parity) holds in one column:
    16384x1, 8192x2, 4096x4, 2048x9, 1024x18 (wider words: several such columns side by
    side, no multiplexer). iCE40 (4 Kbit) and Xilinx (18/36 Kbit) blocks are shallower or
    deeper; splitting at this depth is still a whole number of their blocks or close to it."""
    for width, depth in ((1, 16384), (2, 8192), (4, 4096), (9, 2048)):
        if bits <= width:
            return depth
    return 1024


def split_deep(kernel: ir.KernelIR, banking: dict[int, Banking], level: int,
               min_level: int = 2) -> tuple[ir.KernelIR, dict[int, Banking]]:
    """Split every plain buffer deeper than one block RAM into block-RAM-sized parts, so that
    the pipeline can register each part's read data next to its block RAM and select among
    the parts with a registered multiplexer tree (pipeline.py), instead of the wide
    multiplexer Yosys builds behind a deep memory (its long routes across the die limit the
    clock: 72 MHz for the int8 GEMV 128x784's 49 block RAMs).

    Element e of a buffer split into parts of depth 2**s lives in part e >> s, word e & (2**s - 1)
    (a banked Layout whose lane digit is the most significant one, so hosts and copies place
    elements as for any banked buffer). A load becomes a load of the same word from every part
    and a binary tree of `where(bit b of e >> s, upper, lower)`; a store becomes a store to
    every part, gated by `e >> s == part`. Applied from fp_pipeline `min_level` on; buffers
    already banked by lanes / reduce_unroll are left as they are.
    """
    deep = {b.slot: b for b in kernel.buffers
            if level >= min_level and b.slot in banking and banking[b.slot].layout.is_plain
            and b.size > bram_depth(b.dtype.bits)}
    if not deep:
        return kernel, banking
    next_slot = max(b.slot for b in kernel.buffers) + 1
    banking = dict(banking)
    parts: dict[int, tuple[int, list[int]]] = {}        # slot -> (shift, part slots)
    buffers = [b for b in kernel.buffers if b.slot not in deep]
    for slot, b in sorted(deep.items()):
        depth = bram_depth(b.dtype.bits)
        n = -(-b.size // depth)
        slots = list(range(next_slot, next_slot + n))
        next_slot += n
        parts[slot] = (depth.bit_length() - 1, slots)
        layout = Layout(b.size, (Dim(depth, n, n), Dim(1, depth, 1)))
        banking[slot] = Banking(slot, layout, tuple(slots), f"split into {n} parts of one block RAM's depth", parts=True)
        buffers += [ir.BufferDecl(s, b.dtype, depth, b.loaded, b.stored) for s in slots]

    memo: dict[int, ir.Value] = {}
    split: dict[tuple[int, int], tuple[ir.Value, ir.Value]] = {}

    def fields(index, shift):
        """(word, part) of an element index; shared, so equal indices share read ports."""
        key = (id(index), shift)
        if key not in split:
            split[key] = (op(K.AND, INT32, index, const((1 << shift) - 1)), op(K.SHR, INT32, index, const(shift)))
        return split[key]

    def replace(v):
        if not (isinstance(v, ir.Load) and v.buf in parts):
            return None
        shift, slots = parts[v.buf]
        index = substitute(v.index, replace, memo)
        lo, hi = fields(index, shift)
        items = [ir.Load(s, lo, v.dtype) for s in slots]
        bit = 0
        while len(items) > 1:
            sel = op(K.CMPNE, BOOL, op(K.AND, INT32, op(K.SHR, INT32, hi, const(bit)), const(1)), const(0))
            items = [op(K.WHERE, v.dtype, sel, items[i + 1], items[i]) if i + 1 < len(items) else items[i]
                     for i in range(0, len(items), 2)]
            bit += 1
        if v.gate is None:
            return items[0]
        return op(K.WHERE, v.dtype, substitute(v.gate, replace, memo), items[0], substitute(v.alt, replace, memo))

    def rewrite(stmts) -> tuple:
        out = []
        for s in stmts:
            if isinstance(s, ir.Loop):
                out.append(ir.Loop(s.id, s.axis, s.bound, rewrite(s.body)))
                continue
            s = substitute_store(s, replace, memo)
            if isinstance(s, ir.BufStore) and s.buf in parts:
                shift, slots = parts[s.buf]
                lo, hi = fields(s.index, shift)
                for j, slot in enumerate(slots):
                    mine = op(K.CMPEQ, BOOL, hi, const(j))
                    out.append(ir.BufStore(slot, lo, s.value, mine if s.gate is None else op(K.AND, BOOL, s.gate, mine)))
                continue
            out.append(s)
        return tuple(out)

    body = rewrite(kernel.body)
    return ir.make_kernel(kernel.name, sorted(buffers, key=lambda b: b.slot), kernel.accs, body), banking
