"""Exact maximum-inner-product top-k: query embeddings x label embeddings -> a CSR of top-k scores.

    >>> scores = exact_topk(query_emb, label_emb, k=100)            # (n, L) CSR, k entries a row
    >>> scores = exact_topk(query_emb, label_emb, k=100, exclude=filter_pairs)

The result has, for each query, its k best labels by inner product (fewer if fewer labels remain),
stored as a canonical CSR (sorted label indices, float32 scores), the input xmcbench.metrics
expects. Ties are broken by the lower label index — the same rule the metrics use — exactly with
both backends: faiss returns ties at the k-th place in an order of its own, so it is asked for one
label more than kept, and a query whose last returned score equals its k-th (a tie may cross the
cut) is scored again in full and cut exactly.

Memory stays bounded: queries are processed ``chunk_size`` at a time, and when the label set is
large the labels are split into blocks too; each block's top-k is merged into the running top-k.
``exclude`` (an (n, L) sparse matrix of (query, label) pairs, e.g. a filter file) removes pairs
*before* the top-k, so k labels remain whenever possible.

Backends: ``"auto"`` (default) picks by measurement (``benchmarks/``, row ``search``): torch on a
CUDA device, faiss on CPU when it is installed (its blocked BLAS search beat torch's matmul + top-k
by 1.3x at 10k x 100k x 384 on 2 cores, once its OpenBLAS runs this CPU's kernels:
``xmcbench.search.faiss_loader``), torch otherwise. ``"torch"`` runs on CUDA when available
(``device=None``) or on the given device; ``"faiss"`` uses ``IndexFlatIP`` (on a GPU when faiss has
GPU support and one is present).

bf16 candidates, exact results (``matmul="bf16"``, the torch backend's default on CUDA): the full
(queries x labels) product runs in bf16 on the tensor cores, each query keeps its m best labels
by those scores (m = 2k + 32, or 4k for blocks over 2^18 labels), and the candidates are scored
again in float32. A query's answer is accepted only when its k-th rescored value beats a proven
bound on what any label left out could score in float32:

    r_j <= c + E,   E = |dq| |K~| + |q~| |dK| + |dq| |dK| + (u_out + 2 d 2^-24) |q~| |K~|     (x 1.05)

where c is the query's m-th bf16 score (every label left out scored at most c), q~ = bf16(q),
dq = q - q~, |K~| and |dK| the largest label-embedding norm and rounding error in the block, u_out
the unit roundoff of the bf16 output (2^-8; a float32 output would drop it, but top-k over bf16
scores is faster: 9.0 vs 13.4 ms for 10k x 100k on an H200) and the 2 d 2^-24 terms the float32
accumulation of the product and of the rescore (Cauchy-Schwarz bounds the rest). A query that
fails the test (near-ties at the cut, rare with real embeddings) is searched again in float32
over that block. The result is the float32 top-k of every query: its scores come from a float32
rescore whose sums run in another order than the full float32 product's, so a near-tie within
float32 rounding may go either way (as it may between two float32 products).

On wide blocks the m candidates are picked in two narrow top-ks instead of one over the whole
block: the block's columns are cut into groups of g (32), the m groups with the largest maxima are
kept, and the m best of their entries (plus the last, partial group) are the candidates. A group
holds every G-th column (G = C / g: group j is columns j, j + G, j + 2G, ...), so the maxima are
one reduction over the middle axis of a (B, g, G) view, which reads the block once and in order;
groups of g neighbouring columns made torch reduce rows of g elements, 9x slower (H200, 10k x 100k
bf16: 1.0 against 8.8-8.9 ms). It is used when the groups hold under half the block. H200, 10k
queries x 384-d, k = 100 (``benchmarks/results/search-gpu-h200-strided*.json`` and
``search-gpu-h200-profile-strided*.txt``): the candidates took 2.6-2.7 ms against 7.4 ms for one
torch.topk at 100k labels, and the whole search 12.4-12.5 ms (0.77-0.78x
the float32 matmul; 27 ms with one top-k and the code before) and 43 ms at 1M labels (0.23x; 110
ms before). The float32 path picks its k + 1 the same way. Nothing left out beats the m-th
candidate, as the bound needs: an entry outside the kept groups is at most its own group's
maximum, which is at most each of the m kept groups' maxima — m distinct entries of the pool
(any partition of the columns into groups will do).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from xmcbench.errors import XmcbenchError
from xmcbench.search.faiss_loader import faiss_or_error, import_faiss

__all__ = ["exact_topk", "resolve_backend"]

_CPU_BUDGET = 1 << 25  # score cells per block on CPU: 32M float32 = 128 MB (plus masks of the same shape)
_GPU_BUDGET = 1 << 28  # on GPU at least 256M cells = 1 GB; more when the GPU has it free (_gpu_budget)
_GPU_BUDGET_MAX = 1 << 30  # 4 GB of float32 cells: a 10k x 100k bf16 search in one chunk
_MAX_BLOCK_CELLS = (1 << 31) - 1  # a score block's elements (a bf16 block at the budget's top reaches 2^31)
_LABEL_BLOCK = 1 << 20  # labels per block when L is larger than this
_TOPK_GROUP = 32  # columns per group of the bf16 candidates' two-stage top-k (0: one torch.topk)
_GROUP_LAYOUT = "strided"  # which columns a group holds: "strided" (every G-th) or "contiguous"


def exact_topk(
    queries,
    keys,
    k: int,
    *,
    chunk_size: int | None = None,
    device=None,
    backend: str = "auto",
    exclude=None,
    label_chunk_size: int | None = None,
    matmul: str = "auto",
    candidates: int | None = None,
    group: int | None = None,
    group_layout: str | None = None,
    stats: dict | None = None,
) -> sp.csr_matrix:
    """Top-k labels of every query by inner product, as an (n, L) CSR of scores.

    Args:
        queries: (n, d) query embeddings, numpy array or torch tensor.
        keys: (L, d) label embeddings, numpy array or torch tensor.
        k: labels kept per query (k > L keeps all L).
        chunk_size: queries per block (default: from a memory budget of ~128 MB on a CPU, 1-4 GB on
            a GPU by its free memory).
        device: torch device for the torch backend; None picks CUDA when available.
        backend: "auto" (faiss on CPU when installed, else torch), "torch" or "faiss".
        exclude: optional (n, L) sparse matrix of (query, label) pairs never to return.
        label_chunk_size: labels per block (default: all when L <= 2^20, else 2^20).
        matmul: the torch backend's score product: "auto" (bf16 candidates on CUDA, float32
            elsewhere), "fp32", or "bf16" (candidates rescored in float32: the same top-k).
        candidates: bf16 candidates kept per query and block before the rescore (default 2k + 32;
            4k for blocks of over 2^18 labels).
        group: columns per group when a block's best entries (the bf16 candidates, or the float32
            path's k + 1) are picked in two stages (default ``_TOPK_GROUP``, chosen by
            ``python -m benchmarks --only search_gpu``; 0: one torch.topk over the whole block).
            Any value gives the same answer; only the time changes.
        group_layout: which columns a group holds: "strided" (every G-th column; default
            ``_GROUP_LAYOUT``) or "contiguous" (g neighbours). The same answer; only the time changes.
        stats: a dict to fill with counts: "rows" (query x block pairs) and "rows_redone" (of those,
            searched again in float32 because a near-tie crossed the candidates' cut).
    """
    n, d = _shape(queries, "queries")
    n_labels, d_keys = _shape(keys, "keys")
    if d != d_keys:
        raise XmcbenchError(f"queries have dimension {d} but label embeddings have {d_keys}; use the same encoder")
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise XmcbenchError(f"k must be a positive integer; got {k!r}")
    k = min(int(k), n_labels)
    if exclude is not None:
        exclude = sp.csr_matrix(exclude)
        if exclude.shape != (n, n_labels):
            raise XmcbenchError(
                f"exclude has shape {exclude.shape} but the search is {(n, n_labels)} (queries x labels)"
            )
        exclude.sum_duplicates()
        exclude.eliminate_zeros()
        if exclude.nnz == 0:
            exclude = None
    if n == 0 or k == 0:
        return sp.csr_matrix((n, n_labels), dtype=np.float32)
    backend = "torch" if backend == "auto" and matmul == "bf16" else resolve_backend(backend, device)
    if matmul not in ("auto", "fp32", "bf16"):
        raise XmcbenchError(f"unknown matmul precision {matmul!r}; use 'auto', 'fp32' or 'bf16'")
    if candidates is not None and (not isinstance(candidates, (int, np.integer)) or candidates < k):
        raise XmcbenchError(f"candidates must be an integer >= k ({k}); got {candidates!r}")
    if group is None:
        group = _TOPK_GROUP
    if not isinstance(group, (int, np.integer)) or group < 0:
        raise XmcbenchError(f"group must be an integer >= 0 (0: one top-k over each block); got {group!r}")
    group_layout = group_layout or _GROUP_LAYOUT
    if group_layout not in ("strided", "contiguous"):
        raise XmcbenchError(f"unknown group_layout {group_layout!r}; use 'strided' or 'contiguous'")
    stats = stats if stats is not None else {}
    stats.update(rows=0, rows_redone=0)
    if backend == "torch":
        values, labels = _torch_topk(
            queries,
            keys,
            k,
            chunk_size,
            label_chunk_size,
            device,
            exclude,
            matmul,
            candidates,
            (int(group), group_layout),
            stats,
        )
        return _to_csr(values, labels, n_labels, sorted_rows=True)
    elif backend == "faiss":
        if matmul == "bf16":
            raise XmcbenchError("the faiss backend scores in float32 only; use backend='torch' for matmul='bf16'")
        values, labels = _faiss_topk(queries, keys, k, chunk_size, exclude, device)
    else:
        raise XmcbenchError(f"unknown search backend {backend!r}; use 'auto', 'torch' or 'faiss'")
    return _to_csr(values, labels, n_labels)


def resolve_backend(backend: str, device=None) -> str:
    """The backend "auto" stands for on ``device``: torch on CUDA, faiss on CPU if importable, else torch."""
    if backend != "auto":
        return backend
    import torch

    on_cuda = torch.cuda.is_available() if device is None else torch.device(device).type == "cuda"
    if on_cuda:
        return "torch"
    try:
        import_faiss()
    except ImportError:
        return "torch"
    return "faiss"


# ---------------------------------------------------------------------------------------------
# helpers


def _shape(x, name: str) -> tuple[int, int]:
    shape = tuple(x.shape)
    if len(shape) != 2:
        raise XmcbenchError(f"{name} must be a 2-D (rows x dimension) array; got shape {shape}")
    return shape


def _to_csr(values: np.ndarray, labels: np.ndarray, n_labels: int, sorted_rows: bool = False) -> sp.csr_matrix:
    """(n, k) values/labels -> canonical CSR; -inf (excluded or missing) slots dropped.

    ``sorted_rows``: each row's labels are already ascending (the torch backend sorts on its device).
    """
    if not sorted_rows:
        order = np.argsort(labels, axis=1)  # CSR rows are sorted by label
        values = np.take_along_axis(values, order, axis=1)
        labels = np.take_along_axis(labels, order, axis=1)
    n, k = values.shape
    # scipy would scan int64 indices to narrow them to int32 (0.41 ms at 10k x 100 here, 25x the
    # build itself): they are handed over in the dtype the matrix keeps.
    index = _index_dtype(n_labels, n * k)
    labels = labels.astype(index, copy=False)
    dropped = np.isneginf(values)  # drop -inf only (+inf is a legitimate, if odd, score)
    if not dropped.any():  # every row full: no masking, no copies
        indptr = np.arange(0, (n + 1) * k, k, dtype=index)
        out = sp.csr_matrix((values.ravel(), labels.ravel(), indptr), shape=(n, n_labels))
    else:
        keep = ~dropped
        indptr = np.concatenate(([0], np.cumsum(keep.sum(axis=1)))).astype(index)
        out = sp.csr_matrix((values[keep], labels[keep], indptr), shape=(n, n_labels))
    out.has_canonical_format = True
    return out


def _index_dtype(n_labels: int, nnz: int):
    """int32 when label indices and the row pointer fit in it (scipy's choice), else int64."""
    return np.int32 if max(n_labels, nnz) < 1 << 31 else np.int64


def _exclusions(exclude: sp.csr_matrix | None, start: int, end: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(local rows, labels) of the excluded pairs of queries [start, end); None when there are none."""
    if exclude is None:
        return None
    block = exclude[start:end]
    if block.nnz == 0:
        return None
    rows = np.repeat(np.arange(end - start), np.diff(block.indptr))
    return rows, block.indices.astype(np.int64)


# ---------------------------------------------------------------------------------------------
# torch backend


def _torch_device(device):
    import torch

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise XmcbenchError(f"device {device} was asked for but CUDA is not available here; use device='cpu'")
    return device


def _as_tensor(x, device):
    import torch

    if not isinstance(x, torch.Tensor):
        x = np.ascontiguousarray(x)
        if not x.flags.writeable:  # e.g. a read-only memory map: torch wants memory it may write
            x = x.copy()
        x = torch.from_numpy(x)
    return x.to(device=device, dtype=torch.float32)


def _block_topk(scores, k: int, grouping: tuple[int, str] = (0, "strided")):
    """Top-k of each row of a (B, C) score block, best first, ties to the lower column.

    The k + 1 largest entries are picked (``_candidate_topk`` with ``grouping``, or torch.topk),
    which choose among entries tied at the cut in an order of their own: a row whose (k+1)-th value
    is below its k-th has no tie across the cut (every entry left out is below the k-th value), so
    only rows where the two are equal (rare with real scores) are redone exactly: everything above
    the k-th value, then the lowest tied columns. No pass over the whole block besides the pick
    itself. The kept entries are then ordered by (value desc, column asc).
    """
    import torch

    width = scores.shape[1]
    see = min(k + 1, width)
    values, columns = _candidate_topk(scores, see, *grouping)  # (B, see), in no order
    values, order = torch.sort(values, dim=1, descending=True)
    columns = columns.gather(1, order)
    if see > k:
        boundary = values[:, k] == values[:, k - 1]
        values, columns = values[:, :k], columns[:, :k]
        if boundary.any():
            rows = boundary.nonzero().squeeze(1)
            block = scores[rows]
            kth = values[rows, k - 1 :]
            above = block > kth
            tied = block == kth
            need = k - above.sum(dim=1, keepdim=True)
            take = above | (tied & (torch.cumsum(tied.to(torch.int32), dim=1) <= need))
            exact = take.nonzero()[:, 1].view(rows.numel(), k)  # ascending columns per row
            columns[rows] = exact
            values[rows] = block.gather(1, exact)
    by_column = torch.argsort(columns, dim=1)
    values, columns = values.gather(1, by_column), columns.gather(1, by_column)
    order = torch.sort(values, dim=1, descending=True, stable=True).indices
    return values.gather(1, order), columns.gather(1, order)


def _candidate_topk(scores, m: int, group: int, layout: str = "strided"):
    """m entries of each row of a (B, C) block, none left out larger than the least kept (the
    contract of ``torch.topk(sorted=False)``, whose choice among ties it need not share), picked
    in two narrow top-ks over groups of ``group`` columns (the module docstring has the proof,
    which holds for any partition of the columns into groups).

    ``layout``: "strided" groups hold every G-th column (group j: columns j, j + G, j + 2G, ...),
    so their maxima are one reduction over the middle axis of a (B, g, G) view, read once and in
    order; "contiguous" groups hold g neighbouring columns, a reduction over rows of g elements,
    which torch's kernels run several times slower than the data's read. Returns (values,
    columns), each (B, m), in no particular order."""
    import torch

    rows, width = scores.shape
    if group == 0 or 2 * m * group > width:  # the pool would not be much narrower than the block
        return torch.topk(scores, m, dim=1, sorted=False)
    n_groups = width // group  # >= 2m
    full = n_groups * group
    if layout == "strided":
        grouped = scores[:, :full].unflatten(1, (group, n_groups))  # (B, g, G): [b, i, j] is column i G + j
        kept = torch.topk(grouped.amax(dim=1), m, dim=1, sorted=False).indices  # (B, m) groups
        pool = grouped.gather(2, kept.unsqueeze(1).expand(rows, group, m)).flatten(1)  # (B, g m): [i m + s]
    else:  # "contiguous" (exact_topk checks the name)
        grouped = scores[:, :full].view(rows, n_groups, group)  # (B, G, g): [b, j, i] is column j g + i
        kept = torch.topk(grouped.amax(dim=2), m, dim=1, sorted=False).indices  # (B, m) groups
        pool = grouped.gather(1, kept.unsqueeze(2).expand(rows, m, group)).view(rows, m * group)  # (B, m g)
    if full < width:  # the partial last group joins the pool whole
        pool = torch.cat([pool, scores[:, full:]], dim=1)  # (B, m g + C - full)
    values, at = torch.topk(pool, m, dim=1, sorted=False)  # (B, m) positions in the pool
    in_groups = at < m * group
    slot = torch.where(in_groups, at, 0)
    if layout == "strided":
        columns = (slot // m) * n_groups + kept.gather(1, slot % m)
    else:
        columns = kept.gather(1, slot // group) * group + slot % group
    columns = torch.where(in_groups, columns, at - m * group + full)  # (B, m)
    return values, columns


def _merge(values, labels, k: int):
    """Best k of concatenated candidates, ordered by (value desc, label asc)."""
    import torch

    by_label = torch.argsort(labels, dim=1)
    values, labels = values.gather(1, by_label), labels.gather(1, by_label)
    order = torch.sort(values, dim=1, descending=True, stable=True).indices[:, :k]
    return values.gather(1, order), labels.gather(1, order)


_BF16_UNIT = 2.0**-8  # unit roundoff of bfloat16 (8 significand bits)
_FP32_UNIT = 2.0**-24


def _torch_topk(queries, keys, k, chunk_size, label_chunk_size, device, exclude, matmul, candidates, grouping, stats):
    """``grouping``: (columns per group, layout) of the two-stage pick of each block's best entries."""
    import torch

    device = _torch_device(device)
    n, n_labels = queries.shape[0], keys.shape[0]
    label_block = int(label_chunk_size or (n_labels if n_labels <= _LABEL_BLOCK else _LABEL_BLOCK))
    label_block = max(1, min(label_block, n_labels))
    key_tensor = _as_tensor(keys, device)  # (L, d)
    if not torch.isfinite(key_tensor).all():
        raise XmcbenchError(_NOT_FINITE.format(what="label embeddings", where=""))
    _check_queries(queries)
    half = (
        _Bf16Keys(key_tensor, label_block)
        if (matmul == "bf16" or (matmul == "auto" and device.type == "cuda"))
        else None
    )
    budget = _gpu_budget(device) if device.type == "cuda" else _CPU_BUDGET
    per_query = label_block
    if half is not None:
        budget *= 2  # bf16 score blocks: twice the cells in the same memory, half the chunks
        m = min(candidates or _default_candidates(k, label_block), label_block)
        per_query = max(label_block, 2 * m * keys.shape[1])  # the rescore gathers (B, m, d) float32
    chunk = int(chunk_size or max(1, budget // per_query))
    chunk = min(chunk, max(1, _MAX_BLOCK_CELLS // label_block))  # a block's cells stay countable in int32
    out_values = np.empty((n, k), dtype=np.float32)
    out_labels = np.empty((n, k), dtype=_index_dtype(n_labels, n * k))
    # Copied from the device straight into these arrays: no intermediate host tensor, and labels
    # in the CSR's index dtype (int32: a third less to copy than int64 next to the float32 scores).
    host_values, host_labels = torch.from_numpy(out_values), torch.from_numpy(out_labels)
    buffer = None
    with torch.inference_mode(), _Fp32Reductions():
        for start in range(0, n, chunk):
            end = min(start + chunk, n)
            q = _as_tensor(queries[start:end], device)  # (B, d)
            excluded = _exclusions(exclude, start, end)
            q_half = _Bf16Queries(q) if half is not None else None
            best_values = best_labels = None
            for lo in range(0, n_labels, label_block):
                hi = min(lo + label_block, n_labels)
                # Into a reused buffer: a fresh 128 MB block per chunk costs its page faults.
                dtype = torch.float32 if half is None else torch.bfloat16
                if buffer is None or buffer.numel() < (end - start) * (hi - lo) or buffer.dtype != dtype:
                    buffer = torch.empty(chunk * label_block, device=device, dtype=dtype)
                scores = buffer[: (end - start) * (hi - lo)].view(end - start, hi - lo)
                kk = min(k, hi - lo)
                if half is None:
                    torch.mm(q, key_tensor[lo:hi].T, out=scores)  # (B, C)
                    _mask(scores, excluded, lo, hi)
                    values, columns = _block_topk(scores, kk, grouping)
                else:
                    m = candidates or _default_candidates(k, hi - lo)
                    values, columns = half.block_topk(q, q_half, scores, lo, hi, kk, excluded, m, grouping, stats)
                stats["rows"] += end - start
                columns = columns + lo
                if best_values is None:
                    best_values, best_labels = values, columns
                else:
                    best_values, best_labels = _merge(
                        torch.cat([best_values, values], dim=1), torch.cat([best_labels, columns], dim=1), k
                    )
            by_label = torch.argsort(best_labels, dim=1)  # CSR order, sorted where the data is
            host_values[start:end].copy_(best_values.gather(1, by_label))
            host_labels[start:end].copy_(best_labels.gather(1, by_label).to(host_labels.dtype))
    return out_values, out_labels


def _gpu_budget(device) -> int:
    """float32 score cells per chunk on a GPU (a bf16 block holds twice as many): 1/32 of its free
    memory, torch's cached blocks included, so the scores and the candidates' rescore (or the
    float32 redo) take about a quarter of it; at least 1 GB (1/16 of free memory when that is
    less), at most 4 GB. Each chunk costs synchronisations and small kernels: at 10k x 100k on an
    H100, in one process, chunks of 2,000-3,400 queries took 27 ms and chunks of 4,096-10,000
    19.3-20.8 ms (``benchmarks/results/search-gpu-h100-modes.txt``; the 1 GB budget's chunks hold
    ~3,000)."""
    import torch

    free, _ = torch.cuda.mem_get_info(device)
    free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)  # reusable cache
    return int(min(_GPU_BUDGET_MAX, max(free // 32, min(_GPU_BUDGET, free // 16), 1 << 20)))


def _default_candidates(k: int, width: int) -> int:
    """bf16 candidates per query and block. More labels crowd more scores into the bound's width
    around the k-th, so wide blocks keep more (H200, 10k queries x 384-d, k = 100, strided groups:
    at 100k labels 232 candidates left 0% of rows to redo (10.7 ms; 128: 100%, 37 ms; 400: 13.9 ms),
    at 1M labels 3.0% (54 ms; 400: 0%, 43 ms))."""
    return 2 * k + 32 if width <= 1 << 18 else 4 * k


# An infinite coordinate makes inf * 0 = NaN scores, which the backends would rank differently.
_NOT_FINITE = "{what} contain NaN or infinite values{where}; check the encoder output"


def _check_queries(queries) -> None:
    """One finiteness check for all queries, in blocks of rows (a check per search chunk waits for the
    device each time; one over the whole array would hold an (n, d) mask)."""
    import torch

    n, d = queries.shape
    step = max(1, (1 << 24) // max(d, 1))
    for start in range(0, n, step):
        block = queries[start : start + step]
        bad = ~torch.isfinite(block).all(dim=1) if isinstance(block, torch.Tensor) else ~np.isfinite(block).all(axis=1)
        if bad.any():
            row = start + int(bad.nonzero()[0][0])  # numpy: (indices,); torch: (r, 1) indices
            raise XmcbenchError(_NOT_FINITE.format(what="query embeddings", where=f" (row {row})"))


def _mask(scores, excluded, lo: int, hi: int) -> None:
    """Set the excluded (query, label) pairs of the block [lo, hi) to -inf, in place."""
    import torch

    if excluded is None:
        return
    rows, labels = excluded
    inside = (labels >= lo) & (labels < hi)
    scores[
        torch.as_tensor(rows[inside], device=scores.device),
        torch.as_tensor(labels[inside] - lo, device=scores.device),
    ] = float("-inf")


class _Fp32Reductions:
    """cuBLAS may reduce a bf16 product's split-K partial sums in bf16, and run float32 products in
    TF32 when a caller allowed it: the error bound assumes float32 arithmetic for the accumulation,
    the rescore and the redo, so both are switched off for the search."""

    def __enter__(self):
        import torch

        matmul = torch.backends.cuda.matmul
        self.flags = (matmul.allow_bf16_reduced_precision_reduction, matmul.allow_tf32)
        matmul.allow_bf16_reduced_precision_reduction = False
        matmul.allow_tf32 = False

    def __exit__(self, *exc):
        import torch

        matmul = torch.backends.cuda.matmul
        matmul.allow_bf16_reduced_precision_reduction, matmul.allow_tf32 = self.flags


class _Bf16Queries:
    """A query chunk in bf16, with the norms the error bound needs."""

    def __init__(self, q):
        import torch

        self.q = q.to(torch.bfloat16)  # (B, d)
        q_round = self.q.float()
        self.norm = torch.linalg.vector_norm(q_round, dim=1)  # (B,) |q~|
        self.err = torch.linalg.vector_norm(q - q_round, dim=1)  # (B,) |q - q~|


class _Bf16Keys:
    """The label embeddings in bf16, per-block norms for the bound, and the candidates' rescore."""

    def __init__(self, keys, label_block: int):
        import torch

        self.keys = keys  # (L, d) float32, for the rescore
        self.half = keys.to(torch.bfloat16)  # (L, d)
        self.d = keys.shape[1]
        # 0-d tensors on the device, not Python floats: the bound is computed there, and a float()
        # would wait for the GPU twice per block before the search starts.
        self.block_norm, self.block_err = {}, {}
        for lo in range(0, keys.shape[0], label_block):  # float32 temporaries one block at a time
            rounded = self.half[lo : lo + label_block].float()  # (C, d)
            self.block_norm[lo] = torch.linalg.vector_norm(rounded, dim=1).max()
            self.block_err[lo] = torch.linalg.vector_norm(keys[lo : lo + label_block] - rounded, dim=1).max()

    def block_topk(self, q, q_half: _Bf16Queries, scores, lo: int, hi: int, k: int, excluded, m: int, grouping, stats):
        """Top-k of the block [lo, hi) by float32 scores, from bf16 candidates; ``scores`` is the
        (B, C) buffer the bf16 product is written into."""
        import torch

        width = hi - lo
        torch.mm(q_half.q, self.half[lo:hi].T, out=scores)  # (B, C) bf16
        _mask(scores, excluded, lo, hi)
        m = min(m, width)
        cand_values, cand_cols = _candidate_topk(scores, m, *grouping)  # (B, m)
        keys = self.keys[lo:hi]
        rescored = torch.bmm(keys[cand_cols], q.unsqueeze(2)).squeeze(2)  # (B, m, d) @ (B, d, 1) -> (B, m)
        dropped = torch.isneginf(cand_values)  # excluded pairs stay out
        rescored = rescored.masked_fill(dropped, float("-inf"))
        by_label = torch.argsort(cand_cols, dim=1)
        rescored, cand_cols = rescored.gather(1, by_label), cand_cols.gather(1, by_label)
        order = torch.sort(rescored, dim=1, descending=True, stable=True).indices[:, :k]
        values, columns = rescored.gather(1, order), cand_cols.gather(1, order)  # (B, k)
        if m == width:  # every label was rescored
            return values, columns
        cut = cand_values.float().min(dim=1).values  # (B,) no label left out scored above this
        key_norm, key_err = self.block_norm[lo], self.block_err[lo]
        u_out = _BF16_UNIT  # the product is written in bf16
        bound = 1.05 * (
            q_half.err * key_norm
            + q_half.norm * key_err
            + q_half.err * key_err
            + (u_out + 2 * self.d * _FP32_UNIT) * q_half.norm * key_norm
        )  # (B,)
        safe = (values[:, k - 1] > cut + bound) | torch.isneginf(cut)
        if bool(safe.all()):
            return values, columns
        redo = (~safe).nonzero().squeeze(1)  # near-ties at the cut: this block again in float32
        stats["rows_redone"] += int(redo.numel())
        step = max(1, scores.numel() // (2 * width))  # float32 rows in the bf16 buffer's bytes
        for s in range(0, redo.numel(), step):
            part = redo[s : s + step]
            exact = torch.mm(q[part], keys.T)  # (r, C)
            rows = excluded
            if excluded is not None:  # the exclusions of these rows, numbered as rows of ``exact``
                local = torch.full((q.shape[0],), -1, dtype=torch.long)
                local[part.cpu()] = torch.arange(part.numel())
                keep = local[torch.as_tensor(excluded[0])].numpy()
                rows = (keep[keep >= 0], excluded[1][keep >= 0])
            _mask(exact, rows, lo, hi)
            values[part], columns[part] = _block_topk(exact, k)
        return values, columns


# ---------------------------------------------------------------------------------------------
# faiss backend


def _faiss_topk(queries, keys, k, chunk_size, exclude, device=None):
    faiss = faiss_or_error("the search backend is 'faiss'")

    def as_numpy(x) -> np.ndarray:
        if hasattr(x, "detach"):  # a torch tensor
            x = x.detach().float().cpu().numpy()
        return np.ascontiguousarray(x, dtype=np.float32)

    key_array = as_numpy(keys)
    n_labels, d = key_array.shape
    if not np.isfinite(key_array).all():
        raise XmcbenchError(_NOT_FINITE.format(what="label embeddings", where=""))
    index = faiss.IndexFlatIP(d)
    if _faiss_on_gpu(faiss, device):
        index = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, index)
    index.add(key_array)
    # Deep enough that k labels survive the exclusions of the most-excluded query, plus one: the
    # first score left out tells whether a tie crosses the cut.
    extra = int(np.diff(exclude.indptr).max()) if exclude is not None else 0
    depth = min(n_labels, k + extra + 1)
    n = queries.shape[0]
    chunk = int(chunk_size or max(1, _CPU_BUDGET // max(depth, 1) // 4))
    out_values = np.empty((n, k), dtype=np.float32)
    out_labels = np.empty((n, k), dtype=np.int64)
    for start in range(0, n, chunk):
        end = min(start + chunk, n)
        q = as_numpy(queries[start:end])
        if not np.isfinite(q).all():
            raise XmcbenchError(_NOT_FINITE.format(what="query embeddings", where=f" (rows {start}..{end - 1})"))
        values, labels = index.search(q, depth)  # (B, depth), best first, -1 when missing
        values = np.where(labels < 0, -np.inf, values).astype(np.float32)
        labels = np.where(labels < 0, n_labels, labels).astype(np.int64)  # sorts after real labels
        last_returned = values[:, -1].copy()  # every label not returned scores <= this
        excluded = _exclusions(exclude, start, end)
        if excluded is None and (depth == k or depth == k + 1 < n_labels):
            # Each row comes best first, so its first k are the top-k set, unless the k-th ties the
            # one after it, the last returned (those rows are redone below); the order within the
            # set is _to_csr's to make. (Deeper rows, kept for other chunks' exclusions, are sorted.)
            # Skipping the sort here saved 0.06-0.1 s of 4.3 s at 10k x 100k.
            values, labels = values[:, :k], labels[:, :k]
        else:
            if excluded is not None:
                rows, banned = excluded
                hit = np.zeros(labels.shape, dtype=bool)
                banned_keys = np.sort(rows * (n_labels + 1) + banned)
                keys_found = (np.arange(end - start)[:, None] * (n_labels + 1) + labels).ravel()
                pos = np.minimum(np.searchsorted(banned_keys, keys_found), max(banned_keys.size - 1, 0))
                hit.ravel()[:] = banned_keys[pos] == keys_found
                values[hit] = -np.inf
            order = np.lexsort((labels, -values), axis=1)[:, :k]  # (value desc, label asc)
            values = np.take_along_axis(values, order, axis=1)
            labels = np.take_along_axis(labels, order, axis=1)
        if depth < n_labels:
            # A label faiss did not return may tie the k-th: such rows (rare with real scores) are redone.
            tied = np.flatnonzero(values[:, k - 1] <= last_returned)
            for s in range(0, tied.size, _REDO_ROWS):
                rows = tied[s : s + _REDO_ROWS]
                values[rows], labels[rows] = _exact_rows(q[rows], key_array, k, excluded, rows)
        out_values[start:end] = values
        out_labels[start:end] = np.minimum(labels, n_labels - 1)
    return out_values, out_labels


_REDO_ROWS = 64  # tied rows re-scored per matmul: (64, L) float32 scores


def _faiss_on_gpu(faiss, device) -> bool:
    """faiss searches on a GPU when it can and the caller did not ask for the CPU."""
    if not (hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0):
        return False
    if device is None:
        return True
    import torch

    return torch.device(device).type == "cuda"


def _exact_rows(
    queries: np.ndarray, keys: np.ndarray, k: int, excluded, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Best k of each query (local ``rows`` of the chunk) over all labels, (value desc, label asc),
    exclusions applied. Only the labels scoring at least the k-th best are sorted; the k-th best is
    found in these scores, not taken from faiss, whose arithmetic may round differently."""
    scores = queries @ keys.T  # (r, L)
    n_labels = scores.shape[1]
    out_values = np.full((len(rows), k), -np.inf, dtype=np.float32)
    out_labels = np.full((len(rows), k), keys.shape[0], dtype=np.int64)  # past the last label: dropped
    for i, row in enumerate(rows):
        if excluded is not None:
            banned_rows, banned = excluded
            scores[i, banned[banned_rows == row]] = -np.inf
        kth = np.partition(scores[i], n_labels - k)[n_labels - k]  # the k-th largest
        candidates = np.flatnonzero(scores[i] >= kth)
        best = candidates[np.lexsort((candidates, -scores[i, candidates]))][:k]
        out_values[i, : best.size] = scores[i, best]
        out_labels[i, : best.size] = best
    return out_values, out_labels
