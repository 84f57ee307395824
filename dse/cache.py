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
    versions    Yosys (its banner), tinygrad, amaranth, numpy, the tinyhw package, and a
                SHA-256 of the source files that turn IR into numbers (compiler/, and dse's
                evaluate, zoo and user_model modules). The package version alone would not do:
                the project is installed editable, so its version stays put while the
                generated hardware changes, and a stale hit would be a wrong row.

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

Files: `<root>/<key[:2]>/<key>.json` ({"key", "material", "row", "created"}), written to a
temporary file in the same folder and moved into place with os.replace, so a reader never
sees half an entry. Two processes that want the same missing key serialise on an flock of
`<key>.lock`: the second waits, then reads the first one's result instead of evaluating again.
"""
from __future__ import annotations

import contextlib
import datetime
import functools
import hashlib
import json
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterator

from dse.files import atomic_write_text
from dse.paths import eval_cache_dir
from dse.spec import DesignPoint

try:
    import fcntl
except ImportError:                 # no flock (Windows): concurrent misses evaluate twice, harmlessly
    fcntl = None  # type: ignore[assignment]

CACHE_FORMAT = 1
"""Bumped when the entry layout or the key material changes meaning."""

CACHEABLE_FAIL_STAGES = ("check", "confirm")
PRE_IR_STAGES = ("config", "build", "compile")
TRANSIENT_ERRORS = frozenset({"MemoryError", "OSError", "TimeoutError", "TimeLimitExceeded", "ToolError",
                              "KeyboardInterrupt"})


def cache_dir() -> Path:
    """$TINYHW_CACHE/evals, TINYHW_CACHE defaulting to ~/.cache/tinyhw (dse.paths)."""
    return eval_cache_dir()


# ---------------------------------------------------------------------------------------------
# the key

def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"


@functools.lru_cache(maxsize=None)
def _yosys_version() -> str:
    from compiler.tools import ToolError, yosys_version
    try:
        return yosys_version()
    except (ToolError, OSError) as exc:
        return f"unavailable ({exc})"


def _source_files() -> list[Path]:
    import compiler
    import dse
    files = sorted(Path(compiler.__file__).parent.rglob("*.py"))
    dse_dir = Path(dse.__file__).parent
    files += [dse_dir / name for name in ("evaluate.py", "estimate.py", "zoo.py", "user_model.py")]
    return files


@functools.lru_cache(maxsize=None)
def code_digest() -> str:
    """SHA-256 over the source of the modules that turn a point into numbers."""
    h = hashlib.sha256()
    import compiler
    base = Path(compiler.__file__).parent.parent
    for f in _source_files():
        h.update(str(f.relative_to(base) if f.is_relative_to(base) else f.name).encode() + b"\0")
        h.update(f.read_bytes() + b"\0")
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def versions() -> dict[str, str]:
    """Versions of everything outside the IR that the numbers depend on (once per process)."""
    return {"yosys": _yosys_version(), "tinygrad": _version("tinygrad"), "amaranth": _version("amaranth"),
            "numpy": _version("numpy"), "tinyhw": _version("tinyhw"), "code": code_digest(),
            "format": str(CACHE_FORMAT)}


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def key_material(ctx, point: DesignPoint) -> dict[str, Any] | None:
    """What determines `point`'s row under `ctx` (an EvalContext); None for a model the context
    does not know. A point that does not compile has no IR: its material is then its definition
    alone, marked `"compiled": False` (only its compile-time failure is stored under it)."""
    try:
        model = ctx.model(point.model)
    except KeyError:
        return None
    if model.trained is not None:
        # a trained network's result is its weights' and its data's content, not their names
        t = model.trained
        try:
            definition: dict[str, Any] = {
                "trained": t.kind, "sha256": _file_digest(t.path), "dataset": t.data.dataset,
                "data_sha256": _file_digest(t.data.file) if t.data.file is not None else None,
                "samples": t.data.samples}
        except OSError:
            return None
    elif model.builtin is not None:
        definition = {"builtin": model.builtin, "params": dict(model.params)}
    elif model.onnx is not None:
        try:
            definition = {"onnx_sha256": _file_digest(model.onnx)}
        except OSError:
            return None
    else:
        try:
            digest = _file_digest(model.source)
        except OSError:
            return None
        definition = {"source_sha256": digest, "function": model.function,
                      "params": {k: repr(v) for k, v in model.params.items()}}
    if model.files is not None:
        f = model.files
        try:
            definition["files"] = {
                "weights_sha256": _file_digest(f.weights) if f.weights is not None else None,
                "data": None if f.data is None else {
                    "dataset": f.data.dataset, "samples": f.data.samples, "input": f.data.input,
                    "sha256": _file_digest(f.data.file) if f.data.file is not None else None}}
        except OSError:
            return None
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
        "timing": _timing_material(ctx),
        # flat synthesis keeps the keys it always had; per-unit counts are other numbers
        **({"synthesis": ctx.synthesis} if ctx.synthesize and getattr(ctx, "synthesis", "flat") != "flat" else {}),
        "versions": versions(),
    }
    from dse.limits import TimeLimitExceeded, time_limit
    from dse.user_model import import_reads, recording_reads
    compiled, reads = True, set()
    try:
        from compiler import compile_model
        from compiler.ir import fingerprint
        from dse import zoo
        from dse.zoo import input_tensors
        with recording_reads() as reads, time_limit(ctx.stage_timeout_s, "building and compiling for the cache key"):
            config = point.hardware_config()
            built = model.build(point.dtype)
            arrays = zoo.make_inputs(built, ctx.data_seed, rng)
            design = compile_model(built.forward(*input_tensors(built, arrays)), config=config)
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
            "knobs": config.as_dict(), **common}


def _timing_material(ctx) -> Any:
    """Place-and-route settings and nextpnr's version, when the evaluation runs it."""
    if not getattr(ctx, "timing", False):
        return False
    try:
        from compiler.pnr import nextpnr_tool, nextpnr_version
        family = {"ecp5": "ecp5", "ice40": "ice40"}.get(ctx.target, ctx.target)
        version = nextpnr_version(family)
        tool = nextpnr_tool(family)
    except Exception as exc:            # noqa: BLE001 - no nextpnr for the target: the row says why
        tool, version = None, f"unavailable ({type(exc).__name__})"
    material = {"tool": tool, "version": version, "stage_timeout_s": ctx.stage_timeout_s}
    if not ctx.timing.is_default:       # `timing: true` keeps the key it had before the settings existed
        material["options"] = ctx.timing.options()
    return material


def make_key(material: dict[str, Any]) -> str:
    text = json.dumps(material, sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


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
    """Rows on disk under `root` (default: cache_dir())."""

    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root is not None else cache_dir()

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            entry = json.loads(self.path(key).read_text())
        except (OSError, ValueError):
            return None
        row = entry.get("row") if isinstance(entry, dict) else None
        return row if isinstance(row, dict) else None

    def put(self, key: str, row: dict[str, Any], material: dict[str, Any] | None = None) -> None:
        from dse.evaluate import json_safe
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        entry = {"key": key, "material": material, "row": json_safe(row),
                 "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        atomic_write_text(path, json.dumps(entry, indent=1, default=repr) + "\n")

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Exclusive across processes for one key (a no-op without flock)."""
        if fcntl is None:
            yield
            return
        path = self.root / key[:2] / f"{key}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)


def cached_evaluate(ctx, point: DesignPoint, workdir: str | Path, cache: EvalCache | None,
                    log: Callable[[str], None] | None = None, *,
                    checked: dict[str, Any] | None = None) -> tuple[dict[str, Any], bool, str | None]:
    """(metrics row, served from the cache, key). Without a cache this is
    `evaluate(ctx, point, workdir, checked=checked).as_row()` (`checked`: see evaluate)."""
    from dse.evaluate import evaluate
    extra = {"checked": checked} if checked is not None else {}   # the plain call otherwise
    material = key_material(ctx, point) if cache is not None else None
    if cache is None or material is None:
        return evaluate(ctx, point, workdir, log=log, **extra).as_row(), False, None
    key = make_key(material)
    row = cache.get(key)
    if row is not None:
        return _with_pnr_settings(row, ctx), True, key
    with cache.lock(key):
        row = cache.get(key)                # another process may have just finished it
        if row is not None:
            return _with_pnr_settings(row, ctx), True, key
        t0 = time.perf_counter()
        row = evaluate(ctx, point, workdir, log=log, **extra).as_row()
        if cacheable(row, material["compiled"]):
            cache.put(key, row, {**material, "evaluated_in_s": round(time.perf_counter() - t0, 3)})
    return row, False, key


def _with_pnr_settings(row: dict[str, Any], ctx) -> dict[str, Any]:
    """A row cached before the metrics recorded the nextpnr settings (pnr_router ...) gets them
    from the context: its key holds them, so they are the ones it was measured with."""
    if ctx.timing is None or row.get("fits") is None or row.get("pnr_router") is not None:
        return row
    return {**row, **ctx.timing.row_fields()}
