"""Safe extraction of downloaded archives (.zip, .tar, .tar.gz/.tgz, .tar.bz2, .tar.xz).

Archives come from the internet, so nothing is trusted:

* member names are checked first: absolute names (``/etc/passwd``, ``C:\\x``) and names with a
  ``..`` component are refused; links (symbolic or hard), device files and FIFOs are refused
  outright (no XC dataset needs them);
* tar members are then extracted one by one with ``tarfile``'s ``filter="data"``, which refuses
  anything the checks above missed and gives files sane permissions;
* the sizes the members declare are summed before anything is written: an archive that would not
  fit on the disk, or that expands more than ``MAX_RATIO`` times (and beyond ``MAX_RATIO_BYTES``),
  is refused as a likely archive bomb; extraction also stops if a member writes more than it
  declared.

Extraction is all-or-nothing: members go into a temporary folder next to ``dest`` (its name
carries the pid, so a killed process's leftovers are recognised) which is renamed to ``dest`` only
when the whole archive was read without error, including the gzip/zip CRC checks at the very end.
On any error the temporary folder is removed and a ``DownloadError`` says what was wrong with
which archive. The format is detected from the file's content, not its name.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Literal

from rich.filesize import decimal as human_size

from xmcbench import fsutil
from xmcbench.data.fetch.common import LARGER_DISK, NoSpaceError
from xmcbench.errors import DownloadError

__all__ = [
    "ARCHIVE_SUFFIXES",
    "UnsafeArchiveError",
    "archive_kind",
    "extract_archive",
    "is_archive_name",
]

ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
MAX_RATIO = 200  # declared size / archive size above which (and above MAX_RATIO_BYTES) it is refused
MAX_RATIO_BYTES = 1 << 30
_CHUNK = 1 << 20  # 1 MiB: large enough for throughput, small enough for a smooth progress bar

ProgressCallback = Callable[[int, int], None]  # (bytes of the archive consumed, archive size)


class UnsafeArchiveError(DownloadError):
    """An archive member would be written outside the target folder, is a link or a special file,
    or the archive expands beyond reason."""


def is_archive_name(name: str) -> bool:
    """True when the file name ends like an archive this module can extract."""
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def archive_kind(path: str | os.PathLike) -> Literal["zip", "tar"] | None:
    """'zip' or 'tar' (any compression) judged by the file's content; None for anything else."""
    path = Path(path)
    if zipfile.is_zipfile(path):
        return "zip"
    try:
        if tarfile.is_tarfile(path):
            return "tar"
    except (OSError, EOFError):  # a truncated gzip can fail while being sniffed
        return None
    return None


def extract_archive(
    archive: str | os.PathLike,
    dest: str | os.PathLike,
    on_progress: ProgressCallback | None = None,
) -> list[PurePosixPath]:
    """Extract ``archive`` into the new folder ``dest``; return the regular files written (relative).

    ``dest`` must not exist yet. Raises ``UnsafeArchiveError`` for a member that would escape
    ``dest``, a link or special file, or an archive bomb, and ``DownloadError`` for a corrupt or
    truncated archive or a full disk; in every error case nothing is left behind.
    """
    archive = Path(archive)
    dest = Path(dest)
    if dest.exists():
        raise DownloadError(f"cannot extract {archive} into {dest}: the folder already exists")
    kind = archive_kind(archive)
    if kind is None:
        raise DownloadError(
            f"{archive} is not a readable zip or tar archive (truncated or corrupt download?); download it again"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = fsutil.temp_path(dest)
    tmp.mkdir()
    try:
        files = _extract_zip(archive, tmp, on_progress) if kind == "zip" else _extract_tar(archive, tmp, on_progress)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return files


# --------------------------------------------------------------------------------------------
# checks


def _unsafe(archive: Path, name: str, why: str) -> UnsafeArchiveError:
    return UnsafeArchiveError(
        f"refusing to extract {archive}: member {name!r} {why}; the archive may be malicious "
        "or damaged, so nothing was extracted"
    )


def _relpath(archive: Path, name: str) -> PurePosixPath | None:
    """The member's path relative to the root, or None for the root itself ('./')."""
    text = name.replace("\\", "/")
    if text.startswith("/") or re.match(r"^[A-Za-z]:", text):
        raise _unsafe(archive, name, "has an absolute path")
    parts = [p for p in PurePosixPath(text).parts if p not in ("", ".")]
    if ".." in parts:
        raise _unsafe(archive, name, "has a '..' component that points outside the target folder")
    if any("\x00" in p for p in parts):
        raise _unsafe(archive, name, "has a NUL character in its name")
    return PurePosixPath(*parts) if parts else None


def _check_sizes(archive: Path, declared: int, dest: Path) -> None:
    """Refuse an archive whose members declare more than the free space or an absurd expansion."""
    size = max(archive.stat().st_size, 1)
    if declared > MAX_RATIO_BYTES and declared > MAX_RATIO * size:
        raise UnsafeArchiveError(
            f"refusing to extract {archive}: its members declare {declared:,} bytes ({human_size(declared)}), "
            f"{declared / size:,.0f} times the archive's {size:,} bytes (an archive bomb?); nothing was extracted"
        )
    free = shutil.disk_usage(dest).free
    if declared > free:
        raise NoSpaceError(
            f"not enough disk space to extract {archive} into {dest}: its members need {declared:,} bytes "
            f"({human_size(declared)}), {free:,} free ({human_size(free)}); {LARGER_DISK}"
        )


def _disk_full(archive: Path, folder: Path) -> NoSpaceError:
    free = shutil.disk_usage(folder).free
    return NoSpaceError(
        f"disk full while extracting {archive} into {folder} ({free:,} bytes free there); "
        f"{LARGER_DISK}, then run the download again"
    )


def _corrupt(archive: Path, exc: BaseException) -> DownloadError:
    return DownloadError(f"{archive} is corrupt or truncated ({type(exc).__name__}: {exc}); download it again")


def _is_codec_error(exc: BaseException) -> bool:
    """zlib.error, lzma.LZMAError, bz2 errors: corrupt compressed data."""
    return type(exc).__module__ in ("zlib", "_lzma", "lzma", "_bz2")


# --------------------------------------------------------------------------------------------
# formats


def _extract_tar(archive: Path, root: Path, on_progress: ProgressCallback | None) -> list[PurePosixPath]:
    if not hasattr(tarfile, "data_filter"):  # pragma: no cover - Python < 3.10.12
        raise DownloadError("extracting tar archives safely needs Python 3.10.12 or later (tarfile filters)")
    size = archive.stat().st_size
    files: list[PurePosixPath] = []
    with open(archive, "rb") as raw:
        try:
            with tarfile.open(fileobj=raw, mode="r:*") as tf:
                members = tf.getmembers()  # reads every header: sizes are known before writing
                _check_sizes(archive, sum(m.size for m in members if m.isfile()), root)
                for member in members:
                    rel = _relpath(archive, member.name)
                    if member.issym() or member.islnk():
                        raise _unsafe(
                            archive, member.name, f"is a link (to {member.linkname!r}); links are not extracted"
                        )
                    if not (member.isdir() or member.isfile()):
                        raise _unsafe(archive, member.name, "is a device file, FIFO or other special file")
                    if rel is None:
                        if member.isfile():
                            raise _unsafe(archive, member.name, "is a file without a name")
                        continue
                    try:
                        tf.extract(member, root, filter="data")
                    except tarfile.FilterError as exc:
                        raise _unsafe(archive, member.name, f"is refused by tarfile's data filter ({exc})") from None
                    if member.isfile():
                        files.append(rel)
                    if on_progress:
                        on_progress(raw.tell(), size)
                # Read to the very end so that the gzip/bz2/xz trailer (with its CRC) is checked:
                # tarfile stops at the end-of-archive marker and would miss a corrupt tail.
                while tf.fileobj.read(_CHUNK):
                    pass
        except DownloadError:
            raise
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise _disk_full(archive, root) from None
            raise _corrupt(archive, exc) from None
        except (tarfile.TarError, EOFError, ValueError) as exc:
            raise _corrupt(archive, exc) from None
        except Exception as exc:
            if _is_codec_error(exc):
                raise _corrupt(archive, exc) from None
            raise
    if on_progress:
        on_progress(size, size)
    return files


def _extract_zip(archive: Path, root: Path, on_progress: ProgressCallback | None) -> list[PurePosixPath]:
    size = archive.stat().st_size
    files: list[PurePosixPath] = []
    done = 0
    try:
        with zipfile.ZipFile(archive) as zf:
            infos = zf.infolist()
            _check_sizes(archive, sum(i.file_size for i in infos if not i.is_dir()), root)
            for info in infos:
                rel = _relpath(archive, info.filename)
                mode = info.external_attr >> 16
                if stat.S_ISLNK(mode):
                    raise _unsafe(archive, info.filename, "is a symbolic link; links are not extracted")
                if mode and stat.S_IFMT(mode) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                    raise _unsafe(archive, info.filename, "is a device file, FIFO or other special file")
                if rel is None:
                    continue
                path = root.joinpath(*rel.parts)
                if info.is_dir():
                    path.mkdir(parents=True, exist_ok=True)
                else:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    with zf.open(info) as src:  # ZipExtFile checks the CRC when it reaches the end
                        _copy_at_most(archive, info.filename, src, path, info.file_size)
                    files.append(rel)
                done += info.compress_size
                if on_progress:
                    on_progress(min(done, size), size)
    except DownloadError:
        raise
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise _disk_full(archive, root) from None
        raise _corrupt(archive, exc) from None
    except (zipfile.BadZipFile, EOFError, ValueError, NotImplementedError) as exc:
        raise _corrupt(archive, exc) from None
    except Exception as exc:
        if _is_codec_error(exc):
            raise _corrupt(archive, exc) from None
        raise
    return files


def _copy_at_most(archive: Path, name: str, src, path: Path, declared: int) -> None:
    """Copy ``src`` to ``path``, refusing a member that writes more than the size it declared."""
    written = 0
    with open(path, "wb") as out:
        while block := src.read(_CHUNK):
            written += len(block)
            if written > declared:
                raise _unsafe(archive, name, f"holds more than the {declared:,} bytes it declares")
            out.write(block)
