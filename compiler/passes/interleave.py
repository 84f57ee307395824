"""fp_pipeline: a fused float sum visits several output rows in turn, so its pipelined
adder's accumulators form a ring."""
from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Callable

from .. import ir
from ..dtypes import BOOL, INT32
from ..hw.program import split_into_steps
from .rewrite import const, float_sum_op, loop_chain, op, reads_acc, rebuild_chain, substitute_store

if TYPE_CHECKING:
    from ..timing_model import Delays

K = ir.OpKind


def interleave_ways(level: int, rows: int | None = None, clock: bool = False, fused: bool = False,
                    adder_ns: Callable[[int], float | None] | None = None) -> int:
    """Rows interleaved through a float sum at fp_pipeline `level` (`clock`: at a target clock;
    `fused`: a fused multiply-add's sum, FMulAdd its ring's unit, else FAdd).

    At least L = min(2**level, the unit's stages) (pipeline.float_stages: FAdd 6, FMulAdd 8).
    Given the nest's `rows`, the L' in [L, 2L] that computes the fewest row slots
    ceil(rows / L') * L' (the smallest such): rows past the end cost a full pass of the
    reduction each, while a way beyond the unit's stages costs one register of delay line. The
    GEMV's 32 rows a lane at L = 6: 36 slots; at L' = 8: 32, 11% fewer cycles for 2 more ring
    registers. At a target clock, of the L' with the fewest slots the one that gives the unit
    the most of its stages (FAdd's 10 with its CLOCK_CUTS; its ring takes min(L', 10)): forcing
    L' = 10 took a convolution's 2-row nests from 1,114 to 1,852 cycles. A fused multiply-add's
    ring at a target clock takes 13 ways at least, all the stages its unit has from the
    accumulator on (its product is computed before: pipeline.ring_lead): FMulAdd fp32 so,
    placed alone, closed at 70.8 MHz with 8 stages, 95.2 with 12 and 123.6 with 13
    (compiler/float_timing.py MEASURED_IN_RING; with the product inside the ring, 38.5 with 6
    and 64.4 with 8). layernorm fp16 at 150 MHz took 552 cycles (484 with 8 ways) and placed at
    82.4 MHz with 12 (docs/timing.md, thirty-seventh session), 570 cycles and 96.7 MHz with 13.

    `adder_ns` (an adder's ring at a target clock): the period the ring runs at when its adder
    has s stages (float_timing.ring_period_ns: never below the target's). Then the L' whose
    slots take the least time, slots times that period: the fewest slots gave an adder of 6
    stages (FAdd fp32 106.6 MHz alone, 161.1 at 8) to nests of few rows, which then held float
    designs far below their target (a matmul fp16 at 150 MHz: 101.1 MHz, 748 cycles; with 8
    ways 133.3 MHz, 990 cycles, the same 7.4 us). Where a unit was not measured, the fewest
    slots."""
    from ..fp import FAdd
    from ..fp.muladd import FMulAdd
    from ..hw.floatops import unit_stages
    unit = FMulAdd if fused else FAdd
    least = min(2 ** level, unit_stages(unit)) if level > 0 else 1
    # a ring's FMulAdd at a target clock: its stages from the accumulator on (pipeline.ring_lead),
    # all of them: with fewer it is a float design's slowest unit by far
    top = len(FMulAdd.RING_ORDER) + 1 if fused else unit_stages(unit, clock=True)
    if fused and clock and least > 1:
        least = top
    if least == 1 or rows is None:
        return least
    ways = range(least, 2 * least + 1)
    if adder_ns is not None and not fused:
        ns = {w: adder_ns(min(w, top)) for w in ways}
        if None not in ns.values():
            return min(ways, key=lambda w: (-(-rows // w) * w * ns[w], -min(w, top), w))
    return min(ways, key=lambda w: (-(-rows // w) * w, -min(w, top) if clock else w, w))


def interleave(kernel: ir.KernelIR, level: int, target: tuple[float, Delays] | None = None) -> ir.KernelIR:
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

    A nest of reductions alone (one row: a sum to a scalar, softmax's denominator) has no O;
    at a target clock (`target`) it gets a loop of L rows innermost all the same, rows 1..L-1
    padding whose stores are gated off: L times the cycles of that nest, for a pipelined adder
    instead of a combinational one on a one-cycle loop (a float32 adder: ~30 MHz). Without a
    target clock it keeps its one-cycle adder.

    Legal when the rows are independent (checked, else the nest is left as it is): each
    accumulator of the step is used nowhere else and is reset at the start of every row (all
    its reads are the `where(first, init, acc)` loop_fusion builds, `first` being the inner
    reduction counters all at 0), and no buffer written in the nest is read by the kernel.

    `target` (at a target clock: its period in ns and the part's delays): an adder's ring takes
    the ways whose slots take the least time at the period its adder's stages allow
    (interleave_ways' `adder_ns`).
    """
    if interleave_ways(level) == 1:
        return kernel
    state = {"next_id": max(kernel.loops, default=-1) + 1, "accs": {}, "target": target}
    body = _interleave_body(kernel, kernel.body, level, state)
    if not state["accs"]:
        return kernel
    accs = [replace(a, ways=state["accs"].get(a.index, a.ways)) for a in kernel.accs]
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
    chain = loop_chain(loop)
    body = list(chain[-1].body)
    if any(isinstance(s, ir.Loop) for s in body) or len(split_into_steps(body)) != 1:
        return None
    outer = [j for j, l in enumerate(chain) if l.axis is ir.Axis.OUTPUT]
    # j: the innermost output loop, -1 for a nest of reductions alone (one row: at a target
    # clock it takes padding rows, below)
    j = outer[-1] if outer else -1
    if j == len(chain) - 1 or any(l.axis is not ir.Axis.REDUCE for l in chain[j + 1:]) \
            or (j < 0 and state["target"] is None):
        return None
    rows, inner = (chain[j] if j >= 0 else None), frozenset(l.id for l in chain[j + 1:])
    written = {s.acc for s in body if isinstance(s, ir.AccStore)}
    # a sum: an add or subtract, or a fused multiply-add (fp_semantics=tinygrad's MULACC, the
    # accumulator its addend), whose unit then takes the ring's stages
    sums = {float_sum_op(s) for s in body} - {None}
    if not sums:
        return None
    # the accumulators are this step's alone ...
    inside = {id(s) for s in body}
    for s, _ in kernel.stores():
        if id(s) not in inside and ((isinstance(s, ir.AccStore) and s.acc in written)
                                    or any(reads_acc(x, a) for x in ir.store_operands(s) for a in written)):
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

    bound = rows.bound if rows is not None else 1
    adder_ns = None
    if state["target"] is not None:
        from ..float_timing import ring_period_ns, unit_key
        keys = frozenset(unit_key(s.value) for s in body if float_sum_op(s) is not None)
        period, d = state["target"]
        adder_ns = partial(ring_period_ns, keys, period_ns=period, d=d)
    ways = interleave_ways(level, bound, state["target"] is not None, fused=K.MULACC in sums, adder_ns=adder_ns)
    lane_id = state["next_id"]
    state["next_id"] += 1
    if rows is not None:
        row = op(K.ADD, INT32, op(K.MUL, INT32, ir.Counter(rows.id), const(ways)), ir.Counter(lane_id))
        memo: dict[int, ir.Value] = {}
        stores = [substitute_store(s, lambda v: row if isinstance(v, ir.Counter) and v.loop == rows.id else None, memo)
                  for s in body]
    else:
        row, stores = ir.Counter(lane_id), body
    if bound % ways:
        valid = op(K.CMPLT, BOOL, row, const(bound))
        stores = [ir.BufStore(s.buf, s.index, s.value, valid if s.gate is None else op(K.AND, BOOL, s.gate, valid))
                  if isinstance(s, ir.BufStore) else s for s in stores]
    for a in written:
        state["accs"][a] = ways
    new_chain = chain[:j] + [ir.Loop(rows.id, rows.axis, -(-rows.bound // ways), ())] + chain[j + 1:] \
        if rows is not None else chain
    return rebuild_chain(new_chain, (ir.Loop(lane_id, ir.Axis.OUTPUT, ways, tuple(stores)),))
