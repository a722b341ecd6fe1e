"""Head / torso / tail breakdown of the metrics (label groups by training frequency, as in UniDEC).

Labels are grouped by n_l, the number of training rows that carry them:

    head:  n_l > 100        torso:  10 < n_l <= 100        tail:  n_l <= 10

Labels never seen in training (n_l = 0) are tail labels. The boundary follows "<= 10" for the tail
(UniDEC's prose says 1-10 for the tail and 10-100 for the torso; a label with exactly 10 training
rows is put in the tail here).

How a group G restricts the evaluation (``mode``):

* ``"restricted"`` (default): the task *as if only G existed*. True labels outside G are dropped
  from the ground truth; **predictions of labels outside G are dropped before top-k**, so the
  ranking is re-formed from G's labels only; rows left without a true label in G are **left out**
  (they would only add zeros). Filter pairs still apply. Answers "how well are tail labels ranked
  for queries that have tail labels".
* ``"contribution"``: true labels outside G are dropped from the ground truth, **predictions are
  kept as they are** and every row is kept. P@k is then the part of the overall P@k earned by G's
  labels, so the groups' P@k add up to the overall P@k (the "decile contribution" plots of
  DECAF/DEXML). Other metrics do not add up.

PSP/PSnDCG use the same inverse propensities as the overall evaluation (computed from all training
labels), restricted like everything else.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

import numpy as np
import scipy.sparse as sp

from xmcbench.errors import XmcbenchError
from xmcbench.metrics.evaluate import evaluate, resolve_metrics
from xmcbench.metrics.propensity import label_frequencies
from xmcbench.metrics.ranking import as_predictions, as_truth

__all__ = ["GROUPS", "label_groups", "evaluate_by_group"]

GROUPS: dict[str, str] = {"head": "> 100 training rows", "torso": "11-100 training rows", "tail": "<= 10 training rows"}


def label_groups(train_labels, tail_max: int = 10, head_over: int = 100) -> dict[str, np.ndarray]:
    """{"head", "torso", "tail"} -> (L,) boolean masks over labels, from training frequencies."""
    counts = label_frequencies(train_labels)
    return {
        "head": counts > head_over,
        "torso": (counts > tail_max) & (counts <= head_over),
        "tail": counts <= tail_max,
    }


def _keep_labels(matrix: sp.csr_matrix, keep: np.ndarray) -> sp.csr_matrix:
    """Copy of ``matrix`` without the stored entries whose column is not in ``keep``."""
    mask = keep[matrix.indices]
    counts = np.bincount(np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))[mask], minlength=matrix.shape[0])
    indptr = np.concatenate(([0], np.cumsum(counts)))
    out = sp.csr_matrix((matrix.data[mask], matrix.indices[mask], indptr), shape=matrix.shape)
    out.has_canonical_format = matrix.has_canonical_format
    return out


def evaluate_by_group(
    predictions,
    truth,
    train_labels,
    k: int | Sequence[int] = (1, 3, 5),
    inv_propensity: np.ndarray | None = None,
    filter=None,
    metrics: Iterable[str] | None = None,
    mode: Literal["restricted", "contribution"] = "restricted",
) -> dict[str, dict]:
    """Metrics per label group: {"head": {"labels": int, "rows": int, "scores": {"P@1": ..}}, ...}.

    ``labels`` is the number of labels in the group, ``rows`` the number of test rows evaluated
    (restricted mode: rows with at least one true label in the group). A group with no rows has
    empty ``scores``. Scores are percentages, as from :func:`xmcbench.metrics.evaluate`.
    """
    if mode not in ("restricted", "contribution"):
        raise XmcbenchError(f"unknown group mode {mode!r}; use 'restricted' or 'contribution'")
    resolve_metrics(k, metrics, inv_propensity is not None)  # fail early, even for empty groups
    predictions = as_predictions(predictions)
    truth = as_truth(truth)
    train_labels = as_truth(train_labels, name="training labels")
    if train_labels.shape[1] != truth.shape[1]:
        raise XmcbenchError(
            f"training labels have {train_labels.shape[1]} columns but the test truth has {truth.shape[1]}; "
            "both must use the same label set"
        )
    filter = None if filter is None else as_truth(filter, name="filter")
    result: dict[str, dict] = {}
    for group, keep in label_groups(train_labels).items():
        group_truth = _keep_labels(truth, keep)
        if mode == "contribution":
            rows = np.arange(truth.shape[0])
            scores = evaluate(predictions, group_truth, k, inv_propensity, filter, metrics)
        else:
            rows = np.flatnonzero(np.diff(group_truth.indptr) > 0)
            scores = (
                evaluate(
                    _keep_labels(predictions, keep)[rows],
                    group_truth[rows],
                    k,
                    inv_propensity,
                    None if filter is None else filter[rows],
                    metrics,
                )
                if rows.size
                else {}
            )
        result[group] = {"labels": int(keep.sum()), "rows": int(rows.size), "scores": scores}
    return result
