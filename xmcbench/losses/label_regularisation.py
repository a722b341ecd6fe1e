"""MACLR's label regularisation (Eq. 3): an instance against its dropout view and random labels.

Xiong et al., "Extreme Zero-Shot Learning for Extreme Text Classification", NAACL 2022, Sec. 4.2.2.

What it minimises. ĥ_i = E(x̂_i, z_i) and ĥ⁺_i = E(x̂_i, z⁺_i) are two encodings of the same
context under different dropout masks (SimCSE's minimal augmentation); y⁻_1..y⁻_M are M label
texts drawn at random from the whole label set, which are almost surely negatives:

    L_label = Σ_i -log( e^{ĥ_i·ĥ⁺_i} / ( Σ_{j=1..M} e^{ĥ_i·E(y⁻_j)} + e^{ĥ_i·ĥ⁺_i} ) )

so the label side of the space is used without any pairing: instances are pushed away from
labels they are unrelated to, while the dropout positive keeps the loss from collapsing them.

Reduction: mean over the N instances by default (the paper sums; see ``supcon.py``).
Temperature: as in Eq. 1-2 the paper writes raw inner products; ``temperature`` divides every
score (τ = 1 is the printed equation).

Relation to siblings: a one-positive InfoNCE whose pool is {ĥ⁺_i} ∪ {E(y⁻_j)}; unlike
``supcon_loss`` the negatives are shared label texts, not the batch's titles.

Example:
    >>> h, h_plus, labels = torch.randn(4, 8), torch.randn(4, 8), torch.randn(6, 8)
    >>> loss = label_regularisation_loss(h, h_plus, labels)
"""

from __future__ import annotations

from typing import Literal

import torch

from xmcbench.losses.common import LossInputError, upcast

__all__ = ["label_regularisation_loss"]


def label_regularisation_loss(
    h: torch.Tensor,
    h_plus: torch.Tensor,
    negatives: torch.Tensor,
    temperature: float = 1.0,
    reduction: Literal["mean", "sum"] = "mean",
) -> torch.Tensor:
    """MACLR Eq. 3.

    Args:
        h: (N, d) instance embeddings ĥ_i (one dropout mask).
        h_plus: (N, d) the same instances under another dropout mask, ĥ⁺_i.
        negatives: (M, d) embeddings of M randomly sampled label texts E(y⁻_j).
        temperature: divides every inner product (1.0 = the printed equation).
        reduction: "mean" over instances (default) or "sum" (printed).

    Returns:
        Scalar loss.
    """
    if h.dim() != 2 or h_plus.shape != h.shape:
        raise LossInputError(
            f"label_regularisation_loss: h and h_plus must both be (N, d); got "
            f"{tuple(h.shape)} and {tuple(h_plus.shape)}"
        )
    if negatives.dim() != 2 or negatives.shape[1] != h.shape[1]:
        raise LossInputError(
            f"label_regularisation_loss: negatives must be (M, {h.shape[1]}), got {tuple(negatives.shape)}"
        )
    if temperature <= 0:
        raise LossInputError(f"label_regularisation_loss: temperature must be > 0, got {temperature}")
    if reduction not in ("mean", "sum"):
        raise LossInputError(f"label_regularisation_loss: reduction must be 'mean' or 'sum', got {reduction!r}")
    h, h_plus, negatives = upcast(h), upcast(h_plus), upcast(negatives)
    positive = (h * h_plus).sum(dim=1, keepdim=True) / temperature  # (N, 1) ĥ_i·ĥ⁺_i
    against_labels = h @ negatives.T / temperature  # (N, M) ĥ_i·E(y⁻_j)
    logits = torch.cat([positive, against_labels], dim=1)  # (N, 1 + M), the positive in column 0
    row = -torch.log_softmax(logits, dim=1)[:, 0]  # (N,)
    return row.mean() if reduction == "mean" else row.sum()
