"""Inverse label propensities of Jain, Prabhu and Varma (KDD 2016), the weights of PSP@k and PSnDCG@k.

A label that is rarely annotated in training is assumed to be often *missing* from the ground
truth, so a correct prediction of it is worth more. With N training rows, n_l the number of
training rows that carry label l, and dataset constants A and B::

    C   = (ln N - 1) * (B + 1)^A
    w_l = 1 + C * (n_l + B)^(-A)          (the inverse propensity, >= 1 when N > e; fewer rows are refused)

Labels never seen in training get the largest weight, 1 + C * B^(-A). The training labels are
binarised (a stored non-zero is one annotation; repeats count once). Recommended (A, B): 0.55/1.5 by
default, 0.6/2.6 for Amazon datasets, 0.5/0.4 for Wikipedia-500K (see the dataset registry). A < 0 is
refused: it would weigh frequent labels more (A = 0 gives every label the same weight).
This is napkinXC's ``Jain_et_al_inverse_propensity`` and pyxclib's ``compute_inv_propesity``.
"""

from __future__ import annotations

import math

import numpy as np

from xmcbench.errors import XmcbenchError
from xmcbench.metrics.ranking import as_truth
from xmcbench.metrics.validate import check_number

__all__ = ["label_frequencies", "inv_propensity"]


def label_frequencies(train_labels) -> np.ndarray:
    """(L,) int64 number of training rows annotated with each label."""
    labels = as_truth(train_labels, name="training labels")
    return np.bincount(labels.indices, minlength=labels.shape[1]).astype(np.int64)


def inv_propensity(train_labels, A: float, B: float) -> np.ndarray:
    """(L,) float64 inverse propensities w_l = 1 + (ln N - 1)(B + 1)^A (n_l + B)^(-A)."""
    A = check_number(A, "propensity A")
    B = check_number(B, "propensity B")
    counts = label_frequencies(train_labels).astype(np.float64)
    n_rows = train_labels.shape[0]
    if n_rows < 1:
        raise XmcbenchError("inverse propensities need at least one training row; got an empty label matrix")
    if n_rows < 3:  # ln N - 1 < 0: every weight would be under 1 (negative for N = 1)
        raise XmcbenchError(
            f"inverse propensities need at least 3 training rows (ln N > 1); got {n_rows}: give the whole "
            "training label matrix, or none for scores without PSP/PSnDCG"
        )
    if A < 0:  # the weights would grow with the label's frequency: rare labels would count less
        raise XmcbenchError(f"propensity A must be >= 0; got {A:g} (0.55 generic, 0.6 Amazon, 0.5 Wikipedia-500K)")
    if B <= 0 and A > 0:
        raise XmcbenchError(f"propensity B must be > 0 (labels with no training rows would divide by zero); got {B}")
    if B <= -1:
        raise XmcbenchError(f"propensity B must be > -1 ((B + 1)^A must be real); got {B}")
    with np.errstate(all="ignore"):  # overflow and invalid powers are reported below, in one line
        c = (math.log(n_rows) - 1.0) * np.float64(B + 1.0) ** A  # numpy: overflow gives inf, not OverflowError
        weights = 1.0 + c * np.power(counts + B, -A)
    if weights.size and not np.isfinite(weights).all():
        raise XmcbenchError(
            f"propensity A={A:g}, B={B:g} give non-finite weights; use the dataset's values "
            "(0.55/1.5 generic, 0.6/2.6 Amazon, 0.5/0.4 Wikipedia-500K)"
        )
    return weights
