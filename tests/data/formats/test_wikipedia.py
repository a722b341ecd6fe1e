"""LF-Wikipedia-500K raw variant: Yf.txt label names and a prepared tiny copy."""

from __future__ import annotations

import pytest
from lf_json_helpers import write_lf_json

from xmcbench.data.catalog import get_spec
from xmcbench.data.formats.wikipedia import read_yf
from xmcbench.data.prepared import load_prepared, prepare
from xmcbench.errors import DataFormatError


def _wiki_raw(raw):
    raw.mkdir(parents=True, exist_ok=True)
    (raw / "Yf.txt").write_text("0->Living_people\n1->American_films\nWorld_War_II &amp; after\n3->Arrows_->_signs\n")
    write_lf_json(
        raw / "trn.raw.json.gz",
        [
            {"uid": "12", "title": "Anarchism", "content": "Anarchism is a political philosophy", "target_ind": [0, 2]},
            {"uid": "25", "title": "Autism", "content": "", "target_ind": [3]},
        ],
        escape_html=False,
    )
    write_lf_json(
        raw / "tst.raw.json.gz",
        [
            {"uid": "39", "title": "Albedo", "content": "Albedo is the measure", "target_ind": [1]},
        ],
        escape_html=False,
    )
    return raw


def test_read_yf(tmp_path):
    uids, names = read_yf(_wiki_raw(tmp_path) / "Yf.txt")
    assert names == ["Living people", "American films", "World War II & after", "Arrows -> signs"]
    assert uids == ["0", "1", "", "3"]


def test_prepare_wikipedia(tmp_path):
    raw = _wiki_raw(tmp_path / "raw")
    ds = load_prepared(prepare(get_spec("LF-Wikipedia-500K"), raw, tmp_path / "p", progress=False))
    assert ds.n_labels == 4
    assert ds.query_texts("train").to_list() == ["Anarchism Anarchism is a political philosophy", "Autism"]
    assert ds.labels("train").toarray().tolist() == [[1, 0, 1, 0], [0, 0, 0, 1]]
    assert ds.filter("train") is None and ds.filter("test") is None
    assert ds.label_texts()[1] == "American films" and ds.uids("test")[0] == "39"


def test_target_beyond_yf(tmp_path):
    raw = _wiki_raw(tmp_path / "raw")
    write_lf_json(raw / "tst.raw.json.gz", [{"uid": "1", "title": "x", "target_ind": [4]}])
    with pytest.raises(DataFormatError, match=r"tst.raw.json.gz:1: label index 4 .* has 4 labels"):
        prepare(get_spec("LF-Wikipedia-500K"), raw, tmp_path / "p", progress=False)
