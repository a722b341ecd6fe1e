import numpy as np
from scipy import sparse

from xmcbench.methods.base import RunContext, TrainTask
from xmcbench.methods.tfidf import TfidfConfig, TfidfMethod

LABELS = ["red running shoes", "blue denim jacket", "wireless noise cancelling headphones", "red wine glass"]
QUERIES = ["running shoes for men red", "headphones wireless", "glass for red wine", "zzz unknown words"]


def fitted(tmp_path, **cfg):
    method = TfidfMethod(TfidfConfig(**cfg))
    task = TrainTask("toy", train_texts=QUERIES, label_texts=LABELS, train_labels=None)
    method.fit(task, RunContext(run_dir=tmp_path, progress=False))
    return method


def test_ranks_the_obvious_label_first(tmp_path):
    method = fitted(tmp_path)
    pred = method.predict(QUERIES, 2, RunContext(run_dir=tmp_path, progress=False))
    assert pred.shape == (4, 4)
    top = [
        int(
            pred.indices[pred.indptr[i] : pred.indptr[i + 1]][np.argmax(pred.data[pred.indptr[i] : pred.indptr[i + 1]])]
        )
        for i in range(3)
    ]
    assert top == [0, 2, 3]
    assert pred.getrow(3).nnz == 0  # no shared vocabulary: no prediction rather than a random one


def test_scores_are_cosine_of_tfidf_vectors(tmp_path):
    method = fitted(tmp_path, chunk_size=1)
    pred = method.predict(QUERIES, 4, RunContext(run_dir=tmp_path, progress=False)).toarray()
    q = method.vectorizer.transform(QUERIES).toarray()
    lab = method.vectorizer.transform(LABELS).toarray()
    cos = (q @ lab.T) / np.maximum(np.linalg.norm(q, axis=1, keepdims=True) * np.linalg.norm(lab, axis=1), 1e-12)
    np.testing.assert_allclose(pred, cos, atol=1e-6)


def test_save_load_round_trip(tmp_path):
    method = fitted(tmp_path)
    ctx = RunContext(run_dir=tmp_path, progress=False)
    before = method.predict(QUERIES, 3, ctx)
    method.save(tmp_path / "m")
    other = TfidfMethod(TfidfConfig())
    other.load(tmp_path / "m")
    assert (other.predict(QUERIES, 3, ctx) != before).nnz == 0
    assert isinstance(before, sparse.csr_matrix)
