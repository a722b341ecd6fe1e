"""The zero-shot papers' datasets (LF-Amazon-1M, Wiki10-31K, AmazonCat-13K) read from files in their real layouts.

No release could be fetched here, so each test writes a few records in the layout the public code
that reads or writes the real files fixes (the readers' docstrings cite it): MACLR's copy of
LF-Amazon-1M (amzn/pecos examples/MACLR: trn.json / tst.json / lbl.json JSON lines, plus
all_pairs.txt), ZestXML's release (raw/trn_X.txt, raw/Y.txt, trn_X_Y.txt sparse text), and
XLNet-APLC's csv files (what ``DataFrame(columns=['id', 'text', 'label']).to_csv(index=False)``
writes). Every dataset goes through ``prepare`` (the path a real download takes) and, for the
downloadable ones, through ``download_dataset`` from a local folder laid out like the archive.
"""

from __future__ import annotations

import csv
import gzip
import json

import numpy as np
import pytest

from xmcbench.data import download_dataset, get_spec, load_dataset, prepare
from xmcbench.data.catalog import DatasetSpec, Source
from xmcbench.data.fetch.sources import default_sources
from xmcbench.errors import DataFormatError, DownloadError

# -- LF-Amazon-1M: MACLR's copy, LF JSON lines --------------------------------------------------


def _jsonl(path, records):
    # plain (not gzipped) JSON lines, as pecos' main.py reads them: json.loads(line) per line
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def _maclr_amazon_folder(root):
    """A folder like LF-Amazon-1M.tar.gz unpacks to (dataset/<name>/ in pecos' examples/MACLR)."""
    folder = root / "LF-Amazon-1M"
    folder.mkdir(parents=True)
    _jsonl(folder / "lbl.json", [{"uid": "B01", "title": "Trail Running Shoes"}, {"uid": "B02", "title": "Wool Socks"}])
    _jsonl(
        folder / "trn.json",
        [
            {
                "uid": "A1",
                "title": "Road shoes",
                "content": "Light &amp; fast.",
                "target_ind": [0, 1],
                "target_rel": [1.0, 1.0],
            },
            {"uid": "A2", "title": "Hiking socks", "content": "", "target_ind": [], "target_rel": []},
        ],
    )
    _jsonl(
        folder / "tst.json",
        [{"uid": "A3", "title": "Sandals", "content": "Open toe.", "target_ind": [1], "target_rel": [1.0]}],
    )
    (folder / "all_pairs.txt").write_text("A3 B02 1\n")  # test qrels by uid; not needed (tst.json has target_ind)
    return folder


def test_lf_amazon_1m_reads_maclrs_json_lines_copy(tmp_path):
    spec = get_spec("LF-Amazon-1M")
    assert spec.format == "lf-json" and spec.query_text == "title+content"
    assert spec.sources[0].ref == "https://archive.org/download/maclr-www22/datasets/LF-Amazon-1M.tar.gz"
    folder = _maclr_amazon_folder(tmp_path / "src")
    ds = load_dataset(spec.name, download=True, source=str(folder), progress=False)
    assert ds.label_texts().to_list() == ["Trail Running Shoes", "Wool Socks"]
    assert ds.label_uids().to_list() == ["B01", "B02"]
    assert ds.query_texts("train").to_list() == ["Road shoes Light & fast.", "Hiking socks"]
    assert ds.uids("test").to_list() == ["A3"]
    assert ds.labels("train").toarray().tolist() == [[1, 1], [0, 0]]
    assert ds.labels("test").toarray().tolist() == [[0, 1]]
    assert ds.filter("test") is None  # no filter files in this release


def test_lf_amazon_1m_test_records_without_targets_stop_with_the_line(tmp_path):
    folder = _maclr_amazon_folder(tmp_path / "src")
    _jsonl(folder / "tst.json", [{"uid": "A3", "title": "Sandals", "content": "Open toe."}])
    with pytest.raises(DataFormatError, match=r"tst\.json:1"):
        load_dataset("LF-Amazon-1M", download=True, source=str(folder), progress=False)


# -- ZestXML's raw release (zestxml-raw, a local spec) -------------------------------------------


def _zestxml_spec(raw_dir) -> DatasetSpec:
    return DatasetSpec(
        name="GZ-Amazon-mini",
        raw_group="GZ-Amazon-mini",
        format="zestxml-raw",
        query_text="text",
        files=["raw/trn_X.txt", "raw/tst_X.txt", "raw/Y.txt", "trn_X_Y.txt", "tst_X_Y.txt"],
        sources=[Source(kind="local", ref=str(raw_dir))],
        paper_counts={},
        propensity_a=0.55,
        propensity_b=1.5,
    )


def _zestxml_folder(root):
    """The layout of a ZestXML dataset folder (README "Data Format"; data-process.ipynb reads raw/)."""
    (root / "raw").mkdir(parents=True)
    (root / "raw" / "trn_X.txt").write_text("red shoes\tcomfortable running shoes\nno title here\n", encoding="utf-8")
    (root / "raw" / "tst_X.txt").write_text("a title\tits body &amp; more\n", encoding="utf-8")
    (root / "raw" / "Y.txt").write_text("shoes\nsocks\nhats\n", encoding="utf-8")
    # XC sparse text: "rows cols" header, then index:value from 0 (values written as floats)
    (root / "trn_X_Y.txt").write_text("2 3\n0:1.000000 1:1.000000\n0:0.000000 2:1.000000\n")  # 0: no label
    (root / "tst_X_Y.txt").write_text("1 3\n1:1.000000\n")
    (root / "trn_X_Xf.txt").write_text("2 1\n0:0.5\n0:0.5\n")  # tf-idf features: present, not read
    return root


def test_zestxml_raw_reads_the_raw_folder_and_label_matrices(tmp_path):
    raw = _zestxml_folder(tmp_path / "GZ")
    out = prepare(_zestxml_spec(raw), raw, tmp_path / "prepared", progress=False)
    from xmcbench.data import load_prepared

    ds = load_prepared(out)
    assert ds.label_texts().to_list() == ["shoes", "socks", "hats"]
    assert ds.query_texts("train").to_list() == ["red shoes comfortable running shoes", "no title here"]
    assert ds.query_texts("test").to_list() == ["a title its body & more"]
    assert ds.labels("train").toarray().tolist() == [[1, 1, 0], [0, 0, 1]]
    from xmcbench.data.formats.zestxml import read_titles_and_contents

    assert read_titles_and_contents(raw / "raw" / "trn_X.txt") == (
        ["red shoes", ""],
        ["comfortable running shoes", "no title here"],
    )


def test_zestxml_raw_refuses_files_of_different_releases(tmp_path):
    raw = _zestxml_folder(tmp_path / "GZ")
    (raw / "tst_X_Y.txt").write_text("2 3\n1:1\n\n")
    with pytest.raises(DataFormatError, match="has 2 rows but tst_X.txt has 1 lines"):
        prepare(_zestxml_spec(raw), raw, tmp_path / "prepared", progress=False)
    (raw / "tst_X_Y.txt").write_text("1 4\n1:1\n")
    with pytest.raises(DataFormatError, match="4 label columns but raw/Y.txt names 3 labels"):
        prepare(_zestxml_spec(raw), raw, tmp_path / "prepared", progress=False)


# -- XLNet-APLC csv (Wiki10-31K, AmazonCat-13K) ---------------------------------------------------


def _aplc_csv(path, rows):
    # What pandas' DataFrame(rows, columns=['id', 'text', 'label']).to_csv(path, index=False) writes:
    # a header, minimal quoting with doubled quotes, "\n" line ends, labels joined by ','.
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
        writer.writerow(["id", "text", "label"])
        writer.writerows(rows)


def _aplc_folder(root):
    folder = root / "Wiki10"
    folder.mkdir(parents=True)
    (folder / "labels.txt").write_text("wikipedia\nweb_2.0\nmusic\n", encoding="utf-8")  # by decreasing frequency
    _aplc_csv(
        folder / "train.csv",
        [
            [0, 'a long, "quoted"\ntext', "wikipedia,music"],
            [2, "plain text", ""],  # id 1 skipped: an empty text line in the source
        ],
    )
    _aplc_csv(folder / "dev.csv", [[0, "web things", "web_2.0"]])
    return folder


def test_aplc_csv_reads_pandas_written_files(tmp_path):
    folder = _aplc_folder(tmp_path / "src")
    ds = load_dataset("Wiki10-31K", download=True, source=str(folder), progress=False)
    assert ds.label_texts().to_list() == ["wikipedia", "web 2.0", "music"]
    assert ds.label_uids().to_list() == ["wikipedia", "web_2.0", "music"]
    assert ds.query_texts("train").to_list() == ['a long, "quoted"\ntext', "plain text"]
    assert ds.uids("train").to_list() == ["0", "2"]
    assert ds.labels("train").toarray().tolist() == [[1, 0, 1], [0, 0, 0]]
    assert ds.labels("test").toarray().tolist() == [[0, 1, 0]]


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("0,some text,wikipedia\n", r"train\.csv:1: expected the header row"),  # no header: a data row first
        ("id,text,label\n0,some text,wikipedia,extra\n", r"train\.csv:2: expected 3 fields"),
        ('id,text,label\n\n0,x,wikipedia\n5,some text,"wikipedia,unknown_tag"\n', r"train\.csv:4: label 'unknown_tag'"),
        ("", "is empty"),
    ],
)
def test_aplc_csv_bad_files_name_file_and_line(tmp_path, content, match):
    from xmcbench.data.formats.aplc_csv import read_aplc_csv

    path = tmp_path / "train.csv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataFormatError, match=match):
        read_aplc_csv(path, {"wikipedia": 0})


@pytest.mark.parametrize(
    ("cut", "match"),
    [
        (lambda data: gzip.compress(data)[:-20], r"train\.csv: cannot read the file \(Compressed file ended"),
        (lambda data: b"\x1f\x8b" + b"not gzip" * 4, r"train\.csv: cannot read the file"),
    ],
)
def test_aplc_csv_truncated_or_corrupt_gzip_is_a_data_error(tmp_path, cut, match):
    from xmcbench.data.formats.aplc_csv import read_aplc_csv

    path = tmp_path / "train.csv"
    path.write_bytes(cut(b"id,text,label\n" + b'0,"some, text",wikipedia\n' * 100))
    with pytest.raises(DataFormatError, match=match):
        read_aplc_csv(path, {"wikipedia": 0})


def test_aplc_datasets_have_a_manual_source_that_says_where(tmp_path):
    for name, subdir in (("Wiki10-31K", "Wiki10"), ("AmazonCat-13K", "AmazonCat")):
        spec = get_spec(name)
        assert spec.sources[0].kind == "manual" and spec.sources[0].subdir == subdir
        with pytest.raises(DownloadError, match=r"1bRLrc8N3ukzAVn9zyTqr0IqP3fWJUYAt.*--source DIR"):
            default_sources(spec)
        with pytest.raises(DownloadError, match="cannot be downloaded automatically"):
            download_dataset(name, progress=False)


def test_catalogue_facts_of_the_zero_shot_datasets():
    amazon1m, wiki10, cat13k = get_spec("LF-Amazon-1M"), get_spec("Wiki10-31K"), get_spec("AmazonCat-13K")
    # MACLR Table 5; LMTX Table 1
    assert amazon1m.paper_counts == {"train": 914_179, "test": 1_465_767, "labels": 960_106}
    assert wiki10.paper_counts == {"train": 14_146, "test": 6_616, "labels": 30_938}
    assert cat13k.paper_counts == {"train": 1_186_239, "test": 306_782, "labels": 13_330}
    assert (amazon1m.propensity_a, amazon1m.propensity_b) == (0.6, 2.6)
    assert (wiki10.propensity_a, wiki10.propensity_b) == (0.55, 1.5)
    assert (cat13k.propensity_a, cat13k.propensity_b) == (0.6, 2.6)
    assert np.all([s.format == "aplc-csv" for s in (wiki10, cat13k)])
