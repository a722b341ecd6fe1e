"""MACLR (Xiong et al., "Extreme Zero-Shot Learning for Extreme Text Classification", NAACL 2022).

A shared-weight encoder E trained without a single (instance, label) pair, then optionally
fine-tuned on a few:

- Stage I (Sec. 4.2): Inverse Cloze Task pairs (context = instance text without its title,
  pseudo-label = the title). For the first half of the steps, K-means of the context embeddings
  makes same-cluster pairs positives (SupCon, Eq. 2) with K = K0 doubling every T_K steps and
  assignments refreshed every T_update steps; afterwards every instance is its own cluster
  (Eq. 1). Label regularisation (Eq. 3) pushes each context away from M random label texts,
  with its own dropout view as the positive. L = L_cluster + L_label.
- Stage II (Sec. 4.3): pseudo pairs from the top-k labels of the Stage-I encoder and of TF-IDF
  (unigram + bigram, max_df 0.98), mixed, trained with Eq. 2.
- Few-shot (Sec. 4.4, FS-XMC): fine-tune on the visible pairs with Eq. 1.

Switches reproduce the ablations of Table 4 (``clustering``, ``label_regularisation``,
``self_training``); ``clustering: false, label_regularisation: false, self_training: false``
is the "ICT" baseline of Table 1.

Where the authors' code (amzn/pecos ``examples/MACLR``) differs from the paper, the paper is
implemented; the differences, none of them a switch here: the ICT context is the body with the
title's exact string deleted from each sentence with probability 0.9 (``dataset.py``), not only
the leading title; Eq. 3's positives are the dropout views of every same-cluster instance and its
negatives include the other instances' views (``loss.py``), not only the instance's own view and M
labels; M is 4 label texts per GPU gathered over 8 GPUs; Stage II keeps the TF-IDF top 1 and the
encoder's top 1 when its score exceeds 36 (``dataset.py``), not the top 3 of App. A; the
TF-IDF pseudo-pair script is missing (pecos issue 206).

Regime: with ``supervision: zero_shot`` the runner hands ``fit`` no label array at all; with
``few_shot`` the pre-training still uses only raw texts and the fine-tuning sees the sampled
labels' pairs alone. A resumed run restarts ``fit`` from the beginning (no per-step checkpoints).

Stages I-II read no label, so a zero-shot and a few-shot run of one dataset pre-train the same
encoder (Sec. 4.4 fine-tunes "the encoder E from MACLR"). With ``reuse_pretraining`` (default) the
pre-training is kept under everything it depends on (``xmcbench.train.stage_cache``: the settings it
reads, the texts, the seed, the code, library versions, device, precision, threads) and the next run
with the same inputs continues from it, its random generators where they were: the model is bit for
bit the one it would have trained, and the record names the run that did the pre-training. A
resumed run therefore repeats only the fine-tuning.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from pydantic import Field
from scipy import sparse

from xmcbench.errors import XmcbenchError
from xmcbench.methods import dual_encoder as de
from xmcbench.methods.base import MethodConfig, RunContext, TrainTask
from xmcbench.search import SearchBackend

log = logging.getLogger(__name__)
# MACLR counts steps, not epochs: its "epoch" lines come every STEPS_PER_LINE steps (minutes apart
# on a GPU at the paper's 2 x 100,000 steps), or more often in a short run, so that even a smoke
# run shows about MIN_LINES of them; a stage's last step always closes a line.
STEPS_PER_LINE = 1000
MIN_LINES = 20


class MaclrConfig(MethodConfig):
    # Stage I (paper Appendix A: 100,000 steps; K0 2048, T_K 10,000, T_update 5,000)
    stage1_steps: int = Field(default=100_000, ge=0)
    clustering: bool = True  # multi-scale adaptive clustering (Table 4 column); false: plain ICT (Eq. 1)
    k0: int = Field(default=2048, ge=1)
    t_k: int = Field(default=10_000, ge=1)
    t_update: int = Field(default=5_000, ge=1)
    label_regularisation: bool = True  # Eq. 3 (Table 4 column)
    label_negatives: int = Field(default=32, ge=1)  # M: not reported in the paper; = the per-GPU batch
    title_removal: float = Field(default=1.0, ge=0.0, le=1.0)  # MACLR Sec. 4.2: x̂ = {s2..sn}, always removed
    # Stage II (Sec. 4.3; Appendix A: top 3 of the encoder and of TF-IDF; "Ttotal steps" = 100,000)
    self_training: bool = True
    stage2_steps: int = Field(default=100_000, ge=0)
    pseudo_top_k: int = Field(default=3, ge=1)
    tfidf_max_df: float = Field(default=0.98, gt=0.0, le=1.0)  # pecos' default, as the pecos issue settles it
    tfidf_ngram_max: int = Field(default=2, ge=1, le=3)  # unigram + bigram
    # Few-shot fine-tuning (Appendix A: lr 5e-6; 2,000 steps at 1% of labels, 10,000 at 5%)
    pretrain: bool = True  # few_shot / full: run Stages I-II before fine-tuning (false: fine-tune the encoder as is)
    # Stages I-II kept under their inputs (xmcbench.train.stage_cache) and reused by the next run with
    # the same ones, e.g. the few-shot recipes after the zero-shot one (Sec. 4.4: one pre-training)
    reuse_pretraining: bool = True
    finetune_steps: int = Field(default=2_000, ge=0)
    finetune_lr: float = Field(default=5e-6, gt=0)
    # Encoder head and scoring (Appendix A: CLS + linear to 512-d; no temperature is printed)
    projection_dim: int | None = Field(default=512, gt=0)  # null: no head (keep a sentence encoder's space)
    temperature: float = Field(default=1.0, gt=0)  # not reported: 1.0 is the printed equations
    encode_batch_size: int = Field(default=256, gt=0)
    search_backend: SearchBackend = "auto"  # faiss on CPU when installed, torch on CUDA (xmcbench.search)

    def needs_faiss(self, supervision_mode: str) -> str | None:
        # K-means runs in Stage I, which runs when MACLR pre-trains (a kept pre-training, reused
        # instead, is known only at run time: such a run is asked for faiss all the same)
        pretrains = supervision_mode == "zero_shot" or self.pretrain
        if pretrains and self.clustering and self.stage1_steps > 0:
            return "MACLR's multi-scale clustering (method.clustering) runs faiss K-means"
        return super().needs_faiss(supervision_mode)


# fields that only the fine-tuning reads: a zero-shot and a few-shot recipe share their pre-training
_FINETUNE_ONLY = ("pretrain", "finetune_steps", "finetune_lr", "reuse_pretraining")
# training fields MACLR does not read (precision: the resolved one is part of the environment)
_NOT_READ_BY_PRETRAINING = ("precision", "epochs", "validation_fraction")
# the facts a kept pre-training must hold to be continued from
_KEPT_FACTS = ("run_id", "generator", "accounting", "stage_wall_s", "batches", "pools")
# the run record's facts that Stages I-II write (carried over when they are reused)
_PRETRAINING_FACTS = (
    "ict_pairs",
    "stage1_steps",
    "clusters_k0",
    "cluster_refreshes",
    "stage2_pseudo_pairs",
    "stage2_steps",
)


class MaclrMethod:
    name: ClassVar[str] = "maclr"
    Config: ClassVar[type[MaclrConfig]] = MaclrConfig
    requires_labels: ClassVar[bool] = False
    single_process: ClassVar[str | None] = "MACLR's pre-training and fine-tuning here run in one process"
    uses_encoder: ClassVar[bool] = True
    uses_titles: ClassVar[bool] = True  # the runner hands over raw titles and bodies (ICT material)

    @classmethod
    def recipe_problems(
        cls, recipe, config: MaclrConfig, *, n_train: int | None, has_titles: bool
    ) -> list[tuple[str, str, str]]:
        """(key, message, hint) of what would stop MACLR before training, found at validation time."""
        problems = []
        pretrains = recipe.supervision.mode == "zero_shot" or config.pretrain
        if pretrains and config.stage1_steps > 0 and not has_titles:
            problems.append(
                (
                    "dataset.name",
                    f"MACLR pre-training (the Inverse Cloze Task) needs instance titles, and {recipe.dataset.name}'s "
                    "instances have none",
                    "zero-shot MACLR cannot run on it; for few-shot set method.pretrain: false (fine-tune only), "
                    "or method.stage1_steps: 0",
                )
            )
        if pretrains and config.clustering and config.stage1_steps > 0 and n_train is not None and config.k0 > n_train:
            problems.append(
                (
                    "method.k0",
                    f"K0 = {config.k0:,} clusters is more than the {n_train:,} training instances of {recipe.dataset.name}",
                    f"set method.k0 to at most {n_train:,} (the paper: 2048 on 300K-1.8M instances), "
                    "or method.clustering: false",
                )
            )
        if recipe.supervision.mode != "zero_shot" and config.finetune_steps == 0 and not config.pretrain:
            problems.append(
                (
                    "method.finetune_steps",
                    "MACLR with pretrain: false and finetune_steps: 0 trains nothing",
                    "set finetune_steps > 0 or pretrain: true",
                )
            )
        return problems

    def __init__(self, config: MaclrConfig, recipe=None):
        self.config = config
        self.recipe = recipe
        self.encoder = None
        self.label_emb: np.ndarray | None = None  # (L, d)
        self._batches: dict[str, int] = {}  # stage -> the batch its steps take (at most its pairs)
        self._pools: list[list[int]] = []

    # ---------------------------------------------------------------------------------------
    # fit: Stage I -> Stage II -> few-shot fine-tuning -> label embeddings

    def fit(self, task: TrainTask, ctx: RunContext) -> None:
        c = self.config
        ctx.seed_everything()
        # on the device only once any wait for another run's pre-training is over (it may be hours)
        self.encoder = de.build_encoder(self.recipe, projection_dim=c.projection_dim)
        labels = list(task.label_texts)  # (L,) label texts are always visible
        rng = np.random.default_rng([ctx.seed, 11])
        acc = ctx.accounting
        acc.update(
            label_negatives=min(c.label_negatives, len(labels)) if c.label_regularisation else 0,
            hard_negatives_per_query=0,
            positives_per_query=1,
        )
        self._batches = {}
        self._dataset = (task.dataset_name, task.dataset_version)  # names the token caches of its texts
        stage2 = c.self_training and c.stage2_steps > 0 and (task.train_labels is None or c.pretrain)
        if stage2 and c.pseudo_top_k > len(labels):  # said now, not after hours of Stage I
            de.warn_clipped(  # both views then keep every label
                "method.pseudo_top_k", c.pseudo_top_k, len(labels), f"is more than the {len(labels):,} labels"
            )
        self._pools = []  # [pool, steps] runs of the steps' label pools, for a kept pre-training
        walls: dict[str, float] = {}
        pretrains = task.train_labels is None or c.pretrain
        with ExitStack() as held:
            kept = self._pretraining_cache(task, ctx) if pretrains and c.reuse_pretraining else None
            if kept is not None:
                started = time.perf_counter()
                held.enter_context(kept.lock())  # a run with the same pre-training waits, then reuses it
                acc["waited_s"] = round(time.perf_counter() - started, 2)  # not training: left out of GPU-hours
            entry = kept.load() if kept is not None else None
            if entry is not None and not all(k in entry.facts for k in _KEPT_FACTS):
                log.warning("the kept MACLR pre-training %s lacks its facts; computing it again", kept.folder)
                entry = None
            reused = entry is not None and kept.restore(self.encoder, entry)
            self.encoder.to(ctx.device)
            self._lines = _StepLines(
                ctx,
                {
                    "stage1": c.stage1_steps if pretrains and not reused else 0,
                    "stage2": c.stage2_steps if pretrains and c.self_training and not reused else 0,
                    "finetune": c.finetune_steps if task.train_labels is not None else 0,
                },
            )
            if reused:
                self._reuse_pretraining(kept, entry, ctx, rng)
            elif pretrains:
                if c.stage1_steps > 0:  # stage1_steps: 0 skips ICT, so a dataset without titles can still self-train
                    contexts, titles = ict_pairs(task, c.title_removal, rng)  # (P,), (P,) ICT pairs
                    acc["ict_pairs"] = len(contexts)
                    started = time.perf_counter()
                    self._stage1(contexts, titles, labels, ctx, rng)
                    walls["stage1"] = time.perf_counter() - started
                if c.self_training and c.stage2_steps > 0:
                    started = time.perf_counter()
                    self._stage2(list(task.train_texts), labels, ctx, rng)
                    walls["stage2"] = time.perf_counter() - started
                if kept is not None and walls:  # something was trained (stage1_steps: 0 and no Stage II: nothing)
                    self._keep_pretraining(kept, ctx, rng, walls)

        if task.train_labels is not None and c.finetune_steps > 0:
            started = time.perf_counter()
            self._finetune(list(task.train_texts), labels, task.train_labels, ctx, rng)
            walls["finetune"] = time.perf_counter() - started

        acc["stage_wall_s"] = {k: round(v, 2) for k, v in walls.items()}
        # the largest batch a step took (None: no step ran); per stage where the pair counts differ
        acc["batch_size"] = max(self._batches.values(), default=None)
        acc["batch_size_by_stage"] = dict(self._batches)
        e = self.recipe.encoder
        self.label_emb = self.encoder.encode(
            labels,
            batch_size=c.encode_batch_size,
            device=ctx.device,
            max_length=e.label_max_length or e.max_length,
            precision=ctx.precision,
            progress=ctx.progress,
            description="encode labels",
        )  # (L, d)

    def _stage1(
        self, contexts: list[str], titles: list[str], labels: list[str], ctx: RunContext, rng: np.random.Generator
    ) -> None:
        """ICT with multi-scale adaptive clustering (Eq. 2 -> Eq. 1) + label regularisation (Eq. 3)."""
        from xmcbench.losses.label_regularisation import label_regularisation_loss
        from xmcbench.losses.supcon import supcon_loss
        from xmcbench.sampling.multiscale import MultiScaleSchedule, kmeans_assign

        c, steps = self.config, self.config.stage1_steps
        if steps == 0:
            return
        n = len(contexts)
        try:  # K0 is checked against the catalogue's count at validation; here against the real pairs
            schedule = MultiScaleSchedule(c.k0, c.t_k, c.t_update, steps, n) if c.clustering else None
        except ValueError as exc:
            raise XmcbenchError(f"{exc} (the instances with both a title and a body)") from None
        clusters = np.arange(n)  # (P,) every instance its own cluster = Eq. 1
        capped_at = None if schedule is None else schedule.first_capped_refresh()
        if capped_at is not None:
            de.warn_clipped(
                "method.k0",
                c.k0,
                f"{n:,} clusters (every instance its own) from then on",
                f"doubles to {schedule.requested_clusters(capped_at):,} clusters by step {capped_at:,} "
                f"(every method.t_k steps), more than the {n:,} instances with a title and a body",
            )
        batch = self._stage_batch("stage1", n, "Inverse Cloze Task pairs (instances with a title and a body)")
        negatives = min(c.label_negatives, len(labels))
        if c.label_regularisation and c.label_negatives > len(labels):
            de.warn_clipped(
                "method.label_negatives", c.label_negatives, negatives, f"is more than the {len(labels):,} labels"
            )
        if schedule is not None:
            clusters = kmeans_assign(self._encode(contexts, ctx, instance=True), schedule.n_clusters(0), ctx.seed)
        # Tokenised once, not at every step: a step's 256 contexts of 288 tokens took 0.59 s to tokenise
        # (MiniLM's fast tokenizer, 2 CPU cores). The contexts depend on the seed (title_removal < 1),
        # so their caches are keyed by the texts' hash.
        context_tokens = self._tokens(contexts, "ict-context", ctx, instance=True, versioned=False)
        title_tokens = self._tokens(titles, "ict-title", ctx, instance=False, versioned=False)
        label_tokens = self._tokens(labels, "labels", ctx, instance=False)
        k_history = []
        opt, sched = self._optimizer(self.recipe.training.lr, steps)
        self._lines.begin("stage1", steps)
        for step in range(1, steps + 1):
            rows = rng.choice(n, size=batch, replace=False)  # (N,)
            active = schedule is not None and schedule.clustering_active(step)
            batch_clusters = torch.as_tensor(clusters[rows] if active else np.arange(rows.size))  # (N,)
            h = self._embed(context_tokens, rows, ctx)  # (N, d) ĥ_i, dropout mask z
            y = self._embed(title_tokens, rows, ctx)  # (N, d) E(ŷ_j)
            loss = supcon_loss(h @ y.T / c.temperature, batch_clusters.to(h.device))
            pool = rows.size
            if c.label_regularisation:
                h_plus = self._embed(context_tokens, rows, ctx)  # (N, d) mask z⁺
                neg = rng.choice(len(labels), size=negatives, replace=False)
                y_neg = self._embed(label_tokens, neg, ctx)  # (M, d)
                loss = loss + label_regularisation_loss(h, h_plus, y_neg, temperature=c.temperature)
                pool += neg.size
            self._step(loss, opt, sched, ctx, pool, queries=rows.size)
            if schedule is not None and schedule.refresh_due(step):
                k = schedule.n_clusters(step)
                clusters = kmeans_assign(self._encode(contexts, ctx, instance=True), k, ctx.seed + step)
                k_history.append((step, k))
        ctx.accounting.update(
            stage1_steps=steps,
            clusters_k0=c.k0 if c.clustering else None,
            cluster_refreshes=[list(x) for x in k_history],
        )

    def _stage2(self, texts: list[str], labels: list[str], ctx: RunContext, rng: np.random.Generator) -> None:
        """Self-training on the union of the encoder's and TF-IDF's top-k labels, Eq. 2."""
        from xmcbench.search.exact import exact_topk

        c = self.config
        e = self.recipe.encoder
        inst = self._encode(texts, ctx, instance=True)  # (N, d)
        lab = self.encoder.encode(
            labels,
            batch_size=c.encode_batch_size,
            device=ctx.device,
            max_length=e.label_max_length or e.max_length,
            precision=ctx.precision,
        )  # (L, d)
        dense = exact_topk(inst, lab, c.pseudo_top_k, device=ctx.device, backend=c.search_backend)  # (N, L) CSR
        sparse_view = tfidf_topk(texts, labels, c.pseudo_top_k, c.tfidf_max_df, c.tfidf_ngram_max)  # (N, L) CSR
        pseudo = binarise(dense) + binarise(sparse_view)
        pseudo = binarise(pseudo.tocsr())  # (N, L) mixed pseudo labels, union of both views
        ctx.accounting.update(stage2_pseudo_pairs=int(pseudo.nnz), stage2_steps=c.stage2_steps)
        self._lines.begin("stage2", c.stage2_steps)
        self._train_pairs(texts, labels, pseudo, c.stage2_steps, self.recipe.training.lr, ctx, rng, "stage2")

    def _finetune(
        self, texts: list[str], labels: list[str], truth: sparse.csr_matrix, ctx: RunContext, rng: np.random.Generator
    ) -> None:
        """FS-XMC: the visible (instance, label) pairs with Eq. 1 (in-batch label columns)."""
        truth = binarise(truth)
        if truth.nnz == 0:
            raise XmcbenchError("few-shot fine-tuning has no visible (instance, label) pair; raise label_fraction")
        ctx.accounting.update(finetune_pairs=int(truth.nnz), finetune_steps=self.config.finetune_steps)
        self._lines.begin("finetune", self.config.finetune_steps)
        self._train_pairs(
            texts, labels, truth, self.config.finetune_steps, self.config.finetune_lr, ctx, rng, "finetune"
        )

    def _train_pairs(
        self,
        texts: list[str],
        labels: list[str],
        pairs: sparse.csr_matrix,
        steps: int,
        lr: float,
        ctx: RunContext,
        rng: np.random.Generator,
        stage: str,
    ) -> None:
        """Batches of N (instance, label) pairs; column p is a positive of row i when label_p ∈ labels(x_i).

        With no two pairs of a batch sharing an instance or a label this is Eq. 1 exactly; otherwise
        it is Eq. 2, which never asks a true label of row i to be a negative.
        """
        from xmcbench.losses.supcon import supcon_loss_from_targets

        coo = pairs.tocoo()
        inst, lab = coo.row.astype(np.int64), coo.col.astype(np.int64)  # (P,), (P,)
        if steps == 0 or inst.size == 0:
            return
        what = "pseudo (instance, label) pairs" if stage == "stage2" else "visible (instance, label) pairs"
        batch = self._stage_batch(stage, inst.size, what)
        text_tokens = self._tokens(texts, "query", ctx, instance=True)
        label_tokens = self._tokens(labels, "labels", ctx, instance=False)
        opt, sched = self._optimizer(lr, steps)
        for _ in range(steps):
            idx = rng.choice(inst.size, size=batch, replace=False)  # (N,)
            rows, cols = inst[idx], lab[idx]
            positives = torch.as_tensor(np.asarray(pairs[rows][:, cols].todense()) > 0)  # (N, N)
            positives |= torch.eye(idx.size, dtype=torch.bool)
            x = self._embed(text_tokens, rows, ctx)  # (N, d)
            y = self._embed(label_tokens, cols, ctx)  # (N, d)
            loss = supcon_loss_from_targets(x @ y.T / self.config.temperature, positives.to(x.device))
            self._step(loss, opt, sched, ctx, idx.size, queries=idx.size)

    # ---------------------------------------------------------------------------------------
    # the pre-training kept for the next run with the same inputs (xmcbench.train.stage_cache)

    def _pretraining_cache(self, task: TrainTask, ctx: RunContext):
        from xmcbench.train.stage_cache import StageCache, environment, fingerprint_texts, module_fingerprint

        method = self.config.model_dump(mode="json")
        for name in _FINETUNE_ONLY:
            method.pop(name, None)
        training = self.recipe.training.model_dump(mode="json")
        for name in _NOT_READ_BY_PRETRAINING:  # the precision that runs is in the environment below
            training.pop(name, None)
        tokenizer = self.encoder.tokenizer
        inputs = {
            "method": method,
            "encoder": self.recipe.encoder.model_dump(mode="json"),
            # the weights it starts from, its config and tokenizer: a name can load other weights over time
            "start": module_fingerprint(
                self.encoder,
                self.encoder.model.config.to_json_string(),
                tokenizer.backend_tokenizer.to_str()
                if hasattr(tokenizer, "backend_tokenizer")
                else json.dumps(tokenizer.get_vocab(), sort_keys=True),
            ),
            "training": training,
            "seed": ctx.seed,
            # the texts themselves, not the dataset's name: every text Stages I-II read
            "texts": fingerprint_texts(task.train_titles, task.train_contents, task.train_texts, task.label_texts),
            "environment": environment(ctx.device, ctx.precision),
        }
        return StageCache("maclr-pretraining", inputs)

    def _keep_pretraining(self, kept, ctx: RunContext, rng: np.random.Generator, walls: dict[str, float]) -> None:
        facts = {
            "run_id": ctx.run_dir.name,
            "generator": rng.bit_generator.state,  # the run's NumPy generator, drawn from again by fine-tuning
            "accounting": {k: ctx.accounting[k] for k in _PRETRAINING_FACTS if k in ctx.accounting},
            "stage_wall_s": {k: round(v, 2) for k, v in walls.items()},
            "batches": dict(self._batches),
            "pools": self._pools,
        }
        saved = kept.save(self.encoder, facts)
        ctx.accounting["pretraining"] = {"reused": False, "key": kept.key[:16], "kept": saved}

    def _reuse_pretraining(self, kept, entry, ctx: RunContext, rng: np.random.Generator) -> None:
        """Continue from a kept Stage I-II: the run's bookkeeping as if it had trained them here."""
        facts = entry.facts
        rng.bit_generator.state = facts["generator"]
        ctx.accounting.update(facts["accounting"])
        self._batches.update(facts["batches"])
        ctx.record_pools_elsewhere(facts["pools"])
        ctx.accounting["reused_wall_s"] = round(sum(facts["stage_wall_s"].values()), 2)  # counted in GPU-hours
        ctx.accounting["pretraining"] = {
            "reused": True,
            "key": kept.key[:16],
            "from_run": facts["run_id"],
            "stage_wall_s": facts["stage_wall_s"],  # the pre-training's time, spent by that run
        }
        log.info(
            "MACLR: Stages I-II reused from run %s (same recipe settings, texts, seed and code; %s s there)",
            facts["run_id"],
            round(sum(facts["stage_wall_s"].values()), 1),
        )

    # ---------------------------------------------------------------------------------------
    # pieces

    def _stage_batch(self, stage: str, pairs: int, what: str) -> int:
        """The batch ``stage``'s steps take: training.batch_size, or all ``pairs`` when fewer (said once)."""
        batch = self.recipe.training.batch_size
        if batch > pairs:
            log.warning(
                "training.batch_size %s is more than the %s %s of MACLR %s: each step takes all of them",
                f"{batch:,}",
                f"{pairs:,}",
                what,
                stage,
            )
        self._batches[stage] = min(batch, pairs)
        return self._batches[stage]

    def _tokens(self, texts: Sequence[str], field: str, ctx: RunContext, instance: bool, versioned: bool = True):
        """The token cache of ``texts`` (``xmcbench.data.tokenized``) at the instance or the label length.

        ``versioned``: the texts are a column of the dataset, named by its version (the instance texts
        and the labels share their caches with the other methods); otherwise every text is hashed.
        """
        from xmcbench.data.tokenized import TokenCache

        e = self.recipe.encoder
        name, version = self._dataset
        split = "labels" if field == "labels" else "train"
        return TokenCache.build_or_load(
            texts,
            self.encoder.tokenizer,
            e.max_length if instance else (e.label_max_length or e.max_length),
            (name, split, "title" if field == "labels" else field),
            version=version if versioned else None,
            progress=ctx.progress,
        )

    def _embed(self, tokens, rows: np.ndarray, ctx: RunContext) -> torch.Tensor:
        """E(texts ``rows`` of a token cache) with a graph, in train mode (dropout on: two calls give two
        dropout views). One forward pass of exactly what the tokenizer would give for those texts."""
        from xmcbench.train import autocast

        self.encoder.train()
        batch = tokens.batch(rows)
        with autocast(ctx.device, ctx.precision):
            out = self.encoder(batch["input_ids"].to(ctx.device), batch["attention_mask"].to(ctx.device))
        return out.float()

    def _encode(self, texts: Sequence[str], ctx: RunContext, instance: bool) -> np.ndarray:
        e = self.recipe.encoder
        length = e.max_length if instance else (e.label_max_length or e.max_length)
        return self.encoder.encode(
            texts,
            batch_size=self.config.encode_batch_size,
            device=ctx.device,
            max_length=length,
            precision=ctx.precision,
        )

    def _optimizer(self, lr: float, steps: int):
        from xmcbench.train.optim import build_optimizer, build_scheduler

        t = self.recipe.training
        opt = build_optimizer([(self.encoder.named_parameters(), lr)], t.weight_decay)
        return opt, build_scheduler(opt, steps, t.warmup_ratio, t.schedule)

    def _step(self, loss: torch.Tensor, opt, sched, ctx: RunContext, pool: int, queries: int) -> None:
        from xmcbench.train.optim import clip_gradients

        opt.zero_grad(set_to_none=True)
        loss.backward()
        clip_gradients(self.encoder.parameters(), self.recipe.training.grad_clip)
        opt.step()
        sched.step()
        ctx.record_pool(pool)
        runs = self._pools
        if runs and runs[-1][0] == pool:
            runs[-1][1] += 1
        else:
            runs.append([pool, 1])
        lines = getattr(self, "_lines", None)
        if lines is not None:
            lines.after_step(loss, sched, queries)

    # ---------------------------------------------------------------------------------------
    # predict / save / load

    def predict(self, texts: Sequence[str], k: int, ctx: RunContext) -> sparse.csr_matrix:
        from xmcbench.methods.dual_encoder import predict_topk

        assert self.encoder is not None and self.label_emb is not None, "fit or load first"
        return predict_topk(
            self.encoder, texts, self.label_emb, k, ctx, self.config.encode_batch_size, self.config.search_backend
        )

    def save(self, path: Path) -> None:
        from xmcbench.methods.dual_encoder import save_array

        path.mkdir(parents=True, exist_ok=True)
        self.encoder.save(path / "encoder")
        save_array(path / "label_embeddings.npy", self.label_emb)

    def load(self, path: Path) -> None:
        from xmcbench.methods.dual_encoder import build_encoder_from

        self.encoder = build_encoder_from(path / "encoder", self.recipe)
        self.label_emb = np.load(path / "label_embeddings.npy")

    def parameter_counts(self) -> tuple[int, int]:
        if self.encoder is None:
            return 0, 0
        n = sum(p.numel() for p in self.encoder.parameters())
        return n, n


# -------------------------------------------------------------------------------------------
# helpers (pure functions, tested on their own)


class _StepLines:
    """The epoch lines (``ctx.log_epoch``) of a step-counted run: one every ``every`` steps and at each
    stage's end, numbered across stages (stage I, stage II, fine-tuning) so that the remaining time
    covers the whole of training; each entry names its ``stage``."""

    def __init__(self, ctx: RunContext, planned: dict[str, int]):
        self.ctx = ctx
        total = sum(planned.values())
        self.every = max(1, min(STEPS_PER_LINE, math.ceil(total / MIN_LINES)))
        self.lines = sum(math.ceil(steps / self.every) for steps in planned.values())
        self.done = self.step = self.queries = 0
        self.stage, self.stage_steps, self.stage_done = "", 0, 0

    def begin(self, stage: str, steps: int) -> None:
        self.stage, self.stage_steps, self.stage_done = stage, steps, 0
        log.info("MACLR %s: %s steps, an epoch line every %s steps", stage, f"{steps:,}", f"{self.every:,}")

    def after_step(self, loss: torch.Tensor, scheduler, queries: int) -> None:
        self.step += 1
        self.stage_done += 1
        self.queries += queries
        if self.stage_done % self.every and self.stage_done != self.stage_steps:
            return
        self.done += 1
        self.ctx.log_epoch(
            self.done,
            max(self.lines, self.done),  # a stage cut short (no pseudo pairs) only shortens the run
            step=self.step,
            loss=loss,
            scheduler=scheduler,
            queries=self.queries,
            stage=self.stage,
            stage_step=self.stage_done,
        )
        self.queries = 0


def ict_pairs(task: TrainTask, removal: float, rng: np.random.Generator) -> tuple[list[str], list[str]]:
    """(contexts, titles) of the training instances that have both a title and a body.

    Context = the body (title removed); with ``removal < 1`` the title is kept at the front of the
    context with probability 1 - removal (Lee et al.'s ICT keeps it 10% of the time).
    """
    if task.train_titles is None or task.train_contents is None:
        raise XmcbenchError(
            f"MACLR's Inverse Cloze Task needs instance titles, and dataset {task.dataset_name} has none; "
            "run it with supervision few_shot and method.pretrain: false, or pick a dataset with titles"
        )
    contexts, titles = [], []
    keep = rng.random(len(task.train_titles)) >= removal
    for title, body, kept in zip(task.train_titles, task.train_contents, keep, strict=True):
        if title and body:
            titles.append(title)
            contexts.append(f"{title} {body}" if kept else body)
    if len(contexts) < 2:
        raise XmcbenchError(
            f"dataset {task.dataset_name}: fewer than 2 training instances have both a title and a "
            "body, so there are no Inverse Cloze Task pairs to pre-train on"
        )
    return contexts, titles


def binarise(matrix: sparse.spmatrix) -> sparse.csr_matrix:
    m = sparse.csr_matrix(matrix, copy=True)
    m.eliminate_zeros()
    m.data = np.ones_like(m.data, dtype=np.float32)
    return m


def tfidf_topk(
    texts: list[str], labels: list[str], k: int, max_df: float, ngram_max: int, chunk: int = 4096
) -> sparse.csr_matrix:
    """(N, L) top-k labels of each text by TF-IDF cosine (unigram..ngram_max, max_df), Stage II's sparse view."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    from xmcbench.search.sparse_topk import topk_csr

    vec = TfidfVectorizer(ngram_range=(1, ngram_max), max_df=max_df, sublinear_tf=True, dtype=np.float32)
    vec.fit(labels + texts)
    label_t = vec.transform(labels).T.tocsc()  # (V, L)
    parts = [topk_csr((vec.transform(texts[s : s + chunk]) @ label_t).tocsr(), k) for s in range(0, len(texts), chunk)]
    return sparse.vstack(parts, format="csr")
