"""Training losses for the XMC methods: pure functions of score tensors and boolean targets.

One loss per module, each with the paper's equation and citation in its docstring:

- ``decoupled_softmax`` — DEXML Eq. 5 (+ sharding pieces: ``negative_logsumexp``, ``decoupled_softmax_terms``)
- ``soft_top_k`` — DEXML Sec. 4.3, Eq. 6-7 (operator with implicit gradient, loss, ``sum_fn`` sharding)
- ``infonce`` — DEXML Eq. 3 (SoftmaxCE) and Eq. 4 (InfoNCE)
- ``triplet`` — fixed-margin triplet (NGAME, LMTX Eq. 1)
- ``psl`` — UniDEC pick-some-labels, both directions, and the unified DE + classifier loss
- ``dynamic_margin_triplet`` — PRIME Eq. 13 ("max" = released code, "paper" = Eq. 14)
- ``prime_regularizer`` — PRIME Eq. 6-7

``LOSSES`` maps a recipe name to a loss with the common signature
``fn(scores, targets, **params) -> scalar``, where scores is a (B, P) query x pool matrix and
targets the (B, P) bool positives. Losses with other inputs (``unidec_loss``,
``prime_regularizer``, the explicit-triplet forms) are imported by the methods directly.
"""

from __future__ import annotations

from xmcbench.losses.common import LossInputError, mean_over_rows
from xmcbench.losses.decoupled_softmax import (
    decoupled_softmax_loss,
    decoupled_softmax_terms,
    negative_logsumexp,
    sample_one_positive,
)
from xmcbench.losses.dynamic_margin_triplet import (
    dynamic_margin_triplet_loss,
    dynamic_margin_triplet_pool_loss,
    dynamic_margin_triplet_terms,
)
from xmcbench.losses.infonce import infonce_loss, softmax_ce_loss
from xmcbench.losses.prime_regularizer import prime_regularizer
from xmcbench.losses.psl import psl_bidirectional_loss, psl_loss, unidec_loss
from xmcbench.losses.soft_top_k import soft_top_k, soft_top_k_loss, soft_top_k_threshold
from xmcbench.losses.triplet import gather_positives, triplet_margin_loss, triplet_pool_loss
from xmcbench.registry import Registry

LOSSES = Registry("loss")
LOSSES.add("decoupled_softmax", decoupled_softmax_loss)
LOSSES.add("soft_top_k", soft_top_k_loss)
LOSSES.add("infonce", infonce_loss)
LOSSES.add("softmax_ce", softmax_ce_loss)
LOSSES.add("psl", psl_loss)
LOSSES.add("psl_bidirectional", psl_bidirectional_loss)
LOSSES.add("triplet", triplet_pool_loss)
LOSSES.add("dynamic_margin_triplet", dynamic_margin_triplet_pool_loss)

__all__ = [
    "LOSSES",
    "LossInputError",
    "decoupled_softmax_loss",
    "decoupled_softmax_terms",
    "dynamic_margin_triplet_loss",
    "dynamic_margin_triplet_pool_loss",
    "dynamic_margin_triplet_terms",
    "gather_positives",
    "infonce_loss",
    "mean_over_rows",
    "negative_logsumexp",
    "prime_regularizer",
    "psl_bidirectional_loss",
    "psl_loss",
    "sample_one_positive",
    "soft_top_k",
    "soft_top_k_loss",
    "soft_top_k_threshold",
    "softmax_ce_loss",
    "triplet_margin_loss",
    "triplet_pool_loss",
    "unidec_loss",
]
