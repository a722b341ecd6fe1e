"""Seeded percentile-bootstrap confidence intervals over queries, plain and paired.

Every metric here is ``sum_i numerator_i / sum_i denominator_i`` over the test rows (for P, nDCG
and R the denominator is 1 per row, so this is a mean; for PSP and PSnDCG it is a ratio of dataset
sums). A bootstrap replicate draws n rows with replacement and recomputes each metric as the
**ratio of the resampled sums** — resampling per-row ratios would be wrong for PSP/PSnDCG.

Implementation: a replicate is a vector of row multiplicities c (c_i = times row i was drawn), so
its sums are ``c @ numerators`` and ``c @ denominators``; replicates are drawn in batches and the
sums are one matrix product per batch. The interval is the (alpha/2, 1 - alpha/2) percentile of
the replicates (``numpy.quantile``'s default linear interpolation); the point estimate is the value
on the full data, not the bootstrap mean.

The **paired** bootstrap compares two prediction sets on the same queries: each replicate uses the
same resampled rows for both, and the statistic is the difference a - b. An interval that excludes
0 says the difference is unlikely to be resampling noise. Identical inputs give exactly (0, 0, 0).

Results depend only on the data, ``n_boot`` and ``seed`` (numpy's PCG64 generator), so a run is
reproducible to the last digit.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from xmcbench.errors import XmcbenchError
from xmcbench.metrics.validate import check_int, check_number

__all__ = ["ratio", "bootstrap_ci", "paired_bootstrap_ci"]

_BATCH_CELLS = 1 << 23  # rows x replicates per batch: bounds the multiplicity matrix to 64 MB


def ratio(numerator_sum: np.ndarray, denominator_sum: np.ndarray) -> np.ndarray:
    """Elementwise numerator / denominator, 0 where the denominator is 0 (no true labels at all)."""
    numerator_sum = np.asarray(numerator_sum, dtype=np.float64)
    denominator_sum = np.asarray(denominator_sum, dtype=np.float64)
    out = np.zeros(np.broadcast(numerator_sum, denominator_sum).shape)
    np.divide(numerator_sum, denominator_sum, out=out, where=denominator_sum != 0)
    return out


def _replicate_sums(columns: list[np.ndarray], n_boot: int, seed: int) -> Iterator[list[np.ndarray]]:
    """Yield, batch by batch, the resampled column sums (batch, m_j) of each (n, m_j) matrix.

    All matrices share the resampled rows of a replicate. Each gets its own product with the
    same multiplicity matrix, so identical inputs give bit-identical sums.
    """
    n = columns[0].shape[0]
    rng = np.random.default_rng(seed)
    batch = max(1, min(n_boot, _BATCH_CELLS // max(n, 1)))
    done = 0
    while done < n_boot:
        b = min(batch, n_boot - done)
        draws = rng.integers(0, n, size=(b, n))  # (b, n) row indices per replicate
        offsets = (np.arange(b, dtype=np.int64) * n)[:, None]
        counts = np.bincount((draws + offsets).ravel(), minlength=b * n).reshape(b, n).astype(np.float64)
        yield [counts @ c for c in columns]  # each (b, m_j)
        done += b


def _check(numerators: np.ndarray, denominators: np.ndarray, n_boot: int, seed: int, confidence: float):
    numerators = np.atleast_2d(np.asarray(numerators, dtype=np.float64).T).T
    denominators = np.atleast_2d(np.asarray(denominators, dtype=np.float64).T).T
    if numerators.shape != denominators.shape:
        raise ValueError(f"numerators {numerators.shape} and denominators {denominators.shape} differ in shape")
    if numerators.shape[0] == 0:
        raise XmcbenchError("cannot bootstrap over zero rows")
    check_int(n_boot, "n_boot")
    check_int(seed, "seed", low=0)  # numpy's generators take no negative seed
    if not 0 < check_number(confidence, "confidence") < 1:
        raise XmcbenchError(f"confidence must be in (0, 1); got {confidence}")
    return numerators, denominators


def bootstrap_ci(
    numerators: np.ndarray,
    denominators: np.ndarray,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Point value and percentile interval of m ratio metrics from per-row components.

    Args:
        numerators, denominators: (n_rows, m) per-row components (or (n_rows,) for one metric).
    Returns:
        (value, lo, hi), each (m,), as fractions (not percent).
    """
    numerators, denominators = _check(numerators, denominators, n_boot, seed, confidence)
    value = ratio(numerators.sum(axis=0), denominators.sum(axis=0))
    replicates = np.concatenate(
        [ratio(num, den) for num, den in _replicate_sums([numerators, denominators], n_boot, seed)]
    )
    alpha = 1.0 - confidence
    lo, hi = np.quantile(replicates, [alpha / 2, 1 - alpha / 2], axis=0)
    return value, lo, hi


def paired_bootstrap_ci(
    numerators_a: np.ndarray,
    denominators_a: np.ndarray,
    numerators_b: np.ndarray,
    denominators_b: np.ndarray,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Difference a - b of m ratio metrics and its paired percentile interval.

    Both systems' components are (n_rows, m) over the same rows in the same order.
    Returns (difference, lo, hi), each (m,), as fractions.
    """
    numerators_a, denominators_a = _check(numerators_a, denominators_a, n_boot, seed, confidence)
    numerators_b, denominators_b = _check(numerators_b, denominators_b, n_boot, seed, confidence)
    if numerators_a.shape != numerators_b.shape:
        raise XmcbenchError(
            f"paired bootstrap needs both systems on the same rows and metrics; got {numerators_a.shape} "
            f"and {numerators_b.shape}"
        )
    columns = [numerators_a, denominators_a, numerators_b, denominators_b]
    difference = ratio(numerators_a.sum(0), denominators_a.sum(0)) - ratio(numerators_b.sum(0), denominators_b.sum(0))
    replicates = np.concatenate(
        [
            ratio(num_a, den_a) - ratio(num_b, den_b)
            for num_a, den_a, num_b, den_b in _replicate_sums(columns, n_boot, seed)
        ]
    )
    alpha = 1.0 - confidence
    lo, hi = np.quantile(replicates, [alpha / 2, 1 - alpha / 2], axis=0)
    return difference, lo, hi
