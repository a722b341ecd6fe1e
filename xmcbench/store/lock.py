"""Serialising writers to one DuckDB file, and retrying readers.

DuckDB lets one process at a time open a database file read-write (others get "Conflicting lock
is held"), and read-only opens fail while a writer has it. Several ``xmcbench run`` processes
finishing together must all be recorded, so every write goes through the same short protocol:

1. take an exclusive OS lock on ``<db>.lock`` (``fcntl.flock``; waits, retrying, up to a timeout),
2. open the database read-write (retrying while a reader holds it briefly),
3. write in one transaction, close,
4. release the lock.

Readers take no lock file: they open read-only for the duration of one query and retry on a lock
conflict, so they never hold a writer up for longer than a query.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import duckdb

from xmcbench.errors import XmcbenchError

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 120.0  # a write holds the lock for milliseconds; minutes means something is stuck
_POLL_S = (0.005, 0.2)  # first and largest sleep between tries (doubles in between)


class DatabaseLockTimeout(XmcbenchError):
    """The results database stayed locked by another process for longer than the timeout."""


def lock_path(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".lock")


def _try_lock(fd: int) -> bool:
    try:
        import fcntl
    except ImportError:  # Windows
        import msvcrt

        os.lseek(fd, 0, os.SEEK_SET)  # msvcrt locks bytes from the current position
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _unlock(fd: int) -> None:
    try:
        import fcntl
    except ImportError:  # Windows
        import msvcrt

        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        return
    fcntl.flock(fd, fcntl.LOCK_UN)


def _sleeps(timeout_s: float) -> Iterator[None]:
    """Yield once per try until ``timeout_s`` has passed, sleeping with capped exponential backoff."""
    deadline = time.monotonic() + timeout_s
    pause = _POLL_S[0]
    while True:
        yield
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        time.sleep(min(pause, remaining))
        pause = min(pause * 2, _POLL_S[1])


@contextmanager
def write_lock(db_path: Path, timeout_s: float = DEFAULT_TIMEOUT_S) -> Iterator[None]:
    """Hold the exclusive lock on ``<db>.lock`` (works across processes and across threads)."""
    path = lock_path(db_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        for _ in _sleeps(timeout_s):
            if _try_lock(fd):
                break
        else:
            raise DatabaseLockTimeout(
                f"{path}: could not lock the results database within {timeout_s:.0f} s; another "
                f"xmcbench process is writing to it (or hung while doing so). Wait and retry, or "
                f"stop the stuck process; the lock is released automatically when it exits"
            )
        try:
            yield
        finally:
            _unlock(fd)
    finally:
        os.close(fd)


def is_lock_conflict(exc: BaseException) -> bool:
    """DuckDB's error when another process has the file open in a conflicting mode."""
    return isinstance(exc, duckdb.IOException) and "lock" in str(exc).lower()


def retry_on_conflict(action: Callable[[], T], what: str, db_path: Path, timeout_s: float = DEFAULT_TIMEOUT_S) -> T:
    """Run ``action`` (which opens the database), retrying while another process holds it."""
    last: BaseException | None = None
    for _ in _sleeps(timeout_s):
        try:
            return action()
        except duckdb.Error as exc:
            if not is_lock_conflict(exc):
                raise
            last = exc
    raise DatabaseLockTimeout(
        f"{db_path}: could not {what} within {timeout_s:.0f} s because another process kept the "
        f"database open ({last}). Wait and retry, or stop that process"
    )
