"""Readers of the zero-shot papers' datasets (zestxml-raw, aplc-csv) on files written here.

Neither layout could be checked against a real release (see the readers' docstrings): these
tests pin the layout the public code implies.
"""

from __future__ import annotations

import numpy as np
import pytest

from xmcbench.data import get_spec
from xmcbench.data.formats import get_format
from xmcbench.errors import DataFormatError


def test_zestxml_raw_reads_texts_titles_and_label_matrices(tmp_path):
    (tmp_path / "trn_X.txt").write_text("red shoes\tcomfortable running shoes\nno title here\n")
    (tmp_path / "tst_X.txt").write_text("a title\tits body\n")
    (tmp_path / "Y.txt").write_text("shoes\nsocks\nhats\n")
    (tmp_path / "trn_X_Y.txt").write_text("2 3\n0:1 1:1\n2:1\n")
    (tmp_path / "tst_X_Y.txt").write_text("1 3\n1:1\n")
    spec = get_spec("LF-Amazon-1M")
    fmt = get_format(spec.format)
    files = {name: tmp_path / name for name in spec.files}
    ((names, _),) = list(fmt.read_labels(spec, files, False))
    assert names == ["shoes", "socks", "hats"]
    (chunk,) = list(fmt.read_split(spec, files, "train", 3, False))
    assert chunk.texts == ["red shoes comfortable running shoes", "no title here"]
    assert chunk.counts.tolist() == [2, 1] and chunk.indices.tolist() == [0, 1, 2]
    from xmcbench.data.formats.zestxml import read_titles_and_contents

    assert read_titles_and_contents(tmp_path / "trn_X.txt") == (
        ["red shoes", ""],
        ["comfortable running shoes", "no title here"],
    )
    (tmp_path / "tst_X_Y.txt").write_text("2 3\n1:1\n\n")
    with pytest.raises(DataFormatError, match="has 2 rows"):
        list(fmt.read_split(spec, files, "test", 3, False))


def test_aplc_csv_reads_comma_joined_label_names(tmp_path):
    (tmp_path / "labels.txt").write_text("books\nmusic_cds\ntoys\n")
    (tmp_path / "train.csv").write_text('id,text,labels\n1,"a long, quoted\ntext","books,toys"\n2,plain text,\n')
    (tmp_path / "dev.csv").write_text("id,text,labels\n7,music,music_cds\n8,what,unknown\n")
    spec = get_spec("Wiki10-31K")
    fmt = get_format(spec.format)
    files = {name: tmp_path / name for name in spec.files}
    ((names, uids),) = list(fmt.read_labels(spec, files, False))
    assert names == ["books", "music cds", "toys"] and uids[1] == "music_cds"
    (chunk,) = list(fmt.read_split(spec, files, "train", 3, False))
    assert chunk.texts == ["a long, quoted\ntext", "plain text"] and chunk.uids == ["1", "2"]
    assert chunk.counts.tolist() == [2, 0] and np.asarray(chunk.indices).tolist() == [0, 2]
    with pytest.raises(DataFormatError, match="'unknown' is not in labels.txt"):
        list(fmt.read_split(spec, files, "test", 3, False))


def test_catalogue_facts_of_the_zero_shot_datasets():
    amazon1m, wiki10, cat13k = get_spec("LF-Amazon-1M"), get_spec("Wiki10-31K"), get_spec("AmazonCat-13K")
    assert amazon1m.paper_counts == {"train": 914_179, "test": 1_465_767, "labels": 960_106}
    assert wiki10.paper_counts == {"train": 14_146, "test": 6_616, "labels": 30_938}
    assert cat13k.paper_counts == {"train": 1_186_239, "test": 306_782, "labels": 13_330}
    assert (amazon1m.propensity_a, amazon1m.propensity_b) == (0.6, 2.6)
    assert (wiki10.propensity_a, wiki10.propensity_b) == (0.55, 1.5)
    assert (cat13k.propensity_a, cat13k.propensity_b) == (0.6, 2.6)
