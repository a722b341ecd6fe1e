import numpy as np
from scipy import sparse

from xmcbench.search.sparse_topk import remove_pairs, topk_csr


def brute_topk(dense_mask, dense, k):
    out = np.zeros_like(dense)
    for i in range(dense.shape[0]):
        cols = np.flatnonzero(dense_mask[i])
        order = sorted(cols, key=lambda c: (-dense[i, c], c))[:k]
        out[i, order] = dense[i, order]
    return out


def test_topk_matches_brute_force_with_ties():
    rng = np.random.default_rng(0)
    dense = rng.integers(0, 4, size=(50, 30)).astype(np.float32)  # many ties
    mask = rng.random((50, 30)) < 0.4
    m = sparse.csr_matrix((dense[mask], np.nonzero(mask)), shape=dense.shape)
    for k in (1, 3, 10, 40):
        got = topk_csr(m, k)
        expect = brute_topk(mask, dense, k)
        np.testing.assert_array_equal(got.toarray(), expect)
        kept = np.zeros_like(mask)
        for i in range(50):
            kept[i, got.indices[got.indptr[i] : got.indptr[i + 1]]] = True
        assert (kept.sum(1) == np.minimum(mask.sum(1), k)).all()


def test_remove_pairs_keeps_zero_scores_and_checks_shape():
    scores = sparse.csr_matrix((np.array([0.0, 2.0, 1.0], np.float32), ([0, 0, 1], [1, 2, 0])), shape=(2, 3))
    scores.data[0] = 0.0  # explicit zero score is still a prediction
    filt = sparse.csr_matrix((np.ones(1), ([0], [2])), shape=(2, 3))
    out = remove_pairs(scores, filt)
    coo = out.tocoo()
    assert out.nnz == 2 and sorted(zip(coo.row.tolist(), coo.col.tolist())) == [(0, 1), (1, 0)]
    assert remove_pairs(scores, None).nnz == 3
    try:
        remove_pairs(scores, sparse.csr_matrix((3, 3)))
    except ValueError as exc:
        assert "shape" in str(exc)
    else:
        raise AssertionError("shape mismatch not caught")
