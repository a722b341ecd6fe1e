"""Raw files: twins (trn.json / trn.json.gz), missing files named."""

from __future__ import annotations

import pytest

from xmcbench.data.catalog import LF_FILES, DatasetSpec, Source
from xmcbench.data.raw import find_raw_file, raw_files
from xmcbench.errors import XmcbenchError


def _local(name: str = "my-data") -> DatasetSpec:
    return DatasetSpec(
        name=name,
        raw_group=name,
        format="lf-json",
        query_text="title",
        files=list(LF_FILES),
        sources=[Source(kind="local", ref="/data/x")],
        paper_counts={},
        propensity_a=0.55,
        propensity_b=1.5,
    )


def test_find_raw_file_accepts_twins(tmp_path):
    (tmp_path / "trn.json").write_text("")
    (tmp_path / "filter_labels_test.txt.gz").write_bytes(b"")
    assert find_raw_file(tmp_path, "trn.json.gz") == tmp_path / "trn.json"
    assert find_raw_file(tmp_path, "filter_labels_test.txt") == tmp_path / "filter_labels_test.txt.gz"
    assert find_raw_file(tmp_path, "lbl.json.gz") is None
    with pytest.raises(XmcbenchError, match=r"tst.json.gz, lbl.json.gz, filter_labels_train.txt missing"):
        raw_files(_local(), tmp_path)
