"""The site's files: one page per dataset whatever its name, written whole or not at all, and a
damaged training log costs its curve, not the site."""

from __future__ import annotations

import re

import pytest

from xmcbench.errors import XmcbenchError
from xmcbench.report.site import _page_name, build_site

ODD_NAMES = ["a b", "a_b", "日本語データ", "中文数据", "index", "x" * 300, "<script>alert(1)</script>", "Ünïcödé"]


def test_every_dataset_name_gets_a_page_of_its_own():
    pages = [_page_name(n) for n in ODD_NAMES]
    assert len(set(pages)) == len(pages) and "index.html" not in pages
    assert all(len(p.encode()) < 255 and re.fullmatch(r"[A-Za-z0-9._-]+\.html", p) for p in pages)
    assert _page_name("LF-AmazonTitles-1.3M") == "LF-AmazonTitles-1.3M.html"  # plain names stay readable


def test_a_site_with_odd_dataset_names_links_every_page(store, run_record, tmp_path):
    for i, name in enumerate(ODD_NAMES):
        store.ingest_record(run_record(f"r-odd-{i}", "dexml", {"P@1": 40.0 + i}, minute=i, gpus=1, dataset=name), None)
    pages = build_site(store, tmp_path / "site", ODD_NAMES)
    assert len(pages) == len(ODD_NAMES) + 1 and len(set(pages)) == len(pages)
    index = pages[0].read_text(encoding="utf-8")
    for name, page in zip(ODD_NAMES, pages[1:], strict=True):
        assert f'href="{page.name}"' in index and page.is_file()
        assert f"r-odd-{ODD_NAMES.index(name)}" in page.read_text(encoding="utf-8")  # its own runs, not another's
    assert "<script>alert" not in "".join(p.read_text(encoding="utf-8") for p in pages)


def test_an_unwritable_out_is_one_line_and_leaves_nothing_half_written(store, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    with pytest.raises(XmcbenchError, match="is a file"):
        build_site(store, afile)
    with pytest.raises(XmcbenchError, match="cannot write the site"):
        build_site(store, afile / "site")
    assert afile.read_text() == "not a folder"


def test_a_damaged_training_log_costs_its_curve_not_the_site(store, run_record, tmp_path):
    logs = {
        "nan": b'{"epoch": 1, "loss": NaN}\n{"epoch": 2, "loss": 1.0}\n{"epoch": 3, "loss": 0.5}\n',
        "strings": b'{"epoch": "one", "loss": "low"}\n[1, 2]\n"x"\n{"epoch": true, "loss": 1}\n',
        "bytes": b"\xff\xfe\x00 not text",
    }
    for i, (kind, data) in enumerate(logs.items()):
        run_dir = tmp_path / kind
        run_dir.mkdir()
        (run_dir / "train_log.jsonl").write_bytes(data)
        store.ingest_record(
            run_record(f"r-{kind}", "dexml", {"P@1": 40.0}, minute=i, gpus=1, dataset=f"ds-{kind}"), run_dir
        )
    pages = build_site(store, tmp_path / "site", [f"ds-{k}" for k in logs])
    nan_page = pages[1].read_text(encoding="utf-8")
    assert "loss per epoch of r-nan" in nan_page and nan_page.count("<title>epoch ") == 2  # the NaN epoch left out
    assert not re.search(r'<path d="[^"]*nan', nan_page)
    for page in pages[2:]:
        assert "no run of this dataset recorded a loss per epoch" in page.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("args", "message"), [(["--out", ""], "--out '' is empty"), (["-d", ""], "--dataset '' is empty")]
)
def test_an_empty_out_or_dataset_is_refused_not_read_as_here(tmp_path, monkeypatch, args, message):
    from typer.testing import CliRunner

    from xmcbench.cli import app

    monkeypatch.chdir(tmp_path)
    full = ["site", *args] if args[0] == "--out" else ["site", "--out", "site", *args]
    res = CliRunner().invoke(app, full, env={"COLUMNS": "200"})
    assert res.exit_code == 1 and message in res.output, res.output
    assert list(tmp_path.iterdir()) == []  # nothing written into the current folder
