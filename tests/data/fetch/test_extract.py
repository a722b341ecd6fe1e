"""Safe archive extraction: good archives extract, hostile or broken ones are refused with nothing written."""

from __future__ import annotations

import errno
import gzip
import io
import os
import tarfile
import zipfile
from pathlib import Path

import pytest

from xmcbench.data.fetch import extract as extract_mod
from xmcbench.data.fetch.extract import UnsafeArchiveError, archive_kind, extract_archive, is_archive_name
from xmcbench.errors import DownloadError


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as tf:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
            else:
                tf.addfile(info)
    return path


def _file(name: str) -> tarfile.TarInfo:
    return tarfile.TarInfo(name)


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_tar_gz_extracts_nested_files(tmp_path):
    d = tarfile.TarInfo("Data-1K")
    d.type = tarfile.DIRTYPE
    archive = _tar(
        tmp_path / "a.tar.gz",
        [(d, None), (_file("Data-1K/trn.json.gz"), b"train"), (_file("./Data-1K/sub/lbl.txt"), b"labels")],
    )
    seen = []
    files = extract_archive(archive, tmp_path / "out", on_progress=lambda done, total: seen.append((done, total)))
    assert sorted(map(str, files)) == ["Data-1K/sub/lbl.txt", "Data-1K/trn.json.gz"]
    assert (tmp_path / "out/Data-1K/trn.json.gz").read_bytes() == b"train"
    assert (tmp_path / "out/Data-1K/sub/lbl.txt").read_bytes() == b"labels"
    assert seen[-1] == (archive.stat().st_size, archive.stat().st_size)
    assert _leftovers(tmp_path) == ["a.tar.gz", "out"]  # no temporary folder left


@pytest.mark.parametrize("mode", ["w", "w:bz2", "w:xz"])
def test_other_tar_compressions(tmp_path, mode):
    archive = _tar(tmp_path / "a.tar", [(_file("x.txt"), b"hello")], mode=mode)
    assert archive_kind(archive) == "tar"
    extract_archive(archive, tmp_path / "out")
    assert (tmp_path / "out/x.txt").read_bytes() == b"hello"


def test_zip_extracts(tmp_path):
    with zipfile.ZipFile(tmp_path / "a.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("LF-Tiny/trn.json.gz", b"t" * 1000)
        zf.writestr("LF-Tiny/empty/", b"")
    assert archive_kind(tmp_path / "a.zip") == "zip"
    files = extract_archive(tmp_path / "a.zip", tmp_path / "out")
    assert [str(f) for f in files] == ["LF-Tiny/trn.json.gz"]
    assert (tmp_path / "out/LF-Tiny/trn.json.gz").read_bytes() == b"t" * 1000
    assert (tmp_path / "out/LF-Tiny/empty").is_dir()


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE])
def test_links_are_refused_even_inside(tmp_path, kind):
    archive = _tar(
        tmp_path / "a.tar.gz",
        [(_file("data/real.txt"), b"content"), (_link("data/alias.txt", "data/real.txt", kind), None)],
    )
    with pytest.raises(UnsafeArchiveError, match="is a link"):
        extract_archive(archive, tmp_path / "out")
    assert _leftovers(tmp_path) == ["a.tar.gz"]


@pytest.mark.parametrize(
    "members, why",
    [
        ([(_file("../evil"), b"x")], "'..' component"),
        ([(_file("ok/../../evil"), b"x")], "'..' component"),
        ([(_link("escape", "../evil"), None)], "is a link"),
        ([(_link("escape", "/etc/passwd"), None)], "is a link"),
        ([(_link("here", "."), None), (_link("here/up", "../evil"), None)], "is a link"),
        ([(_link("hard", "../../etc/passwd", tarfile.LNKTYPE), None)], "is a link"),
        ([(_link("hard", "nothing-before", tarfile.LNKTYPE), None)], "is a link"),
    ],
)
def test_hostile_tar_members_are_refused(tmp_path, members, why):
    archive = _tar(tmp_path / "bad.tar.gz", [(_file("fine.txt"), b"fine")] + members)
    with pytest.raises(UnsafeArchiveError, match=why):
        extract_archive(archive, tmp_path / "box" / "out")
    assert not (tmp_path / "evil").exists() and not (tmp_path / "box" / "evil").exists()
    assert _leftovers(tmp_path / "box") == []  # even fine.txt is gone: all or nothing


def test_absolute_member_path_is_refused(tmp_path):
    target = tmp_path / "abs-evil"
    archive = _tar(tmp_path / "bad.tar", [(_file(str(target)), b"x")], mode="w")
    with pytest.raises(UnsafeArchiveError, match="absolute path"):
        extract_archive(archive, tmp_path / "out")
    assert not target.exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", [tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE])
def test_device_files_are_refused(tmp_path, kind):
    info = tarfile.TarInfo("dev")
    info.type = kind
    archive = _tar(tmp_path / "dev.tar", [(info, None)], mode="w")
    with pytest.raises(UnsafeArchiveError, match="device file"):
        extract_archive(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_hostile_zip_members_are_refused(tmp_path):
    with zipfile.ZipFile(tmp_path / "bad.zip", "w") as zf:
        zf.writestr("../evil", b"x")
    with pytest.raises(UnsafeArchiveError, match="'..' component"):
        extract_archive(tmp_path / "bad.zip", tmp_path / "out")
    link = zipfile.ZipInfo("escape")
    link.external_attr = 0o120777 << 16  # a symlink entry; its data is the link target
    with zipfile.ZipFile(tmp_path / "link.zip", "w") as zf:
        zf.writestr(link, "../../outside")
    with pytest.raises(UnsafeArchiveError, match="symbolic link"):
        extract_archive(tmp_path / "link.zip", tmp_path / "out")
    assert not (tmp_path / "evil").exists() and not (tmp_path / "out").exists()


def test_truncated_and_corrupt_archives(tmp_path):
    payload = os.urandom(300_000)  # incompressible, so truncation cuts into member data
    good = _tar(tmp_path / "good.tar.gz", [(_file("a.bin"), payload), (_file("b.bin"), payload)])
    data = good.read_bytes()
    (tmp_path / "trunc.tar.gz").write_bytes(data[: len(data) // 2])
    flipped = bytearray(data)
    flipped[len(data) // 3] ^= 0xFF
    (tmp_path / "flip.tar.gz").write_bytes(bytes(flipped))
    for name in ("trunc.tar.gz", "flip.tar.gz"):
        with pytest.raises(DownloadError, match="corrupt or truncated"):
            extract_archive(tmp_path / name, tmp_path / "out")
        assert not (tmp_path / "out").exists()
    (tmp_path / "zip.zip").write_bytes(b"PK\x03\x04 not really a zip")
    (tmp_path / "text.tar.gz").write_bytes(gzip.compress(b"just some text, not a tar"))
    for name in ("zip.zip", "text.tar.gz"):
        with pytest.raises(DownloadError, match="not a readable zip or tar archive"):
            extract_archive(tmp_path / name, tmp_path / "out")
    assert sorted(_leftovers(tmp_path)) == ["flip.tar.gz", "good.tar.gz", "text.tar.gz", "trunc.tar.gz", "zip.zip"]


def test_disk_full_while_extracting(tmp_path, monkeypatch):
    archive = _tar(tmp_path / "a.tar.gz", [(_file("a.bin"), b"x" * 1000)])

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(extract_mod.tarfile, "copyfileobj", full)  # tarfile's own member copy
    with pytest.raises(DownloadError, match="disk full while extracting .* bytes free"):
        extract_archive(archive, tmp_path / "out")
    assert _leftovers(tmp_path) == ["a.tar.gz"]


def test_existing_destination_and_names(tmp_path):
    archive = _tar(tmp_path / "a.tar.gz", [(_file("x"), b"x")])
    (tmp_path / "out").mkdir()
    with pytest.raises(DownloadError, match="already exists"):
        extract_archive(archive, tmp_path / "out")
    assert is_archive_name("X.TGZ") and is_archive_name("a.tar.gz") and is_archive_name("b.zip")
    assert not is_archive_name("trn.json.gz")
    assert archive_kind(tmp_path / "a.tar.gz") == "tar"
    (tmp_path / "plain.gz").write_bytes(gzip.compress(b'{"uid": 1}\n'))
    assert archive_kind(tmp_path / "plain.gz") is None


# --------------------------------------------------------------------------------------------
# archive size


def test_archive_bomb_is_refused_before_writing(tmp_path, monkeypatch):
    monkeypatch.setattr(extract_mod, "MAX_RATIO_BYTES", 100_000)  # a 1 GiB member would take too long here
    archive = _tar(tmp_path / "bomb.tar.gz", [(_file("zeros.bin"), b"\0" * 2_000_000)])
    assert archive.stat().st_size * extract_mod.MAX_RATIO < 2_000_000
    with pytest.raises(
        UnsafeArchiveError, match=r"declare 2,000,000 bytes .* times the archive's .*archive bomb"
    ) as err:
        extract_archive(archive, tmp_path / "out")
    assert "\n" not in str(err.value)
    with zipfile.ZipFile(tmp_path / "bomb.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("zeros.bin", b"\0" * 2_000_000)
    with pytest.raises(UnsafeArchiveError, match="archive bomb"):
        extract_archive(tmp_path / "bomb.zip", tmp_path / "out")
    assert _leftovers(tmp_path) == ["bomb.tar.gz", "bomb.zip"]


def test_archive_larger_than_the_free_space_is_refused(tmp_path, monkeypatch):
    archive = _tar(tmp_path / "a.tar.gz", [(_file("a.bin"), os.urandom(50_000))])

    class Usage:
        total, used, free = 10**9, 10**9 - 1_000, 1_000

    monkeypatch.setattr(extract_mod.shutil, "disk_usage", lambda path: Usage)
    with pytest.raises(DownloadError, match="not enough disk space to extract .* need 50,000 bytes .*1,000 free"):
        extract_archive(archive, tmp_path / "out")
    assert _leftovers(tmp_path) == ["a.tar.gz"]


def test_member_writing_more_than_it_declares_is_stopped(tmp_path):
    with pytest.raises(UnsafeArchiveError, match="holds more than the 10 bytes it declares"):
        extract_mod._copy_at_most(tmp_path / "a.zip", "x", io.BytesIO(b"y" * 11), tmp_path / "x", 10)
