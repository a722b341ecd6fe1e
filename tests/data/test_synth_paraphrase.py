"""The ``paraphrase`` option of the synthetic generator (default off: files and specs unchanged)."""

from __future__ import annotations

import gzip
import json

from xmcbench.data.synth import make_synthetic_spec, synthesize


def _titles(path):
    with gzip.open(path, "rt") as fh:
        return [json.loads(line)["title"] for line in fh]


def _overlap(folder) -> float:
    """Share of query-title words that are words of the query's own target label titles."""
    labels = _titles(folder / "lbl.json.gz")
    hits = total = 0
    with gzip.open(folder / "trn.json.gz", "rt") as fh:
        for line in fh:
            rec = json.loads(line)
            label_words = {w for j in rec["target_ind"] for w in labels[j].split()}
            words = rec["title"].split()
            hits += sum(w in label_words for w in words)
            total += len(words)
    return hits / total


def test_off_by_default_and_byte_identical(tmp_path):
    a = synthesize(tmp_path / "a", 80, 200, 20, seed=4)
    b = synthesize(tmp_path / "b", 80, 200, 20, seed=4, paraphrase=False)
    for name in ("trn.json.gz", "tst.json.gz", "lbl.json.gz", "filter_labels_test.txt"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    spec = make_synthetic_spec("x", n_labels=80, n_train=200, n_test=20)
    assert "paraphrase" not in spec.synthetic and spec.query_text == "title"


def test_paraphrase_titles_avoid_the_labels_words(tmp_path):
    plain = synthesize(tmp_path / "p", 200, 600, 20, seed=1)
    para = synthesize(tmp_path / "q", 200, 600, 20, seed=1, paraphrase=True)
    assert _overlap(para) < 0.5 * _overlap(plain)
    spec = make_synthetic_spec("y", n_labels=200, n_train=600, n_test=20, paraphrase=True)
    assert spec.synthetic["paraphrase"] is True and spec.query_text == "title+content"
