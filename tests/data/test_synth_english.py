"""The ``lexicon: english`` option of the synthetic generator (real category labels and member words)."""

from __future__ import annotations

import gzip
import hashlib
import json

import pytest
from pydantic import ValidationError

from xmcbench.data.synth import make_synthetic_spec, synthesize
from xmcbench.data.synth_english import (
    ALIAS_TITLES,
    BODY_MEMBERS,
    FILLERS,
    MAX_EXTRA,
    MEMBERS_PER_LABEL,
    _aliases,
    lexicon,
)
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


def _members_in(text: str, vocabulary: set[str]) -> set[str]:
    """The lexicon members a generated text names, longest match first ("bass clarinet", not "bass")."""
    words, found, i = text.split(" "), set(), 0
    while i < len(words):
        for n in (3, 2, 1):
            if " ".join(words[i : i + n]) in vocabulary:
                found.add(" ".join(words[i : i + n]))
                i += n
                break
        else:
            i += 1
    return found


def test_without_bodies_the_files_are_those_made_before_the_option(tmp_path):
    """The LMTX smoke dataset (40 labels, 400 train, 1000 test, seed 0) must not move: its
    judgement cache and measured figures refer to these exact texts (hashes of the uncompressed
    files, taken before `bodies` existed)."""
    out = synthesize(tmp_path / "en", 40, 400, 1000, seed=0, lexicon="english")
    expected = {
        "lbl.json.gz": "ab5b860155d8158e2e24ad2669a94314709ed1a4641cfddc2473978cf91c8568",
        "trn.json.gz": "b0d8403e90ee1e94334fadaca508146bc8dfe981f907084b42e04c702fc7dcad",
        "tst.json.gz": "6c09eb72847f8c454f595f9f98c63ca4a7f98622613873f1dad27203fce21832",
    }
    for name, digest in expected.items():
        with gzip.open(out / name) as fh:
            assert hashlib.sha256(fh.read()).hexdigest() == digest, name


def test_bodies_name_other_members_and_some_titles_use_aliases_only(tmp_path):
    out = synthesize(tmp_path / "en", 30, 400, 200, seed=2, lexicon="english", bodies=True)
    labels = [rec["title"] for rec in _lines(out / "lbl.json.gz")]
    members = {c: set(m) for _, c, m in lexicon()}
    every_member = set().union(*members.values())
    alias_of: dict[int, str] = {}
    n_alias_titles = n_sharing = 0
    records = _lines(out / "trn.json.gz") + _lines(out / "tst.json.gz")
    for rec in records:
        targets = rec["target_ind"]
        assert rec["content"], "every instance has a body"
        in_title, in_body = _members_in(rec["title"], every_member), _members_in(rec["content"], every_member)
        for j in targets:  # the body names BODY_MEMBERS further members of each label, none of the title's
            assert len(in_body & members[labels[j]]) == BODY_MEMBERS
        assert not in_body & in_title
        assert in_body <= set().union(*(members[labels[j]] for j in targets)), "only members of its own labels"
        own_label_words = {w for j in targets for w in labels[j].split(" ")}
        n_sharing += bool(set(rec["title"].split(" ")) & own_label_words)  # "collard greens" / "leafy greens"
        if not in_title:  # an alias title: one alias per label + a filler
            n_alias_titles += 1
            words = rec["title"].split(" ")
            assert len(targets) + 1 <= len(words) <= len(targets) + 2  # some fillers are two words
            for j in targets:
                candidates = {w for w in words if w not in " ".join(FILLERS).split(" ")}
                known = alias_of.get(j)
                assert known is None or known in candidates, "a label keeps its alias in train and test"
                if len(targets) == 1:
                    (alias_of[j],) = candidates
    assert abs(n_alias_titles / len(records) - ALIAS_TITLES) < 0.06
    assert n_sharing / len(records) < 0.05, "titles rarely share a word with their labels' texts (TF-IDF is weak)"
    assert len(set(alias_of.values())) == len(alias_of), "two labels never share an alias"
    a = synthesize(tmp_path / "a", 30, 50, 10, seed=2, lexicon="english", bodies=True)
    assert (a / "trn.json.gz").read_bytes() != synthesize(
        tmp_path / "b", 30, 50, 10, seed=2, lexicon="english"
    ).joinpath("trn.json.gz").read_bytes()


def test_aliases_are_never_lexicon_words():
    """Seed 94's alias stream holds "luge", a member of winter sports: an alias must be unknown."""
    vocabulary = {w for _, c, members in lexicon() for text in (c, *members) for w in text.split(" ")}
    for seed in (0, 26, 68, 94):
        aliases = _aliases(40, seed)
        assert len(set(aliases)) == 40 and not set(aliases) & vocabulary


def test_bodies_is_recorded_in_the_spec_and_needs_the_english_lexicon():
    spec = make_synthetic_spec("en", n_labels=20, n_train=10, n_test=10, lexicon="english", bodies=True)
    assert spec.synthetic["bodies"] is True and spec.query_text == "title"  # queries are the titles
    assert "bodies" not in make_synthetic_spec("en", n_labels=20, n_train=10, n_test=10, lexicon="english").synthetic
    with pytest.raises(ValidationError, match="bodies applies to lexicon: english"):
        make_synthetic_spec("ps", n_labels=20, n_train=10, n_test=10, bodies=True)
    with pytest.raises(ValidationError, match="bodies applies to lexicon: english"):  # refused at validation
        SyntheticSpec(labels=20, train=1, test=1, bodies=True)
