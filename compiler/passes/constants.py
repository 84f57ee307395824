"""weights="constant": a model's weights built into the datapath.

    bind_constants   (before parallelize) the inputs of a kernel that hold data at compile time
                     and are not given at run time become ROM buffers (ir.BufferDecl.rom: their
                     words); parallelize and split_deep hand each bank its share of the words
    fold_constants   (after parallelize) a load of a ROM at a constant address becomes that
                     constant (lanes and reduce_unroll at a layer's sizes leave every address
                     constant: its loops have bound 1, their counters are 0); integer arithmetic
                     on constants is evaluated, x * 0, x * 1, x + 0 simplified, so the product
                     of a pruned (zero) weight and its adder-tree input vanish; a loop of bound 1
                     becomes its body, and an accumulator written and then read in one straight
                     sequence of stores is replaced by its value, so a fully unrolled dense
                     layer is one store of one expression: one step. ROMs still read at a
                     varying address stay (memories initialised with their words); those read
                     nowhere any more are dropped.

Only integer arithmetic is evaluated: every rule is an identity of two's complement arithmetic
wrapped at the dtype, as the datapath computes it (hw/datapath.py), so a folded design computes
bit for bit what the unfolded one does. Float products keep their units (x * 0.0 is -0.0 or
NaN for some x); their weight operands become constants, which synthesis propagates.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping

import numpy as np

from .. import dtypes as dt
from .. import ir
from ..hw.pipeline import on_carry_chain
from ..ranges import analyze
from . import adder_graph
from .signed_digits import csd
from .rewrite import substitute, substitute_store

K = ir.OpKind


def bind_constants(kernel: ir.KernelIR, words: Mapping[int, np.ndarray]) -> ir.KernelIR:
    """`kernel` with every slot in `words` (slot -> the buffer's unsigned element words) that it
    loads and never stores marked a ROM holding them."""
    buffers = [replace(b, rom=tuple(int(w) for w in words[b.slot]))
               if b.slot in words and b.loaded and not b.stored else b for b in kernel.buffers]
    return ir.make_kernel(kernel.name, buffers, kernel.accs, kernel.body)


def rom_slots(kernel: ir.KernelIR) -> frozenset[int]:
    return frozenset(b.slot for b in kernel.buffers if b.rom is not None)


def fold_constants(kernel: ir.KernelIR, graph: adder_graph.Options | None = None) -> ir.KernelIR:
    """See the module docstring. `graph`: how products by constants are built (adder_graph:
    shared adder graphs across a layer's weights, or product by product; None: the latter)."""
    roms = {b.slot: b for b in kernel.buffers if b.rom is not None}
    stored = {b.slot for b in kernel.buffers if b.stored}
    body = _flatten(kernel.body, {})
    folder = _Folder(roms)
    body = _fold_body(body, folder)
    body = _forward(body, {}, stored, folder)
    shared: list[ir.Value] = []            # the graphs' nodes, kept as the solver built them
    if graph is not None:
        body, shared = _share(kernel, body, graph)
    body = _expand_products(body)
    body = _rebalance(body, frozenset(id(v) for v in shared))
    body, accs = _drop_dead_accumulators(body, kernel.accs)
    loaded = {v.buf for s, _ in _stores(body) for v in ir.toposort(ir.store_operands(s)) if isinstance(v, ir.Load)}
    buffers = [b for b in kernel.buffers if b.rom is None or b.slot in loaded]
    return ir.make_kernel(kernel.name, buffers, accs, body)


# ---------------------------------------------------------------------------------------------
# loops of bound 1

def _flatten(stmts, zero: dict[int, ir.Value]) -> tuple:
    """Loops of bound 1 spliced into their parent's body, their counters 0."""
    out = []
    memo: dict[int, ir.Value] = {}

    def counter_zero(v):
        if isinstance(v, ir.Counter) and v.loop in zero:
            return ir.Const(0, v.dtype)
        return None
    for s in stmts:
        if isinstance(s, ir.Loop):
            if s.bound == 1:
                out += _flatten(s.body, {**zero, s.id: True})
            else:
                out.append(ir.Loop(s.id, s.axis, s.bound, _flatten(s.body, zero)))
        else:
            out.append(substitute_store(s, counter_zero, memo) if zero else s)
    return tuple(out)


def _stores(body):
    for s in body:
        if isinstance(s, ir.Loop):
            yield from _stores(s.body)
        else:
            yield s, None


# ---------------------------------------------------------------------------------------------
# values

def const_value(word: int, dtype: dt.DType) -> int | float | bool:
    """The value of an element's unsigned word (a Python number, as ir.Const holds it)."""
    v = dt.from_words(np.array([word], dtype=np.uint64), dtype)[0]
    if dtype.is_bool:
        return bool(v)
    return float(v) if dtype.is_float else int(v)


def _is_int(d: dt.DType) -> bool:
    return not d.is_float


def _c(v: ir.Value, value=None) -> bool:
    """Whether `v` is a constant (equal to `value`, if given)."""
    return isinstance(v, ir.Const) and (value is None or v.value == value)


class _Folder:
    def __init__(self, roms: Mapping[int, ir.BufferDecl]):
        self.roms = roms
        self.memo: dict[int, ir.Value] = {}
        self.alive: list[ir.Value] = []      # the memo's keys are ids: keep their nodes from being reused


    def value(self, v: ir.Value) -> ir.Value:
        return substitute(v, self._rewrite, self.memo)

    def store(self, s: ir.Store) -> ir.Store:
        return substitute_store(s, self._rewrite, self.memo)

    def _rewrite(self, v: ir.Value) -> ir.Value | None:
        """A replacement for `v`, built from its folded operands (None: no node needed: leaves)."""
        self.alive.append(v)
        if isinstance(v, ir.Load):
            index = self.value(v.index)
            gate = None if v.gate is None else self.value(v.gate)
            alt = None if v.alt is None else self.value(v.alt)
            if gate is not None and _c(gate):
                if not gate.value:
                    return alt
                gate = alt = None
            if v.buf in self.roms and _c(index) and gate is None:
                rom = self.roms[v.buf]
                i = int(index.value)
                if 0 <= i < rom.size:
                    return ir.Const(const_value(rom.rom[i], v.dtype), v.dtype)
            same = index is v.index and gate is v.gate and alt is v.alt
            return v if same else ir.Load(v.buf, index, v.dtype, gate, alt)
        if not isinstance(v, ir.Op):
            return None
        srcs = tuple(self.value(s) for s in v.srcs)
        out = _simplify(v.op, v.dtype, srcs)
        if out is not None:
            return out
        return v if all(a is b for a, b in zip(srcs, v.srcs)) else ir.Op(v.op, v.dtype, srcs)


def _simplify(op: ir.OpKind, d: dt.DType, s: tuple[ir.Value, ...]) -> ir.Value | None:
    """An equal, simpler value for op(s) (None: none found)."""
    if op is K.WHERE and _c(s[0]):
        pick = s[1] if s[0].value else s[2]
        return pick if pick.dtype == d else None
    if not _is_int(d) or any(not _is_int(x.dtype) for x in s):
        return None
    if all(_c(x) for x in s):
        value = _evaluate(op, d, [x.value for x in s], [x.dtype for x in s])
        return None if value is None else ir.Const(value, d)
    if op is K.MUL:
        for a, b in ((s[0], s[1]), (s[1], s[0])):
            if _c(b, 0):
                return ir.Const(False if d.is_bool else 0, d)
            if _c(b, 1) and a.dtype == d:
                return a
    if op is K.ADD:
        for a, b in ((s[0], s[1]), (s[1], s[0])):
            if _c(b, 0) and a.dtype == d:
                return a
    if op is K.SUB and _c(s[1], 0) and s[0].dtype == d:
        return s[0]
    # c < max(x, m) is c < x for c >= m: a clip's two compares then read x side by side
    if op is K.CMPLT and _c(s[0]) and isinstance(s[1], ir.Op) and s[1].op is K.MAX and s[1].dtype == s[0].dtype:
        for x, m in ((s[1].srcs[0], s[1].srcs[1]), (s[1].srcs[1], s[1].srcs[0])):
            if _c(m) and s[0].value >= m.value and x.dtype == s[0].dtype:
                return ir.Op(K.CMPLT, d, (s[0], x))
    # (x + c1) * c2 is x * c2 + c1 * c2: the constant joins the next one (a rounding term)
    if op is K.MUL and not d.is_bool:
        for a, c2 in ((s[0], s[1]), (s[1], s[0])):
            if _c(c2) and isinstance(a, ir.Op) and a.op is K.ADD and a.dtype == d and any(_c(x) for x in a.srcs):
                x, c1 = (a.srcs[1], a.srcs[0]) if _c(a.srcs[0]) else (a.srcs[0], a.srcs[1])
                if x.dtype == d:
                    return ir.Op(K.ADD, d, (ir.Op(K.MUL, d, (x, c2)), ir.Const(_wrap(d, c1.value * c2.value), d)))
    # negations move up into the adder tree, where a subtraction costs what an addition does
    neg = [isinstance(x, ir.Op) and x.op is K.NEG and x.dtype == d for x in s]
    if op is K.NEG and neg[0]:
        return s[0].srcs[0]
    if op is K.ADD and neg[0] and neg[1]:
        return ir.Op(K.NEG, d, (ir.Op(K.ADD, d, (s[0].srcs[0], s[1].srcs[0])),))
    if op is K.ADD and neg[1] and s[0].dtype == d:
        return ir.Op(K.SUB, d, (s[0], s[1].srcs[0]))
    if op is K.ADD and neg[0] and s[1].dtype == d:
        return ir.Op(K.SUB, d, (s[1], s[0].srcs[0]))
    if op is K.SUB and neg[1] and s[0].dtype == d:
        return ir.Op(K.ADD, d, (s[0], s[1].srcs[0]))
    if op is K.SUB and neg[0] and s[1].dtype == d:
        return ir.Op(K.NEG, d, (ir.Op(K.ADD, d, (s[0].srcs[0], s[1])),))
    if op is K.AND and d.is_bool:
        for a, b in ((s[0], s[1]), (s[1], s[0])):
            if _c(b):
                return a if b.value else ir.Const(False, d)
    if op is K.OR and d.is_bool:
        for a, b in ((s[0], s[1]), (s[1], s[0])):
            if _c(b):
                return ir.Const(True, d) if b.value else a
    return None


def _wrap(d: dt.DType, value: int) -> int | bool:
    return bool(value & 1) if d.is_bool else d.wrap(int(value))


def _evaluate(op: ir.OpKind, d: dt.DType, x: list, types: list[dt.DType]):
    """op on integer (or bool) constants as the datapath computes it (tinygrad's semantics:
    wrapping at the dtype, C division); None for an op left to the hardware."""
    x = [int(v) for v in x]
    if op is K.ADD: return _wrap(d, x[0] + x[1])
    if op is K.SUB: return _wrap(d, x[0] - x[1])
    if op is K.MUL: return _wrap(d, x[0] * x[1])
    if op is K.MULACC: return _wrap(d, x[0] * x[1] + x[2])
    if op is K.NEG: return _wrap(d, -x[0])
    if op is K.MAX: return _wrap(d, max(x[0], x[1]))
    if op is K.CMPLT: return x[0] < x[1]
    if op is K.CMPNE: return x[0] != x[1]
    if op is K.CMPEQ: return x[0] == x[1]
    if op is K.WHERE: return _wrap(d, x[1] if x[0] else x[2])
    if op is K.AND: return _wrap(d, x[0] & x[1])
    if op is K.OR: return _wrap(d, x[0] | x[1])
    if op is K.XOR: return _wrap(d, x[0] ^ x[1])
    if op is K.CAST:
        return x[0] != 0 if d.is_bool else _wrap(d, x[0])
    if op in (K.SHL, K.SHR):
        bits, signed = d.bits, d.signed
        if x[1] < 0 or x[1] >= bits:
            return _wrap(d, -1 if (op is K.SHR and signed and x[0] < 0) else 0)
        return _wrap(d, x[0] << x[1] if op is K.SHL else x[0] >> x[1])
    if op in (K.CDIV, K.CMOD):
        a, b = x
        if b == 0:
            return _wrap(d, 0 if op is K.CDIV else a)
        q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
        return _wrap(d, q if op is K.CDIV else a - q * b)
    return None


def _fold_body(stmts, folder: _Folder) -> tuple:
    out = []
    for s in stmts:
        if isinstance(s, ir.Loop):
            out.append(ir.Loop(s.id, s.axis, s.bound, _fold_body(s.body, folder)))
        else:
            s = folder.store(s)
            if isinstance(s, ir.BufStore) and s.gate is not None and _c(s.gate):
                if not s.gate.value:
                    continue                 # never stored
                s = ir.BufStore(s.buf, s.index, s.value, None)
            out.append(s)
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# accumulators

def _reads(v: ir.Value) -> tuple[set[int], set[int]]:
    """(accumulators, buffers) `v` reads."""
    accs, bufs = set(), set()
    for x in ir.toposort([v]):
        if isinstance(x, ir.AccLoad):
            accs.add(x.acc)
        elif isinstance(x, ir.Load):
            bufs.add(x.buf)
    return accs, bufs


def _written_accs(stmts) -> set[int]:
    out = set()
    for s in stmts:
        if isinstance(s, ir.Loop):
            out |= _written_accs(s.body)
        elif isinstance(s, ir.AccStore):
            out.add(s.acc)
    return out


class _Reads:
    """(accumulators, buffers) a value reads, remembered per node."""

    def __init__(self):
        self.memo: dict[int, tuple[frozenset[int], frozenset[int]]] = {}
        self.alive: list[ir.Value] = []

    def __call__(self, v: ir.Value) -> tuple[frozenset[int], frozenset[int]]:
        for x in ir.toposort([v], lambda x: [o for o in ir.operands(x) if id(o) not in self.memo]):
            if id(x) in self.memo:
                continue
            accs = {x.acc} if isinstance(x, ir.AccLoad) else set()
            bufs = {x.buf} if isinstance(x, ir.Load) else set()
            for o in ir.operands(x):
                a, b = self.memo[id(o)]
                accs |= a
                bufs |= b
            self.memo[id(x)] = (frozenset(accs), frozenset(bufs))
            self.alive.append(x)
        return self.memo[id(v)]


def _forward(stmts, known: dict[int, ir.Value], stored: set[int], folder: _Folder,
             reads: "_Reads | None" = None) -> tuple:
    """Accumulator reads replaced by the value the same straight sequence stored before them
    (`known`: acc -> its value here). A value reading a buffer the kernel stores is not moved
    (the hardware evaluates a load in the step of the store that uses it), and a value reading
    an accumulator is forgotten once that accumulator is written again."""
    out = []
    known = dict(known)
    _reads = reads or _Reads()
    for s in stmts:
        if isinstance(s, ir.Loop):
            written = _written_accs(s.body)
            for a in written:
                known.pop(a, None)
            inner = {a: v for a, v in known.items() if not (_reads(v)[0] & written)}
            out.append(ir.Loop(s.id, s.axis, s.bound, _forward(s.body, inner, stored, folder, _reads)))
            known = inner
            continue
        if known:
            memo: dict[int, ir.Value] = {}
            s = substitute_store(s, lambda v: known.get(v.acc) if isinstance(v, ir.AccLoad) else None, memo)
            s = folder.store(s)
        out.append(s)
        if isinstance(s, ir.AccStore):
            known = {a: v for a, v in known.items() if s.acc not in _reads(v)[0]}
            accs, bufs = _reads(s.value)
            if not (bufs & stored) and s.acc not in accs:
                known[s.acc] = s.value
            else:
                known.pop(s.acc, None)
    return tuple(out)


def _drop_dead_accumulators(body: tuple, accs: tuple[ir.AccDecl, ...]) -> tuple[tuple, tuple[ir.AccDecl, ...]]:
    """Stores to accumulators nothing reads removed (until none is left), the rest renumbered."""
    while True:
        read = set()
        for s, _ in _stores(body):
            read |= _reads_all(s)
        dead = _written_accs(body) - read
        if not dead:
            break
        body = _remove_acc_stores(body, dead)
    used = sorted(_written_accs(body) | read)
    new = {a: i for i, a in enumerate(used)}
    if used == list(range(len(accs))):
        return body, accs
    by_index = {a.index: a for a in accs}
    memo: dict[int, ir.Value] = {}

    def renumber(v):
        return ir.AccLoad(new[v.acc], v.dtype) if isinstance(v, ir.AccLoad) else None

    def walk(stmts):
        out = []
        for s in stmts:
            if isinstance(s, ir.Loop):
                out.append(ir.Loop(s.id, s.axis, s.bound, walk(s.body)))
                continue
            s = substitute_store(s, renumber, memo)
            out.append(ir.AccStore(new[s.acc], s.value) if isinstance(s, ir.AccStore) else s)
        return tuple(out)
    decls = tuple(ir.AccDecl(new[a], by_index[a].dtype, by_index[a].ways) for a in used)
    return walk(body), decls


def _reads_all(s: ir.Store) -> set[int]:
    return {x.acc for x in ir.toposort(ir.store_operands(s)) if isinstance(x, ir.AccLoad)}


def _remove_acc_stores(stmts, dead: set[int]) -> tuple:
    out = []
    for s in stmts:
        if isinstance(s, ir.Loop):
            body = _remove_acc_stores(s.body, dead)
            if body:
                out.append(ir.Loop(s.id, s.axis, s.bound, body))
        elif not (isinstance(s, ir.AccStore) and s.acc in dead):
            out.append(s)
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# products by constants

def _share(kernel: ir.KernelIR, body: tuple, graph: adder_graph.Options) -> tuple[tuple, list[ir.Value]]:
    """adder_graph.share_products on the body, with each leaf's interval (compiler.ranges on
    the body as it stands) and depth in adder levels."""
    ranges: dict[int, object] = {}
    if graph.style != "per_product":
        ranges = analyze(ir.make_kernel(kernel.name, kernel.buffers, kernel.accs, body))
    levels: dict[int, int] = {}

    def interval(v: ir.Value) -> tuple[int, int]:
        r = ranges.get(id(v))
        return (r.lo, r.hi) if r is not None else (v.dtype.min, v.dtype.max)

    def depth(v: ir.Value) -> int:
        return _depth(v, levels)
    return adder_graph.share_products(body, graph, interval, depth)


def _depth(v: ir.Value, depth: dict[int, int]) -> int:
    """Adder levels (carry_levels) on the longest path to `v`, remembered in `depth`."""
    for x in ir.toposort([v], lambda x: [o for o in ir.operands(x) if id(o) not in depth]):
        if id(x) not in depth:
            depth[id(x)] = carry_levels(x) + max((depth[id(o)] for o in ir.operands(x)), default=0)
    return depth[id(v)]


SHIFT_ADD_MAX_ADDERS = 3
"""A product by a constant whose canonical signed digits need at most this many adders is built
as shifted copies of the other operand added and subtracted (x * 10 = (x << 3) + (x << 1));
a constant of more digits stays a product, which synthesis puts in a DSP block (mul="auto":
widest first, up to the device's count) or a LUT multiplier. Every int8 weight has at most 4
digits (3 adders: ~3 x 12 LUTs on ECP5, against 122 for a LUT multiplier of two 8-bit
operands); a 14-bit requantisation multiplier may need 7 (docs/constant-weights.md measures both)."""


def _balanced(kind: ir.OpKind, d: dt.DType, terms: list[ir.Value]) -> ir.Value:
    while len(terms) > 1:
        terms = [ir.Op(kind, d, (terms[i], terms[i + 1])) if i + 1 < len(terms) else terms[i]
                 for i in range(0, len(terms), 2)]
    return terms[0]


def shift_add(x: ir.Value, c: int, d: dt.DType) -> ir.Value:
    """x * c (c != 0) as a sum of x's shifts minus a sum of them, in dtype `d` (exact modulo
    the dtype's width, as the product)."""
    digits = csd(c)
    low = min(s for s, _ in digits)       # the common shift, applied last: the sums start at bit 0

    def shifted(s: int) -> ir.Value:
        return x if s == low else ir.Op(K.SHL, d, (x, ir.Const(s - low, d)))
    plus = [shifted(s) for s, sign in digits if sign > 0]
    minus = [shifted(s) for s, sign in digits if sign < 0]
    if not plus:                          # -(x << s ...): the negation moves up the adder tree
        core = _balanced(K.ADD, d, minus)
        return ir.Op(K.NEG, d, (core if low == 0 else ir.Op(K.SHL, d, (core, ir.Const(low, d))),))
    core = _balanced(K.ADD, d, plus) if not minus else \
        ir.Op(K.SUB, d, (_balanced(K.ADD, d, plus), _balanced(K.ADD, d, minus)))
    return core if low == 0 else ir.Op(K.SHL, d, (core, ir.Const(low, d)))


def _expand_products(body: tuple) -> tuple:
    """Integer products of data (a value that depends on a load or an accumulator) by a
    constant of at most SHIFT_ADD_MAX_ADDERS + 1 signed digits, as shifts and adds; the
    negations that leaves move up the adder trees (_simplify)."""
    data: set[int] = set()
    memo: dict[int, ir.Value] = {}
    alive: list[ir.Value] = []

    def is_data(v: ir.Value) -> bool:
        if id(v) not in data and (isinstance(v, (ir.Load, ir.AccLoad))
                                  or any(is_data(o) for o in ir.operands(v))):
            data.add(id(v))
        return id(v) in data

    def rewrite(v: ir.Value) -> ir.Value | None:
        if not isinstance(v, ir.Op):
            return None
        alive.append(v)
        srcs = tuple(substitute(x, rewrite, memo) for x in v.srcs)
        if v.op is K.MUL and _is_int(v.dtype) and not v.dtype.is_bool:
            for x, c in ((srcs[0], srcs[1]), (srcs[1], srcs[0])):
                if _c(c) and not _c(x) and x.dtype == v.dtype and is_data(x) \
                        and len(csd(int(c.value))) <= SHIFT_ADD_MAX_ADDERS + 1:
                    return shift_add(x, int(c.value), v.dtype)
        out = _simplify(v.op, v.dtype, srcs)
        if out is not None:
            return out
        return v if all(a is b for a, b in zip(srcs, v.srcs)) else ir.Op(v.op, v.dtype, srcs)

    def walk(stmts) -> tuple:
        out = []
        for s in stmts:
            if isinstance(s, ir.Loop):
                out.append(ir.Loop(s.id, s.axis, s.bound, walk(s.body)))
            else:
                out.append(substitute_store(s, rewrite, memo))
        return tuple(out)
    return walk(body)


# ---------------------------------------------------------------------------------------------
# adder trees by depth

def carry_levels(v: ir.Value) -> int:
    """Adders (carry chains) a value adds on its path: one for an integer sum or compare, two
    for a product by a constant (hw/pipeline.py on_carry_chain and CONST_PRODUCT_LEVELS), else 0."""
    if not isinstance(v, ir.Op) or v.dtype.is_float or any(x.dtype.is_float for x in v.srcs):
        return 0
    if v.op is K.MUL:
        return 2
    return 1 if on_carry_chain(v) else 0


def _shifted_sum(flat: list[tuple[int, ir.Value]], constant: int, d: dt.DType,
                 uses: dict[int, int]) -> tuple[ir.Value, ir.Const] | None:
    """(y + (c >> k), k) when the sum of terms `flat` is (y << k) + c, y and its shift used only
    here and c's low k bits zero: a requantisation's rounding term (2**(S-1)) after a multiplier that is
    a power of two (scale_digits: 1). Pulled inside the shift it joins y's own constant (the
    bias) and the layer's adder tree loses its last level. Exact modulo 2**bits: (y + c') * 2**k
    = y * 2**k + c when c = c' * 2**k."""
    rest = [(sign, t) for sign, t in flat if not _c(t)]
    if len(rest) != 1 or rest[0][0] < 0 or not constant:
        return None
    t = rest[0][1]
    if not (isinstance(t, ir.Op) and t.op is K.SHL and _c(t.srcs[1]) and t.srcs[0].dtype == d):
        return None
    y, k = t.srcs[0], int(t.srcs[1].value)
    if not (0 < k < d.bits) or constant & ((1 << k) - 1) or uses.get(id(y), 0) != 1 or uses.get(id(t), 0) != 1 \
            or not (isinstance(y, ir.Op) and y.op in (K.ADD, K.SUB)):
        return None
    return ir.Op(K.ADD, d, (y, ir.Const(_wrap(d, constant >> k), d))), t.srcs[1]


def _rebalance(body: tuple, keep: frozenset[int] = frozenset()) -> tuple:
    """Every integer sum of data (a tree of adds, subtracts and negations whose inner nodes have
    one user, no accumulator among its terms) rebuilt from its terms, the two with the fewest
    adder levels added first (Huffman's order on depth): a layer's product terms, bias and
    rounding constant then form one tree of the least depth, and its constants one constant.
    The nodes of a shared adder graph (`keep`, by id) are terms as they are: the solver chose
    their pairs. Exact: two's complement addition is associative and commutative."""
    uses: dict[int, int] = {}
    for s, _ in _stores(body):
        for v in ir.toposort(ir.store_operands(s)):
            for o in ir.operands(v):
                uses[id(o)] = uses.get(id(o), 0) + 1
    depth: dict[int, int] = {}
    memo: dict[int, ir.Value] = {}
    alive: list[ir.Value] = []

    def depth_of(v: ir.Value) -> int:
        for x in ir.toposort([v], lambda x: [o for o in ir.operands(x) if id(o) not in depth]):
            if id(x) not in depth:
                depth[id(x)] = carry_levels(x) + max((depth[id(o)] for o in ir.operands(x)), default=0)
                alive.append(x)
        return depth[id(v)]

    def is_sum(v: ir.Value, d) -> bool:
        return isinstance(v, ir.Op) and v.op in (K.ADD, K.SUB, K.NEG) and v.dtype == d and not d.is_bool \
            and not d.is_float and all(x.dtype == d for x in v.srcs)

    def terms(v: ir.Value, sign: int, d, out: list, root: bool) -> None:
        if is_sum(v, d) and (root or uses.get(id(v), 0) == 1) and id(v) not in keep:
            if v.op is K.NEG:
                terms(v.srcs[0], -sign, d, out, False)
            else:
                terms(v.srcs[0], sign, d, out, False)
                terms(v.srcs[1], sign if v.op is K.ADD else -sign, d, out, False)
        else:
            out.append((sign, v))

    def rewrite(v: ir.Value) -> ir.Value | None:
        if not isinstance(v, ir.Op) or not is_sum(v, v.dtype) or id(v) in keep:
            return None
        alive.append(v)
        d = v.dtype
        flat: list[tuple[int, ir.Value]] = []
        terms(v, 1, d, flat, True)
        if any(isinstance(x, ir.AccLoad) for _, t in flat for x in ir.toposort([t])):
            return None                       # an accumulator's loop stays as it is
        constant = sum(sign * int(t.value) for sign, t in flat if _c(t))
        inner = _shifted_sum(flat, _wrap(d, constant), d, uses)
        if inner is not None:                 # (y << k) + c is (y + (c >> k)) << k
            return ir.Op(K.SHL, d, (rewrite(inner[0]) or inner[0], inner[1]))
        leaves = [(sign, substitute(t, rewrite, memo)) for sign, t in flat if not _c(t)]
        if _wrap(d, constant):
            leaves.append((1, ir.Const(_wrap(d, constant), d)))
        if not leaves:
            return ir.Const(0, d)
        import heapq
        heap = [(depth_of(t), i, sign, t) for i, (sign, t) in enumerate(leaves)]
        heapq.heapify(heap)
        n = len(heap)
        while len(heap) > 1:
            da, _, sa, a = heapq.heappop(heap)
            db, _, sb, b = heapq.heappop(heap)
            if sa == sb:
                node, sign = ir.Op(K.ADD, d, (a, b)), sa
            else:
                node, sign = (ir.Op(K.SUB, d, (a, b)) if sa > 0 else ir.Op(K.SUB, d, (b, a))), 1
            depth[id(node)] = max(da, db) + 1
            alive.append(node)
            heapq.heappush(heap, (depth[id(node)], n, sign, node))
            n += 1
        _, _, sign, out = heap[0]
        return out if sign > 0 else ir.Op(K.NEG, d, (out,))

    out = []
    for s in body:
        if isinstance(s, ir.Loop):
            out.append(ir.Loop(s.id, s.axis, s.bound, _rebalance(s.body, keep)))
        else:
            out.append(substitute_store(s, rewrite, memo))
    return tuple(out)
