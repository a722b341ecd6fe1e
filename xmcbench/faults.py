"""Telling the machine's state and damaged files apart from bugs, in one place.

A full or read-only disk, a permission denied, or a database file that is not a database are
reported as one line that says what to do; anything else keeps its traceback. Every part of
xmcbench that writes (runs, the results database, the judgement cache, the CLI's last resort)
asks these functions, so they agree on what counts as which.

- ``exception_chain(exc)``: ``exc`` and the errors it came from; ``first_line(exc)``: its message's
  first line, or its type's name when it has none (for one-line warnings).
- ``disk_full(exc)`` / ``cannot_write(exc)``: the operating system refused a write (by errno, or in the
  words DuckDB, safetensors and torch pass on without one).
- ``duckdb_conflict(exc)`` / ``duckdb_damaged(exc)``: another process holds the file; the file cannot
  be read as a DuckDB database.
- ``network_failure(exc)``: the HTTP client's timeout or broken connection behind ``exc`` (a rerun
  is the fix, not the user's token or input).
"""

from __future__ import annotations

import errno
from collections.abc import Iterator

from xmcbench.errors import XmcbenchError

DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
NOT_WRITABLE_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM)

# The operating system's words as writers that are not Python's own pass them on (DuckDB's
# IOException text, safetensors' "I/O error: ... (os error 28)"), lower case.
_FULL_WORDS = ("no space left", "file too large", "disk quota", "os error 28", "os error 27", "os error 122")
_NOT_WRITABLE_WORDS = (
    "permission denied",
    "read-only file system",
    "operation not permitted",
    "not a directory",
    "os error 30",
    "os error 13",
)


def exception_chain(exc: BaseException | None, context: bool = True) -> Iterator[BaseException]:
    """``exc``, then the error it was raised from (``raise ... from``) and, with ``context``, the one
    being handled when it was raised; each once."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or (exc.__context__ if context else None)


def _foreign(exc: BaseException) -> bool:
    """An error whose words may be read for the operating system's: not xmcbench's own messages,
    which say "permission denied" of other things (a Google Drive file not shared publicly)."""
    return not isinstance(exc, XmcbenchError)


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def disk_full(exc: BaseException) -> bool:
    """The disk (or the user's quota) is full: freeing space is the fix."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno in DISK_FULL_ERRNOS
    if not _foreign(exc):
        return False
    text = str(exc).lower()
    return any(word in text for word in _FULL_WORDS)


def cannot_write(exc: BaseException) -> bool:
    """The operating system refused a write: a full disk, a read-only file system, no permission."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno in DISK_FULL_ERRNOS + NOT_WRITABLE_ERRNOS
    if not _foreign(exc):
        return False
    text = str(exc).lower()
    return any(word in text for word in _FULL_WORDS + _NOT_WRITABLE_WORDS)


def duckdb_conflict(exc: BaseException) -> bool:
    """Another process holds the DuckDB file's lock (a wait and a retry get past it)."""
    import duckdb

    text = str(exc).lower()
    return isinstance(exc, duckdb.IOException) and ("conflicting lock" in text or "could not set lock" in text)


def duckdb_damaged(exc: BaseException) -> bool:
    """DuckDB cannot read the file as a database (a bad header, a short read, a checksum mismatch),
    and not because of a lock or a refused write. Other DuckDB errors (catalog, binder, constraint)
    are bugs and are not counted."""
    import duckdb

    damage_types = (duckdb.IOException, duckdb.SerializationException, duckdb.InternalException, duckdb.FatalException)
    # "Corrupt database file: computed checksum ... does not match" is a plain duckdb.Error
    if not (type(exc) is duckdb.Error or isinstance(exc, damage_types)):
        return False
    return not duckdb_conflict(exc) and not cannot_write(exc)


def network_failure(exc: BaseException) -> BaseException | None:
    """The Hugging Face client's timeout or transport error (a silent or dropped connection) behind
    ``exc``, if there is one."""
    try:
        import httpx2  # huggingface_hub's HTTP client
    except ImportError:
        return None
    return next((e for e in exception_chain(exc) if isinstance(e, httpx2.TransportError)), None)
