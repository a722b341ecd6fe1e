"""Exact top-k search: brute-force agreement (with ties), chunking, exclusions, faiss, GPU."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from xmcbench.errors import XmcbenchError
from xmcbench.metrics import top_k
from xmcbench.search import exact_topk
from xmcbench.search.faiss_loader import import_faiss

try:
    import_faiss()
    HAS_FAISS = True
    BACKENDS = ["torch", "faiss"]
except ImportError:
    HAS_FAISS = False
    BACKENDS = ["torch", pytest.param("faiss", marks=pytest.mark.skip(reason="faiss is not installed"))]
needs_faiss = pytest.mark.skipif(not HAS_FAISS, reason="faiss is not installed")
# bf16 candidates rescored in float32 (the CUDA default), run here on the CPU: small-integer
# embeddings tie at the candidates' cut in most rows, so the float32 redo is exercised too.
BACKENDS_BF16 = [*BACKENDS, "torch-bf16"]


def _backend(name: str) -> dict:
    return {"backend": "torch", "matmul": "bf16"} if name == "torch-bf16" else {"backend": name}


def _integer_embeddings(seed: int, n: int = 120, n_labels: int = 90, d: int = 6):
    """Small-integer embeddings: inner products are exact in float32 and tie often."""
    rng = np.random.default_rng(seed)
    q = rng.integers(-2, 3, size=(n, d)).astype(np.float32)
    keys = rng.integers(-2, 3, size=(n_labels, d)).astype(np.float32)
    return q, keys


def _brute(q, keys, k, exclude=None):
    """(labels, scores) per row: a Python sort on (-score, label) of the exact scores."""
    scores = q.astype(np.float64) @ keys.astype(np.float64).T
    banned = None if exclude is None else exclude.toarray() > 0
    out = []
    for i, row in enumerate(scores):
        cols = [j for j in range(row.size) if banned is None or not banned[i, j]]
        cols.sort(key=lambda j: (-row[j], j))
        out.append([(j, row[j]) for j in cols[:k]])
    return out


def _as_rows(csr):
    return [
        sorted(
            zip(
                csr.indices[csr.indptr[i] : csr.indptr[i + 1]].tolist(),
                csr.data[csr.indptr[i] : csr.indptr[i + 1]].tolist(),
            )
        )
        for i in range(csr.shape[0])
    ]


@pytest.mark.parametrize("backend", BACKENDS_BF16)
@pytest.mark.parametrize(
    "chunking",
    [{}, {"chunk_size": 1}, {"chunk_size": 17}, {"label_chunk_size": 7}, {"chunk_size": 13, "label_chunk_size": 40}],
)
def test_matches_brute_force_with_exact_ties(chunking, backend):
    q, keys = _integer_embeddings(0)
    got = exact_topk(q, keys, 8, device="cpu", **_backend(backend), **chunking)
    assert got.shape == (120, 90) and got.has_canonical_format and got.dtype == np.float32
    assert got.indices.dtype == got.indptr.dtype == np.int32
    expected = _brute(q, keys, 8)
    assert _as_rows(got) == [sorted(row) for row in expected]  # ties at the k-th place: lower labels
    # Ranking the CSR with the metrics' convention gives back the brute-force order.
    assert top_k(got, 8).tolist() == [[j for j, _ in row] for row in expected]


@pytest.mark.parametrize("backend", BACKENDS_BF16)
def test_exclude_removes_pairs_before_top_k(backend):
    q, keys = _integer_embeddings(1, n=40, n_labels=30)
    rng = np.random.default_rng(1)
    exclude = sp.csr_matrix((rng.random((40, 30)) < 0.2).astype(np.float32))
    for chunking in ({}, {"chunk_size": 3, "label_chunk_size": 11}):
        got = exact_topk(q, keys, 5, device="cpu", **_backend(backend), exclude=exclude, **chunking)
        assert _as_rows(got) == [sorted(r) for r in _brute(q, keys, 5, exclude)]
        assert got.multiply(exclude).nnz == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_k_larger_than_label_count_and_exclusions_leave_fewer(backend):
    q, keys = _integer_embeddings(2, n=5, n_labels=4)
    got = exact_topk(q, keys, 10, device="cpu", backend=backend)
    assert got.getnnz(axis=1).tolist() == [4] * 5
    exclude = sp.csr_matrix(np.array([[1, 1, 1, 0]] + [[0, 0, 0, 0]] * 4, dtype=np.float32))
    got = exact_topk(q, keys, 10, device="cpu", backend=backend, exclude=exclude)
    assert got.getnnz(axis=1).tolist() == [1, 4, 4, 4, 4]
    assert got[0].indices.tolist() == [3]


@pytest.mark.parametrize("backend", BACKENDS_BF16)
def test_a_chunk_without_exclusions_beside_one_with_them(backend):
    """Exclusions only in the first chunk: the other chunks have none to apply (faiss once failed there)."""
    q, keys = _integer_embeddings(6, n=12, n_labels=10)
    exclude = sp.csr_matrix(([1.0, 1.0], ([0, 1], [3, 4])), shape=(12, 10))
    got = exact_topk(q, keys, 3, device="cpu", **_backend(backend), exclude=exclude, chunk_size=2)
    assert _as_rows(got) == [sorted(r) for r in _brute(q, keys, 3, exclude)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_torch_tensors_in(backend):
    torch = pytest.importorskip("torch")
    q, keys = _integer_embeddings(3, n=20, n_labels=15)
    a = exact_topk(torch.from_numpy(q), torch.from_numpy(keys).double(), 4, device="cpu", backend=backend)
    b = exact_topk(q, keys, 4, device="cpu", backend="torch")
    assert (a != b).nnz == 0


@pytest.mark.parametrize(
    ("group", "layout"), [(None, None), (0, None), (6, "strided"), (6, "contiguous")]
)  # 6: two stages, with and without a partial group
@pytest.mark.parametrize("scale", [1.0, 1e-3, 1e4])
def test_bf16_candidates_give_the_float32_top_k(scale, group, layout):
    """Continuous scores: the bf16 candidates, rescored, are the float32 top-k; the bound accepts
    nearly every row (the redo is for near-ties), at any embedding scale, however the candidates
    are picked."""
    rng = np.random.default_rng(11)
    q = (rng.standard_normal((150, 48)) * scale).astype(np.float32)
    keys = rng.standard_normal((4000, 48)).astype(np.float32)
    exclude = sp.csr_matrix((rng.random((150, 4000)) < 0.01).astype(np.float32))
    for ex, chunking in ((None, {}), (exclude, {"chunk_size": 40, "label_chunk_size": 900})):
        ref = exact_topk(q, keys, 20, device="cpu", backend="torch", matmul="fp32", exclude=ex, **chunking)
        stats = {}
        got = exact_topk(
            q,
            keys,
            20,
            device="cpu",
            backend="torch",
            matmul="bf16",
            exclude=ex,
            stats=stats,
            group=group,
            group_layout=layout,
            **chunking,
        )
        np.testing.assert_array_equal(got.indptr, ref.indptr)
        np.testing.assert_array_equal(got.indices, ref.indices)
        np.testing.assert_allclose(got.data, ref.data, rtol=1e-5, atol=1e-6 * scale)
        assert stats["rows"] == 150 * (1 if ex is None else 5) and stats["rows_redone"] <= 0.05 * stats["rows"]
    # Too few candidates for the bound: every row is redone in float32, and the answer is the same.
    stats = {}
    few = exact_topk(
        q,
        keys,
        20,
        device="cpu",
        backend="torch",
        matmul="bf16",
        candidates=20,
        stats=stats,
        group=group,
        group_layout=layout,
    )
    assert (few != exact_topk(q, keys, 20, device="cpu", backend="torch", matmul="fp32")).nnz == 0
    assert stats["rows_redone"] > 0


@pytest.mark.parametrize(("group", "layout"), [(0, None), (4, "strided"), (4, "contiguous"), (None, None)])
@pytest.mark.parametrize("matmul", ["fp32", "bf16"])
def test_tied_rows_picked_in_two_stages_are_the_brute_force_top_k(matmul, group, layout):
    """Wide enough blocks that the top-k (k + 1 for float32, the candidates for bf16) is picked in
    two stages; small-integer scores tie across the groups' cut, the pool's and the k-th place."""
    q, keys = _integer_embeddings(31, n=40, n_labels=3000)
    exclude = sp.csr_matrix(np.random.default_rng(3).random((40, 3000)) < 0.02)
    for ex in (None, exclude):
        got = exact_topk(
            q, keys, 12, device="cpu", backend="torch", matmul=matmul, exclude=ex, group=group, group_layout=layout
        )
        assert _as_rows(got) == [sorted(r) for r in _brute(q, keys, 12, ex)]


@pytest.mark.parametrize("layout", ["strided", "contiguous"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize(("width", "m", "group"), [(97, 5, 4), (96, 5, 4), (200, 30, 3), (50, 20, 4), (64, 3, 0)])
def test_two_stage_candidates_keep_torch_topks_contract(width, m, group, dtype, layout):
    """The candidates hold m distinct columns whose values are the block's m largest (as a
    multiset, ties included), read from those columns: what torch.topk(sorted=False) promises.
    Scores from a few integers tie in every row, across the groups' cut and the pool's."""
    torch = pytest.importorskip("torch")
    from xmcbench.search.exact import _candidate_topk

    g = torch.Generator().manual_seed(width + m)
    scores = torch.randint(-3, 4, (40, width), generator=g).to(getattr(torch, dtype))
    scores[::7, width // 2 :] = float("-inf")  # excluded pairs
    scores[3] = torch.arange(width)  # the best in the partial last group
    scores[5] = -torch.arange(width)  # the best in the first column
    values, columns = _candidate_topk(scores, m, group, layout)
    assert values.shape == columns.shape == (40, m)
    assert bool((scores.gather(1, columns) == values).all())
    assert all(len(set(row)) == m for row in columns.tolist())
    want = torch.topk(scores.float(), m, dim=1).values
    np.testing.assert_array_equal(values.float().sort(dim=1, descending=True).values.numpy(), want.numpy())


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["strided", "contiguous"])
@pytest.mark.parametrize("width", [781 * 256, 200_003])  # whole groups; a partial last group
def test_two_stage_candidates_on_a_gpu(width, layout):
    """The CUDA kernels (strided group maxima, expanded-index gather) at a width where the two
    stages run with the default group: the same contract as on the CPU, bf16 scores that tie."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from xmcbench.search.exact import _TOPK_GROUP, _candidate_topk

    g = torch.Generator(device="cuda").manual_seed(width)
    scores = torch.randint(-50, 50, (300, width), generator=g, device="cuda").to(torch.bfloat16)
    scores[7, -1] = 100  # the row's best, in the last group
    values, columns = _candidate_topk(scores, 232, _TOPK_GROUP, layout)
    assert bool((scores.gather(1, columns) == values).all())
    assert bool((columns.sort(dim=1).values.diff(dim=1) > 0).all())  # distinct columns
    want = torch.topk(scores.float(), 232, dim=1).values
    assert torch.equal(values.float().sort(dim=1, descending=True).values, want)
    assert width - 1 in columns[7].tolist()


def test_gpu_budget_is_a_share_of_free_memory_within_bounds(monkeypatch):
    torch = pytest.importorskip("torch")
    from xmcbench.search import exact

    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 3 * 2**30)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 2**30)  # 2 GiB cached, reusable
    for free, cells in (
        (80e9, exact._GPU_BUDGET_MAX),
        (10e9, int((10e9 + 2**31) // 32)),
        (4e9, exact._GPU_BUDGET),  # the 1 GB floor
        (0.5e9, int((0.5e9 + 2**31) // 16)),  # under it: 1/16 of what is free
    ):
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None, free=free: (int(free), int(80e9)))
        assert exact._gpu_budget("cuda") == cells


def test_a_chunk_never_holds_2_to_the_31_score_cells(monkeypatch):
    """On a GPU with room for 2^31 bf16 cells, a 2^20-label block would reach int32's limit."""
    from xmcbench.search import exact

    seen = []
    monkeypatch.setattr(exact, "_CPU_BUDGET", 1 << 40)
    monkeypatch.setattr(exact, "_MAX_BLOCK_CELLS", 200)
    real_mask = exact._mask
    monkeypatch.setattr(exact, "_mask", lambda scores, *a: (seen.append(scores.numel()), real_mask(scores, *a)))
    q, keys = _integer_embeddings(21, n=50, n_labels=30)
    got = exact_topk(q, keys, 5, backend="torch", device="cpu", matmul="fp32")
    assert max(seen) <= 200 and len(seen) == 9  # 6 queries a chunk of 30 labels
    assert _as_rows(got) == [sorted(row) for row in _brute(q, keys, 5)]


def test_index_dtype_widens_past_int32():
    from xmcbench.search.exact import _index_dtype, _to_csr, _torch_topk

    # The torch backend hands its labels over as int32 already (a third less to copy from a GPU).
    q, keys = _integer_embeddings(2, n=10, n_labels=30)
    for matmul in ("fp32", "bf16"):
        _, labels = _torch_topk(
            q, keys, 4, None, None, "cpu", None, matmul, None, (0, "strided"), {"rows": 0, "rows_redone": 0}
        )
        assert labels.dtype == np.int32

    assert _index_dtype(2**31 - 1, 10) == np.int32
    assert _index_dtype(2**31, 10) == np.int64  # a label index past int32
    assert _index_dtype(10, 2**31) == np.int64  # a row pointer past int32
    # A -inf slot is dropped whatever dtype the labels come in.
    values = np.array([[2.0, -np.inf], [1.0, 0.5]], dtype=np.float32)
    got = _to_csr(values, np.array([[3, 0], [1, 2]], dtype=np.int64), 4, sorted_rows=True)
    assert got.indices.dtype == np.int32 and got.indptr.tolist() == [0, 1, 3] and got.indices.tolist() == [3, 1, 2]


def test_group_is_checked():
    q, keys = _integer_embeddings(12, n=3, n_labels=4)
    with pytest.raises(XmcbenchError, match="group"):
        exact_topk(q, keys, 2, matmul="bf16", group=-1)
    with pytest.raises(XmcbenchError, match="group_layout"):
        exact_topk(q, keys, 2, matmul="bf16", group_layout="diagonal")


def test_bf16_search_leaves_the_matmul_flags_as_it_found_them():
    torch = pytest.importorskip("torch")
    q, keys = _integer_embeddings(16, n=10, n_labels=50)
    matmul = torch.backends.cuda.matmul
    before = (matmul.allow_tf32, matmul.allow_bf16_reduced_precision_reduction)
    matmul.allow_tf32 = True  # a caller's choice: off during the search (the bound needs float32), back after
    try:
        got = exact_topk(q, keys, 5, device="cpu", matmul="bf16")  # backend "auto" goes to torch for bf16
        assert _as_rows(got) == [sorted(row) for row in _brute(q, keys, 5)]
        assert matmul.allow_tf32 is True
    finally:
        matmul.allow_tf32, matmul.allow_bf16_reduced_precision_reduction = before


def test_matmul_choices_are_checked():
    q, keys = _integer_embeddings(12, n=3, n_labels=4)
    with pytest.raises(XmcbenchError, match="matmul"):
        exact_topk(q, keys, 2, matmul="fp16")
    with pytest.raises(XmcbenchError, match="candidates"):
        exact_topk(q, keys, 2, candidates=1)
    with pytest.raises(XmcbenchError, match="float32 only"):
        exact_topk(q, keys, 2, backend="faiss", matmul="bf16")


@needs_faiss
def test_faiss_backend_agrees():
    rng = np.random.default_rng(4)
    q = rng.standard_normal((64, 16)).astype(np.float32)  # continuous: no ties
    keys = rng.standard_normal((500, 16)).astype(np.float32)
    exclude = sp.csr_matrix((rng.random((64, 500)) < 0.05).astype(np.float32))
    for ex in (None, exclude):
        a = exact_topk(q, keys, 10, backend="torch", device="cpu", exclude=ex)
        b = exact_topk(q, keys, 10, backend="faiss", exclude=ex, chunk_size=10)
        np.testing.assert_array_equal(a.indptr, b.indptr)
        np.testing.assert_array_equal(a.indices, b.indices)
        np.testing.assert_allclose(a.data, b.data, rtol=1e-5, atol=1e-5)
    c = exact_topk(q, keys, 1000, backend="faiss")  # k > L
    assert c.getnnz(axis=1).tolist() == [500] * 64


@needs_faiss
def test_faiss_integer_ties_are_sorted_by_label():
    q, keys = _integer_embeddings(5, n=30, n_labels=25)
    got = exact_topk(q, keys, 25, backend="faiss")  # k = L: every label returned, no boundary
    expected = _brute(q, keys, 25)
    assert top_k(got, 25).tolist() == [[j for j, _ in row] for row in expected]


@needs_faiss
@pytest.mark.parametrize("k", [1, 5, 24, 59])  # 59: faiss returns all 60 labels, no row is redone
def test_faiss_ties_across_the_cut_go_to_the_lower_label(k):
    """faiss cuts a tie at the k-th place in an order of its own; xmcbench redoes those rows exactly."""
    q, keys = _integer_embeddings(9, n=200, n_labels=60, d=4)  # 4-d small integers: most rows tie at the cut
    exclude = sp.csr_matrix((np.random.default_rng(9).random((200, 60)) < 0.1).astype(np.float32))
    for ex in (None, exclude):
        for chunk in (None, 7):
            got = exact_topk(q, keys, k, backend="faiss", exclude=ex, chunk_size=chunk)
            expected = _brute(q, keys, k, ex)
            assert _as_rows(got) == [sorted(row) for row in expected]
            assert (got != exact_topk(q, keys, k, backend="torch", device="cpu", exclude=ex)).nnz == 0


def test_auto_backend_is_faiss_on_cpu_and_torch_without_it(monkeypatch):
    from xmcbench.search import resolve_backend

    assert resolve_backend("torch", "cpu") == "torch" and resolve_backend("faiss", "cuda") == "faiss"
    assert resolve_backend("auto", "cuda") == "torch"  # the GPU matmul: faiss-gpu is an extra
    assert resolve_backend("auto", "cpu") == ("faiss" if HAS_FAISS else "torch")
    monkeypatch.setitem(__import__("sys").modules, "faiss", None)  # import faiss now raises ImportError
    assert resolve_backend("auto", "cpu") == "torch"
    q, keys = _integer_embeddings(10, n=20, n_labels=30)
    expected = _brute(q, keys, 5)
    assert _as_rows(exact_topk(q, keys, 5, device="cpu")) == [sorted(row) for row in expected]


def test_bad_inputs():
    q, keys = _integer_embeddings(6, n=3, n_labels=4)
    with pytest.raises(XmcbenchError, match="dimension"):
        exact_topk(q, keys[:, :3], 2)
    with pytest.raises(XmcbenchError, match="positive"):
        exact_topk(q, keys, 0)
    with pytest.raises(XmcbenchError, match="backend"):
        exact_topk(q, keys, 2, backend="annoy")
    with pytest.raises(XmcbenchError, match="exclude has shape"):
        exact_topk(q, keys, 2, exclude=sp.csr_matrix((3, 5)))
    for value in (np.nan, np.inf, -np.inf):  # inf * 0 would be a NaN score: refused like NaN, by every backend
        for backend in ("torch", "faiss"):
            bad = q.copy()
            bad[1, 0] = value
            with pytest.raises(XmcbenchError, match=r"query embeddings contain NaN or infinite values \(row"):
                exact_topk(bad, keys, 2, device="cpu", backend=backend)
            bad_keys = keys.copy()
            bad_keys[2, 1] = value
            with pytest.raises(XmcbenchError, match="label embeddings contain NaN or infinite values"):
                exact_topk(q, bad_keys, 2, device="cpu", backend=backend)
    with pytest.raises(XmcbenchError, match="2-D"):
        exact_topk(q[0], keys, 2)


def test_unavailable_cuda_is_a_clear_error():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    q, keys = _integer_embeddings(7, n=3, n_labels=4)
    with pytest.raises(XmcbenchError, match="CUDA is not available"):
        exact_topk(q, keys, 2, device="cuda")


@pytest.mark.gpu
def test_gpu_matches_cpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    q, keys = _integer_embeddings(8, n=500, n_labels=3000, d=8)
    exclude = sp.csr_matrix((np.random.default_rng(8).random((500, 3000)) < 0.01).astype(np.float32))
    cpu = exact_topk(q, keys, 20, device="cpu", exclude=exclude)
    for chunking in ({}, {"chunk_size": 64, "label_chunk_size": 700}):
        gpu = exact_topk(q, keys, 20, device="cuda", exclude=exclude, **chunking)
        assert (cpu != gpu).nnz == 0  # integer embeddings: exact scores, ties resolved identically
    default = exact_topk(q, keys, 20, exclude=exclude)  # device=None picks CUDA (bf16 candidates)
    assert (cpu != default).nnz == 0


@pytest.mark.gpu
def test_gpu_bf16_candidates_match_float32():
    """Against float64 scores: both paths return a top-100 that no label left out beats by more than
    float32 rounding (two float32 sums of 384 terms may order a near-tie differently)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    rng = np.random.default_rng(13)
    q = rng.standard_normal((2000, 384)).astype(np.float32)
    keys = rng.standard_normal((50_000, 384)).astype(np.float32)
    exact = torch.from_numpy(q).cuda().double() @ torch.from_numpy(keys).cuda().double().T  # (n, L)
    tol = 384 * 2.0**-23 * np.linalg.norm(q, axis=1).max() * np.linalg.norm(keys, axis=1).max()
    stats = {}
    ref = exact_topk(q, keys, 100, device="cuda", matmul="fp32")
    got = exact_topk(q, keys, 100, device="cuda", stats=stats)  # the CUDA default: bf16 candidates
    for result in (ref, got):
        chosen = torch.zeros_like(exact, dtype=torch.bool)
        rows = torch.arange(2000, device="cuda").repeat_interleave(100)
        chosen[rows, torch.from_numpy(result.indices.astype(np.int64)).cuda()] = True
        worst_in = exact.masked_fill(~chosen, float("inf")).min(dim=1).values
        best_out = exact.masked_fill(chosen, float("-inf")).max(dim=1).values
        assert bool((best_out <= worst_in + tol).all())
    same = (got.indices.reshape(2000, 100) == ref.indices.reshape(2000, 100)).all(axis=1)
    assert same.mean() >= 0.99
    np.testing.assert_allclose(
        got.data.reshape(2000, 100)[same], ref.data.reshape(2000, 100)[same], rtol=1e-5, atol=1e-4
    )
    assert stats["rows_redone"] < stats["rows"]
