"""A grid's simulation binaries built before its workers start, several designs to a g++ run.

Each trial builds its own CXXRTL binary when it simulates: one g++ run a design, and for the
small designs of a sweep most of that run is the runtime's templates, the same in every design.
compiler.sim.cxxrtl.build_many puts several designs in one translation unit (a bundle) and
shares that work; here the sweep's parent compiles the grid points it is about to evaluate and
builds their binaries in bundles, one g++ run per worker at a time, into the binary cache the
trials then read. Measured on configs/gemv.yaml's 15 designs (2026-12-05, 2 cores): 26.4 s of
Yosys and g++ one design a run, 15.3 s in two bundles.

What the trials do is unchanged: each compiles its point again, finds its binary in the cache
(keyed by the design's RTLIL, so the same design or nothing), and reports every failure itself.
So a point that fails to compile or build here is left to its trial, and this stage never
fails a sweep. Left out, as the trials build them: a multi-fidelity grid (its cheap pass
simulates nothing, and its trials only the points that can reach the front), the pysim back
end, points already in the evaluation cache, a user's own model (its builder and the files it
reads are the trial's to record), a network fine-tuned at its format (`qat:`: minutes of
training, which the trials run side by side), designs past compiler.sim.cxxrtl.LARGE_RTLIL
(compiled alone at -O0, bundling buys them nothing), and every point of a sweep with fewer
workers than cores: there each trial's synthesis runs beside its simulation
(EvalContext.overlap), the g++ build hides behind Yosys, and building ahead only delays the
first trial (configs/gemv.yaml at `--n-jobs 1`, alternated beside a place-and-route: 68.5 and
66.0 s without, 70.0 and 70.2 with). The parent compiles points in turn while the cores wait,
so it stops after PARENT_COMPILE_S seconds of compiling; the points after that build in their
trials.
"""
from __future__ import annotations

import time
from typing import Callable, Sequence

from compiler.tools import cores
from dse.spec import Spec
from dse.study.options import SweepOptions

PARENT_COMPILE_S = 30.0


def prebuild(spec: Spec, options: SweepOptions, points: Sequence, log: Callable[[str], None] | None = None) -> int:
    """Build the simulation binaries of `points` (DesignPoints a run is about to evaluate) in
    bundles; returns how many designs were built or found built."""
    if not points or spec.search.fidelity == "multi" or options.sim_backend == "pysim" or options.n_jobs < cores():
        return 0
    from compiler.sim import cxxrtl
    from dse.cache import EvalCache
    from dse.evaluate import EvalContext
    ctx = EvalContext.from_spec(spec, data_seed=options.data_seed, sim_backend=options.sim_backend)
    cache = EvalCache(options.cache_dir) if options.use_cache else None
    t0 = time.perf_counter()
    designs = _compiled(ctx, cache, points, t0)
    if not designs:
        return 0
    try:
        built = sum(b is not None for b in cxxrtl.build_many(designs, jobs=cores(),
                                                             max_rtlil=cxxrtl.LARGE_RTLIL))
    except Exception as exc:                       # noqa: BLE001 - each trial builds its own and reports
        if log:
            log(f"simulation binaries not built ahead ({type(exc).__name__}): each trial builds its own")
        return 0
    if log and built:
        log(f"simulation binaries of {built} point{'s' * (built != 1)} built ahead in bundles "
            f"({time.perf_counter() - t0:.1f} s)")
    return built


def _compiled(ctx, cache, points: Sequence, t0: float) -> list:
    """The Designs of `points` not evaluated before, compiled until PARENT_COMPILE_S is spent."""
    from dse.cache import make_key, point_material
    from dse.evaluate import compile_point
    designs = []
    for point in points:
        if time.perf_counter() - t0 > PARENT_COMPILE_S:
            break
        material = point_material(ctx, point)
        if material is None:                       # a user's own model, or one the spec lacks
            continue
        if cache is not None and cache.alias(make_key(material)) is not None:
            continue                               # evaluated before: its trial reads the row
        trained = point.model_of(ctx.model(point.model)).trained
        if trained is not None and trained.qat is not None:
            continue                               # fine-tuning (minutes) is the trial's, beside the others
        try:
            designs.append(compile_point(ctx, point))
        except Exception:                          # noqa: BLE001 - its trial compiles it and reports
            continue
    return designs
