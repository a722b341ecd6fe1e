"""Shared plumbing for the losses: input checks, precision, and the masked row mean.

Every multi-positive loss here has the same outer structure: a sum of per-positive terms in
each row, divided by a per-row count, then averaged over the rows that have at least one term.
``mean_over_rows`` is that last step, written once so that a sharded computation (labels split
over ranks) can all-reduce the per-row sums and counts and finish with the same function.

Checks are on shapes and dtypes only (no value checks), so they never force a GPU sync.
"""

from __future__ import annotations

import torch

from xmcbench.errors import XmcbenchError

__all__ = ["LossInputError", "check_scores_targets", "check_fraction", "mean_over_rows", "upcast"]


class LossInputError(XmcbenchError, ValueError):
    """A loss was called with inputs of the wrong shape, dtype or range."""


def check_scores_targets(scores: torch.Tensor, targets: torch.Tensor, loss: str) -> None:
    """Raise ``LossInputError`` unless scores is a floating (B, P) tensor and targets a bool (B, P)."""
    if not isinstance(scores, torch.Tensor) or not isinstance(targets, torch.Tensor):
        raise LossInputError(f"{loss}: scores and targets must be torch tensors")
    if scores.dim() != 2:
        raise LossInputError(f"{loss}: scores must be a 2-D (batch, pool) tensor, got shape {tuple(scores.shape)}")
    if not scores.is_floating_point():
        raise LossInputError(f"{loss}: scores must be floating point, got {scores.dtype}; use scores.float()")
    if targets.shape != scores.shape:
        raise LossInputError(
            f"{loss}: targets shape {tuple(targets.shape)} does not match scores shape {tuple(scores.shape)}"
        )
    if targets.dtype != torch.bool:
        raise LossInputError(
            f"{loss}: targets must be a boolean tensor (True = positive), got {targets.dtype}; "
            "pass targets.bool() or (targets > 0)"
        )


def check_fraction(value: float, name: str, loss: str) -> None:
    """Raise ``LossInputError`` unless 0 <= value <= 1 (a mixing weight)."""
    if not 0.0 <= float(value) <= 1.0:
        raise LossInputError(f"{loss}: {name} must be in [0, 1], got {value}")


def upcast(x: torch.Tensor) -> torch.Tensor:
    """float16/bfloat16 -> float32 (exp/log sums lose too much in half precision); others unchanged."""
    if x.dtype in (torch.float16, torch.bfloat16):
        return x.float()
    return x


def mean_over_rows(row_sum: torch.Tensor, row_count: torch.Tensor) -> torch.Tensor:
    """Mean of ``row_sum / row_count`` over the rows with ``row_count > 0``; 0 if there are none.

    Args:
        row_sum: (B,) per-row sum of loss terms (finite; rows with count 0 are ignored).
        row_count: (B,) number of terms in each row (int or float).

    The zero returned when no row counts is still connected to ``row_sum``'s graph, so
    ``loss.backward()`` works (and gives zero gradients) on a batch without positives.
    """
    has = row_count > 0
    per_row = row_sum / row_count.clamp_min(1).to(row_sum.dtype)
    per_row = torch.where(has, per_row, torch.zeros_like(per_row))
    return per_row.sum() / has.sum().clamp_min(1).to(row_sum.dtype)
