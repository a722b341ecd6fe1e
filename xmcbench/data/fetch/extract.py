"""Safe extraction of downloaded archives (.zip, .tar, .tar.gz/.tgz, .tar.bz2, .tar.xz).

Archives come from the internet, so every member is checked before anything is written:

* absolute names (``/etc/passwd``, ``C:\\x``) and names with a ``..`` component are refused;
* symbolic links may only point inside the target folder (checked on the real, resolved path, so
  a chain of links cannot climb out either) and hard links only to files already extracted;
* device files, FIFOs and other special members are refused;
* nothing is ever written through a path whose real location is outside the target.

Extraction is all-or-nothing: members go into a temporary folder next to ``dest`` which is renamed
to ``dest`` only when the whole archive was read without error (including the gzip/zip CRC
checks). On any error the temporary folder is removed and a ``DownloadError`` says what was wrong
with which archive. The format is detected from the file's content, not its name.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import tarfile
import tempfile
import zipfile
from pathlib import Path, PurePosixPath
from typing import Callable, Literal

from xmcbench.errors import DownloadError

__all__ = [
    "ARCHIVE_SUFFIXES",
    "UnsafeArchiveError",
    "archive_kind",
    "extract_archive",
    "is_archive_name",
]

ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
_CHUNK = 1 << 20  # 1 MiB: large enough for throughput, small enough for a smooth progress bar

ProgressCallback = Callable[[int, int], None]  # (bytes of the archive consumed, archive size)


class UnsafeArchiveError(DownloadError):
    """An archive member would be written outside the target folder, or is a special file."""


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
    ``dest`` or is a special file, and ``DownloadError`` for a corrupt or truncated archive or a
    full disk; in every error case nothing is left behind.
    """
    archive = Path(archive)
    dest = Path(dest)
    if dest.exists():
        raise DownloadError(f"cannot extract {archive} into {dest}: the folder already exists")
    kind = archive_kind(archive)
    if kind is None:
        raise DownloadError(
            f"{archive} is not a readable zip or tar archive (truncated or corrupt download?); "
            "delete it and download again"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.extract-", dir=dest.parent))
    try:
        writer = _Writer(archive, tmp)
        if kind == "zip":
            _extract_zip(archive, writer, on_progress)
        else:
            _extract_tar(archive, writer, on_progress)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return writer.files


# --------------------------------------------------------------------------------------------
# member checks and writing


class _Writer:
    """Writes members under ``root`` after checking that each lands inside it."""

    def __init__(self, archive: Path, root: Path):
        self.archive = archive
        self.root = root
        self.real_root = os.path.realpath(root)
        self.files: list[PurePosixPath] = []

    # -- checks -------------------------------------------------------------------------------
    def unsafe(self, name: str, why: str) -> UnsafeArchiveError:
        return UnsafeArchiveError(
            f"refusing to extract {self.archive}: member {name!r} {why}; the archive may be malicious "
            "or damaged, so nothing was extracted"
        )

    def relpath(self, name: str) -> PurePosixPath | None:
        """The member's path relative to the root, or None for the root itself ('./')."""
        text = name.replace("\\", "/")
        if text.startswith("/") or re.match(r"^[A-Za-z]:", text):
            raise self.unsafe(name, "has an absolute path")
        parts = [p for p in PurePosixPath(text).parts if p not in ("", ".")]
        if ".." in parts:
            raise self.unsafe(name, "has a '..' component that points outside the target folder")
        return PurePosixPath(*parts) if parts else None

    def inside(self, real: str) -> bool:
        return real == self.real_root or real.startswith(self.real_root + os.sep)

    def target(self, name: str, rel: PurePosixPath) -> Path:
        """Where ``rel`` goes, after checking that its real parent folder is inside the root.

        The parent is resolved on disk, so a directory symlink extracted earlier cannot be used to
        write outside the root."""
        path = self.root.joinpath(*rel.parts)
        if not self.inside(os.path.realpath(path.parent)):
            raise self.unsafe(name, "would be written through a link that leaves the target folder")
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():  # never write through a link; replace it (tar semantics: last wins)
            path.unlink()
        return path

    # -- members ------------------------------------------------------------------------------
    def directory(self, name: str) -> None:
        rel = self.relpath(name)
        if rel is not None:
            self.target(name, rel).mkdir(exist_ok=True)

    def regular(self, name: str, src) -> None:
        rel = self.relpath(name)
        if rel is None:
            raise self.unsafe(name, "is a file without a name")
        path = self.target(name, rel)
        try:
            with open(path, "wb") as out:
                shutil.copyfileobj(src, out, _CHUNK)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise _disk_full(self.archive, path) from None
            raise
        self.files.append(rel)

    def symlink(self, name: str, link: str) -> None:
        rel = self.relpath(name)
        if rel is None:
            raise self.unsafe(name, "is a link without a name")
        if link.startswith("/") or re.match(r"^[A-Za-z]:", link):
            raise self.unsafe(name, f"is a symbolic link to the absolute path {link!r}")
        path = self.target(name, rel)
        if not self.inside(os.path.realpath(os.path.join(os.path.realpath(path.parent), link))):
            raise self.unsafe(name, f"is a symbolic link to {link!r}, outside the target folder")
        if path.exists():
            if path.is_dir():
                raise self.unsafe(name, "is a symbolic link that would replace a directory")
            path.unlink()
        os.symlink(link, path)

    def hardlink(self, name: str, link: str) -> None:
        if self.relpath(name) is None:
            raise self.unsafe(name, "is a link without a name")
        link_rel = self.relpath(link)  # tar hard links name another member, relative to the root
        source = os.path.realpath(self.root.joinpath(*(link_rel.parts if link_rel else ())))
        if link_rel is None or not self.inside(source) or not os.path.isfile(source):
            raise self.unsafe(name, f"is a hard link to {link!r}, which is not a file extracted before it")
        with open(source, "rb") as src:  # a copy, so the two names never share one inode
            self.regular(name, src)


def _disk_full(archive: Path, path: Path) -> DownloadError:
    free = shutil.disk_usage(path.parent).free
    return DownloadError(
        f"disk full while extracting {archive} into {path.parent} ({free:,} bytes free there); "
        "free some space or set XMCBENCH_HOME to a larger disk, then run the download again"
    )


def _corrupt(archive: Path, exc: BaseException) -> DownloadError:
    return DownloadError(
        f"{archive} is corrupt or truncated ({type(exc).__name__}: {exc}); delete it and download again"
    )


# --------------------------------------------------------------------------------------------
# formats


def _extract_tar(archive: Path, writer: _Writer, on_progress: ProgressCallback | None) -> None:
    size = archive.stat().st_size
    with open(archive, "rb") as raw:
        try:
            with tarfile.open(fileobj=raw, mode="r:*") as tf:
                for member in tf:
                    if member.isdir():
                        writer.directory(member.name)
                    elif member.isfile():
                        src = tf.extractfile(member)
                        assert src is not None  # isfile() members always have data
                        writer.regular(member.name, src)
                    elif member.issym():
                        writer.symlink(member.name, member.linkname)
                    elif member.islnk():
                        writer.hardlink(member.name, member.linkname)
                    else:
                        raise writer.unsafe(member.name, "is a device file, FIFO or other special file")
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
                raise _disk_full(archive, writer.root) from None
            raise _corrupt(archive, exc) from None
        except (tarfile.TarError, EOFError, ValueError) as exc:  # zlib/lzma errors are ValueError-ish
            raise _corrupt(archive, exc) from None
        except Exception as exc:  # zlib.error, lzma.LZMAError: corrupt compressed data
            if type(exc).__module__ in ("zlib", "_lzma", "lzma", "_bz2"):
                raise _corrupt(archive, exc) from None
            raise
    if on_progress:
        on_progress(size, size)


def _extract_zip(archive: Path, writer: _Writer, on_progress: ProgressCallback | None) -> None:
    size = archive.stat().st_size
    done = 0
    try:
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                mode = info.external_attr >> 16
                if info.is_dir():
                    writer.directory(info.filename)
                elif stat.S_ISLNK(mode):
                    writer.symlink(info.filename, zf.read(info).decode("utf-8"))
                elif mode and not stat.S_ISREG(mode) and stat.S_IFMT(mode):
                    raise writer.unsafe(info.filename, "is a device file, FIFO or other special file")
                else:
                    with zf.open(info) as src:  # ZipExtFile checks the CRC when it reaches the end
                        writer.regular(info.filename, src)
                done += info.compress_size
                if on_progress:
                    on_progress(min(done, size), size)
    except DownloadError:
        raise
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise _disk_full(archive, writer.root) from None
        raise _corrupt(archive, exc) from None
    except (zipfile.BadZipFile, EOFError, ValueError, NotImplementedError) as exc:
        raise _corrupt(archive, exc) from None
    except Exception as exc:
        if type(exc).__module__ in ("zlib", "_lzma", "lzma", "_bz2"):
            raise _corrupt(archive, exc) from None
        raise
