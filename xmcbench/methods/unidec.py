"""UniDEC: one encoder, a dual-encoder head and a classifier head, trained together with PSL.

Kharbanda et al., "Unified Dual Encoder and Classifier Training for Extreme Multi-label
Classification" (unidec.txt). A shared encoder Φ feeds two heads (Appendix C.1):

    Φ_D(x) = N(g1(Φ(x))),   g1 = Linear(d_Φ, d) + Tanh + Dropout(0.1)     (DE head, unit norm)
    Φ_C(x) = g2(Φ(x)),      g2 = Linear(d_Φ, d) + Dropout(0.1)            (CLF head, not normalised)

and a classifier table Ψ ∈ R^{L×d}. A batch Q_B samples ≤ β positives per query plus η hard
negatives from its shortlist H_i; the pool L_B is their union, and every pool label that is any
positive of a query is a target of that query (P_i^B = P_i ∩ L_B). Both heads score the same pool
and are trained with the pick-some-labels loss in both directions (Section 3.1-3.2, Algorithm 1):

    L_D = λ_D L_q2l(Φ_D(x), Φ_D(z)) + (1 − λ_D) L_l2q       L_C = the same with Φ_C(x) and Ψ
    L   = λ L_D + (1 − λ) L_C                                 (``xmcbench.losses.unidec_loss``)

Hard negatives: H_i = top-k of <Φ_D(x_i), Φ_D(z_l)> over all labels with H_i ∩ P_i = ∅,
refreshed every τ epochs, with |H| = η·τ so that the draws of one refresh interval can cover the
shortlist (Section 3.1). Batches (Section 2.1, Algorithm 1, Table 2): each batch is exactly one
cluster of Φ_D(x), |𝔅| clusters of N/|𝔅| queries built from the first epoch and rebuilt every τ
epochs (``batching: one_cluster_per_batch``, the default; ``clustered`` is NGAME's growing,
concatenated clusters, ``random`` plain batches). The pool may be capped (``max_pool_size``):
Table 2 reports |L_B| as a setting below the union's size (``sampling.cap_pool_negatives``).
The accounting reports the uncapped and capped pool size and the mean |P_i^B| per step, to
compare with Table 2 (|L_B|) and Tables 6/7 (Avg |P_i^B|).

Inference (Section 3.3, Table 5), exact search over all labels with ``inference``:
``concat`` (default) queries [Φ_D(x) ⊕ N(Φ_C(x))] against [Φ_D(z_l) ⊕ N(Ψ_l)]; ``de`` uses
Φ_D only; ``clf`` uses N(Φ_C(x)) against N(Ψ_l).

Learning rates (Section 4): encoder 1e-4 (``training.lr``), heads 2e-4 (``head_lr``),
classifiers 1e-3 (``classifier_lr``).

Choices the paper leaves open, made here and documented:

- Ψ is an ``nn.Embedding(sparse=True)`` updated by ``torch.optim.SparseAdam``: a step reads and
  writes only the rows of its pool (lazy Adam moments), so 1.3M × 384 classifiers cost one
  table plus its two moment tables, and rows that were in no pool never change. Consequences:
  no weight decay and no gradient clipping on Ψ (both would touch every row every step); the
  encoder and heads use AdamW with the recipe's decay and clipping. All groups follow the
  recipe's warm-up/decay schedule.
- The temperature τ is not reported; ``temperature`` (default 0.05) scales both heads' scores,
  also the classifier head's unnormalised <Φ_C(x), Ψ_l>.
- Ψ's initialisation is not reported: rows are drawn from N(0, 1/d) (unit expected norm).
- These, β / η where a dataset's are not reported, and how the pool is capped are listed in
  the run record's accounting under ``not_reported`` (recipes mark them too).
- ``recipe.encoder.normalize`` does not apply: the heads fix which side is normalised.
- The shortlist and inference use exact search where the paper uses an ANNS. The PSL terms are
  sums over the batch's queries (labels) as the paper writes them (``psl_reduction: sum``,
  default); ``mean`` averages each direction instead (equal q2l / l2q weight, an xmcbench
  option, see ``xmcbench.losses.psl``).
- One process only (the paper trains on one GPU); model selection on a validation split is
  available through ``training.validation_fraction`` (the test split is never looked at).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
import torch
from pydantic import Field, model_validator
from scipy import sparse
from torch import nn

from xmcbench.errors import XmcbenchError
from xmcbench.methods import dual_encoder as de
from xmcbench.methods.base import RunContext, TrainTask

InferenceMode = Literal["concat", "de", "clf"]
FORMAT_VERSION = 1


class UnidecConfig(de.DualEncoderConfig):
    # Section 2.1 / Algorithm 1: one cluster of N/|𝔅| queries is one batch, from epoch 0.
    batching: Literal["random", "clustered", "one_cluster_per_batch"] = "one_cluster_per_batch"
    psl_reduction: Literal["sum", "mean"] = "sum"  # sum: Section 3.1's Σ_i, Σ_l (paper); mean: xmcbench
    max_pool_size: int | None = Field(default=None, gt=0)  # cap on |L_B| (Table 2); None: the whole union
    dim: int = Field(default=384, gt=0)  # d of each head (paper: 256-384; concat searches 2d)
    head_dropout: float = Field(default=0.1, ge=0, lt=1)  # Dropout(0.1) in g1 and g2 (Appendix C.1)
    temperature: float = Field(default=0.05, gt=0)  # τ of both heads' scores (not reported in the paper)
    lambda_de: float = Field(default=0.5, ge=0, le=1)  # λ: L = λ L_D + (1 − λ) L_C (paper: 0.5 or 0.3)
    lambda_de_q2l: float = Field(default=0.5, ge=0, le=1)  # λ_D: q2l weight inside L_D (paper: 0.5)
    lambda_clf_q2l: float = Field(default=0.5, ge=0, le=1)  # λ_C: q2l weight inside L_C (paper: 0.5)
    positives_per_query: int = Field(default=3, ge=1)  # β: positives sampled per query (paper: 1-3)
    hard_negatives: int = Field(default=6, ge=0)  # η per query from the shortlist (paper: 3-6; 0 = none)
    refresh_every: int = Field(default=5, ge=1)  # τ: epochs between shortlist refreshes (paper: 5)
    shortlist_k: int | None = Field(default=None, gt=0)  # |H|; None: η·τ as in the paper
    head_lr: float = Field(default=2e-4, gt=0)  # g1, g2 (Section 4)
    classifier_lr: float = Field(default=1e-3, gt=0)  # Ψ, SparseAdam (Section 4)
    inference: InferenceMode = "concat"

    @model_validator(mode="after")
    def _shortlist_holds_eta(self) -> UnidecConfig:
        if self.shortlist_k is not None and self.shortlist_k < self.hard_negatives:
            raise ValueError(
                f"shortlist_k ({self.shortlist_k}) must be at least hard_negatives "
                f"({self.hard_negatives}): η negatives are drawn from it per query"
            )
        return self

    @property
    def shortlist_size(self) -> int:
        """|H| = η·τ (Section 3.1) unless set explicitly."""
        return self.shortlist_k if self.shortlist_k is not None else self.hard_negatives * self.refresh_every


class UnidecModel(nn.Module):
    """Φ (shared encoder) with the DE head g1, the CLF head g2 and the classifier table Ψ."""

    def __init__(self, encoder: nn.Module, dim: int, n_labels: int, head_dropout: float = 0.1):
        super().__init__()
        hidden = encoder.dim
        self.encoder = encoder
        self.de_head = nn.Sequential(nn.Linear(hidden, dim), nn.Tanh(), nn.Dropout(head_dropout))  # g1
        self.clf_head = nn.Sequential(nn.Linear(hidden, dim), nn.Dropout(head_dropout))  # g2
        self.classifiers = nn.Embedding(n_labels, dim, sparse=True)  # Ψ: sparse rows, SparseAdam
        nn.init.normal_(self.classifiers.weight, std=1.0 / math.sqrt(dim))

    @property
    def dim(self) -> int:
        return int(self.classifiers.embedding_dim)

    def de(self, phi: torch.Tensor) -> torch.Tensor:
        """Φ_D = N(g1(Φ)): (b, d_Φ) -> (b, d), unit rows."""
        return nn.functional.normalize(self.de_head(phi), dim=-1)

    def clf(self, phi: torch.Tensor) -> torch.Tensor:
        """Φ_C = g2(Φ): (b, d_Φ) -> (b, d), not normalised (training scores)."""
        return self.clf_head(phi)

    def represent(self, phi: torch.Tensor, mode: InferenceMode) -> torch.Tensor:
        """Search-side query vectors: Φ_D, N(Φ_C), or [Φ_D ⊕ N(Φ_C)] (Section 3.3)."""
        parts = []
        if mode in ("de", "concat"):
            parts.append(self.de(phi))
        if mode in ("clf", "concat"):
            parts.append(nn.functional.normalize(self.clf(phi), dim=-1))
        return torch.cat(parts, dim=-1)

    def normalised_classifiers(self) -> torch.Tensor:
        """N(Ψ): (L, d) unit rows, the classifier side of the search."""
        return nn.functional.normalize(self.classifiers.weight.detach(), dim=-1)


class _View(nn.Module):
    """A UniDEC representation as an encoder-like module, so ``dual_encoder.encode_all`` can run it."""

    def __init__(self, model: UnidecModel, mode: InferenceMode):
        super().__init__()
        self.model = model
        self.mode = mode
        self.train(model.training)  # encode_all restores this flag: it must be the model's

    @property
    def dim(self) -> int:
        return self.model.dim * (2 if self.mode == "concat" else 1)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model.represent(self.model.encoder(input_ids, attention_mask), self.mode)


class _Joint:
    """Several optimisers (or schedulers) stepped, zeroed and checkpointed as one."""

    def __init__(self, parts: Sequence):
        self.parts = list(parts)

    def step(self) -> None:
        for part in self.parts:
            part.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for part in self.parts:
            part.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> list:
        return [part.state_dict() for part in self.parts]

    def load_state_dict(self, state: list) -> None:
        if not isinstance(state, list) or len(state) != len(self.parts):
            raise ValueError(f"expected {len(self.parts)} optimiser states, got {type(state).__name__}")
        for part, s in zip(self.parts, state):
            part.load_state_dict(s)


class UnidecMethod:
    name: ClassVar[str] = "unidec"
    Config: ClassVar[type[UnidecConfig]] = UnidecConfig
    requires_labels: ClassVar[bool] = True
    single_process: ClassVar[str | None] = "the paper trains UniDEC on a single NVIDIA A6000 GPU (Sec. 1, Fig. 1)"
    uses_encoder: ClassVar[bool] = True

    def __init__(self, config: UnidecConfig, recipe):
        self.config = config
        self.recipe = recipe
        self.model: UnidecModel | None = None
        self.label_de: np.ndarray | None = None  # (L, d) Φ_D(z_l) after fit
        self.label_clf: np.ndarray | None = None  # (L, d) N(Ψ_l) after fit
        self._uncapped_pool_sum = 0  # Σ over steps of |∪ sampled labels| before max_pool_size
        self._clip_warned: set[str] = set()  # recipe keys already said to be clipped this run
        self._shortlist_k: int | None = None  # |H| used: the recipe's, at most the label count
        self._grad_norms: list[float] = []  # pre-clip global gradient norm of every step (checkpointed)

    # ------------------------------------------------------------------------------------------
    def fit(self, task: TrainTask, ctx: RunContext) -> None:
        from xmcbench.progress import task as progress_task
        from xmcbench.sampling import PoolAccounting, ShortlistSchedule
        from xmcbench.train import get_world_size, load_checkpoint, save_checkpoint

        c, t = self.config, self.recipe.training
        labels = task.train_labels
        if get_world_size() > 1:
            raise XmcbenchError("UniDEC trains in one process (the paper uses one GPU); set hardware.num_gpus: 1")

        # 1. encoder + heads + Ψ, token caches, training rows (a validation split when asked)
        self.model = self.build_model(task.n_labels).to(ctx.device)
        tokens = de.tokenise(self.model.encoder, task, self.recipe, ctx.progress)
        rows = de.labelled_rows(labels)
        rows, val_rows = de.split_validation(rows, t.validation_fraction, t.seed)

        # 2. optimisers (AdamW: encoder, heads; SparseAdam: Ψ), schedules, sampler
        sampler, schedule = de.make_sampler(c, rows.size, t.batch_size, t.seed, epochs=t.epochs)
        self._clip_warned = set()
        self._shortlist_k = c.shortlist_size
        if c.hard_negatives > 0 and t.epochs > 0:
            self._shortlist_k = min(c.shortlist_size, task.n_labels)
            if c.shortlist_size > task.n_labels:
                asked = c.shortlist_k or f"(unset: η·τ = {c.hard_negatives}·{c.refresh_every} = {c.shortlist_size:,})"
                de.warn_clipped(
                    "method.shortlist_k", asked, task.n_labels, f"is more than the {task.n_labels:,} labels"
                )
            de.check_hard_negatives("method.hard_negatives", c.hard_negatives, labels[rows])
        optimizer, scheduler = self.build_optimizers(max(t.epochs * len(sampler), 1))
        shortlists = ShortlistSchedule(c.refresh_every)
        accounting = PoolAccounting()

        # 3. resume from the last complete epoch
        ckpt_dir = ctx.checkpoint_dir / "train"
        state = load_checkpoint(ckpt_dir, self.model, optimizer, scheduler)
        start_epoch, step = (state["epoch"], state["step"]) if state else (0, 0)
        extra = state["extra"] if state else {}
        if state:
            sampler.load_state_dict(state["sampler_state"])
            accounting.load_state_dict(extra.get("accounting", {}))
            self._uncapped_pool_sum = int(extra.get("uncapped_pool_sum", 0))
            self._grad_norms = [float(x) for x in extra.get("grad_norms", [])]
        shortlist = de.load_array(ctx.checkpoint_dir / "shortlist.npy") if c.hard_negatives > 0 else None
        best = extra.get("best_val_p1", -1.0)

        # 4. epochs: clusters of Φ_D(x) and the shortlist H every τ epochs, then PSL steps
        loss = None  # the last step's, for the epoch log line (an epoch resumed at its end has none)
        for epoch in range(start_epoch, t.epochs):
            need_shortlist = c.hard_negatives > 0 and (shortlists.due(epoch) or shortlist is None)
            need_clusters = de.clustering_due(schedule, epoch, sampler)
            if need_shortlist or need_clusters:
                query_emb = de.encode_all(
                    _View(self.model, "de"),
                    tokens.queries,
                    ctx.device,
                    ctx.precision,
                    c.encode_batch_size,
                    rows=rows,
                    progress=ctx.progress,
                    description=f"epoch {epoch}: encode queries",
                )  # (N, d) Φ_D(x)
                if need_clusters:
                    de.recluster(sampler, schedule, epoch, query_emb, t.seed, ctx.device)
                if need_shortlist:
                    shortlist = self.build_hard_negative_shortlist(query_emb, tokens, labels[rows], ctx, epoch)
            sampler.set_epoch(epoch)
            self.model.train()
            with progress_task(
                f"epoch {epoch + 1}/{t.epochs}", len(sampler) - sampler.consumed, enabled=ctx.progress
            ) as advance:
                for batch in sampler:
                    batch_rows = rows[batch]  # (b,) training query ids
                    pool = self.sample_pool(
                        labels, batch_rows, None if shortlist is None else shortlist[batch], epoch, step
                    )
                    loss = self.train_step(batch_rows, pool, tokens, ctx, optimizer, scheduler)
                    accounting.update(pool)
                    ctx.record_pool(pool.size)
                    step += 1
                    advance(1)
            if val_rows.size:
                p1 = self._validation_p1(val_rows, labels, tokens, ctx)
                if p1 > best:
                    best = p1
                    _save_model_state(self.model, ctx.checkpoint_dir / "best.safetensors")
            extra = {
                "accounting": accounting.state_dict(),
                "best_val_p1": best,
                "uncapped_pool_sum": self._uncapped_pool_sum,
                # so a resumed run's recorded gradient norms cover all of training, not its last attempt
                "grad_norms": np.asarray(self._grad_norms, dtype=np.float64),
            }
            if need_shortlist:
                de.save_array(ctx.checkpoint_dir / "shortlist.npy", shortlist)
            save_checkpoint(
                ckpt_dir,
                epoch + 1,
                step,
                self.model,
                optimizer,
                scheduler,
                sampler_state=sampler.state_dict(),
                extra=extra,
            )
            ctx.log_epoch(epoch + 1, t.epochs, step=step, loss=loss, scheduler=scheduler, queries=len(rows))

        # 5. the model to keep, and its label representations for search
        if val_rows.size and (ctx.checkpoint_dir / "best.safetensors").exists():
            _load_model_state(self.model, ctx.checkpoint_dir / "best.safetensors")
        self.label_de, self.label_clf = self._label_representations(tokens, ctx)
        summary = accounting.summary() if accounting.steps else {}
        if summary:  # the checkpointed totals cover every step, also those before a resume
            ctx.accounting.update(
                steps=summary["steps"], pool_size_mean=summary["pool_size_mean"], pool_size_max=summary["pool_size_max"]
            )
        ctx.accounting.update(
            batch_size=sampler.max_batch_size,  # one cluster per batch: ⌈N/|𝔅|⌉, the largest batch
            positives_per_query=summary.get("positives_in_pool_per_query_mean"),
            sampled_positives_per_query=summary.get("sampled_positives_per_query_mean"),
            hard_negatives_per_query=summary.get("hard_negatives_per_query_mean", float(c.hard_negatives)),
            refresh_interval=c.refresh_every if c.hard_negatives > 0 else None,
            shortlist_size=self._shortlist_k if c.hard_negatives > 0 else None,
            inference=c.inference,
            validation_p1=best if val_rows.size else None,
            batching=c.batching,
            batches_per_epoch=len(sampler),
            # Table 2's |L_B| and Tables 6/7's Avg |P_i^B|, to compare (mean over steps / queries)
            pool_size_uncapped_mean=self._uncapped_pool_sum / max(accounting.steps, 1),
            max_pool_size=c.max_pool_size,
            positives_in_pool_per_query_mean=summary.get("positives_in_pool_per_query_mean"),
            psl_reduction=c.psl_reduction,
            grad_clip=t.grad_clip,
            grad_norm_preclip_mean=float(np.mean(self._grad_norms)) if self._grad_norms else None,
            grad_norm_preclip_max=float(np.max(self._grad_norms)) if self._grad_norms else None,
            not_reported={  # choices the paper leaves open (values used in this run)
                "temperature": c.temperature,
                "classifier_init": "N(0, 1/d) rows",
                "pool_cap": "sampled positives kept, uniform subset of negative-only labels",
                "encoder_pooling": self.recipe.encoder.pooling,
            },
        )

    # -- setup ---------------------------------------------------------------------------------
    def build_model(self, n_labels: int) -> UnidecModel:
        """Pre-trained encoder (un-normalised pooled output) + fresh heads and Ψ."""
        encoder = de.build_encoder(self.recipe, normalize=False)
        return UnidecModel(encoder, self.config.dim, n_labels, self.config.head_dropout)

    def build_optimizers(self, total_steps: int) -> tuple[_Joint, _Joint]:
        """AdamW over encoder (training.lr) and heads (head_lr); SparseAdam over Ψ (classifier_lr)."""
        from xmcbench.train import build_optimizer, build_scheduler

        c, t, m = self.config, self.recipe.training, self.model
        heads = [(f"de_head.{n}", p) for n, p in m.de_head.named_parameters()]
        heads += [(f"clf_head.{n}", p) for n, p in m.clf_head.named_parameters()]
        dense = build_optimizer([(m.encoder.named_parameters(), t.lr), (heads, c.head_lr)], t.weight_decay)
        rows = torch.optim.SparseAdam([m.classifiers.weight], lr=c.classifier_lr)
        schedulers = [build_scheduler(opt, total_steps, t.warmup_ratio, t.schedule) for opt in (dense, rows)]
        return _Joint([dense, rows]), _Joint(schedulers)

    def build_hard_negative_shortlist(
        self, query_emb: np.ndarray, tokens, positives: sparse.csr_matrix, ctx: RunContext, epoch: int = 0
    ) -> np.ndarray:
        """H: (N, η·τ) top labels of <Φ_D(x_i), Φ_D(z_l)> that are not positives of x_i."""
        from xmcbench.sampling import build_shortlist

        c = self.config
        label_emb = de.encode_all(
            _View(self.model, "de"),
            tokens.labels,
            ctx.device,
            ctx.precision,
            c.encode_batch_size,
            progress=ctx.progress,
            description=f"epoch {epoch}: encode labels",
        )  # (L, d)
        k = min(self._shortlist_k or c.shortlist_size, label_emb.shape[0])  # fit said so when it clips
        return build_shortlist(query_emb, label_emb, k, exclude=positives, device=ctx.device, progress=ctx.progress)

    # -- one step ------------------------------------------------------------------------------
    def sample_pool(
        self,
        labels: sparse.csr_matrix,
        batch_rows: np.ndarray,
        shortlist_rows: np.ndarray | None,
        epoch: int,
        step: int,
    ):
        """L_B = ∪_i P̂_i ∪ Ĥ_i: β sampled positives and η shortlist negatives per query."""
        from xmcbench.sampling import (
            build_label_pool,
            cap_pool_negatives,
            sample_hard_negatives,
            sample_positives,
            step_rng,
        )

        c, seed = self.config, self.recipe.training.seed
        positives = sample_positives(
            labels, batch_rows, c.positives_per_query, step_rng(seed, epoch, step, "positives")
        )  # (b, β)
        negatives = None
        uncapped = None
        if c.max_pool_size is not None:
            n_positive = int(np.unique(positives[positives >= 0]).size)
            if n_positive > c.max_pool_size:  # cap_pool_negatives keeps every sampled positive
                de.warn_clipped(
                    "method.max_pool_size",
                    c.max_pool_size,
                    f"pools of up to every sampled positive ({n_positive:,} at step {step + 1:,})",
                    f"is less than the {n_positive:,} distinct positives sampled for a batch",
                    seen=self._clip_warned,
                )
        if c.hard_negatives > 0 and shortlist_rows is not None:
            negatives = sample_hard_negatives(
                shortlist_rows, labels[batch_rows], c.hard_negatives, step_rng(seed, epoch, step, "negatives")
            )  # (b, η)
            negatives, uncapped = cap_pool_negatives(
                positives, negatives, c.max_pool_size, step_rng(seed, epoch, step, "pool-cap")
            )
        pool = build_label_pool(labels, batch_rows, positives, negatives)
        self._uncapped_pool_sum += pool.size if uncapped is None else uncapped
        return pool

    def pool_loss(self, batch_rows: np.ndarray, pool, tokens, ctx: RunContext) -> torch.Tensor:
        """L = λ L_D + (1 − λ) L_C of the batch's queries against its pool (Algorithm 1)."""
        from xmcbench.losses import unidec_loss
        from xmcbench.train import autocast

        c, m = self.config, self.model
        pool_t = pool.tensors(ctx.device)  # labels (P,), targets (b, P)
        with autocast(ctx.device, ctx.precision):
            phi_q = de.embed(m.encoder, tokens.queries, batch_rows, ctx.device)  # (b, d_Φ)
            phi_z = de.embed(m.encoder, tokens.labels, pool.labels, ctx.device)  # (P, d_Φ)
            q_de, q_clf, z_de = m.de(phi_q), m.clf(phi_q), m.de(phi_z)  # (b, d), (b, d), (P, d)
        psi = m.classifiers(pool_t["labels"])  # (P, d): only these rows get a (sparse) gradient
        de_scores = (q_de.float() @ z_de.float().T) / c.temperature  # (b, P)
        clf_scores = (q_clf.float() @ psi.float().T) / c.temperature  # (b, P)
        return unidec_loss(
            de_scores,
            clf_scores,
            pool_t["targets"],
            lambda_=c.lambda_de,
            lambda_d=c.lambda_de_q2l,
            lambda_c=c.lambda_clf_q2l,
            reduction=c.psl_reduction,
        )

    def train_step(
        self, batch_rows: np.ndarray, pool, tokens, ctx: RunContext, optimizer: _Joint, scheduler: _Joint
    ) -> torch.Tensor:
        """Loss, backward, one update of Φ, g1, g2 and the pool's rows of Ψ."""
        from xmcbench.train import clip_gradients

        loss = self.pool_loss(batch_rows, pool, tokens, ctx)
        loss.backward()
        m = self.model
        dense = [p for module in (m.encoder, m.de_head, m.clf_head) for p in module.parameters() if p.requires_grad]
        # The paper does not clip (training.grad_clip: null); the pre-clip norm is recorded either way.
        self._grad_norms.append(float(clip_gradients(dense, self.recipe.training.grad_clip)))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    # -- representations -----------------------------------------------------------------------
    def _label_representations(self, tokens, ctx: RunContext) -> tuple[np.ndarray, np.ndarray]:
        label_de = de.encode_all(
            _View(self.model, "de"),
            tokens.labels,
            ctx.device,
            ctx.precision,
            self.config.encode_batch_size,
            progress=ctx.progress,
            description="encode labels",
        )  # (L, d) Φ_D(z)
        label_clf = self.model.normalised_classifiers().float().cpu().numpy()  # (L, d) N(Ψ)
        return label_de, label_clf

    def label_keys(self, mode: InferenceMode | None = None) -> np.ndarray:
        """Search keys of every label: Φ_D(z), N(Ψ), or [Φ_D(z) ⊕ N(Ψ)]."""
        mode = mode or self.config.inference
        if mode == "de":
            return self.label_de
        if mode == "clf":
            return self.label_clf
        return np.hstack([self.label_de, self.label_clf])

    @torch.no_grad()
    def encode_queries(self, texts: Sequence[str], ctx: RunContext, mode: InferenceMode | None = None) -> np.ndarray:
        """Search vectors of raw query texts -> (N, d or 2d) float32, length-sorted batches."""
        from xmcbench.progress import task as progress_task
        from xmcbench.train import autocast

        mode = mode or self.config.inference
        model, texts = self.model, list(texts)
        was_training = model.training
        model.eval()
        model.to(ctx.device)
        view = _View(model, mode)
        order = np.argsort([len(text) for text in texts], kind="stable")
        out = np.empty((len(texts), view.dim), dtype=np.float32)
        size = self.config.encode_batch_size
        with progress_task("encode queries", len(texts), enabled=ctx.progress) as advance:
            for start in range(0, len(texts), size):
                idx = order[start : start + size]
                batch = model.encoder.tokenize([texts[i] for i in idx])
                with autocast(ctx.device, ctx.precision):
                    emb = view(batch["input_ids"].to(ctx.device), batch["attention_mask"].to(ctx.device))
                out[idx] = emb.float().cpu().numpy()
                advance(idx.size)
        model.train(was_training)
        return out

    @torch.no_grad()
    def _validation_p1(self, val_rows, labels, tokens, ctx: RunContext) -> float:
        from xmcbench.metrics import evaluate
        from xmcbench.search.exact import exact_topk

        c = self.config
        self.label_de, self.label_clf = self._label_representations(tokens, ctx)
        queries = de.encode_all(
            _View(self.model, c.inference),
            tokens.queries,
            ctx.device,
            ctx.precision,
            c.encode_batch_size,
            rows=val_rows,
        )
        pred = exact_topk(queries, self.label_keys(), 1, device=ctx.device)
        return evaluate(pred, labels[val_rows], k=(1,), metrics=["P"])["P@1"]

    # ------------------------------------------------------------------------------------------
    def predict(
        self, texts: Sequence[str], k: int, ctx: RunContext, inference: InferenceMode | None = None
    ) -> sparse.csr_matrix:
        """Exact top-k over all labels; ``inference`` overrides the configured mode."""
        from xmcbench.search.exact import exact_topk

        if self.model is None or self.label_de is None or self.label_clf is None:
            raise XmcbenchError("UniDEC has no model yet: fit or load it first")
        mode = inference or self.config.inference
        queries = self.encode_queries(texts, ctx, mode)  # (N, d or 2d)
        return exact_topk(queries, self.label_keys(mode), k, device=ctx.device, backend=self.config.search_backend)

    def save(self, path: Path) -> None:
        """encoder/ (sentence-transformers folder), heads.safetensors (g1, g2, Ψ), label_*.npy, unidec.json."""
        from safetensors.torch import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        m = self.model
        m.encoder.save(path / "encoder")
        state = {f"de_head.{k}": v for k, v in m.de_head.state_dict().items()}
        state |= {f"clf_head.{k}": v for k, v in m.clf_head.state_dict().items()}
        state["classifiers.weight"] = m.classifiers.weight
        tmp = path / ".heads.tmp.safetensors"
        save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, str(tmp))
        tmp.replace(path / "heads.safetensors")
        de.save_array(path / "label_de.npy", self.label_de)
        de.save_array(path / "label_clf.npy", self.label_clf)
        meta = {
            "format": FORMAT_VERSION,
            "dim": m.dim,
            "n_labels": int(m.classifiers.num_embeddings),
            "head_dropout": self.config.head_dropout,
        }
        (path / "unidec.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")

    def load(self, path: Path) -> None:
        from safetensors.torch import load_file

        from xmcbench.encoders import TextEncoder

        path = Path(path)
        meta_file = path / "unidec.json"
        if not meta_file.is_file():
            raise XmcbenchError(f"{meta_file}: missing; {path} is not a saved UniDEC model (save writes it)")
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        if meta.get("format") != FORMAT_VERSION:
            raise XmcbenchError(f"{meta_file}: format {meta.get('format')} is not {FORMAT_VERSION}; retrain the model")
        e = self.recipe.encoder
        encoder = TextEncoder(str(path / "encoder"), pooling=e.pooling, normalize=False, max_length=e.max_length)
        model = UnidecModel(encoder, int(meta["dim"]), int(meta["n_labels"]), float(meta["head_dropout"]))
        state = load_file(str(path / "heads.safetensors"))
        try:
            model.de_head.load_state_dict(
                {k.removeprefix("de_head."): v for k, v in state.items() if k.startswith("de_head.")}
            )
            model.clf_head.load_state_dict(
                {k.removeprefix("clf_head."): v for k, v in state.items() if k.startswith("clf_head.")}
            )
            model.classifiers.weight.data.copy_(state["classifiers.weight"])
        except (RuntimeError, KeyError) as exc:
            raise XmcbenchError(
                f"{path / 'heads.safetensors'}: does not fit {meta_file} "
                f"({str(exc).splitlines()[0]}); save the model again"
            ) from None
        self.model = model.eval()
        self.label_de = np.load(path / "label_de.npy")
        self.label_clf = np.load(path / "label_clf.npy")
        n = int(meta["n_labels"])
        if self.label_de.shape[0] != n or self.label_clf.shape[0] != n:
            raise XmcbenchError(
                f"{path}: label representations have {self.label_de.shape[0]} / "
                f"{self.label_clf.shape[0]} rows but the model has {n} labels; save the model again"
            )

    def parameter_counts(self) -> tuple[int, int]:
        if self.model is None:
            return 0, 0
        n = sum(p.numel() for p in self.model.parameters())
        return n, sum(p.numel() for p in self.model.parameters() if p.requires_grad)


# ----------------------------------------------------------------------------------------------
def _save_model_state(model: nn.Module, path: Path) -> None:
    from safetensors.torch import save_model

    tmp = path.with_name(f".{path.name}.tmp")
    save_model(model, str(tmp))
    tmp.replace(path)


def _load_model_state(model: nn.Module, path: Path) -> None:
    from safetensors.torch import load_model

    load_model(model, str(path), strict=True, device=str(next(model.parameters()).device))
