"""fold=auto: each layer's lanes and reduce_unroll chosen for a target interval.

As FINN's SetFolding: a layer's parallelism (lanes x reduce_unroll, FINN's PE x SIMD) is raised
until its stage takes at most the target, the cheapest folding that does, so the stages balance:
with schedule=dataflow the slowest stage sets the interval and no stage is faster than it needs
to be. A folding costs its products and, for each lane, one product more (`cost`): a lane is an
accumulator, a requantiser and an output bank, where the products and the adders that sum them
are lanes x reduce_unroll either way; so at equal parallelism a wider reduction goes first (as
SetFolding raises SIMD before PE), and a few more products are worth many fewer lanes (the KWS
shape at w4a6, target 400: 6 x 32 for a 256 x 256 layer where the least parallelism is 86 x 2,
45,233 LUTs instead of 78,732 synthesised; docs/dataflow.md). Candidates are divisors of the loop
bounds the knobs unroll (lanes: the innermost output loops', reduce_unroll: the reductions'), so
no lane or tree input is gated off (with fold_factors: padded, also the least factor for each
count of steps, ceil(bound / steps), whose last step leaves lanes idle: fewer multipliers where a
bound has few divisors, 256 = 2^8). A stage's cycles are counted exactly, from the kernel built
with the candidate (the same passes compile_model runs). With schedule=sequential the target
bounds the sum of the kernels' runs: the slowest layer is raised step by step until the sum fits.

With schedule=dataflow a hand-over is in place (no copy, one beat of latency instead of two:
hw/dataflow.py) only when the producer stores the buffer in the layout its one consumer reads it
in: a 1-lane layer (one output bank) feeding an 8-way reduction (eight input banks) is a copy.
So among the foldings of a layer with the same parallelism as its pick and no more cycles than
the slowest pick (the same multipliers, the interval not raised), the fold then takes those that
make hand-overs in place, where that lowers the latency (depth x beat): a coordinate ascent
over the layers, each step keeping a layer's choice unless another is strictly better.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from . import ir
from .config import MAX_PARALLEL, HardwareConfig
from .errors import CompileError


@dataclass(frozen=True)
class Fold:
    config: HardwareConfig                       # with every layer's lanes and reduce_unroll set
    stages: tuple[tuple[str, int, int, int], ...]   # (kernel, lanes, reduce_unroll, cycles)


# What a lane costs beside its products, in products: its accumulator, its requantiser and its
# output bank (the products and the adders that sum them are lanes x reduce_unroll either way).
# One product is a round figure, not a fit: it leaves the fold's picks where lanes are few and
# stops it buying a few products with many lanes (module docstring); with DSP products it trades
# a DSP for a lane's LUTs.
LANE_COST = 1


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _factors(n: int) -> list[int]:
    """What a loop of n is worth unrolling by: for each count of steps s, the least factor that
    takes s steps, ceil(n / s) (the divisors of n, and between them the factors whose last step
    leaves a few lanes idle: 256 outputs in 37 lanes take 7 steps, where 32 take 8 and 64 take 4)."""
    return sorted({-(-n // s) for s in range(1, n + 1)})


def _innermost_bounds(kernel: ir.KernelIR, axis: ir.Axis) -> list[int]:
    """The bounds of `kernel`'s loops of `axis` with no loop of that axis inside them."""
    loops = [l for l in kernel.loops.values() if l.axis is axis]
    return [l.bound for l in loops if not any(o is not l and _inside(o, l, kernel) for o in loops)]


def _unrolled_bounds(kernel: ir.KernelIR) -> tuple[list[int], list[int]]:
    """The bounds of the loops lanes split (the innermost output loops) and reduce_unroll (the reductions)."""
    return (_innermost_bounds(kernel, ir.Axis.OUTPUT),
            [l.bound for l in kernel.loops.values() if l.axis is ir.Axis.REDUCE])


def candidates(kernel: ir.KernelIR, padded: bool = False) -> list[tuple[int, int]]:
    """(lanes, reduce_unroll) pairs in the order fold=auto tries them: the cheapest first (`cost`),
    then the least parallelism, then the wider reduction; factors of the loop bounds, divisors
    only unless `padded` (fold_factors)."""
    inner, reduces = _unrolled_bounds(kernel)
    factors = _factors if padded else _divisors
    lanes = sorted({f for b in inner for f in factors(b)} or {1})
    unrolls = sorted({f for b in reduces for f in factors(b)} or {1})
    pairs = [(lane, u) for lane in lanes for u in unrolls if lane * u <= MAX_PARALLEL]
    return sorted(pairs, key=lambda p: (cost(*p), p[0] * p[1], -p[1]))


def cost(lanes: int, unroll: int) -> int:
    """What a folding costs in products, the order fold=auto tries candidates in: its products
    and LANE_COST for each lane."""
    return lanes * unroll + LANE_COST * lanes


def _work_bound(bounds: tuple[list[int], list[int]], base: int, lanes: int, unroll: int) -> float:
    """About the fewest cycles a run takes at `lanes` x `unroll`, from its run at 1 x 1 and its
    `_unrolled_bounds`: its work over its parallelism, each unrolled loop's last step counted
    whole (a loop of b split f ways takes ceil(b / f) steps). Candidates above the target by it
    are not built."""
    inner, reduces = bounds

    def pad(bounds: list[int], f: int) -> float:
        return min((-(-b // f) * f / b for b in bounds), default=1.0)
    return base / (lanes * unroll) * pad(inner, lanes) * pad(reduces, unroll)


def _why_parallel(kernel: ir.KernelIR, best: int, overlap: bool = False) -> str:
    """What bounds a layer that takes at least `best` cycles, for the message of a target it
    cannot meet: lanes split only its innermost output loops and reduce_unroll only its
    innermost reductions (a conv's output row and kernel row, not its channels); and where its
    loop steps at that parallelism are fewer than the rest, its pipeline's fill and drain, which
    every sample pays (a stage runs one sample at a time) unless stage_overlap, and with it its
    last step's reads of the sample (`overlap`)."""
    lanes, unroll = _innermost_bounds(kernel, ir.Axis.OUTPUT), _innermost_bounds(kernel, ir.Axis.REDUCE)
    if not lanes and not unroll:
        return ""
    most = max(lanes, default=1) * max(unroll, default=1)
    steps = max(1, math.prod(l.bound for l in kernel.loops.values()) // most)
    fill = (f"; {best - steps} of its {best} cycles are its last step's reads of the sample, which its stage "
            "holds until they are done" if overlap else
            f"; {best - steps} of its {best} cycles are its pipeline's fill and drain, which every sample pays "
            "(a stage runs one sample at a time; stage_overlap: true starts the next while it drains)"
            ) if best - steps > steps else ""
    return (f" (lanes split only its innermost output loop, of {'/'.join(map(str, lanes)) or 'none'}, and "
            f"reduce_unroll only its innermost reduction, of {'/'.join(map(str, unroll)) or 'none'}: at most "
            f"{most} products a cycle{fill})")


def _inside(inner: ir.Loop, outer: ir.Loop, kernel: ir.KernelIR) -> bool:
    from .passes.rewrite import inner_loops
    return any(l.id == inner.id for l in inner_loops(outer))


def stage_cycles(kernel: ir.KernelIR, config: HardwareConfig, lanes: int, unroll: int,
                 fixed: frozenset[int] = frozenset()) -> int | None:
    """Cycles of one run of `kernel` (lowered) built with `lanes` x `unroll` under `config`, or
    with stage_overlap the cycles it holds its stage (hw/dataflow.stage_hold; `fixed`: its
    parameter slots that hold weights) (None: that folding does not compile for it)."""
    built = _built(kernel, _plain(config, lanes, unroll), fixed)
    return None if built is None else built.cycles


@dataclass(frozen=True)
class _Built:
    cycles: int                          # its run, or with stage_overlap its hold (stage_cycles)
    banking: dict                        # parameter slot -> Banking (hw/layout.py)
    ports: dict                          # bank slot -> read ports it needs
    run: int = 0                         # start to done, its pipeline's drain included


def _plain(config: HardwareConfig, lanes: int, unroll: int) -> HardwareConfig:
    return replace(config, lanes=lanes, reduce_unroll=unroll, layers=(), fold="manual", target_interval=None,
                   fold_budget=None, fold_factors="divisors")


@lru_cache(maxsize=4096)
def _built(kernel: ir.KernelIR, config: HardwareConfig, fixed: frozenset[int] = frozenset()) -> _Built | None:
    from .hw.dataflow import slot_banks, stage_hold
    from .hw.kernel import read_ports, run_cycles
    from .hw.pipeline import schedule
    from .hw.program import build_program
    from .passes.fuse import fuse_loops
    from .passes.interleave import interleave
    from .passes.parallelize import parallelize
    from .passes.split_deep import split_deep
    from .timing_model import target_period
    try:
        p = parallelize(kernel, config.lanes, config.reduce_unroll, fp_sum=config.fp_sum)
        k = fuse_loops(p.kernel) if config.loop_fusion else p.kernel
        k = interleave(k, config.fp_pipeline, target=target_period(config))
        k, banking = split_deep(k, p.banking, config.fp_pipeline)
        program = build_program(k)
        overlap = config.schedule == "dataflow" and config.stage_overlap
        sched = schedule(k, config)
        hold = stage_hold(k, program, sched, overlap, slot_banks(fixed, banking))
        return _Built(hold, banking, read_ports(k, program)[1], run_cycles(program, sched))
    except CompileError:
        return None


def fold_auto(kernels: list[ir.KernelIR], config: HardwareConfig,
              buffers: list[list[tuple[int, int, bool, bool]]] | None = None, outputs: frozenset[int] = frozenset(),
              fixed: list[frozenset[int]] | None = None) -> Fold:
    """Every layer's folding for `config.target_interval` (module docstring); a CompileError
    naming the closest interval when no folding reaches it. `buffers`: per kernel, its
    (slot, model buffer, loaded, stored), and `outputs` the model's output buffers: with them a
    dataflow fold prefers in-place hand-overs (module docstring). With `config.fold_budget`
    instead of a target: the fold of the least interval whose multipliers fit the budget.
    `fixed`: per kernel, its parameter slots that hold weights (stage_cycles)."""
    fixed = fixed or [frozenset()] * len(kernels)
    if config.fold_budget is not None:
        return _within_budget(kernels, config, buffers, outputs, fixed)
    target = config.target_interval
    assert target is not None
    lists = [candidates(k, config.fold_factors == "padded") for k in kernels]
    base = [stage_cycles(k, config, 1, 1, fixed[i]) for i, k in enumerate(kernels)]
    for k, b in zip(kernels, base):
        if b is None:
            raise CompileError(f"fold=auto: layer {k.name} does not compile with lanes=1, reduce_unroll=1")
    if config.schedule == "dataflow":
        flow = _Handovers(kernels, config, buffers, outputs, fixed) if buffers is not None else None
        picks = []
        for i, k in enumerate(kernels):
            pick = fits = None
            bounds = _unrolled_bounds(k)
            for lanes, unroll in lists[i]:
                if _work_bound(bounds, base[i], lanes, unroll) > target:
                    continue
                c = stage_cycles(k, config, lanes, unroll, fixed[i])
                if c is None or c > target:
                    continue
                pick = pick or (lanes, unroll, c)
                # the cheapest folding whose copies fit too; else the cheapest that meets the
                # target alone (the copies then set the interval, as the design reports)
                if flow is None or flow.copies_fit(picks + [(lanes, unroll, c)], i, target):
                    fits = (lanes, unroll, c)
                    break
            pick = fits or pick
            if pick is None:
                best = _fastest(k, config, lists[i], fixed[i])
                worst = max([best] + [_fastest(kk, config, lists[j], fixed[j]) for j, kk in enumerate(kernels) if j != i])
                why = _why_parallel(k, best, config.stage_overlap)
                raise CompileError(f"fold=auto: no folding reaches target_interval={target} cycles: layer "
                                   f"{i} ({k.name}) takes at least {best} cycles{why}; the closest interval is {worst}")
            picks.append(pick)
        if flow is not None:
            picks = _in_place(flow, lists, picks, target)
    else:
        at = [0] * len(kernels)
        cycles = list(base)
        while sum(cycles) > target:
            slow = max(range(len(kernels)), key=lambda j: cycles[j])
            moved = False
            for n in range(at[slow] + 1, len(lists[slow])):
                c = stage_cycles(kernels[slow], config, *lists[slow][n], fixed[slow])
                if c is not None and c < cycles[slow]:
                    at[slow], cycles[slow], moved = n, c, True
                    break
            if not moved:
                closest = sum(_fastest(k, config, lists[j], fixed[j]) for j, k in enumerate(kernels))
                raise CompileError(f"fold=auto: no folding reaches target_interval={target} cycles with "
                                   f"schedule=sequential (the kernels' runs add up); the closest interval is "
                                   f"{closest} (schedule=dataflow overlaps the layers)")
        picks = [(*lists[j][at[j]], cycles[j]) for j in range(len(kernels))]
    layers = tuple((i, (("lanes", lanes), ("reduce_unroll", unroll))) for i, (lanes, unroll, _) in enumerate(picks))
    return Fold(replace(config, layers=layers),
                tuple((k.name, lanes, unroll, c) for k, (lanes, unroll, c) in zip(kernels, picks)))


def _fastest(kernel: ir.KernelIR, config: HardwareConfig, pairs: list[tuple[int, int]],
             fixed: frozenset[int] = frozenset()) -> int:
    """The fewest cycles a run of `kernel` takes at any of its candidate foldings: the 8 most
    parallel ones that compile (a run's cycles fall with its parallelism). Those that do not
    compile are passed over, not counted: a float sum unrolls only with fp_sum=tree, so every
    candidate with reduce_unroll > 1 fails for it, and they are the most parallel ones."""
    found: list[int] = []
    for lanes, unroll in sorted(pairs, key=lambda p: -p[0] * p[1]):
        c = stage_cycles(kernel, config, lanes, unroll, fixed)
        if c is not None:
            found.append(c)
            if len(found) == 8:
                break
    assert found, "fold_auto checks that lanes=1, reduce_unroll=1 compiles first"
    return min(found)


class _Handovers:
    """The model's buffers between the layers (hw/dataflow.py's hand-overs) for a choice of
    foldings, `choice[k]` = (lanes, unroll, ...) of kernel k: each buffer's writer (kernel,
    slot) and readers, whether one is handed over in place, and a copy's cycles."""

    def __init__(self, kernels, config: HardwareConfig, buffers, outputs: frozenset[int], fixed: list[frozenset[int]]):
        from .hw.dataflow import copy_lag
        self.kernels, self.config, self.outputs, self.fixed = kernels, config, outputs, fixed
        self.writers: dict[int, tuple[int, int]] = {}
        readers: dict[int, list[tuple[int, int]]] = {}
        for k, slots in enumerate(buffers):
            for slot, buf, loaded, stored in slots:
                if stored:
                    self.writers[buf] = (k, slot)
                elif loaded:
                    readers.setdefault(buf, []).append((k, slot))
        self.edges = [(self.writers[b], rs) for b, rs in readers.items() if b in self.writers]
        self.handovers = [(w, rs[0]) for w, rs in self.edges if len(rs) == 1]
        self.lag = copy_lag(config.mem_read == "sync", config.fp_pipeline)

    def built(self, choice, k: int) -> _Built:
        return _built(self.kernels[k], _plain(self.config, *choice[k][:2]), self.fixed[k])

    def in_place(self, choice, w, r) -> bool:
        bw, br = self.built(choice, w[0]), self.built(choice, r[0])
        rb = br.banking.get(r[1])
        return bw.banking.get(w[1]) is not None and rb is not None and \
            rb.layout == bw.banking[w[1]].layout and all(br.ports.get(b, 1) <= 1 for b in rb.banks)

    def layout(self, choice, place):
        from .hw.layout import Layout
        bk = self.built(choice, place[0]).banking.get(place[1])
        if bk is not None:
            return bk.layout
        return Layout.plain(next(b.size for b in self.kernels[place[0]].buffers if b.slot == place[1]))

    def copy_cycles(self, choice, w, rs) -> int:
        from .hw.top import Copy
        layouts = [self.layout(choice, p) for p in [w] + list(rs)]
        return Copy.between(w, tuple(rs), layouts).length + self.lag

    def copies_fit(self, choice, k: int, target: int) -> bool:
        """Whether kernel k's hand-overs can take at most `target` cycles each with the kernels
        up to k chosen (`choice[:k + 1]`; producers come before their consumers): the copy
        into k from its writer (with the readers chosen so far: more readers only narrow it),
        and for a buffer k writes, the copy at its fastest (word by word into its own layout,
        or in the widest groups the layout holds: layout.group_width). A folding whose lanes
        share no factor with the buffer's length (11 lanes on 72 outputs) copies an element a
        cycle, which may be slower than every layer (AD08 at 60, fold_factors: padded: 74)."""
        from .hw.layout import group_width
        for w, rs in self.edges:
            if w[0] == k:
                lay = self.layout(choice, w)
                if min(lay.words, lay.size // group_width([lay])) + self.lag > target:
                    return False
            if w[0] < k and any(r[0] == k for r in rs):
                if len(rs) == 1 and self.in_place(choice, w, rs[0]):
                    continue
                if self.copy_cycles(choice, w, [r for r in rs if r[0] <= k]) > target:
                    return False
        return True


def _in_place(flow: _Handovers, lists, picks, target: int):
    """`picks` with foldings of equal parallelism and no more cycles than the slowest pick
    swapped in where that lowers the latency (depth x beat, the copies' cycles in the beat, and
    with stage_overlap the beats a stage's stores spill into in the depth) by
    handing buffers on in place or by shorter copies (module docstring), never a swap that takes
    a copy past `target`."""
    from .hw.dataflow import spill_beats
    if not flow.edges:
        return picks
    kernels, config = flow.kernels, flow.config
    beat = max(c for _, _, c in picks)
    options = []
    for i, k in enumerate(kernels):
        par = picks[i][0] * picks[i][1]
        tied = [picks[i]]
        for lanes, unroll in lists[i]:
            if lanes * unroll == par and (lanes, unroll) != picks[i][:2]:
                c = stage_cycles(k, config, lanes, unroll, flow.fixed[i])
                if c is not None and c <= beat:
                    tied.append((lanes, unroll, c))
        options.append(tied)

    def cost(choice) -> tuple[int, int, int]:
        fast = {(w, r) for w, r in flow.handovers if flow.in_place(choice, w, r)}
        # a copy's cycles count in the beat too: between layouts that share no group of lanes
        # (hw/layout.group_width) it moves an element a cycle, and may be the slowest stage
        copies = [flow.copy_cycles(choice, w, rs) for w, rs in flow.edges
                  if not (len(rs) == 1 and (w, rs[0]) in fast)]
        interval = max([c for _, _, c in choice] + copies)
        # with stage_overlap a stage whose run passes the beat has its readers wait a beat more
        # for each it spills into (hw/dataflow.spill_beats); without, no run passes the beat
        spill = [spill_beats(flow.built(choice, k).run, interval) for k in range(len(kernels))]
        level = [0] * len(kernels)
        for k in range(len(kernels)):        # kernels come in an order their producers come first in
            for w, rs in flow.edges:
                for r in rs:
                    if r[0] == k:
                        level[k] = max(level[k], level[w[0]] + spill[w[0]] + (1 if (w, r) in fast else 2))
        ends = [flow.writers[b][0] for b in flow.outputs if b in flow.writers] or list(range(len(kernels)))
        depth = 1 + max(level[k] + spill[k] for k in ends)
        return max(0, interval - target), depth * interval, -len(fast)

    choice, best = list(picks), cost(picks)
    for _ in range(4 * len(kernels)):
        moved = False
        for i, tied in enumerate(options):
            for option in tied:
                if option == choice[i]:
                    continue
                trial = choice[:i] + [option] + choice[i + 1:]
                c = cost(trial)
                if c < best:
                    choice, best, moved = trial, c, True
        if not moved:
            break
    return choice


def _within_budget(kernels, config, buffers, outputs, fixed) -> Fold:
    """The least target interval whose fold spends at most `config.fold_budget` multipliers
    (lanes x reduce_unroll summed over the layers), found by bisection: a fold's cost never rises
    with the target (each layer takes the cheapest that meets it), nor its multipliers but for the
    few a layer may take at a looser target to save lanes (`cost`): there the bisection may stop
    above the least interval, never past the budget."""
    budget = config.fold_budget
    if budget < len(kernels):
        raise CompileError(f"fold=auto: fold_budget={budget} multipliers is fewer than the model's {len(kernels)} "
                           f"layers, each of which needs one; the least budget is {len(kernels)}")
    base = [stage_cycles(k, config, 1, 1, fixed[i]) for i, k in enumerate(kernels)]
    if any(b is None for b in base):
        raise CompileError("fold=auto: a layer does not compile with lanes=1, reduce_unroll=1")

    def fold_at(target: int) -> Fold | None:
        try:
            fold = fold_auto(kernels, replace(config, fold_budget=None, target_interval=target), buffers, outputs,
                             fixed)
        except CompileError:
            return None
        return fold if sum(lanes * unroll for _, lanes, unroll, _ in fold.stages) <= budget else None

    lo, hi = 1, max(base) if config.schedule == "dataflow" else sum(base)   # at hi every layer is 1 x 1
    best = fold_at(hi)
    assert best is not None
    while lo < hi:
        mid = (lo + hi) // 2
        fold = fold_at(mid)
        if fold is None:
            lo = mid + 1
        else:
            hi, best = mid, fold
    return Fold(replace(best.config, fold_budget=budget, target_interval=None), best.stages)
