"""The evaluation cache: one design point's metrics row, stored under a content hash of
everything that determines it, shared by every study on the machine.

    cache = EvalCache()                                     # $TINYHW_CACHE/evals (~/.cache/tinyhw/evals)
    row, cached = cached_evaluate(ctx, point, workdir, cache)

The key. A spec's name for a model says nothing about what gets built, and knob values
say nothing about the compiler that turns them into hardware, so the key hashes what the
evaluation actually consumes (`key_material` returns it, and each entry stores it):

    kernels     compiler.ir.fingerprint of every kernel of the compiled design, plus the
                design's phase/buffer plan (how the kernels are wired)
    model       the zoo model's name and full parameters (they choose the numpy golden model
                the outputs are checked against), or the user file's SHA-256 and function
    knobs       the full HardwareConfig (defaults filled in: `mem_read: sync` written out or
                left to its default gives the same key)
    dtype, target, data seed, input range (the data the design is checked on, and the ranges
                the overflow analysis assumes), simulator choice, whether simulation,
                synthesis and place-and-route ran (with timing: nextpnr's version), and the spec's
                `synthesis` mode when it is not flat
    versions    Yosys (its banner), tinygrad, amaranth, numpy, the tinyhw package and da4ml
    code        (added by compiler.cache.EVALS) a SHA-256 of every file of compiler/ and dse/.
                Every module of both packages, not a hand-kept list: the quantiser, the data
                split, model building, the accuracy stage decide a row's numbers as much as the
                compiler does, and a list would miss the next module written. The package
                version alone would not do: the project is installed editable, so its version
                stays put while the code changes, and a stale hit would be a wrong row.

A served row says so (`cached: true`); every row carries the `code_digest` it was computed
with, so `dse report` and `dse check` can say when a study mixes rows of several versions of
the code (a sweep resumed after an upgrade).

Getting the kernel fingerprints means building the model and compiling it (0.03-0.3 s, the
same work `evaluate` starts with), which is done before the expensive stages. This module does
that itself instead of asking `dse.evaluate` for a hook: `evaluate` stays a pure
`evaluate(point) -> Metrics` with no cache logic in it, at the price of compiling twice on a
miss (under 3% of an evaluation that simulates and synthesises). A point that fails before
its IR exists (illegal knobs, an op the hardware does not support) is keyed on its definition
alone (model, dtype, knob values as given, target, data, versions).

What is stored. Rows of points that evaluated OK, rows that FAILed in "check" or "confirm"
(the hardware computed a wrong result) and rows of points that failed to configure, build or
compile: all deterministic for a given key. Failures of the tools (simulate, synthesize: a
crash, a timeout, a missing binary) are not stored, so they are retried next time rather than
remembered.

Files: `<root>/<key[:2]>/<key>/entry.json` ({"key", "material", "row", "created", ...}), in
the layout of every content cache (compiler.cache.ContentCache): written atomically, so a
reader never sees half an entry. Two processes that want the same missing key serialise on an
flock of `<key>.lock`: the second waits, then reads the first one's result instead of
evaluating again.
"""
from __future__ import annotations

import functools
import hashlib
import time
from pathlib import Path
from typing import Any, Callable

from compiler.cache import EVALS
from compiler.tools import package_version
from dse.spec import DesignPoint

VERSIONED = ("tinygrad", "amaranth", "numpy", "tinyhw", "da4ml")
"""Packages whose versions join the key (with Yosys's; the project's own code by content). da4ml
(optional) builds constant layers' adder graphs (adder_graph: auto uses it when installed): its
graphs are in the IR, but a point refused for want of it is keyed on its definition alone."""

CACHEABLE_FAIL_STAGES = ("check", "confirm")
PRE_IR_STAGES = ("config", "build", "compile")
TRANSIENT_ERRORS = frozenset({"MemoryError", "OSError", "TimeoutError", "TimeLimitExceeded", "ToolError",
                              "KeyboardInterrupt"})


# ---------------------------------------------------------------------------------------------
# the key

def _yosys_version() -> str:
    from compiler.tools import ToolError, yosys_version
    try:
        return yosys_version()
    except (ToolError, OSError) as exc:
        return f"unavailable ({exc})"


def code_digest() -> str:
    """SHA-256 over every file of both packages (compiler.cache.EVALS.code)."""
    return EVALS.code_digest()


@functools.lru_cache(maxsize=None)
def versions() -> dict[str, str]:
    """Versions of everything outside the IR that the numbers depend on (once per process)."""
    return {"yosys": _yosys_version(), **{dist: package_version(dist) for dist in VERSIONED}}


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def key_material(ctx, point: DesignPoint) -> dict[str, Any] | None:
    """What determines `point`'s row under `ctx` (an EvalContext); None for a model the context
    does not know. A point that does not compile has no IR: its material is then its definition
    alone, marked `"compiled": False` (only its compile-time failure is stored under it)."""
    try:
        model = point.model_of(ctx.model(point.model))
    except KeyError:
        return None
    try:
        definition = _model_definition(model)
    except OSError:
        return None
    return _compiled_material(ctx, point, model, _common_material(ctx, point, model, definition))


def point_material(ctx, point: DesignPoint) -> dict[str, Any] | None:
    """What determines `point`'s row without compiling it: its definition, its knobs and the
    context. The code digest in every key (compiler.cache) makes the compile deterministic given
    these, so this material names the same evaluation as key_material's IR fingerprint does:
    `cached_evaluate` keeps it as an alias of that key, and a point evaluated before (a
    multi-fidelity sweep's cheap pass, then its trial) is found without compiling it again. None
    for a user's own model (the files its code reads are found while building it)."""
    try:
        model = point.model_of(ctx.model(point.model))
        if model.source is not None:
            return None
        definition = _model_definition(model)
    except (KeyError, OSError):
        return None
    return {"alias": True, "knobs": {k: repr(v) for k, v in sorted(point.knobs.items())},
            **_common_material(ctx, point, model, definition)}


def _model_definition(model) -> dict[str, Any]:
    """The model's definition by content (raises OSError when a file it names cannot be read)."""
    if model.trained is not None:
        # a trained network's result is its weights' and its data's content, not their names
        t = model.trained
        definition: dict[str, Any] = {
            "trained": t.kind, "sha256": _file_digest(t.path), "dataset": t.data.dataset,
            "data_sha256": _file_digest(t.data.file) if t.data.file is not None else None,
            "samples": t.data.samples, "prune": t.prune,
            # absent where not set: older keys stay
            **({"split": t.data.split} if t.data.split is not None else {}),
            **({"qat": t.qat.as_dict()} if t.qat is not None else {})}
    elif model.builtin is not None:
        definition = {"builtin": model.builtin, "params": dict(model.params)}
    elif model.onnx is not None:
        definition = {"onnx_sha256": _file_digest(model.onnx)}
    else:
        definition = {"source_sha256": _file_digest(model.source), "function": model.function,
                      "params": {k: repr(v) for k, v in model.params.items()}}
    if model.files is not None:
        f = model.files
        definition["files"] = {
            "weights_sha256": _file_digest(f.weights) if f.weights is not None else None,
            "data": None if f.data is None else {
                "dataset": f.data.dataset, "samples": f.data.samples, "input": f.data.input,
                **({"split": f.data.split} if f.data.split is not None else {}),
                "sha256": _file_digest(f.data.file) if f.data.file is not None else None}}
    return definition


def _common_material(ctx, point: DesignPoint, model, definition) -> dict[str, Any]:
    """The context, dtype and formats of a point with its model's definition."""
    rng = model.input_range(point.dtype)
    common = {
        "model": definition,
        "dtype": point.dtype,
        "target": ctx.target,
        "data_seed": ctx.data_seed,
        "input_range": None if rng is None else [rng.min, rng.max],
        "sim_backend": ctx.sim_backend,
        "synthesize": ctx.synthesize,
        "simulate": ctx.simulate,
        "timing": _timing_material(ctx, point.knobs.get("target_mhz")),
        "synthesis": ctx.synthesis if ctx.synthesize else None,     # flat and per-unit counts differ
        **({"golden_accuracy": True} if getattr(ctx, "golden_accuracy", False) else {}),
        "versions": versions(),
        # the widths of the tool's quantiser (absent without format knobs: older keys stay)
        **({"formats": point.formats().as_dict()} if point.formats() else {}),
    }
    return common


def _compiled_material(ctx, point: DesignPoint, model, common: dict[str, Any]) -> dict[str, Any] | None:
    """`common` with the compiled design's IR fingerprint (or marked not compiled)."""
    from dse.limits import TimeLimitExceeded, time_limit
    from dse.models.user_model import import_reads, recording_reads
    compiled, reads = True, set()
    try:
        from compiler.ir import fingerprint
        from dse.evaluate import compile_point
        with recording_reads() as reads, time_limit(ctx.stage_timeout_s, "building and compiling for the cache key"):
            # as evaluate() compiles it, and the same Design it then evaluates (compile_point keeps
            # it): weights="constant" builds the arrays into the kernels, so their values are in
            # the IR fingerprint
            design = compile_point(ctx, point)
        kernels = [fingerprint(k) for k in design.kernels]
    except TimeLimitExceeded:
        return None                     # evaluate() runs it uncached and reports the time-out
    except Exception:                   # noqa: BLE001 - evaluate() reports it as a FAIL row
        compiled = False
    if model.source is not None:
        # the data a user's model reads (weights beside it, a dataset) decides its result as much
        # as its source: key on their content, or refuse to cache what cannot be fingerprinted
        try:
            common["model"]["reads"] = {str(f): _file_digest(f)
                                        for f in sorted(import_reads(model.source) | reads)}
        except OSError:
            return None
    if not compiled:
        return {"compiled": False, "knobs": {k: repr(v) for k, v in point.knobs.items()}, **common}
    return {"compiled": True, "kernels": kernels, "plan": repr((design.phases, design.host)),
            "knobs": design.config.as_dict(), **common}


def _timing_material(ctx, target_mhz: float | None = None) -> Any:
    """Place-and-route settings of a point at `target_mhz` and nextpnr's version, when the
    evaluation runs it."""
    if not getattr(ctx, "timing", False):
        return False
    try:
        from compiler.pnr.timing import nextpnr_tool, nextpnr_version
        family = {"ecp5": "ecp5", "ice40": "ice40"}.get(ctx.target, ctx.target)
        version = nextpnr_version(family)
        tool = nextpnr_tool(family)
    except Exception as exc:            # noqa: BLE001 - no nextpnr for the target: the row says why
        tool, version = None, f"unavailable ({type(exc).__name__})"
    options = ctx.timing.options(target_mhz)
    if not options["regroup"]:          # placed as before copies were regrouped: the key it had
        del options["regroup"]
    if not options["repair"]:           # routed once, as before the repair: the key it had
        del options["repair"]
    if ctx.timing.more:                 # more runs, another result (one run keeps the key it had)
        options["more"] = [list(r) for r in ctx.timing.more]
    if ctx.timing.check_netlist:        # a row with netlist_check (one without keeps the key it had)
        options["check_netlist"] = True
    return {"tool": tool, "version": version, "stage_timeout_s": ctx.stage_timeout_s, "options": options}


def make_key(material: dict[str, Any]) -> str:
    """The entry's key: the material, the cache format and every file of both packages."""
    return EVALS.key(material)


def cacheable(row: dict[str, Any], compiled: bool = True) -> bool:
    """Compiled points: OK rows, and rows whose design computed a wrong result; not tool
    failures. Points that did not compile: their failure to configure, build or compile."""
    if not compiled:
        return (row.get("status") == "FAIL" and row.get("stage") in PRE_IR_STAGES
                and row.get("error_type") not in TRANSIENT_ERRORS)
    if row.get("status") == "OK":
        return True
    return row.get("stage") in CACHEABLE_FAIL_STAGES and "also failed in" not in (row.get("notes") or "")


# ---------------------------------------------------------------------------------------------
# the store

class EvalCache:
    """Rows on disk under `root` (default: $TINYHW_CACHE/evals), in compiler.cache's layout."""

    def __init__(self, root: str | Path | None = None):
        self.store = EVALS.at(root)
        self.root = self.store.folder

    def path(self, key: str) -> Path:
        return self.store.path(key, "entry.json")

    def get(self, key: str) -> dict[str, Any] | None:
        entry = self.store.read(key)
        row = entry.get("row") if entry is not None else None
        return row if isinstance(row, dict) else None

    def put(self, key: str, row: dict[str, Any], material: dict[str, Any] | None = None) -> None:
        from dse.evaluate import json_safe
        self.store.write(key, {"row": json_safe(row)}, material=material)

    def alias(self, alias_key: str) -> str | None:
        """The key a point's alias (point_material) names, if it was evaluated before."""
        entry = self.store.read(alias_key)
        key = entry.get("alias_of") if entry is not None else None
        return key if isinstance(key, str) else None

    def put_alias(self, alias_key: str | None, key: str, material: dict[str, Any] | None) -> None:
        if alias_key is not None:
            self.store.write(alias_key, {"alias_of": key}, material=material)

    def lock(self, key: str):
        """Exclusive across processes for one key (a no-op without flock)."""
        return self.store.lock(key)


def cached_evaluate(ctx, point: DesignPoint, workdir: str | Path, cache: EvalCache | None,
                    log: Callable[[str], None] | None = None, *,
                    checked: dict[str, Any] | None = None) -> tuple[dict[str, Any], bool, str | None]:
    """(metrics row, served from the cache, key). Without a cache this is
    `evaluate(ctx, point, workdir, checked=checked).as_row()` (`checked`: see evaluate)."""
    from dse.evaluate import one_build
    with one_build():
        return _cached_evaluate(ctx, point, workdir, cache, log, checked)


def _cached_evaluate(ctx, point: DesignPoint, workdir: str | Path, cache: EvalCache | None,
                     log: Callable[[str], None] | None, checked: dict[str, Any] | None):
    from dse.evaluate import evaluate
    extra = {"checked": checked} if checked is not None else {}   # the plain call otherwise
    alias = point_material(ctx, point) if cache is not None and checked is None else None
    alias_key = make_key(alias) if alias is not None else None
    if alias_key is not None and (key := cache.alias(alias_key)) is not None and (row := cache.get(key)) is not None:
        return {**row, "cached": True}, True, key          # evaluated before: not even compiled
    material = key_material(ctx, point) if cache is not None else None
    if cache is None or material is None:
        return evaluate(ctx, point, workdir, log=log, **extra).as_row(), False, None
    key = make_key(material)
    row = cache.get(key)
    if row is not None:
        cache.put_alias(alias_key, key, alias)
        return {**row, "cached": True}, True, key
    with cache.lock(key):
        row = cache.get(key)                # another process may have just finished it
        if row is not None:
            return {**row, "cached": True}, True, key
        t0 = time.perf_counter()
        row = evaluate(ctx, point, workdir, log=log, **extra).as_row()
        if cacheable(row, material["compiled"]):
            cache.put(key, row, {**material, "evaluated_in_s": round(time.perf_counter() - t0, 3)})
            cache.put_alias(alias_key, key, alias)
    return row, False, key
