"""A deliberately plain reference for every metric: Python loops over rows, straight from the formulas.

Independent of xmcbench (no import from it) and of napkinXC. It reads a sparse matrix's raw arrays
as stored, so non-canonical input means what the documented conventions say:

* predictions: every stored (label, score) is a prediction (zeros and negatives included); a dense
  array scores every label. Scores stay Python numbers (int or float), so the sort is exact for any
  dtype, integers beyond 2^53 included. Ties go to the lower label index.
* truth and filter: a label is in the set when any stored value for it is non-zero (binarised;
  repeats count once; explicit zeros are not labels).
* pyxclib's conventions: rows without true labels stay in every mean (P, nDCG and R score 0 there)
  and add nothing to either sum of PSP / PSnDCG; missing prediction slots are misses (P divides by k).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp


def _entries(matrix) -> list[list[tuple[int, object]]]:
    """Per row, the (label, value) pairs as stored (a dense array: every cell)."""
    if isinstance(matrix, np.ndarray):
        array = np.asarray(matrix)
        return [[(j, array[i, j].item()) for j in range(array.shape[1])] for i in range(array.shape[0])]
    if matrix.format == "coo":  # read as stored (scipy cannot convert a float16 COO)
        rows: list[list[tuple[int, object]]] = [[] for _ in range(matrix.shape[0])]
        for i, j, v in zip(matrix.row, matrix.col, matrix.data):
            rows[int(i)].append((int(j), v.item()))
        return rows
    m = matrix if matrix.format == "csr" else sp.csr_matrix(matrix)
    return [
        [
            (int(j), v.item())
            for j, v in zip(m.indices[m.indptr[i] : m.indptr[i + 1]], m.data[m.indptr[i] : m.indptr[i + 1]])
        ]
        for i in range(m.shape[0])
    ]


def label_sets(matrix) -> list[set[int]]:
    """Per row, the labels with a non-zero stored value."""
    return [{j for j, v in row if v != 0} for row in _entries(matrix)]


def rankings(predictions, k: int, filter=None) -> list[list[int]]:
    """Per row, the top-k labels by (-score, label) after dropping the filter's pairs."""
    banned = label_sets(filter) if filter is not None else None
    out = []
    for i, row in enumerate(_entries(predictions)):
        kept = [(j, s) for j, s in row if banned is None or j not in banned[i]]
        kept.sort(key=lambda pair: (-pair[1], pair[0]))
        out.append([j for j, _ in kept[:k]])
    return out


def inverse_propensity(train, A: float, B: float) -> list[float]:
    """Jain et al.: w_l = 1 + (ln N - 1)(B + 1)^A (n_l + B)^-A, n_l = training rows with label l."""
    sets = label_sets(train)
    n_labels = train.shape[1]
    counts = [sum(label in s for s in sets) for label in range(n_labels)]
    c = (math.log(len(sets)) - 1) * (B + 1) ** A
    return [1 + c * (n + B) ** (-A) for n in counts]


def metrics(predictions, truth, ks, inv_propensity=None, filter=None) -> dict[str, float]:
    """{"P@k", "nDCG@k", "R@k"[, "PSP@k", "PSnDCG@k"]} in percent, by the book."""
    truth_sets = label_sets(truth)
    n = len(truth_sets)
    w = inv_propensity
    out: dict[str, float] = {}
    for k in ks:
        ranked = rankings(predictions, k, filter)
        p = ndcg = recall = 0.0
        ps_num = ps_den = psn_num = psn_den = 0.0
        for top, y in zip(ranked, truth_sets):
            hits = [label in y for label in top]
            ideal = sum(1 / math.log2(j + 2) for j in range(min(k, len(y))))
            dcg = sum(1 / math.log2(j + 2) for j, hit in enumerate(hits) if hit)
            p += sum(hits) / k
            ndcg += dcg / ideal if y else 0.0
            recall += sum(hits) / len(y) if y else 0.0
            if w is not None and y:
                best = sorted((w[label] for label in y), reverse=True)[:k]
                ps_num += sum(w[label] for label, hit in zip(top, hits) if hit) / k
                ps_den += sum(best) / k
                psn_num += (
                    sum(w[label] / math.log2(j + 2) for j, (label, hit) in enumerate(zip(top, hits)) if hit) / ideal
                )
                psn_den += sum(x / math.log2(j + 2) for j, x in enumerate(best)) / ideal
        out[f"P@{k}"] = 100 * p / n if n else 0.0
        out[f"nDCG@{k}"] = 100 * ndcg / n if n else 0.0
        out[f"R@{k}"] = 100 * recall / n if n else 0.0
        if w is not None:
            out[f"PSP@{k}"] = 100 * ps_num / ps_den if ps_den else 0.0
            out[f"PSnDCG@{k}"] = 100 * psn_num / psn_den if psn_den else 0.0
    return out
