"""How processes on one machine share a study kept in a file (a journal, or SQLite): a lock on
the study, and whether the run that took a trial is still alive. Both are flocks on small files
in a folder beside the storage file (`study.journal` -> `study.journal.locks/`):

    study-<hash>.lock   the study lock: held while a process queues grid points or takes a
                        trial (dse.study.take), as the PostgreSQL advisory lock is on a database
    run-<id>.lock       one per live run (a `dse sweep` or `dse worker`), held for its life: the
                        kernel drops an flock when its process dies, even by SIGKILL, so a
                        RUNNING trial whose run lock can be taken belongs to nobody any more

A run's lock file appears under its final name only once it is locked (it is locked under a
temporary name, then renamed), so a look never mistakes a run that is starting for a dead one.
Without flock (Windows) the study lock does nothing and every run looks dead: a RUNNING trial
found at start is a leftover, the rule of one sweep at a time.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import uuid
from pathlib import Path
from typing import Iterator

from compiler.tools import FileLock, fcntl

LOCKS_SUFFIX = ".locks"


def storage_file(location: str) -> Path | None:
    """The file a storage lives in: a journal path, or the database of a sqlite:/// URL (None
    for a server URL or an in-memory database)."""
    if "://" not in location:
        return Path(location)
    scheme, rest = location.split("://", 1)
    if scheme.split("+", 1)[0].lower() != "sqlite":
        return None
    path = rest[1:] if rest.startswith("/") else rest     # sqlite:///rel.db, sqlite:////abs.db
    return Path(path.split("?", 1)[0]) if path and not path.startswith(":memory:") else None


def locks_dir(file: Path) -> Path:
    return file.with_name(file.name + LOCKS_SUFFIX)


@contextlib.contextmanager
def file_study_lock(file: Path, study_name: str) -> Iterator[None]:
    """Exclusive across processes for one study of the storage in `file`."""
    key = hashlib.sha256(study_name.encode()).hexdigest()[:16]
    with FileLock(locks_dir(file) / f"study-{key}.lock").held():
        yield


class RunLock:
    """This run's lock (see the module docstring); `name` is what a trial it takes records."""

    def __init__(self, file: Path) -> None:
        self.dir = locks_dir(file)
        self.name = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._lock: FileLock | None = None
        if fcntl is None:
            return
        tmp = self.dir / f".{self.name}.tmp"
        lock = FileLock(tmp)
        lock.acquire()
        os.replace(tmp, self._path(self.name))      # the lock goes with the file
        self._lock = lock

    def _path(self, name: str) -> Path:
        return self.dir / f"run-{name}.lock"

    def release(self) -> None:
        if self._lock is not None:
            with contextlib.suppress(OSError):
                self._path(self.name).unlink()
            self._lock.release()
            self._lock = None

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def alive(self, name: str) -> bool:
        """Whether the run `name` still holds its lock (this run: True while not released). A
        dead run's lock file is removed."""
        if name == self.name:
            return self._lock is not None
        return run_alive(self.dir, name)


def run_alive(directory: Path, name: str) -> bool:
    if fcntl is None:
        return False
    path = directory / f"run-{name}.lock"
    if not path.exists():
        return False
    with FileLock(path).held(wait=False) as free:
        if not free:
            return True
        with contextlib.suppress(OSError):
            path.unlink()           # still locked by us: no other look can take it for alive
        return False


@contextlib.contextmanager
def run_lock(location: str) -> Iterator[RunLock | None]:
    """This run's lock for the study in `location` while the block runs (None on a database:
    there, heartbeats say who is alive)."""
    file = storage_file(location)
    if file is None:
        yield None
        return
    with RunLock(file) as run:
        yield run
