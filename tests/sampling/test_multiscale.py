"""MACLR's multi-scale clustering schedule (Algorithm 1 lines 7-14) and the faiss K-means wrapper."""

from __future__ import annotations

import numpy as np
import pytest

from xmcbench.sampling.multiscale import MultiScaleSchedule, kmeans_assign


def test_paper_schedule():
    s = MultiScaleSchedule(k0=2048, t_k=10_000, t_update=5_000, total_steps=100_000, n_instances=10**6)
    assert s.n_clusters(0) == 2048 and s.n_clusters(9_999) == 2048
    assert s.n_clusters(10_000) == 4096 and s.n_clusters(40_000) == 2048 * 16
    assert s.n_clusters(60_000) == s.n_clusters(49_999)  # no doubling after the first half
    assert s.refresh_due(5_000) and s.refresh_due(45_000) and not s.refresh_due(50_000) and not s.refresh_due(4_999)
    assert s.clustering_active(50_000) and not s.clustering_active(50_001)


def test_k_capped_and_k0_checked():
    s = MultiScaleSchedule(k0=4, t_k=1, t_update=1, total_steps=100, n_instances=10)
    assert s.n_clusters(30) == 10
    with pytest.raises(ValueError, match="K0 = 11"):
        MultiScaleSchedule(k0=11, t_k=1, t_update=1, total_steps=100, n_instances=10)


def test_kmeans_separates_blobs():
    rng = np.random.default_rng(0)
    centres = np.array([[10, 0], [0, 10], [-10, -10]], dtype=np.float32)
    x = np.concatenate([c + rng.normal(size=(50, 2)) for c in centres]).astype(np.float32)
    a = kmeans_assign(x, 3, seed=0)
    assert a.shape == (150,) and len(set(a[:50])) == 1 and len({a[0], a[50], a[100]}) == 3
    assert (kmeans_assign(x, 150, seed=0) == np.arange(150)).all()


def test_kmeans_without_faiss_says_how_to_install_it(monkeypatch):
    from xmcbench.errors import XmcbenchError
    from xmcbench.search import faiss_loader

    monkeypatch.setattr(faiss_loader, "import_faiss", lambda: (_ for _ in ()).throw(ImportError("no faiss")))
    with pytest.raises(
        XmcbenchError, match=r"faiss K-means, and faiss is not installed: pip install 'xmcbench\[faiss-cpu\]'"
    ):
        kmeans_assign(np.zeros((10, 4), dtype=np.float32), 3, seed=0)
