"""Small real encoders and an independent reference loss shared by the training tests.

The encoder is a 2-layer BERT (hidden 32) built from a config, so no download is needed, with
mean pooling and L2 normalisation like ``xmcbench.encoders.TextEncoder``.
"""

from __future__ import annotations

import torch
from torch import nn


class TinyBertEncoder(nn.Module):
    """token ids (B, T) + mask (B, T) -> L2-normalised mean-pooled (B, 32) embeddings."""

    def __init__(self, dropout: float = 0.1, seed: int = 0):
        super().__init__()
        from transformers import BertConfig, BertModel

        config = BertConfig(
            vocab_size=97,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=32,
            hidden_dropout_prob=dropout,
            attention_probs_dropout_prob=dropout,
        )
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.bert = BertModel(config, add_pooling_layer=False)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        hidden = self.bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()  # (B, T, 1)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # (B, d)
        return nn.functional.normalize(pooled, dim=-1)


def random_tokens(n: int, length: int, seed: int) -> dict[str, torch.Tensor]:
    """n token sequences of 2..length real tokens (the rest padding)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 97, (n, length), generator=gen)
    lengths = torch.randint(2, length + 1, (n,), generator=gen)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    return {"input_ids": ids * mask, "attention_mask": mask}


def random_targets(n_queries: int, n_labels: int, seed: int, p: float = 0.2) -> torch.Tensor:
    """(n_queries, n_labels) bool with a mix of 0, 1 and several positives per row."""
    gen = torch.Generator().manual_seed(seed)
    targets = torch.rand(n_queries, n_labels, generator=gen) < p
    targets[0] = False  # a row without positives: left out of the average
    targets[1, :] = False
    targets[1, n_labels // 2] = True  # exactly one positive
    return targets


def reference_decoupled_softmax(
    queries: torch.Tensor,
    labels: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    counted: torch.Tensor | None = None,
) -> torch.Tensor:
    """DEXML Eq. 5 written out positive by positive (slow, obviously right). ``counted``: the
    positives that get a term (default all); every positive stays out of the denominators."""
    scores = queries @ labels.T / temperature  # (B, L)
    counted = targets if counted is None else counted
    row_losses = []
    for i in range(scores.shape[0]):
        positives = counted[i].nonzero().flatten().tolist()
        if not positives:
            continue
        negatives = scores[i][~targets[i]]
        terms = []
        for p in positives:
            denominator = torch.logsumexp(torch.cat([scores[i, p : p + 1], negatives]), dim=0)
            terms.append(denominator - scores[i, p])
        row_losses.append(torch.stack(terms).mean())
    if not row_losses:
        return scores.sum() * 0.0
    return torch.stack(row_losses).mean()
