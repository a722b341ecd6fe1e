"""The format registry: each raw format is found by name; an unknown one is a clear error."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from xmcbench.data.catalog import LF_FILES, DatasetSpec, Source
from xmcbench.data.formats import FORMATS, get_format
from xmcbench.errors import XmcbenchError


def test_builtin_formats_are_registered():
    assert FORMATS.names() == ["lf-json", "lf-wikipedia-raw", "eurlex-raw", "zestxml-raw", "aplc-csv"]
    for name in FORMATS.names():
        fmt = get_format(name)
        assert fmt.name == name and set(fmt.split_files) == {"train", "test"}
        assert set(fmt.split_files.values()) <= set(fmt.required_files)
    assert get_format("LF-JSON").label_text == "title"


def test_unknown_format_is_a_clear_error():
    with pytest.raises(
        XmcbenchError, match=r"unknown dataset format 'csv'.*known: lf-json, lf-wikipedia-raw, eurlex-raw"
    ):
        get_format("csv")
    with pytest.raises(ValidationError, match=r"unknown format 'csv'; known: lf-json"):
        DatasetSpec(
            name="x",
            raw_group="x",
            format="csv",
            query_text="title",
            files=list(LF_FILES),
            sources=[Source(kind="local", ref="")],
            paper_counts={},
            propensity_a=0.55,
            propensity_b=1.5,
        )
