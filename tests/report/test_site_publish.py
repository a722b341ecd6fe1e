"""``xmcbench site`` publishes the whole site or nothing: a full disk or a kill part-way leaves the old
site whole, the next run cleans up after it, and a folder that is not a site xmcbench built is never
replaced."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from xmcbench.errors import XmcbenchError
from xmcbench.report import site
from xmcbench.report.site import build_site, write_site


def _pages(version: str) -> list[tuple[str, str]]:
    links = [("a", "a.html"), ("b", "b.html")]
    return [(p, site._page(f"{n} {version}", links, f"<p>{version}</p>")) for n, p in links] + [
        ("index.html", site._page(f"index {version}", links, f"<p>{version}</p>"))
    ]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _full_disk_after(monkeypatch, n: int) -> None:
    """The (n+1)-th page written hits a full disk."""
    real, calls = site.atomic_write, []

    def write(path, data):
        calls.append(path)
        if len(calls) > n:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, data)

    monkeypatch.setattr(site, "atomic_write", write)


def test_a_full_disk_leaves_the_old_site_whole_and_the_next_run_replaces_it(store, tmp_path, monkeypatch):
    out, only = tmp_path / "pub" / "site", ["LF-AmazonTitles-131K"]  # one dataset: a build costs ~1 s a dataset
    write_site(out, _pages("v1"))
    before = _snapshot(out)
    with monkeypatch.context() as mp:
        _full_disk_after(mp, 1)
        with pytest.raises(XmcbenchError, match="cannot write the site into .*No space left.*left as it was") as exc:
            build_site(store, out, only)
    assert "\n" not in str(exc.value)
    assert _snapshot(out) == before and os.listdir(out.parent) == ["site"]  # old site whole, nothing beside it
    pages = build_site(store, out, only)
    assert "r-dexml-best" in "".join(p.read_text(encoding="utf-8") for p in pages)
    assert sorted(os.listdir(out)) == sorted(p.name for p in pages) and os.listdir(out.parent) == ["site"]


KILL = """
import os, signal, sys
from pathlib import Path
from xmcbench.report import site

at, calls, real = sys.argv[2], [], os.rename
def rename(src, dst):
    calls.append(src)
    if at == "before-swap" or (at == "between" and len(calls) == 2):
        os.kill(os.getpid(), signal.SIGKILL)
    real(src, dst)
    if at == "after-swap" and len(calls) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
site.os.rename = rename
site.write_site(Path(sys.argv[1]), [(p, t.replace("v1", "v2")) for p, t in site_pages])
"""


@pytest.mark.parametrize("at", ["before-swap", "between", "after-swap"])
def test_a_kill_leaves_a_whole_site_and_the_next_run_recovers(tmp_path, monkeypatch, at):
    out = tmp_path / "site"
    write_site(out, _pages("v1"))
    v1 = _snapshot(out)
    script = f"site_pages = {_pages('v1')!r}\n" + KILL
    proc = subprocess.run([sys.executable, "-c", script, str(out), at], cwd=tmp_path, capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    left = sorted(n for n in os.listdir(tmp_path) if n != "site")
    assert left and all(n.startswith(".site.") for n in left)  # the killed run's folders, beside the site
    if at == "before-swap":
        assert _snapshot(out) == v1  # the old site untouched
    elif at == "after-swap":
        assert b"v2" in (out / "index.html").read_bytes() and len(_snapshot(out)) == 3  # the new site, whole
    else:
        assert not out.exists()  # killed between the renames: the old site waits beside it, whole
        (old,) = [tmp_path / n for n in left if n.endswith(".site-old")]
        assert _snapshot(old) == v1

    # the next run puts the old site back (if it was moved away) before it even writes; a full disk then
    # leaves that site, whole, and nothing of either run beside it
    with monkeypatch.context() as mp:
        _full_disk_after(mp, 0)
        with pytest.raises(XmcbenchError, match="No space left"):
            write_site(out, _pages("v3"))
    if at == "after-swap":
        assert b"v2" in (out / "index.html").read_bytes() and len(_snapshot(out)) == 3
    else:
        assert _snapshot(out) == v1
    assert os.listdir(tmp_path) == ["site"]
    write_site(out, _pages("v3"))
    assert all(b"v3" in data for data in _snapshot(out).values()) and os.listdir(tmp_path) == ["site"]


@pytest.mark.parametrize(
    "extra",
    [
        {"notes.txt": "mine"},  # a file that is not a page
        {"about.html": "<html>my own page</html>"},  # a page xmcbench did not write
        {".git/HEAD": "ref: refs/heads/gh-pages"},  # a clone (of a GitHub Pages branch)
    ],
)
def test_a_folder_that_is_not_a_site_is_never_replaced(tmp_path, extra):
    out = tmp_path / "site"
    write_site(out, _pages("v1"))
    for name, text in extra.items():
        (out / name).parent.mkdir(exist_ok=True)
        (out / name).write_text(text)
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    with pytest.raises(
        XmcbenchError, match="holds more than the pages of a site xmcbench built.*nothing in it was touched"
    ):
        write_site(out, _pages("v2"))
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == files
    assert b"v1" in (out / "index.html").read_bytes() and os.listdir(tmp_path) == ["site"]


def test_the_current_folder_is_refused_and_an_empty_one_or_a_linked_site_is_replaced(tmp_path, monkeypatch):
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    with pytest.raises(XmcbenchError, match="holds the current folder"):
        write_site(".", _pages("v1"))
    assert os.listdir(here) == []
    monkeypatch.chdir(tmp_path)
    here.chmod(0o775)
    write_site(here, _pages("v1"))  # an empty folder; its mode (a group's site) is kept
    assert sorted(os.listdir(here)) == ["a.html", "b.html", "index.html"] and here.stat().st_mode & 0o777 == 0o775
    link = tmp_path / "link"
    link.symlink_to(here)
    write_site(link, _pages("v2"))  # the folder it points to is replaced; the link stays
    assert link.is_symlink() and b"v2" in (here / "index.html").read_bytes()


def test_leftovers_of_a_live_run_or_not_of_a_site_are_left_alone(tmp_path):
    out = tmp_path / "site"
    write_site(out, _pages("v1"))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    live = tmp_path / f".site.{os.getpid()}.0123abcd.site-new"  # another writer, still running
    foreign = tmp_path / f".site.{gone.pid}.0123abcd.site-old"  # the right name, but not pages
    for folder in (live, foreign):
        folder.mkdir()
    (foreign / "data.csv").write_text("1,2\n")
    write_site(out, _pages("v2"))
    assert live.is_dir() and (foreign / "data.csv").is_file()


def test_a_site_written_before_the_generator_tag_is_replaced(tmp_path):
    out = tmp_path / "site"
    out.mkdir()
    legacy = _pages("v0")[0][1].replace(site.GENERATOR + "\n", "")
    (out / "index.html").write_text(legacy)
    (out / "a.html").write_text(legacy)
    (out / ".b.html.4242.0123abcd.tmp").write_text("half a page")  # a page write cut off by a kill
    write_site(out, _pages("v1"))
    assert sorted(os.listdir(out)) == ["a.html", "b.html", "index.html"]


def test_a_static_hosts_own_files_are_kept_across_rebuilds(tmp_path):
    """A site published with GitHub Pages carries CNAME (its domain) and .nojekyll: the folder is
    still a site xmcbench built, and the rebuilt site keeps both, byte for byte."""
    out = tmp_path / "site"
    write_site(out, _pages("v1"))
    (out / "CNAME").write_text("xmc.example.org\n")
    (out / ".nojekyll").write_bytes(b"")
    write_site(out, _pages("v2"))
    assert sorted(os.listdir(out)) == [".nojekyll", "CNAME", "a.html", "b.html", "index.html"]
    assert (out / "CNAME").read_text() == "xmc.example.org\n" and b"v2" in (out / "index.html").read_bytes()
    assert os.listdir(tmp_path) == ["site"]


def test_a_killed_runs_old_site_is_not_taken_by_a_site_whose_long_name_starts_the_same(tmp_path):
    """The folders beside a site are named after it, cut to fit a file name: two long names that
    share their start must still not recover (and then replace) each other's old site."""
    a, b = tmp_path / ("x" * 100 + "a"), tmp_path / ("x" * 100 + "b")
    write_site(a, _pages("v1"))
    v1 = _snapshot(a)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    old = site._sibling(a, "old").with_name(site._sibling(a, "old").name.replace(f".{os.getpid()}.", f".{gone.pid}."))
    os.rename(a, old)  # a's run killed between its renames: its old site waits beside it
    write_site(b, _pages("v2"))
    assert b"v2" in (b / "index.html").read_bytes() and _snapshot(old) == v1
    write_site(a, _pages("v3"))  # a's next run puts it back, then replaces it
    assert b"v3" in (a / "index.html").read_bytes() and sorted(os.listdir(tmp_path)) == sorted([a.name, b.name])


def test_an_out_that_is_a_symlink_loop_is_one_error_line(tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for out in (loop, loop / "site"):
        with pytest.raises(XmcbenchError, match="symbolic link") as exc:
            write_site(out, _pages("v1"))
        assert "\n" not in str(exc.value)
    assert os.listdir(tmp_path) == ["loop"]
