"""Files that are either complete or absent, locks between processes, and checksums.

Every file xmcbench writes goes through here, so one rule holds everywhere: a reader (or a
process that starts after a kill) sees the old file or the new one, never half of either.

- ``atomic_write(path, data)``: temp file in the same folder, fsync, ``os.replace``, fsync the
  folder; the temp file is removed if anything fails.
- ``atomic_output(path)``: the same for writers that need a path (``np.savez``, a tar member).
- ``install_dir(tmp, final)``: put a finished folder in place of an old one.
- ``file_lock(path)``: an exclusive lock between processes (``filelock``), saying so when it waits.
- Temp names carry the writer's pid (``.NAME.PID.RANDOM.tmp``) so ``remove_stale_temps`` can
  clean what a killed process left behind without touching a live writer's files.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import filelock

from xmcbench.errors import XmcbenchError

CHUNK = 1 << 20
_TEMP = re.compile(r"^\..+\.(?P<pid>[0-9]+)\.[0-9a-f]+\.tmp$")


def utc_now() -> str:
    """The current time as ISO 8601 in UTC, to the second (what records store)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def temp_path(path: str | os.PathLike) -> Path:
    """A fresh temp name beside ``path`` that records this process's pid."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def fsync_path(path: Path) -> None:
    """Flush a file or folder to disk, so a power cut cannot leave a renamed-but-empty file."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # some platforms cannot open a folder; the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_output(path: str | os.PathLike, mode: int = 0o644) -> Iterator[Path]:
    """Yield a temp path to write; on success it replaces ``path`` (fsynced), on error it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:  # a failed write() names no file: this one
            exc.filename = str(path)
        raise
    fsync_path(path.parent)


def atomic_write(path: str | os.PathLike, data: bytes | str) -> None:
    """Write ``data`` (bytes, or text as UTF-8) to ``path`` all at once."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_output(path) as tmp:
        tmp.write_bytes(payload)


def to_json(data: Any, *, indent: int | None = 2) -> str:
    """Strict JSON: NaN and infinities are refused (they are not JSON), not written bare."""
    try:
        return json.dumps(data, indent=indent, allow_nan=False, default=str)
    except ValueError as exc:
        raise XmcbenchError(f"refusing to write invalid JSON: {exc}") from None


def write_json(path: str | os.PathLike, data: Any) -> None:
    atomic_write(path, to_json(data) + "\n")


def install_dir(tmp: Path, final: Path) -> None:
    """Move the finished folder ``tmp`` to ``final``, replacing an older one."""
    final.parent.mkdir(parents=True, exist_ok=True)
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.{os.getpid()}.{secrets.token_hex(4)}.old")
        os.replace(final, old)
    os.replace(tmp, final)
    fsync_path(final.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (a process we may not signal still exists)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:
        return False
    return True


def remove_stale_temps(folder: str | os.PathLike, *, recursive: bool = False, only_dead: bool = True) -> list[Path]:
    """Delete temp files and folders in ``folder`` whose writing process is dead; return them.

    ``only_dead=False`` removes every xmcbench temp there, for folders with one writer by design
    (a run's checkpoints, under the run's lock), where this process's own debris is stale too.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    removed = []
    entries = folder.rglob(".*.tmp") if recursive else folder.glob(".*.tmp")
    for entry in list(entries):
        match = _TEMP.match(entry.name)
        if match is None or (only_dead and pid_alive(int(match["pid"]))):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


@contextmanager
def file_lock(
    path: str | os.PathLike, *, timeout: float = -1, on_wait: Callable[[str], None] | None = None, what: str = ""
) -> Iterator[None]:
    """Hold an exclusive inter-process lock on ``path`` for the block.

    When another process holds it, ``on_wait`` is told once before this one blocks; with a
    ``timeout`` (seconds) an XmcbenchError says who to wait for instead of blocking forever.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        if timeout == 0:
            raise XmcbenchError(
                f"{what or path} is in use by another xmcbench process; wait for it to finish"
            ) from None
        if on_wait is not None:
            on_wait(f"waiting for another xmcbench process ({what or path}) …")
        try:
            lock.acquire(timeout=timeout)
        except filelock.Timeout:
            raise XmcbenchError(
                f"{what or path} stayed locked by another xmcbench process for {timeout:.0f} s; "
                "wait for it, or stop it (the lock is released when it exits)"
            ) from None
    try:
        yield
    finally:
        lock.release()


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=@-]*$")
MAX_NAME_LEN = 100


def check_name(name: object, what: str) -> str:
    """``name`` if it can safely become one path component (a dataset, run id, repo part), else an error.

    Letters, digits and ``. _ + = @ -``, starting with a letter or digit: no separators, no
    ``..``, nothing hidden, nothing a shell or another OS would read differently.
    """
    if not isinstance(name, str) or not name:
        raise XmcbenchError(f"{what} must be a non-empty name, got {name!r}")
    if len(name) > MAX_NAME_LEN:
        raise XmcbenchError(f"{what} {name[:40]!r}… is longer than {MAX_NAME_LEN} characters")
    if not _NAME.match(name) or ".." in name:
        raise XmcbenchError(
            f"{what} {name!r} cannot be used as a file name: use letters, digits and . _ + = @ - "
            "(no slashes, no '..', not starting with '.')"
        )
    return name
