"""A study's journal file (Optuna's JournalStorage: one JSON record per line, appended under a
lock) that survives a write cut short.

A process killed, a full disk or a power loss in the middle of an append leaves the journal's
last record torn: a prefix of it without its line end (or a run of zero bytes, after a power
loss). Optuna's reader skips such a tail, but the next append is glued to it and makes a line no
reader can parse: the study could no longer be opened. Here:

    opening (`open_journal`)    a torn record (the tail, or one glued to the start of a later
                                record) is cut out of the file and its bytes kept in a side
                                file, study.journal.torn-<UTC time>; one line on stderr says what
                                was dropped. A last record that lost only its line end gets it back.
    appending (`RepairingBackend`)
                                checks, under the journal's lock, that the file ends with a line
                                end, and repairs a torn tail first (a process of the same study
                                that died mid-write), so its own record is never glued to one.
                                The lock is an flock (`FlockJournalLock`): a writer killed
                                mid-append holds nobody up.
    anything else               a line that is not a record, not valid JSON, or a journal Optuna
                                cannot replay: `JournalError`, one line naming the file, the line
                                and the way out (--fresh sets the damaged file aside and starts
                                over; trials.csv keeps the rows of the last run).

A torn record dropped is a write that never happened: every record before it is intact. When it
was the outcome of a trial, that trial stays RUNNING in the journal, is failed as a leftover and
its point runs again (from the evaluation cache when the cache is on).
"""
from __future__ import annotations

import datetime
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

# imported only by dse.study.storage.open_storage and dse.report.read_study_attrs, after
# dse.study.storage.optuna() has made Optuna quiet
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock, JournalStorage

from compiler.tools import FileLock, fcntl
from dse.study.locks import locks_dir

from dse.study.options import SweepError

RECORD_START = b'{"op_code":'        # how Optuna writes every record (json.dumps, op_code first)
OP_CODES = range(0, 11)              # optuna.storages.journal._storage.JournalOperation
_WHAT = {0: "the creation of a study", 1: "the deletion of a study", 2: "a study attribute",
         3: "a study system attribute", 4: "the creation of a trial", 5: "a parameter of {trial}",
         6: "the state of {trial}", 7: "an intermediate value of {trial}", 8: "an attribute of {trial}",
         9: "a system attribute of {trial}", 10: "discarded trials"}


class JournalError(SweepError):
    """A journal damaged beyond a torn last record."""


@dataclass(frozen=True, kw_only=True)
class Torn:
    """A record cut short: its bytes and where they began."""
    line: int                   # 1-based line of the journal it was on
    offset: int
    data: bytes
    glued: bool                 # a later record was appended right after it, on the same line

    def describe(self, trial_number: Callable[[int], int | None] = lambda i: None) -> str:
        """What the record was, as far as its surviving bytes say."""
        if not self.data.strip(b"\0\n"):
            return "zero bytes" if b"\0" in self.data else "an empty line"
        m = re.match(rb'\{"op_code":(\d+)', self.data)
        if not m or int(m.group(1)) not in _WHAT:
            return "an unreadable record"
        t = re.search(rb'"trial_id":(\d+)[,}]', self.data)     # not a number the cut shortened
        number = trial_number(int(t.group(1))) if t else None
        trial = f"trial {number}" if number is not None else "a trial"
        return _WHAT[int(m.group(1))].format(trial=trial)


@dataclass(frozen=True, kw_only=True)
class Scan:
    """A journal's bytes read and judged: the content to keep, and what was torn."""
    kept: bytes
    torn: tuple[Torn, ...]
    newline_restored: bool = False      # the last record was whole but for its line end

    @property
    def damaged(self) -> bool:
        return bool(self.torn) or self.newline_restored


def _record(line: bytes) -> bool:
    """Whether `line` (without its line end) is one whole journal record."""
    try:
        log = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(log, dict) and log.get("op_code") in OP_CODES and isinstance(log.get("worker_id"), str)


def _torn_prefix(data: bytes) -> bool:
    """Whether `data` can be the beginning of a record whose write stopped (or the zero bytes a
    power loss leaves): anything else is not a torn write but damage."""
    if not data.strip(b"\0"):
        return True
    return data.startswith(RECORD_START) or RECORD_START.startswith(data)


def scan(path: Path, data: bytes) -> Scan:
    """Judge a journal's bytes; raises JournalError for damage other than torn records."""
    lines = data.split(b"\n")
    kept: list[bytes] = []
    torn: list[Torn] = []
    offset = 0
    for i, line in enumerate(lines[:-1], start=1):
        if _record(line):
            kept.append(line)
        elif not line.strip(b"\0"):        # zero bytes (a power loss), or an empty line: no data
            torn.append(Torn(line=i, offset=offset, data=line + b"\n", glued=False))
        else:
            cut = _glued_record(line)
            if cut is None:
                raise JournalError(damage_message(path, i, line))
            torn.append(Torn(line=i, offset=offset, data=line[:cut], glued=True))
            kept.append(line[cut:])
        offset += len(line) + 1
    tail, restored = lines[-1], False
    if tail:
        if _record(tail):
            kept.append(tail)
            restored = True
        elif _torn_prefix(tail):
            torn.append(Torn(line=len(lines), offset=offset, data=tail, glued=False))
        else:
            raise JournalError(damage_message(path, len(lines), tail))
    text = b"".join(k + b"\n" for k in kept)
    return Scan(kept=text, torn=tuple(torn), newline_restored=restored)


def _glued_record(line: bytes) -> int | None:
    """Where a whole record starts in `line` after a torn one glued before it, if it does."""
    start = line.find(RECORD_START, 1)
    while start > 0:
        if _torn_prefix(line[:start]) and _record(line[start:]):
            return start
        start = line.find(RECORD_START, start + 1)
    return None


def damage_message(path: Path, line: int, data: bytes) -> str:
    shown = data[:60].decode("utf-8", "replace")
    return (f"{path}: line {line} is not an Optuna journal record ({shown!r}{'...' if len(data) > 60 else ''}): "
            f"the study cannot be read past it. {way_out(path)}")


def way_out(path: Path) -> str:
    rows = ""
    csv = path.with_name("trials.csv")
    if csv.is_file():
        with open(csv, "rb") as f:
            n = max(0, sum(1 for _ in f) - 1)
        rows = f"; {csv} keeps the {n} row{'s' * (n != 1)} of the last run"
    return (f"`dse sweep SPEC --fresh` sets it aside and starts over (points already evaluated come back "
            f"from the evaluation cache){rows}")


def side_file(path: Path, kind: str) -> Path:
    """A new file beside `path` for bytes set aside: <name>.<kind>-<UTC time>[-N]."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    candidate = path.with_name(f"{path.name}.{kind}-{stamp}")
    n = 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}.{kind}-{stamp}-{n}")
    return candidate


def _fsync_write(path: Path, data: bytes) -> None:
    with open(path, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def repair(path: Path, found: Scan) -> Path | None:
    """Rewrite the journal without its torn records (the caller holds the journal's lock); their
    bytes go to a side file, which is returned. Only a tail is cut in place (a reader's offsets
    into the rest stay valid); a torn record inside the file means rewriting it whole."""
    kept_torn = None
    if found.torn:
        kept_torn = side_file(path, "torn")
        _fsync_write(kept_torn, b"".join(t.data for t in found.torn))
    if found.newline_restored and not found.torn:
        with open(path, "ab") as f:
            f.write(b"\n")
    elif all(not t.glued and t.offset == len(found.kept) for t in found.torn) and not found.newline_restored:
        os.truncate(path, len(found.kept))     # only the tail: cut in place
    else:
        tmp = path.with_name(f".{path.name}.repair.tmp")
        with open(tmp, "wb") as f:
            f.write(found.kept)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    return kept_torn


def repair_message(path: Path, found: Scan, kept: Path | None,
                   trial_number: Callable[[int], int | None] = lambda i: None) -> str:
    if not found.torn:
        return f"{path}: its last record had lost its line end (a write cut short): restored, nothing dropped"
    what = "; ".join(t.describe(trial_number) for t in found.torn)
    n = sum(len(t.data) for t in found.torn)
    where = ("its last record was" if len(found.torn) == 1 and not found.torn[0].glued
             else f"{len(found.torn)} record{'s were' if len(found.torn) > 1 else ' was'}")
    return (f"{path}: {where} cut short (a write interrupted by a kill, a full disk or a power loss): "
            f"dropped {n} bytes ({what}), kept in {kept.name if kept else '-'}; every other record is intact")


def _say(line: str) -> None:
    print(f"note: {line}", file=sys.stderr, flush=True)


class FlockJournalLock:
    """The lock every writer of the journal takes (Optuna's lock interface: acquire, release):
    an flock on study.journal.locks/journal.lock,
    which the kernel drops when its holder dies. Optuna's default lock is a symlink that a
    process killed mid-write leaves behind; the next writer then waits for Optuna's 30 s grace
    period, and forever when the journal's path is relative (the link dangles, and Optuna's wait
    loop retries it without end). Without flock (Windows): Optuna's lock, on the absolute path."""

    def __init__(self, journal: Path) -> None:
        self._lock = FileLock(locks_dir(Path(journal)) / "journal.lock")
        self._fallback = JournalFileSymlinkLock(os.path.abspath(journal)) if fcntl is None else None

    def acquire(self) -> bool:
        if self._fallback is not None:
            return self._fallback.acquire()
        return self._lock.acquire()

    def release(self) -> None:
        if self._fallback is not None:
            self._fallback.release()
            return
        self._lock.release()


class _Locked:
    def __init__(self, path: Path) -> None:
        self.lock = FlockJournalLock(path)

    def __enter__(self) -> None:
        self.lock.acquire()

    def __exit__(self, *exc) -> None:
        self.lock.release()


def check_and_repair(path: Path, *, whole_file: bool) -> tuple[Scan, Path | None] | None:
    """Under the journal's lock: repair torn records; None when there was none. Without
    `whole_file` only a file whose last line is not a whole record is scanned (the cheap look at
    every open: Optuna's reader skips a bad last line silently, and finds damage further in)."""
    if not path.is_file():
        return None
    with _Locked(path):
        data = path.read_bytes()
        if not data or (not whole_file and data.endswith(b"\n") and _record(data[:-1].rsplit(b"\n", 1)[-1])):
            return None
        found = scan(path, data)
        if not found.damaged:
            return None
        return found, repair(path, found)


class RepairingBackend(JournalFileBackend):
    """Optuna's journal file backend that never glues a record to a torn one, and reports a
    damaged journal as a JournalError instead of a decoder traceback."""

    def __init__(self, path: str) -> None:
        self._path = Path(path)
        self._journal_lock = FlockJournalLock(self._path)
        super().__init__(path, lock_obj=self._journal_lock)

    def read_logs(self, log_number_from: int) -> Iterator[dict[str, Any]]:
        try:
            yield from super().read_logs(log_number_from)
        except (ValueError, UnicodeDecodeError):        # JSONDecodeError is a ValueError
            raise JournalError(f"{self._path}: cannot be read past a damaged line. "
                               f"{way_out(self._path)}") from None

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        text = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs).encode()
        self._journal_lock.acquire()
        try:
            self._repair_tail()
            with open(self._path, "ab") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
        finally:
            self._journal_lock.release()

    def _repair_tail(self) -> None:
        """A tail without a line end, seen under the lock, is a write that stopped."""
        with open(self._path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0:
                return
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return
            start = max(0, size - (1 << 20))
            f.seek(start)
            chunk = f.read()
        line_start = chunk.rfind(b"\n") + 1
        if line_start == 0 and start > 0:       # a torn record over 1 MiB: read it all
            data = self._path.read_bytes()
            start, chunk, line_start = 0, data, data.rfind(b"\n") + 1
        tail_offset = start + line_start
        tail = chunk[line_start:]
        if _record(tail):                       # whole but for its line end
            with open(self._path, "ab") as f:
                f.write(b"\n")
            _say(f"{self._path}: its last record had lost its line end (a write cut short): restored, "
                 "nothing dropped")
            return
        if _torn_prefix(tail):
            found = Scan(kept=b"", torn=(Torn(line=0, offset=tail_offset, data=tail, glued=False),))
            kept = side_file(self._path, "torn")
            _fsync_write(kept, tail)
            os.truncate(self._path, tail_offset)
            _say(repair_message(self._path, found, kept))
            return
        raise JournalError(f"{self._path}: its last line is not an Optuna journal record "
                           f"({tail[:60].decode('utf-8', 'replace')!r}). {way_out(self._path)}")


def open_journal(path: Path):
    """The JournalStorage of `path`, with torn records repaired first (told on stderr)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    repaired = check_and_repair(path, whole_file=False)
    try:
        storage = _replay(path)
    except JournalError:                    # damage inside the file: a glued torn record, or worse
        repaired = check_and_repair(path, whole_file=True)
        if repaired is None:
            raise
        storage = _replay(path)
    if repaired is not None:
        found, kept = repaired
        _say(repair_message(path, found, kept, lambda tid: _trial_number(storage, tid)))
    return storage


def _replay(path: Path):
    try:
        return JournalStorage(RepairingBackend(str(path)))
    except JournalError:
        raise
    except Exception as exc:                # noqa: BLE001 - Optuna could not replay what it read
        raise JournalError(f"{path}: Optuna cannot replay it ({type(exc).__name__}: {exc}). "
                           f"{way_out(path)}") from None


def _trial_number(storage, trial_id: int) -> int | None:
    try:
        return storage.get_trial(trial_id).number
    except Exception:                       # noqa: BLE001 - only for the message
        return None


def set_aside(path: Path) -> Path:
    """Move a damaged journal out of the way (for --fresh); returns where it went."""
    dest = side_file(path, "damaged")
    with _Locked(path):
        os.replace(path, dest)
    return dest
