"""Evaluation for extreme multi-label classification: pyxclib/napkinXC-compatible, numpy/scipy only.

Public API::

    evaluate(predictions, truth, k=(1, 3, 5), inv_propensity=None, filter=None, metrics=None)
        -> {"P@1": .., "nDCG@1": .., "PSP@1": .., "PSnDCG@1": .., "R@1": .., ...}   (percent)
    evaluate_with_ci(..., n_boot=1000, seed=0)        -> {name: (value, lo, hi)}    (percent)
    paired_bootstrap(pred_a, pred_b, truth, ...)      -> {name: (a - b, lo, hi)}    (points)
    evaluate_by_group(predictions, truth, train_labels, ...)  head / torso / tail
    inv_propensity(train_labels, A, B)                -> (L,) Jain et al. weights
    top_k(predictions, k, filter=None)                -> (n, k) ranked labels, -1 padded
    METRICS                                           registry of metric families (metadata)

Conventions (filter before top-k, ties to the lower label index, missing slots are misses,
binarised truth, rows without labels stay in the mean) are documented in
:mod:`xmcbench.metrics.ranking`; each metric's formula is in its own module. This package must not
import torch: evaluation runs anywhere numpy runs.
"""

from xmcbench.metrics.evaluate import (
    METRICS,
    MetricInfo,
    components,
    evaluate,
    evaluate_with_ci,
    paired_bootstrap,
    resolve_metrics,
)
from xmcbench.metrics.groups import GROUPS, evaluate_by_group, label_groups
from xmcbench.metrics.propensity import inv_propensity, label_frequencies
from xmcbench.metrics.ranking import RankedTruth, rank_truth, top_k

__all__ = [
    "METRICS",
    "GROUPS",
    "MetricInfo",
    "RankedTruth",
    "components",
    "evaluate",
    "evaluate_by_group",
    "evaluate_with_ci",
    "inv_propensity",
    "label_frequencies",
    "label_groups",
    "paired_bootstrap",
    "rank_truth",
    "resolve_metrics",
    "top_k",
]
