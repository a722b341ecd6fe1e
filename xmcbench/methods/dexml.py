"""DEXML: a dual encoder trained with the decoupled softmax (or SoftTop-k) loss.

Gupta et al., "Dual-Encoders for Extreme Multi-Label Classification", ICLR 2024 (dexml.txt).
One shared encoder Φ embeds queries and label texts; s(x, l) = <Φ(x), Φ(z_l)> / τ and

    L(x) = -(1/|P_x|) Σ_{p ∈ P_x} log( e^{s_xp} / (e^{s_xp} + Σ_{n ∉ P_x} e^{s_xn}) )      (Eq. 5)

(other positives are left out of each positive's denominator), or the SoftTop-k loss of Eq. 6.
Two regimes, as in the paper:

- ``all_negatives``: every label is in the loss at every step. Label embeddings come from the
  gradient cache (chunks of η labels embedded without a graph, loss, then a chunked backward),
  and with several processes (torchrun) labels are sharded over ranks, query embeddings
  all-gathered and the softmax sums all-reduced (Appendix B.5).
- ``hard_negatives``: the pool is the batch's sampled positives plus m negatives per query drawn
  from an exact top-100 shortlist refreshed every few epochs (Section 5.4, Table 3: P@1 grows with
  the pool). The paper follows ANCE (Xiong et al., 2021) and its released ``dist-de-hnm`` config
  uses random batches, so the hard-negative recipes set ``batching: random`` (clustered batches
  would add hard in-batch negatives Table 3 does not have). The paper does not say when mining
  starts; the released code waits ``hard_neg_start`` = 5 epochs (``hard_negative_start_epoch``,
  default 5), training on in-batch negatives only before that.

SoftTop-k (Eq. 6) divides each row's sum over its positives by the number of labels L
(``soft_top_k_variant: paper``, default). The released code, which produced the published
SoftTop-5 numbers, samples at most k positives per row per step and divides by the number
sampled (``soft_top_k_variant: released``). Both run on several processes (label shards, sums
all-reduced, Appendix B.5/B.7).

Gradient clipping: neither the paper nor the released optimiser clips (``training.grad_clip:
null``); the pre-clip gradient norm is recorded in the run's accounting.

Where the released code differs: it samples one positive per row per step (``one_positive``;
in the hard-negative regime the counted positive is the one placed in the pool), uses CLS
pooling (the recipes follow it, ``encoder.pooling: cls``, as the paper does not say), scales the learning rate by the GPU count
(``lr_scale_with_gpus``), drops the last label of every shard (not copied) and selects the model
on the test set (never: ``training.validation_fraction`` carves a validation split instead).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
import torch
from pydantic import Field, model_validator
from scipy import sparse

from xmcbench.errors import XmcbenchError
from xmcbench.methods import dual_encoder as de
from xmcbench.methods.base import RunContext, TrainTask

log = logging.getLogger(__name__)


class DexmlConfig(de.DualEncoderConfig):
    regime: Literal["all_negatives", "hard_negatives"] = "hard_negatives"
    loss: Literal["decoupled_softmax", "soft_top_k"] = "decoupled_softmax"
    temperature: float = Field(default=0.05, gt=0)  # τ (Table 7: 0.05 short text, 1 for the 500K/1.3M sets)
    dropout: float = Field(default=0.1, ge=0, lt=1)  # on the embeddings (Table 7)
    one_positive: bool = False  # released code: one sampled positive per row per step
    positives_per_query: int = Field(default=1, ge=1)  # β sampled into the pool (hard negatives)
    hard_negatives: int = Field(default=1, ge=0)  # m per query from the shortlist
    shortlist_k: int = Field(default=100, gt=0)
    refresh_every: int = Field(default=5, ge=1)  # epochs between shortlist refreshes
    hard_negative_start_epoch: int = Field(default=5, ge=0)  # released code: hard_neg_start = 5 (paper silent)
    soft_top_k: int = Field(default=5, ge=1)  # k of SoftTop-k
    # paper: Eq. 6, 1/L over every positive; released: ≤ k sampled positives, / number sampled
    soft_top_k_variant: Literal["paper", "released"] = "paper"
    alpha: float = Field(default=2.0, gt=0)  # steepness of SoftTop-k's sigmoid
    gradcache_chunk: int = Field(default=1024, gt=0)  # η: labels embedded per micro-batch
    # hard negatives: embed a pool larger than this through a gradient cache, this many labels a
    # chunk (same gradients, one more forward pass over the pool); None: the pool with one graph
    pool_chunk: int | None = Field(default=None, gt=0)
    lr_scale_with_gpus: bool = False

    @model_validator(mode="after")
    def _shortlist_holds_the_negatives(self) -> DexmlConfig:
        if self.regime == "hard_negatives" and 0 < self.shortlist_k < self.hard_negatives:
            # the rest would be uniform random labels, counted as hard negatives
            raise ValueError(
                f"shortlist_k ({self.shortlist_k}) must be at least hard_negatives ({self.hard_negatives}): "
                "the m negatives of a query are drawn from its shortlist"
            )
        return self


class DexmlMethod:
    name: ClassVar[str] = "dexml"
    Config: ClassVar[type[DexmlConfig]] = DexmlConfig
    requires_labels: ClassVar[bool] = True
    single_process: ClassVar[str | None] = None  # spans GPUs with torchrun (all-negatives training, Sec. 4)
    uses_encoder: ClassVar[bool] = True

    def __init__(self, config: DexmlConfig, recipe):
        self.config = config
        self.recipe = recipe
        self.encoder = None
        self.label_emb: np.ndarray | None = None  # (L, d) after fit

    # ------------------------------------------------------------------------------------------
    def fit(self, task: TrainTask, ctx: RunContext) -> None:
        from xmcbench.sampling import PoolAccounting, ShortlistSchedule
        from xmcbench.train import (
            build_optimizer,
            build_scheduler,
            get_rank,
            get_world_size,
            is_main,
            load_checkpoint,
            save_checkpoint,
        )

        c, t = self.config, self.recipe.training
        labels = task.train_labels
        world, rank = get_world_size(), get_rank()
        if c.loss == "soft_top_k" and c.soft_top_k >= labels.shape[1]:
            # every label is in the top k: the loss is 0 with no gradient at every step
            raise XmcbenchError(
                f"method.soft_top_k {c.soft_top_k:,} is not below the {labels.shape[1]:,} labels: SoftTop-k of k or "
                "fewer labels selects them all and gives no gradient; choose a smaller k (the paper's: 5)"
            )
        self._small_pool_said = False

        # 1. encoder, token caches, training rows (a validation split is carved out when asked)
        self.encoder = de.build_encoder(self.recipe, dropout=c.dropout).to(ctx.device)
        tokens = de.tokenise(self.encoder, task, self.recipe, ctx.progress)
        rows = de.labelled_rows(labels)
        rows, val_rows = de.split_validation(rows, t.validation_fraction, t.seed)

        # 2. optimiser, schedule, sampler
        # Across GPUs every batch must hold at least one query per rank: drop the ragged last one.
        sampler, schedule = de.make_sampler(c, rows.size, t.batch_size, t.seed, drop_last=world > 1, epochs=t.epochs)
        shortlist_k = c.shortlist_k
        if c.regime == "hard_negatives" and c.hard_negatives > 0 and c.hard_negative_start_epoch < t.epochs:
            shortlist_k = de.clip_shortlist("method.shortlist_k", c.shortlist_k, labels.shape[1])
            de.check_hard_negatives("method.hard_negatives", c.hard_negatives, labels[rows])
        lr = t.lr * (world if c.lr_scale_with_gpus else 1)
        optimizer = build_optimizer([(self.encoder.named_parameters(), lr)], t.weight_decay)
        total_steps = t.epochs * len(sampler)
        scheduler = build_scheduler(optimizer, max(total_steps, 1), t.warmup_ratio, t.schedule)
        shortlists = ShortlistSchedule(c.refresh_every, start_epoch=c.hard_negative_start_epoch)
        grad_norms: list[float] = []  # pre-clip gradient norm of every step, earlier attempts' included
        accounting = PoolAccounting()

        # 3. resume from the last complete epoch
        ckpt_dir = ctx.checkpoint_dir / "train"
        state = load_checkpoint(ckpt_dir, self.encoder, optimizer, scheduler)
        start_epoch, step = (state["epoch"], state["step"]) if state else (0, 0)
        extra = state["extra"] if state else {}
        if state:
            sampler.load_state_dict(state["sampler_state"])
            accounting.load_state_dict(extra.get("accounting", {}))
            grad_norms = [float(x) for x in extra.get("grad_norms", [])]
        shortlist = de.load_array(ctx.checkpoint_dir / "shortlist.npy") if c.regime == "hard_negatives" else None
        best = extra.get("best_val_p1", -1.0)
        positives_seen, queries_seen = extra.get("positives_seen", 0), extra.get("queries_seen", 0)

        # 4. epochs
        for epoch in range(start_epoch, t.epochs):
            need_shortlist = (
                c.regime == "hard_negatives"
                and c.hard_negatives > 0
                and (shortlists.due(epoch) or (shortlist is None and epoch >= c.hard_negative_start_epoch))
            )
            need_clusters = de.clustering_due(schedule, epoch, sampler)
            if need_shortlist or need_clusters:
                query_emb = de.encode_all(
                    self.encoder,
                    tokens.queries,
                    ctx.device,
                    ctx.precision,
                    c.encode_batch_size,
                    rows=rows,
                    progress=ctx.progress,
                    description=f"epoch {epoch}: encode queries",
                )  # (N, d)
                if need_clusters:
                    de.recluster(sampler, schedule, epoch, query_emb, t.seed, ctx.device)
                if need_shortlist:
                    label_emb = de.encode_all(
                        self.encoder,
                        tokens.labels,
                        ctx.device,
                        ctx.precision,
                        c.encode_batch_size,
                        progress=ctx.progress,
                        description=f"epoch {epoch}: encode labels",
                    )  # (L, d)
                    shortlist = _build_shortlist(query_emb, label_emb, labels[rows], shortlist_k, ctx)
            sampler.set_epoch(epoch)
            self.encoder.train()
            from xmcbench.progress import task as progress_task

            with progress_task(
                f"epoch {epoch + 1}/{t.epochs}", len(sampler) - sampler.consumed, enabled=ctx.progress and is_main()
            ) as advance:
                for batch in sampler:
                    batch_rows = rows[batch]  # (b,) training query ids
                    if c.regime == "all_negatives":
                        loss = self._all_negatives_step(batch_rows, labels, tokens, ctx, world, rank, epoch, step)
                        positives_seen += int(np.diff(labels.indptr)[batch_rows].sum())
                        queries_seen += batch_rows.size
                        ctx.record_pool(labels.shape[1])  # every label is in the loss (for the epoch line)
                    else:
                        loss, pool = self._hard_negative_step(
                            batch_rows, batch, labels, shortlist, tokens, ctx, epoch, step, world, rank
                        )
                        accounting.update(pool)
                        ctx.record_pool(pool.size)
                    # Each rank backpropagated its share (its queries, its label shard) of one global
                    # loss, so the gradients are summed over ranks (DEXML Appendix B.5).
                    grad_norms.append(_optimizer_step(self.encoder, optimizer, scheduler, t.grad_clip, world))
                    step += 1
                    advance(1)
            if val_rows.size and is_main():
                p1 = self._validation_p1(val_rows, labels, tokens, ctx)
                if p1 > best:
                    best = p1
                    _save_encoder_atomic(self.encoder, ctx.checkpoint_dir / "best")
            extra = {
                "accounting": accounting.state_dict(),
                "best_val_p1": best,
                "positives_seen": positives_seen,
                "queries_seen": queries_seen,
                # so a resumed run's recorded gradient norms cover all of training, not its last attempt
                "grad_norms": np.asarray(grad_norms, dtype=np.float64),
            }
            if need_shortlist and shortlist is not None and is_main():
                de.save_array(ctx.checkpoint_dir / "shortlist.npy", shortlist)
            save_checkpoint(
                ckpt_dir,
                epoch + 1,
                step,
                self.encoder,
                optimizer,
                scheduler,
                sampler_state=sampler.state_dict(),
                extra=extra,
            )
            ctx.log_epoch(
                epoch + 1, t.epochs, step=step, loss=locals().get("loss"), scheduler=scheduler, queries=len(rows)
            )

        # 5. the model to keep, and its label embeddings for prediction (rank 0 predicts)
        if not is_main():
            return
        if val_rows.size and (ctx.checkpoint_dir / "best").exists():
            self.encoder = de.build_encoder_from(ctx.checkpoint_dir / "best", self.recipe).to(ctx.device)
        self.label_emb = de.encode_all(
            self.encoder,
            tokens.labels,
            ctx.device,
            ctx.precision,
            c.encode_batch_size,
            progress=ctx.progress,
            description="encode labels",
        )
        # Totals come from the checkpointed counters, so a resumed run reports the whole training.
        ctx.accounting.update(
            batch_size=sampler.max_batch_size,  # global (all ranks), at most the training queries
            steps=step,
            world_size=world,
            validation_p1=best if val_rows.size else None,
            batching=c.batching,
            hard_negative_start_epoch=c.hard_negative_start_epoch if c.regime == "hard_negatives" else None,
            soft_top_k_variant=c.soft_top_k_variant if c.loss == "soft_top_k" else None,
            grad_clip=t.grad_clip,
            grad_norm_preclip_mean=float(np.mean(grad_norms)) if grad_norms else None,
            grad_norm_preclip_max=float(np.max(grad_norms)) if grad_norms else None,
        )
        if c.regime == "all_negatives":
            ctx.accounting.update(
                pool_size_mean=float(labels.shape[1]),
                pool_size_max=int(labels.shape[1]),
                positives_per_query=positives_seen / max(queries_seen, 1),
                hard_negatives_per_query=None,
                refresh_interval=None,
            )
        elif accounting.steps:
            summary = accounting.summary()
            ctx.accounting.update(
                pool_size_mean=summary["pool_size_mean"],
                pool_size_max=summary["pool_size_max"],
                positives_per_query=summary["positives_in_pool_per_query_mean"],
                hard_negatives_per_query=summary["hard_negatives_per_query_mean"],
                refresh_interval=c.refresh_every,
            )

    # ------------------------------------------------------------------------------------------
    def _scores_loss(self, scores: torch.Tensor, targets: torch.Tensor, counted: torch.Tensor | None):
        """SoftTop-k loss of (B, P) scores already divided by τ against (B, P) bool targets (one
        process; the decoupled softmax always goes through ``_sharded_loss``, in label blocks).

        ``counted``: with SoftTop-k's released variant, the ≤ k sampled positives that get a term.
        """
        from xmcbench.losses import soft_top_k_loss

        c = self.config
        if c.soft_top_k_variant == "released":
            return soft_top_k_loss(
                scores,
                targets,
                k=c.soft_top_k,
                alpha=c.alpha,
                counted=counted.to(scores.device),
                normalise="positives",
            )
        return soft_top_k_loss(scores, targets, k=c.soft_top_k, alpha=c.alpha)

    def _hard_negative_step(self, batch_rows, batch, labels, shortlist, tokens, ctx, epoch, step, world, rank):
        """Pool = sampled positives + m shortlist negatives per query (≈ B(1+m) labels); loss over the pool.

        Every rank draws the same global pool (the draws depend only on seed, epoch and step); with
        several ranks each embeds its share of the queries and of the pool, as in the all-negatives
        regime, so the loss is the same global loss whatever the GPU count.
        """
        from xmcbench.sampling import build_label_pool, sample_hard_negatives, sample_positives, step_rng
        from xmcbench.train import backward_chunks, shard_range

        c, seed = self.config, self.recipe.training.seed
        positives = sample_positives(
            labels, batch_rows, c.positives_per_query, step_rng(seed, epoch, step, "positives")
        )  # (B, β)
        negatives = None
        if c.hard_negatives > 0 and shortlist is not None and epoch >= c.hard_negative_start_epoch:
            negatives = sample_hard_negatives(
                shortlist[batch], labels[batch_rows], c.hard_negatives, step_rng(seed, epoch, step, "negatives")
            )  # (B, m)
        pool = build_label_pool(labels, batch_rows, positives, negatives)
        if c.loss == "soft_top_k" and pool.size <= c.soft_top_k and not self._small_pool_said:
            self._small_pool_said = True  # once a run: small batches (the last of an epoch) may do it every epoch
            log.warning(
                "epoch %d step %d: the pool holds %d labels, no more than method.soft_top_k = %d: SoftTop-k selects "
                "them all and gives the step no gradient (and any other step with a pool this small); lower "
                "method.soft_top_k or raise training.batch_size or method.hard_negatives",
                epoch,
                step,
                pool.size,
                c.soft_top_k,
            )
        # The counted positives are the sampled ones *in the pool*: one_positive counts the first
        # (it must be a pool column, else its row gets no term), SoftTop-k's released variant all β.
        counted_slots = None
        if c.loss == "soft_top_k" and c.soft_top_k_variant == "released":
            counted_slots = pool.positive_slots  # (B, β)
        elif c.one_positive:
            counted_slots = pool.positive_slots[:, :1]  # (B, 1)
        shard = shard_range(pool.size, rank, world)
        local_rows = np.array_split(batch_rows, world)[rank]
        label_fn = self._label_fn(tokens, ctx)
        q = self._embed_or_empty(tokens.queries, local_rows, ctx)  # (b_r, d)
        z, cached, chunks = self._pool_embeddings(label_fn, tokens, pool.labels[shard.start : shard.stop], ctx)
        # The decoupled softmax reads only the positive cells: its masks stay sparse.
        as_sparse = c.loss == "decoupled_softmax"
        counted = None if counted_slots is None else slots_mask(counted_slots, shard, as_sparse).to(ctx.device)
        in_shard = (pool.target_cols >= shard.start) & (pool.target_cols < shard.stop)
        targets = de.cell_mask(
            pool.target_rows[in_shard],
            pool.target_cols[in_shard] - shard.start,
            (pool.n_queries, len(shard)),
            ctx.device,
            as_sparse,
        )  # (B, P_r)
        if world == 1 and c.loss != "decoupled_softmax":
            scores = (q @ z.T) / c.temperature  # (B, P)
            loss = self._scores_loss(scores, targets, counted)
        else:  # the decoupled softmax works in label blocks: no (B, P) float matrix kept for backward
            loss = self._sharded_loss(q, z, targets, counted)
        loss.backward()
        if cached is not None:
            backward_chunks(label_fn, chunks, cached)
        return loss.detach(), pool

    def _label_fn(self, tokens, ctx):
        from xmcbench.train import autocast

        def label_fn(idx):
            with autocast(ctx.device, ctx.precision):
                return de.embed(self.encoder, tokens.labels, idx, ctx.device).float()  # (η, d)

        return label_fn

    def _pool_embeddings(self, label_fn, tokens, idx: np.ndarray, ctx):
        """(P_r, d) embeddings of the pool labels ``idx``: with one graph, or, when ``pool_chunk`` is set
        and the pool is larger, through a gradient cache in chunks of ``pool_chunk`` labels (the
        same gradients for one more forward pass over the pool; only one chunk's graph at a time).
        Returns (embeddings, the cache or None, the chunks)."""
        chunk = self.config.pool_chunk
        if chunk is None or idx.size <= chunk:
            return self._embed_or_empty(tokens.labels, idx, ctx), None, None
        from xmcbench.train import cached_embeddings

        chunks = [idx[s : s + chunk] for s in range(0, idx.size, chunk)]
        cached = cached_embeddings(label_fn, chunks)
        return cached.embeddings, cached, chunks

    def _sharded_loss(
        self,
        q_local: torch.Tensor,
        z_shard: torch.Tensor,
        targets_shard: torch.Tensor,
        counted_shard: torch.Tensor | None,
    ) -> torch.Tensor:
        """The loss of the global batch with labels sharded over ranks (Appendix B.5 / B.7).

        Backpropagating the returned value on every rank and summing the parameter gradients over
        ranks gives the gradient of the one global loss.
        """
        from xmcbench.losses import soft_top_k_loss
        from xmcbench.train.distributed import all_gather_with_grad, all_reduce_max, all_reduce_sum
        from xmcbench.train.sharded_decoupled_softmax import sharded_decoupled_softmax_loss

        c = self.config
        if c.loss == "decoupled_softmax":
            return sharded_decoupled_softmax_loss(
                q_local, z_shard, targets_shard, temperature=c.temperature, counted_shard=counted_shard
            )
        q_all = all_gather_with_grad(q_local)  # (B, d)
        with torch.autocast(q_all.device.type, enabled=False):  # bisection sums in fp32
            scores = (q_all.float() @ z_shard.float().T) / c.temperature  # (B, L_r)
            released = c.soft_top_k_variant == "released"
            # Row sums (threshold bisection, counts) combine over ranks; each rank's value is its share.
            share = soft_top_k_loss(
                scores,
                targets_shard.bool(),
                k=c.soft_top_k,
                alpha=c.alpha,
                sum_fn=lambda x: all_reduce_sum(x.detach()),
                max_fn=all_reduce_max,
                counted=counted_shard if released else None,
                normalise="positives" if released else "labels",
            )
        total = all_reduce_sum(share.detach())
        return share + (total - share).detach()  # the global value, this rank's gradient share

    def _embed_or_empty(self, cache, idx: np.ndarray, ctx) -> torch.Tensor:
        from xmcbench.train import autocast

        if idx.size == 0:
            return torch.zeros((0, self.encoder.dim), device=ctx.device)
        with autocast(ctx.device, ctx.precision):
            return de.embed(self.encoder, cache, idx, ctx.device).float()

    def _all_negatives_step(self, batch_rows, labels, tokens, ctx, world: int, rank: int, epoch: int, step: int):
        """Every label in the loss: gradient-cached label embeddings, sharded over ranks when world > 1."""
        from xmcbench.train import backward_chunks, cached_embeddings, shard_range

        c, seed = self.config, self.recipe.training.seed
        n_labels = labels.shape[1]
        shard = shard_range(n_labels, rank, world)
        chunks = [
            np.arange(s, min(s + c.gradcache_chunk, shard.stop))
            for s in range(shard.start, shard.stop, c.gradcache_chunk)
        ]

        label_fn = self._label_fn(tokens, ctx)
        local_rows = np.array_split(batch_rows, world)[rank]  # this rank's queries, in rank order
        q = self._embed_or_empty(tokens.queries, local_rows, ctx)  # (b_r, d)
        cached = cached_embeddings(label_fn, chunks) if chunks else None  # (L_r, d) leaf
        counted = None
        as_sparse = c.loss == "decoupled_softmax"  # it reads only the positive cells
        columns = np.arange(shard.start, shard.stop)
        if c.loss == "soft_top_k" and c.soft_top_k_variant == "released":
            counted = _sampled_positive_mask(
                labels, batch_rows, columns, c.soft_top_k, seed, epoch, step, "soft-top-k", as_sparse
            ).to(ctx.device)  # (B, L_r)
        elif c.one_positive:
            counted = _sampled_positive_mask(
                labels, batch_rows, columns, 1, seed, epoch, step, "one-positive", as_sparse
            ).to(ctx.device)  # (B, L_r)
        if world > 1 or c.loss == "decoupled_softmax":  # the sharded loss works in label blocks
            label_emb = cached.embeddings if cached else q.new_zeros((0, self.encoder.dim), requires_grad=True)
            targets = de.target_mask(labels, batch_rows, shard, ctx.device, as_sparse)  # (B, L_r)
            loss = self._sharded_loss(q, label_emb, targets, counted)
        else:
            scores = (q @ cached.embeddings.T) / c.temperature  # (B, L)
            targets = de.target_mask(labels, local_rows, None, ctx.device)  # (B, L)
            loss = self._scores_loss(scores, targets, counted)
        loss.backward()  # into the query graph and the cached label embeddings
        if cached is not None:
            backward_chunks(label_fn, chunks, cached)
        return loss.detach()

    @torch.no_grad()
    def _validation_p1(self, val_rows, labels, tokens, ctx) -> float:
        from xmcbench.metrics import evaluate
        from xmcbench.search.exact import exact_topk

        c = self.config
        label_emb = de.encode_all(self.encoder, tokens.labels, ctx.device, ctx.precision, c.encode_batch_size)
        query_emb = de.encode_all(
            self.encoder, tokens.queries, ctx.device, ctx.precision, c.encode_batch_size, rows=val_rows
        )
        pred = exact_topk(query_emb, label_emb, 1, device=ctx.device)
        return evaluate(pred, labels[val_rows], k=(1,), metrics=["P"])["P@1"]

    # ------------------------------------------------------------------------------------------
    def predict(self, texts: Sequence[str], k: int, ctx: RunContext) -> sparse.csr_matrix:
        assert self.encoder is not None and self.label_emb is not None, "fit or load first"
        return de.predict_topk(
            self.encoder, texts, self.label_emb, k, ctx, self.config.encode_batch_size, self.config.search_backend
        )

    def save(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.encoder.save(path / "encoder")
        np.save(path / "label_embeddings.npy", self.label_emb)

    def load(self, path: Path) -> None:
        self.encoder = de.build_encoder_from(path / "encoder", self.recipe)
        self.label_emb = np.load(path / "label_embeddings.npy")

    def parameter_counts(self) -> tuple[int, int]:
        if self.encoder is None:
            return 0, 0
        n = sum(p.numel() for p in self.encoder.parameters())
        return n, sum(p.numel() for p in self.encoder.parameters() if p.requires_grad)


# ----------------------------------------------------------------------------------------------
def slots_mask(slots: np.ndarray, columns: range, as_sparse: bool = False) -> torch.Tensor:
    """(B, |columns|) bool: True at each row's pool slots (-1 = none) that fall in ``columns``
    (``as_sparse``: a sparse COO tensor of those cells).

    Used for the counted positives of the hard-negative regime: they are pool columns by
    construction (``LabelPool.positive_slots``), so every row with a sampled positive counts one.
    """
    slots = np.asarray(slots, dtype=np.int64)
    rows, which = np.nonzero((slots >= columns.start) & (slots < columns.stop))
    return de.cell_mask(rows, slots[rows, which] - columns.start, (slots.shape[0], len(columns)), "cpu", as_sparse)


def _sampled_positive_mask(
    labels: sparse.csr_matrix,
    rows: np.ndarray,
    columns: np.ndarray,
    n: int,
    seed: int,
    epoch: int,
    step: int,
    stream: str,
    as_sparse: bool = False,
) -> torch.Tensor:
    """(B, |columns|) bool: ≤ n positives per row, drawn from the CSR, marked where they are columns
    (``as_sparse``: a sparse COO tensor of those cells).

    All-negatives regime only (every label is a column somewhere). The draw depends only on
    (seed, epoch, step, stream), so every rank draws the same positives and each rank marks
    those in its shard.
    """
    from xmcbench.sampling import sample_positives, step_rng

    chosen = sample_positives(labels, rows, n, step_rng(seed, epoch, step, stream))  # (B, n)
    at = np.searchsorted(columns, chosen)  # (B, n)
    hit = (chosen >= 0) & (at < columns.size)
    hit[hit] = columns[at[hit]] == chosen[hit]
    r, w = np.nonzero(hit)
    return de.cell_mask(r, at[r, w], (rows.size, columns.size), "cpu", as_sparse)


def _optimizer_step(encoder, optimizer, scheduler, grad_clip, world: int) -> float:
    """Sum gradients over ranks, clip when the recipe asks, step; returns the pre-clip global norm."""
    from xmcbench.train import all_reduce_gradients, clip_gradients

    params = [p for p in encoder.parameters() if p.requires_grad]
    if world > 1:
        all_reduce_gradients(params, op="sum")
    norm = float(clip_gradients(params, grad_clip))
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return norm


def _build_shortlist(
    query_emb: np.ndarray, label_emb: np.ndarray, positives: sparse.csr_matrix, k: int, ctx: RunContext
) -> np.ndarray:
    """Top-k *negative* shortlist (positives excluded), identical on every rank (rank 0's);
    ``k`` at most the label count (``dual_encoder.clip_shortlist``)."""
    from xmcbench.sampling import build_shortlist
    from xmcbench.train import get_world_size

    shortlist = build_shortlist(query_emb, label_emb, k, exclude=positives, device=ctx.device, progress=ctx.progress)
    if get_world_size() > 1:
        import torch.distributed as dist

        tensor = torch.from_numpy(np.ascontiguousarray(shortlist)).to(ctx.device)
        dist.broadcast(tensor, src=0)
        shortlist = tensor.cpu().numpy()
    return shortlist


def _save_encoder_atomic(encoder, folder: Path) -> None:
    from xmcbench.fsutil import install_dir, temp_path

    # Swapped in by rename: deleting the old folder first lost the best model to a kill in between.
    tmp = temp_path(folder)
    encoder.save(tmp)
    install_dir(tmp, folder)
