"""Loading a user's model function from a Python file named in a spec (`source: file.py:build`)."""
from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

DEFAULT_FUNCTION = "build"


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
    if key in _modules:
        return _modules[key]
    name = "dse_user_model_" + hashlib.sha1(str(file).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module    # so dataclasses and pickling inside the file work
    from dse.zoo import import_tinygrad
    import_tinygrad()             # user files import tinygrad: its device must be chosen first
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as e:
        del sys.modules[name]
        raise UserModelError(f"importing {file.name} failed: {type(e).__name__}: {e}{_where(e, file)}") from e
    _modules[key] = module
    return module


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
