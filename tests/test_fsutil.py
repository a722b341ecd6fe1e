import os
import subprocess
import sys

import pytest

from xmcbench.errors import XmcbenchError
from xmcbench.fsutil import (
    atomic_output,
    atomic_write,
    check_name,
    file_lock,
    remove_stale_temps,
    temp_path,
    write_json,
)


def test_atomic_write_leaves_no_temp_on_error(tmp_path):
    target = tmp_path / "f.bin"
    atomic_write(target, b"old")
    with pytest.raises(RuntimeError), atomic_output(target) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("killed mid-write")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]


def test_a_failed_write_names_the_file_it_was_for(tmp_path):
    """ENOSPC from write() carries no file name; the error says which file could not be written."""
    import errno

    target = tmp_path / "manifest.json"
    with pytest.raises(OSError) as info, atomic_output(target):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert info.value.filename == str(target) and info.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []


def test_json_is_strict(tmp_path):
    with pytest.raises(XmcbenchError, match="invalid JSON"):
        write_json(tmp_path / "x.json", {"a": float("inf")})
    assert not (tmp_path / "x.json").exists()


def test_only_dead_writers_temps_are_removed(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    mine = temp_path(tmp_path / "a")
    mine.write_text("live")
    theirs = tmp_path / f".b.{dead.pid}.0a1b2c3d.tmp"
    theirs.mkdir()
    (theirs / "part").write_text("x")
    other = tmp_path / ".not-ours.tmp"
    other.write_text("unknown writer")
    removed = remove_stale_temps(tmp_path)
    assert removed == [theirs] and mine.exists() and other.exists()


def test_file_lock_times_out_with_a_message(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from xmcbench.fsutil import file_lock\nimport time\n"
            f"with file_lock({str(tmp_path / 'l')!r}):\n print('held', flush=True); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        said = []
        with (
            pytest.raises(XmcbenchError, match="stayed locked"),
            file_lock(tmp_path / "l", timeout=0.3, on_wait=said.append),
        ):
            pass
        assert said and "waiting" in said[0]
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("name", ["", "..", "../x", "a/b", "a\\b", ".x", "a\x00b", "x" * 500, "a b", "-rf"])
def test_names_that_cannot_be_a_folder(name):
    with pytest.raises(XmcbenchError):
        check_name(name, "dataset name")


@pytest.mark.parametrize("name", ["LF-AmazonTitles-1.3M", "synth_small", "EURLex-4K", "a+b=c@d"])
def test_names_that_can(name):
    assert check_name(name, "dataset name") == name
