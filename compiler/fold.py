"""fold=auto: each layer's lanes and reduce_unroll chosen for a target interval.

As FINN's SetFolding: a layer's parallelism (lanes x reduce_unroll, FINN's PE x SIMD) is raised
until its stage takes at most the target, the least parallelism that does (the least area), so
the stages balance: with schedule=dataflow the slowest stage sets the interval and no stage is
faster than it needs to be. Candidates are divisors of the loop bounds the knobs unroll (lanes:
the innermost output loops', reduce_unroll: the reductions'), so no lane or tree input is gated
off; at equal parallelism a wider reduction goes first (as SetFolding raises SIMD before PE: it
keeps the output banks few). A stage's cycles are counted exactly, from the kernel built with
the candidate (the same passes compile_model runs). With schedule=sequential the target bounds
the sum of the kernels' runs: the slowest layer is raised step by step until the sum fits.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from . import ir
from .config import MAX_PARALLEL, HardwareConfig
from .errors import CompileError


@dataclass(frozen=True)
class Fold:
    config: HardwareConfig                       # with every layer's lanes and reduce_unroll set
    stages: tuple[tuple[str, int, int, int], ...]   # (kernel, lanes, reduce_unroll, cycles)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidates(kernel: ir.KernelIR) -> list[tuple[int, int]]:
    """(lanes, reduce_unroll) pairs in the order fold=auto tries them: least parallelism first,
    the wider reduction first at equal parallelism."""
    outputs = [l for l in kernel.loops.values() if l.axis is ir.Axis.OUTPUT]
    inner = [l.bound for l in outputs if not any(o is not l and _inside(o, l, kernel) for o in outputs)]
    reduces = [l.bound for l in kernel.loops.values() if l.axis is ir.Axis.REDUCE]
    lanes = sorted({d for b in inner for d in _divisors(b)} or {1})
    unrolls = sorted({d for b in reduces for d in _divisors(b)} or {1})
    pairs = [(lane, u) for lane in lanes for u in unrolls if lane * u <= MAX_PARALLEL]
    return sorted(pairs, key=lambda p: (p[0] * p[1], -p[1]))


def _inside(inner: ir.Loop, outer: ir.Loop, kernel: ir.KernelIR) -> bool:
    from .passes.rewrite import inner_loops
    return any(l.id == inner.id for l in inner_loops(outer))


def stage_cycles(kernel: ir.KernelIR, config: HardwareConfig, lanes: int, unroll: int) -> int | None:
    """Cycles of one run of `kernel` (lowered) built with `lanes` x `unroll` under `config`
    (None: that folding does not compile for it)."""
    return _stage_cycles(kernel, replace(config, lanes=lanes, reduce_unroll=unroll, layers=(), fold="manual",
                                         target_interval=None))


@lru_cache(maxsize=4096)
def _stage_cycles(kernel: ir.KernelIR, config: HardwareConfig) -> int | None:
    from .hw.pipeline import schedule
    from .hw.program import build_program
    from .passes.fuse import fuse_loops
    from .passes.interleave import interleave
    from .passes.parallelize import parallelize
    from .passes.split_deep import split_deep
    try:
        p = parallelize(kernel, config.lanes, config.reduce_unroll, fp_sum=config.fp_sum)
        k = fuse_loops(p.kernel) if config.loop_fusion else p.kernel
        k = interleave(k, config.fp_pipeline)
        k, _ = split_deep(k, p.banking, config.fp_pipeline)
        return build_program(k).cycles + 1 + schedule(k, config).commit
    except CompileError:
        return None


def fold_auto(kernels: list[ir.KernelIR], config: HardwareConfig) -> Fold:
    """Every layer's folding for `config.target_interval` (module docstring); a CompileError
    naming the closest interval when no folding reaches it."""
    target = config.target_interval
    assert target is not None
    lists = [candidates(k) for k in kernels]
    base = [stage_cycles(k, config, 1, 1) for k in kernels]
    for k, b in zip(kernels, base):
        if b is None:
            raise CompileError(f"fold=auto: layer {k.name} does not compile with lanes=1, reduce_unroll=1")
    if config.schedule == "dataflow":
        picks = []
        for i, k in enumerate(kernels):
            pick = None
            for lanes, unroll in lists[i]:
                if base[i] / (lanes * unroll) > target:   # a run takes at least its work / its parallelism
                    continue
                c = stage_cycles(k, config, lanes, unroll)
                if c is not None and c <= target:
                    pick = (lanes, unroll, c)
                    break
            if pick is None:
                best = _fastest(k, config, lists[i])
                worst = max([best] + [_fastest(kk, config, lists[j]) for j, kk in enumerate(kernels) if j != i])
                raise CompileError(f"fold=auto: no folding reaches target_interval={target} cycles: layer "
                                   f"{i} ({k.name}) takes at least {best} cycles; the closest interval is {worst}")
            picks.append(pick)
    else:
        at = [0] * len(kernels)
        cycles = list(base)
        while sum(cycles) > target:
            slow = max(range(len(kernels)), key=lambda j: cycles[j])
            moved = False
            for n in range(at[slow] + 1, len(lists[slow])):
                c = stage_cycles(kernels[slow], config, *lists[slow][n])
                if c is not None and c < cycles[slow]:
                    at[slow], cycles[slow], moved = n, c, True
                    break
            if not moved:
                closest = sum(_fastest(k, config, lists[j]) for j, k in enumerate(kernels))
                raise CompileError(f"fold=auto: no folding reaches target_interval={target} cycles with "
                                   f"schedule=sequential (the kernels' runs add up); the closest interval is "
                                   f"{closest} (schedule=dataflow overlaps the layers)")
        picks = [(*lists[j][at[j]], cycles[j]) for j in range(len(kernels))]
    layers = tuple((i, (("lanes", lanes), ("reduce_unroll", unroll))) for i, (lanes, unroll, _) in enumerate(picks))
    return Fold(replace(config, layers=layers),
                tuple((k.name, lanes, unroll, c) for k, (lanes, unroll, c) in zip(kernels, picks)))


def _fastest(kernel: ir.KernelIR, config: HardwareConfig, pairs: list[tuple[int, int]]) -> int:
    """The fewest cycles a run of `kernel` takes at any of its candidate foldings (the most
    parallel ones first: a run's cycles fall with its parallelism)."""
    best = None
    for lanes, unroll in sorted(pairs, key=lambda p: -p[0] * p[1])[:8]:
        c = stage_cycles(kernel, config, lanes, unroll)
        if c is not None and (best is None or c < best):
            best = c
    assert best is not None
    return best
