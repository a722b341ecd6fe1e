"""EURLex-4K raw-text variant: texts + npz label matrices + label_map, prepared end to end."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from xmcbench.data.catalog import get_spec
from xmcbench.data.formats.eurlex import read_eurlex_split, read_label_map
from xmcbench.data.prepared import load_prepared, prepare
from xmcbench.errors import DataFormatError


def _eurlex_raw(raw):
    raw.mkdir(parents=True, exist_ok=True)
    (raw / "train_raw_texts.txt").write_text("commiss decis aid scheme &amp; spain\n\nregul fish quota\n")
    (raw / "test_raw_texts.txt").write_text("aid airlin\n")
    (raw / "label_map.txt").write_text("air_transport\nstate_aid\nfishery_management\nspain\n")
    y_trn = sp.csr_matrix(np.array([[0, 1, 0, 2], [0, 0, 0, 0], [0, 0, 1, 0]], dtype=np.float64))
    sp.save_npz(raw / "Y.trn.npz", y_trn)
    sp.save_npz(raw / "Y.tst.npz", sp.csr_matrix(np.array([[1, 1, 0, 0]])))
    return raw


def test_read_label_map(tmp_path):
    raw = _eurlex_raw(tmp_path)
    assert read_label_map(raw / "label_map.txt") == ["air transport", "state aid", "fishery management", "spain"]


def test_prepare_eurlex(tmp_path):
    raw = _eurlex_raw(tmp_path / "raw")
    ds = load_prepared(prepare(get_spec("EURLex-4K"), raw, tmp_path / "p", progress=False))
    assert ds.query_texts("train").to_list() == ["commiss decis aid scheme & spain", "", "regul fish quota"]
    assert ds.label_texts()[0] == "air transport"
    train = ds.labels("train")
    assert train.toarray().tolist() == [[0, 1, 0, 1], [0, 0, 0, 0], [0, 0, 1, 0]]  # binarised
    assert ds.labels("test").toarray().tolist() == [[1, 1, 0, 0]]
    assert ds.filter("test") is None
    assert ds.stats["train"]["empty_texts"] == 1 and ds.stats["train"]["empty_rows"] == 1
    assert ds.meta["paper_counts"]["train"] == 15_449


def test_mismatched_files(tmp_path):
    raw = _eurlex_raw(tmp_path)
    with pytest.raises(DataFormatError, match=r"Y.trn.npz: has 3 rows but test_raw_texts.txt has 1 documents"):
        read_eurlex_split(raw / "test_raw_texts.txt", raw / "Y.trn.npz", 4)
    with pytest.raises(DataFormatError, match=r"has 4 label columns but label_map.txt names 5 labels"):
        read_eurlex_split(raw / "train_raw_texts.txt", raw / "Y.trn.npz", 5)
