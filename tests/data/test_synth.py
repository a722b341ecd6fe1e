"""Synthetic generator: exact LF format, determinism, reciprocal pairs, learnable structure."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import scipy.sparse as sp
from lf_json_helpers import iter_records
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.preprocessing import normalize

from xmcbench.data.catalog import LF_FILES
from xmcbench.data.prepared import load_prepared, prepare
from xmcbench.data.synth import make_synthetic_spec, synthesize
from xmcbench.data.synth_words import make_words


def test_files_and_format(synth_raw_dir, synth_params):
    assert sorted(p.name for p in synth_raw_dir.iterdir()) == sorted(LF_FILES)
    labels = list(iter_records(synth_raw_dir / "lbl.json.gz", targets=False))
    train = list(iter_records(synth_raw_dir / "trn.json.gz", n_labels=len(labels)))
    test = list(iter_records(synth_raw_dir / "tst.json.gz", n_labels=len(labels)))
    assert (len(labels), len(train), len(test)) == (200, 1000, 250)
    assert all(r["target_ind"] == sorted(set(r["target_ind"])) and r["target_ind"] for r in train + test)
    assert len({r["title"] for r in labels}) > 190  # titles nearly all distinct
    raw = gzip.decompress((synth_raw_dir / "trn.json.gz").read_bytes()).decode()
    assert "&amp;" in raw or "&#8217;" in raw  # HTML entities as in the real files
    assert any(r["content"] == "" for r in train) and any(r["content"] for r in train)


def test_deterministic_by_seed(tmp_path, synth_raw_dir, synth_params):
    again = synthesize(tmp_path / "again", **synth_params)
    for name in LF_FILES:
        assert (again / name).read_bytes() == (synth_raw_dir / name).read_bytes(), name
    other = synthesize(tmp_path / "other", **{**synth_params, "seed": 1})
    assert (other / "trn.json.gz").read_bytes() != (synth_raw_dir / "trn.json.gz").read_bytes()


def test_reciprocal_pairs_are_in_filter_files(synth_raw_dir):
    labels = list(iter_records(synth_raw_dir / "lbl.json.gz", targets=False))
    for split_file, filter_file in (
        ("trn.json.gz", "filter_labels_train.txt"),
        ("tst.json.gz", "filter_labels_test.txt"),
    ):
        queries = list(iter_records(synth_raw_dir / split_file))
        pairs = [tuple(map(int, line.split())) for line in (synth_raw_dir / filter_file).read_text().splitlines()]
        assert len(pairs) > 0 and pairs == sorted(pairs)
        for doc, label in pairs:
            assert queries[doc]["title"] == labels[label]["title"]
            assert queries[doc]["uid"] == labels[label]["uid"]
            assert label not in queries[doc]["target_ind"]  # a self pair, never ground truth
    train_pairs = {int(l.split()[1]) for l in (synth_raw_dir / "filter_labels_train.txt").read_text().splitlines()}
    test_pairs = {int(l.split()[1]) for l in (synth_raw_dir / "filter_labels_test.txt").read_text().splitlines()}
    assert not train_pairs & test_pairs  # a label is one document at most


def test_zipfian_label_frequencies(tmp_path):
    raw = synthesize(tmp_path, n_labels=500, n_train=5000, n_test=10, seed=4, labels_per_query=1.0)
    counts = np.bincount([r["target_ind"][0] for r in iter_records(raw / "trn.json.gz")], minlength=500)
    ranked = np.sort(counts)[::-1]
    assert ranked[0] > 20 * max(np.median(counts), 1)  # a heavy head
    assert np.count_nonzero(counts <= 2) > 150  # and a long tail
    # frequency falls roughly as 1/rank: the top label is about twice the second
    assert 1.3 < ranked[0] / ranked[1] < 4


def test_words_distinct_and_seeded():
    rng = np.random.default_rng(0)
    words = make_words(100_000, rng)  # spans the 2- and 3-syllable buckets
    assert len(set(words.tolist())) == 100_000
    assert all(w.isalpha() for w in words[:1000])
    assert make_words(50, np.random.default_rng(1)).tolist() != make_words(50, np.random.default_rng(2)).tolist()


def test_spec_for_synthetic():
    spec = make_synthetic_spec("synth-a", n_labels=40, n_train=100, n_test=20, seed=7)
    assert spec.format == "lf-json" and spec.sources[0].kind == "synthetic" and spec.raw_group == "synth-a"
    assert (spec.propensity_a, spec.propensity_b) == (0.55, 1.5)
    assert spec.paper_counts == {"train": 100, "test": 20, "labels": 40}
    assert spec.synthetic["seed"] == 7 and spec.synthetic["n_topics"] == 2
    with pytest.raises(ValueError):
        make_synthetic_spec("synth-b", n_labels=40, n_train=100, n_test=20, bogus=1)


def _precision_at_1(scores: np.ndarray, truth: sp.csr_matrix, filt: sp.csr_matrix) -> float:
    scores = scores.copy()
    scores[filt.nonzero()] = -np.inf
    top = scores.argmax(axis=1)
    return float(np.asarray(truth[np.arange(truth.shape[0]), top]).mean())


def test_structure_is_learnable_but_not_trivial(tmp_path):
    """Training pairs teach what title overlap alone cannot: label centroids of training queries beat
    matching queries to label titles, which beats predicting the most popular label; none is perfect."""
    spec = make_synthetic_spec("synth-l", n_labels=300, n_train=6000, n_test=600, seed=5)
    synthesize(tmp_path / "raw", **spec.synthetic)
    ds = load_prepared(prepare(spec, tmp_path / "raw", tmp_path / "p", progress=False))
    train, test, labels = (
        ds.query_texts("train").to_list(),
        ds.query_texts("test").to_list(),
        ds.label_texts().to_list(),
    )
    vectorizer = TfidfVectorizer(token_pattern=r"\S+", sublinear_tf=True).fit(train + labels)
    q, lab, tr = (normalize(vectorizer.transform(t)) for t in (test, labels, train))
    truth, filt = ds.labels("test"), ds.filter("test")
    zero_shot = _precision_at_1((q @ lab.T).toarray(), truth, filt)
    centroids = normalize(ds.labels("train").T @ tr + lab)
    trained = _precision_at_1((q @ centroids.T).toarray(), truth, filt)
    popular = int(np.asarray(ds.labels("train").sum(0)).argmax())
    popularity = truth[:, popular].mean()  # always predict the most frequent label
    assert popularity + 0.1 < zero_shot < trained - 0.1 and trained < 0.95
