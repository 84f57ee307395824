"""Time limits on work that runs inside this process: a user's model file being imported, a
model being built, the compiler, the Python simulator.

External tools (Yosys, nextpnr, g++) get their own `timeout=` from compiler.tools; this is for
Python code that has no such argument. It uses the interval timer (SIGALRM), so it works in
the main thread of a process on POSIX, which is where `dse` evaluates (the command itself, or
the spawned processes of `--n-jobs`); elsewhere (another thread, Windows) the limit is not
enforced and the work runs to completion. Pure-Python loops are interrupted at the next
bytecode; a long call inside a C extension is interrupted when it returns.
"""
from __future__ import annotations

import contextlib
import signal
import threading
import time
from typing import Iterator


# A signal handler that finds its frame inside a finalizer raises a moment later, not there: an
# exception raised in `__del__` (amaranth's UnusedElaboratable has one, and the garbage
# collector runs them at any bytecode) is printed as "Exception ignored in ..." and dropped.
FINALIZER_RETRY_S = 0.02


def in_finalizer(frame) -> bool:
    """Whether `frame` (a signal handler's) runs inside an object's `__del__`, where an exception
    raised is printed and dropped rather than propagated."""
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


class TimeLimitExceeded(TimeoutError):
    """`what` ran longer than its limit of `seconds`."""

    def __init__(self, what: str, seconds: float):
        super().__init__(f"{what} exceeded its time limit of {seconds:g} s")
        self.what, self.seconds = what, seconds


def _enforceable() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def time_limit(seconds: float | None, what: str) -> Iterator[None]:
    """Raise TimeLimitExceeded in the body once it has run `seconds` (None: no limit). Limits
    nest: an inner limit never extends an outer one, and the outer one keeps its deadline."""
    if seconds is None or not _enforceable():
        yield
        return
    outer_left, _ = signal.getitimer(signal.ITIMER_REAL)
    if outer_left and outer_left <= seconds:      # the outer limit comes first: it is the one
        yield
        return
    ours = object()

    def expire(signum, frame):
        if in_finalizer(frame):                   # it would be dropped: fire again just after
            signal.setitimer(signal.ITIMER_REAL, FINALIZER_RETRY_S)
            return
        raise _Expired(ours)

    previous = signal.signal(signal.SIGALRM, expire)
    start = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _Expired as exc:
        if exc.token is not ours:
            raise
        raise TimeLimitExceeded(what, seconds) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_left:                              # give the outer limit the rest of its time
            left = outer_left - (time.monotonic() - start)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3))


class _Expired(BaseException):
    """Raised by the alarm; a BaseException so that a user's `except Exception:` inside the
    limited code cannot swallow it."""

    def __init__(self, token: object):
        super().__init__()
        self.token = token
