"""PRIME: a dual encoder scored against label prototypes, trained with a dynamic-margin triplet loss.

Dahiya, Ortego & Jiménez, "Prototypical Extreme Multi-label Classification with a Dynamic Margin
Loss", NAACL 2025 (prime.txt). One shared encoder f_θ embeds queries (h_q) and label texts (h_l),
both L2-normalised. A Label Prototype Network g_φ turns each label into a prototype

    z_l = normalise(mean_pool(TransformerEncoderLayer([h_l, c_l, v_l])))       (Sec. 3.2)

(one layer, 1 head, FFN 1024, dropout 0.1; App. H) from three inputs:

- h_l, the label's text embedding from the *current* encoder, with its gradient (the released
  code feeds the encoder's label embedding straight into the prototype network);
- c_l, a label centroid: a buffer, initialised to the normalised mean of the pre-trained
  embeddings of the label's training queries (labels without any take their pre-trained h_l),
  and after every step moved towards the batch's query embeddings (Eq. 4)::

      c_p <- α c_p + (1 - α) h_q    for every batch query q and every p ∈ P_q,   α = 0.95

  P_q is the query's whole positive set, as Eq. 4 says (not only the positives sampled into the
  pool). A label positive for several batch queries gets Eq. 4 once per (query, label) pair, in
  batch order: c <- α^n c + (1-α) Σ_j α^(n-j) h_{q_j} (``centroid_momentum_update``);
- v_l, a free vector from a bank B with |B| << L, shared by the labels of one cluster of a
  balanced hierarchical 2-means of the pre-trained label text embeddings (DEXA's grouping).

Training (Sec. 3.3, Eq. 5) on NGAME batches with in-batch negatives: each step samples two
positives per query with probability ∝ inverse propensity (App. J), the label pool is their union,
and a pool label is a positive of every batch query it belongs to (``build_label_pool``), a
negative of the others. With s_ql = h_q·h_l and b_ql = h_q·z_l over the (b, P) pool::

    L = L_cd(b) + L_cd(s) + L_cd(sᵀ) + λ R(s, b),    λ = 0.1, m' = 0.1, γ = [0.1, 0.3]

where L_cd is ``dynamic_margin_triplet_pool_loss`` over every (positive, negative) triplet of
each anchor, *summed* over triplets and anchors as Eq. 1 writes it (``triplet_reduction: sum``;
the third term anchors on the pool labels and ranks the batch queries) and R the regulariser of Eq. 6-7
(``prime_regularizer``) over every pool pair. Inference is exact maximum-inner-product search of
h_q against the prototypes z_l of all labels, computed once after training (App. I). The model
of the last epoch is kept (App. H: no checkpoint selection).

Where the paper and the released code (github.com/kunaldahiya/prime) disagree:
- The margin: its defining formula max(., 0) is the released code and the default
  (``margin_variant: max``); the case expansion of Eq. 3/13-14 is ``margin_variant: paper``
  (see ``xmcbench/losses/dynamic_margin_triplet.py``).
- The regulariser: the released code hinges R_p, R_n at zero and averages over the non-zero
  terms (``regularizer: hinge``, default; empty sets give 0, not NaN); the linear Eq. 6-7 is
  ``regularizer: paper``. The released code also takes the triplet's upper margin (0.3) as m'
  and scores R on one positive and the hardest negatives; here m' = 0.1 over every pool pair.
- The triplet reduction: Eq. 1 sums over the batch's triplets (``triplet_reduction: sum``,
  default; easy triplets add 0). The released code keeps the ``top_negatives`` = 100 hardest
  negatives per anchor and weights the violating ones by softmax(s_n / ``negative_temperature``
  = 0.1) (``triplet_reduction: softmax``). ``mean`` (uniform mean over every pair, easy ones
  included: xmcbench's earlier default, in neither) dilutes the triplet gradient by the number of
  pool negatives while λR is averaged over its non-zero terms only, so it is kept only as an
  option.
- Positives: Sec. 4.2 samples two per query, Table 10's caption one ("PRIME++ more"); the
  default follows Sec. 4.2 (``positives_per_query: 2``). App. J gives a per-draw probability
  p_il ∝ γ_l and the released code draws with a multinomial, so draws are independent
  (``positive_draws: with_replacement``, default; a label drawn twice enters the pool once);
  ``without_replacement`` draws distinct positives (successive sampling).
- Centroids: the released code's update is effectively a no-op; Eq. 4 is implemented. Its
  initial centroids are normalised means, as here.
- The prototype layer is post-norm with GELU, the released code's defaults (the paper does not say).
- An xmcbench choice, in neither the paper nor (as far as can be checked: the bank set-up lives
  in a library not published with it) the released code: the free vectors start as the
  normalised mean of their cluster's pre-trained label embeddings, so the bank starts on the
  embedding sphere. Recorded in the run's accounting under ``not_reported``.
- NGAME's curriculum comes from ``dual_encoder`` (cluster count halved at epochs 10, 20, 25, 50,
  ...; the first clusters have the configured ``cluster_size``, 4 in the released config); the
  released config grows at 10, 25, 50, ... (no 20).
- Gradient clipping: the paper does not clip (``training.grad_clip: null``); the pre-clip norm
  is recorded in the accounting.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
import torch
from pydantic import Field, field_validator, model_validator
from scipy import sparse
from torch import nn

from xmcbench.errors import XmcbenchError
from xmcbench.methods import dual_encoder as de
from xmcbench.methods.base import RunContext, TrainTask

# Weight decay is off for biases and LayerNorms (handled by build_optimizer) and, per App. H, for
# the free-vector bank; the attention's packed ``in_proj_bias`` is a bias too.
NO_DECAY_PATTERNS = (r"free_vectors$", r"_bias$")
PROTOTYPE_FILE = "prototype_network.safetensors"
PROTOTYPE_META = "prototype_network.json"
PROTOTYPES_NPY = "label_prototypes.npy"


class PrimeConfig(de.DualEncoderConfig):
    gamma_min: float = Field(default=0.1, ge=0)  # γ_min of the clipped margin (Table 10)
    gamma_max: float = Field(default=0.3, ge=0)  # γ_max (Table 10)
    margin_variant: Literal["max", "paper"] = "max"  # max: Eq. 13's formula = released code
    triplet_reduction: Literal["sum", "softmax", "mean"] = "sum"  # sum: Eq. 1; softmax: released code
    negative_temperature: float = Field(default=0.1, gt=0)  # τ of the softmax reduction (released code)
    top_negatives: int | None = Field(default=100, gt=0)  # hardest negatives kept by softmax (released code)
    reg_weight: float = Field(default=0.1, ge=0)  # λ of Eq. 5 (App. H)
    reg_margin: float = Field(default=0.1, ge=0)  # m' of Eq. 6-7 (App. H)
    regularizer: Literal["hinge", "paper"] = "hinge"  # hinge: released code (no 0/0)
    centroid_momentum: float = Field(default=0.95, ge=0, le=1)  # α of Eq. 4 (App. H)
    use_centroids: bool = True  # False: the "w/o c_l" ablation of Fig. 3
    free_vectors: int = Field(default=65536, ge=0)  # |B| (Table 10); 0: no free vectors (Fig. 3)
    positives_per_query: int = Field(default=2, ge=1)  # Sec. 4.2: two positives per query
    positive_sampling: Literal["inverse_propensity", "uniform"] = "inverse_propensity"  # App. J / Table 11
    positive_draws: Literal["with_replacement", "without_replacement"] = "with_replacement"  # App. J per-draw p_il
    prototype_heads: int = Field(default=1, ge=1)  # App. H
    prototype_ffn: int = Field(default=1024, gt=0)  # App. H
    prototype_dropout: float = Field(default=0.1, ge=0, lt=1)  # App. H
    prototype_activation: Literal["gelu", "relu"] = "gelu"  # released code's default

    @field_validator("free_vectors")
    @classmethod
    def _power_of_two(cls, value: int) -> int:
        if value and value & (value - 1):
            raise ValueError(f"free_vectors must be 0 or a power of two (balanced 2-means clusters); got {value}")
        return value

    @model_validator(mode="after")
    def _margins_ordered(self) -> PrimeConfig:
        if self.gamma_min > self.gamma_max:
            raise ValueError(f"gamma_min ({self.gamma_min}) must not exceed gamma_max ({self.gamma_max})")
        return self


# ----------------------------------------------------------------------------------------------
# The Label Prototype Network and its pure pieces


def centroid_momentum_update(
    centroids: torch.Tensor, query_emb: torch.Tensor, pair_rows: np.ndarray, pair_labels: np.ndarray, alpha: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 4 applied once per (query, label) pair, pairs in batch order -> (labels met (U,), their new rows (U, d)).

    Args:
        centroids: (L, d) current c (not modified).
        query_emb: (b, d) the batch's query embeddings h_q (detached).
        pair_rows: (T,) batch row of each (query, positive label) pair, in batch order.
        pair_labels: (T,) the label of each pair.
        alpha: momentum α.

    A label met n times gets c <- α^n c + (1-α) Σ_{j=1..n} α^(n-j) h_{q_j} (q_1 first), exactly
    what n sequential applications of Eq. 4 give. Only the U labels met are returned, so a step
    costs O(T d) however many labels there are (1.3M x 768 centroids are never copied).
    """
    pair_rows = np.asarray(pair_rows, dtype=np.int64)
    pair_labels = np.asarray(pair_labels, dtype=np.int64)
    order = np.lexsort((np.arange(pair_rows.size), pair_labels))  # by label, stable in batch order
    labels, rows = pair_labels[order], pair_rows[order]
    unique, start, count = np.unique(labels, return_index=True, return_counts=True)
    occurrence = np.arange(labels.size) - np.repeat(start, count)  # j - 1
    later = np.repeat(count, count) - 1 - occurrence  # n - j: updates that come after this one
    device, dtype = centroids.device, centroids.dtype
    unique_t = torch.from_numpy(unique).to(device)
    decay = torch.from_numpy(np.power(float(alpha), count)).to(device, dtype)  # (U,) α^n
    weights = torch.from_numpy((1.0 - alpha) * np.power(float(alpha), later)).to(device, dtype)  # (T,)
    slot = torch.from_numpy(np.repeat(np.arange(unique.size), count)).to(device)  # (T,) row in the output
    new = centroids[unique_t] * decay[:, None]  # (U, d)
    new.index_add_(0, slot, weights[:, None] * query_emb[torch.from_numpy(rows).to(device)].to(dtype))
    return unique_t, new


def assign_free_vectors(label_emb: np.ndarray, n_vectors: int, seed: int, device: str) -> np.ndarray:
    """(L,) int64: the bank row of every label, from balanced 2-means of the label embeddings."""
    from xmcbench.sampling import balanced_kmeans

    clusters = balanced_kmeans(label_emb, n_clusters=n_vectors, seed=seed, device=device)
    assignment = np.empty(label_emb.shape[0], dtype=np.int64)
    for index, members in enumerate(clusters):
        assignment[members] = index
    return assignment


def initial_centroids(query_emb: np.ndarray, labels: sparse.csr_matrix, label_emb: np.ndarray) -> np.ndarray:
    """(L, d): the normalised mean embedding of each label's training queries; h_l for labels without.

    ``query_emb`` (N, d) are the embeddings of the rows of ``labels`` (N, L); stored entries are
    positives whatever their value.
    """
    ones = np.ones(labels.nnz, dtype=np.float32)
    binary = sparse.csr_matrix((ones, labels.indices, labels.indptr), shape=labels.shape)
    sums = np.asarray(binary.T @ query_emb, dtype=np.float32)  # (L, d)
    counts = np.diff(binary.tocsc().indptr)  # (L,)
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    out = (sums / np.maximum(norms, 1e-12)).astype(np.float32)
    out[counts == 0] = label_emb[counts == 0]
    return out


def bank_mean(label_emb: np.ndarray, assignment: np.ndarray, n_vectors: int) -> np.ndarray:
    """(|B|, d): the normalised mean of the label embeddings of each bank row's cluster."""
    n_labels = label_emb.shape[0]
    members = sparse.csr_matrix(
        (np.ones(n_labels, dtype=np.float32), (assignment, np.arange(n_labels))), shape=(n_vectors, n_labels)
    )
    sums = np.asarray(members @ label_emb, dtype=np.float32)  # (|B|, d)
    return sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)


class LabelPrototypeNetwork(nn.Module):
    """g_φ(h_l, c_l, v_l) -> z_l: one transformer layer over the three inputs, mean-pooled, normalised.

    Holds the centroids c (a buffer, updated by Eq. 4, never by the optimiser), the free-vector
    bank (a parameter, |B| rows) and each label's bank row (a buffer).
    """

    def __init__(
        self,
        dim: int,
        n_labels: int,
        n_free_vectors: int,
        *,
        heads: int = 1,
        ffn: int = 1024,
        dropout: float = 0.1,
        activation: str = "gelu",
        use_centroids: bool = True,
    ):
        super().__init__()
        if dim % heads:
            raise XmcbenchError(f"prototype_heads ({heads}) must divide the embedding size ({dim})")
        self.dim, self.n_labels, self.use_centroids = int(dim), int(n_labels), bool(use_centroids)
        self.layer = nn.TransformerEncoderLayer(dim, heads, ffn, dropout, activation, batch_first=True)
        self.register_buffer("centroids", torch.zeros(n_labels, dim))  # (L, d)
        self.register_buffer("vector_of_label", torch.zeros(n_labels, dtype=torch.long))  # (L,)
        if n_free_vectors:
            self.free_vectors = nn.Parameter(torch.zeros(n_free_vectors, dim))  # (|B|, d)
        else:
            self.register_parameter("free_vectors", None)

    @property
    def n_free_vectors(self) -> int:
        return 0 if self.free_vectors is None else int(self.free_vectors.shape[0])

    def inputs(self, label_text_emb: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """(P, n_inputs, d): the sequence [h_l, c_l, v_l] of each label (inputs left out by the config skipped)."""
        parts = [label_text_emb.float()]
        if self.use_centroids:
            parts.append(self.centroids[labels])
        if self.free_vectors is not None:
            parts.append(self.free_vectors[self.vector_of_label[labels]])
        return torch.stack(parts, dim=1)

    def forward(self, label_text_emb: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """label_text_emb (P, d) h_l of the labels ``labels`` (P,) -> (P, d) prototypes z_l."""
        x = self.inputs(label_text_emb, labels)  # (P, 3, d)
        pooled = self.layer(x).mean(dim=1)  # (P, d)
        return nn.functional.normalize(pooled.float(), dim=-1)

    @torch.no_grad()
    def update_centroids(
        self, query_emb: torch.Tensor, pair_rows: np.ndarray, pair_labels: np.ndarray, alpha: float
    ) -> None:
        labels, rows = centroid_momentum_update(self.centroids, query_emb.float(), pair_rows, pair_labels, alpha)
        self.centroids[labels] = rows


class PrimeModel(nn.Module):
    """The encoder and the prototype network as one module (one checkpoint, one optimiser)."""

    def __init__(self, encoder: nn.Module, prototypes: LabelPrototypeNetwork):
        super().__init__()
        self.encoder = encoder
        self.prototypes = prototypes


# ----------------------------------------------------------------------------------------------
# The objective (Eq. 5)


def prime_objective(
    query_emb: torch.Tensor,
    label_emb: torch.Tensor,
    prototypes: torch.Tensor,
    targets: torch.Tensor,
    config: PrimeConfig,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """L(h_q, z_l) + L(h_q, h_l) + L(h_l, h_q) + λ R over one batch's label pool.

    Args:
        query_emb: (b, d) h_q.
        label_emb: (P, d) h_l of the pool labels.
        prototypes: (P, d) z_l of the pool labels.
        targets: (b, P) bool, True where the pool label is a positive of the query.
        config: margins, variant, negative weighting and the regulariser's settings.

    Returns:
        The scalar loss and its four terms (detached) for logging.
    """
    from xmcbench.losses import dynamic_margin_triplet_pool_loss, prime_regularizer

    c = config
    s = query_emb @ label_emb.T  # (b, P) query-to-label-text similarities s_ql
    b = query_emb @ prototypes.T  # (b, P) query-to-prototype similarities b_ql

    def triplets(scores, tgt):
        return dynamic_margin_triplet_pool_loss(
            scores,
            tgt,
            c.gamma_min,
            c.gamma_max,
            c.margin_variant,
            c.negative_temperature,
            reduction=c.triplet_reduction,
            top_negatives=c.top_negatives,
        )

    terms = {
        "query_prototype": triplets(b, targets),
        "query_label": triplets(s, targets),
        "label_query": triplets(s.T, targets.T),  # anchors: pool labels; candidates: batch queries
        "regularizer": prime_regularizer(s, b, targets, c.reg_margin, c.regularizer),
    }
    loss = terms["query_prototype"] + terms["query_label"] + terms["label_query"] + c.reg_weight * terms["regularizer"]
    return loss, {k: v.detach() for k, v in terms.items()}


def positive_pairs(labels: sparse.csr_matrix, batch_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(batch row, label) of every training positive of the batch's queries, in batch order."""
    block = labels[batch_rows]
    rows = np.repeat(np.arange(block.shape[0], dtype=np.int64), np.diff(block.indptr))
    return rows, block.indices.astype(np.int64)


def prototype_network(c: PrimeConfig, dim: int, n_labels: int) -> LabelPrototypeNetwork:
    """The recipe's label prototype network for ``n_labels`` labels of a ``dim``-wide encoder."""
    return LabelPrototypeNetwork(
        dim,
        n_labels,
        bank_size(c.free_vectors, n_labels),
        heads=c.prototype_heads,
        ffn=c.prototype_ffn,
        dropout=c.prototype_dropout,
        activation=c.prototype_activation,
        use_centroids=c.use_centroids,
    )


def bank_size(requested: int, n_labels: int) -> int:
    """The free-vector count actually used: at most the largest power of two <= L (every cluster needs a label)."""
    if requested == 0:
        return 0
    return int(min(requested, 2 ** int(np.floor(np.log2(n_labels)))))


# ----------------------------------------------------------------------------------------------
class PrimeMethod:
    name: ClassVar[str] = "prime"
    Config: ClassVar[type[PrimeConfig]] = PrimeConfig
    requires_labels: ClassVar[bool] = True
    single_process: ClassVar[str | None] = (
        "the paper fits every PRIME configuration in a single 80 GB A100 GPU (Sec. 5, App. H)"
    )
    uses_encoder: ClassVar[bool] = True

    def __init__(self, config: PrimeConfig, recipe):
        self.config = config
        self.recipe = recipe
        self.model: PrimeModel | None = None
        self.label_prototypes: np.ndarray | None = None  # (L, d) z_l after fit
        self._grad_norms: list[float] = []  # pre-clip global gradient norm per step (checkpointed)

    @property
    def encoder(self):
        return None if self.model is None else self.model.encoder

    # ------------------------------------------------------------------------------------------
    def fit(self, task: TrainTask, ctx: RunContext) -> None:
        from xmcbench.progress import task as progress_task
        from xmcbench.sampling import PoolAccounting
        from xmcbench.train import build_optimizer, build_scheduler, get_world_size, load_checkpoint, save_checkpoint

        c, t = self.config, self.recipe.training
        labels = task.train_labels
        if get_world_size() > 1:
            raise XmcbenchError("PRIME trains in one process (the paper's single-GPU budget); run it without torchrun")
        if not self.recipe.encoder.normalize:
            raise XmcbenchError(
                "PRIME's margins are on cosine similarities (h_q, h_l, z_l are L2-normalised, "
                "App. I); set encoder.normalize: true"
            )
        if t.validation_fraction > 0:
            raise XmcbenchError(
                "PRIME keeps the last epoch's model (paper, App. H) and selects nothing on a "
                "validation split; set training.validation_fraction to 0"
            )

        # 1. encoder, token caches, prototype network, positive-sampling weights
        encoder = de.build_encoder(self.recipe).to(ctx.device)
        tokens = de.tokenise(encoder, task, self.recipe, ctx.progress)
        rows = de.labelled_rows(labels)
        prototypes = prototype_network(c, encoder.dim, task.n_labels)
        if prototypes.n_free_vectors < c.free_vectors:
            de.warn_clipped(
                "method.free_vectors",
                c.free_vectors,
                prototypes.n_free_vectors,
                f"is more than the {task.n_labels:,} labels allow (one balanced 2-means cluster of labels per "
                "free vector, a power of two of them)",
            )
        self.model = PrimeModel(encoder, prototypes.to(ctx.device))
        weights = self._positive_weights(task)

        # 2. optimiser, schedule, sampler
        sampler, schedule = de.make_sampler(c, rows.size, t.batch_size, t.seed, epochs=t.epochs)
        self._check_top_negatives(sampler.max_batch_size, task.n_labels)
        optimizer = build_optimizer(
            [(self.model.named_parameters(), t.lr)], t.weight_decay, no_decay_patterns=NO_DECAY_PATTERNS
        )
        scheduler = build_scheduler(optimizer, max(t.epochs * len(sampler), 1), t.warmup_ratio, t.schedule)
        accounting = PoolAccounting()

        # 3. resume from the last complete epoch, or set up centroids and free vectors
        ckpt_dir = ctx.checkpoint_dir / "train"
        state = load_checkpoint(ckpt_dir, self.model, optimizer, scheduler)
        start_epoch, step = (state["epoch"], state["step"]) if state else (0, 0)
        query_emb = None  # (N, d) embeddings of ``rows`` from the current encoder, when fresh
        if state:
            sampler.load_state_dict(state["sampler_state"])
            accounting.load_state_dict(state["extra"].get("accounting", {}))
            self._grad_norms = [float(x) for x in state["extra"].get("grad_norms", [])]
        else:
            query_emb = self._initialise(tokens, labels, rows, ctx)

        # 4. epochs
        loss = None  # the last step's, for the epoch log line (an epoch resumed at its end has none)
        for epoch in range(start_epoch, t.epochs):
            if de.clustering_due(schedule, epoch, sampler):
                if query_emb is None:
                    query_emb = de.encode_all(
                        encoder,
                        tokens.queries,
                        ctx.device,
                        ctx.precision,
                        c.encode_batch_size,
                        rows=rows,
                        progress=ctx.progress,
                        description=f"epoch {epoch}: encode queries",
                    )  # (N, d)
                de.recluster(sampler, schedule, epoch, query_emb, t.seed, ctx.device)
            query_emb = None  # stale once this epoch trains
            sampler.set_epoch(epoch)
            self.model.train()
            with progress_task(
                f"epoch {epoch + 1}/{t.epochs}", len(sampler) - sampler.consumed, enabled=ctx.progress
            ) as advance:
                for batch in sampler:
                    batch_rows = rows[batch]  # (b,) training query ids
                    pool, loss = self._train_step(batch_rows, labels, weights, tokens, ctx, epoch, step)
                    self._optimizer_step(optimizer, scheduler, t.grad_clip)
                    accounting.update(pool)
                    ctx.record_pool(pool.size)
                    step += 1
                    advance(1)
            save_checkpoint(
                ckpt_dir,
                epoch + 1,
                step,
                self.model,
                optimizer,
                scheduler,
                sampler_state=sampler.state_dict(),
                # the gradient norms too, so a resumed run's recorded norms cover all of training
                extra={
                    "accounting": accounting.state_dict(),
                    "grad_norms": np.asarray(self._grad_norms, dtype=np.float64),
                },
            )
            ctx.log_epoch(epoch + 1, t.epochs, step=step, loss=loss, scheduler=scheduler, queries=len(rows))

        # 5. prototypes of every label for inference (App. I)
        self.label_prototypes = self._all_prototypes(tokens, ctx)
        # the batch that runs: at most the training queries
        self._record_accounting(ctx, accounting, prototypes.n_free_vectors, sampler.max_batch_size)

    # ------------------------------------------------------------------------------------------
    def _check_top_negatives(self, batch: int, n_labels: int) -> None:
        """Say when the softmax reduction's ``top_negatives`` can never cut a row's negatives.

        A query row scores the pool (at most batch × β labels, at most L), a label row the batch's
        queries; with at least that many columns every negative is kept (the loss's own rule).
        """
        c = self.config
        if c.triplet_reduction != "softmax" or c.top_negatives is None:
            return
        pool = min(batch * c.positives_per_query, n_labels)
        if c.top_negatives >= max(pool, batch):
            de.warn_clipped(
                "method.top_negatives",
                c.top_negatives,
                f"every negative ({pool:,} pool labels at most per query, {batch:,} queries per label)",
                f"is at least the {max(pool, batch):,} columns a loss row can have",
            )

    def _positive_weights(self, task: TrainTask) -> np.ndarray | None:
        if self.config.positive_sampling == "uniform":
            return None
        if task.inv_propensity is None:
            raise XmcbenchError(
                "PRIME samples positives by inverse propensity (App. J) but the task carries no "
                "inv_propensity; pass one, or set method.positive_sampling: uniform"
            )
        return np.asarray(task.inv_propensity, dtype=np.float64)

    @torch.no_grad()
    def _initialise(self, tokens, labels: sparse.csr_matrix, rows: np.ndarray, ctx: RunContext) -> np.ndarray:
        """Free-vector clusters and centroids from the pre-trained encoder; returns the query embeddings."""
        c, t = self.config, self.recipe.training
        encoder, prototypes = self.model.encoder, self.model.prototypes
        label_emb = de.encode_all(
            encoder,
            tokens.labels,
            ctx.device,
            ctx.precision,
            c.encode_batch_size,
            progress=ctx.progress,
            description="encode labels (pre-trained)",
        )  # (L, d)
        query_emb = de.encode_all(
            encoder,
            tokens.queries,
            ctx.device,
            ctx.precision,
            c.encode_batch_size,
            rows=rows,
            progress=ctx.progress,
            description="encode queries (pre-trained)",
        )  # (N, d)
        centroids = initial_centroids(query_emb, labels[rows], label_emb)  # (L, d)
        prototypes.centroids.copy_(torch.from_numpy(centroids))
        if prototypes.free_vectors is not None:
            n_free = prototypes.n_free_vectors
            assignment = assign_free_vectors(label_emb, n_free, t.seed, ctx.device)  # (L,)
            prototypes.vector_of_label.copy_(torch.from_numpy(assignment))
            prototypes.free_vectors.copy_(torch.from_numpy(bank_mean(label_emb, assignment, n_free)))
        return query_emb

    def _batch_loss(self, batch_rows: np.ndarray, pool, tokens, ctx: RunContext):
        """Eq. 5 on one batch: (loss, terms, h_q) with the graph through encoder and prototype network."""
        from xmcbench.train import autocast

        pool_t = pool.tensors(ctx.device)  # labels (P,), targets (b, P)
        with autocast(ctx.device, ctx.precision):
            h_q = de.embed(self.model.encoder, tokens.queries, batch_rows, ctx.device)  # (b, d)
            h_l = de.embed(self.model.encoder, tokens.labels, pool.labels, ctx.device)  # (P, d)
            z = self.model.prototypes(h_l, pool_t["labels"])  # (P, d)
        loss, terms = prime_objective(h_q.float(), h_l.float(), z.float(), pool_t["targets"], self.config)
        return loss, terms, h_q

    def _train_step(self, batch_rows, labels, weights, tokens, ctx: RunContext, epoch: int, step: int):
        """Sample positives, build the pool, backpropagate Eq. 5, then move the centroids (Eq. 4)."""
        from xmcbench.sampling import build_label_pool, sample_positives, step_rng

        c = self.config
        rng = step_rng(self.recipe.training.seed, epoch, step, "positives")
        positives = sample_positives(
            labels,
            batch_rows,
            c.positives_per_query,
            rng,
            weights=weights,
            replace=c.positive_draws == "with_replacement",
        )  # (b, β)
        pool = build_label_pool(labels, batch_rows, positives)
        loss, _, h_q = self._batch_loss(batch_rows, pool, tokens, ctx)
        loss.backward()
        # After the forward pass: this step's prototypes used the centroids from before it.
        pair_rows, pair_labels = positive_pairs(labels, batch_rows)
        self.model.prototypes.update_centroids(h_q.detach(), pair_rows, pair_labels, c.centroid_momentum)
        return pool, loss.detach()

    def _optimizer_step(self, optimizer, scheduler, grad_clip) -> None:
        from xmcbench.train import clip_gradients

        norm = clip_gradients([p for p in self.model.parameters() if p.requires_grad], grad_clip)
        self._grad_norms.append(float(norm))  # pre-clip: recorded whether or not the recipe clips
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

    @torch.no_grad()
    def _all_prototypes(self, tokens, ctx: RunContext) -> np.ndarray:
        """z_l for every label from the final encoder and prototype network -> (L, d) float32."""
        c = self.config
        label_emb = de.encode_all(
            self.model.encoder,
            tokens.labels,
            ctx.device,
            ctx.precision,
            c.encode_batch_size,
            progress=ctx.progress,
            description="encode labels",
        )  # (L, d)
        return prototypes_of(self.model.prototypes, label_emb, ctx.device, ctx.precision, c.encode_batch_size)

    def _record_accounting(self, ctx: RunContext, accounting, n_free: int, batch_size: int) -> None:
        c, t = self.config, self.recipe.training
        ctx.accounting.update(
            batch_size=batch_size,
            hard_negatives_per_query=0.0,
            refresh_interval=c.recluster_every if c.batching == "clustered" else None,
            free_vectors=n_free,
            sampled_positives_per_query=c.positives_per_query,
            triplet_reduction=c.triplet_reduction,
            positive_draws=c.positive_draws,
            batching=c.batching,
            grad_clip=t.grad_clip,
            grad_norm_preclip_mean=float(np.mean(self._grad_norms)) if self._grad_norms else None,
            grad_norm_preclip_max=float(np.max(self._grad_norms)) if self._grad_norms else None,
            not_reported={
                "free_vector_init": "normalised mean of the cluster's pre-trained label embeddings (xmcbench choice)"
            },
        )
        if accounting.steps:
            summary = accounting.summary()
            # From the checkpointed totals, so a resumed run reports every step, not only its own.
            ctx.accounting.update(
                steps=summary["steps"],
                pool_size_mean=summary["pool_size_mean"],
                pool_size_max=summary["pool_size_max"],
                positives_per_query=summary["positives_in_pool_per_query_mean"],
                in_batch_negatives_per_query=summary["pool_size_mean"] - summary["positives_in_pool_per_query_mean"],
            )

    # ------------------------------------------------------------------------------------------
    def predict(self, texts: Sequence[str], k: int, ctx: RunContext) -> sparse.csr_matrix:
        assert self.model is not None and self.label_prototypes is not None, "fit or load first"
        return de.predict_topk(
            self.model.encoder,
            texts,
            self.label_prototypes,
            k,
            ctx,
            self.config.encode_batch_size,
            self.config.search_backend,
        )

    def save(self, path: Path) -> None:
        from safetensors.torch import save_file

        path.mkdir(parents=True, exist_ok=True)
        self.model.encoder.save(path / "encoder")
        net = self.model.prototypes
        state = {k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
        save_file(state, str(path / PROTOTYPE_FILE))
        c = self.config
        meta = {
            "dim": net.dim,
            "n_labels": net.n_labels,
            "free_vectors": net.n_free_vectors,
            "use_centroids": net.use_centroids,
            "heads": c.prototype_heads,
            "ffn": c.prototype_ffn,
            "dropout": c.prototype_dropout,
            "activation": c.prototype_activation,
        }
        (path / PROTOTYPE_META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        np.save(path / PROTOTYPES_NPY, self.label_prototypes)

    def load(self, path: Path) -> None:
        from safetensors.torch import load_file

        missing = [f for f in (PROTOTYPE_META, PROTOTYPE_FILE, PROTOTYPES_NPY, "encoder") if not (path / f).exists()]
        if missing:
            raise XmcbenchError(
                f"{path}: not a saved PRIME model (missing {', '.join(missing)}); "
                "point to the folder PrimeMethod.save wrote (a run's checkpoints/model)"
            )
        meta = json.loads((path / PROTOTYPE_META).read_text(encoding="utf-8"))
        encoder = de.build_encoder_from(path / "encoder", self.recipe)
        net = LabelPrototypeNetwork(
            meta["dim"],
            meta["n_labels"],
            meta["free_vectors"],
            heads=meta["heads"],
            ffn=meta["ffn"],
            dropout=meta["dropout"],
            activation=meta["activation"],
            use_centroids=meta["use_centroids"],
        )
        net.load_state_dict(load_file(str(path / PROTOTYPE_FILE)))
        self.model = PrimeModel(encoder, net)
        self.label_prototypes = np.load(path / PROTOTYPES_NPY)

    def parameter_counts(self) -> tuple[int, int]:
        if self.model is None:
            return 0, 0
        params = list(self.model.parameters())
        return sum(p.numel() for p in params), sum(p.numel() for p in params if p.requires_grad)


@torch.no_grad()
def prototypes_of(
    network: LabelPrototypeNetwork, label_emb: np.ndarray, device: str, precision: str, batch_size: int
) -> np.ndarray:
    """z_l of every label (eval mode, no dropout) from its text embeddings (L, d) -> (L, d) float32."""
    from xmcbench.train import autocast

    was_training = network.training
    network.eval()
    out = np.empty_like(label_emb, dtype=np.float32)
    for start in range(0, label_emb.shape[0], batch_size):
        ids = torch.arange(start, min(start + batch_size, label_emb.shape[0]), device=device)
        h = torch.from_numpy(np.ascontiguousarray(label_emb[start : start + batch_size])).to(device)
        with autocast(device, precision):
            out[start : start + ids.numel()] = network(h, ids).float().cpu().numpy()
    network.train(was_training)
    return out
