"""The ``lexicon: english`` option of the synthetic generator (real category labels and member words)."""

from __future__ import annotations

import gzip
import json

import pytest
from pydantic import ValidationError

from xmcbench.data.synth import make_synthetic_spec, synthesize
from xmcbench.data.synth_english import MAX_EXTRA, MEMBERS_PER_LABEL, lexicon
from xmcbench.recipe.schema import SyntheticSpec


def _lines(path):
    with gzip.open(path, "rt") as fh:
        return [json.loads(line) for line in fh]


def test_the_lexicon_is_well_formed():
    rows = lexicon()
    assert len(rows) == 40
    categories = [c for _, c, _ in rows]
    assert len(set(categories)) == len(categories)
    words = [w for _, _, members in rows for w in members]
    assert all(len(members) == 10 for _, _, members in rows)
    assert len(set(words)) == len(words), "a member word in two categories would make its label ambiguous"


def test_queries_name_members_of_exactly_their_labels(tmp_path):
    out = synthesize(tmp_path / "en", 30, 300, 50, seed=3, lexicon="english")
    labels = [rec["title"] for rec in _lines(out / "lbl.json.gz")]
    members = {c: set(m) for _, c, m in lexicon()}
    assert len(labels) == 30 and set(labels) <= set(members)
    n_extra = 0
    for rec in _lines(out / "trn.json.gz") + _lines(out / "tst.json.gz"):
        targets = rec["target_ind"]
        assert targets == sorted(set(targets)) and 1 <= len(targets) <= 1 + MAX_EXTRA
        n_extra += len(targets) > 1
        title = rec["title"]
        for j in targets:  # the member words of every label are in the title, none of another label's
            assert (
                sum(w in title.split(" ") or f" {w} " in f" {title} " for w in members[labels[j]]) >= MEMBERS_PER_LABEL
            )
        others = set(range(30)) - set(targets)
        assert not any(f" {w} " in f" {title} " for j in others for w in members[labels[j]])
    assert 0 < n_extra < 350  # some queries have two or three labels, most have one
    assert (out / "filter_labels_train.txt").read_bytes() == b""


def test_byte_identical_per_seed_and_the_spec_records_the_option(tmp_path):
    a = synthesize(tmp_path / "a", 20, 100, 20, seed=5, lexicon="english")
    b = synthesize(tmp_path / "b", 20, 100, 20, seed=5, lexicon="english")
    c = synthesize(tmp_path / "c", 20, 100, 20, seed=6, lexicon="english")
    assert (a / "trn.json.gz").read_bytes() == (b / "trn.json.gz").read_bytes()
    assert (a / "trn.json.gz").read_bytes() != (c / "trn.json.gz").read_bytes()
    assert make_synthetic_spec("en", n_labels=20, n_train=100, n_test=20, lexicon="english").synthetic["lexicon"] == (
        "english"
    )
    assert "lexicon" not in make_synthetic_spec("ps", n_labels=20, n_train=100, n_test=20).synthetic


def test_more_labels_than_the_lexicon_has_is_a_validation_error():
    with pytest.raises(ValidationError, match="at most 40 labels"):
        make_synthetic_spec("en", n_labels=41, n_train=10, n_test=10, lexicon="english")
    with pytest.raises(ValidationError, match="at most 40 labels"):  # a recipe is refused at validation
        SyntheticSpec(labels=41, train=1, test=1, lexicon="english")
    assert SyntheticSpec(labels=41, train=1, test=1).lexicon == "pseudo"
