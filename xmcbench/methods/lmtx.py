"""LMTX (Zhang et al., 2024): an LLM judge teaches a bi-encoder, with no training labels at all.

Algorithm 1, one cycle:
1. embed the training documents and every label with the current encoder Φ;
2. shortlist the top-j labels of each document by exact inner product;
3. the judge answers P(yes) for every (document, shortlisted label) pair (cached: never twice);
   a pair is a pseudo positive when P(yes) >= threshold (at most ``max_positives`` per document,
   the most likely first); "no" answers are dropped, never used as negatives (paper §2.10, Table 7);
4. train Φ on the pseudo positives: each batch takes one pseudo positive per document, the
   batch's sampled labels are the pool, in-batch negatives, triplet loss with margin γ = 0.3 (Eq. 1);
5. score the encoder on a judge-labelled dev set: P@1 over pseudo labels, i.e. the share of dev
   documents whose top-1 label the judge accepts (ties broken by the top-1's mean P(yes));
   stop when it does not improve, and keep the best cycle's encoder (cycle 0: the start encoder).

Small judges are poorly calibrated (Qwen2.5-0.5B's P(yes) sits in 0.36–0.68), so the threshold is
``"auto"`` by default: Otsu's split of the P(yes) of the dev documents' cycle-0 shortlists —
chosen on the judge-labelled dev set, never on ground truth, and then fixed so the cycles' dev
scores compare. A fixed number can be given instead.

Zero-shot by construction: ``fit`` never reads ``task.train_labels`` (run it under the runner's
``supervision: {mode: zero_shot}``, which hands the method None). The judge's cost (judgements
asked, cache hits, truncations, LLM-seconds, GPU-hours) goes into the run's accounting.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
import torch
from pydantic import Field
from scipy import sparse

from xmcbench.judge import CachedJudge, JudgeConfig, JudgementCache, build_judge, load_prompt
from xmcbench.methods import dual_encoder as de
from xmcbench.methods.base import MethodConfig, RunContext, TrainTask
from xmcbench.search import SearchBackend

log = logging.getLogger(__name__)


class LmtxConfig(MethodConfig):
    judge: JudgeConfig = JudgeConfig()
    shortlist_j: int = Field(default=10, gt=0)  # labels judged per document and cycle
    train_docs: int | None = Field(default=None, gt=0)  # paper §2.4: 30,000 for the large datasets
    dev_docs: int = Field(default=800, gt=0)  # paper §2.7: 800 documents, disjoint from training
    max_cycles: int = Field(default=5, ge=0)  # upper bound; the dev set stops earlier
    epochs_per_cycle: int = Field(default=1, gt=0)
    threshold: float | Literal["auto"] = "auto"
    max_positives: int | None = Field(default=None, gt=0)  # rank cap: the r most likely "yes" per document
    margin: float = Field(default=0.3, ge=0)  # paper §2.7: γ = 0.3
    encode_batch_size: int = Field(default=256, gt=0)
    search_backend: SearchBackend = "auto"  # faiss on CPU when installed, torch on CUDA (xmcbench.search)


def otsu_threshold(p: np.ndarray) -> float:
    """The split of ``p`` that maximises the between-class variance (no ground truth needed)."""
    p = np.sort(np.asarray(p, dtype=np.float64))
    if p.size < 2 or p[0] == p[-1]:
        return float(p[0]) if p.size else 0.5
    best, best_t = -1.0, 0.5
    for i in range(1, p.size):
        if p[i] == p[i - 1]:
            continue
        lo, hi = p[:i], p[i:]
        between = lo.size * hi.size * (lo.mean() - hi.mean()) ** 2
        if between > best:
            best, best_t = between, float((p[i - 1] + p[i]) / 2)
    return best_t


class LmtxMethod:
    name: ClassVar[str] = "lmtx"
    Config: ClassVar[type[LmtxConfig]] = LmtxConfig
    requires_labels: ClassVar[bool] = False
    single_process: ClassVar[str | None] = "the LLM judge and the bi-encoder's training run in one process"
    uses_encoder: ClassVar[bool] = True

    def __init__(self, config: LmtxConfig, recipe):
        self.config = config
        self.recipe = recipe
        self.encoder = None
        self.label_emb: np.ndarray | None = None  # (L, d) after fit

    # ------------------------------------------------------------------------------------------
    def fit(self, task: TrainTask, ctx: RunContext) -> None:
        from xmcbench.losses.triplet import triplet_pool_loss
        from xmcbench.train import autocast, build_optimizer, build_scheduler, clip_gradients

        c, t = self.config, self.recipe.training
        rng = np.random.default_rng(t.seed)
        version = task.dataset_version or task.dataset_name

        # 1. encoder, token caches, disjoint dev / training documents (ids = training-split rows)
        self.encoder = de.build_encoder(self.recipe).to(ctx.device)
        tokens = de.tokenise(self.encoder, task, self.recipe, ctx.progress)
        perm = rng.permutation(len(task.train_texts))
        if c.dev_docs > perm.size // 2:  # the other half at least is left to train on
            de.warn_clipped(
                "method.dev_docs", c.dev_docs, perm.size // 2, f"is more than half the {perm.size:,} training documents"
            )
        dev_rows = np.sort(perm[: min(c.dev_docs, perm.size // 2)])  # (D,)
        rest = perm[dev_rows.size :]
        if c.train_docs and c.train_docs > rest.size:
            de.warn_clipped(
                "method.train_docs",
                c.train_docs,
                rest.size,
                f"is more than the {rest.size:,} training documents left after the dev set",
            )
        train_rows = np.sort(rest[: c.train_docs] if c.train_docs else rest)  # (N,)
        shortlist_j = de.clip_shortlist("method.shortlist_j", c.shortlist_j, task.n_labels)
        batches: list[int] = []  # the batch each cycle's steps take (at most its documents)
        batch_said = False

        # 2. the judge, behind the judgement cache
        judge = CachedJudge(
            build_judge(c.judge), JudgementCache() if c.judge.cache else None, load_prompt(c.judge.prompt)
        )

        def ask(rows: np.ndarray, labels: np.ndarray) -> np.ndarray:  # rows (n,), labels (n, j) -> P(yes) (n, j)
            doc_ids = np.repeat(rows, labels.shape[1])
            return judge.judge_pairs(version, doc_ids, labels.reshape(-1), task.train_texts, task.label_texts).reshape(
                labels.shape
            )

        def shortlist(rows: np.ndarray, j: int) -> np.ndarray:  # -> (n, j) label ids, best first
            doc_emb = de.encode_all(
                self.encoder, tokens.queries, ctx.device, ctx.precision, c.encode_batch_size, rows=rows
            )  # (n, d)
            label_emb = de.encode_all(
                self.encoder, tokens.labels, ctx.device, ctx.precision, c.encode_batch_size
            )  # (L, d)
            return _topk_ids(doc_emb, label_emb, j, ctx.device, c.search_backend)

        # 3. the acceptance threshold, from the judge-labelled dev set
        if c.threshold == "auto":
            threshold = otsu_threshold(ask(dev_rows, shortlist(dev_rows, shortlist_j)).reshape(-1))
        else:
            threshold = float(c.threshold)

        def dev_score() -> tuple[float, float]:  # (P@1 over pseudo labels, mean P(yes) of top-1)
            p = ask(dev_rows, shortlist(dev_rows, 1))[:, 0]  # (D,)
            return float((p >= threshold).mean()), float(p.mean())

        # 4. cycles: shortlist -> judge -> train -> dev score; keep the best, stop when it stops improving
        best = dev_score()
        best_dir = ctx.checkpoint_dir / "lmtx-best"
        history = [{"cycle": 0, "dev_p1": best[0], "dev_mean_p_yes": best[1]}]
        positives_per_doc: list[float] = []
        step = epoch_no = 0
        ctx.start_clock()
        for cycle in range(1, c.max_cycles + 1):
            candidates = shortlist(train_rows, shortlist_j)  # (N, j)
            p = ask(train_rows, candidates)  # (N, j)
            yes = _accept(p, threshold, c.max_positives)  # (N, j) bool
            keep = yes.any(axis=1)
            positives_per_doc.append(float(yes.sum(1).mean()))
            if not keep.any():
                log.warning("lmtx cycle %d: the judge accepted no shortlisted label; stopping", cycle)
                break
            docs, pos_sets = train_rows[keep], [set(candidates[i][yes[i]].tolist()) for i in np.flatnonzero(keep)]

            if t.batch_size > docs.size and not batch_said:  # said once a run, at the first cycle it happens in
                batch_said = True
                log.warning(
                    "training.batch_size %s is more than the %s documents with a pseudo positive in LMTX cycle %d: "
                    "each step takes all of them",
                    f"{t.batch_size:,}",
                    f"{docs.size:,}",
                    cycle,
                )
            batches.append(min(t.batch_size, int(docs.size)))
            optimizer = build_optimizer([(self.encoder.named_parameters(), t.lr)], t.weight_decay)
            steps = c.epochs_per_cycle * int(np.ceil(docs.size / t.batch_size))
            scheduler = build_scheduler(optimizer, max(steps, 1), t.warmup_ratio, t.schedule)
            self.encoder.train()
            for _ in range(c.epochs_per_cycle):
                order = rng.permutation(docs.size)
                for s in range(0, order.size, t.batch_size):
                    b = order[s : s + t.batch_size]  # (B,)
                    sampled = np.array([rng.choice(sorted(pos_sets[i])) for i in b])  # one positive per document
                    pool = np.unique(sampled)  # (P,) the batch's labels: in-batch negatives
                    targets = torch.tensor([[lab in pos_sets[i] for lab in pool] for i in b])  # (B, P)
                    with autocast(ctx.device, ctx.precision):
                        q = de.embed(self.encoder, tokens.queries, docs[b], ctx.device)  # (B, d)
                        lab = de.embed(self.encoder, tokens.labels, pool, ctx.device)  # (P, d)
                    loss = triplet_pool_loss(q.float() @ lab.float().T, targets.to(ctx.device), margin=c.margin)
                    loss.backward()
                    clip_gradients(self.encoder.parameters(), t.grad_clip)
                    optimizer.step()
                    scheduler.step()
                    optimizer.zero_grad(set_to_none=True)
                    ctx.record_pool(pool.size)
                    step += 1
                # the first epoch of a cycle also holds that cycle's judging; the bound counts every cycle
                epoch_no += 1
                ctx.log_epoch(
                    epoch_no,
                    c.max_cycles * c.epochs_per_cycle,
                    step=step,
                    loss=loss,
                    scheduler=scheduler,
                    queries=int(docs.size),
                    cycle=cycle,
                )

            score = dev_score()
            log.info("lmtx cycle %d: judge-labelled dev P@1 %.3f (best so far %.3f)", cycle, score[0], best[0])
            history.append(
                {
                    "cycle": cycle,
                    "dev_p1": score[0],
                    "dev_mean_p_yes": score[1],
                    "pseudo_positive_docs": int(keep.sum()),
                    "positives_per_doc": positives_per_doc[-1],
                }
            )
            if score <= best:
                break
            best = score
            _save_encoder(self.encoder, best_dir)

        # 5. the best cycle's encoder (the start encoder when no cycle improved) and its label embeddings
        if best_dir.exists():
            self.encoder = de.build_encoder_from(best_dir, self.recipe).to(ctx.device)
        else:
            self.encoder = de.build_encoder(self.recipe).to(ctx.device)
        self.label_emb = de.encode_all(self.encoder, tokens.labels, ctx.device, ctx.precision, c.encode_batch_size)
        ctx.accounting.update(
            batch_size=max(batches, default=None),  # the largest batch a step took (None: no cycle trained)
            shortlist_j=shortlist_j,
            positives_per_query=float(np.mean(positives_per_doc)) if positives_per_doc else 0.0,
            hard_negatives_per_query=0,
            train_docs=int(train_rows.size),
            dev_docs=int(dev_rows.size),
            judge_threshold=threshold,
            cycles=history,
            best_cycle=max(history, key=lambda h: (h["dev_p1"], h["dev_mean_p_yes"]))["cycle"],
            judge=judge.stats.as_dict(),
        )

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
        return n, n


def _topk_ids(doc_emb: np.ndarray, label_emb: np.ndarray, j: int, device: str, backend: str) -> np.ndarray:
    """(n, j) label ids of each document's top-j, best first."""
    from xmcbench.search.exact import exact_topk

    top = exact_topk(doc_emb, label_emb, j, device=device, backend=backend).tocsr()  # (n, L), j per row
    j = min(j, label_emb.shape[0])
    out = np.empty((doc_emb.shape[0], j), dtype=np.int64)
    for r in range(doc_emb.shape[0]):
        cols = top.indices[top.indptr[r] : top.indptr[r + 1]]
        vals = top.data[top.indptr[r] : top.indptr[r + 1]]
        out[r] = cols[np.argsort(-vals, kind="stable")]
    return out


def _accept(p: np.ndarray, threshold: float, max_positives: int | None) -> np.ndarray:
    """(n, j) bool: P(yes) >= threshold, and among the ``max_positives`` most likely of the row."""
    yes = p >= threshold
    if max_positives is not None and max_positives < p.shape[1]:
        rank = np.argsort(np.argsort(-p, axis=1, kind="stable"), axis=1)
        yes &= rank < max_positives
    return yes


def _save_encoder(encoder, folder: Path) -> None:
    import shutil

    tmp = folder.with_name(f".{folder.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    encoder.save(tmp)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
