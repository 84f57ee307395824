"""Loading a user's model function from a Python file named in a spec (`source: file.py:build`).

A user's file is their code, run in this process: importing it runs under a time limit
(IMPORT_TIME_LIMIT_S), and the files it reads (trained weights next to it, a dataset) are
recorded so the evaluation cache can key on their content (`recording_reads`, `import_reads`).
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import inspect
import os
import site
import sys
import sysconfig
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

from dse.limits import TimeLimitExceeded, time_limit

DEFAULT_FUNCTION = "build"
IMPORT_TIME_LIMIT_S = 60.0
"""Importing a model file only defines functions (and may load weights): a minute is plenty,
and a file that loops forever must not hang `dse validate`."""


class UserModelError(ValueError):
    """The file or function a spec names cannot be used; the message says why."""


def parse_source(text: str) -> tuple[str, str]:
    """Split "models/mine.py:build" into (file, function); the function defaults to `build`."""
    file, sep, function = text.rpartition(":")
    if not sep or not function.isidentifier():
        file, function = text, DEFAULT_FUNCTION
    if not file.endswith(".py"):
        raise UserModelError(f"expected 'path/to/file.py' or 'path/to/file.py:function', got {text!r}")
    return file, function


_modules: dict[tuple[Path, int], ModuleType] = {}


def load_module(file: Path) -> ModuleType:
    """Import `file` (once per modification), reporting a failure with the exception and line."""
    file = file.resolve()
    if not file.is_file():
        raise UserModelError(f"file not found: {file}")
    key = (file, file.stat().st_mtime_ns)
    if key in _modules and _unchanged(_import_reads.get(file, {})):
        return _modules[key]
    name = "dse_user_model_" + hashlib.sha1(str(file).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module    # so dataclasses and pickling inside the file work
    from dse.models.zoo import import_tinygrad
    import_tinygrad()             # user files import tinygrad: its device must be chosen first
    try:
        with recording_reads() as reads, time_limit(IMPORT_TIME_LIMIT_S, f"importing {file.name}"):
            spec.loader.exec_module(module)
    except TimeLimitExceeded:
        del sys.modules[name]
        raise UserModelError(f"importing {file.name} did not finish within {IMPORT_TIME_LIMIT_S:g} s (it is "
                             "your code, run at import: define functions there, do the work in build())") from None
    except (Exception, SystemExit) as e:
        del sys.modules[name]
        raise UserModelError(f"importing {file.name} failed: {type(e).__name__}: {e}{_where(e, file)}") from e
    _modules[key] = module
    _import_reads[file] = {p: _stat(p) for p in reads}
    return module


def import_reads(file: Path) -> frozenset[Path]:
    """The data files `file` read while it was imported (empty if it was not imported here)."""
    return frozenset(_import_reads.get(Path(file).resolve(), {}))


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _unchanged(reads: dict[Path, tuple[int, int] | None]) -> bool:
    """A module that loaded weights at import is imported again when they change."""
    return all(_stat(p) == st for p, st in reads.items())


# ---------------------------------------------------------------------------------------------
# which files a user's code reads

_import_reads: dict[Path, dict[Path, tuple[int, int] | None]] = {}
_recorders: list[set[Path]] = []
_hooked = False


def _system_roots() -> tuple[str, ...]:
    """Files under these are installed software (Python, tinygrad, numpy, ...), not data: the
    cache keys on their versions instead. This package's own source is keyed by its digest."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages(), site.getusersitepackages(),
             *(p for p in sysconfig.get_paths().values()), str(Path(__file__).resolve().parent.parent),
             "/dev", "/proc", "/sys"}
    return tuple(os.path.join(os.path.realpath(r), "") for r in roots if r)


def _audit(event: str, args: tuple) -> None:
    if event != "open" or not _recorders:
        return
    path, mode, flags = args
    if isinstance(mode, str):
        if any(c in mode for c in "wax+"):
            return
    elif isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR):
        return
    if isinstance(path, int):             # a file descriptor: its file was recorded when opened
        return
    try:
        real = Path(os.path.realpath(os.fsdecode(path)))
    except (TypeError, ValueError):
        return
    for recorder in _recorders:
        recorder.add(real)


@contextlib.contextmanager
def recording_reads() -> Iterator[set[Path]]:
    """Collect the data files opened for reading in the body: what a user's model depends on
    besides its source (weights, datasets). Installed software is left out (_system_roots)."""
    global _hooked
    if not _hooked:
        sys.addaudithook(_audit)          # cannot be removed; costs one compare per audited event
        _hooked = True
    seen: set[Path] = set()
    _recorders.append(seen)
    out: set[Path] = set()
    try:
        yield out
    finally:
        _recorders.remove(seen)
        roots = _system_roots()
        out.update(p for p in seen
                   if not str(p).startswith(roots) and "__pycache__" not in p.parts and not p.is_dir())


def _where(e: BaseException, file: Path) -> str:
    if isinstance(e, SyntaxError) and e.lineno:
        return ""   # SyntaxError's message already names the line
    lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if Path(f.filename) == file]
    return f" (line {lines[-1]})" if lines else ""


def load_function(file: Path, function: str) -> Callable[..., Any]:
    """The callable `function` defined in `file`."""
    module = load_module(file)
    fn = getattr(module, function, None)
    if fn is None:
        defined = [n for n, v in vars(module).items()
                   if inspect.isfunction(v) and v.__module__ == module.__name__ and not n.startswith("_")]
        hint = f"; functions defined there: {', '.join(defined)}" if defined else "; it defines no functions"
        raise UserModelError(f"{file.name} has no function {function!r}{hint}")
    if not callable(fn):
        raise UserModelError(f"{file.name}: {function!r} is not a function but {type(fn).__name__} {fn!r}")
    return fn


def bind_params(fn: Callable[..., Any], params: dict[str, Any], where: str) -> dict[str, Any]:
    """Check `fn(dtype, **params)` matches fn's signature; return params with fn's defaults filled in.

    Raises UserModelError naming an unknown or missing parameter."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return dict(params)
    names = [p.name for p in list(sig.parameters.values())[1:]    # the first one is dtype
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    try:
        bound = sig.bind("fp32", **params)
    except TypeError as e:
        takes = f"its parameters: {', '.join(names)}" if names else "it takes no parameters"
        unknown = [k for k in params if k not in names]
        if unknown and not any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()):
            raise UserModelError(f"unknown parameter {unknown[0]!r} for {where}; {takes}") from None
        raise UserModelError(f"{where} cannot be called with these params ({e}); {takes}") from None
    bound.apply_defaults()
    out = {k: v for k, v in bound.arguments.items() if k in names}
    extra = next((p.name for p in sig.parameters.values() if p.kind == p.VAR_KEYWORD), None)
    if extra:
        out.update(bound.arguments.get(extra, {}))
    return out
