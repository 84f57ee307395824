"""Constant matrix-vector products as shared adder graphs (weights="constant", fold_constants).

A fully unrolled constant layer computes, for every output k, a sum of its inputs times
constant weights: y_k = sum_j W[j, k] * x_j + b_k. Built product by product (each weight its
canonical signed digits, then an adder tree per output) the partial sums that outputs share are
computed once per output. Here the linear parts of a straight sequence of stores are found,
grouped by the inputs they share into matrices, and each matrix handed to a solver of the
constant matrix-vector multiplication problem (CMVM), which returns an adder graph: every
node the sum or difference of two earlier nodes, each shifted, common subexpressions computed
once. The graph is checked against the matrix entry by entry and written back as integer IR
(ADD, SUB, SHL of the inputs), so the datapath sizes every adder to its value's interval as
it does any sum.

    share_products(body, ...)    the body with each matrix's outputs built from its graph, and
                                 the ids of the graph's nodes (constants.py keeps them as they
                                 are when it rebuilds adder trees by depth)

The solver is da4ml's (`da4ml.cmvm.solve`, LGPLv3, from the hls4ml team: a greedy
pair-frequency search over the weights' signed digits after a matrix decomposition, with a
bound on the adder depth), called as a library. `HardwareConfig.adder_graph` chooses: "auto"
(da4ml's graph when the package is installed, else products one by one), "shared" (da4ml's,
a CompileError without it) or "per_product" (every product its own shift-and-add, as before).
`adder_depth` bounds the graph's depth: at most that many adder levels more than the least
any graph of the matrix needs (da4ml's `hard_dc`; None: no bound). A deeper graph shares more
partial sums (fewer adders) and takes more pipeline stages; see docs/area.md.

Exact: every node is an integer combination of the inputs with integer coefficients, built
with additions, subtractions and left shifts, which are the ring operations of two's
complement arithmetic at the dtype's width; so the value of each output equals the sum of
products it replaces modulo 2**bits, as the datapath computes it (hw/datapath.py). A graph
whose outputs would need a right shift (an exact division, which wrapping does not preserve)
or that disagrees with its matrix in any entry is not used (the products stay as they were).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .. import dtypes as dt
from .. import ir
from ..errors import CompileError
from .rewrite import substitute, substitute_store
from .signed_digits import csd

K = ir.OpKind

STYLES = ("auto", "shared", "per_product")

MAX_COEFFICIENT = 1 << 24
"""da4ml takes the matrix as float32: larger weights (never a quantised layer's) stay products."""


# ---------------------------------------------------------------------------------------------
# the graph, in our own terms

@dataclass(frozen=True)
class Add:
    """Node = (node a << shift_a) + or - (node b << shift_b); nodes below the plan's input count
    are its inputs."""
    a: int
    b: int
    shift_a: int
    shift_b: int
    sub: bool


@dataclass(frozen=True)
class Output:
    """An output = (-1 if negate) * (node << shift); node None: the output is zero."""
    node: int | None
    shift: int
    negate: bool


@dataclass(frozen=True)
class Plan:
    """An adder graph for a matrix of `inputs` rows: `adds` in order, then the `outputs`."""
    inputs: int
    adds: tuple[Add, ...]
    outputs: tuple[Output, ...]

    def coefficients(self) -> np.ndarray:
        """The matrix (inputs x outputs) the graph computes, as exact Python integers."""
        nodes = [[int(i == j) for i in range(self.inputs)] for j in range(self.inputs)]
        for add in self.adds:
            sign = -1 if add.sub else 1
            nodes.append([(x << add.shift_a) + sign * (y << add.shift_b)
                          for x, y in zip(nodes[add.a], nodes[add.b])])
        cols = []
        for out in self.outputs:
            col = [0] * self.inputs if out.node is None else [c << out.shift for c in nodes[out.node]]
            cols.append([-c for c in col] if out.negate else col)
        return np.array(cols, dtype=object).T.reshape(self.inputs, len(self.outputs))

    def depth(self, latencies: list[float] | None = None) -> float:
        """Adder levels on the longest path from an input to an output, the inputs arriving
        after `latencies` levels (default: all at once)."""
        level = list(latencies) if latencies is not None else [0] * self.inputs
        for add in self.adds:
            level.append(1 + max(level[add.a], level[add.b]))
        return max((level[o.node] for o in self.outputs if o.node is not None), default=0)


def per_product_adders(W: np.ndarray) -> int:
    """Adders of the same matrix built product by product: each weight's signed digits less
    one, and one adder fewer per output than it has terms."""
    digits = [sum(len(csd(int(c))) for c in W[:, k]) for k in range(W.shape[1])]
    return sum(max(d - 1, 0) for d in digits)


# ---------------------------------------------------------------------------------------------
# da4ml

def da4ml_available() -> bool:
    try:
        import da4ml.cmvm  # noqa: F401
    except ImportError:
        return False
    return True


def solve_da4ml(W: np.ndarray, intervals: list[tuple[int, int]], latencies: list[float],
                extra_depth: int | None) -> Plan | None:
    """da4ml's adder graph for the integer matrix W (inputs x outputs) whose inputs lie in
    `intervals` and arrive after `latencies` adder levels; None when its answer cannot be
    written with left shifts only (module docstring)."""
    from da4ml.cmvm import solve
    # adder_size 1: da4ml's cost of an adder is its width in bits (what its own tracing flow
    # uses, and what a LUT4 carry chain costs), not 1 per adder
    # C order: da4ml reads the buffer row-major whatever its strides (a transposed view would be
    # taken as its transpose)
    pipeline = solve(np.ascontiguousarray(W, dtype=np.float32),
                     qintervals=[(float(lo), float(hi), 1.0) for lo, hi in intervals],
                     latencies=[float(t) for t in latencies],
                     hard_dc=-1 if extra_depth is None else int(extra_depth), adder_size=1, carry_size=-1)
    return plan_of(pipeline, W.shape[0])


def plan_of(pipeline, inputs: int) -> Plan | None:
    """A da4ml Pipeline (stages of CombLogic) as a Plan. da4ml's buffers carry a power-of-two
    scale (fractional steps included) and a sign; each becomes a node of integer value times
    (sign, 2**e), e the least exponent of its two operands, so every node is built with left
    shifts. None: an opcode other than input, add and subtract, or an output whose exponent
    is negative."""
    adds: list[Add] = []
    # (node, sign, e): the value is sign * 2**e * node
    current = [(j, 1, 0) for j in range(inputs)]
    for stage in pipeline.solutions:
        buf: list[tuple[int, int, int]] = []
        for op in stage.ops:
            if op.opcode == -1:
                node, sign, e = current[op.id0]
                buf.append((node, sign, e + int(stage.inp_shifts[op.id0])))
            elif op.opcode in (0, 1):
                na, sa, ea = buf[op.id0]
                nb, sb, eb = buf[op.id1]
                eb += int(op.data)
                e = min(ea, eb)
                sub = (sa * sb * (-1 if op.opcode == 1 else 1)) < 0
                adds.append(Add(na, nb, ea - e, eb - e, sub))
                buf.append((inputs + len(adds) - 1, sa, e))
            else:
                return None
        nxt = []
        for idx, shift, neg in zip(stage.out_idxs, stage.out_shifts, stage.out_negs):
            if idx < 0:
                nxt.append((None, 1, 0))
                continue
            node, sign, e = buf[idx]
            nxt.append((node, -sign if neg else sign, e + int(shift)))
        current = nxt
    outputs = []
    for node, sign, e in current:
        if node is not None and e < 0:
            return None
        outputs.append(Output(node, max(e, 0), sign < 0))
    return Plan(inputs, tuple(adds), tuple(outputs))


# ---------------------------------------------------------------------------------------------
# finding the matrices

@dataclass
class _Root:
    """A linear expression: the sum of coefficient * leaf, plus a constant, wrapped at dtype."""
    node: ir.Value
    level: int                                               # roots below its leaves, plus one
    terms: dict[int, int] = field(default_factory=dict)      # id(leaf) -> coefficient
    constant: int = 0


def _const(v: ir.Value) -> bool:
    return isinstance(v, ir.Const)


def _power_of_two(c: int) -> bool:
    return c != 0 and (abs(c) & (abs(c) - 1)) == 0


def _wrap_coefficient(c: int, d: dt.DType) -> int:
    """A coefficient modulo 2**bits, as the signed value nearest zero (exact in the ring)."""
    m = 1 << d.bits
    c %= m
    return c - m if c >= m // 2 else c


class _Linear:
    """The linear nodes of a DAG (sums, products by constants, shifts by constants, all of one
    integer dtype), its roots, and each root's expansion into leaves."""

    def __init__(self, values: list[ir.Value]):
        self.order = ir.toposort(values)
        self.nodes = {id(v): v for v in self.order}
        users: dict[int, list[ir.Value]] = {}
        for v in self.order:
            for o in v.srcs if isinstance(v, ir.Op) else ir.operands(v):
                users.setdefault(id(o), []).append(v)
        stored = {id(v) for v in values}
        self.roots: list[ir.Value] = []
        self.is_root: set[int] = set()
        level: dict[int, int] = {}
        for v in self.order:
            below = max((level[id(o)] for o in ir.operands(v)), default=0)
            if self.kind(v) and (id(v) in stored or self._exposed(v, users.get(id(v), []))):
                self.roots.append(v)
                self.is_root.add(id(v))
                below += 1
            level[id(v)] = below
        self.level = level

    @staticmethod
    def kind(v: ir.Value) -> str:
        """'sum' (ADD, SUB, NEG), 'scale' (a product by a constant, a shift by a constant) or ''."""
        if not isinstance(v, ir.Op) or v.dtype.is_float or v.dtype.is_bool or any(s.dtype != v.dtype for s in v.srcs):
            return ""
        if v.op in (K.ADD, K.SUB, K.NEG):
            return "sum"
        if v.op is K.MUL and _const(v.srcs[0]) != _const(v.srcs[1]):
            return "scale"
        if v.op is K.SHL and _const(v.srcs[1]) and not _const(v.srcs[0]) and 0 <= int(v.srcs[1].value) < v.dtype.bits:
            return "scale"
        return ""

    @staticmethod
    def scale_of(v: ir.Op) -> tuple[ir.Value, int]:
        """(x, c) of a 'scale' node: it is x * c."""
        if v.op is K.SHL:
            return v.srcs[0], 1 << int(v.srcs[1].value)
        x, c = (v.srcs[1], v.srcs[0]) if _const(v.srcs[0]) else (v.srcs[0], v.srcs[1])
        return x, int(c.value)

    def _absorbs(self, user: ir.Value, v: ir.Value) -> bool:
        """Whether `user` takes linear node `v`'s expansion into its own. A sum times a
        constant of several digits stays a product of that sum (the sum a root of its own):
        its digits times every term's would make a wider matrix, not a cheaper one."""
        k = self.kind(user)
        if k == "sum":
            return True
        if k == "scale":
            return self.kind(v) != "sum" or _power_of_two(self.scale_of(user)[1])
        return False

    def _exposed(self, v: ir.Value, users: list[ir.Value]) -> bool:
        """A linear node is a root when some user does not absorb it, or when it is a sum that
        several nodes use (built once, not copied into each)."""
        if any(not self._absorbs(u, v) for u in users):
            return True
        return self.kind(v) == "sum" and len(users) > 1

    def expand(self, root: ir.Value) -> _Root:
        d = root.dtype
        out = _Root(root, self.level[id(root)])
        stack = [(root, 1)]
        while stack:
            v, c = stack.pop()
            if _const(v):
                out.constant += c * int(v.value)
            elif v is root or (self.kind(v) and id(v) not in self.is_root):
                if self.kind(v) == "scale":
                    x, m = self.scale_of(v)
                    stack.append((x, c * m))
                elif v.op is K.NEG:
                    stack.append((v.srcs[0], -c))
                else:
                    stack.append((v.srcs[0], c))
                    stack.append((v.srcs[1], c if v.op is K.ADD else -c))
            else:
                out.terms[id(v)] = out.terms.get(id(v), 0) + c
        out.constant = d.wrap(out.constant)
        out.terms = {leaf: w for leaf, c in out.terms.items() if (w := _wrap_coefficient(c, d))}
        return out


# ---------------------------------------------------------------------------------------------
# the pass

@dataclass(frozen=True)
class Options:
    style: str = "auto"              # HardwareConfig.adder_graph
    extra_depth: int | None = None   # HardwareConfig.adder_depth


def resolve_style(style: str) -> str:
    """'shared' or 'per_product' for a configured style; CompileError for 'shared' without da4ml."""
    if style == "per_product":
        return style
    if da4ml_available():
        return "shared"
    if style == "shared":
        raise CompileError("adder_graph: shared needs the da4ml package (pip install 'tinyhw[cmvm]' or "
                           "pip install da4ml); adder_graph: per_product builds every product on its own without it")
    return "per_product"


@dataclass
class _Group:
    roots: list[_Root]
    leaves: list[ir.Value]
    plan: Plan
    built: dict[int, ir.Value] | None = None       # id(root) -> replacement, once emitted


def share_products(body: tuple, options: Options, interval: Callable[[ir.Value], tuple[int, int]],
                   depth: Callable[[ir.Value], int]) -> tuple[tuple, list[ir.Value]]:
    """`body` with the linear parts of its straight sequence of stores (loops are left as they
    are) built from shared adder graphs, and the graphs' nodes. `interval`: a leaf's value
    range; `depth`: the adder levels before it (what da4ml balances the graph's depth by)."""
    if resolve_style(options.style) != "shared":
        return body, []
    values = [v for s in body if not isinstance(s, ir.Loop) for v in ir.store_operands(s)]
    if not values:
        return body, []
    lin = _Linear(values)
    roots = [r for r in (lin.expand(v) for v in lin.roots) if r.terms]
    groups: dict[int, _Group] = {}                 # id(root) -> its group
    for members in _components(roots):
        group = _solve(members, lin, options, interval, depth)
        if group is not None:
            groups.update((id(r.node), group) for r in members)
    if not groups:
        return body, []
    memo: dict[int, ir.Value] = {}
    kept: list[ir.Value] = []

    def replace(v: ir.Value) -> ir.Value | None:
        group = groups.get(id(v))
        if group is None:
            return None
        if group.built is None:                    # its leaves first (they may hold roots below)
            leaves = [substitute(leaf, replace, memo) for leaf in group.leaves]
            group.built = _emit(group, leaves, v.dtype, kept)
        return group.built[id(v)]
    return tuple(s if isinstance(s, ir.Loop) else substitute_store(s, replace, memo) for s in body), kept


def _components(roots: list[_Root]) -> list[list[_Root]]:
    """Roots of one level grouped by the leaves they share (union-find), in their order."""
    parent = list(range(len(roots)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    owner: dict[tuple[int, int], int] = {}
    for i, r in enumerate(roots):
        for leaf in r.terms:
            key = (r.level, leaf)
            if key in owner:
                parent[find(i)] = find(owner[key])
            else:
                owner[key] = i
    groups: dict[int, list[_Root]] = {}
    for i, r in enumerate(roots):
        groups.setdefault(find(i), []).append(r)
    return list(groups.values())


def _solve(members: list[_Root], lin: _Linear, options: Options, interval, depth) -> _Group | None:
    """The group of these roots with da4ml's graph, or None when the graph would not save an
    adder over the products one by one, or cannot be used (module docstring)."""
    d = members[0].node.dtype
    if any(r.node.dtype != d for r in members):
        return None
    order: dict[int, int] = {}
    for r in members:
        for leaf in r.terms:
            order.setdefault(leaf, len(order))
    W = np.zeros((len(order), len(members)), dtype=np.int64)
    for k, r in enumerate(members):
        for leaf, c in r.terms.items():
            W[order[leaf], k] = c
    if np.abs(W).max() >= MAX_COEFFICIENT or per_product_adders(W) == 0:
        return None                        # shifts and wires only: nothing to share
    leaves = [lin.nodes[leaf] for leaf in order]
    # the leaves in the order of the elements they read, where they read one (a layer's inputs
    # x[0], x[1], ...: the matrix as its user wrote it, as da4ml's own flow solves it), else in
    # the order the outputs name them
    natural = np.array(sorted(range(len(leaves)), key=lambda k: (_element(leaves[k]) or (1 << 62, 0), k)))
    plan = _best_order(W, [interval(v) for v in leaves], [depth(v) for v in leaves], options.extra_depth, natural)
    if plan is None or len(plan.adds) >= per_product_adders(W):
        return None
    if not np.array_equal(plan.coefficients(), W.astype(object)):
        return None                        # never used unchecked
    return _Group(members, leaves, plan)


def _element(v: ir.Value) -> tuple[int, int] | None:
    """(buffer, index) of a load at a constant index, through casts; else None."""
    while isinstance(v, ir.Op) and v.op is K.CAST:
        v = v.srcs[0]
    if isinstance(v, ir.Load) and isinstance(v.index, ir.Const):
        return v.buf, int(v.index.value)
    return None


ORDER_WEIGHTS = 1024
"""Past this many non-zero weights a matrix is solved in one row order (a solve takes 0.02 to
0.6 s up to it)."""


def _best_order(W: np.ndarray, intervals: list[tuple[int, int]], latencies: list[float],
                extra_depth: int | None, natural: np.ndarray | None = None) -> Plan | None:
    """da4ml's graph of W in up to six row orders, the one of least lut_cost (the first on a
    tie) among those no deeper than the first order's (a level more can be a pipeline stage
    more: latency is not traded for LUTs here), its inputs renumbered back to W's rows.
    `natural`: the rows' order as the user's matrix has them (default W's), solved first, then
    its reverse and two seeded shuffles of it, then W's own order and its reverse. da4ml's
    search is greedy and breaks ties by position, so the same matrix in another order gives
    another graph: on the 32x32 layers of bench/bench_area.py the kept graph packs 0% to 4.6%
    fewer LUT sites than one order alone (docs/area.md). Past ORDER_WEIGHTS the natural order
    alone."""
    n = W.shape[0]
    first = np.arange(n) if natural is None else natural
    orders = [first]
    if int(np.count_nonzero(W)) <= ORDER_WEIGHTS and n > 1:
        rng = np.random.default_rng(0)
        orders += [first[::-1]] + [first[rng.permutation(n)] for _ in range(2)] + [np.arange(n), np.arange(n)[::-1]]
        orders = [p for k, p in enumerate(orders) if not any(np.array_equal(p, q) for q in orders[:k])]
    best, best_cost, depth = None, None, None
    for perm in orders:
        plan = solve_da4ml(W[perm], [intervals[i] for i in perm], [latencies[i] for i in perm], extra_depth)
        if plan is None:
            continue
        plan = fewer_negations(_renumbered(plan, perm), intervals)
        levels = plan.depth(latencies)
        depth = levels if depth is None else depth
        cost = lut_cost(plan, intervals)
        if levels <= depth and (best_cost is None or cost < best_cost):
            best, best_cost = plan, cost
    return best


FLIP_LIMIT = 8
"""Nodes one negated output may flip (`fewer_negations`): a negated output is one carry chain,
a search past a few nodes would cost more compile time than it finds."""


def fewer_negations(plan: Plan, intervals: list[tuple[int, int]]) -> Plan:
    """The same graph with nodes computed negated where that lets a negated output be built
    without its negation. da4ml's graph ends some outputs in a negation (an output -(a + b)):
    a carry chain as wide as the output, which its own Verilog builds too. A node may hold its
    value negated instead, -(a + b) as (-a) - b, when its operands' signs allow one adder:
    a - b, b - a and a + b are one adder each, -a - b is not. So flipping a node flips the sign
    of its own two operands (an a - b becomes b - a: free; an a + b needs one operand flipped
    too) and of its term in each node that reads it. For each negated output (widest first) a
    depth-first search for a set of at most FLIP_LIMIT nodes to flip that leaves every adder
    one adder, kept where the graph's lut_cost falls (a flipped node that is an output itself
    then needs a negation; a flipped interval can take a bit more). Inputs are never flipped.
    Exact: the coefficients are unchanged (checked by the caller, as every plan is)."""
    n_in = plan.inputs
    if not any(o.negate and o.node is not None and o.node >= n_in for o in plan.outputs):
        return plan
    bounds = _bounds(plan, intervals)
    users: dict[int, list[int]] = {}
    for k, add in enumerate(plan.adds):
        users.setdefault(add.a, []).append(n_in + k)
        users.setdefault(add.b, []).append(n_in + k)

    def signs(node: int, flipped: set[int]) -> tuple[int, int]:
        """The signs node's adder applies to its operands as stored (each possibly flipped)."""
        add = plan.adds[node - n_in]
        own = -1 if node in flipped else 1
        sa = own * (-1 if add.a in flipped else 1)
        sb = own * (-1 if add.b in flipped else 1) * (-1 if add.sub else 1)
        return sa, sb

    def search(flipped: frozenset[int], pending: tuple[int, ...]) -> frozenset[int] | None:
        """Flips added to `flipped` until no adder in `pending` needs -a - b; None past the limit."""
        if len(flipped) > FLIP_LIMIT:
            return None
        for at, node in enumerate(pending):
            if signs(node, flipped) == (-1, -1):
                break
        else:
            return flipped
        add, rest = plan.adds[node - n_in], pending[:at] + pending[at + 1:]
        # either the node itself flips (if it is not yet) or one of its operands does
        for f in ([node] if node not in flipped else []) + [x for x in (add.a, add.b)
                                                              if x >= n_in and x not in flipped]:
            grown = flipped | {f}
            touched = tuple(u for u in [f] + users.get(f, []) if u not in rest)     # f is a node
            found = search(grown, rest + touched)
            if found is not None:
                return found
        return None

    def flip(flipped: frozenset[int]) -> Plan:
        """The plan with the nodes in `flipped` computed negated."""
        adds = []
        for k, add in enumerate(plan.adds):
            sa, sb = signs(n_in + k, flipped)
            adds.append(Add(add.b, add.a, add.shift_b, add.shift_a, True) if sa < 0 else
                        Add(add.a, add.b, add.shift_a, add.shift_b, sb < 0))
        return Plan(n_in, tuple(adds), tuple(o if o.node is None else Output(o.node, o.shift, o.negate != (o.node in flipped))
                                             for o in plan.outputs))

    flipped: frozenset[int] = frozenset()
    best, cost = plan, lut_cost(plan, intervals)
    negated = sorted({o.node for o in plan.outputs if o.negate and o.node is not None and o.node >= n_in},
                     key=lambda node: -ir.bits_of(*bounds[node]))
    for node in negated:
        if node in flipped:
            continue
        found = search(flipped | {node}, (node, *users.get(node, [])))
        if found is not None and (c := lut_cost(candidate := flip(found), intervals)) < cost:
            flipped, best, cost = found, candidate, c
    return best


def _bounds(plan: Plan, intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Every node's value interval, the inputs' given."""
    bounds = list(intervals)
    for add in plan.adds:
        (alo, ahi), (blo, bhi) = bounds[add.a], bounds[add.b]
        alo, ahi, blo, bhi = alo << add.shift_a, ahi << add.shift_a, blo << add.shift_b, bhi << add.shift_b
        bounds.append((alo - bhi, ahi - blo) if add.sub else (alo + blo, ahi + bhi))
    return bounds


def _renumbered(plan: Plan, perm: np.ndarray) -> Plan:
    """A plan solved for W[perm] as a plan for W: its input k is W's row perm[k]."""
    def node(i: int) -> int:
        return int(perm[i]) if i < plan.inputs else i
    return Plan(plan.inputs, tuple(Add(node(a.a), node(a.b), a.shift_a, a.shift_b, a.sub) for a in plan.adds),
                tuple(o if o.node is None else Output(node(o.node), o.shift, o.negate) for o in plan.outputs))


def lut_cost(plan: Plan, intervals: list[tuple[int, int]]) -> int:
    """LUT4 sites the graph's adders take on an ECP5 as nextpnr packs them, by their values'
    intervals: an adder of w result bits (less the low bits only one operand has) is LUT logic up
    to 4 bits (synth_ecp5's carry map starts at 5), one LUT4 a bit to 3 and five at 4 (the carry
    into bit 2 a LUT of its own); from 5 bits a carry chain, w sites and one more for its
    carry-in (compiler/pnr/carry_chains.absorb_carry_ins); a negated output as wide as its value
    likewise."""
    bounds = _bounds(plan, intervals)
    bits = ir.bits_of

    def cells(w: int) -> int:
        return w + (w >= 4)
    cost = sum(cells(max(1, bits(*bounds[plan.inputs + k]) - max(add.shift_a, add.shift_b)))
               for k, add in enumerate(plan.adds))
    return cost + sum(cells(bits(*bounds[o.node])) for o in plan.outputs if o.negate and o.node is not None)


def _emit(group: _Group, leaves: list[ir.Value], d: dt.DType, kept: list[ir.Value]) -> dict[int, ir.Value]:
    """The group's graph on its (substituted) leaves: {id(root): its replacement}; its nodes
    appended to `kept`."""
    nodes = list(leaves)

    def new(op: ir.OpKind, *srcs: ir.Value) -> ir.Value:
        v = ir.Op(op, d, srcs)
        kept.append(v)
        return v

    def shl(v: ir.Value, k: int) -> ir.Value:
        return new(K.SHL, v, ir.Const(k, d)) if k else v
    for add in group.plan.adds:
        nodes.append(new(K.SUB if add.sub else K.ADD, shl(nodes[add.a], add.shift_a), shl(nodes[add.b], add.shift_b)))
    out = {}
    for root, o in zip(group.roots, group.plan.outputs):
        c = ir.Const(d.wrap(root.constant), d)
        if o.node is None:
            out[id(root.node)] = c
            continue
        value = shl(nodes[o.node], o.shift)
        if o.negate:
            out[id(root.node)] = ir.Op(K.SUB, d, (c, value)) if root.constant else ir.Op(K.NEG, d, (value,))
        else:
            out[id(root.node)] = ir.Op(K.ADD, d, (value, c)) if root.constant else value
    return out
