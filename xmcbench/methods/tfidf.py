"""TF-IDF baseline: cosine similarity of word uni+bigram TF-IDF vectors of query and label text.

MACLR (Xiong et al., 2022, Section 4.1) reports it as its sparse zero-shot baseline:

    score(x, l) = cos(tfidf(x), tfidf(z_l)),   tfidf(t)_w = tf(t, w) * idf(w)

No label assignments are used, so the method is zero-shot; the vocabulary and IDF are fitted on
label texts and (unlabelled) training query texts.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field
from scipy import sparse

from xmcbench.methods.base import MethodConfig, RunContext, TrainTask
from xmcbench.progress import task
from xmcbench.search.sparse_topk import topk_csr


class TfidfConfig(MethodConfig):
    ngram_max: int = Field(default=2, ge=1, le=3)  # MACLR: unigrams + bigrams
    min_df: int = Field(default=1, ge=1)
    max_features: int | None = Field(default=None, gt=0)
    sublinear_tf: bool = True  # 1 + log(tf): long documents do not dominate
    fit_on: Literal["labels", "labels+train"] = "labels+train"
    chunk_size: int = Field(default=2048, gt=0)  # queries scored per sparse product


class TfidfMethod:
    name: ClassVar[str] = "tfidf"
    Config: ClassVar[type[TfidfConfig]] = TfidfConfig
    requires_labels: ClassVar[bool] = False
    single_process: ClassVar[str | None] = "TF-IDF has nothing to train across GPUs"
    uses_encoder: ClassVar[bool] = False

    def __init__(self, config: TfidfConfig, recipe=None):
        self.config = config
        self.vectorizer = None
        self.label_matrix: sparse.csr_matrix | None = None  # (L, V), rows L2-normalised

    def fit(self, task_: TrainTask, ctx: RunContext) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer

        c = self.config
        self.vectorizer = TfidfVectorizer(
            ngram_range=(1, c.ngram_max),
            min_df=c.min_df,
            max_features=c.max_features,
            sublinear_tf=c.sublinear_tf,
            dtype=np.float32,
        )
        label_texts = list(task_.label_texts)
        corpus = label_texts if c.fit_on == "labels" else label_texts + list(task_.train_texts)
        self.vectorizer.fit(corpus)
        self.label_matrix = self.vectorizer.transform(label_texts).tocsr()  # (L, V)
        ctx.accounting.update(batch_size=None, pool_size_mean=float(task_.n_labels), pool_size_max=task_.n_labels)

    def predict(self, texts: Sequence[str], k: int, ctx: RunContext) -> sparse.csr_matrix:
        assert self.vectorizer is not None and self.label_matrix is not None, "fit or load first"
        texts = list(texts)
        label_t = self.label_matrix.T.tocsc()  # (V, L)
        parts = []
        with task("tfidf predict", len(texts), enabled=ctx.progress) as advance:
            for start in range(0, len(texts), self.config.chunk_size):
                chunk = texts[start : start + self.config.chunk_size]
                q = self.vectorizer.transform(chunk)  # (b, V), L2-normalised
                scores = (q @ label_t).tocsr()  # (b, L) cosine similarities, sparse
                parts.append(topk_csr(scores, k))
                advance(len(chunk))
        if not parts:
            return sparse.csr_matrix((0, self.label_matrix.shape[0]), dtype=np.float32)
        return sparse.vstack(parts, format="csr").astype(np.float32)

    def save(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        with open(path / "tfidf.pkl", "wb") as f:
            pickle.dump({"vectorizer": self.vectorizer, "label_matrix": self.label_matrix}, f)

    def load(self, path: Path) -> None:
        with open(path / "tfidf.pkl", "rb") as f:
            state = pickle.load(f)
        self.vectorizer, self.label_matrix = state["vectorizer"], state["label_matrix"]

    def parameter_counts(self) -> tuple[int, int]:
        return 0, 0
