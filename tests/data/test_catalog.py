"""Dataset catalogue: built-ins, case-insensitive lookup, did-you-mean, local specs, safe names."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from xmcbench import paths
from xmcbench.data.catalog import (
    LF_FILES,
    DatasetSpec,
    Source,
    get_spec,
    list_specs,
    save_local_spec,
)
from xmcbench.errors import DataFormatError, XmcbenchError

BUILTIN = [
    "LF-AmazonTitles-131K",
    "LF-Amazon-131K",
    "LF-WikiSeeAlsoTitles-320K",
    "LF-WikiSeeAlso-320K",
    "LF-WikiTitles-500K",
    "LF-Wikipedia-500K",
    "LF-AmazonTitles-1.3M",
    "EURLex-4K",
    "LF-Amazon-1M",
    "Wiki10-31K",
    "AmazonCat-13K",
]


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


def test_builtins_and_their_facts():
    names = [s.name for s in list_specs()]
    assert names == BUILTIN
    amazon = get_spec("LF-AmazonTitles-131K")
    assert amazon.paper_counts == {"train": 294_805, "test": 134_835, "labels": 131_073}
    assert (amazon.propensity_a, amazon.propensity_b) == (0.6, 2.6)
    assert amazon.query_text == "title" and get_spec("LF-Amazon-131K").query_text == "title+content"
    assert amazon.raw_group == get_spec("LF-Amazon-131K").raw_group == "LF-Amazon-131K"
    assert amazon.sources[0].kind == "gdrive" and amazon.sources[0].ref == "1WuquxCAg8D4lKr-eZXPv4nNw2S2lm7_E"
    assert "filter_labels_test.txt" in amazon.files
    wiki = get_spec("LF-Wikipedia-500K")
    assert wiki.format == "lf-wikipedia-raw" and "Yf.txt" in wiki.files
    assert not any(f.startswith("filter") for f in wiki.files)
    assert (wiki.propensity_a, wiki.propensity_b) == (0.5, 0.4)
    assert get_spec("LF-WikiSeeAlso-320K").propensity_a == 0.55
    assert get_spec("EURLex-4K").paper_counts["labels"] == 3_956


def test_default_sources():
    wiki = get_spec("LF-Wikipedia-500K")
    parts = wiki.default_sources()
    assert [s.filename for s in parts] == ["trn.raw.json.gz", "tst.raw.json.gz", "Yf.txt"]
    assert {s.ref for s in parts} == {
        "10RBSf6nC9C38wUMwqWur2Yd8mCwtup5K",
        "1pEyKXtkwHhinuRxmARhtwEQ39VIughDf",
        "1ZYTZPlnkPBCMcNqRRO-gNx8EPgtV-GL3",
    }
    amazon = get_spec("LF-AmazonTitles-1.3M")
    assert amazon.default_sources() == [amazon.sources[0]] and amazon.sources[0].archive


def test_case_insensitive_and_did_you_mean():
    assert get_spec("lf-wikipedia-500k").name == "LF-Wikipedia-500K"
    assert get_spec("EURLEX-4K").name == "EURLex-4K"
    with pytest.raises(XmcbenchError, match=r"did you mean LF-AmazonTitles-131K"):
        get_spec("LF-AmazonTitle-131K")
    with pytest.raises(XmcbenchError, match=r"unknown dataset 'zzz'"):
        get_spec("zzz")


def test_local_spec_roundtrip():
    path = save_local_spec(_local())
    assert path == paths.datasets_dir() / "my-data" / "spec.json"
    assert get_spec("MY-DATA") == _local()
    assert [s.name for s in list_specs()][-1] == "my-data"
    # did-you-mean covers local names too
    with pytest.raises(XmcbenchError, match="did you mean my-data"):
        get_spec("my-dat")


def test_local_spec_refusals():
    with pytest.raises(XmcbenchError, match="built-in"):
        save_local_spec(_local("lf-amazontitles-131k"))
    with pytest.raises(ValidationError, match="cannot be used as a file name|must be a non-empty name|longer than"):
        _local("../escape")  # a spec cannot even hold a name that leaves its folder
    save_local_spec(_local("Data"))
    with pytest.raises(XmcbenchError, match="already exists"):
        save_local_spec(_local("data"))


def test_broken_local_spec_names_the_file():
    path = paths.datasets_dir() / "broken" / "spec.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"name": "broken", "format": "csv"}))
    with pytest.raises(DataFormatError, match=r"broken/spec.json: not a valid dataset spec") as info:
        get_spec("broken")
    assert "format" in str(info.value)


ESCAPING = ["../x", "..", "a/../b", "a/b", "a\\b", "/abs", ".hidden", "a..b", "a\x00b", "a\nb", "", "x" * 101]


@pytest.mark.parametrize("name", ESCAPING)
def test_names_that_could_leave_their_folder_are_refused_before_anything_is_made(name):
    from xmcbench.data import load_dataset
    from xmcbench.data.catalog import check_dataset_name

    home = paths.home()
    with pytest.raises(XmcbenchError, match="cannot be used as a file name|must be a non-empty name|longer than"):
        check_dataset_name(name)
    with pytest.raises(XmcbenchError, match="cannot be used as a file name|must be a non-empty name|longer than"):
        get_spec(name)
    with pytest.raises(XmcbenchError, match="cannot be used as a file name|must be a non-empty name|longer than"):
        load_dataset(name, synthetic={"labels": 5, "train": 5, "test": 5}, download=True, progress=False)
    assert not home.exists()  # no lock file, no folder: nothing at all was created


def test_ordinary_names_pass():
    from xmcbench.data.catalog import check_dataset_name

    for name in ("LF-AmazonTitles-1.3M", "synth_test", "x", "A" * 100):
        assert check_dataset_name(name) == name


def test_builtins_come_from_the_catalogue_file():
    # title-only and full-text variants share everything but name, query text and description
    titles, full = get_spec("LF-AmazonTitles-131K"), get_spec("LF-Amazon-131K")
    same = {k for k in DatasetSpec.model_fields if k not in ("name", "query_text", "description")}
    assert all(getattr(titles, k) == getattr(full, k) for k in same)
    assert titles.query_text == "title" and full.query_text == "title+content"
