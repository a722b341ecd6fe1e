"""SoftTop-k operator and loss of DEXML (Gupta et al., ICLR 2024, Section 4.3, Eq. 6-7).

The operator (after Ahle, 2022). Hard top-k is x -> step(x + t_x) with t_x chosen so that
exactly k entries pass. SoftTop-k replaces the step by a scaled sigmoid sigma(u) = sigmoid(alpha u):

    z_j = sigmoid(alpha (s_j + t)),   t such that  sum_j sigmoid(alpha (s_j + t)) = k.

The row sum is increasing in t, so t is found by bisection (32 iterations in DEXML). The
bracket is [-max s - m, -min s + m] with alpha m = |logit(k/P)| + 1, which guarantees
sum < k at the low end and sum > k at the high end.

Gradient (Eq. 7), by the implicit function theorem instead of unrolling the bisection:

    dt/ds_l = -sigma'(s_l + t) / sum_j sigma'(s_j + t),
    dz_i/ds_l = sigma'(s_i + t) (1[i = l] + dt/ds_l),        sigma'(u) = alpha z (1 - z).

Only t needs a custom backward (``_Threshold``); z and log z are then ordinary autograd
functions of (s, t), which gives exactly Eq. 7 and lets the loss use a stable logsigmoid.

The loss (Eq. 6): l_i = -(1/P) sum_j y_ij log z_ij, P the number of columns (labels in the
loss); averaged over all rows (a row without positives contributes 0). It is zero when all
positives are (softly) inside the top k and grows when a positive falls outside it.

Edge cases: k >= P selects everything (z = 1, loss 0, zero gradient). Scores must be finite
(-inf padding would break the bracket). Half-precision inputs are computed in float32.

Sharding (DEXML Appendix B.5: each rank holds some columns of the same B rows). The row sums
are the only coupling, so pass ``sum_fn`` (sum a (B, 1) per-row partial over ranks, e.g. an
all_reduce(SUM) that returns the result) and ``max_fn`` (the same with MAX). They are applied
to: the column count P, the bracket ends, sum sigma in every bisection step, and — in backward —
sum sigma' and the partial dLoss/dt (the loss depends on t through every rank's columns). Each
rank must then backpropagate only its own share of the loss: ``soft_top_k_loss`` with
``sum_fn`` returns exactly that share (its columns' part, divided by the global P); the sum of
the shares is the loss. All ranks must call forward and backward in the same order.

Relation to siblings: ``decoupled_softmax_loss`` penalises every negative scoring near a
positive; SoftTop-k only penalises positives that fall outside a budget of k.

Example:
    >>> s = torch.randn(4, 100)
    >>> z = soft_top_k(s, k=5, alpha=2.0)          # rows sum to 5
    >>> y = torch.zeros(4, 100, dtype=torch.bool); y[:, :3] = True
    >>> loss = soft_top_k_loss(s, y, k=5, alpha=2.0)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from xmcbench.losses.common import LossInputError, check_scores_targets, upcast

__all__ = ["soft_top_k", "soft_top_k_loss", "soft_top_k_threshold"]

RowReduce = Callable[[torch.Tensor], torch.Tensor]  # (B, 1) partial -> (B, 1) combined over ranks

DEFAULT_K = 5  # DEXML: SoftTop-5
DEFAULT_ALPHA = 2.0  # DEXML Table 7: alpha = 2 on every dataset
DEFAULT_ITERS = 32  # bisection steps (DEXML)


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def _check(
    scores: torch.Tensor,
    k: float,
    alpha: float,
    n_iter: int,
    sum_fn: RowReduce | None,
    max_fn: RowReduce | None,
    fn: str,
) -> None:
    if not isinstance(scores, torch.Tensor) or scores.dim() != 2 or not scores.is_floating_point():
        raise LossInputError(f"{fn}: scores must be a floating (batch, pool) tensor")
    if not k > 0:
        raise LossInputError(f"{fn}: k must be > 0, got {k}")
    if not alpha > 0:
        raise LossInputError(f"{fn}: alpha must be > 0, got {alpha}")
    if int(n_iter) < 1:
        raise LossInputError(f"{fn}: n_iter must be >= 1, got {n_iter}")
    if (sum_fn is None) != (max_fn is None):
        # A bracket from local max/min would be wrong for the full row and bisection would
        # silently converge to one of its ends.
        raise LossInputError(f"{fn}: pass sum_fn and max_fn together (both reduce over the same ranks)")


def _n_columns(scores: torch.Tensor, sum_fn: RowReduce | None) -> int:
    """Number of columns of the full (all-shard) row."""
    if sum_fn is None:
        return scores.shape[1]
    local = torch.full((max(scores.shape[0], 1), 1), float(scores.shape[1]), device=scores.device)
    return int(round(float(sum_fn(local)[0, 0])))


def _bisect(
    s: torch.Tensor, k: float, alpha: float, n_iter: int, n_cols: int, sum_fn: RowReduce, max_fn: RowReduce
) -> torch.Tensor:
    """(B, 1) threshold t with sum_j sigmoid(alpha (s_j + t)) ~= k, by bisection (no graph)."""
    s_max = max_fn(s.amax(dim=1, keepdim=True))  # (B, 1)
    s_min = -max_fn(-s.amin(dim=1, keepdim=True))  # (B, 1)
    q = k / n_cols
    pad = (abs(math.log(q / (1.0 - q))) + 1.0) / alpha
    lo, hi = -s_max - pad, -s_min + pad
    for _ in range(n_iter):
        mid = 0.5 * (lo + hi)
        total = sum_fn(torch.sigmoid(alpha * (s + mid)).sum(dim=1, keepdim=True))
        below = total < k
        lo = torch.where(below, mid, lo)
        hi = torch.where(below, hi, mid)
    return 0.5 * (lo + hi)


class _Threshold(torch.autograd.Function):
    """t(s) of SoftTop-k: bisection forward, implicit-function backward (DEXML Eq. 7)."""

    @staticmethod
    def forward(ctx, s, k, alpha, n_iter, n_cols, sum_fn, max_fn):  # type: ignore[override]
        t = _bisect(s.detach(), k, alpha, n_iter, n_cols, sum_fn, max_fn)
        ctx.save_for_backward(s, t)
        ctx.alpha, ctx.sum_fn = alpha, sum_fn
        return t

    @staticmethod
    def backward(ctx, grad_t):  # type: ignore[override]
        s, t = ctx.saved_tensors
        z = torch.sigmoid(ctx.alpha * (s + t))
        slope = ctx.alpha * z * (1.0 - z)  # (B, P) sigma'(s_j + t)
        total_slope = ctx.sum_fn(slope.sum(dim=1, keepdim=True))  # (B, 1)
        total_grad_t = ctx.sum_fn(grad_t)  # (B, 1): dLoss/dt summed over every rank's share
        # A row whose sigmoids all saturated has zero slope everywhere: its gradient is 0, not 0/0.
        grad_s = -total_grad_t * slope / total_slope.clamp_min(torch.finfo(slope.dtype).tiny)
        return grad_s, None, None, None, None, None, None


def _threshold(
    s: torch.Tensor,
    k: float,
    alpha: float,
    n_iter: int,
    n_cols: int,
    sum_fn: RowReduce | None,
    max_fn: RowReduce | None,
) -> torch.Tensor:
    sum_fn, max_fn = sum_fn or _identity, max_fn or _identity
    return _Threshold.apply(s, float(k), float(alpha), int(n_iter), n_cols, sum_fn, max_fn)


def soft_top_k_threshold(
    scores: torch.Tensor,
    k: float = DEFAULT_K,
    alpha: float = DEFAULT_ALPHA,
    n_iter: int = DEFAULT_ITERS,
    sum_fn: RowReduce | None = None,
    max_fn: RowReduce | None = None,
) -> torch.Tensor:
    """The (B, 1) threshold t of SoftTop-k, differentiable w.r.t. scores by the implicit gradient.

    Requires 0 < k < P (the full row's column count); see ``soft_top_k`` for the arguments.
    """
    _check(scores, k, alpha, n_iter, sum_fn, max_fn, "soft_top_k_threshold")
    s = upcast(scores)
    n_cols = _n_columns(s, sum_fn)
    if k >= n_cols:
        raise LossInputError(f"soft_top_k_threshold: k={k} must be < the number of columns ({n_cols})")
    return _threshold(s, k, alpha, n_iter, n_cols, sum_fn, max_fn)


def soft_top_k(
    scores: torch.Tensor,
    k: float = DEFAULT_K,
    alpha: float = DEFAULT_ALPHA,
    n_iter: int = DEFAULT_ITERS,
    sum_fn: RowReduce | None = None,
    max_fn: RowReduce | None = None,
) -> torch.Tensor:
    """SoftTop-k (DEXML Sec. 4.3): z = sigmoid(alpha (s + t)) with rows summing to k.

    Args:
        scores: (B, P) finite floating scores.
        k: the budget (> 0; need not be an integer). k >= P gives all ones.
        alpha: sigmoid steepness (> 0); large alpha approaches the hard top-k indicator.
        n_iter: bisection steps for t (32 as in DEXML; each halves the bracket).
        sum_fn, max_fn: for column-sharded rows, combine (B, 1) per-row partials over ranks by
            sum / max (see module docstring). None means the row is all here.

    Returns:
        (B, P) tensor in [0, 1] (float32 for half inputs), differentiable (Eq. 7).
    """
    _check(scores, k, alpha, n_iter, sum_fn, max_fn, "soft_top_k")
    s = upcast(scores)
    n_cols = _n_columns(s, sum_fn)
    if k >= n_cols:
        return s * 0.0 + 1.0  # everything is selected; keeps the graph, gradient 0
    t = _threshold(s, k, alpha, n_iter, n_cols, sum_fn, max_fn)  # (B, 1)
    return torch.sigmoid(alpha * (s + t))


def soft_top_k_loss(
    scores: torch.Tensor,
    targets: torch.Tensor,
    k: float = DEFAULT_K,
    alpha: float = DEFAULT_ALPHA,
    n_iter: int = DEFAULT_ITERS,
    sum_fn: RowReduce | None = None,
    max_fn: RowReduce | None = None,
    counted: torch.Tensor | None = None,
    normalise: str = "labels",
) -> torch.Tensor:
    """SoftTop-k loss (DEXML Eq. 6): -mean over rows of (1/P) sum_j y_ij log z_ij.

    Args:
        scores: (B, P) finite floating scores.
        targets: (B, P) bool positives.
        k, alpha, n_iter, sum_fn, max_fn: as in ``soft_top_k``. With ``sum_fn`` the value is
            this rank's share (its columns, divided by the global P); shares sum to the loss.
        counted: optional (B, P) bool subset of ``targets``: the positives that get a term
            (default: all). DEXML's released code samples at most k positives per row.
        normalise: "labels" divides each row by the number of columns P (Eq. 6, default);
            "positives" divides by the row's number of counted positives (the released code,
            which produced the published SoftTop-5 numbers: sampled ≤ k, divided by the number
            sampled). With ``sum_fn`` the count is combined over ranks.

    Returns:
        Scalar loss (>= 0). log z is computed as logsigmoid(alpha (s + t)), never log(0).
    """
    check_scores_targets(scores, targets, "soft_top_k_loss")
    _check(scores, k, alpha, n_iter, sum_fn, max_fn, "soft_top_k_loss")
    if normalise not in ("labels", "positives"):
        raise LossInputError(
            f"soft_top_k_loss: normalise must be 'labels' (Eq. 6) or 'positives' (released code), got {normalise!r}"
        )
    if counted is not None:
        check_scores_targets(scores, counted, "soft_top_k_loss (counted)")
        targets = targets & counted
    s = upcast(scores)
    n_cols = _n_columns(s, sum_fn)
    if k >= n_cols or s.shape[0] == 0:
        return (s * 0.0).sum()  # log z = log 1 = 0 for every column
    t = _threshold(s, k, alpha, n_iter, n_cols, sum_fn, max_fn)  # (B, 1)
    log_z = F.logsigmoid(alpha * (s + t))  # (B, P)
    row_sum = -log_z.masked_fill(~targets, 0.0).sum(dim=1)  # (B,)
    if normalise == "labels":
        return (row_sum / n_cols).mean()
    with torch.no_grad():
        n_pos = targets.sum(dim=1, keepdim=True).to(s.dtype)  # (B, 1) this rank's counted positives
        n_pos = (sum_fn or _identity)(n_pos)[:, 0].clamp_min(1)  # (B,) over every rank
    return (row_sum / n_pos).mean()
